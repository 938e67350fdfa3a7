//! The sample path's way out: the session's queue and the pushes into it. A push that finds
//! the queue full waits, with backpressure on, for room while the consumer is there (see
//! `sample_path` §1 for when it does not wait at all); a free that still does not fit is kept in
//! the queue's table of lost frees for the consumer to replay (`queue` §3). Never
//! allocates, never panics, keeps errno. Below the live table, which reports the deaths of
//! the frees a signal handler deferred through [`push_death`] (`live` §4).
//!
//! # 1. Waiting for room
//! A waiting producer sleeps on the queue's room word (a futex, `queue` §5), never polls,
//! and wakes when the consumer has drained, or every [`LOOK_EVERY_NS`] to look at the
//! consumer. Under a seccomp filter (`sys::seccomp`: one is on, or the sleep came back
//! refused) it makes no system call: it spins (`core::hint::spin_loop`) between its tries
//! instead, without registering as a sleeper. It gives up only when nobody will make room:
//! - the session stopped, or backpressure is off ([`WAIT_WHEN_FULL`], cleared by
//!   [`stop_waiting`], which wakes every sleeper);
//! - the consumer is another process ([`CONSUMER`], `memprof record`'s or `attach`'s
//!   collector) that no longer exists, or that refused the ring (a preload library of
//!   another version), as `consumer` tells: a fresh heartbeat says it lives, a stale one
//!   makes the process look the collector up (at most every [`LOOK_EVERY_NS`]), and under a
//!   filter the heartbeat alone speaks, with a long bound;
//! - the consumer has taken nothing for [`crate::config::BACKPRESSURE_WAIT_MS`] while
//!   the event it takes next is claimed and not published (a producer stuck inside its
//!   push: a signal handler that interrupted its own thread's push in the one instruction
//!   before the slot names its thread, `queue` §2), or, for a consumer in this process (the
//!   drain thread), whatever holds it up: it may wait for a lock the waiting thread holds
//!   (a tracker's callback, the loader's lock), which no wait ends. A collector in another
//!   process takes no lock of the program's, so only the first case applies to it. A
//!   consumer found stuck so is remembered ([`STUCK_AT`]): later pushes into that queue
//!   drop at once while it stays where it was, instead of each waiting the bound anew.
//!
//! The consumer is looked at before each sleep, not only after: once it is gone, every
//! push into the full queue comes this way and must drop without sleeping.
//!
//! # 2. When a sampled block's life starts and ends
//! A sampled block counts in the live heap, with a sample point's weight, from its event's
//! time to its death's. Anything that holds up the sample path *after* the allocation's
//! clock reading and before the program gets the block lengthens the sampled block's life
//! and no other's, so the live estimate and the peak read high: under 500 threads on two
//! cores a thread is preempted for up to seconds, and one sampled block held up so counts
//! half a mebibyte for all that time while the program's own count has not seen its few
//! hundred bytes yet. The calibration suite's churn showed peaks at twice the truth, the
//! blocks behind them being mostly threads' first samples (their paths are the slowest). So
//! the allocation is stamped again ([`restamped`]) when it was held up by more than
//! [`HELD_UP`] since its first reading: in the queue, with the slot claimed and its frames
//! written, just before the slot is published, so that a wait for a table shard's lock, a
//! preemption in the copy, or a wait for room (which reads the clock again at each try)
//! all count as the profiler's time, not the block's. What is left after the publication is
//! a few instructions. A free is stamped at its start, before the table's lock
//! (`live::Freed`), for the same reason the other way round. In a session that names
//! frees by address no table keeps the allocation's reading, and its event is stamped at
//! the publication only ([`push_alloc_stamped`]): one clock reading instead of two.

