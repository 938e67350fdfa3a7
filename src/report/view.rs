//! What every report format shares: the [`View`] a report counts, how it groups
//! ([`GroupBy`]), per-stack totals, the managed heap's mark-time estimates, the one-line
//! sampling summary and the units figures are printed in.

use crate::profile::{Profile, StackId};
use std::collections::HashMap;

/// Which samples a report counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum View {
    /// Every sampled allocation.
    #[default]
    Alloc,
    /// Samples whose block was still allocated at the end of the recording.
    Live,
    /// Samples whose block was allocated at the heap's peak ([`Profile::peak_live`]: exact,
    /// or each site's share of the cross-fitted peak in a sampled profile; nothing is
    /// counted for a merged profile, which has none).
    Peak,
    /// Samples whose block was freed soon after it was allocated (within
    /// [`Lifetimes::short_lived_ns`](crate::profile::Lifetimes::short_lived_ns), 1 ms by
    /// default): the churn of temporary allocations.
    ShortLived,
    /// Estimated garbage-collector mark time, in nanoseconds: for every GC cycle, each
    /// sampled managed-heap block that the cycle found live (allocated before the cycle
    /// began, not freed by its sweep) counts its estimated words × the cycle's measured ns
    /// per word marked. See [`gc_cycle_samples`].
    Gc,
}

impl View {
    /// A short lowercase name: `alloc`, `live`, `peak`, `short-lived` or `gc`.
    pub fn name(self) -> &'static str {
        match self {
            View::Alloc => "alloc",
            View::Live => "live",
            View::Peak => "peak",
            View::ShortLived => "short-lived",
            View::Gc => "gc",
        }
    }
}

impl std::str::FromStr for View {
    type Err = crate::error::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "alloc" => Ok(View::Alloc),
            "live" | "inuse" => Ok(View::Live),
            "peak" => Ok(View::Peak),
            "short-lived" | "short" | "temporary" => Ok(View::ShortLived),
            "gc" | "mark" => Ok(View::Gc),
            other => Err(crate::error::Error::Config(format!(
                "unknown view {other:?} (expected alloc, live, peak, short-lived or gc)"
            ))),
        }
    }
}

/// How reports group samples above their call stacks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GroupBy {
    /// By call stack only (the sites and frames of the program).
    #[default]
    Stack,
    /// By the tracing span path each sample was taken under ([`Stack::label`], the
    /// `tracing` feature's `SpanLayer`), then by stack: folded stacks and flamegraphs get the
    /// path's spans as root frames, the top table names a site `span › site`. Samples taken
    /// outside every span go under [`NO_SPAN`].
    ///
    /// [`Stack::label`]: crate::profile::Stack::label
    Span,
}

/// The span path shown for samples taken outside every span ([`GroupBy::Span`]).
pub const NO_SPAN: &str = "[no span]";

impl GroupBy {
    /// The span path a stack is grouped under: its label, or [`NO_SPAN`].
    pub fn span(profile: &Profile, stack: StackId) -> &str {
        profile.stack_label(stack).unwrap_or(NO_SPAN)
    }
}

impl std::str::FromStr for GroupBy {
    type Err = crate::error::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stack" | "site" | "none" => Ok(GroupBy::Stack),
            "span" => Ok(GroupBy::Span),
            other => Err(crate::error::Error::Config(format!(
                "unknown grouping {other:?} (expected span or stack)"
            ))),
        }
    }
}

/// Estimated totals of one stack under a view.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StackTotal {
    /// The stack.
    pub stack: StackId,
    /// Estimated bytes.
    pub bytes: f64,
    /// Estimated objects.
    pub objects: f64,
    /// Number of samples counted.
    pub samples: u64,
}

