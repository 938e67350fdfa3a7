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
    assert!(dir.join("s.mprof.html").is_file(), "page next to the profile");
    // The table, the flamegraph and the page are made at once, and said in this order.
    let at = |what: &str| err.find(what).unwrap_or_else(|| panic!("{what} in {err}"));
    let (table, svg, page) =
        (at("small_site"), at("wrote alloc flamegraph"), at("wrote HTML report"));
    assert!(table < svg && svg < page, "order: {err}");
    assert!(err.trim_end().lines().last().unwrap().starts_with("memprof: profile"), "{err}");
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

/// A companion that cannot be written (its name taken, no `--force`) is said as an error in
/// its place, left as it was, and the page and the profile are written all the same.
#[test]
fn a_companion_that_cannot_be_written_is_said_and_the_rest_go_on() {
    let dir = scratch("companion-taken");
    std::fs::write(dir.join("s.mprof.svg"), "mine").unwrap();
    let out = record(&dir, &["--interval", "1", "-o", "s.mprof"], &fixture("sites"), &[]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let at = |what: &str| err.find(what).unwrap_or_else(|| panic!("{what} in {err}"));
    let (table, refused, page) =
        (at("small_site"), at("memprof: error: cannot create"), at("wrote HTML report"));
    assert!(table < refused && refused < page, "order: {err}");
    assert!(err[refused..].lines().next().unwrap().contains("s.mprof.svg"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("s.mprof.svg")).unwrap(), "mine");
    assert!(dir.join("s.mprof.html").is_file() && read(&dir.join("s.mprof")).complete);
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

mod endings;
mod images;
mod unwinding;
mod views;
