//! `memprof record` after its arguments are parsed: the program run under the preload
//! library ([`super::launcher`]) while two threads work beside it (the collector, which
//! writes the profile and folds it as it goes: [`super::collect`]; and symbols read ahead
//! from the modules its sampled stacks pass through), then, once it exits, the collector's fold
//! symbolized, summarised on stderr, its companions written (`.svg`, `.html`) from that same
//! fold, and every diagnosis of a run that went wrong
//! (an empty or removed profile, a wrapper that executed another program, no samples, an
//! allocator the preload library cannot reach: [`super::reach`]).

use super::bundled::Bundled;
use super::collect::Published;
use super::interposable::Executable;
use super::launcher::{self, EnvSettings, RecordOptions};
use super::notes;
use super::request::RecordRequest;
use crate::config;
use crate::error::Error;
use crate::profile::load::{LoadOptions, Process};
use crate::profile::site::Wrapper;
use crate::profile::symbolize::Loaders;
use crate::profile::{Profile, Stopped};
use crate::report::command::read_profiles_folded;
use crate::report::text::{printable, printable_os};
use crate::report::write::summary_and_companions;
use crate::report::TopOptions;
use crate::report::View;
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::sync::OnceLock;

fn record_settings(args: &RecordRequest) -> Result<EnvSettings, Error> {
    let mut settings = args.sampling.settings()?;
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
pub fn run(args: &RecordRequest, bundled: &Bundled) -> Result<i32, Error> {
    let settings = record_settings(args)?;
    // A bad expression is found before anything runs.
    let skip = args.sites.skip()?;
    let (program, rest, mut env) = program_to_record(args)?;
    if args.python_frames != "auto" {
        env.push(("MEMPROF_PYTHON_FRAMES".into(), args.python_frames.clone().into()));
    }
    let program = &program;
    let preload = launcher::find_preload(Some(bundled))?;
    // Bound before the program runs: a taken port is an error, and nothing runs.
    let published = Arc::new(Published::default());
    let server = match &args.serve {
        Some(addr) => Some(serve_published(addr, published.clone())?),
        None => None,
    };
    let opts = RecordOptions {
        settings,
        force: args.force,
        program: program.clone(),
        args: rest,
        env,
        keep_pymalloc: args.keep_pymalloc,
    };
    let publish = server.is_some().then(|| published.clone());
    let (run, warm) = record_beside_symbols(&opts, preload.path(), publish);
    if let Some(server) = server {
        server.stop();
    }
    let mut loaders = warm
        .and_then(|t| t.join().ok())
        .unwrap_or_else(|| Loaders::cached(Bundled::symbol_cache_dir()));
    let mut run = run?;
    // The program's name as the notes and messages show it: escaped for the terminal.
    let shown = printable_os(program);
    say_killed(&run, &shown);
    // From here on, whatever goes wrong is memprof's to report, on stderr; the exit status
    // stays the program's.
    let code = run.exit_code;
    let Some(gone) = profile_file_gone(&run, &shown) else {
        return Ok(code);
    };
    let mut files = vec![run.output.clone()];
    files.extend(run.children.iter().cloned());
    // The collector's fold of every file it wrote: nothing is read again.
    let options = LoadOptions { recorded: true, timeline: true };
    let folded = std::mem::take(&mut run.folded);
    let (mut profile, labels, mut processes) =
        match read_profiles_folded(&files, options, &mut loaders, folded) {
            Ok(read) => read,
            Err(e) => {
                eprintln!("memprof: error: the profile cannot be read: {e}");
                return Ok(code);
            }
        };
    // The symbols are all read: their sections are let go before the report, the
    // flamegraph and the page are made, which would otherwise come on top of them (read a
    // unit at a time, they are a few large buffers and small tables, freed in no time).
    drop(loaders);
    profile.site_skip = skip;
    // What the executable says of its allocator (read once, now that the run is over): an
    // allocator the preload library cannot reach is said whatever was seen.
    let nothing = profile.counts.samples == 0;
    let reach = launcher::resolve_program(program).ok().and_then(|p| Executable::read(&p, nothing));
    // What qualifies the numbers: said above the table, and kept in the profile for
    // `report`, the HTML page and the JSON.
    let followed = executables(&processes);
    let notes = run_notes(&profile, &followed, program, &run, reach.as_ref(), &shown, args);
    name_childrens_allocators(&mut processes, &run.output, &followed);
    keep_notes(&mut profile, &notes, &run);
    let profile = profile;
    // Without a table, after the line that says nothing was seen (which says itself why,
    // when the allocator is out of reach).
    let unreached = reach.as_ref().and_then(|e| e.unreached(&shown));
    let after_notes = || {
        for n in notes.iter().filter(|n| Some(*n) != unreached.as_ref()) {
            eprintln!("memprof: note: {n}");
        }
    };
    if profile.counts.samples == 0 {
        say_nothing_seen(program, &run, &profile, reach.as_ref(), &shown);
        after_notes();
        return Ok(code);
    }
    let view = summary_view(&profile, args.view);
    // The page is left out when the process is gone (as its file was).
    let summary = |wrappers: &_| summary_text(&profile, &processes, args, view, wrappers);
    summary_and_companions(&profile, &processes, &run.output, (view, !gone), args.force, summary);
    say_where(&run, &profile, &processes, &labels);
    Ok(code)
}

/// The program `record` runs, its arguments and what is set in its environment: the
/// command's first word, or the program its launchers would run (rustup's proxies, pyenv's
/// shims, `env NAME`, a `#!` line naming one: `launcher::through`), said on stderr.
type ToRecord = (OsString, Vec<OsString>, Vec<(OsString, OsString)>);

fn program_to_record(args: &RecordRequest) -> Result<ToRecord, Error> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Error::Config("no program given (memprof record -- PROG [ARGS…])".into()))?;
    let Some(t) = launcher::look_through(program, rest) else {
        return Ok((program.clone(), rest.to_vec(), vec![]));
    };
    eprintln!(
        "memprof: note: recording {} (looked through {})",
        printable_os(&t.program),
        printable(&t.launchers.join(", then "))
    );
    Ok((t.program, t.args, t.env))
}

