//! Nothing harmed: programs that behave like real daemons and servers (their own signal
//! discipline, `pthread_exit` from `main`, resource limits, `quick_exit`, a change of
//! directory), each run plain and under `memprof record`, in the exact mode and at the
//! default interval. Under `record` a program must exit as it does plain and print the same,
//! and its profile must hold what it is known to allocate.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, fixture, read, record, scratch, totals};

/// Runs `prog` plain (in `dir`), with a deadline: a program that hangs fails the test
/// instead of hanging it.
pub(crate) fn plain(dir: &Path, prog: &Path, args: &[&str]) -> Output {
    let child = Command::new(prog)
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fixture runs");
    finish_within(child, Duration::from_secs(60))
}

fn finish_within(mut child: std::process::Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("still running after {limit:?}; stderr: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `memprof record` with a deadline (a program kept alive by the profiler is a failure).
fn record_within(dir: &Path, opts: &[&str], prog: &Path, args: &[&str]) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    let (dir2, prog2) = (dir.to_owned(), prog.to_owned());
    let opts: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    std::thread::spawn(move || {
        let o: Vec<&str> = opts.iter().map(String::as_str).collect();
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let _ = tx.send(record(&dir2, &o, &prog2, &a));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("memprof record -- {} did not end within 60 s", prog.display()))
}

/// Both modes, each into its own profile: (label, options).
pub(crate) fn modes(name: &str) -> [(String, Vec<String>); 2] {
    [
        (
            format!("{name} exact"),
            vec!["--interval".into(), "1".into(), "-o".into(), format!("{name}.exact.mprof")],
        ),
        (format!("{name} default"), vec!["-o".into(), format!("{name}.default.mprof")]),
    ]
}

pub(crate) fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn main_ending_with_pthread_exit_exits() {
    let dir = scratch("pthread-exit");
    let prog = fixture("pthread_exit");
    let p = plain(&dir, &prog, &[]);
    assert_eq!(p.status.code(), Some(0));
    for (label, opts) in modes("pe") {
        let out = record_within(&dir, &strs(&opts), &prog, &[]);
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), text(&p.stdout), "{label}");
        if label.ends_with("exact") {
            let prof = read(&dir.join(&opts[3]));
            assert!(prof.complete, "{label}: {:?}", prof.warnings);
            // 4 workers × 1000 blocks of 1000 B, all freed; main's 4242 B, kept.
            assert_eq!(totals(&prof, "work"), (4_000_000.0, 4000.0, 0.0, 0.0), "{label}");
            // main's own block; the rest of main's site is what pthread_create and stdio
            // allocated for it (its threads' TLS, stdout's buffer), which depends on glibc.
            let own = prof.live.iter().filter(|((stack, size), t)| {
                *size == 4242 && t.samples > 0 && prof.site_name(*stack) == "main"
            });
            assert_eq!(own.map(|(_, t)| t.samples).sum::<u64>(), 1, "{label}");
            let (alloc, objects, live, _) = totals(&prof, "main");
            assert!(alloc >= 4242.0 && objects >= 1.0 && live >= 4242.0, "{label}");
        }
    }
}

#[test]
fn a_sigwait_server_receives_its_signals() {
    let dir = scratch("sigwait");
    let prog = fixture("sigwait_server");
    let p = plain(&dir, &prog, &[]);
    assert_eq!((p.status.code(), text(&p.stdout).trim()), (Some(0), "received 20"));
    for (label, opts) in modes("sw") {
        // Several runs: which thread the kernel picks for a process-directed signal
        // varies; a profiler thread that could take SIGTERM is hit in most of them.
        for _ in 0..3 {
            let out = record_within(&dir, &strs(&opts), &prog, &[]);
            assert_ok(&out, 0);
            assert_eq!(text(&out.stdout).trim(), "received 20", "{label}");
            let _ = std::fs::remove_file(dir.join(&opts[opts.len() - 1]));
        }
    }
}

