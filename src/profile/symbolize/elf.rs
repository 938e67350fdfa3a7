//! What an ELF file says of itself, read with the `object` crate: its build id and
//! loadable segments (from the program headers and notes alone), its debug link, whether
//! its symbol tables and DWARF can name its functions. Objects are 64-bit little-endian,
//! the only kind the profiler runs in.

use std::path::Path;

use object::elf::{FileHeader64, ELF_NOTE_GNU, NT_GNU_BUILD_ID, PT_LOAD, PT_NOTE};
use object::read::elf::{FileHeader as _, NoteIterator, ProgramHeader as _};
use object::LittleEndian as LE;

/// A note segment longer than this is not read for a build id (a build id note is tens
/// of bytes; a segment this long is damage, not notes).
const MAX_NOTES: u64 = 1 << 16;

/// The GNU build id of the 64-bit little-endian ELF object at `path` (its `NT_GNU_BUILD_ID`
/// note, found through the program headers; only the headers and the notes are read).
pub fn build_id(path: &Path) -> Option<Vec<u8>> {
    file_layout(path)?.build_id
}

/// What a module record needs of an object file mapped in another process (`memprof
/// record`'s collector): see [`file_layout`].
pub(crate) struct FileLayout {
    /// The `PT_LOAD` segments: (virtual address, size in memory).
    pub(crate) loads: Vec<(u64, u64)>,
    /// The GNU build id, when the notes hold one.
    pub(crate) build_id: Option<Vec<u8>>,
}

/// The layout of a 64-bit little-endian ELF file, read from its program headers and notes
/// (through a cache that reads only the ranges asked for: never the whole file).
pub(crate) fn file_layout(path: &Path) -> Option<FileLayout> {
    let file = crate::sys::files::open_input_regular(path).ok()?;
    let data = object::ReadCache::new(file);
    let header = FileHeader64::<LE>::parse(&data).ok()?;
    let phdrs = header.program_headers(LE, &data).ok()?;
    if phdrs.is_empty() {
        return None;
    }
    let (mut loads, mut build_id) = (Vec::new(), None);
    for ph in phdrs {
        let kind = ph.p_type(LE);
        if kind == PT_LOAD {
            loads.push((ph.p_vaddr(LE), ph.p_memsz(LE)));
        } else if kind == PT_NOTE && build_id.is_none() && ph.p_filesz(LE) <= MAX_NOTES {
            build_id = ph.notes(LE, &data).ok().flatten().and_then(gnu_build_id);
        }
    }
    Some(FileLayout { loads, build_id })
}

/// The descriptor of the `NT_GNU_BUILD_ID` note among `notes`, the bytes of a note segment
/// aligned to `align` (its `p_align`), such as one mapped in this process.
pub(super) fn note_build_id(notes: &[u8], align: u64) -> Option<Vec<u8>> {
    gnu_build_id(NoteIterator::new(LE, align, notes).ok()?)
}

/// The first `NT_GNU_BUILD_ID` note's descriptor; the walk stops at a damaged note.
fn gnu_build_id(mut notes: NoteIterator<'_, FileHeader64<LE>>) -> Option<Vec<u8>> {
    while let Ok(Some(note)) = notes.next() {
        if note.name() == ELF_NOTE_GNU && note.n_type(LE) == NT_GNU_BUILD_ID {
            return Some(note.desc().to_vec());
        }
    }
    None
}

/// The file name in the `.gnu_debuglink` section of the object at `path`: a plain name (a
/// name with a path separator or `..` is not taken: the section is the file's to say).
#[cfg(feature = "report")]
pub(super) fn debug_link(path: &Path) -> Option<String> {
    use object::Object as _;
    let file = crate::sys::files::open_input_regular(path).ok()?;
    let cache = object::ReadCache::new(file);
    let object = object::File::parse(&cache).ok()?;
    let (name, _crc) = object.gnu_debuglink().ok()??;
    let name = std::str::from_utf8(name).ok()?;
    (!name.is_empty() && !name.contains('/') && name != ".." && name != ".")
        .then(|| name.to_owned())
}

/// What an object file holds to name its functions.
#[cfg(feature = "report")]
pub(super) struct Naming {
    pub(super) symtab: bool,
    pub(super) dynsym: bool,
    pub(super) debug_info: bool,
}

/// What the object at `path` holds to name its functions; `None` when it cannot be read.
#[cfg(feature = "report")]
pub(super) fn naming(path: &Path) -> Option<Naming> {
    use object::{
        Object as _, ObjectSection as _, ObjectSymbol as _, ObjectSymbolTable as _, SymbolKind,
    };
    let file = crate::sys::files::open_input_regular(path).ok()?;
    let cache = object::ReadCache::new(file);
    let object = object::File::parse(&cache).ok()?;
    let nonempty = |name: &str| object.section_by_name(name).is_some_and(|s| s.size() > 0);
    Some(Naming {
        symtab: object.symbol_table().is_some_and(|t| t.symbols().next().is_some()),
        // An executable's dynamic symbols are mostly what it imports: only definitions name
        // its own functions.
        dynsym: object.dynamic_symbol_table().is_some_and(|t| {
            t.symbols().any(|s| s.is_definition() && s.kind() == SymbolKind::Text)
        }),
        debug_info: nonempty(".debug_info") || nonempty(".zdebug_info"),
    })
}