/// Runs the program; while it runs, another thread reads the symbols of the modules its
/// sampled stacks pass through, each once, as the collector folds them (told through a
/// channel), so that little is left to do once it exits (symbol reading was most of that).
/// A program that allocates nothing sampled needs no symbol, and a module no sample passes
/// through is never read. The thread is told that the program has ended by the channel
/// closing (`record` and the collector each hold a sender); its priority is given back
/// here once the program has ended.
fn record_beside_symbols(
    opts: &RecordOptions,
    preload: &Path,
    publish: Option<Arc<Published>>,
) -> (Result<launcher::Recorded, Error>, Option<std::thread::JoinHandle<Loaders>>) {
    let (tell, modules) = std::sync::mpsc::channel::<String>();
    let sampled_modules = Some(tell.clone());
    let mut warm = None;
    // The thread's id, for its priority back once the program has ended.
    let warm_tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let tid = warm_tid.clone();
    let run = launcher::record_publishing(opts, preload, publish, sampled_modules, |_| {
        warm = std::thread::Builder::new()
            .name("memprof-symbols".into())
            .spawn(move || {
                idle_priority();
                // SAFETY: gettid has no preconditions.
                let me = unsafe { libc::gettid() };
                tid.store(me, std::sync::atomic::Ordering::Release);
                // Published after the change: a program that ended before is seen here
                // (the channel closed before `record` read the id), and the class undone.
                let first = modules.try_recv();
                if first == Err(std::sync::mpsc::TryRecvError::Disconnected) {
                    normal_priority(me);
                }
                warm_symbols(first.ok(), &modules)
            })
            .ok();
    });
    drop(tell);
    // The program has ended: the reading thread need not yield to anything any more. On a
    // machine whose cores other work keeps busy, a SCHED_IDLE thread would not run at all,
    // and `record` would wait for it until that work ended.
    normal_priority(warm_tid.load(std::sync::atomic::Ordering::Acquire));
    (run, warm)
}

/// Says on stderr what killed the program, when a signal did (the OOM killer named).
fn say_killed(run: &launcher::Recorded, shown: &str) {
    if let Some(sig) = run.signal {
        match (sig, &run.oom) {
            (libc::SIGKILL, Some(kill)) => {
                let root = run.folded.iter().find(|(p, _)| *p == run.output);
                let resident = root.and_then(|(_, p)| p.resident.last()).map(|r| r.bytes);
                eprintln!("memprof: {shown} was {}", kill.describe(resident));
            }
            _ => eprintln!("memprof: {shown} was killed by signal {sig}"),
        }
    }
}

