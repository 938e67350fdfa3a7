//! The cost of a live profile ([`memprof::live_profile`], [`memprof::Session::pprof`]) with
//! 100 000 live samples, and its effect on a thread that allocates meanwhile.
//!
//! ```text
//! cargo bench --bench live_profile              # 100 000 live samples
//! cargo bench --bench live_profile -- --quick   # 20 000, fewer rounds
//! ```
//!
//! (a) An exact-mode session (every allocation a sample) holds 100 000 live blocks from
//!     100 call stacks × 10 sizes (1 000 (stack, size) pairs), then: the first
//!     `Session::pprof` (symbols resolved), the next ones (symbols cached), `live_profile`
//!     (a copy of the whole profile), and the same with every block of its own size
//!     (100 000 pairs: the largest pprof for that many samples). Medians of the rounds.
//! (b) A thread allocates and frees 64-byte blocks for 1 s: alone, beside a thread that
//!     spins (the competition for a core, as a control), and beside a thread that takes
//!     `Session::pprof` in a loop; rounds interleaved, medians compared as ratios. In an
//!     exact-mode session with backpressure holding 100 000 live samples (every allocation
//!     an event; the allocating thread waits when the queue is full, so a drain held up by
//!     a profile would slow it), and at the default interval (512 KiB: hardly any
//!     allocation sampled). With fewer cores than busy threads the spinning control is the
//!     baseline to compare with: profiling / spinning near 1 means the allocating thread
//!     lost only a core's share, not time waiting for the profile.

use memprof::report::View;
use memprof::{Config, Recorder, Sampled, Session};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Sampled<std::alloc::System> = Sampled::new(std::alloc::System);

/// Allocates at a stack `depth` frames deeper than the caller's.
#[inline(never)]
fn at_depth(depth: u32, size: usize) -> Vec<u8> {
    if depth == 0 {
        black_box(vec![0u8; size])
    } else {
        black_box(at_depth(black_box(depth - 1), size))
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn exact() -> Config {
    Config { interval: 1.0, drain_thread: true, queue_capacity: 1 << 18, ..Config::default() }
}

/// Keeps `n` blocks: 100 stacks × 10 sizes, or every block a size of its own.
fn fill(n: usize, distinct_sizes: bool) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let size = if distinct_sizes { 16 + i } else { 16 * (1 + i % 10) };
            at_depth((i / 10 % 100) as u32, size)
        })
        .collect()
}

fn part_a(n: usize, rounds: usize, distinct_sizes: bool) {
    let session = memprof::start(exact(), Recorder::new()).unwrap();
    let kept = fill(n, distinct_sizes);
    let t = Instant::now();
    let first = session.pprof(View::Live).unwrap();
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let (mut pprof_ms, mut copy_ms) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        black_box(session.pprof(View::Live).unwrap());
        pprof_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        black_box(memprof::live_profile().unwrap());
        copy_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let p = memprof::live_profile().unwrap();
    let live: u64 = p.live.values().map(|t| t.samples).sum();
    println!(
        "  {live} live samples, {} pairs, {} stacks: first Session::pprof {first_ms:.1} ms \
         (symbols resolved), then {:.1} ms; live_profile {:.1} ms; pprof {} KiB",
        p.live.values().filter(|t| t.samples > 0).count(),
        p.stacks.len(),
        median(&mut pprof_ms),
        median(&mut copy_ms),
        first.len() / 1024
    );
    drop(kept);
    drop(session.stop());
}

/// Allocations per second of a thread allocating for `d`, and its longest 1 000-allocation
/// batch.
fn alloc_rate(d: Duration) -> (f64, Duration) {
    let start = Instant::now();
    let (mut n, mut worst) = (0u64, Duration::ZERO);
    while start.elapsed() < d {
        let t = Instant::now();
        for _ in 0..1_000 {
            black_box(at_depth(3, 64));
        }
        worst = worst.max(t.elapsed());
        n += 1_000;
    }
    (n as f64 / start.elapsed().as_secs_f64(), worst)
}

/// What runs beside the allocating thread.
#[derive(Clone, Copy, PartialEq)]
enum Beside {
    Nothing,
    /// A thread spinning: the competition for a core alone.
    Spinner,
    /// A thread taking `Session::pprof` in a loop.
    Profiler,
}

fn part_b(session: &Session<Recorder>, what: &str, rounds: usize, d: Duration) {
    let kinds = [Beside::Nothing, Beside::Spinner, Beside::Profiler];
    let mut rates = [Vec::new(), Vec::new(), Vec::new()];
    let mut worst = [Duration::ZERO; 3];
    let mut profiles = 0u64;
    for _ in 0..rounds {
        for (i, &kind) in kinds.iter().enumerate() {
            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            let allocating = std::thread::spawn(move || {
                let r = alloc_rate(d);
                flag.store(true, Ordering::Release);
                r
            });
            while !stop.load(Ordering::Acquire) {
                match kind {
                    Beside::Nothing => std::thread::sleep(Duration::from_millis(10)),
                    Beside::Spinner => {
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_millis(5) {
                            black_box(0u64);
                        }
                    }
                    Beside::Profiler => {
                        black_box(session.pprof(View::Live).unwrap());
                        profiles += 1;
                    }
                }
            }
            let (r, w) = allocating.join().unwrap();
            rates[i].push(r);
            worst[i] = worst[i].max(w);
        }
    }
    let [alone, spin, prof] = rates.map(|mut v| median(&mut v));
    println!(
        "  {what}: {:.2} M allocations/s alone, {:.2} M/s beside a spinning thread, {:.2} M/s \
         beside a thread taking profiles in a loop ({profiles} profiles)\n    ratios: \
         profiling / alone {:.3}, profiling / spinning {:.3}; longest 1 000-allocation batch: \
         {:.2} ms alone, {:.2} ms spinning, {:.2} ms profiling",
        alone / 1e6,
        spin / 1e6,
        prof / 1e6,
        prof / alone,
        prof / spin,
        worst[0].as_secs_f64() * 1e3,
        worst[1].as_secs_f64() * 1e3,
        worst[2].as_secs_f64() * 1e3
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, rounds) = if quick { (20_000, 3) } else { (100_000, 7) };
    println!("(a) the cost of a live profile, exact mode");
    part_a(n, rounds, false);
    part_a(n, rounds, true);

    println!("(b) a thread allocating while another takes profiles ({rounds} rounds of 1 s each)");
    let d = Duration::from_secs(1);
    {
        // Backpressure: the allocating thread waits for the drain thread rather than
        // dropping events (the exact mode's lossless setting), so a drain held up by a
        // profile would show here.
        let config = Config { backpressure: true, ..exact() };
        let session = memprof::start(config, Recorder::new()).unwrap();
        let kept = fill(n, false);
        part_b(&session, "exact mode with backpressure, 100 000 live samples", rounds, d);
        let stats = session.stats();
        println!("    events lost to a full queue: {}", stats.lost_events);
        drop(kept);
        drop(session.stop());
    }
    {
        let config = Config { drain_thread: true, ..Config::default() };
        let session = memprof::start(config, Recorder::new()).unwrap();
        part_b(&session, "default interval (512 KiB)", rounds, d);
        drop(session.stop());
    }
}
