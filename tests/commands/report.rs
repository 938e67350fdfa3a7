//! Reports of hand-built profiles whose true totals are known: the top table, folded stacks
//! (golden files), flamegraphs, pprof (decoded back, and by `go tool pprof` as an
//! independent decoder), and the `.mprof` fixtures.
//!
//! Golden files live in `fixtures/expected/`; `MEMPROF_BLESS=1` rewrites them.
#![cfg(feature = "report")]

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
    // Sampled, the cross-fitted peak (`report::stats` §1): each block's points split into
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

fn blessing() -> bool {
    std::env::var_os("MEMPROF_BLESS").is_some_and(|v| v == "1")
}

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

mod top {
    use super::*;

    /// `--view` orders the table (and the JSON's sites) by its own bytes: with one row
    /// shown, the row is the site with the most of them, and the JSON's sites never rise.
    #[test]
    fn views_order_the_sites() {
        for exact in [true, false] {
            let p = three_sites(exact);
            let sites = report::site_totals(&p);
            for view in [View::Alloc, View::Live, View::Peak, View::ShortLived] {
                let bytes = |s: &SiteTotal| report::view_bytes(s, view);
                let most = sites.iter().map(bytes).fold(0.0, f64::max);
                let options = TopOptions { limit: 1, view, ..TopOptions::default() };
                let text = report::top_table(&p, &options);
                // The one row shown: the line after the table's header.
                let mut lines = text.lines().skip_while(|l| !l.starts_with("alloc bytes"));
                let row = lines.nth(1).unwrap();
                let shown = sites.iter().find(|s| row.contains(s.site.as_str())).unwrap();
                assert_eq!(bytes(shown), most, "{view:?}: {}\n{text}", shown.site);
                if view != View::Alloc {
                    assert!(text.contains(&format!("(--view {})", view.name())), "{text}");
                }
                let options = TopOptions { view, ..TopOptions::default() };
                let v = report::json::summary(&p, &[], Default::default(), &options);
                let key = match view {
                    View::Alloc => "alloc_bytes",
                    View::Live => "live_bytes",
                    View::Peak => "peak_bytes",
                    _ => continue,
                };
                let got: Vec<f64> = v["sites"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s[key].as_f64().unwrap())
                    .collect();
                assert!(got.windows(2).all(|w| w[0] >= w[1]), "{view:?}: {got:?}");
            }
        }
    }

    /// The view orders differ on this profile (the test above would pass with any one order
    /// otherwise).
    #[test]
    fn the_views_disagree_on_three_sites() {
        let sites = report::site_totals(&three_sites(false));
        let first = |view| {
            let mut s = sites.clone();
            report::sort_sites(&mut s, view);
            s[0].site.clone()
        };
        assert_ne!(first(View::Alloc), first(View::Live));
    }

    #[test]
    fn exact_totals_are_exact() {
        let p = three_sites(true);
        let got = report::site_totals(&p);
        let want = expected(true);
        assert_eq!(got, want);
        let t = total(&got);
        assert_eq!(t.alloc_bytes, 7656.0);
        assert_eq!(t.alloc_objects, 36.0);
        assert_eq!(t.live_bytes, 100.0 + 300.0 + 5.0 * 64.0 + 2000.0 + 4096.0);
        assert_eq!(t.live_objects, 10.0);
    }

