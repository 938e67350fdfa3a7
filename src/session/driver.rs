//! The type-erased consumer side of a session: events from the queue become [`Tracker`]
//! callbacks, each behind `catch_unwind`, with the tokens the tracker returned.

use super::tracker::{Allocation, Callstack, Deallocation, Poll, SessionCounters, Tracker};
use crate::engine::queue::WireEvent;
use crate::profile::GcCycle;
use crate::sys::hash::FastHash;
use crate::sys::padded::Padded;
use std::any::Any;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

/// The type-erased consumer side of a session.
pub(crate) trait Drive: Send {
    fn gc(&mut self, cycle: &GcCycle);
    fn event(&mut self, event: &WireEvent, frames: &[usize], interval: f64);
    fn finish(&mut self, stats: &SessionCounters);
    fn after_poll(&mut self, why: Poll);
    /// Frees the queue kept aside because they did not fit (`queue` §3), as (sample id,
    /// session ns): each is delivered as a deallocation once its allocation has been (it
    /// may still wait in the queue); until then it waits here. Call after every drain,
    /// with no frees too, so that the waiting ones are retried.
    fn lost_frees(&mut self, frees: &[(u64, u64)]);
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
    /// The tracker, for a look at it while the session runs (`session/live.rs`).
    fn tracker_any(&mut self) -> &mut dyn Any;
}

pub(crate) struct Driver<T: Tracker> {
    pub(crate) tracker: T,
    pub(crate) tokens: HashMap<u64, T::Token, FastHash>,
    /// Lost frees waiting for their allocation's event ([`Drive::lost_frees`]).
    waiting_frees: Vec<(u64, u64)>,
    /// Lost frees delivered so far.
    pub(crate) replayed: u64,
}

impl<T: Tracker> Driver<T> {
    pub(crate) fn new(tracker: T) -> Self {
        Driver { tracker, tokens: HashMap::default(), waiting_frees: Vec::new(), replayed: 0 }
    }

    /// Sample `id`'s block died at `time_ns`: its tracker hears of it, once.
    fn dealloc(&mut self, id: u64, time_ns: u64) {
        if let Some(token) = self.tokens.remove(&id) {
            count(&DELIVERED_FREES);
            let d = Deallocation { id, thread: 0, time_ns };
            let tracker = &mut self.tracker;
            if catch_unwind(AssertUnwindSafe(|| tracker.dealloc(token, &d))).is_err() {
                count(&CALLBACK_PANICS);
            }
        }
    }
}

// Delivery counters of the running session. Atomics rather than fields of the driver, so
// that `Session::stats` can read them while the drain thread holds the driver.
// Written by the drain thread for every event: padded (see `crate::sys::padded`).
pub(super) static DELIVERED_SAMPLES: Padded<AtomicU64> = Padded::new(AtomicU64::new(0));
pub(super) static DELIVERED_FREES: Padded<AtomicU64> = Padded::new(AtomicU64::new(0));
pub(super) static CALLBACK_PANICS: Padded<AtomicU64> = Padded::new(AtomicU64::new(0));
pub(super) static REPLAYED_FREES: Padded<AtomicU64> = Padded::new(AtomicU64::new(0));

/// Most lost frees a driver (or `record`'s collector) keeps waiting for their allocations
/// ([`Drive::lost_frees`]).
pub(crate) const MAX_WAITING_FREES: usize = 1 << 16;

