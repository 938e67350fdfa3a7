//! The two workloads' full tables (`--only cpython`, `--only c`): each memprof mode's whole
//! `record` beside the plain program and heaptrack's record + print, round by round, and for
//! the C program the runs only it has (the hand-set preload library, the forwarding-only
//! floor, two copies at once, exit to exit). The module doc of `main.rs` says what each
//! figure is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

use crate::measure::{
    heaptrack_file, mark, mb, median, mib, parse_events, parse_marker, read, read_stamp,
    remove_heaptrack_files, remove_profile, run, run_two, size, IssueRow, Measured, Out,
};
use crate::workloads::{run_preloaded, Tools, Workload};

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

// The targets.
/// The exact mode's whole `record` over heaptrack record + print, in wall time and in CPU.
const EXACT_VS_HEAPTRACK: f64 = 0.7;
/// The profiler's CPU per exact-mode event (all of `record`'s threads and the program's
/// sample path: the run's CPU less the plain program's), at most this share of
/// heaptrack's (its record, `heaptrack_interpret` and print, less the plain program's).
const EXACT_CPU_VS_HEAPTRACK: f64 = 1.0 / 3.0;
const BYTES_PER_EVENT: f64 = 4.0;
const EXACT_FILE_VS_HEAPTRACK: f64 = 2.0;
const REPORT_SECS: f64 = 1.5;
const REPORT_RSS_MB: f64 = 100.0;
/// `record --interval 800 --depth 10`'s CPU (user + system of every process) over the plain
/// program's.
const I800_CPU_VS_PLAIN: f64 = 1.6;
// The C program's.
/// `record --interval 800 --depth 10` over the hand-set preload library at the same settings.
const I800_VS_PRELOAD: f64 = 1.10;
/// Two `record --interval 800 --depth 10` started together over two plain copies, in CPU.
const TWO_COPIES_CPU_VS_PLAIN: f64 = 1.8;
/// From the program's exit stamp to `wait4` on `record` returning, 800 B, depth 10.
const EXIT_TO_EXIT_MS: f64 = 50.0;
/// `record` at the default interval over the forwarding-only floor.
const DEFAULT_VS_FLOOR: f64 = 1.01;

/// The hand-set preload library's settings beside `record --interval 800 --depth 10`.
const PRELOAD_I800: [(&str, &str); 2] = [("MEMPROF_INTERVAL", "800"), ("MEMPROF_DEPTH", "10")];
/// The forwarding-only floor: the library has no setting that turns sampling off, so it
/// runs at the largest interval it accepts, 256 TiB (`MAX_INTERVAL`, src/config.rs; 1e15
/// is refused), a sample point every 256 TiB allocated on average: none in these runs,
/// which allocate a few GB.
const PRELOAD_FLOOR: [(&str, &str); 1] = [("MEMPROF_INTERVAL", "256T")];

/// Where an event count came from.
#[derive(Clone, Copy, PartialEq)]
enum Counted {
    /// The summary of `memprof record` or `memprof report`.
    Summary,
    /// The allocations and frees the workload is known to make (exact mode only).
    Known,
    /// Neither.
    Unknown,
}

/// The figures of one memprof mode, one entry per round.
#[derive(Default)]
struct ModeRuns {
    secs: Vec<f64>,
    cpu: Vec<f64>,
    /// CPU of the whole run less the plain program's, per event (µs).
    cpu_per_event: Vec<f64>,
    vs_plain: Vec<f64>,
    cpu_vs_plain: Vec<f64>,
    vs_heaptrack: Vec<f64>,
    cpu_vs_heaptrack: Vec<f64>,
    file_bytes: Vec<f64>,
    events: Vec<f64>,
    bytes_per_event: Vec<f64>,
    counted: Vec<Counted>,
    /// Exact mode: `memprof report FILE`'s wall time and peak RSS.
    report_secs: Vec<f64>,
    report_rss: Vec<f64>,
    /// The program's own peak RSS (bytes), where it prints it (`vmhwm_kib N`).
    program_hwm: Vec<f64>,
}