use crate::engine::clock::{self, monotonic_ns};
use crate::engine::consumer::{consumer_alive, CONSUMER, LOOK_EVERY_NS};
use crate::engine::entry::Entry;
use crate::engine::queue::{AllocEvent, FreeEvent, Queue, WireEvent};
use crate::sys::errno::SavedErrno;
use crate::sys::seccomp;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// The session's queue (null: none yet). Queues are leaked, never freed.
pub(crate) static QUEUE: AtomicPtr<Queue> = AtomicPtr::new(core::ptr::null_mut());
/// A free that finds the queue full goes to its table at once instead of waiting (a sampled
/// session: `queue` §3).
pub(crate) static DEFER_FREES: AtomicBool = AtomicBool::new(false);
/// Backpressure is on and a consumer runs: a full queue is worth waiting for (§1).
pub(crate) static WAIT_WHEN_FULL: AtomicBool = AtomicBool::new(false);
/// Ends every wait for room (§1): the session stops, or its consumer goes. Sleepers are
/// woken and give up; later pushes into a full queue do not wait.
pub(crate) fn stop_waiting() {
    WAIT_WHEN_FULL.store(false, Ordering::Relaxed);
    if let Some(q) = queue() {
        q.wake_all();
    }
}

/// A seccomp filter is being installed (`sys::seccomp` §2): the profiler makes no more
/// avoidable system calls, and the queue's consumer, which could no longer be woken, is
/// asked to poll it (`queue` §6). Returns whether the process was marked before (for
/// `sys::seccomp::install_failed`).
pub fn seccomp_installing() -> bool {
    let before = seccomp::installing();
    if let Some(q) = queue() {
        q.consumer_must_poll();
    }
    before
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
pub(crate) fn push(q: &Queue, event: WireEvent, frames: &[usize]) -> bool {
    q.try_push(event, frames) || push_full(q, &event, frames).is_some()
}

/// [`push`] for an allocation: the clock reading its event was pushed with (a later one
/// than `event`'s after a wait for room, see [`retimed`]), `None` when it was lost.
#[inline(always)]
pub(crate) fn push_alloc(q: &Queue, event: AllocEvent, frames: &[usize]) -> Option<u64> {
    push_alloc_as(q, event, frames, restamped)
}

/// An allocation's push, its event made by `stamp` just before its publication.
#[inline(always)]
fn push_alloc_as(
    q: &Queue,
    event: AllocEvent,
    frames: &[usize],
    stamp: impl FnOnce(WireEvent) -> WireEvent,
) -> Option<u64> {
    let event = WireEvent::Alloc(event);
    if let Some(time) = q.try_push_stamped(event, frames, stamp) {
        return Some(time);
    }
    push_full(q, &event, frames)
}

/// [`push_alloc`] of an allocation whose event takes its clock reading when it is
/// published, whatever its `time` says: in a session that names frees by address the
/// event's reading is the allocation's only one (no live table keeps it), and read there
/// it is read once, where [`restamped`] reads the clock a second time to tell whether the
/// thread was held up (§2). A reading costs more than a tenth of an exact-mode push on
/// this kind of machine (a virtual machine's TSC).
#[inline(always)]
pub(crate) fn push_alloc_stamped(q: &Queue, event: AllocEvent, frames: &[usize]) -> Option<u64> {
    push_alloc_as(q, event, frames, |e| retimed(&e))
}

/// Clock units (TSC ticks or nanoseconds: 30 to 100 µs) by which a thread on the sample path
/// may be held up, between the allocation's first clock reading and its event's
/// publication, before the event is stamped again (§2).
const HELD_UP: u64 = 100_000;

/// The event as published: an allocation's stamped again when its thread was held up
/// since its first reading (§2); any other as it is. Called by the queue with the slot
/// claimed and its frames written, just before the slot is published.
#[inline(always)]
fn restamped(event: WireEvent) -> WireEvent {
    let WireEvent::Alloc(a) = event else {
        return event;
    };
    let now = clock::now();
    match now.saturating_sub(a.time) > HELD_UP {
        true => WireEvent::Alloc(AllocEvent { time: now, ..a }),
        false => event,
    }
}

/// [`push`] when the queue is full: the time of the event pushed.
#[cold]
#[inline(never)]
fn push_full(q: &Queue, event: &WireEvent, frames: &[usize]) -> Option<u64> {
    // The clock and the sleep below may set errno; the sample path keeps it.
    let saved = SavedErrno::save();
    let pushed = push_waiting(q, event, frames);
    saved.restore();
    pushed
}

/// The event as pushed after a wait for room. An allocation's time is when its program
/// gets the block: a wait here for room is the profiler's, and counted in the block's life
/// it would make a block freed at once look milliseconds old. So its time is read again at
/// each try (a free's stays when the program let go of the block). Also the one stamp of
/// an exact-mode allocation ([`push_alloc_stamped`]), on the sample path: inlined.
#[inline(always)]
fn retimed(e: &WireEvent) -> WireEvent {
    match *e {
        WireEvent::Alloc(a) => WireEvent::Alloc(AllocEvent { time: clock::now(), ..a }),
        other => other,
    }
}

fn push_waiting(q: &Queue, event: &WireEvent, frames: &[usize]) -> Option<u64> {
    // The free of a block the consumer never heard of: nothing to wait or keep room for.
    if frees_a_lost_block(event) {
        return Some(event.time());
    }
    // A free does not wait: the table takes it at once and the consumer replays it at its
    // own time, where a wait would leave its block live in the profile's stream for as long
    // as this thread then took to run again (`queue` §3).
    if event.is_free() && DEFER_FREES.load(Ordering::Relaxed) && q.defer_free(event) {
        return Some(event.time());
    }
    // A signal handler whose thread's own push holds the consumer up: no wait frees room.
    if WAIT_WHEN_FULL.load(Ordering::Relaxed) && !q.waits_for_me() {
        let waiting = || WAIT_WHEN_FULL.load(Ordering::Relaxed) && consumer_alive();
        if let Some(time) = wait_for_room(q, event, frames, &Wait::new(), waiting) {
            return Some(time);
        }
    }
    let last = retimed(event);
    if q.push(&last, frames) {
        return Some(last.time());
    }
    // A free that did not fit: kept for the consumer to replay, so that its block does not
    // stay live forever in the profile (`queue` §3).
    if event.is_free() {
        q.keep_lost_free(event);
    }
    None
}

/// Pushes an event from outside the allocator (a side event of the agent's, for the
/// collector), waiting for room while the consumer lives, backpressure or not (§1). False
/// when it was dropped (counted as lost).
pub(crate) fn push_patiently(q: &Queue, event: &WireEvent, frames: &[usize]) -> bool {
    if q.try_push(*event, frames) {
        return true;
    }
    if !q.waits_for_me() && wait_for_room(q, event, frames, &Wait::new(), consumer_alive).is_some()
    {
        return true;
    }
    q.push(event, frames)
}

/// How a producer waits for room (§1).
struct Wait {
    /// The longest sleep before it looks at the consumer again (0: no limit).
    look_ns: u64,
    /// How long the consumer may take nothing while held up before the wait ends.
    stuck_ns: u64,
    /// The consumer is in this process: held up by anything, it may be held up for good.
    local: bool,
    /// Spin instead of sleeping even when no seccomp filter was seen (tests: the mark is
    /// process-wide).
    spin: bool,
}

impl Wait {
    /// A producer's wait: the consumer looked at every [`LOOK_EVERY_NS`], found stuck after
    /// [`crate::config::BACKPRESSURE_WAIT_MS`].
    fn new() -> Wait {
        let stuck_ns = crate::config::BACKPRESSURE_WAIT_MS.saturating_mul(1_000_000);
        let local = CONSUMER.load(Ordering::Relaxed).is_null();
        Wait { look_ns: LOOK_EVERY_NS, stuck_ns, local, spin: false }
    }
}

/// Waits for room that slept at least once, and that spun (§1), since the process began:
/// what `MEMPROF_TEST_WAITS` has the agent print at exit, for tests that must know which
/// way a program waited.
static WAITS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Waits for room so far: (slept, spun).
pub(crate) fn waits() -> (u64, u64) {
    (WAITS[0].load(Ordering::Relaxed), WAITS[1].load(Ordering::Relaxed))
}

/// Pause instructions between two tries of a spinning wait (§1): some microseconds, a
/// small share of a drain's time, so the room a drain makes is taken soon after.
const SPIN_ROUNDS: u32 = 256;

/// Sleeps on the queue's room word (`queue` §5), or spins under a seccomp filter, and
/// retries the push each time the consumer has drained, while `waiting()` holds and the
/// consumer is not stuck (§1). The event's time once pushed.
fn wait_for_room(
    q: &Queue,
    event: &WireEvent,
    frames: &[usize],
    wait: &Wait,
    waiting: impl Fn() -> bool,
) -> Option<u64> {
    let mut head = q.head();
    // A consumer another wait found stuck at this very event is not waited for again
    // (each push would otherwise wait its bound anew).
    if STUCK_AT.load(Ordering::Relaxed) == stuck_key(q, head) {
        return None;
    }
    let mut since = monotonic_ns();
    let mut counted = [false; 2];
    loop {
        // Read each round: a sleep refused by a filter's SECCOMP_RET_ERRNO marks it.
        let spin = wait.spin || seccomp::filtered();
        // Registered before the last try: a drain that makes room after the word was read
        // moves it or wakes this thread (`queue` §5). A spinner neither registers nor is
        // woken (the consumer makes no system call for it).
        let seen = q.room();
        if !spin {
            q.begin_wait();
        }
        let e = retimed(event);
        let pushed = q.try_push_stamped(e, frames, restamped);
        // Looked at before each sleep, not after: once the consumer is gone every push
        // into the full queue comes here, and must not sleep first.
        let given_up = pushed.is_none() && !waiting();
        if pushed.is_some() || given_up {
            if !spin {
                q.end_wait();
            }
            return pushed;
        }
        if !counted[usize::from(spin)] {
            counted[usize::from(spin)] = true;
            WAITS[usize::from(spin)].fetch_add(1, Ordering::Relaxed);
        }
        // A consumer asleep is woken: room comes from its drain (`queue` §6).
        q.wake_consumer();
        if spin {
            seccomp::spin(SPIN_ROUNDS);
        } else {
            q.sleep_for_room(seen, wait.look_ns);
            q.end_wait();
        }
        let e = retimed(event);
        if let Some(time) = q.try_push_stamped(e, frames, restamped) {
            return Some(time);
        }
        let now = monotonic_ns();
        let moved = q.head();
        if moved != head {
            head = moved;
            since = now;
        } else if now.saturating_sub(since) >= wait.stuck_ns && (wait.local || q.held_up()) {
            STUCK_AT.store(stuck_key(q, head), Ordering::Relaxed);
            return None;
        }
    }
}

/// The queue and consumer's position where a wait found it stuck ([`stuck_key`], §1; 0:
/// none): pushes into that full queue drop at once while it stays there.
static STUCK_AT: AtomicUsize = AtomicUsize::new(0);

/// A queue and a position of its consumer in one word (never 0).
fn stuck_key(q: &Queue, head: usize) -> usize {
    (q as *const Queue as usize ^ head.wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as usize)) | 1
}

