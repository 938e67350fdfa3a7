//! Allocators that the dynamic linker's symbol lookup never sends to the preload library,
//! reached by patching their entry points (x86-64): an executable that defines the malloc
//! family itself and exports it (as rustc's does with jemalloc), whose allocations come
//! from inside it, through a linked library's PLT and GOT, and through a `dlopen`ed
//! library; and rustc itself, compiling a small program.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::text;
use crate::harm::{modes, plain, strs};
use crate::programs::{assert_ok, fixture, read, record, scratch, totals};

/// Builds `fixtures/c/definer.c` with `libmyalloc.c` into one executable that exports its
/// malloc family (`-rdynamic`), linked against `libdefuse.so`: once per run (two tests use
/// it, and a second `cc` writing the file while the first test ran it made that test's
/// program "not executable").
fn definer() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build_definer(false)).clone()
}

/// [`definer`] carrying jemalloc's message prefix (`-DNAMED_JEMALLOC`), as rustc's
/// executable does: `record` takes its allocator for jemalloc.
fn named_definer() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build_definer(true)).clone()
}

fn build_definer(named: bool) -> PathBuf {
    let lib = fixture("libdefuse");
    let dir = lib.parent().expect("the build directory").to_owned();
    let out = dir.join(if named { "definer-named" } else { "definer" });
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c");
    let mut args: Vec<std::ffi::OsString> =
        ["-O2", "-g", "-fno-optimize-sibling-calls", "-pthread", "-rdynamic", "-o"]
            .map(Into::into)
            .to_vec();
    if named {
        args.insert(0, "-DNAMED_JEMALLOC".into());
    }
    args.extend([
        out.clone().into(),
        src.join("definer.c").into(),
        src.join("libmyalloc.c").into(),
    ]);
    args.extend([lib.into(), format!("-Wl,-rpath,{}", dir.display()).into(), "-ldl".into()]);
    crate::programs::must_compile("cc", &args, None);
    out
}

/// An executable that defines and exports malloc, free, calloc, realloc and the aligned
/// allocators: every block comes from its allocator under `record` as it does plain (the
/// fixture checks each one, and its free aborts on a foreign block), the output is the
/// same, and the exact profile holds each site's bytes, whether the call was made inside
/// the definer, through a linked library's PLT, or through a `dlopen`ed library. Before the
/// definer's entry points were patched, none of these sites had a sample (every call bound
/// to the executable's functions, never to the preload library's).
#[test]
fn an_executable_that_defines_malloc_is_profiled_exactly() {
    let dir = scratch("definer");
    let prog = definer();
    let dl = fixture("libdlfix");
    let dl = dl.to_str().unwrap();
    let p = plain(&dir, &prog, &[dl]);
    assert_eq!(p.status.code(), Some(0), "{}", text(&p.stderr));
    assert!(text(&p.stdout).contains("all from myalloc"), "{}", text(&p.stdout));
    for (label, opts) in modes("df") {
        let out = record(&dir, &strs(&opts), &prog, &[dl]);
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), text(&p.stdout), "{label}");
        let prof = read(&dir.join(&opts[opts.len() - 1]));
        assert!(prof.complete, "{label}: {:?}", prof.warnings);
        if label.ends_with("exact") {
            assert_eq!(totals(&prof, "def_main_site"), (100_000.0, 100.0, 100_000.0, 100.0));
            assert_eq!(totals(&prof, "def_realloc_first"), (5_000.0, 50.0, 0.0, 0.0));
            assert_eq!(totals(&prof, "def_realloc_site"), (100_000.0, 50.0, 100_000.0, 50.0));
            assert_eq!(totals(&prof, "def_calloc_site"), (10_000.0, 10.0, 0.0, 0.0));
            assert_eq!(totals(&prof, "def_aligned_site"), (10_240.0, 20.0, 10_240.0, 20.0));
            assert_eq!(totals(&prof, "use_lib_site"), (90_000.0, 30.0, 90_000.0, 30.0));
            assert_eq!(totals(&prof, "lib_alloc"), (28_000.0, 40.0, 28_000.0, 40.0));
            assert_eq!(totals(&prof, "def_child_site").1, 0.0);
        }
    }
}

