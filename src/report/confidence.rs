//! Sampling statistics: how far a sampled estimate can be from the truth, and when a
//! difference between two profiles is more than sampling noise.
//!
//! # 1. The error of an estimate
//! The sampler makes every allocated byte a sample point independently with probability
//! `p = 1/R` (R the mean interval; see the sampler, `src/engine/sampler/`). A site (or stack, or
//! any set of blocks) of `B` true bytes therefore gets `K ~ Binomial(B, 1/R)` points and is
//! estimated as `B̂ = R·K`, which is unbiased, with
//!
//! ```text
//! Var(B̂) = R²·B·(1/R)·(1 − 1/R) = B·(R − 1)
//! ```
//!
//! estimated by putting `B̂` for `B`: the standard error is `√(B̂·(R − 1))` ([`std_error`]),
//! 0 in the exact mode (R = 1). With `K` points that is `R·√K` to within `1/R`: the
//! relative error is `1/√K` (10 % at 100 points). The 95 % interval is `B̂ ± 1.96·SE`
//! ([`ci95`]), the normal approximation of the binomial, good once a site has a few tens
//! of points (below that it is too narrow on the low side: a site with 1 point is shown
//! as `R ± 1.96·R`). The same holds for the live bytes of a site (the points of its blocks
//! not freed) and for its bytes live at any moment, since a block's points are drawn when
//! it is allocated, independently of what happens to it later.
//!
//! ## The peak
//! Not for a moment the data chose, though: the largest live estimate over the run is the
//! maximum of a noisy series, biased upward (a steady heap of 18 MiB, 36 points at the
//! default interval, is estimated at its largest upward fluctuation, several standard
//! errors above the truth, and its interval misses the truth nearly always). So a sampled
//! peak is *cross-fitted* (`profile::fold`): each block's `k` points are split by fair
//! coins into halves A and B (`k_A ~ Binomial(k, ½)`, seeded by the block's own fields so
//! that its free splits the same way). Thinning the Bernoulli process of points by
//! independent coins gives two independent processes, each at rate `1/(2R)`. Half A's
//! live points choose a moment `t_A` (when they are largest), half B's `t_B`; each moment
//! is measured by the *other* half, which did not choose it:
//!
//! ```text
//! P̂ = ½·(2R·K_B(t_A) + 2R·K_A(t_B)) = R·(K_B(t_A) + K_A(t_B))
//! ```
//!
//! Given `t_A`, `K_B(t_A) ~ Binomial(B(t_A), 1/(2R))`, so `2R·K_B(t_A)` is unbiased for the
//! true live heap `B(t_A)` with variance `4R²·B·(1/(2R)) ≈ 2R·B`; the same for the other
//! term. `P̂` is therefore unbiased for `(B(t_A) + B(t_B))/2`, at most the true peak and
//! close to it once the peak stands above the noise of the rest of the run (a few
//! `√(B·2R)` bytes, for each half to find it; a shorter or smaller spike is missed, and
//! `P̂` is then the heap at the moments the halves chose). Its variance is about
//! `(2R·B + 2R·B)/4 = R·B`, so its standard error is `√(P̂·(R − 1))`, as for any live
//! estimate, and a site's share of it, `R·(K_B,site(t_A) + K_A,site(t_B))`, has the
//! same error as any site's live bytes. The two terms are not quite independent: where
//! the heap is flat, a half that is high at the other half's moment draws its own moment
//! near it, where the other is high too (on the simulated steady state of
//! `profile::fold`'s coverage test the terms' correlation is about 0.2, and the variance
//! about a fifth above `R·B`; on a heap with a clear peak it is `R·B`). And the moments
//! fall a little short of the peak (a fraction of a standard error on the simulated
//! programs). So the live formula's interval covered the true peak somewhat less than
//! 95 % of the time (86–95 % on those programs and on a sampled scope's steady state,
//! `tests/testing.rs`), and the peak's interval is that one widened by
//! [`PEAK_WIDENING`] ([`peak_ci95`], also in `diff`'s tests of the peak): it covers the
//! truth in 97–99 of 100 runs of each simulated program, where the largest live
//! estimate's interval, on the steady state, nearly never did. In the exact mode (R = 1) the peak is the exact
//! maximum, and a merged tree's peak (`profile::merge`) is an upper bound, without an
//! interval.
//!
//! # 2. The difference of two estimates
//! Two independent profiles (different runs, possibly different intervals) estimate a
//! site's bytes as `B̂₁` and `B̂₂`; the difference `D = B̂₂ − B̂₁` has standard error
//! `√(SE₁² + SE₂²)` ([`diff_std_error`]) and `z = D / SE` is approximately standard normal
//! when the site did not change. A difference is *significant* when its two-sided p-value
//! `2·(1 − Φ(|z|))` ([`p_two_sided`]) survives Holm's step-down correction ([`holm`]) over
//! every difference tested at once: the probability that any unchanged site is flagged
//! (the family-wise false-positive rate) stays at most α, however many sites are compared.
//! Where both sides are exact (SE = 0), any difference is significant.

pub use crate::binomial::{ci95, peak_ci95, peak_std_error, std_error, PEAK_WIDENING, Z95};

/// The standard error of `new − base` for two independent estimates, `base` at interval
/// `base_interval` and `new` at `new_interval`.
pub fn diff_std_error(base: f64, base_interval: f64, new: f64, new_interval: f64) -> f64 {
    let (a, b) = (std_error(base, base_interval), std_error(new, new_interval));
    (a * a + b * b).sqrt()
}

