//! The `memprof` command: parse, dispatch, exit code. The work is in the library.

mod cli;
mod demo;

// The demo profiles workloads in this process.
#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

fn main() {
    std::process::exit(cli::main());
}
