//! Heap by tracing span (the `tracing` feature): `memprof::tracing::SpanLayer` labels each
//! sample with the path of the spans entered on the allocating thread.
//!
//! - exact mode (interval 1): two span paths allocate known amounts; the profile, the
//!   folded stacks grouped by span (library and `memprof report --group-by span`), the top
//!   table and the pprof labels read back by `go tool pprof` give exactly those amounts;
//!   a block freed on another thread, outside every span, leaves its span's live bytes;
//! - async: tasks instrumented with spans on a multi-thread tokio runtime, allocating
//!   across `.await` points, get exactly their own blocks;
//! - the unsampled allocation path costs the same instructions (callgrind) with the layer
//!   installed and a span entered as without.
//!
//! One session at a time (a process has one): the tests take [`serial`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, Once};

use memprof::profile::Profile;
use memprof::report::{self, GroupBy, TopOptions, View};
use memprof::{Config, Recorder, Sampled};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

#[global_allocator]
static GLOBAL: Sampled<System> = Sampled::new(System);

mod common;
use common::{scratch, serial, text, MEMPROF};

/// Installs the layer (keeping the `endpoint` field) as the global subscriber, once.
fn install_layer() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let layer = memprof::tracing::SpanLayer::new().with_field("endpoint");
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .expect("no other global subscriber");
    });
}

fn exact() -> Config {
    Config { interval: 1.0, ..Config::default() }
}

/// A block of exactly `n` bytes (one allocation).
#[inline(never)]
fn block(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    v.push(1u8);
    black_box(v)
}

/// Bytes of `profile` under `view` by span path (`None`: outside every span), counting
/// only blocks of the given sizes.
fn by_span(profile: &Profile, view: View, sizes: &[u64]) -> HashMap<Option<String>, f64> {
    let pairs = match view {
        View::Alloc => &profile.allocated,
        View::Live => &profile.live,
        _ => unreachable!(),
    };
    let mut out: HashMap<Option<String>, f64> = HashMap::new();
    for (&(stack, size), t) in pairs {
        if sizes.contains(&size) && t.k > 0 {
            *out.entry(profile.stack_label(stack).map(str::to_owned)).or_default() +=
                profile.estimated_bytes(t.k);
        }
    }
    out
}

/// Sums the folded lines whose first frames are the span path `span`.
fn folded_sum(lines: &[String], span: &str) -> f64 {
    let prefix = format!("{span};");
    lines
        .iter()
        .filter(|l| l.starts_with(&prefix))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

const ALPHA: &str = "alpha";
const UPLOAD: &str = "server;handle{endpoint=/upload}";

/// Allocates under the two span paths: `alpha` 7 × 1 000 B kept and 3 000 B freed inside
/// it; `server;handle{endpoint=/upload}` 20 000 B kept and 5 000 B handed back (freed by
/// the caller on another thread, outside every span). Sizes are unique to this workload.
fn workload() -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut kept = Vec::with_capacity(16);
    tracing::info_span!("alpha").in_scope(|| {
        for _ in 0..7 {
            kept.push(block(1000));
        }
        drop(block(3000));
    });
    let handed = tracing::info_span!("server").in_scope(|| {
        tracing::info_span!("handle", endpoint = "/upload").in_scope(|| {
            kept.push(block(20_000));
            block(5000)
        })
    });
    (kept, handed)
}

const SIZES: &[u64] = &[1000, 3000, 20_000, 5000];

