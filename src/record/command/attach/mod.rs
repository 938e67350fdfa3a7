//! `memprof attach PID`: profiles a process that is already running, through the same
//! preload library, shared ring and collector as `memprof record`, and leaves it as it was.
//!
//! # 1. Steps
//! 1. The process is checked (`target::check`): it exists, is this user's, is not traced
//!    already, is dynamically linked against glibc and sees the same files (mount
//!    namespace). Each refusal says what to do.
//! 2. The output (`memprof.<PID>.mprof`, then `.1`, `.2` … when taken; or `-o`) and the
//!    ring directory are created and the collector started, as `record` does.
//! 3. The library is loaded and the process's calls rerouted (`inject`): its GOT slots of
//!    the malloc family, and the entry points of its allocator (glibc's, most often), which
//!    a call through a pointer the program kept reaches without a slot. ptrace, never
//!    gdb. The process is traced for the few milliseconds this takes, then let go. Then
//!    `attached to PID` is printed. Entry points that could not be patched leave a note
//!    (`unreached_note`) that says which calls that leaves out.
//! 4. It samples until SIGINT, SIGTERM or SIGHUP reaches `memprof attach`, `--duration`
//!    elapses, or the process exits or executes another program.
//! 5. Detach: the session stops, the slots and entry points get back what they held
//!    (`inject::detach`),
//!    the collector drains what is left and finishes the file, marked attached (its live
//!    heap is what was allocated since the attach and is still held; blocks allocated
//!    before are unknown and their frees are not counted). The top table, `<file>.svg` and
//!    `<file>.html` follow, as after `record`, and `attach` exits 0.
//!
//! # 2. What stays in the process
//! The library stays loaded (a rerouted call may still be inside it), and so does the
//! ring's mapping (a thread may still be inside a push), though not its memory, which the
//! collector gives back once it has read it (`Ring::release_pages`). Calls go back to their
//! plain cost once the slots are put back. A later attach reuses the library and starts a
//! fresh session on a new ring.
//!
//! # 3. If `memprof attach` is killed (SIGKILL)
//! The kernel ends the tracing of every thread, so nothing is left stopped or traced. What
//! else is left depends on the moment: during a call on the borrowed thread (loading the
//! library, starting or stopping the session), the call finishes and the thread returns
//! through `rt_sigreturn` to where it was (`tracee` §5), with the library loaded and,
//! after the start, a session whose calls are not rerouted yet; once the writes are made
//! (attached), the calls stay rerouted and the session samples into a ring nobody drains
//! (the collector's process is gone, so nothing waits for it, `engine::push` §1; what
//! cannot be queued is dropped) until a later `memprof attach` takes over (§5) and
//! detaches; before the first call, nothing. No call waits on a lock memprof holds, even
//! on a thread the attacher stopped inside `fork` (`inject`'s busy answers, the agent's
//! `attached`), and none waits on a thread that waits for the tracer (`tracee` §4), so
//! nothing is left blocked whatever is killed when. A call that never returns all the same
//! (a lock of the C library's) is abandoned with the thread put back where it was; what it
//! held of the library's stays held, and a later call answers busy rather than wait on it.
//! At detach, the slots and entry points are then put back from outside (`inject::undo`),
//! leaving only a session nothing reaches.
//!
//! # 4. Another PID namespace
//! A process in another PID namespace (`unshare -p -f`, a container that shares this mount
//! namespace) is attached by its pid here, as `/proc` names it: its session's ring says
//! which process made it as the collector sees it (`ring` §5, `collect` §7), so the profile
//! is this pid's, and records the pid inside the namespace too. One in another mount
//! namespace is refused (step 1). Should the collector tie no ring to the process (it
//! ended before its session reached the collector), `attach` says so and fails: it never
//! leaves an empty file and exits 0.
//!
//! # 5. One profiler a process
//! While attached, the library names the attacher (`attach_abi::Owner`: its pid and start
//! time, and when it attached). A second `memprof attach` finds it in the start call's
//! answer (`STATUS_OWNED`, nothing done) and is refused, `already attached by memprof (pid
//! N) since …`, while that attacher runs; the first profile loses nothing. An owner that
//! is gone (killed without detaching) is taken over explicitly: `attach` prints `taking over
//! process PID from memprof attach (pid N) …`, and calls again naming it, so two attachers
//! racing for a dead one's session cannot both win. A process preloaded from its start
//! (`memprof record`, `LD_PRELOAD`) is refused too.

