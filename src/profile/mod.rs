//! The profile model: what a recording holds, independent of how it was made.
//!
//! A [`Profile`] is built by the [`Recorder`](crate::Recorder) in process, or read back
//! from a `.mprof` stream ([`format`](mod@format)). Reports read only this model, so a file recorded
//! anywhere (in process, under the preload library, on another machine) is reported the
//! same way.
//!
//! # 1. Tables
//! Call stacks are interned: each distinct stack of return addresses gets a [`StackId`],
//! its index in [`Profile::stacks`]. Samples name their stack by id. Return addresses are
//! raw program counters as captured; [`Profile::symbols`] maps an address to the chain of
//! (possibly inlined) functions at that address, innermost first. An address without
//! symbols is shown as `module+0xoffset` using [`Profile::modules`], or as a bare address.
//!
//! # 2. Estimates
//! A sample with `k` sample points stands for `k × interval` bytes and `k × interval / size`
//! objects (an unbiased estimate: each byte is a sample point with probability
//! 1/interval). With `interval == 1` every allocation is a sample with `k == size`, and the
//! estimates are the exact totals.
//!
//! # 3. Aggregates, not events
//! A profile keeps what reports need, never the events themselves ([`Profile::add`] folds
//! each event in as it is read or recorded), so its memory is O(live sampled blocks +
//! stacks + (stack, size) pairs + GC cycles), whatever the length of the run:
//! - [`Profile::allocated`]: per (stack, size) pair, how many samples and sample points;
//! - [`Profile::live`]: the sampled blocks not freed (yet), per (stack, size) pair (a free
//!   says which pair and when its block was allocated: no reader keeps blocks one by one);
//! - [`Profile::gc_marked`]: per GC cycle, per stack, the sampled blocks the cycle marked:
//!   those allocated before the cycle began and not freed before it ended (an event's time
//!   is taken as the middle of its time unit: exact in version 1, within half a unit in
//!   version 2, see [`format`](mod@format) §1). A cycle is attributed when its record
//!   arrives (the collector reports it right after its sweep), from the blocks live then;
//!   a free that arrives later but happened before the cycle's end takes its block back
//!   out of that cycle;
//! - [`Profile::series`]: the estimated live heap and the bytes allocated and freed over time,
//!   in at most [`SERIES_POINTS`] buckets (their width doubles as the run grows);
//! - [`Profile::peak`]: the largest estimated live heap after any event, and when (in the
//!   exact mode, the true peak of live heap bytes in the order the events were recorded).

pub mod format;
#[cfg(feature = "report")]
pub mod load;
pub mod merge;
#[cfg(feature = "report")]
pub(crate) mod object_file;
pub mod replay;
#[cfg(test)]
mod replay_fuzz;
pub mod site;
pub mod symbolize;
pub mod tree;

use std::collections::HashMap;

/// Index of a stack in [`Profile::stacks`].
pub type StackId = u32;

/// Run-level facts written first in every `.mprof` stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// Format version of the stream this came from ([`format::VERSION`] when written).
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
    /// Path of the profiled executable.
    pub executable: String,
    /// Command line of the profiled process.
    pub cmdline: Vec<String>,
    /// Wall-clock start of the recording, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// Resolution of the event times in the stream, in nanoseconds (1 in version 1; see
    /// [`format`](mod@format) §1). Event times read back are multiples of it; lifetimes
    /// shorter than it may be finer ([`Header::lifetime_unit_ns`]).
    pub time_unit_ns: u64,
    /// Written by `memprof record`'s collector, a process apart from the program that ends
    /// the file with its end record whatever ends the program (a crash, a SIGKILL): such a
    /// file without its end record was cut because `record` itself stopped
    /// ([`RECORD_STOPPED`]), not because the program did.
    pub collected: bool,
}

impl Header {
    /// Resolution of the lifetimes shorter than one time unit, in nanoseconds: the frees of
    /// a version-4 stream whose unit is coarser than [`format::LIFETIME_UNIT_NS`] carry them
    /// to that unit ([`format`](mod@format) §2c); otherwise the time unit. Lifetimes of a
    /// unit or more are known to the time unit.
    pub fn lifetime_unit_ns(&self) -> u64 {
        if self.version >= 4 && self.time_unit_ns > format::LIFETIME_UNIT_NS {
            format::LIFETIME_UNIT_NS
        } else {
            self.time_unit_ns.max(1)
        }
    }
}

/// Why a file that `memprof record`'s collector wrote ([`Header::collected`]) has no end
/// record: the collector stopped before the program ended, so how the program ended is not
/// in the file.
pub const RECORD_STOPPED: &str = "memprof record was killed before the program ended (or the \
     system went down); the program's end and exit status were not recorded";

