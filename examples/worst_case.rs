//! statmemprof's worst case (ocaml/ocaml#8731), profiled with memprof. See `worst_case/workload.rs`.
//!
//! ```text
//! cargo run --release --example worst_case                 # λ = 0.01, depth 10: prints the sample count
//! cargo run --release --example worst_case -- --off        # the same loop, no session
//! cargo run --release --example worst_case -- 1000000      # fewer iterations
//! ```

#[path = "worst_case/workload.rs"]
mod workload;

#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

fn main() {
    let mut iterations = workload::ITERATIONS;
    let mut off = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--off" => off = true,
            n => match n.parse() {
                Ok(n) => iterations = n,
                Err(_) => {
                    eprintln!("usage: worst_case [--off] [ITERATIONS]");
                    std::process::exit(2);
                }
            },
        }
    }
    if off {
        workload::run(iterations);
        println!("0");
        return;
    }
    let session = match memprof::start(workload::config(), workload::CountSamples::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("worst_case: {e}");
            std::process::exit(1);
        }
    };
    workload::run(iterations);
    let samples = session.stop().expect("session stops").0;
    println!("{samples}");
}
