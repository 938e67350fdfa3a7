//! The issue's rows that are a part each (`--only jemalloc`, `sleep`, `threads`, `pandas`,
//! `own-memory`): a few runs per round, side by side, printed as ratios or differences
//! between runs of the same round, and the row of the issue's table they fill. The module
//! doc of `main.rs` says what each runs.

use std::path::{Path, PathBuf};

use crate::measure::{
    mark, median, mib, parse_marker, read, remove_heaptrack_files, remove_profile, run, IssueRow,
    Measured, Out,
};
use crate::workloads::{
    build_c, pandas_python, Tools, Workload, JEMALLOC, JEMALLOC_CONF, PANDAS_ROWS, PANDAS_SCRIPT,
};

/// Whole `record` at the default interval over the plain program, in CPU.
const DEFAULT_CPU_VS_PLAIN: f64 = 1.05;
/// `memprof record -- sleep 2`, CPU of every process.
const SLEEP_CPU_SECS: f64 = 0.05;
/// Allocations done in exact mode over those done under heaptrack in the same time.
const THREADS_VS_HEAPTRACK: f64 = 1.5;
/// The 8-thread program's window.
const THREADS_SECS: &str = "3";
/// The pandas script's extra wall time under `record`, first run (no cache) and second.
const PANDAS_FIRST_SECS: f64 = 3.0;
const PANDAS_SECOND_SECS: f64 = 1.0;
/// `memprof record`'s own peak RSS on a one-malloc program in exact mode.
const OWN_RSS_MIB: f64 = 20.0;

/// What every part needs.
pub(crate) struct Part<'a> {
    pub(crate) tools: &'a Tools,
    pub(crate) rounds: usize,
    /// The scratch directory, removed at the end.
    pub(crate) dir: &'a Path,
    /// The real CPython interpreter, if there is one.
    pub(crate) python: Option<&'a Path>,
}

impl Part<'_> {
    /// Runs `round` once per round, with the round's progress on stderr.
    pub(crate) fn rounds(&self, title: &str, mut round: impl FnMut(usize)) {
        println!();
        println!("== {title} ==");
        for r in 0..self.rounds {
            eprint!("  round {}/{}: ", r + 1, self.rounds);
            round(r);
            eprintln!();
        }
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.dir.join("stderr.log")
    }

    /// `memprof record FLAGS -o <scratch file> -- w`, timed, its profile removed.
    pub(crate) fn record(
        &self,
        w: &Workload,
        flags: &[&str],
        out: Out,
        env: &[(&str, &Path)],
    ) -> Measured {
        let profile = self.dir.join("part.mprof");
        let mut cmd = w.memprof(&self.tools.memprof, flags, &profile);
        cmd.envs(env.iter().copied());
        let what = format!("memprof record {}", flags.join(" "));
        let m = run(&what, &mut cmd, out, &self.log());
        remove_profile(&profile);
        m
    }
}

pub(crate) fn skipped(order: usize, workload: &str, target: &str, why: String) -> Vec<IssueRow> {
    println!();
    println!("{workload}: skipped ({why})");
    vec![IssueRow {
        order,
        workload: workload.into(),
        memprof: format!("skipped ({why})"),
        peer: "-".into(),
        target: target.into(),
        ok: None,
    }]
}

