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
//! its own thread. A wait for room sleeps on a futex the consumer's drain wakes (`queue`
//! §5) and ends only when nobody will make room (`push` §1): the session stopped, the
//! collector's process no longer exists, or the consumer has been held up for
//! [`crate::config::BACKPRESSURE_WAIT_MS`] by a push that never ends (or, in process, by
//! anything); a free refused then is kept in the queue's table of lost frees for the
//! consumer to replay (`queue` §3).
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

use crate::engine::busy::Busy;
use crate::engine::callstack::{self, Captured};
use crate::engine::clock;
use crate::engine::live::{self, Entry, Insert};
use crate::engine::lost::skipped;
use crate::engine::push::{push, push_alloc, push_death};
use crate::engine::queue::{Event, EventKind};
use crate::engine::sampler::Hit;
use crate::sys::errno::SavedErrno;
use core::cell::Cell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

// What the session sets and reads at its start and stop, from the files below that hold it.
pub(crate) use crate::engine::lost::UNTRACKED;
pub(crate) use crate::engine::push::{
    queue, stop_waiting, Consumer, CONSUMER, LOOK_EVERY_NS, QUEUE, WAIT_WHEN_FULL,
};

/// The session's call-stack depth.
pub(crate) static DEPTH: AtomicUsize = AtomicUsize::new(0);
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
        let time = clock::now();
        let truncated = frames.truncated();
        let event = Event {
            kind: EventKind::Alloc,
            epoch: hit.epoch,
            id,
            thread: hit.thread,
            // The one thread-local word the sample path reads for the span (label.rs).
            label: crate::engine::label::current(),
            time_ns: time,
            addr,
            size,
            k: hit.k,
            truncated,
        };
        // What the block's free will name (`live` §5); only a consumer in another process
        // reads the stack's key (one in this process keeps a token per block).
        let stack = match q.is_external() {
            true => crate::engine::callstack::frames::key(frames.frames(), truncated),
            false => 0,
        };
        let entry = Entry::new(id, hit.epoch, stack, time, size as u64, hit.k);
        // The live-table entry goes in before the event: its lock's exchange is a full
        // fence, which after the slot's ~200 bytes of stores would wait for all of them
        // to drain. The block cannot be freed before this returns, so the order is free.
        match live::insert(addr, entry) {
            Insert::Reentrant => skipped(),
            tracked => match push_alloc(q, event, frames.frames()) {
                // Lost event: no dealloc event must follow for it either.
                None => {
                    if tracked == Insert::Done {
                        live::remove(addr);
                    }
                }
                Some(pushed) => {
                    if tracked == Insert::NoMemory {
                        UNTRACKED.fetch_add(1, Ordering::Relaxed);
                    } else if pushed != time {
                        // Pushed after a wait for room, with a later time.
                        live::retime(addr, id, pushed);
                    }
                }
            },
        }
    }
    saved.restore();
}

/// Queues the death of a sampled block. Keeps errno: it reads the clock and pushes,
/// neither of which allocates or touches errno (a full queue's wait restores it, see
/// [`push_full`]), so it needs no errno saved.
#[cold]
#[inline(never)]
pub(crate) fn record_free(entry: Entry) {
    record_free_inline(entry)
}

/// Queues the death, at clock reading `time`, of a sampled block.
#[inline(always)]
pub(crate) fn record_death(entry: Entry, time: u64) {
    push_death(&entry, time)
}

/// [`record_free`], inlined: for a caller that is a slow path already (the preload
/// library's `free` of a block whose filter counter is set).
#[inline(always)]
pub(crate) fn record_free_inline(entry: Entry) {
    record_death(entry, clock::now())
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
    let (event, words) = Event::moved(&entry, addr, size, time);
    // A move lost to a full queue loses nothing a report needs (§2).
    push(q, event, &words);
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
