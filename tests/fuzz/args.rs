//! The size and rate arguments, fuzzed: property-based (proptest, as `tests/fuzz/reader.rs`)
//! (`--interval 512KiB`, `--rate`, `MEMPROF_INTERVAL`, `MEMPROF_RATE`). Inputs are strings
//! near the grammar (digits, a point, an exponent, signs, spaces, units, odd characters and
//! a newline mixed in), values printed the way memprof prints them, and numbers at the edges
//! (sizes past the address space, rates down to the smallest float). The time arguments'
//! parsers are private to the crate: their fuzzing is a unit test,
//! `src/profile/replay_fuzz.rs`.
//!
//! The properties: a parser never panics; what it accepts is in range (an interval of 1
//! byte to 256 TiB, finite) and reads back what was printed (within the two decimals
//! `human_bytes` keeps); what it refuses it refuses with a one-line error. Cases per run:
//! `PROPTEST_CASES` (512 by default); the generator's seed is fixed (`RngSeed::Fixed`), so a
//! run is the same every time: these are exhaustive-style checks with no false-failure
//! rate, a failure is a bug.

use memprof::config::{interval_from_rate, parse_size, MAX_INTERVAL};
use memprof::report::human_bytes;
use memprof::Config;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use crate::common::proptest_cases;

include!("../../fixtures/arg_pieces.rs");

fn near_grammar() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(PIECES), 0..8).prop_map(|v| v.concat())
}

fn one_line(e: &memprof::Error) -> bool {
    let s = e.to_string();
    !s.is_empty() && !s.contains('\n') && !s.contains('\r')
}

fn check_size(text: &str) {
    match parse_size(text) {
        Ok(v) => {
            assert!(v.is_finite() && (1.0..=MAX_INTERVAL).contains(&v), "{text:?} -> {v}");
            assert!(Config::with_interval(v).validate().is_ok(), "{text:?} -> {v}");
        }
        Err(e) => assert!(one_line(&e), "{text:?}: {e}"),
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
    fn sizes_are_in_range_or_a_one_line_error(text in near_grammar()) {
        check_size(&text);
    }

    #[test]
    fn any_number_with_any_unit_is_in_range_or_refused(
        n in any::<f64>(),
        unit in proptest::sample::select(&["", "B", "K", "KiB", "M", "MB", "G", "GiB", "T", "TiB"][..]),
    ) {
        check_size(&format!("{n}{unit}"));
        check_size(&format!("{n:e} {unit}"));
    }

    #[test]
    fn printed_sizes_read_back(v in 1.0f64..=MAX_INTERVAL) {
        let printed = human_bytes(v);
        let back = parse_size(&printed).unwrap_or_else(|e| panic!("{printed:?} ({v}): {e}"));
        // Two decimals of the unit: within half a hundredth of it, or the rounding of bytes.
        let unit = back / printed.split(' ').next().unwrap().parse::<f64>().unwrap().max(1.0);
        prop_assert!((back - v).abs() <= 0.005 * unit + 0.5, "{v} printed {printed:?} read {back}");
    }

    #[test]
    fn rates_give_a_finite_interval_in_range(lambda in any::<f64>()) {
        match interval_from_rate(lambda) {
            Ok(v) => prop_assert!(v.is_finite() && (1.0..=MAX_INTERVAL).contains(&v), "{lambda} -> {v}"),
            Err(e) => prop_assert!(one_line(&e), "{lambda}: {e}"),
        }
    }

    #[test]
    fn tiny_rates_are_refused(exp in -1022i32..-48) {
        let lambda = 2f64.powi(exp);
        prop_assert!(interval_from_rate(lambda).is_err(), "{lambda}");
    }
}

/// The cases an earlier fuzz run found, each as it was reported.
#[test]
fn found_by_fuzzing() {
    assert!(parse_size("99999999999999999999GiB").is_err(), "an interval of ~1e29 bytes");
    assert!(interval_from_rate(1e-308).is_err(), "an infinite interval");
    assert!(parse_size(&human_bytes(3.0 * 1099511627776.0)).is_ok(), "TiB printed, refused");
}
