//! Allocation sites of programs whose memory goes through plumbing: a C++ program whose
//! every byte comes from `operator new` under libstdc++'s containers (`fixtures/cpp/stl.cpp`),
//! a C program with `xmalloc`-style wrappers and one of its own naming
//! (`fixtures/c/wrappers.c`), a Rust program built with `debug = "line-tables-only"`
//! (`fixtures/rust/sites`, built offline here), a stripped copy of a fixture, and a C
//! program without debug information whose functions are named like C++ type manglings
//! (`fixtures/c/type_names.c`). A wrapper no list knows (`fixtures/c/my_alloc.c`) is
//! pointed out, with the `--site-skip` that names its callers. Each site must be the program's function, with its file and
//! line, in the top table, the backtraces and pprof (`go tool pprof -top`'s flat column).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use memprof::report::{site_totals, SiteTotal};

use crate::common::{assert_one_line_error, skipped, text, MEMPROF};
use crate::programs::{cc, fixture, read, record, scratch};

/// The line of `fixtures/<src>` that contains `needle` (1-based), so that the expected
/// lines follow the source.
fn line_of(src: &str, needle: &str) -> u32 {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(src);
    let body = std::fs::read_to_string(&path).unwrap();
    let i = body.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}"));
    i as u32 + 1
}

/// Records `prog` in the exact mode into `dir/out.mprof`; returns the profile's path and
/// `record`'s stderr.
fn record_exact(dir: &Path, prog: &Path, opts: &[&str]) -> (PathBuf, String) {
    let out = dir.join("out.mprof");
    let mut all = vec!["--interval", "1", "-o", "out.mprof"];
    all.extend_from_slice(opts);
    let o = record(dir, &all, prog, &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    (out, err)
}

fn site<'a>(sites: &'a [SiteTotal], name: &str) -> &'a SiteTotal {
    sites.iter().find(|s| s.site == name).unwrap_or_else(|| {
        let names: Vec<&str> = sites.iter().map(|s| s.site.as_str()).collect();
        panic!("no site {name:?} among {names:?}")
    })
}

/// `fixtures/cpp/stl.cpp`, built once with the system C++ compiler (`None`, said on the
/// terminal, without one).
fn cpp_fixture() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cpp/stl.cpp");
            let out = scratch("sites-cpp-build").join("stl");
            let mut args: Vec<std::ffi::OsString> =
                ["-O2", "-g", "-fno-optimize-sibling-calls", "-o"].map(Into::into).to_vec();
            args.extend([out.clone().into(), src.into()]);
            match crate::programs::compile("c++", &args, None) {
                Ok(()) => Some(out),
                Err(Some(e)) => panic!("c++ stl.cpp: {e}"),
                Err(None) => {
                    skipped("the C++ site tests", "no `c++`; Debian: apt-get install g++");
                    None
                }
            }
        })
        .clone()
}

#[test]
fn sites_cpp_containers_are_the_callers() {
    let Some(prog) = cpp_fixture() else { return };
    let dir = scratch("sites-cpp");
    let (file, _) = record_exact(&dir, &prog, &[]);
    let p = read(&file);
    let sites = site_totals(&p);
    // fill(20000): 20,000 map nodes of 72 bytes (the tree node's 32, the int padded to 8,
    // a 32-byte std::string) and 20,000 string buffers of 41 bytes.
    let fill = site(&sites, "fill(int)");
    assert_eq!((fill.alloc_bytes, fill.alloc_objects), (20_000.0 * (72.0 + 41.0), 40_000.0));
    let at = line_of("cpp/stl.cpp", "table[i] = std::string");
    assert_eq!(fill.location.as_deref(), Some(&*format!("stl.cpp:{at}")));
    // grow_vector(100000): push_back doubles the capacity from 1 to 131,072 longs.
    let grow = site(&sites, "grow_vector(int)");
    assert_eq!((grow.alloc_bytes, grow.alloc_objects), (8.0 * ((1 << 18) - 1) as f64, 18.0));
    let at = line_of("cpp/stl.cpp", "numbers.push_back(i)");
    assert_eq!(grow.location.as_deref(), Some(&*format!("stl.cpp:{at}")));
    let concat = site(&sites, "concat(int)");
    assert!(concat.alloc_objects >= 500.0, "{concat:?}");
    let at = line_of("cpp/stl.cpp", "text = text + piece");
    assert!(concat.location.as_deref().unwrap().contains(&at.to_string()), "{concat:?}");
    // The three functions are the top sites; no plumbing frame is one.
    let top: Vec<&str> = sites.iter().take(3).map(|s| s.site.as_str()).collect();
    assert_eq!(top, ["concat(int)", "fill(int)", "grow_vector(int)"], "{sites:?}");
    for s in &sites {
        assert!(!s.site.starts_with("operator new") && !s.site.contains("std::"), "{s:?}");
    }

    // The report's table and its backtraces, the site first.
    let o = Command::new(MEMPROF).args(["report", "--backtrace", "2"]).arg(&file).output().unwrap();
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let fill_line = line_of("cpp/stl.cpp", "table[i] = std::string");
    assert!(out.contains(&format!("fill(int)  (stl.cpp:{fill_line})")), "{out}");
    let trace = out.split("backtraces").nth(1).expect("a backtraces section");
    let fill_trace: Vec<&str> =
        trace.split("fill(int)  (stl.cpp").nth(1).unwrap().lines().skip(1).take(2).collect();
    assert!(fill_trace[0].trim_start().starts_with("fill(int)  ("), "{trace}");
    assert!(fill_trace[0].ends_with(&format!("stl.cpp:{fill_line})")), "{trace}");
    assert!(fill_trace[1].trim_start().starts_with("main  ("), "{trace}");
}