/// Per-stack estimated bytes and objects under `view`, for the stacks with at least one
/// counted sample, in stack-id order.
pub fn stack_totals(profile: &Profile, view: View) -> Vec<StackTotal> {
    let mut totals: std::collections::BTreeMap<StackId, StackTotal> = Default::default();
    let mut add = |stack: StackId, bytes: f64, objects: f64, samples: u64| {
        let t = totals.entry(stack).or_insert(StackTotal { stack, ..Default::default() });
        t.bytes += bytes;
        t.objects += objects;
        t.samples += samples;
    };
    match view {
        View::Alloc | View::Live | View::Peak | View::ShortLived => {
            let at_peak;
            let pairs = match view {
                View::Alloc => &profile.allocated,
                View::Live => &profile.live,
                View::ShortLived => &profile.lifetimes.short,
                _ => {
                    at_peak = profile.peak_live().unwrap_or_default();
                    &at_peak
                }
            };
            for (&(stack, size), t) in sorted(pairs) {
                let (b, o) = (profile.estimated_bytes(t.k), profile.estimated_objects(t.k, size));
                add(stack, b, o, t.samples);
            }
        }
        View::Gc => gc_marks(profile, |c, stack, m| {
            add(stack, m.bytes / 8.0 * profile.gc_cycles[c].ns_per_word, m.objects, m.samples)
        }),
    }
    totals.into_values().filter(|t| t.samples > 0).collect()
}

/// The entries of a map in key order: sums of `f64` taken in this order are the same from
/// run to run (hash order is not).
pub(crate) fn sorted<K: Ord, V, S>(map: &HashMap<K, V, S>) -> Vec<(&K, &V)> {
    let mut v: Vec<_> = map.iter().collect();
    v.sort_unstable_by(|a, b| a.0.cmp(b.0));
    v
}

/// True when the stack's allocator entry is the managed heap (`memprof::gc`): its innermost
/// frame, once the profiler's own are trimmed, is a `memprof::gc::` function. (A `malloc`
/// made by the collector itself, say for its mark stack, has allocation plumbing there.)
pub fn is_gc_stack(profile: &Profile, stack: StackId) -> bool {
    profile.frame_locations(stack).first().is_some_and(|f| {
        f.function.starts_with("memprof::gc::") || f.function.starts_with("<memprof::gc::")
    })
}

/// What the sampled managed-heap blocks looked like at one GC cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GcSampled {
    /// Estimated objects the cycle found live (from the samples).
    pub objects: f64,
    /// Estimated bytes the cycle found live (from the samples).
    pub bytes: f64,
    /// Estimated mark time attributed to them: bytes / 8 × the cycle's ns per word.
    pub mark_ns: f64,
}

/// Per-cycle totals of the sampled managed-heap blocks each cycle marked (same order as
/// `gc_cycles`). A block was marked by a cycle when it was allocated before the cycle
/// began and not freed before the cycle ended (blocks freed by the cycle's own sweep were
/// dead; blocks allocated during marking are allocated black and not scanned); see
/// [`Profile::gc_marked`].
pub fn gc_cycle_samples(profile: &Profile) -> Vec<GcSampled> {
    let mut out = vec![GcSampled::default(); profile.gc_cycles.len()];
    gc_marks(profile, |c, _, m| {
        out[c].objects += m.objects;
        out[c].bytes += m.bytes;
        out[c].mark_ns += m.bytes / 8.0 * profile.gc_cycles[c].ns_per_word;
    });
    out
}

/// Calls `f(cycle index, stack, marked)` for what each GC cycle marked of each managed-heap
/// stack ([`is_gc_stack`]), cycles in order and stacks in id order.
fn gc_marks(profile: &Profile, mut f: impl FnMut(usize, StackId, &crate::profile::GcMarked)) {
    let mut gc_stack: HashMap<StackId, bool> = HashMap::new();
    for (c, marked) in profile.gc_marked.iter().enumerate() {
        for (&stack, m) in sorted(marked) {
            if *gc_stack.entry(stack).or_insert_with(|| is_gc_stack(profile, stack)) {
                f(c, stack, m);
            }
        }
    }
}

/// True when the profile is in the exact mode (every allocation recorded with its size).
pub(crate) fn is_exact(profile: &Profile) -> bool {
    profile.header.interval == 1.0
}

/// True when the stream was cut (no end record, and the program did not say why it ended:
/// `memprof record` killed, the disk full, the system down): what the program did after
/// the cut is missing from every figure, whatever the sampling.
pub(crate) fn is_cut(profile: &Profile) -> bool {
    !profile.complete && profile.stopped.is_none()
}

