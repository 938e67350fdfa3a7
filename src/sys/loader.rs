//! The loader's list of loaded objects (`dl_iterate_phdr`), walked by the DWARF unwinder
//! (their unwind tables) and by the recorder (the modules a profile names), and its
//! counters of objects loaded and unloaded, which tell both when to walk it again.
//!
//! The loader holds its lock during a walk, so an object cannot be unmapped while the
//! callback looks at it; the callback must not unwind (it would cross a C frame: Rust
//! aborts instead) and must not call `dlopen` or `dlclose`.

use core::ffi::{c_int, c_void, CStr};

/// A loaded object, as the loader describes it during a walk.
pub(crate) struct Object<'a> {
    info: &'a libc::dl_phdr_info,
    size: usize,
}

impl Object<'_> {
    /// The object's path as the loader knows it (empty for the main executable and the vDSO).
    pub(crate) fn name(&self) -> &CStr {
        if self.info.dlpi_name.is_null() {
            return c"";
        }
        // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader,
        // valid during the walk (which outlives `self`).
        unsafe { CStr::from_ptr(self.info.dlpi_name) }
    }

    /// The load bias: run-time address minus the addresses in the object's headers.
    pub(crate) fn bias(&self) -> usize {
        self.info.dlpi_addr as usize
    }

    /// The object's program headers.
    pub(crate) fn phdrs(&self) -> &[libc::Elf64_Phdr] {
        if self.info.dlpi_phdr.is_null() {
            return &[];
        }
        // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers owned by the loader,
        // valid during the walk.
        unsafe {
            core::slice::from_raw_parts(self.info.dlpi_phdr, usize::from(self.info.dlpi_phnum))
        }
    }

    /// The object's `PT_LOAD` segments as (run-time start, size in memory).
    pub(crate) fn loads(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let bias = self.bias();
        self.phdrs()
            .iter()
            .filter(|ph| ph.p_type == libc::PT_LOAD)
            .map(move |ph| (bias.wrapping_add(ph.p_vaddr as usize), ph.p_memsz as usize))
    }

    /// Reads a `T` at `addr` if the object maps all of it (in one of its `PT_LOAD`
    /// segments) and `addr` is aligned for it; `None` otherwise. For the dynamic section,
    /// symbol tables and relocations the walks of `elf_lookup` and `got` read.
    pub(crate) fn read<T: Copy>(&self, addr: usize) -> Option<T> {
        let len = core::mem::size_of::<T>();
        let inside = self.loads().any(|(start, size)| {
            addr.checked_sub(start)
                .is_some_and(|off| off.checked_add(len).is_some_and(|e| e <= size))
        });
        if !inside || addr % core::mem::align_of::<T>() != 0 {
            return None;
        }
        // SAFETY: the `len` bytes at `addr` lie in one of the object's PT_LOAD segments,
        // which the loader keeps mapped and readable while the object is in its list (the
        // walks run inside `dl_iterate_phdr`, which holds its lock), and `addr` is aligned
        // for `T`; the callers read plain integer types, valid for any bits.
        Some(unsafe { core::ptr::read(addr as *const T) })
    }

    /// True when the loader's record has the `dlpi_adds`/`dlpi_subs` counters (glibc 2.4+).
    pub(crate) fn has_counters(&self) -> bool {
        self.size >= core::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8
    }
}

/// Calls `f` for every loaded object, the main executable first, in the loader's order.
/// `f` must not panic (see the module documentation).
pub(crate) fn for_each_object<F: FnMut(&Object<'_>)>(mut f: F) {
    unsafe extern "C" fn each<F: FnMut(&Object<'_>)>(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `&mut F` passed below, alive and not otherwise borrowed
        // during the walk; `info` is the loader's record, valid during this call.
        let (f, info) = unsafe { (&mut *(data as *mut F), &*info) };
        f(&Object { info, size });
        0
    }
    // SAFETY: the callback only reads the loader's records during the call and runs `f`,
    // which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each::<F>), &mut f as *mut F as *mut c_void) };
}

