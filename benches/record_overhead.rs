//! `memprof record` on an unmodified C program, measured side by side in one run and
//! printed as ratios.
//!
//! ```text
//! cargo bench --bench record_overhead              # 10 M iterations, 5 rounds
//! cargo bench --bench record_overhead -- --quick   # 2 M iterations, 3 rounds
//! cargo bench --bench record_overhead -- --rounds 11   # more rounds: steadier medians
//! ```
//!
//! The program is `fixtures/c/worst_case.c`, the C port of statmemprof's worst
//! case (ocaml/ocaml#8731) (recursion depth 20, malloc of 21 and 2 words per iteration, freed soon after),
//! built with `cc -O2` (no frame pointers, as Debian's gcc builds C) and once more with
//! `-fno-omit-frame-pointer` for the frame-pointer unwinder. Each configuration runs the
//! program under the preload library exactly as `memprof record` does (the same
//! `LD_PRELOAD` and `MEMPROF_*` variables; the launcher's report afterwards is left out).
//! The time compared is the program's loop (it prints its own `loop_ns`): the allocation
//! overhead proper, without start-up and exit. This machine's speed drifts by tens of per
//! cent over seconds (a shared host), so each case runs right after its plain baseline,
//! and the figure is the median over the rounds of those pairs' ratios.
//!
//! 1. the default interval (512 KiB) vs the plain program (target ≤ 1.02×), beside a
//!    preload library that only forwards `malloc` and `free` to glibc
//!    (`fixtures/c/forward_preload.c`): what interposing alone costs this program, the floor
//!    of any `LD_PRELOAD` profiler;
//! 2. `--interval 800 --depth 10` (statmemprof's λ = 0.01) with the default DWARF unwinder
//!    and with frame pointers (target ≤ 1.5×), and the cost per sample;
//! 3. **end to end** at the default interval: the whole `memprof record -- prog` command (start,
//!    the program, then what `record` does after it exits: symbols, the summary, the
//!    flamegraph) against the same program under the forwarding-only preload, both timed as
//!    the process a user waits for (target: at most 1 % over the floor);
//! 4. the exact mode vs heaptrack on the same program and iterations (fewer, since both
//!    record every allocation; target: faster than heaptrack).
//!
//! Cases 1 and 2 run the preload library as a hand-set `LD_PRELOAD` does (the process
//! writes its own file); `interval 800, depth 10, via record` runs the same under
//! `memprof record`, where the events leave through the shared ring its collector drains.
//! With `--baseline DIR` (the `target/release` of an earlier build, e.g. from
//! `git worktree add /tmp/old <rev> && cd /tmp/old && cargo build --release`), the default
//! interval and the 800 B case also run with that build's preload library in the same
//! rounds, and the bench prints this build's per-sample cost and unsampled-path overhead
//! beside the earlier build's: the sample path must not get slower.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn build(out: &Path, extra: &[&str]) {
    let flags: Vec<&str> = ["-O2", "-g"].into_iter().chain(extra.iter().copied()).collect();
    common::cc("worst_case.c", out, &flags);
}

fn build_forward(out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/forward_preload.c");
    let o = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(o.status.success(), "cc: {}", String::from_utf8_lossy(&o.stderr));
}

/// One run: (loop seconds, process seconds, samples in the profile if any).
fn run(prog: &Path, iterations: u64, env: &[(&str, String)], out: &Path) -> (f64, f64, u64) {
    run_with(&[], prog, iterations, env, out)
}

/// [`run`] with a command in front of the program (`memprof record … --`).
fn run_with(
    front: &[String],
    prog: &Path,
    iterations: u64,
    env: &[(&str, String)],
    out: &Path,
) -> (f64, f64, u64) {
    let _ = std::fs::remove_file(out);
    let mut cmd = match front.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(prog);
            c
        }
        None => Command::new(prog),
    };
    cmd.arg(iterations.to_string());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t = Instant::now();
    let o = cmd.output().expect("the program runs");
    let total = t.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let loop_ns: f64 = err
        .lines()
        .find_map(|l| l.strip_prefix("loop_ns "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN);
    let samples = if front.is_empty() && !env.iter().any(|(k, _)| *k == "MEMPROF_OUTPUT") {
        0
    } else {
        memprof::profile::Profile::read_file(out).map(|p| p.counts.samples).unwrap_or(0)
    };
    (loop_ns / 1e9, total, samples)
}