/// Queues the death, at clock reading `time`, of the sampled block of live-table entry
/// `entry`: the block was freed (also for a free that a signal handler deferred, see
/// [`live`](crate::engine::live) §4).
#[inline(always)]
pub(crate) fn push_death(entry: &Entry, time: u64) {
    let Some(q) = queue() else {
        return;
    };
    push_frameless(q, WireEvent::death(entry, time));
}

/// Slots of [`LOST_AT`].
const LOST_AT_LEN: usize = 4096;

/// Addresses of allocations whose events were lost in a session that names its frees by
/// address (`live` §6), by a hash of the address: a free of one of them that finds the
/// queue full is dropped, not kept in the queue's table of lost frees, whose room is for
/// the frees of blocks the consumer knows (`queue` §3). Lossy: an address written over
/// just keeps its free as any other's. Touched only when an allocation was lost, and then
/// by every allocation until it is cleared ([`LOST_HELD`]).
static LOST_AT: [AtomicUsize; LOST_AT_LEN] = [const { AtomicUsize::new(0) }; LOST_AT_LEN];
/// Allocations put into [`LOST_AT`] since the process began (0: none to look at).
static LOST_HELD: AtomicUsize = AtomicUsize::new(0);

#[inline(always)]
fn lost_slot(addr: usize) -> &'static AtomicUsize {
    &LOST_AT[(crate::sys::hash::address(addr) >> 7) as usize & (LOST_AT_LEN - 1)]
}

