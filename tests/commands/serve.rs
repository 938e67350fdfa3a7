//! Profiles served over HTTP (`memprof::serve`, `memprof record --serve`), fetched with
//! `go tool pprof` (the independent decoder, and Go's own HTTP client) and checked against
//! what the programs allocate: the in-process example `serve_pprof` against its own
//! in-process totals, and a C program under `record --serve` against its known growth.

use crate::common::{assert_one_line_error, text, MEMPROF};
use crate::programs::{fixture, scratch};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// `go tool pprof -raw SOURCE` (a URL or a file): see [`crate::common::go_pprof_raw`].
fn go_raw(source: &str) -> Option<([i64; 4], String)> {
    crate::common::go_pprof_raw(source.as_ref(), "the go tool pprof checks of the served profiles")
}

/// A GET of `target` on `addr` with a plain socket, with `headers` (each ending in
/// `\r\n`) added to the request: the response head, the status and the body.
fn exchange(addr: &str, target: &str, headers: &str) -> (String, u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {target} HTTP/1.1\r\nHost: {addr}\r\n{headers}\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = text(&all[..end]);
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (head, status, all[end + 4..].to_vec())
}

/// A GET of `target` on the built-in server at `addr`, which closes every connection
/// unasked: the status and the body.
fn get(addr: &str, target: &str) -> (u16, Vec<u8>) {
    let (head, status, body) = exchange(addr, target, "");
    assert!(head.contains("Connection: close"), "{head}");
    (status, body)
}

/// An example serving its profile (`serve_pprof`, `axum_pprof`), exact mode, on a free
/// loopback port: the child, its stdin and stdout, and its address.
struct Example {
    child: Child,
    out: BufReader<ChildStdout>,
    addr: String,
}

impl Example {
    /// `serve_pprof`, once it has allocated what it holds (it says `ready`).
    fn start() -> Example {
        let mut ex = Example::spawn("serve_pprof");
        assert_eq!(ex.line(), "ready");
        ex
    }

