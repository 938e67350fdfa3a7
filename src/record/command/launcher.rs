//! `memprof record`: find the preload library, check the program, set the environment,
//! run the program and wait for it.
//!
//! # 1. Before the program runs
//! Everything that can be known to fail is checked first, each with a one-line error: the
//! preload library is found ([`find_preload`]: `MEMPROF_PRELOAD`, next to this executable, or
//! the copy inside the executable written to a cache file); the program is found (a path, or a
//! name looked up in `PATH`) and is an executable regular file; it is not setuid or setgid (the
//! loader ignores `LD_PRELOAD` for those); an ELF program has a `PT_INTERP` header (a
//! statically linked program never loads the preload library). The output file is created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` (mode 0644 before the umask) so that a symlink is never followed
//! and another run's profile never overwritten, unless `--force` replaces it (only a
//! regular file of this user's: anything else is left alone, as `sys/files.rs` §2 does for
//! every output), atomically: a new file under a temporary name in the same directory,
//! renamed over the old one, so that the name never stops naming a file. A name with
//! `%p` (the default, `memprof.%p.mprof`) is created in the child between `fork` and `exec`,
//! where its pid is known; a failure there comes back to this process before the program runs.
//! With `--follow-forks` the tree's directory, `<output>.d/`, is created next to it
//! (`sys/private_dir.rs`: `mkdir`, 0700; `--force` first removes an earlier run's, if it is
//! this user's directory, and unlinks anything else of the name).
//!
//! # 2. The contract with the preload library
//! Settings travel in the `MEMPROF_*` variables ([`EnvSettings`]); the
//! library is put first in `LD_PRELOAD`. The program's exit status is returned (128 + the
//! signal number when a signal killed it); SIGINT and SIGQUIT are ignored here while the
//! program runs, so that a Ctrl-C reaches the program and the report still follows.
//! `PYTHONMALLOC=malloc` is set unless the environment sets it (see
//! [`RecordOptions::keep_pymalloc`]). Without `--follow-forks`, the programs the processes
//! started unprofiled are read back from the ring directory ([`Recorded::unfollowed`]).
#![deny(unsafe_op_in_unsafe_fn)]

use super::bundled::{Bundled, Installed};
use super::collect::{Collector, Plan, RootEnded};
use crate::profile::{Ended, EndedHow};
// `config` is the MEMPROF_* contract (record/env.rs), which the launcher writes.
use crate::error::{Error, LaunchError};
use crate::record::env as config;
pub use crate::record::env::EnvSettings;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// File name of the preload library.
pub const PRELOAD_NAME: &str = "libmemprof_preload.so";

/// CPython's choice of allocator (`malloc`: every object from the C library's `malloc`).
const PYTHONMALLOC: &str = "PYTHONMALLOC";

/// What `memprof record` runs.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Settings passed to the preload library (config, output template, follow forks).
    pub settings: EnvSettings,
    /// Replace an existing output file.
    pub force: bool,
    /// The program (a path, or a name looked up in `PATH`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Leave CPython's own small-object allocator (pymalloc) in place: without it, the
    /// program runs with `PYTHONMALLOC=malloc` (unless its environment sets `PYTHONMALLOC`),
    /// so that every Python object is a `malloc` call the profile sees, not a slice of an
    /// arena allocated long before.
    pub keep_pymalloc: bool,
}

/// The outcome of a recorded run.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The program's exit status (128 + signal when a signal killed it).
    pub exit_code: i32,
    /// The signal that killed the program, if one did.
    pub signal: Option<i32>,
    /// The profile of the program's process.
    pub output: PathBuf,
    /// Profiles of followed children (in the tree's directory, `<output>.d/`),
    /// sorted by pid.
    pub children: Vec<PathBuf>,
    /// `PYTHONMALLOC=malloc` was put in the program's environment (see
    /// [`RecordOptions::keep_pymalloc`]).
    pub pymalloc_bypassed: bool,
    /// Without `--follow-forks`: the programs that the profiled process and its forked
    /// children executed or spawned, unprofiled, as they were named to `exec` or
    /// `posix_spawn`, in order (names are the program's strings: escape them to print).
    pub unfollowed: Vec<String>,
    /// The profile of every file the collector wrote, as it folded them while writing.
    pub(crate) folded: Vec<(PathBuf, crate::profile::Profile)>,
    /// The kernel's OOM killer killed the program (it died of SIGKILL, and an OOM-kill
    /// count rose during the run).
    pub(crate) oom: Option<super::oom::OomKill>,
    /// The profiles whose writing failed (a full disk), said by the collector: each keeps
    /// what was written before, and the fold in `folded` is whole.
    pub(crate) unwritten: Vec<PathBuf>,
}

