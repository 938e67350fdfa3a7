//! An object file's symbols and DWARF, read through one descriptor each.
//!
//! # 1. Why not addr2line's own loader
//! `addr2line::Loader` opens the files it reads by path, itself: the object, the `.dwp`
//! beside it, each `.dwo` its DWARF names. A path named by a profile or by an object's
//! DWARF is hostile: it may name a FIFO (the open blocks, and `report` hangs), a device,
//! or, swapped between a check and the loader's open, another file than the one checked.
//! [`ObjectFile::open`] opens each file once under the file policy
//! ([`crate::sys::files::open_input_regular`]: `O_NONBLOCK`, then `fstat`: a regular file)
//! and everything it says about the file (the build id that identifies it, its size and
//! time, its sections) comes from that descriptor: what is checked is what is read.
//!
//! # 2. What is read
//! The object is parsed through a read cache over its descriptor (`pread` of the ranges
//! the parser asks for, no mapping: a file truncated meanwhile gives a read error, not a
//! `SIGBUS`). Each DWARF section a lookup reads (not the location lists, macros or type
//! units) is read by `pread` from a second descriptor of the same file (so the cache
//! does not keep it) straight into shared bytes, decompressed there where compressed, and
//! the symbol table into owned names, so nothing borrows the file once it is loaded. The
//! symbol tables' strings are read from that descriptor in one go each, before the names
//! are ([`Preread`]): through the cache each name was a read of its own. The
//! DWARF is then looked up a unit at a time ([`crate::profile::dwarf_units`]). The split DWARF of the object comes the
//! same way: its DWARF package (`prog.dwp` beside `prog`, read at load) and the `.dwo`
//! files its units name (read when a lookup needs one; a `.dwo` whose id is not the
//! unit's is not used). A file that is not a regular file is not read: its frames stay
//! unnamed, nothing blocks.

use std::borrow::Cow;
use std::fs::File;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use addr2line::gimli;
use object::{Object as _, ObjectSection as _};

use crate::profile::dwarf_units::{Reader, Units, NEEDED};

/// One symbol table entry, its name owned.
#[derive(Debug)]
struct Named {
    address: u64,
    size: u64,
    name: String,
}

impl object::SymbolMapEntry for Named {
    fn address(&self) -> u64 {
        self.address
    }

    fn size(&self) -> u64 {
        self.size
    }
}

/// The symbols and DWARF of one object file (§1).
pub(crate) struct ObjectFile {
    /// The GNU build id in the file's notes, as read from its descriptor.
    pub(crate) build_id: Option<Vec<u8>>,
    /// Size and modification time (ns since the epoch) from `fstat` of its descriptor.
    pub(crate) identity: (u64, u64),
    /// Device and inode from `fstat`: the same file under another name.
    pub(crate) file_id: (u64, u64),
    units: Units,
    symbols: object::SymbolMap<Named>,
    dwp: Option<gimli::DwarfPackage<Reader>>,
}

impl std::fmt::Debug for ObjectFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectFile").field("build_id", &self.build_id).finish_non_exhaustive()
    }
}

/// Opens `path` under the policy (§1): a regular file, never blocking. Returns the file
/// and its `fstat`.
fn open_regular(path: &Path) -> Result<(File, std::fs::Metadata), String> {
    let file = crate::sys::files::open_input_regular(path)
        .map_err(|e| format!("cannot read symbols of {}: {e}", path.display()))?;
    let meta = file.metadata().map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok((file, meta))
}

