//! The bounded queue of events that wait for a safe point.
//!
//! # 1. Why postpone
//! An allocation is sampled deep inside `malloc` or `GlobalAlloc::alloc`, where user code
//! must not run: it could allocate (recursion), take a lock the interrupted code holds
//! (deadlock) or panic (unwinding through the allocator). So the sample path only records
//! a [`WireEvent`] here; callbacks run later at a safe point (`poll`, `stop`, the drain
//! thread), as statmemprof's postponed callbacks do.
//!
//! # 2. The queue
//! A bounded multi-producer queue (Vyukov's sequence-numbered ring): a producer claims an
//! event's cells (its slot: one cell, and more for a deep stack, `cells.rs` §2a) with one
//! compare-and-swap on the tail, writes the event and its call stack into them in place,
//! and publishes it by storing the first cell's sequence number. No locks, no allocation,
//! no panics. A full queue refuses the event and the refusal is counted as lost. "Full"
//! means the session's limit: the ring has a power-of-two number of cells, but at most
//! [`Queue::set_limit`] cells (the configured capacity) are taken at a time, also when a
//! later session with a smaller capacity reuses a bigger ring. The cells are in one block
//! from `rawmem`, so the frames are copied once, from the capture buffer.
//!
//! A signal handler may push on a thread that is in the middle of a push (between its claim
//! and its publication): it claims the next slot and publishes it, and the consumer, which
//! stops at the first unpublished slot, takes both once the interrupted push resumes. So a
//! producer that finds the queue full must not wait for room when the slot the consumer
//! waits for is its own thread's: each slot names the thread that claimed it (one store
//! into a line the push writes anyway), and [`Queue::waits_for_me`] tells. (A handler that
//! lands between the claim and that store, one instruction, still waits, until the
//! consumer has been held up by that slot for `BACKPRESSURE_WAIT_MS`: `push` §1.)
//!
//! # 3. Frees that do not fit
//! A refused allocation costs its sample only (the sample path forgets the block, so no
//! free follows it). A refused free is worse: its block would stay live forever in every
//! report (live bytes, leaks). So a free the queue refuses is kept in a second, smaller
//! table beside the ring ([`LOST_FREES`] entries, each the refused event, in the
//! shared block, so `memprof record`'s collector sees it too), and the consumer replays it
//! as a real free ([`Queue::take_lost_frees`]) once it has delivered the block's
//! allocation. An entry is claimed by a compare-and-swap on its state word, written, then
//! published; the consumer takes it the same way, so neither side waits for the other and
//! a signal handler that interrupts a writer simply claims another entry. Only when every
//! entry is taken is a free lost for good: it is counted ([`Queue::frees_unknown`]), and a
//! report then says that its live figures may count that many blocks that had ended. The
//! table is touched only on the losing path: a push that succeeds never reads it.
//!
//! The same table also takes a free that finds the ring full while the consumer lives, at
//! once, instead of the wait for room an allocation makes (§5; [`Queue::defer_free`]; not
//! a loss, counted apart as [`Queue::frees_deferred`]). A free that waited would be folded
//! when its thread next ran, which under hundreds of threads on two cores is up to seconds
//! after the program let the block go: its block would stay live that long in the stream
//! the profile is folded in, and with a sample point's weight, while the truth had let it
//! go (a `record` of 500 churning threads read a peak five times the program's own). From
//! the table the consumer replays it after its next drain, at its own time.
//!
//! # 4. Lifetime
//! Producers can be inside `push` at any moment, including while a session stops, so a
//! queue is never freed: it is reused by the next session when it is large enough and
//! retired (left allocated) otherwise. Events carry the session epoch; the consumer drops
//! those of other sessions. One consumer drains at a time (a try-lock, so a callback that
//! calls `poll` does not deadlock).
//!
//! # 5. Waiting for room
//! A producer that waits for room in a full queue (`push`) sleeps on a futex (spins only
//! under a seccomp filter, which may refuse the futex: `push` §1), never polls: thousands of threads polling a full queue took the CPU the consumer needed to
//! empty it. The word is [`Queue::room`], in the block (so a consumer in another process
//! reaches it: the futex is the shared kind), and the consumer advances it after every
//! drain that took events, then wakes the sleepers, but only when the count of registered
//! waiters says there are some: a consumer nobody waits for makes no system call, and a
//! producer makes one only when the queue is full. A waiter reads the word, registers
//! ([`Queue::begin_wait`]), tries its push again and only then sleeps, on the value it
//! read: a drain that made room after that read either moved the word (the sleep returns
//! at once) or saw the registration (a full fence on each side between the registration
//! or the slots handed back and the other side's read) and wakes it. Room another producer
//! took first is waited for again. A drain wakes a few sleepers ([`WAKE_AT_ONCE`]) each
//! time it has taken an eighth of the ring ([`WAKE_PARTS`]) and at its end, also
//! a drain that found the queue empty, and a sleeper looks again on its own after
//! `push::LOOK_EVERY_NS`, not all of them at once: under hundreds of threads on two cores,
//! waking every sleeper filled the run queue again, and a woken thread, which had just
//! been handed the block it sampled, then waited its turn to run holding it. Sampled blocks
//! lived longer than the program's others, and the live heap and its peak read high (three
//! times the program's own count for 500 churning threads); a few woken at a time run at
//! once.
//!
//! §6, the consumer's own sleep on a word of the block, which producers end once enough
//! events wait, is in `doorbell.rs`.