impl Default for Header {
    fn default() -> Self {
        Header {
            version: format::VERSION,
            interval: crate::config::DEFAULT_INTERVAL as f64,
            depth: crate::config::DEFAULT_DEPTH as u32,
            pid: 0,
            ppid: 0,
            executable: String::new(),
            cmdline: Vec::new(),
            start_unix_ns: 0,
            // In memory, times are nanoseconds; a stream says its own unit.
            time_unit_ns: 1,
            collected: false,
        }
    }
}

/// A loaded object (executable or shared library) of the profiled process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Module {
    /// Path of the file as the loader saw it.
    pub path: String,
    /// Load bias: runtime address minus the address in the file.
    pub base: u64,
    /// Lowest runtime address covered by the module's segments.
    pub start: u64,
    /// One past the highest runtime address covered.
    pub end: u64,
    /// The object's GNU build id, read from its mapped notes (empty when it has none, or in
    /// files written before build ids were recorded). Offline symbolization refuses a file
    /// whose build id differs: it is not the object that ran.
    pub build_id: Vec<u8>,
    /// For an object without a build id: its file's size and modification time (ns since
    /// the epoch) when the run saw it, else 0. Offline symbolization refuses a file that
    /// differs in either.
    pub file_size: u64,
    /// See [`Module::file_size`].
    pub file_mtime_ns: u64,
}

/// One interned call stack. Its label is part of its identity: one site allocating under
/// two tracing spans is two stacks (see [`format`](mod@format) §2b).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stack {
    /// Return addresses, innermost (the allocating frame) first.
    pub frames: Vec<u64>,
    /// True when the real stack was deeper than the configured depth.
    pub truncated: bool,
    /// The label of the allocating thread when the stack was sampled: 0 for none, else
    /// `n` names [`Profile::labels`]`[n - 1]` (the tracing span path, e.g.
    /// `server;handle{endpoint=/upload}`).
    pub label: u32,
}

/// One source-level frame at an address. An address can have several (inlining).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// Demangled function name.
    pub function: String,
    /// Source file, when debug info has it.
    pub file: Option<String>,
    /// Line number, when debug info has it.
    pub line: Option<u32>,
}

/// A sampled allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Unique id of this sample within the run; frees and moves refer to it.
    pub id: u64,
    /// The allocating call stack.
    pub stack: StackId,
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// Small thread number (1 = first thread that allocated after start).
    pub thread: u32,
    /// Address of the block.
    pub addr: u64,
    /// Requested size in bytes.
    pub size: u64,
    /// Number of sample points inside the allocation (k ≥ 1).
    pub k: u64,
}

/// The sampled block `id` was freed. A free names the block it ends by its sample id *and*
/// by what the aggregates need (its stack, size, sample points and allocation time), so
/// that a reader folds it in without remembering every live block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Free {
    /// The sample whose block was freed (0 in version-2 streams, which name a block by the
    /// fields below).
    pub id: u64,
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// The block's allocating stack.
    pub stack: StackId,
    /// The block's requested size (its sample's `size`).
    pub size: u64,
    /// The block's sample points.
    pub k: u64,
    /// When the block was allocated (its sample's `time_ns`).
    pub alloc_ns: u64,
    /// How long the block lived, when known more finely than `time_ns − alloc_ns`: a
    /// version-4 stream's exact mode quantises times to ≈ 1.05 ms but says how long a block
    /// that lived less than that lived, to ≈ 131 µs ([`format`](mod@format) §2c). `None`:
    /// the difference of the two times is the lifetime.
    pub life_ns: Option<u64>,
}

impl Free {
    /// The free, at `time_ns`, of the block of sample `s`.
    pub fn of(s: &Sample, time_ns: u64) -> Free {
        Free {
            id: s.id,
            time_ns,
            stack: s.stack,
            size: s.size,
            k: s.k,
            alloc_ns: s.time_ns,
            life_ns: None,
        }
    }

    /// How long the block lived: [`Free::life_ns`] when set, else from its allocation to
    /// its free (0 when a damaged stream puts the free first).
    pub fn lifetime_ns(&self) -> u64 {
        self.life_ns.unwrap_or(self.time_ns.saturating_sub(self.alloc_ns))
    }
}

/// The sampled block `id` was reallocated in place or moved, keeping its sample (named as
/// a [`Free`] names it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Move {
    /// The sample whose block moved (0 in version-2 streams).
    pub id: u64,
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// New address of the block (0 in version-2 streams).
    pub new_addr: u64,
    /// New size of the block in bytes.
    pub new_size: u64,
    /// The block's allocating stack.
    pub stack: StackId,
    /// The block's size when it was sampled.
    pub size: u64,
    /// The block's sample points.
    pub k: u64,
    /// When the block was allocated.
    pub alloc_ns: u64,
}

impl Move {
    /// The move, at `time_ns`, of the block of sample `s` to a size of `new_size` bytes.
    pub fn of(s: &Sample, time_ns: u64, new_size: u64) -> Move {
        Move {
            id: s.id,
            time_ns,
            new_addr: 0,
            new_size,
            stack: s.stack,
            size: s.size,
            k: s.k,
            alloc_ns: s.time_ns,
        }
    }
}

