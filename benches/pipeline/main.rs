//! The profiler's whole cost, as a user meets it: from starting `memprof record` to reading
//! its report, on several programs, beside the plain program and beside a peer profiler
//! (heaptrack, jemalloc's profiler) measured side by side in one run and printed as ratios.
//! At the end it prints the rows of the profiler's cost table (one per workload below, each
//! with its target and ✓ or ✗) together, as a Markdown table.
//!
//! ```text
//! cargo build --release                                  # target/release/memprof
//! cargo bench --bench pipeline                           # full size, 3 rounds
//! cargo bench --bench pipeline -- --quick                # small workloads, 1 round
//! cargo bench --bench pipeline -- --rounds 5             # more rounds: steadier medians
//! cargo bench --bench pipeline -- --only sleep,threads   # some parts (--only may repeat)
//! ```
//!
//! # Measuring
//! Every time is a whole process tree, timed from its start until `wait4` on it returns. The
//! CPU of a run is user + system time from `wait4`'s resource usage, which covers every
//! thread of the process and of the descendants it waited for: for `memprof record`, its own
//! threads and the program's; for heaptrack, its script, the program and
//! `heaptrack_interpret`. A peak RSS from `wait4` (`ru_maxrss`) is the largest of that
//! process's own and of each waited-for descendant's, not a sum. A program's own peak RSS is
//! what it prints of itself, `vmhwm_kib N` (the `VmHWM` of /proc/self/status: its memory map's
//! high-water mark, which starts again at `exec`, where `ru_maxrss` keeps the peak of the
//! forked parent it replaced).
//!
//! This machine's speed drifts by tens of per cent over seconds (a shared host, 2 cores), so
//! the compared runs alternate within each round, and each figure is the median over the
//! rounds of the ratio (or difference) between runs of the same round; bare seconds are
//! printed for orientation only. The targets are printed next to the figures with ✓ or ✗;
//! the bench asserts none. A run that fails (non-zero exit) panics with its stderr; a missing
//! tool (python3, heaptrack, jemalloc, pandas) skips that part with one line saying so.
//! Everything is written in a directory under the system's temporary directory, removed at
//! the end (also after a panic, not after a signal); only the pandas environment is kept
//! (below).
//!
//! # The parts (`--only NAME`)
//! 1. **`jemalloc`**: statmemprof's worst case (ocaml/ocaml#8731) in C,
//!    `fixtures/c/worst_case.c` built `cc -O2 -g` (recursion depth 20, two mallocs and two
//!    frees per iteration), 10 M iterations (with `--quick` too). Each round runs the plain
//!    program, `memprof record` at the default interval, and the program under jemalloc's
//!    heap profiler (`LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2` from Debian's
//!    `libjemalloc2`, `MALLOC_CONF=prof:true,lg_prof_sample:19`: a sample every 2^19 B =
//!    512 KiB on average, jemalloc's default and memprof's; it writes no file), jemalloc
//!    without its profiler, and the program under `fixtures/c/libforward.c` (malloc, free,
//!    calloc and realloc each one jump to glibc's: what interposing costs by itself, the
//!    floor of any preload profiler over glibc), the four in turns first. Row: `record`'s
//!    CPU over the plain program's, beside jemalloc's over the same, and the forwarder's
//!    (target ≤ 1.05×). A run in which jemalloc refused a setting (`<jemalloc>:` on stderr)
//!    panics.
//! 2. **`sleep`**: `sleep 2` plain and under `memprof record`. Row: the CPU of the whole
//!    `record` command, start and reports included (target ≤ 0.05 CPU-s).
//! 3. **`c`**: the same C program (10 M iterations, 2 M with `--quick`), in the full table
//!    below, whose 800 B runs fill two rows: `record --interval 800 --depth 10`'s CPU over
//!    the plain program's (statmemprof's λ = 0.01; target ≤ 1.6×), and two of those started
//!    together over two plain copies started together, in CPU of both (target ≤ 1.8×).
//! 4. **`cpython`**: `python3` (resolved once with `sys.executable` and run by its path: a
//!    pyenv shim is a shell script, and `record` would profile the shell), 3.11, with
//!    `PYTHONMALLOC=malloc`, so that every object allocation goes through `malloc`, on a JSON
//!    round trip (`workloads::JSON_SCRIPT`: 200 000 small dict records, 50 000 with
//!    `--quick`, `json.dumps` and `json.loads`), in the full table below. Its rows: the exact
//!    mode's whole `record`, in CPU and in wall time, over heaptrack's record + print (target
//!    ≤ 0.7× both); and the program's own peak RSS (its `vmhwm_kib`) under `record --interval
//!    1` against under heaptrack (target ≤ heaptrack's).
//! 5. **`threads`**: `fixtures/c/threads_throughput.c` (`cc -O2 -g -pthread`): 8 threads
//!    allocate and free small blocks for 3 s and it prints how many allocations they did
//!    (`allocations_done N`). Each round: plain, `record --interval 1`, and `heaptrack` (its
//!    record alone: the count is of what the threads did while it ran). Row: the exact mode's
//!    count over heaptrack's (target ≥ 1.5×).
//! 6. **`pandas`**: a pandas script of about 1.3 s (`workloads::PANDAS_SCRIPT`, 700 000
//!    rows) with the Python of part 4 if it imports pandas, else that of a virtual
//!    environment at `target/release/pipeline-venv` (made with `python3 -m venv` and `pip
//!    install pandas` on first use, kept as a cache; a failed install skips the part). Each
//!    round: plain (pymalloc, as the user runs it), then `record` at the default interval
//!    twice with `XDG_CACHE_HOME` set to a directory new to the round, so the first run
//!    finds no cache and the second finds what the first left. Row: each run's wall time
//!    less the plain run's (targets ≤ 3 s the first time, ≤ 1 s the second).
//! 7. **`own-memory`**: `fixtures/c/one_malloc.c`, which allocates once and prints its own
//!    peak RSS, under `record --interval 1`. Row: `ru_maxrss` from `wait4` on `record`, the
//!    largest of memprof's own peak and the program's; printed beside the program's own, so
//!    that it reads as memprof's whenever it is the larger (target ≤ 20 MiB).
//! 8. **`python`**: what Python frames cost (`python.rs`): the JSON workload at 300 000
//!    records, default interval, each round plain, `record`, `record --keep-pymalloc`, the
//!    plain program with `PYTHONMALLOC=malloc` alone, and memray (installed once into
//!    `target/release/pipeline-memray-venv`) by default and with
//!    `--trace-python-allocators`, in turns first. Row: `record`'s CPU over plain's (target
//!    ≤ 1.10×), beside memray's.
//!
//! # The full table of `c` and `cpython`
//! Each round runs, for the program, one after the other: the plain program; `memprof record`
//! with `--interval 800 --depth 10`, with the default interval, and with `--interval 1` (the
//! exact mode: every allocation and free); then `heaptrack -o FILE prog` followed by
//! `heaptrack_print FILE.zst` (or `.gz`, whichever heaptrack wrote; its output to a file),
//! timed together as one job, since a heaptrack user waits for both. The C program also runs,
//! in each round, beside those:
//!
//! - **under the preload library set by hand**, as a user would without `memprof record`:
//!   `LD_PRELOAD=<memprof preload-path>` with `MEMPROF_INTERVAL=800 MEMPROF_DEPTH=10
//!   MEMPROF_OUTPUT=<scratch file>` (every other `MEMPROF_*` variable removed, so the rest
//!   are the library's defaults, as under `record`; no `MEMPROF_RINGS`, so the library runs
//!   its in-process session and writes the profile itself), right after `record
//!   --interval 800 --depth 10`; a run that leaves no profile panics (the library did not
//!   run);
//! - **forwarding only**, the floor of the default interval: the same with
//!   `MEMPROF_INTERVAL=256T` alone, the largest interval the library accepts (it has no
//!   setting that turns sampling off), right after `record` at the default interval;
//! - **two copies at once**, after the memprof modes: two plain copies started one right
//!   after the other, timed from the first start until `wait4` has returned for both, then
//!   two `memprof record --interval 800 --depth 10 -o <a file each>` the same way; the CPU
//!   of both is summed;
//! - **exit to exit**: every run of the C program has `WORST_CASE_EXIT_STAMP=<file>`, to
//!   which it writes the wall clock (CLOCK_REALTIME, ns) just before `main` returns (one
//!   open/write/close, in every run alike); for `record --interval 800 --depth 10` the bench
//!   reads it and takes it from the wall clock (`SystemTime::now()`) when `wait4` on
//!   `record` returned: the time from the program's exit to `record`'s.
//!
//! For each memprof mode it prints the wall time and the CPU over the plain program's and
//! over heaptrack's record + print, the profile's size, and per event (events = samples +
//! frees + moves, read from the `samples: N (F freed, M moved)` line of the summary that
//! `memprof record` and `memprof report` print; if neither prints it, the exact mode of the C
//! program counts its known 2 mallocs + 2 frees per iteration, marked `*`, and the other
//! modes show n/a) the bytes and the profiler's CPU (the run's less the plain program's;
//! heaptrack's likewise). For the exact-mode profile it also times `memprof report FILE` (run
//! in a scratch directory, where any default outputs land) and reads its peak RSS, beside
//! heaptrack's file size and `heaptrack_print`'s time and peak RSS; and, where the program
//! prints it (CPython), the program's own peak RSS plain, in exact mode and under heaptrack.
//! Its targets: exact mode ≤ 0.7× heaptrack in wall time and CPU, ≤ ⅓ of heaptrack's CPU per
//! event, a file ≤ 2× heaptrack's, ≤ 4 bytes per event in every mode, `memprof report` of
//! CPython's exact profile ≤ 1.5 s and ≤ 100 MB, 800 B ≤ 1.6× plain CPU; for the C program,
//! `record` at 800 B ≤ 1.10× the hand-set library's time, two records ≤ 1.8× two plain
//! copies' CPU, exit to exit ≤ 50 ms, and the default interval ≤ 1.01× the floor's time.

