//! Sampled scopes for long runs: [`measure_sampled`] estimates what the calling thread
//! allocates inside a closure from a sample of its bytes, at about the cost of an ordinary
//! session, and the assertions fail only when a bound is exceeded beyond sampling noise.
//!
//! How the estimates and the assertions are made: [`measure_sampled`]'s documentation.

use super::{check_sampled, named_sites, write_sites, Scope};
use crate::binomial::{binomial_upper_tail, ci95};
use crate::engine::measure::{self, Left};
use std::fmt;

/// How often an assertion of a sampled scope fails when the scope is within its bound: at
/// most once in 1 000 runs ([`measure_sampled`] §2).
pub const FALSE_FAILURE_RATE: f64 = 0.001;

/// An estimate and its 95 % interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    /// The estimate (unbiased).
    pub value: f64,
    /// The interval's low end (not below 0).
    pub low: f64,
    /// The interval's high end.
    pub high: f64,
}

impl Estimate {
    /// `value ± half`, not below 0.
    fn around(value: f64, half: f64) -> Estimate {
        Estimate { value, low: (value - half).max(0.0), high: value + half }
    }

    /// True when `x` is inside the interval.
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.low == self.high {
            write!(f, "{:.0}", self.value)
        } else {
            write!(f, "≈{:.0} (95 %: {:.0}–{:.0})", self.value, self.low, self.high)
        }
    }
}

/// What the calling thread allocated inside a [`measure_sampled`] closure, estimated.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct SampledAllocated {
    /// The mean sampling interval `R`, in bytes.
    pub interval: u64,
    /// Sampled blocks (those holding at least one point).
    pub samples: u64,
    /// Sample points in the allocated bytes (`K`).
    pub points: u64,
    /// Sample points in the bytes still live at the end.
    pub live_points: u64,
    /// Blocks allocated. Its interval is the normal approximation of a skewed sum (a small
    /// block, once sampled, stands for many), and covers the truth less often than 95 %
    /// when the blocks are much smaller than the interval: 89 % for blocks of 16 to 4 111
    /// bytes at 1 point in 8 KiB (`tests/testing.rs`).
    pub blocks: Estimate,
    /// Bytes allocated.
    pub bytes: Estimate,
    /// Bytes of the scope's blocks freed inside it.
    pub freed_bytes: Estimate,
    /// The most bytes of the scope's blocks live at once (see [`measure_sampled`] §1).
    pub peak_bytes: Estimate,
    /// Bytes of the scope's blocks still live at its end: its leak.
    pub live_bytes: Estimate,
    /// Sampled blocks whose free could not be followed (counted as live).
    pub untracked: u64,
    /// The allocating sites, those still holding live bytes first, then by bytes.
    pub sites: Vec<SampledSite>,
}

/// One allocation site of a sampled scope.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct SampledSite {
    /// The function.
    pub site: String,
    /// Where it allocates (`file:line`), when the debug information says.
    pub location: Option<String>,
    /// Blocks it allocated (the estimate).
    pub blocks: f64,
    /// Bytes it allocated.
    pub bytes: Estimate,
    /// Its bytes still live at the scope's end.
    pub live_bytes: Estimate,
}

impl SampledAllocated {
    /// The probability of this many sample points, or more, had the scope allocated
    /// `limit` bytes: the p-value of "it allocated more than `limit`".
    pub fn p_bytes_above(&self, limit: u64) -> f64 {
        binomial_upper_tail(limit, 1.0 / self.interval as f64, self.points)
    }

    /// [`p_bytes_above`](Self::p_bytes_above) for the bytes still live at the end.
    pub fn p_live_above(&self, limit: u64) -> f64 {
        binomial_upper_tail(limit, 1.0 / self.interval as f64, self.live_points)
    }

    /// Panics, with the estimates and the sites, when the scope allocated more than
    /// `limit` bytes beyond sampling noise: it fails at most [`FALSE_FAILURE_RATE`] of the
    /// runs in which the scope allocates `limit` bytes or fewer.
    #[track_caller]
    pub fn assert_bytes_at_most(&self, limit: u64) {
        self.assert_bytes_at_most_with(limit, FALSE_FAILURE_RATE);
    }

    /// [`assert_bytes_at_most`](Self::assert_bytes_at_most) with a false-failure rate of
    /// one's own (below ½).
    #[track_caller]
    pub fn assert_bytes_at_most_with(&self, limit: u64, false_failure_rate: f64) {
        let p = self.p_bytes_above(limit);
        self.fail_below(p, false_failure_rate, || format!("allocated more than {limit} bytes"));
    }

    /// Panics, with the estimates and the sites, when the scope left more than `limit`
    /// bytes live beyond sampling noise (false-failure rate [`FALSE_FAILURE_RATE`]).
    #[track_caller]
    pub fn assert_live_at_most(&self, limit: u64) {
        self.assert_live_at_most_with(limit, FALSE_FAILURE_RATE);
    }

    /// [`assert_live_at_most`](Self::assert_live_at_most) with a false-failure rate of
    /// one's own (below ½).
    #[track_caller]
    pub fn assert_live_at_most_with(&self, limit: u64, false_failure_rate: f64) {
        let p = self.p_live_above(limit);
        self.fail_below(p, false_failure_rate, || format!("left more than {limit} bytes live"));
    }

