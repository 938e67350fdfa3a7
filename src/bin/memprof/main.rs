//! The `memprof` command: parse, dispatch, exit code. What each command does is in the
//! library (`memprof::record`, `memprof::report::command`); the demo is `demo.rs`.

mod demo;

use clap::{Parser, Subcommand};
use memprof::record::{AttachRequest, Bundled, RecordRequest};
use memprof::report::command::{DiffRequest, ReportRequest};
use memprof::report::text::printable;

// The demo profiles workloads in this process.
#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

/// The preload library, built by `build.rs` and carried inside this executable so that
/// `memprof record` needs no other file (`memprof::record::Bundled`).
static PRELOAD: Bundled = Bundled {
    bytes: include_bytes!(concat!(env!("OUT_DIR"), "/libmemprof_preload.so")),
    digest: env!("MEMPROF_BUNDLED_DIGEST"),
    version: env!("CARGO_PKG_VERSION"),
};

/// memprof: a sampling heap profiler. Who allocated the memory, and who still holds it?
#[derive(Parser, Debug)]
#[command(name = "memprof", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a dynamically linked program under the preload library and profile its heap.
    Record(RecordRequest),
    /// Profile a process that is already running (ptrace, no gdb), until Ctrl-C, SIGTERM,
    /// --duration or its exit; then leave it as it was.
    Attach(AttachRequest),
    /// Print the top allocation sites of a .mprof profile and export it.
    Report(ReportRequest),
    /// Compare two .mprof profiles site by site, flagging changes beyond sampling noise.
    Diff(DiffRequest),
    /// Profile the bundled workloads in process and write their flamegraphs (to
    /// target/memprof-demo/ unless --out says otherwise).
    Demo(demo::DemoArgs),
    /// Print the path of the preload library that `record` uses (written to the cache
    /// directory first if needed), for running a program with `LD_PRELOAD` by hand.
    #[command(name = "preload-path")]
    PreloadPath,
    /// Runs one of the demo's workloads without a session of its own (the demo records it
    /// through the preload library).
    #[command(name = "__workload", hide = true)]
    Workload {
        /// The workload (leaky_cache).
        name: String,
        /// Its size (requests).
        size: u64,
    },
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let result = match cli.command {
        // The program's exit status, or 1 when memprof itself failed.
        Command::Record(args) => {
            big_blocks_mapped();
            memprof::record::run(&args, &PRELOAD)
        }
        Command::Attach(args) => {
            big_blocks_mapped();
            memprof::record::attach(&args, &PRELOAD)
        }
        Command::Report(args) => memprof::report::command::report(&args).map(|()| 0),
        Command::Diff(args) => memprof::report::command::diff(&args).map(|()| 0),
        Command::Demo(args) => demo::run(&args, &PRELOAD).map(|()| 0),
        Command::PreloadPath => memprof::record::preload_path(&PRELOAD).map(|path| {
            println!("{}", path.display());
            0
        }),
        Command::Workload { name, size } => demo::workload(&name, size).map(|()| 0),
    };
    if std::env::var_os("MEMPROF_DEBUG_PEAK").is_some() {
        say_own_peak();
    }
    std::process::exit(match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("memprof: error: {}", printable(&e.to_string()));
            1
        }
    });
}

/// `record` and `attach` hold large buffers for a while (an object's debug sections, the
/// profile's blocks) and let them go: each is mapped for itself, at glibc's first threshold
/// kept fixed (glibc raises it to the largest block freed so far, and later blocks up to
/// that size then come from the heap, where freed they stay beside what follows), so a
/// block freed goes back to the kernel. memprof's own peak resident size is one of the
/// rows of the pipeline bench (`benches/pipeline.rs`).
fn big_blocks_mapped() {
    // SAFETY: mallopt only sets a parameter of glibc's allocator; called before this
    // process starts any thread.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
}

/// `MEMPROF_DEBUG_PEAK=1`: memprof's own peak resident size, to stderr (the collector says
/// how many passes it made at its end). The kernel's `VmHWM` belongs to this process's
/// memory since its `exec`; `wait4`'s `ru_maxrss` does not (it keeps the peak of the
/// parent it was forked from), so a test of memprof's own memory asks this.
fn say_own_peak() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(kib) = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    {
        eprintln!("memprof: own peak resident {} bytes", kib * 1024);
    }
}