/// One garbage-collection cycle of a managed heap ([`crate::gc`]), timed by the collector.
/// Times are nanoseconds since the start of the recording, on the samples' clock.
/// `repr(C)`: the preload library's copy of memprof receives it from the program's copy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct GcCycle {
    /// Cycle number within its heap (1-based).
    pub cycle: u64,
    /// When the cycle's first mark slice began.
    pub start_ns: u64,
    /// When its sweep finished.
    pub end_ns: u64,
    /// Time spent marking, summed over slices.
    pub mark_ns: u64,
    /// Number of mark slices.
    pub slices: u64,
    /// The longest mark slice.
    pub longest_slice_ns: u64,
    /// Words scanned by the marker.
    pub words_marked: u64,
    /// `mark_ns / words_marked`: the measured cost of marking one word in this cycle.
    pub ns_per_word: f64,
    /// Time spent sweeping.
    pub sweep_ns: u64,
    /// Heap size in words at the end of the cycle.
    pub heap_words: u64,
    /// Words found live (marked) by the cycle.
    pub live_words: u64,
}

impl GcCycle {
    /// The cycle as 11 words (the float as its bits), for a queue slot's frames.
    pub(crate) fn to_words(self) -> [u64; 11] {
        [
            self.cycle,
            self.start_ns,
            self.end_ns,
            self.mark_ns,
            self.slices,
            self.longest_slice_ns,
            self.words_marked,
            self.ns_per_word.to_bits(),
            self.sweep_ns,
            self.heap_words,
            self.live_words,
        ]
    }

    /// [`GcCycle::to_words`] back, when there are enough words.
    pub(crate) fn from_words(w: &[u64]) -> Option<GcCycle> {
        let w: &[u64; 11] = w.get(..11)?.try_into().ok()?;
        Some(GcCycle {
            cycle: w[0],
            start_ns: w[1],
            end_ns: w[2],
            mark_ns: w[3],
            slices: w[4],
            longest_slice_ns: w[5],
            words_marked: w[6],
            ns_per_word: f64::from_bits(w[7]),
            sweep_ns: w[8],
            heap_words: w[9],
            live_words: w[10],
        })
    }
}

/// Events the profiler had to drop, reported so that nothing is lost silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Events that did not fit in the postponed queue, and samples skipped because a signal
    /// handler allocated while its thread was inside the profiler.
    pub events: u64,
    /// Sampled blocks that the live table could not follow (their frees are unseen, or
    /// reported early: see [`crate::session::Stats`]'s field of the same name).
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

/// The hasher of the aggregates' maps: their keys are ids and sizes the profiler made, and
/// one multiply hashes them where SipHash took a third of the reading time. (A file crafted
/// to collide could make reading it slow, never wrong.)
pub type IdHash = crate::sys::hash::FastHash;
pub use crate::sys::hash::IdHasher;

/// The sample points a sample of `size` bytes usually has at `interval`: its size in the
/// exact mode, else 1. The format codes `k` as its difference from this, and a
/// [`Recorder`](crate::Recorder)'s token keeps it the same way.
pub(crate) fn expected_k(interval: f64, size: u64) -> u64 {
    if interval == 1.0 {
        size
    } else {
        1
    }
}

/// Totals of the samples of one (stack, size) pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Samples counted.
    pub samples: u64,
    /// Their sample points (Σ k).
    pub k: u64,
}

/// What one GC cycle marked of one stack's sampled blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GcMarked {
    /// Samples marked.
    pub samples: u64,
    /// Their estimated bytes.
    pub bytes: f64,
    /// Their estimated objects.
    pub objects: f64,
}

/// How many events went into a profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Alloc samples.
    pub samples: u64,
    /// Frees of sampled blocks.
    pub frees: u64,
    /// Reallocations of sampled blocks that kept their sample.
    pub moves: u64,
    /// Frees and moves of samples that were never recorded (dropped).
    pub orphans: u64,
}

/// The live blocks per (stack, size) and allocation time unit: an index [`Profile::add`]
/// keeps for GC attribution and to tell a free that names no live block (opaque).
#[derive(Clone, Debug, Default)]
pub struct LiveByTime {
    index: HashMap<(StackId, u64, u64), Totals, IdHash>,
    /// Entries emptied since the last sweep.
    empty: usize,
}

/// The default threshold of a short-lived block: freed less than 1 ms after it was
/// allocated (`--short-lived`). Scratch buffers, temporary strings and per-iteration
/// objects (heaptrack's "temporary allocations") die within microseconds, while what a
/// request, a frame or a batch holds lives for milliseconds or more. The exact mode's event
/// times are coarser than that ([`format::TIME_UNIT_EXACT_NS`] ≈ 1.05 ms), but its frees
/// of blocks younger than one unit carry their lifetime to ≈ 131 µs
/// ([`format::LIFETIME_UNIT_NS`]), so the threshold holds there too.
pub const DEFAULT_SHORT_LIVED_NS: u64 = 1_000_000;