    #[test]
    fn sampled_totals_are_k_times_interval() {
        let p = three_sites(false);
        let got = report::site_totals(&p);
        let want = expected(false);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.site, w.site);
            assert!(close(g.alloc_bytes, w.alloc_bytes), "{g:?} vs {w:?}");
            assert!(close(g.alloc_objects, w.alloc_objects), "{g:?} vs {w:?}");
            assert!(close(g.live_bytes, w.live_bytes), "{g:?} vs {w:?}");
            assert!(close(g.live_objects, w.live_objects), "{g:?} vs {w:?}");
            assert!(close(g.peak_bytes, w.peak_bytes), "{g:?} vs {w:?}");
            assert!(close(g.short_bytes, w.short_bytes), "{g:?} vs {w:?}");
        }
    }

    #[test]
    fn table_exact_golden() {
        let p = three_sites(true);
        let text =
            report::top_table(&p, &TopOptions { human_bytes: false, ..TopOptions::default() });
        assert!(text.contains("sampling: exact"));
        let totals = text.lines().find(|l| l.ends_with("total (3 sites)")).unwrap();
        assert!(totals.contains("7656"), "{totals}");
        // Objects are integers in the exact mode.
        assert!(!text.contains(".0 "), "{text}");
        golden("expected/three_sites.exact.top.txt", text.as_bytes());
    }

    #[test]
    fn table_sampled_golden_with_limit_and_warnings() {
        let mut p = three_sites(false);
        p.complete = false;
        p.warnings.push(
            "profile was cut at byte 999 (the program may have crashed); read 3 samples".into(),
        );
        p.lost.events = 4;
        let text = report::top_table(&p, &TopOptions { limit: 2, ..TopOptions::default() });
        assert!(text.contains("INCOMPLETE"));
        assert!(text.contains("warning: profile was cut at byte 999"));
        // What was lost is said on the sampling line and on the totals line.
        let header = text.lines().find(|l| l.starts_with("sampling: ")).unwrap();
        // Numbers short of what was lost are never called unbiased.
        assert!(!header.contains("unbiased"), "{text}");
        assert!(
            header.contains(
                "but 4 events lost: estimates are low by what was lost, beyond their ± intervals"
            ) && header.contains("the recording was cut at"),
            "{text}"
        );
        assert!(text.contains("total (3 sites, 2 shown; 4 events lost)"), "{text}");
        assert!(!text.contains(CONFIG_LOAD), "the smallest site is past the limit");
        golden("expected/three_sites.sampled.top.txt", text.as_bytes());
    }

    /// An exact profile says "every allocation recorded" only while nothing is missing from
    /// its numbers: frees that were replayed keep it so (and are mentioned); anything else
    /// lost makes it "exact, but …", on the totals line too.
    #[test]
    fn exact_header_says_what_was_lost() {
        let mut p = three_sites(true);
        let table = |p: &Profile| report::top_table(p, &TopOptions::default());
        let header = |t: &str| t.lines().find(|l| l.starts_with("sampling: ")).unwrap().to_owned();
        assert_eq!(header(&table(&p)), "sampling: exact (every allocation recorded)");
        p.lost.events = 5;
        p.lost.frees_replayed = 5;
        let t = table(&p);
        assert_eq!(
            header(&t),
            "sampling: exact (every allocation recorded; 5 frees did not fit in the queue and \
             were replayed at their time)"
        );
        assert!(t.lines().any(|l| l.ends_with("total (3 sites)")), "{t}");
        p.lost.events = 9;
        p.lost.frees_unknown = 2;
        let t = table(&p);
        assert_eq!(
            header(&t),
            "sampling: exact, but 9 events lost (5 frees replayed, 2 frees lost for good, 2 \
             other events); live figures may count up to 2 blocks that had ended"
        );
        let totals = "total (3 sites; 9 events lost, up to 2 ended blocks counted live)";
        assert!(t.lines().any(|l| l.ends_with(totals)), "{t}");
        assert!(!t.contains("every allocation recorded"));
    }

    #[test]
    fn empty_profile() {
        let text = report::top_table(&Profile::default(), &TopOptions::default());
        assert!(text.contains("no samples"));
    }
}

// ---------------------------------------------------------------------------------------------
// Folded stacks

mod folded {
    use super::*;

    fn sum(lines: &[String]) -> u64 {
        lines.iter().map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum()
    }

    #[test]
    fn golden_exact_and_sampled() {
        for (name, exact, view) in [
            ("three_sites.exact.alloc", true, View::Alloc),
            ("three_sites.exact.live", true, View::Live),
            ("three_sites.sampled.alloc", false, View::Alloc),
        ] {
            let p = three_sites(exact);
            let mut out = Vec::new();
            report::write_collapsed(&mut out, &p, view).unwrap();
            golden(&format!("expected/{name}.folded"), &out);
        }
    }

    #[test]
    fn values_sum_to_the_totals_and_lines_are_sorted() {
        let p = three_sites(true);
        let alloc = report::collapsed(&p, View::Alloc);
        let live = report::collapsed(&p, View::Live);
        let t = total(&expected(true));
        assert_eq!(sum(&alloc) as f64, t.alloc_bytes);
        assert_eq!(sum(&live) as f64, t.live_bytes);
        let mut sorted = alloc.clone();
        sorted.sort();
        assert_eq!(alloc, sorted);
        // Stacks 2 and 3 differ in addresses; their names differ too (finish_grow), so they
        // stay apart, while the profiler frames are trimmed from every line.
        assert!(alloc.iter().all(|l| !l.contains("malloc") && !l.contains("__rust_alloc")));
        assert!(alloc.iter().any(|l| l.starts_with("[truncated];app::main;app::cache::fill;")));
        assert!(alloc
            .iter()
            .all(|l| l.starts_with("libc.so.6+0x1234;main;") || l.starts_with("[truncated]")));
    }