use crate::engine::entry::Entry;
use crate::sys::padded::Padded;
use core::cell::UnsafeCell;
use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

mod cells;
mod event;
use cells::{cells_for, geometry, CELL};
use event::Wire;
// A death's fields are read by name by the collector only (and the tests).
#[cfg(any(feature = "cli", test))]
pub use event::DeathEvent;
pub use event::{AllocEvent, FreeEvent, SideEvent, StackRef, WireEvent};

/// The head of an event's first cell (§2a); its first frames follow it in the cell.
#[repr(C)]
struct SlotHead {
    /// Vyukov's sequence number minus the cell's index: the cell at position `pos` (index
    /// `pos & mask`) is free for the producer of `pos` when `seq + index == pos`, and
    /// published for the consumer when it is `pos + 1` (an event's first cell only: §2a).
    /// Stored relative to the index so that zeroed memory is a queue's initial state.
    seq: AtomicUsize,
    /// The thread that claimed the slot last, and for which position ([`owner_tag`]): a
    /// slot claimed but not yet named still holds its name of one lap ago, which must not
    /// read as this lap's (a thread preempted between its claim and the store made a
    /// thread that had used the slot a lap before drop its events instead of waiting).
    owner: AtomicUsize,
    /// The event, with the count of its frames.
    event: UnsafeCell<Wire>,
}

// A free is the first line of its cell (`event` §1).
const _: () = assert!(event::free_ends_at(core::mem::offset_of!(SlotHead, event)) <= 64);

/// The queue's shared state, at the start of its memory block (the slots follow): in a
/// block shared between processes, producers in one and the consumer in another see the
/// same counters. The geometry is written once, before the block is shared, and checked by
/// [`Queue::attach`].
#[repr(C)]
struct Ctl {
    magic: u64,
    slots: u64,
    depth: u64,
    stride: u64,
    limit: AtomicUsize,
    /// The word the consumer sleeps on (§6): odd while it sleeps, moved on by whoever
    /// wakes it. Beside `limit`, on the line every push reads.
    consumer_sleep: AtomicU32,
    /// The events waiting at which a producer wakes the sleeping consumer (§6).
    wake_fill: AtomicU32,
    lost: AtomicU64,
    draining: AtomicBool,
    /// Entries of the lost-free table published and not yet taken (§3): the consumer looks
    /// at the table only when some are, and a producer finds it full without a scan.
    lost_frees_waiting: AtomicUsize,
    /// Where the next producer starts looking for a free entry of the table.
    lost_frees_hint: AtomicUsize,
    /// Frees refused while the table was full, since the queue was made: the ends of that
    /// many blocks are unknown.
    frees_unknown: AtomicU64,
    /// Frees that found the ring full and went to the table at once, lost by nobody (§3):
    /// the consumer's replays count them too, and take them off to tell what was lost.
    frees_deferred: AtomicU64,
    /// The word producers waiting for room sleep on (§5): the consumer advances it after a
    /// drain that took events.
    room: AtomicU32,
    /// Producers registered as waiting for room (§5): the consumer wakes them only when
    /// some are.
    waiters: AtomicU32,
    /// Set by a producer that could not wake the consumer (a seccomp filter may refuse the
    /// call, §6): the consumer polls this queue instead of sleeping on it.
    consumer_poll: AtomicU32,
    tail: Padded<AtomicUsize>,
    head: Padded<AtomicUsize>,
}

