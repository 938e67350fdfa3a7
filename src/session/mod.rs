//! Sessions and the [`Tracker`] callbacks.
//!
//! # 1. The contract
//! [`start`] begins a session with a [`Config`] and a [`Tracker`]; from then on the sampler
//! picks allocations (see [`crate::engine::sampler`]) and queues an event for each sampled
//! allocation and each free of a sampled block. A reallocation is a free of its old block
//! and an allocation of its new size (`engine::sampler` §5): a sampled old block's death, and
//! a sample when the new size holds sample points, with nothing that carries a sample across.
//! The tracker's callbacks run only at safe points — [`poll`], [`Session::stop`] and the
//! optional drain thread — never inside the allocator. They may allocate (their own
//! allocations are not sampled) and may panic (the panic is caught, counted and the event
//! dropped). The value [`Tracker::alloc`] returns is the sample's token: it is handed back
//! to [`Tracker::dealloc`], exactly once, when the block dies (freed or reallocated).
//! Returning `None` stops tracking that block.
//!
//! # 2. One session at a time
//! Sampling state is process-global (the global allocator is), so a second [`start`] while
//! a session runs is an error. Stopping disables sampling, waits briefly for producers that
//! are mid-push, drains the queue, forgets the live table and hands the tracker back.
//!
//! # 3. Keeping an output current
//! After every drain at a safe point the tracker's [`Tracker::after_poll`] runs (with
//! [`Poll::Periodic`]), so a tracker that streams somewhere can flush on its own schedule.
//! [`sync`] drains and calls it with a forced reason (why the output must be up to date
//! now: [`Poll::BeforeUnload`], [`Poll::BeforeExec`], …), waiting for a concurrent drain to
//! finish: the preload library calls it before `dlclose`, while the library is still mapped.
//!
//! # 4. Backpressure
//! With [`Config::backpressure`] a sampling thread that finds the queue full sleeps (a
//! futex the drain wakes, `engine::queue` §5) until the drain thread has made room,
//! instead of dropping the event, so the exact mode stays lossless under load. It only
//! waits while a drain thread runs, holds no lock while waiting, and the drain thread
//! itself never waits (its allocations are not sampled). Stopping the session wakes every
//! sleeper. A drain thread held up for [`BACKPRESSURE_WAIT_MS`](crate::config::BACKPRESSURE_WAIT_MS)
//! without taking an event (a tracker's callback that waits for a lock a sleeping thread
//! holds) is not waited for longer (`engine::push` §1): a tracker's callbacks should not
//! wait for the program's threads.

//! # 5. fork
//! [`fork_prepare`], [`fork_parent`] and [`fork_child`] are `pthread_atfork` handlers: the
//! first takes the session's locks (control, driver, live table) so that no other thread
//! holds one at the moment of the fork, the parent releases them, and the child releases
//! them and abandons the session: the child has no drain thread, its queue may hold slots
//! that threads which do not exist in the child had claimed, and its tracker shares its
//! output with the parent. The tracker is leaked (never dropped, so it never writes), the
//! queue is replaced at the next start, and sampling stops. The child may then [`start`] a
//! session of its own. A child made by a raw `clone`, which runs no handler, is found by
//! the engine's wiped mark (`engine::forked`) and reset by [`clone_child`]: the same, with
//! the locks the parent's other threads held taken as held by nobody (the live table's
//! shards forgotten with their tables; the control, driver and GC locks, which are
//! `sys::futex`'s for this, with their contents forgotten: the in-process drain thread
//! holds the driver's often).

pub(crate) mod driver;
mod fork;
mod generations;
pub(crate) mod label;
mod live;
pub(crate) mod recorder;
mod state;
mod tracker;

pub(crate) use fork::{clone_child, fork_child, fork_parent, fork_prepare};
pub use live::live_profile;
#[cfg(feature = "report")] // its one user outside the folder is `Session::pprof`
pub(crate) use live::with_live_profile;
pub use tracker::{
    Allocation, Callstack, Deallocation, Poll, SessionCounters, SessionInfo, Tracker,
};