    /// The example `name`, once it says where it serves.
    fn spawn(name: &str) -> Example {
        let exe = Path::new(MEMPROF).parent().unwrap().join("examples").join(name);
        assert!(exe.exists(), "{} is built by cargo test", exe.display());
        let mut child = Command::new(exe)
            .args(["127.0.0.1:0", "--interval", "1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut ex = Example { child, out, addr: String::new() };
        let first = ex.line();
        ex.addr = first
            .strip_prefix("serving http://")
            .and_then(|r| r.strip_suffix("/debug/pprof/"))
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        ex
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        l.trim_end().to_owned()
    }

    fn command(&mut self, c: &str) -> String {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{c}").unwrap();
        stdin.flush().unwrap();
        self.line()
    }

    /// The example's own totals, taken in process.
    fn totals(&mut self) -> [i64; 4] {
        let l = self.command("totals");
        let v: Vec<i64> = l
            .strip_prefix("totals ")
            .unwrap_or_else(|| panic!("{l:?}"))
            .split(' ')
            .map(|x| x.parse().unwrap())
            .collect();
        v.try_into().unwrap()
    }

    fn url(&self, target: &str) -> String {
        format!("http://{}{target}", self.addr)
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The example's heap and allocs, fetched by `go tool pprof` over HTTP, hold exactly the
/// totals the example computes in process right after (it allocates nothing sampled in
/// between); a delta over 2 s holds exactly the 2 000 000 bytes of the burst made during
/// it, and the in-use values of its end.
#[test]
fn example_serves_what_it_holds_and_a_delta_of_two_seconds() {
    let mut ex = Example::start();
    let Some((heap, raw)) = go_raw(&ex.url("/debug/pprof/heap")) else { return };
    let own = ex.totals();
    assert_eq!(heap, own, "go tool pprof -raw of /debug/pprof/heap:\n{raw}");
    // 100 × 10 000 bytes kept, 1 000 × 1 000 allocated and freed, and the program's own.
    assert!(heap[3] >= 1_000_000 && heap[1] >= 2_000_000, "{heap:?}");
    assert!(raw.contains("keep_site") && raw.contains("churn_site"), "{raw}");
    assert!(raw.contains("inuse_space/bytes[dflt]"), "heap defaults to inuse_space: {raw}");
    let (allocs, raw) = go_raw(&ex.url("/debug/pprof/allocs")).unwrap();
    assert_eq!(allocs, ex.totals(), "{raw}");
    assert!(raw.contains("alloc_space/bytes[dflt]"), "allocs defaults to alloc_space: {raw}");

    // The delta: the request goes out first (its first profile is taken at once), the
    // burst half a second later.
    let addr = ex.addr.clone();
    let started = Instant::now();
    let fetch = std::thread::spawn(move || get(&addr, "/debug/pprof/allocs?seconds=2"));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ex.command("burst"), "burst done");
    let (status, body) = fetch.join().unwrap();
    let took = started.elapsed();
    assert_eq!(status, 200, "{}", text(&body));
    assert!(took >= Duration::from_secs(2), "a 2 s delta answered after {took:?}");
    let after = ex.totals();
    let dir = scratch("serve-delta");
    let file = dir.join("allocs-delta.pb.gz");
    std::fs::write(&file, &body).unwrap();
    let (delta, raw) = go_raw(file.to_str().unwrap()).unwrap();
    assert_eq!(delta[1], 2_000_000, "alloc_space of the delta is the burst's:\n{raw}");
    assert_eq!(delta[0], 100, "alloc_objects of the delta:\n{raw}");
    assert_eq!([delta[2], delta[3]], [after[2], after[3]], "in use: the end's:\n{raw}");
    assert!(raw.contains("burst_site") && !raw.contains("churn_site"), "{raw}");
    assert!(ex.command("quit").starts_with("stopped: "));
}

/// Paths and queries other than the profiles' get the answers Go's handler gives.
#[test]
fn example_answers_index_errors_and_not_found() {
    let ex = Example::start();
    let (status, body) = get(&ex.addr, "/debug/pprof/");
    assert_eq!(status, 200);
    assert!(text(&body).contains("href=\"heap\""), "{}", text(&body));
    assert_eq!(get(&ex.addr, "/metrics").0, 404);
    assert_eq!(get(&ex.addr, "/debug/pprof/profile").0, 404);
    let (status, body) = get(&ex.addr, "/debug/pprof/heap?seconds=0");
    assert_eq!(status, 400, "{}", text(&body));
    assert!(text(&body).contains("seconds"), "{}", text(&body));
    assert_eq!(get(&ex.addr, "/debug/pprof/heap?debug=1").0, 400);
    let (status, body) = get(&ex.addr, "/debug/pprof/heap?gc=1");
    assert_eq!(status, 200);
    assert_eq!(&body[..2], [0x1f, 0x8b], "gzip");
    let mut s = TcpStream::connect(&ex.addr).unwrap();
    write!(s, "POST /debug/pprof/heap HTTP/1.1\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    assert!(all.starts_with("HTTP/1.1 405 "), "{all}");
}

/// `record --serve` on a program that keeps 1 MB every 300 ms: two fetches a second apart
/// show the growth, in whole megabytes at grow_site; the run ends as without --serve.
#[test]
fn record_serves_a_growing_program() {
    let prog = fixture("phased_growth");
    let dir = scratch("serve-record");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(MEMPROF)
        .args(["record", "--interval", "1", "--serve", &addr, "-o"])
        .arg(dir.join("p.mprof"))
        .arg("--")
        .arg(&prog)
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "1", "the program's first block");
    let grow = |raw: &str| -> i64 {
        // grow_site's inuse_space: the samples whose size label is 1 MB.
        let mut sum = 0;
        let mut last = 0;
        for l in raw.lines() {
            if let Some((values, _)) = l.split_once(':') {
                if let Ok(v) =
                    values.split_whitespace().map(str::parse).collect::<Result<Vec<i64>, _>>()
                {
                    if v.len() == 4 {
                        last = v[3];
                    }
                }
            }
            if l.trim() == "bytes:[1048576]" {
                sum += last;
            }
        }
        sum
    };
    let url = format!("http://{addr}/debug/pprof/heap");
    // The reading thread folds the file in at most ~0.1 s behind the program, later on a
    // loaded machine: the first fetch is taken once it has the first block (within 10 s).
    let since_first_block = Instant::now();
    let (t0, first, t1) = loop {
        let t0 = Instant::now();
        let Some((_, first)) = go_raw(&url) else {
            let _ = child.wait();
            return;
        };
        let t1 = t0.elapsed();
        if grow(&first) >= 1 << 20 || since_first_block.elapsed() > Duration::from_secs(10) {
            break (t0, first, t1);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_secs(1));
    let t2 = t0.elapsed();
    let (_, second) = go_raw(&url).unwrap();
    let t3 = t0.elapsed();
    let (a, b) = (grow(&first), grow(&second));
    assert!(a >= 1 << 20 && a % (1 << 20) == 0, "{a}: {first}");
    assert!(b % (1 << 20) == 0, "{b}: {second}");
    assert!(first.contains("grow_site"), "symbols resolved from the recorded modules: {first}");
    // 1 MB per 300 ms over the time between the fetches (each fetch's moment lies within
    // its call; data at most ~0.1 s old): within one block of the expected growth.
    let grown = ((b - a) >> 20) as f64;
    let (lo, hi) = ((t2 - t1).as_secs_f64() / 0.3, t3.as_secs_f64() / 0.3);
    assert!(
        grown >= (lo - 1.0).floor() && grown <= hi.ceil() + 1.0,
        "grew by {grown} MB between fetches {t1:?}–{t2:?}–{t3:?} apart (expected {lo:.1}–{hi:.1})"
    );
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(rest.trim_end().ends_with("10"), "{rest}");
    assert!(err.contains(&format!("serving http://{addr}/debug/pprof/")), "{err}");
    assert!(err.contains("10.00 MiB") && err.contains("grow_site"), "{err}");
    // The server stopped with the program.
    assert!(TcpStream::connect(&addr).is_err(), "still listening on {addr}");
}

/// A taken port is one line and status 1, and the program does not run.
#[test]
fn record_refuses_a_taken_port_before_running_the_program() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = scratch("serve-taken");
    let out = Command::new(MEMPROF)
        .args(["record", "--serve", &addr, "--"])
        .arg(fixture("phased_growth"))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_one_line_error(&out, Some(1), &format!("address {addr} is in use"));
    assert!(out.stdout.is_empty(), "the program ran: {}", text(&out.stdout));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "no profile written");
    let out = Command::new(MEMPROF)
        .args(["record", "--serve", "localhost", "--", "true"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_one_line_error(&out, Some(1), "invalid address");
}

/// The same handler plugged into an axum router (`examples/axum_pprof.rs`), exact mode:
/// `/debug/pprof/heap` read by `go tool pprof` holds keep_site's 100 × 10 000 bytes, with
/// Go's file name; the index answers and an unknown profile is a 404.
#[test]
fn the_handler_serves_from_an_axum_router() {
    let mut ex = Example::spawn("axum_pprof");
    let addr = ex.addr.clone();
    // hyper keeps a connection open unless asked to close it.
    let get = |target: &str| {
        let (_, status, body) = exchange(&addr, target, "Connection: close\r\n");
        (status, body)
    };
    let (status, body) = get("/debug/pprof/");
    assert_eq!(status, 200, "{}", text(&body));
    assert!(text(&body).contains("heap"), "{}", text(&body));
    assert_eq!(get("/debug/pprof/nothing").0, 404);
    let (status, body) = get("/debug/pprof/heap");
    assert_eq!(status, 200);
    assert_eq!(&body[..2], [0x1f, 0x8b], "a gzip-compressed profile");
    if let Some((sums, raw)) = go_raw(&format!("http://{addr}/debug/pprof/heap")) {
        assert!(raw.contains("keep_site"), "{raw}");
        // In use: keep_site's 1 000 000 bytes, plus whatever the runtime holds.
        assert!(sums[3] >= 1_000_000, "{sums:?}\n{raw}");
    }
    ex.child.stdin.take().unwrap().write_all(b"quit\n").unwrap();
    assert!(ex.child.wait().unwrap().success());
}

/// A free loopback address (`127.0.0.1:PORT`), for a `record --serve`.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A client that sends `start`, then one byte of `b'a'` every `every`, on a connection to
/// `addr`, until a write fails, `stop` is set, or 30 s have passed: the stream (to read
/// the answer from) and the thread.
fn trickle(
    addr: &str,
    start: &'static [u8],
    every: Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (TcpStream, std::thread::JoinHandle<()>) {
    let s = TcpStream::connect(addr).unwrap();
    let mut w = s.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        let begun = Instant::now();
        if w.write_all(start).is_err() {
            return;
        }
        while !stop.load(std::sync::atomic::Ordering::Relaxed)
            && begun.elapsed() < Duration::from_secs(30)
        {
            if w.write_all(b"a").is_err() {
                return;
            }
            std::thread::sleep(every);
        }
    });
    (s, t)
}

/// Everything `s` sends until it ends, fails (a reset after the answer) or is silent for
/// `timeout`.
fn read_all(s: &mut TcpStream, timeout: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n]);
    }
    all
}