/// Finds the preload library: `$MEMPROF_PRELOAD`, else `libmemprof_preload.so` next to this
/// executable (an installed layout, or a cargo target directory, where `build.rs` keeps it
/// up to date), else the copy `bundled` inside the executable. Whichever it is, the loader
/// is given a file in a directory of this user's alone ([`super::bundled`] §1): a library
/// found outside is checked by its descriptor and copied from it, so that nobody can swap
/// it between the check and the load. Keep the result alive while the program runs: a
/// library that no cache directory could take lives in a temporary directory removed on
/// drop. The error lists the places tried.
pub fn find_preload(bundled: Option<&Bundled>) -> Result<Installed, Error> {
    if let Some(p) = std::env::var_os(config::ENV_PRELOAD).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(LaunchError::PreloadNotAFile(p.display().to_string()).into());
        }
        return super::bundled::install_copy(&p);
    }
    let exe =
        std::env::current_exe().map_err(|e| Error::io("cannot find the memprof executable", e))?;
    let beside = exe.parent().unwrap_or(Path::new(".")).join(PRELOAD_NAME);
    if beside.is_file() {
        // Refused, not passed over for the bundled copy: a library that someone else could
        // have put there is worth an error (`sys/trusted.rs`, §1).
        return super::bundled::install_copy(&beside);
    }
    match bundled {
        Some(b) => b.install(),
        None => Err(LaunchError::PreloadNotFound(beside.display().to_string()).into()),
    }
}

/// Finds `program` the way `execvp` would: a name with a slash is a path, otherwise the
/// first executable regular file of that name in `PATH`.
pub fn resolve_program(program: &OsStr) -> Result<PathBuf, Error> {
    let shown = Path::new(program).display().to_string();
    if program.is_empty() {
        return Err(Error::Config("no program given (memprof record -- PROG [ARGS…])".into()));
    }
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        check_executable(&p, &shown)?;
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if candidate.is_file() && check_executable(&candidate, &shown).is_ok() {
            return Ok(candidate);
        }
    }
    Err(LaunchError::NotInPath(shown).into())
}

/// The program a rustup proxy would run: `rustc`, `cargo`, `rustdoc` … are links to
/// `rustup`, which executes the toolchain's program of that name (an `exec`, so without
/// `--follow-forks` the profile would be the proxy's). Found as the proxy finds it, by
/// `rustup which NAME` run in this directory (so a `rust-toolchain` file is obeyed). `None`
/// for any other program, for a `+toolchain` first argument (the proxy's own syntax, left
/// to it), or when rustup does not answer with an executable file.
pub(crate) fn through_rustup(program: &OsStr, args: &[OsString]) -> Option<PathBuf> {
    let named = resolve_program(program).ok()?;
    let name = named.file_name()?;
    let proxy = fs::canonicalize(&named).ok()?;
    if proxy.file_name()? != "rustup" || name == "rustup" {
        return None;
    }
    if args.first().is_some_and(|a| a.as_bytes().starts_with(b"+")) {
        return None;
    }
    let out = Command::new(&proxy)
        .arg("which")
        .arg(name)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let line = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
    let target = PathBuf::from(OsStr::from_bytes(line));
    let ok = out.status.success() && target.is_absolute() && target.file_name() == Some(name);
    (ok && check_executable(&target, "").is_ok()).then_some(target)
}

fn check_executable(p: &Path, shown: &str) -> Result<(), Error> {
    let meta = fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LaunchError::NotFound(shown.to_owned()).into(),
        _ => Error::io(format!("cannot run {shown}"), e),
    })?;
    if meta.is_dir() {
        return Err(LaunchError::Directory(shown.to_owned()).into());
    }
    if !meta.is_file() {
        return Err(LaunchError::NotRegularFile(shown.to_owned()).into());
    }
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| LaunchError::NulInPath(shown.to_owned()))?;
    // SAFETY: `c` is a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0
        || meta.permissions().mode() & 0o111 == 0
    {
        return Err(LaunchError::NotExecutable(shown.to_owned()).into());
    }
    Ok(())
}

