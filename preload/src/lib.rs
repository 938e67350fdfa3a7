//! `libmemprof_preload.so`: the malloc family of an unmodified, dynamically linked program,
//! sampled by memprof. `memprof record -- ./prog` loads it with `LD_PRELOAD`.
//!
//! # 1. What is here
//! Only the exported functions and the constructor, by family: `fast` (`malloc` and
//! `free`), `entry` (the other allocating entry points), `process` (`dlclose`, `_exit`,
//! `exec`, `posix_spawn`), `stack` (`pthread_attr_setstacksize`: a thread's stack gets
//! back what the library takes from it), `seccomp` (`prctl` and `syscall`: a seccomp
//! filter being installed, after which the profiler makes no system call it can avoid),
//! `altstack` (`sigaltstack`: a thread's alternate signal stack set, which the profiler's
//! unwinder must know of),
//! where the allocating ones forward to
//! (`next`), and the patcher that sends allocators the symbol lookup never sends here to
//! those exports or to hooks of their own (`patch`, x86-64, §5), and the two calls `memprof
//! attach` makes in a process it loaded this library into (`attach`, x86-64, §6); the work
//! is in the `memprof` library (its engine's allocation hooks, and its agent for start,
//! fork and exit, reached through `memprof::__private`).
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
//! are used only for a function no later object defines. When an object *before* this
//! one defines `malloc` (§5), its functions are the next definitions (every object's calls
//! bind to them), and one it lacks falls back on its `realloc` (`reallocarray`) or
//! `memalign` (`pvalloc`), never on another allocator's. The semantics are the next
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
//! Under `memprof attach`, which patches glibc's entry points (§6), those calls pass through
//! the exports too, made with the thread busy: forwarded, never reported.
//!
//! # 3. Hooks
//! A block is reported after the allocator returned it, and its free before the allocator
//! gets it back (so
//! an address reused at once by another thread is never confused with it). The hooks
//! never allocate through `malloc` and keep errno; the profiler's own allocations come back
//! here and pass through untracked (the sampler's busy flag).
//!
//! # 4. Start
//! The constructors of the libraries a program links run before this library's (a
//! library's constructor runs after those of its dependencies, and this one depends only
//! on glibc and libgcc), and what they allocate would be forwarded but not profiled. So
//! while the constructor has not run, each allocation's slow path (the countdown is held
//! at 0 until then: one `getenv` a call, only during start-up) checks whether the session
//! can start at once: `MEMPROF_OUTPUT` is set (which also says libc has initialised its
//! environment, so the loader has reached the constructors) and the call is on the main
//! thread (no other exists yet). Then it starts the session right there, inside that
//! allocation, as the constructor would: the agent's work allocates (through these hooks,
//! marked busy, forwarded to the next definition), opens the file, starts the drain thread
//! and registers the exit and fork handlers. The allocation that started it is then
//! sampled like any other. That allocation may run inside `dl_iterate_phdr` (the loader's
//! lock held): the agent's own calls to it take the same recursive lock on the same thread,
//! and the drain thread's wait for it (its module list) ends when the callback returns;
//! nothing here waits for the drain thread.
//!
//! # 5. Allocators the symbol lookup never sends here: patching (x86-64)
//! An executable that defines and exports `malloc` (rustc's links jemalloc unprefixed; so
//! may an `LD_PRELOAD` library listed before this one) comes before this library in lookup
//! order: every object's calls bind to it, and its own calls never leave it. An allocator
//! linked into the executable under names of its own (tikv-jemallocator's `_rjem_*`,
//! mimalloc's `mi_*`) is called directly. In the constructor, after `next` is resolved
//! and before the session starts, `patch` rewrites their entry points: each one's first
//! instructions move to a trampoline that runs the original (relocated by iced-x86), and
//! its entry jumps to a hook (this library's export of the same name, for a definer before
//! it, whose `NEXT` slot then holds the trampoline; a hook of its own with its own slot for
//! the others). Rust's allocator shim (`__rust_alloc`, ...) is hooked only when the program
//! has a custom global allocator of no known family. One layer per allocation path, so
//! nothing is counted twice (`patch` §1). Allocations made before the constructor (the
//! loader's, other libraries' constructors') went to the definer unsampled; their blocks
//! go back to the same allocator. `patch` says what is patched, how, and what is refused.
//!
//! # 6. Loaded into a running process (`memprof attach`, x86-64)
//! `memprof attach` `dlopen`s this library into a process that is already running, from a
//! thread it borrows with ptrace. The constructor then only resolves the forwarding table
//! (every object precedes this one, so the program's own bindings are what it finds) and
//! neither patches nor starts: the program's calls do not reach the exports yet, and the
//! attacher's calls of `attach` start the session and plan which GOT slots to reroute and
//! which entry points to patch (those of the allocator the program's calls are bound to,
//! glibc's included: a pointer to `malloc` the program kept reaches no slot), which the
//! attacher writes while every thread is stopped.
#![deny(missing_docs)]

