//! `memprof diff` end to end: `fixtures/c/diffsites.c` recorded under `memprof record`,
//! twice unchanged and once with one site allocating 30 % more (`./diffsites more`), in the
//! sampled and the exact mode; the table's flags, the differential folded stacks, the pprof
//! profile of the difference (read by `go tool pprof`), the flamegraph, and bad input.
//!
//! The fixture's `grow_site` allocates 10 000 × 64 KiB = 625 MiB: 1 250 expected sample
//! points at the default interval (512 KiB), 1 625 with `more`. The difference has
//! `SE ≈ R·√(1250 + 1625) ≈ 53.6·R` and an expected value of 375·R: z ≈ 7.0. Holm's
//! threshold over the program's few tens of (site, quantity) tests is at most z ≈ 3.5
//! (α/100), so the change is flagged with probability Φ(7.0 − 3.5) > 0.9997 per
//! comparison.
//!
//! Flags of unchanged sites are false positives, at most 5 % of comparisons (the
//! family-wise rate). The recordings use fixed seeds, so for a given C library the outcome
//! is fixed; over seeds, a check that one comparison flags nothing would fail up to 5 % of
//! the time, so the checks below ask it of one of two independent comparisons
//! (false-failure rate ≤ 0.05² = 0.25 %).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{assert_one_line_error, text, MEMPROF};
use crate::programs::{assert_ok, fixture, read, record, scratch};

/// Records `diffsites` (with `more` when `more`) into `dir/name` with `opts`.
fn rec(dir: &Path, name: &str, opts: &[&str], more: bool) -> PathBuf {
    let out = dir.join(name);
    let o = out.display().to_string();
    let mut all = vec!["-o", &o, "--force"];
    all.extend_from_slice(opts);
    let args: &[&str] = if more { &["more"] } else { &[] };
    assert_ok(&record(dir, &all, &fixture("diffsites"), args), 0);
    out
}

fn memprof(args: &[&str]) -> Output {
    Command::new(MEMPROF).args(args).output().expect("memprof runs")
}

