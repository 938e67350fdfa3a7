//! The executable's own symbol table (`.symtab`, read from `/proc/self/exe`): where the
//! functions of an allocator linked into it under names of its own are, which no dynamic
//! symbol table lists.

use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, SectionHeader as _, Sym as _};
use object::{Endianness, Object, ObjectSymbol, SymbolKind};

/// A function of the executable, at its run-time address.
#[derive(Clone, Debug)]
pub(crate) struct Function {
    pub(crate) name: String,
    pub(crate) addr: usize,
    pub(crate) size: usize,
}

/// The executable's functions whose names begin with one of `heads` (two bytes each) and
/// that `keep` accepts, or `None` when it cannot be read or has no symbol table
/// (stripped). `heads` is looked at first, in the string table's bytes, so that the other
/// names (a large C++ program's hundred thousand) are never read whole.
pub(crate) fn functions(heads: &[[u8; 2]], keep: impl Fn(&str) -> bool) -> Option<Vec<Function>> {
    let file = Mapped::open(c"/proc/self/exe")?;
    let elf = ElfFile64::<Endianness>::parse(file.bytes()).ok()?;
    let bias = bias(&elf)?;
    let text: Vec<(usize, usize)> = {
        let e = elf.endian();
        elf.elf_program_headers()
            .iter()
            .filter(|ph| {
                ph.p_type(e) == object::elf::PT_LOAD && ph.p_flags(e).0 & object::elf::PF_X.0 != 0
            })
            .map(|ph| {
                let start = bias.wrapping_add(ph.p_vaddr(e) as usize);
                (start, start + ph.p_memsz(e) as usize)
            })
            .collect()
    };
    let e = elf.endian();
    let table = elf.elf_symbol_table();
    // Empty when it cannot be read: then every name is read whole.
    let strings: &[u8] = elf
        .elf_section_table()
        .section(table.string_section())
        .ok()
        .and_then(|s| s.data(e, file.bytes()).ok())
        .unwrap_or_default();
    let mut out = Vec::new();
    for sym in elf.symbols() {
        if sym.kind() != SymbolKind::Text || !sym.is_definition() {
            continue;
        }
        let at = sym.elf_symbol().st_name(e) as usize;
        let head = at.checked_add(2).and_then(|end| strings.get(at..end));
        if head.is_some_and(|h| !heads.iter().any(|w| w == h)) {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if !keep(name) {
            continue;
        }
        let addr = bias.wrapping_add(sym.address() as usize);
        let size = sym.size() as usize;
        // Only code this process maps executable: the patcher reads and rewrites it.
        if !text.iter().any(|&(s, e)| s <= addr && addr.saturating_add(size) <= e) {
            continue;
        }
        out.push(Function { name: name.to_owned(), addr, size });
    }
    Some(out)
}

/// True when `symbol` is Rust's allocator-shim function `name` (`__rust_alloc`, ...):
/// the plain name of older compilers, or its v0-mangled form, which ends in the name's
/// length, `_`, and the name (`_RNvCs…_7___rustc12___rust_alloc`).
pub(crate) fn is_rust_symbol(symbol: &str, name: &str) -> bool {
    symbol == name
        || (symbol.starts_with("_R")
            && symbol
                .strip_suffix(name)
                .and_then(|s| s.strip_suffix('_'))
                .is_some_and(|s| s.ends_with(&name.len().to_string())))
}

/// The executable's load bias: where `AT_PHDR` says its program headers are, less where
/// the file puts them.
fn bias(elf: &ElfFile64<'_, Endianness>) -> Option<usize> {
    let e = elf.endian();
    let phoff = elf.elf_header().e_phoff(e);
    let vaddr = elf.elf_program_headers().iter().find_map(|ph| {
        let (off, size) = (ph.p_offset(e), ph.p_filesz(e));
        (ph.p_type(e) == object::elf::PT_LOAD && off <= phoff && phoff < off + size)
            .then(|| ph.p_vaddr(e) + (phoff - off))
    })?;
    // SAFETY: getauxval has no preconditions.
    let at_phdr = unsafe { libc::getauxval(libc::AT_PHDR) } as usize;
    (at_phdr != 0).then(|| at_phdr.wrapping_sub(vaddr as usize))
}

/// A file mapped read-only, unmapped when dropped.
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    fn open(path: &core::ffi::CStr) -> Option<Mapped> {
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `st` is written by fstat, which succeeds on an open descriptor.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        let len = if unsafe { libc::fstat(fd, &mut st) } == 0 { st.st_size as usize } else { 0 };
        let ptr = if len == 0 {
            libc::MAP_FAILED
        } else {
            // SAFETY: a private read-only mapping of the whole file.
            unsafe {
                libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, fd, 0)
            }
        };
        // SAFETY: our own descriptor; the mapping outlives it.
        unsafe { libc::close(fd) };
        (ptr != libc::MAP_FAILED).then_some(Mapped { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes for as long as `self` lives.
        unsafe { core::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer borrowed (`bytes` borrows `self`).
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_shim_names_plain_and_mangled() {
        assert!(is_rust_symbol("__rust_alloc", "__rust_alloc"));
        assert!(is_rust_symbol("_RNvCsfLfy6EI15iL_7___rustc12___rust_alloc", "__rust_alloc"));
        assert!(is_rust_symbol("_RNvCsfLfy6EI15iL_7___rustc14___rust_dealloc", "__rust_dealloc"));
        assert!(!is_rust_symbol(
            "_RNvCsfLfy6EI15iL_7___rustc19___rust_alloc_zeroed",
            "__rust_alloc"
        ));
        assert!(!is_rust_symbol(
            "_RNvCsfLfy6EI15iL_7___rustc26___rust_alloc_error_handler",
            "__rust_alloc"
        ));
        assert!(is_rust_symbol("_RNvCsfLfy6EI15iL_7___rustc11___rdl_alloc", "__rdl_alloc"));
    }
}
