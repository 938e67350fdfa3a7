//! Reports of a process tree (`memprof record --follow-forks`): the table of its processes,
//! one row each, printed above the merged top table.

use super::text::printable;
use crate::profile::load::Process;
use std::fmt::Write as _;

/// How [`process_table`] is drawn.
#[derive(Clone, Copy, Debug)]
pub struct TreeOptions {
    /// Rows at most (the root always has one); the rest are summed in one line.
    pub limit: usize,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions { limit: 15 }
    }
}

/// The table of a tree's processes, one row each: pid, parent, estimated bytes allocated,
/// at the process's own peak and still live at its end, its program and its file (the one
/// to pass to `memprof report` for that process alone; both escaped, [`printable`]). The
/// first process (the program's own) comes first, then the others by bytes allocated; past [`TreeOptions::limit`] rows, one line counts the rest.
pub fn process_table(processes: &[Process], options: &TreeOptions) -> String {
    let h = super::view::human_bytes;
    let mut order: Vec<&Process> = processes.iter().skip(1).collect();
    order.sort_by(|a, b| b.allocated.total_cmp(&a.allocated).then(a.pid.cmp(&b.pid)));
    let rows: Vec<&Process> = processes.iter().take(1).chain(order).collect();
    let shown = rows.len().min(options.limit.max(1));
    let mut out = String::new();
    let _ = writeln!(out, "processes: {} in the tree", processes.len());
    let _ = writeln!(
        out,
        "{:>8}  {:>8}  {:>11}  {:>11}  {:>12}  {:>12}  {:<10}  {:<16}  file",
        "pid", "parent", "allocated", "peak", "live at exit", "resident max", "ended", "program"
    );
    for p in &rows[..shown] {
        let file = p.file.display().to_string();
        let exe = p.executable.rsplit('/').next().unwrap_or(&p.executable);
        let parent = if p.ppid == 0 { "-".to_owned() } else { p.ppid.to_string() };
        let resident = p.resident.map_or("-".to_owned(), |(_, most)| h(most as f64));
        let _ = writeln!(
            out,
            "{:>8}  {:>8}  {:>11}  {:>11}  {:>12}  {:>12}  {:<10}  {:<16}  {}",
            p.pid,
            parent,
            h(p.allocated),
            h(p.peak),
            h(p.live),
            resident,
            p.ended.map_or("-".to_owned(), short_ending),
            printable(exe),
            printable(&file)
        );
    }
    let rest = &rows[shown..];
    if !rest.is_empty() {
        let allocated: f64 = rest.iter().map(|p| p.allocated).sum();
        let live: f64 = rest.iter().map(|p| p.live).sum();
        let _ = writeln!(
            out,
            "… {} more processes: {} allocated, {} live at exit",
            rest.len(),
            h(allocated),
            h(live)
        );
    }
    out
}

/// How a process ended, in a table's cell: `exit 0`, `signal 11`, `oom-kill`, `exec` …
pub(crate) fn short_ending(e: crate::profile::Ended) -> String {
    use crate::profile::EndedHow;
    match e.how {
        EndedHow::Exit | EndedHow::QuickExit | EndedHow::Signal => {
            format!("{} {}", e.how.name(), e.status)
        }
        _ => e.how.name().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::load::Process;

    fn process(pid: u32, exe: &str, allocated: f64) -> Process {
        Process {
            file: format!("t.mprof.d/{pid}.mprof").into(),
            executable: exe.into(),
            pid,
            ppid: 1,
            samples: 1,
            allocated,
            peak: allocated / 2.0,
            live: 0.0,
            resident: (pid == 10).then_some((3 << 20, 5 << 20)),
            allocator_free: None,
            ended: Some(crate::profile::Ended {
                how: crate::profile::EndedHow::Exit,
                status: pid as i32 - 10,
                limit_bytes: 0,
            }),
            page: None,
        }
    }

    #[test]
    fn one_row_per_process_root_first_then_bounded() {
        let ps = vec![
            process(10, "/bin/sh", 1024.0),
            process(11, "/usr/bin/small", 2048.0),
            process(12, "./big\n\x1b[2J", 4096.0),
            process(13, "/usr/bin/tiny", 512.0),
        ];
        let t = process_table(&ps, &TreeOptions { limit: 3 });
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "processes: 4 in the tree");
        assert!(
            lines[2].contains("      10 ") && lines[2].ends_with("  t.mprof.d/10.mprof"),
            "{t}"
        );
        assert!(lines[3].contains("4.00 KiB") && lines[3].contains("12.mprof"), "{t}");
        assert!(lines[3].contains(" big\\n\\u{1b}[2J "), "a name is one escaped line: {t}");
        assert!(lines[4].contains("  small "), "{t}");
        // The root's resident size at most and each one's way of ending.
        assert!(lines[2].contains("    5.00 MiB  exit 0 "), "{t}");
        assert!(lines[3].contains("           -  exit 2 "), "{t}");
        assert_eq!(lines[5], "… 1 more processes: 512 B allocated, 0 B live at exit");
        assert_eq!(lines.len(), 6);
    }
}