/// Seed 003's C program at the default interval: plain, whole `record`, and jemalloc's
/// profiler, each round; memprof's and jemalloc's run in turns first.
pub(crate) fn default_interval(p: &Part) -> Vec<IssueRow> {
    let workload = "seed 003 in C, default interval, whole `record`";
    let target = format!("≤ {DEFAULT_CPU_VS_PLAIN}× plain CPU");
    if !Path::new(JEMALLOC).is_file() {
        let why = format!("no {JEMALLOC}: Debian's libjemalloc2");
        return skipped(0, workload, &target, why);
    }
    // The row's size even with `--quick`: it is cheap (a second a run), and at fewer
    // iterations `record`'s start-up and reports weigh more than the row's program does.
    let iterations = 10_000_000u64;
    let program = build_c("worst_case", &[], p.dir);
    let forward = build_c("libforward", &["-shared", "-fPIC"], p.dir);
    let w = Workload::simple("jemalloc", program, &[&iterations.to_string()]);
    let log = p.log();
    let mut plain = vec![];
    // `record`, jemalloc's profiler, jemalloc alone (what its allocator changes by itself),
    // the one-jump forwarder (what interposing on glibc's allocator costs by itself).
    let mut runs: [Vec<Measured>; 4] = Default::default();
    let title = format!(
        "worst_case.c, {iterations} iterations, default interval: whole `record` beside \
         jemalloc's profiler (LD_PRELOAD={JEMALLOC} MALLOC_CONF={JEMALLOC_CONF})"
    );
    p.rounds(&title, |r| {
        eprint!("plain");
        plain.push(run("the plain program", &mut w.plain(), Out::Null, &log));
        // The three in turns: each round starts with the next one.
        for k in 0..runs.len() {
            let which = (k + r) % runs.len();
            let m = match which {
                0 => {
                    eprint!(", record");
                    p.record(&w, &[], Out::Null, &[])
                }
                1 => {
                    eprint!(", jemalloc prof");
                    jemalloc(&w, true, &log)
                }
                2 => {
                    eprint!(", forwarder");
                    let mut c = w.plain();
                    c.env("LD_PRELOAD", &forward);
                    run("the one-jump forwarder", &mut c, Out::Null, &log)
                }
                _ => {
                    eprint!(", jemalloc alone");
                    jemalloc(&w, false, &log)
                }
            };
            runs[which].push(m);
        }
    });
    let ratio = |v: &[Measured], base: &[Measured], f: fn(&Measured) -> f64| -> f64 {
        median(&v.iter().zip(base).map(|(m, p)| f(m) / f(p)).collect::<Vec<_>>())
    };
    let cpu = |m: &Measured| m.cpu;
    let wall = |m: &Measured| m.secs;
    let [ours, theirs, floor, alone] = &runs;
    let (ours_cpu, theirs_cpu) = (ratio(ours, &plain, cpu), ratio(theirs, &plain, cpu));
    let plain_cpu = median(&plain.iter().map(cpu).collect::<Vec<_>>());
    println!("  plain                     CPU {plain_cpu:.2} s");
    for (label, v) in [("memprof record", ours), ("jemalloc's profiler", theirs)] {
        let (c, t) = (ratio(v, &plain, cpu), ratio(v, &plain, wall));
        println!("  {label:<25} CPU {c:.3}× plain, wall {t:.3}×");
    }
    let (c, t) = (ratio(alone, &plain, cpu), ratio(alone, &plain, wall));
    let prof = ratio(theirs, alone, cpu);
    println!(
        "  jemalloc alone            CPU {c:.3}× plain, wall {t:.3}× (its profiler: {prof:.3}× \
         this CPU)"
    );
    let (floor_cpu, floor_wall) = (ratio(floor, &plain, cpu), ratio(floor, &plain, wall));
    let over_floor = ratio(ours, floor, cpu);
    println!(
        "  one-jump forwarder        CPU {floor_cpu:.3}× plain, wall {floor_wall:.3}× (memprof record: \
         {over_floor:.3}× this CPU)"
    );
    let ok = ours_cpu <= DEFAULT_CPU_VS_PLAIN;
    println!("  {} whole record CPU {target}: {ours_cpu:.3}×", mark(ok));
    vec![IssueRow {
        order: 0,
        workload: format!("{workload}, {iterations} iterations"),
        memprof: format!("{ours_cpu:.3}× plain CPU"),
        peer: format!(
            "jemalloc prof:true {theirs_cpu:.3}× (over jemalloc alone {prof:.3}×); a one-jump \
             forwarder {floor_cpu:.3}× (record over it {over_floor:.3}×)"
        ),
        target,
        ok: Some(ok),
    }]
}

/// The program under jemalloc, with its profiler (`prof`) or without.
fn jemalloc(w: &Workload, prof: bool, log: &Path) -> Measured {
    let what = if prof { "jemalloc's profiler" } else { "jemalloc alone" };
    let m = run(what, &mut w.jemalloc(prof), Out::Null, log);
    // jemalloc says so on stderr when a setting is refused (a build without profiling
    // refuses `prof`): then it ran without its profiler.
    let text = read(log);
    assert!(!text.contains("<jemalloc>"), "{what}: jemalloc refused {JEMALLOC_CONF}: {text}");
    m
}

