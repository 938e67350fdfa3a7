//! The agent under `memprof attach` (§8): the session the attacher starts and stops with
//! calls it runs on a thread of the process it borrows.
//!
//! Such a call must never wait for ever, nor leave a lock held: the attacher stops the
//! borrowed thread wherever it was, possibly inside glibc's `fork` between the agent's
//! prepare and parent handlers (which hold the agent's lock and the session's locks on that
//! very thread), and a call that waited there would wait for itself. So a call first looks
//! whether its thread is inside `fork` ([`in_fork`]), and takes the agent's lock only if it
//! frees within [`WAIT`]: otherwise it answers [`Refusal::Busy`] having changed nothing,
//! and the attacher lets the thread go and tries again at another moment. A holder on
//! another thread lets go within that time (the other threads run during the call).

use super::{at_exit, at_quick, at_quick_exit, log_modules, on_exit};
use super::{
    fork, start_collected, try_lock_for, unlock, Agent, AGENT, COLLECTED, OWNER, REGISTERED,
    RING_HEADER,
};
use crate::engine::busy::Busy;
use crate::record::env::EnvSettings;
use crate::record::ring;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

/// How long a call waits for the agent's lock before it answers [`Refusal::Busy`].
const WAIT: Duration = Duration::from_millis(200);

/// Why a session was not started or stopped.
#[derive(Debug)]
pub enum Refusal {
    /// A lock the call needs was held (by this thread, inside `fork`, or by another for
    /// longer than `WAIT`); nothing was done.
    Busy,
    /// Refused, for the reason given (for the attacher).
    Why(String),
}

/// Whether the calling thread is inside glibc's `fork`, between the agent's prepare handler
/// and its parent handler: it holds the agent's and the session's locks, and the C
/// library's allocator's too when the process has other threads.
pub fn in_fork() -> bool {
    fork::forking_here()
}

/// The word that names the thread inside glibc's `fork` (its thread pointer; 0: none), for
/// the attacher to read from outside (`MEMPROF_FORKING_AT`).
pub fn forking_word() -> &'static core::sync::atomic::AtomicUsize {
    fork::forking_word()
}

/// Runs `f` on the agent's state under its lock, if the lock frees within [`WAIT`].
fn with_agent_within<R>(f: impl FnOnce(&mut Option<Agent>) -> R) -> Result<R, Refusal> {
    if !try_lock_for(WAIT) {
        return Err(Refusal::Busy);
    }
    // SAFETY: this thread holds LOCK, the only way to reach the cell.
    let r = f(unsafe { &mut *AGENT.0.get() });
    unlock();
    Ok(r)
}

/// Starts a session for `memprof attach` (§8) from `text`, `KEY=VALUE` lines of the
/// `MEMPROF_*` settings with the ring directory. A session of an earlier attacher that was
/// never stopped (it died) is stopped first; whether it may be is the caller's to decide.
pub fn start_attached(text: &str) -> Result<(), Refusal> {
    let _busy = Busy::enter();
    if in_fork() {
        return Err(Refusal::Busy);
    }
    let settings = EnvSettings::from_lookup(|k| crate::record::attach_abi::setting(text, k))
        .map_err(|e| Refusal::Why(e.to_string()))?;
    let Some(dir) = settings.rings.clone() else {
        return Err(Refusal::Why("the attacher gave no ring directory".into()));
    };
    if with_agent_within(|agent| agent.as_ref().is_some_and(|a| !a.attached))? {
        return Err(Refusal::Why(
            "this process is profiled already: it runs under memprof record or with the \
             preload library in LD_PRELOAD"
                .into(),
        ));
    }
    stop_attached()?;
    // Before the session starts: the program's other threads run on meanwhile (§9).
    fork::arm();
    crate::engine::callstack::sampling_the_c_library();
    with_agent_within(|agent| {
        let mut a = start_collected(settings, &dir)?;
        a.attached = true;
        *agent = Some(a);
        Ok::<(), String>(())
    })?
    .map_err(Refusal::Why)?;
    if !REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: the handlers are `extern "C"` functions that live as long as the process
        // (an attached library is never unloaded: `dlopen` gave it no handle to close).
        unsafe {
            on_exit(at_exit, core::ptr::null_mut());
            at_quick_exit(at_quick);
        }
        fork::register();
    }
    Ok(())
}

/// Stops the session [`start_attached`] started, if one runs (§8): the collector finds its
/// ring ended and drains it. Ok when none runs; [`Refusal::Busy`] (nothing done) when the
/// agent's lock was not free.
pub fn stop_attached() -> Result<(), Refusal> {
    let _busy = Busy::enter();
    if in_fork() {
        return Err(Refusal::Busy);
    }
    let stopped = with_agent_within(|agent| {
        if !agent.as_ref().is_some_and(|a| a.attached) || !super::owns() {
            return None;
        }
        let mut a = agent.take()?;
        log_modules(&mut a);
        if let Some(r) = &a.ring {
            let untracked = crate::engine::sample_path::UNTRACKED.load(Ordering::Relaxed);
            r.header().untracked.store(untracked, Ordering::Relaxed);
            r.header().ending.store(ring::ENDING_DETACHED, Ordering::Release);
        }
        OWNER.store(0, Ordering::Release);
        RING_HEADER.store(core::ptr::null_mut(), Ordering::Release);
        // SAFETY: null: nothing is written through the sink from now on.
        unsafe { crate::sys::rawmem::copy_mapped_to(core::ptr::null_mut::<AtomicU64>()) };
        COLLECTED.store(false, Ordering::Release);
        Some(a)
    })?;
    if let Some(mut a) = stopped {
        // Sampling ends; the queue and the ring stay mapped for the collector and for
        // producers still inside a push (never unmapped: nothing says when the last one
        // leaves).
        if let Some(s) = a.session.take() {
            core::mem::forget(s.stop());
        }
        // The consumer stays the ring's. The stop ended every wait for room: a push still
        // under way into a full queue drops its event.
        core::mem::forget(a.ring.take());
        core::mem::forget(a);
    }
    Ok(())
}
