//! Command-line front end: `memprof record`, `memprof report`, `memprof diff` and `memprof demo`.

use clap::{Args, Parser, Subcommand};
use memprof::config;
use memprof::files::Output;
use memprof::launcher::{self, EnvSettings, RecordOptions};
use memprof::profile::load::{load_with_first, LoadOptions, Message, Process};
use memprof::profile::replay::{parse_duration, parse_moment, Window};
use memprof::profile::symbolize::Loaders;
use memprof::profile::Profile;
use memprof::report::text::{printable, printable_os};
use memprof::report::{self, FlameOptions, GroupBy, PprofOptions, TopOptions, View};
use memprof::Error;
use std::ffi::OsString;
use std::io::BufWriter;
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
    /// Run a dynamically linked program under the preload library and profile its heap.
    Record(RecordArgs),
    /// Print the top allocation sites of a .mprof profile and export it.
    Report(ReportArgs),
    /// Compare two .mprof profiles site by site, flagging changes beyond sampling noise.
    Diff(DiffArgs),
    /// Profile the bundled workloads in process and write their flamegraphs.
    Demo(DemoArgs),
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

#[derive(Args, Debug)]
#[command(after_help = "Example: memprof record --interval 1 -- ./prog arg1 arg2")]
struct RecordArgs {
    /// Mean bytes between samples, 1 B to 256 TiB (e.g. 512K, 800, 1 = exact mode: every
    /// allocation).
    #[arg(long, value_name = "SIZE", conflicts_with = "rate")]
    interval: Option<String>,
    /// statmemprof's rate: sample points per 8-byte word (interval = 8/λ bytes, 1 B to
    /// 256 TiB).
    #[arg(long, value_name = "λ")]
    rate: Option<f64>,
    /// Maximum call-stack depth.
    #[arg(long, value_name = "N")]
    depth: Option<usize>,
    /// Output profile; `%p` is replaced by the pid [default: memprof.%p.mprof].
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<String>,
    /// Replace the output file if it exists.
    #[arg(long)]
    force: bool,
    /// Profile forked and exec'd children too, each into <pid>.mprof in the tree's
    /// directory beside the output (-o app.mprof: app.mprof.d/).
    #[arg(long)]
    follow_forks: bool,
    /// Stack unwinder in the program: dwarf (default: cached DWARF unwind tables, libgcc
    /// where they cannot walk), fp (fastest; needs code built with frame pointers), libgcc
    /// (libgcc's unwinder only: slow) or auto (fp when every loaded object's unwind tables
    /// show that it keeps frame pointers, else dwarf).
    #[arg(long, value_name = "fp|dwarf|libgcc|auto")]
    unwinder: Option<String>,
    /// Fixed sampler seed: the same program gives the same samples (per thread).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Leave CPython's own allocator (pymalloc) in place. By default the program runs with
    /// PYTHONMALLOC=malloc (unless its environment sets PYTHONMALLOC), so that a Python
    /// program's objects are seen one by one rather than as pymalloc's arenas.
    #[arg(long)]
    keep_pymalloc: bool,
    /// Number of sites in the summary.
    #[arg(long, default_value_t = 10)]
    top: usize,
    #[command(flatten)]
    sites: SiteArgs,
    /// While the program runs, serve its profile so far over HTTP on ADDR, in Go's
    /// /debug/pprof/ conventions (heap, allocs, ?seconds=N): e.g. 127.0.0.1:6060, then
    /// `go tool pprof http://127.0.0.1:6060/debug/pprof/heap`.
    #[arg(long, value_name = "ADDR")]
    serve: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG [ARGS]..."
    )]
    command: Vec<OsString>,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// The profiles to read (.mprof); several files are reported together, and so is a
    /// process tree recorded with --follow-forks, named by its root file (app.mprof) or its
    /// directory (app.mprof.d/).
    #[arg(required = true, value_name = "FILE|DIR")]
    files: Vec<PathBuf>,
    /// What to count in the flamegraph, folded and pprof output: alloc (every sampled
    /// allocation), live (blocks still allocated at the end), peak (blocks allocated when
    /// the live heap peaked; one process at a time) or gc (estimated GC mark time by
    /// allocation site, for profiles of a managed heap).
    #[arg(long, default_value = "alloc")]
    view: View,
    /// Number of sites in the top table.
    #[arg(long, default_value_t = 20)]
    top: usize,
    #[command(flatten)]
    sites: SiteArgs,
    /// Write a flamegraph SVG (inferno) of the chosen view.
    #[arg(long, value_name = "OUT.svg")]
    flamegraph: Option<PathBuf>,
    /// Write a gzip-compressed pprof profile (Go heap-profile sample types).
    #[arg(long, value_name = "OUT.pb.gz")]
    pprof: Option<PathBuf>,
    /// Write folded stacks (`root;…;leaf bytes`, sorted) of the chosen view.
    #[arg(long, value_name = "OUT")]
    collapsed: Option<PathBuf>,
    /// Write an interactive HTML report (one self-contained page: timeline, flamegraph of
    /// any moment or range, search, sites) of the whole recording; of a tree, one page
    /// with every process (a process selector, each one's timeline, the merged flamegraph).
    #[arg(long, value_name = "OUT.html", conflicts_with_all = ["at", "from", "to"])]
    html: Option<PathBuf>,
    /// Report the heap at one moment: live = the blocks live then, alloc = what was
    /// allocated before it (a time since the start, 1.5s, 250ms, 40us, 1200ns, or a share of
    /// the run, 40%). Every table and output follows.
    #[arg(long, value_name = "TIME", conflicts_with_all = ["from", "to"])]
    at: Option<String>,
    /// Report only what was allocated from this time on (see --at for the forms); live =
    /// what of it was still live at --to (or at the end).
    #[arg(long, value_name = "TIME")]
    from: Option<String>,
    /// Report only what was allocated before this time (see --from).
    #[arg(long, value_name = "TIME")]
    to: Option<String>,
    /// A freed block is short-lived when it lived less than this (e.g. 100us, 10ms, 1s):
    /// the short-lived view and the top table's short-lived section [default: 1ms]
    #[arg(long, value_name = "DURATION")]
    short_lived: Option<String>,
    /// span: group by tracing span path first (profiles of programs with memprof's
    /// `SpanLayer`): the spans become root frames of the flamegraph and folded stacks, and
    /// the top table's sites read `span › site` (pprof samples always carry a `span` label).
    #[arg(long, value_name = "span|stack", default_value = "stack")]
    group_by: GroupBy,
}

