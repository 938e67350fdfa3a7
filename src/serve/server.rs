//! The built-in server (§3 and §4 of the [module documentation](super)): one thread that
//! owns every socket and never blocks but in `poll`, and a fixed pool of workers that
//! build the answers.

use super::handler::{Handler, Plan, Response};
use super::parse::{parse_head, Parsed, MAX_HEAD};
use crate::engine::busy::Busy;
use crate::error::Error;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most connections open at once; one more, and the oldest still sending its head is
/// answered 503 and closed (or, when none is, the new one).
pub const MAX_CONNECTIONS: usize = 64;
/// The workers that build answers; deltas may hold all of them but one.
pub const WORKERS: usize = 4;
/// The time a client has to send its whole request head, from its connection.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// The time a client has to read the whole answer.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(30);
/// The longest spent reading (and discarding) what the client still sends after the
/// answer (a request body), so that it reads the answer before the socket closes.
const DRAIN_DEADLINE: Duration = Duration::from_secs(1);
/// The most bytes read (and discarded) after the answer.
const DRAIN_LIMIT: usize = 256 << 10;
/// How long accepting pauses when `accept` fails for want of resources (descriptors).
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

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

    /// Serves `handler` until [`Running::stop`]: starts the connection thread and the
    /// [`WORKERS`] workers, and returns once each runs (so that their start-up is over
    /// before any request is served).
    pub fn spawn(self, handler: Handler) -> Result<Running, Error> {
        let io = |what: &'static str| move |e| Error::io(what, e);
        self.listener.set_nonblocking(true).map_err(io("cannot set up the HTTP server"))?;
        let (wake_tx, wake_rx) = UnixStream::pair().map_err(io("cannot set up the HTTP server"))?;
        wake_tx.set_nonblocking(true).map_err(io("cannot set up the HTTP server"))?;
        wake_rx.set_nonblocking(true).map_err(io("cannot set up the HTTP server"))?;
        let waker = Arc::new(wake_tx);
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<()>(WORKERS + 1);
        let mut workers = Vec::with_capacity(WORKERS);
        for i in 0..WORKERS {
            let (h, jobs, done, waker, ready) =
                (handler.clone(), job_rx.clone(), done_tx.clone(), waker.clone(), ready_tx.clone());
            let w = std::thread::Builder::new()
                .name(format!("memprof-serve-{i}"))
                .spawn(move || worker(&h, &jobs, &done, &waker, ready))
                .map_err(io("cannot start the HTTP server's threads"))?;
            workers.push(w);
        }
        drop(done_tx);
        let conns = Connections {
            listener: self.listener,
            wake: wake_rx,
            stop: stop.clone(),
            handler: handler.clone(),
            jobs: job_tx,
            done: done_rx,
            conns: Vec::new(),
            next_id: 0,
            deltas: 0,
            accept_paused_until: None,
        };
        let thread = std::thread::Builder::new()
            .name("memprof-serve".into())
            .spawn(move || conns.run(ready_tx))
            .map_err(io("cannot start the HTTP server's threads"))?;
        for _ in 0..=WORKERS {
            if ready_rx.recv().is_err() {
                return Err(Error::Other("the HTTP server's threads did not start".into()));
            }
        }
        Ok(Running { addr: self.addr, stop, handler, waker, thread: Some(thread), workers })
    }
}

/// Serves the session running in this process ([`Handler::in_process`]) on `addr`, e.g.
/// `127.0.0.1:6060`, from threads of its own.
pub fn serve(addr: &str) -> Result<Running, Error> {
    Server::bind(addr)?.spawn(Handler::in_process())
}

