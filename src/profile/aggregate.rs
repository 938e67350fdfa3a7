//! The totals a profile keeps per stack and size, and the indexes its bookkeeping needs
//! (by allocation time, since the peak, and a sampled profile's two halves of points for
//! its cross-fitted peak).

use crate::engine::sampler::cross_fit::CrossFit;
use std::collections::HashMap;

use super::tables::StackId;

/// The hasher of the aggregates' maps: their keys are ids and sizes the profiler made, and
/// one multiply hashes them where SipHash took a third of the reading time. (A file crafted
/// to collide could make reading it slow, never wrong.)
pub type IdHash = crate::sys::hash::FastHash;
pub use crate::sys::hash::IdHasher;

/// The hash of [`Profile::symbols`](crate::profile::Profile::symbols), keyed by the
/// addresses a program recorded: seeded per process, fast.
pub type SymbolHash = crate::sys::hash::SeededHash;

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
    /// The live blocks are kept outside ([`Profile::keep_live_outside`](crate::profile::Profile::keep_live_outside)):
    /// the fold leaves the index alone, and it holds what was last handed over.
    pub(super) outside: bool,
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

/// The cross-fitted peak of a sampled profile (module documentation §3 of
/// [`profile`](crate::profile), and `report::confidence` §1): each block's `k` points split into
/// two halves, A and B ([`split_points`]), each half's live points followed apart, and the
/// live sets at the two halves' own peaks kept as [`SincePeak`] keeps the exact mode's.
#[derive(Clone, Debug, Default)]
pub(crate) struct Halves {
    /// Half A's live points per (stack, size) (half B's are the rest of
    /// [`Profile::live`](crate::profile::Profile::live)'s).
    pub(super) live_a: HashMap<(StackId, u64), u64, IdHash>,
    /// Half A's and half B's live points in all.
    pub(super) total: [u64; 2],
    /// Each half's largest live points, and the other half's then: `K_B(t_A)`, `K_A(t_B)`.
    pub(super) fit: CrossFit,
    /// `t_A`, `t_B`.
    pub(super) at_ns: [u64; 2],
    /// Changes since `t_A` of the samples and of half B's points, per pair; since `t_B` of
    /// the samples and of half A's points.
    pub(super) since: [SincePeak; 2],
}

/// How many of a sampled block's `k` points fall in half A: `Binomial(k, 1/2)`, drawn from
/// a generator seeded by what both the block's sample and its free name (its stack, size,
/// allocation time unit and `k`; a version-2 free has no sample id), so the free takes out
/// of each half what the sample put in. Thinning a Bernoulli process by independent fair
/// coins gives two independent processes at half the rate: a block's split depends only on
/// its own fields, and blocks that share all of them (the same site, size, `k` and time
/// unit: rare once sampled) share a split, the one correlation left.
pub fn split_points(stack: StackId, size: u64, unit: u64, k: u64) -> u64 {
    // SplitMix64's finalizer: every bit of the input moves every bit of the output.
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut state = mix(mix(mix(u64::from(stack).wrapping_add(GOLDEN)) ^ size) ^ unit) ^ k;
    // SplitMix64: a full-period generator whose outputs pass BigCrush.
    let mut next = || {
        state = state.wrapping_add(GOLDEN);
        mix(state)
    };
    if k <= 1 << 12 {
        // One fair coin per point: the bits of the generator's words.
        let mut a = 0;
        let mut left = k;
        while left >= 64 {
            a += u64::from(next().count_ones());
            left -= 64;
        }
        if left == 1 {
            // The common case below the default interval (one point): the word's low bit, as
            // the count below gives it, without the count (no `popcnt` in the baseline
            // x86-64 this builds for: a dozen instructions).
            a += next() & 1;
        } else if left > 0 {
            a += u64::from((next() & ((1u64 << left) - 1)).count_ones());
        }
        a
    } else {
        // A block of more than 4 096 points (2 GiB at the default interval; any `k` a
        // damaged file names): the normal approximation of the binomial (its error in
        // probability below 1 %), from two uniforms by Box-Muller.
        let u1 = ((next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let u2 = (next() >> 11) as f64 / (1u64 << 53) as f64;
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let a = k as f64 / 2.0 + z * (k as f64).sqrt() / 2.0;
        (a.round().max(0.0) as u64).min(k)
    }
}

#[cfg(test)]
mod tests {
    use super::split_points;

    /// The splits are part of what a profile's peak is: the same file must give the same
    /// peak whatever build folds it. So a faster way to draw them must draw the same
    /// points: a digest of the splits of a grid of blocks (one point, a few, more than a
    /// word's worth of coins, and past the normal approximation's bound), taken from the
    /// build before the one-point path.
    #[test]
    fn the_splits_are_those_of_earlier_builds() {
        let mut digest = 0u64;
        for stack in 0..8 {
            for size in [1, 16, 800, 1 << 20] {
                for unit in 0..16 {
                    for k in [1, 2, 3, 7, 63, 64, 65, 200, 4096, 4097, 1 << 20] {
                        let a = split_points(stack, size, unit, k);
                        assert!(a <= k);
                        digest = digest.rotate_left(5) ^ a;
                    }
                }
            }
        }
        assert_eq!(digest, GOLDEN);
    }

    const GOLDEN: u64 = 0x57f1_adc4_c3ec_ceb7;
}
