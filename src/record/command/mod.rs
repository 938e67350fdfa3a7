//! The part of `memprof record` that runs in `memprof`: the preload library carried in the
//! executable ([`bundled`]), the launcher that runs the program under it ([`launcher`]), the
//! collector that drains the shared rings into profiles ([`collect`]), what the program's
//! executable says of the allocator the preload library must reach (`interposable`), and the
//! command itself ([`run`](run::run)): its arguments, its threads, its summary and its notes.

pub(crate) mod attach;
pub(crate) mod bundled;
pub(crate) mod collect;
pub(crate) mod interposable;
pub(crate) mod launcher;
pub(crate) mod notes;
mod oom;
mod process;
pub(crate) mod request;
pub(crate) mod run;
pub(crate) mod runtimes;
mod split_reader;

use crate::error::Error;
use bundled::Bundled;
use launcher::{EnvSettings, RecordOptions};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// `memprof preload-path`: the path of the preload library that `record` uses (written to
/// the cache directory first if needed), for `LD_PRELOAD` by hand. A library that only a
/// temporary directory could take is gone when the command ends, so that is an error here,
/// saying why each cache directory was refused (one under a directory others can write,
/// another user's `$HOME` kept by `sudo -E`).
pub fn preload_path(bundled: &Bundled) -> Result<PathBuf, Error> {
    let lib = launcher::find_preload(Some(bundled))?;
    if lib.is_temporary() {
        let why = lib.passed_over();
        return Err(Error::Other(format!(
            "no cache directory could take the preload library ({}); set XDG_CACHE_HOME to a \
             directory of yours that nobody else can write, nor any directory above it",
            if why.is_empty() { "none is set".to_owned() } else { why.join("; ") }
        )));
    }
    Ok(lib.path().to_path_buf())
}

/// What [`record_program`] leaves: the program's exit code and its profile.
#[derive(Debug)]
pub struct Recorded {
    /// The program's exit status (128 + the signal number when a signal killed it).
    pub exit_code: i32,
    /// The profile it wrote, its symbols not yet resolved.
    pub output: PathBuf,
}

/// Runs `program` with `args` under the preload library with the default settings (the
/// `MEMPROF_*` variables of this process play no part), its profile written to `output`
/// (replaced if it exists), and waits for it: what `record` does, without its summary,
/// companions and notes (the demo's recorded workload).
pub fn record_program(
    bundled: &Bundled,
    output: &Path,
    program: OsString,
    args: Vec<OsString>,
) -> Result<Recorded, Error> {
    let preload = launcher::find_preload(Some(bundled))?;
    let mut settings = EnvSettings::from_lookup(|_| None)?;
    settings.output = output.display().to_string();
    let opts =
        RecordOptions { settings, force: true, program, args, env: vec![], keep_pymalloc: false };
    let run = launcher::record(&opts, preload.path())?;
    Ok(Recorded { exit_code: run.exit_code, output: run.output })
}
