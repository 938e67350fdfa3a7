//! The profile of a running program over HTTP, in Go's `net/http/pprof` conventions
//! (feature `serve`): `go tool pprof http://127.0.0.1:6060/debug/pprof/heap` reads it.
//!
//! # 1. Endpoints
//! | Path | Answer |
//! |---|---|
//! | `/debug/pprof/heap` | the profile, default sample type `inuse_space` (what is held now) |
//! | `/debug/pprof/allocs` | the same profile, default sample type `alloc_space` (everything allocated) |
//! | `…?seconds=N` | a delta: the allocations of the next N seconds (see below) |
//! | `/debug/pprof/` | an index page |
//!
//! Both profiles carry Go's four heap sample types (`alloc_objects`, `alloc_space`,
//! `inuse_objects`, `inuse_space`), gzip-compressed ([`crate::report::pprof()`]). With
//! `seconds=N` (1 to 3600) the handler takes a profile, waits N seconds, takes another and
//! answers with the later one whose allocated values are the difference of the two (what was
//! allocated in those N seconds) and whose in-use values are the later one's (what is held
//! at its end): [`delta`]. Go's handler subtracts the in-use values too (it negates the
//! first profile and merges), which makes them the growth of the heap over the N seconds
//! rather than what is held. `gc=1` is accepted and ignored (nothing to collect); `debug=N`
//! with N > 0 (Go's text format) is refused with 400. Any other path is 404; a method
//! other than GET (or HEAD) is 405.
//!
//! # 2. Plugging in
//! [`Handler::respond`] maps a request target (path and query) to a [`Response`] (status,
//! content type, body): any HTTP server can call it from its own handler, on a thread that
//! may block (a delta blocks for its N seconds). Its source of profiles is a function:
//! [`Handler::in_process`] uses [`crate::live_profile`] (the session started with a
//! [`Recorder`](crate::Recorder) in this process); `memprof record --serve` gives the
//! profile read so far from the program's file.
//!
//! # 3. The built-in server
//! [`Server::bind`] then [`Server::spawn`] (or [`serve`] for both, in process): a minimal
//! HTTP/1.1 server on one thread, from the standard library only. One request per
//! connection (`Connection: close`), GET and HEAD, request heads up to 16 KiB, a 5 s read
//! timeout. Requests are answered one after the other, so a delta holds the server for
//! its N seconds. Nothing listens unless asked, and only on the address given: use a
//! loopback address (`127.0.0.1:6060`) unless the profile may be read from the network
//! (it shows function names, file paths and the command line). The thread marks itself
//! as inside the profiler while it reads requests and builds answers, so its own
//! allocations are not sampled. [`Running::stop`] (or dropping it) ends it.

use crate::profile::Profile;
use crate::report::{self, PprofOptions, View};
use crate::Error;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest delta served (`seconds=N`).
pub const MAX_DELTA_SECONDS: u64 = 3600;

/// An HTTP answer: status, content type, body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code (200, 400, 404, 405, 500, 503).
    pub status: u16,
    /// The `Content-Type` header's value.
    pub content_type: &'static str,
    /// The body: a gzip-compressed pprof profile, the index page or a one-line message.
    pub body: Vec<u8>,
    /// For a profile, the file name it would be saved as (Go's `Content-Disposition`):
    /// `heap`, `allocs`, `heap-delta`, `allocs-delta`.
    pub filename: Option<&'static str>,
}

impl Response {
    fn text(status: u16, message: impl Into<String>) -> Response {
        let mut body = message.into().into_bytes();
        body.push(b'\n');
        Response { status, content_type: "text/plain; charset=utf-8", body, filename: None }
    }

    /// The reason phrase of the status.
    pub fn reason(&self) -> &'static str {
        match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "",
        }
    }
}

/// A source of profiles: called once per request (twice for a delta).
type Source = Box<dyn Fn() -> Result<Profile, Error> + Send + Sync>;

/// Maps requests to the `/debug/pprof/` endpoints (see the [module documentation](self)).
pub struct Handler {
    source: Source,
    cancel: Arc<AtomicBool>,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler").field("cancelled", &self.cancel.load(Ordering::Relaxed)).finish()
    }
}

impl Handler {
    /// A handler that answers from the profiles `source` returns (each call: the profile
    /// as of now).
    pub fn new(source: impl Fn() -> Result<Profile, Error> + Send + Sync + 'static) -> Handler {
        Handler { source: Box::new(source), cancel: Arc::new(AtomicBool::new(false)) }
    }

    /// A handler for the session running in this process ([`crate::live_profile`]).
    pub fn in_process() -> Handler {
        Handler::new(crate::live_profile)
    }