use std::path::Path;
use std::process::{Command, Stdio};

mod measure;
mod python;
mod rows;
mod whole;
mod workloads;

use measure::{mark, target_dir, IssueRow, TempDir};
use rows::Part;
use workloads::{build_c, find_python, preload_path, Tools, Workload, JSON_SCRIPT};

/// The parts `--only` selects, in the order they run.
const PARTS: [&str; 8] =
    ["jemalloc", "sleep", "c", "cpython", "threads", "pandas", "own-memory", "python"];

const USAGE: &str = "usage: cargo bench --bench pipeline -- [--quick] [--rounds N] [--only \
                     PART[,PART…]]... (parts: jemalloc, sleep, c, cpython, threads, pandas, \
                     own-memory, python)";

struct Options {
    quick: bool,
    rounds: usize,
    /// Empty: every part.
    only: Vec<String>,
}

fn options() -> Options {
    let mut o = Options { quick: false, rounds: 0, only: vec![] };
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
            "--only" => {
                let list = args.next().unwrap_or_default();
                for part in list.split(',') {
                    assert!(PARTS.contains(&part), "no part {part:?}\n{USAGE}");
                    o.only.push(part.to_owned());
                }
            }
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

fn has_heaptrack() -> bool {
    ["heaptrack", "heaptrack_print"].iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    })
}