/// Buckets of a lifetime histogram per octave of nanoseconds (relative width 2^(1/4) − 1 ≈
/// 19 %).
const LIFETIME_STEPS: u32 = 4;

/// The histogram bucket of a lifetime of `ns` nanoseconds: 0 for 0, then
/// 4 buckets per power of two.
pub fn lifetime_bucket(ns: u64) -> u16 {
    if ns == 0 {
        return 0;
    }
    let octave = 63 - ns.leading_zeros();
    let step = if octave >= 2 { (ns >> (octave - 2)) & 3 } else { (ns << (2 - octave)) & 3 };
    (1 + octave * LIFETIME_STEPS + step as u32) as u16
}

/// The lifetimes of bucket `b` of [`lifetime_bucket`]: `[low, high)` in nanoseconds.
pub fn lifetime_bucket_range(b: u16) -> (u64, u64) {
    if b == 0 {
        return (0, 1);
    }
    let b = u32::from(b) - 1;
    let (octave, step) = (b / LIFETIME_STEPS, u64::from(b % LIFETIME_STEPS));
    let low = |octave: u32, step: u64| -> u64 {
        if octave >= 2 {
            (4 + step) << (octave - 2)
        } else {
            (4 + step) >> (2 - octave)
        }
    };
    let lo = low(octave, step);
    let hi = if step + 1 < 4 { low(octave, step + 1) } else { low(octave + 1, 0) };
    (lo, hi.max(lo + 1))
}

/// How long the sampled blocks lived: every free folded in knows when its block was
/// allocated ([`Free::alloc_ns`]), so each freed sampled block has a lifetime
/// ([`Free::lifetime_ns`]: to ≈ 131 µs below the stream's time unit, to the unit above it,
/// see [`Header::lifetime_unit_ns`]). Blocks still live have none yet.
#[derive(Clone, Debug)]
pub struct Lifetimes {
    /// A freed block is short-lived when its lifetime is below this
    /// ([`DEFAULT_SHORT_LIVED_NS`] unless the reader asked for another).
    pub short_lived_ns: u64,
    /// The short-lived blocks, per (stack, size).
    pub short: HashMap<(StackId, u64), Totals, IdHash>,
    /// The freed blocks per (stack, [`lifetime_bucket`] of their lifetime).
    pub histogram: HashMap<(StackId, u16), Totals, IdHash>,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes::with_threshold(DEFAULT_SHORT_LIVED_NS)
    }
}

impl Lifetimes {
    /// Empty, with short-lived meaning a lifetime below `short_lived_ns`.
    pub fn with_threshold(short_lived_ns: u64) -> Self {
        Lifetimes { short_lived_ns, short: HashMap::default(), histogram: HashMap::default() }
    }

    fn add(&mut self, f: &Free) {
        let life = f.lifetime_ns();
        let add = |t: &mut Totals| {
            t.samples += 1;
            t.k = t.k.wrapping_add(f.k);
        };
        if life < self.short_lived_ns {
            add(self.short.entry((f.stack, f.size)).or_default());
        }
        add(self.histogram.entry((f.stack, lifetime_bucket(life))).or_default());
    }
}

/// What changed in [`Profile::live`] since the peak, so that the live set at the peak is
/// known without a second pass: `live at the peak = live now − changes since`. A new peak
/// makes every change stale at once (a generation number, not a clear: a growing heap
/// makes a new peak at every event). Entries: at most one per (stack, size) pair.
#[derive(Clone, Debug, Default)]
pub struct SincePeak {
    /// Generation of the current peak.
    generation: u64,
    /// Per pair: the generation of its changes, and their (wrapping) sum.
    changes: HashMap<(StackId, u64), (u64, Totals), IdHash>,
    /// False for a merged profile (each process peaks on its own clock): no live set at
    /// the peak.
    unknown: bool,
}

impl SincePeak {
    fn change(&mut self, pair: (StackId, u64), samples: u64, k: u64) {
        let generation = self.generation;
        let (g, t) = self.changes.entry(pair).or_insert((generation, Totals::default()));
        if *g != generation {
            *g = generation;
            *t = Totals::default();
        }
        t.samples = t.samples.wrapping_add(samples);
        t.k = t.k.wrapping_add(k);
    }
}

/// Most buckets in a [`Series`].
pub const SERIES_POINTS: usize = 1024;

/// One bucket of a [`Series`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SeriesPoint {
    /// Estimated bytes allocated in the bucket.
    pub alloc_bytes: f64,
    /// Estimated bytes freed in the bucket.
    pub freed_bytes: f64,
    /// The largest estimated live heap after an event of the bucket (0 with no event).
    pub live_max: f64,
    /// The estimated live heap after the bucket's last event in stream order.
    pub live_end: f64,
    /// Events in the bucket.
    pub events: u64,
}