#[test]
fn sites_pprof_flat_lands_on_the_program_and_views_differ() {
    let Some(prog) = cpp_fixture() else { return };
    let dir = scratch("sites-pprof");
    let (file, _) = record_exact(&dir, &prog, &[]);
    let mut defaults = Vec::new();
    let mut bytes = Vec::new();
    // (`--view gc` is refused for a recording without GC cycles: tests/commands/cli.rs.)
    for view in ["alloc", "live", "short-lived"] {
        let out = dir.join(format!("{view}.pb.gz"));
        let o = Command::new(MEMPROF)
            .args(["report", "--view", view, "--pprof"])
            .arg(&out)
            .arg(&file)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        let gz = std::fs::read(&out).unwrap();
        let d = crate::common::decode_pprof(&gz);
        defaults.push(d.string_table[d.default_sample_type as usize].clone());
        let drop = &d.string_table[d.drop_frames as usize];
        assert!(drop.contains("operator new"), "{drop}");
        bytes.push(gz);
    }
    assert_eq!(defaults, ["alloc_space", "inuse_space", "alloc_space"]);
    assert!(bytes[0] != bytes[1] && bytes[1] != bytes[2], "views write different files");

    let alloc = dir.join("alloc.pb.gz");
    let Some(top) = crate::common::go_pprof(&["-top"], alloc.as_os_str(), "pprof flat") else {
        return;
    };
    // Rows: "flat flat% sum% cum cum% name"; the largest flat values are the program's.
    let rows: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(5).map(|_| l))
        .collect();
    // Newer versions of pprof print C++ names without their parameters.
    let names: Vec<String> = rows
        .iter()
        .map(|l| l.split_whitespace().skip(5).collect::<Vec<_>>().join(" "))
        .map(|n| n.split('(').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(&names[..3], ["concat", "fill", "grow_vector"], "{top}");
    assert!(!top.contains("operator new"), "{top}");
}