/// What a slot's `owner` holds once the calling thread has claimed position `pos`: its
/// [`crate::sys::tls::thread_id`] mixed with the position, so a name left from an earlier
/// lap never matches this one's (two equal tags would need two threads' pointers to
/// differ, bit for bit, exactly as the two positions' odd multiples do).
#[inline(always)]
fn owner_tag(pos: usize) -> usize {
    crate::sys::tls::thread_id() ^ pos.wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as usize)
}

/// [`Ctl::magic`] of an initialised block ("mpq7": the lost-free table follows the counters,
/// its entries whole deaths; the counters hold the word waiting producers sleep on, §5, the
/// count of frees deferred to the table, §3, and the consumer's own sleep, §6; the events
/// are in cells, §2a). "mpq8": a slot's event holds its frame count, a free's fields in
/// its first line, and an allocation may name a stack sent before (`event`).
const CTL_MAGIC: u64 = 0x6d70_7138_0000_0001;

/// Producers a drain wakes at once (§5).
const WAKE_AT_ONCE: u32 = 4;
/// A drain wakes producers waiting for room each time it has taken this share of the
/// ring's slots (§5).
const WAKE_PARTS: usize = 8;

mod doorbell;
pub(crate) use doorbell::consumer_wakes;
mod lost_frees;
use lost_frees::LostFree;
pub use lost_frees::LOST_FREES;

/// Room for the [`Ctl`] before the lost-free table.
const CTL_HEAD_BYTES: usize = (core::mem::size_of::<Ctl>() + 127) & !127;

/// A bounded MPMC ring of events with inline call stacks.
///
/// The fields every push reads (the block, its geometry, the limit) share no cache line
/// with the ones that change on every event: `tail` (producers) and `head` (the consumer),
/// each on lines of its own, so the consumer's progress does not evict the producers'.
/// The handle itself holds the geometry and where the block is; the counters are in the
/// block ([`Ctl`]).
pub struct Queue {
    ctl: *const Ctl,
    base: *mut u8,
    mask: usize,
    depth: usize,
    /// Another process consumes this queue: [`Queue::drain`] here does nothing.
    external: bool,
}

// SAFETY: slots are handed between threads by the sequence-number protocol: a slot's
// contents are written only by the producer that claimed it and read only by the consumer
// after the Release store of its sequence number, and the consumer is unique (try-lock).
unsafe impl Sync for Queue {}
// SAFETY: the raw block is owned by the queue and has no thread affinity.
unsafe impl Send for Queue {}

/// Room for the [`Ctl`] and the lost-free table before the first slot (a multiple of the
/// slots' alignment).
const CTL_BYTES: usize = CTL_HEAD_BYTES + LOST_FREES * core::mem::size_of::<LostFree>();
const _: () = assert!(CTL_BYTES % 128 == 0 && LOST_FREES.is_power_of_two());

