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
//! HTTP/1.1 server from the standard library (and `poll`). One request per connection
//! (`Connection: close`), GET and HEAD. Nothing listens unless asked, and only on the
//! address given: use a loopback address (`127.0.0.1:6060`) unless the profile may be read
//! from the network (it shows function names, file paths and the command line).
//!
//! One thread owns every socket, non-blocking, and waits in `poll` for whichever is ready,
//! for a worker's answer, or for the next deadline; it never waits on a client, so no
//! client can hold up another, or the server's stop. A client has [`HEAD_DEADLINE`] (5 s)
//! from its connection to send its whole request head, which is answered 408 after that
//! however the bytes trickle in (a timeout per read would be reset by each byte);
//! [`WRITE_DEADLINE`] (30 s) to read the answer; and what it sends after its head (a body)
//! is read and discarded for at most 1 s and 256 KiB once the answer is written, so that
//! closing does not reset the connection under the answer. The head is parsed by
//! [`parse::parse_head`], a pure function of the bytes so far (heads up to 16 KiB, lines
//! ended by CRLF or a bare LF; its rules and refusals: [`parse`]). At most
//! [`MAX_CONNECTIONS`] (64) connections are open: one more, and the oldest still sending
//! its head is answered 503 and closed to make room (when every one is past its head, the
//! new one is), so idle sockets cannot keep a request out.
//!
//! # 4. Workers, deltas, the profiler
//! A profile is built by one of [`WORKERS`] (4) worker threads, started with the server
//! and kept until it stops (answers that need no profile, the index and the errors, are
//! given by the connection thread at once). A delta holds its worker for its N seconds:
//! at most `WORKERS - 1` deltas run at once, and one more is answered 503 at once rather
//! than queued, so that one worker is always there for a plain profile. The workers are
//! started with the server, not one per connection, because a thread's start-up
//! allocations happen before it can mark itself: with a new thread per request, they
//! would be sampled, and in the heap of the very profile served. The connection thread is
//! inside the profiler for its whole life, the workers for theirs but while the handler
//! runs (which takes the in-process profile from outside, and enters itself where it
//! allocates), so the server's own allocations are not sampled; [`Server::spawn`] returns
//! once each thread runs.
//!
//! [`Running::stop`] (or dropping it) returns within a quarter of a second whatever the
//! clients do (`memprof record --serve` ends with its program): the listening socket
//! closes, a delta under way is answered 503 (within 0.15 s), every other connection is
//! shut down. A worker still building a profile is not waited for past 0.1 s: it ends
//! once that answer is built, unsent.

pub mod parse;
mod server;

pub use server::{serve, Running, Server, HEAD_DEADLINE, MAX_CONNECTIONS, WORKERS, WRITE_DEADLINE};

use crate::profile::Profile;
use crate::report::{self, PprofOptions, View};
use crate::Error;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest delta served (`seconds=N`).
pub const MAX_DELTA_SECONDS: u64 = 3600;

/// An HTTP answer: status, content type, body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code (200, 400, 404, 405, 408, 431, 500, 503, 505).
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
    pub(crate) fn text(status: u16, message: impl Into<String>) -> Response {
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
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            505 => "HTTP Version Not Supported",
            _ => "",
        }
    }
}

/// A source of profiles: called once per request (twice for a delta).
type Source = Box<dyn Fn() -> Result<Profile, Error> + Send + Sync>;

/// A request for a profile, as [`Handler::plan`] read it from its target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    view: View,
    /// The delta's duration (`seconds=N`).
    seconds: Option<u64>,
    /// The file name it is saved as.
    name: &'static str,
}

impl Plan {
    /// Whether answering it takes N seconds (a delta).
    pub(crate) fn is_delta(&self) -> bool {
        self.seconds.is_some()
    }
}

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
        match self.plan(target) {
            Ok(plan) => self.run(&plan),
            Err(answer) => answer,
        }
    }

    /// What a GET of `target` asks for: a profile to build ([`Handler::run`]), or an answer
    /// known at once (the index, a 404, a 400), which takes no profile and never blocks.
    pub(crate) fn plan(&self, target: &str) -> Result<Plan, Response> {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let view = match path {
            "/debug/pprof/heap" => View::Live,
            "/debug/pprof/allocs" => View::Alloc,
            "/debug/pprof/" | "/debug/pprof" => return Err(index()),
            _ => return Err(Response::text(404, format!("404 page not found: {path}"))),
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
                        return Err(Response::text(
                            400,
                            format!(
                                "invalid value for \"seconds\" - must be a positive integer \
                                 up to {MAX_DELTA_SECONDS}"
                            ),
                        ))
                    }
                },
                "debug" if value != "0" && !value.is_empty() => {
                    return Err(Response::text(
                        400,
                        "only debug=0 is served: the gzip-compressed protobuf profile (read \
                         it with go tool pprof)",
                    ))
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
        Ok(Plan { view, seconds, name })
    }

    /// The answer to `plan`: the profile (blocking for a delta's N seconds), or 503.
    pub(crate) fn run(&self, plan: &Plan) -> Response {
        let Plan { view, seconds, name } = *plan;
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
    let _busy = crate::engine::busy::Busy::enter();
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
