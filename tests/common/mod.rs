//! Helpers that more than one test binary needs, in one place: each binary includes this
//! file as its `common` module (`mod common;`, or `#[path = "../common/mod.rs"]` from a
//! binary in its own directory), so each has its own copy of the statics below.
//!
//! # 1. What belongs here
//!
//! A helper two or more binaries use: the session lock, scratch directories, the paths of
//! `fixtures/`, output as text, the one-line error check, the fuzz binaries' case count,
//! `go tool pprof` (the independent decoder the pprof checks use), and `strace`'s count of
//! the system calls a program's threads made between two marks. A helper only one binary
//! needs stays in it.
//!
//! # 2. Why dead code is allowed
//!
//! Every binary compiles the whole file but uses only part of it; the rest would warn as
//! dead code in that binary (and `-D warnings` makes warnings errors).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Mutex, MutexGuard};

/// The `memprof` executable under test.
pub const MEMPROF: &str = env!("CARGO_BIN_EXE_memprof");

/// Serializes the tests that start sessions: a session and the global allocator's state are
/// process-global. A test that failed while holding the lock poisons it; the next one still
/// runs (a failed test must not block the others).
pub fn serial() -> MutexGuard<'static, ()> {
    static SESSIONS: Mutex<()> = Mutex::new(());
    SESSIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The fuzz binaries' cases per property: `PROPTEST_CASES`, or 512 (a few seconds each).
pub fn proptest_cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A new, empty directory for one test, under this run's own temporary directory (names
/// are the tests' own: each module prefixes its names).
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memprof-tests-{}", std::process::id())).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The repository's `fixtures/` directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The path of a file under `fixtures/`.
pub fn fixture_file(name: &str) -> String {
    fixtures().join(name).display().to_string()
}

/// A failing command: exit code `code` (any non-zero one when `None`), exactly one line on
/// stderr naming the problem (besides the unwind check's report), no panic.
pub fn assert_one_line_error(out: &Output, code: Option<i32>, needle: &str) {
    let err: String = text(&out.stderr)
        .lines()
        .filter(|l| !l.contains("unwind check:"))
        .map(|l| format!("{l}\n"))
        .collect();
    match code {
        Some(c) => assert_eq!(out.status.code(), Some(c), "stderr: {err}"),
        None => {
            assert_ne!(out.status.code(), Some(0), "stderr: {err}");
            assert!(out.status.code().is_some(), "exited normally: {err}");
        }
    }
    assert_eq!(err.lines().count(), 1, "one line expected: {err:?}");
    assert!(err.starts_with("memprof: error: "), "{err:?}");
    assert!(err.contains(needle), "{err:?} should mention {needle:?}");
    assert!(!err.contains("panicked"), "{err:?}");
}

/// Says on the terminal, past the test harness's capture of `eprintln!`, that a check was
/// skipped and how to get what it needs: one line, seen even when every test passes.
pub fn skipped(what: &str, how: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "skipped: {what} ({how})");
}

/// `go tool pprof -raw SOURCE` (a file or a URL; `go` is the independent protobuf decoder
/// the pprof checks use): the sums of the four sample values (alloc_objects, alloc_space,
/// inuse_objects, inuse_space; values may be negative) and the text. `None`, with one line
/// on the terminal saying what `what` check was skipped, when `go` is not installed outside
/// CI; a panic in CI (`.ci/run` installs it).
pub fn go_pprof_raw(source: &std::ffi::OsStr, what: &str) -> Option<([i64; 4], String)> {
    let raw = go_pprof(&["-raw"], source, what)?;
    // Sample lines look like "   3   600   2   400: 1 2 3"; label lines like
    // "                bytes:[100]".
    let mut sums = [0i64; 4];
    let samples = raw.split("Samples:").nth(1).unwrap_or("");
    for line in samples.split("Locations").next().unwrap_or("").lines() {
        let Some((values, _)) = line.split_once(':') else { continue };
        let nums: Result<Vec<i64>, _> = values.split_whitespace().map(str::parse).collect();
        if let Ok(v) = nums {
            if v.len() == 4 {
                for (acc, x) in sums.iter_mut().zip(v) {
                    *acc += x;
                }
            }
        }
    }
    Some((sums, raw))
}

