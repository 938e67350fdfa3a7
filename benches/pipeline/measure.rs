//! Running the commands measured: their CPU and memory from `wait4`, scratch directories,
//! the tools' files, the figures the programs print, and the rows of the issue's table.

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Instant, SystemTime};

/// A scratch directory, removed when dropped (also when a run panics).
pub(crate) struct TempDir(pub(crate) PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn target_dir() -> PathBuf {
    // The bench binary lives in target/<profile>/deps/.
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One finished child: its wall time, its peak RSS (the largest of its own and of each
/// descendant's it waited for: `wait4` keeps the maximum, not a sum), and the CPU time
/// (user + system) of it and of the descendants it waited for, every thread of each: for
/// `memprof record`, its own threads and the program's; for `heaptrack`, the script, the
/// program and `heaptrack_interpret`.
pub(crate) struct Measured {
    pub(crate) secs: f64,
    /// The wall clock when `wait4` returned.
    pub(crate) ended: SystemTime,
    pub(crate) max_rss: u64,
    pub(crate) cpu: f64,
}

/// Where a run's stdout goes.
pub(crate) enum Out<'a> {
    Null,
    /// A file of its own (heaptrack_print's report, memprof report's table).
    File(&'a Path),
    /// The stderr log too (heaptrack's own messages).
    Log,
}

/// Waits for child `pid` with `wait4`, which also returns the child's resource usage (with
/// that of the descendants it waited for, not that of this process's other children).
pub(crate) fn wait4(pid: libc::pid_t) -> (ExitStatus, libc::rusage) {
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is a C struct of integers (two `timeval`s and `c_long`s), for which
    // all zero bytes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid for writes for the whole call; `pid` is a
        // child of this process that nothing else waits for (its `std::process::Child` is
        // dropped without `wait`).
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            return (ExitStatus::from_raw(status), usage);
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "wait4({pid}): {e}");
    }
}

/// A child started by [`start`], finished by [`finish`].
pub(crate) struct Started<'a> {
    pub(crate) what: String,
    pub(crate) cmd: String,
    pub(crate) child: Child,
    pub(crate) log: &'a Path,
    pub(crate) start: Instant,
}

/// Starts `cmd` with stdin from /dev/null, stdout to `out` and stderr to the file `log`.
pub(crate) fn start<'a>(what: &str, cmd: &mut Command, out: Out, log: &'a Path) -> Started<'a> {
    let err = File::create(log).unwrap();
    let stdout: Stdio = match out {
        Out::Null => Stdio::null(),
        Out::File(path) => File::create(path).unwrap().into(),
        Out::Log => err.try_clone().unwrap().into(),
    };
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(err);
    let start = Instant::now();
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    Started { what: what.to_owned(), cmd: format!("{cmd:?}"), child, log, start }
}

