//! The `MEMPROF_*` environment contract between `memprof record` (the launcher) and the
//! preload library (the agent): the variables, the settings they carry, the names of the
//! files they make.
#![forbid(unsafe_code)]

use crate::config::{interval_from_rate, parse_size, parse_unwinder, Config, Unwinder};
use crate::error::Error;
/// The directory of the tree whose root profile is the argument: `<root>.d`.
pub use crate::profile::tree::dir_of as tree_dir;

/// Mean sampling interval in bytes (a size: `1`, `800`, `512K`). `1` is the exact mode.
pub const ENV_INTERVAL: &str = "MEMPROF_INTERVAL";
/// Sampling rate λ per 8-byte word (statmemprof's unit); used when no interval is given.
pub const ENV_RATE: &str = "MEMPROF_RATE";
/// Maximum call-stack depth.
pub const ENV_DEPTH: &str = "MEMPROF_DEPTH";
/// Output path of the profiled process; `%p` stands for its pid. Default [`DEFAULT_OUTPUT`].
pub const ENV_OUTPUT: &str = "MEMPROF_OUTPUT";
/// `1`: profile forked and exec'd children too, each into `<pid>.mprof` in the tree's
/// directory ([`tree_dir`]).
pub const ENV_FOLLOW_FORKS: &str = "MEMPROF_FOLLOW_FORKS";
/// `fp`, `dwarf`, `libgcc` or `auto`. The preload library defaults to `dwarf` (C code built
/// by distribution compilers usually omits frame pointers).
pub const ENV_UNWINDER: &str = "MEMPROF_UNWINDER";
/// Fixed sampler seed (an unsigned integer), for reproducible runs.
pub const ENV_SEED: &str = "MEMPROF_SEED";
/// Set by a followed process for its descendants: the tree's directory ([`tree_dir`]). A
/// process that finds it set is a child and writes `<pid>.mprof` there.
pub const ENV_STEM: &str = "MEMPROF_STEM";
/// Path of the preload library, for `memprof record` (overrides the search).
pub const ENV_PRELOAD: &str = "MEMPROF_PRELOAD";
/// The directory where each profiled process creates its shared ring for `memprof record`'s
/// collector (see `record/ring`); unset: the process writes its own file.
pub const ENV_RINGS: &str = "MEMPROF_RINGS";
/// The collector's process, `<pid>:<start time>` (`/proc/<pid>/stat` field 22), set by
/// `memprof record` and `memprof attach`: a process's ring names it from its creation on,
/// so its threads wait for room while that process exists even before the collector has
/// attached to the ring (`record/ring` §4).
pub const ENV_COLLECTOR: &str = "MEMPROF_COLLECTOR";
/// `0`: a full queue is not waited for (its events are dropped and counted as lost), so
/// the program never waits for the collector; unset or `1`: it is, while the collector
/// lives (the default).
pub const ENV_BACKPRESSURE: &str = "MEMPROF_BACKPRESSURE";
/// Set to 1: every cached DWARF walk is checked against framehop alone, and the count of
/// disagreements is printed at exit (a self-check for tests; it doubles the unwinding cost).
pub const ENV_UNWIND_CHECK: &str = "MEMPROF_UNWIND_CHECK";

/// Tests only: the ring version the preload library writes in its shared ring's header
/// instead of its own, as a library of another memprof build would (`record/ring` §6).
pub const ENV_TEST_RING_VERSION: &str = "MEMPROF_TEST_RING_VERSION";

/// Tests only: set to 1, the preload library says at exit how many of its waits for room
/// in a full queue slept and how many spun (`engine::push` §1), and how many times it woke
/// the sleeping collector (`engine::queue` §6).
pub const ENV_TEST_WAITS: &str = "MEMPROF_TEST_WAITS";

/// Default output path template of `memprof record`.
pub const DEFAULT_OUTPUT: &str = "memprof.%p.mprof";

/// Settings of a process profiled through the preload library, as carried by the
/// `MEMPROF_*` environment variables.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvSettings {
    /// Session settings (with `drain_thread` on, as the preload runs them, and `backpressure`
    /// unless [`ENV_BACKPRESSURE`] is `0`).
    pub config: Config,
    /// Output path template (`%p` = pid).
    pub output: String,
    /// Follow forks and execs.
    pub follow_forks: bool,
    /// The tree's directory, when this process is a followed child.
    pub stem: Option<String>,
    /// The directory of the shared rings `memprof record` collects (`MEMPROF_RINGS`); none:
    /// the process writes its own file.
    pub rings: Option<String>,
    /// The collector's pid and start time ([`ENV_COLLECTOR`]).
    pub collector: Option<(u32, u64)>,
}

