//! The sampling statistics that both the reports (`report::confidence`, whose documentation
//! derives them) and the tests' sampled scopes (`testing::measure_sampled`) use: the error
//! of an estimate, and the exact binomial tail behind a budget assertion.
//!
//! # The tail
//! A set of blocks of `B` true bytes gets `K ~ Binomial(B, 1/R)` sample points, whatever
//! the blocks' sizes (every byte is a point independently). "More than `L` bytes" is
//! therefore shown with a false-failure rate of at most `α` by failing only when
//! `P(Binomial(L, 1/R) ≥ K) < α` ([`binomial_upper_tail`]): if `B ≤ L` the points are
//! stochastically no more than those of `L` bytes, so that happens with probability at most
//! `α`. The probabilities are computed with Loader's saddle-point form of the binomial's
//! terms (`stirlerr` and `bd0` below), which keeps its digits for any `B` (a difference of
//! `lgamma`s of numbers near 2^40 would lose most of them).

/// The standard normal quantile of 0.975: a 95 % two-sided interval is ± this many standard
/// errors.
pub const Z95: f64 = 1.959_963_984_540_054;

/// The standard error of an estimate of `bytes` at mean interval `interval`:
/// `√(bytes·(interval − 1))`, 0 in the exact mode (see `report::confidence` §1).
pub fn std_error(bytes: f64, interval: f64) -> f64 {
    (bytes.abs() * (interval - 1.0).max(0.0)).sqrt()
}

/// Half the width of the 95 % interval of an estimate of `bytes` at `interval`.
pub fn ci95(bytes: f64, interval: f64) -> f64 {
    Z95 * std_error(bytes, interval)
}

/// How much wider a cross-fitted peak's interval is than a live estimate's. The peak's two
/// held-out halves are measured at moments each chosen on the other half, which correlates
/// them on a flat heap (its variance is up to 1.2 times `R·B`), and the moments fall a
/// little short of the true peak; measured on simulated and recorded steady states, the
/// live formula covered the true peak in 86–95 % of runs. Widened by this factor it covers
/// it in 95 % (`report::confidence` §1; `tests/testing.rs` and the profile's coverage test).
pub const PEAK_WIDENING: f64 = 1.35;

/// [`std_error`] of a cross-fitted peak of `bytes` (see [`PEAK_WIDENING`]).
pub fn peak_std_error(bytes: f64, interval: f64) -> f64 {
    PEAK_WIDENING * std_error(bytes, interval)
}

/// [`ci95`] of a cross-fitted peak of `bytes` (see [`PEAK_WIDENING`]).
pub fn peak_ci95(bytes: f64, interval: f64) -> f64 {
    Z95 * peak_std_error(bytes, interval)
}