/// The event of the allocation at `addr` (a session that names frees by address) was
/// `pushed`, or lost: a lost one's free will be dropped when it does not fit, and a stale
/// mark of the address (a lost block there before this one) is cleared.
#[inline(always)]
pub(crate) fn alloc_by_address_pushed(addr: usize, pushed: bool) {
    if !pushed {
        lost_slot(addr).store(addr, Ordering::Relaxed);
        LOST_HELD.store(1, Ordering::Relaxed);
    } else if LOST_HELD.load(Ordering::Relaxed) != 0 {
        let _ = lost_slot(addr).compare_exchange(addr, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Whether `event` frees a block whose allocation's event was lost (its mark taken).
#[cold]
fn frees_a_lost_block(event: &WireEvent) -> bool {
    let WireEvent::Free(f) = event else {
        return false;
    };
    LOST_HELD.load(Ordering::Relaxed) != 0
        && lost_slot(f.addr)
            .compare_exchange(f.addr, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// Queues the free, at clock reading `time`, of the block at `addr`, named by its address
/// (`live` §6), in session `epoch`.
#[inline(always)]
pub(crate) fn push_unnamed_free(addr: usize, epoch: u64, time: u64) {
    let Some(q) = queue() else {
        return;
    };
    push_frameless(q, WireEvent::Free(FreeEvent { epoch, addr, time }));
}

/// Pushes an event without frames (a death).
#[inline(always)]
pub(crate) fn push_frameless(q: &Queue, event: WireEvent) {
    push(q, event, &[]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::queue::tests::ev;
    use std::time::{Duration, Instant};

    /// A wait as a producer under `memprof record` waits: no bound on a consumer that is
    /// merely slow, and (`look_ns` 0) no timeout that would hide a lost wake-up.
    const PATIENT: Wait = Wait { look_ns: 0, stuck_ns: u64::MAX, local: false, spin: false };

    /// A full queue.
    fn full(capacity: usize) -> Queue {
        let q = Queue::new(capacity, 1).unwrap();
        for i in 0..capacity as u64 {
            assert!(q.push(&ev(i), &[]));
        }
        q
    }

    /// A consumer that drains only after a long pause (a collector stopped, or starved):
    /// every producer sleeps until then, nothing is lost, and the sleepers used no CPU to
    /// speak of while they waited (each thread's first push waits the whole pause; its
    /// own CPU clock is read around it, so other tests running meanwhile do not count).
    #[test]
    fn a_consumer_that_drains_late_loses_nothing() {
        let q = full(4);
        let (threads, each) = (16u64, 50u64);
        let got = AtomicUsize::new(0);
        let first_waits = AtomicU64::new(0);
        std::thread::scope(|s| {
            let producers: Vec<_> = (0..threads)
                .map(|t| {
                    let (q, first_waits) = (&q, &first_waits);
                    s.spawn(move || {
                        for i in 0..each {
                            let id = 1000 + t * each + i;
                            let cpu0 = thread_cpu_ns();
                            assert!(wait_for_room(q, &ev(id), &[], &PATIENT, || true).is_some());
                            if i == 0 {
                                first_waits.fetch_add(thread_cpu_ns() - cpu0, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(300));
            while !producers.iter().all(|p| p.is_finished()) || q.has_unpublished() {
                q.drain(|_, _| {
                    got.fetch_add(1, Ordering::Relaxed);
                });
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        assert_eq!(got.load(Ordering::Relaxed) as u64, 4 + threads * each);
        assert_eq!((q.lost(), q.waiting()), (0, 0));
        // Sixteen threads polling every 50 µs for 300 ms took hundreds of milliseconds.
        let spent = first_waits.load(Ordering::Relaxed);
        assert!(spent < 50_000_000, "the waiters used {spent} ns of CPU while they waited");
    }

    /// A spinning wait (a seccomp filter is on) enters no sleep and allocates nothing: its
    /// thread makes no voluntary context switch (a futex sleep is one) while the consumer
    /// is away, and does not register as a sleeper; it pushes once the consumer drains, and
    /// a consumer gone ends the next one at once.
    #[test]
    fn a_spinning_wait_neither_sleeps_nor_allocates() {
        let q = full(4);
        let spin = Wait { spin: true, ..PATIENT };
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let before = voluntary_switches();
                let (pushed, peak) = crate::sys::alloc_count::peak_during(|| {
                    wait_for_room(&q, &ev(9), &[], &spin, || true)
                });
                (pushed.is_some(), peak, voluntary_switches() - before)
            });
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(q.waiting(), 0, "a spinner does not register");
            q.drain(|_, _| {});
            let (pushed, peak, switches) = waiter.join().unwrap();
            assert!(pushed, "pushed once drained");
            assert_eq!((peak, switches), (0, 0), "(bytes allocated, voluntary switches)");
        });
        let full_again = full(2);
        let t0 = Instant::now();
        assert!(wait_for_room(&full_again, &ev(10), &[], &spin, || false).is_none());
        assert!(t0.elapsed() < Duration::from_millis(100));
    }

    /// The calling thread's voluntary context switches so far (its sleeps).
    fn voluntary_switches() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("voluntary_ctxt_switches:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// The calling thread's CPU time so far.
    fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid out pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// A consumer that goes away (`waiting` turns false, as when the collector's process
    /// is found gone or the session stops): the waiter returns at its next look.
    #[test]
    fn a_consumer_gone_ends_the_wait() {
        let q = full(2);
        let gone = AtomicBool::new(false);
        let wait = Wait { look_ns: 200_000_000, ..PATIENT };
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                gone.store(true, Ordering::Relaxed);
            });
            let t0 = Instant::now();
            assert!(
                wait_for_room(&q, &ev(9), &[], &wait, || !gone.load(Ordering::Relaxed)).is_none()
            );
            let waited = t0.elapsed();
            assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(5));
            // Gone: the next push into the full queue does not sleep at all.
            let t1 = Instant::now();
            assert!(
                wait_for_room(&q, &ev(10), &[], &wait, || !gone.load(Ordering::Relaxed)).is_none()
            );
            assert!(t1.elapsed() < Duration::from_millis(100), "{:?}", t1.elapsed());
        });
        assert_eq!(q.waiting(), 0);
    }

    /// Many producers, a queue of two slots and a consumer that drains as fast as it can:
    /// every push goes through, and none sleeps for good (the sleeps have no timeout, so a
    /// lost wake-up would hang a producer: the test fails after a minute instead).
    #[test]
    fn no_wake_up_is_lost_under_many_threads() {
        let q: &'static Queue = Box::leak(Box::new(Queue::new(2, 1).unwrap()));
        let (threads, each) = (32u64, 2_000u64);
        let done = std::sync::Arc::new(AtomicUsize::new(0));
        let got: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        for t in 0..threads {
            let done = done.clone();
            std::thread::spawn(move || {
                for i in 0..each {
                    let id = t * each + i;
                    assert!(wait_for_room(q, &ev(id), &[], &PATIENT, || true).is_some());
                }
                done.fetch_add(1, Ordering::Release);
            });
        }
        let t0 = Instant::now();
        while (got.load(Ordering::Relaxed) as u64) < threads * each {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{} of {} producers done, {} waiting: a wake-up was lost",
                done.load(Ordering::Acquire),
                threads,
                q.waiting()
            );
            if q.drain(|_, _| {
                got.fetch_add(1, Ordering::Relaxed);
            }) == Some(0)
            {
                std::thread::yield_now();
            }
        }
        assert_eq!(q.lost(), 0);
    }

    /// A consumer held up by a slot claimed and never published (a producer stuck inside
    /// its push) is waited for `stuck_ns`, not for ever; one that is merely slow, with the
    /// event it takes next published, is waited for.
    #[test]
    fn a_consumer_held_up_by_an_unpublished_slot_ends_the_wait() {
        let q = Queue::new(4, 1).unwrap();
        q.set_limit(2);
        // A claim never published, at the head: the consumer stops there.
        assert!(q.push(&ev(0), &[]));
        q.drain(|_, _| {}).unwrap();
        crate::engine::queue::tests::claim_without_publishing(&q);
        assert!(q.push(&ev(1), &[]));
        assert!(!q.try_push(ev(2), &[]), "full");
        assert!(q.held_up());
        let wait = Wait { look_ns: 10_000_000, stuck_ns: 300_000_000, local: false, spin: false };
        let t0 = Instant::now();
        assert!(wait_for_room(&q, &ev(3), &[], &wait, || true).is_none());
        assert!(t0.elapsed() >= Duration::from_millis(300));
        // Found stuck there: the next push does not wait its bound again.
        let t1 = Instant::now();
        assert!(wait_for_room(&q, &ev(4), &[], &wait, || true).is_none());
        assert!(t1.elapsed() < Duration::from_millis(150), "{:?}", t1.elapsed());
        // Published and full: a slow consumer, waited for.
        let p = full(2);
        assert!(!p.held_up());
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                p.drain(|_, _| {});
            });
            assert!(wait_for_room(&p, &ev(3), &[], &wait, || true).is_some());
        });
    }
}
