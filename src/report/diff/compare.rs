//! Per-site comparison of two recordings and its flags (§1–§3 of the folder's
//! documentation).

use std::collections::HashMap;

use crate::profile::Profile;
use crate::report::confidence::{diff_std_error, holm, p_two_sided, PEAK_WIDENING, Z95};
use crate::report::view::{stack_totals, View};

/// The family-wise false-positive rate of the flags.
pub const ALPHA: f64 = 0.05;

/// The quantities compared per site, in the order of [`SiteDiff::changes`].
pub const METRICS: [View; 3] = [View::Alloc, View::Live, View::Peak];

/// One compared quantity of one site: BASE and NEW estimates, their difference with its
/// 95 % interval, and whether the difference is significant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Change {
    /// BASE's estimated bytes.
    pub base: f64,
    /// NEW's estimated bytes.
    pub new: f64,
    /// `new − base`.
    pub delta: f64,
    /// Half the width of the 95 % interval of `delta` (0 when both sides are exact).
    pub ci95: f64,
    /// The two-sided p-value of the test (before Holm's correction): 1 for a difference
    /// that could not be tested (a standard error of 0 with a sampled side), 0 for a
    /// non-zero difference of two exact values.
    pub p: f64,
    /// True when the difference took part in the Holm family (a non-zero test error).
    pub tested: bool,
    /// True when the change is significant at the family-wise rate.
    pub significant: bool,
}

/// Compares `(base, new)` estimates of bytes, BASE at mean interval `base_interval` and NEW
/// at `new_interval`: each pair's difference, interval and p-value, and which are
/// significant with a family-wise false-positive rate of at most `alpha` (Holm's
/// correction over every pair with a non-zero test error; see the
/// [module documentation](crate::report::diff) §2).
pub fn compare(
    pairs: &[(f64, f64)],
    base_interval: f64,
    new_interval: f64,
    alpha: f64,
) -> Vec<Change> {
    compare_widened(pairs, |_| 1.0, base_interval, new_interval, alpha)
}

/// [`compare`], each pair's standard errors multiplied by `widen(i)` (the cross-fitted
/// peak's [`PEAK_WIDENING`]).
pub fn compare_widened(
    pairs: &[(f64, f64)],
    widen: impl Fn(usize) -> f64,
    base_interval: f64,
    new_interval: f64,
    alpha: f64,
) -> Vec<Change> {
    let (exact_base, exact_new) = (base_interval <= 1.0, new_interval <= 1.0);
    let mut changes: Vec<Change> = pairs
        .iter()
        .enumerate()
        .map(|(i, &(base, new))| {
            let w = widen(i);
            let delta = new - base;
            let se = w * diff_std_error(base, base_interval, new, new_interval);
            // Under "no change" both estimate the same bytes: their weighted mean.
            let pooled = match (exact_base, exact_new) {
                (true, true) => None,
                (true, false) => Some(base),
                (false, true) => Some(new),
                (false, false) => {
                    let (wb, wn) = (1.0 / (base_interval - 1.0), 1.0 / (new_interval - 1.0));
                    Some((wb * base + wn * new) / (wb + wn))
                }
            };
            let null =
                pooled.map_or(0.0, |b| w * diff_std_error(b, base_interval, b, new_interval));
            let test_se = se.max(null);
            let mut c = Change { base, new, delta, ci95: Z95 * se, p: 1.0, ..Change::default() };
            if test_se > 0.0 {
                c.tested = true;
                c.p = p_two_sided(delta / test_se);
            } else if exact_base && exact_new && delta.abs() >= 0.5 {
                c.p = 0.0;
                c.significant = true;
            }
            c
        })
        .collect();
    let tested: Vec<usize> = (0..changes.len()).filter(|&i| changes[i].tested).collect();
    let p: Vec<f64> = tested.iter().map(|&i| changes[i].p).collect();
    for (&i, rejected) in tested.iter().zip(holm(&p, alpha)) {
        changes[i].significant = rejected;
    }
    changes
}

