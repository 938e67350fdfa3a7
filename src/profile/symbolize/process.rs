//! This process's loaded objects and their symbols, looked up in process: what a session
//! records so that its profile can be named later, and what it names at once.

use std::collections::HashMap;
use std::path::Path;

use super::elf::note_build_id;
use super::names::demangle;
use crate::profile::{Module, Symbol};

/// The loaded objects of this process: the main executable first, then shared libraries in
/// the loader's order. Objects without loadable segments (and unnamed objects other than the
/// main executable, such as the vDSO on some systems) are left out.
pub fn current_modules() -> Vec<Module> {
    struct Raw {
        name: Vec<u8>,
        base: u64,
        start: u64,
        end: u64,
        build_id: Vec<u8>,
    }

    let mut raw: Vec<Raw> = Vec::new();
    // The callback does not panic short of an allocation failure, which aborts.
    crate::sys::loader::for_each_object(|object| {
        let name = object.name().to_bytes().to_vec();
        let phdrs = object.phdrs();
        let base = object.bias() as u64;
        let (mut start, mut end) = (u64::MAX, 0u64);
        for ph in phdrs.iter().filter(|ph| ph.p_type == libc::PT_LOAD) {
            let s = base.wrapping_add(ph.p_vaddr);
            start = start.min(s);
            end = end.max(s.wrapping_add(ph.p_memsz));
        }
        // The build id, from the notes of the mapped image (no file is read). A note
        // segment is read only where a loadable segment maps it.
        let loaded = |lo: u64, hi: u64| {
            phdrs.iter().any(|ph| {
                ph.p_type == libc::PT_LOAD && ph.p_vaddr <= lo && hi <= ph.p_vaddr + ph.p_filesz
            })
        };
        let build_id = phdrs
            .iter()
            .filter(|ph| ph.p_type == libc::PT_NOTE && ph.p_memsz <= 1 << 16)
            .filter(|ph| loaded(ph.p_vaddr, ph.p_vaddr + ph.p_memsz))
            .find_map(|ph| {
                let at = base.wrapping_add(ph.p_vaddr) as *const u8;
                // SAFETY: the note segment lies inside a loaded segment of an object that
                // stays mapped during the walk (the loader holds its lock).
                let notes = unsafe { std::slice::from_raw_parts(at, ph.p_memsz as usize) };
                note_build_id(notes, ph.p_align)
            })
            .unwrap_or_default();
        if start < end {
            raw.push(Raw { name, base, start, end, build_id });
        }
    });
    let exe = std::fs::read_link("/proc/self/exe").ok();
    let mut modules = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let path = if r.name.is_empty() {
            match (&exe, i) {
                (Some(exe), 0) => exe.to_string_lossy().into_owned(),
                _ => continue,
            }
        } else {
            String::from_utf8_lossy(&r.name).into_owned()
        };
        // Without a build id, the file's size and time stand for its identity.
        let (file_size, file_mtime_ns) =
            if r.build_id.is_empty() { file_identity(Path::new(&path)) } else { (0, 0) };
        modules.push(Module {
            path,
            base: r.base,
            start: r.start,
            end: r.end,
            build_id: r.build_id,
            file_size,
            file_mtime_ns,
        });
    }
    modules
}

/// A file's size and modification time in ns since the epoch ((0, 0) when it cannot be
/// read): what stands for an object's identity when it has no build id.
pub fn file_identity(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => {
            let ns =
                (m.mtime() as u64).wrapping_mul(1_000_000_000).wrapping_add(m.mtime_nsec() as u64);
            (m.size(), ns)
        }
        Err(_) => (0, 0),
    }
}

/// Resolves return addresses of this process to their inline chains (innermost first),
/// keyed by the address as given. Addresses without any named symbol are left out.
pub fn resolve_in_process(addrs: impl IntoIterator<Item = u64>) -> HashMap<u64, Vec<Symbol>> {
    let mut out = HashMap::new();
    for addr in addrs {
        if out.contains_key(&addr) {
            continue;
        }
        let mut chain = Vec::new();
        let lookup = addr.saturating_sub(1) as usize as *mut std::ffi::c_void;
        backtrace::resolve(lookup, |sym| {
            let Some(name) = sym.name() else { return };
            // The raw name, demangled by the one rule of every path (`names.rs`): backtrace's
            // `Display` would hand it to its demanglers whatever it is.
            let function = demangle(&String::from_utf8_lossy(name.as_bytes()));
            let file = sym.filename().map(|f| f.to_string_lossy().into_owned());
            chain.push(Symbol { function, file, line: sym.lineno() });
        });
        if !chain.is_empty() {
            out.insert(addr, chain);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn resolves_a_real_function() {
        assert_eq!(a_function_to_find(), 42);
        // A "return address" a few bytes into the function: addr - 1 still lies inside it.
        let addr = a_function_to_find as fn() -> u64 as usize as u64 + 4;
        let map = resolve_in_process([addr]);
        let chain = map.get(&addr).expect("the test binary has symbols");
        assert!(chain.iter().any(|s| s.function.contains("a_function_to_find")), "{chain:?}");
        assert!(chain.iter().all(|s| !s.function.contains("::h")), "{chain:?}");
    }

    #[test]
    fn modules_contain_this_code() {
        let modules = current_modules();
        assert!(!modules.is_empty());
        let here = resolves_a_real_function as fn() as usize as u64;
        let m = modules
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("a module holds this code");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(m.path, exe.to_string_lossy());
        let p = Profile { modules: modules.clone(), ..Profile::default() };
        let base = exe.file_name().unwrap().to_string_lossy().into_owned();
        assert!(p.unresolved_name(here).starts_with(&format!("{base}+0x")));
    }
}
