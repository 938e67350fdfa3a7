//! `--unwinder auto` on programs built as distributions build them (no frame pointers), and
//! the note when a run's stacks could not be walked.

use crate::common::text;
use crate::programs::{assert_ok, fixture, read, record, scratch};

/// The folded stacks of a profile, one line per stack.
fn folded(p: &memprof::profile::Profile) -> String {
    memprof::report::collapsed(p, memprof::report::View::Alloc).join("\n")
}

/// An `-O2` C program (Debian's gcc omits frame pointers) under `--unwinder auto` is walked
/// with DWARF: its stacks reach `main`, exactly as `--unwinder dwarf` records them, and no
/// note says they are shallow.
#[test]
fn auto_walks_an_o2_c_program_like_dwarf() {
    let dir = scratch("unwinder-auto");
    let prog = fixture("sites");
    let mut stacks = Vec::new();
    for u in ["auto", "dwarf"] {
        let file = format!("{u}.mprof");
        let out = record(&dir, &["--interval", "1", "--unwinder", u, "-o", &file], &prog, &[]);
        assert_ok(&out, 0);
        assert!(!text(&out.stderr).contains("end after one frame"), "{}", text(&out.stderr));
        stacks.push(folded(&read(&dir.join(&file))));
    }
    assert!(stacks[0].lines().all(|l| l.contains(";main;")), "{}", stacks[0]);
    assert_eq!(stacks[0], stacks[1]);
}

/// Frame pointers forced on the same program cannot walk past the allocating function:
/// the summary says so, and names the unwinder to use.
#[test]
fn shallow_stacks_are_reported() {
    let dir = scratch("unwinder-fp");
    let prog = fixture("sites");
    let out = record(&dir, &["--interval", "1", "--unwinder", "fp", "-o", "fp.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    assert!(
        err.contains("stacks end after one frame") && err.contains("--unwinder dwarf"),
        "{err}"
    );
}