mod inject;
pub(crate) mod request;
mod target;
mod tracee;

use super::bundled::Bundled;
use super::collect::{Collector, Plan, Published};
use super::launcher::{self, RingDir};
use crate::error::Error;
use crate::profile::load::LoadOptions;
use crate::profile::replay::parse_duration;
use crate::record::attach_abi::{encode_settings, TAKEOVER};
use crate::report::command::read_profiles_folded;
use crate::report::text::{printable, printable_os};
use crate::report::write::summary_and_companions;
use crate::report::TopOptions;
use request::AttachRequest;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The signal that asked `memprof attach` to detach (0: none yet).
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(sig: libc::c_int) {
    STOP.store(sig, Ordering::Relaxed);
}

/// `--duration`: with a unit (`500ms`, `2s`, `1m`, `1h`) or seconds alone.
fn duration_of(text: &str) -> Result<Duration, Error> {
    let t = text.trim();
    let bad =
        || Error::Config(format!("--duration: not a duration: {text:?} (e.g. 30s, 500ms, 2m)"));
    let scaled = |suffix: &str, unit: f64| {
        t.strip_suffix(suffix).and_then(|n| n.trim().parse::<f64>().ok()).map(|n| n * unit)
    };
    let secs = if let Ok(s) = t.parse::<f64>() {
        s
    } else if let Some(s) = scaled("m", 60.0).or_else(|| scaled("min", 60.0)) {
        s
    } else if let Some(s) = scaled("h", 3600.0) {
        s
    } else {
        parse_duration(t).map_err(|_| bad())? as f64 / 1e9
    };
    if !(secs.is_finite() && secs > 0.0 && secs < 1e9) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The output: `-o`, else `memprof.<pid>.mprof` or the first of `memprof.<pid>.<n>.mprof`
/// not taken. Created (empty) here, as `record` creates its own.
fn create_output(args: &AttachRequest) -> Result<PathBuf, Error> {
    let pid = args.pid;
    let candidates: Vec<String> = match &args.output {
        Some(o) => vec![crate::record::env::expand_output(o, pid)],
        None => std::iter::once(format!("memprof.{pid}.mprof"))
            .chain((1..1000).map(|n| format!("memprof.{pid}.{n}.mprof")))
            .collect(),
    };
    let mut last = None;
    for path in &candidates {
        let c = std::ffi::CString::new(path.as_bytes())
            .map_err(|_| Error::Config("the output path contains a NUL byte".into()))?;
        let errno = launcher::create_output(c.as_bytes_with_nul(), args.force);
        if errno == 0 {
            return Ok(PathBuf::from(path));
        }
        if args.output.is_some() || errno != libc::EEXIST {
            return Err(launcher::create_error(path, errno, args.force));
        }
        last = Some((path.clone(), errno));
    }
    let (path, errno) = last.unwrap_or_default();
    Err(launcher::create_error(&path, errno, args.force))
}

/// Why the session ended (step 4).
enum End {
    Asked(i32),
    Elapsed,
    Exited,
    Executed,
}

/// `memprof attach`: see the module documentation. Returns 0 once detached, or an error.
pub fn run(args: &AttachRequest, bundled: &Bundled) -> Result<i32, Error> {
    let settings = args.sampling.settings()?;
    settings.config.validate()?;
    let skip = args.sites.skip()?;
    let limit = args.duration.as_deref().map(duration_of).transpose()?;
    let pid = args.pid;
    target::check(pid)?;
    let name = target::name(pid);
    let lib = preload_for(pid, bundled)?;
    // Every step from here on ends with a detach: a signal only asks for it.
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `on_stop` only stores into an atomic (async-signal-safe).
        unsafe { libc::signal(sig, on_stop as *const () as libc::sighandler_t) };
    }
    let output = create_output(args)?;
    let rings = RingDir::create()
        .ok_or_else(|| Error::Other("cannot create a directory for the shared ring".into()))?;
    let collecting = Collecting::start(args, pid, &output, &rings)?;
    let mut vars = settings.to_env();
    vars.push((crate::record::env::ENV_RINGS, rings.0.display().to_string()));
    let (me, started) = crate::record::ring::this_process();
    vars.push((crate::record::env::ENV_COLLECTOR, format!("{me}:{started}")));
    let began = Instant::now();
    let attached = match start(pid, &lib, &mut vars) {
        Ok(a) => a,
        Err(e) => {
            collecting.finish();
            let _ = std::fs::remove_file(&output);
            return Err(e);
        }
    };
    say_attached(pid, &name, settings.config.interval, &attached, began.elapsed());
    let unreached = unreached_note(&attached);
    let end = wait(pid, &lib, limit);
    let detached = detach(pid, &lib, &attached, &end);
    let finished = collecting.finish();
    drop(rings);
    say_end(pid, &name, &end, &detached);
    if !finished.profiles.iter().any(|(path, _)| *path == output) {
        // The collector never tied a ring to the process (§4): no profile, and no empty
        // file left to look like one.
        if std::fs::metadata(&output).is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(&output);
        }
        return Err(Error::Other(format!(
            "no profile came from process {pid}: its session never reached memprof's \
             collector (the process ended first, or its ring named another process)"
        )));
    }
    report(args, &output, finished.profiles, skip, unreached)?;
    Ok(if detached.is_ok() { 0 } else { 1 })
}