#[derive(Default)]
struct HeaptrackRuns {
    /// CPU of record + print less the plain program's, per exact-mode event (µs).
    cpu_per_event: Vec<f64>,
    record_secs: Vec<f64>,
    print_secs: Vec<f64>,
    /// CPU of record + print.
    cpu: Vec<f64>,
    print_rss: Vec<f64>,
    file_bytes: Vec<f64>,
    /// The program's own peak RSS under heaptrack (bytes), where it prints it.
    program_hwm: Vec<f64>,
}

/// The C program's runs beside the memprof modes, one entry per round.
#[derive(Default)]
struct CRuns {
    /// The hand-set preload library at 800 B, depth 10.
    preload_secs: Vec<f64>,
    preload_vs_plain: Vec<f64>,
    preload_cpu_vs_plain: Vec<f64>,
    /// `record --interval 800 --depth 10` over the hand-set preload run.
    i800_vs_preload: Vec<f64>,
    /// The hand-set preload library forwarding only.
    floor_secs: Vec<f64>,
    floor_vs_plain: Vec<f64>,
    /// `record` at the default interval over the floor.
    default_vs_floor: Vec<f64>,
    /// Two plain copies started together: wall time until both exited, CPU of both.
    two_plain_secs: Vec<f64>,
    two_plain_cpu: Vec<f64>,
    /// Two `record --interval 800 --depth 10` started together, likewise.
    two_record_secs: Vec<f64>,
    two_record_cpu: Vec<f64>,
    two_cpu_vs_plain: Vec<f64>,
    /// The program's exit stamp to `wait4` on `record` (800 B, depth 10) returning.
    exit_to_exit_ms: Vec<f64>,
}

/// What the later runs of a round compare with.
struct Round {
    plain: Measured,
    /// Each mode's wall time and CPU.
    secs: [f64; MODES.len()],
    cpu: [f64; MODES.len()],
    exact_events: Option<f64>,
}

struct Whole<'a> {
    w: &'a Workload,
    tools: &'a Tools,
    dir: &'a Path,
    log: PathBuf,
    profile: PathBuf,
    plain: Vec<f64>,
    plain_cpu: Vec<f64>,
    plain_hwm: Vec<f64>,
    modes: [ModeRuns; MODES.len()],
    ht: HeaptrackRuns,
    c: CRuns,
}

/// Runs `rounds` rounds of workload `w`, prints its table and targets, and returns its rows
/// of the issue's table.
pub(crate) fn bench(w: &Workload, tools: &Tools, rounds: usize, dir: &Path) -> Vec<IssueRow> {
    println!();
    println!("== {} ==", w.title);
    let mut b = Whole {
        w,
        tools,
        dir,
        log: dir.join("stderr.log"),
        profile: dir.join("pipeline.mprof"),
        plain: vec![],
        plain_cpu: vec![],
        plain_hwm: vec![],
        modes: Default::default(),
        ht: HeaptrackRuns::default(),
        c: CRuns::default(),
    };
    for round in 0..rounds {
        eprint!("  round {}/{rounds}: ", round + 1);
        b.round();
        eprintln!();
    }
    b.print_runs();
    b.print_modes();
    if w.exit_stamp.is_some() {
        b.print_c();
    }
    b.print_targets();
    b.issue_rows()
}

