//! `memprof record` of programs that start other programs: without `--follow-forks` the
//! programs started are named (through `sh -c`, `env`, `make`, hostile names); CPython is
//! run with `PYTHONMALLOC=malloc` unless told otherwise; with `--follow-forks` the tree is
//! written in its directory, summarised one row per process, and reported as one.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, fixture, read, record, scratch};

/// The note `… ran other programs …` of a run's stderr (in the table's header, or after
/// `memprof: ` when nothing was seen).
fn unfollowed_note(err: &str) -> Option<&str> {
    err.lines().find(|l| {
        l.trim_start_matches("memprof: ").starts_with("note: ") && l.contains("ran other programs")
    })
}

#[test]
fn programs_run_by_a_shell_or_env_are_named() {
    let dir = scratch("children-sh");
    let sites = fixture("sites");
    let prog = dir.join("prog");
    std::fs::copy(&sites, &prog).unwrap();
    let out = record(&dir, &["-o", "s.mprof"], Path::new("/bin/sh"), &["-c", "./prog 1"]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let note = unfollowed_note(&err).unwrap_or_else(|| panic!("a note names ./prog: {err}"));
    assert!(
        note.contains("/bin/sh ran other programs that were not profiled: ./prog (1×)"),
        "{note}"
    );
    assert!(note.ends_with("--follow-forks profiles them too"), "{note}");

    // `env NAME` is looked through (`launcher/through.rs`): the program itself is recorded.
    let out = record(&dir, &["-o", "e.mprof"], Path::new("/usr/bin/env"), &["./prog", "1"]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    assert!(err.contains("memprof: note: recording ./prog (looked through /usr/bin/env)"), "{err}");
    assert!(unfollowed_note(&err).is_none(), "{err}");

    // Nothing started, no note; with --follow-forks, no note either.
    let out = record(&dir, &["-o", "p.mprof"], &prog, &["1"]);
    assert_ok(&out, 0);
    assert!(unfollowed_note(&text(&out.stderr)).is_none(), "{}", text(&out.stderr));
    let out = record(
        &dir,
        &["--follow-forks", "-o", "f.mprof"],
        Path::new("/bin/sh"),
        &["-c", "./prog 1"],
    );
    assert_ok(&out, 0);
    assert!(unfollowed_note(&text(&out.stderr)).is_none(), "{}", text(&out.stderr));
}

/// A program's name is the program's string: a newline or an escape sequence in it is
/// printed escaped, never as itself.
#[test]
fn hostile_program_names_are_escaped() {
    let dir = scratch("children-hostile");
    let name = "./p\nfake: line\x1b[31mred";
    std::fs::copy(fixture("sites"), dir.join(name)).unwrap();
    let out =
        record(&dir, &["-o", "h.mprof"], Path::new("/bin/sh"), &["-c", "\"$1\" 1", "sh", name]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    // (The summary's `command:` line is the top table's, which prints the command line as
    // it is.)
    let note = unfollowed_note(&err).unwrap_or_else(|| panic!("{err}"));
    assert!(note.contains("./p\\nfake: line\\u{1b}[31mred (1×)"), "{note}");
    assert!(!note.contains('\x1b'), "no raw escape in the note: {note:?}");
}

/// `make` starts its recipes with `posix_spawn` or `vfork` (which run glibc's internal
/// `execve`, past the exec hooks): they are named too.
#[test]
fn make_recipes_are_named() {
    if Command::new("make").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI is set but make is missing");
        crate::common::skipped("the make test", "apt-get install make");
        return;
    }
    let dir = scratch("children-make");
    std::fs::copy(fixture("sites"), dir.join("prog")).unwrap();
    std::fs::write(dir.join("Makefile"), "all:\n\t./prog 1\n\t./prog 1 > /dev/null\n").unwrap();
    let out = record(&dir, &["-o", "m.mprof"], Path::new("make"), &["-s"]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let note = unfollowed_note(&err).unwrap_or_else(|| panic!("a note names ./prog: {err}"));
    // The first recipe line is run directly, the second (a redirection) by the shell.
    assert!(
        note.trim_start_matches("memprof: ").starts_with("note: make ran other programs"),
        "{note}"
    );
    assert!(note.contains("./prog (1×)") && note.contains("sh (1×)"), "{note}");
}

/// The real CPython executable (not a version manager's shim): `sys.executable`.
fn cpython() -> Option<PathBuf> {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output();
    let exe = out.ok().filter(|o| o.status.success()).map(|o| text(&o.stdout).trim().to_owned());
    let exe = exe.filter(|e| !e.is_empty()).map(PathBuf::from);
    if exe.is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI is set but python3 is missing");
        crate::common::skipped("the CPython test", "apt-get install python3");
    }
    exe
}

/// A JSON round trip of 200 000 records. With the default settings `record` sees its
/// heap (close to what tracemalloc, CPython's own tracer, counts at its peak); with
/// `--keep-pymalloc`, pymalloc's arenas hide most of it.
#[test]
fn cpython_heap_is_seen_by_default() {
    let Some(py) = cpython() else { return };
    let dir = scratch("children-python");
    let work = "import json; d=[{'a':i,'b':str(i)*10} for i in range(200000)]; \
                s=json.dumps(d); x=json.loads(s)";
    let traced = Command::new(&py)
        .args(["-c", &format!("import tracemalloc; tracemalloc.start(); {work}; print(tracemalloc.get_traced_memory()[1])")])
        .output()
        .unwrap();
    let known: f64 = text(&traced.stdout).trim().parse().expect("tracemalloc's peak");
    let run = |opts: &[&str], file: &str| {
        let mut cmd = Command::new(MEMPROF);
        cmd.current_dir(&dir).env_remove("PYTHONMALLOC").arg("record").args(opts);
        let out = cmd.args(["--interval", "64K", "-o", file, "--"]).arg(&py).args(["-c", work]);
        let out = out.output().unwrap();
        assert_ok(&out, 0);
        (read(&dir.join(file)).peak.bytes, text(&out.stderr))
    };
    let (peak, err) = run(&[], "py.mprof");
    assert!(
        peak > 0.85 * known && peak < 1.5 * known,
        "peak {peak} vs tracemalloc's {known}: {err}"
    );
    assert!(
        err.lines().any(|l| l
            .trim_start_matches("memprof: ")
            .starts_with("note: CPython ran with PYTHONMALLOC=malloc")),
        "{err}"
    );
    let (hidden, err) = run(&["--keep-pymalloc"], "kept.mprof");
    assert!(hidden < 0.5 * known, "pymalloc hides the objects: {hidden} vs {known}: {err}");
    assert!(err.contains("note: CPython kept its own allocator"), "{err}");
    // Not CPython: no note.
    let out = record(&dir, &["-o", "c.mprof"], &fixture("sites"), &["1"]);
    assert!(!text(&out.stderr).contains("CPython"), "{}", text(&out.stderr));
}

/// `sh -c "sites 1; diffsites"` under `--follow-forks`: the shell and the two programs it
/// runs (each forked, or the last one exec'd in the shell's own pid, as the shell likes).
fn record_tree(dir: &Path, file: &str) -> std::process::Output {
    let cmd = format!("'{}' 1; '{}'", fixture("sites").display(), fixture("diffsites").display());
    record(
        dir,
        &["--interval", "1", "--follow-forks", "-o", file],
        Path::new("/bin/sh"),
        &["-c", &cmd],
    )
}

/// The profiles of a tree, one per process, in its directory; one table row per process
/// above the merged top table; one HTML page; `report DIR` and `report ROOT` read the
/// tree; whatever reports one process at a time names the file to pass.
#[test]
fn follow_forks_writes_the_tree_in_its_directory() {
    let dir = scratch("children-tree");
    let out = record_tree(&dir, "t.mprof");
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let mut beside: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    beside.sort();
    assert_eq!(beside, ["t.mprof", "t.mprof.d", "t.mprof.html", "t.mprof.svg"], "{err}");
    let tree = dir.join("t.mprof.d");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::symlink_metadata(&tree).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the tree's directory is private");
    let children = memprof::profile::tree::children(&dir.join("t.mprof"));
    assert_eq!(children.len(), 2, "sites and diffsites: {children:?}");
    assert!(children.iter().all(|c| c.starts_with(&tree)), "{children:?}");

    // The table: three rows, the shell first, each naming its program and file.
    let table: Vec<&str> =
        err.lines().skip_while(|l| !l.starts_with("processes: ")).take(5).collect();
    assert_eq!(table.first(), Some(&"processes: 3 in the tree"), "{err}");
    assert!(table[2].contains(" dash ") || table[2].contains(" sh "), "{table:?}");
    for prog in ["sites", "diffsites"] {
        let row = table
            .iter()
            .find(|l| l.contains(&format!(" {prog} ")))
            .unwrap_or_else(|| panic!("{table:?}"));
        assert!(row.contains("t.mprof.d/"), "the row names the file: {row}");
    }
    assert!(err.contains("leak_site"), "the merged top table follows: {err}");
    assert!(err.contains("wrote HTML report") && err.contains("t.mprof.d/ (3 processes"), "{err}");
    assert!(std::fs::metadata(dir.join("t.mprof.html")).unwrap().len() > 10_000);
    assert!(err.lines().all(|l| l.len() < 400), "no line lists every file: {err}");

    // report reads the tree by its directory or its root.
    for arg in ["t.mprof.d", "t.mprof.d/", "t.mprof"] {
        let o = Command::new(MEMPROF).current_dir(&dir).args(["report", arg]).output().unwrap();
        assert_ok(&o, 0);
        let s = text(&o.stdout);
        assert!(s.starts_with("processes: 3 in the tree"), "{arg}: {s}");
        assert!(s.contains("small_site") && s.contains("steady_site"), "{arg}: {s}");
    }
    // One process at a time: a directory or several files are refused, naming a file; the
    // root file is reported alone, with a note naming a child's file.
    let report = |args: &[&str]| {
        Command::new(MEMPROF).current_dir(&dir).arg("report").args(args).output().unwrap()
    };
    for args in [
        &["t.mprof.d", "--view", "peak"][..],
        &["t.mprof.d", "--at", "1ms"],
        &["t.mprof.d", "--short-lived", "1ms"],
    ] {
        let o = report(args);
        crate::common::assert_one_line_error(
            &o,
            Some(1),
            "pass one file of the tree, e.g. t.mprof (the program's) or t.mprof.d/",
        );
    }
    let two = [dir.join("t.mprof"), children[0].clone()];
    let o =
        Command::new(MEMPROF).arg("report").args(&two).args(["--view", "peak"]).output().unwrap();
    crate::common::assert_one_line_error(&o, Some(1), &format!("e.g. {}", two[0].display()));
    let o = report(&["t.mprof", "--view", "peak"]);
    assert_ok(&o, 0);
    let e = text(&o.stderr);
    assert!(e.contains("t.mprof alone is reported") && e.contains("e.g. t.mprof.d/"), "{e}");
    assert!(!text(&o.stdout).starts_with("processes:"), "{}", text(&o.stdout));
    // --html of the tree: one page.
    let o = report(&["t.mprof.d", "--html", "tree.html"]);
    assert_ok(&o, 0);
    let html = std::fs::read_to_string(dir.join("tree.html")).unwrap();
    assert!(html.contains("\"procs\":[") && html.contains("diffsites"), "the tree's page");
}

/// The tree's directory is never followed through a symlink, never an earlier run's
/// without --force, and --force replaces the link, not what it points to.
#[test]
fn the_tree_directory_is_created_safely() {
    let dir = scratch("children-tree-safe");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("s.mprof.d")).unwrap();
    let out = record_tree(&dir, "s.mprof");
    crate::common::assert_one_line_error(&out, Some(1), "s.mprof.d: it exists");
    assert!(!dir.join("s.mprof").exists(), "nothing is left of the refused run");
    let out = record(
        &dir,
        &["--force", "--follow-forks", "-o", "s.mprof"],
        Path::new("/bin/sh"),
        &["-c", "true"],
    );
    assert_ok(&out, 0);
    assert!(std::fs::symlink_metadata(dir.join("s.mprof.d")).unwrap().is_dir(), "a directory now");
    assert!(
        std::fs::read_dir(&elsewhere).unwrap().next().is_none(),
        "the link's target is untouched"
    );
    // An earlier run's tree needs --force.
    let out =
        record(&dir, &["--follow-forks", "-o", "s.mprof"], Path::new("/bin/sh"), &["-c", "true"]);
    crate::common::assert_one_line_error(&out, Some(1), "exists");
}
