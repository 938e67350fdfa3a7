//! Rust programs on each global allocator, unmodified: `fixtures/rust/allocators` built
//! three ways (tikv-jemallocator, mimalloc, the system's; release with line tables only and
//! its symbol table, as services ship) and run plain and under `memprof record`. In the
//! exact mode each allocation site shows exactly what the program allocates and keeps,
//! whichever allocator serves it, its site is the program's function (never the shim's or
//! the allocator crate's frames), the live and peak views hold, and the program prints
//! what it prints plain. At the default interval the estimates are within a stated bound.
//! A stripped copy of the jemalloc and mimalloc variants gets `record`'s explanation
//! instead of an almost empty report, and a static Rust program is pointed to
//! `memprof::Sampled`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use memprof::profile::Profile;
use memprof::report::{site_totals, stack_totals, View};

use crate::common::{skipped, text};
use crate::harm::plain;
use crate::programs::{assert_ok, read, record, scratch};

/// The fixture's global allocator, by cargo feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    System,
    Jemalloc,
    Mimalloc,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::System => "system",
            Variant::Jemalloc => "jemalloc",
            Variant::Mimalloc => "mimalloc",
        }
    }
}

/// `cargo build --release` of the fixture with `features`, into `target`: offline first
/// (the registry's crates are fetched once, then every run builds without the network),
/// then, when a crate is missing, with the registry.
fn cargo_build(features: &[&str], target: &Path) -> Output {
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust/allocators/Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let run = |offline: bool| {
        let mut c = Command::new(&cargo);
        c.args(["build", "--release", "--locked", "--quiet", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(target)
            // The fixture is its own workspace, built with its own profile.
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS");
        if offline {
            c.arg("--offline");
        }
        if !features.is_empty() {
            c.arg("--features").arg(features.join(","));
        }
        c.output().expect("cargo runs")
    };
    let first = run(true);
    if first.status.success() {
        return first;
    }
    run(false)
}

/// The fixture built for `variant`, once per test run. Each variant has its own target
/// directory under cargo's directory for integration tests, kept from run to run (the
/// jemalloc variant compiles jemalloc's C sources: minutes the first time, nothing after).
fn fixture(variant: Variant) -> PathBuf {
    static BUILT: [OnceLock<PathBuf>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    BUILT[variant as usize]
        .get_or_init(|| {
            let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join("fixtures-rust-allocators")
                .join(variant.name());
            let features: &[&str] = match variant {
                Variant::System => &[],
                Variant::Jemalloc => &["jemalloc"],
                Variant::Mimalloc => &["mimalloc"],
            };
            let o = cargo_build(features, &target);
            assert!(
                o.status.success(),
                "cargo build fixtures/rust/allocators ({}): {}",
                variant.name(),
                text(&o.stderr)
            );
            target.join("release/allocators")
        })
        .clone()
}

/// A stripped copy of `variant` (`strip`: no `.symtab`, no DWARF), once per run; `None`,
/// said on the terminal, without `strip`.
fn stripped(variant: Variant) -> Option<PathBuf> {
    static STRIPPED: [OnceLock<Option<PathBuf>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    STRIPPED[variant as usize]
        .get_or_init(|| {
            let name = format!("stripped-{}", variant.name());
            let prog = scratch(&format!("allocators-{name}-build")).join(name);
            std::fs::copy(fixture(variant), &prog).unwrap();
            let o = Command::new("strip").arg(&prog).output();
            if !o.is_ok_and(|o| o.status.success()) {
                skipped(
                    "the stripped allocator note",
                    "no `strip`; Debian: apt-get install binutils",
                );
                return None;
            }
            Some(prog)
        })
        .clone()
}

/// What the fixture's sites allocate with one churn round (src/main.rs's table), as
/// (site, alloc bytes, alloc objects, live bytes, live objects) at exit.
const EXACT: &[(&str, f64, f64, f64, f64)] = &[
    // 100 blocks of 100,000 bytes, all held.
    ("allocators::keep_site", 10_000_000.0, 100.0, 10_000_000.0, 100.0),
    // 1,000 blocks of 1,000 bytes, each freed.
    ("allocators::churn_site", 1_000_000.0, 1_000.0, 0.0, 0.0),
    // 16 blocks of 8,192 bytes aligned to 4,096, 8 freed.
    ("allocators::aligned_site", 131_072.0, 16.0, 65_536.0, 8.0),
    // A Vec<u64> grown by doubling from 1,024 to 65,536 elements: 8,192 bytes allocated,
    // six reallocations, the last (524,288 bytes) held.
    ("allocators::grow_site", 8.0 * 1_024.0 * 127.0, 7.0, 524_288.0, 1.0),
    // 4 zeroed blocks of 250,000 bytes, 2 freed.
    ("allocators::zeroed_site", 1_000_000.0, 4.0, 500_000.0, 2.0),
];

/// (alloc bytes, alloc objects, live bytes, live objects) by site name.
fn sites(p: &Profile) -> HashMap<String, (f64, f64, f64, f64)> {
    site_totals(p)
        .into_iter()
        .map(|s| (s.site, (s.alloc_bytes, s.alloc_objects, s.live_bytes, s.live_objects)))
        .collect()
}

/// A site's totals; a failure names the sites there are (a site absent is the failure of
/// an allocator that memprof does not reach: std's start-up allocations are all it sees).
fn site(all: &HashMap<String, (f64, f64, f64, f64)>, name: &str) -> (f64, f64, f64, f64) {
    *all.get(name).unwrap_or_else(|| {
        let mut names: Vec<&String> = all.keys().collect();
        names.sort();
        panic!("no site {name:?} among {names:?}")
    })
}

/// Bytes by site name under `view` (estimated bytes of the view's samples).
fn view_bytes(p: &Profile, view: View) -> HashMap<String, f64> {
    let mut by = HashMap::new();
    for t in stack_totals(p, view) {
        *by.entry(p.site_name(t.stack)).or_insert(0.0) += t.bytes;
    }
    by
}

/// Frames that must never be a site: the allocator shim, the allocator crates and their C.
fn is_allocator_frame(name: &str) -> bool {
    const PLUMBING: &[&str] = &[
        "__rust",
        "__rg_",
        "__rdl_",
        "_rjem_",
        "je_",
        "mi_",
        "_mi_",
        "tikv_jemalloc",
        "<tikv_jemalloc",
        "mimalloc",
        "<mimalloc",
        "libmimalloc",
        "malloc",
        "calloc",
        "realloc",
        "posix_memalign",
        "alloc::",
        "<alloc::",
    ];
    PLUMBING.iter().any(|p| name.starts_with(p))
}

/// Runs `variant` plain and under `record --interval 1`, and checks every site exactly.
fn exact(variant: Variant) {
    let prog = fixture(variant);
    let dir = scratch(&format!("allocators-exact-{}", variant.name()));
    let alone = plain(&dir, &prog, &[]);
    assert_eq!(alone.status.code(), Some(0), "{}", text(&alone.stderr));
    let out = record(&dir, &["--interval", "1", "-o", "a.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    assert_eq!(text(&out.stdout), text(&alone.stdout), "the program prints what it prints plain");
    let err = text(&out.stderr);
    assert!(!err.contains("no allocations were seen"), "{err}");
    let p = read(&dir.join("a.mprof"));
    assert!(p.complete && p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!(p.lost.events, 0);
    let all = sites(&p);
    for &(name, alloc, objects, live, live_objects) in EXACT {
        assert_eq!(site(&all, name), (alloc, objects, live, live_objects), "{name}");
    }
    // The summary names the largest site.
    assert!(err.contains("allocators::keep_site"), "{err}");
    // No site is the allocator's.
    for name in all.keys() {
        assert!(!is_allocator_frame(name), "{name} is a site: {all:?}");
    }
    // The live view at exit is what the program holds; the peak view is the live set when
    // the last zeroed block was allocated (the heap's largest: everything held, and all
    // four zeroed blocks).
    let live = view_bytes(&p, View::Live);
    let peak = view_bytes(&p, View::Peak);
    let get = |m: &HashMap<String, f64>, s: &str| m.get(s).copied().unwrap_or(0.0);
    for (name, at_exit, at_peak) in [
        ("allocators::keep_site", 10_000_000.0, 10_000_000.0),
        ("allocators::churn_site", 0.0, 0.0),
        ("allocators::aligned_site", 65_536.0, 65_536.0),
        ("allocators::grow_site", 524_288.0, 524_288.0),
        ("allocators::zeroed_site", 500_000.0, 1_000_000.0),
    ] {
        assert_eq!(get(&live, name), at_exit, "live {name}: {live:?}");
        assert_eq!(get(&peak, name), at_peak, "peak {name}: {peak:?}");
    }
}

#[test]
fn allocators_system_exact() {
    exact(Variant::System);
}

#[test]
fn allocators_jemalloc_exact() {
    exact(Variant::Jemalloc);
}

#[test]
fn allocators_mimalloc_exact() {
    exact(Variant::Mimalloc);
}

/// Churn rounds at the default interval: 256 rounds churn n = 256,000,000 bytes.
const ROUNDS: &str = "256";

/// At the default interval R = 512 KiB each byte is a sample point with probability 1/R,
/// so a site's estimate k·R of n bytes has standard deviation √(n·R·(1 − 1/R)): 11.6 MB
/// (4.5 %) for `churn_site`'s 256,000,000 bytes, 2.3 MB for `keep_site`'s 10,000,000. The
/// bound is 5σ: a false failure has probability ≈ 5.7e-7 for each (normal approximation);
/// the seed is fixed, so the outcome is also reproducible. Every sampled churn block was
/// freed (live 0), every sampled kept block is live.
fn sampled(variant: Variant) {
    let prog = fixture(variant);
    let dir = scratch(&format!("allocators-sampled-{}", variant.name()));
    let alone = plain(&dir, &prog, &[ROUNDS]);
    let out = record(&dir, &["--seed", "7", "-o", "s.mprof"], &prog, &[ROUNDS]);
    assert_ok(&out, 0);
    assert_eq!(text(&out.stdout), text(&alone.stdout));
    let p = read(&dir.join("s.mprof"));
    assert_eq!(p.header.interval, 512.0 * 1024.0);
    let r = p.header.interval;
    let all = sites(&p);
    let within = |name: &str, n: f64| {
        let sd = (n * r * (1.0 - 1.0 / r)).sqrt();
        let (est, _, live, _) = site(&all, name);
        assert!((est - n).abs() < 5.0 * sd, "{name}: estimate {est} vs {n} (5σ = {})", 5.0 * sd);
        live
    };
    assert_eq!(within("allocators::churn_site", 256.0 * 1_000_000.0), 0.0);
    let kept = within("allocators::keep_site", 10_000_000.0);
    assert_eq!(kept, site(&all, "allocators::keep_site").0, "every kept block is live");
}

#[test]
fn allocators_system_sampled() {
    sampled(Variant::System);
}

#[test]
fn allocators_jemalloc_sampled() {
    sampled(Variant::Jemalloc);
}

#[test]
fn allocators_mimalloc_sampled() {
    sampled(Variant::Mimalloc);
}

/// A variant stripped: memprof cannot find its allocator's entry points without a
/// symbol table, and `record` says so, with what to do, in the exact mode where the Rust
/// runtime's own start-up allocations are seen too (they must not hide it), and at the
/// default interval where nothing at all may be seen (in place of "no allocations were
/// seen" alone).
fn stripped_is_explained(variant: Variant) {
    let Some(prog) = stripped(variant) else { return };
    let dir = scratch(&format!("allocators-stripped-{}", variant.name()));
    let alone = plain(&dir, &prog, &[]);
    let out = record(&dir, &["--interval", "1", "-o", "s.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    assert_eq!(text(&out.stdout), text(&alone.stdout));
    let err = text(&out.stderr);
    let shown = prog.display().to_string();
    let links = format!("links {} statically and has no symbol table", variant.name());
    let notes: Vec<&str> = err
        .lines()
        .filter(|l| l.trim_start_matches("memprof: ").starts_with("note: ") && l.contains(&links))
        .collect();
    assert_eq!(notes.len(), 1, "{err}");
    let note = notes[0];
    assert!(
        note.trim_start_matches("memprof: ").starts_with(&format!("note: {shown} {links}")),
        "{note}"
    );
    assert!(
        note.contains("`strip = \"debuginfo\"`") && note.contains("memprof::Sampled"),
        "{note}"
    );
    let out = record(&dir, &["-o", "d.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let seen = err.lines().filter(|l| l.contains(&links)).count();
    assert_eq!(seen, 1, "{err}");
}

#[test]
fn allocators_stripped_jemalloc_is_explained() {
    stripped_is_explained(Variant::Jemalloc);
}

#[test]
fn allocators_stripped_mimalloc_is_explained() {
    stripped_is_explained(Variant::Mimalloc);
}

/// A statically linked Rust program never loads the preload library: `record` refuses it
/// before it runs, in one line that names `memprof::Sampled` (a C program is told to link
/// dynamically only: `record::static_program_is_refused`).
#[test]
fn allocators_static_rust_program_is_refused_with_the_in_process_api() {
    let dir = scratch("allocators-static-rust");
    let src = dir.join("hello.rs");
    std::fs::write(&src, "fn main() { println!(\"{:?}\", vec![1u8; 100]); }\n").unwrap();
    let prog = dir.join("hello-static");
    let o = Command::new("rustc")
        .args(["-C", "target-feature=+crt-static", "-C", "opt-level=1", "-o"])
        .arg(&prog)
        .arg(&src)
        .output()
        .expect("rustc runs");
    if !o.status.success() {
        skipped("the static Rust program", &format!("rustc +crt-static: {}", text(&o.stderr)));
        return;
    }
    let out = record(&dir, &[], &prog, &[]);
    crate::common::assert_one_line_error(&out, None, "statically linked");
    let err = text(&out.stderr);
    assert!(err.contains("link it dynamically, or make `memprof::Sampled` its global"), "{err}");
}

/// The note names the program as the user named it, escaped: a file name that a terminal
/// would act on is shown by its visible escapes.
#[test]
fn allocators_stripped_note_escapes_the_name() {
    let Some(prog) = stripped(Variant::Jemalloc) else { return };
    let dir = scratch("allocators-stripped-escaped");
    let hostile = dir.join("app\x1b[2J\x07\r");
    std::fs::copy(&prog, &hostile).unwrap();
    let out = record(&dir, &["-o", "e.mprof"], &hostile, &[]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let shown = format!("{}/app\\u{{1b}}[2J\\u{{7}}\\r", dir.display());
    let note = err.lines().find(|l| l.contains("links jemalloc statically")).unwrap_or_else(|| {
        panic!("no note: {err}");
    });
    assert!(note.contains(&format!("seen in {shown}: it links jemalloc")), "{note}");
    assert!(!err.contains(['\x1b', '\x07', '\r']), "{err:?}");
}
