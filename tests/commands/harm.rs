//! Nothing harmed: programs that behave like real daemons and servers (their own signal
//! discipline, `pthread_exit` from `main`, resource limits, `quick_exit`, a change of
//! directory), each run plain and under `memprof record`, in the exact mode and at the
//! default interval. Under `record` a program must exit as it does plain and print the same,
//! and its profile must hold what it is known to allocate.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::text;
use crate::record::{assert_ok, fixture, read, record, scratch, totals};

/// Runs `prog` plain (in `dir`), with a deadline: a program that hangs fails the test
/// instead of hanging it.
fn plain(dir: &Path, prog: &Path, args: &[&str]) -> Output {
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
fn modes(name: &str) -> [(String, Vec<String>); 2] {
    [
        (
            format!("{name} exact"),
            vec!["--interval".into(), "1".into(), "-o".into(), format!("{name}.exact.mprof")],
        ),
        (format!("{name} default"), vec!["-o".into(), format!("{name}.default.mprof")]),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
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
            assert_eq!(totals(&prof, "main"), (4242.0, 1.0, 4242.0, 1.0), "{label}");
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
            assert_eq!(totals(&prof, "main").1, 500_000.0, "{label}");
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
    // The child's file is beside the parent's (not in `/`), and in `record`'s summary.
    let children: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("cd.") && n.ends_with(".mprof") && n != "cd.mprof")
        .collect();
    assert_eq!(children.len(), 1, "{children:?}");
    let err = text(&out.stderr);
    assert!(err.contains("child_site"), "{err}");
    let child = read(&dir.join(&children[0]));
    assert_eq!(totals(&child, "child_site"), (100_000.0, 50.0, 100_000.0, 50.0));
}

#[test]
fn a_program_that_allocates_nothing_keeps_its_status() {
    let dir = scratch("nothing");
    let out = record_within(&dir, &["--interval", "1"], &fixture("nomalloc"), &[]);
    assert_ok(&out, 0);
    assert!(text(&out.stderr).contains("note: no allocations were seen"), "{}", text(&out.stderr));
}

/// A program that leaks 300 × 1000 B and dies within a millisecond, of SIGSEGV or abort:
/// `record` exits as the shell would (139, 134) and every leaked byte is in the profile
/// (the fatal signal's handler has the drain thread flush first).
#[test]
fn a_crash_right_after_allocating_loses_nothing() {
    let dir = scratch("crash-fast");
    let prog = fixture("crash_fast");
    for (mode, sig) in [("segv", libc::SIGSEGV), ("abort", libc::SIGABRT)] {
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
    let child = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("o.") && n.ends_with(".mprof") && n != "o.mprof"
        })
        .expect("the child's profile");
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
