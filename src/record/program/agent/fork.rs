//! The agent in a child process (§3, §9): the `pthread_atfork` handlers of glibc's `fork`,
//! and the handler `engine::forked` runs in a child made by a raw `clone`, which no fork
//! handler told of.

use super::{lock, say, start_agent, unlock, Agent, AGENT, COLLECTED, LOCK, OWNER, RING_HEADER};
use crate::engine::busy::Busy;
use crate::session;
use core::sync::atomic::{AtomicUsize, Ordering};

/// The thread (`sys::tls::thread_id`) inside glibc's `fork`, from the prepare handler to
/// the parent's or the child's (0: none). In the child, until the agent's child handler has
/// run (another library's child handler may allocate first), the wiped mark is this
/// fork's, not a raw `clone`'s (`engine::forked` §4).
static FORKING: AtomicUsize = AtomicUsize::new(0);

/// Whether the calling thread is inside glibc's `fork`, between [`fork_prepare`] and the
/// parent's handler: it holds the agent's lock and the session's (`attached`).
pub(super) fn forking_here() -> bool {
    FORKING.load(Ordering::Acquire) == crate::sys::tls::thread_id()
}

/// The word that names the thread inside glibc's `fork` (its thread pointer, `fs:0`; 0:
/// none), which `memprof attach` reads from outside so as not to borrow that thread.
pub(super) fn forking_word() -> &'static AtomicUsize {
    &FORKING
}

/// Registers the fork handlers. Once per process image.
pub(super) fn register() {
    // SAFETY: the handlers are `extern "C"` functions that live as long as the process (the
    // preload library is never unloaded).
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
}

/// Arms the mark that finds a child made by a raw `clone` (§9), with [`clone_child`] as its
/// handler. Before a session starts; again at a later one (the mark is written again).
pub(super) fn arm() {
    crate::engine::forked::arm(clone_child);
}

extern "C" fn fork_prepare() {
    lock();
    FORKING.store(crate::sys::tls::thread_id(), Ordering::Release);
    session::fork_prepare();
}

extern "C" fn fork_parent() {
    session::fork_parent();
    FORKING.store(0, Ordering::Release);
    unlock();
}

extern "C" fn fork_child() {
    let _busy = Busy::enter();
    session::fork_child();
    // The page was wiped: this process's own children are found by it again.
    crate::engine::forked::rearm();
    FORKING.store(0, Ordering::Release);
    // SAFETY: this thread holds LOCK (taken in fork_prepare before the fork).
    let agent = unsafe { &mut *AGENT.0.get() };
    take_over(agent);
    unlock();
}

/// `engine::forked`'s handler (§9): this process was made by a raw `clone` (or `clone3`)
/// without `CLONE_VM`, and this thread, the only one, found the mark wiped. True when the
/// process's state is its own now.
fn clone_child() -> bool {
    if FORKING.load(Ordering::Acquire) == crate::sys::tls::thread_id() {
        // glibc's fork, whose child handler has not run yet: it does the work.
        return false;
    }
    let _busy = Busy::enter();
    // A lock another thread of the parent held at the `clone` is held by nobody here. This
    // thread holds none: it runs the program's code (the agent never calls `clone`).
    LOCK.store(false, Ordering::Release);
    lock();
    if !session::clone_child() {
        unlock();
        return false;
    }
    crate::engine::forked::rearm();
    // SAFETY: this thread holds LOCK.
    let agent = unsafe { &mut *AGENT.0.get() };
    take_over(agent);
    unlock();
    true
}

/// In a child whose session state was reset (`session::fork_child` or `clone_child`): the
/// parent's agent is abandoned (its session forgotten, its ring unmapped, nothing of it
/// ever written), and with `--follow-forks` a session of the child's own is started. The
/// caller holds LOCK.
fn take_over(agent: &mut Option<Agent>) {
    OWNER.store(0, Ordering::Release);
    let follow = match agent.take() {
        Some(mut a) => {
            // The parent's session: already abandoned by the tracker; dropping it would be a
            // no-op, but nothing of it may ever write, so it is forgotten.
            core::mem::forget(a.session.take());
            // The parent's ring: the session's queue pointer is gone (`session::fork_child`),
            // so nothing of this process reaches it any more; unmapped.
            crate::engine::sample_path::CONSUMER.store(core::ptr::null_mut(), Ordering::Release);
            COLLECTED.store(false, Ordering::Release);
            RING_HEADER.store(core::ptr::null_mut(), Ordering::Release);
            // SAFETY: null: nothing is written through the sink from now on.
            unsafe { crate::sys::rawmem::copy_mapped_to(core::ptr::null_mut()) };
            drop(a.ring.take());
            let follow = a.settings.follow_forks.then(|| {
                let mut s = a.settings.clone();
                s.stem = Some(a.stem.clone());
                s
            });
            // Nothing of the parent's agent is freed here: after a raw `clone` its memory
            // may be in an arena whose lock a thread of the parent held (glibc's `fork`
            // resets the allocator's locks, a raw `clone` does not).
            core::mem::forget(a);
            follow
        }
        None => None,
    };
    if let Some(settings) = follow {
        match start_agent(settings) {
            Ok(a) => *agent = Some(a),
            Err(msg) => say(&format!("{msg}; this process is not profiled")),
        }
    }
}
