//! `memprof record` end to end: the real `memprof` binary and `libmemprof_preload.so` run
//! small C programs (`fixtures/c/*.c`, built here with the system `cc`) whose allocation
//! sites and sizes are known, and the profiles they leave are read back and compared with
//! what the programs did. Crashes, forks, threads, dlopen, the malloc family's edge cases,
//! bad input, and a comparison with heaptrack.

use memprof::profile::Profile;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::{assert_one_line_error, text, MEMPROF};
use crate::programs::{
    assert_ok, build_dir, cc, fixture, orphan_ended, profile_of_pid, read, record, scratch,
    strip_symbols, totals,
};

#[test]
fn exact_totals_of_known_sites() {
    let dir = scratch("exact");
    let out = record(&dir, &["--interval", "1", "-o", "s.mprof"], &fixture("sites"), &[]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    assert!(err.contains("small_site") && err.contains("exact"), "summary: {err}");
    assert!(dir.join("s.mprof.svg").is_file(), "flamegraph next to the profile");
    let p = read(&dir.join("s.mprof"));
    assert!(p.complete && p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!(p.lost.events, 0);
    assert_eq!(totals(&p, "small_site"), (240_000.0, 10_000.0, 0.0, 0.0));
    assert_eq!(totals(&p, "calloc_site"), (500_000.0, 500.0, 5_000.0, 5.0));
    assert_eq!(totals(&p, "leak_site"), (2_331.0, 3.0, 2_331.0, 3.0));
    assert_eq!(totals(&p, "big_site"), (4_194_304.0, 64.0, 0.0, 0.0));
    // Symbols carry files and lines.
    let sym = p.symbols.values().flatten().find(|s| s.function == "small_site").unwrap();
    assert!(sym.file.as_deref().is_some_and(|f| f.ends_with("sites.c")) && sym.line.is_some());
}

/// At the default interval R = 512 KiB, `big_site` allocates n = 1 GiB (64 × 256 blocks of
/// 64 KiB). Each byte is a sample point with probability 1/R, so the estimate k·R has
/// standard deviation √(n·R·(1 − 1/R)) ≈ 23.7 MB (2.2 %). The bound is 5σ: a false failure
/// has probability ≈ 5.7e-7 (normal approximation); the seed is fixed, so the outcome is
/// also reproducible.
#[test]
fn default_interval_estimates_within_confidence() {
    let dir = scratch("sampled");
    let out = record(&dir, &["--seed", "7", "-o", "s.mprof"], &fixture("sites"), &["256"]);
    assert_ok(&out, 0);
    let p = read(&dir.join("s.mprof"));
    assert_eq!(p.header.interval, 512.0 * 1024.0);
    let n = 64.0 * 256.0 * 65536.0;
    let r = p.header.interval;
    let sd = (n * r * (1.0 - 1.0 / r)).sqrt();
    let (est, _, live, _) = totals(&p, "big_site");
    assert!((est - n).abs() < 5.0 * sd, "big_site estimate {est} vs {n} (5σ = {})", 5.0 * sd);
    assert_eq!(live, 0.0, "every big block was freed");
}

#[test]
fn eight_threads_with_cross_thread_frees() {
    let dir = scratch("threads");
    let out = record(&dir, &["--interval", "1", "-o", "t.mprof"], &fixture("threads"), &[]);
    assert_ok(&out, 0);
    let p = read(&dir.join("t.mprof"));
    assert!(p.complete);
    assert_eq!((p.lost.events, p.lost.untracked), (0, 0));
    // Thread t allocates 20 000 blocks of 48 + t bytes and leaks its last 10.
    let per_round: f64 = (0..8).map(|t| 48.0 + t as f64).sum();
    assert_eq!(
        totals(&p, "thread_alloc"),
        (20_000.0 * per_round, 160_000.0, 10.0 * per_round, 80.0)
    );
}

/// Exact mode under load: 8 threads allocating flat out on 2 cores keep the queue full, and
/// the program waits for the collector instead of dropping events (a thread used to drop
/// them when the slot the collector waited for still bore its name from a lap before).
#[test]
fn exact_mode_under_load_loses_nothing() {
    let dir = scratch("flat_out");
    let out = record(&dir, &["--interval", "1", "-o", "f.mprof"], &fixture("flat_out"), &["4"]);
    assert_ok(&out, 0);
    let p = read(&dir.join("f.mprof"));
    assert!(p.complete);
    assert_eq!(
        (p.lost.events, p.lost.untracked),
        (0, 0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 8 threads × 100 blocks of 1000 B at leak_site, everything from churn_site freed.
    assert_eq!(totals(&p, "leak_site"), (800_000.0, 800.0, 800_000.0, 800.0));
    let churn = totals(&p, "churn_site");
    assert_eq!((churn.2, churn.3), (0.0, 0.0), "no phantom live blocks");
}

#[test]
fn fork_from_threads_without_following() {
    for mode in ["noexec", "exec"] {
        let dir = scratch(&format!("fork-{mode}"));
        let out = record(&dir, &["--interval", "1", "-o", "f.mprof"], &fixture("forker"), &[mode]);
        assert_ok(&out, 0);
        let p = read(&dir.join("f.mprof"));
        assert!(p.complete, "{mode}: {:?}", p.warnings);
        assert_eq!(totals(&p, "parent_work"), (100_000.0, 100.0, 100_000.0, 100.0), "{mode}");
        assert_eq!(totals(&p, "child_work"), (0.0, 0.0, 0.0, 0.0), "{mode}: child not profiled");
        let files: Vec<_> =
            std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(files.len(), 3, "{mode}: only f.mprof, its flamegraph and page: {files:?}");
    }
}

#[test]
fn fork_from_threads_following() {
    for mode in ["noexec", "exec"] {
        let dir = scratch(&format!("follow-{mode}"));
        let out = record(
            &dir,
            &["--interval", "1", "--follow-forks", "-o", "f.mprof"],
            &fixture("forker"),
            &[mode],
        );
        assert_ok(&out, 0);
        let root = read(&dir.join("f.mprof"));
        assert!(root.complete);
        assert_eq!(totals(&root, "parent_work"), (100_000.0, 100.0, 100_000.0, 100.0));
        assert_eq!(totals(&root, "child_work").1, 0.0);
        let children = memprof::profile::tree::children(&dir.join("f.mprof"));
        assert_eq!(children.len(), 3, "{mode}: one file per child: {children:?}");
        for c in &children {
            let p = read(c);
            assert_eq!(totals(&p, "child_work"), (100_000.0, 50.0, 100_000.0, 50.0), "{c:?}");
            assert_eq!(totals(&p, "parent_work").1, 0.0);
        }
        // `memprof report` takes the whole tree.
        let mut args: Vec<PathBuf> = vec![dir.join("f.mprof")];
        args.extend(children);
        let out = Command::new(MEMPROF).arg("report").args(&args).output().unwrap();
        assert_ok(&out, 0);
        let s = text(&out.stdout);
        assert!(s.contains("child_work") && s.contains("parent_work"), "{s}");
        let line = s.lines().find(|l| l.contains(" child_work")).unwrap();
        assert!(line.contains(" 150 "), "150 objects over three children: {line}");
    }
}

/// Dies without exit handlers: every sample is there, and the file is whole (`record`
/// collects what the process queued after it is gone). After `_exit` (which the preload
/// library hooks) the reader says the image ended by `_exit`; after a crash the file ends
/// with its end record, as nothing is missing.
fn crashed(mode: &str, code: i32) -> Profile {
    let dir = scratch(&format!("crash-{mode}"));
    let out = record(&dir, &["--interval", "1", "-o", "c.mprof"], &fixture("crash"), &[mode]);
    assert_ok(&out, code);
    let p = read(&dir.join("c.mprof"));
    assert!(p.warnings.is_empty(), "whole, not cut: {:?}", p.warnings);
    if mode == "_exit" {
        assert!(!p.complete);
        assert_eq!(p.stopped, Some(memprof::profile::Stopped::QuickExit));
    } else {
        assert!(p.complete);
        assert_eq!(p.stopped, None);
    }
    assert_eq!(before_crash_samples(&p), 100, "{mode}: every before_crash sample");
    p
}

/// Samples allocated by the crash fixture's `before_crash` (by site, not by size: stdio's
/// 4096-byte stdout buffer is allocated too). A profile cut before its symbols were written
/// is symbolized offline from its modules first, as `memprof report` does.
fn before_crash_samples(p: &Profile) -> usize {
    let mut p = p.clone();
    let notes = memprof::profile::symbolize::resolve_offline(&mut p);
    assert!(notes.is_empty(), "{notes:?}");
    let n: u64 = p
        .allocated
        .iter()
        .filter(|((stack, _), _)| p.site_name(*stack) == "before_crash")
        .map(|(_, t)| t.samples)
        .sum();
    n as usize
}

#[test]
fn underscore_exit_keeps_everything() {
    let p = crashed("_exit", 7);
    // `_exit` wrote the symbols too.
    assert_eq!(totals(&p, "before_crash"), (409_600.0, 100.0, 409_600.0, 100.0));
}

#[test]
fn abort_keeps_everything() {
    crashed("abort", 128 + libc::SIGABRT);
}

#[test]
fn sigkill_mid_run_keeps_everything() {
    let dir = scratch("crash-kill");
    let mut child = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["record", "--interval", "1", "-o", "k.%p.mprof", "--"])
        .arg(fixture("crash"))
        .arg("kill")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let (file, pid) = profile_of_pid(&dir, "k.");
    // SAFETY: kill has no memory preconditions; pid is the profiled program's.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, 128 + libc::SIGKILL);
    let p = read(&file);
    // Killed: no word from the program, and nothing lost (`record` drained its queue).
    assert!(p.complete && p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!(p.stopped, None);
    assert_eq!(before_crash_samples(&p), 100, "every before_crash sample, named offline");
    assert_eq!(p.header.pid, pid as u32);
}

#[test]
fn dlopen_dlclose_library_that_allocates() {
    let dir = scratch("dl");
    let lib = fixture("libdlfix");
    let out = record(
        &dir,
        &["--interval", "1", "-o", "d.mprof"],
        &fixture("dl"),
        &[lib.to_str().unwrap()],
    );
    assert_ok(&out, 0);
    let p = read(&dir.join("d.mprof"));
    assert!(p.complete);
    assert!(p.modules.iter().any(|m| m.path.ends_with("libdlfix.so")), "module recorded");
    // Resolved from the library's file after the run.
    assert_eq!(totals(&p, "lib_alloc"), (60_000.0, 20.0, 60_000.0, 20.0));
    assert_eq!(totals(&p, "after_close"), (2_000.0, 4.0, 2_000.0, 4.0));
    // The DWARF unwinder learnt of the library when a walk first met it (no drain thread
    // polls under `record`): no capture fell back to libgcc.
    let err = text(&out.stderr);
    let line = err.lines().find(|l| l.contains("unwind check:")).expect("the check reports");
    assert!(line.ends_with(" 0 fell back to libgcc"), "{line}");
}

#[test]
fn malloc_family_edge_cases_keep_glibc_semantics() {
    let prog = fixture("edge");
    let plain = Command::new(&prog).output().unwrap();
    assert_ok(&plain, 0);
    let dir = scratch("edge");
    let out = record(&dir, &["--interval", "1", "-o", "e.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    assert_eq!(text(&out.stdout), text(&plain.stdout), "same behaviour under memprof");
    let p = read(&dir.join("e.mprof"));
    assert_eq!(totals(&p, "zero_realloc_site"), (333.0, 1.0, 0.0, 0.0));
    assert_eq!(totals(&p, "failed_realloc_site"), (555.0, 1.0, 555.0, 1.0));
}

/// The allocation counts and leaked bytes of each fixture function, as heaptrack sees them
/// (from `heaptrack_print`'s flamegraph stacks), keyed by the innermost frame.
fn heaptrack_totals(prog: &Path, dir: &Path) -> Option<HashMap<String, (f64, f64)>> {
    let help = Command::new("heaptrack").arg("--help").output().ok()?;
    let prefix = dir.join("ht");
    let mut cmd = Command::new("heaptrack");
    if text(&help.stdout).contains("--record-only") {
        cmd.arg("--record-only");
    }
    let out = cmd.arg("-o").arg(&prefix).arg(prog).output().unwrap();
    assert!(out.status.success(), "heaptrack: {}", text(&out.stderr));
    let data = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("ht."))
        .expect("heaptrack wrote its data file");
    let mut result: HashMap<String, (f64, f64)> = HashMap::new();
    for (i, cost) in ["allocations", "leaked"].into_iter().enumerate() {
        let folded = dir.join(format!("ht-{cost}.txt"));
        let o = Command::new("heaptrack_print")
            .arg("-f")
            .arg(&data)
            .arg("--flamegraph-cost-type")
            .arg(cost)
            .arg("-F")
            .arg(&folded)
            .output()
            .unwrap();
        assert!(o.status.success(), "heaptrack_print: {}", text(&o.stderr));
        for line in std::fs::read_to_string(&folded).unwrap().lines() {
            let Some((stack, n)) = line.rsplit_once(' ') else { continue };
            let leaf = stack.trim_end_matches(';').rsplit(';').next().unwrap_or("");
            let func = leaf.split(" (").next().unwrap_or("").to_owned();
            let v: f64 = n.parse().unwrap_or(0.0);
            let e = result.entry(func).or_default();
            if i == 0 {
                e.0 += v;
            } else {
                e.1 += v;
            }
        }
    }
    Some(result)
}

#[test]
fn agrees_with_heaptrack() {
    let have = Command::new("heaptrack").arg("--help").output().is_ok();
    if !have {
        if std::env::var_os("CI").is_some() {
            panic!("heaptrack is not installed, and CI requires this comparison");
        }
        crate::common::skipped(
            "agrees_with_heaptrack",
            "heaptrack is not installed; Debian: apt-get install heaptrack",
        );
        return;
    }
    for name in ["sites", "threads"] {
        let prog = fixture(name);
        let dir = scratch(&format!("heaptrack-{name}"));
        let ht = heaptrack_totals(&prog, &dir).unwrap();
        let out = record(&dir, &["--interval", "1", "-o", "m.mprof"], &prog, &[]);
        assert_ok(&out, 0);
        let p = read(&dir.join("m.mprof"));
        let fns: &[&str] = if name == "sites" {
            &["small_site", "calloc_site", "leak_site", "big_site"]
        } else {
            &["thread_alloc"]
        };
        for f in fns {
            let (_, objs, live, _) = totals(&p, f);
            let (h_objs, h_live) = ht.get(*f).copied().unwrap_or_default();
            assert_eq!((objs, live), (h_objs, h_live), "{name}: {f}: memprof vs heaptrack");
            assert!(objs > 0.0);
        }
    }
}

/// A failing command: non-zero exit, one line on stderr naming the problem, no panic.
#[test]
fn bad_programs_get_one_line_errors() {
    let dir = scratch("bad");
    let out = record(&dir, &[], Path::new("./no-such-program"), &[]);
    assert_one_line_error(&out, None, "not found");
    let out = record(&dir, &[], Path::new("no-such-program-in-path"), &[]);
    assert_one_line_error(&out, None, "not found");
    let out = record(&dir, &[], &dir, &[]);
    assert_one_line_error(&out, None, "directory");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/sites.c");
    let out = record(&dir, &[], &src, &[]);
    assert_one_line_error(&out, None, "not executable");
    // Setuid: the loader would ignore LD_PRELOAD.
    let suid = dir.join("suid");
    std::fs::copy(fixture("nomalloc"), &suid).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let out = record(&dir, &[], &suid, &[]);
    assert_one_line_error(&out, None, "setuid");
    // Nothing was left behind by these runs.
    assert!(std::fs::read_dir(&dir).unwrap().count() <= 1);
}

#[test]
fn static_program_is_refused() {
    let dir = scratch("static");
    let prog = dir.join("static");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/nomalloc.c");
    let args = ["-static".into(), "-o".into(), prog.clone().into(), src.clone().into()];
    if let Err(e) = crate::programs::compile("cc", &args, None) {
        // No libc.a (apt-get install libc6-dev): detected from a fake ELF header instead.
        eprintln!("cc -static failed ({}); using a synthetic static ELF", e.unwrap_or_default());
        let mut elf = vec![0u8; 128];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[0x20] = 64; // e_phoff
        elf[0x36] = 56; // e_phentsize
        elf[0x38] = 1; // e_phnum: one PT_LOAD
        elf[64] = 1;
        std::fs::write(&prog, elf).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = record(&dir, &[], &prog, &[]);
    assert_one_line_error(&out, None, "statically linked");
}

#[test]
fn output_paths_are_checked_before_the_program_runs() {
    let dir = scratch("outputs");
    let marker = dir.join("ran");
    // A program that would leave a trace if it ran.
    let sh = Path::new("/bin/touch");
    for bad in ["/dev/null/x.mprof", "/nonexistent-dir/x.mprof"] {
        let out = record(&dir, &["-o", bad], sh, &[marker.to_str().unwrap()]);
        assert_one_line_error(&out, None, "cannot create the profile");
        assert!(!marker.exists(), "the program must not run");
    }
    // Never overwrite another run's file unless --force; never follow a symlink.
    std::fs::write(dir.join("old.mprof"), b"precious").unwrap();
    let out = record(&dir, &["-o", "old.mprof"], &fixture("sites"), &[]);
    assert_one_line_error(&out, None, "exists");
    assert_eq!(std::fs::read(dir.join("old.mprof")).unwrap(), b"precious");
    std::os::unix::fs::symlink(dir.join("target"), dir.join("link.mprof")).unwrap();
    let out = record(&dir, &["-o", "link.mprof"], &fixture("sites"), &[]);
    assert_one_line_error(&out, None, "exists");
    assert!(!dir.join("target").exists());
    let out =
        record(&dir, &["--force", "--interval", "1", "-o", "old.mprof"], &fixture("sites"), &[]);
    assert_ok(&out, 0);
    assert!(read(&dir.join("old.mprof")).complete);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("old.mprof")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644 & !umask());
}

fn umask() -> u32 {
    // SAFETY: umask has no memory preconditions; the old mask is restored at once.
    unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    }
}

#[test]
fn report_rejects_bad_profiles_in_one_line() {
    let dir = scratch("bad-report");
    let corrupt = dir.join("corrupt.mprof");
    std::fs::write(&corrupt, b"this is not a profile at all").unwrap();
    let out = Command::new(MEMPROF).arg("report").arg(&corrupt).output().unwrap();
    assert_one_line_error(&out, None, "corrupt.mprof");
    // A real profile cut inside its header.
    let run = record(&dir, &["--interval", "1", "-o", "good.mprof"], &fixture("sites"), &[]);
    assert_ok(&run, 0);
    let bytes = std::fs::read(dir.join("good.mprof")).unwrap();
    let cut = dir.join("cut.mprof");
    std::fs::write(&cut, &bytes[..12]).unwrap();
    let out = Command::new(MEMPROF).arg("report").arg(&cut).output().unwrap();
    assert_one_line_error(&out, None, "cut.mprof");
    // Cut in the middle: reads back what is there, with a warning.
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = Command::new(MEMPROF).arg("report").arg(&cut).output().unwrap();
    assert_ok(&out, 0);
    assert!(text(&out.stderr).contains("cut"), "{}", text(&out.stderr));
}

/// `examples/gc_workload` (built by `cargo test` beside the test binaries) under `record`:
/// its managed heap reports through the preload library, so one profile holds the heap's
/// samples and deaths, every collection cycle, and the program's own mallocs.
#[test]
fn managed_heap_under_record_has_samples_and_gc_cycles() {
    let exe = Path::new(MEMPROF).parent().unwrap().join("examples/gc_workload");
    assert!(exe.exists(), "{} is built by cargo test (examples are test targets)", exe.display());
    let dir = scratch("gc-workload");
    let out =
        record(&dir, &["--interval", "16K", "--seed", "7", "-o", "gc.mprof"], &exe, &["300000"]);
    assert_ok(&out, 0);
    let stdout = text(&out.stdout);
    let cycles: usize = stdout
        .split(" cycles under memprof record")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the workload says how many cycles ran: {stdout}"));
    let p = read(&dir.join("gc.mprof"));
    assert!(p.complete, "{:?}", p.warnings);
    assert_eq!(p.gc_cycles.len(), cycles, "every cycle is in the profile");
    assert!(cycles >= 5);
    assert!(p.gc_cycles.iter().all(|c| c.words_marked > 0 && c.ns_per_word > 0.0));
    // Both kinds of samples: managed-heap blocks and the program's mallocs.
    let gc_stacks =
        (0..p.stacks.len() as u32).filter(|&s| memprof::report::is_gc_stack(&p, s)).count();
    assert!(gc_stacks > 0 && gc_stacks < p.stacks.len(), "{gc_stacks} of {}", p.stacks.len());
    // The live set is the record table: make_record holds it.
    let (_, _, live, _) = totals(&p, "gc_workload::workload::make_record");
    assert!(live > 1e6, "make_record holds the live set: {live}");
    // Mark time goes to the sites whose blocks survive. A temporary is marked only when a
    // cycle begins while it is still held (the one being built): a sliver of the mark time,
    // in about one run in seven, never a share that matters. Bound: under 1 %.
    let folded = memprof::report::collapsed(&p, memprof::report::View::Gc);
    assert!(!folded.is_empty());
    let weight = |l: &String| l.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()).unwrap();
    let all: f64 = folded.iter().map(weight).sum();
    let temps: f64 = folded.iter().filter(|l| l.contains("make_temp")).map(weight).sum();
    assert!(temps < 0.01 * all, "temporaries got {temps} of {all} ns of mark time: {folded:?}");
    // The blocks each cycle marked, estimated from the samples, against the words the
    // collector counted. With R = 16 KiB and ~6.5 MB marked, σ ≈ √(n·R) ≈ 330 KB (5 %);
    // the bound of 30 % is > 5.7σ: false-failure probability < 1e-8 per cycle checked.
    let marked = memprof::report::gc_cycle_samples(&p);
    for (c, m) in p.gc_cycles.iter().zip(&marked) {
        let truth = c.words_marked as f64 * 8.0;
        assert!((m.bytes - truth).abs() < 0.3 * truth, "cycle {}: {} vs {truth}", c.cycle, m.bytes);
    }
}

/// Each sample's stack (one entry per sample) as (module path, offset in the module) pairs:
/// comparable between runs that load the objects at different addresses. Sorted, so thread
/// order does not matter.
fn relative_stacks(p: &Profile) -> Vec<(Vec<(String, u64)>, bool)> {
    let mut v: Vec<_> = p
        .allocated
        .iter()
        .flat_map(|(&(stack, _), t)| {
            let stack = &p.stacks[stack as usize];
            let frames: Vec<(String, u64)> = stack
                .frames
                .iter()
                .map(|&a| match p.modules.iter().find(|m| m.start <= a && a < m.end) {
                    Some(m) => (m.path.clone(), a - m.base),
                    None => (String::from("?"), a),
                })
                .collect();
            std::iter::repeat_n((frames, stack.truncated), t.samples as usize)
        })
        .collect();
    v.sort();
    v
}

/// The cached DWARF unwinder (the default) records exactly the frames libgcc's unwinder
/// records, on programs built without frame pointers: a deep recursion (whole stacks, and
/// stacks cut at a depth), threads, and a library that is dlopened, allocates and is
/// dlclosed (its frames are not in the unwinder's tables until they are refreshed).
#[test]
fn dwarf_unwinder_agrees_with_libgcc() {
    let dir = scratch("unwinders");
    let worst = build_dir().join("worst_case_nofp");
    cc("worst_case.c", &worst, &["-O2", "-g", "-fomit-frame-pointer"]);
    let lib = fixture("libdlfix");
    let cases: [(&str, PathBuf, Vec<&str>, &[&str]); 5] = [
        ("worst_case", worst.clone(), vec!["300"], &["--interval", "1"]),
        ("worst_case_depth", worst, vec!["300"], &["--interval", "1", "--depth", "10"]),
        ("threads", fixture("threads"), vec![], &["--interval", "64K", "--seed", "1"]),
        ("dl", fixture("dl"), vec![lib.to_str().unwrap()], &["--interval", "1"]),
        ("sites", fixture("sites"), vec![], &["--interval", "1"]),
    ];
    for (name, prog, args, opts) in cases {
        let mut stacks = vec![];
        for unwinder in ["dwarf", "libgcc"] {
            let file = format!("{name}-{unwinder}.mprof");
            let mut all: Vec<&str> = opts.to_vec();
            all.extend(["--unwinder", unwinder, "-o", &file]);
            let out = record(&dir, &all, &prog, &args);
            assert_ok(&out, 0);
            let p = read(&dir.join(&file));
            assert!(p.complete && p.counts.samples > 0, "{name} {unwinder}");
            stacks.push(relative_stacks(&p));
        }
        if name == "threads" {
            // Sampling is random per thread: compare the distinct stacks.
            for s in &mut stacks {
                s.dedup();
            }
        }
        assert_eq!(stacks[0].len(), stacks[1].len(), "{name}: sample counts");
        for (a, b) in stacks[0].iter().zip(&stacks[1]) {
            assert_eq!(a, b, "{name}: dwarf vs libgcc");
        }
        assert!(stacks[0].iter().all(|(f, _)| f.len() >= 3), "{name}: stacks too short");
    }
}

/// The frame-pointer unwinder (with its remembered walks: the same two stacks over and
/// over) records what libgcc records, on a program built with frame pointers: the same
/// frames at depth 10, and at full depth a prefix of libgcc's stack (the walk ends where
/// glibc's start-up code keeps no frame pointer). Only the program's allocations count:
/// glibc's own (stdio's buffer) start in code without frame pointers.
#[test]
fn frame_pointer_unwinder_agrees_with_libgcc() {
    let dir = scratch("fp-unwinder");
    let prog = build_dir().join("worst_case_fp");
    cc("worst_case.c", &prog, &["-O2", "-g", "-fno-omit-frame-pointer"]);
    for depth in ["10", "64"] {
        let mut stacks = vec![];
        for unwinder in ["fp", "libgcc"] {
            let file = format!("fp-{depth}-{unwinder}.mprof");
            let opts = ["--interval", "1", "--depth", depth, "--unwinder", unwinder, "-o", &file];
            let out = record(&dir, &opts, &prog, &["300"]);
            assert_ok(&out, 0);
            let p = read(&dir.join(&file));
            assert!(p.complete && p.counts.samples >= 600, "{depth} {unwinder}");
            let mut own = relative_stacks(&p);
            own.retain(|(frames, _)| {
                frames.first().is_some_and(|f| f.0.ends_with("worst_case_fp"))
            });
            assert_eq!(own.len(), 600, "{depth} {unwinder}: the program's 600 allocations");
            stacks.push(own);
        }
        assert_eq!(stacks[0].len(), stacks[1].len(), "depth {depth}: sample counts");
        for ((fp, fp_cut), (gcc, gcc_cut)) in stacks[0].iter().zip(&stacks[1]) {
            if depth == "10" {
                assert_eq!((fp, fp_cut), (gcc, gcc_cut), "depth 10: fp vs libgcc");
            } else {
                // leaf, 21 recursion frames, main.
                assert!(fp.len() >= 23 && gcc.starts_with(fp), "fp {fp:x?}\nlibgcc {gcc:x?}");
            }
        }
    }
}

/// calloc, realloc, reallocarray, memalign, posix_memalign, aligned_alloc, valloc and
/// pvalloc hand the program's registers on as malloc does: each sample's stack starts at
/// the function that called them (its first frame is in the program, not in the preload
/// library), and `--depth 1` keeps exactly that frame.
#[test]
fn every_entry_point_starts_the_stack_at_the_program() {
    let dir = scratch("entries");
    let cases = [
        (100, "use_calloc"),
        (200, "use_realloc_null"),
        (300, "use_realloc_grow"),
        (400, "use_memalign"),
        (500, "use_posix_memalign"),
        (600, "use_aligned_alloc"),
        (700, "use_valloc"),
        (800, "use_pvalloc"),
        (900, "use_reallocarray"),
    ];
    for depth in ["1", "16"] {
        let file = format!("e{depth}.mprof");
        let out = record(
            &dir,
            &["--interval", "1", "--depth", depth, "-o", &file],
            &fixture("entries"),
            &[],
        );
        assert_ok(&out, 0);
        let p = read(&dir.join(&file));
        assert!(p.complete, "{:?}", p.warnings);
        for (size, function) in cases {
            let stacks: Vec<(u32, u64)> = p
                .allocated
                .iter()
                .filter(|((_, s), _)| *s == size)
                .map(|(&(stack, _), t)| (stack, t.samples))
                .collect();
            let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
            assert_eq!(samples, 50, "{function}: one sample per call");
            for (id, _) in stacks {
                let stack = &p.stacks[id as usize];
                let first = stack.frames[0];
                let module = p.modules.iter().find(|m| m.start <= first && first < m.end);
                assert!(
                    module.is_some_and(|m| m.path.ends_with("/entries")),
                    "{function}: the first frame is in {:?}",
                    module.map(|m| &m.path)
                );
                assert_eq!(p.site_name(id), function);
                if depth == "1" {
                    assert!(stack.frames.len() == 1 && stack.truncated, "{function}");
                }
            }
        }
    }
}

/// The preload library leaves symbols to the reader; `memprof record` resolves them from
/// the recorded modules as soon as the program exits and writes them into the (complete)
/// file, which then names the program's functions even once the program is gone.
#[test]
fn symbols_are_written_into_the_file_after_the_run() {
    let dir = scratch("symbols");
    let prog = dir.join("sites");
    std::fs::copy(fixture("sites"), &prog).unwrap();
    let out = record(&dir, &["--interval", "1", "-o", "s.mprof"], &prog, &["1"]);
    assert_ok(&out, 0);
    std::fs::remove_file(&prog).unwrap();
    let p = read(&dir.join("s.mprof"));
    assert!(p.complete && p.warnings.is_empty(), "{:?}", p.warnings);
    let sym = p.symbols.values().flatten().find(|s| s.function == "small_site");
    assert!(sym.is_some_and(|s| s.line.is_some()), "small_site with its line, from the file");
    assert_eq!(totals(&p, "small_site").1, 10_000.0);
    let report = Command::new(MEMPROF).arg("report").arg(dir.join("s.mprof")).output().unwrap();
    assert!(report.status.success() && text(&report.stdout).contains("small_site"));
    // Appended in place: no temporary file is left beside it, and the mode is kept.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("s.mprof")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644 & !umask());
}

/// The GNU build id that finds a module's separate debug file is read from its notes.
#[test]
fn build_id_is_read_from_the_notes() {
    let dir = scratch("build-id");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/nomalloc.c");
    let prog = dir.join("with-id");
    cc("nomalloc.c", &prog, &["-Wl,--build-id=0x0123456789abcdef0011223344556677"]);
    let id = memprof::profile::symbolize::build_id(&prog).expect("a build id");
    assert_eq!(
        id,
        [
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66,
            0x77
        ]
    );
    cc("nomalloc.c", &prog, &["-Wl,--build-id=none"]);
    assert_eq!(memprof::profile::symbolize::build_id(&prog), None);
    assert_eq!(memprof::profile::symbolize::build_id(&src), None, "not an ELF file");
}

/// Module records carry the build id read from the mapped image, and offline symbolization
/// takes symbols only from a file with the same build id: a program rebuilt after the run
/// is not used to name the old run's frames.
#[test]
fn offline_symbols_come_only_from_the_binary_that_ran() {
    let dir = scratch("build-id-guard");
    let prog = dir.join("sites");
    let build = |id: &str| {
        let flag = format!("-Wl,--build-id=0x{id}");
        cc("sites.c", &prog, &["-O2", "-g", "-fno-optimize-sibling-calls", &flag]);
    };
    let first = "00112233445566778899aabbccddeeff";
    build(first);
    let out = record(&dir, &["--interval", "1", "-o", "s.mprof"], &prog, &["1"]);
    assert_ok(&out, 0);
    let file = dir.join("s.mprof");
    let p = read(&file);
    let module = p.modules.iter().find(|m| m.path.ends_with("/sites")).expect("the program");
    let hex: String = module.build_id.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, first, "the build id of the mapped program");
    assert!(p.modules.iter().any(|m| m.path.contains("libc") && !m.build_id.is_empty()));
    // As a profile whose process died before its symbols were written.
    strip_symbols(&file);

    let report = || Command::new(MEMPROF).arg("report").arg(&file).output().unwrap();
    build("ffeeddccbbaa99887766554433221100");
    let out = report();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("has changed since the run"),
        "a note says why: {}",
        text(&out.stderr)
    );
    assert!(!text(&out.stdout).contains("small_site"), "no name from the rebuilt program");
    assert!(text(&out.stdout).contains("sites+0x"), "module+offset instead");

    build(first);
    let out = report();
    assert!(out.status.success() && text(&out.stdout).contains("small_site"));
    assert!(!text(&out.stderr).contains("has changed"));
}

/// Without a build id, the file's size and modification time at the run stand for the
/// program: a file rebuilt since (another time) is refused with a note, and the frames stay
/// module+offset; the file as it was is read.
#[test]
fn offline_symbols_without_a_build_id_check_the_file() {
    let dir = scratch("file-identity-guard");
    let prog = dir.join("sites");
    cc("sites.c", &prog, &["-O2", "-g", "-fno-optimize-sibling-calls", "-Wl,--build-id=none"]);
    let out = record(&dir, &["--interval", "1", "-o", "s.mprof"], &prog, &["1"]);
    assert_ok(&out, 0);
    let file = dir.join("s.mprof");
    let p = read(&file);
    let module = p.modules.iter().find(|m| m.path.ends_with("/sites")).expect("the program");
    assert!(module.build_id.is_empty(), "built without one");
    let size = std::fs::metadata(&prog).unwrap().len();
    assert_eq!(module.file_size, size, "the size the run saw");
    assert!(module.file_mtime_ns > 0);
    // As a profile whose process died before its symbols were written.
    strip_symbols(&file);
    let report = || Command::new(MEMPROF).arg("report").arg(&file).output().unwrap();
    let out = report();
    assert!(out.status.success() && text(&out.stdout).contains("small_site"));
    assert!(!text(&out.stderr).contains("has changed"), "{}", text(&out.stderr));

    // The same bytes with another time: not provably the program that ran.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    std::fs::File::options().write(true).open(&prog).unwrap().set_modified(later).unwrap();
    let out = report();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("has no build id"), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("sites+0x"), "module+offset instead");
}