#[test]
fn a_file_size_limit_leaves_the_program_alone() {
    let dir = scratch("fsize");
    let prog = fixture("fsize_limit");
    let p = plain(&dir, &prog, &["plain.out"]);
    assert_eq!(p.status.code(), Some(4));
    assert_eq!(std::fs::metadata(dir.join("plain.out")).unwrap().len(), 17_000);
    for (label, opts) in modes("fs") {
        let out = record_within(&dir, &strs(&opts), &prog, &["rec.out"]);
        // The program's status and its own file, not a SIGXFSZ.
        assert_eq!(out.status.code(), Some(4), "{label}: {}", text(&out.stderr));
        assert_eq!(std::fs::metadata(dir.join("rec.out")).unwrap().len(), 17_000, "{label}");
        let err = text(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
        // The profile is written by `record`, to which the program's limit does not
        // apply: it is whole, with every one of the 500 000 allocations in the exact mode.
        let prof = read(&dir.join(&opts[opts.len() - 1]));
        assert!(prof.complete && prof.warnings.is_empty(), "{label}: {:?}", prof.warnings);
        if label.ends_with("exact") {
            assert!(std::fs::metadata(dir.join(&opts[3])).unwrap().len() > 64 * 1024);
            // And the FILE and buffer of main's fopen: the C library allocates them for
            // main, so they are main's.
            assert_eq!(totals(&prof, "main").1, 500_002.0, "{label}");
        }
    }
}

#[test]
fn quick_exit_keeps_what_was_allocated() {
    let dir = scratch("quick-exit");
    let prog = fixture("quick_exit");
    assert_eq!(plain(&dir, &prog, &[]).status.code(), Some(3));
    for (label, opts) in modes("qe") {
        let out = record_within(&dir, &strs(&opts), &prog, &[]);
        assert_ok(&out, 3);
        let prof = read(&dir.join(&opts[opts.len() - 1]));
        assert!(prof.warnings.is_empty(), "{label}: {:?}", prof.warnings);
        assert_eq!(prof.stopped, Some(memprof::profile::Stopped::QuickExit), "{label}");
        if label.ends_with("exact") {
            assert_eq!(totals(&prof, "leak_site"), (300_000.0, 300.0, 300_000.0, 300.0));
        }
    }
}

#[test]
fn children_of_a_program_that_changes_directory_are_found() {
    let dir = scratch("chdir");
    let prog = fixture("chdir_fork");
    assert_eq!(plain(&dir, &prog, &[]).status.code(), Some(0));
    let out =
        record_within(&dir, &["--interval", "1", "--follow-forks", "-o", "cd.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    // The child's file is in the tree's directory beside the parent's (not in `/`), and
    // in `record`'s summary.
    let children = memprof::profile::tree::children(&dir.join("cd.mprof"));
    assert_eq!(children.len(), 1, "{children:?}");
    assert!(children[0].starts_with(dir.join("cd.mprof.d")), "{children:?}");
    let err = text(&out.stderr);
    assert!(err.contains("child_site"), "{err}");
    let child = read(&children[0]);
    assert_eq!(totals(&child, "child_site"), (100_000.0, 50.0, 100_000.0, 50.0));
}

#[test]
fn a_program_that_allocates_nothing_keeps_its_status() {
    let dir = scratch("nothing");
    let out = record_within(&dir, &["--interval", "1"], &fixture("nomalloc"), &[]);
    assert_ok(&out, 0);
    assert!(text(&out.stderr).contains("note: no allocations were seen"), "{}", text(&out.stderr));
}

/// A program that leaks 300 × 1000 B and dies within a millisecond, of SIGSEGV, abort or a
/// SIGKILL it sends itself: `record` exits as the shell would (139, 134, 137) and every
/// leaked byte is in the profile (`record` drains the shared queue after the process is
/// gone).
#[test]
fn a_crash_right_after_allocating_loses_nothing() {
    let dir = scratch("crash-fast");
    let prog = fixture("crash_fast");
    for (mode, sig) in [("segv", libc::SIGSEGV), ("abort", libc::SIGABRT), ("kill", libc::SIGKILL)]
    {
        let p = plain(&dir, &prog, &[mode]);
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&p.status), Some(sig));
        for (label, opts) in modes(&format!("cf-{mode}")) {
            let out = record_within(&dir, &strs(&opts), &prog, &[mode]);
            assert_ok(&out, 128 + sig);
            let err = text(&out.stderr);
            assert!(!err.contains("never called malloc"), "{label}: {err}");
            let prof = read(&dir.join(&opts[opts.len() - 1]));
            if label.ends_with("exact") {
                let t = totals(&prof, "leak_site");
                assert_eq!(t, (300_000.0, 300.0, 300_000.0, 300.0), "{label}: {err}");
            }
        }
    }
}

/// With `--follow-forks`, a child that outlives the program is waited for (and named), and
/// its profile is read whole and reported.
#[test]
fn children_that_outlive_the_program_are_waited_for() {
    let dir = scratch("orphan");
    let prog = fixture("orphan");
    let out =
        record_within(&dir, &["--interval", "1", "--follow-forks", "-o", "o.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    assert!(err.contains("waiting for the 1 process"), "{err}");
    assert!(err.contains("orphan_site") && !err.contains("INCOMPLETE"), "{err}");
    let child = memprof::profile::tree::children(&dir.join("o.mprof"))
        .into_iter()
        .next()
        .expect("the child's profile, in o.mprof.d/");
    let p = read(&child);
    assert!(p.complete, "{:?}", p.warnings);
    assert_eq!(totals(&p, "orphan_site"), (120_000.0, 40.0, 120_000.0, 40.0));
}

/// The output's directory removed while the program runs: the program is not disturbed,
/// `record` exits with its status, says what became of the file, and still reports what
/// it read while the program ran (its reading thread holds the file open).
#[test]
fn an_output_directory_removed_mid_run_keeps_the_programs_status() {
    let dir = scratch("rmdir");
    let sub = dir.join("out");
    std::fs::create_dir_all(&sub).unwrap();
    let prog = fixture("slow_exit");
    let child = Command::new(crate::common::MEMPROF)
        .current_dir(&dir)
        .args(["record", "--interval", "1", "-o", "out/p.mprof", "--"])
        .arg(&prog)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(250));
    std::fs::remove_dir_all(&sub).unwrap();
    let out = finish_within(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("statically linked"), "{err}");
    assert!(err.contains("p.mprof") && err.contains("removed"), "names the profile: {err}");
    assert!(err.contains("early_site") && err.contains("late_site"), "{err}");
}

/// The preload library started by hand (`LD_PRELOAD`, no `memprof record`): the process
/// writes its own file, and a fatal signal has the drain thread flush before the program
/// dies with its own disposition.
#[test]
fn a_crash_under_a_hand_set_preload_keeps_what_it_leaked() {
    let dir = scratch("crash-by-hand");
    let prog = fixture("crash_fast");
    let lib = Path::new(MEMPROF).parent().unwrap().join("libmemprof_preload.so");
    for (mode, sig) in [("segv", libc::SIGSEGV), ("abort", libc::SIGABRT)] {
        let file = dir.join(format!("h-{mode}.mprof"));
        let out = Command::new(&prog)
            .arg(mode)
            .env("LD_PRELOAD", &lib)
            .env("MEMPROF_INTERVAL", "1")
            .env("MEMPROF_OUTPUT", &file)
            .output()
            .unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(sig));
        let prof = read(&file);
        let t = totals(&prof, "leak_site");
        assert_eq!(t, (300_000.0, 300.0, 300_000.0, 300.0), "{mode}: {}", text(&out.stderr));
    }
}

/// A daemon closes every descriptor and opens its data file, which takes the lowest free
/// number: its file holds exactly its own 17 000 bytes, and the allocations it makes after
/// the close are in the profile (the process holds no descriptor of ours under `record`;
/// under a hand-set preload the recorder checks that its descriptor is still its file
/// before each write, and stops instead of writing into the program's).
#[test]
fn a_daemon_closing_every_descriptor_keeps_its_file_and_its_profile() {
    let dir = scratch("daemon");
    let prog = fixture("daemon_fds");
    let p = plain(&dir, &prog, &["plain.out"]);
    assert_eq!(p.status.code(), Some(0));
    let want = std::fs::read(dir.join("plain.out")).unwrap();
    assert_eq!(want.len(), 17_000);
    for (label, opts) in modes("dm") {
        let out = record_within(&dir, &strs(&opts), &prog, &["rec.out"]);
        assert_ok(&out, 0);
        assert!(std::fs::read(dir.join("rec.out")).unwrap() == want, "{label}: the data file");
        let prof = read(&dir.join(&opts[opts.len() - 1]));
        assert!(prof.complete && prof.warnings.is_empty(), "{label}: {:?}", prof.warnings);
        if label.ends_with("exact") {
            let t = totals(&prof, "after_close_site");
            assert_eq!(t, (200_000.0, 200.0, 200_000.0, 200.0), "{label}");
        }
    }
    let lib = Path::new(MEMPROF).parent().unwrap().join("libmemprof_preload.so");
    let out = Command::new(&prog)
        .arg(dir.join("hand.out"))
        .env("LD_PRELOAD", &lib)
        .env("MEMPROF_INTERVAL", "1")
        .env("MEMPROF_OUTPUT", dir.join("hand.mprof"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read(dir.join("hand.out")).unwrap() == want, "hand-set: the data file");
}

/// A program growing its heap, stopped and SIGKILLed from outside: its profile holds every
/// block allocated up to the kill.
#[test]
fn a_program_killed_from_outside_keeps_its_growth() {
    let dir = scratch("grow-kill");
    let mut child = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["record", "--interval", "1", "-o", "g.%p.mprof", "--"])
        .arg(fixture("grow"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line.trim().parse().unwrap_or(0)).is_err() {
                break;
            }
        }
    });
    let mut last = 0;
    while last < 300 {
        last = rx.recv_timeout(Duration::from_secs(60)).expect("the program grows");
    }
    let (file, pid) = crate::programs::profile_of_pid(&dir, "g.");
    // SAFETY: kill has no memory preconditions; pid is the profiled program's.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    while let Ok(n) = rx.recv_timeout(Duration::from_millis(300)) {
        last = n;
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, 128 + libc::SIGKILL);
    let prof = read(&file);
    assert!(prof.complete && prof.warnings.is_empty(), "{:?}", prof.warnings);
    // Each count is printed after its block was allocated; the next block may have been
    // allocated before the stop.
    let n = totals(&prof, "grow_site").1 as u64;
    assert!(n == last || n == last + 1, "{n} blocks in the profile, {last} printed");
}

