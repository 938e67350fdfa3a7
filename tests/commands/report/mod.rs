//! Reports of hand-built profiles whose true totals are known: the top table, folded stacks
//! (golden files), flamegraphs, pprof (decoded back, and by `go tool pprof` as an
//! independent decoder), and the `.mprof` fixtures.
//!
//! Golden files live in `fixtures/expected/`; `MEMPROF_BLESS=1` rewrites them.
#![cfg(feature = "report")]

use crate::programs::blessing;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use memprof::profile::format::{self, Event};
use memprof::profile::{Free, Header, Module, Move, Profile, Sample, Stack, Symbol, Totals};
use memprof::report::{self, FlameOptions, PprofOptions, SiteTotal, TopOptions, View};

use crate::common::fixtures;

// ---------------------------------------------------------------------------------------------
// The three-sites profile

const CONFIG_LOAD: &str = "app::config::load";
const CACHE_INSERT: &str = "app::cache::Cache::insert";
const PARSE_LINE: &str = "app::parse::parse_line";

/// One allocation of the workload: stack, size, sample points in the sampled variant, freed?
struct Alloc {
    stack: u32,
    size: u64,
    k_sampled: u64,
    freed: bool,
}

fn allocations() -> Vec<Alloc> {
    let mut v = Vec::new();
    let mut push = |stack, size, k_sampled, n, freed: &dyn Fn(usize) -> bool| {
        for i in 0..n {
            v.push(Alloc { stack, size, k_sampled, freed: freed(i) });
        }
    };
    // app::config::load via Vec growth (stack 0): 100, 200, 300 bytes; the 200 is freed.
    push(0, 100, 1, 1, &|_| false);
    push(0, 200, 1, 1, &|_| true);
    push(0, 300, 2, 1, &|_| false);
    // Cache::insert inlined into app::cache::fill (stack 1): 10 × 64 bytes, half freed;
    // and from a truncated stack (stack 4): 2 × 1000 bytes, kept.
    push(1, 64, 1, 10, &|i| i % 2 == 0);
    push(4, 1000, 3, 2, &|_| false);
    // parse_line from two stacks: one 4096-byte buffer (stack 2, kept), 20 × 16 bytes
    // (stack 3, all freed).
    push(2, 4096, 9, 1, &|_| false);
    push(3, 16, 1, 20, &|_| true);
    v
}

const INTERVAL_SAMPLED: f64 = 512.0;

