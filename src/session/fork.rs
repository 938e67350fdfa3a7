//! The `pthread_atfork` handlers of a session (see [`crate::session`], §5). They are only
//! sound as the prepare, parent and child handlers of one `fork`, on the forking thread:
//! crate-private, registered by the agent ([`crate::record`]).

use super::driver::Drive;
use super::state::{lock, Control, CONTROL, DRIVER, PENDING_GC, SESSION_EPOCH};
use crate::engine::{callstack, live, sample_path, sampler};
use crate::sys::futex::MutexGuard;
use std::sync::atomic::Ordering;

/// The guards [`fork_prepare`] holds until [`fork_parent`] or [`fork_child`].
type HeldLocks =
    (MutexGuard<'static, Option<Control>>, MutexGuard<'static, Option<Box<dyn Drive>>>);

/// Where [`fork_prepare`] keeps its guards.
struct ForkLocks(core::cell::UnsafeCell<Option<HeldLocks>>);

// SAFETY: the cell is written by fork_prepare after it took both locks and emptied by the
// fork_parent/fork_child of the same fork, on the same thread, before they are released;
// another thread's fork_prepare cannot touch it before then because it blocks on CONTROL.
unsafe impl Sync for ForkLocks {}

static FORK_LOCKS: ForkLocks = ForkLocks(core::cell::UnsafeCell::new(None));

/// `pthread_atfork` prepare handler: takes the session's locks (control, driver, then the
/// live table's shards) so that the child inherits none of them held by a thread it lacks.
pub(crate) fn fork_prepare() {
    let control = lock(&CONTROL);
    let driver = lock(&DRIVER);
    live::lock_all();
    // SAFETY: see `ForkLocks`: this thread holds CONTROL, so no other handler uses the cell.
    unsafe { *FORK_LOCKS.0.get() = Some((control, driver)) };
}

/// `pthread_atfork` parent handler: releases what [`fork_prepare`] took.
pub(crate) fn fork_parent() {
    live::unlock_all();
    // SAFETY: see `ForkLocks`: this thread still holds CONTROL.
    let locks = unsafe { (*FORK_LOCKS.0.get()).take() };
    drop(locks);
}

/// `pthread_atfork` child handler: releases the locks and abandons the parent's session
/// (see the module documentation, §5). The child's tracker is leaked, never dropped.
pub(crate) fn fork_child() {
    live::unlock_all_in_child();
    callstack::fork_child();
    // SAFETY: see `ForkLocks`: this (the only) thread still holds CONTROL.
    let locks = unsafe { (*FORK_LOCKS.0.get()).take() };
    sampler::end();
    sample_path::WAIT_WHEN_FULL.store(false, Ordering::Relaxed);
    if let Some((mut control, mut driver)) = locks {
        // The drain thread does not exist here: forget its handle rather than join it.
        core::mem::forget(control.take());
        // The tracker shares its output with the parent: never run or drop it.
        core::mem::forget(driver.take());
    }
    SESSION_EPOCH.store(0, Ordering::Release);
    // Slots claimed by threads that the child lacks would never be published.
    sample_path::QUEUE.store(core::ptr::null_mut(), Ordering::Release);
    live::name_by_address(false);
    live::clear();
}

/// In a child made by a raw `clone`, which no fork handler prepared (`engine::forked`):
/// abandons the parent's session as [`fork_child`] does, with the locks other threads held
/// at the `clone` taken as held by nobody (the live table's shards, the control and driver
/// locks, the GC cycles' list: their contents are forgotten, never read). Only this thread
/// exists. False when this thread is inside the live table (a signal handler made the child
/// there): nothing was done, and the caller tries again later.
pub(crate) fn clone_child() -> bool {
    if live::held_here() {
        return false;
    }
    // Nothing of the parent's session may be pushed from here on.
    sample_path::QUEUE.store(core::ptr::null_mut(), Ordering::Release);
    sampler::end();
    sample_path::WAIT_WHEN_FULL.store(false, Ordering::Relaxed);
    SESSION_EPOCH.store(0, Ordering::Release);
    live::name_by_address(false);
    live::reset_in_child();
    callstack::fork_child();
    // As in `fork_child`, the drain thread (which the child lacks) and the tracker (whose
    // output is the parent's) are never run or dropped: forgotten with the locks' contents.
    // SAFETY: this thread is the only one of the process (a `clone` without `CLONE_VM`
    // copies the calling thread alone) and holds none of the three: it runs the program's
    // code, and the agent calls this only outside glibc's `fork` (whose prepare handler
    // took the first two on this thread).
    unsafe {
        CONTROL.reset_in_child(None);
        DRIVER.reset_in_child(None);
        PENDING_GC.reset_in_child(Vec::new());
    }
    true
}