/// `memprof record` killed while its program runs: the program runs on unharmed and ends
/// normally, its events counted as lost in its queue rather than waited for.
#[test]
fn a_program_outlives_its_killed_collector() {
    let dir = scratch("outlive");
    let (go, done) = (dir.join("go"), dir.join("done"));
    let mut child = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["record", "--interval", "1", "-o", "o.mprof", "--"])
        .arg(fixture("outlive"))
        .arg(&go)
        .arg(&done)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::write(&go, "").unwrap();
    let start = Instant::now();
    while !done.exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "the program did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The killed `record` could not remove its ring directory; the next `record` does.
    let stale = format!("memprof-{}-", child.id());
    let left = || {
        std::fs::read_dir("/dev/shm")
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&stale))
    };
    let out = record_within(&dir, &["-o", "next.mprof"], &fixture("nomalloc"), &[]);
    assert_ok(&out, 0);
    assert!(!left(), "a dead record's {stale}* is removed by the next one");
}

/// Two libraries `dlopen`ed alternately at the same address, each leaking 10 × 1000 B in
/// its constructor, loaded 5 times each: each gets its own 50 000 B (every sample is
/// attributed to the module mapped when it was taken); then the same from 4 threads at
/// once, where the loads that run a constructor are counted from the program's output:
/// each library keeps its own samples, also those of a load by one thread between another
/// thread's unmapping of the other library and the list read after that `dlclose`.
#[test]
fn libraries_loaded_at_the_same_address_keep_their_own_samples() {
    let dir = scratch("dl-generations");
    let prog = fixture("gen");
    let libs = [fixture("libgen0"), fixture("libgen1")];
    let libs: Vec<&str> = libs.iter().map(|l| l.to_str().unwrap()).collect();
    let out = record_within(&dir, &["--interval", "1", "-o", "g.mprof"], &prog, &libs);
    assert_ok(&out, 0);
    let reused: u32 = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("reused ")?.trim().parse().ok())
        .expect("the program says where the libraries went");
    assert!(reused > 0, "the loader reused the address: the test means something");
    let prof = read(&dir.join("g.mprof"));
    assert_eq!(totals(&prof, "gen0_leak"), (50_000.0, 50.0, 50_000.0, 50.0));
    assert_eq!(totals(&prof, "gen1_leak"), (50_000.0, 50.0, 50_000.0, 50.0));

    let mut args = libs.clone();
    args.push("threads");
    for round in 0..3 {
        let file = format!("t{round}.mprof");
        let out = record_within(&dir, &["--interval", "1", "-o", &file], &prog, &args);
        assert_ok(&out, 0);
        let stdout = text(&out.stdout);
        let loads = |g: &str| stdout.lines().filter(|l| l.trim() == g).count() as f64;
        let prof = read(&dir.join(&file));
        for g in ["g0", "g1"] {
            let (bytes, objects, _, _) = totals(&prof, &format!("gen{}_leak", &g[1..]));
            let n = 10.0 * loads(g);
            assert_eq!((bytes, objects), (1000.0 * n, n), "round {round}: {g}'s own samples");
        }
    }
}