/// Following forks: the forked child inherits the patched entry points, their trampolines
/// and slots, and its own profile holds exactly its frees and its allocations.
#[test]
fn a_forked_child_of_a_definer_keeps_its_patches() {
    let dir = scratch("definer-fork");
    let prog = definer();
    let dl = fixture("libdlfix");
    let opts = ["--interval", "1", "--follow-forks", "-o", "df.mprof"];
    let out = record(&dir, &opts, &prog, &[dl.to_str().unwrap()]);
    assert_ok(&out, 0);
    assert!(text(&out.stdout).contains("all from myalloc"), "{}", text(&out.stdout));
    let parent = read(&dir.join("df.mprof"));
    assert_eq!(totals(&parent, "use_lib_site"), (90_000.0, 30.0, 90_000.0, 30.0));
    let children = memprof::profile::tree::children(&dir.join("df.mprof"));
    assert_eq!(children.len(), 1, "{children:?}");
    let child = read(&children[0]);
    assert_eq!(totals(&child, "def_child_site"), (5_000.0, 10.0, 5_000.0, 10.0));
    assert_eq!(totals(&child, "def_main_site").1, 0.0);
}

/// An executable that defines malloc with an allocator `record` recognises (jemalloc's
/// messages, as in rustc's) gets the note naming it in its own profile and in its forked
/// child's, so that their reports tell that allocator's mappings as the allocator's, not
/// as memory outside malloc (`record/command/interposable.rs` §4); the definer without the
/// messages gets none.
#[test]
fn the_allocator_a_definer_links_is_named_in_each_of_its_profiles() {
    let dl = fixture("libdlfix");
    let named = "the program's allocator is jemalloc,";
    for (prog, want) in [(named_definer(), true), (definer(), false)] {
        let dir = scratch(if want { "definer-named" } else { "definer-unnamed" });
        let opts = ["--interval", "1", "--follow-forks", "-o", "dn.mprof"];
        let out = record(&dir, &opts, &prog, &[dl.to_str().unwrap()]);
        assert_ok(&out, 0);
        let children = memprof::profile::tree::children(&dir.join("dn.mprof"));
        assert_eq!(children.len(), 1, "{children:?}");
        for file in [dir.join("dn.mprof"), children[0].clone()] {
            let prof = read(&file);
            let has = prof.notes.iter().filter(|n| n.starts_with(named)).count();
            assert_eq!(has, usize::from(want), "{}: {:?}", file.display(), prof.notes);
        }
        assert_eq!(text(&out.stderr).contains(named), want, "{}", text(&out.stderr));
    }
}

