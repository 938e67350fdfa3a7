//! The managed heap under a memprof session: a steady live set with churn (see
//! `gc_workload/workload.rs`), several major cycles, sampled deaths turned into frees.
//!
//! ```text
//! cargo run --release --example gc_workload [-- STEPS [OUT.mprof]]
//! memprof report OUT.mprof --view gc --flamegraph gc.svg
//! memprof record --interval 16K -- target/release/examples/gc_workload   # the same, recorded
//! ```
//!
//! Sampling at a 16 KiB mean interval: the live set is a few MB, so the default 512 KiB
//! would leave only a handful of live samples to attribute mark time to.

#[path = "gc_workload/workload.rs"]
mod workload;

#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

fn main() {
    let steps = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(workload::STEPS);
    if memprof::gc::under_record() {
        // Under `memprof record` the preload library's session records the heap (and the
        // program's mallocs); it prints the top sites and GC cycles at exit.
        let report = workload::run(workload::RECORDS, steps);
        println!(
            "{} cycles under memprof record; checksum {}",
            report.cycles.len(),
            report.checksum
        );
        return;
    }
    let recorder = match std::env::args().nth(2) {
        Some(path) => memprof::Recorder::to_file(path),
        None => memprof::Recorder::new(),
    };
    let session = match memprof::start(workload::config(), recorder) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gc_workload: {e}");
            std::process::exit(1);
        }
    };
    let report = workload::run(workload::RECORDS, steps);
    let profile = match session.stop().and_then(|r| r.finish()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gc_workload: {e}");
            std::process::exit(1);
        }
    };
    let s = &report.stats;
    println!(
        "{} cycles; heap {:.1} MB, live {:.1} MB, {} blocks allocated; checksum {}",
        report.cycles.len(),
        s.heap_words as f64 * 8.0 / 1048576.0,
        s.live_words as f64 * 8.0 / 1048576.0,
        s.allocated_blocks,
        report.checksum
    );
    let n = report.cycles.len();
    for (i, c) in report.cycles.iter().enumerate() {
        if i >= 3 && i + 3 < n {
            continue;
        }
        println!(
            "cycle {i:>3}: {:>4} slices, longest {:>7.3} ms, mark {:>8.3} ms ({:.2} ns/word), sweep {:>7.3} ms, live {} / heap {} words",
            c.slices,
            c.longest_slice_ns as f64 / 1e6,
            c.mark_ns as f64 / 1e6,
            c.ns_per_word,
            c.sweep_ns as f64 / 1e6,
            c.live_words,
            c.heap_words
        );
    }
    println!(
        "profile: {} samples, {} frees, {} live at the end",
        profile.counts.samples,
        profile.counts.frees,
        profile.live.len()
    );
    print!("{}", memprof::report::top_table(&profile, &Default::default()));
}
