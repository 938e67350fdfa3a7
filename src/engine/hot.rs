//! The sample path past the sampler: a sampled allocation's call stack, queue event and
//! live-table entry, and the events of a sampled block's death or move. Never allocates
//! through the profiled allocator, never blocks on a user-held lock, never panics, keeps
//! errno. The session ([`crate::session`]) sets the state here at its start and stop.

use crate::engine::callstack::{self, Captured};
use crate::engine::clock::{self, monotonic_ns};
use crate::engine::live::{self, Entry};
use crate::engine::queue::{Event, EventKind, Queue};
use crate::engine::sampler::{Busy, Hit};
use crate::sys::errno::SavedErrno;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// The session's queue (null: none yet). Queues are leaked, never freed.
pub(crate) static QUEUE: AtomicPtr<Queue> = AtomicPtr::new(core::ptr::null_mut());
/// The session's call-stack depth.
pub(crate) static DEPTH: AtomicUsize = AtomicUsize::new(0);
/// Sampled blocks that could not be entered in the live table.
pub(crate) static UNTRACKED: AtomicU64 = AtomicU64::new(0);
/// Backpressure is on and a drain thread runs: a full queue is worth waiting for.
pub(crate) static WAIT_WHEN_FULL: AtomicBool = AtomicBool::new(false);
/// When another process consumes the queue (`memprof record`'s collector): its heartbeat
/// (a [`monotonic_ns`] reading it renews every few milliseconds), so that a full queue is
/// waited for only while it lives. Null: the consumer is in this process.
pub(crate) static HEARTBEAT: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
/// A heartbeat older than this: the consumer is gone (see `record/ring.rs` §4).
const STALE_NS: u64 = 500_000_000;

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
    // SAFETY: queues are leaked, never freed (see queue.rs §3), so a non-null pointer
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
    let Some(_busy) = Busy::enter() else {
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
            time_ns: clock::now(),
            addr,
            size,
            k: hit.k,
            truncated: frames.truncated(),
        };
        // The live-table entry goes in before the event: its lock's exchange is a full
        // fence, which after the slot's ~200 bytes of stores would wait for all of them
        // to drain. The block cannot be freed before this returns, so the order is free.
        let tracked = live::insert(addr, Entry { id, epoch: hit.epoch });
        if !push(q, event, frames.frames()) {
            // Lost event: no dealloc event must follow for it either.
            if tracked {
                live::remove(addr);
            }
        } else if !tracked {
            UNTRACKED.fetch_add(1, Ordering::Relaxed);
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

fn push_waiting(q: &Queue, event: &Event, frames: &[usize]) -> bool {
    if WAIT_WHEN_FULL.load(Ordering::Relaxed) {
        let deadline = monotonic_ns()
            .saturating_add(crate::config::BACKPRESSURE_WAIT_MS.saturating_mul(1_000_000));
        while WAIT_WHEN_FULL.load(Ordering::Relaxed)
            && monotonic_ns() < deadline
            && consumer_alive()
        {
            let pause = libc::timespec { tv_sec: 0, tv_nsec: 50_000 };
            // SAFETY: `pause` is a valid timespec; a null remainder is allowed.
            unsafe { libc::nanosleep(&pause, core::ptr::null_mut()) };
            if q.try_push(*event, frames) {
                return true;
            }
        }
    }
    q.push(event, frames)
}

/// Queues the death (`addr == 0`) or the move of a sampled block. Keeps errno. A death
/// reads the clock and pushes, neither of which allocates or touches errno (a full
/// queue's wait restores it, see [`push_full`]), so it needs neither the busy flag nor
/// errno saved; a move may grow the live table (memory from `mmap`), so it takes both.
#[cold]
#[inline(never)]
pub(crate) fn record_other(kind: EventKind, entry: Entry, addr: usize, size: usize) {
    record_other_inline(kind, entry, addr, size)
}

/// [`record_other`], inlined: for a caller that is a slow path already (the preload
/// library's `free` of a block whose filter counter is set).
#[inline(always)]
pub(crate) fn record_other_inline(kind: EventKind, entry: Entry, addr: usize, size: usize) {
    let Some(q) = queue() else {
        return;
    };
    let event = Event {
        kind,
        epoch: entry.epoch,
        id: entry.id,
        thread: 0,
        time_ns: clock::now(),
        addr,
        size,
        k: 0,
        truncated: false,
    };
    if kind != EventKind::Move {
        push(q, event, &[]);
        return;
    }
    let _busy = Busy::enter();
    let saved = SavedErrno::save();
    if push(q, event, &[]) && !live::insert(addr, entry) {
        UNTRACKED.fetch_add(1, Ordering::Relaxed);
    }
    saved.restore();
}
