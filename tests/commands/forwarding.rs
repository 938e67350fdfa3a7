//! Forwarding to the next definition: programs whose `malloc` is not glibc's (their own
//! allocator in a library they link), allocations made before the preload library's
//! constructor runs (a linked library's constructor), and the stack a sampled `malloc`
//! needs (small thread stacks, an 8 KiB `sigaltstack`). Each program runs plain and under
//! `memprof record`, in the exact mode and at the default interval: the same exit status and
//! output, and the profile holds what the program is known to allocate.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{text, MEMPROF};
use crate::harm::{modes, plain, strs};
use crate::programs::{assert_ok, fixture, read, record, scratch, totals};

/// Builds `fixtures/c/<name>.c` into a program linked against the fixture libraries
/// `libs` (each a `DT_NEEDED` entry, found through the run path), once per test run.
fn linked(name: &str, libs: &[&str]) -> PathBuf {
    let libs: Vec<PathBuf> = libs.iter().map(|l| fixture(l)).collect();
    let dir = libs[0].parent().expect("the build directory").to_owned();
    let out = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c").join(format!("{name}.c"));
    let mut args: Vec<std::ffi::OsString> =
        ["-O2", "-g", "-fno-optimize-sibling-calls", "-pthread", "-o"].map(Into::into).to_vec();
    args.extend([out.clone().into(), src.into()]);
    args.extend(libs.iter().map(Into::into));
    args.push(format!("-Wl,-rpath,{}", dir.display()).into());
    crate::programs::must_compile("cc", &args, None);
    out
}

/// A program whose malloc family is its own library's (`libmyalloc.so`): every block,
/// those a linked library's constructor allocates before the preload library's constructor
/// runs too, comes from that allocator under `record` as it does plain (forwarding to
/// glibc made the program find 357 foreign blocks, or abort in its `free`), and the exact
/// profile holds each site's known bytes.
#[test]
fn a_program_with_its_own_allocator_library() {
    let dir = scratch("own-alloc");
    let prog = linked("own_alloc", &["libmyalloc", "libctorleak"]);
    let p = plain(&dir, &prog, &[]);
    assert_eq!(p.status.code(), Some(0), "{}", text(&p.stderr));
    assert!(text(&p.stdout).contains("all from myalloc (served enough)"), "{}", text(&p.stdout));
    for (label, opts) in modes("oa") {
        let out = record(&dir, &strs(&opts), &prog, &[]);
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), text(&p.stdout), "{label}");
        let prof = read(&dir.join(&opts[opts.len() - 1]));
        assert!(prof.complete, "{label}: {:?}", prof.warnings);
        if label.ends_with("exact") {
            assert_eq!(totals(&prof, "own_leak_site"), (100_000.0, 100.0, 100_000.0, 100.0));
            assert_eq!(totals(&prof, "own_realloc_first"), (5_000.0, 50.0, 0.0, 0.0));
            assert_eq!(totals(&prof, "own_realloc_site"), (100_000.0, 50.0, 100_000.0, 50.0));
            assert_eq!(totals(&prof, "own_calloc_site"), (10_000.0, 10.0, 0.0, 0.0));
            assert_eq!(totals(&prof, "own_aligned_site"), (10_240.0, 20.0, 10_240.0, 20.0));
            assert_eq!(totals(&prof, "own_aligned_free_site"), (5_120.0, 20.0, 0.0, 0.0));
            // Allocated in a linked library's constructor, before the preload library's.
            assert_eq!(totals(&prof, "ctor_leak_site"), (7_000.0, 7.0, 7_000.0, 7.0));
        }
    }
}

/// A leak in the constructor of a linked library, which runs before the preload library's
/// constructor (and inside `dl_iterate_phdr`, the loader's lock held): the session starts
/// at that first allocation, and the exact profile holds the leak with its stack, as
/// heaptrack and valgrind see it.
#[test]
fn a_leak_in_a_linked_library_constructor_is_seen() {
    let dir = scratch("ctor-leak");
    let prog = linked("ctor_leak", &["libctorleak"]);
    let p = plain(&dir, &prog, &[]);
    assert_eq!((p.status.code(), text(&p.stdout).trim()), (Some(0), "ok"));
    for (label, opts) in modes("cl") {
        let out = record(&dir, &strs(&opts), &prog, &[]);
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), text(&p.stdout), "{label}");
        let prof = read(&dir.join(&opts[opts.len() - 1]));
        assert!(prof.complete, "{label}: {:?}", prof.warnings);
        if label.ends_with("exact") {
            assert_eq!(totals(&prof, "ctor_leak_site"), (7_000.0, 7.0, 7_000.0, 7.0));
            assert_eq!(totals(&prof, "main_site"), (1_500.0, 3.0, 1_500.0, 3.0));
            let stacks = memprof::report::collapsed(&prof, memprof::report::View::Live);
            assert!(
                stacks
                    .iter()
                    .any(|l| l.contains("leak_in_constructor;") && l.contains("ctor_leak_site")),
                "the constructor's frames: {stacks:?}"
            );
        }
    }
}

/// The stack-use line `small_stacks measure` prints: (first call, later calls), in bytes.
fn stack_use(stderr: &str) -> (usize, usize) {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("malloc stack use: "))
        .unwrap_or_else(|| panic!("no stack-use line: {stderr}"));
    let n: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (n[0], n[1])
}