/// A client sending its request head a byte every 100 ms does not keep `record --serve`
/// alive after the program: it ends within a moment of the program's end, as without
/// --serve (the server stopped by then).
#[test]
fn record_exits_with_the_program_while_a_client_trickles() {
    let dir = scratch("serve-trickle");
    let addr = free_addr();
    let mut child = Command::new(MEMPROF)
        .args(["record", "--serve", &addr, "-o"])
        .arg(dir.join("p.mprof"))
        .args(["--", "sh", "-c", "echo up; sleep 1; echo end"])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "up");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (_s, t) = trickle(
        &addr,
        b"GET /debug/pprof/heap HTTP/1.1\r\nX-Slow: ",
        Duration::from_millis(100),
        stop.clone(),
    );
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "end");
    let ended = Instant::now();
    let status = child.wait().unwrap();
    let after = ended.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    t.join().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{err}");
    // The summary of a short shell run takes a fraction of a second; the server's stop,
    // milliseconds.
    assert!(after < Duration::from_secs(2), "record ended {after:?} after the program");
    assert!(TcpStream::connect(&addr).is_err(), "still listening on {addr}");
}

/// 130 connections that send nothing do not hold up a request: it is answered at once
/// (the oldest idle ones make room, answered 503).
#[test]
fn a_get_is_answered_beside_130_idle_connections() {
    let ex = Example::start();
    let mut idle: Vec<TcpStream> =
        (0..130).map(|_| TcpStream::connect(&ex.addr).unwrap()).collect();
    let started = Instant::now();
    let (status, body) = get(&ex.addr, "/debug/pprof/");
    let took = started.elapsed();
    assert_eq!(status, 200, "{}", text(&body));
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    let first = read_all(&mut idle[0], Duration::from_secs(5));
    assert!(text(&first).starts_with("HTTP/1.1 503 "), "{:?}", text(&first));
}

