//! Helpers shared by the command tests.

use std::path::{Path, PathBuf};
use std::process::Output;

/// The `memprof` executable under test.
pub const MEMPROF: &str = env!("CARGO_BIN_EXE_memprof");

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

/// The path of a file under `fixtures/`.
pub fn fixture_file(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name).display().to_string()
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
