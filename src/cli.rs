//! Command-line front end: `memprof report` and `memprof demo`.

use clap::{Args, Parser, Subcommand};
use memprof::profile::Profile;
use memprof::report::{self, FlameOptions, PprofOptions, TopOptions, View};
use memprof::Error;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// memprof: a sampling heap profiler. Who allocated the memory, and who still holds it?
#[derive(Parser, Debug)]
#[command(name = "memprof", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the top allocation sites of a .mprof profile and export it.
    Report(ReportArgs),
    /// Profile the bundled workloads in process and write their flamegraphs.
    Demo(DemoArgs),
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// The profile to read (.mprof).
    file: PathBuf,
    /// What to count in the flamegraph and folded output: alloc (every sampled allocation),
    /// live (blocks still allocated at the end) or gc (estimated GC mark time by allocation
    /// site, for profiles of a managed heap).
    #[arg(long, default_value = "alloc")]
    view: View,
    /// Number of sites in the top table.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Write a flamegraph SVG (inferno) of the chosen view.
    #[arg(long, value_name = "OUT.svg")]
    flamegraph: Option<PathBuf>,
    /// Write a gzip-compressed pprof profile (Go heap-profile sample types).
    #[arg(long, value_name = "OUT.pb.gz")]
    pprof: Option<PathBuf>,
    /// Write folded stacks (`root;…;leaf bytes`, sorted) of the chosen view.
    #[arg(long, value_name = "OUT")]
    collapsed: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Directory for the flamegraphs and profiles.
    #[arg(long, default_value = "flamegraphs")]
    pub out: PathBuf,
    /// Run the workloads with fewer iterations (seconds instead of tens of seconds).
    #[arg(long)]
    pub quick: bool,
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let result = match cli.command {
        Command::Report(args) => report_cmd(&args),
        Command::Demo(args) => crate::demo::run(&args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("memprof: error: {e}");
            1
        }
    }
}

fn report_cmd(args: &ReportArgs) -> Result<(), Error> {
    let mut profile = Profile::read_file(&args.file)?;
    // A process that died before writing its symbols: resolve them from its modules.
    let unresolved =
        profile.stacks.iter().flat_map(|s| &s.frames).any(|a| !profile.symbols.contains_key(a));
    if unresolved && !profile.modules.is_empty() {
        for note in memprof::profile::symbolize::resolve_offline(&mut profile) {
            eprintln!("memprof: note: {note}");
        }
    }
    for w in &profile.warnings {
        eprintln!("memprof: warning: {}: {w}", args.file.display());
    }
    print!(
        "{}",
        report::top_table(&profile, &TopOptions { limit: args.top, ..Default::default() })
    );
    write_outputs(
        &profile,
        args.view,
        args.flamegraph.as_deref(),
        args.pprof.as_deref(),
        args.collapsed.as_deref(),
    )
}

/// Writes the requested exports of `profile`, saying where each went.
pub fn write_outputs(
    profile: &Profile,
    view: View,
    flamegraph: Option<&Path>,
    pprof: Option<&Path>,
    collapsed: Option<&Path>,
) -> Result<(), Error> {
    if let Some(path) = flamegraph {
        write_file(path, |w| {
            report::flamegraph(profile, &FlameOptions { view, ..Default::default() }, w)
        })?;
        eprintln!("memprof: wrote {} flamegraph {}", view.name(), path.display());
    }
    if let Some(path) = pprof {
        write_file(path, |w| report::write_pprof(profile, &PprofOptions::default(), w))?;
        eprintln!("memprof: wrote pprof profile {}", path.display());
    }
    if let Some(path) = collapsed {
        write_file(path, |w| report::write_collapsed(w, profile, view))?;
        eprintln!("memprof: wrote {} folded stacks {}", view.name(), path.display());
    }
    Ok(())
}

/// Creates `path` and fills it with `f`, flushing; errors name the file.
pub fn write_file(
    path: &Path,
    f: impl FnOnce(&mut BufWriter<File>) -> Result<(), Error>,
) -> Result<(), Error> {
    let file = File::create(path)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
    let mut w = BufWriter::new(file);
    f(&mut w)?;
    w.flush().map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}