#[test]
fn exact_amounts_by_span_in_every_output() {
    let _g = serial();
    install_layer();
    let dir = scratch("span-exact");
    let file = dir.join("exact.mprof");
    let session = memprof::start(exact(), Recorder::to_file(&file)).unwrap();
    let (kept, handed) = workload();
    // Freed on another thread, outside every span: the free keeps the allocation's label.
    std::thread::spawn(move || drop(handed)).join().unwrap();
    let profile = session.stop().unwrap().finish().unwrap();
    drop(kept);

    // The profile itself.
    let alloc = by_span(&profile, View::Alloc, SIZES);
    let live = by_span(&profile, View::Live, SIZES);
    assert_eq!(alloc.get(&Some(ALPHA.into())), Some(&10_000.0), "{alloc:?}");
    assert_eq!(alloc.get(&Some(UPLOAD.into())), Some(&25_000.0), "{alloc:?}");
    assert_eq!(alloc.len(), 2, "no block of the workload outside its span: {alloc:?}");
    assert_eq!(live.get(&Some(ALPHA.into())), Some(&7000.0), "{live:?}");
    assert_eq!(live.get(&Some(UPLOAD.into())), Some(&20_000.0), "{live:?}");

    // Folded stacks grouped by span: the span path is the root frames. The workload's
    // blocks are the only allocations under these spans.
    let folded = report::collapsed_grouped(&profile, View::Alloc, GroupBy::Span);
    assert_eq!(folded_sum(&folded, ALPHA), 10_000.0, "{folded:#?}");
    assert_eq!(folded_sum(&folded, UPLOAD), 25_000.0, "{folded:#?}");
    let folded_live = report::collapsed_grouped(&profile, View::Live, GroupBy::Span);
    assert_eq!(folded_sum(&folded_live, ALPHA), 7000.0, "{folded_live:#?}");
    assert_eq!(folded_sum(&folded_live, UPLOAD), 20_000.0, "{folded_live:#?}");
    assert!(folded.iter().any(|l| l.starts_with("[no span];")), "other allocations: {folded:#?}");
    // Ungrouped, no line starts with a span.
    assert!(report::collapsed(&profile, View::Alloc).iter().all(|l| !l.starts_with("alpha;")));

    // The top table, grouped: rows `span › site`.
    let sites = report::site_totals_grouped(&profile, GroupBy::Span);
    let sum = |span: &str, f: fn(&report::SiteTotal) -> f64| -> f64 {
        let prefix = format!("{span} › ");
        sites.iter().filter(|s| s.site.starts_with(&prefix)).map(f).sum()
    };
    assert_eq!(sum(ALPHA, |s| s.alloc_bytes), 10_000.0);
    assert_eq!(sum(ALPHA, |s| s.live_bytes), 7000.0);
    assert_eq!(sum(UPLOAD, |s| s.alloc_bytes), 25_000.0);
    assert_eq!(sum(UPLOAD, |s| s.live_bytes), 20_000.0);
    let table = report::top_table(
        &profile,
        &TopOptions {
            limit: 1000,
            human_bytes: false,
            group_by: GroupBy::Span,
            ..Default::default()
        },
    );
    assert!(table.contains("alpha › ") && table.contains(&format!("{UPLOAD} › ")), "{table}");

    // The command line, from the file: `memprof report --group-by span`.
    let collapsed = dir.join("live.folded");
    let out = Command::new(MEMPROF)
        .arg("report")
        .arg(&file)
        .args(["--group-by", "span", "--view", "live", "--top", "1000", "--collapsed"])
        .arg(&collapsed)
        .arg("--flamegraph")
        .arg(dir.join("live.svg"))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("alpha › ") && stdout.contains(&format!("{UPLOAD} › ")), "{stdout}");
    let lines: Vec<String> =
        std::fs::read_to_string(&collapsed).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(folded_sum(&lines, ALPHA), 7000.0, "{lines:#?}");
    assert_eq!(folded_sum(&lines, UPLOAD), 20_000.0, "{lines:#?}");
    let svg = std::fs::read_to_string(dir.join("live.svg")).unwrap();
    assert!(svg.contains("handle{endpoint=/upload}"), "the flamegraph shows the span");

    // pprof: the `span` string label, read back by `go tool pprof`.
    let pb = dir.join("exact.pb.gz");
    let f = std::fs::File::create(&pb).unwrap();
    report::write_pprof(&profile, &report::PprofOptions::default(), f).unwrap();
    if let Some(raw) = go_pprof(&pb, &["-raw"]) {
        let sums = raw_sums_by_span(&raw);
        // [alloc objects, alloc bytes, inuse objects, inuse bytes] of the span's samples.
        let alpha = sums.get(ALPHA).copied().unwrap_or_default();
        let upload = sums.get(UPLOAD).copied().unwrap_or_default();
        assert!(alpha[1] >= 10_000 && alpha[3] >= 7000, "{alpha:?}\n{raw}");
        let tags = go_pprof(&pb, &["-tags"]).unwrap();
        assert!(tags.contains("span:"), "{tags}");
        assert!(tags.contains(ALPHA) && tags.contains(UPLOAD), "{tags}");
        // Exact per size: the workload's (size, span) samples.
        let sized = raw_by_span_and_size(&raw);
        assert_eq!(sized.get(&(ALPHA.to_owned(), 1000)), Some(&[7, 7000, 7, 7000]), "{raw}");
        assert_eq!(sized.get(&(ALPHA.to_owned(), 3000)), Some(&[1, 3000, 0, 0]), "{raw}");
        assert_eq!(sized.get(&(UPLOAD.to_owned(), 20_000)), Some(&[1, 20_000, 1, 20_000]));
        assert_eq!(sized.get(&(UPLOAD.to_owned(), 5000)), Some(&[1, 5000, 0, 0]), "{raw}");
        assert!(upload[3] >= 20_000, "{upload:?}");
        // -tagfocus keeps one span's samples.
        let focused = go_pprof(&pb, &["-raw", &format!("-tagfocus=span={ALPHA}")]).unwrap();
        let f = raw_sums_by_span(&focused);
        assert_eq!(f.keys().collect::<Vec<_>>(), vec![ALPHA], "{focused}");
    }
}

