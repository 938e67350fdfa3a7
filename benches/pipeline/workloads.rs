//! The programs the bench runs: the scripts it writes, the C fixtures it builds, the Python it
//! finds (and the pandas it installs), and how each is started plain, under `memprof record`,
//! under the hand-set preload library, under jemalloc's profiler and under heaptrack.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::measure::{read, remove_profile, run, Measured, Out};

/// The CPython workload: a JSON round trip of `argv[1]` small dict records. At the end it
/// writes its own peak resident size to stderr (`vmhwm_kib N`, from /proc/self/status: the
/// mm's high-water mark, which starts again at `exec`, unlike `ru_maxrss`, which keeps a
/// forked parent's), so that the bench has the program's own memory apart from memprof's.
pub(crate) const JSON_SCRIPT: &str = r#"
import json
import sys

n = int(sys.argv[1])
records = [
    {
        "id": i,
        "name": "user%d" % i,
        "email": "user%d@example.com" % i,
        "score": i * 0.25,
        "active": i % 3 == 0,
        "tags": ["t%d" % (i % 10), "x"],
    }
    for i in range(n)
]
text = json.dumps(records)
back = json.loads(text)
assert len(back) == n and back[-1] == records[-1]
print(len(text))
with open("/proc/self/status") as status:
    hwm = [line.split()[1] for line in status if line.startswith("VmHWM:")]
print("vmhwm_kib", hwm[0], file=sys.stderr)
"#;

/// The pandas workload (about 1.3 s plain on the bench's machine at 700 000 rows): a frame
/// of `argv[1]` rows grouped, merged back, pivoted, and a slice of it through CSV and back.
/// What it measures is the wait around the program (symbols of numpy's and pandas' many
/// extension modules), not the allocations.
pub(crate) const PANDAS_SCRIPT: &str = r#"
import io
import sys

import numpy as np
import pandas as pd

n = int(sys.argv[1])
rng = np.random.default_rng(3)
df = pd.DataFrame(
    {
        "key": rng.integers(0, 5000, n),
        "group": pd.Categorical(rng.choice(["a", "b", "c", "d"], n)),
        "value": rng.random(n),
        "name": ["item%d" % (i % 997) for i in range(n)],
    }
)
sums = df.groupby(["key", "group"], observed=True)["value"].agg(["sum", "mean", "count"])
joined = df.merge(sums.reset_index(), on=["key", "group"])
joined["share"] = joined["value"] / joined["sum"]
wide = joined.pivot_table(
    index="key", columns="group", values="share", aggfunc="max", observed=True
)
back = pd.read_csv(io.StringIO(joined.head(20000).to_csv()))
print(len(joined), wide.shape, len(back))
"#;

/// The rows of the pandas workload.
pub(crate) const PANDAS_ROWS: u64 = 700_000;

/// Debian's `libjemalloc2`, built with `--enable-prof`.
pub(crate) const JEMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
/// jemalloc's heap profiler on, at its default sample interval written out: `lg_prof_sample`
/// is the log2 of the mean bytes between samples, 19 = 512 KiB, memprof's default interval.
/// It writes no file (no `prof_final`, no `prof_gdump`): the peer's cost is its sampling.
pub(crate) const JEMALLOC_CONF: &str = "prof:true,lg_prof_sample:19";

/// The variable that tells worst_case.c where to write the wall clock (CLOCK_REALTIME, ns,
/// decimal) just before `main` returns.
pub(crate) const EXIT_STAMP: &str = "WORST_CASE_EXIT_STAMP";

pub(crate) struct Workload {
    /// Its heading.
    pub(crate) title: String,
    /// For `--only`.
    pub(crate) key: &'static str,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(&'static str, &'static str)>,
    /// Allocations + frees of one run (every one an event in exact mode), when known.
    pub(crate) known_events: Option<u64>,
    /// The C program only: the file named by `WORST_CASE_EXIT_STAMP` in every run of it,
    /// where it writes the wall clock just before `main` returns; and the runs that only it
    /// has (the hand-set preload library, two copies at once, exit to exit).
    pub(crate) exit_stamp: Option<PathBuf>,
}

impl Workload {
    /// A program run with `args` and nothing else.
    pub(crate) fn simple(key: &'static str, program: PathBuf, args: &[&str]) -> Workload {
        Workload {
            title: String::new(),
            key,
            program,
            args: args.iter().map(OsString::from).collect(),
            env: vec![],
            known_events: None,
            exit_stamp: None,
        }
    }

    /// The program's own environment (also through `memprof record` and heaptrack, which
    /// pass theirs on to it).
    pub(crate) fn envs(&self, c: &mut Command) {
        c.envs(self.env.iter().copied());
        if let Some(stamp) = &self.exit_stamp {
            c.env(EXIT_STAMP, stamp);
        }
    }