fn diff(base: &Path, new: &Path, extra: &[&str]) -> String {
    let (b, n) = (base.display().to_string(), new.display().to_string());
    let mut args = vec!["diff", &b, &n];
    args.extend_from_slice(extra);
    let out = memprof(&args);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The sites of the table's rows (between its column header and its rule): without
/// `--all`, the flagged sites.
fn rows(table: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in table.lines() {
        if line.contains("base alloc") && line.trim_end().ends_with("site") {
            inside = true;
        } else if line.trim_start().starts_with("---") {
            break;
        } else if inside {
            let site = line.split_whitespace().last().unwrap().to_owned();
            out.push((site, line.to_owned()));
        }
    }
    out
}

pub(crate) fn flagged(table: &str) -> BTreeSet<String> {
    rows(table).into_iter().filter(|(_, l)| l.contains(" *")).map(|(s, _)| s).collect()
}

fn header_says_the_rate(table: &str) {
    assert!(table.contains("family-wise false-positive rate 5 %"), "{table}");
    assert!(table.contains("Holm"), "{table}");
}

#[test]
fn unchanged_program_flags_nothing() {
    let dir = scratch("diff-unchanged");
    let mut flagging = 0;
    for (a, b) in [("1", "2"), ("3", "4")] {
        let base = rec(&dir, &format!("base{a}.mprof"), &["--seed", a], false);
        let new = rec(&dir, &format!("new{b}.mprof"), &["--seed", b], false);
        let table = diff(&base, &new, &[]);
        header_says_the_rate(&table);
        let f = flagged(&table);
        eprintln!("seeds {a}/{b}: flagged {f:?}\n{table}");
        flagging += usize::from(!f.is_empty());
        if f.is_empty() {
            assert!(table.contains("no significant change"), "{table}");
            assert!(table.contains("sites without a significant change hidden"), "{table}");
        }
        // --all shows the fixture's sites, unflagged.
        let all = diff(&base, &new, &["--all"]);
        let shown: BTreeSet<String> = rows(&all).into_iter().map(|(s, _)| s).collect();
        for site in ["grow_site", "steady_site", "leak_site", "hold_site"] {
            assert!(shown.contains(site), "{site} missing from --all:\n{all}");
        }
    }
    assert!(flagging <= 1, "both unchanged comparisons flagged a site");
}

#[test]
fn a_30_percent_change_flags_exactly_that_site() {
    let dir = scratch("diff-more");
    let mut exact_set = 0;
    for (a, b) in [("5", "6"), ("7", "8")] {
        let base = rec(&dir, &format!("base{a}.mprof"), &["--seed", a], false);
        let new = rec(&dir, &format!("more{b}.mprof"), &["--seed", b], true);
        let table = diff(&base, &new, &[]);
        header_says_the_rate(&table);
        let f = flagged(&table);
        assert!(f.contains("grow_site"), "the 30 % change is not flagged:\n{table}");
        let row = rows(&table).into_iter().find(|(s, _)| s == "grow_site").unwrap().1;
        assert!(row.contains("alloc more"), "{row}");
        exact_set += usize::from(f.len() == 1);
    }
    assert!(exact_set >= 1, "other sites were flagged in both comparisons");
}

/// The `stack BASE NEW` lines, summed per side over the stacks whose innermost frame named
/// in the fixture is `site`.
fn side_sums(folded: &str, site: &str) -> (u64, u64) {
    let (mut b, mut n) = (0, 0);
    for line in folded.lines() {
        let mut it = line.rsplitn(3, ' ');
        let new: u64 = it.next().unwrap().parse().unwrap();
        let base: u64 = it.next().unwrap().parse().unwrap();
        let stack = it.next().unwrap();
        if stack.split(';').any(|f| f == site) {
            b += base;
            n += new;
        }
    }
    (b, n)
}

#[test]
fn exact_base_against_sampled_new() {
    let dir = scratch("diff-exact-sampled");
    let base = rec(&dir, "exact.mprof", &["--interval", "1"], false);
    let new = rec(&dir, "sampled.mprof", &["--seed", "9"], true);
    let folded = dir.join("diff.folded");
    let table = diff(&base, &new, &["--all", "--collapsed", folded.to_str().unwrap()]);
    assert!(table.contains("sampling: exact"), "{table}");
    assert!(table.contains("mean interval 512.00 KiB"), "{table}");
    // z ≈ 375/√1625 ≈ 9.3 against an exact BASE.
    assert!(flagged(&table).contains("grow_site"), "{table}");
    let rows = rows(&table);
    let row = |site: &str| rows.iter().find(|(s, _)| s == site).unwrap().1.clone();
    // BASE's columns are exact: 625 MiB of grow_site, 16 MiB of leak_site.
    assert!(row("grow_site").trim_start().starts_with("625.00 MiB"), "{}", row("grow_site"));
    assert!(row("leak_site").trim_start().starts_with("16.00 MiB"), "{}", row("leak_site"));
    let folded = std::fs::read_to_string(&folded).unwrap();
    let (b, n) = side_sums(&folded, "grow_site");
    assert_eq!(b, 10_000 * 65_536, "{folded}");
    assert_eq!(n % 524_288, 0, "NEW's estimate is a whole number of intervals: {n}");
    // 1 625 expected points: within 5 standard errors (√1625 ≈ 40 points).
    let points = (n / 524_288) as f64;
    assert!((points - 1625.0).abs() < 5.0 * 1625f64.sqrt(), "{points} points");
}

/// Two exact recordings: every number is exact, and the only difference is grow_site's
/// 3 000 more blocks of 64 KiB.
#[test]
fn exact_runs_give_exact_differences() {
    let dir = scratch("diff-exact");
    let base = rec(&dir, "base.mprof", &["--interval", "1"], false);
    let new = rec(&dir, "new.mprof", &["--interval", "1"], true);
    let (folded, svg, pb) = (dir.join("d.folded"), dir.join("d.svg"), dir.join("d.pb.gz"));
    let table = diff(
        &base,
        &new,
        &[
            "--collapsed",
            folded.to_str().unwrap(),
            "--flamegraph",
            svg.to_str().unwrap(),
            "--pprof",
            pb.to_str().unwrap(),
        ],
    );
    assert!(table.contains("both recordings are exact"), "{table}");
    // record read both programs' resident sizes: each header says it, and the change is
    // shown beside the live heap's.
    assert_eq!(table.lines().filter(|l| l.trim_start().starts_with("resident: ")).count(), 2);
    assert!(table.lines().any(|l| l.starts_with("resident at the end: ")), "{table}");
    assert_eq!(flagged(&table), BTreeSet::from(["grow_site".to_owned()]), "{table}");
    let row = rows(&table).into_iter().find(|(s, _)| s == "grow_site").unwrap().1;
    // 3 000 × 64 KiB = 187.5 MiB, exact: no interval.
    assert!(row.contains("+187.50 MiB *"), "{row}");
    assert!(!row.contains('±'), "{row}");

    let folded = std::fs::read_to_string(&folded).unwrap();
    assert_eq!(side_sums(&folded, "grow_site"), (10_000 * 65_536, 13_000 * 65_536), "{folded}");
    for (site, bytes) in [
        ("steady_site", 8_000 * 32_768),
        ("leak_site", 16 << 20),
        ("hold_site", 4096 * 4096),
        ("small_site", 100_000 * 24),
    ] {
        assert_eq!(side_sums(&folded, site), (bytes, bytes), "{site}:\n{folded}");
    }

    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("<svg"), "not an SVG");
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("grow_site"), "the flamegraph does not name grow_site");

    // The pprof profile's totals are NEW − BASE.
    let (pb_base, pb_new) = (read(&base), read(&new));
    let sum = |p: &memprof::profile::Profile| {
        memprof::report::site_totals(p)
            .iter()
            .fold((0.0, 0.0), |(a, l), s| (a + s.alloc_bytes, l + s.live_bytes))
    };
    let ((ab, lb), (an, ln)) = (sum(&pb_base), sum(&pb_new));
    assert_eq!(an - ab, 3_000.0 * 65_536.0);
    if let Some((sums, raw)) = go_pprof_raw(&pb) {
        assert_eq!(sums[1] as f64, an - ab, "alloc_space:\n{raw}");
        assert_eq!(sums[3] as f64, ln - lb, "inuse_space:\n{raw}");
        assert!(raw.contains("grow_site"), "{raw}");
    }
}

