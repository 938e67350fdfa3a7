//! The unwinder's per-thread state: the top of the thread's stack, queried once per thread,
//! and its remembered walks (`memo`). It lives in the thread's lazily mapped block
//! ([`crate::engine::thread`]), which sees only this type, not the unwinders that use it.

use super::memo;
use crate::sys::errno::{errno, set_errno};
use core::cell::{Cell, UnsafeCell};
use core::mem::MaybeUninit;

/// The unwinder's per-thread state, in the thread's lazily mapped block (zeroed when
/// mapped, see `crate::engine::thread`).
pub(crate) struct PerThread {
    /// Highest address of this thread's stack (0 = not yet known).
    pub(super) hi: Cell<usize>,
    /// The thread's remembered walks (`callstack` §4), used by one capture at a time; valid once
    /// `memo_ready`.
    pub(super) memo: UnsafeCell<MaybeUninit<memo::Memo>>,
    pub(super) memo_ready: Cell<bool>,
    pub(super) memo_taken: Cell<bool>,
}

/// The top of the thread's stack as far as it is known already (0: not yet), with no
/// query: what the walk stack's switch compares the stack pointer with (`thread` §3).
#[inline(always)]
pub(crate) fn known_hi(t: &PerThread) -> usize {
    t.hi.get()
}

/// The top of the thread's stack (0 when unknown), queried at its first use.
#[inline(always)]
pub(super) fn thread_hi(t: &PerThread) -> usize {
    let v = t.hi.get();
    if v != 0 {
        return v;
    }
    let v = query_stack_hi();
    t.hi.set(v);
    v
}

/// Runs the library calls a thread's first sample makes to find its stack top
/// (`pthread_getattr_np`, which calls `realloc` and `pthread_getaffinity_np` through
/// glibc's lazily bound PLT), so that their symbols are bound before a thread on a small
/// stack samples: binding one costs the sample path ~2 KB of stack (`_dl_runtime_resolve`
/// saves the vector registers, then the symbol lookup). Called when a session begins.
pub(crate) fn bind_stack_queries() {
    let saved = errno();
    // SAFETY: as in `query_stack_hi`.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
            let mut addr: *mut libc::c_void = core::ptr::null_mut();
            let mut size: libc::size_t = 0;
            libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
            libc::pthread_attr_destroy(&mut attr);
        }
    }
    set_errno(saved);
}

fn query_stack_hi() -> usize {
    // A seccomp filter may refuse getpid and gettid (`sys::seccomp`): then a thread whose
    // descriptor is not above its stack (below) is taken for the main thread.
    let filtered = crate::sys::seccomp::filtered();
    // SAFETY: pthread_self has no preconditions.
    let descriptor = unsafe { libc::pthread_self() } as usize;
    let here = &descriptor as *const usize as usize;
    let started = here < descriptor && descriptor - here < (1 << 30);
    // SAFETY: getpid/gettid have no preconditions.
    let main = if filtered { !started } else { unsafe { libc::getpid() == libc::gettid() } };
    if main {
        extern "C" {
            static __libc_stack_end: *const core::ffi::c_void;
        }
        // SAFETY: glibc sets __libc_stack_end before main runs and never changes it.
        // Frames of the main thread all lie below it.
        return unsafe { __libc_stack_end } as usize;
    }
    // A thread glibc started keeps its descriptor (`pthread_self()`) at the top of its
    // stack block, above its static TLS and every frame, on a stack it allocated and on one
    // the program gave it alike: that is the top, read without `pthread_getattr_np`, which
    // takes the thread's own lock and so cannot run while the thread is inside it (its
    // `realloc` of the CPU set can be the sample: Rust's std calls it at every thread's
    // start, and the exact mode then hung for good). A thread not started by
    // `pthread_create` (its descriptor elsewhere) falls back on the query.
    if started {
        return descriptor;
    }
    let saved = errno();
    // pthread_getattr_np allocates (the thread's CPU set): the profiler's own allocations.
    // SAFETY: pthread_attr_t is plain data initialised by pthread_getattr_np and destroyed
    // once; the out-pointers are valid locals.
    let hi = crate::engine::busy::Busy::own_allocations(|| unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            0
        } else {
            let mut addr: *mut libc::c_void = core::ptr::null_mut();
            let mut size: libc::size_t = 0;
            let r = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
            libc::pthread_attr_destroy(&mut attr);
            if r == 0 {
                addr as usize + size
            } else {
                0
            }
        }
    });
    set_errno(saved);
    hi
}