/// A wrapper script that execs the real program: without `--follow-forks` only the
/// wrapper is profiled, and `record` says so (it names the interpreter that ran, the
/// program it executed and the option); with it, the program's allocations are all there.
#[test]
fn wrapper_scripts_are_explained_and_followed() {
    let dir = scratch("wrapper");
    let script = dir.join("run-sites.sh");
    std::fs::write(&script, format!("#!/bin/sh\nexec {} \"$@\"\n", fixture("sites").display()))
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();

    // The shell's own allocations before its exec reach the file (the exec hooks), and
    // record says whose they are.
    let out = record(&dir, &["--interval", "1", "-o", "w.mprof"], &script, &["1"]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let line = err.lines().find(|l| {
        l.trim_start_matches("memprof: ").starts_with("note: this profile is the wrapper's")
    });
    assert!(
        line.is_some_and(|l| l.contains("script or a wrapper")),
        "a note names the cause: {err}"
    );
    let sites = fixture("sites").display().to_string();
    assert!(
        err.lines().any(|l| l.trim_start_matches("memprof: ").starts_with("note: ")
            && l.contains(&format!("{sites} (1×)"))
            && l.contains("--follow-forks")),
        "a note names the program and the option: {err}"
    );
    assert!(!err.contains("small_site"), "sites itself is not profiled: {err}");

    let out =
        record(&dir, &["--interval", "1", "--follow-forks", "-o", "f.mprof"], &script, &["1"]);
    assert_ok(&out, 0);
    assert!(text(&out.stderr).contains("small_site"), "{}", text(&out.stderr));
    let children = memprof::profile::tree::children(&dir.join("f.mprof"));
    let p = children.iter().map(|c| read(c)).find(|p| p.counts.samples > 0).expect("sites ran");
    assert_eq!(totals(&p, "small_site"), (240_000.0, 10_000.0, 0.0, 0.0));
}

/// A program that allocates and then execs another one: its exit handlers never run, but
/// the preload's `exec` hooks write what it did before the image is replaced, so the file
/// reads back (cut, as the end record never comes) with every sample.
#[test]
fn exec_keeps_what_the_image_allocated() {
    let dir = scratch("exec");
    // execv, and the variadic execl, execlp and execle (hooked in assembly: glibc's call
    // its internal execve, past the execve hook).
    for how in ["v", "l", "lp", "le"] {
        let file = format!("x-{how}.mprof");
        let out = record(
            &dir,
            &["--interval", "1", "-o", &file],
            &fixture("execer"),
            &["/bin/true", how],
        );
        assert_ok(&out, 0);
        let p = read(&dir.join(&file));
        assert!(!p.complete, "{how}: the end record never comes");
        assert_eq!(p.stopped, Some(memprof::profile::Stopped::Exec), "{:?}", p.warnings);
        assert_eq!(
            totals(&p, "before_exec_site"),
            (300_000.0, 1000.0, 300_000.0, 1000.0),
            "exec{how}"
        );
    }
}

/// A copy of `memprof` alone in a directory of its own, with none of the build's files
/// beside it (what `cargo install` or copying `target/release/memprof` gives), run from
/// another directory: `record` writes the library it carries to the cache directory, runs
/// the program and reports it; a second run reuses the file; four first runs at once on a
/// new cache directory all succeed; a cache that cannot be written falls back to a
/// temporary copy that is gone after the run.
#[test]
fn a_lone_copy_of_the_executable_records() {
    let root = scratch("lone");
    let bin = root.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let exe = bin.join("memprof");
    std::fs::copy(MEMPROF, &exe).unwrap();
    let work = root.join("work");
    std::fs::create_dir(&work).unwrap();
    let prog = fixture("sites");
    let run = |cache: &Path, out: &str| {
        Command::new(&exe)
            .current_dir(&work)
            .env("XDG_CACHE_HOME", cache)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("MEMPROF_PRELOAD")
            .env("TMPDIR", &root)
            .args(["record", "--interval", "1", "-o", out, "--"])
            .arg(&prog)
            .output()
            .unwrap()
    };
    let cache = root.join("cache");
    let out = run(&cache, "a.mprof");
    assert_ok(&out, 0);
    let libs: Vec<PathBuf> =
        std::fs::read_dir(cache.join("memprof")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(libs.len(), 1, "{libs:?}");
    let name = libs[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("libmemprof_preload-") && name.ends_with(".so"), "{name}");
    let p = read(&work.join("a.mprof"));
    assert_eq!(totals(&p, "leak_site"), (2_331.0, 3.0, 2_331.0, 3.0));
    assert_eq!(totals(&p, "big_site"), (4_194_304.0, 64.0, 0.0, 0.0));

    // Reused, not rewritten.
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(&libs[0]).unwrap().ino();
    assert_ok(&run(&cache, "b.mprof"), 0);
    assert_eq!(std::fs::metadata(&libs[0]).unwrap().ino(), ino);

    // `memprof preload-path` names the same file.
    let o = Command::new(&exe).env("XDG_CACHE_HOME", &cache).arg("preload-path").output().unwrap();
    assert_eq!(text(&o.stdout).trim(), libs[0].display().to_string());

    // Concurrent first runs on a new cache directory.
    let fresh = root.join("fresh-cache");
    let outs: Vec<Output> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let (run, fresh) = (&run, &fresh);
                s.spawn(move || run(fresh, &format!("c{i}.mprof")))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, o) in outs.iter().enumerate() {
        assert_ok(o, 0);
        let p = read(&work.join(format!("c{i}.mprof")));
        assert_eq!(totals(&p, "leak_site"), (2_331.0, 3.0, 2_331.0, 3.0));
    }
    assert_eq!(std::fs::read_dir(fresh.join("memprof")).unwrap().count(), 1);

    // A cache path that cannot be a directory: a private temporary copy, removed afterwards.
    let not_a_dir = root.join("a-file");
    std::fs::write(&not_a_dir, b"").unwrap();
    let before = std::fs::read_dir(&root).unwrap().count();
    let out = run(&not_a_dir, "d.mprof");
    assert_ok(&out, 0);
    assert_eq!(totals(&read(&work.join("d.mprof")), "leak_site"), (2_331.0, 3.0, 2_331.0, 3.0));
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), before, "the temporary copy is gone");
}