/// Runs `go tool pprof ARGS file`: see [`common::go_pprof`] (`None`, skipped with one line,
/// without `go` outside CI).
fn go_pprof(path: &Path, args: &[&str]) -> Option<String> {
    common::go_pprof(args, path.as_os_str(), "the go tool pprof check of span labels")
}

/// The samples of `go tool pprof -raw`: (values, bytes label, span label), from lines like
/// `   1   1000   1   1000: 1 2 3` followed by `bytes:[1000]` and `span:[alpha]`.
fn raw_samples(raw: &str) -> Vec<([i64; 4], Option<i64>, Option<String>)> {
    let mut out: Vec<([i64; 4], Option<i64>, Option<String>)> = Vec::new();
    let mut in_samples = false;
    for line in raw.lines() {
        if line.starts_with("Samples:") {
            in_samples = true;
            continue;
        }
        if line.starts_with("Locations") {
            break;
        }
        if !in_samples {
            continue;
        }
        let t = line.trim();
        if let Some(v) = t.strip_prefix("bytes:[").and_then(|r| r.strip_suffix(']')) {
            if let Some(last) = out.last_mut() {
                last.1 = v.parse().ok();
            }
            continue;
        }
        if let Some(v) = t.strip_prefix("span:[").and_then(|r| r.strip_suffix(']')) {
            if let Some(last) = out.last_mut() {
                last.2 = Some(v.to_owned());
            }
            continue;
        }
        let Some((values, _)) = line.split_once(':') else { continue };
        let nums: Result<Vec<i64>, _> = values.split_whitespace().map(str::parse).collect();
        if let Ok(v) = nums {
            if v.len() == 4 {
                out.push(([v[0], v[1], v[2], v[3]], None, None));
            }
        }
    }
    out
}

fn raw_sums_by_span(raw: &str) -> HashMap<String, [i64; 4]> {
    let mut out: HashMap<String, [i64; 4]> = HashMap::new();
    for (v, _, span) in raw_samples(raw) {
        if let Some(span) = span {
            let e = out.entry(span).or_default();
            e.iter_mut().zip(v).for_each(|(a, x)| *a += x);
        }
    }
    out
}

fn raw_by_span_and_size(raw: &str) -> HashMap<(String, i64), [i64; 4]> {
    let mut out: HashMap<(String, i64), [i64; 4]> = HashMap::new();
    for (v, size, span) in raw_samples(raw) {
        if let (Some(span), Some(size)) = (span, size) {
            let e = out.entry((span, size)).or_default();
            e.iter_mut().zip(v).for_each(|(a, x)| *a += x);
        }
    }
    out
}

