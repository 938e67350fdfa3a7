//! Profiling settings and the `MEMPROF_*` environment contract shared by the CLI and the
//! preload library.
#![forbid(unsafe_code)]

use crate::error::Error;

/// Default mean sampling interval: 512 KiB, jemalloc's and Go's default.
pub const DEFAULT_INTERVAL: u64 = 512 * 1024;
/// Default maximum call-stack depth.
pub const DEFAULT_DEPTH: usize = 128;
/// Default capacity of the postponed-event queue, in events.
pub const DEFAULT_QUEUE_CAPACITY: usize = 16 * 1024;
/// Largest depth accepted (a stack deeper than this is truncated).
pub const MAX_DEPTH: usize = 4096;

/// How return addresses are collected on the sample path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unwinder {
    /// Frame pointers when a probe at start shows the code keeps them, else `Dwarf`.
    #[default]
    Auto,
    /// Walk the frame-pointer chain (fast; needs code built with frame pointers).
    FramePointer,
    /// DWARF unwind tables: framehop's cached unwinder over the loaded objects' `.eh_frame`
    /// (x86_64; hundreds of ns for 10 frames), falling back to libgcc where it cannot walk.
    Dwarf,
    /// libgcc's DWARF unwinder through `backtrace` only (always correct, microseconds).
    Libgcc,
}

/// Settings of a profiling session.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Mean interval between sample points, in bytes (R). `1.0` is the exact mode: every
    /// allocation is recorded with its exact size.
    pub interval: f64,
    /// Maximum frames captured per sample (stacks deeper than this are marked truncated).
    pub depth: usize,
    /// Seed for the sampler's random numbers. `None` draws a seed from the clock and pid;
    /// `Some` makes every thread's sequence deterministic (thread n uses `seed` mixed with n).
    pub seed: Option<u64>,
    /// Capacity of the postponed-event queue; events beyond it are counted as lost.
    pub queue_capacity: usize,
    /// Run callbacks on a background thread as well as at `poll`/`stop`.
    pub drain_thread: bool,
    /// How call stacks are captured.
    pub unwinder: Unwinder,
    /// When the queue is full, a sampling thread waits (a bounded time, [`BACKPRESSURE_WAIT_MS`])
    /// for the consumer instead of dropping the event. Meant for processes with a drain
    /// thread (the preload library): it keeps the exact mode lossless under load.
    pub backpressure: bool,
}

/// Longest a sampling thread waits for room in a full queue when `backpressure` is on;
/// after that the event is counted as lost.
pub const BACKPRESSURE_WAIT_MS: u64 = 2000;

impl Default for Config {
    fn default() -> Self {
        Config {
            interval: DEFAULT_INTERVAL as f64,
            depth: DEFAULT_DEPTH,
            seed: None,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            drain_thread: false,
            unwinder: Unwinder::Auto,
            backpressure: false,
        }
    }
}

impl Config {
    /// A config with mean interval `bytes` (1 = exact mode).
    pub fn with_interval(bytes: f64) -> Self {
        Config { interval: bytes, ..Config::default() }
    }

    /// A config from statmemprof's rate λ: the probability that a given 8-byte word is a
    /// sample point, so the interval is `8 / λ` bytes.
    pub fn with_rate(lambda: f64) -> Result<Self, Error> {
        Ok(Config { interval: interval_from_rate(lambda)?, ..Config::default() })
    }

    /// The exact mode: every allocation is recorded with its exact size.
    pub fn exact() -> Self {
        Config::with_interval(1.0)
    }

    /// Checks that the settings are usable.
    pub fn validate(&self) -> Result<(), Error> {
        if !(self.interval.is_finite() && self.interval >= 1.0) {
            return Err(Error::Config(format!(
                "sampling interval must be a number of bytes >= 1, got {}",
                self.interval
            )));
        }
        if self.depth == 0 || self.depth > MAX_DEPTH {
            return Err(Error::Config(format!(
                "call-stack depth must be between 1 and {MAX_DEPTH}, got {}",
                self.depth
            )));
        }
        if self.queue_capacity < 2 || self.queue_capacity > (1 << 24) {
            return Err(Error::Config(format!(
                "queue capacity must be between 2 and {}, got {}",
                1 << 24,
                self.queue_capacity
            )));
        }
        Ok(())
    }
}

/// Converts statmemprof's λ (sample points per 8-byte word) to an interval in bytes.
pub fn interval_from_rate(lambda: f64) -> Result<f64, Error> {
    if !(lambda.is_finite() && lambda > 0.0 && lambda <= 8.0) {
        return Err(Error::Config(format!(
            "rate must be in (0, 8] sample points per 8-byte word, got {lambda}"
        )));
    }
    Ok(8.0 / lambda)
}

