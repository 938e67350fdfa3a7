//! Profiling settings: what a session samples and how ([`Config`]), and the parsers of
//! their textual forms. Their environment form is in `record/env.rs`.
#![forbid(unsafe_code)]

use crate::error::Error;

/// Default mean sampling interval: 512 KiB, jemalloc's and Go's default.
pub const DEFAULT_INTERVAL: u64 = 512 * 1024;
/// Default maximum call-stack depth.
pub const DEFAULT_DEPTH: usize = 128;
/// Default capacity of the postponed-event queue, in 128-byte cells (an event takes one, and
/// one more for each 15 frames of its call stack past the first 4): 4 MiB, room for 16,384
/// events of up to 19 frames between two polls. (`memprof record`'s ring, which its
/// collector drains as it fills, is smaller: `record::ring::RING_CELLS`.)
pub(crate) const DEFAULT_QUEUE_CAPACITY: usize = 32 * 1024;
/// Largest depth accepted (a stack deeper than this is truncated).
pub const MAX_DEPTH: usize = 4096;

/// How return addresses are collected on the sample path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unwinder {
    /// Frame pointers where they are shown to be kept, else `Dwarf`: in process, when a
    /// probe of the profiler's own calls (built with the program) walks right; under the
    /// preload library, when every loaded object's unwind tables show that it keeps them.
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
    /// Capacity of the postponed-event queue, in 128-byte cells (an event takes one, and one
    /// more for each 15 frames of its call stack past the first 4); events beyond it are
    /// counted as lost.
    pub queue_capacity: usize,
    /// Run callbacks on a background thread as well as at `poll`/`stop`.
    pub drain_thread: bool,
    /// How call stacks are captured.
    pub unwinder: Unwinder,
    /// When the queue is full, a sampling thread sleeps until the consumer has made room
    /// instead of dropping the event, for as long as the consumer is there (the drain
    /// thread, or `memprof record`'s collector while its process lives; see
    /// `BACKPRESSURE_WAIT_MS` for the one bound). Meant for processes with a drain thread
    /// (the preload library): it keeps the exact mode lossless under load.
    pub backpressure: bool,
}

/// How long a sampling thread waiting for room in a full queue (with `backpressure` on)
/// lets the consumer take nothing while it is held up, before the event is counted as
/// lost: by a push that never finishes (the slot the consumer takes next claimed and not
/// published), or, for the in-process drain thread, by anything (a tracker's callback
/// that waits for a lock the sleeping thread holds). A consumer that is merely slow,
/// starved or stopped with the event it takes next published is waited for without bound
/// while it exists.
pub(crate) const BACKPRESSURE_WAIT_MS: u64 = 2000;

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
        if !(self.interval.is_finite() && (1.0..=MAX_INTERVAL).contains(&self.interval)) {
            return Err(Error::Config(format!(
                "sampling interval must be 1 byte to 256 TiB, got {}",
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

/// The largest sampling interval: 256 TiB, the whole x86-64 address space (a larger one
/// would never sample, and a size that large is a typo).
pub const MAX_INTERVAL: f64 = (1u64 << 48) as f64;

/// Converts statmemprof's λ (sample points per 8-byte word) to an interval in bytes (at
/// most [`MAX_INTERVAL`]: a λ so small that 8/λ is past it, or infinite, is refused).
pub fn interval_from_rate(lambda: f64) -> Result<f64, Error> {
    let min = 8.0 / MAX_INTERVAL;
    if !(lambda.is_finite() && lambda >= min && lambda <= 8.0) {
        return Err(Error::Config(format!(
            "rate must be in [{min:e}, 8] sample points per 8-byte word (an interval of 1 \
             byte to 256 TiB), got {lambda}"
        )));
    }
    Ok(8.0 / lambda)
}

/// Parses a size such as `512K`, `4KiB`, `1M`, `800`, `1` (bytes), `1.50 TiB` (what
/// reports print reads back): from 1 byte to [`MAX_INTERVAL`].
pub fn parse_size(text: &str) -> Result<f64, Error> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(Error::Config(format!(
                "unknown size unit in {:?} (use B, K, M, G or T)",
                text
            )))
        }
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| Error::Config(format!("not a size: {:?} (examples: 800, 512K, 1M)", text)))?;
    let v = n * mult;
    if !(v.is_finite() && (1.0..=MAX_INTERVAL).contains(&v)) {
        return Err(Error::Config(format!("size must be 1 byte to 256 TiB, got {:?}", text)));
    }
    Ok(v)
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
    fn sizes_stay_in_range_and_read_back_what_reports_print() {
        // Once accepted as an interval of ~1e29 bytes.
        let e = parse_size("99999999999999999999GiB").unwrap_err().to_string();
        assert!(e.contains("256 TiB") && !e.contains('\n'), "{e}");
        assert!(parse_size("257TiB").is_err());
        assert_eq!(parse_size("256TiB").unwrap(), MAX_INTERVAL);
        // What human_bytes prints with TiB reads back.
        assert_eq!(parse_size("5.00 TiB").unwrap(), 5.0 * 1099511627776.0);
        assert_eq!(parse_size("1t").unwrap(), 1099511627776.0);
        assert!(Config::with_interval(MAX_INTERVAL * 2.0).validate().is_err());
    }

    #[test]
    fn a_tiny_rate_is_refused_not_an_infinite_interval() {
        assert!(interval_from_rate(1e-308).is_err(), "8/1e-308 is infinite");
        assert!(interval_from_rate(f64::MIN_POSITIVE).is_err());
        assert_eq!(interval_from_rate(8.0 / MAX_INTERVAL).unwrap(), MAX_INTERVAL);
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
}