/// The true totals per site, computed from the workload, not by memprof.
fn expected(exact: bool) -> Vec<SiteTotal> {
    let site = |stack: u32| match stack {
        0 => CONFIG_LOAD,
        1 | 4 => CACHE_INSERT,
        _ => PARSE_LINE,
    };
    let mut by: HashMap<&str, SiteTotal> = HashMap::new();
    // The live heap after each sample (each free comes right after its sample, 500 ns
    // later): exact, the peak is the first largest, and what was live then per site.
    let (mut live, mut peak) = (0.0, 0.0);
    let mut live_by_site: HashMap<&str, f64> = HashMap::new();
    let mut at_peak: HashMap<&str, f64> = HashMap::new();
    // Sampled, the cross-fitted peak (`report::confidence` §1): each block's points split into
    // halves A and B as the profile splits them (time unit 1 ns), each half's live points
    // per site followed; at half A's first largest total, half B's per site, and at half
    // B's, half A's; a site's peak is R × their sum.
    let mut halves: [HashMap<&str, u64>; 2] = Default::default();
    let (mut totals, mut best) = ([0u64; 2], [0u64; 2]);
    let mut held_out: [HashMap<&str, u64>; 2] = Default::default();
    for (i, a) in allocations().into_iter().enumerate() {
        let ka = memprof::profile::split_points(a.stack, a.size, 1000 * i as u64, a.k_sampled);
        let split = [ka, a.k_sampled - ka];
        for h in 0..2 {
            *halves[h].entry(site(a.stack)).or_default() += split[h];
            totals[h] += split[h];
        }
        for h in 0..2 {
            if totals[h] > best[h] {
                best[h] = totals[h];
                held_out[h] = halves[1 - h].clone();
            }
        }
        if a.freed {
            for h in 0..2 {
                *halves[h].entry(site(a.stack)).or_default() -= split[h];
                totals[h] -= split[h];
            }
        }
        let (bytes, objects) = if exact {
            (a.size as f64, 1.0)
        } else {
            let b = a.k_sampled as f64 * INTERVAL_SAMPLED;
            (b, b / a.size as f64)
        };
        let t = by
            .entry(site(a.stack))
            .or_insert_with(|| SiteTotal { site: site(a.stack).into(), ..Default::default() });
        t.alloc_bytes += bytes;
        t.alloc_objects += objects;
        live += bytes;
        *live_by_site.entry(site(a.stack)).or_default() += bytes;
        if live > peak {
            peak = live;
            at_peak = live_by_site.clone();
        }
        if !a.freed {
            t.live_bytes += bytes;
            t.live_objects += objects;
        } else {
            // Freed 500 ns after: short-lived, in the lifetime bucket of 500 ns.
            t.short_bytes += bytes;
            match t.lifetimes.last_mut() {
                Some((_, b)) => *b += bytes,
                None => t.lifetimes.push((memprof::profile::lifetime_bucket(500), bytes)),
            }
            live -= bytes;
            *live_by_site.entry(site(a.stack)).or_default() -= bytes;
        }
    }
    // Each site's stack that allocated the most bytes (the lowest id among equals), and
    // the line the symbols give the site.
    let mut by_stack: HashMap<u32, f64> = HashMap::new();
    for a in allocations() {
        *by_stack.entry(a.stack).or_default() +=
            if exact { a.size as f64 } else { a.k_sampled as f64 * INTERVAL_SAMPLED };
    }
    for (name, t) in by.iter_mut() {
        t.peak_bytes = if exact {
            at_peak.get(name).copied().unwrap_or(0.0)
        } else {
            let k = |h: usize| held_out[h].get(name).copied().unwrap_or(0);
            (k(0) + k(1)) as f64 * INTERVAL_SAMPLED
        };
        let mut stacks: Vec<(u32, f64)> =
            by_stack.iter().filter(|(s, _)| site(**s) == *name).map(|(&s, &b)| (s, b)).collect();
        stacks.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        t.top_stack = stacks.first().map(|s| s.0);
        t.location = Some(
            match *name {
                CONFIG_LOAD => "config.rs:42",
                CACHE_INSERT => "cache.rs:10",
                _ => "parse.rs:7",
            }
            .into(),
        );
    }
    let mut v: Vec<SiteTotal> = by.into_values().collect();
    v.sort_by(|a, b| b.alloc_bytes.total_cmp(&a.alloc_bytes).then(a.site.cmp(&b.site)));
    v
}

fn sym(function: &str, file: &str, line: u32) -> Symbol {
    Symbol { function: function.into(), file: Some(file.into()), line: Some(line) }
}

