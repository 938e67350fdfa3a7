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
//! into memory from `rawmem`, never from the profiled allocator. An insertion that cannot get
//! memory fails and the caller counts the sample as untracked.
//!
//! # 3. Address reuse
//! A block is removed from the table *before* the real free returns its memory, so when
//! another thread gets the same address back immediately, its insertion finds the slot free
//! and the two samples never mix.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

const FILTER_LEN: usize = 1 << 21;
/// The filter's index of `addr` is `(addr >> FILTER_SHIFT) & FILTER_MASK`.
#[doc(hidden)]
pub const FILTER_SHIFT: u32 = 4;
/// See [`FILTER_SHIFT`].
#[doc(hidden)]
pub const FILTER_MASK: usize = FILTER_LEN - 1;
const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;
const MIN_CAP: usize = 64;

/// The counting filter in front of the table: a block whose counter is 0 is not in it.
/// Public only for allocators that inline [`remove`]'s first test (the preload library's
/// `free`, in assembly): `FILTER[(addr >> FILTER_SHIFT) & FILTER_MASK] == 0` means
/// "not sampled", anything else calls [`remove`].
#[doc(hidden)]
pub static FILTER: [AtomicU8; FILTER_LEN] = [const { AtomicU8::new(0) }; FILTER_LEN];

/// What the table keeps for a sampled block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Sample id.
    pub id: u64,
    /// Session epoch of the sample.
    pub epoch: u64,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    addr: usize,
    entry: Entry,
}

struct Table {
    slots: *mut Slot,
    cap: usize,
    len: usize,
}

/// Each on its own cache lines, so threads locking different shards do not contend.
#[repr(align(128))]
struct Shard {
    lock: AtomicBool,
    table: UnsafeCell<Table>,
}

// SAFETY: `table` is only touched while `lock` is held (see `with_shard`).
unsafe impl Sync for Shard {}

static TABLE: [Shard; SHARDS] = [const {
    Shard {
        lock: AtomicBool::new(false),
        table: UnsafeCell::new(Table { slots: core::ptr::null_mut(), cap: 0, len: 0 }),
    }
}; SHARDS];