/// Runs `f` once while the loader's list of objects cannot change: inside a
/// `dl_iterate_phdr` callback, which holds the loader's lock (recursive: `f` may walk the
/// list again) that `dlopen` and `dlclose` take to change the list. So what `f` reads of
/// the list and what it does next happen at one point among the loads and unloads of
/// other threads. `f` must not wait for another thread that may be loading or unloading.
pub(crate) fn while_list_is_fixed<F: FnOnce()>(f: F) {
    unsafe extern "C" fn once<F: FnOnce()>(
        _info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `&mut Option<F>` passed below, alive during the walk.
        let f = unsafe { &mut *(data as *mut Option<F>) };
        if let Some(f) = f.take() {
            f();
        }
        // Stop after the first object.
        1
    }
    let mut f = Some(f);
    // SAFETY: the callback runs `f` (which outlives the call) at most once.
    unsafe { libc::dl_iterate_phdr(Some(once::<F>), &mut f as *mut Option<F> as *mut c_void) };
}

/// The public head of the loader's record of an object (`struct link_map`, <link.h>).
#[repr(C)]
struct LinkMap {
    addr: usize,
    name: *const libc::c_char,
    ld: *mut c_void,
    next: *mut LinkMap,
    prev: *mut LinkMap,
}

/// The loader's debugger interface (`struct r_debug`, <link.h>): the head of the list of
/// the base namespace's objects.
#[repr(C)]
struct RDebug {
    version: c_int,
    map: *mut LinkMap,
    brk: usize,
    state: c_int,
    ldbase: usize,
}

extern "C" {
    /// Defined by the dynamic loader (`ld.so`).
    static _r_debug: RDebug;
}

/// The objects a `dlclose(handle)` may unmap: the handle's object and those loaded after
/// it (its dependencies among them), in load order, as (bias, name). `None` when `handle`
/// is not an object of the base namespace's list (no object's record is read before its
/// address is found in the list). Call it from [`while_list_is_fixed`]'s closure, so that
/// the list does not change during the walk.
pub(crate) fn closable_from(handle: *const c_void) -> Option<Vec<(u64, Vec<u8>)>> {
    // SAFETY: `_r_debug` is the loader's, alive for the whole process; its list is not
    // changed while the caller holds the loader's list lock, and every record on it is
    // valid (the walk starts from the head and follows `next` only).
    let mut at = unsafe { core::ptr::addr_of!(_r_debug.map).read_volatile() };
    let mut found = false;
    let mut out = Vec::new();
    while !at.is_null() {
        found |= at as *const c_void == handle;
        // SAFETY: `at` is a record of the list (see above).
        let lm = unsafe { &*at };
        if found {
            let name = if lm.name.is_null() {
                Vec::new()
            } else {
                // SAFETY: the loader's names are NUL-terminated strings it keeps with the
                // record.
                unsafe { CStr::from_ptr(lm.name) }.to_bytes().to_vec()
            };
            out.push((lm.addr as u64, name));
        }
        at = lm.next;
    }
    found.then_some(out)
}

/// The loader's counts of objects ever loaded and unloaded (`dlpi_adds`, `dlpi_subs`):
/// either changes when `dlopen` maps or `dlclose` unmaps an object. (0, 0) where the
/// loader does not keep them.
pub(crate) fn counts() -> (u64, u64) {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        if size >= core::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8 {
            // SAFETY: the loader passes a valid info of `size` bytes, which covers the
            // counters; `data` is the `&mut (u64, u64)` passed below.
            unsafe { *(data as *mut (u64, u64)) = ((*info).dlpi_adds, (*info).dlpi_subs) };
        }
        1
    }
    let mut counts = (0u64, 0u64);
    // SAFETY: the callback only reads the loader's record and writes `counts`, which
    // outlives the call; returning 1 stops the iteration after the first object.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut counts as *mut (u64, u64) as *mut c_void) };
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_sees_this_code_and_the_counters() {
        let here = the_walk_sees_this_code_and_the_counters as *const () as usize;
        let mut found = false;
        let mut objects = 0;
        for_each_object(|o| {
            objects += 1;
            assert!(o.has_counters());
            for ph in o.phdrs().iter().filter(|ph| ph.p_type == libc::PT_LOAD) {
                let start = o.bias().wrapping_add(ph.p_vaddr as usize);
                found |= (start..start + ph.p_memsz as usize).contains(&here);
            }
        });
        assert!(found && objects >= 2, "{objects} objects");
        let (adds, subs) = counts();
        assert!(adds >= objects as u64 && adds >= subs);
    }
}
