//! Children made without glibc's `fork` (a raw `clone(SIGCHLD)`, `clone3`): never in their
//! parent's profile, their own with `--follow-forks`; glibc's `fork` as before; and process
//! trees across PID namespaces (`unshare -p -f`): each process its own file, named by the
//! pid memprof sees.

use std::path::{Path, PathBuf};

use crate::record::{assert_ok, fixture, read, record, scratch, totals};

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
