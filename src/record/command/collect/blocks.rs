//! The live blocks of a process whose session names its frees by address (`engine::live`
//! §6: the exact mode keeps no table in the program): the collector's one map from
//! address to block, and how a free finds its block in it.
//!
//! # Pairing a free with its block
//! A free's event says where and when (the clock reading at the free's start); an
//! allocation's says where and when the program got the block (a reading taken after the
//! real allocation). The program's order gives, at one address: an allocation, its free,
//! the next allocation, each reading later than the one before. Events of one address come
//! through the ring in that order but for one case: a `realloc` pushes its old block's free
//! once the real `realloc` returned (with the reading taken before it, so that a failed
//! one leaves the block live), and another thread given the address meanwhile may push
//! its allocation first. So:
//! - an allocation at an address that holds a block ends that block, at the new
//!   allocation's time (its free is the one still on its way);
//! - a free ends the block at its address when that block was allocated no later than the
//!   free; a free older than the block there is the late free of a block so ended, and is
//!   dropped; a free at an address that holds nothing is of a block never seen (allocated
//!   before the session, its event lost, or the program's own mistake), and is dropped too;
//! - a free the queue kept aside ([`Blocks::freed_later`]) may come before its block's
//!   allocation (a slot not yet published ahead of it): it waits for it, bounded.

use crate::profile::{Free, StackId};
use crate::session::driver::MAX_WAITING_FREES;
use crate::sys::hash::FastHash;
use std::collections::HashMap;

/// A live block: what its free must name, and its allocation's raw clock reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Block {
    pub(super) stack: StackId,
    /// The id the fold gave the block's (stack, size) pair ([`NO_PAIR`]: none), so that
    /// its free need not look it up: in the padding after `stack`, no memory of its own.
    pub(super) pair: u32,
    pub(super) size: u64,
    pub(super) k: u64,
    /// The allocation's clock reading as the program took it (raw: the program's clock),
    /// converted again at the free (the conversion is a fixed function of the reading): a
    /// second word per live block would be megabytes of the collector's memory in the
    /// exact mode, for a conversion of a few instructions.
    pub(super) alloc_raw: u64,
}

/// [`Block::pair`] of a block whose pair has no id.
pub(super) const NO_PAIR: u32 = u32::MAX;

// The pair's id takes no room of its own (`Block::pair`).
const _: () = assert!(size_of::<Block>() == 32);

impl Block {
    /// The id of the block's pair, when the fold gave it one.
    pub(super) fn pair(&self) -> Option<u32> {
        (self.pair != NO_PAIR).then_some(self.pair)
    }

    /// The block's free at raw reading `time_raw`, times converted by `ns` (raw readings to
    /// session nanoseconds).
    pub(super) fn free(&self, time_raw: u64, mut ns: impl FnMut(u64) -> u64) -> Free {
        Free {
            // The fold and the file name a block by the fields below (the file keeps no
            // sample id), so the map keeps none: 0, as a version-2 stream's frees say.
            id: 0,
            time_ns: ns(time_raw),
            stack: self.stack,
            size: self.size,
            k: self.k,
            alloc_ns: ns(self.alloc_raw),
            life_ns: None,
        }
    }
}

/// The blocks by address, and the frees kept aside that wait for theirs.
#[derive(Default)]
pub(super) struct Blocks {
    live: ByAddress,
    /// Frees from the queue's table whose address held no block yet: (address, reading).
    waiting: Vec<(usize, u64)>,
}

impl Blocks {
    /// Block `b` was allocated at `addr`. Returns the block it ends there, if any, with the
    /// reading it ends at (the new block's).
    #[inline]
    pub(super) fn allocated(&mut self, addr: usize, b: Block) -> Option<(Block, u64)> {
        let at = b.alloc_raw;
        self.live.insert(addr, b).map(|old| (old, at.max(old.alloc_raw)))
    }

    /// The block at `addr` was freed at reading `time_raw`: the block it ends, if any.
    #[inline]
    pub(super) fn freed(&mut self, addr: usize, time_raw: u64) -> Option<Block> {
        self.live.remove_if(addr, |b| b.alloc_raw <= time_raw)
    }

    /// A free from the queue's table: as [`Blocks::freed`], or kept to try again after the
    /// next drain ([`Blocks::retry`]) when the address holds nothing yet.
    pub(super) fn freed_later(&mut self, addr: usize, time_raw: u64) -> Option<Block> {
        if self.live.get(addr).is_none() {
            self.waiting.push((addr, time_raw));
            if self.waiting.len() > MAX_WAITING_FREES {
                // Mostly frees of blocks never seen: the oldest go first.
                self.waiting.drain(..self.waiting.len() - MAX_WAITING_FREES);
            }
            return None;
        }
        self.freed(addr, time_raw)
    }

