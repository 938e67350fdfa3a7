//! Sessions and the [`Tracker`] callbacks.
//!
//! # 1. The contract
//! [`start`] begins a session with a [`Config`] and a [`Tracker`]; from then on the sampler
//! picks allocations (see [`crate::sampler`]) and queues an event for each sampled
//! allocation, each free of a sampled block and each reallocation that keeps its sample.
//! The tracker's callbacks run only at safe points — [`poll`], [`Session::stop`] and the
//! optional drain thread — never inside the allocator. They may allocate (their own
//! allocations are not sampled) and may panic (the panic is caught, counted and the event
//! dropped). The value [`Tracker::alloc`] returns is the sample's token: it is handed back
//! to [`Tracker::realloc`] and, exactly once, to [`Tracker::dealloc`] when the block dies.
//! Returning `None` stops tracking that block.
//!
//! # 2. One session at a time
//! Sampling state is process-global (the global allocator is), so a second [`start`] while
//! a session runs is an error. Stopping disables sampling, waits briefly for producers that
//! are mid-push, drains the queue, forgets the live table and hands the tracker back.
//!
//! # 3. Keeping an output current
//! After every drain at a safe point the tracker's [`Tracker::after_poll`] runs (with
//! `forced == false`), so a tracker that streams somewhere can flush on its own schedule.
//! [`sync`] drains and calls it with `forced == true`, waiting for a concurrent drain to
//! finish: the preload library calls it before `dlclose`, while the library is still mapped.
//!
//! # 4. Backpressure
//! With [`Config::backpressure`] a sampling thread that finds the queue full waits (at most
//! [`BACKPRESSURE_WAIT_MS`](crate::config::BACKPRESSURE_WAIT_MS), sleeping 50 µs at a time)
//! for the drain thread instead of dropping the event, so the exact mode stays lossless
//! under load. It only waits while a drain thread runs, holds no lock while waiting, and the
//! drain thread itself never waits (its allocations are not sampled).
//!
//! # 5. fork
//! [`fork_prepare`], [`fork_parent`] and [`fork_child`] are `pthread_atfork` handlers: the
//! first takes the session's locks (control, driver, live table) so that no other thread
//! holds one at the moment of the fork, the parent releases them, and the child releases
//! them and abandons the session: the child has no drain thread, its queue may hold slots
//! that threads which do not exist in the child had claimed, and its tracker shares its
//! output with the parent. The tracker is leaked (never dropped, so it never writes), the
//! queue is replaced at the next start, and sampling stops. The child may then [`start`] a
//! session of its own.

use crate::config::{Config, Unwinder};
use crate::error::Error;
use crate::padded::Padded;
use crate::postponed::{Event, EventKind, Queue};
use crate::profile::GcCycle;
use crate::sampler::{self, Busy};
use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A sampled call stack: return addresses, innermost first.
#[derive(Clone, Copy, Debug)]
pub struct Callstack<'a> {
    frames: &'a [usize],
    truncated: bool,
}

impl<'a> Callstack<'a> {
    /// Return addresses, innermost (inside the profiler) first.
    pub fn frames(&self) -> &'a [usize] {
        self.frames
    }

    /// True when the real stack was deeper than the configured depth.
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

/// A sampled allocation, as seen by [`Tracker::alloc`].
#[derive(Clone, Copy, Debug)]
pub struct Allocation<'a> {
    /// Sample id, unique within the session.
    pub id: u64,
    /// Requested size in bytes.
    pub size: usize,
    /// Number of sample points inside the block (≥ 1).
    pub k: u64,
    /// `k × interval`: the bytes this sample stands for (unbiased).
    pub estimated_bytes: f64,
    /// Thread number within the session (1-based, in order of first allocation).
    pub thread: u32,
    /// Nanoseconds since the session started.
    pub time_ns: u64,
    /// Address of the block.
    pub addr: usize,
    /// Where it was allocated.
    pub callstack: Callstack<'a>,
}

/// A sampled block that was reallocated and kept its sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reallocation {
    /// Sample id.
    pub id: u64,
    /// Thread number within the session.
    pub thread: u32,
    /// Nanoseconds since the session started.
    pub time_ns: u64,
    /// New address.
    pub new_addr: usize,
    /// New size in bytes.
    pub new_size: usize,
}