/// `go tool pprof ARGS SOURCE`'s standard output (see [`go_pprof_raw`] for when it is
/// `None`).
pub fn go_pprof(args: &[&str], source: &std::ffi::OsStr, what: &str) -> Option<String> {
    let go = std::process::Command::new("go").arg("version").output();
    if !matches!(go, Ok(ref o) if o.status.success()) {
        if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
            panic!("`go` is not on PATH, and CI requires the go tool pprof check");
        }
        skipped(what, "`go` is not on PATH; Debian: apt-get install golang-go");
        return None;
    }
    let home = scratch("go-home");
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new("go")
        .arg("tool")
        .arg("pprof")
        .args(args)
        .arg(source)
        .env("HOME", &home)
        .env("PPROF_TMPDIR", &home)
        .env("GOFLAGS", "-mod=mod")
        .env("PPROF_BINARY_PATH", &home)
        .output()
        .expect("running go tool pprof");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof {args:?} {source:?} failed: {}\n{stdout}",
        text(&out.stderr)
    );
    Some(stdout)
}

/// A gzip-compressed pprof profile, decoded.
pub fn decode_pprof(gz: &[u8]) -> pprof::protos::Profile {
    use pprof::protos::Message as _;
    use std::io::Read as _;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz).read_to_end(&mut raw).unwrap();
    pprof::protos::Profile::decode(&raw[..]).unwrap()
}

/// Whether `strace` runs here; without it the `what` check is skipped (said on the
/// terminal), unless CI is set, where its absence fails.
pub fn have_strace(what: &str) -> bool {
    let out = std::process::Command::new("strace").arg("-V").output();
    let ok = out.is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI is set but strace is missing");
        skipped(what, "`strace` is not on PATH; Debian: apt-get install strace");
    }
    ok
}

/// The system calls each marked thread of `trace` (an `strace -f -o` file) made between its
/// marks (`write(-1, "begin", 5)` and `write(-1, "end", 3)`, which fail and do nothing
/// else), by name, less what a wait for the collector makes: `futex`, and the collector
/// looked up during the wait (`kill(PID, 0)`, its `/proc/PID/stat` opened, read, closed);
/// with how many threads were marked and how many futex calls were left out.
pub fn syscalls_between_marks(
    trace: &str,
) -> (std::collections::BTreeMap<String, u64>, usize, u64) {
    use std::collections::BTreeMap;
    /// Per marked thread inside its loop: the descriptors of `/proc/PID/stat` it opened
    /// there, and whether such an open is unfinished (its result on a later line).
    #[derive(Default)]
    struct Window {
        fds: Vec<String>,
        opening: bool,
    }
    // The `n`th argument of a call, as strace wrote it.
    let arg = |call: &str, n: usize| -> String {
        let inside = call.split_once('(').map_or("", |(_, rest)| rest);
        let inside = inside.split([')', '<']).next().unwrap_or("");
        inside.split(", ").nth(n).unwrap_or("").trim().to_owned()
    };
    let result = |call: &str| -> String {
        call.rsplit_once("= ").map_or("", |(_, r)| r).split(' ').next().unwrap_or("").to_owned()
    };
    let mut open: BTreeMap<&str, Window> = BTreeMap::new();
    let mut left = BTreeMap::new();
    let (mut marked, mut futexes) = (0, 0);
    for line in trace.lines() {
        let Some((tid, call)) = line.split_once(' ') else { continue };
        let call = call.trim_start();
        if call.starts_with("write(-1, \"begin\"") {
            open.insert(tid, Window::default());
            marked += 1;
            continue;
        }
        if call.starts_with("write(-1, \"end\"") {
            open.remove(tid);
            continue;
        }
        let Some(w) = open.get_mut(tid) else { continue };
        // A call strace split in two is counted at its start.
        if call.starts_with("<... openat resumed>") && w.opening {
            w.opening = false;
            w.fds.push(result(call));
        }
        if call.starts_with("<...") || call.starts_with("---") || call.starts_with("+++") {
            continue;
        }
        let name = call.split('(').next().unwrap_or("").to_owned();
        let explained = match name.as_str() {
            "futex" => {
                futexes += 1;
                true
            }
            "kill" => arg(call, 1) == "0",
            "openat"
                if arg(call, 1).starts_with("\"/proc/") && arg(call, 1).ends_with("/stat\"") =>
            {
                if call.contains("<unfinished") {
                    w.opening = true;
                } else {
                    w.fds.push(result(call));
                }
                true
            }
            "read" | "close" => w.fds.contains(&arg(call, 0)),
            _ => false,
        };
        if !explained {
            *left.entry(name).or_insert(0) += 1;
        }
    }
    (left, marked, futexes)
}