impl Whole<'_> {
    fn round(&mut self) {
        eprint!("plain");
        let plain = run("the plain program", &mut self.w.plain(), Out::Null, &self.log);
        if let Some(kib) = parse_marker(&read(&self.log), "vmhwm_kib") {
            self.plain_hwm.push(kib as f64 * 1024.0);
        }
        self.plain.push(plain.secs);
        self.plain_cpu.push(plain.cpu);
        let none = [0.0; MODES.len()];
        let mut r = Round { plain, secs: none, cpu: none, exact_events: None };
        let c = self.w.exit_stamp.is_some();
        for &m in &RUN_ORDER {
            self.mode(m, &mut r);
            if c && m == I800 {
                self.hand_set_i800(&r);
            }
            if c && m == DEFAULT {
                self.floor(&r);
            }
        }
        if c {
            self.two_copies();
        }
        if self.tools.heaptrack {
            self.heaptrack(&r);
        }
    }

    /// One `memprof record` run in mode `m`: its times, its file, its events.
    fn mode(&mut self, m: usize, r: &mut Round) {
        let (label, flags) = MODES[m];
        eprint!(", {label}");
        let w = self.w;
        let mut cmd = w.memprof(&self.tools.memprof, flags, &self.profile);
        let stamp = w.exit_stamp.as_deref().filter(|_| m == I800);
        if let Some(stamp) = stamp {
            let _ = std::fs::remove_file(stamp);
        }
        let recorded = run(&format!("memprof record ({label})"), &mut cmd, Out::Null, &self.log);
        if let Some(stamp) = stamp {
            let ended = recorded.ended.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128;
            self.c.exit_to_exit_ms.push((ended - read_stamp(stamp)) as f64 / 1e6);
        }
        (r.secs[m], r.cpu[m]) = (recorded.secs, recorded.cpu);
        // The summary that `record` prints at the end, after the program's own stderr.
        let summary = read(&self.log);
        let bytes = std::fs::metadata(&self.profile).map(|m| m.len()).unwrap_or(0) as f64;
        let events = self.count_events(m, parse_events(&summary));
        let mr = &mut self.modes[m];
        mr.secs.push(recorded.secs);
        mr.cpu.push(recorded.cpu);
        mr.vs_plain.push(recorded.secs / r.plain.secs);
        mr.cpu_vs_plain.push(recorded.cpu / r.plain.cpu);
        mr.file_bytes.push(bytes);
        if let Some(kib) = parse_marker(&summary, "vmhwm_kib") {
            mr.program_hwm.push(kib as f64 * 1024.0);
        }
        let (counted, events) = match (events, w.known_events) {
            (Some(e), _) => (Counted::Summary, Some(e)),
            (None, Some(k)) if m == EXACT => (Counted::Known, Some(k)),
            _ => (Counted::Unknown, None),
        };
        mr.counted.push(counted);
        if let Some(e) = events {
            mr.events.push(e as f64);
            mr.bytes_per_event.push(bytes / e as f64);
            mr.cpu_per_event.push((recorded.cpu - r.plain.cpu) / e as f64 * 1e6);
            if m == EXACT {
                r.exact_events = Some(e as f64);
            }
        }
        // Exact profiles of these programs are hundreds of MB: one at a time.
        let _ = std::fs::remove_file(&self.profile);
        let _ = std::fs::remove_file(self.dir.join("pipeline.mprof.svg"));
    }

    /// The events of the profile just written: from `record`'s summary (`from_summary`),
    /// else from `memprof report`'s, which in the exact mode is timed too.
    fn count_events(&mut self, m: usize, from_summary: Option<u64>) -> Option<u64> {
        let mut events = from_summary;
        if m == EXACT {
            // `memprof report` of the exact profile, in a scratch directory that takes
            // whatever it writes by default; its top table goes to a file.
            let report_dir = self.dir.join("report");
            let _ = std::fs::remove_dir_all(&report_dir);
            std::fs::create_dir_all(&report_dir).unwrap();
            let table = report_dir.join("top.txt");
            let mut cmd = Command::new(&self.tools.memprof);
            cmd.arg("report").arg(&self.profile).current_dir(&report_dir);
            let report = run("memprof report", &mut cmd, Out::File(&table), &self.log);
            self.modes[m].report_secs.push(report.secs);
            self.modes[m].report_rss.push(report.max_rss as f64);
            events = events.or_else(|| parse_events(&read(&table)));
        }
        if events.is_none() {
            // Not in record's summary: ask `memprof report` for the counts alone.
            let table = self.dir.join("top0.txt");
            let mut cmd = Command::new(&self.tools.memprof);
            cmd.arg("report").arg("--top").arg("0").arg(&self.profile).current_dir(self.dir);
            run("memprof report --top 0", &mut cmd, Out::File(&table), &self.log);
            events = parse_events(&read(&table)).or_else(|| parse_events(&read(&self.log)));
        }
        events
    }

    /// The C program under the hand-set preload library, right after the `record` run at
    /// 800 B it is compared with.
    fn hand_set_i800(&mut self, r: &Round) {
        eprint!(", hand-set preload (800 B, depth 10)");
        let what = "the hand-set preload library (800 B, depth 10)";
        let out = self.dir.join("preloaded.mprof");
        let pre = run_preloaded(what, self.w, self.tools, &PRELOAD_I800, &out, &self.log);
        self.c.preload_secs.push(pre.secs);
        self.c.preload_vs_plain.push(pre.secs / r.plain.secs);
        self.c.preload_cpu_vs_plain.push(pre.cpu / r.plain.cpu);
        self.c.i800_vs_preload.push(r.secs[I800] / pre.secs);
    }

    /// The forwarding-only floor, right after `record` at the default interval.
    fn floor(&mut self, r: &Round) {
        eprint!(", hand-set preload (forwarding only)");
        let what = "the hand-set preload library (forwarding only)";
        let out = self.dir.join("preloaded.mprof");
        let floor = run_preloaded(what, self.w, self.tools, &PRELOAD_FLOOR, &out, &self.log);
        self.c.floor_secs.push(floor.secs);
        self.c.floor_vs_plain.push(floor.secs / r.plain.secs);
        self.c.default_vs_floor.push(r.secs[DEFAULT] / floor.secs);
    }

    fn two_copies(&mut self) {
        eprint!(", two plain copies, two records (800 B, depth 10)");
        let logs = [self.dir.join("stderr1.log"), self.dir.join("stderr2.log")];
        let logs = [logs[0].as_path(), logs[1].as_path()];
        let w = self.w;
        let (plain_secs, plain_cpu) = run_two("two plain copies", [w.plain(), w.plain()], logs);
        let outs = [self.dir.join("copy1.mprof"), self.dir.join("copy2.mprof")];
        let flags = MODES[I800].1;
        let records = [0, 1].map(|i| w.memprof(&self.tools.memprof, flags, &outs[i]));
        let (record_secs, record_cpu) =
            run_two("two memprof record (800 B, depth 10)", records, logs);
        for out in &outs {
            remove_profile(out);
        }
        let c = &mut self.c;
        c.two_plain_secs.push(plain_secs);
        c.two_plain_cpu.push(plain_cpu);
        c.two_record_secs.push(record_secs);
        c.two_record_cpu.push(record_cpu);
        c.two_cpu_vs_plain.push(record_cpu / plain_cpu);
    }

    /// `heaptrack` then `heaptrack_print`, one job, compared with every mode of the round.
    fn heaptrack(&mut self, r: &Round) {
        eprint!(", heaptrack");
        let prefix = self.dir.join("ht");
        remove_heaptrack_files(&prefix);
        let rec = run("heaptrack", &mut self.w.heaptrack(&prefix), Out::Log, &self.log);
        let hwm = parse_marker(&read(&self.log), "vmhwm_kib");
        let file = heaptrack_file(&prefix);
        let shown = self.dir.join("heaptrack_print.txt");
        let mut cmd = Command::new("heaptrack_print");
        cmd.arg(&file);
        let print = run("heaptrack_print", &mut cmd, Out::File(&shown), &self.log);
        let (both, both_cpu) = (rec.secs + print.secs, rec.cpu + print.cpu);
        let ht = &mut self.ht;
        if let Some(e) = r.exact_events {
            ht.cpu_per_event.push((both_cpu - r.plain.cpu) / e * 1e6);
        }
        if let Some(kib) = hwm {
            ht.program_hwm.push(kib as f64 * 1024.0);
        }
        ht.record_secs.push(rec.secs);
        ht.print_secs.push(print.secs);
        ht.cpu.push(both_cpu);
        ht.print_rss.push(print.max_rss as f64);
        ht.file_bytes.push(std::fs::metadata(&file).unwrap().len() as f64);
        for (m, mr) in self.modes.iter_mut().enumerate() {
            mr.vs_heaptrack.push(r.secs[m] / both);
            mr.cpu_vs_heaptrack.push(r.cpu[m] / both_cpu);
        }
        remove_heaptrack_files(&prefix);
    }
}

mod print;