    /// Panics with `what`, the p-value, the rate and the estimates when `p` is below the
    /// false-failure rate.
    #[track_caller]
    fn fail_below(&self, p: f64, false_failure_rate: f64, what: impl FnOnce() -> String) {
        if p < false_failure_rate {
            panic!("{} (p = {p:.2e}, false-failure rate {false_failure_rate}): {self}", what());
        }
    }
}

impl fmt::Display for SampledAllocated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes allocated in {} blocks; {} freed; peak {} bytes; {} bytes live at the \
             end (from {} samples, 1 point in {} bytes)",
            self.bytes,
            self.blocks,
            self.freed_bytes,
            self.peak_bytes,
            self.live_bytes,
            self.samples,
            self.interval
        )?;
        if self.untracked > 0 {
            write!(f, " ({} sampled blocks untracked)", self.untracked)?;
        }
        let sites = self.sites.iter().map(|s| {
            let mut figures = format!("{} bytes in ≈{:.0} blocks", s.bytes, s.blocks);
            if s.live_bytes.value > 0.0 {
                figures += &format!(", {} bytes live", s.live_bytes);
            }
            (figures, s.site.as_str(), s.location.as_deref())
        });
        write_sites(f, sites)
    }
}

/// Runs `f` on the calling thread and returns its result with estimates of what the
/// thread allocated inside it, sampling one byte in `interval` on average; the generator
/// is seeded afresh. Panics when [`crate::Sampled`] is not the global allocator, when
/// `interval` is 0, or inside another scope.
///
/// # 1. The estimates
/// Inside the scope every byte the thread allocates is a sample point with probability
/// `1/R`, drawn by a process of the scope's own (`engine::measure` §4), separate from any
/// running session's. A set of blocks of `B` bytes gets `K ~ Binomial(B, 1/R)` points and
/// is estimated as `R·K` bytes, with the 95 % interval `R·K ± 1.96·√(R·K·(R − 1))` that
/// `memprof report` prints (`report::confidence` §1). Blocks are estimated as `Σ k·R/n` over the
/// sampled blocks (`k` points in `n` bytes: unbiased, since a block's expected points are
/// `n/R`), with the variance estimate `Σ k·R·(R − 1)/n²`. The same holds for the bytes
/// still live at the end, and for the bytes live at any moment. The peak is cross-fitted
/// (`engine::measure` §5): the largest of those estimates would pick the noise and read
/// high; its interval is the live one's widened by `PEAK_WIDENING` (`report::confidence` §1).
///
/// # 2. The assertions
/// [`SampledAllocated::assert_bytes_at_most`] fails when `P(Binomial(L, 1/R) ≥ K) <`
/// [`FALSE_FAILURE_RATE`]: the chance of that many points, or more, if the scope had
/// allocated the limit `L`. When it allocated `L` bytes or fewer, it fails at most that
/// often, whatever the sizes of its blocks (`crate::stats`). `tests/testing.rs` checks the
/// rate by running a scope of exactly `L` bytes thousands of times. [`SampledAllocated::assert_live_at_most`] is the same for the scope's
/// leak.
pub fn measure_sampled<R>(interval: u64, f: impl FnOnce() -> R) -> (R, SampledAllocated) {
    measure_sampled_seeded(interval, crate::engine::sampler::entropy_seed(), f)
}

/// [`measure_sampled`] with the generator seeded with `seed`: the same allocations give the
/// same estimates.
pub fn measure_sampled_seeded<R>(
    interval: u64,
    seed: u64,
    f: impl FnOnce() -> R,
) -> (R, SampledAllocated) {
    assert!(interval > 0, "memprof::testing::measure_sampled: the interval must be 1 or more");
    check_sampled();
    let opened = crate::engine::sampler::with_countdown(|cd| {
        measure::enter_sampled(cd, interval as f64, seed)
    });
    if !opened {
        panic!(
            "memprof::testing::measure_sampled: a scope is open on this thread already (a \
             sampled scope neither nests nor holds another), or no memory could be mapped"
        );
    }
    let mut scope = Scope { open: true };
    let r = f();
    let left = scope.close();
    let busy = crate::engine::busy::Busy::enter();
    let stats = sampled_stats(left, interval);
    drop(busy);
    (r, stats)
}

/// The estimates and the named sites of a closed sampled scope.
fn sampled_stats(left: Left, interval: u64) -> SampledAllocated {
    let r = interval as f64;
    let c = left.counts;
    let bytes = |points: u64| {
        let b = points as f64 * r;
        Estimate::around(b, ci95(b, r))
    };
    let (objects, objects_var) = left.objects;
    let sites = named_sites(&left.stacks, r)
        .into_iter()
        .map(|s| SampledSite {
            site: s.site,
            location: s.location,
            blocks: s.blocks,
            bytes: Estimate::around(s.bytes, ci95(s.bytes, r)),
            live_bytes: Estimate::around(s.live_bytes, ci95(s.live_bytes, r)),
        })
        .collect();
    SampledAllocated {
        interval,
        samples: c.blocks,
        points: c.bytes,
        live_points: c.live,
        blocks: Estimate::around(objects, crate::binomial::Z95 * objects_var.sqrt()),
        bytes: bytes(c.bytes),
        freed_bytes: bytes(c.freed_bytes),
        // Cross-fitted in a sampled scope (`engine::measure` §5); the largest live count in
        // an exact one.
        peak_bytes: match interval > 1 {
            true => {
                let b = c.fit.points() as f64 * r;
                Estimate::around(b, crate::binomial::peak_ci95(b, r))
            }
            false => bytes(c.peak),
        },
        live_bytes: bytes(c.live),
        untracked: left.untracked,
        sites,
    }
}
