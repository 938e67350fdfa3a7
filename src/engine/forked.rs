//! A child process that no `fork` handler told of: found by a page the kernel wipes.
//!
//! # 1. Why
//! glibc's `fork` runs the `pthread_atfork` handlers, and the agent's child handler gives
//! the child a session of its own or none (`record/program/agent.rs` §3). A process made
//! by the raw `clone` system call (`syscall(SYS_clone, SIGCHLD, …)`) or by `clone3`
//! without `CLONE_VM` runs no handler: it has a copy of the parent's memory, its live
//! table, its queue pointer, its ring's mapping (shared: the ring is `MAP_SHARED`), and
//! sampled into the parent's profile what the child allocated, and took the parent's blocks
//! out of it when the child freed its copies of them.
//!
//! # 2. The mark
//! [`arm`] maps one page, writes 1 into its first word ([`MARK`]) and applies
//! `madvise(MADV_WIPEONFORK)` (Linux 4.14): in a child made by any fork-like `clone`
//! without `CLONE_VM`, `fork` included, the page reads as zeros. The sample path (an
//! allocation the sampler hit, before anything is pushed or entered: `sampler::sample_slow`)
//! and the free of a block whose filter counter is set (before the live table is touched:
//! `live::remove_at`, which `free`, `realloc` and the profiler's own removals reach) look
//! at the word: two loads of lines they keep warm, on paths that are slow already. An
//! unsampled allocation and the free of a block the filter clears look at nothing: the
//! child's allocations reach the sample path at the rate its parent sampled, and a free
//! of one of the parent's sampled blocks passes the filter, so the child is found at its
//! first sample or its first free of such a block, before either reaches the parent's
//! queue. A child that makes neither has nothing to report, and is never found (it writes
//! nothing anywhere: every other way into the ring checks the owner's pid).
//!
//! # 3. What a found child does
//! [`handle`] runs the handler the agent registered, on the thread that found the mark 0
//! (the only one: a child made by `clone` without `CLONE_THREAD` has the calling thread
//! alone), before the caller goes on: the parent's session is abandoned as in the fork
//! child handler, with the locks other threads held at the `clone` taken as held by nobody
//! (the live table's shards, with the tables they guarded forgotten: `live::reset_in_child`;
//! the agent's lock; the session's control, driver and GC lists, locks of
//! `sys::futex` for this: a std `Mutex` held by a thread the child lacks stays held), the
//! mark is written again for this process's own children, and with `--follow-forks` the
//! child starts a session of its own (on a ring, or with its own file and drain thread). The caller then goes on
//! in the child's own state: a sample is drawn again in the child's session (or none), and
//! a free finds the table empty. An allocator that keeps the countdown itself registers
//! what makes the thread draw it again ([`after_child`]: the preload library's runs after
//! the handler, as its fork child handler runs after the agent's). The handler allocates (through the program's `malloc`,
//! marked busy, as the preload library's early start does inside an allocation) once per
//! such child. It keeps errno.
//!
//! # 4. What the mark does not change
//! - A child made by glibc's `fork` reads 0 too: the agent's prepare handler notes the
//!   forking thread, and until its child handler has run (another library's child handler
//!   may allocate first) the handler declines; the sampler then reports nothing and a free
//!   leaves the table alone, which the child handler clears. The child handler writes the
//!   mark again.
//! - `vfork` and `clone(CLONE_VM)` share the parent's memory, the page included: nothing is
//!   wiped and nothing changes. Such a child must only `exec` or `_exit`.
//! - Without `MADV_WIPEONFORK` (kernels before 4.14) the mark stays unarmed and raw clone
//!   children sample into their parent's profile as before.
//! - A thread at a safe point of the profiler (busy) never runs the handler: a free there
//!   is left alone, a sample was refused already.
//! - In-process sessions (`Sampled`) arm nothing: the mark reads 1.
//! - glibc's own locks: its `fork` resets the allocator's and the loader's locks in the
//!   child, a raw `clone` does not. A child made while another thread of its parent held
//!   one has it held for good, and the handler's session start (`--follow-forks`: it
//!   allocates, and lists the loaded objects under the loader's lock) waits for it as the
//!   child's own `malloc` or `dlopen` would. Without following, the handler allocates and
//!   frees nothing.
//! - A thread of the parent sampling at the `clone` may have claimed a slot of the
//!   parent's ring and not published it: the ring is the parent's mapping, and the child
//!   never touches it again. The child's own copy of the profiler's state is reset.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// What [`MARK`] points at until [`arm`] maps the page (and for good when it cannot): never
/// 0, so nothing is ever found.
static UNARMED: AtomicU64 = AtomicU64::new(1);