/// Block sizes of the async test, one per endpoint, unique to it.
const ASYNC_A: usize = 40_001;
const ASYNC_B: usize = 50_003;

#[test]
fn async_tasks_on_a_multi_thread_runtime_keep_their_spans() {
    let _g = serial();
    install_layer();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let session = memprof::start(exact(), Recorder::new()).unwrap();
    let threads = Mutex::new(std::collections::HashSet::new());
    let kept: Vec<Vec<u8>> = rt.block_on(async {
        let mut handles = Vec::new();
        for task in 0..8 {
            let (endpoint, size) = if task % 2 == 0 { ("/a", ASYNC_A) } else { ("/b", ASYNC_B) };
            let span = tracing::info_span!("request", endpoint);
            handles.push(tokio::spawn(
                async move {
                    let mut kept = Vec::new();
                    let mut seen = Vec::new();
                    for i in 0..6 {
                        // Across awaits: the task may resume on the other worker.
                        if i % 2 == 0 {
                            tokio::task::yield_now().await;
                        } else {
                            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                        }
                        seen.push(std::thread::current().id());
                        kept.push(block(size));
                    }
                    // Two of the six die here, still inside the span.
                    kept.truncate(4);
                    (kept, seen)
                }
                .instrument(span),
            ));
        }
        let mut all = Vec::new();
        for h in handles {
            let (kept, seen) = h.await.unwrap();
            all.extend(kept);
            threads.lock().unwrap().extend(seen);
        }
        all
    });
    let profile = session.stop().unwrap().into_profile();
    drop(kept);
    drop(rt);
    let sizes = [ASYNC_A as u64, ASYNC_B as u64];
    let alloc = by_span(&profile, View::Alloc, &sizes);
    let live = by_span(&profile, View::Live, &sizes);
    let (a, b) = (Some("request{endpoint=/a}".to_owned()), Some("request{endpoint=/b}".to_owned()));
    // 4 tasks per endpoint, 6 blocks each, 4 of them kept.
    assert_eq!(alloc.get(&a), Some(&(4.0 * 6.0 * ASYNC_A as f64)), "{alloc:?}");
    assert_eq!(alloc.get(&b), Some(&(4.0 * 6.0 * ASYNC_B as f64)), "{alloc:?}");
    assert_eq!(alloc.len(), 2, "every block under its own task's span: {alloc:?}");
    assert_eq!(live.get(&a), Some(&(4.0 * 4.0 * ASYNC_A as f64)), "{live:?}");
    assert_eq!(live.get(&b), Some(&(4.0 * 4.0 * ASYNC_B as f64)), "{live:?}");
    // And no block of one endpoint's size under the other's span.
    for (&(stack, size), t) in &profile.allocated {
        if t.k > 0 && size == ASYNC_A as u64 {
            assert_eq!(profile.stack_label(stack), Some("request{endpoint=/a}"));
        }
    }
    eprintln!("async test: tasks ran on {} worker threads", threads.lock().unwrap().len());
}

/// A tracker that keeps nothing: the unsampled path is measured, not the drain.
struct Nothing;
impl memprof::Tracker for Nothing {
    type Token = ();
    fn alloc(&mut self, _: &memprof::Allocation<'_>) -> Option<()> {
        None
    }
}

/// `n` pairs of 64-byte allocations and frees through `a`.
#[inline(never)]
fn pairs(a: &impl GlobalAlloc, n: u64) {
    let layout = Layout::from_size_align(64, 8).unwrap();
    for _ in 0..n {
        // SAFETY: the layout has a non-zero size; each block is freed once with it.
        unsafe {
            let p = a.alloc(layout);
            black_box(p);
            a.dealloc(p, layout);
        }
    }
}

