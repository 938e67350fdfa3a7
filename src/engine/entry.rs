//! A sampled block's entry: what the live table keeps for it (`live` §5) and what its
//! death's event carries through the queue. A file of its own below both, so that the
//! queue and the pushes into it name the entry without reaching the table.

/// What the table keeps for a sampled block: its sample, and what its free must name
/// (`live` §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Sample id.
    pub id: u64,
    /// Session epoch of the sample.
    pub epoch: u64,
    /// The allocation's call-stack key (`engine::callstack::frames::key`),
    /// for a consumer in another process (0 under one in this process, which keeps a token
    /// per block instead and never reads it).
    pub stack: u64,
    /// The clock reading of the allocation, as its event carried it.
    pub time: u64,
    /// The size the block was sampled at.
    pub size: u64,
    /// Sample points in the block.
    pub k: u64,
}

impl Entry {
    /// The entry of a sample (the sampler's `id`, `epoch` and `k`) of `size` bytes,
    /// allocated at clock reading `time` by the stack of key `stack`.
    #[inline(always)]
    pub fn new(id: u64, epoch: u64, stack: u64, time: u64, size: u64, k: u64) -> Entry {
        Entry { id, epoch, stack, time, size, k }
    }
}
