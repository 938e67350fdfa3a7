//! `memprof report --json`: a machine-readable summary of a recording, for CI jobs and
//! tools. One JSON object, whose schema is [`SCHEMA`] (a newer schema adds fields; it
//! renames or removes none without a new name):
//!
//! | field | type | what |
//! |---|---|---|
//! | `schema` | string | [`SCHEMA`] |
//! | `program` | object | `executable` (string), `pid` (int), `command` (strings) |
//! | `sampling` | object | `interval_bytes` (number), `exact` (bool), `complete_data` (bool: nothing is missing from the figures; false when events were lost, and then estimates are low by what `lost` counts, beyond their intervals, or when the recording was cut, `complete` false without a stop) |
//! | `window` | object or null | `from_ns`, `to_ns` (ints; `to_ns` null when open) |
//! | `complete` | bool | the file ended with its end record, or said why not |
//! | `heap` | object | `live_end_bytes`, `live_end_ci95_bytes`, `peak_bytes`, `peak_ci95_bytes`, `peak_ns`, `peak_moments_ns`, `allocated_bytes`, `allocated_ci95_bytes`, `samples`, `frees` (below) |
//! | `rss` | object or null | `end_bytes`, `end_ns`, `peak_bytes`, `peak_ns`, `at_heap_peak_bytes`, `readings` (null without resident readings: not recorded by `memprof record`) |
//! | `gap` | object or null | the last reading of the mappings: `at_ns`, `resident_bytes`, `live_heap_bytes`, `live_heap_ci95_bytes`, `live_heap_resident_bytes` (at most the allocator's resident bytes: a block the program never touched all of is live but not all resident), `allocator_retained_bytes` (what the allocator's mappings hold beyond the live heap), `outside_malloc_bytes` (private anonymous memory glibc's malloc did not map: a runtime's or a garbage collector's own heap, the program's own `mmap`; 0 when it cannot be told apart, and for another allocator, whose mappings are then counted as the allocator's), `other_bytes` (all that is neither the allocator's nor outside malloc: `stacks_bytes` + `files_bytes` + `memprof_bytes` + `special_bytes`), those four, `allocator` (`glibc`, `jemalloc`, `mimalloc`, `tcmalloc`), `hint` (string or null) |
//! | `gap_at_peak` | object or null | the same fields (`hint` null) for the reading beside the largest live heap, when it is not the last and its heap was a quarter larger |
//! | `notes` | array of strings | what qualifies the numbers, as `memprof record` and `attach` kept it in the profile: a runtime whose heap is not malloc's (Go, V8, a JVM, GCC's collector), CPython's allocator, programs started unprofiled, an allocator the preload library cannot reach; empty when nothing needs saying |
//! | `ended` | object or null | `how` (`exit`, `_exit`, `signal`, `oom-kill`, `exec`, `detached`), `status` (the exit status or the signal), `limit_bytes` (the memory limit an OOM kill reached, or null) |
//! | `lost` | object | `events`, `untracked`, `frees_unknown` |
//! | `sites` | array | the top sites (`--top`) by the bytes of `--view` (allocated by default; live, peak, short-lived): `site`, `location` (string or null), `alloc_bytes`, `alloc_ci95_bytes`, `alloc_objects`, `live_bytes`, `live_ci95_bytes`, `live_objects`, `peak_bytes`, `peak_ci95_bytes` (both null when the live set at the peak is not known) |
//! | `suggestions` | array | the shown sites (`sites`) that look like allocation wrappers ([`crate::profile::Profile::wrappers`]: called by several functions, none holding most of their bytes), the largest first: `site`, `callers` (int), `largest_caller_share` (0 to 1), `site_skip` (the anchored, escaped expression that names this function, for `--site-skip`), `text` (the top table's line: the expression quoted for a shell) |
//! | `processes` | array | one per process of a tree (`--follow-forks`), the program's first: `pid`, `ppid`, `executable`, `file`, `allocated_bytes`, `peak_bytes`, `peak_ci95_bytes`, `live_end_bytes`, `rss_end_bytes`, `rss_peak_bytes`, `allocator_retained_bytes` (null when not read), `ended` (as above) |
//!
//! The heap's peak: in the exact mode the largest live heap, at `peak_ns` (`peak_moments_ns`
//! is `[peak_ns, peak_ns]`). Sampled, `peak_bytes` is the cross-fitted estimate
//! ([`crate::profile::Peak`], `report::confidence` §1): an unbiased estimate of the mean of the
//! true live heap at the two moments `peak_moments_ns` (the peaks of the two halves of the
//! sample points), so at most the true peak and close to it, with `peak_ci95_bytes` its
//! 95 % interval; `peak_ns` is whichever of the two weighs more. For a tree of processes
//! `peak_bytes` is an upper bound (the processes' largest heaps added) and
//! `peak_ci95_bytes` is null. A site's `peak_bytes` is its share of the heap's peak (the
//! sites' shares sum to it), `peak_ci95_bytes` its interval.
//!
//! Byte counts are estimates in the sampled mode (with their 95 % intervals beside them,
//! `report::confidence`) and exact in the exact mode (intervals 0). Times are nanoseconds since
//! the start of the recording. Strings are the program's, escaped only as JSON requires.

