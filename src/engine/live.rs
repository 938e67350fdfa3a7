//! The sampled live table: address → sample, for the blocks that were sampled and not yet
//! freed.
//!
//! # 1. The free path
//! Every `free`/`dealloc` must ask "was this block sampled?", so the common answer "no"
//! has to be nearly free. A counting filter of 2 Mi one-byte counters, indexed by the
//! address bits above the 16-byte alignment, answers it with one load: zero means no sampled block hashes there.
//! Counters saturate at 255 and then stay there (only false positives, never a false "no").
//! With 20k live samples about 1% of frees look further.
//!
//! # 2. The table
//! 64 shards, each an open-addressing hash table (linear probing, backward-shift deletion,
//! so no tombstones) behind a spin lock that is held for a few instructions and only ever
//! inside the profiler, so user code can never hold it. A block's shard is a function of
//! its filter counter, so every block that shares a counter shares the shard, and the
//! counters are updated under the shard's lock with a plain load and store (no atomic
//! read-modify-write: the sample path pays for the lock already). Tables grow by doubling
//! into pages from `mmap` ([`crate::sys::rawmem::map`]), never from the profiled allocator
//! and never from glibc's (whose arena lock a signal handler on the same thread may need,
//! §4). An insertion that cannot get memory fails and the caller counts the sample as
//! untracked.
//!
//! # 3. Address reuse
//! A block is removed from the table *before* the real free returns its memory, so when
//! another thread gets the same address back immediately, its insertion finds the slot free
//! and the two samples never mix. A `realloc` does the same with its old block, sampled or
//! not (`alloc` §4): it ends there, and only a failed `realloc` puts it back. Still, an
//! address may have two entries for a moment (a stale entry, whose free was never seen,
//! and a new sample of a block glibc gave back at that address), and the table keeps both
//! in insertion order: an insertion never overwrites, it goes after any entry of its
//! address (linear probing puts it further along the same run, and backward-shift deletion
//! never reorders a run), and a removal takes the oldest. The stale entry is taken by the
//! next free of its address: one sample stays live in either order.
//!
//! # 4. Signal handlers: a lock is never waited for by its own thread
//! A signal handler may allocate and free (programs do, with care for glibc's per-thread
//! cache), and it runs on the thread it interrupted, which may be inside this table with a
//! shard locked. Waiting for that lock would wait forever. So a shard's lock word holds its
//! owner, the thread pointer ([`thread_id`](crate::sys::tls::thread_id): unique among live
//! threads, the same in a handler as in the code it interrupted), and a thread that finds
//! the lock held by itself never spins:
//! - an insertion (a sample, or a block put back after a failed `realloc`) is refused
//!   ([`Insert::Reentrant`]): the caller skips the sample and counts it as lost;
//! - a removal (the handler frees a sampled block) is *deferred*: the address and the time
//!   go into one of the shard's [`DEFERRED`] slots, and the shard's `pending` flag is set.
//!   Whoever takes the shard's lock next first takes the deferred blocks out of the table
//!   and reports their deaths, with the time of the free, through
//!   [`push_death`](crate::engine::push::push_death). That is before any other
//!   operation on the shard, so a thread that got the freed address back from glibc
//!   meanwhile and waits to insert it finds the old entry gone, as in §3. The interrupted
//!   thread itself looks at the flag right after it releases the lock (a load of a line it
//!   holds) and takes the shard again when it is set, so the deaths are reported as soon as
//!   the handler returned and the interrupted operation ended; the in-process drain visits
//!   flagged shards too ([`flush_deferred`]). More deferred frees than slots on one shard in one interruption (a handler that
//!   frees more than [`DEFERRED`] sampled blocks of one shard) leave the rest live in the
//!   table, counted as untracked.
//!
//! The handler only ever writes the deferred slots of a shard its own thread holds, so
//! no other thread writes them meanwhile; a nested handler claims a slot with one atomic
//! compare-and-swap (one instruction, which no signal splits). The owner releases with a
//! plain store, after the handler's writes in program order, so the next owner sees them.
//!
//! # 4a. Waiting for a shard
//! A thread that finds a shard held by another spins briefly, then sleeps on the shard's
//! `wakes` word (a futex) until the owner releases it; the owner wakes one sleeper when
//! any sleeps. It does not `sched_yield`: under hundreds of threads on a few cores the
//! owner may be preempted for hundreds of milliseconds, and the scheduler charges a thread
//! that yields over and over as one that ran (each yield pushes its deadline back), so
//! once it has its entry in and its sample published it is preempted at once and waits a
//! whole round of the run queue: with its sampled block live in the profile and no
//! unsampled block held so. The calibration suite's churn showed that as peaks three to
//! five intervals high. A sleeper is not charged. The owner's release is an exchange (a
//! full barrier) followed by one load of the sleeper count, on the lock's own line; a sleep
//! is bounded ([`SLEEP_NS`]), so a lost wake-up would cost a millisecond, not a hang.
//!
//! # 5. What a free names
//! An entry holds, besides the sample's id and epoch, what the block's free must
//! say for a consumer to take it out of its aggregates: the key of the allocating stack,
//! the allocation's clock reading, the sampled size and the sample points. They travel
//! with the death's event ([`WireEvent::Death`](crate::engine::queue::WireEvent::Death)), so
//! `memprof record`'s collector keeps no map from sample ids to blocks of its own: in the
//! sampled mode the program's table is small (sampled blocks only) and a second map
//! outside it would double it for nothing. Packed ([`Packed`]), the slot is 40 bytes instead
//! of 24.
//!
//! # 6. The exact mode under a collector: no table
//! In the exact mode every block is sampled, and the table held every live block of the
//! program: it doubled the memory of a program with many small blocks (CPython's), and its
//! insertions and removals, each under a shard's lock, were the largest part of the sample
//! path. So when the consumer is another process ([`by_address`]: `memprof record`'s or
//! `attach`'s collector, which keeps the one map from address to block, out of the
//! program), the exact mode keeps no table: an allocation's event carries its address as
//! always, and a free's event carries only its address and the clock reading at the free's
//! start ([`Freed::Unnamed`], a `WireEvent::Free`). The filter's mask is 0 for the session
//! and its counter 0 saturated, so every `free` takes the slow path, which pushes that
//! event. The
//! collector pairs a free with the block at its address that was allocated before it (its
//! allocation's reading is not later than the free's); a free it finds no such block for is
//! of a block it never saw (allocated before the session, or lost) or one already ended by
//! a reuse of its address (a `realloc`'s free is pushed once the real `realloc` returned,
//! with the reading taken before it, and another thread may have been given the address
//! and pushed its allocation first: the new allocation then ends the old block).