/// The child half of [`unsampled_path_instructions_with_the_layer`]: `MEMPROF_SPAN_LOOP` =
/// `LAYER ALLOCATOR N INTERVAL`: `plain` or `span` (the layer installed and two spans
/// entered around the loop), `system` or `sampled` (`Sampled<System>`), pairs, interval.
fn alloc_loop(spec: &str) {
    let w: Vec<&str> = spec.split(' ').collect();
    let (layer, allocator, n) = (w[0], w[1], w[2].parse::<u64>().unwrap());
    let config = Config { interval: w[3].parse().unwrap(), seed: Some(3), ..Config::default() };
    let _session = memprof::start(config, Nothing).unwrap();
    let run = || match allocator {
        "sampled" => pairs(&Sampled::new(System), n),
        _ => pairs(&System, n),
    };
    if layer == "span" {
        install_layer();
        tracing::info_span!("server")
            .in_scope(|| tracing::info_span!("handle", endpoint = "/upload").in_scope(run));
    } else {
        run();
    }
}

/// Instructions of the test binary running [`alloc_loop`] under callgrind.
fn callgrind(spec: &str) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(&exe)
        .args(["--exact", "unsampled_path_instructions_with_the_layer", "--test-threads=1"])
        .env("MEMPROF_SPAN_LOOP", spec)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let line = text.lines().find(|l| l.contains("Collected :")).expect("callgrind's total");
    line.rsplit(':').next().unwrap().trim().replace(',', "").parse().unwrap()
}

/// The unsampled allocation path does not read the label: with the layer installed and two
/// spans entered, memprof adds to a malloc+free pair the instructions it adds without.
/// Measured as `benches/overhead.rs` does (callgrind, the difference between 100 000 and
/// 1 100 000 pairs, `Sampled<System>` minus `System`), without samples (an interval of
/// 10¹⁵ bytes: the unsampled path alone) and at the default interval (a sample about every
/// 8 192 pairs, seeded alike). `System` itself is measured in each case: glibc's `free`
/// costs a few instructions more or less with the arena its chunks come from, which
/// depends on what the process allocated before (tracing's registry), not on memprof.
#[test]
fn unsampled_path_instructions_with_the_layer() {
    if let Ok(spec) = std::env::var("MEMPROF_SPAN_LOOP") {
        alloc_loop(&spec);
        return;
    }
    let _g = serial();
    if Command::new("valgrind").arg("--version").output().is_err() {
        // Required in CI (`.ci/run` installs it); elsewhere one line says what was skipped.
        if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
            panic!("valgrind is not on PATH, and CI requires the callgrind check");
        }
        eprintln!(
            "skipped: the callgrind count of the unsampled path with the span layer (valgrind \
             is not on PATH; Debian: apt-get install valgrind)"
        );
        return;
    }
    let (small, large) = (100_000u64, 1_100_000u64);
    let per_pair = |layer: &str, allocator: &str, interval: f64| -> f64 {
        let a = callgrind(&format!("{layer} {allocator} {small} {interval}"));
        let b = callgrind(&format!("{layer} {allocator} {large} {interval}"));
        (b as f64 - a as f64) / (large - small) as f64
    };
    for interval in [1e14, 512.0 * 1024.0] {
        let mut added = Vec::new();
        for layer in ["plain", "span"] {
            let (sys, sampled) =
                (per_pair(layer, "system", interval), per_pair(layer, "sampled", interval));
            eprintln!(
                "interval {interval}, {layer:5}: System {sys:.3}, Sampled<System> {sampled:.3} \
                 instructions per malloc+free pair: memprof adds {:.3}",
                sampled - sys
            );
            added.push(sampled - sys);
        }
        assert!((added[0] - added[1]).abs() < 0.05, "interval {interval}: {added:?}");
        // And the path itself stays within its budget (`cargo bench --bench overhead`
        // prints the figure), half an instruction above it: a change that copies a hit's
        // payload on the fast path, or reads a thread-local there, shows here as a
        // doubling, and a bounds check come back into `free`'s filter test (the mask
        // read, `engine/live/filter.rs`) as a failure.
        assert!(added[0] < 17.5, "interval {interval}: memprof adds {added:?} per pair");
    }
}