impl Queue {
    /// A queue of `capacity` events (slots rounded up to a power of two), each with room
    /// for `depth` frames. `None` when memory is short.
    pub fn new(capacity: usize, depth: usize) -> Option<Queue> {
        let (_, bytes) = geometry(capacity, depth)?;
        let base = crate::sys::rawmem::alloc_zeroed(bytes + 127);
        if base.is_null() {
            return None;
        }
        // Slots and the counters' padding want 128-byte alignment; malloc gives 16.
        let aligned = ((base as usize + 127) & !127) as *mut u8;
        // SAFETY: `aligned` starts a zeroed block of `bytes` bytes that nothing else uses.
        unsafe { Queue::init_in(aligned, bytes, capacity, depth) }
    }

    /// Bytes a queue of `capacity` events of `depth` frames takes in a block of its own
    /// ([`Queue::init_in`]).
    pub fn bytes_for(capacity: usize, depth: usize) -> Option<usize> {
        geometry(capacity, depth).map(|g| g.1)
    }

    /// Lays a queue out in the zeroed block at `mem` (`len` bytes, 128-byte aligned, at
    /// least [`Queue::bytes_for`]), to be shared with a consumer in another process that
    /// [`attach`](Queue::attach)es to it. `None` when it does not fit.
    ///
    /// # Safety
    /// `mem` is valid for reads and writes of `len` bytes for the rest of the process's
    /// life, zeroed, and not used by anything else of this process.
    pub unsafe fn init_in(
        mem: *mut u8,
        len: usize,
        capacity: usize,
        depth: usize,
    ) -> Option<Queue> {
        let (cap, bytes) = geometry(capacity, depth)?;
        if bytes > len || mem as usize % 128 != 0 {
            return None;
        }
        // SAFETY: the caller gives the zeroed block to this queue. The slots are left as
        // they are: a zero sequence number is the initial one (see `SlotHead::seq`), so
        // laying a queue out touches its first page only, and a slot's memory is first
        // touched by its first event.
        unsafe {
            let base = mem.add(CTL_BYTES);
            let ctl = mem as *mut Ctl;
            ctl.write(Ctl {
                magic: CTL_MAGIC,
                slots: cap as u64,
                depth: depth as u64,
                stride: CELL as u64,
                limit: AtomicUsize::new(capacity.clamp(1, cap)),
                consumer_sleep: AtomicU32::new(0),
                wake_fill: AtomicU32::new(0),
                lost: AtomicU64::new(0),
                draining: AtomicBool::new(false),
                lost_frees_waiting: AtomicUsize::new(0),
                lost_frees_hint: AtomicUsize::new(0),
                frees_unknown: AtomicU64::new(0),
                frees_deferred: AtomicU64::new(0),
                room: AtomicU32::new(0),
                waiters: AtomicU32::new(0),
                consumer_poll: AtomicU32::new(0),
                tail: Padded(AtomicUsize::new(0)),
                head: Padded(AtomicUsize::new(0)),
            });
            Some(Queue { ctl, base, mask: cap - 1, depth, external: false })
        }
    }

    /// The consumer's handle on a queue another process laid out with [`Queue::init_in`]
    /// in the block mapped at `mem` (`len` bytes). The geometry is checked against the
    /// block, and each event is checked as it is read (the other process may be anything).
    /// `None` when the block holds no queue that fits in it.
    ///
    /// # Safety
    /// `mem` is valid for reads and writes of `len` bytes while the handle lives.
    pub unsafe fn attach(mem: *mut u8, len: usize) -> Option<Queue> {
        if len < CTL_BYTES || mem as usize % 128 != 0 {
            return None;
        }
        let ctl = mem as *const Ctl;
        // SAFETY: the block holds at least a `Ctl` (checked above); plain integers.
        let (magic, slots, depth, stride) =
            unsafe { ((*ctl).magic, (*ctl).slots, (*ctl).depth, (*ctl).stride) };
        let (slots, depth) = (usize::try_from(slots).ok()?, usize::try_from(depth).ok()?);
        let (cap, bytes) = geometry(slots, depth)?;
        if magic != CTL_MAGIC || cap != slots || stride != CELL as u64 || bytes > len {
            return None;
        }
        Some(Queue {
            ctl,
            // SAFETY: the cells follow the counters inside the block (checked above).
            base: unsafe { mem.add(CTL_BYTES) },
            mask: cap - 1,
            depth,
            external: false,
        })
    }

