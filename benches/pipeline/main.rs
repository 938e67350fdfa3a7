//! The whole profile pipeline on two malloc-heavy programs: what a user waits for, from starting `memprof record` to reading the
//! report, beside the plain program and beside heaptrack, measured side by side in one run
//! and printed as ratios.
//!
//! ```text
//! cargo build --release                                  # target/release/memprof
//! cargo bench --bench pipeline                           # full size, 3 rounds
//! cargo bench --bench pipeline -- --quick                # small workloads, 1 round
//! cargo bench --bench pipeline -- --rounds 5             # more rounds: steadier medians
//! cargo bench --bench pipeline -- --only cpython         # or --only c
//! ```
//!
//! The two programs:
//!
//! 1. **CPython** (`python3` on the `PATH`, 3.11) with `PYTHONMALLOC=malloc`, so that every
//!    object allocation goes through `malloc`, on a JSON round trip: the script below
//!    ([`JSON_SCRIPT`]) builds 200 000 small dict records (50 000 with `--quick`), then
//!    `json.dumps` and `json.loads` them. The interpreter is resolved once with
//!    `sys.executable` and run by its path: a pyenv shim is a shell script, and `memprof
//!    record` would profile the shell (which then executes Python unprofiled);
//! 2. **statmemprof's worst case (ocaml/ocaml#8731) in C**, `fixtures/c/worst_case.c` built with `cc -O2 -g`:
//!    recursion depth 20, two mallocs and two frees per iteration, 10 M iterations (2 M with
//!    `--quick`).
//!
//! Each round runs, for each program, one after the other: the plain program; `memprof
//! record` with `--interval 800 --depth 10` (statmemprof's λ = 0.01), with the default
//! interval, and with `--interval 1` (the exact mode: every allocation and free); then
//! `heaptrack -o FILE prog` followed by `heaptrack_print FILE.zst` (or `.gz`, whichever
//! heaptrack wrote; its output to a file), timed together as one job, since a heaptrack
//! user waits for both. Every time is the whole process (start, the program, and what
//! `memprof record` does after it exits: symbols, the summary, the flamegraph).
//!
//! The C program also runs, in each round, beside those:
//!
//! - **under the preload library set by hand**, as a user would without `memprof record`:
//!   `LD_PRELOAD=<memprof preload-path>` with `MEMPROF_INTERVAL=800 MEMPROF_DEPTH=10
//!   MEMPROF_OUTPUT=<scratch file>` (every other `MEMPROF_*` variable removed, so the rest
//!   are the library's defaults, as under `record`; no `MEMPROF_RINGS`, so the library runs
//!   its in-process session and writes the profile itself), right after `record
//!   --interval 800 --depth 10`; timed like the others (start to `wait4`); a run that
//!   leaves no profile panics (the library did not run);
//! - **forwarding only**, the floor of the default interval: the same with
//!   `MEMPROF_INTERVAL=256T` alone, the largest interval the library accepts (it has no
//!   setting that turns sampling off), right after `record` at the default interval;
//! - **two copies at once**, after the memprof modes: two plain copies started one right
//!   after the other, timed from the first start until `wait4` has returned for both, then
//!   two `memprof record --interval 800 --depth 10 -o <a file each>` the same way; the CPU
//!   time (user + system, from `wait4`) of both is summed;
//! - **exit to exit**: every run of the C program has `WORST_CASE_EXIT_STAMP=<file>`, to
//!   which it writes the wall clock (CLOCK_REALTIME, ns) just before `main` returns (one
//!   open/write/close, in every run alike); for `record --interval 800 --depth 10` the bench
//!   reads it and takes it from the wall clock (`SystemTime::now()`) when `wait4` on
//!   `record` returned: the time from the program's exit to `record`'s.
//!
//! This machine's speed drifts by tens of per cent over seconds (a shared host, 2 cores), so
//! the figures are ratios between runs of the same round, and the printed ratio is the
//! median over the rounds; bare seconds are printed for orientation only.
//!
//! For each memprof mode it prints the end-to-end time over the plain program's and over
//! heaptrack's record + print, the profiler's CPU per event (the run's user + system time,
//! every thread of `record` and of the program, from `wait4`, less the plain program's;
//! heaptrack's likewise, its `heaptrack_interpret` and `heaptrack_print` included), the
//! profile's size, and its bytes per event (events =
//! samples + frees + moves, read from the `samples: N (F freed, M moved)` line of the
//! summary that `memprof record` and `memprof report` print; if neither prints it, the
//! exact mode of the C program counts its known 2 mallocs + 2 frees per iteration, marked
//! `*`, and the other modes show n/a). For the exact-mode profile it also times `memprof
//! report FILE` (run in a scratch directory, where any default outputs land) and reads its
//! peak RSS (`ru_maxrss` of that child, from `wait4`), beside heaptrack's file size and
//! `heaptrack_print`'s time and peak RSS. The issue's targets are printed next to the
//! figures with ✓ or ✗; the bench does not assert them. For the C program it also prints
//! the hand-set preload run over the plain program, and `record --interval 800 --depth 10`
//! over it (target ≤ 1.10×, beside ≤ 1.25× plain); the floor over the plain program, and
//! `record` at the default interval over it (target ≤ 1.01×); the two pairs' times and
//! summed CPU, and the records' pair over the plain pair (target ≤ 1.5×); and exit to exit
//! (target ≤ 50 ms). Each figure is the median over the rounds (of the ratio between runs
//! of the same round, for a ratio). A run that fails (non-zero exit) panics with its
//! stderr; a missing `python3` or heaptrack skips that part with one line saying so.
//! Everything is written in a directory under the system's temporary directory, removed at
//! the end (also after a panic, not after a signal).

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

