//! `memprof record`: find the preload library, check the program, set the environment,
//! run the program and wait for it.
//!
//! # 1. Before the program runs
//! Everything that can be known to fail is checked first, each with a one-line error: the
//! preload library is found ([`find_preload`]: `MEMPROF_PRELOAD`, next to this executable, or
//! the copy inside the executable written to a cache file); the program is found (a path, or a
//! name looked up in `PATH`) and is an executable regular file; it is not setuid or setgid (the
//! loader ignores `LD_PRELOAD` for those); an ELF program has a `PT_INTERP` header (a
//! statically linked program never loads the preload library): `program.rs`. The output
//! file is created, never through a symlink nor over another run's profile (§3,
//! `output.rs`).
//!
//! # 2. The contract with the preload library
//! Settings travel in the `MEMPROF_*` variables ([`EnvSettings`]); the
//! library is put first in `LD_PRELOAD`. The program's exit status is returned (128 + the
//! signal number when a signal killed it); SIGINT and SIGQUIT are ignored here while the
//! program runs, so that a Ctrl-C reaches the program and the report still follows.
//! `PYTHONMALLOC=malloc` is set unless the environment sets it (see
//! [`RecordOptions::keep_pymalloc`]). Without `--follow-forks`, the programs the processes
//! started unprofiled are read back from the ring directory ([`Recorded::unfollowed`]).
#![deny(unsafe_op_in_unsafe_fn)]

mod output;
mod program;
mod ring_dir;
mod through;

pub(crate) use output::{create_error, create_output};
pub use program::{check_profilable, resolve_program};
pub(crate) use ring_dir::RingDir;
pub(crate) use through::look_through;

use super::bundled::{Bundled, Installed};
use super::collect::{Collector, Plan, Published, RootEnded};
use crate::profile::{Ended, EndedHow};
// `config` is the MEMPROF_* contract (record/env.rs), which the launcher writes.
use crate::error::{Error, LaunchError};
use crate::record::env as config;
pub use crate::record::env::EnvSettings;
use std::ffi::OsString;
use std::fs;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;

/// File name of the preload library.
pub const PRELOAD_NAME: &str = "libmemprof_preload.so";

/// CPython's choice of allocator (`malloc`: every object from the C library's `malloc`).
const PYTHONMALLOC: &str = "PYTHONMALLOC";

/// What `memprof record` runs.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Settings passed to the preload library (config, output template, follow forks).
    pub settings: EnvSettings,
    /// Replace an existing output file.
    pub force: bool,
    /// The program (a path, or a name looked up in `PATH`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables set in its environment besides memprof's own (what the launchers `record`
    /// looked through would have set: pyenv's `PATH` and `PYENV_VERSION`).
    pub env: Vec<(OsString, OsString)>,
    /// Leave CPython's own small-object allocator (pymalloc) in place: without it, the
    /// program runs with `PYTHONMALLOC=malloc` (unless its environment sets `PYTHONMALLOC`),
    /// so that every Python object is a `malloc` call the profile sees, not a slice of an
    /// arena allocated long before.
    pub keep_pymalloc: bool,
}

/// The outcome of a recorded run.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The program's exit status (128 + signal when a signal killed it).
    pub exit_code: i32,
    /// The signal that killed the program, if one did.
    pub signal: Option<i32>,
    /// The profile of the program's process.
    pub output: PathBuf,
    /// Profiles of followed children (in the tree's directory, `<output>.d/`),
    /// sorted by pid.
    pub children: Vec<PathBuf>,
    /// `PYTHONMALLOC=malloc` was put in the program's environment (see
    /// [`RecordOptions::keep_pymalloc`]).
    pub pymalloc_bypassed: bool,
    /// Without `--follow-forks`: the programs that the profiled process and its forked
    /// children executed or spawned, unprofiled, as they were named to `exec` or
    /// `posix_spawn`, in order (names are the program's strings: escape them to print).
    pub unfollowed: Vec<String>,
    /// The profile of every file the collector wrote, as it folded them while writing.
    pub(crate) folded: Vec<(PathBuf, crate::profile::Profile)>,
    /// The kernel's OOM killer killed the program (it died of SIGKILL, and an OOM-kill
    /// count rose during the run).
    pub(crate) oom: Option<super::oom::OomKill>,
    /// The profiles whose writing failed (a full disk), said by the collector: each keeps
    /// what was written before, and the fold in `folded` is whole.
    pub(crate) unwritten: Vec<PathBuf>,
}