    /// From now on another process consumes this queue: [`Queue::drain`] does nothing here.
    pub fn set_external(&mut self) {
        self.external = true;
    }

    /// The stored sequence number that hands the slot at `pos` back to producers, one lap
    /// later (see `SlotHead::seq`).
    fn lap_end(&self, pos: usize) -> usize {
        pos.wrapping_add(self.mask + 1).wrapping_sub(pos & self.mask)
    }

    /// True when another process consumes this queue ([`Queue::set_external`]).
    pub fn is_external(&self) -> bool {
        self.external
    }

    fn ctl(&self) -> &Ctl {
        // SAFETY: `ctl` points at the initialised counters of a block that outlives the
        // handle (see the constructors).
        unsafe { &*self.ctl }
    }

    /// Number of cells (§2a).
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Sets how many cells events may take at a time (clamped to `1..=capacity()`; an event
    /// goes into an empty ring whatever the limit, §2a).
    pub fn set_limit(&self, limit: usize) {
        self.ctl().limit.store(limit.clamp(1, self.capacity()), Ordering::Relaxed);
    }

    /// Frames each slot can hold.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The head of the event whose first cell is at `pos`.
    fn slot(&self, pos: usize) -> *mut SlotHead {
        // SAFETY: (pos & mask) < capacity, so the offset stays inside the block.
        unsafe { self.base.add((pos & self.mask) * CELL) as *mut SlotHead }
    }

    /// Prefetches the two cells from `pos` (four lines: a head and about 20 frames), for
    /// writing (`write`) or for reading.
    #[inline(always)]
    fn prefetch(&self, pos: usize, write: bool) {
        #[cfg(target_arch = "x86_64")]
        {
            for i in 0..4 {
                let cell = self.slot(pos.wrapping_add(i / 2)) as *const u8;
                // SAFETY: the line lies inside the cell (two lines each).
                let p = unsafe { cell.add(i % 2 * 64) };
                // SAFETY: a prefetch is a hint: it never faults and changes no
                // architectural state (CPUs without PREFETCHW execute it as a NOP).
                unsafe {
                    if write {
                        core::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly));
                    } else {
                        core::arch::asm!("prefetcht0 [{}]", in(reg) p, options(nostack, preserves_flags, readonly));
                    }
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (pos, write);
    }

    /// Queues an event with its frames (at most `depth` are kept). Returns false, and counts
    /// the event as lost, when the queue is full. Lock-free; never allocates or panics.
    pub fn push(&self, event: &WireEvent, frames: &[usize]) -> bool {
        self.push_inner(*event, frames, true, |e| e).is_some()
    }

    /// Like [`Queue::push`], but a full queue is not counted as a loss (the caller retries).
    /// Takes the event by value: inlined, its fields are stored into the slot straight from
    /// registers (copying an event just written to the stack reads it back in wide loads
    /// that miss store forwarding).
    #[inline(always)]
    pub fn try_push(&self, event: WireEvent, frames: &[usize]) -> bool {
        self.push_inner(event, frames, false, |e| e).is_some()
    }

    /// [`Queue::try_push`] of the event `stamp` makes of `event` once the slot is claimed
    /// and its frames written, just before it is published (an allocation stamped again
    /// when its thread was held up: `push` §2): the time it was published with, `None`
    /// when the queue was full.
    #[inline(always)]
    pub(crate) fn try_push_stamped(
        &self,
        event: WireEvent,
        frames: &[usize],
        stamp: impl FnOnce(WireEvent) -> WireEvent,
    ) -> Option<u64> {
        self.push_inner(event, frames, false, stamp)
    }

    #[inline(always)]
    fn push_inner(
        &self,
        event: WireEvent,
        frames: &[usize],
        count_lost: bool,
        stamp: impl FnOnce(WireEvent) -> WireEvent,
    ) -> Option<u64> {
        let frames = &frames[..frames.len().min(self.depth)];
        let cells = cells_for(frames.len());
        let mut pos = self.ctl().tail.load(Ordering::Relaxed);
        loop {
            // The event's last cell handed back a lap ago means all of them are (§2a).
            let diff = self.free_from(pos, cells);
            if diff == 0 {
                // Cells taken, were `pos` claimed now. Negative when `pos` is stale
                // (claimed and consumed meanwhile): the CAS below fails and retries. With
                // the limit at the ring's capacity the sequence number alone tells a full
                // ring (`diff < 0` below), and `head`, which the consumer writes for every
                // event, is not read.
                let limit = self.ctl().limit.load(Ordering::Relaxed);
                if limit <= self.mask && {
                    let taken = pos.wrapping_sub(self.ctl().head.load(Ordering::Acquire)) as isize;
                    taken > 0 && taken + cells as isize > limit as isize
                } {
                    if count_lost {
                        self.ctl().lost.fetch_add(1, Ordering::Relaxed);
                    }
                    return None;
                }
                // SeqCst: the claim and the look at the consumer's sleep below pair with the
                // consumer's registration and its look at the tail (§6). On x86 the same
                // locked instruction as a relaxed one.
                match self.ctl().tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(cells),
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let slot = self.slot(pos);
                        // SAFETY: winning the CAS gives this thread exclusive use of the
                        // cells until the Release store below publishes the first one.
                        // The event is written last, after the frames: what `stamp` makes
                        // of it is as late as the publication allows.
                        let time = unsafe {
                            (*slot).owner.store(owner_tag(pos), Ordering::Relaxed);
                            self.write_frames(pos, frames);
                            let event = stamp(event);
                            Wire::store((*slot).event.get(), event, frames.len());
                            (*slot).seq.store(
                                pos.wrapping_add(1).wrapping_sub(pos & self.mask),
                                Ordering::Release,
                            );
                            event.time()
                        };
                        // The cells ahead were last written by the consumer, on another core
                        // (their sequence numbers, one lap ago): ask for their lines early,
                        // so a push does not wait for them.
                        self.prefetch(pos.wrapping_add(cells), true);
                        // A sleeping consumer is woken once enough cells wait (§6): one
                        // load of a line this push read already, while it is awake.
                        let sleep = self.ctl().consumer_sleep.load(Ordering::SeqCst);
                        if sleep & 1 != 0 {
                            self.wake_if_filled(pos.wrapping_add(cells - 1), sleep);
                        }
                        return Some(time);
                    }
                    Err(actual) => pos = actual,
                }
            } else if diff < 0 {
                // Not handed back yet: full, unless another producer moved the tail on.
                let now = self.ctl().tail.load(Ordering::Relaxed);
                if now != pos {
                    pos = now;
                    continue;
                }
                if count_lost {
                    self.ctl().lost.fetch_add(1, Ordering::Relaxed);
                }
                return None;
            } else {
                pos = self.ctl().tail.load(Ordering::Relaxed);
            }
        }
    }

