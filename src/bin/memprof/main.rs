//! The `memprof` command: parse, dispatch, exit code. The work is in the library.

mod cli;
mod demo;
mod notes;

// The demo profiles workloads in this process.
#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

/// The preload library, built by `build.rs` and carried inside this executable so that
/// `memprof record` needs no other file (`memprof::bundled`).
pub static PRELOAD: memprof::bundled::Bundled = memprof::bundled::Bundled {
    bytes: include_bytes!(concat!(env!("OUT_DIR"), "/libmemprof_preload.so")),
    digest: env!("MEMPROF_BUNDLED_DIGEST"),
    version: env!("CARGO_PKG_VERSION"),
};

fn main() {
    std::process::exit(cli::main());
}