/// A server running on its threads; stopped by [`Running::stop`] or when dropped.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handler: Arc<Handler>,
    waker: Arc<UnixStream>,
    thread: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Running {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server within a quarter of a second, whatever its clients do: it stops
    /// listening, a delta under way is answered with 503, every other connection is shut
    /// down. A worker still building a profile is not waited for past 0.1 s: it finishes
    /// that answer (unsent), and ends.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::Release);
        self.handler.cancel();
        wake(&self.waker);
        // The connection thread blocks only in `poll`, which the wake-up ends.
        let _ = thread.join();
        // The workers see their queue closed once they are idle; a delta ends within
        // 50 ms of the cancel. A profile being built is not waited for past 0.1 s.
        let until = Instant::now() + Duration::from_millis(100);
        while Instant::now() < until && !self.workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(2));
        }
        for w in self.workers.drain(..) {
            if w.is_finished() {
                let _ = w.join();
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Wakes the connection thread from `poll` (a byte on its wake-up socket; a full socket
/// means a wake-up is pending already).
fn wake(waker: &UnixStream) {
    let _ = (&*waker).write(&[1]);
}

/// A request for a worker: build the answer to `plan` for connection `id`.
struct Job {
    id: u64,
    plan: Plan,
}

/// A worker's answer for connection `id`.
struct Done {
    id: u64,
    response: Response,
}

/// A worker: builds the answers to the jobs it is given until their queue closes. It is
/// inside the profiler for its whole life but while the handler runs (which needs to be
/// outside to take the in-process profile, and enters where it allocates).
fn worker(
    handler: &Handler,
    jobs: &Mutex<Receiver<Job>>,
    done: &Sender<Done>,
    waker: &UnixStream,
    ready: mpsc::SyncSender<()>,
) {
    let mut busy = Busy::enter();
    let _ = ready.send(());
    drop(ready);
    loop {
        let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(Job { id, plan }) = job else { return };
        drop(busy.take());
        let response =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.run(&plan)));
        busy = Busy::enter();
        let response = response
            .unwrap_or_else(|_| Response::text(500, "building the profile failed (a panic)"));
        if done.send(Done { id, response }).is_err() {
            return;
        }
        wake(waker);
    }
}

/// Where a connection is.
enum Phase {
    /// Reading the request head (the bytes so far); deadline: [`HEAD_DEADLINE`] after
    /// the connection.
    Head(Vec<u8>),
    /// A worker builds the answer; no deadline (a delta takes its N seconds).
    Waiting { delta: bool, head_only: bool },
    /// Writing the answer (the bytes, the number written); deadline: [`WRITE_DEADLINE`].
    Writing(Vec<u8>, usize),
    /// Reading and discarding what the client still sends (the number of bytes read);
    /// deadline: [`DRAIN_DEADLINE`].
    Draining(usize),
    /// Done: removed at the end of the round.
    Closed,
}

struct Conn {
    id: u64,
    stream: TcpStream,
    accepted: Instant,
    deadline: Option<Instant>,
    phase: Phase,
}

/// The connection thread's state: every socket, and the queues to and from the workers.
struct Connections {
    listener: TcpListener,
    wake: UnixStream,
    stop: Arc<AtomicBool>,
    handler: Arc<Handler>,
    jobs: Sender<Job>,
    done: Receiver<Done>,
    conns: Vec<Conn>,
    next_id: u64,
    /// The deltas under way (each holds a worker).
    deltas: usize,
    /// Set when `accept` failed for want of descriptors: it is retried after a pause
    /// instead of at once (the listener stays readable).
    accept_paused_until: Option<Instant>,
}

fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd { fd, events, revents: 0 }
}