    /// True when the event the consumer waits for next is one the calling thread claimed
    /// and has not published: a push of this thread that a signal handler interrupted. Room
    /// is then not worth waiting for (see the module documentation).
    pub fn waits_for_me(&self) -> bool {
        let pos = self.ctl().head.load(Ordering::Acquire);
        let unpublished = !self.published(pos);
        // SAFETY: slot points at an initialised SlotHead; only an atomic is read.
        let owner = unsafe { (*self.slot(pos)).owner.load(Ordering::Relaxed) };
        // And the consumer is still there: an event of this thread's that it took since
        // `head` was read is handed back with its owner left in place, which read as a
        // claim not published (the push then dropped its event instead of waiting).
        unpublished && owner == owner_tag(pos) && self.ctl().head.load(Ordering::Acquire) == pos
    }

    /// Counts an event that was never pushed as lost (a sample skipped for reentrancy,
    /// `sample_path` §1).
    #[cold]
    #[inline(never)]
    pub fn note_lost(&self) {
        self.ctl().lost.fetch_add(1, Ordering::Relaxed);
    }

    /// Events refused because the queue was full, since the queue was made.
    pub fn lost(&self) -> u64 {
        self.ctl().lost.load(Ordering::Relaxed)
    }

    /// Where the consumer is (events taken so far, wrapping): a producer waiting for room
    /// sees it move while the consumer makes progress.
    pub fn head(&self) -> usize {
        self.ctl().head.load(Ordering::Relaxed)
    }

