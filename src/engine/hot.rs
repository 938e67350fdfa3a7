//! The sample path past the sampler: a sampled allocation's call stack, queue event and
//! live-table entry, and the events of a sampled block's death or move. Never allocates
//! through the profiled allocator, never blocks on a user-held lock, never panics, keeps
//! errno. The session ([`crate::session`]) sets the state here at its start and stop.
//!
//! # 1. Reentrancy
//! A signal handler may allocate on a thread that is inside this path. The sampler refuses
//! a sample while its thread is in the sample path (the busy flag, see
//! [`sampler`](crate::engine::sampler) §4), the live table refuses an insertion into a shard
//! its thread holds and defers a removal from one ([`live`] §4), the queue's push is
//! lock-free, and nothing here takes a lock of glibc's (the table grows into `mmap`ed
//! pages, deep stacks go into `mmap`ed buffers). A push that finds the queue full does not
//! wait for room when the consumer waits for a slot its own thread claimed (a handler that
//! interrupted a push: see `queue`). A sample refused for reentrancy is counted
//! as a lost event ([`skipped`]); nothing ever waits for
//! its own thread. A wait for room ends after [`crate::config::BACKPRESSURE_WAIT_MS`]
//! without the consumer taking an event (it restarts whenever the consumer's head moves),
//! or at once when the consumer is gone; a free refused then is kept in the queue's table
//! of lost frees for the consumer to replay (`queue` §3).
//!
//! # 2. Moves are coalesced
//! A block that keeps its sample through `realloc` used to cost one queued event, and two
//! live-table round trips, per call: a loop that resizes one long-lived sampled block
//! millions of times wrote a move record for each. No report needs them: a profile's
//! aggregates (live bytes by stack and size, the heap series, the peak) count a sample's
//! `k × interval` bytes from its allocation to its free, and a move changes neither end;
//! only the number of move records is shown. So a move queues an event at most once per
//! block between two samples of its thread (or two in-process drains), carrying the
//! block's address and size then: each thread remembers the last few blocks it queued a
//! move for ([`MoveMemo`], keyed by address) and the generation then ([`move_gen`]: the
//! thread's next sample id and the drains so far), and a move of one of them in the same
//! generation queues nothing. A loop that resizes one block queues about one move per
//! sample, not one per call. A resize in place then costs a filter load and the memo's
//! compare; only a block that glibc really moved is re-keyed in the table (`alloc` §4). In the exact mode every reallocation is a new sample (every byte is a
//! sample point), so there are no moves, and its numbers stay exact.

use crate::engine::callstack::{self, Captured};
use crate::engine::clock::{self, monotonic_ns};
use crate::engine::live::{self, Entry, Insert};
use crate::engine::queue::{Event, EventKind, Queue};
use crate::engine::sampler::{Busy, Hit};
use crate::sys::errno::SavedErrno;
use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// The session's queue (null: none yet). Queues are leaked, never freed.
pub(crate) static QUEUE: AtomicPtr<Queue> = AtomicPtr::new(core::ptr::null_mut());
/// The session's call-stack depth.
pub(crate) static DEPTH: AtomicUsize = AtomicUsize::new(0);
/// Sampled blocks that the live table could not follow: no memory for them, or a signal
/// handler's free or move of a block whose shard its own thread held (its death is then
/// never seen, or reported early).
pub(crate) static UNTRACKED: AtomicU64 = AtomicU64::new(0);
/// In-process drains so far: part of a remembered move's generation (§2).
pub(crate) static MOVE_GEN: AtomicU64 = AtomicU64::new(1);

/// Blocks a thread remembers having queued a move for (a power of two).
const MEMO: usize = 4;

/// A thread's last moves (§2): the block's address and the generation of its move event
/// ([`move_gen`]), direct-mapped by address. Zeroed (nothing remembered) when the thread
/// starts.
pub(crate) struct MoveMemo {
    addr: [Cell<usize>; MEMO],
    gen: [Cell<u64>; MEMO],
}