#[test]
fn sites_c_wrappers_and_site_skip() {
    let prog = fixture("wrappers");
    let dir = scratch("sites-wrappers");
    let (file, _) = record_exact(&dir, &prog, &[]);
    let p = read(&file);
    let sites = site_totals(&p);
    let totals = |name: &str| {
        let s = site(&sites, name);
        (s.alloc_bytes, s.alloc_objects)
    };
    assert_eq!(totals("parse_tokens"), (256_000.0, 1000.0));
    // 1 KiB doubled to 1 MiB: eleven sizes.
    assert_eq!(totals("grow_buffer"), (1024.0 * ((1 << 11) - 1) as f64, 11.0));
    assert_eq!(totals("copy_names"), (500.0 * 32.0, 500.0));
    // A wrapper of the program's own naming is a site until --site-skip names it.
    assert_eq!(totals("app_new_block"), (300_000.0, 300.0));
    for s in &sites {
        assert!(!["xmalloc", "xrealloc", "xstrdup", "malloc"].contains(&&*s.site), "{s:?}");
    }
    let at = line_of("c/wrappers.c", "kept[nkept++] = xmalloc(256)");
    assert_eq!(
        site(&sites, "parse_tokens").location.as_deref(),
        Some(&*format!("wrappers.c:{at}"))
    );

    let report = |args: &[&str], env: Option<&str>| {
        let mut c = Command::new(MEMPROF);
        c.arg("report").args(args).arg(&file).env_remove("MEMPROF_SITE_SKIP");
        if let Some(e) = env {
            c.env("MEMPROF_SITE_SKIP", e);
        }
        c.output().unwrap()
    };
    for (args, env) in
        [(&["--site-skip", "^app_new_block$"][..], None), (&[][..], Some("app_new_"))]
    {
        let o = report(args, env);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(out.contains("  make_blocks  (wrappers.c:"), "{out}");
        assert!(!out.contains("app_new_block"), "{out}");
    }
    // The same skip in record's summary.
    let (_, err) = record_exact(&dir, &prog, &["--force", "--site-skip", "app_new_block"]);
    assert!(err.contains("  make_blocks  (wrappers.c:"), "{err}");
    // A bad expression: one line that names it, from either source, before anything runs.
    assert_one_line_error(&report(&["--site-skip", "(unclosed"], None), Some(1), "\"(unclosed\"");
    assert_one_line_error(&report(&[], Some("[z-a]")), Some(1), "MEMPROF_SITE_SKIP \"[z-a]\"");
    let o = record(&dir, &["--site-skip", "a{99999999}"], &prog, &[]);
    assert_one_line_error(&o, Some(1), "--site-skip");
}

/// `memprof report --json FILE`'s sites: name → (alloc bytes, live bytes).
fn json_sites(file: &Path, opts: &[&str]) -> Vec<(String, f64, f64)> {
    let o = Command::new(MEMPROF).arg("report").arg("--json").args(opts).arg(file).output();
    let o = o.unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sites = v["sites"].as_array().unwrap_or_else(|| panic!("{v:#}"));
    let num = |s: &serde_json::Value, k: &str| s[k].as_f64().unwrap();
    sites
        .iter()
        .map(|s| {
            (s["site"].as_str().unwrap().to_owned(), num(s, "alloc_bytes"), num(s, "live_bytes"))
        })
        .collect()
}

/// A C program built without debug information, symbols kept, whose functions are named
/// like Itanium type encodings (`fixtures/c/type_names.c`): `w`, `f`, `Pi`, `Dn`, `Sa`
/// were demangled into `wchar_t`, `float`, `int*`, `std::nullptr_t` and `std::allocator`,
/// and the last two folded into `main` as the C++ library's plumbing. Each is its own site,
/// by its own name, with the bytes it keeps, in record's table and in the JSON.
#[test]
fn sites_c_names_that_look_mangled_are_kept() {
    let dir = scratch("sites-type-names");
    let prog = dir.join("type_names");
    cc("type_names.c", &prog, &["-O2", "-fno-optimize-sibling-calls"]);
    let (file, err) = record_exact(&dir, &prog, &[]);
    let want =
        [("w", 10_000.0), ("f", 30_000.0), ("Pi", 60_000.0), ("Dn", 100_000.0), ("Sa", 150_000.0)];
    // The table's rows end with the site's name (no file:line without debug information).
    for (name, _) in want {
        assert!(err.lines().any(|l| l.ends_with(&format!("  {name}"))), "{name}: {err}");
    }
    for demangled in ["wchar_t", "float", "int*", "nullptr", "std::allocator"] {
        assert!(!err.contains(demangled), "{demangled}: {err}");
    }
    let sites = json_sites(&file, &[]);
    let get = |name: &str| sites.iter().find(|s| s.0 == name);
    for (name, bytes) in want {
        let s = get(name).unwrap_or_else(|| panic!("no site {name}: {sites:?}"));
        assert_eq!((s.1, s.2), (bytes, bytes), "{name}: {sites:?}");
    }
    // `main` keeps only what stdio allocated for it: less than the smallest of the five.
    let main = get("main").map_or(0.0, |s| s.1);
    assert!(main < 10_000.0, "{sites:?}");
}