    /// True when the consumer is held up by a producer: the event it takes next is claimed
    /// and not yet published (a push under way, or one a signal handler interrupted, §2).
    pub fn held_up(&self) -> bool {
        let pos = self.ctl().head.load(Ordering::Acquire);
        if self.ctl().tail.load(Ordering::Acquire) == pos {
            return false;
        }
        !self.published(pos)
    }

    /// The word producers waiting for room sleep on (§5): read before [`Queue::begin_wait`].
    pub fn room(&self) -> u32 {
        self.ctl().room.load(Ordering::Acquire)
    }

    /// Registers the calling producer as waiting for room (§5). Followed by a last try of
    /// its push, then [`Queue::sleep_for_room`], then [`Queue::end_wait`].
    pub fn begin_wait(&self) {
        self.ctl().waiters.fetch_add(1, Ordering::SeqCst);
        // The registration is seen by a consumer that hands slots back after this fence,
        // or this producer's next try sees the slots handed back before it (§5).
        fence(Ordering::SeqCst);
    }

    /// Sleeps until the consumer advances [`Queue::room`] past `seen` (at once when it
    /// already has), at most `timeout_ns`. Between [`Queue::begin_wait`] and
    /// [`Queue::end_wait`] only. A sleep a seccomp filter refused marks the process
    /// filtered: the waits spin from then on (`push` §1). No allocation; may set errno.
    pub fn sleep_for_room(&self, seen: u32, timeout_ns: u64) {
        let err = crate::sys::futex::wait(&self.ctl().room, seen, timeout_ns);
        crate::sys::seccomp::after_futex_wait(err, self.room() == seen);
    }

    /// The calling producer no longer waits (§5).
    pub fn end_wait(&self) {
        self.ctl().waiters.fetch_sub(1, Ordering::Relaxed);
    }

    /// Producers registered as waiting for room now.
    #[cfg(test)]
    pub fn waiting(&self) -> u32 {
        self.ctl().waiters.load(Ordering::Relaxed)
    }

    /// Advances [`Queue::room`] and wakes a few producers sleeping on it ([`WAKE_AT_ONCE`]),
    /// when one is registered (§5): after a drain.
    pub fn wake_waiters(&self) {
        self.wake(WAKE_AT_ONCE);
    }

    /// Wakes every producer waiting for room (the waits end: `push::stop_waiting`).
    pub fn wake_all(&self) {
        self.wake(u32::MAX);
    }

    fn wake(&self, n: u32) {
        let c = self.ctl();
        c.room.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `begin_wait` (§5).
        fence(Ordering::SeqCst);
        if c.waiters.load(Ordering::Relaxed) != 0 {
            crate::sys::futex::wake(&c.room, n);
        }
    }