/// Whether the profile's file was removed while the program ran (the collector's fold
/// stands for it then), or `None` when there is nothing to report (gone with nothing
/// collected, or empty), said on stderr.
fn profile_file_gone(run: &launcher::Recorded, shown: &str) -> Option<bool> {
    let gone = std::fs::symlink_metadata(&run.output).is_err();
    let folded_root = run.folded.iter().any(|(p, _)| *p == run.output);
    if gone {
        // Removed while the program ran (its directory too, perhaps): the collector's fold
        // is all there is.
        if !folded_root {
            eprintln!(
                "memprof: error: the profile {} is gone (removed while {shown} ran?), and \
                 nothing of it was collected",
                printable_os(&run.output)
            );
            return None;
        }
        eprintln!(
            "memprof: warning: the profile {} was removed while {shown} ran; reporting what \
             was recorded",
            printable_os(&run.output)
        );
    }
    let empty = !gone
        && !folded_root
        && std::fs::metadata(&run.output).map(|m| m.len() == 0).unwrap_or(true);
    if empty {
        let why = match run.signal {
            Some(sig) => format!("{shown} was killed by signal {sig} before it wrote any"),
            None => format!(
                "the preload library did not run in {shown} (a statically linked or setuid \
                 program, or LD_PRELOAD was cleared), or was of another memprof build (said \
                 above)"
            ),
        };
        eprintln!("memprof: error: {} is empty: {why}", printable_os(&run.output));
        return None;
    }
    Some(gone)
}

/// Keeps the run's notes in the profile, and in its file when that file was written whole
/// (or stopped early on purpose).
fn keep_notes(profile: &mut Profile, notes: &[String], run: &launcher::Recorded) {
    for n in notes {
        if !profile.notes.contains(n) {
            profile.notes.push(n.clone());
        }
    }
    let written = !run.unwritten.contains(&run.output);
    if !notes.is_empty() && written && (profile.complete || profile.stopped.is_some()) {
        if let Err(e) = crate::profile::format::append_notes(&run.output, &profile.header, notes) {
            eprintln!("memprof: warning: the notes were not kept in the profile: {e}");
        }
    }
}

/// The executables of the recorded processes, each read once (`interposable`), in the
/// order the processes first name them: the notes on the followed processes' runtimes and
/// allocators ask them.
fn executables(processes: &[Process]) -> Vec<(String, Option<Executable>)> {
    let mut read: Vec<(String, Option<Executable>)> = Vec::new();
    for p in processes {
        if !read.iter().any(|(exe, _)| *exe == p.executable) {
            let exe = Executable::read(Path::new(&p.executable), false);
            read.push((p.executable.clone(), exe));
        }
    }
    read
}

/// Each followed process (not the root, whose file is `root`) whose executable defines
/// `malloc` with an allocator of its own (rustc under cargo) gets the note naming that
/// allocator in its own file (`interposable` §4), as the root's gets it in [`keep_notes`]:
/// so that its report, and its line in the tree's, tell that allocator's memory as the
/// allocator's. Its file is read again for its header (such executables are rare); a file
/// that does not end cleanly is left as it is.
fn name_childrens_allocators(
    processes: &mut [Process],
    root: &Path,
    followed: &[(String, Option<Executable>)],
) {
    for p in processes.iter_mut().filter(|p| p.file != root) {
        let read = followed.iter().find(|(exe, _)| *exe == p.executable);
        let Some(note) = read.and_then(|(_, e)| e.as_ref()?.linked_note()) else { continue };
        let Ok(mut child) = Profile::read_file_with(&p.file, false) else { continue };
        let clean = (child.complete || child.stopped.is_some()) && child.warnings.is_empty();
        if !clean || child.notes.contains(&note) {
            continue;
        }
        let notes = [note];
        if let Err(e) = crate::profile::format::append_notes(&p.file, &child.header, &notes) {
            eprintln!("memprof: warning: the notes were not kept in {}: {e}", p.file.display());
            continue;
        }
        child.notes.extend(notes);
        let allocator = crate::profile::allocator::allocator_name(&child);
        let told = |r| crate::profile::allocator::as_told(allocator, r).allocator_free();
        p.allocator_free = child.splits.last().map(told);
    }
}

