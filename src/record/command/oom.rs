//! Whether the kernel's OOM killer ended the program. A SIGKILL alone does not say who sent
//! it, but the kernel counts its OOM kills: per memory cgroup (`oom_kill` in
//! `memory.oom_control` under cgroup v1, in `memory.events` under v2) and for the whole
//! system (`oom_kill` in `/proc/vmstat`). `record` reads the counters of its own memory
//! cgroup, which the program inherits, and of each cgroup above it (a limit may be an
//! ancestor's), and the system's, before the program runs ([`OomWatch::start`]) and after
//! it died of SIGKILL ([`OomWatch::killed`]). A counter that rose names the OOM killer, with
//! the limit of the cgroup that hit it.

use std::path::{Path, PathBuf};

/// The OOM-kill counters read before the program ran.
#[derive(Debug, Default)]
pub(crate) struct OomWatch {
    counters: Vec<Counter>,
}

/// One counter: where it is, what it counts for, and its value before the run.
#[derive(Debug)]
struct Counter {
    /// The file holding an `oom_kill N` line.
    file: PathBuf,
    /// The memory cgroup it counts for (`None`: the whole system).
    cgroup: Option<String>,
    /// The cgroup's memory limit in bytes, when it has one.
    limit: Option<u64>,
    before: u64,
}

/// What [`OomWatch::killed`] found: the kernel's OOM killer killed a process during the
/// run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OomKill {
    /// The memory cgroup whose counter rose (`None`: only the system's did).
    pub(crate) cgroup: Option<String>,
    /// That cgroup's memory limit, when it has one.
    pub(crate) limit: Option<u64>,
    /// How many OOM kills it counted during the run.
    pub(crate) kills: u64,
}

impl OomWatch {
    /// Reads the counters of this process's memory cgroup, its ancestors' and the system's.
    pub(crate) fn start() -> OomWatch {
        let mut counters = Vec::new();
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        for (path, v2) in memory_cgroups(&cgroups) {
            let root =
                if v2 { Path::new("/sys/fs/cgroup") } else { Path::new("/sys/fs/cgroup/memory") };
            // The cgroup, then each one above it.
            let mut at = Some(path.as_str());
            while let Some(p) = at {
                let dir = root.join(p.trim_start_matches('/'));
                let (file, limit) = if v2 {
                    (dir.join("memory.events"), read_limit(&dir.join("memory.max")))
                } else {
                    (dir.join("memory.oom_control"), read_limit(&dir.join("memory.limit_in_bytes")))
                };
                if let Some(before) = read_count(&file) {
                    let cgroup = Some(if p.is_empty() { "/".to_owned() } else { p.to_owned() });
                    counters.push(Counter { file, cgroup, limit, before });
                }
                at = if p.is_empty() || p == "/" {
                    None
                } else {
                    Some(p.rsplit_once('/').map_or("", |(a, _)| a))
                };
            }
        }
        let vmstat = PathBuf::from("/proc/vmstat");
        if let Some(before) = read_count(&vmstat) {
            counters.push(Counter { file: vmstat, cgroup: None, limit: None, before });
        }
        OomWatch { counters }
    }

    /// The first counter that rose since [`OomWatch::start`], nearest the program first.
    pub(crate) fn killed(&self) -> Option<OomKill> {
        self.counters.iter().find_map(|c| {
            let now = read_count(&c.file)?;
            (now > c.before).then(|| OomKill {
                cgroup: c.cgroup.clone(),
                limit: c.limit,
                kills: now - c.before,
            })
        })
    }
}

impl OomKill {
    /// What `record` says of it, `resident` being the program's last resident reading.
    pub(crate) fn describe(&self, resident: Option<u64>) -> String {
        use crate::report::human_bytes;
        let mut s = String::from("killed by the kernel's OOM killer");
        match (&self.cgroup, self.limit) {
            (Some(cg), Some(limit)) => {
                s += &format!(
                    ": memory cgroup {cg} reached its limit of {}",
                    human_bytes(limit as f64)
                )
            }
            (Some(cg), None) => s += &format!(": memory cgroup {cg} counted it"),
            (None, _) => s += " (the system ran out of memory)",
        }
        s += &format!(
            " ({} OOM kill{} during the run)",
            self.kills,
            if self.kills == 1 { "" } else { "s" }
        );
        if let Some(r) = resident {
            s += &format!("; resident {} at the last reading", human_bytes(r as f64));
        }
        s
    }
}

/// The memory cgroups named in a `/proc/PID/cgroup` text: (path, cgroup v2), the v1
/// memory controller's first.
fn memory_cgroups(text: &str) -> Vec<(String, bool)> {
    let mut v1 = Vec::new();
    let mut v2 = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            v1.push((path.to_owned(), false));
        } else if id == "0" && controllers.is_empty() {
            v2.push((path.to_owned(), true));
        }
    }
    v1.extend(v2);
    v1
}

/// The `oom_kill N` line of a counters file.
fn read_count(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
}

/// A memory limit file's value: `None` for none (`max`, or v1's page-rounded `i64::MAX`).
fn read_limit(file: &Path) -> Option<u64> {
    let v: u64 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
    (v < 1 << 62).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_cgroups_of_either_version() {
        let v1 = "9:name=systemd:/\n4:memory:/a/b\n0::/\n";
        assert_eq!(memory_cgroups(v1), [("/a/b".to_owned(), false), ("/".to_owned(), true)]);
        let v2 = "0::/user.slice/x.scope\n";
        assert_eq!(memory_cgroups(v2), [("/user.slice/x.scope".to_owned(), true)]);
        assert_eq!(memory_cgroups("junk\n3:cpu,cpuacct:/\n"), []);
        assert_eq!(memory_cgroups("5:cpu,memory:/m\n"), [("/m".to_owned(), false)]);
    }

    #[test]
    fn the_message_names_the_limit() {
        let k = OomKill { cgroup: Some("/t".into()), limit: Some(100 << 20), kills: 1 };
        let s = k.describe(Some(99 << 20));
        assert!(s.contains("OOM killer") && s.contains("100.00 MiB") && s.contains("/t"), "{s}");
        assert!(s.contains("1 OOM kill during") && s.contains("resident 99.00 MiB"), "{s}");
        let sys = OomKill { cgroup: None, limit: None, kills: 2 }.describe(None);
        assert!(
            sys.contains("the system ran out of memory") && sys.contains("2 OOM kills"),
            "{sys}"
        );
    }
}
