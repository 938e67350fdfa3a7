//! The `commands` binary's helpers, in one place: the fixture programs built (the one place
//! a compiler is started: [`compile`]), `memprof record` run on them, and their profiles
//! read and summed by site. What other test binaries need too is in `tests/common/`.

use memprof::profile::Profile;
use memprof::report::{site_totals, SiteTotal};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use crate::common::{text, MEMPROF};

/// The directory the fixtures are built into (once per test run).
pub(crate) fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| crate::common::scratch("record"))
}

/// Builds `fixtures/c/<name>.c` (once) with the system compiler and returns the program.
/// `-fno-optimize-sibling-calls` keeps each `noinline` site in the call stack (a tail call
/// to malloc would hide it); frame pointers are omitted as Debian's gcc does by default.
pub(crate) fn fixture(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c").join(format!("{name}.c"));
    let shared = name.starts_with("lib");
    let out = build_dir().join(if shared { format!("{name}.so") } else { name.to_owned() });
    if !built.iter().any(|b| b == name) {
        let mut args: Vec<OsString> =
            ["-O2", "-g", "-fno-optimize-sibling-calls", "-pthread"].map(OsString::from).to_vec();
        if shared {
            args.extend(["-shared", "-fPIC"].map(OsString::from));
        }
        args.extend(["-o".into(), out.clone().into(), src.into()]);
        if !shared {
            args.push("-ldl".into());
        }
        must_compile("cc", &args, None);
        built.push(name.to_owned());
    }
    out
}

/// Compiles `fixtures/c/<src>` into `out` with the system compiler and `args` (for a test
/// that needs its own flags; [`fixture`] builds the shared ones).
pub(crate) fn cc(src: &str, out: &Path, args: &[&str]) {
    let mut all: Vec<OsString> = args.iter().map(OsString::from).collect();
    all.extend(["-o".into(), out.into(), c_source(src).into()]);
    must_compile("cc", &all, None);
}

/// `fixtures/c/<name>`.
pub(crate) fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c").join(name)
}

/// Runs the system compiler `compiler` (`cc`, `c++`) with `args`, in `dir` when given: the
/// one place the tests start a compiler. `Err(None)` when it is not installed,
/// `Err(Some(stderr))` when it failed.
pub(crate) fn compile(
    compiler: &str,
    args: &[OsString],
    dir: Option<&Path>,
) -> Result<(), Option<String>> {
    let mut c = Command::new(compiler);
    c.args(args);
    if let Some(dir) = dir {
        c.current_dir(dir);
    }
    match c.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(Some(text(&o.stderr))),
        Err(_) => Err(None),
    }
}

/// [`compile`], panicking with the compiler's words when it fails.
pub(crate) fn must_compile(compiler: &str, args: &[OsString], dir: Option<&Path>) {
    match compile(compiler, args, dir) {
        Ok(()) => {}
        Err(None) => panic!("the system compiler `{compiler}` does not run"),
        Err(Some(e)) => panic!("{compiler} {args:?}: {e}"),
    }
}

/// A fresh directory for one test's profiles.
pub(crate) fn scratch(name: &str) -> PathBuf {
    build_dir();
    crate::common::scratch(&format!("record/run-{name}"))
}

/// Runs `memprof record`. Every cached DWARF walk is also checked against framehop's own
/// walk (`MEMPROF_UNWIND_CHECK`), and [`assert_ok`] requires that none differed.
pub(crate) fn record(dir: &Path, opts: &[&str], prog: &Path, args: &[&str]) -> Output {
    Command::new(MEMPROF)
        .current_dir(dir)
        .env("MEMPROF_UNWIND_CHECK", "1")
        .arg("record")
        .args(opts)
        .arg("--")
        .arg(prog)
        .args(args)
        .output()
        .expect("memprof runs")
}

pub(crate) fn sites(p: &Profile) -> HashMap<String, SiteTotal> {
    site_totals(p).into_iter().map(|s| (s.site.clone(), s)).collect()
}

/// (alloc bytes, alloc objects, live bytes, live objects) of a site; zeros when absent.
pub(crate) fn totals(p: &Profile, site: &str) -> (f64, f64, f64, f64) {
    sites(p)
        .get(site)
        .map(|s| (s.alloc_bytes, s.alloc_objects, s.live_bytes, s.live_objects))
        .unwrap_or_default()
}

/// Reads a profile as `memprof report` does: frames without symbols (a file cut by a
/// crash, `_exit` or `exec`, whose symbols are left to the reader) are resolved from the
/// recorded modules.
pub(crate) fn read(path: &Path) -> Profile {
    let mut p = Profile::read_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    memprof::profile::symbolize::resolve_offline(&mut p);
    p
}

/// Writes the profile at `path` again without its symbols, every other record the same.
pub(crate) fn strip_symbols(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    let (mut tables, events) = memprof::profile::format::read_events(file).unwrap();
    assert!(tables.complete && tables.warnings.is_empty(), "{:?}", tables.warnings);
    tables.symbols.clear();
    let bytes = memprof::profile::format::write_events(Vec::new(), &tables, &events).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// The profile `record -o <prefix>%p.mprof` created in `dir` (the only `.mprof` there), and
/// the pid it names.
pub(crate) fn profile_of_pid(dir: &Path, prefix: &str) -> (PathBuf, i32) {
    let file = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "mprof"))
        .expect("record created the profile before the program ran");
    let name = file.file_name().unwrap().to_str().unwrap();
    let pid = name.trim_start_matches(prefix).trim_end_matches(".mprof").parse().unwrap();
    (file, pid)
}

/// True when process `pid` is gone, or a zombie nobody reaps (an orphan that ended).
pub(crate) fn orphan_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

pub(crate) fn assert_ok(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "stderr: {}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    for line in err.lines().filter(|l| l.contains("unwind check:")) {
        assert!(line.contains(" 0 differed from framehop's"), "{line}");
    }
}

/// `MEMPROF_BLESS=1`: a test that compares output with a committed file rewrites the file
/// instead (the golden tables, the generated docs pages, the public-API snapshot).
pub(crate) fn blessing() -> bool {
    std::env::var_os("MEMPROF_BLESS").is_some_and(|v| v == "1")
}

/// `memprof report FILE --json` in `dir`, parsed; fails the test on an error.
pub(crate) fn report_json(dir: &Path, file: &str) -> serde_json::Value {
    let out = Command::new(crate::common::MEMPROF)
        .current_dir(dir)
        .args(["report", file, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::common::text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}