/// The heap over time in at most [`SERIES_POINTS`] buckets of `bucket_ns` nanoseconds
/// each, bucket `i` covering `[i·bucket_ns, (i+1)·bucket_ns)` since the start of the
/// recording. When an event falls past the last bucket, the width doubles and buckets are
/// merged in pairs, so the series stays the same size however long the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Width of a bucket.
    pub bucket_ns: u64,
    /// The buckets, from the start of the recording.
    pub points: Vec<SeriesPoint>,
}

impl Default for Series {
    fn default() -> Self {
        Series { bucket_ns: 1 << 20, points: Vec::new() }
    }
}

impl Series {
    /// The bucket of time `t`, widening the buckets as needed.
    fn bucket(&mut self, t: u64) -> &mut SeriesPoint {
        while t / self.bucket_ns >= SERIES_POINTS as u64 {
            self.widen();
        }
        let i = (t / self.bucket_ns) as usize;
        if self.points.len() <= i {
            let last = self.points.last().map_or(0.0, |p| p.live_end);
            self.points.resize(i + 1, SeriesPoint { live_end: last, ..SeriesPoint::default() });
        }
        &mut self.points[i]
    }

    fn widen(&mut self) {
        self.bucket_ns = self.bucket_ns.saturating_mul(2);
        let merged = self
            .points
            .chunks(2)
            .map(|c| {
                let mut p = c[0];
                if let Some(q) = c.get(1) {
                    p.alloc_bytes += q.alloc_bytes;
                    p.freed_bytes += q.freed_bytes;
                    p.live_max = p.live_max.max(q.live_max);
                    p.live_end = q.live_end;
                    p.events += q.events;
                }
                p
            })
            .collect();
        self.points = merged;
    }

    /// Adds `other` (a series whose time 0 is `offset` ns into this one's), bucket by
    /// bucket: allocated and freed bytes add up; live maxima add up too (an upper bound).
    pub(crate) fn add(&mut self, other: &Series, offset: u64) {
        while self.bucket_ns < other.bucket_ns {
            self.widen();
        }
        let end =
            offset.saturating_add((other.points.len() as u64).saturating_mul(other.bucket_ns));
        while end / self.bucket_ns >= SERIES_POINTS as u64 {
            self.widen();
        }
        let mut folded: std::collections::BTreeMap<usize, SeriesPoint> = Default::default();
        for (j, q) in other.points.iter().enumerate() {
            let i = (offset.saturating_add((j as u64).saturating_mul(other.bucket_ns))
                / self.bucket_ns) as usize;
            let p = folded.entry(i).or_default();
            p.alloc_bytes += q.alloc_bytes;
            p.freed_bytes += q.freed_bytes;
            p.live_max = p.live_max.max(q.live_max);
            p.live_end = q.live_end;
            p.events += q.events;
        }
        for (i, q) in folded {
            let p = self.bucket(i as u64 * self.bucket_ns);
            p.alloc_bytes += q.alloc_bytes;
            p.freed_bytes += q.freed_bytes;
            p.live_max += q.live_max;
            p.live_end += q.live_end;
            p.events += q.events;
        }
    }

    /// The bucket with the largest live maximum (the first of equals), as a [`Peak`] at the
    /// bucket's start.
    pub fn peak(&self) -> Peak {
        let mut best = Peak::default();
        for (i, p) in self.points.iter().enumerate() {
            if p.live_max > best.bytes {
                best = Peak { bytes: p.live_max, time_ns: i as u64 * self.bucket_ns };
            }
        }
        best
    }

    fn record(&mut self, t: u64, alloc: f64, freed: f64, live: f64) {
        let p = self.bucket(t);
        p.alloc_bytes += alloc;
        p.freed_bytes += freed;
        p.live_max = p.live_max.max(live);
        p.live_end = live;
        p.events += 1;
    }
}

/// The largest estimated live heap seen, and when.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Peak {
    /// Estimated live bytes at the peak.
    pub bytes: f64,
    /// When, in nanoseconds since the start of the recording.
    pub time_ns: u64,
}

