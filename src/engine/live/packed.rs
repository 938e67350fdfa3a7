//! A live-table slot ([`Slot`]): a block's address and its entry packed into 32 bytes
//! ([`Packed`]), and back.

use super::Entry;
use core::sync::atomic::Ordering;

#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct Slot {
    pub(super) addr: usize,
    pub(super) packed: Packed,
}

/// An [`Entry`] as a slot holds it (`live` §5): 32 bytes, where the entry is 48. The id keeps its
/// low 48 bits (ids count samples from 1: 2^48 is centuries of samples) and the epoch its
/// low 16 (an entry is read back within 65,536 sessions of its own, and the whole epoch
/// follows from the current one); the size keeps 40 bits (1 TiB) and the sample points 24,
/// or a mark for "as many as the size" (the exact mode). A sample that does not fit (a
/// block of a terabyte or more, or 16 M points in a block sampled at an interval) is not
/// entered: it counts as untracked ([`Insert::NoMemory`](super::Insert::NoMemory)).
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct Packed {
    id_epoch: u64,
    stack: u64,
    pub(super) time: u64,
    size_k: u64,
}

pub(super) const ID_BITS: u32 = 48;
pub(super) const SIZE_BITS: u32 = 40;
/// [`Packed::size_k`]'s points: as many as the size.
pub(super) const K_IS_SIZE: u64 = (1 << (64 - SIZE_BITS)) - 1;

impl Packed {
    #[inline(always)]
    pub(super) fn of(e: &Entry) -> Option<Packed> {
        if e.id >> ID_BITS != 0 || e.size >> SIZE_BITS != 0 {
            return None;
        }
        let k = if e.k == e.size {
            K_IS_SIZE
        } else if e.k < K_IS_SIZE {
            e.k
        } else {
            return None;
        };
        Some(Packed {
            id_epoch: e.id | e.epoch << ID_BITS,
            stack: e.stack,
            time: e.time,
            size_k: e.size | k << SIZE_BITS,
        })
    }

    #[inline(always)]
    pub(super) fn id(&self) -> u64 {
        self.id_epoch & ((1 << ID_BITS) - 1)
    }

    #[inline(always)]
    pub(super) fn entry(&self) -> Entry {
        let now = crate::engine::sampler::EPOCH.load(Ordering::Relaxed);
        let behind = now.wrapping_sub(self.id_epoch >> ID_BITS) & ((1 << (64 - ID_BITS)) - 1);
        let size = self.size_k & ((1 << SIZE_BITS) - 1);
        let k = match self.size_k >> SIZE_BITS {
            K_IS_SIZE => size,
            k => k,
        };
        Entry {
            id: self.id(),
            epoch: now.wrapping_sub(behind),
            stack: self.stack,
            time: self.time,
            size,
            k,
        }
    }
}