/// The live set at the heap's peak (`--view peak`), on a program with known phases, in the
/// exact mode: what was live when the last `peak_site` block was allocated, exactly, in the
/// folded output; the top table states the peak; `--view peak` of two profiles is refused.
#[test]
fn the_peak_view_is_the_live_set_at_the_peak() {
    let dir = scratch("peak");
    let out = record(&dir, &["--interval", "1", "-o", "p.mprof"], &fixture("phases"), &[]);
    assert_ok(&out, 0);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    let line = said.lines().find(|l| l.starts_with("peak: ")).expect("record states the peak");
    assert!(line.contains(" live at "), "{line}");
    let folded = dir.join("p.folded");
    let rep = Command::new(MEMPROF)
        .arg("report")
        .arg(dir.join("p.mprof"))
        .args(["--view", "peak", "--collapsed"])
        .arg(&folded)
        .output()
        .unwrap();
    assert_ok(&rep, 0);
    let text_folded = std::fs::read_to_string(&folded).unwrap();
    let site = |name: &str| -> u64 {
        text_folded
            .lines()
            .filter(|l| l.rsplit_once(' ').is_some_and(|(stack, _)| stack.ends_with(name)))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(site("peak_site"), 1_000_000, "{text_folded}");
    assert_eq!(site("keep_site"), 200_000, "{text_folded}");
    assert_eq!(site("churn_site"), 0, "{text_folded}");
    // At the end, by contrast, only keep_site's blocks (and stdio's buffer) are live.
    let p = read(&dir.join("p.mprof"));
    assert_eq!(totals(&p, "peak_site"), (1_000_000.0, 1000.0, 0.0, 0.0));
    let two = Command::new(MEMPROF)
        .arg("report")
        .arg(dir.join("p.mprof"))
        .arg(dir.join("p.mprof"))
        .args(["--view", "peak"])
        .output()
        .unwrap();
    assert_eq!(two.status.code(), Some(1), "{}", text(&two.stderr));
    let err = text(&two.stderr);
    assert!(
        err.contains("one process at a time") && err.contains("pass one of the files, e.g. "),
        "{err}"
    );
}

/// `record` SIGKILLed while its program runs: the program runs on and ends by itself, and
/// the file (which only `record`'s collector writes) says that the recorder stopped first
/// and the program's end is unknown, not that the program crashed.
#[test]
fn record_killed_while_the_program_runs_says_so() {
    let dir = scratch("record-killed");
    let mut child = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["record", "--interval", "1", "-o", "k.%p.mprof", "--"])
        .arg(fixture("slow_exit"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The profile exists once the program runs; its early samples are flushed within 50 ms
    // (the program sleeps 600 ms after them).
    let started = std::time::Instant::now();
    let file = loop {
        let found = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).find(|p| {
            p.extension().is_some_and(|e| e == "mprof")
                && std::fs::metadata(p).is_ok_and(|m| m.len() > 200)
        });
        if let Some(f) = found {
            break f;
        }
        assert!(started.elapsed().as_secs() < 20, "no profile appeared");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();
    let name = file.file_name().unwrap().to_str().unwrap().to_owned();
    let pid: u32 = name.trim_start_matches("k.").trim_end_matches(".mprof").parse().unwrap();
    // The program, orphaned, ends by itself (gone, or a zombie nobody reaps).
    let ended = || orphan_ended(pid);
    while !ended() {
        assert!(started.elapsed().as_secs() < 30, "the program did not end");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = Command::new(MEMPROF).arg("report").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (report, err) = (text(&out.stdout), text(&out.stderr));
    let said = "memprof record was killed before the program ended";
    assert!(report.contains("status: INCOMPLETE") && report.contains(said), "{report}");
    assert!(report.contains("exit status were not recorded"), "{report}");
    assert!(err.contains(said), "the warning: {err}");
    assert!(!report.contains("crashed") && !err.contains("crashed"), "{report}{err}");
    assert!(report.contains("early_site"), "what was sampled before the kill: {report}");
    // The sampling line says the figures stop at the cut, above the status line.
    let sampling = report.lines().find(|l| l.starts_with("sampling: ")).unwrap();
    assert!(sampling.contains("the recording was cut at"), "{report}");
    assert!(!sampling.contains("every allocation recorded"), "{report}");
    assert!(!sampling.contains("unbiased"), "{report}");
    let json = Command::new(MEMPROF).arg("report").arg(&file).arg("--json").output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["sampling"]["complete_data"], false, "a cut profile's figures lack its end");
}

/// Runs `lose_frees <n>` under `record --interval 1` without backpressure
/// (`MEMPROF_BACKPRESSURE=0`) and stops `record` (its collector) while the program frees its
/// `n` blocks, so that every one of those frees finds the queue full and nobody waiting (see
/// the fixture). Returns the profile's path and `record`'s
/// output.
fn record_with_a_stopped_collector(name: &str, n: usize) -> (PathBuf, Output) {
    use std::io::Write;
    let dir = scratch(name);
    let mut child = Command::new(MEMPROF)
        .current_dir(&dir)
        // A collector that is merely stopped is waited for: without backpressure the
        // program drops what does not fit instead.
        .env("MEMPROF_BACKPRESSURE", "0")
        .args(["record", "--interval", "1", "-o", "l.mprof", "--"])
        .arg(fixture("lose_frees"))
        .arg(n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    // SAFETY: signals the `memprof` process this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    std::thread::sleep(std::time::Duration::from_millis(100));
    stdin.write_all(b"\n").unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "done");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    stdin.write_all(b"\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    (dir.join("l.mprof"), out)
}

/// Frees lost to a full queue while the collector is stopped are replayed from the queue's
/// table of lost frees: no block the program freed is live in the profile (each used to
/// stay live for ever), and the header, the totals line, the HTML page's summary and
/// `record` itself say that events were lost, never "every allocation recorded". Past the
/// table's size, the frees lost for good are counted, and the live figures are said to be
/// an upper bound by exactly that many blocks.
#[test]
fn lost_frees_are_replayed_and_losses_are_said_where_the_numbers_are() {
    let (file, out) = record_with_a_stopped_collector("lost-frees", 300);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let p = read(&file);
    assert!(p.complete, "{err}");
    let (alloc, live) = (totals(&p, "keep_site").1, totals(&p, "keep_site").3);
    assert_eq!((alloc, live), (300.0, 0.0), "no phantom live blocks; {:?}; {err}", p.lost);
    let l = p.lost;
    assert!(l.frees_replayed >= 300 && l.frees_unknown == 0, "{l:?}");
    assert!(l.events > l.frees_replayed, "the filler's allocations were lost too: {l:?}");
    assert!(totals(&p, "filler_site").3 == 0.0, "{l:?}");
    let said = format!("{} events lost ({} frees replayed", l.events, l.frees_replayed);
    assert!(err.contains(&said), "record's summary: {err}");

    let dir = file.parent().unwrap();
    let page = dir.join("l.html");
    let report =
        Command::new(MEMPROF).arg("report").arg(&file).arg("--html").arg(&page).output().unwrap();
    assert_eq!(report.status.code(), Some(0), "{}", text(&report.stderr));
    let table = text(&report.stdout);
    let header = table.lines().find(|l| l.starts_with("sampling:")).unwrap_or_default();
    assert!(header.starts_with("sampling: exact, but ") && header.contains(&said), "{table}");
    assert!(!table.contains("every allocation recorded"), "{table}");
    let totals_line = table.lines().find(|l| l.contains("total (")).unwrap_or_default();
    assert!(totals_line.contains(&format!("{} events lost", l.events)), "{table}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("\"whole\":false") && html.contains(&said), "the page's summary");
    let diff = Command::new(MEMPROF).arg("diff").arg(&file).arg(&file).output().unwrap();
    let diff = text(&diff.stdout);
    let sampling = format!("sampling: exact, but {} events lost", l.events);
    assert!(diff.contains(&sampling) && !diff.contains("every allocation"), "{diff}");

    // Past the table: the frees it could not hold are lost for good, and said to be.
    let (file, out) = record_with_a_stopped_collector("lost-frees-overflow", 3000);
    assert_ok(&out, 0);
    let p = read(&file);
    let l = p.lost;
    let live = totals(&p, "keep_site").3 as u64;
    // At most one more: the filler's last free may have been the first one refused.
    let near = live == l.frees_unknown || live + 1 == l.frees_unknown;
    assert!(l.frees_unknown >= 1000 && near, "{live} live, {l:?}");
    assert!(l.frees_replayed >= 1000, "{l:?}");
    let report = Command::new(MEMPROF).arg("report").arg(&file).output().unwrap();
    let table = text(&report.stdout);
    let bound = format!("live figures may count up to {} blocks that had ended", l.frees_unknown);
    assert!(table.lines().any(|l| l.starts_with("sampling: exact, but") && l.contains(&bound)));
    let upper = format!("up to {} ended blocks counted live", l.frees_unknown);
    assert!(table.lines().any(|l| l.contains("total (") && l.contains(&upper)), "{table}");
    assert!(text(&out.stderr).contains(&bound), "{}", text(&out.stderr));
}

/// A link to a multi-call program of another name (rustup's `rustc` proxy, here a link
/// named `tool` to `env`) that executes the program the user meant: without
/// `--follow-forks` the profile is the proxy's, and `record` says so, names the proxy and
/// what to do, and names the program it executed.
#[test]
fn a_proxy_link_is_explained() {
    let dir = scratch("proxy");
    let env = std::fs::canonicalize("/usr/bin/env").unwrap();
    std::os::unix::fs::symlink(&env, dir.join("tool")).unwrap();
    let sites = fixture("sites");
    let out = record(
        &dir,
        &["--interval", "1", "-o", "p.mprof"],
        Path::new("./tool"),
        &[sites.to_str().unwrap(), "1"],
    );
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let want = format!(
        "note: this profile is the wrapper's, not ./tool's: ./tool is a link to {} \
         (a proxy), which replaced itself with another program (exec): record that program \
         by its path, or give --follow-forks",
        env.display()
    );
    assert!(err.lines().any(|l| l.trim_start_matches("memprof: ") == want), "{err}");
    assert!(err.contains(&format!("{} (1×)", sites.display())), "{err}");
}

/// A link of another name to a program that executes nothing and ends with `_exit` (a
/// shell: `sh` is a link to `dash` on Debian, which leaves with `_exit`) is an alias, not a
/// proxy: the note says how it ended and calls it no proxy. (It said `sh is a link to
/// /usr/bin/dash (a proxy), which ended with _exit`.)
#[test]
fn an_alias_that_ends_with_underscore_exit_is_no_proxy() {
    let dir = scratch("alias");
    let shell = std::fs::canonicalize("/bin/sh").unwrap();
    std::os::unix::fs::symlink(&shell, dir.join("alias")).unwrap();
    let out = record(&dir, &["-o", "a.mprof"], Path::new("./alias"), &["-c", ":"]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    assert!(!err.contains("(a proxy)"), "{err}");
}

/// The non-empty lines of `s`.
fn lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.trim().is_empty()).collect()
}

/// `record` makes its reports from the collector's fold of the events it wrote; `memprof
/// report FILE` reads the file. Both must say the same: the same tables, line for line,
/// and the same HTML page, byte for byte. Exact and sampled, with frees and reallocations, a
/// program killed by a signal, one ended by `_exit`, and a process tree.
#[test]
fn record_reports_what_report_reads_from_its_file() {
    type Run<'a> = (&'a str, &'a [&'a str], PathBuf, &'a [&'a str], i32);
    let runs: [Run; 6] = [
        ("timed", &["--interval", "1"], fixture("timed"), &[], 0),
        ("realloc", &["--interval", "1"], fixture("realloc_loop"), &["20000"], 0),
        ("sampled", &["--interval", "512"], fixture("worst_case"), &["200000"], 0),
        ("abort", &["--interval", "1"], fixture("crash"), &["abort"], 128 + libc::SIGABRT),
        ("quick", &["--interval", "1"], fixture("crash"), &["_exit"], 7),
        ("tree", &["--interval", "64", "--follow-forks"], fixture("forker"), &["noexec"], 0),
    ];
    for (name, opts, prog, args, code) in runs {
        let dir = scratch(&format!("one-fold-{name}"));
        let opts: Vec<&str> = opts.iter().copied().chain(["-o", "f.mprof"]).collect();
        let out = record(&dir, &opts, &prog, args);
        assert_ok(&out, code);
        let recorded = text(&out.stderr);
        let report = Command::new(MEMPROF)
            .current_dir(&dir)
            .args(["report", "f.mprof", "--html", "again.html"])
            .output()
            .unwrap();
        assert!(report.status.success(), "{name}: {}", text(&report.stderr));
        let table = text(&report.stdout);
        let (want, got) = (lines(&table), lines(&recorded));
        assert!(want.len() > 3, "{name}: {table}");
        let found = got.windows(want.len()).any(|w| w == want.as_slice());
        assert!(found, "{name}: record printed\n{recorded}\nreport printed\n{table}");
        let (a, b) = (dir.join("f.mprof.html"), dir.join("again.html"));
        let same = std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap();
        assert!(same, "{name}: {} and {} differ", a.display(), b.display());
    }
}

