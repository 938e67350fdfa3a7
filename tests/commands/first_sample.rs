//! No first-sample bias: every thread's first countdown is drawn like every later one, under
//! `memprof record` and under a hand-set preload (the in-process sessions are checked in
//! `tests/engine`'s `statistics`).
//!
//! `fixtures/c/first_alloc.c` makes one allocation on each of four threads, each the
//! thread's first, of sizes nothing else in the process allocates (37 bytes on the main
//! thread, 41, 43 and 45 on the others). At mean interval R = 64 bytes, a block of s bytes
//! holds a sample point with probability q(s) = 1 − (1 − 1/R)^s (0.44 to 0.51 here), so over
//! n runs with different seeds the number of runs that sampled it is Binomial(n, q(s)). A
//! countdown that started at 0, as the preload library's did after its start-up, samples it
//! in every run.
//!
//! # False-failure probability
//! Each count is checked against its mean ± 5.7 σ. From the exact binomial tails: with n =
//! 120 the four checks fail together with probability 2.2e-8, with n = 60 with 9.3e-9. At
//! the default interval (512 KiB), a run's 166 bytes hold a point with probability 3.2e-4,
//! and "at most 2 of 20 runs sampled anything" fails with probability 3.6e-8. The seeds are
//! fixed (`--seed`, `MEMPROF_SEED`): a given build always passes or always fails.

use std::path::Path;
use std::process::Command;

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, fixture, read, record, scratch};
use memprof::profile::Profile;

/// The block sizes of `first_alloc.c`, main thread first.
const SIZES: [u64; 4] = [37, 41, 43, 45];
const INTERVAL: f64 = 64.0;

/// Which of the fixture's blocks a profile sampled.
fn sampled(p: &Profile) -> [bool; 4] {
    SIZES.map(|s| p.allocated.iter().any(|(&(_, size), t)| size == s && t.samples > 0))
}

/// Checks the per-size counts of sampled runs out of `n` against their binomial bounds.
fn check(counts: [u64; 4], n: u64, how: &str) {
    for (s, c) in SIZES.iter().zip(counts) {
        let q = 1.0 - (1.0 - 1.0 / INTERVAL).powf(*s as f64);
        let mean = n as f64 * q;
        let sd = (n as f64 * q * (1.0 - q)).sqrt();
        assert!(
            (c as f64 - mean).abs() < 5.7 * sd,
            "{how}: the {s}-byte block was sampled in {c} of {n} runs; expected {mean:.1} ± \
             {:.1} (every count: {counts:?})",
            5.7 * sd
        );
    }
}

#[test]
fn under_record_each_threads_first_allocation_is_an_ordinary_draw() {
    let dir = scratch("first-sample");
    let prog = fixture("first_alloc");
    let n = 120;
    let mut counts = [0u64; 4];
    for seed in 1..=n {
        let seed = seed.to_string();
        let opts = ["--interval", "64", "--seed", &seed, "--force", "-o", "f.mprof"];
        let out = record(&dir, &opts, &prog, &[]);
        assert_ok(&out, 0);
        let p = read(&dir.join("f.mprof"));
        for (c, hit) in counts.iter_mut().zip(sampled(&p)) {
            *c += u64::from(hit);
        }
    }
    check(counts, n, "memprof record");
}

#[test]
fn under_a_hand_set_preload_each_threads_first_allocation_is_an_ordinary_draw() {
    let dir = scratch("first-sample-by-hand");
    let prog = fixture("first_alloc");
    let lib = Path::new(MEMPROF).parent().unwrap().join("libmemprof_preload.so");
    let n = 60;
    let mut counts = [0u64; 4];
    for seed in 1..=n {
        let file = dir.join(format!("h{seed}.mprof"));
        let out = Command::new(&prog)
            .env("LD_PRELOAD", &lib)
            .env("MEMPROF_INTERVAL", "64")
            .env("MEMPROF_SEED", seed.to_string())
            .env("MEMPROF_OUTPUT", &file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        for (c, hit) in counts.iter_mut().zip(sampled(&read(&file))) {
            *c += u64::from(hit);
        }
    }
    check(counts, n, "hand-set LD_PRELOAD");
}

/// The case users met: a program that allocates a few bytes once is (almost) never sampled
/// at the default interval, so it gets no phantom site.
#[test]
fn at_the_default_interval_a_tiny_program_is_almost_never_sampled() {
    let dir = scratch("first-sample-default");
    let prog = fixture("first_alloc");
    let runs = 20;
    let mut with_samples = 0;
    for seed in 1..=runs {
        let seed = seed.to_string();
        let out = record(&dir, &["--seed", &seed, "--force", "-o", "d.mprof"], &prog, &[]);
        assert_ok(&out, 0);
        with_samples += u32::from(read(&dir.join("d.mprof")).counts.samples > 0);
    }
    assert!(with_samples <= 2, "{with_samples} of {runs} runs had samples at 512 KiB");
}