    #[test]
    fn identical_names_merge() {
        let mut p = three_sites(true);
        // A second stack with other addresses but the same symbols as stack 3.
        p.symbols.insert(0x3201, p.symbols[&0x3200].clone());
        let mut s = p.stacks[3].clone();
        s.frames[1] = 0x3201;
        p.stacks.push(s);
        p.add_sample(&Sample { id: 9999, stack: 5, time_ns: 0, thread: 1, addr: 0, size: 7, k: 7 });
        let before = report::collapsed(&three_sites(true), View::Alloc);
        let after = report::collapsed(&p, View::Alloc);
        assert_eq!(before.len(), after.len());
        assert_eq!(sum(&after), sum(&before) + 7);
    }
}

// ---------------------------------------------------------------------------------------------
// Flamegraphs

mod flamegraph {
    use super::*;

    fn render(p: &Profile, view: View) -> String {
        let mut out = Vec::new();
        report::flamegraph(p, &FlameOptions { view, ..FlameOptions::default() }, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn contains_the_sites_and_is_deterministic() {
        let p = three_sites(true);
        let svg = render(&p, View::Alloc);
        assert!(svg.starts_with("<?xml"));
        for name in [CONFIG_LOAD, CACHE_INSERT, PARSE_LINE, "app::main", "libc.so.6+0x1234"] {
            assert!(svg.contains(name), "flamegraph lacks {name}");
        }
        assert!(svg.contains("memprof: allocated bytes (exact)"));
        assert!(svg.contains("bytes"));
        assert_eq!(svg, render(&p, View::Alloc), "two renders differ");

        let sampled = render(&three_sites(false), View::Live);
        assert!(sampled.contains("memprof: live bytes at end (estimated)"));
        assert_eq!(sampled, render(&three_sites(false), View::Live));
    }

    #[test]
    fn all_freed_live_view_is_a_small_valid_svg() {
        let (tables, events) = three_sites_recording(true);
        // Every sample, each freed 1 ns later.
        let all_freed: Vec<Event> = events
            .iter()
            .filter_map(|e| match e {
                Event::Sample(s) => Some(*s),
                _ => None,
            })
            .flat_map(|s| [Event::Sample(s), Event::Free(Free::of(&s, s.time_ns + 1))])
            .collect();
        let p = tables.with_events(&all_freed);
        // Pairs whose blocks were all freed may stay, with zero totals.
        assert!(p.live.values().all(|t| *t == Totals::default()), "{:?}", p.live);
        assert!(p.counts.frees == p.counts.samples && p.counts.orphans == 0, "{:?}", p.counts);
        let svg = render(&p, View::Live);
        assert!(svg.contains("no samples"));
        assert!(svg.contains("memprof: live bytes at end (exact)"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}

// ---------------------------------------------------------------------------------------------
// pprof

mod pprof {
    use super::*;
    use ::pprof::protos;

    fn encoded(p: &Profile) -> Vec<u8> {
        let mut out = Vec::new();
        report::write_pprof(p, &PprofOptions::default(), &mut out).unwrap();
        out
    }

    use crate::common::decode_pprof as decode;

    /// Sums of the four sample values.
    fn sums(p: &protos::Profile) -> [i64; 4] {
        let mut s = [0i64; 4];
        for sample in &p.sample {
            for (acc, v) in s.iter_mut().zip(&sample.value) {
                *acc += v;
            }
        }
        s
    }

    fn string(p: &protos::Profile, i: i64) -> &str {
        &p.string_table[i as usize]
    }

    #[test]
    fn decodes_back_with_go_heap_conventions() {
        let p = three_sites(true);
        let d = decode(&encoded(&p));
        assert_eq!(d.string_table[0], "");
        let types: Vec<(&str, &str)> =
            d.sample_type.iter().map(|t| (string(&d, t.ty), string(&d, t.unit))).collect();
        assert_eq!(
            types,
            [
                ("alloc_objects", "count"),
                ("alloc_space", "bytes"),
                ("inuse_objects", "count"),
                ("inuse_space", "bytes")
            ]
        );
        assert_eq!(string(&d, d.default_sample_type), "inuse_space");
        let period = d.period_type.clone().unwrap();
        assert_eq!((string(&d, period.ty), string(&d, period.unit)), ("space", "bytes"));
        assert_eq!(d.period, 1);
        assert_eq!(d.time_nanos, 1_700_000_000_000_000_000);
        assert_eq!(d.mapping.len(), 2);
        assert_eq!(string(&d, d.mapping[1].filename), "/lib/x86_64-linux-gnu/libc.so.6");
        // The GNU build id, in hex (the form pprof's tools look binaries up by).
        assert_eq!(string(&d, d.mapping[0].build_id), "deadbeef01");
        assert_eq!(string(&d, d.mapping[1].build_id), "");

        let t = total(&expected(true));
        assert_eq!(
            sums(&d),
            [
                t.alloc_objects as i64,
                t.alloc_bytes as i64,
                t.live_objects as i64,
                t.live_bytes as i64
            ]
        );

        // The inline chain at 0x3100 is one location, innermost first, with line numbers.
        let functions: HashMap<u64, &str> =
            d.function.iter().map(|f| (f.id, string(&d, f.name))).collect();
        let loc = d.location.iter().find(|l| l.address == 0x3100).unwrap();
        let chain: Vec<(&str, i64)> =
            loc.line.iter().map(|l| (functions[&l.function_id], l.line)).collect();
        assert_eq!(chain, [(CACHE_INSERT, 10), ("app::cache::fill", 20)]);
        assert_eq!(loc.mapping_id, 1);
        // Functions are unique by (name, file); locations by address and lines.
        let mut keys: Vec<(i64, i64)> = d.function.iter().map(|f| (f.name, f.filename)).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), d.function.len());
        // Profiler frames are gone; the bytes label carries the size.
        assert!(!functions.values().any(|f| *f == "malloc" || *f == "__rust_alloc"));
        let bytes_key = d.string_table.iter().position(|s| s == "bytes").unwrap() as i64;
        for s in &d.sample {
            assert_eq!(s.label.len(), 1);
            assert_eq!(s.label[0].key, bytes_key);
            assert!(s.label[0].num > 0);
        }
    }

    #[test]
    fn sampled_sums_agree_with_site_totals() {
        let p = three_sites(false);
        let d = decode(&encoded(&p));
        assert_eq!(d.period, 512);
        let t = total(&report::site_totals(&p));
        let s = sums(&d);
        // Each merged sample rounds once: the error is at most 0.5 per sample.
        let tol = d.sample.len() as f64 * 0.5;
        for (got, want) in
            s.iter().zip([t.alloc_objects, t.alloc_bytes, t.live_objects, t.live_bytes])
        {
            assert!((*got as f64 - want).abs() <= tol, "{s:?} vs {t:?}");
        }
        // Bytes are exact multiples of the interval here.
        assert_eq!(s[1] as f64, t.alloc_bytes);
        assert_eq!(s[3] as f64, t.live_bytes);
    }

    #[test]
    fn deterministic_and_alloc_default() {
        let p = three_sites(true);
        assert_eq!(encoded(&p), encoded(&p));
        let d = report::pprof(&p, &PprofOptions { default_view: View::Alloc, size_labels: false });
        assert_eq!(d.string_table[d.default_sample_type as usize], "alloc_space");
        assert!(d.sample.iter().all(|s| s.label.is_empty()));
    }

    /// Runs `go tool pprof -raw` (an independent protobuf decoder) on the file: see
    /// [`crate::common::go_pprof_raw`].
    fn go_pprof_raw(path: &Path) -> Option<([i64; 4], String)> {
        crate::common::go_pprof_raw(path.as_os_str(), "the go tool pprof check of our pprof output")
    }

    #[test]
    fn go_tool_pprof_agrees() {
        for exact in [true, false] {
            let p = three_sites(exact);
            let path =
                out_path(&format!("three_sites.{}.pb.gz", if exact { "exact" } else { "sampled" }));
            std::fs::write(&path, encoded(&p)).unwrap();
            let Some((go_sums, text)) = go_pprof_raw(&path) else { return };
            let ours = sums(&decode(&std::fs::read(&path).unwrap()));
            assert_eq!(go_sums, ours, "go tool pprof -raw:\n{text}");
            let t = total(&report::site_totals(&p));
            assert_eq!(go_sums[1] as f64, t.alloc_bytes, "{text}");
            assert_eq!(go_sums[3] as f64, t.live_bytes, "{text}");
            if exact {
                assert_eq!(go_sums[0] as f64, t.alloc_objects, "{text}");
                assert_eq!(go_sums[2] as f64, t.live_objects, "{text}");
            }
            for name in [CONFIG_LOAD, CACHE_INSERT, PARSE_LINE] {
                assert!(text.contains(name), "go tool pprof does not show {name}:\n{text}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// .mprof fixtures

mod mprof {
    //! The golden files `small-v4.mprof` and `small-v4-truncated.mprof` are what the writer
    //! writes now (format version 4); `small-v3.mprof` and `small-v3-truncated.mprof` were
    //! written by the previous writer (version 3), `small-v2.mprof` and
    //! `small-v2-truncated.mprof` by the one before (version 2), `small.mprof`,
    //! `small-truncated.mprof` and the two `small-before-*.mprof` files by older memprofs
    //! (version 1): all must still read, with the time units they were written with.
    use super::*;

    fn small_bytes() -> Vec<u8> {
        let (tables, events) = three_sites_recording(true);
        format::write_events(Vec::new(), &tables, &events).unwrap()
    }

    /// The small profile as the drain thread writes a longer run: the same records, with a
    /// block sealed (a flush) every four events.
    fn small_in_blocks() -> Vec<u8> {
        let (tables, events) = three_sites_recording(true);
        let mut w = format::Writer::new(Vec::new(), &tables.header).unwrap();
        for m in &tables.modules {
            w.write_module(m).unwrap();
        }
        for (id, s) in tables.stacks.iter().enumerate() {
            w.write_stack(id as u32, s).unwrap();
        }
        let mut addrs: Vec<u64> = tables.symbols.keys().copied().collect();
        addrs.sort_unstable();
        for a in addrs {
            w.write_symbols(a, &tables.symbols[&a]).unwrap();
        }
        for (i, e) in events.iter().enumerate() {
            if i % 4 == 0 {
                w.flush().unwrap();
            }
            match e {
                Event::Sample(s) => w.write_sample(s).unwrap(),
                Event::Free(f) => w.write_free(f).unwrap(),
                Event::Move(m) => w.write_move(m).unwrap(),
                Event::GcCycle(c) => w.write_gc_cycle(c).unwrap(),
            }
        }
        w.finish().unwrap()
    }

    /// The small profile in blocks, cut three quarters in, inside a block.
    fn truncated_bytes() -> Vec<u8> {
        let bytes = small_in_blocks();
        let cut = bytes.len() * 3 / 4 + 1;
        bytes[..cut].to_vec()
    }

    /// The events of a file, and its tables.
    fn events_of(name: &str) -> (Profile, Vec<Event>) {
        let f = std::fs::File::open(fixtures().join(name)).unwrap();
        format::read_events(f).unwrap()
    }

    #[test]
    fn small_fixture_is_what_the_writer_writes_and_reads_back() {
        golden("small-v4.mprof", &small_bytes());
        golden("small-v4-truncated.mprof", &truncated_bytes());
        let p = Profile::read_file(fixtures().join("small-v4.mprof")).unwrap();
        let (tables, events) = three_sites_recording(true);
        assert!(p.complete && p.warnings.is_empty(), "{:?}", p.warnings);
        // The writer sets the version and the time unit of the exact mode.
        let unit = format::TIME_UNIT_EXACT_NS;
        let header =
            Header { version: format::VERSION, time_unit_ns: unit, ..tables.header.clone() };
        assert_eq!(p.header, header);
        assert_eq!(p.modules, tables.modules, "modules, with their build ids");
        assert_eq!(p.stacks, tables.stacks);
        assert_eq!(p.symbols, tables.symbols);
        // Every event, in order, at the resolution of the file.
        let written = as_written(&events, unit);
        let (_, read) = events_of("small-v4.mprof");
        assert_eq!(read, written);
        let want = with_header(tables, header).with_events(&written);
        assert_same_aggregates(&p, &want, "small-v4.mprof");
        // The previous writers' files (version 3; version 2, no labels) read back the same
        // events, in the same unit, their frees without a lifetime of their own.
        for (name, version) in [("small-v3.mprof", 3), ("small-v2.mprof", 2)] {
            let (old, read) = events_of(name);
            assert_eq!(old.header.version, version);
            assert_eq!(old.header.time_unit_ns, unit, "{name}");
            assert_eq!(old.header.lifetime_unit_ns(), unit, "{name}");
            assert_eq!(read, before_v4(&written), "{name}");
            assert_eq!(old.stacks, p.stacks);
        }
        assert_eq!(p.header.lifetime_unit_ns(), format::LIFETIME_UNIT_NS);
        // At the file's time unit (≈ 1 ms) the frees 500 ns after their samples read back
        // with a lifetime of 0.
        let mut sites = expected(true);
        sites.iter_mut().flat_map(|s| &mut s.lifetimes).for_each(|l| l.0 = 0);
        assert_eq!(report::site_totals(&p), sites);
        // The blocks of a longer run read back the same.
        let q = Profile::read_from(&small_in_blocks()[..]).unwrap();
        assert!(q.complete && q.warnings.is_empty(), "{:?}", q.warnings);
        assert_same_aggregates(&q, &want, "small profile in blocks");
    }

    /// Reads a golden file written by an older memprof (format version 1, which kept times in
    /// nanoseconds and block addresses) and checks that it reads as the three sites do now
    /// (events, stacks, aggregates, totals; modules by path, in order).
    fn older_fixture_reads(name: &str) -> Profile {
        let p = Profile::read_file(fixtures().join(name)).unwrap();
        let (tables, events) = three_sites_recording(true);
        assert!(p.complete && p.warnings.is_empty(), "{name}: {:?}", p.warnings);
        assert_eq!(p.header.version, 1, "{name}");
        let paths = |p: &Profile| p.modules.iter().map(|m| m.path.clone()).collect::<Vec<_>>();
        assert_eq!(paths(&p), paths(&tables));
        let (_, read) = events_of(name);
        assert_eq!(read, events, "{name}: every event, exactly");
        assert_eq!(p.stacks, tables.stacks);
        let want = with_header(tables, p.header.clone()).with_events(&events);
        assert_same_aggregates(&p, &want, name);
        assert_eq!(report::site_totals(&p), expected(true));
        p
    }

    /// The golden file of version 1, with everything a module record carries now.
    #[test]
    fn version_1_fixture_still_reads() {
        let p = older_fixture_reads("small.mprof");
        let want = three_sites(true);
        assert_eq!(p.header, Header { version: 1, time_unit_ns: 1, ..want.header });
        assert_eq!(p.modules, want.modules, "modules, with their build ids");
        assert_eq!(p.symbols, want.symbols);
    }

    /// A file written before module records carried build ids (the field is appended to
    /// the record: §2 of the format) reads the same, with no build ids.
    #[test]
    fn fixture_without_build_ids_still_reads() {
        let p = older_fixture_reads("small-before-build-ids.mprof");
        assert!(p.modules.iter().all(|m| m.build_id.is_empty()));
    }

    /// The golden file as written before modules carried their file's size and time (for
    /// objects without a build id): it reads the same, with those left at 0 (unknown).
    #[test]
    fn fixture_without_file_identity_still_reads() {
        let p = older_fixture_reads("small-before-file-identity.mprof");
        assert!(p.modules.iter().all(|m| m.file_size == 0 && m.file_mtime_ns == 0));
        let old = |m: &Module| (m.path.clone(), m.base, m.start, m.end, m.build_id.clone());
        let want: Vec<_> = three_sites(true).modules.iter().map(old).collect();
        assert_eq!(p.modules.iter().map(old).collect::<Vec<_>>(), want);
    }

    /// A cut file (version 2, cut inside a block; version 1, cut inside a record) reads
    /// back the events before the cut, exactly, and says it was cut.
    #[test]
    fn truncated_fixture_reads_the_prefix() {
        let (tables, events) = three_sites_recording(true);
        for (name, full) in [
            (
                "small-v2-truncated.mprof",
                before_v4(&as_written(&events, format::TIME_UNIT_EXACT_NS)),
            ),
            (
                "small-v3-truncated.mprof",
                before_v4(&as_written(&events, format::TIME_UNIT_EXACT_NS)),
            ),
            ("small-v4-truncated.mprof", as_written(&events, format::TIME_UNIT_EXACT_NS)),
            // Version 1 kept times in nanoseconds, and the blocks' addresses.
            ("small-truncated.mprof", events.clone()),
        ] {
            let path = fixtures().join(name);
            let p = Profile::read_file(&path).unwrap();
            let len = std::fs::metadata(&path).unwrap().len();
            assert!(!p.complete, "{name}");
            assert!(
                p.warnings.iter().any(|w| w.contains(&format!("cut at byte {len}"))),
                "{name}: {:?}",
                p.warnings
            );
            let (read_tables, read) = events_of(name);
            assert!(!read_tables.complete, "{name}");
            let samples = |e: &[Event]| e.iter().filter(|e| matches!(e, Event::Sample(_))).count();
            assert!(samples(&read) > 0 && samples(&read) < samples(&full), "{name}: {read:?}");
            assert_eq!(read[..], full[..read.len()], "{name}: the events before the cut");
            let want = with_header(tables.clone(), p.header.clone()).with_events(&read);
            assert_same_aggregates(&p, &want, name);
            // Reports still work on a cut profile and say so.
            let text = report::top_table(&p, &TopOptions::default());
            assert!(text.contains("INCOMPLETE") && text.contains("may have crashed"), "{text}");
        }
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let e = Profile::read_file(fixtures().join("no-such-file.mprof")).unwrap_err();
        assert!(matches!(e, memprof::Error::Io(..)), "{e}");
    }
}

mod gc_view {
    use super::*;
    use memprof::profile::GcCycle;

    /// Times of the GC profile are in units of `U` ns, the exact mode's time unit in a file,
    /// so that they survive the file unchanged.
    const U: u64 = format::TIME_UNIT_EXACT_NS;

    /// Two managed-heap sites and one malloc site, exact mode, two GC cycles; times in `U`.
    ///
    /// | id | site | bytes | alloc t | freed t |
    /// |----|------|-------|---------|---------|
    /// | 1  | tree | 800   | 10      | never   |
    /// | 2  | tree | 160   | 20      | 150 (swept by cycle 1) |
    /// | 3  | log  | 400   | 30      | 500 (after cycle 1, before cycle 2) |
    /// | 4  | log  | 80    | 120 (during cycle 1) | never |
    /// | 5  | malloc site | 4000 | 15 | never |
    ///
    /// cycle 1: 100..200, 2.0 ns/word; cycle 2: 1000..1100, 0.5 ns/word. The events are in
    /// time order, each cycle reported at its end, as the collector does.
    fn gc_recording() -> (Profile, Vec<Event>) {
        let mut p = with_header(Profile::default(), Header { interval: 1.0, ..Header::default() });
        let named = |p: &mut Profile, addr: u64, f: &str| {
            p.symbols.insert(addr, vec![Symbol { function: f.into(), file: None, line: None }]);
        };
        named(&mut p, 0x10, "memprof::gc::Heap::alloc");
        named(&mut p, 0x20, "app::tree::node");
        named(&mut p, 0x30, "app::log::entry");
        named(&mut p, 0x40, "app::main");
        named(&mut p, 0x50, "app::buffer::make");
        named(&mut p, 0x60, "alloc::raw_vec::RawVec<T>::grow_one");
        named(&mut p, 0x70, "memprof::gc::mark::MarkState::push");
        p.stacks.push(Stack { frames: vec![0x10, 0x20, 0x40], truncated: false, label: 0 });
        p.stacks.push(Stack { frames: vec![0x10, 0x30, 0x40], truncated: false, label: 0 });
        p.stacks.push(Stack { frames: vec![0x50, 0x40], truncated: false, label: 0 });
        // The collector's own mark stack, a malloc block: not a managed-heap block.
        p.stacks.push(Stack { frames: vec![0x60, 0x70, 0x40], truncated: false, label: 0 });
        let samples: Vec<Sample> = [(6, 3, 8000, 5), (1, 0, 800, 10), (5, 2, 4000, 15)]
            .into_iter()
            .chain([(2, 0, 160, 20), (3, 1, 400, 30), (4, 1, 80, 120)])
            .map(|(id, stack, size, t)| Sample {
                id,
                stack,
                time_ns: t * U,
                thread: 1,
                addr: 0,
                size,
                k: size,
            })
            .collect();
        let s = |id| Event::Sample(*samples.iter().find(|s| s.id == id).unwrap());
        let free =
            |id, t: u64| Event::Free(Free::of(samples.iter().find(|s| s.id == id).unwrap(), t * U));
        let cycle = |cycle, start: u64, ns_per_word| {
            Event::GcCycle(GcCycle {
                cycle,
                start_ns: start * U,
                end_ns: (start + 100) * U,
                mark_ns: 60,
                slices: 2,
                longest_slice_ns: 40,
                words_marked: 150,
                ns_per_word,
                sweep_ns: 40,
                heap_words: 4096,
                live_words: 150,
            })
        };
        let events = vec![
            s(6),
            s(1),
            s(5),
            s(2),
            s(3),
            s(4),
            free(2, 150),
            cycle(1, 100, 2.0),
            free(3, 500),
            cycle(2, 1000, 0.5),
        ];
        p.complete = true;
        (p, events)
    }

    fn gc_profile() -> Profile {
        let (tables, events) = gc_recording();
        tables.with_events(&events)
    }

    #[test]
    fn mark_time_is_live_words_times_ns_per_word() {
        let p = gc_profile();
        // Cycle 1 marks samples 1 (100 words) and 3 (50 words): 150 words × 2.0 ns.
        // Cycle 2 marks 1 (100 words) and 4 (10 words): 110 words × 0.5 ns.
        let per_cycle = report::gc_cycle_samples(&p);
        assert_eq!(per_cycle.len(), 2);
        assert_eq!(
            (per_cycle[0].objects, per_cycle[0].bytes, per_cycle[0].mark_ns),
            (2.0, 1200.0, 300.0)
        );
        assert_eq!(
            (per_cycle[1].objects, per_cycle[1].bytes, per_cycle[1].mark_ns),
            (2.0, 880.0, 55.0)
        );
        let totals = report::stack_totals(&p, View::Gc);
        let by_stack: HashMap<u32, f64> = totals.iter().map(|t| (t.stack, t.bytes)).collect();
        // tree: 100 words × 2.0 + 100 × 0.5 = 250 ns; log: 50 × 2.0 + 10 × 0.5 = 105 ns.
        assert_eq!(by_stack.get(&0), Some(&250.0));
        assert_eq!(by_stack.get(&1), Some(&105.0));
        assert_eq!(by_stack.get(&2), None, "malloc blocks are not marked by the collector");
        assert_eq!(by_stack.get(&3), None, "nor is the collector's own malloc'd mark stack");
        // A free that arrives after the cycle's record but happened before its end (block 2,
        // swept by cycle 1) is taken back out of the cycle: the same attribution.
        let (tables, mut events) = gc_recording();
        events.swap(6, 7);
        assert!(matches!((events[6], events[7]), (Event::GcCycle(_), Event::Free(_))));
        let late = tables.with_events(&events);
        assert_eq!(report::gc_cycle_samples(&late), per_cycle);
        assert_eq!(report::stack_totals(&late, View::Gc), totals);
    }

    #[test]
    fn folded_flamegraph_and_top_table_show_the_gc() {
        let p = gc_profile();
        let lines = report::collapsed(&p, View::Gc);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines.iter().any(|l| l.ends_with("app::tree::node;memprof::gc::Heap::alloc 250")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.ends_with("app::log::entry;memprof::gc::Heap::alloc 105")),
            "{lines:?}"
        );
        let mut svg = Vec::new();
        report::flamegraph(&p, &FlameOptions { view: View::Gc, ..Default::default() }, &mut svg)
            .unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("GC mark time") && svg.contains("app::tree::node"));
        assert!(!svg.contains("app::buffer::make"));
        let top = report::top_table(&p, &TopOptions::default());
        assert!(top.contains("GC cycles: 2"), "{top}");
        let rows: Vec<&str> = top.lines().skip_while(|l| !l.starts_with("GC cycles")).collect();
        assert_eq!(rows.len(), 4, "{top}");
        assert!(
            rows[2].trim_start().starts_with('1')
                && rows[2].contains("2.00")
                && rows[2].ends_with("2 (1.17 KiB)"),
            "{top}"
        );
        assert!(rows[3].contains("0.50") && rows[3].ends_with("2 (880 B)"), "{top}");
    }

    #[test]
    fn cycles_survive_the_file() {
        let (tables, events) = gc_recording();
        let p = tables.clone().with_events(&events);
        let bytes = format::write_events(Vec::new(), &tables, &events).unwrap();
        let q = Profile::read_from(&bytes[..]).unwrap();
        assert_eq!(q.gc_cycles, p.gc_cycles);
        assert_eq!(report::gc_cycle_samples(&q), report::gc_cycle_samples(&p));
        assert_eq!(report::stack_totals(&q, View::Gc), report::stack_totals(&p, View::Gc));
    }
}