/// The real compiler (the toolchain's own `bin/rustc`, not rustup's proxy): its executable
/// links jemalloc and exports `malloc`, so librustc_driver, LLVM and libstdc++ allocate
/// through it. Under `record` (the default interval, and the exact mode with its DWARF
/// unwinder, rustc having no frame pointers) the compiled program runs, the heap's peak is
/// megabytes, and the allocating stacks name rustc's crates (all but a few of them do). Before the patching, the
/// profile held a handful of samples and no `rustc_` frame. Its allocator is named in the
/// profile (`record/command/interposable.rs` §4).
#[test]
fn rustc_compiling_a_small_program_is_profiled() {
    let sysroot = Command::new("rustc").args(["--print", "sysroot"]).output().expect("rustc");
    let rustc = PathBuf::from(text(&sysroot.stdout).trim()).join("bin/rustc");
    assert!(rustc.is_file(), "{}", rustc.display());
    let dir = scratch("rustc");
    std::fs::write(dir.join("hello.rs"), "fn main() { println!(\"hello from rustc\"); }\n")
        .unwrap();
    for (label, opts) in modes("rc") {
        let hello = format!("hello-{}", label.replace(' ', "-"));
        let out = record(&dir, &strs(&opts), &rustc, &["-O", "hello.rs", "-o", &hello]);
        assert_ok(&out, 0);
        let ran = Command::new(dir.join(&hello)).output().expect("the compiled program runs");
        assert_eq!(text(&ran.stdout), "hello from rustc\n", "{label}");
        let prof = read(&dir.join(&opts[opts.len() - 1]));
        assert!(prof.complete, "{label}: {:?}", prof.warnings);
        // Its jemalloc is named in the profile, so the reports tell jemalloc's mappings as
        // the allocator's: not as memory outside malloc, with the live heap in none of it.
        let named = "the program's allocator is jemalloc,";
        assert!(prof.notes.iter().any(|n| n.starts_with(named)), "{label}: {:?}", prof.notes);
        let v = crate::programs::report_json(&dir, &opts[opts.len() - 1]);
        assert_eq!(v["gap"]["allocator"], "jemalloc", "{label}: {v:#}");
        assert_eq!(v["gap"]["outside_malloc_bytes"].as_f64(), Some(0.0), "{label}: {v:#}");
        let peak: f64 = memprof::report::collapsed(&prof, memprof::report::View::Peak)
            .iter()
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        // The exact run shows the true peak, several MiB; sampled at 512 KiB, the
        // cross-fitted estimate (R × the points each half holds at the other half's peak)
        // falls under 1 MiB only with one such point or none, where a peak of several MiB
        // holds a dozen or more on average: that chance is negligible.
        let floor = if label.ends_with("exact") { 4.0 } else { 1.0 } * 1024.0 * 1024.0;
        assert!(peak > floor, "{label}: peak {peak} B");
        let stacks = memprof::report::collapsed(&prof, memprof::report::View::Alloc);
        let rustc_frames = stacks.iter().filter(|l| l.contains("rustc_")).count();
        assert!(rustc_frames * 2 > stacks.len(), "{label}: {rustc_frames} of {}", stacks.len());
    }
}

/// `rustc` as a new user types it, rustup's proxy on `PATH` (a link to `rustup`, which
/// executes the toolchain's `rustc`): `record` runs the toolchain's program itself and says
/// so, so the profile is the compiler's (rustc's crates in its stacks), not the proxy's
/// handful of samples with a note. Skipped where `rustc` is not rustup's proxy.
#[test]
fn rustc_through_rustups_proxy_is_the_compiler() {
    let Some(proxy) = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("rustc")).find(|c| c.is_file()))
    else {
        return crate::common::skipped("rustc through rustup's proxy", "no rustc on PATH");
    };
    let is_proxy =
        std::fs::canonicalize(&proxy).is_ok_and(|t| t.file_name() == Some("rustup".as_ref()));
    if !is_proxy {
        return crate::common::skipped("rustc through rustup's proxy", "rustc is not rustup's");
    }
    let dir = scratch("rustc-proxy");
    std::fs::write(dir.join("hello.rs"), "fn main() { println!(\"hello from rustc\"); }\n")
        .unwrap();
    let out = record(&dir, &["-o", "px.mprof"], Path::new("rustc"), &["-O", "hello.rs"]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    assert!(err.contains("(looked through rustup's proxy rustc)"), "{err}");
    assert!(!err.contains("this profile is the wrapper's"), "{err}");
    let ran = Command::new(dir.join("hello")).output().expect("the compiled program runs");
    assert_eq!(text(&ran.stdout), "hello from rustc\n");
    let prof = read(&dir.join("px.mprof"));
    assert!(prof.complete, "{:?}", prof.warnings);
    assert!(prof.header.executable.ends_with("/bin/rustc"), "{}", prof.header.executable);
    let stacks = memprof::report::collapsed(&prof, memprof::report::View::Alloc);
    assert!(stacks.iter().any(|l| l.contains("rustc_")), "{stacks:?}");
}
