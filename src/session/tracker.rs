//! The [`Tracker`] callbacks and the events they receive (see [`crate::session`] for when
//! they run).

use crate::config::Unwinder;
use crate::profile::GcCycle;

/// A sampled call stack: return addresses, innermost first.
#[derive(Clone, Copy, Debug)]
pub struct Callstack<'a> {
    pub(crate) frames: &'a [usize],
    pub(crate) truncated: bool,
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
    /// The allocating thread's label when it was sampled: with `memprof::tracing`'s span
    /// layer installed, the path of the spans it had entered (`outer;inner{field=value}`);
    /// `None` outside every span.
    pub label: Option<&'static str>,
}

/// A sampled block that was freed, or reallocated: a reallocation ends its old block
/// (`engine::sampler` §5), and its new size, when sampled, is a new [`Allocation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deallocation {
    /// Sample id.
    pub id: u64,
    /// Always 0: the sample path does not note which thread freed a block.
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
pub struct SessionCounters {
    /// Alloc events delivered to the tracker.
    pub samples: u64,
    /// Dealloc events delivered.
    pub frees: u64,
    /// Events that did not fit in the queue, and samples skipped because a signal handler
    /// allocated while its thread was inside the profiler.
    pub lost_events: u64,
    /// Sampled blocks that the live table could not follow (no memory; or a signal
    /// handler's free or realloc of a block whose table shard its own thread held, beyond what
    /// could be deferred): their death is never seen, or is reported early.
    pub untracked: u64,
    /// Callbacks that panicked (caught).
    pub callback_panics: u64,
    /// Frees among `lost_events` kept aside by the queue and replayed: delivered as
    /// deallocations at their own time, late.
    pub frees_replayed: u64,
    /// Frees among `lost_events` lost for good (the queue's table of lost frees was full):
    /// that many blocks still tracked may have been freed.
    pub frees_unknown: u64,
}

/// Why [`Tracker::after_poll`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Poll {
    /// A drain at a safe point ([`poll`](crate::session::poll), the drain thread): act on your own
    /// schedule.
    Periodic,
    /// Someone needs the output up to date now.
    Sync,
    /// A library is about to be unmapped (`dlclose`): up to date now, with whatever needs
    /// the library mapped (its symbols) written now.
    BeforeUnload,
    /// The process image is about to be replaced (`exec`): up to date now; this image will
    /// never finish the output.
    BeforeExec,
    /// The process is about to end without exit handlers (`_exit`): up to date now;
    /// nothing of this process runs afterwards.
    BeforeQuickExit,
}

impl Poll {
    /// True for every reason but [`Poll::Periodic`]: the output must be up to date now.
    pub fn is_forced(self) -> bool {
        self != Poll::Periodic
    }
}

/// User callbacks for sampled allocations. See the module documentation for when they run.
pub trait Tracker: Send + 'static {
    /// Per-sample value kept while the block lives.
    type Token: Send + 'static;

    /// Called once when the session starts.
    fn started(&mut self, info: &SessionInfo) {
        let _ = info;
    }

    /// A sampled allocation. Return a token to be told about the block's death (its free,
    /// or its reallocation), or `None` to stop tracking it.
    fn alloc(&mut self, allocation: &Allocation<'_>) -> Option<Self::Token>;

    /// A tracked block was freed or reallocated; its token comes back.
    fn dealloc(&mut self, token: Self::Token, deallocation: &Deallocation) {
        let _ = (token, deallocation);
    }

    /// A garbage-collection cycle of a managed heap ([`crate::gc`]) finished. It arrives
    /// after the events that were queued before it; times are relative to the session start.
    fn gc_cycle(&mut self, cycle: &GcCycle) {
        let _ = cycle;
    }

    /// Called after every drain at a safe point, even when no event was handled, with the
    /// reason for the drain. At [`Poll::Periodic`] the tracker may act on its own schedule
    /// (a file tracker flushes every few tens of milliseconds); at any other reason
    /// ([`Poll::is_forced`]) its output must be up to date when this returns.
    fn after_poll(&mut self, why: Poll) {
        let _ = why;
    }

    /// Called once when the session stops, after the last event.
    fn stopped(&mut self, stats: &SessionCounters) {
        let _ = stats;
    }
}
