//! The `/debug/pprof/` handler: which endpoint answers what, deltas between two profiles,
//! and the answers' encoding. The server ([`super::server`]) runs it on its workers.

use crate::error::Error;
use crate::profile::Profile;
use crate::report::{self, PprofOptions, View};
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

/// Maps requests to the `/debug/pprof/` endpoints (see the [module documentation](crate::serve)).
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

    /// A handler for the session running in this process ([`crate::session::live_profile`]).
    pub fn in_process() -> Handler {
        Handler::new(crate::session::live_profile)
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
