//! The consumer's own sleep, and the producers' way of ending it.
//!
//! # 6. A consumer that sleeps until there is work
//! A consumer in another process (`memprof record`'s collector) does not poll the queue:
//! when a pass found little to do it says that it sleeps ([`Queue::consumer_sleeps`]) and
//! sleeps on a word of the block ([`Ctl::consumer_sleep`], a shared futex), with a timeout
//! for what it does on its own schedule. The word is odd while it sleeps; a producer that
//! sees it odd after publishing its event, and finds [`Ctl::wake_fill`] events waiting
//! or more, moves it on (a compare-and-swap that one producer wins) and wakes the consumer:
//! one system call per sleep, none while the consumer is awake, none while few events wait.
//! A producer that waits for room, the side log's writer waiting for room, and a process
//! that ends or asks for its last look wake it whatever waits ([`Queue::wake_consumer`]).
//!
//! No wake is lost: the producer's claim of its slot and its look at the word, and the
//! consumer's move of the word to odd and its look at the tail, are sequentially
//! consistent. Either the producer sees the word odd (and counts what waits), or the
//! consumer sees the producer's claim in the tail, and does not sleep when that is
//! enough. The head does not move while the consumer sleeps, so what waits only grows.
//!
//! A producer under a seccomp filter (`sys::seccomp`: the wake is a system call the filter
//! may refuse) does not wake the consumer: it marks the queue to be polled
//! ([`Ctl::consumer_poll`]), and the consumer then sleeps only briefly, without saying so.

use super::{Ctl, Queue};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Wakes of a sleeping consumer this process made since it began (§6): what
/// `MEMPROF_TEST_WAITS` has the agent print at exit, for tests that must know the
/// producers woke the collector.
static WAKES: AtomicU64 = AtomicU64::new(0);

/// Wakes of a sleeping consumer so far (§6).
pub(crate) fn consumer_wakes() -> u64 {
    WAKES.load(Ordering::Relaxed)
}

impl Queue {
    /// The consumer is about to sleep until `wake_fill` cells are taken (clamped to the
    /// queue's limit), or a producer wakes it (§6): the value of [`Queue::consumer_word`]
    /// to sleep on while the word holds it (then [`Queue::consumer_awake`]). `None` when it
    /// should not sleep on this queue: that many events are claimed already, or a producer
    /// asked for polling; it is then not marked asleep.
    pub fn consumer_sleeps(&self, wake_fill: usize) -> Option<u32> {
        let c = self.ctl();
        if c.consumer_poll.load(Ordering::Relaxed) != 0 {
            return None;
        }
        let fill = wake_fill.clamp(1, c.limit.load(Ordering::Relaxed).max(1));
        c.wake_fill.store(fill.min(u32::MAX as usize) as u32, Ordering::Relaxed);
        let awake = c.consumer_sleep.load(Ordering::Relaxed) & !1;
        c.consumer_sleep.store(awake | 1, Ordering::SeqCst);
        // Pairs with the producers' claim and their look at the word (§6).
        let waiting = c.tail.load(Ordering::SeqCst).wrapping_sub(c.head.load(Ordering::Relaxed));
        if waiting >= fill {
            self.consumer_awake();
            return None;
        }
        Some(awake | 1)
    }

    /// How many events may wait at a time ([`Queue::set_limit`]).
    pub fn limit(&self) -> usize {
        self.ctl().limit.load(Ordering::Relaxed)
    }

    /// The word the consumer sleeps on (§6).
    pub fn consumer_word(&self) -> &AtomicU32 {
        &self.ctl().consumer_sleep
    }

    /// The consumer is awake again (§6): producers no longer wake it.
    pub fn consumer_awake(&self) {
        let w = &self.ctl().consumer_sleep;
        let seen = w.load(Ordering::Relaxed);
        if seen & 1 != 0 {
            let _ =
                w.compare_exchange(seen, seen.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed);
        }
    }

    /// True once a producer asked the consumer to poll this queue rather than sleep on it
    /// (§6).
    pub fn consumer_polls(&self) -> bool {
        self.ctl().consumer_poll.load(Ordering::Relaxed) != 0
    }

