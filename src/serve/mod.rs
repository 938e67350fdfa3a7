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
//! [`Handler::in_process`] uses [`crate::session::live_profile`] (the session started with a
//! [`Recorder`](crate::session::recorder::Recorder) in this process); `memprof record --serve` gives the
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
//! ended by CRLF or a bare LF; its rules and refusals: `parse`). At most
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

mod handler;
pub(crate) mod parse;
mod server;

pub use handler::{delta, Handler, Response, MAX_DELTA_SECONDS};
pub use server::{serve, Running, Server, HEAD_DEADLINE, MAX_CONNECTIONS, WORKERS, WRITE_DEADLINE};