fn endian<'a, R: object::ReadRef<'a>>(object: &object::File<'a, R>) -> gimli::RunTimeEndian {
    if object.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// The largest section decompressed (a hostile file may claim anything).
const MOST_BYTES: u64 = 1 << 32;

/// The bytes of the section `name` of `object` (read from `file`, §2), uncompressed, or
/// none when the object has no such section; a section that cannot be read is an error.
fn load_section<'a, R: object::ReadRef<'a>>(
    file: &File,
    object: &object::File<'a, R>,
    name: &str,
    endian: gimli::RunTimeEndian,
) -> Result<Reader, gimli::Error> {
    use object::CompressionFormat as F;
    let Some(s) = object.section_by_name(name) else {
        return Ok(Reader::new(Arc::from(&[][..]), endian));
    };
    let range = s.compressed_file_range().map_err(|_| gimli::Error::Io)?;
    let size = range.uncompressed_size;
    if size > MOST_BYTES || !matches!(range.format, F::None | F::Zlib) {
        // Zstandard, rare in practice: read through the cache.
        return section(object, Some(name), endian);
    }
    let mut raw = Arc::<[u8]>::new_uninit_slice(size as usize);
    if let Some(all) = Arc::get_mut(&mut raw) {
        all.fill(std::mem::MaybeUninit::new(0));
    }
    // SAFETY: every byte was written just above (the Arc was just made: `get_mut` gave it).
    let mut bytes: Arc<[u8]> = unsafe { raw.assume_init() };
    let Some(out) = Arc::get_mut(&mut bytes) else {
        return Err(gimli::Error::Io);
    };
    let mut stored = match range.format {
        F::None => Vec::new(),
        _ => vec![0u8; range.compressed_size.min(MOST_BYTES) as usize],
    };
    let into: &mut [u8] = if range.format == F::None { out } else { &mut stored };
    file.read_exact_at(into, range.offset).map_err(|_| gimli::Error::Io)?;
    if range.format == F::Zlib {
        let mut inflate = flate2::Decompress::new(true);
        let done = inflate.decompress(&stored, out, flate2::FlushDecompress::Finish);
        if !matches!(done, Ok(flate2::Status::StreamEnd)) || inflate.total_out() != size {
            return Err(gimli::Error::Io);
        }
    }
    Ok(Reader::new(bytes, endian))
}

/// The bytes of the section `name` (uncompressed), read through the object's cache, or
/// none when the object has no such section; a section that cannot be read is an error.
fn section<'a, R: object::ReadRef<'a>>(
    object: &object::File<'a, R>,
    name: Option<&str>,
    endian: gimli::RunTimeEndian,
) -> Result<Reader, gimli::Error> {
    let bytes: Arc<[u8]> = match name.and_then(|n| object.section_by_name(n)) {
        Some(s) => match s.uncompressed_data() {
            Ok(Cow::Borrowed(b)) => Arc::from(b),
            Ok(Cow::Owned(b)) => Arc::from(b),
            Err(_) => return Err(gimli::Error::Io),
        },
        None => Arc::from(&[][..]),
    };
    Ok(Reader::new(bytes, endian))
}

/// A file read through `cache`, but for byte ranges read ahead in one go: its symbol
/// tables' strings ([`string_tables`]). Through the read cache alone each symbol's name
/// costs a seek and a read of its own, which for a program of a hundred thousand symbols
/// (`node`, a large Rust or C++ binary) took longer than the program's whole run.
#[derive(Clone, Copy)]
pub(crate) struct Preread<'a, C> {
    pub(crate) cache: C,
    /// `(offset in the file, bytes)`, not overlapping.
    pub(crate) ranges: &'a [(u64, Vec<u8>)],
}

impl<'a, C: object::ReadRef<'a>> Preread<'a, C> {
    /// The range read ahead that holds `offset`, and `offset` within it.
    fn holding(self, offset: u64) -> Option<(&'a [u8], usize)> {
        self.ranges.iter().find_map(|(start, bytes)| {
            let at = usize::try_from(offset.checked_sub(*start)?).ok()?;
            (at < bytes.len()).then_some((bytes.as_slice(), at))
        })
    }
}

impl<'a, C: object::ReadRef<'a>> object::ReadRef<'a> for Preread<'a, C> {
    fn len(self) -> Result<u64, ()> {
        self.cache.len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        if let Some((bytes, at)) = self.holding(offset) {
            let end = usize::try_from(size).ok().and_then(|n| at.checked_add(n));
            if let Some(b) = end.and_then(|end| bytes.get(at..end)) {
                return Ok(b);
            }
        }
        self.cache.read_bytes_at(offset, size)
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        let Some((bytes, at)) = self.holding(range.start) else {
            return self.cache.read_bytes_at_until(range, delimiter);
        };
        let room = usize::try_from(range.end.saturating_sub(range.start)).unwrap_or(usize::MAX);
        let end = bytes.len().min(at.saturating_add(room));
        match memchr::memchr(delimiter, &bytes[at..end]) {
            Some(n) => Ok(&bytes[at..at + n]),
            // The string goes on past what was read ahead: the cache reads it.
            None => self.cache.read_bytes_at_until(range, delimiter),
        }
    }
}