/// The CPython workload of the full table.
fn cpython_workload(python: &Path, version: &str, quick: bool, dir: &Path) -> Workload {
    let records = if quick { 50_000u64 } else { 200_000 };
    let script = dir.join("json_roundtrip.py");
    std::fs::write(&script, JSON_SCRIPT).unwrap();
    let note = if version.starts_with("3.11.") { "" } else { " (not 3.11)" };
    Workload {
        title: format!(
            "CPython {version}{note} ({}): JSON round trip of {records} records, \
             PYTHONMALLOC=malloc",
            python.display()
        ),
        key: "cpython",
        program: python.to_owned(),
        args: vec![script.into(), records.to_string().into()],
        env: vec![("PYTHONMALLOC", "malloc")],
        known_events: None,
        exit_stamp: None,
    }
}

/// The C workload of the full table.
fn c_workload(quick: bool, dir: &Path) -> Workload {
    let iterations = if quick { 2_000_000u64 } else { 10_000_000 };
    Workload {
        title: format!(
            "worst_case.c (statmemprof's worst case, cc -O2 -g): {iterations} iterations"
        ),
        key: "c",
        program: build_c("worst_case", &[], dir),
        args: vec![iterations.to_string().into()],
        env: vec![],
        // Two mallocs and two frees per iteration.
        known_events: Some(4 * iterations),
        exit_stamp: Some(dir.join("worst_case.exit")),
    }
}

