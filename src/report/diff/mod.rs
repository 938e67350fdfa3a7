//! `memprof diff BASE NEW`: what changed between two recordings, per allocation site, and
//! which changes are more than sampling noise.
//!
//! # 1. What is compared
//! Sites are named as in the top table ([`Profile::site_name`](crate::profile::Profile::site_name)). For each site three
//! quantities are compared, each in estimated bytes (so two recordings made at different
//! intervals compare directly): the bytes *allocated*, the bytes *live* at the end, and
//! the bytes live at the *peak* of each recording's live heap ([`Profile::peak_live`](crate::profile::Profile::peak_live):
//! each recording at its own peak). The change is `Δ = NEW − BASE`, shown with its 95 %
//! interval `Δ ± Z95·SE`, `SE = diff_std_error(BASE, R_base, NEW, R_new)`: each side's
//! error with its own interval R ([`confidence`](super::confidence) §2).
//!
//! # 2. Which changes are flagged
//! Every (site, quantity) difference whose test standard error is not zero is tested
//! with the two-sided p-value of `z = Δ / SE` ([`p_two_sided`](crate::report::confidence::p_two_sided)), and the whole family is
//! corrected with Holm's step-down procedure ([`holm`](crate::report::confidence::holm)) at α = 5 %: the probability that
//! *any* unchanged site is flagged (the family-wise false-positive rate) is at most 5 %,
//! however many sites there are. Where both sides are exact (interval 1, no error) any
//! non-zero difference is a real one and is flagged without a test.
//!
//! The test's standard error is the larger of the interval's and the error *under no
//! change*: both sides then estimate the same `B`, best estimated by the inverse-variance
//! weighted mean `B̃` of the two (weights `1/(R − 1)`; an exact side is `B` itself), and
//! `SE₀ = diff_std_error(B̃, R_base, B̃, R_new)`. With equal intervals the two errors are the
//! same (`R·√(K₁ + K₂)`). They differ where one side is far more precise than the other (a
//! smaller interval, or exact): a site that the sampled side saw only a few times (or never:
//! an estimated error of 0) would otherwise have the error of that small count, and a
//! chance shortfall would look like a change many standard errors wide; `SE₀` puts the
//! error where the precise side says the site is. The larger of the two keeps the test
//! conservative the other way too (one sample of a small site, an estimate of `R` bytes
//! against a few exact bytes, has the interval's error `R`, not a change). On simulated
//! runs of a 40-site program (the test `unchanged_programs_are_rarely_flagged`, 1 000
//! comparisons per pair of intervals, equal and unequal, one side exact) the family-wise
//! false-positive rate stays within its α; with the interval's error alone, comparisons of
//! 800 B against 512 KiB flagged a site nearly every time.
//!
//! # 3. Power: what a difference needs to be seen
//! A site with `K` expected sample points on each side has `SE ≈ R·√(K₁ + K₂)`. A 30 %
//! increase at `K = 100` gives `z ≈ 30/√230 ≈ 2.0`: a p-value near 0.05 *before* any
//! correction, so no test at a 5 % family-wise rate detects it reliably (about half the
//! time for a single comparison, much less once corrected over tens of sites: the test
//! `a_30_percent_change_at_100_points_is_not_reliably_flagged` measures it). At
//! `K = 1000` (at the default interval of 512 KiB, 500 MiB allocated by the site) the same
//! 30 % gives `z ≈ 300/√2300 ≈ 6.3`, far past any Holm threshold over a few hundred
//! tests: detection is then practically certain. For a relative change `c` the expected
//! z is about `c·√K / √(2 + c)`; flagging it reliably at the 5 % family-wise rate over `m`
//! tests needs z ≳ 4–5, so `K ≳ 25·(2 + c)/c²` points (about 600 for `c` = 30 %, 5 000
//! for 10 %), or a smaller interval.
//!
//! A sampled recording's peak is cross-fitted (`report::confidence` §1): each site's peak is
//! measured, at the moments the other half of the points chose, by points that did not
//! choose them, so it is unbiased for the site's bytes at those moments and its error is
//! that of any live estimate. The per-site test is still approximate: two recordings whose
//! live heap has a plateau may be compared at different moments of it, and a sampled
//! recording's site is its mean over two moments of the plateau.
//!
//! # 4. Differential outputs
//! [`diff_collapsed`] writes the differential folded format `stack BASE NEW` (estimated
//! bytes of each side under a [`View`](crate::report::View)), which inferno's `inferno-flamegraph` and Brendan
//! Gregg's `difffolded.pl`/`flamegraph.pl` read; [`diff_flamegraph`] draws it (inferno:
//! widths are NEW's bytes, red where NEW has more, blue where it has less; stacks that
//! only BASE has have no width); [`diff_pprof`] writes a pprof profile of the difference
//! as `go tool pprof -diff_base` builds one: NEW's samples, and BASE's with negated values
//! (labelled `pprof::base`), so every total is NEW − BASE.

mod compare;
mod pprof;
mod stacks;
mod table;
#[cfg(test)]
mod tests;

pub use compare::{compare, diff_sites, Change, Diff, SiteDiff, ALPHA, METRICS};
pub use pprof::{diff_pprof, write_diff_pprof, DiffPprofExporter};
pub use stacks::{
    diff_collapsed, diff_flamegraph, write_diff_collapsed, DiffFlamegraphExporter,
    DiffFoldedExporter,
};
pub use table::{diff_table, DiffOptions};