/// The generation a remembered move belongs to: it changes at every in-process drain
/// ([`MOVE_GEN`]) and at every sample of this thread (its next sample id), so a block's
/// move is news again after either.
#[inline(always)]
fn move_gen() -> u64 {
    MOVE_GEN.load(Ordering::Relaxed) ^ crate::engine::sampler::next_id().rotate_left(32)
}

crate::sys::tls::thread_block! {
    /// This thread's [`MoveMemo`].
    fn move_memo() -> MoveMemo = MoveMemo {
        addr: [const { Cell::new(0) }; MEMO],
        gen: [const { Cell::new(0) }; MEMO],
    }, "memprof_0_1_move_memo"
}

/// Was a move of the block at `addr` queued by this thread since the last drain? (The
/// inlined test of [`moved_in_place`]: a resize in place that finds its block here costs
/// nothing more.)
#[inline(always)]
pub(crate) fn move_queued_here(addr: usize) -> bool {
    // SAFETY: `move_memo()` is this thread's block, valid until the thread exits; the
    // reference never leaves this call and every field is a cell.
    let memo = unsafe { &*move_memo() };
    let i = (addr >> 4) & (MEMO - 1);
    memo.addr[i].get() == addr && memo.gen[i].get() == move_gen()
}

/// Was a move of the block at `addr` queued since the last drain? Remembers that one is
/// now, for `now_at` (the block's address from here on) when it was not.
#[inline(always)]
fn move_queued(addr: usize, now_at: usize) -> bool {
    // SAFETY: `move_memo()` is this thread's block, valid until the thread exits; the
    // reference never leaves this call and every field is a cell.
    let memo = unsafe { &*move_memo() };
    let gen = move_gen();
    let i = (addr >> 4) & (MEMO - 1);
    if memo.addr[i].get() == addr && memo.gen[i].get() == gen {
        if now_at != addr {
            memo.addr[i].set(0);
            remember(memo, now_at, gen);
        }
        return true;
    }
    remember(memo, now_at, gen);
    false
}

#[inline(always)]
fn remember(memo: &MoveMemo, addr: usize, gen: u64) {
    let i = (addr >> 4) & (MEMO - 1);
    memo.addr[i].set(addr);
    memo.gen[i].set(gen);
}

/// Counts a sample skipped for reentrancy (§1) as a lost event of the session's queue
/// (which `memprof record`'s collector reads from outside the process).
#[cold]
#[inline(never)]
pub(crate) fn skipped() {
    if let Some(q) = queue() {
        q.note_lost();
    }
}
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

/// Records a sampled allocation: capture, queue, live table. Never allocates through
/// the profiled allocator, never blocks on a user-held lock, never panics, keeps errno.
#[cold]
#[inline(never)]
pub(crate) fn record_alloc(addr: usize, size: usize, hit: Hit) {
    record_alloc_at(addr, size, hit, None)
}

/// [`record_alloc`] with the program's registers at the allocator's entry, when the
/// allocator knows them (`(sp, bp)`, see [`callstack::capture_at_entry`]).
#[cold]
#[inline(never)]
pub(crate) fn record_alloc_at(addr: usize, size: usize, hit: Hit, entry: Option<(usize, usize)>) {
    record_alloc_inline(addr, size, hit, entry)
}