/// The `cpython` part's rows when there is no Python (the run said why at its start).
fn no_python_rows() -> Vec<IssueRow> {
    let row = |order: usize, workload: &str, target: &str| IssueRow {
        order,
        workload: workload.into(),
        memprof: "skipped (no python3)".into(),
        peer: "-".into(),
        target: target.into(),
        ok: None,
    };
    vec![
        row(4, "CPython JSON, exact mode, whole command", "≤ 0.7× both"),
        row(5, "CPython JSON: the program's peak RSS, exact mode", "≤ heaptrack's"),
    ]
}

/// Every row gathered, in the order of the cost table, as Markdown.
fn print_issue_table(mut rows: Vec<IssueRow>) {
    rows.sort_by_key(|r| r.order);
    println!();
    println!(
        "== the cost table: every row measured in this run (targets reported, not asserted) =="
    );
    println!("| | workload | memprof | the peer, same run | target |");
    println!("|---|---|---|---|---|");
    for r in rows {
        let ok = r.ok.map_or("-", mark);
        println!("| {ok} | {} | {} | {} | {} |", r.workload, r.memprof, r.peer, r.target);
    }
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
    let preload = preload_path(&memprof);
    let tools = Tools { memprof, preload, heaptrack: has_heaptrack() };
    println!(
        "memprof pipeline bench: {} round(s){}; each figure is the median over the rounds of \
         ratios between runs of the same round (times in seconds are for orientation only)",
        opts.rounds,
        if opts.quick { ", --quick" } else { "" }
    );
    println!("memprof: {}", tools.memprof.display());
    if !tools.heaptrack {
        println!(
            "heaptrack or heaptrack_print not found: the heaptrack comparisons are skipped \
             (Debian: apt-get install heaptrack)"
        );
    }
    let python = find_python();
    if let Err(why) = &python {
        println!("{why}: the Python parts are skipped (Debian: apt-get install python3)");
    }
    let python = python.ok();
    let part = Part {
        tools: &tools,
        rounds: opts.rounds,
        dir: &dir.0,
        python: python.as_ref().map(|(p, _)| p.as_path()),
    };
    let mut rows = vec![];
    for name in PARTS.iter().filter(|p| opts.only.is_empty() || opts.only.iter().any(|o| o == *p)) {
        rows.extend(match *name {
            "jemalloc" => rows::default_interval(&part),
            "sleep" => rows::sleep(&part),
            "c" => whole::bench(&c_workload(opts.quick, &dir.0), &tools, opts.rounds, &dir.0),
            "cpython" => match &python {
                Some((exe, version)) => {
                    let w = cpython_workload(exe, version, opts.quick, &dir.0);
                    whole::bench(&w, &tools, opts.rounds, &dir.0)
                }
                None => no_python_rows(),
            },
            "threads" => rows::threads(&part),
            "pandas" => rows::pandas(&part),
            "python" => python::python_frames(&part),
            _ => rows::own_memory(&part),
        });
    }
    print_issue_table(rows);
}