    /// The kept frees whose addresses now hold a block: each ends it (when allocated no
    /// later than the free) or is dropped (a later block's); `end` is told of each block
    /// ended, with its free's reading.
    pub(super) fn retry(&mut self, mut end: impl FnMut(Block, u64)) -> u64 {
        if self.waiting.is_empty() {
            return 0;
        }
        let mut ended = 0;
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.retain(|&(addr, time_raw)| {
            if self.live.get(addr).is_none() {
                return true;
            }
            if let Some(b) = self.freed(addr, time_raw) {
                end(b, time_raw);
                ended += 1;
            }
            false
        });
        self.waiting = waiting;
        ended
    }

    /// The live blocks, in no order.
    pub(super) fn live(&self) -> impl Iterator<Item = Block> + '_ {
        let l = &self.live;
        let slots = l.slots.iter().flat_map(|chunk| chunk.iter().filter(|&&i| i != 0));
        slots.map(|&i| l.slab[i as usize - 1].block()).chain(l.spill.values().copied())
    }

    /// Live blocks.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.live.len
    }
}

/// Address bits below a granule: one slot of a chunk per 16 bytes (malloc's alignment).
const GRANULE_BITS: u32 = 4;
/// Slots of a chunk: a chunk covers 64 KiB of addresses, in 16 KiB of slot indexes.
const CHUNK_SLOTS: usize = 1 << 12;

/// A live block as the slab keeps it: 24 bytes, where the block and its address took 48.
/// The exact mode's millions of live blocks made the slab most of the collector's memory
/// (the CPython workload of `cargo bench --bench pipeline`), and an entry that straddles
/// two cache lines costs the event two misses (half of the 48-byte entries did, a quarter
/// of the 24-byte ones do). What it leaves out is known otherwise:
/// the points are the size (every exact-mode block's), and of the address only the bits
/// below its granule are kept, since its slot names the rest. A block of other points, or
/// too big for the bits left (a damaged event), goes to the spill whole.
#[derive(Clone, Copy, Debug)]
struct Kept {
    alloc_raw: u64,
    /// The size, and the address's bits below its granule in the top [`GRANULE_BITS`].
    size_low: u64,
    stack: StackId,
    pair: u32,
}

const _: () = assert!(size_of::<Kept>() == 24);

/// Where [`Kept::size_low`] keeps the address's low bits.
const LOW_SHIFT: u32 = 64 - GRANULE_BITS;

/// The bits of `addr` below its granule.
fn low_bits(addr: usize) -> u64 {
    (addr & ((1 << GRANULE_BITS) - 1)) as u64
}

impl Kept {
    /// Block `b` at `addr` kept so, when it can be (the type's documentation).
    fn of(addr: usize, b: &Block) -> Option<Kept> {
        (b.k == b.size && b.size >> LOW_SHIFT == 0).then_some(Kept {
            alloc_raw: b.alloc_raw,
            size_low: b.size | low_bits(addr) << LOW_SHIFT,
            stack: b.stack,
            pair: b.pair,
        })
    }

    /// True for the block at `addr`, of the addresses of its granule.
    fn at(&self, addr: usize) -> bool {
        self.size_low >> LOW_SHIFT == low_bits(addr)
    }

    fn block(&self) -> Block {
        let size = self.size_low & ((1 << LOW_SHIFT) - 1);
        Block { stack: self.stack, pair: self.pair, size, k: size, alloc_raw: self.alloc_raw }
    }
}

/// A map from address to block that is cheap where the collector's time goes: the live
/// blocks of the exact mode are millions, each allocation inserts one and each free takes
/// one out, and a hash table's every operation was a cache miss (a fifth of the
/// collector's time on CPython). Here an address's slot is found by its bits: a chunk of
/// slot indexes per 64 KiB of addresses (a small table of chunks, its last one remembered),
/// one slot per 16-byte granule, holding the index of the block in a slab ([`Kept`]).
/// Blocks allocated one after another sit side by side in the program's heap, so their
/// slots share cache lines. Two live blocks in one granule (an allocator that aligns to 8
/// bytes, or to 1) cannot share the slot: the second goes to a hash table beside it, as
/// does a block the slab cannot keep. An address is in the slab or the spill, never both.
#[derive(Default)]
struct ByAddress {
    /// Chunk indexes by `addr >> (GRANULE_BITS + 12)`.
    chunks: HashMap<usize, u32, FastHash>,
    /// Each chunk's slots: 0 for none, else a slab index plus 1. A slot's entry is always
    /// of an address in the slot's granule.
    slots: Vec<Box<[u32; CHUNK_SLOTS]>>,
    /// The chunk last used: (region, index).
    last: Option<(usize, u32)>,
    /// The blocks.
    slab: Vec<Kept>,
    /// Slab entries free for reuse.
    free: Vec<u32>,
    /// Blocks whose granule's slot holds another's, and blocks the slab cannot keep.
    spill: HashMap<usize, Block, FastHash>,
    len: usize,
}