    /// Cuts short the deltas under way and to come (they answer 503): for a server that
    /// stops, or whose program has ended.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Release);
    }

    /// The answer to a GET of `target`, a request target in origin form: a path and an
    /// optional query (`/debug/pprof/heap?seconds=10`).
    pub fn respond(&self, target: &str) -> Response {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let view = match path {
            "/debug/pprof/heap" => View::Live,
            "/debug/pprof/allocs" => View::Alloc,
            "/debug/pprof/" | "/debug/pprof" => return index(),
            _ => return Response::text(404, format!("404 page not found: {path}")),
        };
        let mut seconds = None;
        for (key, value) in query.split('&').filter(|p| !p.is_empty()).map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k, v)
        }) {
            match key {
                "seconds" => match value.parse::<u64>() {
                    Ok(n) if (1..=MAX_DELTA_SECONDS).contains(&n) => seconds = Some(n),
                    _ => {
                        return Response::text(
                            400,
                            format!(
                                "invalid value for \"seconds\" - must be a positive integer \
                                 up to {MAX_DELTA_SECONDS}"
                            ),
                        )
                    }
                },
                "debug" if value != "0" && !value.is_empty() => {
                    return Response::text(
                        400,
                        "only debug=0 is served: the gzip-compressed protobuf profile (read \
                         it with go tool pprof)",
                    )
                }
                // `gc=1` asks Go to collect first: nothing to do here.
                _ => {}
            }
        }
        let name = match (view, seconds) {
            (View::Live, None) => "heap",
            (View::Live, Some(_)) => "heap-delta",
            (_, None) => "allocs",
            (_, Some(_)) => "allocs-delta",
        };
        let result = match seconds {
            None => (self.source)().and_then(|p| encode(&p, view, None)).map(Some),
            Some(n) => self
                .delta_of(n)
                .and_then(|later| later.map(|p| encode(&p, view, Some(n))).transpose()),
        };
        match result {
            Ok(Some(body)) => Response {
                status: 200,
                content_type: "application/octet-stream",
                body,
                filename: Some(name),
            },
            Ok(None) => Response::text(
                503,
                "the delta was cut short: the profiled program ended, or the server stopped",
            ),
            Err(e) => Response::text(503, format!("no profile: {e}")),
        }
    }

    /// The delta over `n` seconds from now; `None` when cancelled first.
    fn delta_of(&self, n: u64) -> Result<Option<Profile>, Error> {
        let earlier = (self.source)()?;
        let end = Instant::now() + Duration::from_secs(n);
        loop {
            if self.cancel.load(Ordering::Acquire) {
                return Ok(None);
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        let later = (self.source)()?;
        if later.header.start_unix_ns != earlier.header.start_unix_ns
            || later.header.pid != earlier.header.pid
        {
            return Err(Error::Other("the profiled session changed during the delta".into()));
        }
        Ok(Some(delta(&earlier, later)))
    }
}

/// `later` with its allocated totals reduced by `earlier`'s: what was allocated between
/// the two (same session: the same stack ids); its in-use totals stay `later`'s.
pub fn delta(earlier: &Profile, mut later: Profile) -> Profile {
    later.allocated.retain(|pair, t| {
        if let Some(e) = earlier.allocated.get(pair) {
            t.samples = t.samples.saturating_sub(e.samples);
            t.k = t.k.saturating_sub(e.k);
        }
        t.samples != 0 || t.k != 0
    });
    later.counts.samples = later.counts.samples.saturating_sub(earlier.counts.samples);
    later.counts.frees = later.counts.frees.saturating_sub(earlier.counts.frees);
    later.counts.moves = later.counts.moves.saturating_sub(earlier.counts.moves);
    later
}

/// The gzip-compressed pprof profile of `p` with `view` as its default sample type,
/// stamped with the time of now (and, for a delta of `seconds`, its duration).
fn encode(p: &Profile, view: View, seconds: Option<u64>) -> Result<Vec<u8>, Error> {
    use pprof::protos::Message;
    // The encoding's allocations are the profiler's own.
    let _busy = crate::engine::sampler::Busy::enter();
    let mut out = report::pprof(p, &PprofOptions { default_view: view, ..Default::default() });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let comment = match seconds {
        Some(n) => {
            out.time_nanos = now - n as i64 * 1_000_000_000;
            out.duration_nanos = n as i64 * 1_000_000_000;
            format!(
                "delta: alloc_* values are the allocations of the {n} s from time_nanos; inuse_* \
                 values are what was held at its end"
            )
        }
        None => "live profile of a running program, taken over HTTP".to_owned(),
    };
    out.comment.push(out.string_table.len() as i64);
    out.string_table.push(comment);
    let bytes = out.encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let io = |e| Error::io("compressing the pprof profile", e);
    gz.write_all(&bytes).map_err(io)?;
    gz.finish().map_err(io)
}

fn index() -> Response {
    let body = "<html><head><title>/debug/pprof/</title></head><body>\n\
        <p>/debug/pprof/ (memprof)</p>\n\
        <p>Profiles (gzip-compressed protobuf; read them with <code>go tool pprof</code>):</p>\n\
        <ul>\n\
        <li><a href=\"heap\">heap</a>: the sampled heap, default sample type inuse_space \
        (what is held now).</li>\n\
        <li><a href=\"allocs\">allocs</a>: the same profile, default sample type alloc_space \
        (everything allocated since the start).</li>\n\
        </ul>\n\
        <p>Add <code>?seconds=N</code> for the allocations of the next N seconds only.</p>\n\
        <p>Example: <code>go tool pprof http://HOST:PORT/debug/pprof/heap</code></p>\n\
        </body></html>\n";
    Response {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body: body.as_bytes().to_vec(),
        filename: None,
    }
}

/// A bound listening socket, not yet served.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
}

