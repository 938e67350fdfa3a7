//! The sample path past the sampler: a sampled allocation's call stack, queue event and
//! live-table entry, and the event of a sampled block's death. Never allocates
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
//! # 2. Reallocations
//! A reallocation ends its old block and allocates its new size (`alloc` §4): a sampled
//! old block's death is an ordinary one ([`record_free`]), and a sampled new size an
//! ordinary sample. No event keeps a sample across a `realloc`, so every sample's weight
//! is drawn from its own size alone (`sampler` §5). The one thing special to a
//! reallocation here is [`restore`]: a `realloc` that failed leaves its old block live,
//! and its entry, taken out before the real `realloc` ran, goes back.

use crate::engine::busy::Busy;
use crate::engine::callstack::{self, Captured};
use crate::engine::clock;
use crate::engine::live::{self, Entry, Freed, Insert};
use crate::engine::lost::skipped;
use crate::engine::push::{push_alloc, push_alloc_stamped, push_death, push_unnamed_free};
use crate::engine::queue::{AllocEvent, StackRef};
use crate::engine::sampler::Hit;
use crate::sys::errno::SavedErrno;
use core::sync::atomic::{AtomicUsize, Ordering};

// What the session sets and reads at its start and stop, from the files below that hold it.
pub(crate) use crate::engine::consumer::{Consumer, CONSUMER, LOOK_EVERY_NS};
pub(crate) use crate::engine::lost::UNTRACKED;
pub(crate) use crate::engine::push::{queue, stop_waiting, DEFER_FREES, QUEUE, WAIT_WHEN_FULL};

/// The session's call-stack depth.
pub(crate) static DEPTH: AtomicUsize = AtomicUsize::new(0);

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
        // An interpreter's own frames, where it runs them (`python` §3).
        crate::engine::python::splice(&mut frames, depth);
        let id = hit.id;
        let truncated = frames.truncated();
        // A consumer in another process has the stack already when this thread sent it
        // (`known`): the event then names it by its key.
        let known = crate::engine::thread::blocks().map(|b| &b.known).filter(|_| q.is_external());
        if live::by_address() {
            // No table: the collector keeps the block by its address (`live` §6). The
            // clock is read once the block is the program's (the real allocation ran), so
            // a free of the address before this one has an earlier reading: when the
            // event is published, once (`push_alloc_stamped`).
            let stack = known
                .map_or(StackRef::Here, |t| t.stack_ref(hit.epoch, frames.frames(), truncated));
            let event = AllocEvent {
                epoch: hit.epoch,
                id,
                thread: hit.thread,
                label: crate::engine::label::current(),
                time: 0,
                addr,
                size,
                k: hit.k,
                truncated,
                stack,
            };
            let pushed = push_alloc_stamped(q, event, sent_frames(stack, &frames)).is_some();
            if let (Some(t), true) = (known, pushed) {
                t.sent(stack);
            }
            crate::engine::push::alloc_by_address_pushed(addr, pushed);
            saved.restore();
            return;
        }
        // What the block's free will name (`live` §5); only a consumer in another process
        // reads the stack's key (one in this process keeps a token per block).
        let stack = match q.is_external() {
            true => crate::engine::callstack::frames::key(frames.frames(), truncated),
            false => 0,
        };
        let stack_ref = known.map_or(StackRef::Here, |t| t.by_key(hit.epoch, stack));
        let entry = Entry::new(id, hit.epoch, stack, 0, size as u64, hit.k);
        // The live-table entry goes in before the event: its lock's exchange is a full
        // fence, which after the slot's ~200 bytes of stores would wait for all of them
        // to drain. The block cannot be freed before this returns, so the order is free.
        // The allocation's clock is read with the shard's lock held: a wait for the lock
        // is the profiler's, not the block's (`push` §2).
        let (tracked, time) = live::insert_stamped(addr, entry);
        let event = AllocEvent {
            epoch: hit.epoch,
            id,
            thread: hit.thread,
            // The one thread-local word the sample path reads for the span (label.rs).
            label: crate::engine::label::current(),
            time,
            addr,
            size,
            k: hit.k,
            truncated,
            stack: stack_ref,
        };
        match tracked {
            Insert::Reentrant => skipped(),
            tracked => match push_alloc(q, event, sent_frames(stack_ref, &frames)) {
                // Lost event: no dealloc event must follow for it either.
                None => {
                    if tracked == Insert::Done {
                        live::remove(addr);
                    }
                }
                Some(pushed) => {
                    if let Some(t) = known {
                        t.sent(stack_ref);
                    }
                    if tracked == Insert::NoMemory {
                        UNTRACKED.fetch_add(1, Ordering::Relaxed);
                    } else if pushed != time {
                        // Pushed with a later time: after a wait for room, or held up
                        // since the first reading (`push` §2).
                        live::retime(addr, id, pushed);
                    }
                }
            },
        }
    }
    saved.restore();
}

/// The frames an allocation's event carries: none when it names its stack by key.
#[inline(always)]
fn sent_frames(stack: StackRef, frames: &Captured) -> &[usize] {
    match stack {
        StackRef::Sent(_) => &[],
        StackRef::Here | StackRef::Kept(_) => frames.frames(),
    }
}

/// Queues the free of the block at `addr`, at the clock reading its free took before the
/// table's lock ([`Freed`]): a sampled block's death, or a free named by its address
/// (`live` §6). Keeps errno: it pushes, which neither allocates nor touches errno (a full
/// queue's wait restores it, see [`push_full`]), so it needs no errno saved.
#[cold]
#[inline(never)]
pub(crate) fn record_free(addr: usize, freed: Freed) {
    record_free_inline(addr, freed)
}

/// Queues the death, at clock reading `time`, of a sampled block.
#[inline(always)]
pub(crate) fn record_death(entry: Entry, time: u64) {
    push_death(&entry, time)
}

/// [`record_free`], inlined: for a caller that is a slow path already (the preload
/// library's `free` of a block whose filter counter is set).
#[inline(always)]
pub(crate) fn record_free_inline(addr: usize, freed: Freed) {
    match freed {
        Freed::Sampled { entry, time } => record_death(entry, time),
        Freed::Unnamed { time } => {
            push_unnamed_free(addr, crate::engine::sampler::EPOCH.load(Ordering::Relaxed), time)
        }
    }
}

/// A reallocation failed: the old block, taken out of the table before it, is still live
/// and goes back (§2). A refusal (a signal handler's realloc, into a shard its thread
/// holds) ends the sample here rather than never.
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