use crate::config::Config;
use crate::engine::busy::Busy;
use crate::engine::clock;
use crate::engine::queue::{Queue, SideEvent, WireEvent};
use crate::engine::sample_path::{self, queue};
use crate::engine::sampler;
use crate::error::Error;
use crate::profile::GcCycle;
use driver::{
    count, Drive, Driver, CALLBACK_PANICS, DELIVERED_FREES, DELIVERED_SAMPLES, REPLAYED_FREES,
};
use state::{
    drain_into, lock, Control, CONTROL, CRASH_FLUSH, DRAIN_TID, DRIVER, INTERVAL_BITS, PENDING_GC,
    SESSION_EPOCH,
};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Starts a profiling session. Fails when the configuration is invalid or a session is
/// already running.
pub fn start<T: Tracker>(config: Config, tracker: T) -> Result<Session<T>, Error> {
    start_on(config, tracker, None)
}

/// [`start`], on `shared` when given: a queue that another process consumes (`memprof
/// record`'s collector, see `record/ring`). Its drain here does nothing, and the
/// tracker only hears of the session's start and stop.
pub(crate) fn start_on<T: Tracker>(
    config: Config,
    tracker: T,
    shared: Option<Queue>,
) -> Result<Session<T>, Error> {
    config.validate()?;
    let mut control = lock(&CONTROL);
    if control.is_some() {
        return Err(Error::AlreadyRunning);
    }
    // The profiler's own setup allocations are not sampled (no session yet) nor counted.
    let unwinder = crate::engine::callstack::select(config.unwinder);
    // CPython's frames are read on the sample path when the process runs it (`python`).
    crate::engine::python::detect(config.interval);
    let external = shared.is_some();
    let q = session_queue(&config, shared)?;
    // Discard leftovers of an earlier session; a reused ring keeps this session's capacity.
    let _ = q.drain(|_, _| {});
    q.set_limit(config.queue_capacity);
    crate::engine::live::clear();
    // An exact session under a collector keeps no table (`live` §6).
    crate::engine::live::name_by_address(crate::engine::live::names_by_address(
        config.interval,
        external,
    ));
    sample_path::UNTRACKED.store(0, Ordering::Relaxed);
    sample_path::DEPTH.store(config.depth, Ordering::Relaxed);
    INTERVAL_BITS.store(config.interval.to_bits(), Ordering::Relaxed);
    clock::start();
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    for c in [&DELIVERED_SAMPLES, &DELIVERED_FREES, &CALLBACK_PANICS, &REPLAYED_FREES] {
        c.store(0, Ordering::Relaxed);
    }
    let mut driver = Box::new(Driver::new(tracker));
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
        Some(start_drain_thread(config.queue_capacity / 2)?)
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
    sample_path::WAIT_WHEN_FULL
        .store(config.backpressure && (drain.is_some() || external), Ordering::Relaxed);
    // A sampled session's frees go to the queue's table rather than wait (`queue` §3); an
    // exact one's wait with the rest, in order (each block weighs only its own size there,
    // and the table would overflow at every wait).
    sample_path::DEFER_FREES.store(config.interval > 1.0, Ordering::Relaxed);
    *control = Some(Control {
        epoch,
        lost_at_start: (q.lost(), q.frees_unknown(), q.frees_deferred()),
        drain,
    });
    Ok(Session { epoch, info, _tracker: PhantomData })
}

/// The queue of a new session: the one given (`memprof record`'s shared ring), else the
/// last session's when it is large and deep enough, else a new one; published to the
/// sample path.
fn session_queue(config: &Config, shared: Option<Queue>) -> Result<&'static Queue, Error> {
    Ok(match (shared, queue()) {
        (Some(q), _) => {
            let q: &'static Queue = Box::leak(Box::new(q));
            sample_path::QUEUE.store(q as *const Queue as *mut Queue, Ordering::Release);
            q
        }
        (None, Some(q))
            if !q.is_external()
                && q.capacity() >= config.queue_capacity
                && q.depth() >= config.depth =>
        {
            q
        }
        _ => {
            let q = Queue::new(config.queue_capacity, config.depth).ok_or_else(|| {
                Error::Other(format!(
                    "cannot allocate the event queue ({} events × {} frames)",
                    config.queue_capacity, config.depth
                ))
            })?;
            let q: &'static Queue = Box::leak(Box::new(q));
            sample_path::QUEUE.store(q as *const Queue as *mut Queue, Ordering::Release);
            q
        }
    })
}