impl Server {
    /// Listens on `addr` (`HOST:PORT`; port 0 picks a free port: see
    /// [`Server::local_addr`]). The errors are one line each: `address 127.0.0.1:6060 is
    /// in use`, a malformed address, an address not of this machine, a port that needs
    /// privileges.
    pub fn bind(addr: &str) -> Result<Server, Error> {
        let bad = || {
            Error::Other(format!(
                "invalid address {addr:?}: expected HOST:PORT, e.g. 127.0.0.1:6060"
            ))
        };
        let addrs: Vec<SocketAddr> = addr.to_socket_addrs().map_err(|_| bad())?.collect();
        let first = *addrs.first().ok_or_else(bad)?;
        let listener = TcpListener::bind(&addrs[..]).map_err(|e| {
            use std::io::ErrorKind;
            Error::Other(match e.kind() {
                ErrorKind::AddrInUse => format!("address {addr} is in use"),
                ErrorKind::AddrNotAvailable => {
                    format!("address {addr} is not an address of this machine")
                }
                ErrorKind::PermissionDenied => format!(
                    "cannot listen on {addr}: permission denied (ports below 1024 need \
                     privileges)"
                ),
                _ => format!("cannot listen on {addr}: {e}"),
            })
        })?;
        let addr = listener.local_addr().unwrap_or(first);
        Ok(Server { listener, addr })
    }

    /// The address listened on (with the port chosen when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `handler` from a thread of its own, until [`Running::stop`].
    pub fn spawn(self, handler: Handler) -> Result<Running, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let (flag, h, listener) = (stop.clone(), handler.clone(), self.listener);
        let thread = std::thread::Builder::new()
            .name("memprof-serve".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    if let Ok(stream) = conn {
                        answer(stream, &h);
                    }
                }
            })
            .map_err(|e| Error::io("cannot start the HTTP server's thread", e))?;
        Ok(Running { addr: self.addr, stop, handler, thread: Some(thread) })
    }
}

/// Serves the session running in this process ([`Handler::in_process`]) on `addr`, e.g.
/// `127.0.0.1:6060`, from a thread of its own.
pub fn serve(addr: &str) -> Result<Running, Error> {
    Server::bind(addr)?.spawn(Handler::in_process())
}

/// A server running on its thread; stopped by [`Running::stop`] or when dropped.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handler: Arc<Handler>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server: a delta under way is answered with 503, the request being
    /// answered is finished, the thread ends.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::Release);
        self.handler.cancel();
        // Wake the thread from `accept`: connect to it (on loopback when it listens on
        // every address).
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok() {
            let _ = thread.join();
        }
        // Otherwise the thread is left blocked in `accept` (detached).
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Longest request head read.
const MAX_HEAD: usize = 16 << 10;

/// Reads one request from `stream` and answers it; I/O errors end the connection.
fn answer(mut stream: TcpStream, handler: &Handler) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let head = {
        let _busy = crate::engine::sampler::Busy::enter();
        read_head(&mut stream)
    };
    let (head_only, response) = match head {
        Ok(Some(line)) => {
            let mut parts = line.split(' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(method), Some(target), Some(v)) if v.starts_with("HTTP/1.") => match method {
                    "GET" | "HEAD" => (method == "HEAD", handler.respond(target)),
                    _ => (false, Response::text(405, "only GET is served")),
                },
                _ => (false, Response::text(400, "malformed request line")),
            }
        }
        Ok(None) => (false, Response::text(400, "request head too long or cut")),
        Err(_) => return,
    };
    let _busy = crate::engine::sampler::Busy::enter();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nX-Content-Type-Options: \
         nosniff\r\nConnection: close\r\n",
        response.status,
        response.reason(),
        response.content_type,
        response.body.len()
    );
    if response.status == 405 {
        head.push_str("Allow: GET, HEAD\r\n");
    }
    if let Some(name) = &response.filename {
        head.push_str(&format!("Content-Disposition: attachment; filename=\"{name}\"\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    if !head_only {
        let _ = stream.write_all(&response.body);
    }
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // Let the client read the answer before the socket closes: drain what it still sends.
    let mut sink = [0u8; 512];
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

/// The request line of the head read from `stream`; `None` when the head is longer than
/// [`MAX_HEAD`] or the connection ends first.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]);
            return Ok(head.lines().next().map(str::to_owned));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