/// How a program file would be started, as far as the preload library is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linkage {
    /// An ELF program with an interpreter (the dynamic loader): `LD_PRELOAD` works.
    Dynamic,
    /// An ELF program without an interpreter: it never loads a shared library.
    Static,
    /// A script (`#!`): its interpreter is checked when it runs.
    Script,
    /// Not ELF and not a script: left to `exec` to accept or refuse.
    Unknown,
}

/// Reads the ELF program headers of `path` and says whether it has a `PT_INTERP`.
pub fn linkage(path: &Path) -> Result<Linkage, Error> {
    let mut f = crate::sys::files::open_input_regular(path)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let mut head = Vec::new();
    (&mut f)
        .take(64 * 1024)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    if head.starts_with(b"#!") {
        return Ok(Linkage::Script);
    }
    if head.len() < 52 || &head[..4] != b"\x7fELF" {
        return Ok(Linkage::Unknown);
    }
    let is64 = head[4] == 2;
    let le = head[5] == 1;
    let u16_at = |o: usize| -> Option<u64> {
        let b: [u8; 2] = head.get(o..o + 2)?.try_into().ok()?;
        Some(u64::from(if le { u16::from_le_bytes(b) } else { u16::from_be_bytes(b) }))
    };
    let u32_at = |o: usize| -> Option<u64> {
        let b: [u8; 4] = head.get(o..o + 4)?.try_into().ok()?;
        Some(u64::from(if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) }))
    };
    let u64_at = |o: usize| -> Option<u64> {
        let b: [u8; 8] = head.get(o..o + 8)?.try_into().ok()?;
        Some(if le { u64::from_le_bytes(b) } else { u64::from_be_bytes(b) })
    };
    let (phoff, phentsize, phnum) = if is64 {
        (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    } else {
        (u32_at(0x1c), u16_at(0x2a), u16_at(0x2c))
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (phoff, phentsize, phnum) else {
        return Ok(Linkage::Unknown);
    };
    const PT_INTERP: u64 = 3;
    for i in 0..phnum {
        let at = phoff.saturating_add(i.saturating_mul(phentsize));
        let Ok(at) = usize::try_from(at) else { break };
        match u32_at(at) {
            Some(PT_INTERP) => return Ok(Linkage::Dynamic),
            Some(_) => {}
            // Program headers beyond the first 64 KiB: do not guess.
            None => return Ok(Linkage::Unknown),
        }
    }
    Ok(Linkage::Static)
}

/// Checks that `path` can be profiled: not setuid/setgid, not statically linked.
pub fn check_profilable(path: &Path, shown: &str) -> Result<(), Error> {
    let meta = fs::metadata(path).map_err(|e| Error::io(format!("cannot run {shown}"), e))?;
    if meta.mode() & (libc::S_ISUID | libc::S_ISGID) != 0 {
        return Err(LaunchError::SetId(shown.to_owned()).into());
    }
    if linkage(path)? == Linkage::Static {
        let (rust, go) = (super::reach::is_rust(path), super::reach::is_go(path));
        return Err(LaunchError::StaticallyLinked { program: shown.to_owned(), rust, go }.into());
    }
    Ok(())
}

/// Expands `%p`/`%%` of `template` with `pid` into `buf`, NUL-terminated, without
/// allocating (for the child between fork and exec). Returns false when it does not fit.
fn expand_into(template: &[u8], pid: u32, buf: &mut [u8]) -> bool {
    let mut digits = [0u8; 10];
    let n = crate::sys::procfs::write_decimal(&mut digits, pid);
    let mut out = 0;
    let mut put = |b: u8, out: &mut usize| -> bool {
        if *out + 1 >= buf.len() {
            return false;
        }
        buf[*out] = b;
        *out += 1;
        true
    };
    let mut i = 0;
    while i < template.len() {
        let c = template[i];
        if c == b'%' && template.get(i + 1) == Some(&b'p') {
            for d in &digits[..n] {
                if !put(*d, &mut out) {
                    return false;
                }
            }
            i += 2;
            continue;
        }
        if c == b'%' && template.get(i + 1) == Some(&b'%') {
            i += 1;
        }
        if !put(c, &mut out) {
            return false;
        }
        i += 1;
    }
    buf[out] = 0;
    true
}

/// Creates the output file exclusively, or with `force` replaces a regular file of this
/// user's of that name atomically: a new empty file is created under a temporary name in
/// the same directory (`O_CREAT|O_EXCL|O_NOFOLLOW`) and renamed over the old one, so the
/// name never stops naming a file (an unlink then a create left a moment in which anyone
/// who can write the directory could put a symlink or a FIFO there). Async-signal-safe, and
/// no allocation: it runs in the child between fork and exec. Returns 0 or an errno.
pub(crate) fn create_output(path: &[u8], force: bool) -> i32 {
    let p = path.as_ptr().cast::<libc::c_char>();
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `path` is NUL-terminated (built by `expand_into` or from a CString); `st` is
    // a live stat buffer.
    let ours = force
        && unsafe {
            let mut st: libc::stat = core::mem::zeroed();
            // Only a regular file of this user's: a FIFO, a device or another user's file is
            // left alone (EEXIST), as `sys/files.rs` §2 leaves them.
            libc::lstat(p, &mut st) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFREG
                && st.st_uid == libc::geteuid()
        };
    if ours {
        return replace_output(path);
    }
    // SAFETY: as above; the mode is the variadic third argument.
    unsafe {
        let fd = libc::open(p, flags, 0o644 as libc::c_uint);
        if fd < 0 {
            return *libc::__errno_location();
        }
        libc::close(fd);
    }
    0
}

/// [`create_output`]'s replacement: `<path>.<pid>.<n>.tmp`, created new, renamed over
/// `path`. Async-signal-safe, no allocation.
fn replace_output(path: &[u8]) -> i32 {
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    let mut tmp = [0u8; 4096 + 48];
    if end + 48 > tmp.len() {
        return libc::ENAMETOOLONG;
    }
    tmp[..end].copy_from_slice(&path[..end]);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let mut last = libc::EEXIST;
    // A name taken (another run's temporary file, or one put there to stop this one) is
    // passed over for the next.
    for n in 0..16u32 {
        let mut at = end;
        for part in [pid, n] {
            tmp[at] = b'.';
            at += 1;
            at += crate::sys::procfs::write_decimal(&mut tmp[at..], part);
        }
        tmp[at..at + 5].copy_from_slice(b".tmp\0");
        let t = tmp.as_ptr().cast::<libc::c_char>();
        // SAFETY: `tmp` and `path` are NUL-terminated; the mode is the variadic argument.
        unsafe {
            let fd = libc::open(t, flags, 0o644 as libc::c_uint);
            if fd < 0 {
                last = *libc::__errno_location();
                if last == libc::EEXIST {
                    continue;
                }
                return last;
            }
            libc::close(fd);
            // Whatever the name is now, rename replaces the entry itself: a symlink put
            // there meanwhile is replaced, never followed; a directory fails.
            if libc::rename(t, path.as_ptr().cast()) != 0 {
                let e = *libc::__errno_location();
                libc::unlink(t);
                return e;
            }
        }
        return 0;
    }
    last
}

/// Set in the errno the child sends back when it was the tree's directory that could not
/// be created.
const TREE_DIR_ERROR: i32 = 1 << 30;

/// `--force` with `--follow-forks`: an earlier run's tree directory is removed, if it is
/// this user's real directory (its files with it); anything else of its name (a symlink, a
/// file) is unlinked, never followed.
fn remove_tree(dir: &Path) {
    let Ok(meta) = fs::symlink_metadata(dir) else { return };
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    if meta.is_dir() {
        if meta.uid() == me {
            let _ = fs::remove_dir_all(dir);
        }
    } else {
        let _ = fs::remove_file(dir);
    }
}

pub(crate) fn create_error(path: &str, errno: i32, force: bool) -> Error {
    let e = std::io::Error::from_raw_os_error(errno);
    if errno == libc::EEXIST && !force {
        LaunchError::OutputExists(path.to_owned()).into()
    } else if errno == libc::EEXIST {
        Error::Other(format!(
            "cannot create the profile {path}: it exists and is not a regular file of this              user's (a directory, a FIFO, a device, another user's file); --force replaces              only those, and it is left alone"
        ))
    } else {
        Error::io(format!("cannot create the profile {path}"), e)
    }
}

/// Runs the program under the preload library and waits for it. `preload` is the library
/// ([`find_preload`]).
pub fn record(opts: &RecordOptions, preload: &Path) -> Result<Recorded, Error> {
    record_with(opts, preload, |_| {})
}

/// [`record`], calling `started` with the program's pid once it runs (before waiting for
/// it), so that work can overlap the run.
pub fn record_with(
    opts: &RecordOptions,
    preload: &Path,
    started: impl FnOnce(u32),
) -> Result<Recorded, Error> {
    record_publishing(opts, preload, None, started)
}

/// [`record_with`], the root process's profile published in `publish` as the collector
/// folds it (`--serve`).
pub(crate) fn record_publishing(
    opts: &RecordOptions,
    preload: &Path,
    publish: Option<std::sync::Arc<super::collect::Published>>,
    started: impl FnOnce(u32),
) -> Result<Recorded, Error> {
    let shown = Path::new(&opts.program).display().to_string();
    let program = resolve_program(&opts.program)?;
    check_profilable(&program, &shown)?;
    let template = opts.settings.output.clone();
    // The kernel's OOM-kill counts before the program runs (`oom`).
    let oom = super::oom::OomWatch::start();
    let deferred = template.contains("%p");
    if !deferred {
        let c =
            std::ffi::CString::new(template.as_bytes()).map_err(|_| LaunchError::NulInOutput)?;
        let errno = create_output(c.as_bytes_with_nul(), opts.force);
        if errno != 0 {
            return Err(create_error(&template, errno, opts.force));
        }
        if opts.settings.follow_forks {
            let dir = config::tree_dir(&template);
            if opts.force {
                remove_tree(Path::new(&dir));
            }
            let c = std::ffi::CString::new(dir.as_bytes()).map_err(|_| LaunchError::NulInOutput)?;
            let errno = crate::sys::private_dir::create(c.as_bytes_with_nul(), false);
            if errno != 0 {
                let _ = fs::remove_file(&template);
                return Err(create_error(&dir, errno, false));
            }
        }
    }

    if opts.settings.follow_forks {
        // Descendants that outlive the program are re-parented to this process rather
        // than to init, so that `record` can wait for them and read their profiles whole.
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) only sets a flag of this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    }
    let mut cmd = Command::new(&program);
    cmd.arg0(&opts.program).args(&opts.args);
    for (k, v) in opts.settings.to_env() {
        cmd.env(k, v);
    }
    cmd.env_remove(config::ENV_STEM);
    // The collector is this process: the program's threads wait for room while it exists
    // (`record/ring.rs` §4).
    let (collector, since) = crate::record::ring::this_process();
    cmd.env(config::ENV_COLLECTOR, format!("{collector}:{since}"));
    // Harmless to any other program, and it must be there before an interpreter that the
    // program starts (a script's, a wrapper's) reads it.
    let pymalloc_bypassed = !opts.keep_pymalloc && std::env::var_os(PYTHONMALLOC).is_none();
    if pymalloc_bypassed {
        cmd.env(PYTHONMALLOC, "malloc");
    }
    // The program may change directory (daemons do): its library is told where the output
    // is as an absolute path, so followed children's files land beside the parent's
    // whatever their working directory, where `record` looks for them.
    if Path::new(&template).is_relative() {
        if let Ok(cwd) = std::env::current_dir() {
            cmd.env(config::ENV_OUTPUT, cwd.join(&template));
        }
    }
    // The program's events leave it through shared rings that this process collects
    // (see `record/ring.rs`); without a directory for them, the program writes its own
    // file as under a hand-set `LD_PRELOAD`.
    let rings = RingDir::create();
    if let Some(d) = &rings {
        cmd.env(config::ENV_RINGS, &d.0);
    }
    let mut preload_list = preload.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload_list.push(":");
        preload_list.push(old);
    }
    cmd.env("LD_PRELOAD", preload_list);

    // A pipe that tells a failure to create the output in the child from a failed exec.
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::io("cannot create a pipe", std::io::Error::last_os_error()));
    }
    let (rd, wr) = (fds[0], fds[1]);
    if deferred {
        let tmpl = template.clone().into_bytes();
        let force = opts.force;
        let follow = opts.settings.follow_forks;
        let make = move || -> std::io::Result<()> {
            let mut buf = [0u8; 4096];
            // SAFETY: getpid has no preconditions.
            let pid = unsafe { libc::getpid() } as u32;
            let mut errno = if expand_into(&tmpl, pid, &mut buf) {
                create_output(&buf, force)
            } else {
                libc::ENAMETOOLONG
            };
            if errno == 0 && follow {
                // The tree's directory, `<output>.d`, beside it (a fresh pid's: none of an
                // earlier run's is replaced here).
                let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
                errno = if end + 3 <= buf.len() {
                    buf[end..end + 3].copy_from_slice(b".d\0");
                    crate::sys::private_dir::create(&buf[..end + 3], false)
                } else {
                    libc::ENAMETOOLONG
                };
                if errno != 0 {
                    buf[end] = 0;
                    // SAFETY: `buf` holds the output's NUL-terminated path, created above.
                    unsafe { libc::unlink(buf.as_ptr().cast()) };
                    errno |= TREE_DIR_ERROR;
                }
            }
            if errno != 0 {
                let bytes = errno.to_ne_bytes();
                // SAFETY: writes 4 bytes from a live buffer to the pipe's write end.
                unsafe { libc::write(wr, bytes.as_ptr().cast(), 4) };
                return Err(std::io::Error::from_raw_os_error(errno));
            }
            Ok(())
        };
        // SAFETY: the closure only calls async-signal-safe functions (getpid, lstat,
        // unlink, open, close, rename, write) and does not allocate.
        unsafe { cmd.pre_exec(make) };
    }
    let spawned = cmd.spawn();
    // SAFETY: closes this process's copy of the write end, which nothing else uses.
    unsafe { libc::close(wr) };
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let mut b = [0u8; 4];
            // SAFETY: reads at most 4 bytes into a live buffer; every write end is closed.
            let n = unsafe { libc::read(rd, b.as_mut_ptr().cast(), 4) };
            // SAFETY: closes the read end once.
            unsafe { libc::close(rd) };
            if n == 4 {
                let errno = i32::from_ne_bytes(b);
                if errno & TREE_DIR_ERROR != 0 {
                    let dir = config::tree_dir(&template);
                    return Err(create_error(&dir, errno & !TREE_DIR_ERROR, false));
                }
                return Err(create_error(&template, errno, opts.force));
            }
            if !deferred {
                let _ = fs::remove_file(&template);
                if opts.settings.follow_forks {
                    // Empty: the program never ran.
                    let _ = fs::remove_dir(config::tree_dir(&template));
                }
            }
            return Err(Error::io(format!("cannot run {shown}"), e));
        }
    };
    // SAFETY: closes the read end once.
    unsafe { libc::close(rd) };
    let pid = child.id();
    let output = PathBuf::from(config::expand_output(&template, pid));
    let root_ended = std::sync::Arc::new(RootEnded::default());
    let collector = rings.as_ref().and_then(|d| {
        let plan = Plan {
            dir: d.0.clone(),
            root_pid: pid,
            root_output: output.clone(),
            attached: false,
            publish: publish.clone(),
            root_ended: Some(root_ended.clone()),
        };
        match Collector::start(plan) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("memprof: cannot start collecting the profile: {e}");
                None
            }
        }
    });
    started(pid);

    // SAFETY: SIG_IGN is a valid disposition for these signals.
    let old = unsafe {
        [libc::signal(libc::SIGINT, libc::SIG_IGN), libc::signal(libc::SIGQUIT, libc::SIG_IGN)]
    };
    let status = child.wait();
    // How it ended, for its profile (the collector finishes its file once it knows).
    let oom = match &status {
        Ok(s) if s.signal() == Some(libc::SIGKILL) => oom.killed(),
        _ => None,
    };
    root_ended.set(status.as_ref().ok().and_then(|s| {
        let mut e = Ended::from_wait_status(s.into_raw())?;
        if let Some(kill) = &oom {
            e.how = EndedHow::OomKill;
            e.limit_bytes = kill.limit.unwrap_or(0);
        }
        Some(e)
    }));
    if opts.settings.follow_forks {
        wait_for_descendants(&shown);
    }
    let finished = collector.map(Collector::finish).unwrap_or_default();
    for msg in &finished.messages {
        eprintln!("memprof: {msg}");
    }
    let unfollowed =
        rings.as_ref().map(|d| crate::record::unfollowed::read(&d.0, 1 << 20)).unwrap_or_default();
    drop(rings);
    // SAFETY: restores the dispositions read above.
    unsafe {
        libc::signal(libc::SIGINT, old[0]);
        libc::signal(libc::SIGQUIT, old[1]);
    }
    let status = status.map_err(|e| Error::io(format!("cannot wait for {shown}"), e))?;
    let (exit_code, signal) = match (status.code(), status.signal()) {
        (Some(c), _) => (c, None),
        (None, Some(s)) => (128 + s, Some(s)),
        (None, None) => (1, None),
    };
    let children = if opts.settings.follow_forks { child_profiles(&output) } else { Vec::new() };
    Ok(Recorded {
        exit_code,
        signal,
        output,
        children,
        pymalloc_bypassed,
        unfollowed,
        folded: finished.profiles,
        oom,
        unwritten: finished.unwritten,
    })
}