/// Says on stderr why no allocation was seen in the program: a wrapper that executed
/// another, a signal, an allocator out of reach, or too little allocated.
fn say_nothing_seen(
    program: &std::ffi::OsStr,
    run: &launcher::Recorded,
    profile: &Profile,
    reach: Option<&Executable>,
    shown: &str,
) {
    if let Some((_, hint)) = exec_hint(program, run, profile) {
        eprintln!("memprof: note: no allocations were seen in {shown}: {hint}");
        return;
    }
    let found = reach.and_then(|e| e.nothing_seen("it"));
    let why = if let Some(sig) = run.signal {
        format!(
            "it was killed by signal {sig} before the profile's first flush (the last \
             50 ms of a crashed process can be lost)"
        )
    } else if let Some(found) = found {
        found
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
}

/// The summary for stderr: the tree's table of processes, the top sites, the note on
/// shallow stacks.
fn summary_text(
    profile: &Profile,
    processes: &[Process],
    args: &RecordRequest,
    view: View,
    wrappers: &OnceLock<Vec<Wrapper>>,
) -> String {
    let mut text = String::new();
    if processes.len() > 1 {
        text.push_str(&crate::report::process_table(processes, &Default::default()));
    }
    let top =
        TopOptions { limit: args.top, backtrace: args.sites.backtrace, view, ..Default::default() };
    text.push_str(&crate::report::top::top_table_sharing(profile, &top, wrappers));
    if let Some(note) = crate::report::shallow_stacks_note(profile) {
        text.push_str(&format!("memprof: note: {note}\n"));
    }
    text
}

/// The last line: where the profile is (a tree's directory, a file whose writing failed).
fn say_where(
    run: &launcher::Recorded,
    profile: &Profile,
    processes: &[Process],
    labels: &[String],
) {
    if processes.len() > 1 {
        let dir = crate::profile::tree::dir_of(&run.output.display().to_string());
        eprintln!(
            "memprof: profiles {} and {}/ ({} processes, {} samples; `memprof report {}` \
             reads the tree)",
            printable_os(&run.output),
            printable(&dir),
            processes.len(),
            profile.counts.samples,
            printable_os(&run.output)
        );
    } else if run.unwritten.contains(&run.output) {
        eprintln!(
            "memprof: profile {} is INCOMPLETE: its writing failed (said above); the table \
             above is the whole run's",
            printable_os(&run.output),
        );
    } else {
        eprintln!(
            "memprof: profile {} ({})",
            printable_os(&run.output),
            printable(&labels.join(", "))
        );
    }
}

/// The notes on a run that qualify its numbers, in the order they matter: the runtimes
/// whose heap is not malloc's, an allocator the preload library cannot reach, a wrapper
/// that exec'd the program, the programs started unprofiled, CPython's allocator.
fn run_notes(
    profile: &Profile,
    followed: &[(String, Option<Executable>)],
    program: &std::ffi::OsStr,
    run: &launcher::Recorded,
    reach: Option<&Executable>,
    shown: &str,
    args: &RecordRequest,
) -> Vec<String> {
    use super::runtimes::Runtime;
    let keep_pymalloc = args.keep_pymalloc;
    let mut notes = Vec::new();
    let mut add = |n: String| {
        if !notes.contains(&n) {
            notes.push(n);
        }
    };
    let root = &profile.header.executable;
    let modules = || profile.modules.iter().map(|m| m.path.as_str());
    let go = reach.is_some_and(|e| e.go);
    if let Some(rt) = Runtime::of(root, modules(), go) {
        add(rt.note(root));
    }
    for (exe, read) in followed.iter().filter(|(exe, _)| exe != root) {
        let go = read.as_ref().is_some_and(|e| e.go);
        if let Some(rt) = Runtime::of(exe, std::iter::empty(), go) {
            add(rt.note(exe));
        }
    }
    if let Some(why) = reach.and_then(|e| e.unreached(shown)) {
        add(why);
    }
    if let Some(linked) = reach.and_then(Executable::linked_note) {
        add(linked);
    }
    if profile.counts.samples > 0 {
        if let Some((true, hint)) = exec_hint(program, run, profile) {
            add(format!("this profile is the wrapper's, not {shown}'s: {hint}"));
        }
    }
    if let Some(n) = notes::unfollowed(shown, &run.unfollowed) {
        add(n);
    }
    let any_named = followed.iter().any(|(exe, _)| notes::is_cpython(exe, [].into_iter()));
    if any_named || notes::is_cpython(root, modules()) {
        add(notes::cpython(run.pymalloc_bypassed, keep_pymalloc));
        if let Some(n) = notes::python_frames(root, modules()) {
            add(n);
        } else if args.python_frames == "auto" && profile.header.interval <= 1.0 {
            add("Python frames are not read in the exact mode unless asked (at every \
                 allocation they cost it about 1.4×): --python-frames on reads them"
                .to_owned());
        }
    }
    notes
}

/// Serves, on `addr`, the root process's profile as the collector folds it (`published`),
/// its symbols resolved from the recorded modules (readers kept from request to request).
pub(super) fn serve_published(
    addr: &str,
    published: std::sync::Arc<Published>,
) -> Result<crate::serve::Running, Error> {
    let bound = crate::serve::Server::bind(addr)?;
    let loaders = Loaders::cached(Bundled::symbol_cache_dir());
    let mirror = std::sync::Mutex::new((Profile::default(), loaders));
    let handler = crate::serve::Handler::new(move || {
        let mut guard = mirror.lock().unwrap_or_else(|p| p.into_inner());
        let (profile, loaders) = &mut *guard;
        if !published.snapshot_into(profile) {
            return Err(Error::Other("the program has not started its profile yet".into()));
        }
        let _ = crate::profile::symbolize::resolve_offline_with(profile, loaders);
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
/// recorded executable is not the program asked for; or a link to a proxy of another name,
/// such as rustup's `rustc`, which executes the program the user meant). The file then
/// ends without its end record although nothing was killed (which `_exit` also does).
fn exec_hint(
    program: &std::ffi::OsStr,
    run: &launcher::Recorded,
    p: &Profile,
) -> Option<(bool, String)> {
    if p.complete || run.signal.is_some() || !run.children.is_empty() {
        return None;
    }
    let ran = Path::new(&p.header.executable);
    let named = launcher::resolve_program(program).ok()?;
    let asked = std::fs::canonicalize(&named).unwrap_or_else(|_| named.clone());
    let wrapper = asked != ran;
    // A link to a multi-call program of another name (rustup's `rustc` and `cargo`
    // proxies, busybox's applets): the program that ran is the proxy, and what the user
    // meant is what it executed. One that ended with `_exit` executed nothing: a link of
    // another name is then only an alias (`sh` to `dash`), no proxy.
    let proxy =
        !wrapper && named.file_name() != ran.file_name() && p.stopped != Some(Stopped::QuickExit);
    let who = if wrapper {
        format!("it was run by {} (it is a script or a wrapper), and", printable_os(ran))
    } else if proxy {
        format!("{} is a link to {} (a proxy), which", printable_os(program), printable_os(ran))
    } else {
        "it".to_owned()
    };
    let what = match p.stopped {
        Some(Stopped::Exec) => "replaced itself with another program (exec)",
        Some(Stopped::QuickExit) => "ended with _exit",
        None => "replaced itself with another program (exec), or ended with _exit",
    };
    // A program that ended with _exit executed nothing: nothing to follow. Programs named
    // in the note that follows (`notes::unfollowed`) need no word here.
    if p.stopped == Some(Stopped::QuickExit) {
        return Some((wrapper, format!("{who} {what}")));
    }
    if proxy {
        let how = "record that program by its path, or give --follow-forks";
        return Some((true, format!("{who} {what}: {how}")));
    }
    if !run.unfollowed.is_empty() {
        return Some((wrapper, format!("{who} {what}")));
    }
    Some((
        wrapper,
        format!(
            "{who} {what}; programs it executes are not profiled unless --follow-forks is given"
        ),
    ))
}

/// Reads the symbols of each module told (`first`, then what `modules` brings) until the
/// channel closes: the program has exited, and the collector has told all it will (what
/// it folds after is read after the exit).
pub(super) fn warm_symbols(
    first: Option<String>,
    modules: &std::sync::mpsc::Receiver<String>,
) -> Loaders {
    let mut loaders = Loaders::cached(Bundled::symbol_cache_dir());
    for path in first.into_iter().chain(modules.iter()) {
        loaders.load(&path);
    }
    loaders
}

/// Puts the calling thread in the `SCHED_IDLE` class: it runs only on a core nothing else
/// wants. `record`'s reading threads must not take CPU from the program and its drain
/// thread (in the exact mode the drain thread is busy: the program waits for it when it
/// falls behind); they catch up once the program has exited.
/// Puts thread `tid` (of this process; 0: none) back in the normal class, from
/// [`idle_priority`].
fn normal_priority(tid: i32) {
    if tid == 0 {
        return;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: changes the policy of a thread of this process; `param` is a valid
    // sched_param for SCHED_OTHER (priority 0). A thread gone already makes it fail with
    // ESRCH, which changes nothing.
    unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) };
}

pub(super) fn idle_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler(0, …)` changes only the calling thread's policy; `param`
    // is a valid sched_param for SCHED_IDLE (priority 0). Failure leaves it as it was.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}

/// The view of `record`'s and `attach`'s summary: `--view`, but the allocations' when it asks
/// for GC mark time of a recording without GC cycles (said in a note: the profile is written,
/// and `report --view` reads it again in any view).
pub(crate) fn summary_view(profile: &crate::profile::Profile, view: View) -> View {
    match crate::report::command::view_unavailable(profile, view) {
        None => view,
        Some(why) => {
            eprintln!("memprof: note: {why}; the summary counts allocations");
            View::Alloc
        }
    }
}