/// The resident memory `record` reads from outside the program, beside its live heap: a
/// program that keeps 2,000 of 200,000 blocks of 1,000 bytes, freeing the rest, stays about
/// 200 MB resident with 2 MB live (glibc keeps the freed chunks between the kept ones). The
/// header's resident size at the end is within 10 % of what the program read from its own
/// `/proc/self/statm`, the live heap is exactly the kept blocks (and stdio's buffer), and
/// `report FILE` prints the same line.
#[test]
fn resident_memory_is_read_beside_the_live_heap() {
    let dir = scratch("resident");
    let out = record(&dir, &["--interval", "1", "-o", "r.mprof"], &fixture("retained"), &[]);
    assert_ok(&out, 0);
    let said: f64 = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("resident "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the fixture said {}", text(&out.stdout)));
    assert!(said > 150e6, "the fixture is {said} bytes resident");
    let table = text(&out.stderr);
    let line =
        table.lines().find(|l| l.starts_with("resident: ")).unwrap_or_else(|| panic!("{table}"));
    let mib = |s: &str| -> f64 {
        let (n, unit) = s.trim().split_once(' ').unwrap();
        let scale = match unit {
            "MiB" => 1048576.0,
            "GiB" => 1073741824.0,
            "KiB" => 1024.0,
            u => panic!("unit {u} in {line}"),
        };
        n.parse::<f64>().unwrap() * scale
    };
    let end = mib(line["resident: ".len()..].split(" at the end").next().unwrap());
    assert!((end - said).abs() <= 0.1 * said, "{line}: the program read {said} bytes");
    let live = mib(line.split("(live heap ").nth(1).unwrap().split(')').next().unwrap());
    // 2,000 kept blocks, and stdio's buffer; printed to three digits.
    assert!((live - 2_000_000.0).abs() < 20_000.0, "{line}");
    let report = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["report", "r.mprof", "--pprof", "r.pb.gz"])
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report.stderr));
    assert!(text(&report.stdout).lines().any(|l| l == line), "{}", text(&report.stdout));
    // pprof carries the line as a comment.
    let p = crate::common::decode_pprof(&std::fs::read(dir.join("r.pb.gz")).unwrap());
    let comments: Vec<&str> =
        p.comment.iter().map(|&i| p.string_table[i as usize].as_str()).collect();
    assert!(comments.contains(&line), "{comments:?}");
    // The gap explained: the last look at the mappings, when the program exited, puts the
    // freed chunks glibc keeps in the allocator's share, and says what to try.
    let gap = table
        .lines()
        .find(|l| l.starts_with("resident ") && l.contains(" = live heap "))
        .unwrap_or_else(|| panic!("{table}"));
    // The program freed 198,000 blocks of 1,000 bytes: chunks of 1,008 bytes.
    let freed = 198_000.0 * 1008.0;
    let free =
        mib(gap.split("free in the allocator ").nth(1).unwrap().split(" + ").next().unwrap());
    assert!((free - freed).abs() < 0.05 * freed, "{gap}: {freed} bytes freed");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("hint: the allocator holds ") && l.contains("malloc_trim")),
        "{table}"
    );
    assert!(table.lines().any(|l| l == "ended: exit status 0"), "{table}");
    assert!(comments.contains(&gap) && comments.contains(&"ended: exit status 0"), "{comments:?}");
    // The same in the JSON summary, and the schema's fields.
    let json = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["report", "r.mprof", "--json"])
        .output()
        .unwrap();
    assert!(json.status.success(), "{}", text(&json.stderr));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["schema"], "memprof-report/1");
    let num = |a: &str, b: &str| v[a][b].as_f64().unwrap_or_else(|| panic!("{a}.{b} in {v:#}"));
    assert!((num("rss", "end_bytes") - said).abs() <= 0.1 * said, "{v:#}");
    assert!(num("rss", "peak_bytes") >= num("rss", "end_bytes"), "{v:#}");
    assert!((num("heap", "live_end_bytes") - 2_000_000.0).abs() < 20_000.0, "{v:#}");
    assert!(num("heap", "peak_bytes") > 150e6 && num("heap", "peak_ns") > 0.0, "{v:#}");
    let retained = num("gap", "allocator_retained_bytes");
    assert!((retained - freed).abs() < 0.05 * freed, "{v:#}");
    // The rest of what the program read: its files, stacks, and memprof's live table.
    let rest = num("gap", "resident_bytes") - retained - num("gap", "live_heap_resident_bytes");
    assert!((num("gap", "other_bytes") - rest).abs() < 0.01 * said, "{v:#}");
    assert_eq!(v["gap"]["allocator"], "glibc");
    assert_eq!((&v["ended"]["how"], &v["ended"]["status"]), (&"exit".into(), &0.into()));
    let site = &v["sites"][0];
    assert_eq!(site["site"], "main", "{v:#}");
    assert!(site["alloc_bytes"].as_f64().unwrap() > 190e6 && site["live_bytes"].is_number());
}

