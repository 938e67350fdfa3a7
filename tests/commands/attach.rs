//! `memprof attach PID` on a running service: `fixtures/c/service.c` (worker threads that
//! allocate, verify and free all the time; threads in blocking system calls that exit 4 on
//! an EINTR or a short sleep; a known leak and churn phase on SIGUSR1; forks on SIGUSR2)
//! is started plain, `memprof attach` is started beside it, and the profile it writes on
//! detach is read back and compared with what the phase did while attached. Every test
//! ends the service with SIGTERM, and the service must then verify all its blocks and exit
//! 0: an attach or detach that damaged memory, interrupted a system call or broke a fork
//! shows there. Also: two attaches in a row (each profile fresh, the default names),
//! `--duration`, a target that exits while attached, a target that forks all the time, a
//! target in another PID namespace (attached by its pid here), and the refusals (no such
//! process, another user, already traced, statically linked, another mount namespace),
//! each one line and the target unharmed. `exclusive`: one profiler a process (a second
//! attach refused, a killed one's session taken over), and attaches killed at random
//! moments beside a program that forks flat out. `reach`: every way a program like node's
//! executable calls malloc, each seen at its rate, and the note on an allocator whose
//! entry points cannot be patched.

mod exclusive;
mod reach;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{assert_one_line_error, skipped, text, MEMPROF};
use crate::programs::{assert_ok, fixture, read, totals};

/// How long the tests wait for anything (an attach on a loaded two-core machine included).
const PATIENCE: Duration = Duration::from_secs(60);

fn scratch(name: &str) -> PathBuf {
    crate::common::scratch(&format!("attach-{name}"))
}

/// Sends `sig` to `pid` (a process these tests started).
fn kill(pid: i32, sig: i32) {
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// A child's output stream read line by line on a thread of its own: the lines so far,
/// and a channel that gets each one as it comes.
struct Lines {
    rx: Receiver<String>,
    all: Arc<Mutex<String>>,
}

impl Lines {
    fn new(stream: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = channel();
        let all = Arc::new(Mutex::new(String::new()));
        let keep = all.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                keep.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        });
        Lines { rx, all }
    }

    /// Waits for a line containing `needle`; panics after [`PATIENCE`] with `what` and the
    /// text so far (and `context`).
    fn wait_for(&self, needle: &str, what: &str, context: &dyn Fn() -> String) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => {
                    let why = match e {
                        RecvTimeoutError::Timeout => format!("after {PATIENCE:?}"),
                        RecvTimeoutError::Disconnected => "before its output ended".to_owned(),
                    };
                    panic!(
                        "{what}: no line with {needle:?} {why}; so far:\n{}\n{}",
                        self.text(),
                        context()
                    )
                }
            }
        }
    }

    fn text(&self) -> String {
        self.all.lock().unwrap().clone()
    }
}

/// Waits for `child` to exit, at most [`PATIENCE`]; `None` when it still runs.
fn wait_timeout(child: &mut Child) -> Option<ExitStatus> {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The service, running. Dropped (a test that ended, or failed), it is killed: the process
/// started and, when it is a tracer (`--traced`), the service under it.
struct Service {
    child: Child,
    /// The service's pid, from its `ready` line (the child's own, unless `--traced`).
    pid: i32,
    out: Lines,
    err: Lines,
}

impl Service {
    /// `fixtures/c/service.c` built as the other C fixtures are.
    fn start(args: &[&str]) -> Service {
        Service::start_program(&fixture("service"), &[], args)
    }

    /// `front` (e.g. `unshare --mount`) then `prog ARGS`; waits for its `ready PID` line.
    fn start_program(prog: &Path, front: &[&str], args: &[&str]) -> Service {
        let mut cmd = match front.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(prog);
                c
            }
            None => Command::new(prog),
        };
        let mut child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} runs: {e}", prog.display()));
        let out = Lines::new(child.stdout.take().unwrap());
        let err = Lines::new(child.stderr.take().unwrap());
        let mut s = Service { pid: child.id() as i32, child, out, err };
        let errs = s.err.all.clone();
        let ready =
            s.out.wait_for("ready ", "the service starts", &|| errs.lock().unwrap().clone());
        s.pid = ready.trim_start_matches("ready ").trim().parse().expect("ready PID");
        s
    }

    fn signal(&self, sig: i32) {
        kill(self.pid, sig);
    }

    /// Waits for a line of the service's stdout containing `needle`.
    fn wait_line(&self, needle: &str) -> String {
        let errs = self.err.all.clone();
        self.out.wait_for(needle, "the service", &|| errs.lock().unwrap().clone())
    }

    /// SIGUSR1: the known phase; waits for its `phase done`.
    fn phase(&self) {
        self.signal(libc::SIGUSR1);
        self.wait_line("phase done");
    }

    /// Waits for the service to exit by itself: exit 0 after `service ok`, nothing on
    /// stderr (its checks print `service: error: ...` and exit 3, 4 or 5).
    fn expect_clean_exit(mut self) -> String {
        let status = wait_timeout(&mut self.child);
        // The reader threads see the end of the pipes once the process is gone.
        std::thread::sleep(Duration::from_millis(50));
        let (out, err) = (self.out.text(), self.err.text());
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "the service must exit 0 (3: a damaged block, 4: an interrupted system call or a \
             short sleep, 5: a child that failed); status {status:?}\nstdout:\n{out}\nstderr:\n{err}"
        );
        assert!(out.contains("service ok"), "stdout:\n{out}\nstderr:\n{err}");
        assert!(err.trim().is_empty(), "stderr:\n{err}");
        out
    }

    /// SIGTERM, then [`Service::expect_clean_exit`].
    fn terminate(self) -> String {
        self.signal(libc::SIGTERM);
        self.expect_clean_exit()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: kill has no memory preconditions; the pids are this test's children.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::kill(self.child.id() as i32, libc::SIGKILL);
            }
            let _ = self.child.wait();
        }
    }
}

