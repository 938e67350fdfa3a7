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
    pub(super) id: u64,
    pub(super) stack: StackId,
    pub(super) size: u64,
    pub(super) k: u64,
    /// The allocation's clock reading as the program took it (raw: the program's clock).
    pub(super) alloc_raw: u64,
}

impl Block {
    /// The block's free at raw reading `time_raw`, times converted by `ns` (raw readings to
    /// session nanoseconds).
    pub(super) fn free(&self, time_raw: u64, mut ns: impl FnMut(u64) -> u64) -> Free {
        Free {
            id: self.id,
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
    live: HashMap<usize, Block, FastHash>,
    /// Frees from the queue's table whose address held no block yet: (address, reading).
    waiting: Vec<(usize, u64)>,
}

impl Blocks {
    /// Block `b` was allocated at `addr`. Returns the block it ends there, if any, with the
    /// reading it ends at (the new block's).
    pub(super) fn allocated(&mut self, addr: usize, b: Block) -> Option<(Block, u64)> {
        let at = b.alloc_raw;
        self.live.insert(addr, b).map(|old| (old, at.max(old.alloc_raw)))
    }

    /// The block at `addr` was freed at reading `time_raw`: the block it ends, if any.
    pub(super) fn freed(&mut self, addr: usize, time_raw: u64) -> Option<Block> {
        match self.live.get(&addr) {
            Some(b) if b.alloc_raw <= time_raw => self.live.remove(&addr),
            _ => None,
        }
    }

    /// A free from the queue's table: as [`Blocks::freed`], or kept to try again after the
    /// next drain ([`Blocks::retry`]) when the address holds nothing yet.
    pub(super) fn freed_later(&mut self, addr: usize, time_raw: u64) -> Option<Block> {
        if !self.live.contains_key(&addr) {
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
            if !self.live.contains_key(&addr) {
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

    /// Live blocks.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(id: u64, alloc_raw: u64) -> Block {
        Block { id, stack: 0, size: 16, k: 16, alloc_raw }
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
        assert_eq!(b.retry(|blk, t| ended.push((blk.id, t))), 1);
        assert_eq!(ended, [(1, 20)]);
        assert_eq!(b.retry(|_, _| panic!("taken")), 0);
        // A kept free older than the block now at its address is dropped, the block kept.
        b.allocated(0x3000, block(3, 50));
        assert_eq!(b.freed_later(0x3000, 40), None);
        assert_eq!(b.len(), 1);
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
