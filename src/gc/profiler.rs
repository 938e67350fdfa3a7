//! Where the managed heap reports its blocks and cycles.
//!
//! # 1. Two profilers in one process
//! In a program profiled in process, the heap reports to this copy of memprof:
//! [`crate::engine::alloc::on_alloc`], [`crate::engine::alloc::on_dealloc`] and
//! [`crate::session::record_gc_cycle`]. Under `memprof record` the session lives in the
//! preload library, which carries its own copy of memprof; this copy has no session. The
//! preload library therefore exports the same three hooks under C names
//! (`memprof_preload_gc_alloc`, `memprof_preload_gc_free`, `memprof_preload_gc_cycle`),
//! and a heap created in a process where they exist reports there instead, so the
//! recorded `.mprof` holds the heap's samples, deaths and cycles beside the program's
//! malloc samples.
//!
//! # 2. Cost
//! The hooks are looked up once, when the heap is created (`dlsym` may allocate; a heap
//! is not created on an allocation path). Each allocation then pays one predictable branch
//! on `forward`.

use crate::profile::GcCycle;
use core::ffi::c_void;

type AllocHook = unsafe extern "C" fn(*mut u8, usize);
type FreeHook = unsafe extern "C" fn(*mut u8);
type CycleHook = unsafe extern "C" fn(*const GcCycle);

/// The preload library's hooks, when it is loaded.
#[derive(Clone, Copy)]
struct Forward {
    alloc: AllocHook,
    free: FreeHook,
    cycle: CycleHook,
}

/// The profiler hooks of one heap.
#[derive(Clone, Copy)]
pub(crate) struct Hooks {
    forward: Option<Forward>,
}

fn lookup(name: &core::ffi::CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no other precondition;
    // a null result means the symbol is absent.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

impl Hooks {
    /// Finds the preload library's hooks, or reports in process.
    pub(crate) fn resolve() -> Hooks {
        let (a, f, c) = (
            lookup(c"memprof_preload_gc_alloc"),
            lookup(c"memprof_preload_gc_free"),
            lookup(c"memprof_preload_gc_cycle"),
        );
        if a.is_null() || f.is_null() || c.is_null() {
            return Hooks { forward: None };
        }
        // SAFETY: the preload library defines these symbols with exactly these signatures
        // (preload/src/lib.rs); a non-null dlsym result is the function's address.
        let forward = unsafe {
            Forward {
                alloc: core::mem::transmute::<*mut c_void, AllocHook>(a),
                free: core::mem::transmute::<*mut c_void, FreeHook>(f),
                cycle: core::mem::transmute::<*mut c_void, CycleHook>(c),
            }
        };
        Hooks { forward: Some(forward) }
    }

    /// True when the heap reports to the preload library's session.
    pub(crate) fn forwarded(&self) -> bool {
        self.forward.is_some()
    }

    /// A block of `size` bytes was allocated at `p`.
    #[inline]
    pub(crate) fn alloc(&self, p: *mut u8, size: usize) {
        match self.forward {
            // SAFETY: the preload's hook has C's calling convention and takes any pointer.
            Some(f) => unsafe { (f.alloc)(p, size) },
            None => crate::engine::alloc::on_alloc(p, size),
        }
    }

    /// The block at `p` is dead and about to be reused.
    #[inline]
    pub(crate) fn free(&self, p: *mut u8) {
        match self.forward {
            // SAFETY: as in `alloc`.
            Some(f) => unsafe { (f.free)(p) },
            None => crate::engine::alloc::on_dealloc(p),
        }
    }

    /// A cycle finished (times are monotonic-clock readings).
    pub(crate) fn cycle(&self, c: &GcCycle) {
        match self.forward {
            // SAFETY: `c` points at a live GcCycle (repr(C), the same layout in both copies
            // of memprof) for the duration of the call.
            Some(f) => unsafe { (f.cycle)(c) },
            None => crate::session::record_gc_cycle(c),
        }
    }
}

/// True when heaps created now would report to a `memprof record` session (the preload
/// library is loaded) rather than to this process's own sessions.
pub fn under_record() -> bool {
    Hooks::resolve().forwarded()
}