/// How sites are named and shown: `record`'s summary, `report` and `diff`.
#[derive(Args, Debug)]
struct SiteArgs {
    /// Frames whose function name matches REGEX (Rust regex syntax, unanchored) are
    /// allocation plumbing, like the program's own malloc wrappers: the site is their
    /// caller, in every report (pprof leaves them out too). Repeatable; the environment
    /// variable MEMPROF_SITE_SKIP adds one more expression.
    #[arg(long = "site-skip", value_name = "REGEX")]
    site_skip: Vec<String>,
    /// After the top table, print each shown site's largest stack, N frames from the site
    /// outwards (the site first).
    #[arg(long, value_name = "N", default_value_t = 0)]
    backtrace: usize,
}

/// The environment variable that adds one `--site-skip` expression.
const ENV_SITE_SKIP: &str = "MEMPROF_SITE_SKIP";

impl SiteArgs {
    fn skip(&self) -> Result<memprof::profile::site::SiteSkip, Error> {
        site_skip(&self.site_skip)
    }
}

/// The expressions of `--site-skip` and `MEMPROF_SITE_SKIP`, compiled (an expression that
/// does not compile is an error that names it and where it came from).
fn site_skip(patterns: &[String]) -> Result<memprof::profile::site::SiteSkip, Error> {
    let mut skip = memprof::profile::site::SiteSkip::default();
    for p in patterns {
        skip.add(p, "--site-skip")?;
    }
    match std::env::var(ENV_SITE_SKIP) {
        Ok(p) if !p.is_empty() => skip.add(&p, ENV_SITE_SKIP)?,
        Ok(_) | Err(std::env::VarError::NotPresent) => {}
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(Error::Config(format!("{ENV_SITE_SKIP} is not valid UTF-8")));
        }
    }
    Ok(skip)
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
        Command::Record(args) => return record_cmd(&args),
        Command::Report(args) => report_cmd(&args),
        Command::Diff(args) => diff_cmd(&args),
        Command::Demo(args) => crate::demo::run(&args),
        Command::PreloadPath => preload_path(),
        Command::Workload { name, size } => crate::demo::workload(&name, size),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("memprof: error: {}", printable(&e.to_string()));
            1
        }
    }
}