pub use crate::engine::entry::Entry;
use core::cell::{Cell, UnsafeCell};
use core::mem::size_of;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::sys::hash::address as hash;

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;
/// A first table fits in one page (see [`Slot`]'s size).
const MIN_CAP: usize = 64;
/// Deferred frees a shard holds (§4).
pub(crate) const DEFERRED: usize = 8;

/// What [`insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    /// The block is in the table.
    Done,
    /// The table could not grow: the block is not tracked (its free will not be seen).
    NoMemory,
    /// This thread holds the shard's lock already (a signal handler interrupted it inside
    /// the table, §4): nothing was done.
    Reentrant,
}

struct Table {
    slots: *mut Slot,
    cap: usize,
    len: usize,
    /// Marks ([`mark`]) outstanding on this shard's counters: while there are any, a
    /// counter of the shard may hold a measuring scope's block, and `clear` leaves it.
    marks: usize,
}

/// A free deferred by a signal handler (§4): the block's address (0: the slot is free) and
/// the clock reading of the free.
struct Deferred {
    addr: AtomicUsize,
    time: AtomicU64,
}

/// Each on its own cache lines, so threads locking different shards do not contend. The
/// fields every operation touches come first, on one line; the deferred slots follow.
#[repr(align(128))]
struct Shard {
    /// 0 when free, else the owner's thread pointer (§4).
    lock: AtomicUsize,
    /// Threads sleeping for the lock, and the word they sleep on (§4a).
    sleepers: AtomicU32,
    wakes: AtomicU32,
    /// Some deferred slot may be taken (§4).
    pending: AtomicBool,
    table: UnsafeCell<Table>,
    deferred: [Deferred; DEFERRED],
}