use super::confidence::{ci95, peak_ci95};
use super::resident::{gap_lines, last_split, peak_split, resident_readings};
use super::top::SiteTotal;
use super::{GroupBy, TopOptions};
use crate::profile::allocator::{allocator_name, as_told};
use crate::profile::load::Process;
use crate::profile::{Ended, Profile, ResidentSplit};
use serde_json::{json, Value};

/// The name of the schema the summary follows.
pub const SCHEMA: &str = "memprof-report/1";

/// `ended`: how a process ended, or null when its recording does not say.
fn ended(e: Option<Ended>) -> Value {
    match e {
        Some(e) => json!({
            "how": e.how.name(),
            "status": e.status,
            "limit_bytes": (e.limit_bytes > 0).then_some(e.limit_bytes),
        }),
        None => Value::Null,
    }
}

/// The summary of `profile` (`processes`: a tree's, one per file read) as a JSON value.
pub fn summary(
    profile: &Profile,
    processes: &[Process],
    group_by: GroupBy,
    options: &TopOptions,
) -> Value {
    let h = &profile.header;
    let interval = h.interval;
    let exact = interval <= 1.0;
    let hint =
        gap_lines(profile).into_iter().find_map(|l| l.strip_prefix("hint: ").map(str::to_owned));
    let gap = last_split(profile).map_or(Value::Null, |r| split(profile, r, hint));
    let gap_at_peak = peak_split(profile).map_or(Value::Null, |r| split(profile, r, None));
    let mut shown = super::top::site_totals_grouped(profile, group_by);
    super::top::sort_sites(&mut shown, options.view);
    shown.truncate(options.limit);
    json!({
        "schema": SCHEMA,
        "program": {
            "executable": h.executable,
            "pid": h.pid,
            "command": h.cmdline,
        },
        "sampling": {
            "interval_bytes": interval,
            "exact": exact,
            "complete_data": crate::report::view::figures_whole(profile),
        },
        "window": profile.window.map(|w| json!({
            "from_ns": w.from_ns,
            "to_ns": (w.to_ns != u64::MAX).then_some(w.to_ns),
        })),
        "complete": profile.complete || profile.stopped.is_some(),
        "heap": heap(profile),
        "rss": rss(profile),
        "gap": gap,
        "gap_at_peak": gap_at_peak,
        "ended": ended(profile.ended),
        "notes": profile.notes,
        "lost": {
            "events": profile.lost.events,
            "untracked": profile.lost.untracked,
            "frees_unknown": profile.lost.frees_unknown,
        },
        "sites": sites(profile, &shown),
        "suggestions": suggestions(profile, &shown),
        "processes": tree(processes, interval),
    })
}

/// `heap`: the live heap at the end and at its peak, and what was allocated, each with its
/// interval (a tree's peak, an upper bound, has none).
fn heap(profile: &Profile) -> Value {
    let interval = profile.header.interval;
    let allocated: f64 =
        profile.allocated.values().map(|t| t.k as f64).sum::<f64>() * interval.max(1.0);
    let peak_known = profile.since_peak_known();
    json!({
        "live_end_bytes": profile.live_bytes,
        "live_end_ci95_bytes": ci95(profile.live_bytes, interval),
        "peak_bytes": profile.peak.bytes,
        "peak_ci95_bytes": peak_known.then(|| peak_ci95(profile.peak.bytes, interval)),
        "peak_ns": profile.peak.time_ns,
        "peak_moments_ns": profile.peak.moments_ns,
        "allocated_bytes": allocated,
        "allocated_ci95_bytes": ci95(allocated, interval),
        "samples": profile.counts.samples,
        "frees": profile.counts.frees,
    })
}

