//! The sample path's way out: the session's queue and the pushes into it. A push that finds
//! the queue full waits, with backpressure on, a bounded time for room (see `hot` §1 for
//! when it does not wait at all); a free that still does not fit is kept in the queue's
//! table of lost frees for the consumer to replay (`queue` §3). Never allocates, never
//! panics, keeps errno. Below the live table, which reports the deaths of the frees a
//! signal handler deferred through [`push_death`] (`live` §4).

use crate::engine::clock::{self, monotonic_ns};
use crate::engine::live::Entry;
use crate::engine::queue::{Event, EventKind, Queue};
use crate::sys::errno::SavedErrno;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// The session's queue (null: none yet). Queues are leaked, never freed.
pub(crate) static QUEUE: AtomicPtr<Queue> = AtomicPtr::new(core::ptr::null_mut());
/// Backpressure is on and a drain thread runs: a full queue is worth waiting for.
pub(crate) static WAIT_WHEN_FULL: AtomicBool = AtomicBool::new(false);
/// When another process consumes the queue (`memprof record`'s collector): its heartbeat
/// (a [`monotonic_ns`] reading it renews every few milliseconds), so that a full queue is
/// waited for only while it lives. Null: the consumer is in this process.
pub(crate) static HEARTBEAT: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
/// A heartbeat older than this: the consumer is gone (see `record/ring.rs` §4).
pub(crate) const STALE_NS: u64 = 500_000_000;

/// True unless the queue's consumer is in another process that has stopped renewing its
/// heartbeat.
pub(crate) fn consumer_alive() -> bool {
    let beat = HEARTBEAT.load(Ordering::Relaxed);
    // SAFETY: a non-null heartbeat points into a shared mapping that is never unmapped
    // while sampling may push (see `record/ring.rs`).
    match unsafe { beat.as_ref() } {
        None => true,
        Some(b) => monotonic_ns().saturating_sub(b.load(Ordering::Relaxed)) < STALE_NS,
    }
}

/// The session queue, when one exists.
#[inline]
pub(crate) fn queue() -> Option<&'static Queue> {
    let q = QUEUE.load(Ordering::Acquire);
    // SAFETY: queues are leaked, never freed (see queue.rs §4), so a non-null pointer
    // stays valid for the life of the process.
    unsafe { q.as_ref() }
}

/// Pushes an event; with backpressure on, waits a bounded time for room in a full
/// queue. No allocation, no lock held while waiting. Inlined, so that the event's
/// fields go straight from registers into the slot (see [`Queue::try_push`]).
#[inline(always)]
pub(crate) fn push(q: &Queue, event: Event, frames: &[usize]) -> bool {
    q.try_push(event, frames) || push_full(q, &event, frames).is_some()
}

/// [`push`] for an allocation: the clock reading its event was pushed with (a later one
/// than `event`'s after a wait for room, see [`retimed`]), `None` when it was lost.
#[inline(always)]
pub(crate) fn push_alloc(q: &Queue, event: Event, frames: &[usize]) -> Option<u64> {
    if q.try_push(event, frames) {
        return Some(event.time_ns);
    }
    push_full(q, &event, frames)
}

/// [`push`] when the queue is full: the time of the event pushed.
#[cold]
#[inline(never)]
fn push_full(q: &Queue, event: &Event, frames: &[usize]) -> Option<u64> {
    // The clock and the sleep below may set errno; the sample path keeps it.
    let saved = SavedErrno::save();
    let pushed = push_waiting(q, event, frames);
    saved.restore();
    pushed
}

/// The event as pushed after a wait for room. An allocation's time is when its program
/// gets the block: a wait here for room is the profiler's, and counted in the block's life
/// it would make a block freed at once look milliseconds old. So its time is read again at
/// each try (a free's stays when the program let go of the block).
fn retimed(e: &Event) -> Event {
    match e.kind {
        EventKind::Alloc => Event { time_ns: clock::now(), ..*e },
        _ => *e,
    }
}

