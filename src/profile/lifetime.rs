//! How long sampled blocks lived: short-lived totals and a lifetime histogram.

use std::collections::HashMap;

use super::aggregate::{IdHash, Totals};
use super::events::Free;
use super::tables::StackId;

/// The default threshold of a short-lived block: freed less than 1 ms after it was allocated
/// (`--short-lived`). Scratch buffers, temporary strings and per-iteration objects (heaptrack's
/// "temporary allocations") die within microseconds, while what a request, a frame or a batch holds
/// lives for milliseconds or more. The exact mode's event times are coarser than that
/// ([`format::TIME_UNIT_EXACT_NS`](crate::profile::format::TIME_UNIT_EXACT_NS) ≈ 1.05 ms), but its
/// frees of blocks younger than one unit carry their lifetime to ≈ 131 µs
/// ([`format::LIFETIME_UNIT_NS`](crate::profile::format::LIFETIME_UNIT_NS)), so the threshold holds
/// there too.
pub const DEFAULT_SHORT_LIVED_NS: u64 = 1_000_000;

/// Buckets of a lifetime histogram per octave of nanoseconds (relative width 2^(1/4) − 1 ≈
/// 19 %).
const LIFETIME_STEPS: u32 = 4;

/// The histogram bucket of a lifetime of `ns` nanoseconds: 0 for 0, then
/// 4 buckets per power of two.
pub fn lifetime_bucket(ns: u64) -> u16 {
    if ns == 0 {
        return 0;
    }
    let octave = 63 - ns.leading_zeros();
    let step = if octave >= 2 { (ns >> (octave - 2)) & 3 } else { (ns << (2 - octave)) & 3 };
    (1 + octave * LIFETIME_STEPS + step as u32) as u16
}

/// The lifetimes of bucket `b` of [`lifetime_bucket`]: `[low, high)` in nanoseconds.
pub fn lifetime_bucket_range(b: u16) -> (u64, u64) {
    if b == 0 {
        return (0, 1);
    }
    let b = u32::from(b) - 1;
    let (octave, step) = (b / LIFETIME_STEPS, u64::from(b % LIFETIME_STEPS));
    let low = |octave: u32, step: u64| -> u64 {
        if octave >= 2 {
            (4 + step) << (octave - 2)
        } else {
            (4 + step) >> (2 - octave)
        }
    };
    let lo = low(octave, step);
    let hi = if step + 1 < 4 { low(octave, step + 1) } else { low(octave + 1, 0) };
    (lo, hi.max(lo + 1))
}

/// How long the sampled blocks lived: every free folded in knows when its block was allocated
/// ([`Free::alloc_ns`]), so each freed sampled block has a lifetime ([`Free::lifetime_ns`]: to ≈
/// 131 µs below the stream's time unit, to the unit above it, see
/// [`Header::lifetime_unit_ns`](crate::profile::Header::lifetime_unit_ns)). Blocks still live have
/// none yet.
#[derive(Clone, Debug)]
pub struct Lifetimes {
    /// A freed block is short-lived when its lifetime is below this
    /// ([`DEFAULT_SHORT_LIVED_NS`] unless the reader asked for another).
    pub short_lived_ns: u64,
    /// The short-lived blocks, per (stack, size).
    pub short: HashMap<(StackId, u64), Totals, IdHash>,
    /// The freed blocks per (stack, [`lifetime_bucket`] of their lifetime).
    pub histogram: HashMap<(StackId, u16), Totals, IdHash>,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes::with_threshold(DEFAULT_SHORT_LIVED_NS)
    }
}

impl Lifetimes {
    /// Empty, with short-lived meaning a lifetime below `short_lived_ns`.
    pub fn with_threshold(short_lived_ns: u64) -> Self {
        Lifetimes { short_lived_ns, short: HashMap::default(), histogram: HashMap::default() }
    }

    /// Folds in a free; a short-lived block's totals go to `short` when given (the
    /// pair's slot of a profile folding into vectors, `profile/pairs.rs`), else to
    /// [`Lifetimes::short`].
    pub(super) fn add(&mut self, f: &Free, short: Option<&mut Totals>) {
        let life = f.lifetime_ns();
        let add = |t: &mut Totals| {
            t.samples += 1;
            t.k = t.k.wrapping_add(f.k);
        };
        if life < self.short_lived_ns {
            match short {
                Some(t) => add(t),
                None => add(self.short.entry((f.stack, f.size)).or_default()),
            }
        }
        add(self.histogram.entry((f.stack, lifetime_bucket(life))).or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetime_buckets_cover_every_lifetime_once() {
        let mut last = 0;
        for ns in (0..5000u64).chain([1 << 20, (1 << 20) + 1, 3_000_000_000, u64::MAX / 2]) {
            let b = lifetime_bucket(ns);
            let (lo, hi) = lifetime_bucket_range(b);
            assert!(lo <= ns && ns < hi, "{ns}: bucket {b} = [{lo}, {hi})");
            if ns < 5000 {
                assert!(b >= last, "buckets grow with the lifetime");
                last = b;
            }
        }
        // Within an octave the buckets are a quarter of it wide.
        assert_eq!(lifetime_bucket_range(lifetime_bucket(1 << 20)), (1 << 20, 5 << 18));
    }
}
