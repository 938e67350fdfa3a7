//! What a recording says of its run: the header written first, what was lost, and why a
//! stream ended early.

use super::format::spec::{LIFETIME_UNIT_NS, VERSION};

/// Run-level facts written first in every `.mprof` stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// Format version of the stream this came from ([`VERSION`](crate::profile::format::VERSION) when written).
    pub version: u32,
    /// Mean sampling interval in bytes (R). 1.0 is the exact mode.
    pub interval: f64,
    /// Maximum number of frames captured per stack.
    pub depth: u32,
    /// Process id of the profiled process.
    pub pid: u32,
    /// Process id of its parent when it started (0: not recorded), which ties the
    /// processes of a tree together.
    pub ppid: u32,
    /// The process's pid in its own PID namespace, when that differs from [`Header::pid`]
    /// (a program started by `unshare -p -f` is pid 1 there); 0 otherwise, or not recorded.
    /// `pid` and `ppid` are always as `memprof` saw them.
    pub ns_pid: u32,
    /// Path of the profiled executable.
    pub executable: String,
    /// Command line of the profiled process.
    pub cmdline: Vec<String>,
    /// Wall-clock start of the recording, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// Resolution of the event times in the stream, in nanoseconds (1 in version 1; see
    /// [`format`](mod@crate::profile::format) §1). Event times read back are multiples of it; lifetimes
    /// shorter than it may be finer ([`Header::lifetime_unit_ns`]).
    pub time_unit_ns: u64,
    /// Written by `memprof record`'s collector, a process apart from the program that ends
    /// the file with its end record whatever ends the program (a crash, a SIGKILL): such a
    /// file without its end record was cut because `record` itself stopped
    /// ([`RECORD_STOPPED`]), not because the program did.
    pub collected: bool,
    /// Written by `memprof attach`: the recording began in a process that was already
    /// running, so blocks allocated before it are unknown (their frees are not counted) and
    /// its live heap is what was allocated since the attach and is still held.
    pub attached: bool,
}

impl Header {
    /// Resolution of the lifetimes shorter than one time unit, in nanoseconds: the frees of
    /// a version-4 stream whose unit is coarser than [`LIFETIME_UNIT_NS`](crate::profile::format::LIFETIME_UNIT_NS) carry them
    /// to that unit ([`format`](mod@crate::profile::format) §2c); otherwise the time unit. Lifetimes of a
    /// unit or more are known to the time unit.
    pub fn lifetime_unit_ns(&self) -> u64 {
        if self.version >= 4 && self.time_unit_ns > LIFETIME_UNIT_NS {
            LIFETIME_UNIT_NS
        } else {
            self.time_unit_ns.max(1)
        }
    }
}

/// Why a file that `memprof record`'s collector wrote ([`Header::collected`]) has no end
/// record: the collector stopped before the program ended, so how the program ended is not
/// in the file.
pub const RECORD_STOPPED: &str = "memprof record was killed before the program ended (or its \
     disk filled up, or the system went down); the program's end and exit status were not \
     recorded";

impl Default for Header {
    fn default() -> Self {
        Header {
            version: VERSION,
            interval: crate::config::DEFAULT_INTERVAL as f64,
            depth: crate::config::DEFAULT_DEPTH as u32,
            pid: 0,
            ppid: 0,
            ns_pid: 0,
            executable: String::new(),
            cmdline: Vec::new(),
            start_unix_ns: 0,
            // In memory, times are nanoseconds; a stream says its own unit.
            time_unit_ns: 1,
            collected: false,
            attached: false,
        }
    }
}

/// Events the profiler had to drop, reported so that nothing is lost silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Events that did not fit in the postponed queue, and samples skipped because a signal
    /// handler allocated while its thread was inside the profiler.
    pub events: u64,
    /// Sampled blocks that the live table could not follow (their frees are unseen, or
    /// reported early: see [`crate::session::SessionCounters`]'s field of the same name).
    pub untracked: u64,
    /// Callbacks that panicked (caught; the event was dropped).
    pub callback_panics: u64,
    /// Frees among `events` that the queue kept aside and the consumer replayed: their
    /// blocks ended when they did, as if nothing had been lost (see the engine's queue,
    /// §3). 0 in files of versions that did not record it.
    pub frees_replayed: u64,
    /// Frees among `events` lost for good (the queue's table of lost frees was full): that
    /// many blocks counted live may have ended, at an unknown time, so live figures are an
    /// upper bound by at most this many blocks. 0 in files of versions that did not record it.
    pub frees_unknown: u64,
}

impl Lost {
    /// True when nothing was dropped.
    pub fn is_none(&self) -> bool {
        *self == Lost::default()
    }

    /// True when the numbers are as if nothing had been dropped: every lost event was a free
    /// that was replayed, no block went untracked and no callback panicked.
    pub fn nothing_missing(&self) -> bool {
        self.events == self.frees_replayed && self.untracked == 0 && self.callback_panics == 0
    }

    /// What was dropped and what it does to the numbers, in words (for a report's header,
    /// an HTML page's summary and `memprof record`'s own): e.g. `12 events lost (3 frees
    /// replayed, 2 frees lost for good, 7 other events); live figures may count up to 2
    /// blocks that had ended`, or `3 frees did not fit in the queue and were replayed at
    /// their time` when that is all. Empty when nothing was.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.events > 0 && self.events == self.frees_replayed {
            parts.push(format!(
                "{} frees did not fit in the queue and were replayed at their time",
                self.events
            ));
        } else if self.events > 0 {
            let (r, u) = (self.frees_replayed, self.frees_unknown);
            let other = self.events.saturating_sub(r.saturating_add(u));
            let mut what = Vec::new();
            if r > 0 {
                what.push(format!("{r} frees replayed"));
            }
            if u > 0 {
                what.push(format!("{u} frees lost for good"));
            }
            if other > 0 && !what.is_empty() {
                what.push(format!("{other} other events"));
            }
            let mut s = format!("{} events lost", self.events);
            if !what.is_empty() {
                s.push_str(&format!(" ({})", what.join(", ")));
            }
            parts.push(s);
            if u > 0 {
                parts.push(format!("live figures may count up to {u} blocks that had ended"));
            }
        }
        if self.untracked > 0 {
            parts.push(format!(
                "{} sampled blocks could not be followed to their free",
                self.untracked
            ));
        }
        if self.callback_panics > 0 {
            parts.push(format!("{} callbacks panicked", self.callback_panics));
        }
        parts.join("; ")
    }

    /// The warning of a table's totals line: `12 events lost`, then what it does to the live
    /// figures when a free was lost for good. Empty when the numbers are as if nothing had
    /// been dropped ([`Lost::nothing_missing`]).
    pub fn brief(&self) -> String {
        if self.nothing_missing() {
            return String::new();
        }
        let mut s = format!("{} events lost", self.events);
        if self.frees_unknown > 0 {
            s.push_str(&format!(", up to {} ended blocks counted live", self.frees_unknown));
        }
        if self.untracked > 0 {
            s.push_str(&format!(", {} blocks untracked", self.untracked));
        }
        if self.callback_panics > 0 {
            s.push_str(&format!(", {} callbacks panicked", self.callback_panics));
        }
        s
    }
}

/// How a program ended its recording without an end record, when it said so first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It replaced itself with another program (`exec`).
    Exec,
    /// It called `_exit` (exit handlers never run).
    QuickExit,
}

impl Stopped {
    /// What happened, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Stopped::Exec => "the program replaced itself with another program (exec)",
            Stopped::QuickExit => "the program ended with _exit",
        }
    }
}