/// `rss`: the process's resident size at the end, at its largest and beside the heap's
/// peak; null without readings, so that a tool cannot take a missing figure for zero.
fn rss(profile: &Profile) -> Value {
    let readings = resident_readings(profile);
    match (readings.last(), readings.iter().max_by_key(|r| r.bytes)) {
        (Some(last), Some(most)) => {
            let near_peak = readings
                .iter()
                .min_by_key(|r| r.time_ns.abs_diff(profile.peak.time_ns))
                .map(|r| r.bytes);
            json!({
                "end_bytes": last.bytes,
                "end_ns": last.time_ns,
                "peak_bytes": most.bytes,
                "peak_ns": most.time_ns,
                "at_heap_peak_bytes": near_peak,
                "readings": readings.len(),
            })
        }
        _ => Value::Null,
    }
}

/// `gap` and `gap_at_peak`: one reading of the mappings, what of the resident memory is
/// the live heap and what is not, as the top table's gap lines tell it.
fn split(profile: &Profile, r: &ResidentSplit, hint: Option<String>) -> Value {
    let allocator = allocator_name(profile);
    let r = &as_told(allocator, r);
    json!({
        "at_ns": r.time_ns,
        "resident_bytes": r.resident,
        "live_heap_bytes": r.live_bytes,
        "live_heap_resident_bytes": r.live_bytes.min(r.allocator as f64),
        "live_heap_ci95_bytes": ci95(r.live_bytes, profile.header.interval),
        "allocator_retained_bytes": r.allocator_free(),
        "outside_malloc_bytes": r.outside,
        "other_bytes": r.stacks + r.files + r.own + r.other,
        "stacks_bytes": r.stacks,
        "files_bytes": r.files,
        "memprof_bytes": r.own,
        "special_bytes": r.other,
        "allocator": allocator,
        "hint": hint,
    })
}

/// `sites`: the shown sites, with their intervals (the peak's null when the live set at the
/// peak is not known: a tree's).
fn sites(profile: &Profile, shown: &[SiteTotal]) -> Vec<Value> {
    let interval = profile.header.interval;
    let peak_known = profile.since_peak_known();
    shown
        .iter()
        .map(|s| {
            json!({
                "site": s.site,
                "location": s.location,
                "alloc_bytes": s.alloc_bytes,
                "alloc_ci95_bytes": ci95(s.alloc_bytes, interval),
                "alloc_objects": s.alloc_objects,
                "live_bytes": s.live_bytes,
                "live_ci95_bytes": ci95(s.live_bytes, interval),
                "live_objects": s.live_objects,
                "peak_bytes": peak_known.then_some(s.peak_bytes),
                "peak_ci95_bytes": peak_known.then(|| peak_ci95(s.peak_bytes, interval)),
            })
        })
        .collect()
}

/// `suggestions`: the shown sites that look like allocation wrappers, with the
/// `--site-skip` that would name their callers instead (the top table's hints).
fn suggestions(profile: &Profile, shown: &[SiteTotal]) -> Vec<Value> {
    super::top::wrapper_suggestions(profile, shown)
        .iter()
        .map(|w| {
            json!({
                "site": w.site,
                "callers": w.callers,
                "largest_caller_share": w.largest_share,
                "site_skip": w.site_skip(),
                "text": w.suggestion(),
            })
        })
        .collect()
}

