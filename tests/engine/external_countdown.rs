//! An allocator that keeps the thread's countdown itself (`sampler::Countdown`, as the
//! preload library does in initial-exec TLS) samples exactly like `Sampled<A>`: a zeroed
//! countdown draws at its first allocation, a countdown of a stopped session is redrawn
//! by the next one, and the estimates are the truth in exact mode and within their
//! confidence interval otherwise.
use super::*;
use memprof::__private::{on_alloc_in, on_dealloc};
use memprof::__private::{Countdown, EPOCH};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::Ordering;

/// Allocates `n` blocks of `size` bytes straight from `System` (never through the global
/// allocator) and reports them through `cd`; frees every block whose index `free`
/// accepts, reporting the death first. The others stay allocated (and live) until the
/// process ends; `kept` has room for them (it is allocated by the caller, elsewhere).
#[inline(never)]
fn site_ext(
    cd: &Countdown,
    n: usize,
    size: usize,
    free: impl Fn(usize) -> bool,
    kept: &mut Vec<*mut u8>,
) {
    let layout = Layout::from_size_align(size, 16).unwrap();
    for i in 0..n {
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { System.alloc(layout) };
        assert!(!p.is_null());
        on_alloc_in(cd, p, size);
        if free(i) {
            on_dealloc(p);
            // SAFETY: allocated above with this layout.
            unsafe { System.dealloc(p, layout) };
        } else {
            assert!(kept.len() < kept.capacity());
            kept.push(p);
        }
    }
}

const SITE: &str = "engine::external_countdown::site_ext";

#[test]
fn exact_then_sampled_through_one_countdown() {
    let _g = serial();
    let cd = Countdown::new();
    let mut kept = Vec::with_capacity(300);
    // Exact mode: a zeroed countdown samples from its first byte.
    let profile = record(Config { seed: Some(3), ..Config::exact() }, || {
        site_ext(&cd, 300, 48, |i| i % 3 == 0, &mut kept);
    });
    let s = site(&profile, SITE);
    assert_eq!(s.alloc_bytes, 300.0 * 48.0, "{s:?}");
    assert_eq!(s.alloc_objects, 300.0);
    assert_eq!(s.live_objects, 200.0);
    assert_eq!(s.live_bytes, 200.0 * 48.0);

    // No session: the stale countdown takes the slow path once, is parked at u64::MAX,
    // and the other nine allocations take the fast path.
    site_ext(&cd, 10, 48, |_| true, &mut kept);
    assert_eq!(cd.countdown.get(), u64::MAX - 9 * 48);
    assert_eq!(cd.epoch.get(), EPOCH.load(Ordering::Relaxed));

    // Interval 64: n = 20 000 blocks of 32 bytes, 640 000 bytes. The byte estimate K·R
    // has variance n_bytes·(R−1) (see `statistics`), sd ≈ 6 350 here; with ≈ 10 000
    // expected points it is close to normal, and the 5.7σ bound fails with probability
    // ≈ 1.2e-8 (the seed is fixed, so a build always passes or always fails).
    let r = 64.0;
    let bytes = 20_000.0 * 32.0;
    let profile = record(Config { seed: Some(4), ..Config::with_interval(r) }, || {
        site_ext(&cd, 20_000, 32, |_| true, &mut kept);
    });
    assert_eq!(cd.epoch.get(), EPOCH.load(Ordering::Relaxed) - 1, "the session ended");
    let s = site(&profile, SITE);
    let sd = (bytes * (r - 1.0)).sqrt();
    assert!(
        (s.alloc_bytes - bytes).abs() < 5.7 * sd,
        "{} vs {bytes} ± {}",
        s.alloc_bytes,
        5.7 * sd
    );
    assert_eq!(s.live_bytes, 0.0, "every block was freed");
}

/// `hits` of `n` sessions sampled a 37-byte block at interval 64: within 5.7 σ of
/// Binomial(n, q), q = 1 − (63/64)^37 (see the tests below for the false-failure rate).
fn assert_binomial_37(hits: u64, n: u64) {
    let q = 1.0 - (63.0f64 / 64.0).powi(37);
    let (mean, sd) = (n as f64 * q, (n as f64 * q * (1.0 - q)).sqrt());
    assert!(
        (hits as f64 - mean).abs() < 5.7 * sd,
        "sampled in {hits} of {n} sessions; expected {mean:.1} ± {:.1}",
        5.7 * sd
    );
}

/// A countdown set to 0 in the current session (what the preload library writes when
/// its session starts, after its own start-up allocations drew one) makes the thread
/// draw a fresh gap, not sample its next allocation whatever its size. At interval 64 a
/// 37-byte block holds a point with probability q = 1 − (63/64)^37 ≈ 0.442: over 400
/// sessions the count is Binomial(400, q), mean 176.6, σ 9.9, checked at ± 5.7 σ (false
/// failure ≈ 1e-8 from the exact binomial tails; fixed seeds, so a build always passes
/// or always fails). A countdown taken as "the point is here" samples it 400 times.
#[test]
fn a_zeroed_countdown_draws_afresh_in_its_session() {
    let _g = serial();
    let cd = Countdown::new();
    let layout = Layout::from_size_align(37, 16).unwrap();
    let n = 400u64;
    let mut hits = 0u64;
    for seed in 1..=n {
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { System.alloc(layout) };
        assert!(!p.is_null());
        let w =
            record_witnessed(Config { seed: Some(seed), ..Config::with_interval(64.0) }, || {
                // A draw of this session, as the start-up's allocations leave it, then the
                // reset.
                on_alloc_in(&cd, core::ptr::null_mut(), 0);
                cd.epoch.set(EPOCH.load(Ordering::Relaxed));
                cd.countdown.set(0);
                on_alloc_in(&cd, p, 37);
                on_dealloc(p);
            });
        // SAFETY: allocated above with this layout.
        unsafe { System.dealloc(p, layout) };
        hits += u64::from(w.samples.iter().any(|s| s.addr == p as u64 && s.size == 37));
    }
    assert_binomial_37(hits, n);
}

/// The same through `Sampled<System>`: a thread started in a session samples its first
/// allocation (37 bytes) with probability q, as any later one (same bound and false-
/// failure rate as above).
#[test]
fn a_new_threads_first_allocation_is_an_ordinary_draw() {
    let _g = serial();
    let n = 400u64;
    let mut hits = 0u64;
    for seed in 1..=n {
        let mut addr = 0u64;
        let w =
            record_witnessed(Config { seed: Some(seed), ..Config::with_interval(64.0) }, || {
                addr = std::thread::spawn(|| {
                    let v = black_box(Vec::<u8>::with_capacity(37));
                    v.as_ptr() as u64
                })
                .join()
                .unwrap();
            });
        hits += u64::from(w.samples.iter().any(|s| s.addr == addr && s.size == 37));
    }
    assert_binomial_37(hits, n);
}
