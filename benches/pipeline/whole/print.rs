//! The two workloads' tables printed: the runs, the modes, the C program's extra runs, the
//! targets with ✓ or ✗, and the workload's rows of the issue's table.

use super::*;

impl Whole<'_> {
    /// The plain program and heaptrack's whole job.
    pub(super) fn print_runs(&self) {
        let cpu = median(&self.plain_cpu);
        println!("  {:<34} {:>8.2} s   CPU {cpu:.2} s", "plain", median(&self.plain));
        if !self.tools.heaptrack {
            return;
        }
        let ht = &self.ht;
        let both: Vec<f64> =
            ht.record_secs.iter().zip(&ht.print_secs).map(|(r, p)| r + p).collect();
        let vs_plain: Vec<f64> = both.iter().zip(&self.plain).map(|(b, p)| b / p).collect();
        println!(
            "  {:<34} {:>8.2} s   CPU {:.2} s  {:.2}× plain   (record {:.2} s + print {:.2} s)",
            "heaptrack record + heaptrack_print",
            median(&both),
            median(&ht.cpu),
            median(&vs_plain),
            median(&ht.record_secs),
            median(&ht.print_secs)
        );
        let ht_file = median(&ht.file_bytes);
        // Per event of the exact mode, which records what heaptrack records.
        let exact = &self.modes[EXACT];
        let per_event = if exact.events.is_empty() {
            String::new()
        } else {
            format!(" ({:.3} B per exact-mode event)", ht_file / median(&exact.events))
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

    /// One line per memprof mode.
    pub(super) fn print_modes(&self) {
        println!(
            "  {:<22} {:>8} {:>7} {:>7} {:>7} {:>7} {:>9} {:>11} {:>7} {:>10}",
            "memprof record",
            "time",
            "×plain",
            "CPU×pl",
            "×ht",
            "CPU×ht",
            "file",
            "events",
            "B/event",
            "CPU/event"
        );
        let ht = |v: &[f64]| {
            if self.tools.heaptrack {
                format!("{:.2}×", median(v))
            } else {
                "-".into()
            }
        };
        for (m, (label, _)) in MODES.iter().enumerate() {
            let r = &self.modes[m];
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
                "  {:<22} {:>6.2} s {:>6.2}× {:>6.2}× {:>7} {:>7} {:>9} {:>11} {:>7} {:>10}",
                label,
                median(&r.secs),
                median(&r.vs_plain),
                median(&r.cpu_vs_plain),
                ht(&r.vs_heaptrack),
                ht(&r.cpu_vs_heaptrack),
                size(median(&r.file_bytes)),
                events,
                per_event,
                cpu
            );
        }
        println!(
            "  (×plain, ×ht: wall time over the plain program's and heaptrack record + print's; \
             CPU×: user + system of every process, likewise)"
        );
        self.print_notes();
    }

    /// The footnotes of the modes' table, the exact profile's report and the program's memory.
    fn print_notes(&self) {
        let exact = &self.modes[EXACT];
        if exact.counted.contains(&Counted::Known) {
            println!(
                "  * the summary printed no parseable `samples: N (F freed, M moved)` line: the \
                 workload's known allocations + frees are counted instead"
            );
        }
        if self.modes.iter().any(|r| r.counted.contains(&Counted::Unknown)) {
            println!(
                "  n/a: the summary printed no parseable `samples: N (F freed, M moved)` line, \
                 and this workload's count is not known"
            );
        }
        println!(
            "  memprof report of the exact profile: {:.2} s, {} peak RSS",
            median(&exact.report_secs),
            mb(median(&exact.report_rss))
        );
        if !self.plain_hwm.is_empty() {
            let under = |v: &[f64]| if v.is_empty() { "n/a".into() } else { mib(median(v)) };
            println!(
                "  the program's own peak RSS (its VmHWM): plain {}, exact mode {}, heaptrack {}",
                mib(median(&self.plain_hwm)),
                under(&exact.program_hwm),
                under(&self.ht.program_hwm)
            );
        }
    }

    /// The C program's runs beside the modes.
    pub(super) fn print_c(&self) {
        let c = &self.c;
        println!(
            "  {:<34} {:>8.2} s {:>7.2}×   CPU {:.2}× plain (record 800 B, depth 10: {:.2}× \
             this time)",
            "hand-set preload, 800 B, depth 10",
            median(&c.preload_secs),
            median(&c.preload_vs_plain),
            median(&c.preload_cpu_vs_plain),
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
            "  {:<34} {:>8.2} s   CPU {:.2} s (both, user + system); {:.2}× the plain pair's CPU",
            "two records (800 B, depth 10)",
            median(&c.two_record_secs),
            median(&c.two_record_cpu),
            median(&c.two_cpu_vs_plain)
        );
        let i800 = &self.modes[I800];
        let samples = if i800.events.is_empty() {
            String::new()
        } else {
            format!(", {:.0} events", median(&i800.events))
        };
        println!(
            "  {:<34} {:>8.1} ms (the program's exit stamp to wait4 on record returning{samples})",
            "exit to exit, 800 B, depth 10",
            median(&c.exit_to_exit_ms)
        );
    }

    /// The targets, reported and not asserted.
    pub(super) fn print_targets(&self) {
        println!("  targets (reported, not asserted):");
        let target = |ok: Option<bool>, what: &str, figure: String| match ok {
            Some(ok) => println!("    {} {what:<56} {figure}", mark(ok)),
            None => println!("    - {what:<56} {figure}"),
        };
        let exact = &self.modes[EXACT];
        let ht = &self.ht;
        if self.tools.heaptrack && !ht.cpu_per_event.is_empty() && !exact.cpu_per_event.is_empty() {
            let (ours, theirs) = (median(&exact.cpu_per_event), median(&ht.cpu_per_event));
            target(
                Some(ours <= theirs * EXACT_CPU_VS_HEAPTRACK),
                &format!("exact CPU per event ≤ {EXACT_CPU_VS_HEAPTRACK:.2}× heaptrack's"),
                format!("{ours:.3} µs vs {theirs:.3} µs ({:.2}×)", ours / theirs),
            );
        }
        if self.tools.heaptrack {
            let (wall, cpu) = (median(&exact.vs_heaptrack), median(&exact.cpu_vs_heaptrack));
            target(
                Some(wall <= EXACT_VS_HEAPTRACK && cpu <= EXACT_VS_HEAPTRACK),
                &format!("exact, wall and CPU ≤ {EXACT_VS_HEAPTRACK}× heaptrack record + print"),
                format!("wall {wall:.2}×, CPU {cpu:.2}×"),
            );
            let r = median(&exact.file_bytes) / median(&ht.file_bytes);
            target(
                Some(r <= EXACT_FILE_VS_HEAPTRACK),
                &format!("exact file ≤ {EXACT_FILE_VS_HEAPTRACK}× heaptrack's file"),
                format!("{r:.2}×"),
            );
        } else {
            target(None, "exact mode vs heaptrack", "skipped (no heaptrack)".into());
        }
        for (m, (label, _)) in MODES.iter().enumerate() {
            let what = format!("≤ {BYTES_PER_EVENT} bytes per event, {label}");
            if self.modes[m].bytes_per_event.is_empty() {
                target(None, &what, "n/a (no event count)".into());
            } else {
                let b = median(&self.modes[m].bytes_per_event);
                target(Some(b <= BYTES_PER_EVENT), &what, format!("{b:.2} B"));
            }
        }
        // The report targets are CPython's; the C program's figures are for comparison.
        let cpython = self.w.key == "cpython";
        let (secs, rss) = (median(&exact.report_secs), median(&exact.report_rss));
        target(
            cpython.then_some(secs <= REPORT_SECS),
            &format!("memprof report (exact) ≤ {REPORT_SECS} s (CPython)"),
            format!("{secs:.2} s"),
        );
        target(
            cpython.then_some(rss / 1e6 <= REPORT_RSS_MB),
            &format!("memprof report (exact) ≤ {REPORT_RSS_MB} MB peak RSS (CPython)"),
            mb(rss),
        );
        let r = median(&self.modes[I800].cpu_vs_plain);
        target(
            Some(r <= I800_CPU_VS_PLAIN),
            &format!("800 B, depth 10, CPU ≤ {I800_CPU_VS_PLAIN}× plain"),
            format!("{r:.2}×"),
        );
        if self.w.exit_stamp.is_some() {
            self.print_c_targets(&target);
        }
    }

    fn print_c_targets(&self, target: &dyn Fn(Option<bool>, &str, String)) {
        let c = &self.c;
        let r = median(&c.i800_vs_preload);
        target(
            Some(r <= I800_VS_PRELOAD),
            &format!("800 B, depth 10 ≤ {I800_VS_PRELOAD}× hand-set preload"),
            format!("{r:.2}×"),
        );
        let r = median(&c.two_cpu_vs_plain);
        target(
            Some(r <= TWO_COPIES_CPU_VS_PLAIN),
            &format!("two records at once, CPU ≤ {TWO_COPIES_CPU_VS_PLAIN}× two plain copies'"),
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

    /// This workload's rows of the issue's table: the C program's 800 B rows, CPython's exact
    /// mode against heaptrack.
    pub(super) fn issue_rows(&self) -> Vec<IssueRow> {
        let c = &self.c;
        let i800 = &self.modes[I800];
        if self.w.exit_stamp.is_some() {
            let cpu = median(&i800.cpu_vs_plain);
            let two = median(&c.two_cpu_vs_plain);
            return vec![
                IssueRow {
                    order: 2,
                    workload: format!(
                        "seed 003 in C, 800 B depth 10, whole `record`, {}",
                        self.w.args[0].to_string_lossy()
                    ) + " iterations",
                    memprof: format!("{cpu:.2}× plain CPU (wall {:.2}×)", median(&i800.vs_plain)),
                    peer: format!(
                        "hand-set preload {:.2}× plain CPU",
                        median(&c.preload_cpu_vs_plain)
                    ),
                    target: format!("≤ {I800_CPU_VS_PLAIN}×"),
                    ok: Some(cpu <= I800_CPU_VS_PLAIN),
                },
                IssueRow {
                    order: 3,
                    workload: "two of those at once".into(),
                    memprof: format!("{two:.2}× two plain copies' CPU"),
                    peer: "-".into(),
                    target: format!("≤ {TWO_COPIES_CPU_VS_PLAIN}×"),
                    ok: Some(two <= TWO_COPIES_CPU_VS_PLAIN),
                },
            ];
        }
        if self.w.key != "cpython" {
            return vec![];
        }
        self.cpython_rows()
    }

    fn cpython_rows(&self) -> Vec<IssueRow> {
        let exact = &self.modes[EXACT];
        let workload = "CPython JSON, exact mode, whole command".to_owned();
        let memory = "CPython JSON: the program's peak RSS, exact mode".to_owned();
        let target = format!("≤ {EXACT_VS_HEAPTRACK}× both");
        if !self.tools.heaptrack {
            let skipped = |order, workload, target| IssueRow {
                order,
                workload,
                memprof: "skipped (no heaptrack)".into(),
                peer: "-".into(),
                target,
                ok: None,
            };
            return vec![skipped(4, workload, target), skipped(5, memory, "≤ heaptrack's".into())];
        }
        let (wall, cpu) = (median(&exact.vs_heaptrack), median(&exact.cpu_vs_heaptrack));
        let ht = &self.ht;
        let ht_wall: Vec<f64> =
            ht.record_secs.iter().zip(&ht.print_secs).map(|(r, p)| r + p).collect();
        let mut rows = vec![IssueRow {
            order: 4,
            workload,
            memprof: format!("CPU {cpu:.2}×, wall {wall:.2}× heaptrack's"),
            peer: format!(
                "heaptrack record + print: CPU {:.2} s, wall {:.2} s",
                median(&ht.cpu),
                median(&ht_wall)
            ),
            target,
            ok: Some(wall <= EXACT_VS_HEAPTRACK && cpu <= EXACT_VS_HEAPTRACK),
        }];
        let (ours, theirs) = (median(&exact.program_hwm), median(&ht.program_hwm));
        let known = !exact.program_hwm.is_empty() && !ht.program_hwm.is_empty();
        rows.push(IssueRow {
            order: 5,
            workload: memory,
            memprof: if known {
                format!("{} ({:.2}× heaptrack's)", mib(ours), ours / theirs)
            } else {
                "n/a (no vmhwm_kib line)".into()
            },
            peer: format!("heaptrack: {} (plain {})", mib(theirs), mib(median(&self.plain_hwm))),
            target: "≤ heaptrack's".into(),
            ok: known.then_some(ours <= theirs),
        });
        rows
    }
}
