//! Children made without glibc's `fork` (a raw `clone(SIGCHLD)`, `clone3`): never in their
//! parent's profile, their own with `--follow-forks`; glibc's `fork` as before; and process
//! trees across PID namespaces (`unshare -p -f`): each process its own file, named by the
//! pid memprof sees.

use std::path::{Path, PathBuf};

use crate::programs::{assert_ok, fixture, read, record, scratch, totals};

/// The files of a tree's directory (`<output>.d/`), sorted.
fn tree_files(output: &Path) -> Vec<PathBuf> {
    let mut files = memprof::profile::tree::children(output);
    files.sort();
    files
}

/// `raw_clone` in exact mode: the parent keeps its 100 blocks of 1000 B (`parent_keep`), and
/// each of its two children (one by `clone`, one by `clone3`) frees its copies of them and
/// allocates 50 blocks of 3000 B (`child_alloc`). Without `--follow-forks` nothing of the
/// children is anywhere: the parent's blocks stay live in its profile.
#[test]
fn raw_clone_children_without_follow_forks() {
    let dir = scratch("clones-unfollowed");
    let out = record(&dir, &["--interval", "1", "-o", "c.mprof"], &fixture("raw_clone"), &[]);
    assert_ok(&out, 0);
    let p = read(&dir.join("c.mprof"));
    assert!(p.complete, "{:?}", p.warnings);
    assert_eq!(totals(&p, "parent_keep"), (100_000.0, 100.0, 100_000.0, 100.0));
    assert_eq!(totals(&p, "child_alloc"), (0.0, 0.0, 0.0, 0.0), "no child's allocation");
    assert!(tree_files(&dir.join("c.mprof")).is_empty(), "no child's profile");
}

/// With `--follow-forks` each raw child has a profile of its own, with its own allocations
/// only: its frees of the parent's blocks reach neither profile.
#[test]
fn raw_clone_children_follow_forks() {
    let dir = scratch("clones-followed");
    let opts = ["--interval", "1", "--follow-forks", "-o", "c.mprof"];
    let out = record(&dir, &opts, &fixture("raw_clone"), &[]);
    assert_ok(&out, 0);
    let root = read(&dir.join("c.mprof"));
    assert!(root.complete, "{:?}", root.warnings);
    assert_eq!(totals(&root, "parent_keep"), (100_000.0, 100.0, 100_000.0, 100.0));
    assert_eq!(totals(&root, "child_alloc").1, 0.0);
    let children = tree_files(&dir.join("c.mprof"));
    assert_eq!(children.len(), 2, "one profile per child: {children:?}");
    for c in &children {
        let p = read(c);
        assert_eq!(totals(&p, "child_alloc"), (150_000.0, 50.0, 150_000.0, 50.0), "{c:?}");
        assert_eq!(totals(&p, "parent_keep"), (0.0, 0.0, 0.0, 0.0), "{c:?}");
        assert_eq!(p.header.ppid, root.header.pid, "{c:?}: the parent named");
        let name = c.file_name().unwrap().to_str().unwrap();
        assert_eq!(name, format!("{}.mprof", p.header.pid), "named by its pid");
    }
}

/// The preload library set by hand (`LD_PRELOAD`, no `record`): each process writes its
/// own file, and a drain thread of the parent's holds the session's locks often (a raw
/// child takes them as free). Five runs each way, as the `clone` lands at another moment
/// of that thread's work each time.
#[test]
fn raw_clone_children_under_a_hand_set_preload_with_and_without_follow_forks() {
    let dir = scratch("clones-by-hand");
    let lib = Path::new(crate::common::MEMPROF).parent().unwrap().join("libmemprof_preload.so");
    for run in 0..10 {
        let follow = run % 2 == 0;
        let file = dir.join(format!("h{run}.mprof"));
        let out = std::process::Command::new(fixture("raw_clone"))
            .env("LD_PRELOAD", &lib)
            .env("MEMPROF_INTERVAL", "1")
            .env("MEMPROF_FOLLOW_FORKS", if follow { "1" } else { "0" })
            .env("MEMPROF_OUTPUT", &file)
            .output()
            .unwrap();
        let err = crate::common::text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.is_empty(), "nothing said: {err}");
        let p = read(&file);
        assert_eq!(totals(&p, "parent_keep"), (100_000.0, 100.0, 100_000.0, 100.0), "{run}");
        assert_eq!(totals(&p, "child_alloc").1, 0.0, "{run}");
        let children = tree_files(&file);
        assert_eq!(children.len(), if follow { 2 } else { 0 }, "{run}: {children:?}");
        for c in &children {
            let p = read(c);
            assert_eq!(totals(&p, "child_alloc"), (150_000.0, 50.0, 150_000.0, 50.0), "{c:?}");
            assert_eq!(totals(&p, "parent_keep").1, 0.0, "{c:?}");
        }
    }
}

