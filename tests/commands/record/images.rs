//! The images a run loads and how they are named: symbols written after the run, build
//! ids, offline symbols, wrapper scripts, proxies, `exec`, a lone copy of the executable.

use super::*;

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

    // The files alone, without the symbol cache (which keeps the frames of the build that
    // ran, by its build id: checked last).
    let report = || {
        let mut c = Command::new(MEMPROF);
        c.env("MEMPROF_NO_SYMBOL_CACHE", "1").arg("report").arg(&file);
        c.output().unwrap()
    };
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

    // The symbol cache names the frames of the build that ran, whatever the file is now.
    build("ffeeddccbbaa99887766554433221100");
    let cache = dir.join("cache");
    let cached = || {
        let mut c = Command::new(MEMPROF);
        c.env("XDG_CACHE_HOME", &cache).arg("report").arg(&file);
        c.output().unwrap()
    };
    build(first);
    assert!(text(&cached().stdout).contains("small_site"), "the cache filled");
    strip_symbols(&file);
    build("ffeeddccbbaa99887766554433221100");
    let out = cached();
    assert!(out.status.success() && text(&out.stdout).contains("small_site"));
    assert!(!text(&out.stderr).contains("has changed"), "no file read: {}", text(&out.stderr));

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

/// The symbol cache: a second run of the same program takes every frame from the cache
/// (`MEMPROF_DEBUG_SYMBOL_CACHE` counts them) and names them exactly as the first run's
/// fresh resolution did; a cache whose files are cut short is a miss, resolved again to
/// the same names; `MEMPROF_NO_SYMBOL_CACHE=1` reads and writes none.
#[test]
fn a_second_run_names_its_frames_from_the_symbol_cache() {
    let dir = scratch("symbol-cache");
    let cache = dir.join("cache");
    let run = |out: &str, env: &[(&str, &str)]| {
        let o = Command::new(MEMPROF)
            .current_dir(&dir)
            .env("XDG_CACHE_HOME", &cache)
            .env("MEMPROF_DEBUG_SYMBOL_CACHE", "1")
            .envs(env.iter().copied())
            .args(["record", "--interval", "1", "-o", out, "--"])
            .arg(fixture("sites"))
            .output()
            .unwrap();
        assert_ok(&o, 0);
        let err = text(&o.stderr);
        let counts = err.lines().find_map(|l| {
            let rest = l.strip_prefix("memprof: symbol cache: ")?;
            let (hits, rest) = rest.split_once(" from the cache, ")?;
            let misses = rest.strip_suffix(" resolved")?;
            Some((hits.parse::<u64>().ok()?, misses.parse::<u64>().ok()?))
        });
        // Every chain of the profile as written, whatever the addresses (ASLR).
        let p = Profile::read_file(dir.join(out)).unwrap();
        let mut chains: Vec<_> = p.symbols.values().cloned().collect();
        chains.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        (counts, chains)
    };
    let (first, fresh) = run("a.mprof", &[]);
    let (hits, resolved) = first.expect("the first run counts");
    assert!(resolved > 0 && hits == 0, "a new cache: {first:?}");
    assert!(fresh.iter().flatten().any(|s| s.function == "small_site"));
    let symbols = cache.join("memprof").join("symbols");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&symbols).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "private: {mode:o}");

    let (second, cached) = run("b.mprof", &[]);
    assert_eq!(second, Some((resolved, 0)), "every frame from the cache");
    assert_eq!(cached, fresh, "the cache names frames as a fresh resolution does");

    // Every file cut in half: misses, resolved again.
    for e in std::fs::read_dir(&symbols).unwrap() {
        let path = e.unwrap().path();
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len / 2).unwrap();
    }
    let (third, again) = run("c.mprof", &[]);
    assert_eq!(third, Some((0, resolved)), "damaged files are misses");
    assert_eq!(again, fresh);

    let (off, plain) = run("d.mprof", &[("MEMPROF_NO_SYMBOL_CACHE", "1")]);
    assert_eq!(off, None, "no cache: {off:?}");
    assert_eq!(plain, fresh);
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
    // The library's files (the symbol cache's directory is beside them).
    let libs: Vec<PathBuf> = std::fs::read_dir(cache.join("memprof"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "so"))
        .collect();
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
    let libs = std::fs::read_dir(fresh.join("memprof")).unwrap().map(|e| e.unwrap().path());
    assert_eq!(libs.filter(|p| p.extension().is_some_and(|e| e == "so")).count(), 1);

    // A cache path that cannot be a directory: a private temporary copy, removed afterwards.
    let not_a_dir = root.join("a-file");
    std::fs::write(&not_a_dir, b"").unwrap();
    let before = std::fs::read_dir(&root).unwrap().count();
    let out = run(&not_a_dir, "d.mprof");
    assert_ok(&out, 0);
    assert_eq!(totals(&read(&work.join("d.mprof")), "leak_site"), (2_331.0, 3.0, 2_331.0, 3.0));
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), before, "the temporary copy is gone");
}

/// A link to a program of another name that executes the program the user meant (here a
/// link named `tool` to `nice`; `env`, rustup's proxies and pyenv's shims are looked
/// through instead, `launcher/through.rs`): without `--follow-forks` the profile is the
/// proxy's, and `record` says so, names the proxy and what to do, and names the program it
/// executed.
#[test]
fn a_proxy_link_is_explained() {
    let dir = scratch("proxy");
    let env = std::fs::canonicalize("/usr/bin/nice").unwrap();
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
