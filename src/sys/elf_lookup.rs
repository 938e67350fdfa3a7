//! The next definition of a function in lookup order (what `dlsym(RTLD_NEXT, name)` finds),
//! found without allocating and without calling into the dynamic linker's symbol lookup.
//!
//! # 1. Why not `dlsym`
//! The preload library's `malloc` must call the next `malloc` (the program's own allocator
//! when a library it links defines one, glibc's otherwise) from its very first call, which
//! can come from the dynamic loader itself, or from the constructor of a library that runs
//! before the preload library's. `dlsym` may allocate (its error buffer, the first
//! `dlerror` state of a thread), and so recurse into that `malloc` before it knows where to
//! go.
//!
//! # 2. How
//! [`next_definitions`] walks the loader's list of objects (`dl_iterate_phdr`, which takes
//! only the loader's recursive lock and allocates nothing) in order: the main executable,
//! the `LD_PRELOAD` libraries, then the `DT_NEEDED` libraries breadth first, which is the
//! global lookup scope's order for every object loaded at start-up. It skips the objects up
//! to and including the one that holds the caller's address, and in each later one reads
//! the dynamic section (`PT_DYNAMIC`): the symbol table (`DT_SYMTAB`, `DT_STRTAB`), its
//! hash table (`DT_GNU_HASH`, else `DT_HASH`) and the version indices (`DT_VERSYM`). The
//! first object with a defined global or weak function of the name wins; a hidden
//! (non-default) version is not a definition for a lookup by plain name, as for the
//! linker. An `STT_GNU_IFUNC` definition is resolved by calling its resolver once the walk
//! is over, as `dlsym` does.
//!
//! # 3. Safety of the reads
//! Every address read is checked first to lie inside one of the object's `PT_LOAD`
//! segments (the loader maps them all), so a damaged or unusual dynamic section ends the
//! lookup in that object instead of faulting. The dynamic section's addresses are
//! relocated in place by glibc for most objects and left as link-time addresses by others
//! (the vDSO, musl): an address below the object's load bias is a link-time one, and the
//! bias is added.
//!
//! Objects `dlopen`ed later are not in the global scope unless opened `RTLD_GLOBAL`; the
//! walk sees every object in the list, so it is meant to run before the program opens
//! any (the preload library resolves at its first allocation, or in its constructor at
//! the latest).

use crate::sys::loader::{for_each_object, Object};
use core::ffi::{c_void, CStr};

const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_STRSZ: i64 = 10;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;
const STB_GNU_UNIQUE: u8 = 10;
const STT_OBJECT: u8 = 1;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const VERSYM_HIDDEN: u16 = 0x8000;
const VER_NDX_LOCAL: u16 = 0;

/// A definition found: its address, its size (`st_size`), and whether that address is an
/// IFUNC resolver.
#[derive(Clone, Copy, Debug, Default)]
struct Found {
    addr: usize,
    size: usize,
    ifunc: bool,
}

/// For each name in `names`, the address of its first definition in the objects loaded
/// after the one containing the address `this` (see the module documentation), written to
/// the same index of `out`; null where no later object defines it. Returns false, leaving
/// `out` null, when no loaded object contains `this` (the lookup is impossible: nothing is
/// known about the order).
///
/// At most 16 names. Never allocates, never panics; takes the loader's (recursive) lock
/// for the walk.
pub fn next_definitions(this: usize, names: &[&CStr], out: &mut [*mut c_void]) -> bool {
    definitions_after(Some(this), names, out)
}

/// For each name in `names`, the address of its first definition in the loader's list of
/// objects (null where none defines it): the definition a call through a PLT binds to. Not
/// `dlsym(RTLD_DEFAULT)`'s answer when a non-PIC executable takes the function's address:
/// its undefined symbol then carries the address of its own PLT entry (the canonical
/// address every object's pointer to the function compares equal to), which `dlsym`
/// returns, while the loader binds the PLT's own slots, the executable's included, past
/// it to the definition.
///
/// At most 16 names. Never allocates, never panics; takes the loader's (recursive) lock.
pub fn first_definitions(names: &[&CStr], out: &mut [*mut c_void]) {
    definitions_after(None, names, out);
}

