//! The Bernoulli process over bytes that the sampler draws from (`sampler` §1–2): a rate,
//! its gaps, and the points in an allocation. A file of its own so that a thread's sampler
//! state (`per_thread`), which caches the rate, needs nothing of the sampler that uses it.

use rand::rngs::SmallRng;
use rand_distr::{Binomial, Distribution, Exp1};

/// A Bernoulli process over bytes at mean interval `R` (§1): what a draw needs of it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rate {
    /// `p = 1/R`.
    p: f64,
    /// `-1 / ln(1 - p)`: a gap is `1 + ⌊E·scale⌋` (§2); 0 in the exact mode.
    scale: f64,
    /// `MANY_POINTS / p`: `rest × p > MANY_POINTS` as an integer compare on the sample
    /// path (the conversion saturates where `p` is tiny).
    many: u64,
}

impl Rate {
    /// The process at mean interval `interval` bytes (≥ 1).
    pub(crate) fn new(interval: f64) -> Rate {
        let p = 1.0 / interval;
        let scale = if p >= 1.0 { 0.0 } else { -1.0 / (-p).ln_1p() };
        Rate { p, scale, many: (MANY_POINTS / p) as u64 }
    }

    /// A fresh gap: the countdown to the first point.
    pub(crate) fn gap(&self, rng: &mut SmallRng) -> u64 {
        gap(rng, self.scale)
    }
}

/// The number of sample points in an allocation of `size` bytes whose first point is byte
/// `c` of it (`1 ≤ c ≤ size`), and the countdown to the next point after the allocation.
#[inline(always)]
pub(crate) fn points_in(rate: &Rate, rng: &mut SmallRng, size: u64, c: u64) -> (u64, u64) {
    let scale = rate.scale;
    // `rest` bytes follow the first point inside the allocation.
    let rest = size - c;
    if scale == 0.0 {
        // Exact mode: every byte is a point.
        (size, 1)
    } else if rest > rate.many {
        // Many points expected: one binomial draw for the rest, then a fresh gap.
        let p = rate.p;
        let extra = match Binomial::new(rest, p) {
            Ok(b) => b.sample(rng),
            Err(_) => (rest as f64 * p) as u64,
        };
        (1 + extra, gap(rng, scale))
    } else {
        // Few points: walk the gaps; the overshoot is the next countdown.
        let mut k = 1u64;
        let mut pos = c;
        loop {
            let g = gap(rng, scale);
            match pos.checked_add(g) {
                Some(next) if next <= size => {
                    pos = next;
                    k += 1;
                }
                Some(next) => return (k, next - size),
                None => return (k, u64::MAX),
            }
        }
    }
}

/// Above this many expected points in the rest of one allocation, they are counted by one
/// binomial draw instead of gap by gap.
const MANY_POINTS: f64 = 32.0;

/// 2^62: gaps at or above it are treated as infinite.
const TWO_POW_62: f64 = (1u64 << 62) as f64;

/// A geometric gap ≥ 1 with success probability p, from `scale = -1/ln(1-p)`.
#[inline]
fn gap(rng: &mut SmallRng, scale: f64) -> u64 {
    let e: f64 = Exp1.sample(rng);
    let g = e * scale;
    if g < TWO_POW_62 {
        // SAFETY: `g` is finite and in `[0, 2^62)` (`e` and `scale` are not negative, and a
        // NaN fails the compare above), so it converts to an `i64` exactly truncated: one
        // `cvttsd2si`, where `as u64` costs a saturating sequence. Truncation is the floor
        // here, without libm's `floor`.
        1 + unsafe { g.to_int_unchecked::<i64>() } as u64
    } else {
        // Beyond any address space: the countdown never runs out.
        u64::MAX - 1
    }
}
