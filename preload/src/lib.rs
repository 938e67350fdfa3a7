//! `libmemprof_preload.so`: the malloc family of an unmodified, dynamically linked program,
//! sampled by memprof. `memprof record -- ./prog` loads it with `LD_PRELOAD`.
//!
//! # 1. What is here
//! Only the exported functions and the constructor, by family: `fast` (`malloc` and
//! `free`), `entry` (the other allocating entry points), `process` (`dlclose`, `_exit`,
//! `exec`), and where the allocating ones forward to (`next`); the work is in the `memprof` library
//! (its engine's allocation hooks, and its agent for start, fork and exit, reached through
//! `memprof::__private`).
//!
//! # 2. Forwarding
//! Every export calls the *next* definition of its function in lookup order, what
//! `dlsym(RTLD_NEXT, name)` would find: glibc's allocator in most programs, the program's
//! own where a library it links defines the malloc family (`next`). The table is resolved
//! without `dlsym` and without allocating, by an ELF symbol lookup over the loader's list
//! of objects (`memprof::__private::next_definitions`), at the first call of any of the
//! functions: the first `malloc` of a process can come from a constructor of a linked
//! library, which runs before this library's, possibly with the loader's lock held (inside
//! `dl_iterate_phdr`; the lock is recursive, and `fixtures/c/libctorleak.c` makes exactly
//! that call first). Once the loader runs constructors, every object of the start-up scope
//! is mapped and relocated, so any call resolves the table to the same values; no block is
//! ever allocated by one allocator and freed by another. glibc's `__libc_*` entry points
//! are used only for a function no later object defines. The semantics are the next
//! allocator's (glibc's: `realloc(p, 0)` frees `p`, `free(NULL)` does nothing, `calloc`
//! and `reallocarray` overflows fail with ENOMEM, `posix_memalign` returns EINVAL for a bad
//! alignment, `aligned_alloc` sets EINVAL for one since 2.38); `free` preserves errno.
//! While the next allocator runs (all but `malloc` and `free`, which tail-jump to it), the
//! thread is marked busy, so an allocator whose `realloc` calls its own `malloc` through the
//! PLT is reported once. `dlclose` and `_exit` are found once with `dlsym(RTLD_NEXT)` (none
//! is called by the loader before the constructors run). `dlclose` and `_exit` first bring
//! the profile up to date (while the library is still mapped; before the process ends
//! without exit handlers).
//!
//! The profiler's own memory (live table, queue, deep stack buffers) still comes from
//! glibc's `__libc_malloc`, and is freed with `__libc_free`: never mixed with the program's.
//!
//! # 3. Hooks
//! A block is reported after the allocator returned it, and its free before the allocator
//! gets it back (so
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