#[cfg(target_arch = "x86_64")]
mod altstack;
mod attach;
mod entry;
mod fast;
mod next;
#[cfg(target_arch = "x86_64")]
mod patch;
mod process;
mod seccomp;
mod stack;

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
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

/// Set when the session was started, or could not be: by an allocation before the
/// constructor (§4), or by the constructor.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Starts profiling, once per process image (see §4).
fn start() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    // The registration below allocates: the library's, not the program's.
    let _busy = memprof::__private::Busy::enter();
    // Before anything can sample: the forwarding of `syscall`, which the waits' futex
    // takes, is settled off the sample path.
    seccomp::resolve();
    altstack::resolve();
    // A child made by a raw `clone`, found by the agent's mark (`memprof`'s
    // `engine/forked.rs`), gets the same after its handler.
    memprof::__private::after_clone_child(reset_countdown);
    memprof::__private::init();
    reset_countdown();
    // After the agent's own handler (child handlers run in the order registered), which
    // starts a followed child's session.
    // SAFETY: registers a plain function without arguments; no preconditions.
    unsafe { libc::pthread_atfork(None, None, Some(reset_countdown)) };
}

/// True before the session was started (the constructor has not run yet, nor an early
/// start): the allocating entry points call [`early_start`] and [`keep_counting`] then.
#[inline(always)]
fn before_start() -> bool {
    !STARTED.load(Ordering::Relaxed)
}

/// An allocation before the constructor: starts the session now if `memprof record` asked
/// for one and the process is ready for it (§4); otherwise leaves it to a later allocation
/// or to the constructor.
#[cold]
#[inline(never)]
fn early_start() {
    // libc has run its own initialiser (it sets `environ`) once a constructor can run; an
    // earlier allocation (the loader's) finds no environment.
    // SAFETY: getenv reads the environment without allocating; the name is a C string.
    if unsafe { libc::getenv(c"MEMPROF_OUTPUT".as_ptr()) }.is_null() {
        return;
    }
    // SAFETY: getpid and gettid have no preconditions.
    if unsafe { libc::getpid() != libc::gettid() } {
        return;
    }
    let saved = memprof::__private::errno();
    start();
    memprof::__private::set_errno(saved);
}

/// Before the session starts, keeps the calling thread's countdown at 0, so that its next
/// allocation comes back to [`early_start`] (the sampler parks it at `u64::MAX` while no
/// session runs).
#[cold]
#[inline(never)]
fn keep_counting() {
    countdown().countdown.set(0);
}

extern "C" fn init() {
    next::resolve_once();
    seccomp::resolve();
    altstack::resolve();
    if !preloaded() {
        // `dlopen`ed into a running process (§6): `memprof attach` starts the session.
        return;
    }
    #[cfg(target_arch = "x86_64")]
    patch::install();
    start();
}

/// True when this library was loaded with the program (`LD_PRELOAD`), false when it was
/// `dlopen`ed later (§6): then the C library precedes it in the loader's list, which it
/// never does for a library preloaded at start-up.
fn preloaded() -> bool {
    let mut found = [None];
    let this = preloaded as *const () as usize;
    memprof::__private::prior_definitions(this, &[c"__libc_start_main"], &mut found);
    found[0].is_none()
}

/// Zeroes the calling thread's countdown after a session started: its next allocation
/// takes the slow path and draws a gap in the new session (see `fast`). A countdown parked
/// while no session ran would otherwise be used up before the thread sampled again.
extern "C" fn reset_countdown() {
    countdown().countdown.set(0);
}

/// The constructor: resolves the forwarding table and starts profiling, unless an
/// allocation before it did (§4).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