/// Finds the preload library: `$MEMPROF_PRELOAD`, else `libmemprof_preload.so` next to this
/// executable (an installed layout, or a cargo target directory, where `build.rs` keeps it
/// up to date), else the copy `bundled` inside the executable. Whichever it is, the loader
/// is given a file in a directory of this user's alone ([`super::bundled`] §1): a library
/// found outside is checked by its descriptor and copied from it, so that nobody can swap
/// it between the check and the load. Keep the result alive while the program runs: a
/// library that no cache directory could take lives in a temporary directory removed on
/// drop. The error lists the places tried.
pub fn find_preload(bundled: Option<&Bundled>) -> Result<Installed, Error> {
    if let Some(p) = std::env::var_os(config::ENV_PRELOAD).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(LaunchError::PreloadNotAFile(p.display().to_string()).into());
        }
        return super::bundled::install_found(&p, bundled);
    }
    let exe =
        std::env::current_exe().map_err(|e| Error::io("cannot find the memprof executable", e))?;
    let beside = exe.parent().unwrap_or(Path::new(".")).join(PRELOAD_NAME);
    if beside.is_file() {
        // Refused, not passed over for the bundled copy: a library that someone else could
        // have put there is worth an error (`sys/trusted.rs`, §1).
        return super::bundled::install_found(&beside, bundled);
    }
    match bundled {
        Some(b) => b.install(),
        None => Err(LaunchError::PreloadNotFound(beside.display().to_string()).into()),
    }
}

/// Runs the program under the preload library and waits for it. `preload` is the library
/// ([`find_preload`]).
pub fn record(opts: &RecordOptions, preload: &Path) -> Result<Recorded, Error> {
    record_with(opts, preload, |_| {})
}

/// [`record`], calling `started` with the program's pid once it runs (before waiting for
/// it), so that work can overlap the run.
pub fn record_with(
    opts: &RecordOptions,
    preload: &Path,
    started: impl FnOnce(u32),
) -> Result<Recorded, Error> {
    record_publishing(opts, preload, None, None, started)
}

/// [`record_with`], the root process's profile published in `publish` as the collector
/// folds it (`--serve`), and `sampled_modules` told the path of each module a sampled stack
/// passes through, once each, as the collector folds them.
pub(crate) fn record_publishing(
    opts: &RecordOptions,
    preload: &Path,
    publish: Option<Arc<Published>>,
    sampled_modules: Option<std::sync::mpsc::Sender<String>>,
    started: impl FnOnce(u32),
) -> Result<Recorded, Error> {
    let shown = Path::new(&opts.program).display().to_string();
    let program = resolve_program(&opts.program)?;
    check_profilable(&program, &shown)?;
    let template = opts.settings.output.clone();
    // The kernel's OOM-kill counts before the program runs (`oom`).
    let oom = super::oom::OomWatch::start();
    let deferred = template.contains("%p");
    if !deferred {
        output::create_now(opts, &template)?;
    }
    if opts.settings.follow_forks {
        become_subreaper();
    }
    // The program's events leave it through shared rings that this process collects
    // (see `record/ring.rs`); without a directory for them, the program writes its own
    // file as under a hand-set `LD_PRELOAD`.
    let rings = RingDir::create();
    let (cmd, pymalloc_bypassed) =
        program_command(opts, &program, preload, &template, rings.as_ref());
    let mut child = spawn(cmd, opts, &template, deferred, &shown)?;
    let pid = child.id();
    let output = PathBuf::from(config::expand_output(&template, pid));
    let root_ended = Arc::new(RootEnded::default());
    let beside = Beside { publish, root_ended: root_ended.clone(), sampled_modules };
    let collector = rings.as_ref().and_then(|d| start_collector(d, pid, &output, beside));
    started(pid);

    let old = ignore_interrupts();
    let status = child.wait();
    // How it ended, for its profile (the collector finishes its file once it knows).
    let oom = match &status {
        Ok(s) if s.signal() == Some(libc::SIGKILL) => oom.killed(),
        _ => None,
    };
    root_ended.set(status.as_ref().ok().and_then(|s| ended(s, oom.as_ref())));
    if opts.settings.follow_forks {
        wait_for_descendants(&shown);
    }
    let finished = collector.map(Collector::finish).unwrap_or_default();
    for msg in &finished.messages {
        eprintln!("memprof: {msg}");
    }
    let unfollowed =
        rings.as_ref().map(|d| crate::record::unfollowed::read(&d.0, 1 << 20)).unwrap_or_default();
    drop(rings);
    restore_interrupts(old);
    let status = status.map_err(|e| Error::io(format!("cannot wait for {shown}"), e))?;
    let (exit_code, signal) = exit_code(&status);
    let children = if opts.settings.follow_forks { child_profiles(&output) } else { Vec::new() };
    Ok(Recorded {
        exit_code,
        signal,
        output,
        children,
        pymalloc_bypassed,
        unfollowed,
        folded: finished.profiles,
        oom,
        unwritten: finished.unwritten,
    })
}