#[inline]
fn hash(addr: usize) -> u64 {
    ((addr as u64) >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The filter is direct-mapped on the address: malloc's blocks are 16-byte aligned and
/// spread over the low bits already, and skipping the multiply keeps `free` short.
#[inline]
fn filter_index(addr: usize) -> usize {
    (addr >> FILTER_SHIFT) & FILTER_MASK
}

/// The shard of the blocks whose filter counter is `fi` (§2).
#[inline]
fn shard_index(fi: usize) -> usize {
    ((fi as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SHARD_BITS)) as usize
}

#[inline(always)]
fn with_shard<R>(i: usize, f: impl FnOnce(&mut Table) -> R) -> R {
    let shard = &TABLE[i];
    if shard.lock.swap(true, Ordering::Acquire) {
        wait_for(&shard.lock);
    }
    struct Unlock<'a>(&'a AtomicBool);
    impl Drop for Unlock<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    let _unlock = Unlock(&shard.lock);
    // SAFETY: the spin lock gives this thread exclusive access to the table.
    f(unsafe { &mut *shard.table.get() })
}

impl Table {
    fn slot(&self, i: usize) -> *mut Slot {
        // SAFETY: callers pass i < cap; slots has cap entries.
        unsafe { self.slots.add(i) }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) -> bool {
        let new_cap = if self.cap == 0 { MIN_CAP } else { self.cap * 2 };
        let Some(bytes) = new_cap.checked_mul(core::mem::size_of::<Slot>()) else {
            return false;
        };
        let new = crate::sys::rawmem::alloc_zeroed(bytes) as *mut Slot;
        if new.is_null() {
            return false;
        }
        let old = core::mem::replace(self, Table { slots: new, cap: new_cap, len: 0 });
        for i in 0..old.cap {
            // SAFETY: i < old.cap.
            let s = unsafe { *old.slot(i) };
            if s.addr != 0 {
                let _ = self.put(s.addr, s.entry);
            }
        }
        if !old.slots.is_null() {
            // SAFETY: old.slots came from rawmem and is no longer referenced.
            unsafe { crate::sys::rawmem::free(old.slots as *mut u8) };
        }
        true
    }

    /// Inserts or overwrites; the caller ensures there is room. True when `addr` is new.
    fn put(&mut self, addr: usize, entry: Entry) -> bool {
        let mask = self.cap - 1;
        let mut i = (hash(addr) as usize) & mask;
        loop {
            let s = self.slot(i);
            // SAFETY: i <= mask < cap.
            unsafe {
                if (*s).addr == 0 {
                    *s = Slot { addr, entry };
                    self.len += 1;
                    return true;
                }
                if (*s).addr == addr {
                    (*s).entry = entry;
                    return false;
                }
            }
            i = (i + 1) & mask;
        }
    }

    fn take(&mut self, addr: usize) -> Option<Entry> {
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
            if s.addr == addr {
                break;
            }
            i = (i + 1) & mask;
        }
        // SAFETY: i < cap.
        let found = unsafe { (*self.slot(i)).entry };
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

/// Takes a shard's lock that was held when first tried: spins a little, then yields.
#[cold]
#[inline(never)]
fn wait_for(lock: &AtomicBool) {
    let mut spins = 0u32;
    while lock.swap(true, Ordering::Acquire) {
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

/// Set once any counter has saturated (then `clear` must sweep the whole filter).
static SATURATED: AtomicBool = AtomicBool::new(false);

/// Counts a block in at counter `i`; the caller holds the lock of `i`'s shard, which
/// serialises every update of the counter (§2).
#[inline(always)]
fn filter_inc(i: usize) {
    let c = &FILTER[i];
    let v = c.load(Ordering::Relaxed);
    if v < u8::MAX {
        c.store(v + 1, Ordering::Relaxed);
        if v + 1 == u8::MAX {
            SATURATED.store(true, Ordering::Relaxed);
        }
    }
}

/// Counts a block out at counter `i` (a saturated counter stays); the caller holds the lock
/// of `i`'s shard.
#[inline(always)]
fn filter_dec(i: usize) {
    let c = &FILTER[i];
    let v = c.load(Ordering::Relaxed);
    if v > 0 && v < u8::MAX {
        c.store(v - 1, Ordering::Relaxed);
    }
}

/// Records that the block at `addr` is the sampled block `entry`. Returns false when the
/// table could not grow (the sample is then untracked: its free will not be seen).
#[inline(always)]
pub fn insert(addr: usize, entry: Entry) -> bool {
    if addr == 0 {
        return false;
    }
    let fi = filter_index(addr);
    with_shard(shard_index(fi), |t| {
        if (t.len + 1) * 2 > t.cap && !t.grow() {
            return false;
        }
        if t.put(addr, entry) {
            filter_inc(fi);
        }
        true
    })
}

/// Removes and returns the sample of the block at `addr`, if it is a sampled block.
/// The common case (not sampled) costs one load.
#[inline]
pub fn remove(addr: usize) -> Option<Entry> {
    let fi = filter_index(addr);
    if FILTER[fi].load(Ordering::Relaxed) == 0 {
        return None;
    }
    remove_slow(addr, fi)
}

#[cold]
#[inline(never)]
fn remove_slow(addr: usize, fi: usize) -> Option<Entry> {
    remove_at(addr, fi)
}

/// [`remove`] after its filter test: for a caller whose own fast path found the block's
/// counter non-zero (the preload library's `free`). Inlined there.
#[doc(hidden)]
#[inline(always)]
pub fn remove_counted(addr: usize) -> Option<Entry> {
    remove_at(addr, filter_index(addr))
}

#[inline(always)]
fn remove_at(addr: usize, fi: usize) -> Option<Entry> {
    with_shard(shard_index(fi), |t| {
        let found = t.take(addr);
        if found.is_some() {
            filter_dec(fi);
        }
        found
    })
}

/// Forgets every entry (a new session starts).
pub(crate) fn clear() {
    for i in 0..SHARDS {
        with_shard(i, |t| {
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
    // Every entry decremented its own counter above; only saturated counters (which never
    // decrement) can be left, so the whole filter is swept only if one ever saturated.
    if SATURATED.swap(false, Ordering::Relaxed) {
        for c in FILTER.iter() {
            // Reading an untouched page maps the shared zero page; only dirty counters are
            // written.
            if c.load(Ordering::Relaxed) != 0 {
                c.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Takes every shard lock (before `fork`, so the child never inherits a held lock).
pub(crate) fn lock_all() {
    for shard in TABLE.iter() {
        while shard.lock.swap(true, Ordering::Acquire) {
            core::hint::spin_loop();
        }
    }
}

/// Releases the locks taken by [`lock_all`].
pub(crate) fn unlock_all() {
    for shard in TABLE.iter() {
        shard.lock.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The table is process-global; each test uses its own address range.

    #[test]
    fn insert_remove_many() {
        let base = 0x7000_0000_0000usize;
        for i in 0..10_000usize {
            assert!(insert(base + i * 16, Entry { id: i as u64, epoch: 7 }));
        }
        for i in (0..10_000usize).rev() {
            assert_eq!(remove(base + i * 16), Some(Entry { id: i as u64, epoch: 7 }));
            assert_eq!(remove(base + i * 16), None);
        }
    }

    #[test]
    fn concurrent_reuse() {
        let threads: Vec<_> = (0..4usize)
            .map(|t| {
                std::thread::spawn(move || {
                    let base = 0x6000_0000_0000usize + t * 0x1000_0000;
                    for round in 0..2_000u64 {
                        for i in 0..50usize {
                            assert!(insert(base + i * 32, Entry { id: round, epoch: 1 }));
                        }
                        for i in 0..50usize {
                            assert_eq!(remove(base + i * 32).map(|e| e.id), Some(round));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
