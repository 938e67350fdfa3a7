//! `memprof attach`'s arguments (clap, the `cli` feature).

use crate::record::command::request::SamplingArgs;
use crate::report::command::SiteArgs;
use clap::Args;

/// `memprof attach`: the settings, the process and what to print.
#[derive(Args, Debug)]
#[command(after_help = "Example: memprof attach --interval 64K --duration 30s 1234")]
pub struct AttachRequest {
    #[command(flatten)]
    pub(crate) sampling: SamplingArgs,
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
    /// Number of sites in the summary.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    /// What the summary's table is ordered by and its flamegraph counts: alloc, live,
    /// peak, short-lived or gc (as `memprof report --view`).
    #[arg(long, default_value = "alloc")]
    pub(crate) view: crate::report::View,
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
