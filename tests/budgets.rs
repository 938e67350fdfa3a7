//! `memprof::testing::Budgets`: the allocation budget file through real `measure` scopes:
//! accept writes the measured figures, check passes them and names what grew, threads
//! accepting into one file lose nothing, a damaged file is reported and left as it is.
#![cfg(feature = "budgets")]

use memprof::testing::{measure, Allocated, BudgetMode, Budgets};
use std::hint::black_box;
use std::path::{Path, PathBuf};

#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

const ACCEPT: &str = "MEMPROF_BUDGETS=accept cargo test";

/// A file as a developer keeps it: a comment, a budget of another test, its own order.
const TEMPLATE: &str = "# Budgets of the parser.\n\
                        [\"parser::tests::big\"] # kept by hand\n\
                        bytes = 100000\n\
                        \n\
                        # the end\n";

/// A directory of the test's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("memprof-budgets-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    /// A copy of `text` as the budget file.
    fn file(&self, text: &str) -> PathBuf {
        let p = self.0.join("alloc-budgets.toml");
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[inline(never)]
fn one_kilobyte() -> usize {
    black_box(Vec::<u8>::with_capacity(1000)).capacity()
}

#[inline(never)]
fn grow_the_buffer() -> usize {
    black_box(Vec::<u8>::with_capacity(3000)).capacity()
}

#[inline(never)]
fn half_a_kilobyte() -> usize {
    black_box(Vec::<u8>::with_capacity(500)).capacity()
}

fn figures(s: &Allocated) -> (u64, u64, u64, u64) {
    (s.blocks, s.bytes, s.peak_bytes, s.live_bytes)
}

fn accept(p: &Path, name: &str, s: &Allocated) {
    Budgets::at(p).mode(BudgetMode::Accept).check(name, s);
}

fn check(p: &Path, name: &str, s: &Allocated) {
    Budgets::at(p).mode(BudgetMode::Check).check(name, s);
}

/// The text of the panic of `f`.
fn panic_text(f: impl FnOnce()) -> String {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("no panic");
    e.downcast_ref::<String>().cloned().unwrap_or_default()
}

/// Accept writes what was measured; check passes it, fails on more, naming the figure, the
/// budget and the function that allocated, passes an improvement.
#[test]
fn accept_then_check_round_trip() {
    let d = Scratch::new("round");
    let p = d.file(TEMPLATE);
    let (_, s) = measure(one_kilobyte);
    assert_eq!(figures(&s), (1, 1000, 1000, 0), "{s}");

    let msg = panic_text(|| check(&p, "round_trip", &s));
    assert!(
        msg.starts_with(&format!("no allocation budget named \"round_trip\" in {}", p.display()))
    );
    assert!(msg.ends_with(&format!("write it with: {ACCEPT}")), "{msg}");

    accept(&p, "round_trip", &s);
    let text = std::fs::read_to_string(&p).unwrap();
    let new = "[round_trip]\nblocks = 1\nbytes = 1000\npeak_bytes = 1000\nlive_bytes = 0\n";
    assert_eq!(text, TEMPLATE.replace("\n\n# the end", &format!("\n\n{new}\n# the end")), "{text}");
    check(&p, "round_trip", &s);

    let (_, more) = measure(|| one_kilobyte() + grow_the_buffer());
    assert_eq!(figures(&more), (2, 4000, 3000, 0), "{more}");
    let msg = panic_text(|| check(&p, "round_trip", &more));
    assert!(
        msg.starts_with(&format!("allocation budget \"round_trip\" ({}) exceeded:\n", p.display())),
        "{msg}"
    );
    assert!(msg.contains("  blocks: 2 measured, budget 1 (+1)\n"), "{msg}");
    assert!(msg.contains("  bytes: 4000 measured, budget 1000 (+3000)\n"), "{msg}");
    assert!(msg.contains("  peak_bytes: 3000 measured, budget 1000 (+2000)\n"), "{msg}");
    assert!(!msg.contains("live_bytes:"), "within its budget: {msg}");
    assert!(msg.contains("2 blocks, 4000 bytes allocated"), "the figures: {msg}");
    #[cfg(feature = "report")]
    assert!(msg.contains("grow_the_buffer"), "the site: {msg}");
    assert!(msg.ends_with(&format!("\naccept with: {ACCEPT}")), "{msg}");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), text, "a check writes nothing");

    let (_, less) = measure(half_a_kilobyte);
    check(&p, "round_trip", &less);
    assert_eq!(std::fs::read_to_string(&p).unwrap(), text);
    // Accepting the improvement lowers the ceilings, in place.
    accept(&p, "round_trip", &less);
    let lowered = text.replace("bytes = 1000\npeak_bytes = 1000", "bytes = 500\npeak_bytes = 500");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), lowered);
    assert!(std::panic::catch_unwind(|| check(&p, "round_trip", &s)).is_err());
}

