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

pub mod format;
#[cfg(feature = "report")]
pub mod load;
pub mod merge;
pub mod symbolize;

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
    /// Path of the profiled executable.
    pub executable: String,
    /// Command line of the profiled process.
    pub cmdline: Vec<String>,
    /// Wall-clock start of the recording, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
}

impl Default for Header {
    fn default() -> Self {
        Header {
            version: format::VERSION,
            interval: crate::config::DEFAULT_INTERVAL as f64,
            depth: crate::config::DEFAULT_DEPTH as u32,
            pid: 0,
            executable: String::new(),
            cmdline: Vec::new(),
            start_unix_ns: 0,
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

/// One interned call stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stack {
    /// Return addresses, innermost (the allocating frame) first.
    pub frames: Vec<u64>,
    /// True when the real stack was deeper than the configured depth.
    pub truncated: bool,
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

/// The sampled block `id` was freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Free {
    /// The sample whose block was freed.
    pub id: u64,
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
}

/// The sampled block `id` was reallocated in place or moved, keeping its sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// The sample whose block moved.
    pub id: u64,
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// New address of the block.
    pub new_addr: u64,
    /// New size of the block in bytes.
    pub new_size: u64,
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

/// Events the profiler had to drop, reported so that nothing is lost silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Events that did not fit in the postponed queue.
    pub events: u64,
    /// Sampled blocks that could not be entered in the live table (their frees are unseen).
    pub untracked: u64,
    /// Callbacks that panicked (caught; the event was dropped).
    pub callback_panics: u64,
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

/// A whole recording.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Run-level facts.
    pub header: Header,
    /// Loaded modules, for symbolization and `module+offset` names.
    pub modules: Vec<Module>,
    /// Interned stacks; a [`StackId`] indexes this.
    pub stacks: Vec<Stack>,
    /// Symbols by return address, innermost inline frame first.
    pub symbols: HashMap<u64, Vec<Symbol>>,
    /// Alloc samples in the order they were recorded.
    pub samples: Vec<Sample>,
    /// Frees of sampled blocks.
    pub frees: Vec<Free>,
    /// Reallocations of sampled blocks that kept their sample.
    pub moves: Vec<Move>,
    /// Garbage-collection cycles, in time order.
    pub gc_cycles: Vec<GcCycle>,
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
}

impl Profile {
    /// Estimated bytes a sample stands for: `k × interval`.
    pub fn estimated_bytes(&self, s: &Sample) -> f64 {
        s.k as f64 * self.header.interval
    }

    /// Estimated number of objects a sample stands for: `k × interval / size`
    /// (exactly 1 per sample in exact mode, where `k == size`).
    pub fn estimated_objects(&self, s: &Sample) -> f64 {
        if s.size == 0 {
            return 0.0;
        }
        // An allocation of `size` bytes is sampled with probability 1-(1-1/R)^size; the
        // unbiased Horvitz-Thompson count weights each sample by the inverse of that. With
        // k points we use k·R/size, which is unbiased for the count as well (E[k] = size/R).
        s.k as f64 * self.header.interval / s.size as f64
    }

    /// Ids of samples whose blocks were never freed (still live at the end of the record).
    pub fn live_ids(&self) -> std::collections::HashSet<u64> {
        let mut live: std::collections::HashSet<u64> = self.samples.iter().map(|s| s.id).collect();
        for f in &self.frees {
            live.remove(&f.id);
        }
        live
    }
}