/// A wrapper of the program's own naming that no list knows (`fixtures/c/my_alloc.c`:
/// `my_alloc`, called by five functions): the table, `--json` and the HTML page say that
/// it looks like a wrapper, with the `--site-skip` that names its callers; that argument,
/// given to a shell as printed, makes the five callers the sites, with their bytes.
#[test]
fn sites_a_wrapper_of_many_callers_is_pointed_out() {
    let prog = fixture("my_alloc");
    let dir = scratch("sites-my-alloc");
    let (file, err) = record_exact(&dir, &prog, &[]);
    let hint = "hint: my_alloc looks like an allocation wrapper (its bytes come from 5 \
                callers): --site-skip '^my_alloc$' names them";
    let below: Vec<&str> = err.lines().skip_while(|l| !l.contains("total (")).collect();
    assert_eq!(below.get(1).copied(), Some(hint), "{err}");
    let o = Command::new(MEMPROF).arg("report").arg("--json").arg(&file).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["suggestions"];
    assert_eq!(s.as_array().map(Vec::len), Some(1), "{v:#}");
    assert_eq!((&s[0]["site"], &s[0]["callers"]), (&"my_alloc".into(), &5.into()), "{v:#}");
    assert_eq!(s[0]["site_skip"], "^my_alloc$");
    assert_eq!(s[0]["text"], hint.strip_prefix("hint: ").unwrap());
    let html = std::fs::read_to_string(dir.join("out.mprof.html")).unwrap();
    assert!(html.contains("\"hints\":[\"my_alloc looks like an allocation wrapper"), "{html}");

    // The suggested argument, through a shell, as a user would paste it.
    let arg = hint.split("--site-skip ").nth(1).unwrap().trim_end_matches(" names them");
    let shell = |script: &str| {
        let script = script.replace("ARG", arg);
        let o = Command::new("sh").arg("-c").arg(script).arg(MEMPROF).arg(&file).output();
        let o = o.unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        o
    };
    let o = shell(r#""$0" report --json --site-skip ARG "$1""#);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sites = v["sites"].as_array().unwrap();
    let bytes = |name: &str| sites.iter().find(|s| s["site"] == name).map(|s| &s["live_bytes"]);
    for (name, want) in [
        ("read_config", 1_000),
        ("load_users", 10_000),
        ("load_orders", 30_000),
        ("build_index", 60_000),
        ("cache_pages", 100_000),
    ] {
        assert_eq!(bytes(name), Some(&serde_json::Value::from(want as f64)), "{name}: {v:#}");
    }
    assert_eq!(bytes("my_alloc"), None, "{v:#}");
    assert!(v["suggestions"].as_array().is_some_and(Vec::is_empty), "{v:#}");
    // The table of `report` with it: the callers by name and line, and no hint.
    let out = text(&shell(r#""$0" report --site-skip ARG "$1""#).stdout);
    assert!(out.contains("  cache_pages  (my_alloc.c:"), "{out}");
    assert!(!out.contains("hint: ") && !out.contains("my_alloc  ("), "{out}");
}

/// `fixtures/rust/sites` built with `cargo build --release --offline` (no dependencies)
/// into this run's directory.
fn rust_fixture() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let manifest =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust/sites/Cargo.toml");
            let target = scratch("sites-rust-build");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let o = Command::new(cargo)
                .args(["build", "--release", "--offline", "--quiet", "--manifest-path"])
                .arg(&manifest)
                .arg("--target-dir")
                .arg(&target)
                // The fixture is its own workspace, built with its own profile.
                .env_remove("CARGO_TARGET_DIR")
                .env_remove("RUSTFLAGS")
                .env_remove("CARGO_ENCODED_RUSTFLAGS")
                .output()
                .expect("cargo runs");
            assert!(o.status.success(), "cargo build fixtures/rust/sites: {}", text(&o.stderr));
            target.join("release/sites")
        })
        .clone()
}

#[test]
fn sites_rust_line_tables_only() {
    let prog = rust_fixture();
    let dir = scratch("sites-rust");
    let (file, _) = record_exact(&dir, &prog, &[]);
    let p = read(&file);
    let sites = site_totals(&p);
    assert_eq!(sites[0].site, "sites::fill_table", "{sites:?}");
    // 50,000 squares (u64), 50,000 names of 32 bytes, 50,000 × 16 bytes of text, and the
    // map's tables.
    let fill = site(&sites, "sites::fill_table");
    assert!(fill.alloc_bytes >= 400_000.0 + 1_600_000.0 + 800_000.0, "{fill:?}");
    assert!(fill.location.as_deref().unwrap().starts_with("main.rs:"), "{fill:?}");
    // The program's own function named `alloc` is a site, not plumbing.
    let own = site(&sites, "sites::alloc");
    assert_eq!((own.alloc_bytes, own.alloc_objects), (1_048_576.0, 1.0));
    let at = line_of("rust/sites/src/main.rs", "vec![7u8; n]");
    assert_eq!(own.location.as_deref(), Some(&*format!("main.rs:{at}")));
    for s in &sites {
        assert!(s.site != "alloc" && !s.site.starts_with("{closure"), "{s:?}");
    }
}