fn push_waiting(q: &Queue, event: &Event, frames: &[usize]) -> Option<u64> {
    // A signal handler whose thread's own push holds the consumer up: no wait frees room.
    if WAIT_WHEN_FULL.load(Ordering::Relaxed) && !q.waits_for_me() {
        let wait_ns = crate::config::BACKPRESSURE_WAIT_MS.saturating_mul(1_000_000);
        let waiting = || WAIT_WHEN_FULL.load(Ordering::Relaxed) && consumer_alive();
        if let Some(time) = wait_for_room(q, event, frames, wait_ns, waiting) {
            return Some(time);
        }
    }
    let last = retimed(event);
    if q.push(&last, frames) {
        return Some(last.time_ns);
    }
    // A free that did not fit: kept for the consumer to replay, so that its block does not
    // stay live forever in the profile (`queue` §3).
    if event.kind == EventKind::Dealloc {
        q.keep_lost_free(event);
    }
    None
}

/// Retries the push into a full queue every 50 µs while `waiting()` holds, until the
/// consumer has made no progress for `wait_ns`: the deadline restarts whenever the
/// consumer's head moves, so a thread that other producers beat to the room a busy
/// consumer frees is not taken for one facing a stuck consumer. The event's time once
/// pushed.
fn wait_for_room(
    q: &Queue,
    event: &Event,
    frames: &[usize],
    wait_ns: u64,
    waiting: impl Fn() -> bool,
) -> Option<u64> {
    let mut head = q.head();
    let mut deadline = monotonic_ns().saturating_add(wait_ns);
    while waiting() {
        let now = monotonic_ns();
        let moved = q.head();
        if moved != head {
            head = moved;
            deadline = now.saturating_add(wait_ns);
        } else if now >= deadline {
            return None;
        }
        let pause = libc::timespec { tv_sec: 0, tv_nsec: 50_000 };
        // SAFETY: `pause` is a valid timespec; a null remainder is allowed.
        unsafe { libc::nanosleep(&pause, core::ptr::null_mut()) };
        let e = retimed(event);
        if q.try_push(e, frames) {
            return Some(e.time_ns);
        }
    }
    None
}

/// Queues the death, at clock reading `time`, of the sampled block of live-table entry
/// `entry`: the block was freed (also for a free that a signal handler deferred, see
/// [`live`](crate::engine::live) §4).
#[inline(always)]
pub(crate) fn push_death(entry: &Entry, time: u64) {
    let Some(q) = queue() else {
        return;
    };
    push_frameless(q, Event::death(entry, time));
}

/// Pushes an event without frames (a death).
#[inline(always)]
pub(crate) fn push_frameless(q: &Queue, event: Event) {
    push(q, event, &[]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::queue::tests::ev;

    /// A consumer that drains every 20 ms, and for the first second refills each slot it
    /// frees at once (from its callback, before the waiting thread, which retries every
    /// 50 µs, can see it): the waiting thread waits on for 1 s, five times its deadline,
    /// because the consumer moves, and gets its slot once the refilling stops. A deadline
    /// that never restarts gives up at 200 ms. A false failure needs the consumer to pause
    /// for 200 ms between two drains.
    #[test]
    fn a_busy_consumer_restarts_the_deadline() {
        let q = Queue::new(2, 1).unwrap();
        assert!(q.push(&ev(0), &[]) && q.push(&ev(1), &[]));
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let t0 = std::time::Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    let refill = t0.elapsed() < std::time::Duration::from_secs(1);
                    q.drain(|_, _| {
                        if refill {
                            let _ = q.try_push(ev(2), &[]);
                        }
                    });
                }
            });
            let t0 = std::time::Instant::now();
            let pushed = wait_for_room(&q, &ev(3), &[], 200_000_000, || true);
            let waited = t0.elapsed();
            stop.store(true, Ordering::Relaxed);
            assert!(pushed.is_some(), "gave up after {waited:?}");
        });
    }

    /// Without a consumer, the wait ends at the deadline.
    #[test]
    fn a_stuck_consumer_ends_the_wait() {
        let q = Queue::new(2, 1).unwrap();
        assert!(q.push(&ev(0), &[]) && q.push(&ev(1), &[]));
        let t0 = std::time::Instant::now();
        assert!(wait_for_room(&q, &ev(3), &[], 50_000_000, || true).is_none());
        assert!(t0.elapsed().as_millis() >= 50);
    }
}
