//! The running session's profile, taken without stopping it: [`live_profile`] and
//! [`Session::pprof`].
//!
//! # 1. What a call does
//! It is a safe point: it takes the driver's lock (waiting for a drain running on another
//! thread to finish), drains the queue into the [`Recorder`], copies what changed in the
//! recorder's profile since the last call into a *mirror* (the stacks and modules added
//! since, and the aggregates: [`Profile::allocated`], [`Profile::live`] and the other
//! per-pair totals), and releases the driver's lock. Then, holding only the mirror's own
//! lock, it resolves the symbols of the return addresses new to the mirror, in this
//! process (`backtrace`, the running executable and its libraries), and builds the result
//! from the mirror. Symbols are resolved once per address: the mirror keeps them from call
//! to call, for as long as the session runs.
//!
//! # 2. Who waits for it
//! Allocating threads never do: the allocation path takes no lock (it pushes to the
//! lock-free queue), and neither lock of a call is one it takes. The drain thread does,
//! for the copy only (proportional to the number of (stack, size) pairs, not to the
//! number of events); while it waits, events queue up as they do between two drains.
//! Symbol resolution and the pprof encoding run after the driver's lock is released. The
//! calling thread is marked as inside the profiler throughout, so the call's own
//! allocations are not sampled.
//!
//! # 3. Concurrent calls, fork
//! The mirror is taken with `try_lock`: a second call while one is under way (or, in a
//! forked child, a mirror whose lock a thread of the parent held at the fork) works on a
//! fresh mirror of its own instead of waiting, and resolves its symbols again.

use super::state::{drain_into, lock, DRIVER, SESSION_EPOCH};
use super::tracker::Poll;
use crate::engine::busy::Busy;
use crate::engine::sample_path::queue;
use crate::error::Error;
use crate::profile::{symbolize, Profile};
use crate::session::recorder::Recorder;
use crate::sys::padded::Padded;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, TryLockError};

/// What the last call copied, kept for the next one.
#[derive(Default)]
struct Mirror {
    /// The session it mirrors (0: none yet).
    epoch: u64,
    /// Tables copied so far, symbols resolved so far, the latest aggregates.
    profile: Profile,
    /// The recorder's symbol count when last copied.
    recorder_symbols: usize,
    /// Addresses looked up already (with or without a result).
    looked_up: HashSet<u64>,
}

static MIRROR: Padded<Mutex<Option<Mirror>>> = Padded::new(Mutex::new(None));

fn not_running() -> Error {
    Error::Other("no memprof session is running in this process".into())
}

/// A snapshot of the running session's profile, taken without stopping the session: the
/// events queued so far are delivered first (this is a safe point), then the profile of
/// the session's [`Recorder`] is copied, with the symbols of its stacks resolved in this
/// process (and kept for the next call). Everything of a [`Profile`] is there but the
/// index of live blocks by allocation time; the snapshot is marked complete (it is whole
/// as of its moment).
///
/// Allocating threads never wait for it: the allocation path takes no lock, and neither
/// lock this call takes (the session's driver, held only to deliver the pending events
/// and copy what changed since the last call; then the copy's own) is one it takes;
/// symbols are resolved and the result built after the driver's lock is released. Fails
/// when no session runs, when its tracker is not a [`Recorder`], when the recorder keeps
/// no profile in memory ([`Recorder::streaming`]), and when called from a tracker callback.
pub fn live_profile() -> Result<Profile, Error> {
    with_live_profile(|p| p.clone())
}

/// Runs `f` on the running session's profile (see [`live_profile`]), without copying it.
pub(crate) fn with_live_profile<R>(f: impl FnOnce(&Profile) -> R) -> Result<R, Error> {
    let Some(_busy) = Busy::enter() else {
        return Err(Error::Other(
            "the live profile cannot be taken from inside a memprof callback".into(),
        ));
    };
    let q = queue().ok_or_else(not_running)?;
    let mut own = None;
    let mut guard = match MIRROR.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    let slot = match guard.as_deref_mut() {
        Some(slot) => slot,
        None => &mut own,
    };
    let mirror = slot.get_or_insert_with(Mirror::default);
    {
        let mut driver = lock(&DRIVER);
        let epoch = SESSION_EPOCH.load(Ordering::Acquire);
        let d = driver.as_mut().ok_or_else(not_running)?;
        let _ = drain_into(q, d.as_mut(), epoch);
        d.after_poll(Poll::Periodic);
        let recorder = d.tracker_any().downcast_mut::<Recorder>().ok_or_else(|| {
            Error::Other("the running session's tracker is not a memprof::Recorder".into())
        })?;
        let from = recorder.profile_so_far().ok_or_else(|| {
            Error::Other(
                "the running session's Recorder streams to its file only (Recorder::streaming) \
                 and keeps no profile in memory"
                    .into(),
            )
        })?;
        if mirror.epoch != epoch {
            *mirror = Mirror { epoch, ..Mirror::default() };
        }
        copy_from(mirror, from);
    }
    resolve_new(mirror);
    Ok(f(&mirror.profile))
}

/// Copies into the mirror what changed in the recorder's profile `from`.
fn copy_from(mirror: &mut Mirror, from: &Profile) {
    let to = &mut mirror.profile;
    to.header = from.header.clone();
    let known = to.stacks.len();
    to.stacks.extend_from_slice(from.stacks.get(known..).unwrap_or_default());
    // Labels (span paths: `memprof::tracing`) are only ever added, as stacks are.
    let known = to.labels.len();
    to.labels.extend_from_slice(from.labels.get(known..).unwrap_or_default());
    if to.modules.len() != from.modules.len() {
        to.modules = from.modules.clone();
    }
    // Symbols the recorder resolved itself (before a `dlclose`, while the library was
    // still mapped): they name addresses that may no longer resolve in process.
    if mirror.recorder_symbols != from.symbols.len() {
        mirror.recorder_symbols = from.symbols.len();
        for (a, s) in &from.symbols {
            if !to.symbols.contains_key(a) {
                to.symbols.insert(*a, s.clone());
            }
        }
    }
    to.clone_aggregates_from(from);
    to.lost = from.lost;
    to.warnings.clone_from(&from.warnings);
    to.complete = true;
}

/// Resolves, in process, the frames of the mirror's stacks not looked up yet.
fn resolve_new(mirror: &mut Mirror) {
    let fresh: Vec<u64> = mirror
        .profile
        .stacks
        .iter()
        .flat_map(|s| s.frames.iter().copied())
        .filter(|a| !mirror.looked_up.contains(a) && !mirror.profile.symbols.contains_key(a))
        .collect::<HashSet<u64>>()
        .into_iter()
        .collect();
    if fresh.is_empty() {
        return;
    }
    let found = symbolize::resolve_in_process(fresh.iter().copied());
    mirror.looked_up.extend(fresh);
    mirror.profile.symbols.extend(found);
}