impl Connections {
    /// The connection thread: until stopped, waits in `poll` for its sockets, a worker's
    /// answer or the next deadline, and moves each connection on. Inside the profiler for
    /// its whole life: everything it allocates is the server's own.
    fn run(mut self, ready: mpsc::SyncSender<()>) {
        let _busy = Busy::enter();
        let _ = ready.send(());
        drop(ready);
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(MAX_CONNECTIONS + 2);
        while !self.stop.load(Ordering::Acquire) {
            let now = Instant::now();
            self.collect_answers(now);
            self.expire(now);
            self.conns.retain(|c| !matches!(c.phase, Phase::Closed));
            fds.clear();
            fds.push(pollfd(self.wake.as_raw_fd(), libc::POLLIN));
            let paused = self.accept_paused_until.is_some_and(|t| t > now);
            let listen_fd = if paused { -1 } else { self.listener.as_raw_fd() };
            fds.push(pollfd(listen_fd, libc::POLLIN));
            for c in &self.conns {
                // A negative descriptor is ignored by `poll`: a connection whose answer a
                // worker builds is not watched (a hang-up would wake the loop in a spin).
                fds.push(match c.phase {
                    Phase::Head(_) | Phase::Draining(_) => {
                        pollfd(c.stream.as_raw_fd(), libc::POLLIN)
                    }
                    Phase::Writing(..) => pollfd(c.stream.as_raw_fd(), libc::POLLOUT),
                    Phase::Waiting { .. } | Phase::Closed => pollfd(-1, 0),
                });
            }
            let next = self
                .conns
                .iter()
                .filter_map(|c| c.deadline)
                .chain(self.accept_paused_until.filter(|_| paused))
                .min();
            // Rounded up, so that a deadline is never woken for a moment early, again and
            // again; a second at most (the stop flag is also looked at then).
            let timeout = next.map_or(1000, |t| {
                let left = t.saturating_duration_since(now);
                left.as_millis().min(1000) as i32 + i32::from(left.subsec_nanos() % 1_000_000 != 0)
            });
            // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfd structures
            // that `poll` may write (their `revents`) for the length of the call, and
            // nothing else touches it meanwhile.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
                    // Out of memory for the poll set: try again shortly rather than spin.
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            if fds[0].revents != 0 {
                let mut sink = [0u8; 64];
                while matches!((&self.wake).read(&mut sink), Ok(n) if n > 0) {}
            }
            // The connections first, as they were when `poll` was called (accepting may
            // close one of them to make room).
            for (i, f) in fds[2..].iter().enumerate() {
                if f.revents != 0 {
                    self.progress(i);
                }
            }
            if fds[1].revents != 0 {
                self.accept_all();
            }
        }
        // Stopped. The deltas under way were cancelled and end within 50 ms: their 503
        // is sent (a client waiting for one learns why), for 150 ms at most; then every
        // client sees its connection end.
        let until = Instant::now() + Duration::from_millis(150);
        while self.conns.iter().any(|c| matches!(c.phase, Phase::Waiting { .. })) {
            let left = until.saturating_duration_since(Instant::now());
            let Ok(Done { id, response }) = self.done.recv_timeout(left) else { break };
            if let Some(i) = self.conns.iter().position(|c| c.id == id) {
                if let Phase::Waiting { head_only, .. } = self.conns[i].phase {
                    self.answer(i, &response, head_only, Instant::now());
                }
            }
        }
        for c in &self.conns {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }

    /// The workers' answers, each to the connection it is for.
    fn collect_answers(&mut self, now: Instant) {
        while let Ok(Done { id, response }) = self.done.try_recv() {
            let Some(i) = self.conns.iter().position(|c| c.id == id) else { continue };
            if let Phase::Waiting { delta, head_only } = self.conns[i].phase {
                if delta {
                    self.deltas -= 1;
                }
                self.answer(i, &response, head_only, now);
            }
        }
    }

    /// Connections past their deadline: a head not received in time is answered 408; a
    /// connection still being written or drained is closed.
    fn expire(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            if c.deadline.is_none_or(|d| d > now) {
                continue;
            }
            match c.phase {
                Phase::Head(_) => {
                    let message = format!(
                        "the request head was not received within {} s",
                        HEAD_DEADLINE.as_secs()
                    );
                    self.answer(i, &Response::text(408, message), false, now);
                }
                _ => c.phase = Phase::Closed,
            }
        }
    }

    /// Moves connection `i` on after `poll` said it is ready.
    fn progress(&mut self, i: usize) {
        let now = Instant::now();
        match self.conns[i].phase {
            Phase::Head(_) => self.read_head(i, now),
            Phase::Writing(..) => self.write(i, now),
            Phase::Draining(_) => self.drain(i),
            Phase::Waiting { .. } | Phase::Closed => {}
        }
    }

