//! The profiler inside itself: a signal handler that allocates while its thread is in the
//! sample path or the live table, and a sampled block resized millions of
//! times (part 6). Each program runs plain and under `memprof record`, in the exact mode
//! and at the default interval; a hang fails the test (each run has a deadline and is
//! killed, with everything it started, when it passes).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, fixture, read, scratch, totals};

/// Runs `cmd` in a process group of its own; kills the group if it is still running after
/// `limit` and fails the test.
fn run_within(mut cmd: Command, limit: Duration, what: &str) -> Output {
    let child = cmd
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let pid = child.id() as i32;
    let start = Instant::now();
    let mut child = child;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            // SAFETY: kill has no memory preconditions; the group is the one made above.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            let out = child.wait_with_output().expect("output");
            panic!("{what}: still running after {limit:?} (hung); stderr: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn plain(dir: &Path, prog: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(prog);
    cmd.current_dir(dir).args(args);
    run_within(cmd, Duration::from_secs(60), &prog.display().to_string())
}

/// `memprof record OPTS -- PROG ARGS` as `record::record` runs it, with a deadline.
fn record_within(dir: &Path, opts: &[&str], prog: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(MEMPROF);
    cmd.current_dir(dir)
        .env("MEMPROF_UNWIND_CHECK", "1")
        .arg("record")
        .args(opts)
        .arg("--")
        .arg(prog)
        .args(args);
    let what = format!("memprof record {} -- {}", opts.join(" "), prog.display());
    run_within(cmd, Duration::from_secs(60), &what)
}

/// A SIGALRM handler mallocs and frees every 100 µs while the program's loop mallocs and
/// frees (`fixtures/c/signal_alloc.c`), 10 runs in each mode. Before, most exact-mode runs
/// hung: the handler spun on a live-table lock its own thread held. Each run must exit
/// as the plain run does and print the same checksum; in the exact mode every block of the
/// handler and of the loop is freed, so they must hold no live byte (a free a handler made
/// while its thread held the block's shard is deferred, not lost), whatever was skipped.
#[test]
fn signal_handlers_that_allocate_never_deadlock() {
    let dir = scratch("signal-alloc");
    let prog = fixture("signal_alloc");
    let args = ["1"];
    let p = plain(&dir, &prog, &args);
    assert_eq!(p.status.code(), Some(0), "plain: {}", text(&p.stderr));
    let expected = text(&p.stdout);
    assert!(expected.starts_with("checksum "), "{expected}");
    let mut lost = 0;
    for run in 0..10 {
        for (mode, opts) in [("exact", &["--interval", "1"][..]), ("default", &[][..])] {
            let file = format!("sig-{mode}-{run}.mprof");
            let opts: Vec<&str> = opts.iter().copied().chain(["--force", "-o", &file]).collect();
            let out = record_within(&dir, &opts, &prog, &args);
            assert_ok(&out, 0);
            assert_eq!(text(&out.stdout), expected, "{mode} run {run}: output differs");
            let profile = read(&dir.join(&file));
            assert!(profile.complete, "{mode} run {run}: {:?}", profile.warnings);
            lost += profile.lost.events;
            if mode == "exact" {
                let (alloc, objs, live, _) = totals(&profile, "handler_site");
                assert!(alloc > 0.0 && objs > 0.0, "run {run}: the handler's blocks are seen");
                assert_eq!(live, 0.0, "run {run}: a handler's block stays live");
                let (_, loop_objs, loop_live, _) = totals(&profile, "loop_site");
                assert!(loop_objs > 0.0);
                assert_eq!(
                    (loop_live, profile.lost.untracked),
                    (0.0, 0),
                    "run {run}: every block was freed and every free seen"
                );
                // Only stdio's buffer, allocated by the final printf, is left.
                assert!(profile.live_bytes <= 65536.0, "run {run}: live {}", profile.live_bytes);
            }
        }
    }
    // Mostly samples skipped because the handler interrupted its thread's sample path
    // (counted, never waited for), and events refused by a full queue.
    eprintln!("signal_alloc: {lost} events lost over 20 runs");
}

/// The landings of a handler on the interrupted stack, read from the stderr line of
/// `fixtures/c/many_sites.c` with "alarm": (handled, on another stack, traced, reaching the
/// loop).
fn landings(stderr: &str) -> [u64; 4] {
    let line = stderr.lines().find(|l| l.starts_with("handled ")).expect("the fixture's line");
    let n: Vec<u64> = line.split([' ', ',']).filter_map(|w| w.parse().ok()).collect();
    n.try_into().unwrap_or_else(|_| panic!("four numbers in {line:?}"))
}

/// A SIGALRM handler (no alternate stack) lands every 100 µs in a program whose walks need
/// framehop at most samples (`fixtures/c/many_sites.c` with "alarm": 2,048 call sites), so
/// in the exact mode many land while the profiler runs on its walk stack, where signals
/// stay deliverable (`engine::thread` §3). There the handler allocates (skipped: the thread
/// is in the sample path), writes 96 KiB of stack (a handler's business on its own stack;
/// the walk stack's room for it) and keeps backtraces (libgcc's unwinder) that must reach
/// the program's loop through the profiler's frames and its stack switch. The run exits
/// as the plain one does (the fixture exits 6 for a backtrace that stopped short), with
/// the same output, in both modes; in the exact mode some landings were on the walk stack.
#[test]
fn a_handler_that_lands_on_the_walk_stack_runs_as_on_its_own() {
    let dir = scratch("walk-stack-signal");
    let prog = fixture("many_sites");
    let args = ["1", "300000", "2", "alarm"];
    let p = plain(&dir, &prog, &args);
    assert_eq!(p.status.code(), Some(0), "plain: {}", text(&p.stderr));
    assert_eq!(landings(&text(&p.stderr))[1], 0, "plain: nothing runs on another stack");
    for (mode, opts) in [("exact", &["--interval", "1"][..]), ("default", &[][..])] {
        let file = format!("walk-{mode}.mprof");
        let opts: Vec<&str> = opts.iter().copied().chain(["--force", "-o", &file]).collect();
        let out = record_within(&dir, &opts, &prog, &args);
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), text(&p.stdout), "{mode}: output differs");
        let [handled, elsewhere, traced, reaching] = landings(&text(&out.stderr));
        eprintln!("{mode}: {handled} signals, {elsewhere} on the walk stack, {reaching}/{traced}");
        assert_eq!(reaching, traced, "{mode}");
        if mode == "exact" {
            assert!(elsewhere > 0 && traced > 0, "{mode}: no handler landed on the walk stack");
        }
    }
}