/// The mark's word: [`UNARMED`], or the first word of the wiped page (§2).
static MARK: AtomicPtr<AtomicU64> = AtomicPtr::new(&UNARMED as *const AtomicU64 as *mut AtomicU64);

/// The handler [`handle`] runs: true when the process's profiling state is its own now.
static HANDLER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// What the allocator runs on the thread once a found child's handler has given the process
/// its own state: an `extern "C" fn()` ([`after_child`]), or null.
static AFTER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Registers `f`, which `handle` runs on the found child's thread after the handler gave
/// the process its own state (§3). For an allocator that keeps the thread's countdown
/// itself and skips its epoch check (the preload library: `sampler` §3): the handler's own
/// allocations, made while no session ran, parked the countdown, which it zeroes there as
/// its fork child handler does after the agent's.
pub fn after_child(f: extern "C" fn()) {
    AFTER.store(f as *mut (), Ordering::Release);
}

/// The size of the mark's page.
const PAGE: usize = 4096;

/// Arms the mark (§2) once per process image, with `handler` to run in a child that finds
/// it 0. False when the kernel cannot wipe a page on fork (the mark stays unarmed).
pub(crate) fn arm(handler: fn() -> bool) -> bool {
    HANDLER.store(handler as *mut (), Ordering::Release);
    let unarmed = &UNARMED as *const AtomicU64 as *mut AtomicU64;
    let current = MARK.load(Ordering::Acquire);
    if current != unarmed {
        rearm();
        return true;
    }
    let page = crate::sys::rawmem::map(PAGE);
    if page.is_null() {
        return false;
    }
    // SAFETY: advice on the page just mapped, which nothing else uses.
    if unsafe { libc::madvise(page.cast(), PAGE, libc::MADV_WIPEONFORK) } != 0 {
        // SAFETY: the page came from `rawmem::map` with this size and is not used.
        unsafe { crate::sys::rawmem::unmap(page, PAGE) };
        return false;
    }
    let word = page as *mut AtomicU64;
    // SAFETY: the page is mapped read-write, aligned, and never unmapped from here on.
    unsafe { (*word).store(1, Ordering::Release) };
    MARK.store(word, Ordering::Release);
    true
}

/// Writes the mark again in a child whose parent's state was handled (the agent's fork
/// child handler, and [`handle`]'s handler once it has reset what the mark guards).
pub(crate) fn rearm() {
    // SAFETY: MARK points at UNARMED or at the page `arm` mapped, never unmapped (a child
    // keeps the mapping, zeroed).
    unsafe { &*MARK.load(Ordering::Acquire) }.store(1, Ordering::Release);
}

/// True in a child that no handler has told of yet (§2): the mark reads 0.
#[inline(always)]
pub(crate) fn unhandled() -> bool {
    // SAFETY: as in `rearm`: the pointer is always to a live word.
    unsafe { &*MARK.load(Ordering::Relaxed) }.load(Ordering::Relaxed) == 0
}

/// Runs the registered handler in a child found by its mark (§3), unless the thread is
/// inside the profiler. True when the caller may go on in the child's own state (the mark
/// is 1 again); false when it must leave the profiler's state alone (report nothing, touch
/// no table).
#[cold]
#[inline(never)]
pub(crate) fn handle() -> bool {
    if crate::engine::busy::state() != crate::engine::busy::NOT_BUSY {
        return false;
    }
    let h = HANDLER.load(Ordering::Acquire);
    if h.is_null() {
        return false;
    }
    // SAFETY: a non-null HANDLER was stored from a `fn() -> bool` by `arm`.
    let f: fn() -> bool = unsafe { core::mem::transmute::<*mut (), fn() -> bool>(h) };
    let saved = crate::sys::errno::SavedErrno::save();
    let handled = f() && !unhandled();
    let after = AFTER.load(Ordering::Acquire);
    if handled && !after.is_null() {
        // SAFETY: a non-null AFTER was stored from an `extern "C" fn()` by `after_child`.
        let after: extern "C" fn() =
            unsafe { core::mem::transmute::<*mut (), extern "C" fn()>(after) };
        after();
    }
    saved.restore();
    handled
}