// SAFETY: `table` is only touched while `lock` is held (see `with_shard`); the deferred
// slots are atomics.
unsafe impl Sync for Shard {}

static TABLE: [Shard; SHARDS] = [const {
    Shard {
        lock: AtomicUsize::new(0),
        sleepers: AtomicU32::new(0),
        wakes: AtomicU32::new(0),
        pending: AtomicBool::new(false),
        table: UnsafeCell::new(Table::EMPTY),
        deferred: [const { Deferred { addr: AtomicUsize::new(0), time: AtomicU64::new(0) } };
            DEFERRED],
    }
}; SHARDS];

/// The shard of the blocks whose filter counter is `fi` (§2).
#[inline]
fn shard_index(fi: usize) -> usize {
    ((fi as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SHARD_BITS)) as usize
}

/// Runs `f` on shard `i`'s table under its lock, after the deaths deferred to the shard
/// (§4). `None`, without waiting, when this thread holds the lock already.
#[inline(always)]
fn with_shard<R>(i: usize, f: impl FnOnce(&mut Table) -> R) -> Option<R> {
    let shard = &TABLE[i];
    let me = crate::sys::tls::thread_id();
    if let Err(owner) = shard.lock.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
        if owner == me {
            return None;
        }
        wait_for(shard, me);
    }
    struct Unlock<'a>(&'a Shard, usize);
    impl Drop for Unlock<'_> {
        #[inline(always)]
        fn drop(&mut self) {
            // An exchange, not a store: its barrier orders the release before the look
            // at the sleepers, as a sleeper's count is ordered before its look at the
            // lock (§4a).
            self.0.lock.swap(0, Ordering::SeqCst);
            if self.0.sleepers.load(Ordering::Relaxed) != 0 {
                wake_one(self.0);
            }
            // A signal handler deferred a free while this thread held the shard (§4): take
            // the shard again, normally now, and so the block out.
            if self.0.pending.load(Ordering::Relaxed) {
                flush_shard(self.1);
            }
        }
    }
    let _unlock = Unlock(shard, i);
    // SAFETY: the spin lock gives this thread exclusive access to the table.
    let table = unsafe { &mut *shard.table.get() };
    if shard.pending.load(Ordering::Relaxed) {
        take_deferred(shard, table);
    }
    Some(f(table))
}

/// Takes the blocks whose frees were deferred to `shard` out of its table and reports their
/// deaths (§4). The caller holds the shard's lock.
#[cold]
#[inline(never)]
fn take_deferred(shard: &Shard, table: &mut Table) {
    // Cleared first: a handler that defers while this runs sets it again.
    shard.pending.store(false, Ordering::Relaxed);
    for d in &shard.deferred {
        let addr = d.addr.load(Ordering::Relaxed);
        if addr == 0 {
            continue;
        }
        let time = d.time.load(Ordering::Relaxed);
        // Only the lock's owner clears a slot (a handler only fills a free one).
        d.addr.store(0, Ordering::Relaxed);
        if let Some(entry) = table.take(addr) {
            filter_dec(filter_index(addr));
            crate::engine::push::push_death(&entry, time);
        }
    }
}

/// Defers the free of `addr` to whoever takes shard `i`'s lock next, which this thread
/// holds (§4). False when every slot is taken.
#[cold]
#[inline(never)]
fn defer(i: usize, addr: usize) -> bool {
    let shard = &TABLE[i];
    let time = crate::engine::clock::now();
    for d in &shard.deferred {
        if d.addr.compare_exchange(0, addr, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            d.time.store(time, Ordering::Relaxed);
            shard.pending.store(true, Ordering::Relaxed);
            return true;
        }
    }
    false
}

/// Takes shard `i` to handle its deferred frees (§4).
#[cold]
#[inline(never)]
fn flush_shard(i: usize) {
    let _ = with_shard(i, |_| ());
}