/// Names with quotes, newlines, `::` and unicode are keys like any other.
#[test]
fn hostile_names_round_trip() {
    let d = Scratch::new("names");
    let p = d.0.join("alloc-budgets.toml");
    let names = [
        "parser::tests::big",
        "\"quoted\" 'and' \\escaped\\",
        "two\nlines\r\n\ttabbed",
        "ünïcødé ✓ 名前",
        "[not a table]",
        "a.b = 1 # not a key",
        "",
    ];
    let (_, s) = measure(one_kilobyte);
    let (_, more) = measure(grow_the_buffer);
    for name in names {
        accept(&p, name, &s);
    }
    for name in names {
        check(&p, name, &s);
        let msg = panic_text(|| check(&p, name, &more));
        assert!(msg.contains(&format!("allocation budget {name:?} (")), "{msg}");
    }
    let msg = panic_text(|| check(&p, "a", &s));
    assert!(msg.contains("no allocation budget named \"a\""), "{msg}");
}

/// Sixteen threads accepting budgets of their own into one file at once: every one is
/// there at the end, with its figures, and no temporary file is left.
#[test]
fn threads_accepting_into_one_file_lose_no_budget() {
    let d = Scratch::new("threads");
    let p = d.file(TEMPLATE);
    let measured: Vec<(String, Allocated)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..16usize)
            .map(|i| {
                let p = &p;
                scope.spawn(move || {
                    let name = format!("threads::t{i}");
                    let (_, s) =
                        measure(|| black_box(Vec::<u8>::with_capacity(100 * (i + 1))).capacity());
                    assert_eq!(figures(&s), (1, 100 * (i as u64 + 1), 100 * (i as u64 + 1), 0));
                    accept(p, &name, &s);
                    check(p, &name, &s);
                    (name, s)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let text = std::fs::read_to_string(&p).unwrap();
    for (name, s) in &measured {
        check(&p, name, s);
        assert!(
            text.contains(&format!("[\"{name}\"]\nblocks = 1\nbytes = {}\n", s.bytes)),
            "{text}"
        );
    }
    assert!(text.starts_with("# Budgets of the parser.\n[\"parser::tests::big\"] # kept by hand\n"));
    assert!(text.ends_with("# the end\n"), "{text}");
    let left: Vec<_> = std::fs::read_dir(&d.0).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

/// A file that does not parse, or holds a key that is not a ceiling, is reported with its
/// path and left byte for byte as it was, by check and by accept.
#[test]
fn a_damaged_file_is_reported_and_left_alone() {
    let d = Scratch::new("damaged");
    let (_, s) = measure(one_kilobyte);
    let cases = [
        ("[round_trip]\nbytes = \n", "not valid TOML"),
        ("[round_trip]\nbytes = 1\n[round_trip]\n", "duplicate key"),
        ("[round_trip]\nbyte = 1000\n", "unknown key \"byte\" in the budget \"round_trip\""),
        ("[round_trip]\nbytes = -1\n", "bytes = -1 in the budget \"round_trip\""),
        ("[round_trip]\nbytes = \"1000\"\n", "bytes = \"1000\" in the budget \"round_trip\""),
    ];
    for (text, want) in cases {
        let p = d.file(text);
        for mode in [BudgetMode::Check, BudgetMode::Accept] {
            let msg = panic_text(|| Budgets::at(&p).mode(mode).check("round_trip", &s));
            assert!(msg.contains(want) && msg.contains(&p.display().to_string()), "{msg}");
            assert_eq!(std::fs::read(&p).unwrap(), text.as_bytes());
        }
    }
}

/// The use `docs/testing.md` shows: the crate's own `tests/alloc-budgets.toml`, in the mode
/// `MEMPROF_BUDGETS` says (this file's other tests choose theirs).
#[test]
fn assert_budget_reads_the_crate_file() {
    let (_, s) = measure(one_kilobyte);
    memprof::assert_budget!("budgets::one_kilobyte", s);
    let (v, s) = measure(|| {
        let mut v = Vec::<u64>::with_capacity(16);
        v.extend(0..16);
        black_box(v.iter().sum::<u64>());
        let keep = Box::new([7u8; 256]);
        (v, keep)
    });
    assert_eq!(figures(&s), (2, 384, 384, 384), "{s}");
    memprof::assert_budget!("budgets::two_blocks_kept", s);
    drop(v);
    // The same through an explicit path (figures equal to the budget: accept writes
    // nothing, check passes).
    let d = Scratch::new("macro");
    let p = d.file("[kept]\nlive_bytes = 384\n");
    memprof::assert_budget!("kept", s, &p);
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "[kept]\nlive_bytes = 384\n");
}

/// The budget file of [`from_the_environment`], when this binary runs it as a child.
const CHILD_FILE: &str = "MEMPROF_TEST_BUDGET_FILE";

/// Run only as a child of [`the_environment_accepts_with_one_command`]: checks a scope
/// against the file it is given, in the mode `MEMPROF_BUDGETS` says.
#[test]
#[ignore = "a child of the_environment_accepts_with_one_command"]
fn from_the_environment() {
    let Some(path) = std::env::var_os(CHILD_FILE) else { return };
    let (_, s) = measure(one_kilobyte);
    Budgets::at(PathBuf::from(path)).check("from_env", &s);
}

/// The whole round trip as a developer runs it: this test binary run again with
/// `MEMPROF_BUDGETS=accept` writes the budget; run without it, it passes; with a lowered
/// budget it fails and says how to accept; with a misspelt mode it fails saying the values.
#[test]
fn the_environment_accepts_with_one_command() {
    let dir = Scratch::new("env");
    let p = dir.0.join("alloc-budgets.toml");
    let run = |mode: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "from_the_environment", "--include-ignored", "--nocapture"]);
        cmd.env(CHILD_FILE, &p).env_remove("MEMPROF_BUDGETS");
        if let Some(mode) = mode {
            cmd.env("MEMPROF_BUDGETS", mode);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text.into_owned())
    };
    let (ok, out) = run(None);
    assert!(!ok && out.contains("no allocation budget named \"from_env\""), "{out}");
    let (ok, out) = run(Some("accept"));
    assert!(ok, "{out}");
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains("[from_env]\nblocks = 1\nbytes = 1000\n"), "{text}");
    let (ok, out) = run(None);
    assert!(ok, "{out}");
    std::fs::write(&p, text.replace("bytes = 1000\n", "bytes = 999\n")).unwrap();
    let (ok, out) = run(Some("check"));
    assert!(!ok && out.contains("bytes: 1000 measured, budget 999 (+1)"), "{out}");
    assert!(out.contains(ACCEPT), "{out}");
    let (ok, out) = run(Some("acept"));
    assert!(!ok && out.contains("MEMPROF_BUDGETS is \"acept\""), "{out}");
}