/// True when nothing is missing from the figures: nothing lost, and the stream not cut
/// ([`is_cut`]). What the JSON's `sampling.complete_data` and the HTML page's summary say.
pub(crate) fn figures_whole(profile: &Profile) -> bool {
    profile.lost.nothing_missing() && !is_cut(profile)
}

/// How the profile sampled, and what it lost, in one line (a report's `sampling:` header,
/// the HTML page's summary): `exact (every allocation recorded)` only when nothing is
/// missing from the numbers; `exact, but 12 events lost (…)` otherwise; a sampled profile's
/// interval, and `numbers are unbiased estimates` only when nothing is missing from them
/// (what was lost said instead otherwise). A cut stream (`is_cut`) says the figures stop
/// at the cut, never "every allocation recorded".
pub fn sampling_summary(profile: &Profile) -> String {
    let lost = &profile.lost;
    let said = lost.describe();
    let cut = is_cut(profile).then(|| {
        format!(
            "the recording was cut at {}: what the program did after it is missing",
            human_duration(profile.end_ns as f64)
        )
    });
    if is_exact(profile) {
        match (lost.is_none(), lost.nothing_missing(), cut) {
            (_, _, Some(cut)) if lost.is_none() => format!("exact, but {cut}"),
            (_, _, Some(cut)) => format!("exact, but {cut}; {said}"),
            (true, _, None) => "exact (every allocation recorded)".to_owned(),
            (false, true, None) => format!("exact (every allocation recorded; {said})"),
            (false, false, None) => format!("exact, but {said}"),
        }
    } else if lost.nothing_missing() {
        let mut s = match &cut {
            None => format!(
                "mean interval {} (numbers are unbiased estimates)",
                human_bytes(profile.header.interval)
            ),
            Some(cut) => format!(
                "mean interval {} (estimates of the run up to the cut only: {cut})",
                human_bytes(profile.header.interval)
            ),
        };
        if !said.is_empty() {
            s.push_str("; ");
            s.push_str(&said);
        }
        s
    } else {
        // Events that never reached the profile are missing from its sums: the estimates
        // are low by what they stood for, which the ± intervals (sampling noise alone) do
        // not cover. Never called unbiased then.
        let mut s = format!(
            "mean interval {}, but {said}: estimates are low by what was lost, beyond their \
             ± intervals",
            human_bytes(profile.header.interval)
        );
        if let Some(cut) = cut {
            s.push_str("; ");
            s.push_str(&cut);
        }
        s
    }
}

/// `n` bytes in binary units: `512 B`, `1.50 KiB`, `3.25 MiB`, `1.00 GiB`.
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n.abs() < 1024.0 {
        return format!("{} B", n.round());
    }
    let mut v = n / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v.abs() < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.2} {unit}")
}

/// A duration of `ns` nanoseconds in the unit that suits it: `850 ns`, `12.5 µs`,
/// `1.05 ms`, `2.50 s`.
pub fn human_duration(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human() {
        assert_eq!(human_bytes(0.0), "0 B");
        assert_eq!(human_bytes(1023.0), "1023 B");
        assert_eq!(human_bytes(1536.0), "1.50 KiB");
        assert_eq!(human_bytes(3.25 * 1048576.0), "3.25 MiB");
        assert_eq!(human_bytes(1073741824.0), "1.00 GiB");
        assert_eq!(human_bytes(5.0 * 1099511627776.0), "5.00 TiB");
    }

    #[test]
    fn durations() {
        assert_eq!(human_duration(850.0), "850 ns");
        assert_eq!(human_duration(12_500.0), "12.5 µs");
        assert_eq!(human_duration(1_048_576.0), "1.05 ms");
        assert_eq!(human_duration(2.5e9), "2.50 s");
    }

    #[test]
    fn views_parse() {
        assert_eq!("live".parse::<View>().unwrap(), View::Live);
        assert_eq!("alloc".parse::<View>().unwrap(), View::Alloc);
        assert_eq!("gc".parse::<View>().unwrap(), View::Gc);
        assert!("sideways".parse::<View>().is_err());
    }
}
