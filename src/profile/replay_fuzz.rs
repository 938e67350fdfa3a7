//! The time parsers of [`super::replay`] (`--at`, `--from`, `--to`, `--short-lived`:
//! `1.5s`, `250ms`, `40us`, `1200ns`, `40%`), fuzzed: property-based (proptest), over
//! strings near the grammar (digits, a point, an exponent, signs, spaces, units, odd
//! characters and a newline mixed in), values printed the way memprof prints them, and
//! numbers at the edges (2^53 ns and above, `u64::MAX` ns and past it). The size and rate
//! parsers, which are public, are fuzzed alike from outside the crate (`tests/fuzz/args.rs`).
//!
//! The properties: a parser never panics; what it accepts fits in `u64` nanoseconds and
//! reads back what was printed (every nanosecond exactly); what it refuses it refuses with
//! a one-line error. Cases per run: `PROPTEST_CASES` (512 by default); the generator's seed
//! is fixed (`RngSeed::Fixed`), so a run is the same every time: these are exhaustive-style
//! checks with no false-failure rate, a failure is a bug.

use super::replay::{parse_duration, parse_moment};
use crate::error::Error;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// `PROPTEST_CASES`, or 512.
fn proptest_cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
}

include!("../../fixtures/arg_pieces.rs");

fn near_grammar() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(PIECES), 0..8).prop_map(|v| v.concat())
}

fn one_line(e: &Error) -> bool {
    let s = e.to_string();
    !s.is_empty() && !s.contains('\n') && !s.contains('\r')
}

fn check_time(text: &str, end: u64) {
    for r in [parse_moment(text, end), parse_duration(text)] {
        if let Err(e) = r {
            assert!(one_line(&e), "{text:?}: {e}");
        }
    }
    // A share is never past the end (100% is the end itself).
    if let Ok(v) = parse_moment(text, end) {
        if text.trim().ends_with('%') {
            assert!(v <= end || v == u64::MAX, "{text:?} of {end} -> {v}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: proptest_cases(),
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x6d65_6d70_726f_6621),
        ..ProptestConfig::default()
    })]

    #[test]
    fn times_are_in_range_or_a_one_line_error(text in near_grammar(), end in any::<u64>()) {
        check_time(&text, end);
    }

    #[test]
    fn every_nanosecond_reads_back_in_every_unit(ns in any::<u64>()) {
        let forms = [
            format!("{ns}ns"),
            format!("{}.{:03}us", ns / 1_000, ns % 1_000),
            format!("{}.{:06}ms", ns / 1_000_000, ns % 1_000_000),
            format!("{}.{:09}s", ns / 1_000_000_000, ns % 1_000_000_000),
            format!(" {}.{:09}s ", ns / 1_000_000_000, ns % 1_000_000_000),
        ];
        for f in &forms {
            prop_assert_eq!(parse_moment(f, 0).ok(), Some(ns), "{}", f);
            prop_assert_eq!(parse_duration(f).ok(), Some(ns), "{}", f);
        }
    }

    #[test]
    fn large_times_keep_every_nanosecond(ns in (1u64 << 53)..u64::MAX) {
        prop_assert_eq!(parse_moment(&format!("{ns}ns"), 0).ok(), Some(ns));
        prop_assert_eq!(parse_moment(&format!("{}.{:09}s", ns / 1_000_000_000, ns % 1_000_000_000), 0).ok(), Some(ns));
    }

    #[test]
    fn twenty_decimals_round_to_the_nearest_nanosecond(
        int in any::<u64>(),
        frac in 0u128..100_000_000_000_000_000_000,
    ) {
        let text = format!("{int}.{frac:020}ns");
        let up = frac >= 50_000_000_000_000_000_000;
        match int.checked_add(u64::from(up)) {
            Some(want) => prop_assert_eq!(parse_moment(&text, 0).ok(), Some(want), "{}", text),
            None => prop_assert!(parse_moment(&text, 0).is_err(), "{}", text),
        }
    }

    #[test]
    fn times_past_u64_are_refused_not_saturated(extra in 1u128..u128::from(u64::MAX)) {
        let ns = u128::from(u64::MAX) + extra;
        let e = parse_moment(&format!("{ns}ns"), 0).unwrap_err();
        prop_assert!(one_line(&e) && e.to_string().contains("at most"), "{}", e);
        let e = parse_moment(&format!("{}.{:09}s", ns / 1_000_000_000, ns % 1_000_000_000), 0).unwrap_err();
        prop_assert!(one_line(&e), "{}", e);
    }

    #[test]
    fn shares_are_within_the_run(p in 0u32..=100_000, end in any::<u64>()) {
        let text = format!("{}.{:03}%", p / 1000, p % 1000);
        let v = parse_moment(&text, end).unwrap();
        if p == 100_000 {
            prop_assert_eq!(v, u64::MAX);
        } else {
            let exact = (u128::from(end) * u128::from(p) * 2 + 100_000) / 200_000;
            prop_assert_eq!(u128::from(v), exact, "{} of {}", text, end);
        }
    }
}

/// The cases an earlier fuzz run found, each as it was reported.
#[test]
fn found_by_fuzzing() {
    let big = (1u64 << 53) + 1;
    assert_eq!(parse_moment(&format!("{big}ns"), 0).unwrap(), big, "precision above 2^53");
    assert!(parse_moment("18446744073709551616ns", 0).is_err(), "saturated silently");
}