/// The thread that drains the queue of a session started with `drain_thread`, which
/// sampling waits for (it runs its own code first). Returns its stop flag and handle.
fn start_drain_thread(
    half: usize,
) -> Result<(Arc<AtomicBool>, std::thread::JoinHandle<()>), Error> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<()>(1);
    // The thread starts with every signal blocked (inherited from this thread's mask,
    // set around the spawn): a process-directed signal — a daemon's SIGTERM that its
    // own `sigwait` thread should take, a SIGXFSZ when the profile reaches
    // RLIMIT_FSIZE — is never delivered to it.
    let blocked = crate::sys::signals::block_all();
    let spawned = std::thread::Builder::new().name("memprof-drain".into()).spawn(move || {
        // SAFETY: gettid has no preconditions.
        DRAIN_TID.store(unsafe { libc::gettid() } as u64, Ordering::Release);
        let _ = ready_tx.send(());
        drop(ready_tx);
        drain_loop(&flag, half);
    });
    drop(blocked);
    let handle = spawned.map_err(|e| Error::io("cannot start the drain thread", e))?;
    let _ = ready_rx.recv();
    Ok((stop, handle))
}

/// The drain thread's loop until `flag` is set: the crash flush another thread waits for,
/// the polls at a pace set by how full the queue was, and the process's exit when only
/// this thread is left.
fn drain_loop(flag: &AtomicBool, half: usize) {
    let mut polls = 0u32;
    while !flag.load(Ordering::Acquire) {
        if CRASH_FLUSH.load(Ordering::Acquire) == 1 {
            // Another thread is dying of a fatal signal and waits for this.
            sync(Poll::Sync);
            CRASH_FLUSH.store(2, Ordering::Release);
        }
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
        polls = polls.wrapping_add(1);
        if polls % 20 == 0 && {
            // Reading /proc allocates: not the program's allocations.
            let _busy = Busy::enter();
            crate::sys::signals::only_this_thread_left()
        } {
            // `main` ended with `pthread_exit` and every other thread is gone:
            // the process would have exited with status 0 (POSIX: as if by
            // `exit(0)` when its last thread ends) but for this thread. Do it.
            // SAFETY: `exit` runs the exit handlers on this thread; the session's
            // stop does not wait for the thread it runs on (see `stop_inner`).
            unsafe { libc::exit(0) };
        }
    }
}

/// Runs pending callbacks now, on this thread. Returns the number of events handled (0 when
/// no session runs or another thread is already running callbacks).
pub fn poll() -> usize {
    let Some(q) = queue() else {
        return 0;
    };
    let Some(mut guard) = DRIVER.try_lock() else {
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
    driver.after_poll(Poll::Periodic);
    crate::engine::callstack::maintain();
    n
}

/// Reports a finished garbage-collection cycle of a managed heap to the running session
/// (no-op without one). `cycle.start_ns` and `cycle.end_ns` are
/// [`monotonic_ns`](crate::engine::clock::monotonic_ns) readings; they are converted to times since the
/// session start. Call it outside the allocator (the collector does, after its sweep); the
/// tracker hears of it at the next safe point, which this call also is.
pub fn record_gc_cycle(cycle: &GcCycle) {
    // A child that no fork handler told of queues nothing into its parent's session
    // (`engine::forked`).
    if crate::engine::forked::unhandled() && !crate::engine::forked::handle() {
        return;
    }
    let epoch = SESSION_EPOCH.load(Ordering::Acquire);
    if epoch == 0 {
        return;
    }
    let start = clock::start_ns();
    let c = GcCycle {
        start_ns: cycle.start_ns.saturating_sub(start),
        end_ns: cycle.end_ns.saturating_sub(start),
        ..*cycle
    };
    if let Some(q) = queue().filter(|q| q.is_external()) {
        // The collector in another process hears of it in order with the events.
        push_side(q, epoch, SIDE_GC, 0, &c.to_words());
        return;
    }
    {
        let _busy = Busy::enter();
        lock(&PENDING_GC).push((epoch, c));
    }
    poll();
}

/// A side event: the side log of a shared ring up to `addr` bytes holds a new module list
/// (queued by the preload library's agent, read by `record`'s collector).
pub(crate) const SIDE_MODULES: u64 = 1;
/// A side event: a GC cycle, in the frames ([`crate::profile::GcCycle::to_words`]).
pub(crate) const SIDE_GC: u64 = 2;

/// Queues a side event ([`SideEvent`]: `what`, its word `word`, the words as its frames)
/// for the consumer of a shared queue, waiting for room while the consumer lives (as the
/// sample path does, `engine::push` §1). Returns false when it was dropped (counted as
/// lost).
pub(crate) fn push_side(q: &Queue, epoch: u64, what: u64, word: u64, words: &[u64]) -> bool {
    let frames: Vec<usize> = words.iter().map(|&w| w as usize).collect();
    let e = WireEvent::Side(SideEvent { epoch, what, word, time: clock::now() });
    crate::engine::push::push_patiently(q, &e, &frames)
}

/// For a thread dying of a fatal signal (the preload library's handler): asks the drain
/// thread to bring the output up to date ([`Poll::Sync`]) and waits for it, at most
/// `timeout_ms`. Async-signal-safe: atomics, `gettid`, `clock_gettime` and `nanosleep`
/// only. Returns false at once without a drain thread, on the drain thread itself, or
/// when another thread asked already; false after the timeout (the dying thread may hold
/// a lock the drain needs).
pub(crate) fn flush_from_signal(timeout_ms: u64) -> bool {
    let drain = DRAIN_TID.load(Ordering::Acquire);
    // SAFETY: gettid has no preconditions.
    if drain == 0 || drain == unsafe { libc::gettid() } as u64 {
        return false;
    }
    if CRASH_FLUSH.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return false;
    }
    let deadline = crate::engine::clock::monotonic_ns().saturating_add(timeout_ms * 1_000_000);
    while CRASH_FLUSH.load(Ordering::Acquire) != 2 {
        if crate::engine::clock::monotonic_ns() >= deadline {
            return false;
        }
        let pause = libc::timespec { tv_sec: 0, tv_nsec: 500_000 };
        // SAFETY: `pause` is a valid timespec; a null remainder is allowed.
        unsafe { libc::nanosleep(&pause, core::ptr::null_mut()) };
    }
    true
}