#[test]
fn sites_stripped_program_is_noted_once() {
    let dir = scratch("sites-stripped");
    let prog = dir.join("wrappers-stripped");
    std::fs::copy(fixture("wrappers"), &prog).unwrap();
    let o = Command::new("strip").arg(&prog).output();
    if !o.is_ok_and(|o| o.status.success()) {
        skipped("the stripped-program note", "no `strip`; Debian: apt-get install binutils");
        return;
    }
    // The note is for a build whose names nothing holds: the symbol cache would name the
    // stripped copy's frames from the unstripped fixture's run (one build id), as it should.
    let o = Command::new(MEMPROF)
        .current_dir(&dir)
        .env("MEMPROF_NO_SYMBOL_CACHE", "1")
        .args(["record", "--interval", "1", "-o", "out.mprof", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let file = dir.join("out.mprof");
    let shown = prog.display().to_string();
    let check = |err: &str| {
        let notes: Vec<&str> =
            err.lines().filter(|l| l.starts_with("memprof: note:") && l.contains(&shown)).collect();
        assert_eq!(notes.len(), 1, "{err}");
        assert!(notes[0].contains("has no symbols (stripped)"), "{err}");
        assert!(notes[0].contains("no debug file at /usr/lib/debug/.build-id/"), "{err}");
    };
    check(&err);
    // And the report of the file, whose unnamed frames are looked up again.
    let o = Command::new(MEMPROF)
        .env("MEMPROF_NO_SYMBOL_CACHE", "1")
        .arg("report")
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    check(&text(&o.stderr));
}

/// Installed, stripped Debian programs (coreutils' `sort` and `sleep`) are noted with the
/// package whose `-dbgsym` would name their frames, as `dpkg-query -S` (the oracle here)
/// names it. `sleep` is where a merged `/usr` puts it, `/usr/bin/sleep`, while Debian 12's
/// coreutils lists `/bin/sleep`: found by its other name. The answers are kept beside the
/// symbol cache, and a second run names the same packages.
#[test]
fn sites_a_stripped_debian_program_is_noted_with_its_package() {
    let owner = |path: &str| {
        let o = Command::new("dpkg-query").arg("-S").arg(path).output();
        o.is_ok_and(|o| o.status.success() && text(&o.stdout).starts_with("coreutils:"))
    };
    if !owner("/usr/bin/sort") {
        skipped("the Debian package note", "no dpkg-query, or /usr/bin/sort is not coreutils'");
        return;
    }
    // `/usr/bin/sleep` is coreutils' under one of its names where `/bin` is merged.
    let merged = std::fs::read_link("/bin").is_ok_and(|l| l == Path::new("usr/bin"));
    let sleep_known = owner("/usr/bin/sleep") || (merged && owner("/bin/sleep"));
    let dir = scratch("sites-debian-package");
    let input: String = (0..2000).map(|i| format!("{}\n", (i * 7919) % 2000)).collect();
    std::fs::write(dir.join("in.txt"), input).unwrap();
    let cache = dir.join("cache");
    let mut programs = vec![("/usr/bin/sort", "in.txt")];
    if sleep_known {
        programs.push(("/usr/bin/sleep", "0"));
    }
    for run in 1..=2 {
        for &(program, arg) in &programs {
            let o = Command::new(MEMPROF)
                .current_dir(&dir)
                .env("XDG_CACHE_HOME", &cache)
                .args(["record", "--interval", "1", "--force", "-o", "out.mprof", "--"])
                .args([program, arg])
                .output()
                .unwrap();
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "{err}");
            let noted = format!("memprof: note: {program} has no symbols");
            let notes: Vec<&str> = err.lines().filter(|l| l.starts_with(&noted)).collect();
            if notes.is_empty() {
                // A machine with coreutils' debug symbols installed names every frame.
                skipped("the Debian package note", "coreutils' frames were all named");
                return;
            }
            assert_eq!(notes.len(), 1, "run {run}: {err}");
            assert!(notes[0].contains("(Debian: apt install coreutils-dbgsym"), "run {run}: {err}");
        }
    }
    let kept = std::fs::read_to_string(cache.join("memprof/symbols/packages.v1")).unwrap();
    assert!(kept.lines().any(|l| l == "/usr/bin/sort\tcoreutils"), "{kept}");
}
