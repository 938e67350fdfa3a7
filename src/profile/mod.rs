//! The profile model: what a recording holds, independent of how it was made.
//!
//! A [`Profile`] is built by the [`Recorder`](crate::session::recorder::Recorder) in process, or read back
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
//! - [`Profile::peak`]: in the exact mode, the true peak of live heap bytes (in the order
//!   the events were recorded) and when; sampled, the *cross-fitted* peak: each sampled
//!   block's points split into two halves A and B (`aggregate::split_points`: fair coins
//!   seeded by what its sample and its free both name), each half's live points followed
//!   apart, `t_A` and `t_B` the moments each half is largest, and the peak
//!   `R·(K_B(t_A) + K_A(t_B))`: each moment measured by the half that did not choose it,
//!   unbiased for the mean of the true heap at the two moments (`report::confidence` §1
//!   derives it and its interval). The largest live estimate, a maximum of noise, is
//!   biased upward; the series keeps it per bucket ([`SeriesPoint::live_max`]);
//! - [`Profile::peak_live`]: the live set at the peak, per (stack, size): exact; sampled,
//!   each pair's share of the cross-fitted peak (half B's points of it live at `t_A`, half
//!   A's at `t_B`), the shares summing to the peak. Both kept without a second pass: the
//!   changes since each moment (`SincePeak`, one for the exact peak, one for each of
//!   `t_A` and `t_B`), and half A's live points per pair (`Halves`).
//!
//! # 4. Files
//! `tables.rs` (modules, stacks, symbols), `header.rs` (the run: header, losses, an early
//! stop), `events.rs` (what is folded in), `aggregate.rs`, `lifetime.rs` and `series.rs`
//! (what it is folded into), `fold.rs` (the folding: live sets, lifetimes, GC attribution,
//! the series and the peak), `pairs.rs` (the per-pair aggregates in vectors, as a
//! recorder folds them); this file holds [`Profile`] and its invariants.

#[cfg(feature = "report")]
pub(crate) mod allocator;
#[cfg(feature = "report")]
pub(crate) mod dwarf_units;
pub mod format;
mod frame;
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

pub(crate) use frame::is_python_word;

mod aggregate;
mod events;
mod fold;
mod header;
mod lifetime;
mod pairs;
mod series;
mod tables;
pub(crate) mod timeline;

use std::collections::HashMap;

pub use aggregate::{split_points, Counts, GcMarked, IdHash, IdHasher, SymbolHash, Totals};
pub(crate) use aggregate::{Halves, LiveByTime, SincePeak};
pub(crate) use events::expected_k;
pub use events::{Ended, EndedHow, Free, GcCycle, Move, Resident, ResidentSplit, Sample};
pub use header::{Header, Lost, Stopped, RECORD_STOPPED};
pub use lifetime::{lifetime_bucket, lifetime_bucket_range, Lifetimes, DEFAULT_SHORT_LIVED_NS};
pub use series::{Peak, Series, SeriesPoint, SERIES_POINTS};
pub use tables::{Module, Stack, StackId, Symbol};