/// Threads on `PTHREAD_STACK_MIN` stacks that use ~8 KB of them, and a signal handler on an
/// 8 KiB `sigaltstack`, allocate under `record` as they do plain (the preload library's
/// static TLS, once 5,952 B carved out of every thread's stack, is a few words; the DWARF
/// unwinder's framehop calls run on a stack of the profiler's own), with the default
/// unwinder (DWARF) in both modes and with frame pointers in the exact mode. The exact
/// profiles hold both sites' bytes.
#[test]
fn small_stacks_and_an_alternate_signal_stack() {
    let dir = scratch("small-stacks");
    let prog = fixture("small_stacks");
    let p = plain(&dir, &prog, &[]);
    assert_eq!(p.status.code(), Some(0), "{}", text(&p.stderr));
    let [exact, default] = modes("ss");
    let mut fp = exact.clone();
    fp.0 = "ss fp exact".into();
    fp.1.splice(0..0, ["--unwinder".to_string(), "fp".to_string()]);
    let n = fp.1.len();
    fp.1[n - 1] = "ss.fp.exact.mprof".into();
    for (label, opts) in [exact, default, fp] {
        let out = record(&dir, &strs(&opts), &prog, &[]);
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), text(&p.stdout), "{label}");
        if label.ends_with("exact") {
            let prof = read(&dir.join(&opts[opts.len() - 1]));
            assert!(prof.complete, "{label}: {:?}", prof.warnings);
            let site = totals(&prof, "small_stack_site");
            assert_eq!(site, (16_000.0, 160.0, 16_000.0, 160.0), "{label}");
            assert_eq!(totals(&prof, "handler_site"), (1_280.0, 20.0, 1_280.0, 20.0), "{label}");
        }
    }
}

/// The stack a sampled `malloc` uses, measured by painting (`small_stacks measure`: every
/// call sampled, from 8 different stacks in turn, so that most walks are not replays):
/// at most 2 KiB with DWARF and with frame pointers, a thread's first sample included
/// (1,696 B and 1,496 B on the machine this was written on, where glibc's own malloc uses
/// under 300 B; they were 27,176 B and 15,448 B before the walk stack and the lazily
/// mapped state), and at most 3 KiB through libgcc (2,472 B). Without the unwind check
/// (`MEMPROF_UNWIND_CHECK`), which adds its own second walk (~2.1 KB with DWARF).
#[test]
fn a_sampled_malloc_uses_a_bounded_stack() {
    let dir = scratch("stack-use");
    let prog = fixture("small_stacks");
    for (unwinder, bound) in [("dwarf", 2048), ("fp", 2048), ("libgcc", 3072)] {
        let file = format!("su.{unwinder}.mprof");
        let opts = ["--interval", "1", "--unwinder", unwinder, "-o", &file];
        // As a user runs it: without the unwind check `record` (the helper) turns on, which
        // walks every stack a second time with its own frames.
        let out = Command::new(MEMPROF)
            .current_dir(&dir)
            .arg("record")
            .args(opts)
            .arg("--")
            .arg(&prog)
            .arg("measure")
            .output()
            .expect("memprof runs");
        assert_ok(&out, 0);
        let (first, later) = stack_use(&text(&out.stderr));
        assert!(first <= bound && later <= bound, "{unwinder}: first {first} B, later {later} B");
    }
}

/// A program that sizes its threads' stacks as tightly as it can run plain: 16 threads on
/// `PTHREAD_STACK_MIN` stacks, each using all but a few hundred bytes of what the loader's
/// lazy binding of `malloc` and glibc's first `malloc` of the thread need. The deepest use
/// that runs plain is found by bisection (to 64 bytes), and 128 bytes less runs under
/// `record` in both modes, with the unwind check on: the preload library raises every stack
/// size the program sets by what it takes (its static TLS, the sample path's depth).
#[test]
fn threads_sized_to_the_byte_run_as_they_do_plain() {
    let dir = scratch("tight-stacks");
    let prog = fixture("tight_stacks");
    let runs = |depth: usize| {
        let o = Command::new(&prog).arg(depth.to_string()).output().unwrap();
        o.status.success() && text(&o.stdout) == "ok\n"
    };
    let (mut lo, mut hi) = (1024usize, 64 * 1024);
    assert!(runs(lo) && !runs(hi), "plain bounds");
    while hi - lo > 64 {
        let mid = (lo + hi) / 2;
        if runs(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let depth = (lo - 128).to_string();
    for (label, opts) in modes("ts") {
        for _ in 0..3 {
            let _ = std::fs::remove_file(dir.join(&opts[opts.len() - 1]));
            let out = record(&dir, &strs(&opts), &prog, &[&depth]);
            assert_ok(&out, 0);
            assert_eq!(text(&out.stdout), "ok\n", "{label} at {depth} B (plain runs to {lo} B)");
        }
    }
}

/// A library loaded and unloaded 3,000 times, whose constructor leaks 500 B: every unload
/// writes a module list to the shared ring's side log (thousands of lists, past the log's
/// size), and every load's block is in the exact profile at the constructor's site.
#[test]
fn a_library_loaded_thousands_of_times_keeps_every_block() {
    let dir = scratch("dl-churn");
    let prog = fixture("dl_churn");
    let lib = fixture("libchurn");
    for run in 0..2 {
        let file = format!("churn{run}.mprof");
        let opts = ["--interval", "1", "-o", &file];
        let out = record(&dir, &opts, &prog, &[lib.to_str().unwrap(), "3000"]);
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), "ok\n");
        let prof = read(&dir.join(&file));
        let t = totals(&prof, "churn_ctor_site");
        assert_eq!(t, (1_500_000.0, 3000.0, 1_500_000.0, 3000.0), "run {run}");
    }
}