/// The same program with glibc's `fork` (the fork handlers run): as before, with and
/// without following.
#[test]
fn raw_clone_fixture_with_glibc_fork() {
    let dir = scratch("clones-fork");
    let out = record(&dir, &["--interval", "1", "-o", "u.mprof"], &fixture("raw_clone"), &["fork"]);
    assert_ok(&out, 0);
    let p = read(&dir.join("u.mprof"));
    assert_eq!(totals(&p, "parent_keep"), (100_000.0, 100.0, 100_000.0, 100.0));
    assert_eq!(totals(&p, "child_alloc").1, 0.0);
    assert!(tree_files(&dir.join("u.mprof")).is_empty());
    let opts = ["--interval", "1", "--follow-forks", "-o", "f.mprof"];
    let out = record(&dir, &opts, &fixture("raw_clone"), &["fork"]);
    assert_ok(&out, 0);
    let p = read(&dir.join("f.mprof"));
    assert_eq!(totals(&p, "parent_keep"), (100_000.0, 100.0, 100_000.0, 100.0));
    let children = tree_files(&dir.join("f.mprof"));
    assert_eq!(children.len(), 2, "{children:?}");
    for c in &children {
        let p = read(c);
        assert_eq!(totals(&p, "child_alloc"), (150_000.0, 50.0, 150_000.0, 50.0), "{c:?}");
        assert_eq!(totals(&p, "parent_keep").1, 0.0, "{c:?}");
    }
}

/// Whether `unshare -p -f` runs here (root, or user namespaces allowed); said when not.
fn pid_namespaces() -> bool {
    let probe = std::process::Command::new("unshare").args(["-p", "-f", "true"]).output();
    let ok = probe.is_ok_and(|o| o.status.success());
    if !ok {
        crate::common::skipped("process trees across PID namespaces", "`unshare -p -f` fails");
    }
    ok
}

/// The profile of a tree's directory that shows `site`, which must be the only one.
fn only_with(files: &[PathBuf], site: &str) -> (PathBuf, memprof::profile::Profile) {
    let mut with =
        files.iter().map(|f| (f.clone(), read(f))).filter(|(_, p)| totals(p, site).1 > 0.0);
    let one = with.next().unwrap_or_else(|| panic!("a profile shows {site}: {files:?}"));
    assert!(with.next().is_none(), "one profile shows {site}: {files:?}");
    one
}

/// `sh -c 'unshare -p -f ./prog_a a; unshare -p -f ./prog_b b'`: both programs are pid 1 in
/// their namespaces; each has a file of its own, named by the pid memprof sees, with its
/// own site and bytes exactly, the pid inside the namespace recorded beside it and its
/// parent (`unshare`) named as memprof sees it. Then the same with each namespace's own
/// `/proc` mounted (`--mount-proc`), where the process cannot name itself as memprof sees
/// it and the collector finds it.
#[test]
fn follow_forks_across_pid_namespaces() {
    if !pid_namespaces() {
        return;
    }
    let dir = scratch("clones-pidns");
    for name in ["prog_a", "prog_b"] {
        std::fs::copy(fixture("ns_child"), dir.join(name)).unwrap();
    }
    let runs = [
        ("t.mprof", "unshare -p -f ./prog_a a; unshare -p -f ./prog_b b"),
        ("m.mprof", "unshare -p -f --mount-proc ./prog_a linger; unshare -p -f ./prog_b b"),
    ];
    for (output, script) in runs {
        let opts = ["--interval", "1", "--follow-forks", "-o", output];
        let out = record(&dir, &opts, Path::new("/bin/sh"), &["-c", script]);
        assert_ok(&out, 0);
        let said = crate::common::text(&out.stdout);
        assert_eq!(said.matches("pid 1\n").count(), 2, "each is pid 1 inside: {said}");
        let files = tree_files(&dir.join(output));
        let (fa, a) = only_with(&files, "site_a");
        let (fb, b) = only_with(&files, "site_b");
        assert_eq!(totals(&a, "site_a"), (40_000.0, 40.0, 40_000.0, 40.0), "{fa:?}");
        assert_eq!(totals(&b, "site_b"), (150_000.0, 30.0, 150_000.0, 30.0), "{fb:?}");
        assert_eq!(totals(&a, "site_b").1 + totals(&b, "site_a").1, 0.0);
        assert_ne!(a.header.pid, b.header.pid, "{script}");
        for (f, p) in [(&fa, &a), (&fb, &b)] {
            assert_ne!(p.header.pid, 1, "{f:?}: the pid memprof sees");
            assert_eq!(p.header.ns_pid, 1, "{f:?}: the pid inside");
            let name = f.file_name().unwrap().to_str().unwrap();
            assert!(name.starts_with(&format!("{}.", p.header.pid)), "{f:?}");
            let parent = files.iter().map(|f| read(f)).find(|q| q.header.pid == p.header.ppid);
            let parent = parent.unwrap_or_else(|| panic!("{f:?}: its parent in the tree"));
            assert!(parent.header.executable.ends_with("unshare"), "{f:?}");
        }
    }
}
