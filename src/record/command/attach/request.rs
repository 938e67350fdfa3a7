//! `memprof attach`'s arguments (clap, the `cli` feature).

use crate::report::command::SiteArgs;
use clap::Args;

/// `memprof attach`: the settings, the process and what to print.
#[derive(Args, Debug)]
#[command(after_help = "Example: memprof attach --interval 64K --duration 30s 1234")]
pub struct AttachRequest {
    /// Mean bytes between samples, 1 B to 256 TiB (e.g. 512K, 800, 1 = exact mode: every
    /// allocation).
    #[arg(long, value_name = "SIZE", conflicts_with = "rate")]
    pub(crate) interval: Option<String>,
    /// statmemprof's rate: sample points per 8-byte word (interval = 8/λ bytes).
    #[arg(long, value_name = "λ")]
    pub(crate) rate: Option<f64>,
    /// Maximum call-stack depth.
    #[arg(long, value_name = "N")]
    pub(crate) depth: Option<usize>,
    /// Output profile; `%p` is replaced by the pid [default: memprof.PID.mprof, then
    /// memprof.PID.1.mprof … when taken].
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<String>,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub(crate) force: bool,
    /// Detach after this long (e.g. 30s, 500ms, 2m; a number alone is seconds). Without
    /// it, SIGINT (Ctrl-C) or SIGTERM to memprof detaches, or the process's exit.
    #[arg(long, value_name = "D")]
    pub(crate) duration: Option<String>,
    /// Fixed sampler seed.
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    /// Number of sites in the summary.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    #[command(flatten)]
    pub(crate) sites: SiteArgs,
    /// While attached, serve the profile so far over HTTP on ADDR, in Go's /debug/pprof/
    /// conventions (heap, allocs), as `record --serve` does.
    #[arg(long, value_name = "ADDR")]
    pub(crate) serve: Option<String>,
    /// The process to profile.
    #[arg(value_name = "PID")]
    pub(crate) pid: u32,
}