/// Waits for a started child with `wait4`, and panics with the end of its log if it failed.
pub(crate) fn finish(s: Started) -> Measured {
    let (status, usage) = wait4(s.child.id() as libc::pid_t);
    let ended = SystemTime::now();
    let secs = s.start.elapsed().as_secs_f64();
    drop(s.child);
    if !status.success() {
        let text = std::fs::read_to_string(s.log).unwrap_or_default();
        let tail = text.len().saturating_sub(8000);
        let tail = text.get(tail..).unwrap_or(&text);
        panic!("{} failed ({status}): {}\n--- its stderr ---\n{tail}", s.what, s.cmd);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // Linux counts ru_maxrss in KiB; `wait4` gives the child's usage with that of the
    // children it reaped.
    Measured {
        secs,
        ended,
        max_rss: usage.ru_maxrss.max(0) as u64 * 1024,
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
    }
}

/// Runs `cmd` with stdin from /dev/null, stdout to `out`, stderr to the file `log`, and
/// panics with the end of `log` if it fails.
pub(crate) fn run(what: &str, cmd: &mut Command, out: Out, log: &Path) -> Measured {
    finish(start(what, cmd, out, log))
}

/// Two runs started together (one right after the other), stdout to /dev/null and stderr
/// to a log each: the wall time from the first start until both have exited, and their
/// CPU time (user + system, from `wait4`) summed.
pub(crate) fn run_two(what: &str, cmds: [Command; 2], logs: [&Path; 2]) -> (f64, f64) {
    let t0 = Instant::now();
    let [mut a, mut b] = cmds;
    let a = start(&format!("{what} (first)"), &mut a, Out::Null, logs[0]);
    let b = start(&format!("{what} (second)"), &mut b, Out::Null, logs[1]);
    let (a, b) = (finish(a), finish(b));
    (t0.elapsed().as_secs_f64(), a.cpu + b.cpu)
}

/// The event counts from a memprof summary's `samples: N (F freed, M moved), …` line (the
/// last one: the program's own stderr comes first): samples + frees + moves.
pub(crate) fn parse_events(summary: &str) -> Option<u64> {
    let line = summary.lines().rev().find(|l| l.trim_start().starts_with("samples:"))?;
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
        .take(3)
        .collect();
    (numbers.len() == 3).then(|| numbers.iter().sum())
}

/// The number after the last line of `text` that starts with `key` and a space: a figure a
/// workload prints of itself (`vmhwm_kib N`, `allocations_done N`), found in a log where
/// other lines (memprof's summary, heaptrack's messages) come before and after it.
pub(crate) fn parse_marker(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .rev()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .find_map(|rest| rest.trim().parse().ok())
}

/// One row of the issue's table, printed together at the end of the run: the workload,
/// memprof's figure, the peer's in the same run, the target, and whether it was met (`None`:
/// not measured, the figure says why).
pub(crate) struct IssueRow {
    /// The row's place in the issue's table (0 first).
    pub(crate) order: usize,
    pub(crate) workload: String,
    pub(crate) memprof: String,
    pub(crate) peer: String,
    pub(crate) target: String,
    pub(crate) ok: Option<bool>,
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub(crate) fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

pub(crate) fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

/// A file size in MB, kB or bytes (heaptrack's files can be a few kB).
pub(crate) fn size(bytes: f64) -> String {
    if bytes >= 1e6 {
        mb(bytes)
    } else if bytes >= 1e3 {
        format!("{:.1} kB", bytes / 1e3)
    } else {
        format!("{bytes:.0} B")
    }
}

pub(crate) fn mark(ok: bool) -> &'static str {
    if ok {
        "✓"
    } else {
        "✗"
    }
}

/// The heaptrack data file `heaptrack -o PREFIX` wrote (`PREFIX.zst` or `PREFIX.gz`).
pub(crate) fn heaptrack_file(prefix: &Path) -> PathBuf {
    let name = prefix.file_name().unwrap().to_string_lossy().into_owned();
    let dir = prefix.parent().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let f = p.file_name().unwrap().to_string_lossy();
            f.strip_prefix(&name).is_some_and(|rest| rest.starts_with('.'))
        })
        .unwrap_or_else(|| panic!("heaptrack wrote no {}.zst or .gz in {}", name, dir.display()))
}

/// A profile and its companions (`FILE.svg`, …).
pub(crate) fn remove_profile(path: &Path) {
    let _ = std::fs::remove_file(path);
    remove_heaptrack_files(path);
}

/// The wall clock (ns since the epoch) that worst_case.c wrote at `path` before exiting.
pub(crate) fn read_stamp(path: &Path) -> i128 {
    let text = read(path);
    text.trim().parse().unwrap_or_else(|_| panic!("no exit stamp in {} ({text:?})", path.display()))
}

/// Removes the files of a previous heaptrack run (`PREFIX.*`).
pub(crate) fn remove_heaptrack_files(prefix: &Path) {
    let name = format!("{}.", prefix.file_name().unwrap().to_string_lossy());
    for e in std::fs::read_dir(prefix.parent().unwrap()).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&name) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