/// `memprof attach OPTS PID`, running. Dropped before it exited (a failed test), it is
/// killed.
struct Attach {
    child: Child,
    out: Lines,
    err: Lines,
}

impl Attach {
    fn start(dir: &Path, opts: &[&str], pid: i32) -> Attach {
        let mut child = Command::new(MEMPROF)
            .current_dir(dir)
            .arg("attach")
            .args(opts)
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("memprof runs");
        let out = Lines::new(child.stdout.take().unwrap());
        let err = Lines::new(child.stderr.take().unwrap());
        Attach { child, out, err }
    }

    /// Waits for `attached to PID` on its stderr: sampling runs.
    fn wait_attached(&self, pid: i32) {
        let outs = self.out.all.clone();
        self.err.wait_for(&format!("attached to {pid}"), "memprof attach", &|| {
            outs.lock().unwrap().clone()
        });
    }

    /// Waits for it to exit (at most [`PATIENCE`]) and returns what it did.
    fn wait(mut self) -> Output {
        let status = wait_timeout(&mut self.child);
        let Some(status) = status else {
            panic!(
                "memprof attach still runs after {PATIENCE:?}\nstdout:\n{}\nstderr:\n{}",
                self.out.text(),
                self.err.text()
            )
        };
        std::thread::sleep(Duration::from_millis(50));
        Output {
            status,
            stdout: self.out.text().into_bytes(),
            stderr: self.err.text().into_bytes(),
        }
    }

    /// Sends `sig` (SIGINT, SIGTERM) to `memprof attach` and waits for it.
    fn stop(self, sig: i32) -> Output {
        kill(self.child.id() as i32, sig);
        self.wait()
    }
}

impl Drop for Attach {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `memprof attach` to a process that must be refused: waits for it, at most [`PATIENCE`].
fn attach_refused(dir: &Path, pid: i32) -> Output {
    Attach::start(dir, &["--interval", "1"], pid).wait()
}

/// What an attach that ended normally leaves: exit 0, the profile complete and readable
/// by `memprof report`, its flamegraph and HTML page beside it, no site with negative
/// live numbers (frees of blocks allocated before the attach are ignored), and the
/// workers' allocations seen (every thread was hooked).
fn check_profile(out: &Output, file: &Path) -> memprof::profile::Profile {
    assert_ok(out, 0);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(file.is_file(), "{} written; output:\n{all}", file.display());
    for ext in ["svg", "html"] {
        let side = PathBuf::from(format!("{}.{ext}", file.display()));
        assert!(side.is_file(), "{} written; output:\n{all}", side.display());
    }
    let p = read(file);
    assert!(p.complete, "{}: {:?}", file.display(), p.warnings);
    for s in memprof::report::site_totals(&p) {
        assert!(s.live_bytes >= 0.0 && s.live_objects >= 0.0, "{s:?}");
    }
    let report = Command::new(MEMPROF).arg("report").arg(file).output().unwrap();
    assert_ok(&report, 0);
    p
}

/// Every `.mprof` file in `dir`.
fn profiles_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "mprof"))
        .collect();
    v.sort();
    v
}