/// Parses a size such as `512K`, `4KiB`, `1M`, `800`, `1` (bytes).
pub fn parse_size(text: &str) -> Result<f64, Error> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(Error::Config(format!("unknown size unit in {text:?} (use B, K, M or G)")))
        }
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| Error::Config(format!("not a size: {text:?} (examples: 800, 512K, 1M)")))?;
    let v = n * mult;
    if !(v.is_finite() && v >= 1.0) {
        return Err(Error::Config(format!("size must be at least 1 byte, got {text:?}")));
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// The MEMPROF_* environment contract between `memprof record` and the preload library.

/// Mean sampling interval in bytes (a size: `1`, `800`, `512K`). `1` is the exact mode.
pub const ENV_INTERVAL: &str = "MEMPROF_INTERVAL";
/// Sampling rate λ per 8-byte word (statmemprof's unit); used when no interval is given.
pub const ENV_RATE: &str = "MEMPROF_RATE";
/// Maximum call-stack depth.
pub const ENV_DEPTH: &str = "MEMPROF_DEPTH";
/// Output path of the profiled process; `%p` stands for its pid. Default [`DEFAULT_OUTPUT`].
pub const ENV_OUTPUT: &str = "MEMPROF_OUTPUT";
/// `1`: profile forked and exec'd children too, each into `<stem>.<pid>.mprof`.
pub const ENV_FOLLOW_FORKS: &str = "MEMPROF_FOLLOW_FORKS";
/// `fp`, `dwarf`, `libgcc` or `auto`. The preload library defaults to `dwarf` (C code built
/// by distribution compilers usually omits frame pointers).
pub const ENV_UNWINDER: &str = "MEMPROF_UNWINDER";
/// Fixed sampler seed (an unsigned integer), for reproducible runs.
pub const ENV_SEED: &str = "MEMPROF_SEED";
/// Set by a followed process for its descendants: the stem their files are named after.
/// A process that finds it set is a child and writes `<stem>.<pid>.mprof`.
pub const ENV_STEM: &str = "MEMPROF_STEM";
/// Path of the preload library, for `memprof record` (overrides the search).
pub const ENV_PRELOAD: &str = "MEMPROF_PRELOAD";
/// Set to 1: every cached DWARF walk is checked against framehop alone, and the count of
/// disagreements is printed at exit (a self-check for tests; it doubles the unwinding cost).
pub const ENV_UNWIND_CHECK: &str = "MEMPROF_UNWIND_CHECK";

/// Default output path template of `memprof record`.
pub const DEFAULT_OUTPUT: &str = "memprof.%p.mprof";

/// Settings of a process profiled through the preload library, as carried by the
/// `MEMPROF_*` environment variables.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvSettings {
    /// Session settings (with `drain_thread` and `backpressure` on, as the preload runs them).
    pub config: Config,
    /// Output path template (`%p` = pid).
    pub output: String,
    /// Follow forks and execs.
    pub follow_forks: bool,
    /// The stem of a followed child's file, when this process is one.
    pub stem: Option<String>,
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
        Ok(EnvSettings { config, output: output.to_owned(), follow_forks, stem })
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

/// The file of a followed child: `<stem>.<pid>.mprof`, or `<stem>.<pid>.<n>.mprof` for the
/// n-th further image of the same pid (a forked child that then called exec).
pub fn child_output(stem: &str, pid: u32, n: u32) -> String {
    if n == 0 {
        format!("{stem}.{pid}.mprof")
    } else {
        format!("{stem}.{pid}.{n}.mprof")
    }
}

/// The stem children's files are named after: the root's path without `.mprof`.
pub fn output_stem(path: &str) -> &str {
    path.strip_suffix(".mprof").unwrap_or(path)
}

/// Parses `fp`, `dwarf`, `libgcc` or `auto`.
pub fn parse_unwinder(text: &str) -> Result<Unwinder, Error> {
    match text.trim().to_ascii_lowercase().as_str() {
        "fp" | "frame-pointer" | "framepointer" => Ok(Unwinder::FramePointer),
        "dwarf" => Ok(Unwinder::Dwarf),
        "libgcc" => Ok(Unwinder::Libgcc),
        "auto" => Ok(Unwinder::Auto),
        other => Err(Error::Config(format!(
            "unknown unwinder {other:?} (use fp, dwarf, libgcc or auto)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("800").unwrap(), 800.0);
        assert_eq!(parse_size("512K").unwrap(), 524288.0);
        assert_eq!(parse_size("4KiB").unwrap(), 4096.0);
        assert_eq!(parse_size("1m").unwrap(), 1048576.0);
        assert!(parse_size("0").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("abc").is_err());
    }

    #[test]
    fn rate_is_per_word() {
        assert_eq!(interval_from_rate(0.01).unwrap(), 800.0);
        assert!(interval_from_rate(0.0).is_err());
        assert!(interval_from_rate(f64::NAN).is_err());
        assert!(Config::with_rate(9.0).is_err());
    }

    #[test]
    fn validation() {
        assert!(Config::default().validate().is_ok());
        assert!(Config::with_interval(0.5).validate().is_err());
        assert!(Config { depth: 0, ..Config::default() }.validate().is_err());
    }

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
    }

    #[test]
    fn output_names() {
        assert_eq!(expand_output("memprof.%p.mprof", 42), "memprof.42.mprof");
        assert_eq!(expand_output("a%%b%q", 1), "a%b%q");
        assert_eq!(child_output(output_stem("out.mprof"), 7, 0), "out.7.mprof");
        assert_eq!(child_output("out", 7, 2), "out.7.2.mprof");
    }
}