/// Visits the shards with deferred deaths (§4). Off the sample path (the drain), as a
/// backstop: the thread that held the shard takes them out as soon as it released it.
pub(crate) fn flush_deferred() {
    for (i, shard) in TABLE.iter().enumerate() {
        if shard.pending.load(Ordering::Acquire) {
            flush_shard(i);
        }
    }
}

impl Table {
    /// A table without slots.
    const EMPTY: Table = Table { slots: core::ptr::null_mut(), cap: 0, len: 0, marks: 0 };

    fn slot(&self, i: usize) -> *mut Slot {
        // SAFETY: callers pass i < cap; slots has cap entries.
        unsafe { self.slots.add(i) }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) -> bool {
        let new_cap = if self.cap == 0 { MIN_CAP } else { self.cap * 2 };
        let Some(bytes) = new_cap.checked_mul(size_of::<Slot>()) else {
            return false;
        };
        // `mmap` sets errno when it fails; the sample path keeps the program's.
        let saved = crate::sys::errno::SavedErrno::save();
        let new = crate::sys::rawmem::map(bytes) as *mut Slot;
        saved.restore();
        if new.is_null() {
            return false;
        }
        let marks = self.marks;
        let old = core::mem::replace(self, Table { slots: new, cap: new_cap, len: 0, marks });
        for i in 0..old.cap {
            // SAFETY: i < old.cap.
            let s = unsafe { *old.slot(i) };
            if s.addr != 0 {
                self.put(s.addr, s.packed);
            }
        }
        if !old.slots.is_null() {
            // SAFETY: old.slots came from rawmem::map with old.cap slots and is no longer
            // referenced.
            unsafe { crate::sys::rawmem::unmap(old.slots as *mut u8, old.cap * size_of::<Slot>()) };
        }
        true
    }