impl ByAddress {
    /// The chunk and slot of `addr` (made when `make`).
    #[inline]
    fn slot_of(&mut self, addr: usize, make: bool) -> Option<(usize, usize)> {
        let region = addr >> (GRANULE_BITS + 12);
        let slot = (addr >> GRANULE_BITS) & (CHUNK_SLOTS - 1);
        if let Some((r, c)) = self.last {
            if r == region {
                return Some((c as usize, slot));
            }
        }
        let c = match self.chunks.get(&region) {
            Some(&c) => c,
            None if make => {
                let c = self.slots.len() as u32;
                self.slots.push(Box::new([0; CHUNK_SLOTS]));
                self.chunks.insert(region, c);
                c
            }
            None => return None,
        };
        self.last = Some((region, c));
        Some((c as usize, slot))
    }

    /// The block at `addr`.
    fn get(&mut self, addr: usize) -> Option<Block> {
        let (c, s) = self.slot_of(addr, false)?;
        match self.slots[c][s] {
            i if i != 0 && self.slab[i as usize - 1].at(addr) => {
                Some(self.slab[i as usize - 1].block())
            }
            _ => self.spill.get(&addr).copied(),
        }
    }

    /// Puts `b` at `addr`: the block that was there, if any.
    #[inline]
    fn insert(&mut self, addr: usize, b: Block) -> Option<Block> {
        let (c, s) = self.slot_of(addr, true).expect("made");
        let kept = Kept::of(addr, &b);
        match (self.slots[c][s], kept) {
            (0, Some(kept)) => {
                let i = match self.free.pop() {
                    Some(i) => {
                        self.slab[i as usize] = kept;
                        i
                    }
                    None => {
                        self.slab.push(kept);
                        self.slab.len() as u32 - 1
                    }
                };
                self.slots[c][s] = i + 1;
                self.len += 1;
                // A block of this address may be in the spill (its granule was taken when
                // it came): the slot's is the newer. The spill is mostly empty (malloc
                // aligns to the granule), and then not hashed into.
                let old = match self.spill.is_empty() {
                    true => None,
                    false => self.spill.remove(&addr),
                };
                self.len -= usize::from(old.is_some());
                old
            }
            (i, kept) if i != 0 && self.slab[i as usize - 1].at(addr) => {
                let at = i as usize - 1;
                let old = self.slab[at].block();
                match kept {
                    Some(kept) => self.slab[at] = kept,
                    None => {
                        // The new block goes to the spill whole: the slot is let go.
                        self.slots[c][s] = 0;
                        self.free.push(at as u32);
                        self.spill.insert(addr, b);
                    }
                }
                Some(old)
            }
            _ => {
                let old = self.spill.insert(addr, b);
                self.len += usize::from(old.is_none());
                old
            }
        }
    }