/// A SIGUSR1 handler on an alternate signal stack (set after the program's first
/// allocations, so after the profiler first looked for one) allocates from many sites, so
/// samples whose walks need framehop are taken inside it; a SIGALRM handler, also on the
/// alternate stack and not blocked in the first, fires every 50 µs and writes 8 KiB of its
/// stack (`fixtures/c/many_sites.c` with "altstack"). Had a walk run on the walk stack with
/// signals deliverable, the kernel would have put the second handler at the top of the
/// alternate stack, over the first one's frames (a SIGSEGV, or a broken canary: exit 7):
/// the preload library's `sigaltstack` tells the profiler of the new stack, and walks from
/// inside it block signals (`engine::thread` §3). Three exact runs and a default one, each
/// as the plain run.
#[test]
fn a_handler_on_the_alternate_stack_keeps_its_frames() {
    let dir = scratch("altstack-signal");
    let prog = fixture("many_sites");
    let args = ["1", "64000", "2", "altstack"];
    let p = plain(&dir, &prog, &args);
    assert_eq!(p.status.code(), Some(0), "plain: {}", text(&p.stderr));
    let runs = [("exact", &["--interval", "1"][..]); 3].into_iter().chain([("default", &[][..])]);
    for (run, (mode, opts)) in runs.enumerate() {
        let file = format!("alt-{run}.mprof");
        let opts: Vec<&str> = opts.iter().copied().chain(["--force", "-o", &file]).collect();
        let out = record_within(&dir, &opts, &prog, &args);
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), text(&p.stdout), "{mode} run {run}: output differs");
    }
    // The same stack set by the raw system call, which nothing tells the profiler of: the
    // switch finds its stack pointer off the thread's own stack and blocks signals all the
    // same.
    let raw = ["1", "64000", "2", "altstack-raw"];
    let p = plain(&dir, &prog, &raw);
    assert_eq!(p.status.code(), Some(0), "plain, raw: {}", text(&p.stderr));
    for run in 0..3 {
        let file = format!("alt-raw-{run}.mprof");
        let out = record_within(&dir, &["--interval", "1", "--force", "-o", &file], &prog, &raw);
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), text(&p.stdout), "raw run {run}: output differs");
    }
}

