//! A request loop whose cache leaks, profiled with memprof's Recorder: the alloc view
//! blames `parse_request` and `render_page`, the live view blames `Cache::remember`.
//!
//! ```text
//! cargo run --release --example leaky_cache [-- OUT.mprof]
//! memprof report OUT.mprof --view live --flamegraph live.svg
//! ```

#[path = "leaky_cache/workload.rs"]
mod workload;

#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

fn main() {
    let out = std::env::args().nth(1).unwrap_or_else(|| "leaky_cache.mprof".into());
    let session = match memprof::start(memprof::Config::default(), memprof::Recorder::to_file(&out))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("leaky_cache: {e}");
            std::process::exit(1);
        }
    };
    let cache = workload::run(workload::REQUESTS);
    let profile = match session.stop().and_then(|r| r.finish()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("leaky_cache: {e}");
            std::process::exit(1);
        }
    };
    println!("{} entries cached; profile written to {out}", cache.entries());
    print!("{}", memprof::report::top_table(&profile, &Default::default()));
}