/// Step 2: the preload library the process will map, from a cache directory (a temporary
/// one would be removed while the process still maps it); for a process of another user
/// (memprof is root), which could not read this user's private cache, a copy it can read
/// and nobody but root can change (`bundled` §1).
fn preload_for(pid: u32, bundled: &Bundled) -> Result<PathBuf, Error> {
    let preload = launcher::find_preload(Some(bundled))?;
    if preload.is_temporary() {
        return Err(Error::Other(
            "no cache directory could take the preload library, and one in a temporary \
             directory would be removed while the process still maps it; set XDG_CACHE_HOME \
             to a writable directory"
                .into(),
        ));
    }
    let preload = match target::euid(pid) {
        Some(uid) if uid != crate::sys::files::euid() => preload.shared()?,
        _ => preload,
    };
    Ok(preload.path().to_path_buf())
}

/// The collector of the process's ring, and the server that publishes its profile
/// (`--serve`), running until [`Collecting::finish`].
struct Collecting {
    collector: Collector,
    server: Option<crate::serve::Running>,
}

impl Collecting {
    /// Starts both before the process is attached: its first events find them. On an
    /// error, the (empty) output is removed.
    fn start(
        args: &AttachRequest,
        pid: u32,
        output: &Path,
        rings: &RingDir,
    ) -> Result<Collecting, Error> {
        let published = std::sync::Arc::new(Published::default());
        let server = match &args.serve {
            Some(addr) => match super::run::serve_published(addr, published.clone()) {
                Ok(s) => Some(s),
                Err(e) => {
                    let _ = std::fs::remove_file(output);
                    return Err(e);
                }
            },
            None => None,
        };
        let plan = Plan {
            dir: rings.0.clone(),
            root_pid: pid,
            root_output: output.to_path_buf(),
            attached: true,
            publish: server.is_some().then(|| published.clone()),
            // Not our child: its way of ending is what it says, or its exit code as a zombie.
            root_ended: None,
            sampled_modules: None,
        };
        let collector = Collector::start(plan)
            .map_err(|e| Error::io("cannot start collecting the profile", e))?;
        Ok(Collecting { collector, server })
    }

    /// Collects what is left, says the collector's messages and stops the server.
    fn finish(self) -> super::collect::Finished {
        let finished = self.collector.finish();
        for msg in &finished.messages {
            eprintln!("memprof: {msg}");
        }
        if let Some(s) = self.server {
            s.stop();
        }
        finished
    }
}

/// The line that says the attach is done: how long it took, the sampling, what was
/// rerouted, and a warning for entry points left unpatched.
fn say_attached(pid: u32, name: &str, interval: f64, attached: &inject::Attached, took: Duration) {
    let rate = if interval <= 1.0 {
        "every allocation (exact mode)".to_owned()
    } else {
        format!("one sample every {interval} bytes on average")
    };
    let patched = match attached.patched {
        0 => String::new(),
        n => format!(", {n} allocator entry points patched"),
    };
    if attached.unpatched {
        eprintln!(
            "memprof: warning: the allocator's entry points in {pid} were left unpatched (a \
             thread kept running their first instructions); what it allocates through them \
             is not seen"
        );
    }
    let nothing = if attached.objects == 0 && attached.patched == 0 {
        "; no object of it calls the malloc family through the dynamic linker, so nothing \
         may be seen"
    } else {
        ""
    };
    eprintln!(
        "memprof: attached to {pid} ({}) in {} ms: {rate}; {} slots of {} objects \
         rerouted{patched}{nothing}; Ctrl-C or SIGTERM detaches",
        printable(name),
        took.as_millis(),
        attached.written,
        attached.objects
    );
}