/// [`next_definitions`] after the object holding `this`, or from the first object.
fn definitions_after(this: Option<usize>, names: &[&CStr], out: &mut [*mut c_void]) -> bool {
    let n = names.len().min(out.len()).min(16);
    let mut found = [None::<Found>; 16];
    let mut seen_this = this.is_none();
    for_each_object(|o| {
        if !seen_this {
            let this = this.unwrap_or(0);
            seen_this = o.loads().any(|(start, len)| this.wrapping_sub(start) < len);
            return;
        }
        if found.iter().take(n).all(Option::is_some) {
            return;
        }
        let Some(table) = Symbols::of(o) else {
            return;
        };
        for (slot, name) in found.iter_mut().zip(names).take(n) {
            if slot.is_none() {
                *slot = table.lookup(name.to_bytes());
            }
        }
    });
    for (i, o) in out.iter_mut().enumerate().take(n) {
        *o = match found[i] {
            Some(Found { addr, ifunc: false, .. }) => addr as *mut c_void,
            Some(Found { addr, ifunc: true, .. }) => call_resolver(addr),
            None => core::ptr::null_mut(),
        };
    }
    seen_this
}

/// A definition in an object that precedes the caller in lookup order: the address of its
/// code and the size of its symbol (`st_size`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prior {
    /// Where the function's code starts.
    pub addr: usize,
    /// Its symbol's size in bytes (0 when unknown; an IFUNC's is 0: its resolver is not the
    /// function).
    pub size: usize,
}

/// The object *before* the one containing `this` in lookup order that defines `names[0]`
/// (the first such, as the dynamic linker binds every caller of that name to it): for each
/// name, that object's own definition, written to the same index of `out` (`None` where it
/// defines none). Returns false, leaving `out` alone, when no earlier object defines
/// `names[0]`. These are the definitions that interpose on this object's exports (the
/// executable's `malloc` when it links an allocator and exports it, or an `LD_PRELOAD`
/// library listed first).
///
/// At most 16 names. Never allocates, never panics; takes the loader's (recursive) lock.
pub fn prior_definitions(this: usize, names: &[&CStr], out: &mut [Option<Prior>]) -> bool {
    let n = names.len().min(out.len()).min(16);
    if n == 0 {
        return false;
    }
    let mut found = [None::<Found>; 16];
    let (mut seen_this, mut done) = (false, false);
    for_each_object(|o| {
        if seen_this || done {
            return;
        }
        if o.loads().any(|(start, len)| this.wrapping_sub(start) < len) {
            seen_this = true;
            return;
        }
        let Some(table) = Symbols::of(o) else {
            return;
        };
        if table.lookup(names[0].to_bytes()).is_none() {
            return;
        }
        for (slot, name) in found.iter_mut().zip(names).take(n) {
            *slot = table.lookup(name.to_bytes());
        }
        done = true;
    });
    if !done {
        return false;
    }
    for (o, f) in out.iter_mut().zip(found).take(n) {
        *o = f.map(|f| match f.ifunc {
            false => Prior { addr: f.addr, size: f.size },
            true => Prior { addr: call_resolver(f.addr) as usize, size: 0 },
        });
    }
    true
}

/// For each name, the address of its definition in the object containing `this` itself
/// (null where it defines none): an export's own address, which a reference from inside
/// the object would not give when an earlier object interposes on the name.
///
/// At most 16 names. Never allocates, never panics; takes the loader's (recursive) lock.
pub fn own_definitions(this: usize, names: &[&CStr], out: &mut [*mut c_void]) {
    let n = names.len().min(out.len()).min(16);
    for_each_object(|o| {
        if !o.loads().any(|(start, len)| this.wrapping_sub(start) < len) {
            return;
        }
        let Some(table) = Symbols::of(o) else {
            return;
        };
        for (slot, name) in out.iter_mut().zip(names).take(n) {
            if let Some(f) = table.lookup(name.to_bytes()) {
                *slot = f.addr as *mut c_void;
            }
        }
    });
}

/// For each name in `names`, its first definition in the loader's list of objects,
/// function or data (`STT_OBJECT`), with its symbol's size: what an interpreter's
/// profiler needs of it (CPython's `Py_Version`, `_PyEval_EvalFrameDefault`'s extent). An
/// IFUNC is left out (its resolver is not the function). At most 16 names. Never
/// allocates, never panics; takes the loader's (recursive) lock.
pub fn first_symbols(names: &[&CStr], out: &mut [Option<Prior>]) {
    let n = names.len().min(out.len()).min(16);
    for_each_object(|o| {
        if out.iter().take(n).all(Option::is_some) {
            return;
        }
        let Some(mut table) = Symbols::of(o) else {
            return;
        };
        table.data = true;
        for (slot, name) in out.iter_mut().zip(names).take(n) {
            if slot.is_none() {
                *slot = table
                    .lookup(name.to_bytes())
                    .filter(|f| !f.ifunc)
                    .map(|f| Prior { addr: f.addr, size: f.size });
            }
        }
    });
}

