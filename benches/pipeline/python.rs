//! The `python` part: what Python frames cost. The CPython JSON workload at the default
//! interval, each round: plain (pymalloc, as the user runs it); `memprof record` (its
//! default, `PYTHONMALLOC=malloc`, so that every object is seen, Python frames read on
//! each sample); `record --keep-pymalloc` (objects seen only as pymalloc's arenas); the
//! plain program with `PYTHONMALLOC=malloc` alone (what that setting costs by itself); and
//! memray 1.x beside it (`python -m memray run`, installed once into a kept virtualenv), by
//! default (pymalloc's arenas) and with `--trace-python-allocators` (every object, as
//! `record`'s default sees them). CPU of every process, over plain's in the same round.

use std::process::Command;

use crate::measure::{mark, median, run, IssueRow, Measured, Out};
use crate::rows::{skipped, Part};
use crate::workloads::{python_with, Workload, JSON_SCRIPT};

/// `record` at the default interval over the plain program, CPU.
const PYTHON_CPU_VS_PLAIN: f64 = 1.10;
/// Records of the JSON workload (about 1.7 s plain on the bench's machine).
const RECORDS: &str = "300000";

pub(crate) fn python_frames(p: &Part) -> Vec<IssueRow> {
    let workload = "CPython JSON, default interval, Python frames, whole `record`";
    let target = format!("≤ {PYTHON_CPU_VS_PLAIN}× plain CPU");
    let Some(python) = p.python else {
        return skipped(9, workload, &target, "no python3".into());
    };
    let venv = crate::measure::target_dir().join("pipeline-memray-venv");
    let memray = match python_with(python, &venv, "memray") {
        Ok(m) => m,
        Err(why) => return skipped(9, workload, &target, format!("no memray: {why}")),
    };
    let script = p.dir.join("json_python_frames.py");
    std::fs::write(&script, JSON_SCRIPT).unwrap();
    let w = Workload::simple("python", python.to_owned(), &[]);
    let w = Workload { args: vec![script.clone().into(), RECORDS.into()], ..w };
    let log = p.log();
    let capture = p.dir.join("memray.bin");
    let memray_run = |trace: bool| {
        let _ = std::fs::remove_file(&capture);
        let mut c = Command::new(&memray);
        c.args(["-m", "memray", "run", "-q", "--force", "-o"]).arg(&capture);
        if trace {
            c.arg("--trace-python-allocators");
        }
        c.arg(&script).arg(RECORDS);
        let m = run("memray run", &mut c, Out::Null, &log);
        let _ = std::fs::remove_file(&capture);
        m
    };
    let mut runs: [Vec<Measured>; 6] = Default::default();
    let title = format!("CPython ({}): JSON round trip of {RECORDS} records", python.display());
    p.rounds(&title, |r| {
        for k in 0..runs.len() {
            let which = (k + r) % runs.len();
            let m = match which {
                0 => {
                    eprint!("plain, ");
                    run("plain", &mut w.plain(), Out::Null, &log)
                }
                1 => {
                    eprint!("record, ");
                    p.record(&w, &[], Out::Null, &[])
                }
                2 => {
                    eprint!("record --keep-pymalloc, ");
                    p.record(&w, &["--keep-pymalloc"], Out::Null, &[])
                }
                3 => {
                    eprint!("PYTHONMALLOC=malloc, ");
                    run(
                        "PYTHONMALLOC=malloc",
                        w.plain().env("PYTHONMALLOC", "malloc"),
                        Out::Null,
                        &log,
                    )
                }
                4 => {
                    eprint!("memray, ");
                    memray_run(false)
                }
                _ => {
                    eprint!("memray --trace-python-allocators, ");
                    memray_run(true)
                }
            };
            runs[which].push(m);
        }
    });
    let [plain, ours, kept, malloc, memray_default, memray_traced] = &runs;
    let ratio = |v: &[Measured]| {
        median(&v.iter().zip(plain).map(|(m, p)| m.cpu / p.cpu).collect::<Vec<_>>())
    };
    let plain_cpu = median(&plain.iter().map(|m| m.cpu).collect::<Vec<_>>());
    println!("  plain (pymalloc)                        CPU {plain_cpu:.2} s");
    for (label, v) in [
        ("memprof record (PYTHONMALLOC=malloc)", ours),
        ("memprof record --keep-pymalloc", kept),
        ("plain with PYTHONMALLOC=malloc", malloc),
        ("memray run", memray_default),
        ("memray run --trace-python-allocators", memray_traced),
    ] {
        println!("  {label:<39} CPU {:.3}× plain", ratio(v));
    }
    let (r, k) = (ratio(ours), ratio(kept));
    let ok = r <= PYTHON_CPU_VS_PLAIN;
    println!("  {} whole record CPU {target}: {r:.3}× (--keep-pymalloc {k:.3}×)", mark(ok));
    vec![IssueRow {
        order: 9,
        workload: format!("{workload}, {RECORDS} records"),
        memprof: format!(
            "{r:.3}× plain CPU (every object: PYTHONMALLOC=malloc alone {:.3}×); \
             --keep-pymalloc {k:.3}×",
            ratio(malloc)
        ),
        peer: format!(
            "memray run {:.3}×; with --trace-python-allocators (every object) {:.3}×",
            ratio(memray_default),
            ratio(memray_traced)
        ),
        target,
        ok: Some(ok),
    }]
}