mod measure;
use measure::*;

/// The CPython workload: a JSON round trip of `argv[1]` small dict records.
const JSON_SCRIPT: &str = r#"
import json
import sys

n = int(sys.argv[1])
records = [
    {
        "id": i,
        "name": "user%d" % i,
        "email": "user%d@example.com" % i,
        "score": i * 0.25,
        "active": i % 3 == 0,
        "tags": ["t%d" % (i % 10), "x"],
    }
    for i in range(n)
]
text = json.dumps(records)
back = json.loads(text)
assert len(back) == n and back[-1] == records[-1]
print(len(text))
"#;

/// The memprof modes, in the order they are printed: a label and `memprof record`'s flags.
const MODES: [(&str, &[&str]); 3] = [
    ("exact (--interval 1)", &["--interval", "1"]),
    ("800 B, depth 10", &["--interval", "800", "--depth", "10"]),
    ("default interval", &[]),
];
const EXACT: usize = 0;
const I800: usize = 1;
const DEFAULT: usize = 2;
/// The order in which the modes run in a round: 800 B right after the plain program, whose
/// ratio to it has a target.
const RUN_ORDER: [usize; 3] = [1, 2, 0];

// The issue's targets.
const EXACT_VS_HEAPTRACK: f64 = 0.6;
/// The profiler's CPU per exact-mode event (all of `record`'s threads and the program's
/// sample path: the run's CPU less the plain program's), at most this share of
/// heaptrack's (its record, `heaptrack_interpret` and print, less the plain program's).
const EXACT_CPU_VS_HEAPTRACK: f64 = 1.0 / 3.0;
const BYTES_PER_EVENT: f64 = 4.0;
const EXACT_FILE_VS_HEAPTRACK: f64 = 2.0;
const REPORT_SECS: f64 = 1.5;
const REPORT_RSS_MB: f64 = 100.0;
const I800_VS_PLAIN: f64 = 1.25;
// The C program's.
/// `record --interval 800 --depth 10` over the hand-set preload library at the same settings.
const I800_VS_PRELOAD: f64 = 1.10;
/// Two `record --interval 800 --depth 10` started together over two plain copies.
const TWO_COPIES_VS_PLAIN: f64 = 1.5;
/// From the program's exit stamp to `wait4` on `record` returning, 800 B, depth 10.
const EXIT_TO_EXIT_MS: f64 = 50.0;
/// `record` at the default interval over the forwarding-only floor.
const DEFAULT_VS_FLOOR: f64 = 1.01;