/// A recording of the workload above, exact or sampled with interval 512: its tables
/// (header, modules, stacks, symbols) and its events in time order (sample `i` at `1000·i`
/// ns, each free 500 ns after its sample).
fn three_sites_recording(exact: bool) -> (Profile, Vec<Event>) {
    let mut p = with_header(
        Profile::default(),
        Header {
            interval: if exact { 1.0 } else { INTERVAL_SAMPLED },
            depth: 16,
            pid: 4321,
            executable: "/opt/app/bin/app".into(),
            cmdline: vec!["app".into(), "--input".into(), "data.txt".into()],
            start_unix_ns: 1_700_000_000_000_000_000,
            ..Header::default()
        },
    );
    p.complete = true;
    p.modules = vec![
        Module {
            path: "/opt/app/bin/app".into(),
            base: 0x0,
            start: 0x1000,
            end: 0x6000,
            // Every frame of the app is symbolized: its build id is never checked here.
            build_id: vec![0xde, 0xad, 0xbe, 0xef, 0x01],
            ..Default::default()
        },
        Module {
            path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
            base: 0x7f00_0000_0000,
            start: 0x7f00_0000_0000,
            end: 0x7f00_0020_0000,
            ..Default::default()
        },
    ];
    let symbols: Vec<(u64, Vec<Symbol>)> = vec![
        (0x1010, vec![sym("malloc", "preload/src/lib.rs", 30)]),
        (0x1020, vec![sym("__rust_alloc", "src/alloc.rs", 1)]),
        (
            0x2000,
            vec![
                sym("alloc::raw_vec::finish_grow", "alloc/src/raw_vec.rs", 480),
                sym("alloc::raw_vec::RawVec<T,A>::grow_one", "alloc/src/raw_vec.rs", 340),
            ],
        ),
        (0x3000, vec![sym(CONFIG_LOAD, "src/config.rs", 42)]),
        (
            0x3100,
            vec![
                sym(CACHE_INSERT, "src/cache.rs", 10),
                sym("app::cache::fill", "src/cache.rs", 20),
            ],
        ),
        (0x3200, vec![sym(PARSE_LINE, "src/parse.rs", 7)]),
        (0x3300, vec![sym("app::parse::parse_file", "src/parse.rs", 70)]),
        (0x4000, vec![sym("app::main", "src/main.rs", 5)]),
        (0x4100, vec![sym("main", "src/main.rs", 1)]),
    ];
    p.symbols = symbols.into_iter().collect();
    let libc_start = 0x7f00_0000_1234; // unresolved: named libc.so.6+0x1234
    let stacks: Vec<(Vec<u64>, bool)> = vec![
        (vec![0x1010, 0x1020, 0x2000, 0x3000, 0x4000, 0x4100, libc_start], false),
        (vec![0x1010, 0x1020, 0x3100, 0x4000, 0x4100, libc_start], false),
        (vec![0x1010, 0x2000, 0x3200, 0x3300, 0x4000, 0x4100, libc_start], false),
        (vec![0x1010, 0x3200, 0x3300, 0x4000, 0x4100, libc_start], false),
        (vec![0x1010, 0x3100, 0x4000], true),
    ];
    p.stacks = stacks
        .into_iter()
        .map(|(frames, truncated)| Stack { frames, truncated, label: 0 })
        .collect();
    let mut events = Vec::new();
    for (i, a) in allocations().into_iter().enumerate() {
        let id = 100 + i as u64;
        let time_ns = 1000 * i as u64;
        let sample = Sample {
            id,
            stack: a.stack,
            time_ns,
            thread: 1 + (i % 2) as u32,
            addr: 0x5555_0000 + 0x1000 * i as u64,
            size: a.size,
            k: if exact { a.size } else { a.k_sampled },
        };
        events.push(Event::Sample(sample));
        if a.freed {
            events.push(Event::Free(Free::of(&sample, time_ns + 500)));
        }
    }
    (p, events)
}

/// `p` with `header` (a profile has private fields: no `Profile { header, ..p }` here).
fn with_header(mut p: Profile, header: Header) -> Profile {
    p.header = header;
    p
}

/// The profile of the workload: [`three_sites_recording`] with its events folded in.
fn three_sites(exact: bool) -> Profile {
    let (tables, events) = three_sites_recording(exact);
    tables.with_events(&events)
}

