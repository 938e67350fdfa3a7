//! One profiler a process, and attaches killed while a program forks flat out.
//!
//! `memprof attach` beside a running attach of the same process is refused in one line
//! that names the first attacher's pid, and changes nothing: the first profile holds the
//! service's known phase exactly (`--interval 1`: every allocation). An attacher killed
//! with SIGKILL once attached leaves its session running; the next attach says that it
//! takes it over, and its profile is exact. `fixtures/c/fork_storm.c` forks flat out with
//! two threads allocating beside it while attaches come and go, some killed at moments
//! spread over their run: it keeps forking (its progress advances after the last one) and
//! exits 0 on its own.

use std::time::{Duration, Instant};

use super::{check_profile, scratch, wait_timeout, Attach, Service};
use crate::common::{assert_one_line_error, text};
use crate::programs::{assert_ok, fixture, totals};

/// What the service's phase allocates at `leak_phase` and `churn_phase` (`service.c`).
const LEAK: (f64, f64, f64, f64) = (4_096_000.0, 1_000.0, 4_096_000.0, 1_000.0);
const CHURN: (f64, f64, f64, f64) = (5_000_000.0, 5_000.0, 0.0, 0.0);

#[test]
fn a_second_attach_is_refused_and_the_first_profile_is_whole() {
    let svc = Service::start(&["4"]);
    let dir = scratch("exclusive");
    let file = dir.join("first.mprof");
    let first = Attach::start(&dir, &["--interval", "1", "-o", file.to_str().unwrap()], svc.pid);
    first.wait_attached(svc.pid);
    let first_pid = first.child.id();
    let second_file = dir.join("second.mprof");
    let opts = ["--interval", "1", "--duration", "1s", "-o", second_file.to_str().unwrap()];
    let second = Attach::start(&dir, &opts, svc.pid).wait();
    assert_one_line_error(
        &second,
        Some(1),
        &format!("already attached by memprof (pid {first_pid}) since "),
    );
    assert!(!second_file.exists(), "the refused attach leaves no file");
    // The first attach samples on, every allocation of the phase included.
    svc.phase();
    let p = check_profile(&first.stop(libc::SIGINT), &file);
    assert_eq!(totals(&p, "leak_phase"), LEAK);
    assert_eq!(totals(&p, "churn_phase"), CHURN);
    svc.terminate();
}

#[test]
fn a_killed_attachers_session_is_taken_over_with_a_line() {
    let svc = Service::start(&["2"]);
    let dir = scratch("takeover");
    let dead = Attach::start(&dir, &["--interval", "1", "-o", "dead.mprof"], svc.pid);
    dead.wait_attached(svc.pid);
    let dead_pid = dead.child.id();
    // Dropped while running: SIGKILL, and reaped.
    drop(dead);
    let file = dir.join("after.mprof");
    let a = Attach::start(&dir, &["--interval", "1", "-o", file.to_str().unwrap()], svc.pid);
    a.wait_attached(svc.pid);
    let err = a.err.text();
    let line = format!("taking over process {} from memprof attach (pid {dead_pid})", svc.pid);
    assert!(err.contains(&line), "{err}");
    svc.phase();
    let out = a.stop(libc::SIGINT);
    let p = check_profile(&out, &file);
    assert_eq!(totals(&p, "leak_phase"), LEAK);
    assert_eq!(totals(&p, "churn_phase"), CHURN);
    svc.terminate();
}

/// The last `forks N` the storm printed.
fn forks(out: &str) -> u64 {
    out.lines()
        .filter_map(|l| l.strip_prefix("forks ")?.trim().parse().ok())
        .next_back()
        .unwrap_or(0)
}

#[test]
fn attaches_killed_at_random_moments_beside_a_fork_storm() {
    let mut storm = Service::start_program(&fixture("fork_storm"), &[], &["24", "threads"]);
    let dir = scratch("storm");
    // Killed at moments spread over an attach (before it traces, while it borrows a
    // thread, during its calls, attached, detaching), every other round; the others
    // detach by themselves after 300 ms.
    for round in 0..14u64 {
        let round_started = Instant::now();
        let file = dir.join(format!("s{round}.mprof"));
        let a =
            Attach::start(&dir, &["--duration", "0.3", "-o", file.to_str().unwrap()], storm.pid);
        if round % 2 == 1 {
            std::thread::sleep(Duration::from_millis(round * 29 % 400));
            drop(a);
        } else {
            let out = a.wait();
            assert_ok(&out, 0);
            let err = text(&out.stderr);
            assert!(err.contains(&format!("attached to {}", storm.pid)), "round {round}: {err}");
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", storm.pid)).unwrap();
        assert!(status.contains("TracerPid:\t0"), "traced after round {round}: {status}");
        // A call in the target that did not return would cost its 20 s timeout; a round is
        // well under a second alone, a few on a loaded machine.
        let took = round_started.elapsed();
        assert!(took < Duration::from_secs(15), "round {round} took {took:?}");
    }
    // Every thread runs on: the forks go on after the last attach.
    let before = forks(&storm.out.text());
    std::thread::sleep(Duration::from_millis(600));
    let after = forks(&storm.out.text());
    assert!(after > before, "the storm stopped forking at {before}:\n{}", storm.err.text());
    let status = wait_timeout(&mut storm.child);
    std::thread::sleep(Duration::from_millis(50));
    let out = storm.out.text();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{out}\n{}", storm.err.text());
    assert!(out.contains("storm ok"), "{out}");
}