pub(super) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl<T: Tracker> Drive for Driver<T> {
    fn event(&mut self, e: &WireEvent, frames: &[usize], interval: f64) {
        let tracker = &mut self.tracker;
        match e {
            WireEvent::Alloc(e) => {
                count(&DELIVERED_SAMPLES);
                let a = Allocation {
                    id: e.id,
                    size: e.size,
                    k: e.k,
                    estimated_bytes: e.k as f64 * interval,
                    thread: e.thread,
                    time_ns: e.time,
                    addr: e.addr,
                    callstack: Callstack { frames, truncated: e.truncated },
                    label: super::label::text(e.label),
                };
                match catch_unwind(AssertUnwindSafe(|| tracker.alloc(&a))) {
                    Ok(Some(token)) => {
                        self.tokens.insert(e.id, token);
                    }
                    Ok(None) => {}
                    Err(_) => count(&CALLBACK_PANICS),
                }
            }
            WireEvent::Death(d) => self.dealloc(d.id, d.time),
            // Read by the collector of a shared queue before events reach a driver; frees
            // named by address come only through a shared queue too (`live` §6).
            WireEvent::Side(_) | WireEvent::Free(_) => {}
        }
    }

    fn lost_frees(&mut self, frees: &[(u64, u64)]) {
        self.waiting_frees.extend_from_slice(frees);
        if self.waiting_frees.is_empty() {
            return;
        }
        let mut waiting = std::mem::take(&mut self.waiting_frees);
        waiting.retain(|&(id, time_ns)| {
            if !self.tokens.contains_key(&id) {
                return true;
            }
            self.dealloc(id, time_ns);
            count(&REPLAYED_FREES);
            self.replayed += 1;
            false
        });
        // A free waits only for an allocation already published, so the list stays short;
        // but a shared queue's table is written by the profiled process, which may write
        // anything: ids that never come are let go, oldest first.
        if waiting.len() > MAX_WAITING_FREES {
            waiting.drain(..waiting.len() - MAX_WAITING_FREES);
        }
        self.waiting_frees = waiting;
    }

    fn gc(&mut self, cycle: &GcCycle) {
        let tracker = &mut self.tracker;
        if catch_unwind(AssertUnwindSafe(|| tracker.gc_cycle(cycle))).is_err() {
            count(&CALLBACK_PANICS);
        }
    }

    fn finish(&mut self, stats: &SessionCounters) {
        let tracker = &mut self.tracker;
        if catch_unwind(AssertUnwindSafe(|| tracker.stopped(stats))).is_err() {
            count(&CALLBACK_PANICS);
        }
    }

    fn after_poll(&mut self, why: Poll) {
        let tracker = &mut self.tracker;
        if catch_unwind(AssertUnwindSafe(|| tracker.after_poll(why))).is_err() {
            count(&CALLBACK_PANICS);
        }
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        Box::new(self.tracker)
    }

    fn tracker_any(&mut self) -> &mut dyn Any {
        &mut self.tracker
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Remembers what it was told; panics on an allocation of 13 bytes.
    #[derive(Default)]
    struct Log {
        seen: Vec<String>,
    }

    impl Tracker for Log {
        type Token = u64;

        fn alloc(&mut self, a: &Allocation<'_>) -> Option<u64> {
            assert!(a.size != 13, "a tracker that panics");
            self.seen.push(format!("alloc {} {:?} {}", a.id, a.callstack.frames(), a.k));
            (a.size != 7).then_some(a.id * 10)
        }

        fn dealloc(&mut self, token: u64, d: &Deallocation) {
            self.seen.push(format!("free {token} {}", d.id));
        }

        fn after_poll(&mut self, why: Poll) {
            self.seen.push(format!("{why:?}"));
        }
    }

    /// An allocation of sample `id` (`size` bytes at `addr`, two points).
    fn alloc(id: u64, size: usize, addr: usize) -> WireEvent {
        WireEvent::Alloc(crate::engine::queue::AllocEvent {
            epoch: 1,
            id,
            thread: 1,
            label: 0,
            time: 0,
            addr,
            size,
            k: 2,
            truncated: false,
            stack: crate::engine::queue::StackRef::Here,
        })
    }

    /// The death of sample `id`'s block.
    fn death(id: u64) -> WireEvent {
        WireEvent::Death(crate::engine::queue::DeathEvent {
            epoch: 1,
            id,
            stack: 0,
            alloc_time: 0,
            time: 0,
            size: 0,
            k: 0,
        })
    }

    /// Frees whose allocations never come (a shared table scribbled over) are let go
    /// past a bound, oldest first.
    #[test]
    fn lost_frees_that_never_match_are_bounded() {
        let mut d = Driver::new(Log::default());
        let junk: Vec<(u64, u64)> = (0..MAX_WAITING_FREES as u64 + 10).map(|i| (i, 0)).collect();
        d.lost_frees(&junk);
        assert_eq!(d.waiting_frees.len(), MAX_WAITING_FREES);
        assert_eq!(d.waiting_frees[0].0, 10, "the oldest went first");
    }

    /// A free the queue kept aside waits for its block's allocation, then ends the block.
    #[test]
    fn a_lost_free_waits_for_its_allocation() {
        let mut d = Driver::new(Log::default());
        d.lost_frees(&[(5, 100)]);
        assert!(d.tracker.seen.is_empty(), "{:?}", d.tracker.seen);
        d.event(&alloc(5, 8, 0x10), &[1], 8.0);
        d.lost_frees(&[]);
        assert_eq!(d.tracker.seen, ["alloc 5 [1] 2", "free 50 5"]);
        assert!(d.tokens.is_empty());
        assert_eq!(d.replayed, 1);
        d.lost_frees(&[]);
        assert_eq!(d.tracker.seen.len(), 2, "replayed once");
    }

    #[test]
    fn tokens_follow_a_block_from_its_allocation_to_its_free() {
        let mut d = Driver::new(Log::default());
        let panics = CALLBACK_PANICS.load(Ordering::Relaxed);
        d.event(&alloc(1, 100, 0x10), &[0xa, 0xb], 8.0);
        // Not tracked (the tracker returned None): its free is not delivered.
        d.event(&alloc(2, 7, 0x30), &[], 8.0);
        d.event(&death(2), &[], 8.0);
        // A panicking callback is caught and counted; the block is not tracked.
        d.event(&alloc(3, 13, 0x50), &[], 8.0);
        d.event(&death(3), &[], 8.0);
        d.event(&death(1), &[], 8.0);
        d.after_poll(Poll::BeforeExec);
        assert!(CALLBACK_PANICS.load(Ordering::Relaxed) > panics);
        assert!(d.tokens.is_empty());
        assert_eq!(
            d.tracker.seen,
            ["alloc 1 [10, 11] 2", "alloc 2 [] 2", "free 10 1", "BeforeExec",]
        );
    }

    #[test]
    fn only_periodic_polls_are_unforced() {
        assert!(!Poll::Periodic.is_forced());
        for why in [Poll::Sync, Poll::BeforeUnload, Poll::BeforeExec, Poll::BeforeQuickExit] {
            assert!(why.is_forced(), "{why:?}");
        }
    }
}