impl EnvSettings {
    /// Settings from a variable lookup (`std::env::var`, or `getenv` in the preload
    /// library). Unset variables take their defaults; a bad value is an error naming it.
    pub fn from_lookup<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<Self, Error> {
        let named = |name: &str, e: Error| Error::Config(format!("{name}: {e}"));
        let mut config = Config {
            drain_thread: true,
            backpressure: true,
            unwinder: Unwinder::Dwarf,
            ..Config::default()
        };
        if let Some(v) = get(ENV_INTERVAL).filter(|v| !v.is_empty()) {
            config.interval = parse_size(v).map_err(|e| named(ENV_INTERVAL, e))?;
        } else if let Some(v) = get(ENV_RATE).filter(|v| !v.is_empty()) {
            let lambda: f64 = v
                .trim()
                .parse()
                .map_err(|_| Error::Config(format!("{ENV_RATE}: not a number: {v:?}")))?;
            config.interval = interval_from_rate(lambda).map_err(|e| named(ENV_RATE, e))?;
        }
        if let Some(v) = get(ENV_DEPTH).filter(|v| !v.is_empty()) {
            config.depth = v
                .trim()
                .parse()
                .map_err(|_| Error::Config(format!("{ENV_DEPTH}: not a number: {v:?}")))?;
        }
        if let Some(v) = get(ENV_UNWINDER).filter(|v| !v.is_empty()) {
            config.unwinder = parse_unwinder(v).map_err(|e| named(ENV_UNWINDER, e))?;
        }
        if let Some(v) = get(ENV_SEED).filter(|v| !v.is_empty()) {
            config.seed = Some(
                v.trim()
                    .parse()
                    .map_err(|_| Error::Config(format!("{ENV_SEED}: not a number: {v:?}")))?,
            );
        }
        config.backpressure = match get(ENV_BACKPRESSURE).map(str::trim) {
            None | Some("") | Some("1") | Some("yes") | Some("true") => true,
            Some("0") | Some("no") | Some("false") => false,
            Some(other) => {
                return Err(Error::Config(format!(
                    "{ENV_BACKPRESSURE}: expected 1 or 0, got {other:?}"
                )))
            }
        };
        config.validate()?;
        let follow_forks = match get(ENV_FOLLOW_FORKS).map(str::trim) {
            None | Some("") | Some("0") | Some("no") | Some("false") => false,
            Some("1") | Some("yes") | Some("true") => true,
            Some(other) => {
                return Err(Error::Config(format!(
                    "{ENV_FOLLOW_FORKS}: expected 1 or 0, got {other:?}"
                )))
            }
        };
        let output = get(ENV_OUTPUT).filter(|v| !v.is_empty()).unwrap_or(DEFAULT_OUTPUT);
        let stem = get(ENV_STEM).filter(|v| !v.is_empty()).map(str::to_owned);
        let rings = get(ENV_RINGS).filter(|v| !v.is_empty()).map(str::to_owned);
        let collector = match get(ENV_COLLECTOR).map(str::trim).filter(|v| !v.is_empty()) {
            None => None,
            Some(v) => Some(
                v.split_once(':')
                    .and_then(|(pid, start)| Some((pid.parse().ok()?, start.parse().ok()?)))
                    .ok_or_else(|| {
                        Error::Config(format!("{ENV_COLLECTOR}: expected PID:START, got {v:?}"))
                    })?,
            ),
        };
        Ok(EnvSettings { config, output: output.to_owned(), follow_forks, stem, rings, collector })
    }