/// A sampled block that was freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deallocation {
    /// Sample id.
    pub id: u64,
    /// Thread number within the session.
    pub thread: u32,
    /// Nanoseconds since the session started.
    pub time_ns: u64,
}

/// Facts about a session, given to [`Tracker::started`].
#[derive(Clone, Debug, PartialEq)]
pub struct SessionInfo {
    /// Mean sampling interval in bytes (1 = exact).
    pub interval: f64,
    /// Maximum frames per call stack.
    pub depth: usize,
    /// The unwinder in use.
    pub unwinder: Unwinder,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
}

/// Counters of a session: what was seen and what had to be dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Alloc events delivered to the tracker.
    pub samples: u64,
    /// Dealloc events delivered.
    pub frees: u64,
    /// Events that did not fit in the queue.
    pub lost_events: u64,
    /// Sampled blocks that could not be entered in the live table.
    pub untracked: u64,
    /// Callbacks that panicked (caught).
    pub callback_panics: u64,
}

/// User callbacks for sampled allocations. See the module documentation for when they run.
pub trait Tracker: Send + 'static {
    /// Per-sample value kept while the block lives.
    type Token: Send + 'static;

    /// Called once when the session starts.
    fn started(&mut self, info: &SessionInfo) {
        let _ = info;
    }

    /// A sampled allocation. Return a token to be told about the block's reallocations and
    /// death, or `None` to stop tracking it.
    fn alloc(&mut self, allocation: &Allocation<'_>) -> Option<Self::Token>;

    /// A tracked block was reallocated and kept its sample.
    fn realloc(&mut self, token: &mut Self::Token, reallocation: &Reallocation) {
        let _ = (token, reallocation);
    }

    /// A tracked block was freed; its token comes back.
    fn dealloc(&mut self, token: Self::Token, deallocation: &Deallocation) {
        let _ = (token, deallocation);
    }

    /// A garbage-collection cycle of a managed heap ([`crate::gc`]) finished. It arrives
    /// after the events that were queued before it; times are relative to the session start.
    fn gc_cycle(&mut self, cycle: &GcCycle) {
        let _ = cycle;
    }

    /// Called after every drain at a safe point, even when no event was handled.
    /// `forced` is true when the caller needs the tracker's output up to date now
    /// ([`sync`]); otherwise the tracker may act on its own schedule (a file tracker flushes
    /// every few tens of milliseconds).
    fn after_poll(&mut self, forced: bool) {
        let _ = forced;
    }

    /// Called once when the session stops, after the last event.
    fn stopped(&mut self, stats: &Stats) {
        let _ = stats;
    }
}

/// A hasher for integer keys the profiler makes itself (sample ids, stack hashes): one
/// multiply, no SipHash. Not for keys an adversary chooses.
pub(crate) type FastHash = std::hash::BuildHasherDefault<IdHasher>;

/// The hasher of [`FastHash`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
}

