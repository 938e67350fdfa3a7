//! The comparison's statistics (false flags, power) and its outputs.

use super::*;
use crate::report::confidence::Z95;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Binomial, Distribution};

/// A deterministic program's sites: per site, the true bytes of its blocks freed before
/// the peak, live at the peak and freed later, and live at the end (disjoint parts:
/// alloc = all three, peak = the last two, live = the last).
struct Program {
    sites: Vec<[f64; 3]>,
}

impl Program {
    /// `n` sites whose allocated bytes are `R₀ × u` with `u` log-uniform between 0.05 and
    /// 3 000 expected points at `R₀` = 512 KiB, split at random into the three parts.
    fn new(rng: &mut SmallRng, n: usize) -> Program {
        let r0 = 524_288.0;
        let sites = (0..n)
            .map(|_| {
                let points = (rng.random_range(0.05f64.ln()..3000f64.ln())).exp();
                let b = (points * r0).round();
                let (x, y) = (rng.random_range(0.0..1.0), rng.random_range(0.0..1.0));
                let (a, c) = if x < y { (x, y) } else { (y, x) };
                [(a * b).round(), ((c - a) * b).round(), ((1.0 - c) * b).round()]
            })
            .collect();
        Program { sites }
    }

    /// One run at interval `r`: each part of each site gets Binomial(bytes, 1/r) sample
    /// points, as the sampler draws them (every byte a point with probability 1/r), and
    /// is estimated as r × points; `scale` multiplies one site's bytes.
    /// Returns per site (alloc, live, peak) estimates.
    fn run(&self, rng: &mut SmallRng, r: f64, scaled: Option<(usize, f64)>) -> Vec<[f64; 3]> {
        self.sites
            .iter()
            .enumerate()
            .map(|(i, parts)| {
                let f = match scaled {
                    Some((j, s)) if j == i => s,
                    _ => 1.0,
                };
                let est: Vec<f64> = parts
                    .iter()
                    .map(|&b| {
                        let b = (b * f).round() as u64;
                        if r <= 1.0 {
                            return b as f64;
                        }
                        Binomial::new(b, 1.0 / r).unwrap().sample(rng) as f64 * r
                    })
                    .collect();
                [est[0] + est[1] + est[2], est[2], est[1] + est[2]]
            })
            .collect()
    }
}

/// The flags of one comparison of two runs: per site, any of its three quantities.
fn flags(base: &[[f64; 3]], new: &[[f64; 3]], rb: f64, rn: f64) -> Vec<bool> {
    let pairs: Vec<(f64, f64)> =
        base.iter().zip(new).flat_map(|(b, n)| (0..3).map(move |m| (b[m], n[m]))).collect();
    compare(&pairs, rb, rn, ALPHA).chunks(3).map(|c| c.iter().any(|c| c.significant)).collect()
}

const R: f64 = 524_288.0;
/// The interval pairs compared: equal, BASE far more precise, BASE exact, NEW more precise.
const INTERVALS: [(f64, f64); 4] = [(R, R), (800.0, R), (1.0, R), (R, 65_536.0)];

/// Two runs of the same program (40 sites, 120 quantities, from 0.05 to 3 000 expected
/// points each) are compared 1 000 times for each pair of intervals. Holm's correction
/// keeps the family-wise false-positive rate at most 5 %: 1 000 comparisons then flag
/// something in at most 50 on average (σ ≤ 6.9); more than 75 fails, 3.7 σ above the
/// worst allowed rate (false-failure rate ≈ 1·10⁻⁴ per pair of intervals, 4·10⁻⁴ for the
/// test). Per-site flags are rare: at most 100 site flags in all (40 000 site
/// comparisons; a calibrated test gives about one per false-positive comparison, ≤ 50
/// on average: more than 100 is over 6 σ of a Poisson(50), false-failure rate < 10⁻⁹).
#[test]
fn unchanged_programs_are_rarely_flagged() {
    let mut rng = SmallRng::seed_from_u64(2024);
    let program = Program::new(&mut rng, 40);
    for (rb, rn) in INTERVALS {
        let (mut any, mut sites) = (0, 0);
        for _ in 0..1000 {
            let (b, n) = (program.run(&mut rng, rb, None), program.run(&mut rng, rn, None));
            let f = flags(&b, &n, rb, rn);
            let k = f.iter().filter(|&&x| x).count();
            any += usize::from(k > 0);
            sites += k;
        }
        eprintln!("intervals {rb}/{rn}: {any} of 1000 flag a site, {sites} site flags");
        assert!(any <= 75, "intervals {rb}/{rn}: {any} of 1000 comparisons flagged a site");
        assert!(sites <= 100, "intervals {rb}/{rn}: {sites} site flags in 1000 comparisons");
    }
}