/// Step 5: the library's stop is called in the process (not when it exited or executed
/// another program). If it cannot run, its writes are undone from outside, so the process
/// is left as it was but for a session nothing reaches (a later attach takes it over).
fn detach(pid: u32, lib: &Path, attached: &inject::Attached, end: &End) -> Result<usize, Error> {
    match end {
        End::Exited | End::Executed => Ok(0),
        _ => inject::detach(pid, lib).map_err(|e| match inject::undo(pid, &attached.undo) {
            Ok(_) => {
                Error::Other(format!("{e}; the calls memprof rerouted were put back from outside"))
            }
            Err(u) => Error::Other(format!("{e}; putting back its calls failed: {u}")),
        }),
    }
}

/// The line that says why the session ended, and the error of a detach that failed.
fn say_end(pid: u32, name: &str, end: &End, detached: &Result<usize, Error>) {
    let shown = printable(name);
    match end {
        End::Asked(sig) => eprintln!("memprof: detaching from {pid} (signal {sig})"),
        End::Elapsed => eprintln!("memprof: detaching from {pid} (--duration elapsed)"),
        End::Exited => eprintln!("memprof: {shown} (process {pid}) exited while attached"),
        End::Executed => eprintln!(
            "memprof: {shown} (process {pid}) executed another program while attached; the \
             profile ends there"
        ),
    }
    if let Err(e) = detached {
        eprintln!("memprof: error: could not detach cleanly from {pid}: {e}");
    }
}

/// Step 3, with §5's one profiler a process: the session of a live attacher is refused;
/// one of an attacher that ended without detaching is taken over, with a line saying so.
fn start(pid: u32, lib: &Path, vars: &mut Vec<(&str, String)>) -> Result<inject::Attached, Error> {
    let mut taking_over = None;
    loop {
        match inject::attach(pid, lib, &encode_settings(vars))? {
            inject::Started::Attached(a) => return Ok(a),
            inject::Started::Owned(o) if taking_over == Some(o) || target::alive(&o) => {
                return Err(Error::Other(format!(
                    "process {pid} is already attached by memprof (pid {}) since {}: one \
                     profiler a process; detach that one first (kill -INT {}), or wait for \
                     it to end",
                    o.pid,
                    since(o.since),
                    o.pid
                )));
            }
            inject::Started::Owned(o) => {
                eprintln!(
                    "memprof: taking over process {pid} from memprof attach (pid {}), attached \
                     since {} and ended without detaching: its session is stopped and its \
                     rerouting kept",
                    o.pid,
                    since(o.since)
                );
                vars.retain(|(k, _)| *k != TAKEOVER);
                vars.push((TAKEOVER, o.encode()));
                taking_over = Some(o);
            }
        }
    }
}

/// `HH:MM:SS UTC (N s ago)` for `unix` seconds.
fn since(unix: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(unix);
    let day = unix % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC ({} s ago)",
        day / 3600,
        day / 60 % 60,
        day % 60,
        now.saturating_sub(unix)
    )
}