#[test]
fn exact_phase_while_attached() {
    let svc = Service::start(&["4"]);
    let dir = scratch("exact");
    let file = dir.join("a.mprof");
    let a = Attach::start(&dir, &["--interval", "1", "-o", file.to_str().unwrap()], svc.pid);
    a.wait_attached(svc.pid);
    svc.phase();
    // Let the workers allocate and free beside it for a moment.
    std::thread::sleep(Duration::from_millis(200));
    let out = a.stop(libc::SIGINT);
    let p = check_profile(&out, &file);
    assert!(p.header.attached, "the profile says it was attached");
    assert_eq!(p.lost.events, 0);
    assert_eq!(totals(&p, "leak_phase"), (4_096_000.0, 1_000.0, 4_096_000.0, 1_000.0));
    assert_eq!(totals(&p, "churn_phase"), (5_000_000.0, 5_000.0, 0.0, 0.0));
    let (bg_bytes, bg_objects, _, _) = totals(&p, "background_work");
    assert!(bg_bytes > 0.0 && bg_objects > 0.0, "the workers' allocations: {bg_objects}");
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(all.contains("leak_phase"), "the top table names the leak:\n{all}");
    assert!(all.contains("attached: recorded in a running process"), "{all}");
    // The ring stays mapped in the service, but its memory was given back.
    let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", svc.pid)).unwrap();
    let mut in_ring = false;
    let mut ring_kb = 0u64;
    for line in smaps.lines() {
        // A mapping's line, then its fields (`Rss:   4 kB`).
        if !line.split_whitespace().next().is_some_and(|f| f.ends_with(':')) {
            in_ring = line.contains(".ring");
        } else if in_ring {
            if let Some(kb) = line.strip_prefix("Rss:") {
                ring_kb += kb.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    assert!(smaps.contains(".ring"), "the ring stays mapped");
    assert_eq!(ring_kb, 0, "the ring's memory is given back after the detach");
    // The service goes on unharmed, and keeps running without memprof.
    svc.phase();
    svc.terminate();
}

/// `memprof attach` killed with SIGKILL at moments spread over its attach (before it
/// traces, while it borrows a thread, during its calls in the process, while it writes,
/// once attached): each time the service is left neither stopped nor traced, and runs on
/// unharmed (no damaged block, no interrupted system call); a later attach takes over from
/// a killed one (its session never stopped) and its profile is exact. Without the epoller:
/// a thread in `epoll_wait` that the tracer stopped gets `EINTR` from the kernel, which the
/// tracer undoes (`tracee` §3); a tracer killed in the microseconds between the two cannot.
#[test]
fn a_killed_attach_leaves_the_process_running() {
    let svc = Service::start(&["2", "--no-epoller"]);
    let dir = scratch("killed");
    for (i, delay_ms) in (0..60).step_by(3).enumerate() {
        let file = dir.join(format!("k{i}.mprof"));
        let a = Attach::start(&dir, &["--interval", "4096", "-o", file.to_str().unwrap()], svc.pid);
        std::thread::sleep(Duration::from_millis(delay_ms));
        drop(a);
        // The kernel has ended the tracing by the time the tracer is reaped.
        let status = std::fs::read_to_string(format!("/proc/{}/status", svc.pid))
            .unwrap_or_else(|e| panic!("the service is gone after a kill at {delay_ms} ms: {e}"));
        let field = |k: &str| {
            status.lines().find_map(|l| l.strip_prefix(k)).unwrap_or("").trim().to_owned()
        };
        assert_eq!(field("TracerPid:"), "0", "traced after a kill at {delay_ms} ms");
        let state = field("State:");
        assert!(!state.starts_with('t') && !state.starts_with('T'), "{state} at {delay_ms} ms");
        if state.starts_with('Z') {
            std::thread::sleep(Duration::from_millis(100));
            panic!(
                "the service died after a kill at {delay_ms} ms\nstdout:\n{}\nstderr:\n{}",
                svc.out.text(),
                svc.err.text()
            );
        }
    }
    let file = dir.join("after.mprof");
    let a = Attach::start(&dir, &["--interval", "1", "-o", file.to_str().unwrap()], svc.pid);
    a.wait_attached(svc.pid);
    svc.phase();
    let p = check_profile(&a.stop(libc::SIGINT), &file);
    assert_eq!(totals(&p, "leak_phase"), (4_096_000.0, 1_000.0, 4_096_000.0, 1_000.0));
    assert_eq!(totals(&p, "churn_phase"), (5_000_000.0, 5_000.0, 0.0, 0.0));
    svc.terminate();
}

/// The main thread, borrowed first, waits in `nanosleep` and `poll` with timeouts, which
/// the kernel resumes through a restart block that the borrowed thread's `rt_sigreturn`
/// voids: attached and detached five times, none of its waits fails or ends early.
#[test]
fn a_borrowed_thread_in_a_timed_wait_never_sees_eintr() {
    let mut child = Command::new(fixture("sleepy_main"))
        .arg("3")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sleepy_main runs");
    let out = Lines::new(child.stdout.take().unwrap());
    let ready = out.wait_for("ready ", "sleepy_main starts", &String::new);
    let pid: i32 = ready.trim_start_matches("ready ").trim().parse().expect("ready PID");
    let dir = scratch("sleepy");
    for i in 0..5 {
        let file = dir.join(format!("s{i}.mprof"));
        let opts = ["--duration", "0.2", "-o", file.to_str().unwrap()];
        assert_ok(&Attach::start(&dir, &opts, pid).wait(), 0);
    }
    let status = wait_timeout(&mut child);
    std::thread::sleep(Duration::from_millis(50));
    let text = out.text();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{text}");
    assert!(text.contains("sleepy ok"), "{text}");
}

#[test]
fn attach_twice_in_a_row_gives_fresh_profiles() {
    let svc = Service::start(&["4"]);
    let dir = scratch("twice");
    let name0 = dir.join(format!("memprof.{}.mprof", svc.pid));
    let name1 = dir.join(format!("memprof.{}.1.mprof", svc.pid));
    let a = Attach::start(&dir, &["--interval", "1"], svc.pid);
    a.wait_attached(svc.pid);
    svc.phase();
    let first = a.stop(libc::SIGINT);
    // A phase while nobody is attached: in neither profile.
    svc.phase();
    let a = Attach::start(&dir, &["--interval", "1"], svc.pid);
    a.wait_attached(svc.pid);
    svc.phase();
    let second = a.stop(libc::SIGTERM);
    let mut names = vec![name0.clone(), name1.clone()];
    names.sort();
    assert_eq!(profiles_in(&dir), names, "the default names");
    for (out, file) in [(&first, &name0), (&second, &name1)] {
        let p = check_profile(out, file);
        assert_eq!(
            totals(&p, "leak_phase"),
            (4_096_000.0, 1_000.0, 4_096_000.0, 1_000.0),
            "{}: only what was leaked while attached",
            file.display()
        );
        assert_eq!(totals(&p, "churn_phase"), (5_000_000.0, 5_000.0, 0.0, 0.0));
    }
    svc.terminate();
}

#[test]
fn duration_ends_the_attach() {
    let svc = Service::start(&["2"]);
    let dir = scratch("duration");
    let file = dir.join("d.mprof");
    let t = Instant::now();
    let a = Attach::start(
        &dir,
        &["--duration", "1s", "--depth", "16", "--top", "3", "-o", file.to_str().unwrap()],
        svc.pid,
    );
    a.wait_attached(svc.pid);
    let out = a.wait();
    assert!(t.elapsed() >= Duration::from_secs(1), "detached after {:?}", t.elapsed());
    check_profile(&out, &file);
    svc.terminate();
}

#[test]
fn target_exits_while_attached() {
    let svc = Service::start(&["2", "--exit-after", "6000"]);
    let dir = scratch("exits");
    let file = dir.join("e.mprof");
    let a = Attach::start(&dir, &["--interval", "1", "-o", file.to_str().unwrap()], svc.pid);
    a.wait_attached(svc.pid);
    svc.phase();
    // Neither gets a signal: the service exits by itself, and attach with it.
    svc.expect_clean_exit();
    let out = a.wait();
    let p = check_profile(&out, &file);
    assert_eq!(totals(&p, "leak_phase"), (4_096_000.0, 1_000.0, 4_096_000.0, 1_000.0));
    assert_eq!(totals(&p, "churn_phase"), (5_000_000.0, 5_000.0, 0.0, 0.0));
}

/// Attaches and detaches `rounds` times while the service forks every few milliseconds,
/// with a SIGUSR2 fork (and its `fork done`) inside each attach; then the service must
/// stop cleanly, every child of it having exited 0.
fn fork_race(name: &str, args: &[&str], rounds: usize) {
    let svc = Service::start(args);
    let dir = scratch(name);
    for round in 0..rounds {
        let file = dir.join(format!("f{round}.mprof"));
        let mut opts = match round % 3 {
            0 => vec!["--interval", "1"],
            1 => vec!["--rate", "0.01"],
            _ => vec![],
        };
        opts.extend(["-o", file.to_str().unwrap()]);
        let a = Attach::start(&dir, &opts, svc.pid);
        a.wait_attached(svc.pid);
        svc.signal(libc::SIGUSR2);
        svc.wait_line("fork done");
        std::thread::sleep(Duration::from_millis(300));
        let out = a.stop(libc::SIGINT);
        check_profile(&out, &file);
    }
    let out = svc.terminate();
    let forks: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("forks "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(forks > 0, "the service forked: {out}");
}

#[test]
fn fork_race_without_exec() {
    fork_race("forks", &["2", "--fork-every", "3"], 3);
}

#[test]
fn fork_race_with_exec() {
    fork_race("forks-exec", &["2", "--fork-every", "5", "--exec"], 3);
}

/// A GET of `target` on `addr` (HTTP/1.1, the server closes the connection): the status
/// and the body.
fn http_get(addr: &str, target: &str) -> (u16, Vec<u8>) {
    use std::io::Write as _;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = text(&all[..end]);
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, all[end + 4..].to_vec())
}

/// `--serve ADDR`: while attached, `/debug/pprof/heap` holds the leak (inuse_space of at
/// least what leak_phase keeps, its name among the strings); the server stops on detach.
#[test]
fn serve_while_attached() {
    let svc = Service::start(&["2"]);
    let dir = scratch("serve");
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let file = dir.join("s.mprof");
    let a = Attach::start(
        &dir,
        &["--interval", "1", "--serve", &addr, "-o", file.to_str().unwrap()],
        svc.pid,
    );
    a.wait_attached(svc.pid);
    svc.phase();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (inuse, strings) = loop {
        let (status, body) = http_get(&addr, "/debug/pprof/heap");
        assert_eq!(status, 200, "{}", text(&body));
        let p = crate::common::decode_pprof(&body);
        let inuse: i64 = p.sample.iter().map(|s| s.value.get(3).copied().unwrap_or(0)).sum();
        if (inuse >= 4_096_000 && p.string_table.iter().any(|s| s == "leak_phase"))
            || Instant::now() > deadline
        {
            break (inuse, p.string_table);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(inuse >= 4_096_000, "inuse_space {inuse}");
    assert!(strings.iter().any(|s| s == "leak_phase"), "{strings:?}");
    let out = a.stop(libc::SIGINT);
    check_profile(&out, &file);
    assert!(std::net::TcpStream::connect(&addr).is_err(), "still listening on {addr}");
    svc.terminate();
}

#[test]
fn no_such_process_is_refused() {
    let dir = scratch("nosuch");
    // A pid that was just used, and freed: its process was waited for.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id() as i32;
    gone.wait().unwrap();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    let out = attach_refused(&dir, pid);
    assert_one_line_error(&out, Some(1), &pid.to_string());
    assert!(profiles_in(&dir).is_empty());
}

/// Refused for want of permission: the one line names the process and says why.
fn assert_permission_error(out: &Output, pid: i32) {
    assert_one_line_error(out, Some(1), &pid.to_string());
    let err = text(&out.stderr).to_lowercase();
    assert!(
        ["permission", "not permitted", "not allowed", "user"].iter().any(|w| err.contains(w)),
        "{err}"
    );
}

#[test]
fn another_users_process_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Not root: pid 1 is another user's (root's).
        let dir = scratch("pid1");
        let out = attach_refused(&dir, 1);
        assert_permission_error(&out, 1);
        assert!(profiles_in(&dir).is_empty());
        return;
    }
    // Root may trace anything: run `memprof attach` as nobody against root's service.
    let svc = Service::start(&["2"]);
    let dir = scratch("otheruser");
    let nobody = 65534;
    let chown = |p: &Path| std::os::unix::fs::chown(p, Some(nobody), Some(nobody)).unwrap();
    chown(&dir);
    let cache = dir.join("cache");
    std::fs::create_dir(&cache).unwrap();
    chown(&cache);
    // A copy of memprof that nobody can reach (the build's may sit under a directory only
    // root can enter, as in CI's fresh clone).
    use std::os::unix::fs::PermissionsExt;
    let reachable = std::env::temp_dir().join(format!("memprof-attach-nobody-{}", svc.pid));
    std::fs::create_dir_all(&reachable).unwrap();
    std::fs::set_permissions(&reachable, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = reachable.join("memprof");
    std::fs::copy(MEMPROF, &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    struct Gone(PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _gone = Gone(reachable);
    let mut cmd = Command::new(&exe);
    cmd.current_dir(&dir)
        .env("HOME", &dir)
        .env("XDG_CACHE_HOME", &cache)
        .env_remove("XDG_RUNTIME_DIR")
        .args(["attach", "--interval", "1"])
        .arg(svc.pid.to_string());
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(nobody) != 0
                || libc::setuid(nobody) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => {
            skipped("attach as another user", &format!("cannot run memprof as nobody: {e}"));
            return;
        }
    };
    assert_permission_error(&out, svc.pid);
    assert!(profiles_in(&dir).is_empty());
    svc.terminate();
}

#[test]
fn an_already_traced_process_is_refused() {
    let svc = Service::start(&["2", "--traced"]);
    let tracer = svc.child.id() as i32;
    let status = std::fs::read_to_string(format!("/proc/{}/status", svc.pid)).unwrap();
    assert!(status.contains(&format!("TracerPid:\t{tracer}\n")), "{status}");
    let dir = scratch("traced");
    let out = attach_refused(&dir, svc.pid);
    assert_one_line_error(&out, Some(1), "traced");
    assert!(
        text(&out.stderr).contains(&tracer.to_string()),
        "names the tracer: {}",
        text(&out.stderr)
    );
    assert!(profiles_in(&dir).is_empty());
    // The service and its tracer go on: the phase runs, and both exit 0.
    svc.phase();
    svc.terminate();
}

#[test]
fn a_statically_linked_process_is_refused() {
    let dir = scratch("static");
    let prog = dir.join("service-static");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/service.c");
    let mut args: Vec<std::ffi::OsString> =
        ["-static", "-O2", "-g", "-pthread", "-o"].map(Into::into).to_vec();
    args.extend([prog.clone().into(), src.into()]);
    if crate::programs::compile("cc", &args, None).is_err() {
        skipped(
            "attach to a statically linked program",
            "cc -static failed (no static libc; Debian: apt-get install libc6-dev)",
        );
        return;
    }
    let svc = Service::start_program(&prog, &[], &["2"]);
    let out = attach_refused(&dir, svc.pid);
    assert_one_line_error(&out, Some(1), "statically linked");
    assert!(profiles_in(&dir).is_empty());
    svc.phase();
    svc.terminate();
}

#[test]
fn another_mount_namespace_is_refused() {
    let probe = Command::new("unshare").args(["--mount", "true"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        skipped("attach to another mount namespace", "`unshare --mount` cannot run here");
        return;
    }
    let svc = Service::start_program(&fixture("service"), &["unshare", "--mount"], &["2"]);
    let dir = scratch("mntns");
    let out = attach_refused(&dir, svc.pid);
    assert_one_line_error(&out, Some(1), "namespace");
    assert!(profiles_in(&dir).is_empty());
    svc.phase();
    svc.terminate();
}

/// A process in another PID namespace (`unshare -p -f`, the same mount namespace): its
/// `getpid` is 1, `memprof attach` names it by its pid here, and the profile is exact and
/// says both pids.
#[test]
fn attach_to_another_pid_namespace() {
    let probe = Command::new("unshare").args(["-p", "-f", "true"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        skipped("attach to another PID namespace", "`unshare -p -f` cannot run here");
        return;
    }
    let mut svc = Service::start_program(&fixture("service"), &["unshare", "-p", "-f"], &["2"]);
    assert_eq!(svc.pid, 1, "the service's pid in its namespace");
    // Here it is the child of `unshare`.
    let unshare = svc.child.id();
    let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"));
    svc.pid = children.unwrap().trim().parse().expect("unshare's one child");
    let dir = scratch("pidns");
    let file = dir.join("n.mprof");
    let a = Attach::start(&dir, &["--interval", "1", "-o", file.to_str().unwrap()], svc.pid);
    a.wait_attached(svc.pid);
    svc.phase();
    let out = a.stop(libc::SIGINT);
    let p = check_profile(&out, &file);
    assert_eq!((p.header.pid, p.header.ns_pid), (svc.pid as u32, 1));
    assert_eq!(totals(&p, "leak_phase"), (4_096_000.0, 1_000.0, 4_096_000.0, 1_000.0));
    assert_eq!(totals(&p, "churn_phase"), (5_000_000.0, 5_000.0, 0.0, 0.0));
    svc.terminate();
}
