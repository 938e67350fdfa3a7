//! Profiler overhead, measured side by side in one run and printed as ratios.
//!
//! ```text
//! cargo bench --bench overhead              # both parts
//! cargo bench --bench overhead -- --quick   # fewer iterations
//! ```
//!
//! (a) statmemprof's worst case (ocaml/ocaml#8731) (`examples/worst_case`) with no session, with a session at the
//!     default interval (512 KiB) and with statmemprof's λ = 0.01 (800 B), depth 10. Runs
//!     are interleaved (off, default, dense, off, …) and the median of each is compared, so
//!     drift on a shared machine hits all three alike. The cost per sample is the extra
//!     time of the dense run divided by its samples.
//! (b) instructions added to an unsampled allocation by `Sampled<System>`: the bench runs
//!     itself under callgrind twice, N malloc/free pairs through `System` and through
//!     `Sampled<System>` (with a session at the default interval), and divides the
//!     difference by N. Instruction counts do not depend on machine load. With
//!     `--features tracing`, the same again with `memprof::tracing::SpanLayer` installed
//!     and two spans entered around the loop (the unsampled path must not change).

#[allow(dead_code)]
#[path = "../examples/worst_case/workload.rs"]
mod worst_case;

use memprof::{Config, Sampled};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

#[global_allocator]
static GLOBAL: Sampled<System> = Sampled::new(System);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--alloc-loop") {
        let which = args.get(i + 1).map(String::as_str).unwrap_or("system");
        let n: u64 = args.get(i + 2).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
        alloc_loop(which, n);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    worst_case_ratios(if quick { 1_000_000 } else { 2_000_000 }, if quick { 5 } else { 11 });
    instructions_per_allocation();
}

fn time_run(config: Option<Config>, iterations: u64) -> (f64, u64) {
    let session = config.map(|c| memprof::start(c, worst_case::CountSamples::default()).unwrap());
    let t = Instant::now();
    worst_case::run(iterations);
    let secs = t.elapsed().as_secs_f64();
    let samples = session.map_or(0, |s| s.stop().unwrap().0);
    (secs, samples)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn worst_case_ratios(iterations: u64, rounds: usize) {
    println!(
        "(a) worst_case (ocaml/ocaml#8731): {iterations} iterations × {rounds} interleaved rounds"
    );
    let dense = worst_case::config();
    let default = Config::default();
    time_run(None, iterations / 10); // warm up
                                     // Each round runs the three side by side; the ratios of a round share its conditions,
                                     // and the median over rounds discards the rounds a neighbour disturbed.
    let (mut def, mut den, mut per_sample) = (Vec::new(), Vec::new(), Vec::new());
    let mut samples = 0;
    for _ in 0..rounds {
        let off = time_run(None, iterations).0;
        let d = time_run(Some(default.clone()), iterations).0;
        let (t, s) = time_run(Some(dense.clone()), iterations);
        let off2 = time_run(None, iterations).0;
        let base = (off + off2) / 2.0;
        def.push(d / base);
        den.push(t / base);
        per_sample.push((t - base) * 1e9 / s.max(1) as f64);
        samples = s;
    }
    println!("  no session           : 1.000×");
    println!("  default interval     : {:.3}×  (target ≤ 1.01×)", median(&mut def));
    println!(
        "  λ = 0.01, depth 10   : {:.3}×  (target ≤ 1.5×; OCaml's Gc.Memprof: 1.94×), {} samples a run, {:.0} ns per sample",
        median(&mut den),
        samples,
        median(&mut per_sample)
    );
}

fn alloc_loop(which: &str, n: u64) {
    let _session = memprof::start(Config::default(), worst_case::CountSamples::default()).unwrap();
    #[cfg(feature = "tracing")]
    if let Some(which) = which.strip_suffix("-span") {
        // The span layer installed, two spans entered around the loop: the
        // unsampled path must not see them.
        use tracing_subscriber::layer::SubscriberExt;
        let layer = memprof::tracing::SpanLayer::new().with_field("endpoint");
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .unwrap();
        let _outer = tracing::info_span!("server").entered();
        let _inner = tracing::info_span!("handle", endpoint = "/upload").entered();
        return alloc_loop_in(which, n);
    }
    alloc_loop_in(which, n)
}

fn alloc_loop_in(which: &str, n: u64) {
    match which {
        "sampled" => pairs(&Sampled::new(System), &Sampled::new(System), n),
        "sampled-alloc" => pairs(&Sampled::new(System), &System, n),
        _ => pairs(&System, &System, n),
    }
}

/// `n` pairs of 64-byte allocations through `a` and frees through `f`.
#[inline(never)]
fn pairs(a: &impl GlobalAlloc, f: &impl GlobalAlloc, n: u64) {
    let layout = Layout::from_size_align(64, 8).unwrap();
    for _ in 0..n {
        // SAFETY: layout has non-zero size; each block is freed once with its layout.
        unsafe {
            let p = a.alloc(layout);
            black_box(p);
            f.dealloc(p, layout);
        }
    }
}

fn callgrind_instructions(which: &str, n: u64) -> Option<u64> {
    let exe = std::env::current_exe().ok()?;
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(&exe)
        .args(["--alloc-loop", which, &n.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    let line = text.lines().find(|l| l.contains("Collected :"))?;
    line.rsplit(':').next()?.trim().replace(',', "").parse().ok()
}

fn instructions_per_allocation() {
    let (small, large) = (100_000u64, 1_100_000u64);
    println!(
        "(b) instructions per malloc+free pair (callgrind, {small} vs {large} pairs, difference)"
    );
    let per_pair = |which| -> Option<f64> {
        let a = callgrind_instructions(which, small)?;
        let b = callgrind_instructions(which, large)?;
        Some((b as f64 - a as f64) / (large - small) as f64)
    };
    match (per_pair("system"), per_pair("sampled-alloc"), per_pair("sampled")) {
        (Some(sys), Some(alloc), Some(both)) => {
            println!("  System               : {sys:.1} instructions per alloc+free");
            println!("  Sampled<System>      : {both:.1} instructions per alloc+free");
            println!(
                "  added by memprof     : {:.1} per unsampled allocation (target ≤ 10), {:.1} per free",
                alloc - sys,
                both - alloc
            );
        }
        _ => println!("  valgrind not found or failed: skipped"),
    }
    #[cfg(feature = "tracing")]
    match (per_pair("system-span"), per_pair("sampled-alloc-span"), per_pair("sampled-span")) {
        (Some(sys), Some(alloc), Some(both)) => println!(
            "  with the span layer and two spans entered: {:.1} per unsampled allocation, \
             {:.1} per free (System {sys:.1})",
            alloc - sys,
            both - alloc
        ),
        _ => println!("  valgrind not found or failed: skipped"),
    }
}