/// The private directory of a run's shared rings (0700, on a memory file system when
/// there is one), removed with what is left in it when dropped.
pub(crate) struct RingDir(pub(crate) PathBuf);

impl RingDir {
    pub(crate) fn create() -> Option<RingDir> {
        use std::os::unix::fs::DirBuilderExt;
        let shm = Path::new("/dev/shm");
        let parent = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        RingDir::remove_stale(&parent);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        for i in 0..100u32 {
            let dir = parent.join(format!("memprof-{}-{nanos:x}{i}", std::process::id()));
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Some(RingDir(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => break,
            }
        }
        None
    }
}

impl RingDir {
    /// Removes the ring directories of `record` processes that are gone (killed before they
    /// could remove their own: a ring their program made before they attached to it stays
    /// there otherwise), when they are this user's.
    fn remove_stale(parent: &Path) {
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        for e in fs::read_dir(parent).into_iter().flatten().flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("memprof-"))
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let ours = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == me);
            if ours && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}

impl Drop for RingDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The object files mapped executable in process `pid` (from `/proc/<pid>/maps`), in the
/// kernel's order (the program first), without the preload library: what its profile's
/// modules will name, known while it runs.
pub fn mapped_objects(pid: u32) -> Vec<String> {
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let perms = fields.nth(1).unwrap_or("");
        let Some(path) = fields.nth(3) else { continue };
        if perms.contains('x')
            && path.starts_with('/')
            && !path.rsplit('/').next().unwrap_or("").starts_with("libmemprof_preload")
            && !out.iter().any(|p| p == path)
        {
            out.push(path.to_owned());
        }
    }
    out
}