    /// Runs `f` on each published event in order, until the queue is empty or an event is
    /// claimed but not yet published. Events claimed after the call began are left for the
    /// next one. Returns the number handled, or `None` when another thread is draining.
    ///
    /// The consumer stays behind the producers: it reads the tail once, and touches no slot
    /// at or past it, neither to look at its sequence number nor to prefetch it. Those are
    /// the lines a producer is about to write (it asked for them early, see `push_inner`);
    /// reading one would take it back to this core just before the producer's stores.
    pub fn drain(&self, mut f: impl FnMut(&WireEvent, &[usize])) -> Option<usize> {
        if self.external || self.ctl().draining.swap(true, Ordering::Acquire) {
            return None;
        }
        struct Release<'a>(&'a AtomicBool);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _release = Release(&self.ctl().draining);
        let mut n = 0;
        // The consumer runs at a safe point and may allocate.
        let mut frames: Vec<usize> = Vec::with_capacity(self.depth);
        let end = self.ctl().tail.load(Ordering::Relaxed);
        let wake_every = ((self.mask + 1) / WAKE_PARTS).max(16);
        let mut since_wake = 0;
        loop {
            let pos = self.ctl().head.load(Ordering::Relaxed);
            if pos == end {
                break;
            }
            if !self.published(pos) {
                break;
            }
            let slot = self.slot(pos);
            // SAFETY: the Acquire load saw the producer's Release store, so the event and
            // frames are fully written; nobody writes the cells until we hand them back
            // below. Copied out first so `f` can push more events (even into these cells).
            // Another process's bytes are checked as they are read (`Wire::load`).
            let (event, count) = unsafe { Wire::load((*slot).event.get()) };
            let count = count.min(self.depth);
            let cells = cells_for(count);
            // A frame count another process wrote that claims cells past the tail: not an
            // event of ours, and where the next one starts is unknown. The rest is left
            // (counted lost) rather than read as events.
            if end.wrapping_sub(pos) < cells {
                self.ctl().lost.fetch_add(1, Ordering::Relaxed);
                break;
            }
            // The producer wrote the next cells on its own core: overlap their transfer.
            if (end.wrapping_sub(pos) as isize) > (cells + 2) as isize {
                self.prefetch(pos.wrapping_add(cells), false);
            }
            frames.clear();
            self.read_frames(pos, count, &mut frames);
            self.ctl().head.store(pos.wrapping_add(cells), Ordering::Relaxed);
            self.hand_back(pos, cells);
            match event {
                Some(event) => f(&event, &frames),
                None => {
                    self.ctl().lost.fetch_add(1, Ordering::Relaxed);
                }
            }
            n += 1;
            // Producers asleep for room are woken as room is made, not once the drain is
            // done: a drain of a full queue whose consumer folds every event takes
            // milliseconds, and a producer that slept through it left its core idle (§5).
            since_wake += cells;
            if since_wake >= wake_every {
                since_wake = 0;
                if self.ctl().waiters.load(Ordering::Relaxed) != 0 {
                    self.wake_waiters();
                }
            }
        }
        // Room was made, or the queue is empty with producers still asleep (each drain
        // wakes a few: §5): they are woken.
        if n != 0 || self.ctl().waiters.load(Ordering::Relaxed) != 0 {
            self.wake_waiters();
        }
        Some(n)
    }

    /// Runs `f` on every event left in a queue whose producers are all gone (their process
    /// ended): a slot claimed but never published (a thread killed inside a push) is
    /// skipped and counted as lost instead of ending the drain. Returns the number handled.
    pub fn drain_abandoned(&self, mut f: impl FnMut(&WireEvent, &[usize])) -> usize {
        let mut n = 0;
        loop {
            let end = self.ctl().tail.load(Ordering::Acquire);
            n += self.drain(&mut f).unwrap_or(0);
            let pos = self.ctl().head.load(Ordering::Relaxed);
            // More claimed than the ring holds: not a queue any more (written over).
            if pos == end || end.wrapping_sub(pos) > self.mask + 1 {
                return n;
            }
            // `pos` was claimed and never published: nobody will. Its cells are handed
            // back one by one, up to the next published event (how many it claimed is
            // not known): one event lost.
            let mut p = pos;
            loop {
                self.ctl().head.store(p.wrapping_add(1), Ordering::Relaxed);
                self.hand_back(p, 1);
                p = p.wrapping_add(1);
                if p == end || self.published(p) {
                    break;
                }
            }
            self.ctl().lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// True when a producer has claimed a slot the consumer has not seen published yet.
    pub fn has_unpublished(&self) -> bool {
        self.ctl().tail.load(Ordering::Acquire) != self.ctl().head.load(Ordering::Acquire)
    }
}

#[cfg(test)]
pub(crate) mod tests;