/// With `--follow-forks`: descendants that outlive the program are re-parented to this
/// process rather than to init, so that `record` can wait for them and read their profiles
/// whole.
fn become_subreaper() {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) only sets a flag of this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// The program's command (§2): its arguments, the `MEMPROF_*` settings, the collector, the
/// rings' directory, `PYTHONMALLOC`, the output as an absolute path, the library first in
/// `LD_PRELOAD`. Also whether `PYTHONMALLOC=malloc` was put in.
fn program_command(
    opts: &RecordOptions,
    program: &Path,
    preload: &Path,
    template: &str,
    rings: Option<&RingDir>,
) -> (Command, bool) {
    let mut cmd = Command::new(program);
    cmd.arg0(&opts.program).args(&opts.args);
    cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
    for (k, v) in opts.settings.to_env() {
        cmd.env(k, v);
    }
    cmd.env_remove(config::ENV_STEM);
    // The collector is this process: the program's threads wait for room while it exists
    // (`record/ring.rs` §4).
    let (collector, since) = crate::record::ring::this_process();
    cmd.env(config::ENV_COLLECTOR, format!("{collector}:{since}"));
    // Harmless to any other program, and it must be there before an interpreter that the
    // program starts (a script's, a wrapper's) reads it.
    let pymalloc_bypassed = !opts.keep_pymalloc && std::env::var_os(PYTHONMALLOC).is_none();
    if pymalloc_bypassed {
        cmd.env(PYTHONMALLOC, "malloc");
    }
    // The program may change directory (daemons do): its library is told where the output
    // is as an absolute path, so followed children's files land beside the parent's
    // whatever their working directory, where `record` looks for them.
    if Path::new(template).is_relative() {
        if let Ok(cwd) = std::env::current_dir() {
            cmd.env(config::ENV_OUTPUT, cwd.join(template));
        }
    }
    if let Some(d) = rings {
        cmd.env(config::ENV_RINGS, &d.0);
    }
    let mut preload_list = preload.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload_list.push(":");
        preload_list.push(old);
    }
    cmd.env("LD_PRELOAD", preload_list);
    (cmd, pymalloc_bypassed)
}

/// Starts the program. A name with `%p` is created in the child (`output.rs`), which tells a
/// failure through a pipe before its `exec` is refused: that failure is the error then, and
/// a program that could not run leaves no output made for it here.
fn spawn(
    mut cmd: Command,
    opts: &RecordOptions,
    template: &str,
    deferred: bool,
    shown: &str,
) -> Result<Child, Error> {
    // A pipe that tells a failure to create the output in the child from a failed exec.
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::io("cannot create a pipe", std::io::Error::last_os_error()));
    }
    let (rd, wr) = (fds[0], fds[1]);
    if deferred {
        let make = output::create_in_child(template, opts.force, opts.settings.follow_forks, wr);
        // SAFETY: the closure only calls async-signal-safe functions (getpid, lstat,
        // unlink, open, close, rename, write) and does not allocate.
        unsafe { cmd.pre_exec(make) };
    }
    let spawned = cmd.spawn();
    // SAFETY: closes this process's copy of the write end, which nothing else uses.
    unsafe { libc::close(wr) };
    let child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let mut b = [0u8; 4];
            // SAFETY: reads at most 4 bytes into a live buffer; every write end is closed.
            let n = unsafe { libc::read(rd, b.as_mut_ptr().cast(), 4) };
            // SAFETY: closes the read end once.
            unsafe { libc::close(rd) };
            if n == 4 {
                return Err(output::child_error(template, i32::from_ne_bytes(b), opts.force));
            }
            if !deferred {
                let _ = fs::remove_file(template);
                if opts.settings.follow_forks {
                    // Empty: the program never ran.
                    let _ = fs::remove_dir(config::tree_dir(template));
                }
            }
            return Err(Error::io(format!("cannot run {shown}"), e));
        }
    };
    // SAFETY: closes the read end once.
    unsafe { libc::close(rd) };
    Ok(child)
}