/// The variable that tells worst_case.c where to write the wall clock (CLOCK_REALTIME, ns,
/// decimal) just before `main` returns.
const EXIT_STAMP: &str = "WORST_CASE_EXIT_STAMP";
/// The hand-set preload library's settings beside `record --interval 800 --depth 10`.
const PRELOAD_I800: [(&str, &str); 2] = [("MEMPROF_INTERVAL", "800"), ("MEMPROF_DEPTH", "10")];
/// The forwarding-only floor: the library has no setting that turns sampling off, so it
/// runs at the largest interval it accepts, 256 TiB (`MAX_INTERVAL`, src/config.rs; 1e15
/// is refused), a sample point every 256 TiB allocated on average: none in these runs,
/// which allocate a few GB.
const PRELOAD_FLOOR: [(&str, &str); 1] = [("MEMPROF_INTERVAL", "256T")];

const USAGE: &str =
    "usage: cargo bench --bench pipeline -- [--quick] [--rounds N] [--only cpython|c]";

struct Options {
    quick: bool,
    rounds: usize,
    only: Option<String>,
}

fn options() -> Options {
    let mut o = Options { quick: false, rounds: 0, only: None };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--rounds" => {
                o.rounds = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| panic!("--rounds takes a number > 0\n{USAGE}"))
            }
            "--only" => match args.next().as_deref() {
                Some(w @ ("cpython" | "c")) => o.only = Some(w.to_owned()),
                _ => panic!("--only takes cpython or c\n{USAGE}"),
            },
            // `cargo bench` passes `--bench` to every bench binary.
            "--bench" => {}
            _ => panic!("unknown argument {a:?}\n{USAGE}"),
        }
    }
    if o.rounds == 0 {
        o.rounds = if o.quick { 1 } else { 3 };
    }
    o
}

