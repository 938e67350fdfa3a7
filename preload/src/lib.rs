//! `libmemprof_preload.so`: the malloc family of an unmodified, dynamically linked program,
//! sampled by memprof. `memprof record -- ./prog` loads it with `LD_PRELOAD`.
//!
//! # 1. What is here
//! Only the exported functions and the constructor, by family: `fast` (`malloc` and
//! `free`), `entry` (the other allocating entry points), `process` (`dlclose`, `_exit`,
//! `exec`); the work is in the `memprof` library
//! (its engine's allocation hooks, and its agent for start, fork and exit, reached through
//! `memprof::__private`).
//!
//! # 2. Forwarding
//! Every export forwards to glibc's own allocator under the names no interposer replaces
//! (`__libc_malloc`, `__libc_free`, …), so there is no `dlsym` on the allocation path and no
//! bootstrap problem: the exports work from the first allocation the loader makes, before
//! any constructor. glibc's semantics are kept: `realloc(NULL, n)` is `malloc(n)`,
//! `realloc(p, 0)` frees `p` and returns NULL, `free(NULL)` does nothing, `calloc` and
//! `reallocarray` overflows fail with ENOMEM, `posix_memalign` returns EINVAL for a bad
//! alignment, `aligned_alloc` sets EINVAL for one where the running glibc does (2.38 and
//! later), and `free` preserves errno. `malloc_usable_size`, `dlclose` and `_exit` are
//! found once with `dlsym(RTLD_NEXT)` (none is called by the loader before the constructors
//! run). `dlclose` and `_exit` first bring the profile up to date (while the library is
//! still mapped; before the process ends without exit handlers).
//!
//! # 3. Hooks
//! A block is reported after glibc returned it, and its free before glibc gets it back (so
//! an address reused at once by another thread is never confused with it). The hooks
//! never allocate through `malloc` and keep errno; the profiler's own allocations come back
//! here and pass through untracked (the sampler's busy flag).
#![deny(missing_docs)]

mod entry;
mod fast;
mod next;
mod process;

use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, Ordering};
use fast::countdown;

/// Looks `name` up in the objects after this one, once, caching it in `slot`.
fn next_symbol(slot: &AtomicPtr<c_void>, name: &core::ffi::CStr) -> *mut c_void {
    let mut f = slot.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: `name` is NUL-terminated; RTLD_NEXT is a valid pseudo-handle.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(f, Ordering::Release);
    }
    f
}

extern "C" fn init() {
    next::resolve_once();
    memprof::__private::init();
    reset_countdown();
    // After the agent's own handler (child handlers run in the order registered), which
    // starts a followed child's session.
    // SAFETY: registers a plain function without arguments; no preconditions.
    unsafe { libc::pthread_atfork(None, None, Some(reset_countdown)) };
}

/// Zeroes the calling thread's countdown after a session started: its next allocation
/// takes the slow path and draws a gap in the new session (see `fast`). A countdown parked
/// while no session ran would otherwise be used up before the thread sampled again.
extern "C" fn reset_countdown() {
    countdown().countdown.set(0);
}

/// The constructor: starts profiling when the loader has initialised the process.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