    /// Wakes the consumer if it sleeps, whatever waits (§6): a producer that waits for
    /// room, a process that ends. No allocation; keeps errno.
    pub fn wake_consumer(&self) {
        let seen = self.ctl().consumer_sleep.load(Ordering::SeqCst);
        if seen & 1 != 0 {
            ring(self.ctl(), seen);
        }
    }

    /// After the push of the event at `pos`, with the consumer asleep (`seen`, odd): wakes
    /// it when enough events wait (§6).
    #[cold]
    #[inline(never)]
    pub(super) fn wake_if_filled(&self, pos: usize, seen: u32) {
        let c = self.ctl();
        let waiting = pos.wrapping_add(1).wrapping_sub(c.head.load(Ordering::Relaxed));
        if waiting >= c.wake_fill.load(Ordering::Relaxed) as usize {
            ring(c, seen);
        }
    }

    /// Tells a consumer that cannot be woken to poll this queue (a seccomp filter is being
    /// installed in the producers' process: §6).
    pub fn consumer_must_poll(&self) {
        self.ctl().consumer_poll.store(1, Ordering::Relaxed);
    }
}

/// Moves the consumer's word on from `seen` (odd) and wakes it, when this caller is the
/// one that moved it; under a seccomp filter, asks for polling instead (§6).
fn ring(c: &Ctl, seen: u32) {
    if crate::sys::seccomp::filtered() {
        c.consumer_poll.store(1, Ordering::Relaxed);
        return;
    }
    let w = &c.consumer_sleep;
    if w.compare_exchange(seen, seen.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed).is_ok() {
        WAKES.fetch_add(1, Ordering::Relaxed);
        let saved = crate::sys::errno::SavedErrno::save();
        crate::sys::futex::wake(w, 1);
        saved.restore();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::queue::tests::ev;

    /// A consumer asleep is woken once, by the push that makes `wake_fill` events wait, and
    /// not by the pushes before it; a consumer awake is never woken; one that finds enough
    /// waiting does not sleep.
    #[test]
    fn the_consumer_is_woken_once_enough_waits() {
        let q = Queue::new(64, 1).unwrap();
        let word = q.consumer_sleeps(4).expect("nothing waits");
        assert_eq!(word & 1, 1);
        for i in 0..3 {
            assert!(q.push(&ev(i), &[]));
            assert_eq!(q.consumer_word().load(Ordering::Relaxed), word, "3 wait: still asleep");
        }
        assert!(q.push(&ev(3), &[]));
        assert_eq!(q.consumer_word().load(Ordering::Relaxed), word + 1, "woken by the 4th");
        assert!(q.push(&ev(4), &[]));
        assert_eq!(q.consumer_word().load(Ordering::Relaxed), word + 1, "once");
        q.consumer_awake();
        assert_eq!(q.consumer_word().load(Ordering::Relaxed), word + 1);
        assert!(q.consumer_sleeps(4).is_none(), "5 wait: no sleep");
        assert_eq!(q.consumer_word().load(Ordering::Relaxed) & 1, 0);
        q.drain(|_, _| {});
        let word = q.consumer_sleeps(4).unwrap();
        q.wake_consumer();
        assert_eq!(q.consumer_word().load(Ordering::Relaxed), word + 1, "woken whatever waits");
    }

    /// A consumer sleeping on the word is woken by the push that fills the queue enough,
    /// from another thread, and sleeps no longer than that.
    #[test]
    fn a_sleeping_consumer_is_woken_by_a_push() {
        let q = Queue::new(64, 1).unwrap();
        let word = q.consumer_sleeps(8).unwrap();
        let t0 = std::time::Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                for i in 0..8 {
                    assert!(q.push(&ev(i), &[]));
                }
            });
            while q.consumer_word().load(Ordering::Acquire) == word {
                crate::sys::futex::wait(q.consumer_word(), word, 10_000_000_000);
            }
        });
        let took = t0.elapsed();
        assert!(took.as_millis() >= 50 && took.as_secs() < 5, "{took:?}");
    }
}