    /// The variables that carry these settings to a child process (all but the stem).
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let unwinder = match self.config.unwinder {
            Unwinder::Auto => "auto",
            Unwinder::FramePointer => "fp",
            Unwinder::Dwarf => "dwarf",
            Unwinder::Libgcc => "libgcc",
        };
        let mut v = vec![
            (ENV_INTERVAL, format!("{}", self.config.interval)),
            (ENV_DEPTH, self.config.depth.to_string()),
            (ENV_OUTPUT, self.output.clone()),
            (ENV_FOLLOW_FORKS, if self.follow_forks { "1" } else { "0" }.to_owned()),
            (ENV_UNWINDER, unwinder.to_owned()),
        ];
        if let Some(seed) = self.config.seed {
            v.push((ENV_SEED, seed.to_string()));
        }
        if let Some(dir) = &self.rings {
            v.push((ENV_RINGS, dir.clone()));
        }
        if let Some((pid, start)) = self.collector {
            v.push((ENV_COLLECTOR, format!("{pid}:{start}")));
        }
        if !self.config.backpressure {
            v.push((ENV_BACKPRESSURE, "0".to_owned()));
        }
        v
    }
}

/// Expands `%p` in an output template to `pid` (`%%` is a literal `%`).
pub fn expand_output(template: &str, pid: u32) -> String {
    let mut out = String::with_capacity(template.len() + 8);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// The file of a followed child in the tree's directory `dir`: `<dir>/<pid>.mprof`, or
/// `<dir>/<pid>.<n>.mprof` for the n-th further image of the same pid (a forked child that
/// then called exec).
pub fn child_output(dir: &str, pid: u32, n: u32) -> String {
    if n == 0 {
        format!("{dir}/{pid}.mprof")
    } else {
        format!("{dir}/{pid}.{n}.mprof")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_round_trip() {
        let vars: std::collections::HashMap<&str, &str> = [
            (ENV_INTERVAL, "800"),
            (ENV_DEPTH, "10"),
            (ENV_OUTPUT, "/tmp/x.%p.mprof"),
            (ENV_FOLLOW_FORKS, "1"),
            (ENV_UNWINDER, "fp"),
        ]
        .into_iter()
        .collect();
        let s = EnvSettings::from_lookup(|k| vars.get(k).copied()).unwrap();
        assert_eq!(s.config.interval, 800.0);
        assert_eq!(s.config.depth, 10);
        assert_eq!(s.config.unwinder, Unwinder::FramePointer);
        assert!(s.follow_forks && s.config.drain_thread && s.config.backpressure);
        let env: std::collections::HashMap<&str, String> = s.to_env().into_iter().collect();
        let again = EnvSettings::from_lookup(|k| env.get(k).map(String::as_str)).unwrap();
        assert_eq!(again, s);
        let d = EnvSettings::from_lookup(|_| None).unwrap();
        assert_eq!((d.output.as_str(), d.config.unwinder), (DEFAULT_OUTPUT, Unwinder::Dwarf));
        assert!(EnvSettings::from_lookup(|k| (k == ENV_DEPTH).then_some("x")).is_err());
        assert!(EnvSettings::from_lookup(|k| (k == ENV_RATE).then_some("0.01")).is_ok());
        let off = EnvSettings::from_lookup(|k| (k == ENV_BACKPRESSURE).then_some("0")).unwrap();
        assert!(!off.config.backpressure);
        let env: std::collections::HashMap<&str, String> = off.to_env().into_iter().collect();
        assert_eq!(EnvSettings::from_lookup(|k| env.get(k).map(String::as_str)).unwrap(), off);
        assert!(EnvSettings::from_lookup(|k| (k == ENV_BACKPRESSURE).then_some("x")).is_err());
        let named = EnvSettings::from_lookup(|k| (k == ENV_COLLECTOR).then_some("42:7")).unwrap();
        assert_eq!(named.collector, Some((42, 7)));
        let env: std::collections::HashMap<&str, String> = named.to_env().into_iter().collect();
        assert_eq!(EnvSettings::from_lookup(|k| env.get(k).map(String::as_str)).unwrap(), named);
        assert!(EnvSettings::from_lookup(|k| (k == ENV_COLLECTOR).then_some("42")).is_err());
    }

    #[test]
    fn output_names() {
        assert_eq!(expand_output("memprof.%p.mprof", 42), "memprof.42.mprof");
        assert_eq!(expand_output("a%%b%q", 1), "a%b%q");
        assert_eq!(child_output(&tree_dir("out.mprof"), 7, 0), "out.mprof.d/7.mprof");
        assert_eq!(child_output("out.mprof.d", 7, 2), "out.mprof.d/7.2.mprof");
    }
}