/// A heap that peaks and is then freed: a reading of the mappings near the peak explains
/// the process at its largest (the live heap, nothing free), and the one at the end
/// explains what the allocator kept (the freed blocks, next to no live heap).
#[test]
fn the_gap_is_read_near_the_peak_and_at_the_end() {
    let dir = scratch("peak-gap");
    let out = record(&dir, &["-o", "p.mprof"], &fixture("peak_then_free"), &[]);
    assert_ok(&out, 0);
    let json = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["report", "p.mprof", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let held = 150_000.0 * 1008.0;
    let f = |a: &str, b: &str| v[a][b].as_f64().unwrap_or_else(|| panic!("{a}.{b} in {v:#}"));
    // Sampled at the default interval: the live heap within its interval (and a margin for
    // the blocks allocated while the mappings were read).
    let live = f("gap_at_peak", "live_heap_bytes");
    let ci = f("gap_at_peak", "live_heap_ci95_bytes");
    assert!(live > 0.8 * held - ci && live < held + ci, "{v:#}");
    assert!(f("gap_at_peak", "resident_bytes") > 0.8 * held, "{v:#}");
    // At the end: one block live, the rest kept by glibc.
    assert!(f("gap", "live_heap_bytes") < f("gap", "live_heap_ci95_bytes") + 1e6, "{v:#}");
    let kept = f("gap", "allocator_retained_bytes");
    assert!((kept - held).abs() < 0.1 * held, "{v:#}");
    let table = text(&out.stderr);
    assert!(table.lines().any(|l| l.starts_with("near the heap's peak: resident ")), "{table}");
}

/// How each process of a tree ended, in its profile: an exit status through the exit
/// handler, `_exit`'s, a signal seen as a zombie's exit code; and the table of the tree's
/// processes shows them beside their resident sizes.
#[test]
fn each_process_says_how_it_ended() {
    let dir = scratch("ended");
    let ends = fixture("ends");
    let script = r#""$0" exit 5; "$0" _exit 7; "$0" signal 15; exit 3"#;
    let args = ["-c", script, ends.to_str().unwrap()];
    // Exact: each child has samples, so each leaves a file.
    let opts = ["--follow-forks", "--interval", "1", "-o", "t.mprof"];
    let out = record(&dir, &opts, Path::new("sh"), &args);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let root = read(&dir.join("t.mprof"));
    // dash's `exit` ends the shell with `_exit`.
    assert_eq!(root.ended.map(|e| (e.how.name(), e.status)), Some(("_exit", 3)));
    let mut seen = Vec::new();
    for f in std::fs::read_dir(dir.join("t.mprof.d")).unwrap() {
        let p = read(&f.unwrap().path());
        if p.header.executable.ends_with("/ends") {
            seen.push(p.ended.map(|e| (e.how.name(), e.status)));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [Some(("_exit", 7)), Some(("exit", 5)), Some(("signal", libc::SIGTERM))],
        "{}",
        text(&out.stderr)
    );
    let table = text(&out.stderr);
    assert!(table.contains("  exit 5 ") && table.contains("  signal 15 "), "{table}");
}

/// A program grown into the kernel's OOM killer inside a memory cgroup of 100 MiB that the
/// test makes (cgroup v1's memory controller, as root): `record` says the OOM killer ended
/// it, names the cgroup and its limit and the last resident size, exits as the program
/// did, and keeps the heap of its last moments. Where no cgroup can be made the test says
/// it skipped; with `CI` set it is required.
#[test]
fn an_oom_kill_is_named_with_its_limit() {
    let base = Path::new("/sys/fs/cgroup/memory");
    let name = format!("memprof-test-oom-{}", std::process::id());
    let cg = base.join(&name);
    // SAFETY: geteuid has no preconditions.
    let made = unsafe { libc::geteuid() } == 0 && std::fs::create_dir(&cg).is_ok();
    if !made {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to make a memory cgroup under {}",
            base.display()
        );
        eprintln!("skipped: no memory cgroup can be made under {} here", base.display());
        return;
    }
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _remove = Remove(cg.clone());
    std::fs::write(cg.join("memory.limit_in_bytes"), (100u64 << 20).to_string()).unwrap();
    let dir = scratch("oom");
    // The shell moves itself into the cgroup, then becomes `record`: the program inherits it.
    let run = || {
        let _ = std::fs::remove_file(dir.join("g.mprof"));
        Command::new("sh")
            .current_dir(&dir)
            .arg("-c")
            .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
            .arg("sh")
            .arg(&cg)
            .arg(MEMPROF)
            .args(["record", "-o", "g.mprof", "--"])
            .arg(fixture("grow"))
            .output()
            .unwrap()
    };
    // A kernel race, seen once in a loaded CI run: an allocation of `record`'s made while
    // the killed program's memory was still being taken back hit the limit too, and the
    // OOM killer, finding the program already reaped, took `record` (the only candidate
    // left: no oom_score_adj short of -1000, which would hang the cgroup instead, changes
    // that). The kernel's log said so; `record` had nothing to print. Such a run is run
    // again, twice at most, and said.
    let mut out = run();
    for _ in 0..2 {
        use std::os::unix::process::ExitStatusExt;
        if out.status.signal() != Some(libc::SIGKILL) {
            break;
        }
        eprintln!("record itself was OOM-killed (the race above): running again");
        out = run();
    }
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGKILL), "{err}");
    let said = format!(
        "was killed by the kernel's OOM killer: memory cgroup /{name} reached its limit of \
         100.00 MiB (1 OOM kill during the run); resident "
    );
    assert!(err.contains(&said), "{err}");
    let p = read(&dir.join("g.mprof"));
    assert!(p.live_bytes > 20.0 * 1048576.0, "the heap of its last moments: {}", p.live_bytes);
    assert!(p.resident.last().is_some_and(|r| r.bytes > 20 << 20), "{:?}", p.resident.last());
    // The profile says so too, with the limit.
    let e = p.ended.unwrap_or_else(|| panic!("no way of ending in the profile: {err}"));
    assert_eq!((e.how.name(), e.status, e.limit_bytes), ("oom-kill", libc::SIGKILL, 100 << 20));
    let json = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["report", "g.mprof", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["ended"]["how"], "oom-kill", "{v:#}");
    assert_eq!(v["ended"]["limit_bytes"], 100u64 << 20, "{v:#}");
    assert!(v["rss"]["end_bytes"].as_u64().is_some_and(|b| b > 20 << 20), "{v:#}");
}