fn preload_env(preload: &Path, out: &Path, extra: &[(&str, &str)]) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("LD_PRELOAD", preload.display().to_string()),
        ("MEMPROF_OUTPUT", out.display().to_string()),
    ];
    for (k, val) in extra {
        let key: &'static str = match *k {
            "MEMPROF_INTERVAL" => "MEMPROF_INTERVAL",
            "MEMPROF_DEPTH" => "MEMPROF_DEPTH",
            "MEMPROF_UNWINDER" => "MEMPROF_UNWINDER",
            _ => unreachable!(),
        };
        v.push((key, val.to_string()));
    }
    v
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (iterations, mut rounds) = if quick { (2_000_000u64, 3) } else { (10_000_000, 5) };
    let args: Vec<String> = std::env::args().collect();
    if let Some(n) = args.iter().position(|a| a == "--rounds").and_then(|i| args.get(i + 1)) {
        rounds = n.parse().expect("--rounds N");
    }
    let dir = std::env::temp_dir().join(format!("memprof-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain_bin = dir.join("worst_case");
    let fp_bin = dir.join("worst_case_fp");
    build(&plain_bin, &[]);
    build(&fp_bin, &["-fno-omit-frame-pointer"]);
    let forward = dir.join("libforward.so");
    build_forward(&forward);
    let preload = common::target_dir().join("libmemprof_preload.so");
    assert!(preload.is_file(), "build the preload library first: {}", preload.display());
    let out = dir.join("bench.mprof");

    let baseline = args
        .iter()
        .position(|a| a == "--baseline")
        .and_then(|i| args.get(i + 1))
        .map(|d| PathBuf::from(d).join("libmemprof_preload.so"));
    if let Some(b) = &baseline {
        assert!(b.is_file(), "--baseline DIR: no {} (build the earlier revision)", b.display());
    }
    let memprof_bin = Path::new(env!("CARGO_BIN_EXE_memprof"));
    let via_record: Vec<String> = [
        memprof_bin.display().to_string(),
        "record".into(),
        "--interval".into(),
        "800".into(),
        "--depth".into(),
        "10".into(),
        "--force".into(),
        "-o".into(),
        out.display().to_string(),
        "--".into(),
    ]
    .into();

    struct Case {
        name: &'static str,
        front: Vec<String>,
        prog: PathBuf,
        env: Vec<(&'static str, String)>,
        /// The plain run this case is compared with (an index into `cases`).
        base: usize,
        loops: Vec<f64>,
        totals: Vec<f64>,
        /// Per round: this case's loop time over its base's, run just before it.
        ratios: Vec<f64>,
        samples: u64,
    }
    let case = |name, prog: &Path, base, env| Case {
        name,
        front: vec![],
        prog: prog.to_path_buf(),
        env,
        base,
        loops: vec![],
        totals: vec![],
        ratios: vec![],
        samples: 0,
    };
    let cases = [
        case("plain", &plain_bin, 0, vec![]),
        case(
            "forwarding-only preload (floor)",
            &plain_bin,
            0,
            vec![("LD_PRELOAD", forward.display().to_string())],
        ),
        case("default interval (512 KiB)", &plain_bin, 0, preload_env(&preload, &out, &[])),
        case(
            "interval 800, depth 10, dwarf",
            &plain_bin,
            0,
            preload_env(&preload, &out, &[("MEMPROF_INTERVAL", "800"), ("MEMPROF_DEPTH", "10")]),
        ),
        case("plain, frame pointers", &fp_bin, 4, vec![]),
        case(
            "interval 800, depth 10, fp",
            &fp_bin,
            4,
            preload_env(
                &preload,
                &out,
                &[("MEMPROF_INTERVAL", "800"), ("MEMPROF_DEPTH", "10"), ("MEMPROF_UNWINDER", "fp")],
            ),
        ),
    ];
    let mut cases: Vec<Case> = cases.into_iter().collect();
    cases.push(Case {
        front: via_record.clone(),
        ..case("interval 800, depth 10, via record", &plain_bin, 0, vec![])
    });
    if let Some(b) = &baseline {
        cases.push(case(
            "default interval, baseline build",
            &plain_bin,
            0,
            preload_env(b, &out, &[]),
        ));
        cases.push(case(
            "interval 800, depth 10, baseline build",
            &plain_bin,
            0,
            preload_env(b, &out, &[("MEMPROF_INTERVAL", "800"), ("MEMPROF_DEPTH", "10")]),
        ));
    }
    println!(
        "worst_case.c, {iterations} iterations × {rounds} rounds; each case runs right after its \
         plain baseline, and the ratio is the median of the rounds' ratios"
    );
    for _ in 0..rounds {
        for i in 0..cases.len() {
            let base = cases[i].base;
            if base == i {
                continue;
            }
            // The baseline right before the case: this machine's speed drifts by tens of
            // per cent over seconds, and two runs in a row see the same conditions.
            let (bl, bt, _) = run(&cases[base].prog, iterations, &cases[base].env, &out);
            cases[base].loops.push(bl);
            cases[base].totals.push(bt);
            let (l, t, s) =
                run_with(&cases[i].front, &cases[i].prog, iterations, &cases[i].env, &out);
            let c = &mut cases[i];
            c.loops.push(l);
            c.totals.push(t);
            c.ratios.push(l / bl);
            c.samples = s;
        }
    }
    for i in 0..cases.len() {
        let base = cases[i].base;
        let bl = median(&mut cases[base].loops.clone());
        let c = &mut cases[i];
        let l = median(&mut c.loops);
        let t = median(&mut c.totals);
        if base == i {
            println!("  {:<32} loop {l:>7.3} s   process {t:>7.3} s (medians)", c.name);
            continue;
        }
        let r = median(&mut c.ratios);
        let per_sample = if c.samples > 0 {
            // The loop time the samples added, at the median ratio, over their number.
            format!(
                ", {:.0} ns per sample ({} samples)",
                (r - 1.0) * bl * 1e9 / c.samples as f64,
                c.samples
            )
        } else {
            String::new()
        };
        println!("  {:<32} loop {l:>7.3} s   {r:.3}× its baseline{per_sample}", c.name);
    }
    if baseline.is_some() {
        // This build beside the earlier one, measured in the same rounds.
        let ratio = |name: &str| {
            let c = cases.iter().find(|c| c.name == name).expect("a case of that name");
            (median(&mut c.ratios.clone()), c.samples)
        };
        let bl = median(&mut cases[0].loops.clone());
        let per_sample = |(r, n): (f64, u64)| (r - 1.0) * bl * 1e9 / n.max(1) as f64;
        let (new, old) = (
            ratio("interval 800, depth 10, dwarf"),
            ratio("interval 800, depth 10, baseline build"),
        );
        println!(
            "  this build vs baseline: {:.0} ns vs {:.0} ns per sample ({:.3}×)",
            per_sample(new),
            per_sample(old),
            per_sample(new) / per_sample(old)
        );
        let (d_new, d_old) =
            (ratio("default interval (512 KiB)").0, ratio("default interval, baseline build").0);
        println!(
            "  this build vs baseline: default interval {d_new:.3}× vs {d_old:.3}× plain \
             (the unsampled path; callgrind counts its instructions exactly, see docs/benchmarks.md)"
        );
    }

    // End to end: what the user waits for, the whole `memprof record` command.
    let floor_env = vec![("LD_PRELOAD", forward.display().to_string())];
    let (mut floor_t, mut plain_t, mut rec_t, mut ratios, mut plain_ratios) =
        (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let p = run(&plain_bin, iterations, &[], &out).1;
        let f = run(&plain_bin, iterations, &floor_env, &out).1;
        let _ = std::fs::remove_file(&out);
        let mut cmd = Command::new(memprof_bin);
        cmd.arg("record").arg("--force").arg("-o").arg(&out).arg("--");
        cmd.arg(&plain_bin).arg(iterations.to_string());
        let t = Instant::now();
        let o = cmd.output().expect("memprof record runs");
        let r = t.elapsed().as_secs_f64();
        assert!(o.status.success(), "memprof record: {}", String::from_utf8_lossy(&o.stderr));
        plain_t.push(p);
        floor_t.push(f);
        rec_t.push(r);
        ratios.push(r / f);
        plain_ratios.push(r / p);
    }
    println!("end to end at the default interval, {iterations} iterations (whole commands)");
    println!("  plain                            process {:>7.3} s", median(&mut plain_t));
    println!("  forwarding-only preload (floor)  process {:>7.3} s", median(&mut floor_t));
    println!(
        "  memprof record (whole command)   process {:>7.3} s   {:.3}× the floor, {:.3}× plain \
         (target ≤ 1.01× the floor)",
        median(&mut rec_t),
        median(&mut ratios),
        median(&mut plain_ratios)
    );

    // Exact mode vs heaptrack: every allocation recorded by both.
    let exact_iters = iterations / 10;
    let have_heaptrack = Command::new("heaptrack").arg("--help").output().is_ok();
    println!("exact mode vs heaptrack, {exact_iters} iterations ({} allocations)", 2 * exact_iters);
    let exact_env = preload_env(&preload, &out, &[("MEMPROF_INTERVAL", "1")]);
    let mut plain = vec![];
    let mut exact = vec![];
    let mut ht = vec![];
    for _ in 0..rounds.min(3) {
        plain.push(run(&plain_bin, exact_iters, &[], &out).1);
        exact.push(run(&plain_bin, exact_iters, &exact_env, &out).1);
        if have_heaptrack {
            let prefix = dir.join("ht");
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                if e.file_name().to_string_lossy().starts_with("ht.") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
            let help = Command::new("heaptrack").arg("--help").output().unwrap();
            let mut cmd = Command::new("heaptrack");
            if String::from_utf8_lossy(&help.stdout).contains("--record-only") {
                cmd.arg("--record-only");
            } else {
                cmd.arg("--raw");
            }
            let t = Instant::now();
            let o =
                cmd.arg("-o").arg(&prefix).arg(&plain_bin).arg(exact_iters.to_string()).output();
            ht.push(t.elapsed().as_secs_f64());
            assert!(o.is_ok_and(|o| o.status.success()), "heaptrack failed");
        }
    }
    let (p, e) = (median(&mut plain), median(&mut exact));
    println!("  plain                            process {p:>7.3} s");
    println!("  memprof exact (--interval 1)     process {e:>7.3} s ({:.2}× plain)", e / p);
    if have_heaptrack {
        let h = median(&mut ht);
        println!(
            "  heaptrack (recording only)       process {h:>7.3} s ({:.2}× plain); memprof/heaptrack = {:.2}",
            h / p,
            e / h
        );
    } else {
        println!("  heaptrack not installed: comparison skipped");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