/// Four threads load and unload four libraries in turn, so the loader keeps mapping one
/// where another was a moment ago, often while another thread's `dlclose` is under way:
/// each library keeps exactly its own constructors' samples (10 × 500 B per load that ran
/// one, counted from the program's output), in exact mode, with nothing lost, whether the
/// program names them by absolute or relative paths. (Samples
/// taken between another thread's unmapping and its next module list went to the library
/// unloaded; the DWARF unwinder's table, rebuilt for each new library, was counted as lost
/// events.)
#[test]
fn four_threads_loading_four_libraries_at_one_address_keep_their_own_samples() {
    let dir = scratch("dl-quad");
    let prog = fixture("quad");
    let libs: Vec<String> = (0..4)
        .map(|q| {
            let lib = dir.join(format!("libquad{q}.so"));
            let def = format!("-DQ={q}");
            let flags = ["-O2", "-g", "-fno-optimize-sibling-calls", "-shared", "-fPIC", &def];
            crate::programs::cc("libquad.c", &lib, &flags);
            lib.to_str().unwrap().to_owned()
        })
        .collect();
    // The loader names a library as the program asked for it, and `/proc/PID/maps` (where
    // the collector looks up frames no list names yet) by its canonical path: relative
    // names (odd rounds; `record` runs in `dir`) made the two one library's two modules,
    // and its `dlclose` left the other's frames to the next library mapped there.
    let relative: Vec<String> = (0..4).map(|q| format!("./libquad{q}.so")).collect();
    for round in 0..4 {
        let names = if round % 2 == 0 { &libs } else { &relative };
        let mut args: Vec<&str> = names.iter().map(String::as_str).collect();
        args.push("10");
        let file = format!("q{round}.mprof");
        let out = record_within(&dir, &["--interval", "1", "-o", &file], &prog, &args);
        assert_ok(&out, 0);
        let stdout = text(&out.stdout);
        let prof = read(&dir.join(&file));
        assert_eq!(prof.lost.events, 0, "round {round}: exact mode loses nothing");
        for q in 0..4 {
            let loads = stdout.lines().filter(|l| l.trim() == format!("q{q}")).count() as f64;
            let (bytes, objects, _, _) = totals(&prof, &format!("quad{q}_leak"));
            assert_eq!((bytes, objects), (5000.0 * loads, 10.0 * loads), "round {round}: q{q}");
        }
    }
}