/// `P(X ≥ k)` for `X ~ Binomial(n, p)`.
pub fn binomial_upper_tail(n: u64, p: f64, k: u64) -> f64 {
    if k == 0 || p >= 1.0 && k <= n {
        return 1.0;
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    let q = 1.0 - p;
    let ratio = p / q;
    // Above the mean the terms fall from `k` upward: sum them. Below it the tail is more
    // than a half, and the terms fall from `k − 1` downward: one minus their sum.
    if k as f64 > n as f64 * p {
        let (mut t, mut sum, mut j) = (binomial_term(n, p, k), 0.0, k);
        loop {
            sum += t;
            if j == n || t <= sum * 1e-17 {
                return sum.min(1.0);
            }
            t *= (n - j) as f64 / (j + 1) as f64 * ratio;
            j += 1;
        }
    } else {
        let (mut t, mut sum, mut j) = (binomial_term(n, p, k - 1), 0.0, k - 1);
        loop {
            sum += t;
            if j == 0 || t <= sum * 1e-17 {
                return (1.0 - sum).clamp(0.0, 1.0);
            }
            t *= j as f64 / (n - j + 1) as f64 / ratio;
            j -= 1;
        }
    }
}

/// `P(X = x)` for `X ~ Binomial(n, p)`, `0 < p < 1`, in Loader's saddle-point form.
fn binomial_term(n: u64, p: f64, x: u64) -> f64 {
    let q = 1.0 - p;
    if x == 0 {
        return (n as f64 * (-p).ln_1p()).exp();
    }
    if x == n {
        return (n as f64 * p.ln()).exp();
    }
    let (nf, xf) = (n as f64, x as f64);
    let yf = (n - x) as f64;
    let lc = stirlerr(nf) - stirlerr(xf) - stirlerr(yf) - bd0(xf, nf * p) - bd0(yf, nf * q);
    let lf = std::f64::consts::TAU.ln() + xf.ln() + (-xf / nf).ln_1p();
    (lc - 0.5 * lf).exp()
}

/// `ln(n!) − ((n + ½)·ln n − n + ½·ln 2π)`: the error of Stirling's formula, for an integer
/// `n ≥ 1`.
fn stirlerr(n: f64) -> f64 {
    const S0: f64 = 1.0 / 12.0;
    const S1: f64 = 1.0 / 360.0;
    const S2: f64 = 1.0 / 1260.0;
    const S3: f64 = 1.0 / 1680.0;
    const S4: f64 = 1.0 / 1188.0;
    if n <= 15.0 {
        let ln_fact: f64 = (2..=n as u64).map(|i| (i as f64).ln()).sum();
        return ln_fact - ((n + 0.5) * n.ln() - n + 0.5 * std::f64::consts::TAU.ln());
    }
    let nn = n * n;
    if n > 500.0 {
        (S0 - S1 / nn) / n
    } else if n > 80.0 {
        (S0 - (S1 - S2 / nn) / nn) / n
    } else if n > 35.0 {
        (S0 - (S1 - (S2 - S3 / nn) / nn) / nn) / n
    } else {
        (S0 - (S1 - (S2 - (S3 - S4 / nn) / nn) / nn) / nn) / n
    }
}

/// The deviance term `x·ln(x/m) + m − x`, computed without cancellation when `x ≈ m`.
fn bd0(x: f64, m: f64) -> f64 {
    if (x - m).abs() < 0.1 * (x + m) {
        let v = (x - m) / (x + m);
        let v2 = v * v;
        let mut s = (x - m) * v;
        let mut ej = 2.0 * x * v;
        for j in 1..1000 {
            ej *= v2;
            let s1 = s + ej / f64::from(2 * j + 1);
            if s1 == s {
                return s1;
            }
            s = s1;
        }
        s
    } else {
        x * (x / m).ln() + m - x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `P(X ≥ k)` by summing the terms from their definition (small `n` only).
    fn tail_by_definition(n: u64, p: f64, k: u64) -> f64 {
        let mut sum = 0.0;
        for x in k..=n {
            let mut ln_c = 0.0;
            for i in 0..x {
                ln_c += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
            }
            sum += (ln_c + x as f64 * p.ln() + (n - x) as f64 * (1.0 - p).ln()).exp();
        }
        sum
    }

    #[test]
    fn tail_matches_its_definition() {
        for (n, p) in [(1u64, 0.3), (10, 0.5), (60, 0.02), (200, 0.7), (400, 1.0 / 64.0)] {
            for k in 0..=n + 1 {
                let (got, want) = (binomial_upper_tail(n, p, k), tail_by_definition(n, p, k));
                let err = (got - want).abs();
                assert!(err <= 1e-12 || err <= want * 1e-9, "n {n} p {p} k {k}: {got} vs {want}");
            }
        }
    }

    /// Far in the Poisson regime (n = 10¹², p = 10⁻⁹, mean 1 000), against the Poisson
    /// tail, which the binomial approaches to within about `p·mean` relatively.
    #[test]
    fn tail_of_a_huge_binomial_is_poisson() {
        let (n, p) = (1_000_000_000_000u64, 1e-9);
        for k in [900u64, 1000, 1050, 1100, 1200] {
            // P(Poisson(1000) ≥ k), by summing terms from the mode in log space.
            let lambda = 1000.0f64;
            let ln_term = |x: u64| {
                let ln_fact: f64 = (2..=x).map(|i| (i as f64).ln()).sum();
                x as f64 * lambda.ln() - lambda - ln_fact
            };
            let want: f64 = (k..k + 2000).map(|x| ln_term(x).exp()).sum();
            let got = binomial_upper_tail(n, p, k);
            assert!((got - want).abs() <= want * 1e-5 + 1e-15, "k {k}: {got} vs {want}");
        }
    }

    #[test]
    fn tail_edges() {
        assert_eq!(binomial_upper_tail(100, 0.5, 0), 1.0);
        assert_eq!(binomial_upper_tail(100, 0.5, 101), 0.0);
        assert_eq!(binomial_upper_tail(100, 1.0, 100), 1.0);
        assert_eq!(binomial_upper_tail(100, 1.0, 101), 0.0);
        assert_eq!(binomial_upper_tail(0, 0.5, 1), 0.0);
        assert!((binomial_upper_tail(1000, 1.0 / 4096.0, 1) - 0.216_72).abs() < 1e-4);
    }
}
