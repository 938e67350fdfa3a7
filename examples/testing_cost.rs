//! What a `memprof::testing` scope costs the measured thread: an allocation-heavy loop
//! (2 M allocations of 16 to 215 bytes, each freed at once) run bare, inside an exact
//! `measure`, and inside a `measure_sampled` at 1 point in 64 KiB, alternating, five rounds.
//!
//! ```text
//! cargo run --release --example testing_cost
//! ```
//!
//! Prints each round's times as multiples of the bare loop's, then the medians.

use std::hint::black_box;
use std::time::Instant;

#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

fn work() -> usize {
    let mut n = 0;
    for i in 0..2_000_000usize {
        let v = black_box(Vec::<u8>::with_capacity(16 + i % 200));
        n += v.capacity();
    }
    n
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (mut exact, mut sampled) = (Vec::new(), Vec::new());
    for round in 0..5 {
        let t = Instant::now();
        black_box(work());
        let bare = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (_, s) = memprof::testing::measure(work);
        let e = t.elapsed().as_secs_f64() / bare;
        let t = Instant::now();
        let (_, ss) = memprof::testing::measure_sampled(64 << 10, work);
        let sm = t.elapsed().as_secs_f64() / bare;
        println!(
            "round {round}: bare {:.1} ms, exact {e:.2}×, sampled {sm:.2}×  (exact: {} blocks; \
             sampled: {} blocks)",
            bare * 1e3,
            s.blocks,
            ss.blocks
        );
        exact.push(e);
        sampled.push(sm);
    }
    println!("median: exact {:.2}×, sampled {:.2}× the bare loop", median(exact), median(sampled));
}