/// `memprof record -- sleep 2`: the CPU of the whole command.
pub(crate) fn sleep(p: &Part) -> Vec<IssueRow> {
    let w = Workload::simple("sleep", "sleep".into(), &["2"]);
    let log = p.log();
    let (mut plain, mut ours) = (vec![], vec![]);
    p.rounds("memprof record -- sleep 2: CPU of every process", |_| {
        eprint!("plain");
        plain.push(run("sleep 2", &mut w.plain(), Out::Null, &log));
        eprint!(", record");
        ours.push(p.record(&w, &[], Out::Null, &[]));
    });
    let cpu = |v: &[Measured]| median(&v.iter().map(|m| m.cpu).collect::<Vec<_>>());
    let wall = |v: &[Measured]| median(&v.iter().map(|m| m.secs).collect::<Vec<_>>());
    let (ours_cpu, plain_cpu) = (cpu(&ours), cpu(&plain));
    println!("  sleep 2                   CPU {plain_cpu:.3} s, wall {:.2} s", wall(&plain));
    println!("  memprof record -- sleep 2 CPU {ours_cpu:.3} s, wall {:.2} s", wall(&ours));
    let ok = ours_cpu <= SLEEP_CPU_SECS;
    println!("  {} CPU ≤ {SLEEP_CPU_SECS} s: {ours_cpu:.3} s", mark(ok));
    vec![IssueRow {
        order: 1,
        workload: "`memprof record -- sleep 2`".into(),
        memprof: format!("{ours_cpu:.3} CPU-s (wall {:.2} s)", wall(&ours)),
        peer: format!("plain sleep {plain_cpu:.3} CPU-s"),
        target: format!("≤ {SLEEP_CPU_SECS} CPU-s"),
        ok: Some(ok),
    }]
}

/// The 8-thread program for 3 s, plain, in exact mode and under heaptrack (record only: the
/// count is of allocations done while it runs).
pub(crate) fn threads(p: &Part) -> Vec<IssueRow> {
    let workload = "8 threads, exact mode, allocations done in 3 s";
    let target = format!("≥ {THREADS_VS_HEAPTRACK}× heaptrack's");
    if !p.tools.heaptrack {
        return skipped(6, workload, &target, "no heaptrack".into());
    }
    let program = build_c("threads_throughput", &["-pthread"], p.dir);
    let w = Workload::simple("threads", program, &[THREADS_SECS]);
    let log = p.log();
    let done = |what: &str| -> f64 {
        let text = read(&log);
        parse_marker(&text, "allocations_done")
            .unwrap_or_else(|| panic!("{what} printed no allocations_done line:\n{text}"))
            as f64
    };
    let (mut plain, mut ours, mut theirs) = (vec![], vec![], vec![]);
    let prefix = p.dir.join("ht");
    let title = "threads_throughput.c: 8 threads allocating for 3 s, exact mode vs heaptrack";
    p.rounds(title, |_| {
        eprint!("plain");
        run("the plain program", &mut w.plain(), Out::Log, &log);
        plain.push(done("the plain program"));
        eprint!(", record --interval 1");
        p.record(&w, &["--interval", "1"], Out::Log, &[]);
        ours.push(done("memprof record"));
        eprint!(", heaptrack");
        remove_heaptrack_files(&prefix);
        run("heaptrack", &mut w.heaptrack(&prefix), Out::Log, &log);
        theirs.push(done("heaptrack"));
        remove_heaptrack_files(&prefix);
    });
    let vs: Vec<f64> = ours.iter().zip(&theirs).map(|(o, t)| o / t).collect();
    let ratio = median(&vs);
    let m = |v: &[f64]| median(v) / 1e6;
    println!("  allocations done in 3 s (millions): plain {:.1}", m(&plain));
    println!("  memprof record --interval 1 {:.1}, heaptrack {:.1}", m(&ours), m(&theirs));
    let ok = ratio >= THREADS_VS_HEAPTRACK;
    println!("  {} exact mode {target}: {ratio:.2}×", mark(ok));
    vec![IssueRow {
        order: 6,
        workload: workload.into(),
        memprof: format!("{ratio:.2}× heaptrack's ({:.1} M)", m(&ours)),
        peer: format!("heaptrack {:.1} M (plain {:.1} M)", m(&theirs), m(&plain)),
        target,
        ok: Some(ok),
    }]
}