    /// Takes the block at `addr` out when `take` says so.
    #[inline]
    fn remove_if(&mut self, addr: usize, take: impl FnOnce(&Block) -> bool) -> Option<Block> {
        let (c, s) = self.slot_of(addr, false)?;
        match self.slots[c][s] {
            i if i != 0 && self.slab[i as usize - 1].at(addr) => {
                let b = self.slab[i as usize - 1].block();
                if !take(&b) {
                    return None;
                }
                self.slots[c][s] = 0;
                self.free.push(i - 1);
                self.len -= 1;
                Some(b)
            }
            _ => {
                if !take(self.spill.get(&addr)?) {
                    return None;
                }
                self.len -= 1;
                self.spill.remove(&addr)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Block `n` (its stack, so that tests tell blocks apart).
    fn block(n: u32, alloc_raw: u64) -> Block {
        Block { stack: n, pair: NO_PAIR, size: 16, k: 16, alloc_raw }
    }

    #[test]
    fn a_free_ends_the_block_allocated_before_it() {
        let mut b = Blocks::default();
        assert_eq!(b.allocated(0x1000, block(1, 10)), None);
        assert_eq!(b.freed(0x1000, 20), Some(block(1, 10)));
        assert_eq!(b.len(), 0);
        // A second free of the address, and one of an address never allocated: nothing.
        assert_eq!(b.freed(0x1000, 30), None);
        assert_eq!(b.freed(0x2000, 30), None);
    }

    #[test]
    fn a_reallocs_late_free_does_not_end_the_next_block() {
        let mut b = Blocks::default();
        b.allocated(0x1000, block(1, 10));
        // Another thread got the address (reading 25) before the realloc's free (reading
        // 20) came through: the new allocation ends the old block, at its own reading.
        assert_eq!(b.allocated(0x1000, block(2, 25)), Some((block(1, 10), 25)));
        assert_eq!(b.freed(0x1000, 20), None, "the late free is the old block's");
        assert_eq!(b.freed(0x1000, 30), Some(block(2, 25)));
    }

    #[test]
    fn a_kept_free_waits_for_its_allocation() {
        let mut b = Blocks::default();
        assert_eq!(b.freed_later(0x1000, 20), None);
        assert_eq!(b.retry(|_, _| panic!("nothing allocated yet")), 0);
        b.allocated(0x1000, block(1, 10));
        let mut ended = vec![];
        assert_eq!(b.retry(|blk, t| ended.push((blk.stack, t))), 1);
        assert_eq!(ended, [(1, 20)]);
        assert_eq!(b.retry(|_, _| panic!("taken")), 0);
        // A kept free older than the block now at its address is dropped, the block kept.
        b.allocated(0x3000, block(3, 50));
        assert_eq!(b.freed_later(0x3000, 40), None);
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn blocks_in_one_granule_are_kept_apart() {
        let mut b = Blocks::default();
        // An allocator that aligns to 8 bytes: two live blocks in one 16-byte granule.
        b.allocated(0x1000, block(1, 10));
        b.allocated(0x1008, block(2, 11));
        b.allocated(0x1001, block(3, 12));
        assert_eq!(b.len(), 3);
        assert_eq!(b.freed(0x1000, 20), Some(block(1, 10)));
        // The granule's slot is free now; the others are still found, and a new block
        // at one of their addresses ends it.
        assert_eq!(b.allocated(0x1008, block(4, 30)), Some((block(2, 11), 30)));
        assert_eq!(b.freed(0x1001, 40), Some(block(3, 12)));
        assert_eq!(b.freed(0x1008, 40), Some(block(4, 30)));
        assert_eq!(b.len(), 0);
    }

    /// The map against a hash map, over random allocations and frees at few addresses
    /// (dense, 8-byte aligned, so that granules are shared and chunks reused) and far ones.
    #[test]
    fn the_map_agrees_with_a_hash_map() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(46);
        let mut b = Blocks::default();
        let mut model: HashMap<usize, Block> = HashMap::new();
        for t in 0..200_000u64 {
            let addr = match rng.random_range(0..4) {
                0 => 0x7f00_0000_0000 + 8 * rng.random_range(0..64usize),
                1 => 0x5500_0000 + 16 * rng.random_range(0..100_000usize),
                _ => 0x5500_0000 + 8 * rng.random_range(0..2_000usize),
            };
            if rng.random_bool(0.5) {
                // Mostly blocks the slab keeps; some it cannot (points other than the
                // size, a size past its bits), which go to the spill.
                let size = rng.random_range(1..4096u64);
                let (size, k) = match rng.random_range(0..20) {
                    0 => (size, size / 2),
                    1 => (u64::MAX - size, u64::MAX - size),
                    _ => (size, size),
                };
                let blk = Block { stack: t as u32, pair: t as u32, size, k, alloc_raw: t };
                let ended = model.insert(addr, blk).map(|o| (o, t));
                assert_eq!(b.allocated(addr, blk), ended, "allocation {t} at {addr:#x}");
            } else {
                let time = if rng.random_bool(0.9) { t } else { t.saturating_sub(50) };
                let ended = match model.get(&addr) {
                    Some(o) if o.alloc_raw <= time => model.remove(&addr),
                    _ => None,
                };
                assert_eq!(b.freed(addr, time), ended, "free {t} at {addr:#x}");
            }
            assert_eq!(b.len(), model.len());
        }
        let mut live: Vec<_> = b.live().map(|blk| blk.alloc_raw).collect();
        let mut want: Vec<_> = model.values().map(|blk| blk.alloc_raw).collect();
        live.sort_unstable();
        want.sort_unstable();
        assert_eq!(live, want);
    }

    #[test]
    fn kept_frees_are_bounded() {
        let mut b = Blocks::default();
        for i in 0..(MAX_WAITING_FREES + 10) {
            b.freed_later(0x10_0000 + 16 * i, 5);
        }
        assert_eq!(b.waiting.len(), MAX_WAITING_FREES);
        assert_eq!(b.waiting[0].0, 0x10_0000 + 16 * 10, "the oldest went first");
    }
}