fn bench(w: &Workload, tools: &Tools, rounds: usize, dir: &Path) {
    println!();
    println!("== {} ==", w.title);
    let log = dir.join("stderr.log");
    let profile = dir.join("pipeline.mprof");
    let report_dir = dir.join("report");
    let ht_prefix = dir.join("ht");
    let mut plain = vec![];
    let mut modes: Vec<ModeRuns> = MODES.iter().map(|_| ModeRuns::default()).collect();
    let mut ht = HeaptrackRuns::default();
    let mut c = CRuns::default();
    let preloaded = dir.join("preloaded.mprof");
    for round in 0..rounds {
        eprint!("  round {}/{rounds}: plain", round + 1);
        let plain_run = run("the plain program", &mut w.plain(), Out::Null, &log);
        let (p, plain_cpu) = (plain_run.secs, plain_run.cpu);
        plain.push(p);
        let mut exact_events = None;
        let mut secs = [0.0; MODES.len()];
        for &m in &RUN_ORDER {
            let (label, flags) = MODES[m];
            eprint!(", {label}");
            let what = format!("memprof record ({label})");
            let mut cmd = w.memprof(&tools.memprof, flags, &profile);
            let stamp = w.exit_stamp.as_deref().filter(|_| m == I800);
            if let Some(stamp) = stamp {
                let _ = std::fs::remove_file(stamp);
            }
            let recorded = run(&what, &mut cmd, Out::Null, &log);
            let t = recorded.secs;
            if let Some(stamp) = stamp {
                let ended = recorded.ended.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128;
                c.exit_to_exit_ms.push((ended - read_stamp(stamp)) as f64 / 1e6);
            }
            secs[m] = t;
            let r = &mut modes[m];
            r.secs.push(t);
            r.vs_plain.push(t / p);
            let bytes = std::fs::metadata(&profile).map(|m| m.len()).unwrap_or(0) as f64;
            r.file_bytes.push(bytes);
            // The summary that `record` prints at the end, after the program's own stderr.
            let mut events = parse_events(&std::fs::read_to_string(&log).unwrap_or_default());
            if m == EXACT {
                // `memprof report` of the exact profile, in a scratch directory that takes
                // whatever it writes by default; its top table goes to a file.
                let _ = std::fs::remove_dir_all(&report_dir);
                std::fs::create_dir_all(&report_dir).unwrap();
                let table = report_dir.join("top.txt");
                let mut cmd = Command::new(&tools.memprof);
                cmd.arg("report").arg(&profile).current_dir(&report_dir);
                let report = run("memprof report", &mut cmd, Out::File(&table), &log);
                r.report_secs.push(report.secs);
                r.report_rss.push(report.max_rss as f64);
                events = events.or_else(|| parse_events(&read(&table)));
            }
            if events.is_none() {
                // Not in record's summary: ask `memprof report` for the counts alone.
                let table = dir.join("top0.txt");
                let mut cmd = Command::new(&tools.memprof);
                cmd.arg("report").arg("--top").arg("0").arg(&profile).current_dir(dir);
                run("memprof report --top 0", &mut cmd, Out::File(&table), &log);
                events = parse_events(&read(&table)).or_else(|| parse_events(&read(&log)));
            }
            let (counted, events) = match (events, w.known_events) {
                (Some(e), _) => (Counted::Summary, Some(e)),
                (None, Some(k)) if m == EXACT => (Counted::Known, Some(k)),
                _ => (Counted::Unknown, None),
            };
            r.counted.push(counted);
            if let Some(e) = events {
                r.events.push(e as f64);
                r.bytes_per_event.push(bytes / e as f64);
                r.cpu_per_event.push((recorded.cpu - plain_cpu) / e as f64 * 1e6);
                if m == EXACT {
                    exact_events = Some(e as f64);
                }
            }
            // Exact profiles of these programs are hundreds of MB: one at a time.
            let _ = std::fs::remove_file(&profile);
            let _ = std::fs::remove_file(dir.join("pipeline.mprof.svg"));
            // The C program under the hand-set preload library, right after the `record`
            // run it is compared with.
            if w.exit_stamp.is_some() && m == I800 {
                eprint!(", hand-set preload (800 B, depth 10)");
                let what = "the hand-set preload library (800 B, depth 10)";
                let pre = run_preloaded(what, w, tools, &PRELOAD_I800, &preloaded, &log);
                c.preload_secs.push(pre.secs);
                c.preload_vs_plain.push(pre.secs / p);
                c.i800_vs_preload.push(t / pre.secs);
            }
            if w.exit_stamp.is_some() && m == DEFAULT {
                eprint!(", hand-set preload (forwarding only)");
                let what = "the hand-set preload library (forwarding only)";
                let floor = run_preloaded(what, w, tools, &PRELOAD_FLOOR, &preloaded, &log);
                c.floor_secs.push(floor.secs);
                c.floor_vs_plain.push(floor.secs / p);
                c.default_vs_floor.push(t / floor.secs);
            }
        }
        if w.exit_stamp.is_some() {
            eprint!(", two plain copies, two records (800 B, depth 10)");
            let logs = [dir.join("stderr1.log"), dir.join("stderr2.log")];
            let logs = [logs[0].as_path(), logs[1].as_path()];
            let (plain_secs, plain_cpu) = run_two("two plain copies", [w.plain(), w.plain()], logs);
            let outs = [dir.join("copy1.mprof"), dir.join("copy2.mprof")];
            let flags = MODES[I800].1;
            let records = [0, 1].map(|i| w.memprof(&tools.memprof, flags, &outs[i]));
            let (record_secs, record_cpu) =
                run_two("two memprof record (800 B, depth 10)", records, logs);
            for out in &outs {
                remove_profile(out);
            }
            c.two_plain_secs.push(plain_secs);
            c.two_plain_cpu.push(plain_cpu);
            c.two_record_secs.push(record_secs);
            c.two_record_cpu.push(record_cpu);
            c.two_vs_plain.push(record_secs / plain_secs);
        }
        if tools.heaptrack {
            eprint!(", heaptrack");
            remove_heaptrack_files(&ht_prefix);
            let rec = run("heaptrack", &mut w.heaptrack(&ht_prefix), Out::Log, &log);
            let file = heaptrack_file(&ht_prefix);
            let shown = dir.join("heaptrack_print.txt");
            let mut cmd = Command::new("heaptrack_print");
            cmd.arg(&file);
            let print = run("heaptrack_print", &mut cmd, Out::File(&shown), &log);
            let both = rec.secs + print.secs;
            if let Some(e) = exact_events {
                ht.cpu_per_event.push((rec.cpu + print.cpu - plain_cpu) / e * 1e6);
            }
            ht.record_secs.push(rec.secs);
            ht.print_secs.push(print.secs);
            ht.print_rss.push(print.max_rss as f64);
            ht.file_bytes.push(std::fs::metadata(&file).unwrap().len() as f64);
            for (m, t) in secs.iter().enumerate() {
                modes[m].vs_heaptrack.push(t / both);
            }
            remove_heaptrack_files(&ht_prefix);
        }
        eprintln!();
    }

    // The figures.
    let p = median(&plain);
    println!("  {:<34} {:>8.2} s", "plain", p);
    let ht_file = median(&ht.file_bytes);
    if tools.heaptrack {
        let both: Vec<f64> =
            ht.record_secs.iter().zip(&ht.print_secs).map(|(r, p)| r + p).collect();
        let vs_plain: Vec<f64> = both.iter().zip(&plain).map(|(b, p)| b / p).collect();
        println!(
            "  {:<34} {:>8.2} s  {:>6.2}× plain   (record {:.2} s + print {:.2} s)",
            "heaptrack record + heaptrack_print",
            median(&both),
            median(&vs_plain),
            median(&ht.record_secs),
            median(&ht.print_secs)
        );
        // Per event of the exact mode, which records what heaptrack records.
        let per_event = if modes[EXACT].events.is_empty() {
            String::new()
        } else {
            format!(" ({:.3} B per exact-mode event)", ht_file / median(&modes[EXACT].events))
        };
        println!(
            "  {:<34} file {}{per_event}; heaptrack_print {:.2} s, {} peak RSS",
            "",
            size(ht_file),
            median(&ht.print_secs),
            mb(median(&ht.print_rss))
        );
        if !ht.cpu_per_event.is_empty() {
            println!(
                "  {:<34} CPU {:.3} µs per exact-mode event (record, heaptrack_interpret and \
                 print, less the plain program's)",
                "",
                median(&ht.cpu_per_event)
            );
        }
    }
    println!(
        "  {:<34} {:>10} {:>8} {:>12} {:>10} {:>12} {:>8} {:>10}",
        "memprof record",
        "time",
        "× plain",
        "× heaptrack",
        "file",
        "events",
        "B/event",
        "CPU/event"
    );
    for (m, (label, _)) in MODES.iter().enumerate() {
        let r = &modes[m];
        let vs_ht =
            if tools.heaptrack { format!("{:.2}×", median(&r.vs_heaptrack)) } else { "-".into() };
        let (events, per_event, cpu) = if r.bytes_per_event.is_empty() {
            ("n/a".to_owned(), "n/a".to_owned(), "n/a".to_owned())
        } else {
            let known = if r.counted.contains(&Counted::Known) { "*" } else { "" };
            (
                format!("{:.0}{known}", median(&r.events)),
                format!("{:.2}", median(&r.bytes_per_event)),
                format!("{:.3} µs", median(&r.cpu_per_event)),
            )
        };
        println!(
            "  {:<34} {:>8.2} s {:>7.2}× {:>12} {:>10} {:>12} {:>8} {:>10}",
            label,
            median(&r.secs),
            median(&r.vs_plain),
            vs_ht,
            size(median(&r.file_bytes)),
            events,
            per_event,
            cpu
        );
    }
    let exact = &modes[EXACT];
    if exact.counted.contains(&Counted::Known) {
        println!(
            "  * the summary printed no parseable `samples: N (F freed, M moved)` line: the \
             workload's known allocations + frees are counted instead"
        );
    }
    if modes.iter().any(|r| r.counted.contains(&Counted::Unknown)) {
        println!(
            "  n/a: the summary printed no parseable `samples: N (F freed, M moved)` line, and \
             this workload's count is not known"
        );
    }
    let report_secs = median(&exact.report_secs);
    let report_rss = median(&exact.report_rss);
    println!(
        "  memprof report of the exact profile: {report_secs:.2} s, {} peak RSS",
        mb(report_rss)
    );
    if w.exit_stamp.is_some() {
        println!(
            "  {:<34} {:>8.2} s {:>7.2}×   (record 800 B, depth 10: {:.2}× this)",
            "hand-set preload, 800 B, depth 10",
            median(&c.preload_secs),
            median(&c.preload_vs_plain),
            median(&c.i800_vs_preload)
        );
        println!(
            "  {:<34} {:>8.2} s {:>7.2}×   (record, default interval: {:.3}× this)",
            "hand-set preload, forwarding only",
            median(&c.floor_secs),
            median(&c.floor_vs_plain),
            median(&c.default_vs_floor)
        );
        println!(
            "  {:<34} {:>8.2} s   CPU {:.2} s (started together, until both exited; CPU: \
             both, user + system)",
            "two plain copies",
            median(&c.two_plain_secs),
            median(&c.two_plain_cpu)
        );
        println!(
            "  {:<34} {:>8.2} s   CPU {:.2} s (both, user + system); {:.2}× the plain pair",
            "two records (800 B, depth 10)",
            median(&c.two_record_secs),
            median(&c.two_record_cpu),
            median(&c.two_vs_plain)
        );
        let samples = if modes[I800].events.is_empty() {
            String::new()
        } else {
            format!(", {:.0} events", median(&modes[I800].events))
        };
        println!(
            "  {:<34} {:>8.1} ms (the program's exit stamp to wait4 on record returning{samples})",
            "exit to exit, 800 B, depth 10",
            median(&c.exit_to_exit_ms)
        );
    }

    // The issue's targets, reported and not asserted.
    println!("  targets (reported, not asserted):");
    let target = |ok: Option<bool>, what: &str, figure: String| match ok {
        Some(ok) => println!("    {} {what:<52} {figure}", mark(ok)),
        None => println!("    - {what:<52} {figure}"),
    };
    if tools.heaptrack && !ht.cpu_per_event.is_empty() && !exact.cpu_per_event.is_empty() {
        let (ours, theirs) = (median(&exact.cpu_per_event), median(&ht.cpu_per_event));
        target(
            Some(ours <= theirs * EXACT_CPU_VS_HEAPTRACK),
            &format!("exact CPU per event ≤ {EXACT_CPU_VS_HEAPTRACK:.2}× heaptrack's"),
            format!("{ours:.3} µs vs {theirs:.3} µs ({:.2}×)", ours / theirs),
        );
    }
    if tools.heaptrack {
        let r = median(&exact.vs_heaptrack);
        target(
            Some(r <= EXACT_VS_HEAPTRACK),
            &format!("exact end to end ≤ {EXACT_VS_HEAPTRACK}× heaptrack record + print"),
            format!("{r:.2}×"),
        );
    } else {
        target(None, "exact end to end vs heaptrack", "skipped (no heaptrack)".into());
    }
    for (m, (label, _)) in MODES.iter().enumerate() {
        let what = format!("≤ {BYTES_PER_EVENT} bytes per event, {label}");
        if modes[m].bytes_per_event.is_empty() {
            target(None, &what, "n/a (no event count)".into());
        } else {
            let b = median(&modes[m].bytes_per_event);
            target(Some(b <= BYTES_PER_EVENT), &what, format!("{b:.2} B"));
        }
    }
    if tools.heaptrack {
        let r = median(&exact.file_bytes) / ht_file;
        target(
            Some(r <= EXACT_FILE_VS_HEAPTRACK),
            &format!("exact file ≤ {EXACT_FILE_VS_HEAPTRACK}× heaptrack's file"),
            format!("{r:.2}× ({} vs {})", size(median(&exact.file_bytes)), size(ht_file)),
        );
    } else {
        target(None, "exact file vs heaptrack's file", "skipped (no heaptrack)".into());
    }
    // The report targets are CPython's; the C program's figures are for comparison.
    let cpython = w.key == "cpython";
    target(
        cpython.then_some(report_secs <= REPORT_SECS),
        &format!("memprof report (exact) ≤ {REPORT_SECS} s (CPython)"),
        format!("{report_secs:.2} s"),
    );
    target(
        cpython.then_some(report_rss / 1e6 <= REPORT_RSS_MB),
        &format!("memprof report (exact) ≤ {REPORT_RSS_MB} MB peak RSS (CPython)"),
        mb(report_rss),
    );
    let r = median(&modes[I800].vs_plain);
    target(
        Some(r <= I800_VS_PLAIN),
        &format!("800 B, depth 10 end to end ≤ {I800_VS_PLAIN}× plain"),
        format!("{r:.2}×"),
    );
    if w.exit_stamp.is_some() {
        let r = median(&c.i800_vs_preload);
        target(
            Some(r <= I800_VS_PRELOAD),
            &format!("800 B, depth 10 ≤ {I800_VS_PRELOAD}× hand-set preload"),
            format!("{r:.2}×"),
        );
        let r = median(&c.two_vs_plain);
        target(
            Some(r <= TWO_COPIES_VS_PLAIN),
            &format!("two records at once ≤ {TWO_COPIES_VS_PLAIN}× two plain copies"),
            format!("{r:.2}×"),
        );
        let ms = median(&c.exit_to_exit_ms);
        target(
            Some(ms <= EXIT_TO_EXIT_MS),
            &format!("exit to exit, 800 B, depth 10 ≤ {EXIT_TO_EXIT_MS} ms"),
            format!("{ms:.1} ms"),
        );
        let r = median(&c.default_vs_floor);
        target(
            Some(r <= DEFAULT_VS_FLOOR),
            &format!("default interval ≤ {DEFAULT_VS_FLOOR}× forwarding-only floor"),
            format!("{r:.3}×"),
        );
    }
}