/// `events` as a version-4 file gives them back: times (allocation times of frees and
/// moves included) at the start of their unit of `unit_ns`, no block addresses, no sample
/// ids (samples numbered 1, 2, 3, … in stream order; frees and moves with id 0), and in
/// the exact mode's coarse unit the frees 0 or 1 unit after their allocation with their
/// lifetime rounded down to the µs unit ([`format::LIFETIME_UNIT_NS`]). Versions 2 and 3
/// give them back as [`before_v4`] says.
fn as_written(events: &[Event], unit_ns: u64) -> Vec<Event> {
    let t = |ns: u64| ns / unit_ns * unit_ns;
    let fine = format::LIFETIME_UNIT_NS;
    let life = |f: &Free| {
        let age = (t(f.time_ns) / unit_ns) as i64 - (t(f.alloc_ns) / unit_ns) as i64;
        (unit_ns > fine && (age == 0 || age == 1))
            .then(|| f.time_ns.saturating_sub(f.alloc_ns) / fine * fine)
    };
    let mut samples = 0;
    events
        .iter()
        .map(|e| match *e {
            Event::Sample(s) => {
                samples += 1;
                Event::Sample(Sample { id: samples, time_ns: t(s.time_ns), addr: 0, ..s })
            }
            Event::Free(f) => {
                let life_ns = life(&f);
                Event::Free(Free {
                    id: 0,
                    time_ns: t(f.time_ns),
                    alloc_ns: t(f.alloc_ns),
                    life_ns,
                    ..f
                })
            }
            Event::Move(m) => Event::Move(Move {
                id: 0,
                time_ns: t(m.time_ns),
                new_addr: 0,
                alloc_ns: t(m.alloc_ns),
                ..m
            }),
            Event::GcCycle(c) => Event::GcCycle(c),
        })
        .collect()
}

/// [`as_written`] events as a version-2 or 3 file gives them back: frees carry no lifetime
/// of their own (it is the difference of their times, to the unit).
fn before_v4(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .map(|e| match *e {
            Event::Free(f) => Event::Free(Free { life_ns: None, ..f }),
            e => e,
        })
        .collect()
}

/// Asserts that two profiles hold the same aggregates (what every report reads).
fn assert_same_aggregates(got: &Profile, want: &Profile, what: &str) {
    assert_eq!(got.allocated, want.allocated, "{what}: allocated");
    assert_eq!(got.live, want.live, "{what}: live blocks");
    assert_eq!(got.counts, want.counts, "{what}: counts");
    assert_eq!(got.live_bytes, want.live_bytes, "{what}: live bytes");
    assert_eq!(got.gc_cycles, want.gc_cycles, "{what}: GC cycles");
    assert_eq!(got.gc_marked, want.gc_marked, "{what}: GC marked");
    assert_eq!(got.series, want.series, "{what}: series");
    assert_eq!(got.peak, want.peak, "{what}: peak");
    assert_eq!(got.end_ns, want.end_ns, "{what}: end");
    assert_eq!(got.lost, want.lost, "{what}: lost");
}

fn total(sites: &[SiteTotal]) -> SiteTotal {
    sites.iter().fold(SiteTotal::default(), |mut t, s| {
        t.alloc_bytes += s.alloc_bytes;
        t.alloc_objects += s.alloc_objects;
        t.live_bytes += s.live_bytes;
        t.live_objects += s.live_objects;
        t
    })
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

// ---------------------------------------------------------------------------------------------
// Golden files

/// Compares `actual` with the golden file, or rewrites it under `MEMPROF_BLESS=1`.
fn golden(relative: &str, actual: &[u8]) {
    let path = fixtures().join(relative);
    if blessing() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (run with MEMPROF_BLESS=1 to create it)", path.display())
    });
    if expected != actual {
        panic!(
            "{} differs from the output (run with MEMPROF_BLESS=1 to accept it):\n--- expected\n{}\n--- actual\n{}",
            path.display(),
            String::from_utf8_lossy(&expected),
            String::from_utf8_lossy(actual)
        );
    }
}

fn out_path(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("memprof-report-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

// ---------------------------------------------------------------------------------------------
// Top table

mod top;

// ---------------------------------------------------------------------------------------------
// Folded stacks

mod folded;

// ---------------------------------------------------------------------------------------------
// Flamegraphs

mod flamegraph;

// ---------------------------------------------------------------------------------------------
// pprof

mod pprof;

// ---------------------------------------------------------------------------------------------
// .mprof fixtures

mod mprof;

mod gc_view;