/// A site that allocates 30 % more (every part of it) with 1 000 expected points at R:
/// z ≈ 300/√2300 ≈ 6.3 with equal intervals (more with a more precise side), against a
/// Holm threshold of at most z = 3.5 (α/120): it is flagged with probability
/// Φ(6.3 − 3.5) ≈ 0.997 at least. In 200 comparisons per pair of intervals, more than 5
/// misses fails (Poisson(0.64) tail: false-failure rate ≈ 4·10⁻⁵ per pair). The other
/// sites stay unflagged as above: with a family-wise rate ≤ 5 %, at most 10 of the 200
/// comparisons flag one on average (σ ≤ 3.1); more than 25 fails (5 σ, ≈ 3·10⁻⁷).
#[test]
fn a_30_percent_change_is_flagged() {
    let mut rng = SmallRng::seed_from_u64(31);
    let mut program = Program::new(&mut rng, 40);
    // Site 7: 1 000 expected points at R in all, spread over its three parts.
    program.sites[7] = [400.0 * R, 300.0 * R, 300.0 * R];
    for (rb, rn) in INTERVALS {
        let (mut missed, mut others) = (0, 0);
        for _ in 0..200 {
            let b = program.run(&mut rng, rb, None);
            let n = program.run(&mut rng, rn, Some((7, 1.3)));
            let f = flags(&b, &n, rb, rn);
            missed += usize::from(!f[7]);
            others += usize::from(f.iter().enumerate().any(|(i, &x)| x && i != 7));
        }
        eprintln!("intervals {rb}/{rn}: missed {missed} of 200, others flagged in {others}");
        assert!(missed <= 5, "intervals {rb}/{rn}: missed the change {missed} times in 200");
        assert!(others <= 25, "intervals {rb}/{rn}: other sites flagged in {others} of 200");
    }
}

/// 30 % at 100 expected points is within the noise: z ≈ 2, so even a single comparison
/// (no correction) flags it only about half the time, and with 120 comparisons rarely.
/// The documented claim, checked: flagged in fewer than half of 400 comparisons (the
/// expected rate is Φ(2 − 3.5) ≈ 7 %; half would be over 20 σ away).
#[test]
fn a_30_percent_change_at_100_points_is_not_reliably_flagged() {
    let mut rng = SmallRng::seed_from_u64(5);
    let mut program = Program::new(&mut rng, 40);
    program.sites[3] = [100.0 * R, 0.0, 0.0];
    let mut hit = 0;
    for _ in 0..400 {
        let b = program.run(&mut rng, R, None);
        let n = program.run(&mut rng, R, Some((3, 1.3)));
        hit += usize::from(flags(&b, &n, R, R)[3]);
    }
    eprintln!("30 % at 100 points: flagged {hit} of 400");
    assert!(hit < 200, "flagged {hit} of 400");
}

#[test]
fn exact_sides() {
    // Both exact: any difference is real, none is tested.
    let c = compare(&[(100.0, 100.0), (100.0, 101.0), (0.0, 5.0)], 1.0, 1.0, ALPHA);
    assert_eq!(c.iter().map(|c| c.significant).collect::<Vec<_>>(), [false, true, true]);
    assert!(c.iter().all(|c| !c.tested && c.ci95 == 0.0));
    // Exact BASE of 100 MB, NEW sampled saw none of it: a certain change (P = e^-191).
    let c = compare(&[(1e8, 0.0)], 1.0, R, ALPHA);
    assert!(c[0].tested && c[0].significant, "{c:?}");
    // Exact BASE of 2 331 bytes, NEW's one sample of it (R bytes): not a change.
    let c = compare(&[(2331.0, R)], 1.0, R, ALPHA);
    assert!(c[0].tested && !c[0].significant, "{c:?}");
    // No samples either side: nothing to test.
    let c = compare(&[(0.0, 0.0)], R, R, ALPHA);
    assert!(!c[0].tested && !c[0].significant);
}

/// The interval is each side's own error: ±1.96·√(B̂₁(R₁−1) + B̂₂(R₂−1)).
#[test]
fn interval_uses_each_sides_interval() {
    let c = compare(&[(1000.0 * 800.0, 100.0 * R)], 800.0, R, ALPHA)[0];
    let want = Z95 * ((1000.0 * 800.0) * 799.0 + (100.0 * R) * (R - 1.0)).sqrt();
    assert!((c.ci95 - want).abs() < 1e-6 * want, "{} vs {want}", c.ci95);
    assert_eq!(c.delta, 100.0 * R - 800_000.0);
}