/// [`record_alloc_at`], inlined: for a caller that is a slow path already (the preload
/// library's `malloc` once its countdown ran out).
#[inline(always)]
pub(crate) fn record_alloc_inline(
    addr: usize,
    size: usize,
    hit: Hit,
    entry: Option<(usize, usize)>,
) {
    let Some(_busy) = Busy::enter_sampling() else {
        skipped();
        return;
    };
    let saved = SavedErrno::save();
    if let Some(q) = queue() {
        let mut frames = Captured::new();
        let depth = DEPTH.load(Ordering::Relaxed).min(q.depth());
        let caller = record_alloc_at as *const () as usize;
        match entry {
            Some((sp, bp)) => {
                if !callstack::replay_at_entry(&mut frames, depth, sp, bp) {
                    callstack::capture_at_entry(&mut frames, depth, caller, sp, bp)
                }
            }
            None => callstack::capture(&mut frames, depth, caller),
        }
        let id = hit.id;
        let event = Event {
            kind: EventKind::Alloc,
            epoch: hit.epoch,
            id,
            thread: hit.thread,
            // The one thread-local word the sample path reads for the span (label.rs).
            label: crate::engine::label::current(),
            time_ns: clock::now(),
            addr,
            size,
            k: hit.k,
            truncated: frames.truncated(),
        };
        // The live-table entry goes in before the event: its lock's exchange is a full
        // fence, which after the slot's ~200 bytes of stores would wait for all of them
        // to drain. The block cannot be freed before this returns, so the order is free.
        match live::insert(addr, Entry::new(id, hit.epoch)) {
            Insert::Reentrant => skipped(),
            tracked => {
                if !push(q, event, frames.frames()) {
                    // Lost event: no dealloc event must follow for it either.
                    if tracked == Insert::Done {
                        live::remove(addr);
                    }
                } else if tracked == Insert::NoMemory {
                    UNTRACKED.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    saved.restore();
}

/// Pushes an event; with backpressure on, waits a bounded time for room in a full
/// queue. No allocation, no lock held while waiting. Inlined, so that the event's
/// fields go straight from registers into the slot (see [`Queue::try_push`]).
#[inline(always)]
fn push(q: &Queue, event: Event, frames: &[usize]) -> bool {
    q.try_push(event, frames) || push_full(q, &event, frames)
}

/// [`push`] when the queue is full.
#[cold]
#[inline(never)]
fn push_full(q: &Queue, event: &Event, frames: &[usize]) -> bool {
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

fn push_waiting(q: &Queue, event: &Event, frames: &[usize]) -> bool {
    // A signal handler whose thread's own push holds the consumer up: no wait frees room.
    if WAIT_WHEN_FULL.load(Ordering::Relaxed) && !q.waits_for_me() {
        let wait_ns = crate::config::BACKPRESSURE_WAIT_MS.saturating_mul(1_000_000);
        let waiting = || WAIT_WHEN_FULL.load(Ordering::Relaxed) && consumer_alive();
        if wait_for_room(q, event, frames, wait_ns, waiting) {
            return true;
        }
    }
    if q.push(&retimed(event), frames) {
        return true;
    }
    // A free that did not fit: kept for the consumer to replay, so that its block does not
    // stay live forever in the profile (`queue` §3).
    if event.kind == EventKind::Dealloc {
        q.keep_lost_free(event.epoch, event.id, event.time_ns);
    }
    false
}

/// Retries the push into a full queue every 50 µs while `waiting()` holds, until the
/// consumer has made no progress for `wait_ns`: the deadline restarts whenever the
/// consumer's head moves, so a thread that other producers beat to the room a busy
/// consumer frees is not taken for one facing a stuck consumer. True once pushed.
fn wait_for_room(
    q: &Queue,
    event: &Event,
    frames: &[usize],
    wait_ns: u64,
    waiting: impl Fn() -> bool,
) -> bool {
    let mut head = q.head();
    let mut deadline = monotonic_ns().saturating_add(wait_ns);
    while waiting() {
        let now = monotonic_ns();
        let moved = q.head();
        if moved != head {
            head = moved;
            deadline = now.saturating_add(wait_ns);
        } else if now >= deadline {
            return false;
        }
        let pause = libc::timespec { tv_sec: 0, tv_nsec: 50_000 };
        // SAFETY: `pause` is a valid timespec; a null remainder is allowed.
        unsafe { libc::nanosleep(&pause, core::ptr::null_mut()) };
        if q.try_push(retimed(event), frames) {
            return true;
        }
    }
    false
}

/// Queues the death of a sampled block. Keeps errno: it reads the clock and pushes,
/// neither of which allocates or touches errno (a full queue's wait restores it, see
/// [`push_full`]), so it needs no errno saved.
#[cold]
#[inline(never)]
pub(crate) fn record_free(entry: Entry) {
    record_free_inline(entry)
}

/// [`record_free`], inlined: for a caller that is a slow path already (the preload
/// library's `free` of a block whose filter counter is set).
#[inline(always)]
pub(crate) fn record_free_inline(entry: Entry) {
    record_death(entry, clock::now())
}

/// Queues the death, at clock reading `time`, of a sampled block (also for a free that a
/// signal handler deferred, see [`live`] §4).
#[inline(always)]
pub(crate) fn record_death(entry: Entry, time: u64) {
    let Some(q) = queue() else {
        return;
    };
    let event = Event {
        kind: EventKind::Dealloc,
        epoch: entry.epoch,
        id: entry.id,
        thread: 0,
        label: 0,
        time_ns: time,
        addr: 0,
        size: 0,
        k: 0,
        truncated: false,
    };
    push_frameless(q, event);
}

/// Pushes an event without frames (a death or a move).
#[inline(always)]
fn push_frameless(q: &Queue, event: Event) {
    push(q, event, &[]);
}

/// A block that may be sampled (its filter counter is set) was resized in place to `size`
/// bytes and keeps its sample, if it has one: its entry is still right, and a move event is
/// queued unless one was since the last drain (§2). The caller tests
/// [`move_queued_here`] first.
#[cold]
#[inline(never)]
pub(crate) fn moved_in_place(addr: usize, size: usize) {
    if move_queued(addr, addr) {
        return;
    }
    if let Some(entry) = live::get(addr) {
        queue_move(entry, addr, size, clock::now());
    }
}

/// A block that may be sampled was moved by `realloc` from `old` to `new` (now `size`
/// bytes) and keeps its sample, if it has one: its entry is re-keyed (see [`live`] §3 for
/// another thread that got `old` back meanwhile), and a move event queued unless one was
/// since the last drain (§2). Keeps errno (the table's growth restores it).
#[cold]
#[inline(never)]
pub(crate) fn moved(old: usize, new: usize, size: usize) {
    let Some(entry) = live::remove(old) else {
        return;
    };
    match live::insert(new, entry) {
        Insert::Done => {}
        Insert::NoMemory => {
            UNTRACKED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Insert::Reentrant => {
            // A signal handler's realloc, into a shard its thread holds: the sample ends
            // here rather than never.
            UNTRACKED.fetch_add(1, Ordering::Relaxed);
            record_death(entry, clock::now());
            return;
        }
    }
    if !move_queued(old, new) {
        queue_move(entry, new, size, clock::now());
    }
}

fn queue_move(entry: Entry, addr: usize, size: usize, time: u64) {
    let Some(q) = queue() else {
        return;
    };
    let event = Event {
        kind: EventKind::Move,
        epoch: entry.epoch,
        id: entry.id,
        thread: 0,
        label: 0,
        time_ns: time,
        addr,
        size,
        k: 0,
        truncated: false,
    };
    // A move lost to a full queue loses nothing a report needs (§2).
    push_frameless(q, event);
}

/// A reallocation failed: the old block, taken out of the table before it, is still live
/// and goes back (see [`moved`] for what a refusal does).
#[cold]
#[inline(never)]
pub(crate) fn restore(entry: Entry, addr: usize) {
    match live::insert(addr, entry) {
        Insert::Done => {}
        Insert::NoMemory => {
            UNTRACKED.fetch_add(1, Ordering::Relaxed);
        }
        Insert::Reentrant => {
            UNTRACKED.fetch_add(1, Ordering::Relaxed);
            record_death(entry, clock::now());
        }
    }
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
            assert!(pushed, "gave up after {waited:?}");
        });
    }

    /// Without a consumer, the wait ends at the deadline.
    #[test]
    fn a_stuck_consumer_ends_the_wait() {
        let q = Queue::new(2, 1).unwrap();
        assert!(q.push(&ev(0), &[]) && q.push(&ev(1), &[]));
        let t0 = std::time::Instant::now();
        assert!(!wait_for_room(&q, &ev(3), &[], 50_000_000, || true));
        assert!(t0.elapsed().as_millis() >= 50);
    }
}
