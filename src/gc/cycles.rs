//! Statistics of the managed heap: per-cycle timing records and heap totals.
#![forbid(unsafe_code)]

use super::mark::Marker;

/// One major GC cycle, from its first mark slice to the end of its sweep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleRecord {
    /// Monotonic clock (ns, `CLOCK_MONOTONIC`) when the first slice began.
    pub start_ns: u64,
    /// Monotonic clock when sweep finished.
    pub end_ns: u64,
    /// Time spent marking, summed over slices (root darkening included).
    pub mark_ns: u64,
    /// Mark slices the cycle took.
    pub slices: u32,
    /// Longest single mark slice.
    pub longest_slice_ns: u64,
    /// Words (headers included) of blocks marked, each counted once.
    pub words_marked: u64,
    /// `mark_ns / words_marked`.
    pub ns_per_word: f64,
    /// Time spent sweeping.
    pub sweep_ns: u64,
    /// Heap size (chunks and large blocks) at the end of the cycle, in words.
    pub heap_words: u64,
    /// Words of surviving blocks (headers included) after sweep.
    pub live_words: u64,
    /// The marker that ran this cycle.
    pub marker: Marker,
    /// Blocks grayed by mark-stack overflow during the cycle.
    pub overflows: u64,
    /// Whether the prefetching marker kept its reached bits this cycle
    /// ([`HeapConfig::reached_bits`](crate::gc::HeapConfig::reached_bits), and a heap of a size
    /// where they pay).
    pub reached_bits: bool,
}

/// Heap totals at a point in time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeapTotals {
    /// Words in chunks and large blocks.
    pub heap_words: usize,
    /// Words in chunks.
    pub chunk_words: usize,
    /// Words in large blocks.
    pub large_words: usize,
    /// Number of chunks.
    pub chunks: usize,
    /// Number of large blocks.
    pub large_blocks: usize,
    /// Words on the free lists.
    pub free_words: usize,
    /// Words of surviving blocks after the last sweep.
    pub live_words: usize,
    /// Words allocated since the heap was made (headers included).
    pub allocated_words: u64,
    /// Blocks allocated since the heap was made.
    pub allocated_blocks: u64,
    /// Completed major cycles.
    pub cycles: u64,
    /// Free-list classes examined by split searches.
    pub free_list_probes: u64,
    /// Blocks grayed by mark-stack overflow, all cycles.
    pub mark_stack_overflows: u64,
    /// Deepest mark stack seen, in entries.
    pub max_mark_stack: usize,
    /// Registered roots.
    pub roots: usize,
}