/// The type-erased consumer side of a session.
trait Drive: Send {
    fn gc(&mut self, cycle: &GcCycle);
    fn event(&mut self, event: &Event, frames: &[usize], interval: f64);
    fn finish(&mut self, stats: &Stats);
    fn after_poll(&mut self, forced: bool);
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

struct Driver<T: Tracker> {
    tracker: T,
    tokens: HashMap<u64, T::Token, FastHash>,
}

// Delivery counters of the running session. Atomics rather than fields of the driver, so
// that `Session::stats` can read them while the drain thread holds the driver.
// Written by the drain thread for every event: padded (see `crate::padded`).
static DELIVERED_SAMPLES: Padded<AtomicU64> = Padded::new(AtomicU64::new(0));
static DELIVERED_FREES: Padded<AtomicU64> = Padded::new(AtomicU64::new(0));
static CALLBACK_PANICS: Padded<AtomicU64> = Padded::new(AtomicU64::new(0));

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl<T: Tracker> Drive for Driver<T> {
    fn event(&mut self, e: &Event, frames: &[usize], interval: f64) {
        let tracker = &mut self.tracker;
        match e.kind {
            EventKind::Alloc => {
                count(&DELIVERED_SAMPLES);
                let a = Allocation {
                    id: e.id,
                    size: e.size,
                    k: e.k,
                    estimated_bytes: e.k as f64 * interval,
                    thread: e.thread,
                    time_ns: e.time_ns,
                    addr: e.addr,
                    callstack: Callstack { frames, truncated: e.truncated },
                };
                match catch_unwind(AssertUnwindSafe(|| tracker.alloc(&a))) {
                    Ok(Some(token)) => {
                        self.tokens.insert(e.id, token);
                    }
                    Ok(None) => {}
                    Err(_) => count(&CALLBACK_PANICS),
                }
            }
            EventKind::Move => {
                if let Some(token) = self.tokens.get_mut(&e.id) {
                    let r = Reallocation {
                        id: e.id,
                        thread: e.thread,
                        time_ns: e.time_ns,
                        new_addr: e.addr,
                        new_size: e.size,
                    };
                    if catch_unwind(AssertUnwindSafe(|| tracker.realloc(token, &r))).is_err() {
                        count(&CALLBACK_PANICS);
                    }
                }
            }
            EventKind::Dealloc => {
                if let Some(token) = self.tokens.remove(&e.id) {
                    count(&DELIVERED_FREES);
                    let d = Deallocation { id: e.id, thread: e.thread, time_ns: e.time_ns };
                    if catch_unwind(AssertUnwindSafe(|| tracker.dealloc(token, &d))).is_err() {
                        count(&CALLBACK_PANICS);
                    }
                }
            }
        }
    }

    fn gc(&mut self, cycle: &GcCycle) {
        let tracker = &mut self.tracker;
        if catch_unwind(AssertUnwindSafe(|| tracker.gc_cycle(cycle))).is_err() {
            count(&CALLBACK_PANICS);
        }
    }

    fn finish(&mut self, stats: &Stats) {
        let tracker = &mut self.tracker;
        if catch_unwind(AssertUnwindSafe(|| tracker.stopped(stats))).is_err() {
            count(&CALLBACK_PANICS);
        }
    }

    fn after_poll(&mut self, forced: bool) {
        let tracker = &mut self.tracker;
        if catch_unwind(AssertUnwindSafe(|| tracker.after_poll(forced))).is_err() {
            count(&CALLBACK_PANICS);
        }
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        Box::new(self.tracker)
    }
}

// ---- state shared with the hot path (atomics only) ----

static QUEUE: AtomicPtr<Queue> = AtomicPtr::new(core::ptr::null_mut());
static DEPTH: AtomicUsize = AtomicUsize::new(0);
static START_NS: AtomicU64 = AtomicU64::new(0);
static UNTRACKED: AtomicU64 = AtomicU64::new(0);
static SESSION_EPOCH: AtomicU64 = AtomicU64::new(0);
static INTERVAL_BITS: AtomicU64 = AtomicU64::new(0);
/// Backpressure is on and a drain thread runs: a full queue is worth waiting for.
static WAIT_WHEN_FULL: AtomicBool = AtomicBool::new(false);

// ---- cold-path state ----

struct Control {
    epoch: u64,
    lost_at_start: u64,
    drain: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

static CONTROL: Padded<Mutex<Option<Control>>> = Padded::new(Mutex::new(None));
static DRIVER: Padded<Mutex<Option<Box<dyn Drive>>>> = Padded::new(Mutex::new(None));
/// GC cycles reported but not yet delivered (delivered by `poll`, after the queue).
static PENDING_GC: Padded<Mutex<Vec<(u64, GcCycle)>>> = Padded::new(Mutex::new(Vec::new()));

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The sample path's clock: the TSC where the kernel itself uses it as the clocksource
/// (constant-rate, synchronised across cores), else `CLOCK_MONOTONIC`. Reading the TSC
/// costs ~12 ns here against ~31 ns for `clock_gettime`, and a sample reads the clock twice
/// (its allocation and its free). Ticks become session nanoseconds at the safe point, by
/// interpolating between the session start and a fresh (TSC, monotonic) pair.
mod clock {
    use super::*;

    static USE_TSC: AtomicBool = AtomicBool::new(false);
    static TSC0: AtomicU64 = AtomicU64::new(0);

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn rdtsc() -> u64 {
        // SAFETY: RDTSC has no preconditions; it only reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn rdtsc() -> u64 {
        monotonic_ns()
    }