    /// Reads what connection `i` sent of its head, and acts on the verdict.
    fn read_head(&mut self, i: usize, now: Instant) {
        let mut chunk = [0u8; 4096];
        loop {
            let c = &mut self.conns[i];
            let Phase::Head(buf) = &mut c.phase else { return };
            match c.stream.read(&mut chunk) {
                Ok(0) => {
                    // The client has ended its side: it can still read an answer if it
                    // sent anything.
                    if buf.is_empty() {
                        c.phase = Phase::Closed;
                    } else {
                        let cut = Response::text(400, "the request head was cut short");
                        self.answer(i, &cut, false, now);
                    }
                    return;
                }
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    // Only a line's end, a control character or the length limit can
                    // change the verdict: a trickle of other bytes is not parsed again.
                    let new = &chunk[..n];
                    if !new.iter().any(|&b| b < 0x20 || b == 0x7f) && buf.len() <= MAX_HEAD {
                        continue;
                    }
                    match parse_head(buf) {
                        Parsed::Partial => continue,
                        Parsed::Refused(r) => {
                            let r = Response::text(r.status, r.message);
                            self.answer(i, &r, false, now);
                        }
                        Parsed::Complete(head) => {
                            let (method, target) = (head.method.to_owned(), head.target.to_owned());
                            self.dispatch(i, &method, &target, now);
                        }
                    }
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    c.phase = Phase::Closed;
                    return;
                }
            }
        }
    }

    /// Connection `i` sent a complete head: answered at once, or given to a worker.
    fn dispatch(&mut self, i: usize, method: &str, target: &str, now: Instant) {
        let head_only = match method {
            "GET" => false,
            "HEAD" => true,
            _ => return self.answer(i, &Response::text(405, "only GET is served"), false, now),
        };
        let plan = match self.handler.plan(target) {
            Ok(plan) => plan,
            Err(at_once) => return self.answer(i, &at_once, head_only, now),
        };
        let delta = plan.is_delta();
        if delta && self.deltas >= WORKERS - 1 {
            let busy = Response::text(
                503,
                format!(
                    "{} deltas are under way, the most served at once: try again when one ends",
                    WORKERS - 1
                ),
            );
            return self.answer(i, &busy, head_only, now);
        }
        let id = self.conns[i].id;
        if self.jobs.send(Job { id, plan }).is_err() {
            return self.answer(i, &Response::text(503, "the server is stopping"), head_only, now);
        }
        if delta {
            self.deltas += 1;
        }
        let c = &mut self.conns[i];
        c.phase = Phase::Waiting { delta, head_only };
        c.deadline = None;
    }

    /// Starts writing `response` on connection `i`.
    fn answer(&mut self, i: usize, response: &Response, head_only: bool, now: Instant) {
        let c = &mut self.conns[i];
        c.phase = Phase::Writing(http_bytes(response, head_only), 0);
        c.deadline = Some(now + WRITE_DEADLINE);
        // Most answers fit in the socket's buffer: written now, without another round.
        self.write(i, now);
    }

    /// Writes what the socket takes of connection `i`'s answer; once it is all written,
    /// ends the sending side and drains.
    fn write(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        let Phase::Writing(out, at) = &mut c.phase else { return };
        while *at < out.len() {
            match c.stream.write(&out[*at..]) {
                Ok(0) => {
                    c.phase = Phase::Closed;
                    return;
                }
                Ok(n) => *at += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    c.phase = Phase::Closed;
                    return;
                }
            }
        }
        let _ = c.stream.shutdown(Shutdown::Write);
        // Closing with unread bytes would reset the connection, and the client could
        // lose the answer: what it still sends is read first, for a bounded time.
        c.phase = Phase::Draining(0);
        c.deadline = Some(now + DRAIN_DEADLINE);
        self.drain(i);
    }

    /// Reads and discards what connection `i` still sends; closes it at its end or past
    /// [`DRAIN_LIMIT`] bytes.
    fn drain(&mut self, i: usize) {
        let c = &mut self.conns[i];
        let Phase::Draining(read) = &mut c.phase else { return };
        let mut sink = [0u8; 4096];
        loop {
            match c.stream.read(&mut sink) {
                Ok(n) if n > 0 && *read + n < DRAIN_LIMIT => *read += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                _ => {
                    c.phase = Phase::Closed;
                    return;
                }
            }
        }
    }

    /// Accepts every pending connection. At [`MAX_CONNECTIONS`], the oldest connection
    /// still sending its head makes room (it is answered 503 and closed); when every
    /// connection is past its head, the new one is.
    fn accept_all(&mut self) {
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue
                }
                Err(_) => {
                    // Out of descriptors or memory: the pending connections wait.
                    self.accept_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                    return;
                }
            };
            self.accept_paused_until = None;
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            let open = self.conns.iter().filter(|c| !matches!(c.phase, Phase::Closed)).count();
            if open >= MAX_CONNECTIONS {
                let oldest = (self.conns.iter().enumerate())
                    .filter(|(_, c)| matches!(c.phase, Phase::Head(_)))
                    .min_by_key(|(_, c)| c.accepted)
                    .map(|(i, _)| i);
                match oldest {
                    Some(i) => {
                        let c = self.conns.remove(i);
                        refuse_full(&c.stream);
                    }
                    None => {
                        refuse_full(&stream);
                        continue;
                    }
                }
            }
            let now = Instant::now();
            self.next_id += 1;
            self.conns.push(Conn {
                id: self.next_id,
                stream,
                accepted: now,
                deadline: Some(now + HEAD_DEADLINE),
                phase: Phase::Head(Vec::new()),
            });
        }
    }
}

/// Tells a connection closed to make room why, as far as its socket takes it at once.
fn refuse_full(stream: &TcpStream) {
    let full = Response::text(503, "too many connections: try again");
    let _ = (&*stream).write(&http_bytes(&full, false));
    let _ = stream.shutdown(Shutdown::Both);
}

/// `response` as HTTP/1.1 bytes: the head, and the body unless `head_only` (HEAD).
fn http_bytes(response: &Response, head_only: bool) -> Vec<u8> {
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
    let mut out = head.into_bytes();
    if !head_only {
        out.extend_from_slice(&response.body);
    }
    out
}