/// `--view peak`: each recording's live heap at its peak, which holds hold_site's 16 MiB and
/// leak_site's 16 MiB in both.
#[test]
fn peak_view_compares_each_peak() {
    let dir = scratch("diff-peak");
    let base = rec(&dir, "base.mprof", &["--interval", "1"], false);
    let new = rec(&dir, "new.mprof", &["--interval", "1"], true);
    let folded = dir.join("peak.folded");
    diff(&base, &new, &["--view", "peak", "--collapsed", folded.to_str().unwrap()]);
    let folded = std::fs::read_to_string(&folded).unwrap();
    assert_eq!(side_sums(&folded, "hold_site"), (4096 * 4096, 4096 * 4096), "{folded}");
    assert_eq!(side_sums(&folded, "leak_site"), (16 << 20, 16 << 20), "{folded}");
    assert_eq!(side_sums(&folded, "small_site"), (0, 0), "{folded}");
}

#[test]
fn bad_input_is_a_one_line_error() {
    let dir = scratch("diff-bad");
    let good = crate::common::fixture_file("small.mprof");
    let missing = dir.join("missing.mprof");
    let m = missing.display().to_string();
    assert_one_line_error(&memprof(&["diff", &m, &good]), Some(1), "missing.mprof");
    assert_one_line_error(&memprof(&["diff", &good, &m]), Some(1), "missing.mprof");
    let corrupt = dir.join("corrupt.mprof");
    std::fs::write(&corrupt, b"this is not a memprof profile\n").unwrap();
    let c = corrupt.display().to_string();
    assert_one_line_error(&memprof(&["diff", &good, &c]), Some(1), "corrupt.mprof");
    let out = memprof(&["diff", &good, &good, "--view", "gc"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// Runs `go tool pprof -raw` on the file: see [`crate::common::go_pprof_raw`].
fn go_pprof_raw(path: &Path) -> Option<([i64; 4], String)> {
    crate::common::go_pprof_raw(
        path.as_os_str(),
        "the go tool pprof check of memprof diff's pprof output",
    )
}