/// One site of a diff.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteDiff {
    /// The site's name.
    pub site: String,
    /// Allocated, live-at-end and live-at-peak bytes ([`METRICS`]).
    pub changes: [Change; 3],
}

impl SiteDiff {
    /// True when any of the site's changes is significant.
    pub fn flagged(&self) -> bool {
        self.changes.iter().any(|c| c.significant)
    }

    /// The largest `|Δ|` of the site: of its significant changes when it has any.
    fn size(&self) -> f64 {
        let f = self.flagged();
        self.changes
            .iter()
            .filter(|c| c.significant || !f)
            .map(|c| c.delta.abs())
            .fold(0.0, f64::max)
    }
}

/// Every site of two profiles compared.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// The sites, flagged ones first, then by the size of their change, then by name.
    pub sites: Vec<SiteDiff>,
    /// How many (site, quantity) differences were tested together (Holm's family).
    pub tests: usize,
    /// Totals over every site, with their intervals (not tested).
    pub total: [Change; 3],
}

/// How much wider metric `m`'s intervals are: the cross-fitted peak's ([`PEAK_WIDENING`]).
fn widening(m: usize) -> f64 {
    if METRICS[m] == View::Peak {
        PEAK_WIDENING
    } else {
        1.0
    }
}

/// Per-site estimated bytes of `profile` under each of [`METRICS`].
fn per_site(profile: &Profile) -> HashMap<String, [f64; 3]> {
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut out: HashMap<String, [f64; 3]> = HashMap::new();
    for (m, view) in METRICS.iter().enumerate() {
        for t in stack_totals(profile, *view) {
            let site = names.entry(t.stack).or_insert_with(|| profile.site_name(t.stack));
            out.entry(site.clone()).or_default()[m] += t.bytes;
        }
    }
    out
}

/// Compares every site of `base` and `new` (see the [module documentation](crate::report::diff)). A merged
/// profile (a process tree) has no live set at its peak ([`Profile::peak_live`]) and counts
/// nothing there.
pub fn diff_sites(base: &Profile, new: &Profile) -> Diff {
    let (b, n) = (per_site(base), per_site(new));
    let mut names: Vec<&String> = b.keys().chain(n.keys()).collect();
    names.sort();
    names.dedup();
    let zero = [0.0; 3];
    let mut pairs = Vec::with_capacity(names.len() * 3);
    for name in &names {
        let (x, y) = (b.get(*name).unwrap_or(&zero), n.get(*name).unwrap_or(&zero));
        pairs.extend((0..3).map(|m| (x[m], y[m])));
    }
    let (rb, rn) = (base.header.interval, new.header.interval);
    let changes = compare_widened(&pairs, |i| widening(i % 3), rb, rn, ALPHA);
    let tests = changes.iter().filter(|c| c.tested).count();
    let mut sites: Vec<SiteDiff> = names
        .iter()
        .zip(changes.chunks_exact(3))
        .map(|(name, c)| SiteDiff { site: (*name).clone(), changes: [c[0], c[1], c[2]] })
        .collect();
    sites.sort_by(|a, b| {
        b.flagged()
            .cmp(&a.flagged())
            .then_with(|| b.size().total_cmp(&a.size()))
            .then_with(|| a.site.cmp(&b.site))
    });
    let total: [Change; 3] = std::array::from_fn(|m| {
        let (tb, tn) = names.iter().fold((0.0, 0.0), |(s, t), name| {
            (s + b.get(*name).unwrap_or(&zero)[m], t + n.get(*name).unwrap_or(&zero)[m])
        });
        Change {
            base: tb,
            new: tn,
            delta: tn - tb,
            ci95: widening(m) * Z95 * diff_std_error(tb, rb, tn, rn),
            ..Change::default()
        }
    });
    Diff { sites, tests, total }
}