    /// Chooses the clock and records the session's origin (cold path, at start).
    pub(super) fn start() {
        let tsc = cfg!(target_arch = "x86_64")
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|s| s.trim() == "tsc");
        USE_TSC.store(tsc, Ordering::Relaxed);
        START_NS.store(monotonic_ns(), Ordering::Relaxed);
        TSC0.store(rdtsc(), Ordering::Relaxed);
    }

    /// A clock reading on the sample path.
    #[inline(always)]
    pub(super) fn now() -> u64 {
        if USE_TSC.load(Ordering::Relaxed) {
            rdtsc()
        } else {
            monotonic_ns()
        }
    }

    /// Converts readings of [`now`] to nanoseconds since the session start.
    pub(super) struct Converter {
        scale: f64,
    }

    impl Converter {
        /// Calibrates against the monotonic clock now (the readings to convert are older).
        pub(super) fn new() -> Converter {
            if !USE_TSC.load(Ordering::Relaxed) {
                return Converter { scale: 0.0 };
            }
            let (t, m) = (rdtsc(), monotonic_ns());
            let ticks = t.wrapping_sub(TSC0.load(Ordering::Relaxed));
            let ns = m.wrapping_sub(START_NS.load(Ordering::Relaxed));
            // Too short an interval to measure: assume a 1 GHz counter until it is not.
            let scale = if ticks > 1_000_000 { ns as f64 / ticks as f64 } else { 1.0 };
            Converter { scale }
        }

        pub(super) fn session_ns(&self, reading: u64) -> u64 {
            if self.scale == 0.0 {
                reading.wrapping_sub(START_NS.load(Ordering::Relaxed))
            } else {
                let ticks = reading.saturating_sub(TSC0.load(Ordering::Relaxed));
                (ticks as f64 * self.scale) as u64
            }
        }
    }
}

/// Monotonic clock in nanoseconds (vDSO; no allocation, no lock).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer; CLOCK_MONOTONIC is always supported.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// The session queue, when one exists.
#[inline]
pub(crate) fn queue() -> Option<&'static Queue> {
    let q = QUEUE.load(Ordering::Acquire);
    // SAFETY: queues are leaked, never freed (see postponed.rs §3), so a non-null pointer
    // stays valid for the life of the process.
    unsafe { q.as_ref() }
}

/// Hot-path helpers used by `alloc` (and the preload library and the managed heap).
pub(crate) mod hot {
    use super::*;
    use crate::callstack::{self, Captured};
    use crate::live::{self, Entry};
    use crate::sampler::Hit;

    /// Records a sampled allocation: capture, queue, live table. Never allocates through
    /// the profiled allocator, never blocks on a user-held lock, never panics, keeps errno.
    #[cold]
    #[inline(never)]
    pub(crate) fn record_alloc(addr: usize, size: usize, hit: Hit) {
        record_alloc_at(addr, size, hit, None)
    }

    /// [`record_alloc`] with the program's registers at the allocator's entry, when the
    /// allocator knows them (`(sp, bp)`, see [`callstack::capture_at_entry`]).
    #[cold]
    #[inline(never)]
    pub(crate) fn record_alloc_at(
        addr: usize,
        size: usize,
        hit: Hit,
        entry: Option<(usize, usize)>,
    ) {
        record_alloc_inline(addr, size, hit, entry)
    }

