//! A sampled block resized millions of times, under `memprof record` at the default
//! interval, measured side by side with the plain program and printed as ratios.
//!
//! ```text
//! cargo bench --bench realloc                 # 5 M reallocations, 7 rounds
//! cargo bench --bench realloc -- --quick      # 2 M, 5 rounds
//! cargo bench --bench realloc -- --baseline /path/to/earlier/target/release
//! ```
//!
//! The program is `fixtures/c/realloc_loop.c`: one long-lived block realloc'ed alternately
//! to 3000 and 1000 bytes (10 GB requested in all at 5 M calls: ≈ 19,000 samples at
//! 512 KiB), built with `cc -O2`. It prints its loop's time (`loop_ns`), which is what is
//! compared: the plain loop, then the loop under `memprof record` (this build's, beside
//! the bench in `target/release`), in interleaved rounds, and the median of each pair's
//! ratio (this machine's speed drifts; a pair runs back to back). With `--baseline DIR`
//! the `memprof` of an earlier build runs in the same rounds, for a before/after
//! comparison. Each profile's size and its sample and move counts are printed beside:
//! a reallocation ends its old block (`src/engine/sampler/mod.rs` §5), so a sample of the
//! loop's block costs its alloc event and its death at the next realloc, and no call costs
//! more; moves are counted for a baseline whose older build still wrote them. Target: the
//! ratio of a loop of unsampled blocks at the default interval (≤ 1.05×).

use std::path::{Path, PathBuf};
use std::process::Command;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn target_dir() -> PathBuf {
    // The bench binary lives in target/<profile>/deps/.
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

fn build(out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/realloc_loop.c");
    let o = Command::new("cc")
        .args(["-O2", "-g", "-fno-optimize-sibling-calls", "-o"])
        .arg(out)
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(o.status.success(), "cc: {}", String::from_utf8_lossy(&o.stderr));
}

/// One run: the loop's seconds, and (file bytes, samples, moves) of its profile if any.
fn run(
    prog: &Path,
    n: u64,
    mode: &str,
    memprof: Option<&Path>,
    out: &Path,
) -> (f64, Option<(u64, u64, u64)>) {
    let _ = std::fs::remove_file(out);
    let mut cmd = match memprof {
        Some(m) => {
            let mut c = Command::new(m);
            c.args(["record", "--force", "-o"]).arg(out).arg("--").arg(prog);
            c
        }
        None => Command::new(prog),
    };
    cmd.arg(n.to_string()).arg(mode);
    let o = cmd.output().expect("the program runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let loop_ns: f64 = err
        .lines()
        .find_map(|l| l.strip_prefix("loop_ns "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the program prints loop_ns");
    let profile = memprof.map(|_| {
        let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
        let p = memprof::profile::Profile::read_file(out).expect("the profile reads back");
        (bytes, p.counts.samples, p.counts.moves)
    });
    (loop_ns / 1e9, profile)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, rounds) = if quick { (2_000_000u64, 5) } else { (5_000_000, 7) };
    let dir = std::env::temp_dir().join(format!("memprof-bench-realloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("realloc_loop");
    build(&prog);
    let memprof = target_dir().join("memprof");
    assert!(memprof.is_file(), "build memprof first: {}", memprof.display());
    let args: Vec<String> = std::env::args().collect();
    let baseline = args
        .iter()
        .position(|a| a == "--baseline")
        .and_then(|i| args.get(i + 1))
        .map(|d| PathBuf::from(d).join("memprof"));
    let mut libs = vec![("realloc", "realloc", memprof.clone())];
    if let Some(b) = baseline {
        assert!(b.is_file(), "--baseline DIR: no {}", b.display());
        libs.push(("realloc", "baseline", b));
    }
    libs.push(("malloc", "malloc+free", memprof));
    let out = dir.join("realloc.mprof");
    println!(
        "realloc_loop under memprof record: {n} reallocations of one block, default interval, \
         {rounds} rounds"
    );
    let mut plain = Vec::new();
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); libs.len()];
    let mut last: Vec<Option<(u64, u64, u64)>> = vec![None; libs.len()];
    for _ in 0..rounds {
        for (i, (mode, _, lib)) in libs.iter().enumerate() {
            let (base, _) = run(&prog, n, mode, None, &out);
            let (t, p) = run(&prog, n, mode, Some(lib), &out);
            plain.push(base);
            ratios[i].push(t / base);
            last[i] = p;
        }
    }
    println!("  plain loops (median)           {:>8.3} s", median(&mut plain));
    for (i, (_, name, _)) in libs.iter().enumerate() {
        let (bytes, samples, moves) = last[i].unwrap_or_default();
        println!(
            "  {name:<12} loop ratio {:>6.2}×   profile {:>9} B, {samples} samples, {moves} moves",
            median(&mut ratios[i]),
            bytes
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