/// One block realloc'ed 5 M times between 1000 and 3000 bytes, plus a 100 × 1000-byte leak
/// (`fixtures/c/realloc_loop.c`), at the default interval. Each reallocation ends its old
/// block (`engine::sampler` §5): a sample of the loop's block dies at the next realloc, so
/// the file holds one alloc and one free record per sample and nothing else per call: 10
/// GB allocated at 512 KiB is ≈ 19,073 samples, each ≤ 16 bytes of alloc record and ≤ 12
/// of free record before compression (≈ 0.5 MB), less once compressed (a record per
/// call, 5 M of them, made it over 1 MB). The bound is 800 KB. Totals: the
/// estimate of the bytes allocated is within 6σ of the truth (Poisson: σ = √(n R) for n
/// bytes at interval R; false failure ≈ 2e-9), and no sample but the leak's is left live.
#[test]
fn realloc_loop_costs_an_event_per_sample() {
    let dir = scratch("realloc-loop");
    let prog = fixture("realloc_loop");
    let p = plain(&dir, &prog, &[]);
    assert_eq!(p.status.code(), Some(0));
    let out = record_within(&dir, &["--seed", "11", "-o", "loop.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    assert_eq!(text(&out.stdout), text(&p.stdout));
    let path = dir.join("loop.mprof");
    let bytes = std::fs::metadata(&path).unwrap().len();
    assert!(bytes < 800_000, "{bytes} bytes of profile");
    let profile = read(&path);
    let r = profile.header.interval;
    let truth = 100.0 * 1000.0 + 1000.0 + 2_500_000.0 * 3000.0 + 2_500_000.0 * 1000.0;
    let alloc: f64 =
        ["leak_site", "grow_site", "resize_site"].iter().map(|s| totals(&profile, s).0).sum();
    let sigma = (truth * r).sqrt();
    assert!((alloc - truth).abs() < 6.0 * sigma, "alloc {alloc} vs {truth} (6σ = {})", 6.0 * sigma);
    let c = profile.counts;
    assert!(c.samples > 15_000, "{c:?}");
    // No sample outlives a reallocation: every sample but the leak's (and stdio's) is freed.
    assert_eq!(c.moves, 0, "{c:?}");
    assert!(c.frees + 10 >= c.samples, "{c:?}");
    // Every sample of the loop's block died (the block was freed at the end); the leak's
    // 100 KB hold a sample with probability 1 - e^(-100000/R) ≈ 17 %, rarely two.
    let (_, _, live_resize, _) = totals(&profile, "resize_site");
    let (_, _, live_grow, _) = totals(&profile, "grow_site");
    assert_eq!((live_resize, live_grow), (0.0, 0.0), "{c:?}");
    assert_eq!(profile.lost.untracked, 0);
}

/// Buffers grown by realloc (`fixtures/c/realloc_buffers.c`: doubling, steps of 256 bytes,
/// some shrunk, some freed), at a 64 KiB interval under three fixed seeds: the live and
/// allocated bytes that `memprof report --json` gives for the program's sites lie within
/// twice their 95 % intervals of the truth the program prints (a reallocation ends its old
/// block and is an allocation of its new size: `engine::sampler` §5). The intervals are
/// the report's (`live_ci95_bytes`, `alloc_ci95_bytes`: 1.96·√(B̂(R−1)) per site, summed in
/// quadrature over the sites); twice one is 3.92σ, which a correct estimate passes but
/// for a probability of about 9e-5 (the live total has about 500 expected points, the
/// allocated one about 7000: the normal approximation holds), so the six checks fail
/// falsely about once in 2000 runs (the recording is not deterministic: the program's
/// threads are numbered in the order they first allocate). The first blocks and the freed
/// buffers hold no live sample, exactly. Carrying a sample across reallocations fails
/// both: those first blocks keep samples, and the buffers grown in steps were counted
/// near the interval each, several times the live bytes.
#[test]
fn realloc_growth_estimates_are_within_their_intervals() {
    let dir = scratch("realloc-buffers");
    let prog = fixture("realloc_buffers");
    let sites = ["first_site", "grow_site", "freed_site", "shrink_site"];
    for seed in ["1", "2", "3"] {
        let file = format!("b{seed}.mprof");
        let opts = ["--interval", "65536", "--seed", seed, "-o", &file];
        let out = record_within(&dir, &opts, &prog, &[]);
        assert_ok(&out, 0);
        let said = text(&out.stdout);
        let truth = |key: &str| -> f64 {
            let line = said.lines().find_map(|l| l.strip_prefix(key)).expect(key);
            line.trim().parse().unwrap()
        };
        let (true_live, true_alloc) = (truth("live_bytes "), truth("allocated_bytes "));
        let json = Command::new(MEMPROF)
            .current_dir(&dir)
            .args(["report", &file, "--json", "--top", "100"])
            .output()
            .unwrap();
        assert!(json.status.success(), "{}", text(&json.stderr));
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(v["sampling"]["interval_bytes"], 65536.0, "{v:#}");
        assert_eq!(v["lost"]["events"], 0, "{v:#}");
        let ours: Vec<&serde_json::Value> = v["sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| sites.iter().any(|n| s["site"] == *n))
            .collect();
        let field = |s: &serde_json::Value, f: &str| s[f].as_f64().unwrap_or(0.0);
        let live_of = |name: &str| {
            ours.iter().find(|s| s["site"] == name).map_or(0.0, |s| field(s, "live_bytes"))
        };
        assert_eq!(live_of("first_site"), 0.0, "seed {seed}: first blocks live: {v:#}");
        assert_eq!(live_of("freed_site"), 0.0, "seed {seed}: freed buffers live: {v:#}");
        let sum = |f: &str| ours.iter().map(|s| field(s, f)).sum::<f64>();
        let quadrature = |f: &str| ours.iter().map(|s| field(s, f).powi(2)).sum::<f64>().sqrt();
        let (live, live_ci) = (sum("live_bytes"), quadrature("live_ci95_bytes"));
        let (alloc, alloc_ci) = (sum("alloc_bytes"), quadrature("alloc_ci95_bytes"));
        eprintln!(
            "seed {seed}: live {live} vs {true_live} (± {live_ci:.0}), allocated {alloc} vs \
             {true_alloc} (± {alloc_ci:.0})"
        );
        assert!(
            (live - true_live).abs() <= 2.0 * live_ci,
            "seed {seed}: live {live}, true {true_live}, 95 % interval ± {live_ci}"
        );
        assert!(
            (alloc - true_alloc).abs() <= 2.0 * alloc_ci,
            "seed {seed}: allocated {alloc}, true {true_alloc}, 95 % interval ± {alloc_ci}"
        );
    }
}

/// The exact mode stays exact through realloc: the same loop, shortened, counts every
/// reallocation (each is a new sample in the exact mode) and the leak to the byte.
#[test]
fn realloc_loop_exact_totals() {
    let dir = scratch("realloc-loop-exact");
    let prog = fixture("realloc_loop");
    let out = record_within(&dir, &["--interval", "1", "-o", "loop.mprof"], &prog, &["100000"]);
    assert_ok(&out, 0);
    let profile = read(&dir.join("loop.mprof"));
    assert_eq!(totals(&profile, "leak_site"), (100_000.0, 100.0, 100_000.0, 100.0));
    assert_eq!(totals(&profile, "grow_site"), (1000.0, 1.0, 0.0, 0.0));
    assert_eq!(totals(&profile, "resize_site"), (200_000_000.0, 100_000.0, 0.0, 0.0));
    assert_eq!(profile.counts.moves, 0, "every exact-mode realloc is a new sample");
}

/// A block grown by realloc in 99 steps of 1000 bytes, then shrunk to 500 and leaked
/// (`fixtures/c/realloc_grow.c`), in the exact mode: the live bytes at the end and the
/// peak are the truth. The program's other block (50,000 bytes) is freed before the growth,
/// and stdio's buffer is allocated after it, so the peak is the block at 100,000 bytes.
#[test]
fn realloc_growth_exact_live_bytes_and_peak() {
    let dir = scratch("realloc-grow");
    let prog = fixture("realloc_grow");
    let out = record_within(&dir, &["--interval", "1", "-o", "grow.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    let profile = read(&dir.join("grow.mprof"));
    let resize = totals(&profile, "resize_site");
    let expected_alloc: f64 = (2..=100).map(|k| k as f64 * 1000.0).sum::<f64>() + 500.0;
    assert_eq!(resize, (expected_alloc, 100.0, 500.0, 1.0));
    assert_eq!(totals(&profile, "grow_site"), (1000.0, 1.0, 0.0, 0.0));
    assert_eq!(totals(&profile, "other_site"), (50_000.0, 1.0, 0.0, 0.0));
    assert_eq!(profile.peak.bytes, 100_000.0, "{:?}", profile.peak);
    // Whatever else is live at the end (stdio's buffer) is whole blocks of other sites.
    let stdio = profile.live_bytes - 500.0;
    assert!((0.0..=65536.0).contains(&stdio), "live {}", profile.live_bytes);
    assert_eq!(profile.counts.moves, 0);
}
