//! The header lines on the process's memory beside its live heap: its resident size (at the
//! end, at most, near the heap's peak), the readings of its mappings that explain the gap
//! (the allocator's free memory, stacks, files, memprof's own) with a hint by allocator,
//! and how the process ended. The top table, the HTML page, pprof's comments, `diff` and
//! the JSON summary read them.

use std::fmt::Write as _;

use super::confidence::ci95;
use super::view::{human_bytes, is_exact};
use crate::profile::allocator::{allocator_name, as_told};
use crate::profile::{Profile, ResidentSplit};

/// The header line of the process's resident memory (`memprof record`'s readings, in the
/// window when there is one) beside its live heap: at the end, at most, and at the reading
/// nearest the heap's peak. `None` without readings.
pub(crate) fn resident_line(p: &Profile) -> Option<String> {
    let readings = resident_readings(p);
    let last = readings.last()?;
    let most = readings.iter().map(|r| r.bytes).max()?;
    let estimated = if is_exact(p) { "" } else { " estimated" };
    let mut line = format!(
        "resident: {} at the{} end (live heap{estimated} {}), {} at most",
        human_bytes(last.bytes as f64),
        if p.window.is_some() { " window's" } else { "" },
        human_bytes(p.live_bytes),
        human_bytes(most as f64),
    );
    if p.peak.bytes > 0.0 {
        let near = readings.iter().min_by_key(|r| r.time_ns.abs_diff(p.peak.time_ns))?;
        let _ = write!(line, ", {} at the heap's peak", human_bytes(near.bytes as f64));
    }
    Some(line)
}

/// The last reading of the process's resident memory by kind of mapping (in the window
/// when there is one): what explains the gap between the resident size and the live heap.
pub(crate) fn last_split(p: &Profile) -> Option<&ResidentSplit> {
    let (from, to) = p.window.map_or((0, u64::MAX), |w| (w.from_ns, w.to_ns));
    p.splits.iter().rev().find(|r| r.time_ns >= from && r.time_ns < to)
}

/// What to try when the allocator holds much of the resident memory free, by allocator.
fn allocator_hint(allocator: &str) -> &'static str {
    match allocator {
        "jemalloc" => {
            "jemalloc keeps freed pages until its decay returns them: MALLOC_CONF=\
             dirty_decay_ms:1000,muzzy_decay_ms:0 (_RJEM_MALLOC_CONF for tikv-jemallocator) \
             returns them sooner"
        }
        "mimalloc" => {
            "mimalloc keeps freed pages for a while: MIMALLOC_PURGE_DELAY=0 returns them at \
             once"
        }
        "tcmalloc" => {
            "tcmalloc keeps freed spans: TCMALLOC_RELEASE_RATE (or \
             MallocExtension::ReleaseFreeMemory) returns them sooner"
        }
        _ => {
            "glibc's malloc keeps freed chunks that are not at the top of its heap: \
             malloc_trim(0) gives them back, MALLOC_ARENA_MAX=2 limits its per-thread arenas, \
             MALLOC_TRIM_THRESHOLD_ makes it trim sooner; or link jemalloc or mimalloc"
        }
    }
}

/// The reading of the process's mappings beside the largest live heap (in the window when
/// there is one), when it is not the last one, its heap was a quarter larger, and that heap
/// was near the heap's peak: the split near the heap's peak. Readings come at least 100 ms
/// apart and are brought forward only for heaps of 32 MiB or more (`record` §6), so a
/// short or small program may have none near its peak; the largest of its readings is then
/// not called the peak's (a compiler's, read at its start and its end, would otherwise
/// "explain" a 17 MiB peak by a 6 MiB heap).
pub(crate) fn peak_split(p: &Profile) -> Option<&ResidentSplit> {
    let (from, to) = p.window.map_or((0, u64::MAX), |w| (w.from_ns, w.to_ns));
    let inside = || p.splits.iter().filter(|r| r.time_ns >= from && r.time_ns < to);
    let last = last_split(p)?;
    let most = inside().max_by(|a, b| a.live_bytes.total_cmp(&b.live_bytes))?;
    let near_peak =
        most.live_bytes + ci95(most.live_bytes, p.header.interval) >= NEAR_PEAK * p.peak.bytes;
    (most.time_ns != last.time_ns && most.live_bytes > 1.25 * last.live_bytes && near_peak)
        .then_some(most)
}

/// The share of the heap's peak a reading's live heap must reach, within its 95 %
/// interval, to be told as the reading near the peak ([`peak_split`]). Sampled at the
/// peak itself, a heap of a few dozen sample points misses it about once in a hundred
/// recordings (the reading's estimate and the peak's are each a few points off), and the
/// line is then left out, not wrong.
const NEAR_PEAK: f64 = 0.75;

/// `resident R at T s = live heap L ±I + free in the allocator F + …`: a reading of the
/// process's mappings, beside its live heap then.
fn split_line(p: &Profile, r: &ResidentSplit) -> String {
    let pm = if is_exact(p) {
        String::new()
    } else {
        format!(" ±{}", human_bytes(ci95(r.live_bytes, p.header.interval)))
    };
    // Blocks the program never touched all of (a large buffer) are live but not all
    // resident: the live heap's resident part is at most the allocator's.
    let live = if r.live_bytes > r.allocator as f64 {
        format!(
            "{}{pm} ({} of it resident)",
            human_bytes(r.live_bytes),
            human_bytes(r.allocator as f64)
        )
    } else {
        format!("{}{pm}", human_bytes(r.live_bytes))
    };
    let outside = match r.outside {
        0 => String::new(),
        o => format!(" + outside malloc {}", human_bytes(o as f64)),
    };
    format!(
        "resident {} at {:.3} s = live heap {live} + free in the allocator {}{outside} + \
         stacks {} + files {} + memprof {} + other {}",
        human_bytes(r.resident as f64),
        r.time_ns as f64 / 1e9,
        human_bytes(r.allocator_free()),
        human_bytes(r.stacks as f64),
        human_bytes(r.files as f64),
        human_bytes(r.own as f64),
        human_bytes(r.other as f64),
    )
}