/// A request head still arriving, a byte every 200 ms, when its 5 s are up is answered
/// 408: a per-read timeout would wait for it for ever.
#[test]
fn a_head_trickling_past_its_deadline_is_answered_408() {
    let ex = Example::start();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let (mut s, t) = trickle(
        &ex.addr,
        b"GET /debug/pprof/ HTTP/1.1\r\nX-Slow: ",
        Duration::from_millis(200),
        stop.clone(),
    );
    let answer = read_all(&mut s, Duration::from_secs(15));
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    t.join().unwrap();
    assert!(text(&answer).starts_with("HTTP/1.1 408 "), "{:?} after {took:?}", text(&answer));
    let deadline = memprof::serve::HEAD_DEADLINE;
    assert!(took >= deadline && took < deadline + Duration::from_secs(3), "{took:?}");
}

/// Request heads whose lines end with a bare LF are answered like CRLF ones.
#[test]
fn bare_lf_requests_are_answered() {
    let ex = Example::start();
    for request in ["GET /debug/pprof/ HTTP/1.1\nHost: x\n\n", "GET /debug/pprof/ HTTP/1.0\n\n"] {
        let mut s = TcpStream::connect(&ex.addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let answer = text(&read_all(&mut s, Duration::from_secs(10)));
        assert!(answer.starts_with("HTTP/1.1 200 "), "{request:?}: {answer:?}");
        assert!(answer.contains("href=\"heap\""), "{answer}");
    }
    // And a malformed one is refused with a status, not left unanswered.
    let mut s = TcpStream::connect(&ex.addr).unwrap();
    s.write_all(b"GET /debug/pprof/ HTTP/1.1\nHost x\n\n").unwrap();
    let answer = text(&read_all(&mut s, Duration::from_secs(10)));
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer:?}");
}

