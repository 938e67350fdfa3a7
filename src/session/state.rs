//! The session's process-wide state: which session runs (its epoch), its control block and
//! driver behind their locks, the GC cycles waiting for a safe point, and the drain of a
//! queue into the driver that every safe point shares. A leaf of the folder: `mod.rs`,
//! `fork.rs` and `live.rs` take it, it takes none of them.

use super::driver::Drive;
use crate::engine::clock;
use crate::engine::queue::{Queue, WireEvent};
use crate::profile::GcCycle;
use crate::sys::futex::{Mutex, MutexGuard};
use crate::sys::padded::Padded;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The running session's epoch (0: none), read by `poll` under the driver's lock.
pub(super) static SESSION_EPOCH: AtomicU64 = AtomicU64::new(0);
/// A fatal signal's request to the drain thread ([`flush_from_signal`]): 0 none, 1
/// requested, 2 done.
pub(super) static CRASH_FLUSH: AtomicU64 = AtomicU64::new(0);
/// The drain thread's kernel thread id while it runs (0: none).
pub(super) static DRAIN_TID: AtomicU64 = AtomicU64::new(0);
/// The running session's mean interval, as `f64` bits.
pub(super) static INTERVAL_BITS: AtomicU64 = AtomicU64::new(0);

// ---- cold-path state ----

pub(super) struct Control {
    pub(super) epoch: u64,
    /// The queue's counts of lost events and of frees lost for good when the session
    /// started (a reused queue keeps counting across sessions).
    pub(super) lost_at_start: (u64, u64, u64),
    pub(super) drain: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

// The session's locks are `sys::futex`'s: a child made by a raw `clone` takes them as free
// when a thread it lacks held them (`fork::clone_child`).
pub(super) static CONTROL: Padded<Mutex<Option<Control>>> = Padded::new(Mutex::new(None));
pub(super) static DRIVER: Padded<Mutex<Option<Box<dyn Drive>>>> = Padded::new(Mutex::new(None));
/// GC cycles reported but not yet delivered (delivered by `poll`, after the queue).
pub(super) static PENDING_GC: Padded<Mutex<Vec<(u64, GcCycle)>>> =
    Padded::new(Mutex::new(Vec::new()));

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// Delivers the queued events of session `epoch` (their clock readings converted to session
/// nanoseconds), then the GC cycles reported before this drain began, which follow the events
/// queued before them. Returns the number delivered.
pub(super) fn drain_into(q: &Queue, driver: &mut dyn Drive, epoch: u64) -> usize {
    let interval = f64::from_bits(INTERVAL_BITS.load(Ordering::Relaxed));
    // Deaths a signal handler deferred (`live` §4) go into the queue first.
    crate::engine::live::flush_deferred();
    let clock = clock::Converter::new();
    let n = q
        .drain(|e, frames| {
            if e.epoch() == epoch {
                driver.event(&e.with_time(clock.session_ns(e.time())), frames, interval);
            }
        })
        .unwrap_or(0);
    // Frees that did not fit in the queue, replayed once their blocks' allocations are in
    // (`queue` §3); a queue consumed in another process keeps them for its consumer.
    let mut frees = Vec::new();
    if !q.is_external() {
        q.take_lost_frees(|e| {
            // In this process every free names its sample (`live` §6 is for collectors).
            if let WireEvent::Death(d) = e {
                if d.epoch == epoch {
                    frees.push((d.id, clock.session_ns(d.time)));
                }
            }
        });
    }
    driver.lost_frees(&frees);
    let cycles = std::mem::take(&mut *lock(&PENDING_GC));
    let m = cycles.len();
    for (_, c) in cycles.iter().filter(|(e, _)| *e == epoch) {
        driver.gc(c);
    }
    n + m
}