/// The header lines that explain the resident size by the readings of the process's
/// mappings: the last one, and the one near the heap's peak when it differs ([`peak_split`]),
/// each split into the live heap (± its 95 % interval when sampled), what the allocator
/// holds free, stacks, files, memprof's own and the rest; then a hint when the allocator's
/// free share dominates in either. Empty without such a reading.
pub(crate) fn gap_lines(p: &Profile) -> Vec<String> {
    let Some(last) = last_split(p) else {
        return Vec::new();
    };
    let allocator = allocator_name(p);
    let last = as_told(allocator, last);
    let mut lines = vec![split_line(p, &last)];
    let peak = peak_split(p).map(|r| as_told(allocator, r));
    if let Some(r) = &peak {
        lines.push(format!("near the heap's peak: {}", split_line(p, r)));
    }
    // Dominant: a third of the resident memory, and worth a look (8 MiB).
    let dominant = |bytes: f64, r: &ResidentSplit| {
        (bytes >= r.resident as f64 / 3.0 && bytes >= (8u64 << 20) as f64)
            .then(|| 100.0 * bytes / r.resident as f64)
    };
    let free = |r: &ResidentSplit| dominant(r.allocator_free(), r);
    if let Some(share) = free(&last).or_else(|| peak.as_ref().and_then(free)) {
        lines.push(format!(
            "hint: the allocator holds {share:.0} % of the resident memory free; {}",
            allocator_hint(allocator)
        ));
    }
    // Memory no malloc hint can return: named for what it is.
    let outside = |r: &ResidentSplit| dominant(r.outside as f64, r);
    if let Some(share) = outside(&last).or_else(|| peak.as_ref().and_then(outside)) {
        lines.push(format!(
            "note: {share:.0} % of the resident memory is outside malloc: {OUTSIDE_MALLOC}"
        ));
    }
    lines
}

/// What memory outside malloc is, wherever it is named.
pub(crate) const OUTSIDE_MALLOC: &str = "anonymous memory glibc's malloc did not map (a \
     runtime's or a garbage collector's own heap, or the program's own mmap); memprof sees \
     only malloc's heap";

/// The header line saying how the process ended, when the recording says.
pub(crate) fn ended_line(p: &Profile) -> Option<String> {
    p.ended.map(|e| format!("ended: {}", e.describe()))
}

/// The resident readings of `p`, those in its window when it has one.
pub(crate) fn resident_readings(p: &Profile) -> Vec<&crate::profile::Resident> {
    let (from, to) = p.window.map_or((0, u64::MAX), |w| (w.from_ns, w.to_ns));
    p.resident.iter().filter(|r| r.time_ns >= from && r.time_ns < to).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile with mapping readings beside live heaps `lives` (one every 100 ms) and a
    /// heap's peak of `peak` bytes, at interval `interval`.
    fn profile(interval: f64, peak: f64, lives: &[f64]) -> Profile {
        let mut p = Profile::default();
        p.header.interval = interval;
        p.peak.bytes = peak;
        p.splits = lives
            .iter()
            .enumerate()
            .map(|(i, &live_bytes)| ResidentSplit {
                time_ns: i as u64 * 100_000_000,
                resident: 200 << 20,
                allocator: 100 << 20,
                live_bytes,
                ..ResidentSplit::default()
            })
            .collect();
        p
    }

    const MIB: f64 = (1u64 << 20) as f64;

    /// rustc's case: read at its start and its end, a peak between them of 17 MiB. The
    /// start's 6.5 MiB is the largest heap read, but nowhere near the peak.
    #[test]
    fn a_reading_far_below_the_peak_is_not_the_peaks() {
        let p = profile(512.0 * 1024.0, 17.0 * MIB, &[6.5 * MIB, 0.5 * MIB]);
        assert!(peak_split(&p).is_none());
        assert!(!gap_lines(&p).iter().any(|l| l.starts_with("near the heap's peak")));
    }

    #[test]
    fn a_reading_at_the_peak_explains_it() {
        let p = profile(512.0 * 1024.0, 150.0 * MIB, &[20.0 * MIB, 140.0 * MIB, 1.0 * MIB]);
        assert_eq!(peak_split(&p).map(|r| r.time_ns), Some(100_000_000));
        assert!(gap_lines(&p).iter().any(|l| l.starts_with("near the heap's peak")));
    }

    /// In the exact mode the share is the bound itself; sampled, the reading's interval
    /// widens it.
    #[test]
    fn near_is_three_quarters_of_the_peak_within_the_interval() {
        let exact = |live| peak_split(&profile(1.0, 100.0 * MIB, &[live, 0.0])).is_some();
        assert!(exact(76.0 * MIB));
        assert!(!exact(74.0 * MIB));
        let sampled =
            |live| peak_split(&profile(512.0 * 1024.0, 100.0 * MIB, &[live, 0.0])).is_some();
        // 70 MiB at 512 KiB: its 95 % interval is about ±11.7 MiB.
        assert!(sampled(70.0 * MIB));
        assert!(!sampled(60.0 * MIB));
    }
}