/// A whole recording, as aggregates (see the [module documentation](self) §3).
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Run-level facts.
    pub header: Header,
    /// Loaded modules, for symbolization and `module+offset` names.
    pub modules: Vec<Module>,
    /// Interned stacks; a [`StackId`] indexes this.
    pub stacks: Vec<Stack>,
    /// The labels stacks name ([`Stack::label`] `n` is `labels[n - 1]`): span paths whose
    /// segments are separated by `;`, outermost first.
    pub labels: Vec<String>,
    /// Symbols by return address, innermost inline frame first.
    pub symbols: HashMap<u64, Vec<Symbol>>,
    /// Every sample, totalled per (stack, size).
    pub allocated: HashMap<(StackId, u64), Totals, IdHash>,
    /// The sampled blocks not freed (yet), totalled per (stack, size); pairs whose blocks
    /// were all freed may stay with zero totals.
    pub live: HashMap<(StackId, u64), Totals, IdHash>,
    /// The same, also by allocation time (in the stream's time units): what GC
    /// attribution needs, and what tells a free that names no live block (an orphan).
    /// Never more entries than live blocks, and far fewer when many blocks of one site are
    /// allocated within one unit.
    pub live_by_time: LiveByTime,
    /// Garbage-collection cycles, in the order they were recorded.
    pub gc_cycles: Vec<GcCycle>,
    /// For each of `gc_cycles`, what it marked of each stack's sampled blocks.
    pub gc_marked: Vec<HashMap<StackId, GcMarked, IdHash>>,
    /// The heap over time.
    pub series: Series,
    /// The largest estimated live heap.
    pub peak: Peak,
    /// What changed in `live` since the peak ([`Profile::peak_live`]).
    pub since_peak: SincePeak,
    /// How long the freed sampled blocks lived.
    pub lifetimes: Lifetimes,
    /// Set when the aggregates are those of a range of the recording rather than all of it
    /// ([`Profile::restrict`]).
    pub window: Option<replay::Window>,
    /// The latest event time, in nanoseconds since the start of the recording.
    pub end_ns: u64,
    /// Events folded in.
    pub counts: Counts,
    /// Estimated live bytes now (Σ k × interval over `live`).
    pub live_bytes: f64,
    /// Dropped-event counts.
    pub lost: Lost,
    /// Problems met while reading (e.g. "file was cut after 1234 bytes"); empty when clean.
    pub warnings: Vec<String>,
    /// True when the stream ended with its end record.
    pub complete: bool,
    /// Set when the stream ends, without its end record, right after the program said why
    /// (the preload library's `exec` and `_exit` hooks): the file is whole, not cut by a
    /// crash.
    pub stopped: Option<Stopped>,
    /// The user's expressions for frames that are allocation plumbing (`--site-skip`),
    /// which every report's naming of sites follows ([`site`]). Not part of the recording.
    pub site_skip: site::SiteSkip,
}

impl Profile {
    /// The text of a label ([`Stack::label`]): `None` for 0 and for an id the table lacks.
    pub fn label_text(&self, label: u32) -> Option<&str> {
        let i = usize::try_from(label).ok()?.checked_sub(1)?;
        self.labels.get(i).map(String::as_str)
    }

    /// The label text of stack `id`, if it has one.
    pub fn stack_label(&self, id: StackId) -> Option<&str> {
        self.label_text(self.stacks.get(id as usize)?.label)
    }

    /// The id of label `text`, added to [`Profile::labels`] when new (a linear search: a
    /// profile has few labels; for building and merging profiles, not per event).
    pub fn intern_label(&mut self, text: &str) -> u32 {
        match self.labels.iter().position(|l| l == text) {
            Some(i) => i as u32 + 1,
            None => {
                self.labels.push(text.to_owned());
                self.labels.len() as u32
            }
        }
    }

    /// Estimated bytes `k` sample points stand for: `k × interval`.
    pub fn estimated_bytes(&self, k: u64) -> f64 {
        k as f64 * self.header.interval
    }

    /// Estimated number of objects `k` sample points in allocations of `size` bytes stand
    /// for: `k × interval / size` (exactly 1 per sample in exact mode, where `k == size`).
    pub fn estimated_objects(&self, k: u64, size: u64) -> f64 {
        if size == 0 {
            return 0.0;
        }
        // An allocation of `size` bytes is sampled with probability 1-(1-1/R)^size; the
        // unbiased Horvitz-Thompson count weights each sample by the inverse of that. With
        // k points we use k·R/size, which is unbiased for the count as well (E[k] = size/R).
        k as f64 * self.header.interval / size as f64
    }

    /// Folds one event into the aggregates.
    pub fn add(&mut self, e: &format::Event) {
        match e {
            format::Event::Sample(s) => self.add_sample(s),
            format::Event::Free(f) => self.add_free(f),
            format::Event::Move(m) => self.add_move(m),
            format::Event::GcCycle(c) => self.add_gc_cycle(c),
        }
    }