/// Waits for step 4's end.
fn wait(pid: u32, lib: &Path, limit: Option<Duration>) -> End {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(lib).map(|m| m.ino()).unwrap_or(0);
    let start = Instant::now();
    let mut checked = Instant::now();
    loop {
        let sig = STOP.load(Ordering::Relaxed);
        if sig != 0 {
            return End::Asked(sig);
        }
        if limit.is_some_and(|l| start.elapsed() >= l) {
            return End::Elapsed;
        }
        if checked.elapsed() >= Duration::from_millis(100) {
            checked = Instant::now();
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.chars().next().unwrap_or('X')));
            match state {
                None | Some('Z') | Some('X') => return End::Exited,
                _ => {}
            }
            if !target::maps_file(pid, lib, inode) {
                return End::Executed;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The note on what the attach could not reach, when the entry points of the program's
/// allocator were not patched (refused by the library, or left unpatched because a thread
/// kept standing in them): then only calls through the GOT slots reach the hooks, and a
/// call through a pointer to the allocator that the program took before the attach, or
/// the dynamic loader's own allocation (through the pointer it took at start-up), is not
/// seen. Every slot that named the malloc family was rerouted, so that is all that is
/// missed.
fn unreached_note(attached: &inject::Attached) -> Option<String> {
    let why = if attached.unpatched {
        "were left unpatched (a thread kept running their first instructions)".to_owned()
    } else if !attached.refused.is_empty() {
        format!("could not be patched ({})", attached.refused)
    } else {
        return None;
    };
    Some(format!(
        "the allocator's entry points {why}: allocations made through the GOT slots the \
         attach rerouted (calls through the PLT or a GOT pointer) are seen, those that reach \
         the allocator directly are not: calls through pointers to malloc, calloc, realloc \
         or free that the program took before the attach (a table of allocation functions \
         in its data, a copy made at run time), and the dynamic loader's own (dlopen, \
         threads' TLS blocks)"
    ))
}

/// The notes on an attached process that qualify its numbers: its runtime when its heap is
/// not malloc's, CPython's allocator, which an attach cannot switch off, and the allocator
/// its executable defines `malloc` with (`interposable` §4).
fn attach_notes(profile: &crate::profile::Profile) -> Vec<String> {
    use crate::record::command::runtimes::{pymalloc_attached, Runtime};
    let exe = &profile.header.executable;
    let modules = || profile.modules.iter().map(|m| m.path.as_str());
    // Read once: for Go's build notes and for the allocator it defines `malloc` with.
    let read = crate::record::command::interposable::Executable::read(Path::new(exe), false);
    let go = read.as_ref().is_some_and(|e| e.go);
    let mut notes: Vec<String> =
        Runtime::of(exe, modules(), go).map(|r| r.note(exe)).into_iter().collect();
    if crate::record::command::notes::is_cpython(exe, modules()) {
        notes.push(pymalloc_attached());
    }
    notes.extend(read.and_then(|e| e.linked_note()));
    notes
}

/// Step 5's summary: the collector's fold (`folded`), its top table, `.svg` and `.html`.
fn report(
    args: &AttachRequest,
    output: &Path,
    folded: Vec<(PathBuf, crate::profile::Profile)>,
    skip: crate::profile::site::SiteSkip,
    unreached: Option<String>,
) -> Result<(), Error> {
    let dir = crate::record::command::bundled::Bundled::symbol_cache_dir();
    let mut loaders = crate::profile::symbolize::Loaders::cached(dir);
    let files = vec![output.to_path_buf()];
    let options = LoadOptions { recorded: true, timeline: true };
    let (mut profile, labels, processes) =
        match read_profiles_folded(&files, options, &mut loaders, folded) {
            Ok(read) => read,
            Err(e) => {
                eprintln!("memprof: error: the profile cannot be read: {e}");
                return Ok(());
            }
        };
    // Let go before the report is made (as `record` does).
    drop(loaders);
    profile.site_skip = skip;
    let mut notes = attach_notes(&profile);
    notes.extend(unreached);
    for n in &notes {
        if !profile.notes.contains(n) {
            profile.notes.push(n.clone());
        }
    }
    if !notes.is_empty() && (profile.complete || profile.stopped.is_some()) {
        if let Err(e) = crate::profile::format::append_notes(output, &profile.header, &notes) {
            eprintln!("memprof: warning: the notes were not kept in the profile: {e}");
        }
    }
    if profile.counts.samples == 0 {
        eprintln!(
            "memprof: note: no allocations were sampled while attached (mean interval {} \
             bytes; a lower --interval samples more)",
            profile.header.interval
        );
        for n in &notes {
            eprintln!("memprof: note: {n}");
        }
    } else {
        let view = crate::record::command::run::summary_view(&profile, args.view);
        let top = TopOptions {
            limit: args.top,
            backtrace: args.sites.backtrace,
            view,
            ..Default::default()
        };
        let summary =
            |wrappers: &_| crate::report::top::top_table_sharing(&profile, &top, wrappers);
        summary_and_companions(&profile, &processes, output, (view, true), args.force, summary);
    }
    eprintln!(
        "memprof: profile {} ({})",
        printable_os(output.as_os_str()),
        printable(&labels.join(", "))
    );
    Ok(())
}