/// `P(|Z| ≥ |z|)` for a standard normal `Z`.
pub fn p_two_sided(z: f64) -> f64 {
    if z.is_nan() {
        return 1.0;
    }
    erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0)
}

/// The complementary error function, to a relative error below 1.2·10⁻⁷ everywhere
/// (Chebyshev fit of Numerical Recipes' `erfcc`).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Holm's step-down procedure: which of the hypotheses with p-values `p` are rejected with
/// a family-wise error rate of at most `alpha`. The smallest p-value is compared with
/// `alpha/m`, the next with `alpha/(m−1)`, and so on until one fails.
pub fn holm(p: &[f64], alpha: f64) -> Vec<bool> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut rejected = vec![false; m];
    for (rank, &i) in order.iter().enumerate() {
        if p[i] <= alpha / (m - rank) as f64 {
            rejected[i] = true;
        } else {
            break;
        }
    }
    rejected
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_distr::{Binomial, Distribution};

    #[test]
    fn normal_tail() {
        // Reference values of 2·(1 − Φ(z)).
        for (z, p) in [(0.0, 1.0), (1.0, 0.317_310_5), (1.959_964, 0.05), (3.0, 0.002_699_8)] {
            assert!((p_two_sided(z) - p).abs() < 1e-6, "z {z}: {}", p_two_sided(z));
            assert!((p_two_sided(-z) - p).abs() < 1e-6);
        }
        assert!(p_two_sided(10.0) < 1e-20);
    }

    #[test]
    fn exact_has_no_error() {
        assert_eq!(std_error(1e6, 1.0), 0.0);
        assert_eq!(ci95(1e6, 1.0), 0.0);
        // 100 points at R = 512 KiB: 10 % relative error.
        let r = 524_288.0;
        let se = std_error(100.0 * r, r);
        assert!((se / (100.0 * r) - 0.1).abs() < 1e-3, "{se}");
    }

    #[test]
    fn holm_steps_down() {
        assert_eq!(holm(&[0.01, 0.04, 0.03], 0.05), vec![true, false, false]);
        assert_eq!(holm(&[0.001, 0.02, 0.04], 0.05), vec![true, true, true]);
        assert_eq!(holm(&[], 0.05), Vec::<bool>::new());
    }

    /// The 95 % interval covers the truth 95 % of the time: 4 000 sites of a fixed seed,
    /// each of B true bytes sampled at R (points ~ Binomial(B, 1/R), as the sampler draws
    /// them), with B/R between 30 and 3 000 points. Coverage below 93.5 % or above 96.5 %
    /// fails: for a true coverage of 95 % that is 4.35 standard deviations (σ = 0.34 %), a
    /// false-failure rate of about 1 in 70 000 seeds.
    #[test]
    fn interval_covers_the_truth() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(13);
        let n = 4000;
        let mut covered = 0;
        for _ in 0..n {
            let r = [800.0, 65_536.0, 524_288.0][rng.random_range(0..3)];
            let points = rng.random_range(30.0f64..3000.0);
            let b = (points * r).round();
            let k = Binomial::new(b as u64, 1.0 / r).unwrap().sample(&mut rng);
            let est = k as f64 * r;
            if (est - b).abs() <= ci95(est, r) {
                covered += 1;
            }
        }
        let rate = covered as f64 / n as f64;
        assert!((0.935..=0.965).contains(&rate), "coverage {rate}");
    }

    /// Differences of unchanged sites are flagged (at α = 0.05 per comparison, before any
    /// correction) 5 % of the time, whatever the two intervals; a 30 % change of a site
    /// with 1 000 expected points is flagged. 6 000 pairs of a fixed seed: a rate outside
    /// [3.5 %, 6.5 %] is 5.3 σ from 5 % (false-failure rate below 1 in 10⁶).
    #[test]
    fn differences_are_calibrated() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let n = 6000;
        let mut flagged = 0;
        for _ in 0..n {
            let (r1, r2) = ([800.0, 524_288.0][rng.random_range(0..2)], 65_536.0);
            let b = rng.random_range(50.0f64..5000.0) * r2;
            let k1 = Binomial::new(b as u64, 1.0 / r1).unwrap().sample(&mut rng);
            let k2 = Binomial::new(b as u64, 1.0 / r2).unwrap().sample(&mut rng);
            let (e1, e2) = (k1 as f64 * r1, k2 as f64 * r2);
            let z = (e2 - e1) / diff_std_error(e1, r1, e2, r2);
            if p_two_sided(z) <= 0.05 {
                flagged += 1;
            }
        }
        let rate = flagged as f64 / n as f64;
        assert!((0.035..=0.065).contains(&rate), "false-positive rate {rate}");
        // A 30 % change with 1 000 expected points: z ≈ 300/√2300 ≈ 6.3.
        let r = 524_288.0;
        let b = 1000.0 * r;
        let k1 = Binomial::new(b as u64, 1.0 / r).unwrap().sample(&mut rng);
        let k2 = Binomial::new((1.3 * b) as u64, 1.0 / r).unwrap().sample(&mut rng);
        let (e1, e2) = (k1 as f64 * r, k2 as f64 * r);
        assert!(p_two_sided((e2 - e1) / diff_std_error(e1, r, e2, r)) < 1e-4);
    }
}