    /// [`record_alloc_at`], inlined: for a caller that is a slow path already (the preload
    /// library's `malloc` once its countdown ran out).
    #[inline(always)]
    pub(crate) fn record_alloc_inline(
        addr: usize,
        size: usize,
        hit: Hit,
        entry: Option<(usize, usize)>,
    ) {
        let Some(_busy) = Busy::enter() else {
            return;
        };
        let saved = callstack::SavedErrno::save();
        if let Some(q) = queue() {
            let mut frames = Captured::new();
            let depth = DEPTH.load(Ordering::Relaxed).min(q.depth());
            let caller = record_alloc_at as *const () as usize;
            match entry {
                Some((sp, bp)) => {
                    if !callstack::replay_at_entry(&mut frames, depth, sp, bp) {
                        callstack::capture_at_entry(&mut frames, depth, caller, sp, bp)
                    }
                }
                None => callstack::capture(&mut frames, depth, caller),
            }
            let id = hit.id;
            let event = Event {
                kind: EventKind::Alloc,
                epoch: hit.epoch,
                id,
                thread: hit.thread,
                time_ns: clock::now(),
                addr,
                size,
                k: hit.k,
                truncated: frames.truncated(),
            };
            // The live-table entry goes in before the event: its lock's exchange is a full
            // fence, which after the slot's ~200 bytes of stores would wait for all of them
            // to drain. The block cannot be freed before this returns, so the order is free.
            let tracked = live::insert(addr, Entry { id, epoch: hit.epoch });
            if !push(q, event, frames.frames()) {
                // Lost event: no dealloc event must follow for it either.
                if tracked {
                    live::remove(addr);
                }
            } else if !tracked {
                UNTRACKED.fetch_add(1, Ordering::Relaxed);
            }
        }
        saved.restore();
    }

    /// Pushes an event; with backpressure on, waits a bounded time for room in a full
    /// queue. No allocation, no lock held while waiting. Inlined, so that the event's
    /// fields go straight from registers into the slot (see [`Queue::try_push`]).
    #[inline(always)]
    fn push(q: &Queue, event: Event, frames: &[usize]) -> bool {
        q.try_push(event, frames) || push_full(q, &event, frames)
    }

    /// [`push`] when the queue is full.
    #[cold]
    #[inline(never)]
    fn push_full(q: &Queue, event: &Event, frames: &[usize]) -> bool {
        // The clock and the sleep below may set errno; the sample path keeps it.
        let saved = callstack::SavedErrno::save();
        let pushed = push_waiting(q, event, frames);
        saved.restore();
        pushed
    }

    fn push_waiting(q: &Queue, event: &Event, frames: &[usize]) -> bool {
        if WAIT_WHEN_FULL.load(Ordering::Relaxed) {
            let deadline = monotonic_ns()
                .saturating_add(crate::config::BACKPRESSURE_WAIT_MS.saturating_mul(1_000_000));
            while WAIT_WHEN_FULL.load(Ordering::Relaxed) && monotonic_ns() < deadline {
                let pause = libc::timespec { tv_sec: 0, tv_nsec: 50_000 };
                // SAFETY: `pause` is a valid timespec; a null remainder is allowed.
                unsafe { libc::nanosleep(&pause, core::ptr::null_mut()) };
                if q.try_push(*event, frames) {
                    return true;
                }
            }
        }
        q.push(event, frames)
    }

    /// Queues the death (`addr == 0`) or the move of a sampled block. Keeps errno. A death
    /// reads the clock and pushes, neither of which allocates or touches errno (a full
    /// queue's wait restores it, see [`push_full`]), so it needs neither the busy flag nor
    /// errno saved; a move may grow the live table (memory from `mmap`), so it takes both.
    #[cold]
    #[inline(never)]
    pub(crate) fn record_other(kind: EventKind, entry: Entry, addr: usize, size: usize) {
        record_other_inline(kind, entry, addr, size)
    }

    /// [`record_other`], inlined: for a caller that is a slow path already (the preload
    /// library's `free` of a block whose filter counter is set).
    #[inline(always)]
    pub(crate) fn record_other_inline(kind: EventKind, entry: Entry, addr: usize, size: usize) {
        let Some(q) = queue() else {
            return;
        };
        let event = Event {
            kind,
            epoch: entry.epoch,
            id: entry.id,
            thread: 0,
            time_ns: clock::now(),
            addr,
            size,
            k: 0,
            truncated: false,
        };
        if kind != EventKind::Move {
            push(q, event, &[]);
            return;
        }
        let _busy = Busy::enter();
        let saved = callstack::SavedErrno::save();
        if push(q, event, &[]) && !live::insert(addr, entry) {
            UNTRACKED.fetch_add(1, Ordering::Relaxed);
        }
        saved.restore();
    }
}

