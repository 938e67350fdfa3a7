//! What `memprof attach` reaches in a program that calls malloc as node's executable does
//! (`fixtures/c/reach.c`: not position-independent, bound at start, malloc's address taken,
//! so every pointer to malloc is its PLT entry while every PLT slot, its own included,
//! holds glibc's definition): malloc through its PLT, through a table of allocation
//! functions, calloc, posix_memalign, and a pointer to glibc's malloc taken at start. Each
//! path's estimated bytes over the phase are within the interval of what it allocated.
//! Built against `fixtures/c/libunpatchable.c`, whose malloc the patcher must refuse, the
//! pointer taken at start is out of reach: nothing is seen there, and the note says
//! which entry points were not patched and which calls that leaves out.

use std::path::{Path, PathBuf};

use super::{check_profile, scratch, Attach, Service};
use crate::common::text;
use crate::programs::{cc, fixture, totals};

/// The interval the attaches sample at.
const INTERVAL: f64 = 65536.0;

/// `fixtures/c/reach.c` built as node is (non-PIE, non-PIC, `-z now`) into `dir`, linked
/// with `libs` (a `-l` and its directory) when given.
fn reach(name: &str, libs: Option<&Path>) -> PathBuf {
    let dir = scratch(&format!("{name}-build"));
    let out = dir.join(name);
    let mut args = vec!["-O2", "-g", "-fno-optimize-sibling-calls", "-no-pie", "-fno-pic"];
    args.push("-Wl,-z,now");
    let (search, rpath);
    if let Some(lib) = libs {
        let at = lib.parent().unwrap().display().to_string();
        search = format!("-L{at}");
        rpath = format!("-Wl,-rpath,{at}");
        args.extend(["-Wl,--no-as-needed", &search, &rpath, "-lunpatchable"]);
    }
    cc("reach.c", &out, &args);
    out
}

/// Attaches to `prog`, runs its phase, detaches: the profile, the phase's bytes per path,
/// and what `memprof attach` printed.
fn attached_phase(prog: &Path, name: &str) -> (memprof::profile::Profile, f64, String) {
    let svc = Service::start_program(prog, &[], &[]);
    let dir = scratch(name);
    let file = dir.join("a.mprof");
    let opts = ["--interval", "65536", "--seed", "7", "-o", file.to_str().unwrap()];
    let a = Attach::start(&dir, &opts, svc.pid);
    a.wait_attached(svc.pid);
    svc.signal(libc::SIGUSR1);
    let done = svc.wait_line("phase done");
    let truth: f64 = done.trim_start_matches("phase done").trim().parse().expect("bytes");
    let out = a.stop(libc::SIGINT);
    let p = check_profile(&out, &file);
    svc.terminate();
    (p, truth, format!("{}{}", text(&out.stdout), text(&out.stderr)))
}

/// `est` within twice the 95 % interval of `truth` (a miss by chance: about 1 in 10,000).
fn assert_within(site: &str, est: f64, truth: f64, all: &str) {
    let ci = memprof::report::confidence::ci95(truth, INTERVAL);
    assert!(
        (est - truth).abs() <= 2.0 * ci,
        "{site}: {est} estimated, {truth} allocated (±{ci}); output:\n{all}"
    );
}

#[test]
fn every_way_to_malloc_of_a_non_pie_program_is_seen() {
    let prog = reach("reach", None);
    let (p, truth, all) = attached_phase(&prog, "reach");
    for site in ["via_plt", "via_table", "via_calloc", "via_aligned", "via_pointer"] {
        assert_within(site, totals(&p, site).0, truth, &all);
    }
    // Each block freed at once: none is left live (glibc's free reached too).
    for site in ["via_plt", "via_table", "via_calloc", "via_aligned", "via_pointer"] {
        assert_eq!(totals(&p, site).2, 0.0, "{site} live; output:\n{all}");
    }
    assert!(!all.contains("could not be patched"), "{all}");
}

#[test]
fn an_allocator_that_cannot_be_patched_is_named_with_what_it_leaves_out() {
    let lib = fixture("libunpatchable");
    let prog = reach("reach_unpatchable", Some(&lib));
    let (p, truth, all) = attached_phase(&prog, "reach-unpatchable");
    for site in ["via_plt", "via_table", "via_calloc", "via_aligned"] {
        assert_within(site, totals(&p, site).0, truth, &all);
    }
    assert_eq!(totals(&p, "via_pointer").0, 0.0, "out of reach; output:\n{all}");
    let note = p
        .notes
        .iter()
        .find(|n| n.contains("could not be patched"))
        .unwrap_or_else(|| panic!("the note is kept in the profile: {:?}\n{all}", p.notes));
    for words in [
        "the malloc family of libunpatchable.so",
        "malloc: a branch lands inside the patched bytes",
        "pointers to malloc, calloc, realloc or free that the program took before the attach",
        "the dynamic loader's own",
    ] {
        assert!(note.contains(words), "{words:?} in the note: {note}");
    }
    assert!(all.contains(note.as_str()), "the note is said above the table:\n{all}");
}
