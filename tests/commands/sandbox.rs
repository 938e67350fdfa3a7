//! Programs the profiler must not break by what it does on their threads: a program under
//! a seccomp filter that allows only the system calls it makes itself (recorded exactly, in
//! exact mode, its waits for room spinning instead of sleeping), and a program whose
//! preload library is of another memprof build than the collector (refused, said, and run
//! to its end unprofiled instead of waiting for ever).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, fixture, read, scratch, totals};

/// What `seccomp_only <n>` allocates at `churn_site`: (bytes, blocks).
fn truth(n: u64) -> (f64, f64) {
    let bytes: u64 = (0..n).map(|i| 16 + (i % 64) * 8).sum();
    (bytes as f64, n as f64)
}

/// Starts `record --interval 1` (exact mode) on `seccomp_only <n> <how> <action>` in `dir`
/// with `env`, the agent told to say how its waits went (`MEMPROF_TEST_WAITS`); returns it
/// once the program has said its pid (before its filter).
fn start(dir: &std::path::Path, n: u64, how: &str, action: &str, env: &[(&str, &str)]) -> Child {
    let mut child = Command::new(MEMPROF)
        .current_dir(dir)
        .env("MEMPROF_UNWIND_CHECK", "1")
        .env("MEMPROF_TEST_WAITS", "1")
        .envs(env.iter().copied())
        .args(["record", "--interval", "1", "-o", "s.mprof", "--"])
        .arg(fixture("seccomp_only"))
        .args([n.to_string().as_str(), how, action])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("pid "), "{line:?}");
    // The rest of the output, for `finish`.
    child.stdout = Some(take_back(stdout));
    child
}

/// The pipe back from its reader (nothing past the first line was buffered: the program
/// writes its next line at its end).
fn take_back(r: BufReader<std::process::ChildStdout>) -> std::process::ChildStdout {
    assert!(r.buffer().is_empty());
    r.into_inner()
}

/// Stops `record` (the collector) for `ms`, so that the program's queue fills and its
/// producer waits for room for most of that time.
fn stop_collector(child: &Child, ms: u64) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signals the `memprof` process this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    std::thread::sleep(Duration::from_millis(ms));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
}

/// Waits for `record` to end, at most `limit`: a program left waiting for ever fails the
/// test instead of hanging it.
fn finish(mut child: Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
            child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
            child.stderr.take().unwrap().read_to_end(&mut stderr).unwrap();
            return Output { status, stdout, stderr };
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The agent's count of waits for room: (slept, spun).
fn waits(stderr: &str) -> (u64, u64) {
    let line = stderr.lines().find(|l| l.contains("waits for room: ")).expect(stderr);
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |w: &str| words[words.iter().position(|x| *x == w).unwrap() - 1].parse().unwrap();
    (at("slept,"), at("spun"))
}

/// A program whose seccomp filter kills it for any call but its own (brk, mmap, munmap,
/// mremap, madvise, write, the exits), installed with `prctl` and with `syscall
/// (SYS_seccomp)`, recorded in exact mode with its collector stopped for a while: the
/// queue fills, the program's waits for room spin (none sleeps: a futex would have killed
/// it), it exits 0, and the profile holds every allocation and free, nothing lost.
#[test]
fn a_program_under_a_seccomp_filter_is_recorded_exactly() {
    for (how, n) in [("prctl", 2_000_000u64), ("seccomp", 300_000)] {
        let dir = scratch(&format!("sandbox-{how}"));
        let child = start(&dir, n, how, "kill", &[]);
        std::thread::sleep(Duration::from_millis(50));
        stop_collector(&child, 300);
        let out = finish(child, Duration::from_secs(600));
        assert_ok(&out, 0);
        let err = text(&out.stderr);
        let (bytes, blocks) = truth(n);
        let said = format!("truth {n} allocations {bytes} bytes");
        assert!(text(&out.stdout).contains(&said), "{how}: {}{err}", text(&out.stdout));
        let (slept, spun) = waits(&err);
        assert!(slept == 0 && spun >= 1, "{how}: {slept} slept, {spun} spun: {err}");
        let p = read(&dir.join("s.mprof"));
        assert!(p.lost.is_none(), "{how}: {:?}", p.lost);
        assert_eq!(totals(&p, "churn_site"), (bytes, blocks, 0.0, 0.0), "{how}: {err}");
    }
}

/// A filter installed where no library sees it (a `syscall` instruction of the program's
/// own, as Go's runtime makes) that fails every other call with EPERM: the first sleep for
/// room comes back refused and the waits spin from then on; the collector, stopped past
/// its heartbeat's freshness, cannot be looked up (`kill` and `/proc` refused too), so its
/// heartbeat's long bound keeps the program waiting rather than dropping. Nothing lost.
#[test]
fn a_filter_that_fails_the_futex_turns_the_waits_into_spins() {
    let n = 300_000;
    let dir = scratch("sandbox-raw-errno");
    let child = start(&dir, n, "raw", "errno", &[]);
    std::thread::sleep(Duration::from_millis(50));
    stop_collector(&child, 800);
    let out = finish(child, Duration::from_secs(600));
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let (slept, spun) = waits(&err);
    assert!(slept <= 1 && spun >= 1, "{slept} slept, {spun} spun: {err}");
    let p = read(&dir.join("s.mprof"));
    assert!(p.lost.is_none(), "{:?}", p.lost);
    let (bytes, blocks) = truth(n);
    assert_eq!(totals(&p, "churn_site"), (bytes, blocks, 0.0, 0.0), "{err}");
}

/// A preload library whose shared ring is of another version than the collector's (made
/// here by `MEMPROF_TEST_RING_VERSION`, as another build's library would be): the collector
/// refuses the ring and says so, naming both versions and the library; the program, whose
/// exact-mode queue fills at once, stops waiting for a collector that will never drain it
/// and runs to its end, unprofiled.
#[test]
fn a_ring_of_another_version_is_refused_and_the_program_runs_on() {
    let n = 300_000;
    let dir = scratch("sandbox-version");
    let child = start(&dir, n, "none", "kill", &[("MEMPROF_TEST_RING_VERSION", "999")]);
    let out = finish(child, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (bytes, _) = truth(n);
    assert!(text(&out.stdout).contains(&format!("truth {n} allocations {bytes} bytes")));
    let err = text(&out.stderr);
    let said = err.lines().find(|l| l.contains("is not profiled")).expect(&err);
    assert!(said.contains("shared ring version 999, this memprof's is "), "{said}");
    // The library the program loaded: the private copy of the one beside `memprof`
    // (`record/command/bundled.rs`).
    assert!(said.contains("/libmemprof_preload-") && said.contains(".so)"), "{said}");
    assert!(!err.contains("panicked"), "{err}");
}
