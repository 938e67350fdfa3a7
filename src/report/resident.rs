//! The header lines on the process's memory beside its live heap: its resident size (at the
//! end, at most, near the heap's peak), the readings of its mappings that explain the gap
//! (the allocator's free memory, stacks, files, memprof's own) with a hint by allocator,
//! and how the process ended. The top table, the HTML page, pprof's comments, `diff` and
//! the JSON summary read them.

use std::fmt::Write as _;

use super::confidence::ci95;
use super::view::{human_bytes, is_exact};
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

/// The allocator the recorded program used, as far as its modules and symbols tell:
/// "jemalloc", "mimalloc", "tcmalloc", or "glibc" (the C library's, when none of them).
pub(crate) fn allocator_name(p: &Profile) -> &'static str {
    let names = p
        .modules
        .iter()
        .map(|m| m.path.as_str())
        .chain(p.symbols.values().flatten().map(|s| s.function.as_str()))
        .chain(p.symbols.values().flatten().filter_map(|s| s.file.as_deref()));
    for name in names {
        if name.contains("jemalloc") || name.starts_with("_rjem_") || name.starts_with("je_") {
            return "jemalloc";
        }
        if name.contains("mimalloc") || name.starts_with("mi_") {
            return "mimalloc";
        }
        if name.contains("tcmalloc") {
            return "tcmalloc";
        }
    }
    "glibc"
}

/// `r` as the report tells it: memory outside glibc's malloc's mappings is the allocator's
/// when the program's allocator is not glibc's (its mappings have none of glibc's shapes,
/// `sys::malloc_maps`, so they cannot be told from another heap's).
pub(crate) fn as_told(p: &Profile, r: &ResidentSplit) -> ResidentSplit {
    match allocator_name(p) {
        "glibc" => *r,
        _ => ResidentSplit { allocator: r.allocator + r.outside, outside: 0, ..*r },
    }
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
/// there is one), when it is not the last one and its heap was a quarter larger: the split
/// near the heap's peak.
pub(crate) fn peak_split(p: &Profile) -> Option<&ResidentSplit> {
    let (from, to) = p.window.map_or((0, u64::MAX), |w| (w.from_ns, w.to_ns));
    let inside = || p.splits.iter().filter(|r| r.time_ns >= from && r.time_ns < to);
    let last = last_split(p)?;
    let most = inside().max_by(|a, b| a.live_bytes.total_cmp(&b.live_bytes))?;
    (most.time_ns != last.time_ns && most.live_bytes > 1.25 * last.live_bytes).then_some(most)
}

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
    let Some(last) = last_split(p).map(|r| as_told(p, r)) else {
        return Vec::new();
    };
    let mut lines = vec![split_line(p, &last)];
    let peak = peak_split(p).map(|r| as_told(p, r));
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
            allocator_hint(allocator_name(p))
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