/// A whole recording, as aggregates (see the [module documentation](self) §3).
///
/// # Invariants
/// [`Profile::add`] (and the reader, the recorder and [`merge`], which fold through it or
/// keep the same sums) keeps these true; code that writes the fields directly must too:
/// - a [`StackId`] in any aggregate indexes [`Profile::stacks`], and a nonzero
///   [`Stack::label`] `n` names `labels[n - 1]`;
/// - [`Profile::live`] holds, per (stack, size), the samples folded in minus those freed
///   (its index by allocation time, kept with it, sums to the same), so each of its
///   totals is at most [`Profile::allocated`]'s for the pair;
/// - [`Profile::live_bytes`] is Σ k × interval over [`Profile::live`];
/// - [`Profile::gc_marked`] has one entry per [`Profile::gc_cycles`], in the same order;
/// - [`Profile::counts`] counts every event folded in, and [`Profile::end_ns`] is the
///   latest of their times;
/// - [`Profile::peak`] is, in the exact mode, the largest [`Profile::live_bytes`] after any
///   event; sampled, `interval × (K_B(t_A) + K_A(t_B))` (§3), which the `k`s of
///   [`Profile::peak_live`] sum to; for a merged profile, the largest of the summed series
///   (an upper bound); and [`Profile::series`] has at most [`SERIES_POINTS`] buckets.
///
/// The struct is `#[non_exhaustive]`: a profile is made with [`Profile::default`], then
/// [`Profile::with_events`] or [`Profile::add`], never by a struct expression outside the
/// crate, so fields can be added without breaking callers.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
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
    pub symbols: HashMap<u64, Vec<Symbol>, SymbolHash>,
    /// Every sample, totalled per (stack, size).
    pub allocated: HashMap<(StackId, u64), Totals, IdHash>,
    /// The sampled blocks not freed (yet), totalled per (stack, size); pairs whose blocks
    /// were all freed may stay with zero totals.
    pub live: HashMap<(StackId, u64), Totals, IdHash>,
    /// The same, also by allocation time (in the stream's time units): what GC
    /// attribution needs, and what tells a free that names no live block (an orphan).
    /// Never more entries than live blocks, and far fewer when many blocks of one site are
    /// allocated within one unit.
    pub(crate) live_by_time: LiveByTime,
    /// Garbage-collection cycles, in the order they were recorded.
    pub gc_cycles: Vec<GcCycle>,
    /// The process's resident memory over the run, in the order it was read (`memprof
    /// record`'s collector reads it every `RESIDENT_EVERY_MS` ms;
    /// empty for other recordings and for a merged profile).
    pub resident: Vec<Resident>,
    /// The process's resident memory by kind of mapping, beside the live heap, in the
    /// order it was read (`memprof record`'s collector reads `/proc/PID/smaps` now and
    /// then: `SPLIT_COST_SHARE`); empty for other recordings and for a merged profile.
    pub splits: Vec<ResidentSplit>,
    /// For each of `gc_cycles`, what it marked of each stack's sampled blocks.
    pub gc_marked: Vec<HashMap<StackId, GcMarked, IdHash>>,
    /// The heap over time.
    pub series: Series,
    /// The peak of the live heap: exact, or the cross-fitted estimate (§3).
    pub peak: Peak,
    /// What changed in `live` since the peak ([`Profile::peak_live`]; the exact mode).
    pub(crate) since_peak: SincePeak,
    /// The halves of a sampled profile's points, their peaks and the live sets there
    /// (§3: the cross-fitted peak).
    pub(crate) halves: Halves,
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
    /// Notes that qualify the numbers, kept in the file by `memprof record` and `attach`
    /// (a runtime whose heap is not malloc's, programs started unprofiled, an allocator out
    /// of reach): shown above the top table, in the JSON and on the HTML page.
    pub notes: Vec<String>,
    /// True when the stream ended with its end record.
    pub complete: bool,
    /// Set when the stream ends, without its end record, right after the program said why
    /// (the preload library's `exec` and `_exit` hooks): the file is whole, not cut by a
    /// crash.
    pub stopped: Option<Stopped>,
    /// How the process ended, when `memprof record` learned it (for a merged profile, the
    /// first process's).
    pub ended: Option<Ended>,
    /// The user's expressions for frames that are allocation plumbing (`--site-skip`),
    /// which every report's naming of sites follows ([`site`]). Not part of the recording.
    pub site_skip: site::SiteSkip,
    /// The heap over time by stack, folded in when asked for ([`Profile::keep_timeline`]):
    /// what the HTML page reads.
    pub(crate) timeline: Option<Box<timeline::Timeline>>,
    /// The per-pair aggregates in vectors by pair id, while a recorder folds into them
    /// ([`pairs`]): the maps keyed by pair are then current only once settled.
    pub(crate) pairs: Option<Box<pairs::Pairs>>,
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

    /// Gives each reading by kind of mapping without the live heap of its moment (an
    /// in-process recorder that streams and keeps no aggregates writes none) the live heap
    /// of the series' bucket of that moment, after its last event.
    pub(crate) fn fill_split_lives(&mut self) {
        let s = &self.series;
        for r in self.splits.iter_mut().filter(|r| !r.live_bytes.is_finite()) {
            let i = (r.time_ns / s.bucket_ns.max(1)) as usize;
            r.live_bytes = s.points.get(i).or(s.points.last()).map_or(0.0, |p| p.live_end);
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
}
