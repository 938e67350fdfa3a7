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
//! `SIGBUS`). Each DWARF section is copied, decompressed where compressed, into shared
//! bytes that the addr2line context keeps, and the symbol table into owned names, so
//! nothing borrows the file once it is loaded. The split DWARF of the object comes the
//! same way: its DWARF package (`prog.dwp` beside `prog`, read at load) and the `.dwo`
//! files its units name (read when a lookup needs one; a `.dwo` whose id is not the
//! unit's is not used). A file that is not a regular file is not read: its frames stay
//! unnamed, nothing blocks.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use addr2line::gimli;
use object::{Object as _, ObjectSection as _};

/// The DWARF reader: shared bytes, so the context owns what it reads.
type Reader = gimli_dwarf::EndianArcSlice<gimli::RunTimeEndian>;

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
    ctx: addr2line::Context<Reader>,
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

fn endian<'a>(object: &object::File<'a, &'a object::ReadCache<File>>) -> gimli::RunTimeEndian {
    if object.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// The bytes of the section `name` (uncompressed), or none when the object has no such
/// section; a section that cannot be read is an error.
fn section<'a>(
    object: &object::File<'a, &'a object::ReadCache<File>>,
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

impl ObjectFile {
    /// Reads the object file at `path` (§2). The error is one sentence naming the file.
    pub(crate) fn open(path: &Path) -> Result<ObjectFile, String> {
        let (file, meta) = open_regular(path)?;
        let bad =
            |e: &dyn std::fmt::Display| format!("cannot read symbols of {}: {e}", path.display());
        let cache = object::ReadCache::new(file);
        let object = object::File::parse(&cache).map_err(|e| bad(&e))?;
        let endian = endian(&object);
        let build_id = object.build_id().ok().flatten().map(<[u8]>::to_vec);
        let dwarf = gimli::Dwarf::load(|id| section(&object, Some(id.name()), endian))
            .map_err(|e| bad(&e))?;
        let ctx = addr2line::Context::from_dwarf(dwarf).map_err(|e| bad(&e))?;
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
            ctx,
            symbols,
            dwp: dwarf_package(&dwp_path(path)),
        })
    }

    /// The name of the symbol table entry that contains `probe`.
    pub(crate) fn find_symbol(&self, probe: u64) -> Option<&str> {
        self.symbols.containing(probe).map(|s| s.name.as_str())
    }

    /// The frames at `probe`, innermost first, loading the split DWARF a unit needs.
    pub(crate) fn find_frames(
        &self,
        probe: u64,
    ) -> Result<addr2line::FrameIter<'_, Reader>, gimli::Error> {
        use addr2line::LookupContinuation as _;
        let mut lookup = self.ctx.find_frames(probe);
        loop {
            match lookup {
                addr2line::LookupResult::Output(frames) => return frames,
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
        let mut dwo = gimli::Dwarf::load(|id| section(&object, id.dwo_name(), endian)).ok()?;
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
