//! The `pthread_atfork` handlers of a session (see [`crate::session`], §5). They are only
//! sound as the prepare, parent and child handlers of one `fork`, on the forking thread:
//! crate-private, registered by the agent ([`crate::record`]).

use super::driver::Drive;
use super::state::{lock, Control, CONTROL, DRIVER, SESSION_EPOCH};
use crate::engine::{callstack, hot, live, sampler};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::MutexGuard;

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
    if LOCKS_LOST.load(Ordering::Acquire) {
        // Held by threads this process lacks (see `clone_child`): nothing of a session
        // runs here, and waiting for them would never end.
        live::lock_all();
        return;
    }
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
    hot::WAIT_WHEN_FULL.store(false, Ordering::Relaxed);
    if let Some((mut control, mut driver)) = locks {
        // The drain thread does not exist here: forget its handle rather than join it.
        core::mem::forget(control.take());
        // The tracker shares its output with the parent: never run or drop it.
        core::mem::forget(driver.take());
    }
    SESSION_EPOCH.store(0, Ordering::Release);
    // Slots claimed by threads that the child lacks would never be published.
    hot::QUEUE.store(core::ptr::null_mut(), Ordering::Release);
    live::clear();
}

/// Set in a child made by a raw `clone` while another thread of its parent held the
/// session's control or driver lock: held for good here, so no session can start and the
/// fork handlers leave them alone.
static LOCKS_LOST: AtomicBool = AtomicBool::new(false);

/// In a child made by a raw `clone`, which no fork handler prepared (`engine::forked`):
/// abandons the parent's session as [`fork_child`] does, with the locks other threads held
/// at the `clone` taken as held by nobody. Only this thread exists. `None` when this thread
/// is inside the live table (a signal handler made the child there): nothing was done, and
/// the caller tries again later. `Some(false)` when the session's control or driver lock
/// was held (by a thread the child lacks): the parent's session is abandoned all the same,
/// but this process can never start one. `Some(true)`: it may.
pub(crate) fn clone_child() -> Option<bool> {
    if live::held_here() {
        return None;
    }
    // Nothing of the parent's session may be pushed from here on.
    hot::QUEUE.store(core::ptr::null_mut(), Ordering::Release);
    sampler::end();
    hot::WAIT_WHEN_FULL.store(false, Ordering::Relaxed);
    SESSION_EPOCH.store(0, Ordering::Release);
    live::reset_in_child();
    callstack::fork_child();
    let control = try_lock(&CONTROL);
    let driver = try_lock(&DRIVER);
    match (control, driver) {
        (Some(mut control), Some(mut driver)) => {
            // As in `fork_child`: a drain thread the child lacks, a tracker that shares its
            // output with the parent; neither is ever run or dropped.
            core::mem::forget(control.take());
            core::mem::forget(driver.take());
            Some(true)
        }
        _ => {
            LOCKS_LOST.store(true, Ordering::Release);
            Some(false)
        }
    }
}

/// The lock's guard if it is free (a poisoned lock is taken as it is); `None` when held.
fn try_lock<T>(m: &std::sync::Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}
