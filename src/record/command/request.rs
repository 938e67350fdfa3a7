//! `memprof record`'s arguments (clap, the `cli` feature).

use crate::error::Error;
use crate::record::env::EnvSettings;
use crate::report::command::SiteArgs;
use clap::Args;
use std::ffi::OsString;

/// `memprof record`: the settings, the program and what to print (the command's arguments).
// The help text is clap's, shown as written: `<pid>` is not an HTML tag.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Args, Debug)]
#[command(after_help = "Example: memprof record --interval 1 -- ./prog arg1 arg2")]
pub struct RecordRequest {
    #[command(flatten)]
    pub(crate) sampling: SamplingArgs,
    /// Output profile; `%p` is replaced by the pid [default: memprof.%p.mprof].
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<String>,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub(crate) force: bool,
    /// Profile forked and exec'd children too, each into <pid>.mprof in the tree's
    /// directory beside the output (-o app.mprof: app.mprof.d/).
    #[arg(long)]
    pub(crate) follow_forks: bool,
    /// Stack unwinder in the program: dwarf (default: cached DWARF unwind tables, libgcc
    /// where they cannot walk), fp (fastest; needs code built with frame pointers), libgcc
    /// (libgcc's unwinder only: slow) or auto (fp when every loaded object's unwind tables
    /// show that it keeps frame pointers, else dwarf).
    #[arg(long, value_name = "fp|dwarf|libgcc|auto")]
    pub(crate) unwinder: Option<String>,
    /// Leave CPython's own allocator (pymalloc) in place. By default the program runs with
    /// PYTHONMALLOC=malloc (unless its environment sets PYTHONMALLOC), so that a Python
    /// program's objects are seen one by one rather than as pymalloc's arenas.
    #[arg(long)]
    pub(crate) keep_pymalloc: bool,
    /// Python frames in the stacks of a CPython 3.11 to 3.13 program: auto (at every
    /// interval but the exact mode's, where walking them at every allocation costs the
    /// whole command about 1.4×), on or off.
    #[arg(long, value_name = "auto|on|off", default_value = "auto",
          value_parser = ["auto", "on", "off"])]
    pub(crate) python_frames: String,
    /// Number of sites in the summary.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    /// What the summary's table is ordered by and its flamegraph counts: alloc, live,
    /// peak, short-lived or gc (as `memprof report --view`).
    #[arg(long, default_value = "alloc")]
    pub(crate) view: crate::report::View,
    #[command(flatten)]
    pub(crate) sites: SiteArgs,
    /// While the program runs, serve its profile so far over HTTP on ADDR, in Go's
    /// /debug/pprof/ conventions (heap, allocs, ?seconds=N): e.g. 127.0.0.1:6060, then
    /// `go tool pprof http://127.0.0.1:6060/debug/pprof/heap`.
    #[arg(long, value_name = "ADDR")]
    pub(crate) serve: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG [ARGS]..."
    )]
    pub(crate) command: Vec<OsString>,
}

/// The sampling settings `record` and `attach` share.
#[derive(Args, Debug)]
pub struct SamplingArgs {
    /// Mean bytes between samples, 1 B to 256 TiB (e.g. 512K, 800, 1 = exact mode: every
    /// allocation).
    #[arg(long, value_name = "SIZE", conflicts_with = "rate")]
    pub(crate) interval: Option<String>,
    /// statmemprof's rate: sample points per 8-byte word (interval = 8/λ bytes, 1 B to
    /// 256 TiB).
    #[arg(long, value_name = "λ")]
    pub(crate) rate: Option<f64>,
    /// Maximum call-stack depth.
    #[arg(long, value_name = "N")]
    pub(crate) depth: Option<usize>,
    /// Fixed sampler seed: the same program gives the same samples (per thread).
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
}

impl SamplingArgs {
    /// The default settings with these applied (not validated yet).
    pub(crate) fn settings(&self) -> Result<EnvSettings, Error> {
        let mut settings = EnvSettings::from_lookup(|_| None)?;
        if let Some(i) = &self.interval {
            settings.config.interval = crate::config::parse_size(i)?;
        }
        if let Some(r) = self.rate {
            settings.config.interval = crate::config::interval_from_rate(r)?;
        }
        if let Some(d) = self.depth {
            settings.config.depth = d;
        }
        settings.config.seed = self.seed;
        Ok(settings)
    }
}