    pub(crate) fn plain(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args);
        self.envs(&mut c);
        c
    }

    pub(crate) fn memprof(&self, memprof: &Path, flags: &[&str], out: &Path) -> Command {
        let mut c = Command::new(memprof);
        c.arg("record").arg("--force").args(flags).arg("-o").arg(out).arg("--");
        c.arg(&self.program).args(&self.args);
        self.envs(&mut c);
        c
    }

    /// The program under the preload library set by hand, as a user would without `memprof
    /// record`: `LD_PRELOAD` and the `MEMPROF_*` settings (`src/record/env.rs`), with no
    /// `MEMPROF_RINGS`, so the library runs an in-process session (its own drain thread)
    /// and writes the profile `out` itself. Any other `MEMPROF_*` variable of this process
    /// is removed, so the rest are the library's defaults, the same as `record`'s.
    pub(crate) fn preloaded(
        &self,
        preload: &Path,
        settings: &[(&str, &str)],
        out: &Path,
    ) -> Command {
        let mut c = self.plain();
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("MEMPROF_") {
                c.env_remove(k);
            }
        }
        c.env("LD_PRELOAD", preload).envs(settings.iter().copied()).env("MEMPROF_OUTPUT", out);
        c
    }

    /// The program with jemalloc preloaded, its profiler on ([`JEMALLOC_CONF`]) or not
    /// (no `MALLOC_CONF`: jemalloc's defaults, the profiler off).
    pub(crate) fn jemalloc(&self, prof: bool) -> Command {
        let mut c = self.plain();
        c.env("LD_PRELOAD", JEMALLOC).env_remove("MALLOC_CONF");
        if prof {
            c.env("MALLOC_CONF", JEMALLOC_CONF);
        }
        c
    }

    pub(crate) fn heaptrack(&self, prefix: &Path) -> Command {
        let mut c = Command::new("heaptrack");
        c.arg("-o").arg(prefix).arg(&self.program).args(&self.args);
        self.envs(&mut c);
        c
    }
}

pub(crate) struct Tools {
    pub(crate) memprof: PathBuf,
    /// `memprof preload-path`: the preload library that `record` uses.
    pub(crate) preload: PathBuf,
    pub(crate) heaptrack: bool,
}

/// Runs the C program under the hand-set preload library (`settings`, profile `out`), and
/// panics unless the library wrote a profile (else the program ran unprofiled).
pub(crate) fn run_preloaded(
    what: &str,
    w: &Workload,
    tools: &Tools,
    settings: &[(&str, &str)],
    out: &Path,
    log: &Path,
) -> Measured {
    // The library writes into an empty or new file only.
    remove_profile(out);
    let measured = run(what, &mut w.preloaded(&tools.preload, settings, out), Out::Null, log);
    let written = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    assert!(
        written > 0,
        "{what} wrote no profile at {}: the preload library did not run\n--- its stderr ---\n{}",
        out.display(),
        read(log)
    );
    remove_profile(out);
    measured
}

/// The real CPython interpreter (not a pyenv shim) and its version, or why there is none.
pub(crate) fn find_python() -> Result<(PathBuf, String), String> {
    let o = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable); print(sys.version.split()[0])"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("python3 cannot be run ({e})"))?;
    if !o.status.success() {
        return Err(format!(
            "python3 failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(exe), Some(version)) if !exe.is_empty() => Ok((exe.into(), version.into())),
        _ => Err(format!("python3 printed no sys.executable ({text:?})")),
    }
}

/// True when `python` imports `module`.
fn imports(python: &Path, module: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A Python that imports pandas: `python` itself if it does, else the interpreter of a
/// virtual environment at `venv` (kept between runs of the bench: a cache, which `cargo
/// clean` removes), made with `python -m venv` and `pip install pandas` if it has none.
pub(crate) fn pandas_python(python: &Path, venv: &Path) -> Result<PathBuf, String> {
    python_with(python, venv, "pandas")
}

/// A Python that imports `package` (a module of the same name): `python` itself, or a
/// virtual environment of it at `venv` with the package installed by pip (once: the
/// environment is kept).
pub(crate) fn python_with(python: &Path, venv: &Path, package: &str) -> Result<PathBuf, String> {
    if imports(python, package) {
        return Ok(python.to_owned());
    }
    let venv_python = venv.join("bin/python");
    if imports(&venv_python, package) {
        return Ok(venv_python);
    }
    eprintln!("installing {package} into {} (once: the environment is kept)", venv.display());
    let steps: [(&Path, &[&str]); 2] = [
        (python, &["-m", "venv", "--clear"]),
        (&venv_python, &["-m", "pip", "install", "--quiet", package]),
    ];
    for (exe, args) in steps {
        let mut cmd = Command::new(exe);
        cmd.args(args);
        if exe == python {
            cmd.arg(venv);
        }
        let o = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            return Err(format!("{cmd:?} failed ({}): {}", o.status, err.trim()));
        }
    }
    if imports(&venv_python, package) {
        Ok(venv_python)
    } else {
        Err(format!("{} does not import {package} after pip install", venv_python.display()))
    }
}

/// The preload library that `memprof record` uses (`memprof preload-path`).
pub(crate) fn preload_path(memprof: &Path) -> PathBuf {
    let o = Command::new(memprof).arg("preload-path").stdin(Stdio::null()).output().unwrap();
    assert!(o.status.success(), "memprof preload-path: {}", String::from_utf8_lossy(&o.stderr));
    let path = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert!(path.is_file(), "memprof preload-path printed no library ({})", path.display());
    path
}

/// Builds `fixtures/c/NAME.c` into `dir/NAME` with `cc -O2 -g` and `flags`.
pub(crate) fn build_c(name: &str, flags: &[&str], dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/c/{name}.c"));
    let out = dir.join(name);
    let o = Command::new("cc")
        .args(["-O2", "-g"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(o.status.success(), "cc {}: {}", src.display(), String::from_utf8_lossy(&o.stderr));
    out
}
