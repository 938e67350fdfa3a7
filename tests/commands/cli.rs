//! The `memprof` command as a user meets it: reports of recorded files, exports, the demo,
//! and one-line errors (never a panic) for bad input.

use crate::common::{assert_one_line_error, fixture_file, scratch, text};
use std::process::{Command, Output};

fn memprof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memprof")).args(args).output().expect("memprof runs")
}

/// The same profile as written by older memprofs (format version 1) and now (version 2).
const SMALL: [&str; 2] = ["small.mprof", "small-v2.mprof"];

#[test]
fn report_prints_top_sites() {
    for name in SMALL {
        let out = memprof(&["report", &fixture_file(name)]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let s = text(&out.stdout);
        // The fixture's three sites, largest first, exact numbers (exact mode).
        let parse = s.find("app::parse::parse_line").unwrap();
        let cache = s.find("app::cache::Cache::insert").unwrap();
        let config = s.find("app::config::load").unwrap();
        assert!(parse < cache && cache < config, "{name}: {s}");
        assert!(s.contains("exact"), "{name}: {s}");
        assert!(s.contains("total (3 sites)"), "{name}: {s}");
    }
}

#[test]
fn report_writes_every_export() {
    let dir = scratch("cli-exports");
    let (svg, pb, folded) = (dir.join("a.svg"), dir.join("a.pb.gz"), dir.join("a.folded"));
    let out = memprof(&[
        "report",
        &fixture_file("small.mprof"),
        "--view",
        "live",
        "--flamegraph",
        svg.to_str().unwrap(),
        "--pprof",
        pb.to_str().unwrap(),
        "--collapsed",
        folded.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("app::cache::Cache::insert"));
    let pb = std::fs::read(&pb).unwrap();
    assert_eq!(&pb[..2], &[0x1f, 0x8b], "gzip magic");
    let folded = std::fs::read_to_string(&folded).unwrap();
    let lines: Vec<&str> = folded.lines().collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted, "folded output is sorted");
    // Live view: the folded values add up to the live bytes of the fixture (6.66 KiB).
    let total: u64 =
        lines.iter().map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum();
    let top = text(&memprof(&["report", &fixture_file("small.mprof")]).stdout);
    assert!(top.contains("6.66 KiB"), "{top}");
    assert!((6815..=6825).contains(&total), "live total {total}");
}

#[test]
fn truncated_profile_reads_with_a_warning() {
    for name in ["small-truncated.mprof", "small-v2-truncated.mprof"] {
        let out = memprof(&["report", &fixture_file(name)]);
        assert!(out.status.success(), "{name}");
        let err = text(&out.stderr);
        assert!(err.contains("warning") && err.contains("cut at byte"), "{name}: {err}");
        assert!(text(&out.stdout).contains("app::parse::parse_line"), "{name}");
    }
}

#[test]
fn bad_input_gets_one_line_errors() {
    assert_one_line_error(
        &memprof(&["report", "/no/such/file.mprof"]),
        Some(1),
        "/no/such/file.mprof",
    );
    assert_one_line_error(&memprof(&["report", env!("CARGO_MANIFEST_DIR")]), Some(1), "directory");
    let dir = scratch("cli-bad");
    let junk = dir.join("junk.mprof");
    std::fs::write(&junk, b"this is not a profile at all").unwrap();
    assert_one_line_error(
        &memprof(&["report", junk.to_str().unwrap()]),
        Some(1),
        "not a memprof profile",
    );
    let empty = dir.join("empty.mprof");
    std::fs::write(&empty, b"").unwrap();
    let out = memprof(&["report", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!text(&out.stderr).contains("panicked"));
    assert_one_line_error(
        &memprof(&["report", &fixture_file("small.mprof"), "--flamegraph", "/no/such/dir/x.svg"]),
        Some(1),
        "/no/such/dir/x.svg",
    );
    let out = memprof(&["report", &fixture_file("small.mprof"), "--view", "sideways"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("sideways"));
    let out = memprof(&["report", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    // A view with nothing to count says why, and writes nothing.
    let svg = dir.join("gc.svg");
    let out = memprof(&[
        "report",
        &fixture_file("small.mprof"),
        "--view",
        "gc",
        "--flamegraph",
        svg.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, Some(1), "no garbage-collection cycles");
    assert!(!svg.exists());
}

/// `--view` orders the table: live puts the site holding the most at the end first.
#[test]
fn report_view_orders_the_table() {
    let out = memprof(&["report", &fixture_file("small.mprof"), "--view", "live"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("sites ordered by live bytes at the end (--view live)"), "{s}");
}

#[test]
fn demo_writes_flamegraphs_naming_the_examples_functions() {
    let dir = scratch("cli-demo");
    let out = memprof(&["demo", "--quick", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap();
    let worst = read("worst_case.alloc.svg");
    assert!(worst.contains("worst_case::allocate"), "worst_case flamegraph names allocate");
    assert!(worst.contains("worst_case::recur"), "and the recursion");
    let alloc = read("leaky_cache.alloc.svg");
    let live = read("leaky_cache.live.svg");
    assert!(alloc.contains("leaky_cache::parse_request"));
    assert!(alloc.contains("leaky_cache::render_page"));
    assert!(live.contains("Cache::remember"));
    assert!(!live.contains("leaky_cache::parse_request"), "requests die: not in the live view");
    // The profile the demo streamed reads back.
    let out = memprof(&["report", dir.join("leaky_cache.mprof").to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // The same workload recorded through the preload library as an unmodified program.
    let recorded = read("record_leaky_cache.live.svg");
    assert!(recorded.contains("Cache::remember"), "memprof record sees who holds the cache");
    assert!(read("record_leaky_cache.alloc.svg").contains("leaky_cache::parse_request"));

    // The HTML reports of the leaky cache and the managed heap.
    assert!(read("leaky_cache.html").contains("Cache::remember"));
    assert!(read("gc_workload.html").contains("gc_workload::make_record"));

    // The managed heap: samples and GC cycles in one profile, mark time by site.
    let gc = read("gc_workload.gc.svg");
    assert!(gc.contains("GC mark time") && gc.contains("gc_workload::make_record"));
    assert!(!gc.contains("gc_workload::make_temp"), "temporaries die before they are marked");
    let folded = dir.join("gc.folded");
    let out = memprof(&[
        "report",
        dir.join("gc_workload.mprof").to_str().unwrap(),
        "--view",
        "gc",
        "--collapsed",
        folded.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let top = text(&out.stdout);
    assert!(top.contains("GC cycles: ") && top.contains("ns/word"), "{top}");
    let folded = std::fs::read_to_string(folded).unwrap();
    assert!(folded.lines().all(|l| l.contains("gc_workload::")), "{folded}");
}