/// Starts a profiling session. Fails when the configuration is invalid or a session is
/// already running.
pub fn start<T: Tracker>(config: Config, tracker: T) -> Result<Session<T>, Error> {
    config.validate()?;
    let mut control = lock(&CONTROL);
    if control.is_some() {
        return Err(Error::AlreadyRunning);
    }
    // The profiler's own setup allocations are not sampled (no session yet) nor counted.
    let unwinder = crate::callstack::select(config.unwinder);
    let q = match queue() {
        Some(q) if q.capacity() >= config.queue_capacity && q.depth() >= config.depth => q,
        _ => {
            let q = Queue::new(config.queue_capacity, config.depth).ok_or_else(|| {
                Error::Other(format!(
                    "cannot allocate the event queue ({} events × {} frames)",
                    config.queue_capacity, config.depth
                ))
            })?;
            let q: &'static Queue = Box::leak(Box::new(q));
            QUEUE.store(q as *const Queue as *mut Queue, Ordering::Release);
            q
        }
    };
    // Discard leftovers of an earlier session; a reused ring keeps this session's capacity.
    let _ = q.drain(|_, _| {});
    q.set_limit(config.queue_capacity);
    crate::live::clear();
    UNTRACKED.store(0, Ordering::Relaxed);
    DEPTH.store(config.depth, Ordering::Relaxed);
    INTERVAL_BITS.store(config.interval.to_bits(), Ordering::Relaxed);
    clock::start();
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    for c in [&DELIVERED_SAMPLES, &DELIVERED_FREES, &CALLBACK_PANICS] {
        c.store(0, Ordering::Relaxed);
    }
    let mut driver = Box::new(Driver { tracker, tokens: HashMap::default() });
    let info =
        SessionInfo { interval: config.interval, depth: config.depth, unwinder, start_unix_ns };
    {
        let _busy = Busy::enter();
        let t = &mut driver.tracker;
        if catch_unwind(AssertUnwindSafe(|| t.started(&info))).is_err() {
            count(&CALLBACK_PANICS);
        }
    }
    let seed = config.seed.unwrap_or_else(sampler::entropy_seed);
    // The drain thread starts before sampling does, and sampling waits until the thread
    // runs its own code: the allocations of the thread's start-up (the standard library's
    // thread-local bookkeeping) are not the program's and must not be sampled.
    let drain = if config.drain_thread {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<()>(1);
        let half = config.queue_capacity / 2;
        let handle = std::thread::Builder::new()
            .name("memprof-drain".into())
            .spawn(move || {
                let _ = ready_tx.send(());
                drop(ready_tx);
                while !flag.load(Ordering::Acquire) {
                    // An idle queue is drained every 5 ms, a busy one every 1 ms, and one
                    // that was half full again at once. The pause keeps the consumer well
                    // behind the producers: a consumer that catches up reads the slots they
                    // are about to write (see `Queue::drain`).
                    let n = poll();
                    if n < 1024 {
                        std::thread::sleep(Duration::from_millis(5));
                    } else if n < half {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
            .map_err(|e| Error::io("cannot start the drain thread", e))?;
        let _ = ready_rx.recv();
        Some((stop, handle))
    } else {
        None
    };
    // The driver stays locked until the epoch is published: a concurrent `poll` that ran
    // in between would drop this session's first events, uncounted, as another session's.
    let mut slot = lock(&DRIVER);
    *slot = Some(driver);
    let epoch = sampler::begin(config.interval, seed);
    SESSION_EPOCH.store(epoch, Ordering::Release);
    drop(slot);
    WAIT_WHEN_FULL.store(config.backpressure && drain.is_some(), Ordering::Relaxed);
    *control = Some(Control { epoch, lost_at_start: q.lost(), drain });
    Ok(Session { epoch, info, _tracker: PhantomData })
}

/// Runs pending callbacks now, on this thread. Returns the number of events handled (0 when
/// no session runs or another thread is already running callbacks).
pub fn poll() -> usize {
    let Some(q) = queue() else {
        return 0;
    };
    let Ok(mut guard) = DRIVER.try_lock() else {
        return 0;
    };
    // Read under the driver's lock, which `start` holds until the epoch is published.
    let epoch = SESSION_EPOCH.load(Ordering::Acquire);
    let Some(driver) = guard.as_mut() else {
        return 0;
    };
    let Some(_busy) = Busy::enter() else {
        return 0;
    };
    let n = drain_into(q, driver.as_mut(), epoch);
    driver.after_poll(false);
    crate::callstack::maintain();
    n
}

/// Delivers the queued events of session `epoch` (their clock readings converted to session
/// nanoseconds), then the GC cycles reported before this drain began, which follow the events
/// queued before them. Returns the number delivered.
fn drain_into(q: &Queue, driver: &mut dyn Drive, epoch: u64) -> usize {
    let interval = f64::from_bits(INTERVAL_BITS.load(Ordering::Relaxed));
    let clock = clock::Converter::new();
    let n = q
        .drain(|e, frames| {
            if e.epoch == epoch {
                let e = Event { time_ns: clock.session_ns(e.time_ns), ..*e };
                driver.event(&e, frames, interval);
            }
        })
        .unwrap_or(0);
    let cycles = std::mem::take(&mut *lock(&PENDING_GC));
    let m = cycles.len();
    for (_, c) in cycles.iter().filter(|(e, _)| *e == epoch) {
        driver.gc(c);
    }
    n + m
}

/// Reports a finished garbage-collection cycle of a managed heap to the running session
/// (no-op without one). `cycle.start_ns` and `cycle.end_ns` are [`monotonic_ns`] readings;
/// they are converted to times since the session start. Call it outside the allocator (the
/// collector does, after its sweep); the tracker hears of it at the next safe point, which
/// this call also is.
pub fn record_gc_cycle(cycle: &GcCycle) {
    let epoch = SESSION_EPOCH.load(Ordering::Acquire);
    if epoch == 0 {
        return;
    }
    let start = START_NS.load(Ordering::Relaxed);
    let c = GcCycle {
        start_ns: cycle.start_ns.saturating_sub(start),
        end_ns: cycle.end_ns.saturating_sub(start),
        ..*cycle
    };
    {
        let _busy = Busy::enter();
        lock(&PENDING_GC).push((epoch, c));
    }
    poll();
}

/// Runs pending callbacks on this thread, then [`Tracker::after_poll`] with `forced`, waiting
/// for a drain running on another thread to finish first. Does nothing when no session runs
/// or when called from inside a callback.
pub(crate) fn sync() {
    let Some(q) = queue() else {
        return;
    };
    let Some(_busy) = Busy::enter() else {
        return;
    };
    let mut guard = lock(&DRIVER);
    let epoch = SESSION_EPOCH.load(Ordering::Acquire);
    let Some(driver) = guard.as_mut() else {
        return;
    };
    let _ = drain_into(q, driver.as_mut(), epoch);
    driver.after_poll(true);
    crate::callstack::maintain();
}

/// The guards [`fork_prepare`] holds until [`fork_parent`] or [`fork_child`].
type HeldLocks =
    (MutexGuard<'static, Option<Control>>, MutexGuard<'static, Option<Box<dyn Drive>>>);

/// Where [`fork_prepare`] keeps its guards.
struct ForkLocks(core::cell::UnsafeCell<Option<HeldLocks>>);

// SAFETY: the cell is written by fork_prepare after it took both locks and emptied by the
// fork_parent/fork_child of the same fork, on the same thread, before they are released;
// another thread's fork_prepare cannot touch it before then because it blocks on CONTROL.
unsafe impl Sync for ForkLocks {}

static FORK_LOCKS: ForkLocks = ForkLocks(core::cell::UnsafeCell::new(None));

/// `pthread_atfork` prepare handler: takes the session's locks (control, driver, then the
/// live table's shards) so that the child inherits none of them held by a thread it lacks.
pub(crate) fn fork_prepare() {
    let control = lock(&CONTROL);
    let driver = lock(&DRIVER);
    crate::live::lock_all();
    // SAFETY: see `ForkLocks`: this thread holds CONTROL, so no other handler uses the cell.
    unsafe { *FORK_LOCKS.0.get() = Some((control, driver)) };
}

/// `pthread_atfork` parent handler: releases what [`fork_prepare`] took.
pub(crate) fn fork_parent() {
    crate::live::unlock_all();
    // SAFETY: see `ForkLocks`: this thread still holds CONTROL.
    let locks = unsafe { (*FORK_LOCKS.0.get()).take() };
    drop(locks);
}

/// `pthread_atfork` child handler: releases the locks and abandons the parent's session
/// (see the module documentation, §5). The child's tracker is leaked, never dropped.
pub(crate) fn fork_child() {
    crate::live::unlock_all();
    crate::callstack::fork_child();
    // SAFETY: see `ForkLocks`: this (the only) thread still holds CONTROL.
    let locks = unsafe { (*FORK_LOCKS.0.get()).take() };
    sampler::end();
    WAIT_WHEN_FULL.store(false, Ordering::Relaxed);
    if let Some((mut control, mut driver)) = locks {
        // The drain thread does not exist here: forget its handle rather than join it.
        core::mem::forget(control.take());
        // The tracker shares its output with the parent: never run or drop it.
        core::mem::forget(driver.take());
    }
    SESSION_EPOCH.store(0, Ordering::Release);
    // Slots claimed by threads that the child lacks would never be published.
    QUEUE.store(core::ptr::null_mut(), Ordering::Release);
    crate::live::clear();
}

/// A running profiling session. Stop it with [`Session::stop`] to get the tracker back;
/// dropping it stops the session too (and drops the tracker).
pub struct Session<T: Tracker> {
    epoch: u64,
    info: SessionInfo,
    _tracker: PhantomData<fn() -> T>,
}

impl<T: Tracker> std::fmt::Debug for Session<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("epoch", &self.epoch).field("info", &self.info).finish()
    }
}

impl<T: Tracker> Session<T> {
    /// Facts about this session (interval, depth, unwinder, start time).
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// Counters so far (lost events, untracked samples, callback panics).
    pub fn stats(&self) -> Stats {
        let base =
            lock(&CONTROL).as_ref().filter(|c| c.epoch == self.epoch).map(|c| c.lost_at_start);
        current_stats(base)
    }

    /// Stops sampling, runs the remaining callbacks, calls [`Tracker::stopped`] and returns
    /// the tracker.
    pub fn stop(mut self) -> Result<T, Error> {
        let t = self.stop_inner()?;
        t.into_any()
            .downcast::<T>()
            .map(|b| *b)
            .map_err(|_| Error::Other("session tracker has an unexpected type".into()))
    }

    fn stop_inner(&mut self) -> Result<Box<dyn Drive>, Error> {
        let mut control = lock(&CONTROL);
        let Some(c) = control.take().filter(|c| c.epoch == self.epoch) else {
            return Err(Error::Other("this session is not running".into()));
        };
        sampler::end();
        WAIT_WHEN_FULL.store(false, Ordering::Relaxed);
        if let Some((flag, handle)) = c.drain {
            flag.store(true, Ordering::Release);
            let _ = handle.join();
        }
        // Producers that passed the sampler before `end` may still be publishing.
        let deadline = std::time::Instant::now() + Duration::from_millis(200);
        loop {
            poll();
            match queue() {
                Some(q) if q.has_unpublished() && std::time::Instant::now() < deadline => {
                    std::thread::yield_now()
                }
                _ => break,
            }
        }
        let stats = current_stats(Some(c.lost_at_start));
        SESSION_EPOCH.store(0, Ordering::Release);
        crate::live::clear();
        let mut driver =
            lock(&DRIVER).take().ok_or_else(|| Error::Other("session has no tracker".into()))?;
        {
            let _busy = Busy::enter();
            driver.finish(&stats);
        }
        Ok(driver)
    }
}

impl<T: Tracker> Drop for Session<T> {
    fn drop(&mut self) {
        let running = lock(&CONTROL).as_ref().is_some_and(|c| c.epoch == self.epoch);
        if running {
            let _ = self.stop_inner();
        }
    }
}

/// Counters of the running session; `lost_at_start` is the queue's lost count when it
/// started (None: not running, so no events are attributed to it).
fn current_stats(lost_at_start: Option<u64>) -> Stats {
    Stats {
        samples: DELIVERED_SAMPLES.load(Ordering::Relaxed),
        frees: DELIVERED_FREES.load(Ordering::Relaxed),
        lost_events: match (queue(), lost_at_start) {
            (Some(q), Some(base)) => q.lost().saturating_sub(base),
            _ => 0,
        },
        untracked: UNTRACKED.load(Ordering::Relaxed),
        callback_panics: CALLBACK_PANICS.load(Ordering::Relaxed),
    }
}