    /// Folds in an alloc sample.
    pub fn add_sample(&mut self, s: &Sample) {
        self.counts.samples += 1;
        // Sums wrap rather than panic: a damaged or hostile file may name any k.
        let t = self.allocated.entry((s.stack, s.size)).or_default();
        t.samples += 1;
        t.k = t.k.wrapping_add(s.k);
        let t = self.live.entry((s.stack, s.size)).or_default();
        t.samples += 1;
        t.k = t.k.wrapping_add(s.k);
        let unit = s.time_ns / self.header.time_unit_ns.max(1);
        match self.live_by_time.index.entry((s.stack, s.size, unit)) {
            std::collections::hash_map::Entry::Occupied(mut o) => {
                let t = o.get_mut();
                if t.samples == 0 {
                    // Refilling an entry emptied earlier (not swept yet).
                    self.live_by_time.empty = self.live_by_time.empty.saturating_sub(1);
                }
                t.samples += 1;
                t.k = t.k.wrapping_add(s.k);
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Totals { samples: 1, k: s.k });
            }
        }
        let bytes = self.estimated_bytes(s.k);
        self.live_bytes += bytes;
        if !self.note(s.time_ns, bytes, 0.0) {
            self.since_peak.change((s.stack, s.size), 1, s.k);
        }
    }

    /// Takes one block of `(stack, size)` allocated at `alloc_ns` with `k` points out of
    /// the live sets; false when there is none (an orphan).
    fn unlive(&mut self, stack: StackId, size: u64, k: u64, alloc_ns: u64) -> bool {
        let unit = alloc_ns / self.header.time_unit_ns.max(1);
        let key = (stack, size, unit);
        let Some(t) = self.live_by_time.index.get_mut(&key) else {
            return false;
        };
        if t.samples == 0 || t.k < k {
            return false;
        }
        t.samples -= 1;
        t.k -= k;
        if t.samples == 0 {
            // Emptied entries are swept in bulk: a block that dies young empties the entry
            // its allocation just made, and removing it each time cost a rehash per free.
            let l = &mut self.live_by_time;
            l.empty += 1;
            if l.empty > 4096 && l.empty > l.index.len() / 2 {
                l.index.retain(|_, t| t.samples > 0);
                l.empty = 0;
            }
        }
        // Emptied pairs stay (as many as the pairs; reports skip them).
        if let Some(t) = self.live.get_mut(&(stack, size)) {
            t.samples = t.samples.saturating_sub(1);
            t.k = t.k.wrapping_sub(k);
        }
        true
    }

    /// Folds in a free; a free of a block not live is counted as an orphan.
    pub fn add_free(&mut self, f: &Free) {
        if !self.unlive(f.stack, f.size, f.k, f.alloc_ns) {
            self.counts.orphans += 1;
            return;
        }
        self.counts.frees += 1;
        self.lifetimes.add(f);
        self.since_peak.change((f.stack, f.size), 1u64.wrapping_neg(), f.k.wrapping_neg());
        let bytes = self.estimated_bytes(f.k);
        self.live_bytes -= bytes;
        // Cycles already attributed that ended after this free: the block was dead by then.
        let half = self.header.time_unit_ns / 2;
        let death = f.time_ns.saturating_add(half);
        for (c, marked) in self.gc_cycles.iter().zip(&mut self.gc_marked).rev() {
            if c.end_ns < death {
                break;
            }
            if f.alloc_ns.saturating_add(half) < c.start_ns {
                if let Some(m) = marked.get_mut(&f.stack) {
                    m.samples = m.samples.saturating_sub(1);
                    m.bytes -= bytes;
                    m.objects -= f.k as f64 * self.header.interval / f.size.max(1) as f64;
                }
            }
        }
        self.note(f.time_ns, 0.0, bytes);
    }

    /// Folds in a move; a move of a block not live is counted as an orphan.
    pub fn add_move(&mut self, m: &Move) {
        let unit = m.alloc_ns / self.header.time_unit_ns.max(1);
        let live = self.live_by_time.index.get(&(m.stack, m.size, unit));
        if live.is_some_and(|t| t.samples > 0 && t.k >= m.k) {
            self.counts.moves += 1;
        } else {
            self.counts.orphans += 1;
        }
    }

    /// Folds in a GC cycle: it marked the live sampled blocks allocated before it began.
    pub fn add_gc_cycle(&mut self, c: &GcCycle) {
        let unit = self.header.time_unit_ns.max(1);
        let half = unit / 2;
        let interval = self.header.interval;
        let mut marked: HashMap<StackId, GcMarked, IdHash> = HashMap::default();
        for (&(stack, size, u), t) in &self.live_by_time.index {
            if t.samples > 0 && u.saturating_mul(unit).saturating_add(half) < c.start_ns {
                let m = marked.entry(stack).or_default();
                m.samples += t.samples;
                m.bytes += t.k as f64 * interval;
                m.objects += t.k as f64 * interval / size.max(1) as f64;
            }
        }
        self.gc_cycles.push(*c);
        self.gc_marked.push(marked);
    }

    /// Notes an event at `t` in the series and the peak; true when it made a new peak.
    fn note(&mut self, t: u64, alloc: f64, freed: f64) -> bool {
        self.end_ns = self.end_ns.max(t);
        self.series.record(t, alloc, freed, self.live_bytes);
        if self.live_bytes > self.peak.bytes {
            self.peak = Peak { bytes: self.live_bytes, time_ns: t };
            self.since_peak.generation += 1;
            return true;
        }
        false
    }

    /// True when [`Profile::peak_live`] is known (not for a merged profile).
    pub fn since_peak_known(&self) -> bool {
        !self.since_peak.unknown
    }

    /// The sampled blocks live at [`Profile::peak`], per (stack, size) as in
    /// [`Profile::live`] (pairs with none left out): the live set right after the event that
    /// made the peak, in stream order, so in the exact mode the program's true live heap at
    /// its peak. `None` for a merged profile (its processes peak each on their own).
    pub fn peak_live(&self) -> Option<HashMap<(StackId, u64), Totals, IdHash>> {
        let sp = &self.since_peak;
        if sp.unknown {
            return None;
        }
        let mut out: HashMap<(StackId, u64), Totals, IdHash> = HashMap::default();
        for (&pair, t) in &self.live {
            let mut t = *t;
            if let Some((g, d)) = sp.changes.get(&pair) {
                if *g == sp.generation {
                    t.samples = t.samples.wrapping_sub(d.samples);
                    t.k = t.k.wrapping_sub(d.k);
                }
            }
            if t.samples > 0 {
                out.insert(pair, t);
            }
        }
        Some(out)
    }

    /// Moves the aggregates of `agg` (folded in by another thread) into this profile, whose
    /// tables were read.
    pub(crate) fn take_aggregates(&mut self, agg: Profile) {
        self.allocated = agg.allocated;
        self.live = agg.live;
        self.live_by_time = agg.live_by_time;
        self.gc_cycles = agg.gc_cycles;
        self.gc_marked = agg.gc_marked;
        self.series = agg.series;
        self.peak = agg.peak;
        self.end_ns = agg.end_ns;
        self.counts = agg.counts;
        self.live_bytes = agg.live_bytes;
        self.lifetimes = agg.lifetimes;
        self.since_peak = agg.since_peak;
    }

    /// Copies the aggregates of `from` into this profile (a mirror of a profile still being
    /// read or recorded), reusing this one's allocations: all that [`Profile::take_aggregates`]
    /// moves but the GC attribution index ([`Profile::live_by_time`]), which no report reads.
    pub(crate) fn clone_aggregates_from(&mut self, from: &Profile) {
        self.allocated.clone_from(&from.allocated);
        self.live.clone_from(&from.live);
        self.gc_cycles.clone_from(&from.gc_cycles);
        self.gc_marked.clone_from(&from.gc_marked);
        self.series.clone_from(&from.series);
        self.peak = from.peak;
        self.since_peak.clone_from(&from.since_peak);
        self.lifetimes.clone_from(&from.lifetimes);
        self.end_ns = from.end_ns;
        self.counts = from.counts;
        self.live_bytes = from.live_bytes;
    }

    /// Adds a warning for the orphans counted so far (after reading a stream).
    pub(crate) fn note_orphans(&mut self) {
        if self.counts.orphans > 0 {
            self.warnings.push(format!(
                "ignored {} frees or moves of samples that were never recorded",
                self.counts.orphans
            ));
        }
    }

    /// A profile with the tables of `self` (header, modules, stacks, symbols) and the
    /// events folded in: for tests and tools that build a recording by hand.
    pub fn with_events<'a>(mut self, events: impl IntoIterator<Item = &'a format::Event>) -> Self {
        for e in events {
            self.add(e);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetime_buckets_cover_every_lifetime_once() {
        let mut last = 0;
        for ns in (0..5000u64).chain([1 << 20, (1 << 20) + 1, 3_000_000_000, u64::MAX / 2]) {
            let b = lifetime_bucket(ns);
            let (lo, hi) = lifetime_bucket_range(b);
            assert!(lo <= ns && ns < hi, "{ns}: bucket {b} = [{lo}, {hi})");
            if ns < 5000 {
                assert!(b >= last, "buckets grow with the lifetime");
                last = b;
            }
        }
        // Within an octave the buckets are a quarter of it wide.
        assert_eq!(lifetime_bucket_range(lifetime_bucket(1 << 20)), (1 << 20, 5 << 18));
    }

    #[test]
    fn frees_sort_lifetimes() {
        let mut p = Profile::default();
        let s = |id, t| Sample { id, stack: 0, time_ns: t, thread: 1, addr: 0, size: 10, k: 10 };
        let (a, b) = (s(1, 0), s(2, 0));
        p.add_sample(&a);
        p.add_sample(&b);
        p.add_free(&Free::of(&a, 999_999));
        p.add_free(&Free::of(&b, 1_000_000));
        assert_eq!(p.lifetimes.short[&(0, 10)], Totals { samples: 1, k: 10 });
        assert_eq!(p.lifetimes.histogram.values().map(|t| t.samples).sum::<u64>(), 2);
    }
}