/// What the collector is told beside the run's rings (see [`Plan`]).
struct Beside {
    publish: Option<Arc<Published>>,
    root_ended: Arc<RootEnded>,
    sampled_modules: Option<std::sync::mpsc::Sender<String>>,
}

/// Starts the collector of the run's rings, the program's profile at `output`; `None`
/// (said on stderr) when it cannot start.
fn start_collector(rings: &RingDir, pid: u32, output: &Path, beside: Beside) -> Option<Collector> {
    let plan = Plan {
        dir: rings.0.clone(),
        root_pid: pid,
        root_output: output.to_path_buf(),
        attached: false,
        publish: beside.publish,
        root_ended: Some(beside.root_ended),
        sampled_modules: beside.sampled_modules,
    };
    match Collector::start(plan) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("memprof: cannot start collecting the profile: {e}");
            None
        }
    }
}

/// The dispositions of SIGINT and SIGQUIT, which are ignored here while the program runs
/// (§2), until [`restore_interrupts`].
type Interrupts = [libc::sighandler_t; 2];

/// Ignores SIGINT and SIGQUIT (a Ctrl-C reaches the program, and the report still follows);
/// returns the dispositions they had.
fn ignore_interrupts() -> Interrupts {
    // SAFETY: SIG_IGN is a valid disposition for these signals.
    unsafe {
        [libc::signal(libc::SIGINT, libc::SIG_IGN), libc::signal(libc::SIGQUIT, libc::SIG_IGN)]
    }
}

/// Gives SIGINT and SIGQUIT back the dispositions [`ignore_interrupts`] read.
fn restore_interrupts(old: Interrupts) {
    // SAFETY: restores the dispositions read by `ignore_interrupts`.
    unsafe {
        libc::signal(libc::SIGINT, old[0]);
        libc::signal(libc::SIGQUIT, old[1]);
    }
}

/// How the program ended, from its wait status, the OOM killer named when it killed it.
fn ended(status: &ExitStatus, oom: Option<&super::oom::OomKill>) -> Option<Ended> {
    let mut e = Ended::from_wait_status(status.into_raw())?;
    if let Some(kill) = oom {
        e.how = EndedHow::OomKill;
        e.limit_bytes = kill.limit.unwrap_or(0);
    }
    Some(e)
}

/// The program's exit code (128 + the signal number when a signal killed it) and that
/// signal.
fn exit_code(status: &ExitStatus) -> (i32, Option<i32>) {
    match (status.code(), status.signal()) {
        (Some(c), _) => (c, None),
        (None, Some(s)) => (128 + s, Some(s)),
        (None, None) => (1, None),
    }
}

/// After the program's exit, with `--follow-forks`: waits for the processes it left running
/// (re-parented to this one, see [`record_with`]), naming them once, so that their
/// profiles are read whole and none is left out of the report.
fn wait_for_descendants(shown: &str) {
    let me = std::process::id();
    let left: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let ppid = crate::sys::procfs::stat_field(&format!("/proc/{pid}/stat"), 1);
            ppid.and_then(|p| p.parse::<u32>().ok()) == Some(me)
        })
        .collect();
    if !left.is_empty() {
        let pids: Vec<String> = left.iter().map(u32::to_string).collect();
        eprintln!(
            "memprof: {shown} exited; waiting for the {} process(es) it left running (pid {}), \
             whose profiles are part of the run",
            left.len(),
            pids.join(", ")
        );
    }
    loop {
        let mut status = 0;
        // SAFETY: waits for any child of this process; `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
}

/// The files of followed children of the run whose root profile is `root`:
/// `<pid>[.<n>].mprof` in its tree's directory, `<root>.d/`, by pid and image.
pub fn child_profiles(root: &Path) -> Vec<PathBuf> {
    crate::profile::tree::children(root)
}