/// The sections `names` of `object` (string tables: `.strtab`, `.dynstr`), read from
/// `file` in one go each, for [`Preread`]; a section that cannot be read, or lies past
/// the file's end, is left to the cache.
pub(crate) fn string_tables<'a, R: object::ReadRef<'a>>(
    object: &object::File<'a, R>,
    file: &File,
    names: &[&str],
) -> Vec<(u64, Vec<u8>)> {
    let len = file.metadata().map_or(0, |m| m.len());
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for &name in names {
        let Some((start, size)) = object.section_by_name(name).and_then(|s| s.file_range()) else {
            continue;
        };
        let inside = start.checked_add(size).is_some_and(|end| end <= len);
        let overlaps = out.iter().any(|(s, b)| start < s + b.len() as u64 && *s < start + size);
        if !inside || overlaps || size == 0 {
            continue;
        }
        let mut bytes = vec![0u8; size as usize];
        if file.read_exact_at(&mut bytes, start).is_ok() {
            out.push((start, bytes));
        }
    }
    out
}

impl ObjectFile {
    /// Reads the object file at `path` (§2). The error is one sentence naming the file.
    pub(crate) fn open(path: &Path) -> Result<ObjectFile, String> {
        let (file, meta) = open_regular(path)?;
        let bad =
            |e: &dyn std::fmt::Display| format!("cannot read symbols of {}: {e}", path.display());
        // The sections' bytes are read through this one, not kept by the cache (§2).
        let direct = file.try_clone().map_err(|e| bad(&e))?;
        let cache = object::ReadCache::new(file);
        let first = object::File::parse(&cache).map_err(|e| bad(&e))?;
        let tables = string_tables(&first, &direct, &[".strtab", ".dynstr"]);
        let object =
            object::File::parse(Preread { cache: &cache, ranges: &tables }).map_err(|e| bad(&e))?;
        let endian = endian(&object);
        let build_id = object.build_id().ok().flatten().map(<[u8]>::to_vec);
        let mut sections = Vec::with_capacity(NEEDED.len());
        for id in NEEDED {
            let bytes = load_section(&direct, &object, id.name(), endian).map_err(|e| bad(&e))?;
            sections.push((id, bytes));
        }
        let units = Units::new(sections, endian);
        let symbols = object::SymbolMap::new(
            object
                .symbol_map()
                .symbols()
                .iter()
                .map(|s| Named { address: s.address(), size: s.size(), name: s.name().to_owned() })
                .collect(),
        );
        let ns = (meta.mtime() as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(meta.mtime_nsec() as u64);
        Ok(ObjectFile {
            build_id,
            identity: (meta.size(), ns),
            file_id: (meta.dev(), meta.ino()),
            units,
            symbols,
            dwp: dwarf_package(&dwp_path(path)),
        })
    }

    /// The object's DWARF, for tests that look it up both ways.
    #[cfg(test)]
    pub(crate) fn units(&self) -> &Units {
        &self.units
    }

    /// The middle of each function of the symbol table that has a size, in address order.
    #[cfg(test)]
    pub(crate) fn function_addresses(&self) -> Vec<u64> {
        self.symbols
            .symbols()
            .iter()
            .filter(|s| s.size > 1)
            .map(|s| s.address + s.size / 2)
            .collect()
    }

    /// The name of the symbol table entry that contains `probe`.
    pub(crate) fn find_symbol(&self, probe: u64) -> Option<&str> {
        self.symbols.containing(probe).map(|s| s.name.as_str())
    }

    /// The frames at `probe`, innermost first, loading the split DWARF a unit needs; `None`
    /// when no unit of the object's DWARF covers it.
    pub(crate) fn find_frames(
        &self,
        probe: u64,
    ) -> Result<Option<addr2line::FrameIter<'_, Reader>>, gimli::Error> {
        use addr2line::LookupContinuation as _;
        let Some(ctx) = self.units.context_for(probe) else {
            return Ok(None);
        };
        let mut lookup = ctx.find_frames(probe);
        loop {
            match lookup {
                addr2line::LookupResult::Output(frames) => return frames.map(Some),
                addr2line::LookupResult::Load { load, continuation } => {
                    lookup = continuation.resume(self.split_dwarf(load));
                }
            }
        }
    }

    /// The split DWARF of a unit: from the package, else from the `.dwo` it names.
    fn split_dwarf(
        &self,
        load: addr2line::SplitDwarfLoad<Reader>,
    ) -> Option<Arc<gimli::Dwarf<Reader>>> {
        if let Some(dwp) = &self.dwp {
            if let Ok(Some(cu)) = dwp.find_cu(load.dwo_id, &load.parent) {
                return Some(Arc::new(cu));
            }
        }
        let mut path = PathBuf::new();
        if let Some(dir) = &load.comp_dir {
            path.push(std::ffi::OsStr::from_bytes(&gimli::Reader::to_slice(dir).ok()?));
        }
        let name = load.path.as_ref()?;
        path.push(std::ffi::OsStr::from_bytes(&gimli::Reader::to_slice(name).ok()?));
        let (file, _) = open_regular(&path).ok()?;
        let cache = object::ReadCache::new(file);
        let object = object::File::parse(&cache).ok()?;
        let endian = endian(&object);
        let needed = |id: gimli::SectionId| NEEDED.contains(&id).then(|| id.dwo_name()).flatten();
        let mut dwo = gimli::Dwarf::load(|id| section(&object, needed(id), endian)).ok()?;
        let header = dwo.units().next().ok()??;
        if dwo.unit(header).ok()?.dwo_id != Some(load.dwo_id) {
            return None;
        }
        dwo.make_dwo(&load.parent);
        Some(Arc::new(dwo))
    }
}