/// `processes`: one per process of a tree, the program's first; empty for one process,
/// whose figures are the summary's own.
fn tree(processes: &[Process], interval: f64) -> Vec<Value> {
    if processes.len() <= 1 {
        return Vec::new();
    }
    processes
        .iter()
        .map(|p| {
            json!({
                "pid": p.pid,
                "ppid": p.ppid,
                "executable": p.executable,
                "file": p.file.display().to_string(),
                "allocated_bytes": p.allocated,
                "peak_bytes": p.peak,
                "peak_ci95_bytes": peak_ci95(p.peak, interval),
                "live_end_bytes": p.live,
                "rss_end_bytes": p.resident.map(|r| r.0),
                "rss_peak_bytes": p.resident.map(|r| r.1),
                "allocator_retained_bytes": p.allocator_free,
                "ended": ended(p.ended),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{EndedHow, Resident};

    /// Every field the schema names is there, of its type, with the profile's numbers.
    #[test]
    fn the_schema_is_kept() {
        let mut p = Profile::default();
        p.header.interval = 1.0;
        p.header.executable = "/bin/\"odd\"\n".into();
        p.resident = vec![
            Resident { time_ns: 10, bytes: 5 << 20 },
            Resident { time_ns: 20, bytes: 9 << 20 },
            Resident { time_ns: 30, bytes: 7 << 20 },
        ];
        p.splits = vec![ResidentSplit {
            time_ns: 30,
            resident: 70 << 20,
            allocator: 64 << 20,
            outside: 0,
            stacks: 1 << 10,
            files: 1 << 19,
            own: 1 << 12,
            other: 0,
            live_bytes: (1 << 20) as f64,
        }];
        // An earlier reading beside a heap twice as large: the split near the peak.
        let mut at_peak = p.splits[0];
        at_peak.time_ns = 20;
        at_peak.live_bytes = (2 << 20) as f64;
        p.splits.insert(0, at_peak);
        p.ended = Some(Ended { how: EndedHow::OomKill, status: 9, limit_bytes: 100 << 20 });
        let v = summary(&p, &[], GroupBy::Stack, &TopOptions::default());
        // Through the text: what a tool reads.
        let v: Value = serde_json::from_str(&v.to_string()).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["program"]["executable"], "/bin/\"odd\"\n");
        assert_eq!(v["rss"]["end_bytes"], 7 << 20);
        assert_eq!(v["rss"]["peak_bytes"], 9 << 20);
        assert_eq!(v["rss"]["peak_ns"], 20);
        assert_eq!(v["gap"]["allocator_retained_bytes"], (63 << 20) as f64);
        assert_eq!(v["gap"]["other_bytes"], (1 << 10) + (1 << 19) + (1 << 12));
        assert_eq!(v["gap"]["allocator"], "glibc");
        assert!(v["gap"]["hint"].as_str().is_some_and(|h| h.contains("malloc_trim")));
        assert_eq!(v["gap_at_peak"]["at_ns"], 20);
        assert_eq!(v["gap_at_peak"]["live_heap_bytes"], (2 << 20) as f64);
        assert_eq!(v["ended"]["how"], "oom-kill");
        assert_eq!(v["ended"]["status"], 9);
        assert_eq!(v["ended"]["limit_bytes"], 100 << 20);
        for key in [
            "live_end_bytes",
            "peak_bytes",
            "peak_ci95_bytes",
            "peak_ns",
            "allocated_bytes",
            "allocated_ci95_bytes",
        ] {
            assert!(v["heap"][key].is_number(), "heap.{key}");
        }
        assert!(v["sites"].as_array().is_some_and(Vec::is_empty));
        assert!(v["suggestions"].as_array().is_some_and(Vec::is_empty));
        assert!(v["window"].is_null() && v["complete"] == false);
        // Without readings, the sections are null rather than zeros.
        let v = summary(&Profile::default(), &[], GroupBy::Stack, &TopOptions::default());
        assert!(v["rss"].is_null() && v["gap"].is_null() && v["ended"].is_null());
        assert!(v["gap_at_peak"].is_null());
    }

    /// A sampled profile's peak has its interval and its two moments.
    #[test]
    fn the_sampled_peak_has_an_interval() {
        use crate::profile::{Free, Sample};
        let mut p = Profile::default();
        p.header.interval = 1024.0;
        let s = |t, k| Sample { id: 0, stack: 0, time_ns: t, thread: 1, addr: 0, size: 1 << 20, k };
        let (a, b) = (s(1 << 10, 1000), s(2 << 10, 1000));
        p.add_sample(&a);
        p.add_sample(&b);
        p.add_free(&Free::of(&a, 3 << 10));
        let v = summary(&p, &[], GroupBy::Stack, &TopOptions::default());
        let heap = &v["heap"];
        let peak = heap["peak_bytes"].as_f64().unwrap();
        // Both blocks live at both moments: every point of theirs counts, once.
        assert_eq!(peak, 2000.0 * 1024.0);
        assert_eq!(heap["peak_ci95_bytes"].as_f64().unwrap(), peak_ci95(peak, 1024.0));
        assert_eq!(heap["peak_moments_ns"], json!([2 << 10, 2 << 10]));
        assert_eq!(heap["allocated_ci95_bytes"].as_f64().unwrap(), ci95(peak, 1024.0));
    }
}