/// `memprof preload-path`: where the preload library is, for `LD_PRELOAD` by hand. A library
/// that only a temporary directory could take is gone when this command ends, so that is an
/// error here.
fn preload_path() -> Result<(), Error> {
    let lib = launcher::find_preload(Some(&crate::PRELOAD))?;
    if lib.is_temporary() {
        return Err(Error::Other(format!(
            "no cache directory could take the preload library (tried {}); set XDG_CACHE_HOME \
             to a writable directory",
            memprof::bundled::Bundled::cache_dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    println!("{}", lib.path().display());
    Ok(())
}

fn record_cmd(args: &RecordArgs) -> i32 {
    match record(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("memprof: error: {}", printable(&e.to_string()));
            1
        }
    }
}

fn record_settings(args: &RecordArgs) -> Result<EnvSettings, Error> {
    let mut settings = EnvSettings::from_lookup(|_| None)?;
    if let Some(i) = &args.interval {
        settings.config.interval = config::parse_size(i)?;
    }
    if let Some(r) = args.rate {
        settings.config.interval = config::interval_from_rate(r)?;
    }
    if let Some(d) = args.depth {
        settings.config.depth = d;
    }
    settings.config.seed = args.seed;
    if let Some(u) = &args.unwinder {
        settings.config.unwinder = config::parse_unwinder(u)?;
    }
    settings.config.validate()?;
    if let Some(o) = &args.output {
        settings.output = o.clone();
    }
    settings.follow_forks = args.follow_forks;
    Ok(settings)
}

/// `memprof record`: runs the program, then summarises its profile. Returns the program's
/// exit status, or 1 when memprof itself failed (one line on stderr).
fn record(args: &RecordArgs) -> Result<i32, Error> {
    let settings = record_settings(args)?;
    // A bad expression is found before anything runs.
    let skip = args.sites.skip()?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Error::Config("no program given (memprof record -- PROG [ARGS…])".into()))?;
    let preload = launcher::find_preload(Some(&crate::PRELOAD))?;
    // Bound before the program runs: a taken port is an error, and nothing runs.
    let followed = std::sync::Arc::new(memprof::profile::load::Followed::default());
    let server = match &args.serve {
        Some(addr) => Some(serve_followed(addr, followed.clone())?),
        None => None,
    };
    let opts = RecordOptions {
        settings,
        force: args.force,
        program: program.clone(),
        args: rest.to_vec(),
        keep_pymalloc: args.keep_pymalloc,
    };
    // While the program runs, another thread reads the symbols of the objects it mapped,
    // so that little is left to do once it exits (symbol reading was most of that). It is
    // started only once the program runs, and told that it has ended by `done` closing.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let mut warm = None;
    // And a third reads the profile as it grows, into its aggregates, so that only the
    // last blocks are left to read after the exit.
    let exited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut follower = None;
    let run = launcher::record_with(&opts, preload.path(), |pid| {
        warm = std::thread::Builder::new()
            .name("memprof-symbols".into())
            .spawn(move || {
                idle_priority();
                warm_symbols(pid, &done_rx)
            })
            .ok();
        let path = launcher::output_path(&opts, pid);
        let done = exited.clone();
        let serving = server.is_some().then(|| followed.clone());
        follower = std::thread::Builder::new()
            .name("memprof-reader".into())
            .spawn(move || match serving {
                // Served requests see what it has read: it keeps up at normal priority.
                Some(shared) => memprof::profile::load::follow_shared(path, done, &shared),
                None => {
                    idle_priority();
                    memprof::profile::load::follow(path, done)
                }
            })
            .ok();
    });
    drop(done_tx);
    exited.store(true, std::sync::atomic::Ordering::Release);
    if let Some(server) = server {
        server.stop();
    }
    let mut loaders = warm.and_then(|t| t.join().ok()).unwrap_or_default();
    // Whatever went wrong while following is found again (and reported) by the reading
    // after the exit.
    let first = follower.and_then(|t| t.join().ok()).and_then(Result::ok);
    let run = run?;
    // The program's name as the notes and messages show it: escaped for the terminal.
    let shown = printable_os(program);
    if let Some(sig) = run.signal {
        eprintln!("memprof: {shown} was killed by signal {sig}");
    }
    let mut files = vec![run.output.clone()];
    files.extend(run.children.iter().cloned());
    // From here on, whatever goes wrong is memprof's to report, on stderr; the exit status
    // stays the program's.
    let code = run.exit_code;
    let gone = std::fs::symlink_metadata(&run.output).is_err();
    if gone {
        // Removed while the program ran (its directory too, perhaps): what the reading
        // thread folded in before is all there is.
        if first.is_none() {
            eprintln!(
                "memprof: error: the profile {} is gone (removed while {shown} ran?); nothing \
                 was read from it",
                printable_os(&run.output)
            );
            return Ok(code);
        }
        eprintln!(
            "memprof: warning: the profile {} was removed while {shown} ran; reporting what \
             was read from it before",
            printable_os(&run.output)
        );
    }
    let empty = !gone && std::fs::metadata(&run.output).map(|m| m.len() == 0).unwrap_or(true);
    if empty {
        let why = match run.signal {
            Some(sig) => format!("{shown} was killed by signal {sig} before it wrote any"),
            None => format!(
                "the preload library did not run in {shown} (a statically linked or setuid \
                 program, or LD_PRELOAD was cleared)"
            ),
        };
        eprintln!("memprof: error: {} is empty: {why}", printable_os(&run.output));
        return Ok(code);
    }
    let (mut profile, labels, processes) =
        match read_profiles_first(&files, true, &mut loaders, first) {
            Ok(read) => read,
            Err(e) => {
                eprintln!("memprof: error: the profile cannot be read: {e}");
                return Ok(code);
            }
        };
    // The process ends right after the report: freeing the parsed debug information (tens of
    // MB for a C library) would only add tens of milliseconds to the user's wait.
    std::mem::forget(loaders);
    profile.site_skip = skip;
    let profile = profile;
    let after_notes = || {
        if let Some(n) = crate::notes::unfollowed(&shown, &run.unfollowed) {
            eprintln!("memprof: note: {n}");
        }
        let modules = profile.modules.iter().map(|m| m.path.as_str());
        let any_named =
            processes.iter().any(|p| crate::notes::is_cpython(&p.executable, [].into_iter()));
        if any_named || crate::notes::is_cpython(&profile.header.executable, modules) {
            eprintln!(
                "memprof: note: {}",
                crate::notes::cpython(run.pymalloc_bypassed, args.keep_pymalloc)
            );
        }
    };
    if profile.counts.samples == 0 {
        if let Some((_, hint)) = exec_hint(program, &run, &profile) {
            eprintln!("memprof: note: no allocations were seen in {shown}: {hint}");
            after_notes();
            return Ok(code);
        }
        let why = if let Some(sig) = run.signal {
            format!(
                "it was killed by signal {sig} before the profile's first flush (the last \
                 50 ms of a crashed process can be lost)"
            )
        } else if profile.header.interval <= 1.0 {
            "it never called malloc or a related function through the dynamic loader \
             (statically linked allocators and direct mmap are not seen)"
                .to_owned()
        } else {
            format!(
                "either it never called malloc, or it allocated too little to reach a sample \
                 point (mean interval {} bytes; try --interval 1)",
                profile.header.interval
            )
        };
        eprintln!("memprof: note: no allocations were seen in {shown}: {why}");
        after_notes();
        return Ok(code);
    }
    let tree = processes.len() > 1;
    if tree {
        eprint!("{}", report::tree::process_table(&processes, &Default::default()));
    }
    eprint!(
        "{}",
        report::top_table(
            &profile,
            &TopOptions { limit: args.top, backtrace: args.sites.backtrace, ..Default::default() }
        )
    );
    if let Some(note) = report::unwinding::shallow_stacks_note(&profile) {
        eprintln!("memprof: note: {note}");
    }
    let svg = PathBuf::from(format!("{}.svg", run.output.display()));
    // The companions follow `-o`'s rule: new files, or with --force this user's regular
    // files replaced; a symlink, a FIFO or another user's file is left alone with an error.
    let companion = Outputs { flamegraph: Some(&svg), ..Default::default() };
    if let Err(e) = write_outputs(&profile, View::Alloc, GroupBy::Stack, companion, args.force) {
        eprintln!("memprof: error: {e}");
    }
    // The page replays each file by its stack ids (a tree's files into the merged
    // profile's: report/html.rs §4).
    let html = PathBuf::from(format!("{}.html", run.output.display()));
    if !gone {
        if let Err(e) = write_html_of(&profile, &processes, &html, args.force) {
            eprintln!("memprof: error: {e}");
        }
    }
    if tree {
        let dir = memprof::profile::tree::dir_of(&run.output.display().to_string());
        eprintln!(
            "memprof: profiles {} and {}/ ({} processes, {} samples; `memprof report {}` \
             reads the tree)",
            printable_os(&run.output),
            printable(&dir),
            processes.len(),
            profile.counts.samples,
            printable_os(&run.output)
        );
    } else {
        eprintln!(
            "memprof: profile {} ({})",
            printable_os(&run.output),
            printable(&labels.join(", "))
        );
    }
    if let Some((true, hint)) = exec_hint(program, &run, &profile) {
        eprintln!("memprof: note: this profile is the wrapper's, not {shown}'s: {hint}");
    }
    after_notes();
    Ok(code)
}

/// Serves, on `addr`, the profile that the reading thread publishes in `followed`, its
/// symbols resolved from the recorded modules (readers kept from request to request).
fn serve_followed(
    addr: &str,
    followed: std::sync::Arc<memprof::profile::load::Followed>,
) -> Result<memprof::serve::Running, Error> {
    let bound = memprof::serve::Server::bind(addr)?;
    let mirror = std::sync::Mutex::new((Profile::default(), Loaders::default()));
    let handler = memprof::serve::Handler::new(move || {
        let mut guard = mirror.lock().unwrap_or_else(|p| p.into_inner());
        let (profile, loaders) = &mut *guard;
        if !followed.snapshot_into(profile) {
            return Err(Error::Other("the program has not started its profile yet".into()));
        }
        let _ = memprof::profile::symbolize::resolve_offline_with(profile, loaders);
        Ok(profile.clone())
    });
    let running = bound.spawn(handler)?;
    eprintln!(
        "memprof: serving http://{}/debug/pprof/ while the program runs",
        running.local_addr()
    );
    Ok(running)
}

/// When the program's own profile shows that it replaced itself with another program
/// (`exec`) — the usual case of a wrapper (a script, `env`, a version manager's shim) run
/// without `--follow-forks`, whose preload entry is removed for what it executes — what
/// to tell the user, and whether it is surely a wrapper (run by an interpreter: the
/// recorded executable is not the program asked for). The file then ends without its end
/// record although nothing was killed (which `_exit` also does).
fn exec_hint(
    program: &std::ffi::OsStr,
    run: &launcher::Recorded,
    p: &Profile,
) -> Option<(bool, String)> {
    if p.complete || run.signal.is_some() || !run.children.is_empty() {
        return None;
    }
    let ran = Path::new(&p.header.executable);
    let asked = launcher::resolve_program(program).ok()?;
    let asked = std::fs::canonicalize(&asked).unwrap_or(asked);
    let wrapper = asked != ran;
    let who = if wrapper {
        format!("it was run by {} (it is a script or a wrapper), and", printable_os(ran))
    } else {
        "it".to_owned()
    };
    let what = match p.stopped {
        Some(memprof::profile::Stopped::Exec) => "replaced itself with another program (exec)",
        Some(memprof::profile::Stopped::QuickExit) => "ended with _exit",
        None => "replaced itself with another program (exec), or ended with _exit",
    };
    // A program that ended with _exit executed nothing: nothing to follow. Programs named
    // in the note that follows (`notes::unfollowed`) need no word here.
    if p.stopped == Some(memprof::profile::Stopped::QuickExit) || !run.unfollowed.is_empty() {
        return Some((wrapper, format!("{who} {what}")));
    }
    Some((
        wrapper,
        format!(
            "{who} {what}; programs it executes are not profiled unless --follow-forks is given"
        ),
    ))
}

/// Reads the symbols of the objects that program `pid` maps, once it has had 10 ms to map
/// them, until `done` says the program has exited (what is loaded then is kept; the rest is
/// read after the exit only if samples need it). A program that exits within 10 ms needs
/// nothing loaded ahead.
fn warm_symbols(pid: u32, done: &std::sync::mpsc::Receiver<()>) -> Loaders {
    use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
    let mut loaders = Loaders::default();
    if done.recv_timeout(std::time::Duration::from_millis(10)) != Err(RecvTimeoutError::Timeout) {
        return loaders;
    }
    for path in launcher::mapped_objects(pid) {
        if done.try_recv() != Err(TryRecvError::Empty) {
            break;
        }
        loaders.load(&path);
    }
    loaders
}

/// Puts the calling thread in the `SCHED_IDLE` class: it runs only on a core nothing else
/// wants. `record`'s reading threads must not take CPU from the program and its drain
/// thread (in the exact mode the drain thread is busy: the program waits for it when it
/// falls behind); they catch up once the program has exited.
fn idle_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler(0, …)` changes only the calling thread's policy; `param`
    // is a valid sched_param for SCHED_IDLE (priority 0). Failure leaves it as it was.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}

/// Reads one or more profiles ([`load`]), printing their warnings and notes.
pub(crate) fn read_profiles(
    files: &[PathBuf],
    recorded: bool,
    loaders: &mut Loaders,
) -> Result<(Profile, Vec<String>), Error> {
    read_profiles_first(files, recorded, loaders, None).map(|(p, l, _)| (p, l))
}

/// [`read_profiles`], the first one already read when `first` is given.
fn read_profiles_first(
    files: &[PathBuf],
    recorded: bool,
    loaders: &mut Loaders,
    first: Option<Profile>,
) -> Result<(Profile, Vec<String>, Vec<Process>), Error> {
    let loaded = load_with_first(files, LoadOptions { recorded }, loaders, first)?;
    for m in &loaded.messages {
        match m {
            // They name files, modules and programs of the recording.
            Message::Warning(w) => eprintln!("memprof: warning: {}", printable(w)),
            Message::Note(n) => eprintln!("memprof: note: {}", printable(n)),
        }
    }
    Ok((loaded.profile, loaded.labels, loaded.processes))
}

fn report_cmd(args: &ReportArgs) -> Result<(), Error> {
    let skip = args.sites.skip()?;
    let alone = if args.view == View::Peak {
        Some("--view peak reports")
    } else if args.at.is_some() || args.from.is_some() || args.to.is_some() {
        Some("--at, --from and --to report")
    } else if args.short_lived.is_some() {
        Some("--short-lived reports")
    } else {
        None
    };
    let files = report_files(&args.files, alone)?;
    let outputs = Outputs {
        flamegraph: args.flamegraph.as_deref(),
        pprof: args.pprof.as_deref(),
        collapsed: args.collapsed.as_deref(),
        html: args.html.as_deref(),
    };
    // Before anything is read or written: a recording is never replaced by its report.
    outputs.check_not_inputs(&files)?;
    let (mut profile, _, processes) =
        read_profiles_first(&files, false, &mut Loaders::default(), None)?;
    profile.site_skip = skip;
    let window = report_window(args, &profile)?;
    let threshold = args.short_lived.as_deref().map(parse_duration).transpose()?;
    if window.is_some() || threshold.is_some() {
        // A second pass over the recording (one file: `report_files`), with the window
        // and the threshold.
        if let Some(ns) = threshold {
            profile.lifetimes.short_lived_ns = ns;
        }
        profile.restrict(&files[0], window.unwrap_or(Window::ALL))?;
    }
    if let Some(out) = &args.html {
        write_html_of(&profile, &processes, out, true)?;
    }
    // An output written to the standard output (`--collapsed -`) keeps it to itself: the
    // tables go to the standard error then.
    let to_stdout = [&args.flamegraph, &args.pprof, &args.collapsed, &args.html]
        .iter()
        .any(|p| p.as_deref().and_then(memprof::files::stream_of) == Some(1));
    let say = |text: &str| {
        if to_stdout {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    };
    if processes.len() > 1 {
        say(&format!("{}\n", report::tree::process_table(&processes, &Default::default())));
    }
    let top = TopOptions {
        limit: args.top,
        group_by: args.group_by,
        backtrace: args.sites.backtrace,
        ..Default::default()
    };
    say(&report::top_table(&profile, &top));
    if let Some(note) = report::unwinding::shallow_stacks_note(&profile) {
        eprintln!("memprof: note: {note}");
    }
    write_outputs(&profile, args.view, args.group_by, outputs, true)
}

/// The files `memprof report` reads for `paths`: one path may name a process tree (its
/// directory, or its root file with the directory beside it), which stands for all its
/// files. `alone`: the option that reports one process at a time, if one was given; then
/// a root file stands for itself (with a note), and a directory or several files are
/// refused with an error that names a file to pass.
fn report_files(paths: &[PathBuf], alone: Option<&str>) -> Result<Vec<PathBuf>, Error> {
    let one_of = |files: &[PathBuf], first: &str| -> String {
        let mut shown: Vec<String> =
            files.iter().take(2).map(|f| f.display().to_string()).collect();
        shown.dedup();
        format!(
            "{}{first}{}",
            shown[0],
            shown.get(1).map(|s| format!(" or {s}")).unwrap_or_default()
        )
    };
    if let [path] = paths {
        let named = memprof::profile::tree::Named::of(path);
        if named.children.is_empty() {
            return Ok(vec![named.root]);
        }
        let Some(what) = alone else {
            return Ok(named.files());
        };
        if named.by_dir {
            return Err(Error::Config(format!(
                "{what} one process at a time (each has its own clock and peak): \
                 pass one file of the tree, e.g. {}",
                one_of(&named.files(), " (the program's)")
            )));
        }
        eprintln!(
            "memprof: note: {what} one process at a time: {} alone is reported, not \
             the {} other processes of its tree (pass one of their files for another, e.g. \
             {})",
            printable_os(&named.root),
            named.children.len(),
            printable_os(&named.children[0])
        );
        return Ok(vec![named.root]);
    }
    if let Some(what) = alone.filter(|_| paths.len() > 1) {
        return Err(Error::Config(format!(
            "{what} one process at a time (each has its own clock and peak): pass one \
             of the files, e.g. {}",
            one_of(paths, "")
        )));
    }
    Ok(paths.to_vec())
}

/// The range of the recording that `--at`, `--from` and `--to` ask for, if any.
fn report_window(args: &ReportArgs, profile: &Profile) -> Result<Option<Window>, Error> {
    let end = profile.end_ns;
    let moment = |s: &Option<String>| s.as_deref().map(|s| parse_moment(s, end)).transpose();
    if let Some(t) = moment(&args.at)? {
        return Ok(Some(Window::at(t)));
    }
    let (from, to) = (moment(&args.from)?, moment(&args.to)?);
    if from.is_none() && to.is_none() {
        return Ok(None);
    }
    let w = Window { from_ns: from.unwrap_or(0), to_ns: to.unwrap_or(u64::MAX) };
    if w.from_ns >= w.to_ns {
        return Err(Error::Config(format!(
            "--from {} is not before --to {}",
            args.from.as_deref().unwrap_or("0"),
            args.to.as_deref().unwrap_or("100%")
        )));
    }
    Ok(Some(w))
}

/// Writes the requested exports of `profile`, saying where each went; `replace`: an
/// existing regular file of this user's is replaced (`memprof::files`, §2).
pub fn write_outputs(
    profile: &Profile,
    view: View,
    group_by: GroupBy,
    outputs: Outputs<'_>,
    replace: bool,
) -> Result<(), Error> {
    if let Some(path) = outputs.flamegraph {
        write_file_with(path, replace, |w| {
            report::flamegraph(profile, &FlameOptions { view, group_by, ..Default::default() }, w)
        })?;
        eprintln!("memprof: wrote {} flamegraph {}", view.name(), path.display());
    }
    if let Some(path) = outputs.pprof {
        // The default sample type follows the view; the in-use sample types hold the live
        // set at the peak for the peak view.
        let options = PprofOptions { default_view: view, ..Default::default() };
        write_file_with(path, replace, |w| report::write_pprof(profile, &options, w))?;
        eprintln!("memprof: wrote pprof profile {}", path.display());
    }
    if let Some(path) = outputs.collapsed {
        write_file_with(path, replace, |w| {
            report::write_collapsed_grouped(w, profile, view, group_by)
        })?;
        eprintln!("memprof: wrote {} folded stacks {}", view.name(), path.display());
    }
    Ok(())
}

/// The export files a report writes, when asked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outputs<'a> {
    /// The flamegraph SVG.
    pub flamegraph: Option<&'a Path>,
    /// The gzip-compressed pprof profile.
    pub pprof: Option<&'a Path>,
    /// The folded stacks.
    pub collapsed: Option<&'a Path>,
    /// The HTML report.
    pub html: Option<&'a Path>,
}

impl Outputs<'_> {
    /// Refuses an output that is one of the `inputs` (device and inode: through a symlink
    /// or a hard link too), before anything is written.
    fn check_not_inputs(&self, inputs: &[PathBuf]) -> Result<(), Error> {
        let named = [self.flamegraph, self.pprof, self.collapsed, self.html];
        for out in named.into_iter().flatten() {
            if let Some(input) = inputs.iter().find(|i| memprof::files::same_file(out, i)) {
                return Err(Error::Config(format!(
                    "refusing to write {} over the profile {} it reports (choose another output name)",
                    out.display(),
                    input.display()
                )));
            }
        }
        Ok(())
    }
}

/// Writes the HTML report of `profile`, read from the files of `processes` (one: its
/// page; several: the tree's page), to `out`.
pub fn write_html_of(
    profile: &Profile,
    processes: &[Process],
    out: &Path,
    replace: bool,
) -> Result<(), Error> {
    match processes {
        [one] => html_timed(out, replace, |w| report::html::write_html(profile, &one.file, w)),
        _ => html_timed(out, replace, |w| report::html::write_tree_html(profile, processes, w)),
    }
}

/// Writes the HTML report of `profile`, read from `file` alone, to `out`.
pub fn write_html(profile: &Profile, file: &Path, out: &Path) -> Result<(), Error> {
    html_timed(out, true, |w| report::html::write_html(profile, file, w))
}

/// Writes an HTML report to `out` with `f`, saying how large it is and how long it took.
fn html_timed(
    out: &Path,
    replace: bool,
    f: impl FnOnce(&mut BufWriter<Output>) -> Result<(), Error>,
) -> Result<(), Error> {
    let started = std::time::Instant::now();
    write_file_with(out, replace, f)?;
    eprintln!(
        "memprof: wrote HTML report {} ({} KiB in {:.2} s)",
        out.display(),
        std::fs::metadata(out).map_or(0, |m| m.len()) / 1024,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Creates `path` (replacing an existing regular file of this user's: `memprof::files`)
/// and fills it with `f`; errors name the file.
pub fn write_file(
    path: &Path,
    f: impl FnOnce(&mut BufWriter<Output>) -> Result<(), Error>,
) -> Result<(), Error> {
    write_file_with(path, true, f)
}

/// [`write_file`], replacing an existing file only when `replace`; the new content takes
/// the name only once complete.
pub fn write_file_with(
    path: &Path,
    replace: bool,
    f: impl FnOnce(&mut BufWriter<Output>) -> Result<(), Error>,
) -> Result<(), Error> {
    let out = memprof::files::create_output(path, replace)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
    let mut w = BufWriter::new(out);
    f(&mut w)?;
    let cannot = |e| Error::io(format!("cannot write {}", path.display()), e);
    w.into_inner().map_err(|e| cannot(e.into_error()))?.commit().map_err(cannot)
}

#[derive(Args, Debug)]
#[command(after_help = "Every number is in estimated bytes, so the two profiles may have been \
recorded at different intervals (or one in the exact mode). A change is flagged (*) when it \
is not sampling noise: two-sided tests, Holm-corrected over every (site, quantity) \
difference, family-wise false-positive rate 5 %. A 30 % change is detected reliably from \
about 1 000 expected samples of the site per profile; at 100 samples it is within the noise.")]
struct DiffArgs {
    /// The earlier profile (.mprof).
    #[arg(value_name = "BASE")]
    base: PathBuf,
    /// The later profile (.mprof), compared with BASE.
    #[arg(value_name = "NEW")]
    new: PathBuf,
    /// Show every site, not only those with a significant change.
    #[arg(long)]
    all: bool,
    /// What the flamegraph, folded and pprof outputs compare: alloc (every sampled
    /// allocation), live (blocks still allocated at the end) or peak (blocks allocated when
    /// each profile's live heap peaked).
    #[arg(long, default_value = "alloc", value_parser = ["alloc", "live", "peak"])]
    view: String,
    /// Write a differential flamegraph SVG (inferno: widths are NEW's bytes, red where NEW
    /// has more, blue where it has less).
    #[arg(long, value_name = "OUT.svg")]
    flamegraph: Option<PathBuf>,
    /// Write the differential folded stacks (`stack BASE NEW`, estimated bytes, sorted),
    /// which inferno-flamegraph and Brendan Gregg's difffolded.pl/flamegraph.pl read.
    #[arg(long, value_name = "OUT")]
    collapsed: Option<PathBuf>,
    /// Write a gzip-compressed pprof profile of NEW − BASE (as `go tool pprof -diff_base`
    /// builds one: BASE's samples negated; Go heap-profile sample types).
    #[arg(long, value_name = "OUT.pb.gz")]
    pprof: Option<PathBuf>,
    /// Frames whose function name matches REGEX are allocation plumbing (as for `report`).
    #[arg(long = "site-skip", value_name = "REGEX")]
    site_skip: Vec<String>,
}

/// `memprof diff BASE NEW`: the per-site table on stdout, the differential outputs asked for.
fn diff_cmd(args: &DiffArgs) -> Result<(), Error> {
    let view: View = args.view.parse()?;
    let skip = site_skip(&args.site_skip)?;
    let outputs = Outputs {
        flamegraph: args.flamegraph.as_deref(),
        pprof: args.pprof.as_deref(),
        collapsed: args.collapsed.as_deref(),
        html: None,
    };
    outputs.check_not_inputs(&[args.base.clone(), args.new.clone()])?;
    let mut loaders = Loaders::default();
    let mut read = |file: &PathBuf| -> Result<Profile, Error> {
        let mut p = read_profiles(std::slice::from_ref(file), false, &mut loaders)?.0;
        p.site_skip = skip.clone();
        Ok(p)
    };
    let (base, new) = (read(&args.base)?, read(&args.new)?);
    let options = report::DiffOptions {
        all: args.all,
        base_name: Some(args.base.display().to_string()),
        new_name: Some(args.new.display().to_string()),
    };
    print!("{}", report::diff_table(&base, &new, &options));
    if let Some(path) = &args.flamegraph {
        write_file(path, |w| report::diff::diff_flamegraph(&base, &new, view, w))?;
        eprintln!("memprof: wrote {} differential flamegraph {}", view.name(), path.display());
    }
    if let Some(path) = &args.collapsed {
        write_file(path, |w| report::diff::write_diff_collapsed(w, &base, &new, view))?;
        eprintln!("memprof: wrote {} differential folded stacks {}", view.name(), path.display());
    }
    if let Some(path) = &args.pprof {
        write_file(path, |w| report::diff::write_diff_pprof(&base, &new, view, w))?;
        eprintln!("memprof: wrote pprof profile of NEW − BASE {}", path.display());
    }
    Ok(())
}