    /// Inserts, after any entry of the same address (§3); the caller ensures there is room.
    fn put(&mut self, addr: usize, packed: Packed) {
        let mask = self.cap - 1;
        let mut i = (hash(addr) as usize) & mask;
        loop {
            let s = self.slot(i);
            // SAFETY: i <= mask < cap.
            unsafe {
                if (*s).addr == 0 {
                    *s = Slot { addr, packed };
                    self.len += 1;
                    return;
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The index of `addr`'s slot, if it has one (the oldest, §3).
    #[inline(always)]
    fn find(&self, addr: usize) -> Option<usize> {
        self.find_where(addr, |_| true)
    }

    /// The index of the oldest slot of `addr` whose entry `pick` accepts (§3).
    #[inline(always)]
    fn find_where(&self, addr: usize, pick: impl Fn(&Packed) -> bool) -> Option<usize> {
        if self.cap == 0 {
            return None;
        }
        let mask = self.cap - 1;
        let mut i = (hash(addr) as usize) & mask;
        loop {
            // SAFETY: i <= mask < cap.
            let s = unsafe { *self.slot(i) };
            if s.addr == 0 {
                return None;
            }
            if s.addr == addr && pick(&s.packed) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline(always)]
    fn take(&mut self, addr: usize) -> Option<Entry> {
        let i = self.find(addr)?;
        let mask = self.cap - 1;
        // SAFETY: i < cap.
        let found = unsafe { (*self.slot(i)).packed }.entry();
        // Backward-shift deletion: move later members of the probe run into the hole.
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            // SAFETY: j <= mask < cap.
            let s = unsafe { *self.slot(j) };
            if s.addr == 0 {
                break;
            }
            let home = (hash(s.addr) as usize) & mask;
            // Move s if its home is not cyclically within (hole, j].
            let dist_home = j.wrapping_sub(home) & mask;
            let dist_hole = j.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                // SAFETY: hole, j < cap.
                unsafe { *self.slot(hole) = s };
                hole = j;
            }
        }
        // SAFETY: hole < cap.
        unsafe { (*self.slot(hole)).addr = 0 };
        self.len -= 1;
        Some(found)
    }
}

/// The longest sleep for a shard's lock before looking again (§4a).
const SLEEP_NS: u64 = 1_000_000;

/// Takes a shard's lock that another thread held when first tried: spins a little, then
/// sleeps until the owner releases it (§4a). (The owner never becomes this thread
/// meanwhile: a signal handler that takes the lock on this thread releases it before
/// returning.)
#[cold]
#[inline(never)]
fn wait_for(shard: &Shard, me: usize) {
    let lock = &shard.lock;
    let mut spins = 0u32;
    while lock.load(Ordering::Relaxed) != 0
        || lock.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed).is_err()
    {
        spins += 1;
        // Under a seccomp filter, which may refuse the futex (`sys::seccomp`), no sleep.
        if spins < 64 || crate::sys::seccomp::filtered() {
            core::hint::spin_loop();
            continue;
        }
        let seen = shard.wakes.load(Ordering::Relaxed);
        shard.sleepers.fetch_add(1, Ordering::SeqCst);
        // Counted before this look: an owner that releases after it sees the count and
        // moves `wakes`, so the sleep below returns at once or is woken.
        if lock.load(Ordering::SeqCst) != 0 {
            // A free's path saves no errno of its own: the sleep keeps it.
            let saved = crate::sys::errno::SavedErrno::save();
            let err = crate::sys::futex::wait(&shard.wakes, seen, SLEEP_NS);
            let unchanged = shard.wakes.load(Ordering::Relaxed) == seen;
            crate::sys::seccomp::after_futex_wait(err, unchanged);
            saved.restore();
        }
        shard.sleepers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Wakes one thread sleeping for `shard`'s lock (§4a).
#[cold]
#[inline(never)]
fn wake_one(shard: &Shard) {
    shard.wakes.fetch_add(1, Ordering::Release);
    // Any release may come here, a free's too: the wake keeps errno.
    let saved = crate::sys::errno::SavedErrno::save();
    crate::sys::futex::wake(&shard.wakes, 1);
    saved.restore();
}

/// A free when frees are named by address (§6): its clock reading, or `None` when the
/// process is a child that no fork handler told of and the parent's session cannot be
/// left here (`forked` §2).
#[cold]
#[inline(never)]
fn unnamed(time: u64) -> Option<Freed> {
    if crate::engine::forked::unhandled() && !crate::engine::forked::handle() {
        return None;
    }
    Some(Freed::Unnamed { time })
}

/// Records that the block at `addr` is the sampled block `entry` (see [`Insert`]).
#[inline(always)]
pub fn insert(addr: usize, entry: Entry) -> Insert {
    if addr == 0 {
        return Insert::NoMemory;
    }
    let Some(packed) = Packed::of(&entry) else {
        return Insert::NoMemory;
    };
    filter::ready();
    let fi = filter_index(addr);
    let done = with_shard(shard_index(fi), |t| {
        if (t.len + 1) * 2 > t.cap && !t.grow() {
            return Insert::NoMemory;
        }
        t.put(addr, packed);
        filter_inc(fi);
        Insert::Done
    });
    done.unwrap_or(Insert::Reentrant)
}

/// [`insert`] of `entry` stamped, with the shard's lock held, with the clock reading that
/// is the allocation's time (returned): a wait for the lock, whose holder may have been
/// preempted for hundreds of milliseconds, then counts in no sampled block's life
/// (`push` §2). A refused insertion (a signal handler's, §4) reads the clock unlocked.
#[inline]
pub(crate) fn insert_stamped(addr: usize, mut entry: Entry) -> (Insert, u64) {
    if addr == 0 {
        return (Insert::NoMemory, crate::engine::clock::now());
    }
    filter::ready();
    let fi = filter_index(addr);
    let done = with_shard(shard_index(fi), |t| {
        entry.time = crate::engine::clock::now();
        let Some(packed) = Packed::of(&entry) else {
            return (Insert::NoMemory, entry.time);
        };
        if (t.len + 1) * 2 > t.cap && !t.grow() {
            return (Insert::NoMemory, entry.time);
        }
        t.put(addr, packed);
        filter_inc(fi);
        (Insert::Done, entry.time)
    });
    done.unwrap_or_else(|| (Insert::Reentrant, crate::engine::clock::now()))
}

/// Sets the allocation time of sample `id`'s entry at `addr` to `time`: its event waited
/// for room in a full queue and was pushed with a later reading (`push::retimed`), which
/// the block's free must name. Nothing happens when this thread holds the shard (a signal
/// handler, §4): the free then names the first reading, and the consumer counts the block's
/// death as one it cannot place.
#[cold]
#[inline(never)]
pub(crate) fn retime(addr: usize, id: u64, time: u64) {
    let fi = filter_index(addr);
    let _ = with_shard(shard_index(fi), |t| {
        if let Some(i) = t.find_where(addr, |p| p.id() == id) {
            // SAFETY: `find_where` returns an index below cap; the shard's lock is held.
            unsafe { (*t.slot(i)).packed.time = time };
        }
    });
}

/// Removes and returns the sample of the block at `addr`, if it is a sampled block.
/// The common case (not sampled) costs one load.
#[inline]
pub fn remove(addr: usize) -> Option<Entry> {
    let fi = filter_index(addr);
    if FILTER.counters[fi].load(Ordering::Relaxed) == 0 {
        return None;
    }
    remove_slow(addr, fi)
}

#[cold]
#[inline(never)]
fn remove_slow(addr: usize, fi: usize) -> Option<Entry> {
    remove_at(addr, fi)
}

/// [`remove`] for the block's free (the allocator's `dealloc`, or a reallocation that
/// frees it): the same one load when its counter is 0; past it, a block that the freeing
/// thread measures is counted free too (`engine::measure` §2). The profiler's own removals
/// (a lost event's entry) use [`remove`], which frees nothing.
/// With the entry comes the clock reading of the free, taken before the shard's lock: see
/// [`Freed`].
#[inline]
pub fn remove_freed(addr: usize) -> Option<Freed> {
    let fi = filter_index(addr);
    if FILTER.counters[fi].load(Ordering::Relaxed) == 0 {
        return None;
    }
    remove_freed_slow(addr, fi)
}

#[cold]
#[inline(never)]
fn remove_freed_slow(addr: usize, fi: usize) -> Option<Freed> {
    let time = crate::engine::clock::now();
    if BY_ADDRESS.load(Ordering::Relaxed) {
        return unnamed(time);
    }
    let found = remove_at(addr, fi);
    // A block a measuring thread counts raised its counter too.
    if let Some(hook) = MARKED_FREE.with(Cell::get) {
        hook(addr);
    }
    found.map(|entry| Freed::Sampled { entry, time })
}

/// A block's free as the sample path reports it, with the clock reading at the free's
/// start. The reading is taken before the shard's lock, not after: under hundreds of threads
/// on a few cores the lock's holder can be preempted for hundreds of milliseconds, and a
/// death stamped after that wait would keep the block live, in the profile, for as long.
/// Only sampled blocks pay that wait (unsampled ones never reach the table), so the live
/// estimate would count sampled blocks as longer-lived than the program's blocks are, and
/// read high: the calibration suite's churn under load showed peaks twice the truth.
#[derive(Clone, Copy, Debug)]
pub enum Freed {
    /// A sampled block taken out of the table: its entry names it.
    Sampled {
        /// The block's table entry.
        entry: Entry,
        /// The clock reading ([`crate::engine::clock::now`]) at the free's start.
        time: u64,
    },
    /// A block of a session that names its frees by address (§6): the collector finds
    /// the block from its address.
    Unnamed {
        /// The clock reading at the free's start.
        time: u64,
    },
}

thread_local! {
    /// What the calling thread's open scope (`engine::measure` §2) does with the free of a
    /// block: set while the scope is open, read on [`remove_freed`]'s slow path only. A
    /// hook, not a call: the scope is built on this table (it [`mark`]s its blocks here),
    /// so the table may not name it (imports run downward).
    static MARKED_FREE: Cell<Option<fn(usize)>> = const { Cell::new(None) };
}

/// Sets the calling thread's hook for the frees that reach [`remove_freed`]'s slow path
/// (`None` clears it): an open scope's (`engine::measure` §2).
pub(crate) fn on_marked_free(hook: Option<fn(usize)>) {
    MARKED_FREE.with(|h| h.set(hook));
}

/// Raises the filter counter of `addr` without a table entry: its free then reaches
/// [`remove`]'s slow path (a measured block, `engine::measure` §2). `false` when this
/// thread holds the block's shard already (a signal handler, §4).
pub(crate) fn mark(addr: usize) -> bool {
    filter::ready();
    let fi = filter_index(addr);
    with_shard(shard_index(fi), |t| {
        filter_inc(fi);
        t.marks += 1;
    })
    .is_some()
}

/// Lowers the counter [`mark`] raised.
pub(crate) fn unmark(addr: usize) {
    let fi = filter_index(addr);
    let _ = with_shard(shard_index(fi), |t| {
        filter_dec(fi);
        t.marks = t.marks.saturating_sub(1);
    });
}

/// [`remove`] after its filter test: for a caller whose own fast path found the block's
/// counter non-zero (the preload library's `free`). Inlined there.
#[doc(hidden)]
#[inline(always)]
pub fn remove_counted(addr: usize) -> Option<Freed> {
    let time = crate::engine::clock::now();
    if BY_ADDRESS.load(Ordering::Relaxed) {
        return unnamed(time);
    }
    remove_at(addr, filter_index(addr)).map(|entry| Freed::Sampled { entry, time })
}

/// Removes `addr`'s entry. From a signal handler that interrupted this thread inside the
/// block's shard, the removal is deferred (§4) and `None` returned: the block's death is
/// reported by whoever takes the shard next.
#[inline(always)]
fn remove_at(addr: usize, fi: usize) -> Option<Entry> {
    // In a child that no fork handler told of, the table is the parent's and its locks may
    // be held by threads the child lacks: handled first (`forked` §2), or left alone.
    if crate::engine::forked::unhandled() && !crate::engine::forked::handle() {
        return None;
    }
    let i = shard_index(fi);
    let found = with_shard(i, |t| {
        let found = t.take(addr);
        if found.is_some() {
            filter_dec(fi);
        }
        found
    });
    match found {
        Some(found) => found,
        None => {
            removal_deferred(i, addr);
            None
        }
    }
}

#[cold]
#[inline(never)]
fn removal_deferred(i: usize, addr: usize) {
    if !defer(i, addr) {
        // The block stays in the table: its death is not seen.
        crate::engine::lost::UNTRACKED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Forgets every entry (a new session starts). Not called from a signal handler.
pub(crate) fn clear() {
    for i in 0..SHARDS {
        let _ = with_shard(i, |t| {
            for j in 0..t.cap {
                // SAFETY: j < cap.
                let s = unsafe { &mut *t.slot(j) };
                if s.addr != 0 {
                    // The entry's counter belongs to this shard (§2), whose lock is held.
                    filter_dec(filter_index(s.addr));
                    s.addr = 0;
                }
            }
            t.len = 0;
        });
    }
    // Every entry decremented its own counter above; what is left is saturated counters
    // (which never decrement) and the marks of scopes measuring on other threads, which
    // outlive sessions. The filter is swept only if a counter ever saturated, and a
    // counter is zeroed only under its shard's lock, when the shard holds no mark: a
    // scope's block keeps its counter, so its free is still seen. A counter left is swept
    // by a later `clear`.
    if SATURATED.swap(false, Ordering::Relaxed) {
        let mut left = false;
        for (fi, c) in FILTER.counters.iter().enumerate() {
            // Reading an untouched page maps the shared zero page; only dirty counters are
            // written.
            if c.load(Ordering::Relaxed) != 0 {
                let zeroed = with_shard(shard_index(fi), |t| {
                    if t.marks == 0 {
                        c.store(0, Ordering::Relaxed);
                    }
                    t.marks == 0
                });
                left |= zeroed != Some(true);
            }
        }
        if left {
            SATURATED.store(true, Ordering::Relaxed);
        }
    }
}

mod filter;
mod fork;
mod packed;
pub(crate) use filter::{by_address, name_by_address, names_by_address};
use filter::{filter_dec, filter_inc, filter_index, BY_ADDRESS, SATURATED};
pub use filter::{Filter, FILTER, FILTER_COUNTERS_AT, FILTER_MASK, FILTER_SHIFT};
pub(crate) use fork::{held_here, lock_all, reset_in_child, unlock_all, unlock_all_in_child};
use packed::{Packed, Slot};

#[cfg(test)]
mod tests;