/// A server on a profile that never changes, in this process, on a free loopback port.
fn constant_server() -> memprof::serve::Running {
    let server = memprof::serve::Server::bind("127.0.0.1:0").unwrap();
    let handler = memprof::serve::Handler::new(|| Ok(memprof::profile::Profile::default()));
    server.spawn(handler).unwrap()
}

/// `Running::stop` returns at once with clients connected: one silent, one trickling its
/// head, one waiting for a delta (answered 503); each sees its connection end, and the
/// port is closed.
#[test]
fn stop_returns_promptly_with_clients_connected() {
    let running = constant_server();
    let addr = running.local_addr().to_string();
    let mut silent = TcpStream::connect(&addr).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (_slow, t) =
        trickle(&addr, b"GET / HTTP/1.1\r\nX: ", Duration::from_millis(100), stop.clone());
    let a = addr.clone();
    let delta = std::thread::spawn(move || get(&a, "/debug/pprof/heap?seconds=30"));
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    running.stop();
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(took < Duration::from_millis(500), "stop took {took:?}");
    let (status, body) = delta.join().unwrap();
    assert_eq!(status, 503, "{}", text(&body));
    let begun = Instant::now();
    assert!(read_all(&mut silent, Duration::from_secs(10)).is_empty());
    assert!(begun.elapsed() < Duration::from_secs(1), "the silent client was not closed");
    t.join().unwrap();
    assert!(TcpStream::connect(&addr).is_err(), "still listening on {addr}");
}

/// Deltas hold at most all the workers but one: beside as many as that, a profile is
/// answered at once, and one more delta is refused with 503 rather than queued.
#[test]
fn deltas_leave_a_worker_for_other_requests() {
    let running = constant_server();
    let addr = running.local_addr().to_string();
    let deltas: Vec<_> = (1..memprof::serve::WORKERS)
        .map(|_| {
            let a = addr.clone();
            std::thread::spawn(move || get(&a, "/debug/pprof/allocs?seconds=3"))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let (status, body) = get(&addr, "/debug/pprof/heap");
    assert_eq!(status, 200, "{}", text(&body));
    assert!(started.elapsed() < Duration::from_secs(1), "answered after {:?}", started.elapsed());
    let (status, body) = get(&addr, "/debug/pprof/heap?seconds=1");
    assert_eq!(status, 503, "{}", text(&body));
    assert!(text(&body).contains("deltas are under way"), "{}", text(&body));
    for d in deltas {
        let (status, body) = d.join().unwrap();
        assert_eq!(status, 200, "{}", text(&body));
    }
    running.stop();
}
