//! Builds `libmemprof_preload.so` and hands it to the `memprof` executable, which carries it
//! inside itself (`src/record/command/bundled.rs`): `cargo run`, `cargo install` and a copied
//! `target/release/memprof` all find their library without any other file.
//!
//! # How
//! Cargo has no stable way to depend on another package's `cdylib` (artifact dependencies
//! are nightly-only), and `memprof-preload` depends on this package's library, so it cannot
//! be a build dependency either. This script runs a second `cargo build -p memprof-preload
//! --release` of this workspace, the way eBPF and WebAssembly projects build the object they
//! embed, with:
//! - its own target directory (`<target>/memprof-preload-embed`, shared by every profile of
//!   the outer build, so the library is built once and rebuilt only when its sources change),
//!   because the outer build holds the lock on its own;
//! - always the release profile (the preload library is the hot path) without debug
//!   information (nothing reads the library's own DWARF: its frames are dropped from every
//!   stack; its unwind tables, `.eh_frame`, stay), which makes it about 5× smaller;
//! - the outer build's `rustflags` plus frame pointers (`.cargo/config.toml` is not read by
//!   `cargo install --path` run from another directory), the same `cargo` and `rustc`, and
//!   the outer `RUSTC_WORKSPACE_WRAPPER` (clippy's driver) removed;
//! - `--locked`: the outer build has already brought `Cargo.lock` up to date, and the inner one
//!   must not edit the source tree (a `cargo install` build leaves it alone too).
//!
//! The script only does this when the `cli` feature is on: the inner build compiles this
//! package's library for the preload crate without `cli`, so the script does not recurse.
//! The library's bytes go to `$OUT_DIR/libmemprof_preload.so` (for `include_bytes!`), a
//! 64-bit FNV-1a digest of them to `MEMPROF_BUNDLED_DIGEST` (it names the cached copy), and a
//! copy beside the outer executable (`target/<profile>/libmemprof_preload.so`, replaced
//! atomically) for `LD_PRELOAD` by hand and the benchmarks; being rewritten on every rebuild,
//! that copy never goes stale.
//!
//! `MEMPROF_PRELOAD_LIB=/path/to/libmemprof_preload.so` at build time embeds that file
//! instead (for packagers who build the library separately).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = "libmemprof_preload.so";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MEMPROF_PRELOAD_LIB");
    if env::var_os("CARGO_FEATURE_CLI").is_none() {
        return;
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let built = match env::var_os("MEMPROF_PRELOAD_LIB") {
        Some(p) => PathBuf::from(p),
        None => build_preload(&out_dir),
    };
    let bytes = fs::read(&built)
        .unwrap_or_else(|e| panic!("cannot read the preload library {}: {e}", built.display()));
    assert!(bytes.starts_with(b"\x7fELF"), "{} is not an ELF file", built.display());
    fs::write(out_dir.join(LIB), &bytes).expect("write the library into OUT_DIR");
    println!("cargo:rustc-env=MEMPROF_BUNDLED_DIGEST={:016x}", fnv1a(&bytes));
    if let Some(profile_dir) = profile_dir(&out_dir) {
        // Beside the executable. Best effort: the executable carries the library anyway.
        let tmp = profile_dir.join(format!(".{LIB}.{}.tmp", std::process::id()));
        if fs::write(&tmp, &bytes).is_ok() && fs::rename(&tmp, profile_dir.join(LIB)).is_err() {
            let _ = fs::remove_file(&tmp);
        }
    }
}

/// Runs the inner `cargo build` and returns the library it made.
fn build_preload(out_dir: &Path) -> PathBuf {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    for watched in ["src", "preload/src", "preload/Cargo.toml", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={watched}");
    }
    println!("cargo:rerun-if-changed=.cargo/config.toml");
    let target_root = profile_dir(out_dir)
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| out_dir.to_path_buf());
    let target_dir = target_root.join("memprof-preload-embed");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let host = env::var("HOST").unwrap_or_default();
    let target = env::var("TARGET").unwrap_or_default();

    let mut flags: Vec<String> = env::var("CARGO_ENCODED_RUSTFLAGS")
        .map(|f| f.split('\x1f').filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    if !flags.iter().any(|f| f.contains("force-frame-pointers")) {
        flags.push("-Cforce-frame-pointers=yes".into());
    }

    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&manifest_dir)
        .args(["build", "--release", "--locked", "-p", "memprof-preload", "--lib"])
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    if !target.is_empty() && target != host {
        cmd.args(["--target", &target]);
    }
    for var in [
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        cmd.env_remove(var);
    }
    // Cargo's variables for this script are inherited by the inner cargo, which passes them on
    // to the build scripts it runs: an inherited CARGO_FEATURE_CLI would make this script,
    // run again for the preload crate's copy of the library, build the library again.
    for (k, _) in env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CARGO_FEATURE_") || k.starts_with("CARGO_CFG_") {
            cmd.env_remove(&*k);
        }
    }
    cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"))
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_TERM_COLOR", "never");
    if let Some(rustc) = env::var_os("RUSTC") {
        cmd.env("RUSTC", rustc);
    }
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("cannot run {} to build the preload library: {e}", cargo.to_string_lossy())
    });
    assert!(
        status.success(),
        "building the preload library (cargo build -p memprof-preload --release) failed; \
         its errors are above"
    );
    let mut lib = target_dir;
    if !target.is_empty() && target != host {
        lib.push(&target);
    }
    lib.push("release");
    lib.push(LIB);
    lib
}

/// `<target>/<profile>` (or `<target>/<triple>/<profile>`): the directory that holds the
/// `build/` directory in which `OUT_DIR` lies.
fn profile_dir(out_dir: &Path) -> Option<PathBuf> {
    let mut p = out_dir;
    while let Some(parent) = p.parent() {
        if p.file_name().is_some_and(|n| n == "build") {
            return Some(parent.to_path_buf());
        }
        p = parent;
    }
    None
}

/// 64-bit FNV-1a: names the cached copy of the library. Collisions cannot make a wrong
/// library load: the cached file is compared byte for byte with the embedded one before use.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