/// The implementation an `STT_GNU_IFUNC` symbol's resolver at `addr` selects.
fn call_resolver(addr: usize) -> *mut c_void {
    // SAFETY: `addr` is an STT_GNU_IFUNC symbol's value: a resolver function without
    // arguments (x86-64 glibc reads the CPU features itself) that returns the
    // implementation's address, as the loader calls it.
    let resolver: extern "C" fn() -> *mut c_void = unsafe { core::mem::transmute(addr) };
    resolver()
}

/// An object's dynamic symbol table and the means to read it safely.
struct Symbols<'a> {
    object: &'a Object<'a>,
    symtab: usize,
    strtab: usize,
    strsz: usize,
    versym: usize,
    gnu_hash: usize,
    hash: usize,
    /// Data (`STT_OBJECT`) definitions count too ([`first_symbols`]).
    data: bool,
}

impl<'a> Symbols<'a> {
    /// The object's table, from its dynamic section; `None` without one.
    fn of(object: &'a Object<'a>) -> Option<Symbols<'a>> {
        let bias = object.bias();
        let dynamic = object.phdrs().iter().find(|ph| ph.p_type == libc::PT_DYNAMIC)?;
        let mut t = Symbols {
            object,
            symtab: 0,
            strtab: 0,
            strsz: usize::MAX,
            versym: 0,
            gnu_hash: 0,
            hash: 0,
            data: false,
        };
        let start = bias.wrapping_add(dynamic.p_vaddr as usize);
        let at = |v: u64| {
            let v = v as usize;
            // Relocated in place by the loader, or a link-time address (see §3).
            if v < bias {
                v.wrapping_add(bias)
            } else {
                v
            }
        };
        for i in 0..(dynamic.p_memsz as usize / 16) {
            let entry = start + i * 16;
            let tag = t.read::<i64>(entry)?;
            let value = t.read::<u64>(entry + 8)?;
            match tag {
                DT_NULL => break,
                DT_SYMTAB => t.symtab = at(value),
                DT_STRTAB => t.strtab = at(value),
                DT_STRSZ => t.strsz = value as usize,
                DT_VERSYM => t.versym = at(value),
                DT_GNU_HASH => t.gnu_hash = at(value),
                DT_HASH => t.hash = at(value),
                _ => {}
            }
        }
        (t.symtab != 0 && t.strtab != 0 && (t.gnu_hash != 0 || t.hash != 0)).then_some(t)
    }

    /// Reads a `T` at `addr` if the object maps all of it ([`Object::read`]).
    fn read<T: Copy>(&self, addr: usize) -> Option<T> {
        self.object.read(addr)
    }

    /// The definition of `name` in this object, if it exports one (see the module
    /// documentation).
    fn lookup(&self, name: &[u8]) -> Option<Found> {
        if self.gnu_hash != 0 {
            self.lookup_gnu(name)
        } else {
            self.lookup_sysv(name)
        }
    }

    /// Symbol `index` when it is a default-version definition of a function named `name`.
    fn definition(&self, index: u32, name: &[u8]) -> Option<Found> {
        let sym = self.read::<libc::Elf64_Sym>(self.symtab.checked_add(index as usize * 24)?)?;
        let (bind, kind) = (sym.st_info >> 4, sym.st_info & 0xf);
        if sym.st_shndx == 0
            || sym.st_value == 0
            || !matches!(bind, STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE)
            || !(matches!(kind, STT_FUNC | STT_GNU_IFUNC) || (self.data && kind == STT_OBJECT))
        {
            return None;
        }
        if self.versym != 0 {
            let v = self.read::<u16>(self.versym.checked_add(index as usize * 2)?)?;
            if v & VERSYM_HIDDEN != 0 || v == VER_NDX_LOCAL {
                return None;
            }
        }
        if !self.name_is(sym.st_name as usize, name) {
            return None;
        }
        let addr = self.object.bias().wrapping_add(sym.st_value as usize);
        Some(Found { addr, size: sym.st_size as usize, ifunc: kind == STT_GNU_IFUNC })
    }

    /// True when the string at `offset` in the string table is `name`.
    fn name_is(&self, offset: usize, name: &[u8]) -> bool {
        if offset.saturating_add(name.len()) >= self.strsz {
            return false;
        }
        let start = self.strtab + offset;
        name.iter()
            .chain(core::iter::once(&0u8))
            .enumerate()
            .all(|(i, &c)| self.read::<u8>(start + i) == Some(c))
    }

    /// Lookup through `DT_GNU_HASH`.
    fn lookup_gnu(&self, name: &[u8]) -> Option<Found> {
        let h = name.iter().fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(u32::from(c)));
        let base = self.gnu_hash;
        let nbuckets = self.read::<u32>(base)?;
        let symoffset = self.read::<u32>(base + 4)?;
        let bloom_size = self.read::<u32>(base + 8)? as usize;
        if nbuckets == 0 {
            return None;
        }
        let buckets = base + 16 + bloom_size * 8;
        let chain = buckets + nbuckets as usize * 4;
        let mut index = self.read::<u32>(buckets + (h % nbuckets) as usize * 4)?;
        if index < symoffset {
            return None;
        }
        loop {
            let entry = self.read::<u32>(chain + (index - symoffset) as usize * 4)?;
            if entry | 1 == h | 1 {
                if let Some(f) = self.definition(index, name) {
                    return Some(f);
                }
            }
            if entry & 1 != 0 {
                return None;
            }
            index = index.checked_add(1)?;
        }
    }

    /// Lookup through `DT_HASH`.
    fn lookup_sysv(&self, name: &[u8]) -> Option<Found> {
        let h = name.iter().fold(0u32, |h, &c| {
            let h = (h << 4).wrapping_add(u32::from(c));
            let g = h & 0xf000_0000;
            (h ^ (g >> 24)) & !g
        });
        let base = self.hash;
        let nbucket = self.read::<u32>(base)?;
        let nchain = self.read::<u32>(base + 4)?;
        if nbucket == 0 {
            return None;
        }
        let chain = base + 8 + nbucket as usize * 4;
        let mut index = self.read::<u32>(base + 8 + (h % nbucket) as usize * 4)?;
        // A chain visits each symbol at most once; the bound stops a damaged one.
        for _ in 0..nchain {
            if index == 0 || index >= nchain {
                return None;
            }
            if let Some(f) = self.definition(index, name) {
                return Some(f);
            }
            index = self.read::<u32>(chain + index as usize * 4)?;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        fn __libc_malloc(size: usize) -> *mut c_void;
        fn __libc_free(ptr: *mut c_void);
    }

    /// Seen from inside glibc: its own exports are its `__libc_*` entry points (aliases),
    /// and no object before it (this test binary, which exports no `malloc`) defines one.
    #[test]
    fn own_and_prior_definitions_seen_from_glibc() {
        let inside_glibc = __libc_malloc as *const () as usize;
        let mut own = [core::ptr::null_mut(); 3];
        own_definitions(inside_glibc, &[c"malloc", c"free", c"memprof_no_such"], &mut own);
        assert_eq!(
            own,
            [__libc_malloc as *mut c_void, __libc_free as *mut c_void, core::ptr::null_mut()]
        );
        let mut prior = [None; 2];
        assert!(!prior_definitions(inside_glibc, &[c"malloc", c"free"], &mut prior));
        assert_eq!(prior, [None, None]);
    }

    /// From this test binary, the next `malloc` and `free` are glibc's (the test binary
    /// defines neither), the same addresses `dlsym(RTLD_NEXT)` finds; a name nothing
    /// defines is null; an address no object holds makes the lookup impossible.
    #[test]
    fn finds_what_dlsym_finds() {
        let this = finds_what_dlsym_finds as *const () as usize;
        let names = [c"malloc", c"free", c"memprof_no_such_function", c"pthread_create"];
        let mut out = [core::ptr::null_mut(); 4];
        assert!(next_definitions(this, &names, &mut out));
        for (name, &got) in names.iter().zip(&out) {
            // SAFETY: a valid pseudo-handle and a NUL-terminated name.
            let want = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
            assert_eq!(got, want, "{name:?}");
        }
        assert!(out[2].is_null());
        assert_eq!(out[0], __libc_malloc as *mut c_void);
        let mut none = [core::ptr::null_mut(); 1];
        assert!(!next_definitions(8, &names[..1], &mut none));
        assert!(none[0].is_null());
    }

    /// From the first object on: glibc's `malloc` (this test binary defines none), and
    /// null for a name nothing defines.
    #[test]
    fn first_definitions_start_at_the_executable() {
        let mut out = [core::ptr::null_mut(); 2];
        first_definitions(&[c"malloc", c"memprof_no_such_function"], &mut out);
        assert_eq!(out, [__libc_malloc as *mut c_void, core::ptr::null_mut()]);
    }
}
