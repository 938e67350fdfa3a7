//! The totals a profile keeps per stack and size, and the indexes its bookkeeping needs
//! (by allocation time, since the peak).

use std::collections::HashMap;

use super::tables::StackId;

/// The hasher of the aggregates' maps: their keys are ids and sizes the profiler made, and
/// one multiply hashes them where SipHash took a third of the reading time. (A file crafted
/// to collide could make reading it slow, never wrong.)
pub type IdHash = crate::sys::hash::FastHash;
pub use crate::sys::hash::IdHasher;

/// Totals of the samples of one (stack, size) pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Samples counted.
    pub samples: u64,
    /// Their sample points (Σ k).
    pub k: u64,
}

/// What one GC cycle marked of one stack's sampled blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GcMarked {
    /// Samples marked.
    pub samples: u64,
    /// Their estimated bytes.
    pub bytes: f64,
    /// Their estimated objects.
    pub objects: f64,
}

/// How many events went into a profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Alloc samples.
    pub samples: u64,
    /// Frees of sampled blocks.
    pub frees: u64,
    /// Reallocations of sampled blocks that kept their sample (older recordings only: a
    /// reallocation now ends its old block, see [`crate::profile::Move`]).
    pub moves: u64,
    /// Frees and moves of samples that were never recorded (dropped).
    pub orphans: u64,
}

/// The live blocks per (stack, size) and allocation time unit: an index
/// [`Profile::add`](crate::profile::Profile::add) keeps for GC attribution and to tell a free that
/// names no live block (opaque).
#[derive(Clone, Debug, Default)]
pub(crate) struct LiveByTime {
    pub(super) index: HashMap<(StackId, u64, u64), Totals, IdHash>,
    /// Entries emptied since the last sweep.
    pub(super) empty: usize,
}

/// What changed in [`Profile::live`](crate::profile::Profile::live) since the peak, so that the
/// live set at the peak is known without a second pass: `live at the peak = live now − changes
/// since`. A new peak makes every change stale at once (a generation number, not a clear: a growing
/// heap makes a new peak at every event). Entries: at most one per (stack, size) pair.
#[derive(Clone, Debug, Default)]
pub(crate) struct SincePeak {
    /// Generation of the current peak.
    pub(super) generation: u64,
    /// Per pair: the generation of its changes, and their (wrapping) sum.
    pub(super) changes: HashMap<(StackId, u64), (u64, Totals), IdHash>,
    /// False for a merged profile (each process peaks on its own clock): no live set at
    /// the peak.
    pub(super) unknown: bool,
}

impl SincePeak {
    pub(super) fn change(&mut self, pair: (StackId, u64), samples: u64, k: u64) {
        let generation = self.generation;
        let (g, t) = self.changes.entry(pair).or_insert((generation, Totals::default()));
        if *g != generation {
            *g = generation;
            *t = Totals::default();
        }
        t.samples = t.samples.wrapping_add(samples);
        t.k = t.k.wrapping_add(k);
    }
}