/// The profile `record` writes in `dir` once it holds the program's first events (more
/// than its header), waited for at most 20 s.
fn first_events_in(dir: &Path) -> PathBuf {
    let started = std::time::Instant::now();
    loop {
        let found = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).find(|p| {
            p.extension().is_some_and(|e| e == "mprof")
                && std::fs::metadata(p).is_ok_and(|m| m.len() > 200)
        });
        if let Some(f) = found {
            return f;
        }
        assert!(started.elapsed().as_secs() < 20, "no profile appeared");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// What `threads_churn` says it did, and what `report --json` says of its recording.
struct Churned {
    /// The program's own count of churn_site's bytes, blocks and bytes live at the end.
    truth: (f64, f64, f64),
    /// churn_site in the summary's `sites`.
    site: serde_json::Value,
    summary: serde_json::Value,
    stderr: String,
}

/// Runs `threads_churn <threads> <iterations>` under `record <opts> -o c.mprof`, and
/// stops `record` (its collector) with SIGSTOP for `stop_ms` once the program's first
/// events are in the profile: longer than the collector's heartbeat takes to go stale, so
/// that the program's threads, which fill the queue meanwhile, used to drop events.
fn churn_under_record(
    name: &str,
    opts: &[&str],
    threads: u32,
    iterations: u32,
    stop_ms: u64,
) -> Churned {
    let dir = scratch(name);
    let child = Command::new(MEMPROF)
        .current_dir(&dir)
        .arg("record")
        .args(opts)
        .args(["-o", "c.mprof", "--"])
        .arg(fixture("threads_churn"))
        .args([threads.to_string(), iterations.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    first_events_in(&dir);
    // SAFETY: signals the `memprof` process this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    std::thread::sleep(std::time::Duration::from_millis(stop_ms));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, 0);
    let said = text(&out.stdout);
    let truth: Vec<f64> = said
        .lines()
        .find_map(|l| l.strip_prefix("allocated "))
        .unwrap_or_else(|| panic!("the program's truth: {said}"))
        .split(' ')
        .filter_map(|w| w.parse().ok())
        .collect();
    let json = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["report", "c.mprof", "--json"])
        .output()
        .unwrap();
    assert!(json.status.success(), "{}", text(&json.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let site = summary["sites"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["site"] == "churn_site"))
        .unwrap_or_else(|| panic!("churn_site in {summary:#}"))
        .clone();
    let _ = std::fs::remove_dir_all(&dir);
    Churned { truth: (truth[0], truth[1], truth[2]), site, summary, stderr: text(&out.stderr) }
}

/// 500 threads churning small blocks at the default interval, the collector stopped for
/// 700 ms mid-run: a thread that finds the queue full sleeps until the collector drains,
/// whatever its heartbeat says, so no event is lost and the estimate of the bytes
/// allocated is within twice its 95 % interval of the program's own count (a false
/// failure needs an error beyond 3.9 standard deviations).
#[test]
fn many_threads_at_the_default_interval_lose_nothing_to_a_stopped_collector() {
    let c = churn_under_record("churn-sampled", &[], 500, 400_000, 700);
    let lost = &c.summary["lost"];
    assert_eq!((lost["events"].as_u64(), lost["frees_unknown"].as_u64()), (Some(0), Some(0)));
    let estimate = c.site["alloc_bytes"].as_f64().unwrap();
    let interval = c.summary["sampling"]["interval_bytes"].as_f64().unwrap();
    let ci95 = 1.96 * (estimate * (interval - 1.0)).sqrt();
    assert!(
        (estimate - c.truth.0).abs() <= 2.0 * ci95,
        "{estimate} estimated, {} allocated, ±{ci95}; {}",
        c.truth.0,
        c.stderr
    );
}

/// 2,000 threads in the exact mode, the collector stopped for 700 ms mid-run: nothing is
/// lost, and the profile's bytes, blocks and live bytes are the program's own counts.
#[test]
fn two_thousand_threads_in_the_exact_mode_lose_nothing_to_a_stopped_collector() {
    let c = churn_under_record("churn-exact", &["--interval", "1"], 2000, 3_000, 700);
    let lost = &c.summary["lost"];
    assert_eq!(
        (lost["events"].as_u64(), lost["frees_unknown"].as_u64()),
        (Some(0), Some(0)),
        "{}",
        c.stderr
    );
    let site = |k: &str| c.site[k].as_f64().unwrap();
    assert_eq!(
        (site("alloc_bytes"), site("alloc_objects"), site("live_bytes")),
        c.truth,
        "{}",
        c.stderr
    );
}

/// `record` SIGKILLed while 200 threads of its program wait for room in the exact mode's
/// full queue: once the collector's process is gone, they stop waiting and the program
/// finishes (its events are then dropped).
#[test]
fn threads_waiting_for_room_run_on_when_the_collector_is_killed() {
    let dir = scratch("churn-killed");
    let mut child = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["record", "--interval", "1", "-o", "k.%p.mprof", "--"])
        .arg(fixture("threads_churn"))
        .args(["200", "100000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let file = first_events_in(&dir);
    std::thread::sleep(std::time::Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = std::time::Instant::now();
    let name = file.file_name().unwrap().to_str().unwrap().to_owned();
    let pid: u32 = name.trim_start_matches("k.").trim_end_matches(".mprof").parse().unwrap();
    // The program, orphaned, ends by itself (gone, or a zombie nobody reaps).
    let ended = || orphan_ended(pid);
    while !ended() {
        if killed.elapsed().as_secs() >= 20 {
            // SAFETY: signals the orphaned program this test started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("the program still waits 20 s after its collector was killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