/// Runs pending callbacks on this thread, then [`Tracker::after_poll`] with `why` (a forced
/// reason), waiting for a drain running on another thread to finish first. Does nothing
/// when no session runs or when called from inside a callback.
pub(crate) fn sync(why: Poll) {
    debug_assert!(why.is_forced());
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
    driver.after_poll(why);
    crate::engine::callstack::maintain();
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
    /// The session's epoch (its events carry it).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Facts about this session (interval, depth, unwinder, start time).
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// Counters so far (lost events, untracked samples, callback panics).
    pub fn stats(&self) -> SessionCounters {
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
        // Threads asleep waiting for room are woken and drop their events: nobody drains
        // for this session any more.
        sample_path::stop_waiting();
        if let Some((flag, handle)) = c.drain {
            flag.store(true, Ordering::Release);
            // Stopped from the drain thread itself (its `exit` when it is the last thread
            // left, see `start`): it drains below instead of being waited for.
            DRAIN_TID.store(0, Ordering::Release);
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
        // Producers that passed the sampler before `end` may still be publishing.
        let deadline = std::time::Instant::now() + Duration::from_millis(200);
        loop {
            poll();
            match queue() {
                // A queue consumed elsewhere is left to its consumer, which also reads
                // what producers publish after this process is gone.
                Some(q)
                    if !q.is_external()
                        && q.has_unpublished()
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::yield_now()
                }
                _ => break,
            }
        }
        let stats = current_stats(Some(c.lost_at_start));
        SESSION_EPOCH.store(0, Ordering::Release);
        crate::engine::live::name_by_address(false);
        crate::engine::live::clear();
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

/// Counters of the running session; `lost_at_start` is the queue's lost counts when it
/// started (None: not running, so no events are attributed to it).
fn current_stats(lost_at_start: Option<(u64, u64, u64)>) -> SessionCounters {
    SessionCounters {
        samples: DELIVERED_SAMPLES.load(Ordering::Relaxed),
        frees: DELIVERED_FREES.load(Ordering::Relaxed),
        // Events the queue refused, and samples skipped because a signal handler allocated
        // while its thread was inside the profiler (counted by the queue, `sample_path` §1).
        lost_events: match (queue(), lost_at_start) {
            (Some(q), Some((base, _, _))) => q.lost().saturating_sub(base),
            _ => 0,
        },
        // Replays of frees the table took at once are no losses (`queue` §3).
        frees_replayed: match (queue(), lost_at_start) {
            (Some(q), Some((_, _, base))) => REPLAYED_FREES
                .load(Ordering::Relaxed)
                .saturating_sub(q.frees_deferred().saturating_sub(base)),
            _ => REPLAYED_FREES.load(Ordering::Relaxed),
        },
        frees_unknown: match (queue(), lost_at_start) {
            (Some(q), Some((_, base, _))) => q.frees_unknown().saturating_sub(base),
            _ => 0,
        },
        untracked: sample_path::UNTRACKED.load(Ordering::Relaxed),
        callback_panics: CALLBACK_PANICS.load(Ordering::Relaxed),
    }
}