/// Where the DWARF package of the object at `path` is: `prog.dwp` beside `prog`,
/// `libx.so.dwp` beside `libx.so`.
pub(crate) fn dwp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".dwp");
    PathBuf::from(name)
}

/// The DWARF package at `path`, when there is a regular file there that parses as one.
fn dwarf_package(path: &Path) -> Option<gimli::DwarfPackage<Reader>> {
    if !path.exists() {
        return None;
    }
    let (file, _) = open_regular(path).ok()?;
    let cache = object::ReadCache::new(file);
    let object = object::File::parse(&cache).ok()?;
    let endian = endian(&object);
    let empty = Reader::new(Arc::from(&[][..]), endian);
    gimli::DwarfPackage::load(|id| section(&object, id.dwo_name(), endian), empty).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::ObjectSymbol as _;
    use object::ReadRef as _;

    /// Read ahead or through the cache alone, an object gives the same symbols with the
    /// same names: this test binary's (tens of thousands, `.strtab`) and libc's dynamic
    /// ones (`.dynstr`).
    #[test]
    fn names_read_ahead_are_the_cache_s() {
        let exe = std::env::current_exe().unwrap();
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.is_file());
        for path in std::iter::once(exe.as_path()).chain(libc) {
            let file = File::open(path).unwrap();
            let cache = object::ReadCache::new(&file);
            let plain = object::File::parse(&cache).unwrap();
            let tables = string_tables(&plain, &file, &[".strtab", ".dynstr"]);
            assert!(!tables.is_empty(), "{}", path.display());
            let ahead = object::File::parse(Preread { cache: &cache, ranges: &tables }).unwrap();
            let (a, b) = (names(&plain), names(&ahead));
            assert!(a.len() > 100, "{}: {}", path.display(), a.len());
            assert_eq!(a, b, "{}", path.display());
            assert_eq!(map(&plain), map(&ahead), "{}", path.display());
        }
    }

    /// Every symbol's address and name, static then dynamic.
    fn names<'a, R: object::ReadRef<'a>>(o: &object::File<'a, R>) -> Vec<(u64, String)> {
        o.symbols()
            .chain(o.dynamic_symbols())
            .map(|s| (s.address(), s.name().unwrap_or("<none>").to_owned()))
            .collect()
    }

    /// The symbol map's addresses and names.
    fn map<'a, R: object::ReadRef<'a>>(o: &object::File<'a, R>) -> Vec<(u64, String)> {
        o.symbol_map().symbols().iter().map(|s| (s.address(), s.name().to_owned())).collect()
    }

    /// A string read ahead ends at its delimiter, at the end of the range asked (then it is
    /// the cache's answer), or past the bytes read ahead (the cache reads on).
    #[test]
    fn a_string_past_what_was_read_ahead_is_read_through_the_cache() {
        let dir = crate::sys::test_dir("object_file", "preread");
        let path = dir.join("f");
        std::fs::write(&path, b"xxxxabc\0def\0ghijkl\0").unwrap(); // 19 bytes
        let file = File::open(&path).unwrap();
        let cache = object::ReadCache::new(&file);
        // Bytes 4..14 read ahead ("abc\0def\0gh"): "ghijkl" runs past them.
        let ranges = [(4u64, b"abc\0def\0gh".to_vec())];
        let pre = Preread { cache: &cache, ranges: &ranges };
        for (start, end) in [(4, 19), (8, 19), (12, 19), (0, 19), (4, 6), (12, 14)] {
            assert_eq!(
                pre.read_bytes_at_until(start..end, 0),
                (&cache).read_bytes_at_until(start..end, 0),
                "{start}..{end}"
            );
        }
        assert_eq!(pre.read_bytes_at(5, 3), Ok(&b"bc\0"[..]));
        assert_eq!(pre.read_bytes_at(12, 4), (&cache).read_bytes_at(12, 4));
        assert_eq!(pre.read_bytes_at(12, 40), Err(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