/// The real CPython interpreter (not a pyenv shim) and its version, or why there is none.
fn find_python() -> Result<(PathBuf, String), String> {
    let o = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable); print(sys.version.split()[0])"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("python3 cannot be run ({e})"))?;
    if !o.status.success() {
        return Err(format!(
            "python3 failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(exe), Some(version)) if !exe.is_empty() => Ok((exe.into(), version.into())),
        _ => Err(format!("python3 printed no sys.executable ({text:?})")),
    }
}

/// The preload library that `memprof record` uses (`memprof preload-path`).
fn preload_path(memprof: &Path) -> PathBuf {
    let o = Command::new(memprof).arg("preload-path").stdin(Stdio::null()).output().unwrap();
    assert!(o.status.success(), "memprof preload-path: {}", String::from_utf8_lossy(&o.stderr));
    let path = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert!(path.is_file(), "memprof preload-path printed no library ({})", path.display());
    path
}

fn build_worst_case(out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/worst_case.c");
    let o =
        Command::new("cc").args(["-O2", "-g", "-o"]).arg(out).arg(&src).output().expect("cc runs");
    assert!(o.status.success(), "cc: {}", String::from_utf8_lossy(&o.stderr));
}

fn main() {
    let opts = options();
    let memprof = target_dir().join("memprof");
    assert!(
        memprof.is_file(),
        "no memprof executable at {} (cargo build --release first)",
        memprof.display()
    );
    let dir =
        TempDir(std::env::temp_dir().join(format!("memprof-pipeline-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();

    let heaptrack = ["heaptrack", "heaptrack_print"].iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    });
    let preload = preload_path(&memprof);
    let tools = Tools { memprof, preload, heaptrack };
    let (records, iterations) =
        if opts.quick { (50_000u64, 2_000_000u64) } else { (200_000, 10_000_000) };
    println!(
        "memprof pipeline bench: {} round(s){}; each figure is the median over the rounds of \
         ratios between runs of the same round (times in seconds are for orientation only)",
        opts.rounds,
        if opts.quick { ", --quick" } else { "" }
    );
    println!("memprof: {}", tools.memprof.display());
    if !tools.heaptrack {
        println!(
            "heaptrack or heaptrack_print not found: the heaptrack comparison is skipped \
             (Debian: apt-get install heaptrack)"
        );
    }

    let wanted = |key: &str| opts.only.as_deref().is_none_or(|o| o == key);
    let mut workloads = vec![];
    if wanted("cpython") {
        match find_python() {
            Ok((python, version)) => {
                let script = dir.0.join("json_roundtrip.py");
                std::fs::write(&script, JSON_SCRIPT).unwrap();
                let note = if version.starts_with("3.11.") { "" } else { " (not 3.11)" };
                workloads.push(Workload {
                    title: format!(
                        "CPython {version}{note} ({}): JSON round trip of {records} records, \
                         PYTHONMALLOC=malloc",
                        python.display()
                    ),
                    key: "cpython",
                    program: python,
                    args: vec![script.into(), records.to_string().into()],
                    env: vec![("PYTHONMALLOC", "malloc")],
                    known_events: None,
                    exit_stamp: None,
                })
            }
            Err(why) => {
                println!("{why}: the CPython workload is skipped (Debian: apt-get install python3)")
            }
        }
    }
    if wanted("c") {
        let prog = dir.0.join("worst_case");
        build_worst_case(&prog);
        workloads.push(Workload {
            title: format!(
                "worst_case.c (statmemprof's worst case, cc -O2 -g): {iterations} iterations"
            ),
            key: "c",
            program: prog,
            args: vec![iterations.to_string().into()],
            env: vec![],
            // Two mallocs and two frees per iteration.
            known_events: Some(4 * iterations),
            exit_stamp: Some(dir.0.join("worst_case.exit")),
        });
    }
    for w in &workloads {
        bench(w, &tools, opts.rounds, &dir.0);
    }
}