/// The pandas script at the default interval: plain, then `record` twice with a cache
/// directory new to the round (`XDG_CACHE_HOME`), the first run finding it empty.
pub(crate) fn pandas(p: &Part) -> Vec<IssueRow> {
    let workload = "a ~1.3 s pandas script, default interval, run twice";
    let target = format!("≤ {PANDAS_FIRST_SECS} s first, ≤ {PANDAS_SECOND_SECS} s second");
    let Some(python) = p.python else {
        return skipped(7, workload, &target, "no python3".into());
    };
    let venv = crate::measure::target_dir().join("pipeline-venv");
    let python = match pandas_python(python, &venv) {
        Ok(python) => python,
        Err(why) => return skipped(7, workload, &target, format!("no pandas: {why}")),
    };
    let script = p.dir.join("pandas_job.py");
    std::fs::write(&script, PANDAS_SCRIPT).unwrap();
    let w = Workload::simple("pandas", python.clone(), &[]);
    let w = Workload { args: vec![script.into(), PANDAS_ROWS.to_string().into()], ..w };
    let log = p.log();
    let (mut plain, mut first, mut second) = (vec![], vec![], vec![]);
    let title = format!("pandas ({}): {PANDAS_ROWS} rows, default interval", python.display());
    p.rounds(&title, |r| {
        eprint!("plain");
        plain.push(run("the pandas script", &mut w.plain(), Out::Null, &log));
        let cache = p.dir.join(format!("cache{r}"));
        std::fs::create_dir_all(&cache).unwrap();
        let env = [("XDG_CACHE_HOME", cache.as_path())];
        eprint!(", record (first)");
        first.push(p.record(&w, &[], Out::Null, &env));
        eprint!(", record (second)");
        second.push(p.record(&w, &[], Out::Null, &env));
        let _ = std::fs::remove_dir_all(&cache);
    });
    let extra = |v: &[Measured]| {
        median(&v.iter().zip(&plain).map(|(m, p)| m.secs - p.secs).collect::<Vec<_>>())
    };
    let cpu = |v: &[Measured]| median(&v.iter().map(|m| m.cpu).collect::<Vec<_>>());
    let (one, two) = (extra(&first), extra(&second));
    let plain_secs = median(&plain.iter().map(|m| m.secs).collect::<Vec<_>>());
    println!("  plain                     {plain_secs:.2} s, CPU {:.2} s", cpu(&plain));
    println!("  memprof record, first     +{one:.2} s over plain, CPU {:.2} s", cpu(&first));
    println!("  memprof record, second    +{two:.2} s over plain, CPU {:.2} s", cpu(&second));
    let ok = (one <= PANDAS_FIRST_SECS, two <= PANDAS_SECOND_SECS);
    println!("  {} first run ≤ {PANDAS_FIRST_SECS} s more than plain: {one:.2} s", mark(ok.0));
    println!("  {} second run ≤ {PANDAS_SECOND_SECS} s more than plain: {two:.2} s", mark(ok.1));
    vec![IssueRow {
        order: 7,
        workload: workload.into(),
        memprof: format!("+{one:.2} s first, +{two:.2} s second (plain {plain_secs:.2} s)"),
        peer: "-".into(),
        target,
        ok: Some(ok.0 && ok.1),
    }]
}

/// `memprof record --interval 1` of a program that allocates once: memprof's own peak RSS.
pub(crate) fn own_memory(p: &Part) -> Vec<IssueRow> {
    let program = build_c("one_malloc", &[], p.dir);
    let w = Workload::simple("own-memory", program, &[]);
    let log = p.log();
    let (mut rss, mut program_hwm) = (vec![], vec![]);
    let title = "one_malloc.c in exact mode: memprof's own peak RSS";
    p.rounds(title, |_| {
        eprint!("record --interval 1");
        let m = p.record(&w, &["--interval", "1"], Out::Null, &[]);
        let text = read(&log);
        let kib = parse_marker(&text, "vmhwm_kib")
            .unwrap_or_else(|| panic!("one_malloc printed no vmhwm_kib line:\n{text}"));
        rss.push(m.max_rss as f64);
        program_hwm.push(kib as f64 * 1024.0);
    });
    let (ours, program) = (median(&rss), median(&program_hwm));
    // `wait4` on `record` gives the largest peak of `record` and the program (each process's
    // own); the program's own is known, so a larger figure is memprof's.
    let whose = if ours > program { "memprof's own" } else { "no larger than the program's" };
    println!(
        "  ru_maxrss of memprof record (wait4: the largest of its own and the program's): {} \
         ({whose}); the program's own VmHWM: {}",
        mib(ours),
        mib(program)
    );
    let ok = ours <= OWN_RSS_MIB * 1024.0 * 1024.0;
    println!("  {} memprof's peak RSS ≤ {OWN_RSS_MIB} MiB: {}", mark(ok), mib(ours));
    vec![IssueRow {
        order: 8,
        workload: "memprof's own memory, a one-malloc program, exact mode".into(),
        memprof: format!("{} ({whose})", mib(ours)),
        peer: format!("the program: {}", mib(program)),
        target: format!("≤ {OWN_RSS_MIB} MiB"),
        ok: Some(ok),
    }]
}