/// After the program's exit, with `--follow-forks`: waits for the processes it left running
/// (re-parented to this one, see [`record_with`]), naming them once, so that their
/// profiles are read whole and none is left out of the report.
fn wait_for_descendants(shown: &str) {
    let me = std::process::id();
    let left: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let ppid = crate::sys::procfs::stat_field(&format!("/proc/{pid}/stat"), 1);
            ppid.and_then(|p| p.parse::<u32>().ok()) == Some(me)
        })
        .collect();
    if !left.is_empty() {
        let pids: Vec<String> = left.iter().map(u32::to_string).collect();
        eprintln!(
            "memprof: {shown} exited; waiting for the {} process(es) it left running (pid {}), \
             whose profiles are part of the run",
            left.len(),
            pids.join(", ")
        );
    }
    loop {
        let mut status = 0;
        // SAFETY: waits for any child of this process; `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
}

/// The files of followed children of the run whose root profile is `root`:
/// `<pid>[.<n>].mprof` in its tree's directory, `<root>.d/`, by pid and image.
pub fn child_profiles(root: &Path) -> Vec<PathBuf> {
    crate::profile::tree::children(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_without_allocating() {
        let mut buf = [0u8; 64];
        assert!(expand_into(b"memprof.%p.mprof", 1234, &mut buf));
        assert_eq!(&buf[..18], b"memprof.1234.mprof");
        assert_eq!(buf[18], 0);
        assert!(expand_into(b"a%%p", 7, &mut buf));
        assert_eq!(&buf[..4], b"a%p\0");
        assert!(!expand_into(b"0123456789", 1, &mut [0u8; 5]));
    }

    #[test]
    fn linkage_of_known_files() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(linkage(&me).unwrap(), Linkage::Dynamic);
        let dir = std::env::temp_dir().join(format!("memprof-linkage-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(linkage(&script).unwrap(), Linkage::Script);
        let _ = fs::remove_dir_all(&dir);
    }
}
