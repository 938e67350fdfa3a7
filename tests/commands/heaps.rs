//! Every heap named: memory outside malloc (a runtime's, a collector's, the program's own
//! `mmap`) is told from what malloc holds free.

use std::process::Command;

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, fixture, record, scratch};

/// A program with a 256 MiB heap of its own beside 8 MiB of malloc: the split names the
/// 256 MiB as outside malloc, the allocator holds next to nothing free, and no malloc hint
/// is given (malloc_trim could not return a byte of it).
#[test]
fn a_heap_of_its_own_is_outside_malloc() {
    let dir = scratch("own-heap");
    let out = record(&dir, &["-o", "h.mprof", "--interval", "1"], &fixture("own_heap"), &[]);
    assert_ok(&out, 0);
    let table = text(&out.stderr);
    let gap = table
        .lines()
        .find(|l| l.starts_with("resident ") && l.contains(" = live heap "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(gap.contains(" + outside malloc 25"), "{gap}");
    assert!(!table.contains("malloc_trim"), "{table}");
    assert!(table.lines().any(|l| l.contains("is outside malloc: ")), "{table}");
    let v = crate::programs::report_json(&dir, "h.mprof");
    let num = |k: &str| v["gap"][k].as_f64().unwrap_or_else(|| panic!("gap.{k} in {v:#}"));
    let mib = (1u64 << 20) as f64;
    // The 256 MiB written, give or take what the process mapped besides (a few MiB), and
    // the pages of a mapping of malloc's that the kernel merged with it, which the split
    // takes out by their share of its length.
    let outside = num("outside_malloc_bytes");
    assert!(outside >= 255.0 * mib && outside < 264.0 * mib, "{v:#}");
    // Exact mode: the 8 MiB kept is the live heap (with stdout's buffer), and malloc keeps
    // little beside it.
    let live = v["heap"]["live_end_bytes"].as_f64().unwrap();
    assert!((8.0 * mib..8.0 * mib + 8192.0).contains(&live), "{v:#}");
    assert!(num("allocator_retained_bytes") < 4.0 * mib, "{v:#}");
    assert!(v["gap"]["hint"].is_null(), "{v:#}");
}

/// A Go program (here a C program with Go's build-information section, as a cgo binary
/// looks): a note above the table says Go's heap is not malloc's and where to look, and the
/// note is kept in the profile (`report`, the JSON). Linked statically, it is refused with
/// the same words and no "link it dynamically".
#[test]
fn a_go_program_is_named_and_its_note_kept() {
    let dir = scratch("go-note");
    let prog = fixture("go_marked");
    let out = record(&dir, &["-o", "g.mprof", "--interval", "1"], &prog, &[]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let note = err
        .lines()
        .find(|l| l.starts_with("note: go_marked is a Go program: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(note.contains("go tool pprof") && !note.contains("dynamically"), "{note}");
    // Above the table: before its column header.
    let at = |s: &str| err.find(s).unwrap_or_else(|| panic!("{s} in {err}"));
    assert!(at(note) < at("alloc bytes"), "{err}");
    let report =
        Command::new(MEMPROF).current_dir(&dir).args(["report", "g.mprof"]).output().unwrap();
    assert!(text(&report.stdout).lines().any(|l| l == note), "{}", text(&report.stdout));
    let v = crate::programs::report_json(&dir, "g.mprof");
    let notes = v["notes"].as_array().unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(notes.len(), 1, "{v:#}");
    assert_eq!(format!("note: {}", notes[0].as_str().unwrap()), note);

    let fixed = dir.join("go_marked_static");
    crate::programs::cc("go_marked.c", &fixed, &["-O2", "-static"]);
    let out = record(&dir, &["-o", "s.mprof"], &fixed, &[]);
    assert_ne!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(
        err.contains("is a statically linked Go program: Go's heap is the Go runtime's own"),
        "{err}"
    );
    assert!(!err.contains("(link it dynamically"), "{err}");
}
