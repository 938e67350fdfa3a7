//! What an unsampled call of a patched allocator costs, beside glibc's `malloc` through the
//! preload library: instruction counts under callgrind, which do not depend on the machine's
//! load.
//!
//! ```text
//! cargo build --release && cargo bench --bench hooked
//! ```
//!
//! `fixtures/c/hook_loop.c` makes N `malloc(64)`/`free` pairs, built twice: plain (its calls
//! bind to glibc's, or to the preload library's exports) and with `-DDEFINER -rdynamic`
//! (the executable defines and exports `malloc` and `free` itself, forwarding to glibc's
//! `__libc_malloc` and `__libc_free`, as rustc's does with jemalloc: the preload library
//! patches their entry points) and with `-DMI` (the pairs are `mi_malloc_aligned` and
//! `mi_free`, what the `mimalloc` crate calls, found in the symbol table: both hooks take the
//! fast path). Each runs under callgrind for 100 K and 1.1 M pairs, plain
//! and under the preload library with a session at the default interval, and the
//! difference divided by 1 M is the cost of one pair. What the preload adds to a pair of
//! patched calls is the `jmp rel32` at each entry, the relay's indirect jump, the hook's
//! fast path and the trampoline's jump back; to glibc's, the hook's fast path alone.
//!
//! callgrind is started with the preload library in `LD_PRELOAD` and
//! `MEMPROF_FOLLOW_FORKS=1` (so that valgrind's launcher, which loads it first, leaves it
//! in the environment for the program), and `--smc-check=all`: the patch rewrites code the
//! loader may already have run.

mod common;

use std::path::Path;
use std::process::Command;

fn build(out: &Path, extra: &[&str]) {
    let flags: Vec<&str> =
        ["-O2", "-fno-builtin"].into_iter().chain(extra.iter().copied()).collect();
    common::cc("hook_loop.c", out, &flags);
}

/// Instructions callgrind counts for `prog n`, with the preload library when given.
fn instructions(prog: &Path, n: u64, preload: Option<&Path>, out: &Path) -> Option<u64> {
    let mut cmd = Command::new("valgrind");
    cmd.args(["--tool=callgrind", "--smc-check=all", "--callgrind-out-file=/dev/null"]);
    cmd.arg(prog).arg(n.to_string());
    if let Some(lib) = preload {
        cmd.env("LD_PRELOAD", lib)
            .env("MEMPROF_FOLLOW_FORKS", "1")
            .env("MEMPROF_OUTPUT", out.join("hooked-%p.mprof"));
    }
    let o = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&o.stderr);
    let line = text.lines().find(|l| l.contains("Collected :"))?;
    line.rsplit(':').next()?.trim().replace(',', "").parse().ok()
}

fn main() {
    let dir = std::env::temp_dir().join(format!("memprof-hooked-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let glibc = dir.join("hook_loop");
    let definer = dir.join("hook_loop_definer");
    let mi = dir.join("hook_loop_mi");
    build(&glibc, &[]);
    build(&definer, &["-DDEFINER", "-rdynamic"]);
    build(&mi, &["-DMI"]);
    let preload = common::target_dir().join("libmemprof_preload.so");
    assert!(preload.is_file(), "build the preload library first: {}", preload.display());
    let (small, large) = (100_000u64, 1_100_000u64);
    let per_pair = |prog: &Path, lib: Option<&Path>| -> Option<f64> {
        let a = instructions(prog, small, lib, &dir)?;
        let b = instructions(prog, large, lib, &dir)?;
        Some((b as f64 - a as f64) / (large - small) as f64)
    };
    println!(
        "instructions per unsampled malloc(64)+free pair (callgrind, {large} − {small} pairs)"
    );
    let rows = [
        ("glibc's malloc", &glibc),
        ("the executable's own malloc (patched)", &definer),
        ("mi_malloc_aligned + mi_free (patched)", &mi),
    ];
    for (name, prog) in rows {
        match (per_pair(prog, None), per_pair(prog, Some(&preload))) {
            (Some(plain), Some(hooked)) => println!(
                "  {name:<40} plain {plain:>6.1}   under the preload {hooked:>6.1}   added {:>5.1}",
                hooked - plain
            ),
            _ => println!("  {name}: valgrind not found or failed: skipped"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
