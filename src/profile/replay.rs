//! Replays: a recording's events read again, to see the heap as it was at one moment of
//! the run, or what a range of it allocated. The aggregates of a [`Profile`] hold the end
//! of the run (what was allocated, what is still live) and the peak's size and time; any
//! other moment is found by reading the events again. Memory is that of one profile's
//! aggregates, never the events.
//!
//! # 1. Windows
//! A [`Window`] `[from, to)` keeps what was allocated in it: the samples with
//! `from ≤ time < to`, and of their frees and moves those with `time < to`. Folded into a
//! profile ([`Profile::restrict`]), its *allocated* aggregates are what the range
//! allocated, and its *live* ones what of that was still live at `to`. The live set at a
//! moment `t` ([`Window::at`]) is the window `[0, t)`: every block allocated before `t` and
//! not freed before `t`. The filter does not depend on the order of the events, so it
//! is exact however the threads' events interleave in the stream; an event's time is the
//! start of its time unit ([`format`](super::format) §1: ≈ 1 ms in the exact mode, ≈ 1 µs
//! sampled), which is the resolution of `from` and `to`.
//!
//! A restricted profile has its own peak: the largest live heap of what the window
//! allocated (for a moment `t`, the peak before `t`), and its own live set at that peak
//! ([`Profile::peak_live`]).

use super::format::{Event, Reader};
use super::Profile;
use crate::error::Error;
use std::path::Path;

/// A range of the recording, `[from_ns, to_ns)` in nanoseconds since its start: what was
/// allocated in it, and what of that was still live at its end (see the
/// [module documentation](self) §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start of the range (inclusive).
    pub from_ns: u64,
    /// End of the range (exclusive); `u64::MAX` for the end of the recording.
    pub to_ns: u64,
}

impl Window {
    /// The whole recording.
    pub const ALL: Window = Window { from_ns: 0, to_ns: u64::MAX };

    /// The live set at `t`: what was allocated before `t`, and not freed before `t`.
    pub fn at(t: u64) -> Window {
        Window { from_ns: 0, to_ns: t }
    }

    /// True for a window that starts at the beginning of the recording: its live set is the
    /// whole heap at `to_ns` (a moment, `--at`), not only what a range allocated.
    pub fn is_moment(&self) -> bool {
        self.from_ns == 0
    }

    /// True when the event belongs to the window: a sample allocated in it, a free or move
    /// of such a sample before its end, a GC cycle that began in it.
    pub fn keeps(&self, e: &Event) -> bool {
        let inside = |t: u64| self.from_ns <= t && t < self.to_ns;
        match e {
            Event::Sample(s) => inside(s.time_ns),
            Event::Free(f) => inside(f.alloc_ns) && f.time_ns < self.to_ns,
            Event::Move(m) => inside(m.alloc_ns) && m.time_ns < self.to_ns,
            Event::GcCycle(c) => inside(c.start_ns),
        }
    }

    /// The window in words, for report headers: `live at 1.500 s`, or `allocated from
    /// 0.250 s to 1.500 s (live: what of it was still live at 1.500 s)`.
    pub fn describe(&self) -> String {
        let s = |t: u64| format!("{:.3} s", t as f64 / 1e9);
        let end = |t: u64| if t == u64::MAX { "the end".to_owned() } else { s(t) };
        if self.is_moment() {
            format!("the heap at {} (alloc: what was allocated before it)", end(self.to_ns))
        } else {
            format!(
                "allocated from {} to {} (live: what of it was still live at {})",
                s(self.from_ns),
                end(self.to_ns),
                end(self.to_ns)
            )
        }
    }
}

/// Parses a moment of a recording that ends at `end_ns`: a time since its start with a
/// unit (`1.5s`, `250ms`, `40us`, `1200ns`) or a share of its length (`40%`; `100%` is
/// the end, after every event). Returns nanoseconds since the start. The number is a
/// decimal read exactly (no floating point: every nanosecond up to `u64::MAX` is told
/// apart), rounded to the nearest nanosecond; a time beyond `u64::MAX` ns (584 years) is
/// an error, not the end.
pub(crate) fn parse_moment(s: &str, end_ns: u64) -> Result<u64, Error> {
    let t = s.trim();
    let bad = || {
        Error::Config(format!(
            "invalid time {:?}: give a time since the start with its unit (1.5s, 250ms, \
             40us, 1200ns) or a share of the run (40%)",
            s
        ))
    };
    if let Some(n) = t.strip_suffix('%') {
        // At most 12 decimals of a percent: end_ns × the share's digits stays in a u128.
        let (num, den) = decimal(n.trim(), 12).map_err(|_| bad())?;
        if num > 100 * den {
            return Err(Error::Config(format!("invalid time {:?}: a share is 0% to 100%", s)));
        }
        if num == 100 * den {
            return Ok(u64::MAX);
        }
        let d = 100 * den;
        return Ok(((end_ns as u128 * num + d / 2) / d) as u64);
    }
    let (n, scale) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1u128)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1_000)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1_000_000)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1_000_000_000)
    } else {
        return Err(bad());
    };
    let too_large =
        || Error::Config(format!("invalid time {:?}: at most {} ns (584 years)", s, u64::MAX));
    // 19 decimals: a time that fits in u64 ns, times its unit, still fits in a u128, so an
    // overflow below means a time too large, never a lost digit.
    let (num, den) =
        decimal(n.trim(), 19).map_err(|large| if large { too_large() } else { bad() })?;
    let ns = num
        .checked_mul(scale)
        // Rounded to the nearest without adding half of `den` first, which could wrap.
        .map(|v| v / den + u128::from(v % den * 2 >= den))
        .filter(|&v| v <= u64::MAX as u128)
        .ok_or_else(too_large)?;
    Ok(ns as u64)
}

/// A plain decimal (`12`, `1.5`, `.25`, `3.`) as `num / den`, `den` a power of ten; digits
/// past `max_decimals` are dropped. `Err(false)` for anything else (a sign, an exponent,
/// `inf`), `Err(true)` for a value above `u64::MAX`.
fn decimal(text: &str, max_decimals: usize) -> Result<(u128, u128), bool> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(false);
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(false);
    }
    let frac = &frac[..frac.len().min(max_decimals)];
    let den = 10u128.pow(frac.len() as u32);
    let mut num: u128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        num = num.checked_mul(10).and_then(|n| n.checked_add(u128::from(b - b'0'))).ok_or(true)?;
    }
    if num / den > u64::MAX as u128 {
        return Err(true);
    }
    Ok((num, den))
}

/// Parses a duration with its unit (`100us`, `10ms`, `1.5s`, `800ns`) as nanoseconds.
pub(crate) fn parse_duration(s: &str) -> Result<u64, Error> {
    if s.trim().ends_with('%') {
        return Err(Error::Config(format!(
            "invalid duration {s:?}: give it with its unit (100us, 10ms, 1s)"
        )));
    }
    parse_moment(s, 0)
}

/// The events of the recording at `path` in `window`, folded into a fresh profile (its
/// aggregates; its tables are the file's header only), whose blocks are short-lived when
/// freed within `short_lived_ns`.
pub fn fold_window(path: &Path, window: Window, short_lived_ns: u64) -> Result<Profile, Error> {
    let mut reader = Reader::open(path)?;
    let mut p = Profile {
        header: reader.profile().header.clone(),
        lifetimes: super::Lifetimes::with_threshold(short_lived_ns),
        ..Profile::default()
    };
    while let Some(e) = reader.next_event() {
        if window.keeps(&e) {
            p.add(&e);
        }
    }
    Ok(p)
}

impl Profile {
    /// Replaces the aggregates of this profile, read from the recording at `path`, with
    /// those of `window` (see the [module documentation](self) §1), with its
    /// [`Lifetimes::short_lived_ns`](super::Lifetimes::short_lived_ns); the tables (stacks,
    /// symbols, modules) and warnings stay. [`Profile::window`] says which window it is
    /// (`None` for [`Window::ALL`]: a second pass with another short-lived threshold).
    pub fn restrict(&mut self, path: &Path, window: Window) -> Result<(), Error> {
        let agg = fold_window(path, window, self.lifetimes.short_lived_ns)?;
        self.take_aggregates(agg);
        self.window = (window != Window::ALL).then_some(window);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_parse() {
        assert_eq!(parse_moment("1.5s", 0).unwrap(), 1_500_000_000);
        assert_eq!(parse_moment("250ms", 0).unwrap(), 250_000_000);
        assert_eq!(parse_moment("40us", 0).unwrap(), 40_000);
        assert_eq!(parse_moment("1200ns", 0).unwrap(), 1200);
        assert_eq!(parse_moment("40%", 2_000_000_000).unwrap(), 800_000_000);
        assert_eq!(parse_moment("100%", 5).unwrap(), u64::MAX);
        assert_eq!(parse_moment("0%", 5).unwrap(), 0);
        for bad in ["", "1.5", "abc", "-1s", "150%", "1.5 parsecs", "nans"] {
            assert!(parse_moment(bad, 10).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_are_exact_to_the_nanosecond_and_refuse_to_overflow() {
        // Above 2^53 ns a float cannot tell neighbouring nanoseconds apart.
        let big = (1u64 << 53) + 1;
        assert_eq!(parse_moment(&format!("{big}ns"), 0).unwrap(), big);
        let secs = format!("{}.{:09}s", big / 1_000_000_000, big % 1_000_000_000);
        assert_eq!(parse_moment(&secs, 0).unwrap(), big);
        assert_eq!(parse_moment(&format!("{}ns", u64::MAX), 0).unwrap(), u64::MAX);
        // Past u64::MAX ns: an error that says so, not the end of the run.
        for over in [
            "18446744073709551616ns",
            "18446744073.709551616s",
            "1e400s",
            "99999999999999999999999s",
        ] {
            let e = parse_moment(over, 0).unwrap_err().to_string();
            assert!(e.contains("at most") || e.contains("invalid time"), "{over}: {e}");
        }
        assert!(parse_moment("18446744073709551616ns", 0)
            .unwrap_err()
            .to_string()
            .contains("at most"));
        assert!(parse_moment("99999999999999999999999s", 0)
            .unwrap_err()
            .to_string()
            .contains("at most"));
        // A share of a long run, exact too.
        assert_eq!(parse_moment("50%", u64::MAX - 1).unwrap(), (u64::MAX - 1) / 2);
        assert_eq!(parse_moment("0.5ns", 0).unwrap(), 1, "rounded to the nearest");
        // u128::MAX with 20 decimals: the rounding's addition must not wrap.
        let edge = "3402823669209384634.63374607431768211455ns";
        assert_eq!(parse_moment(edge, 0).unwrap(), 3402823669209384635);
        assert!(parse_moment("3402823669209384634.63374607431768211455s", 0).is_err());
    }

    #[test]
    fn windows_keep_what_they_allocated() {
        use crate::profile::{Free, Sample};
        let s = |id: u64, t: u64| Sample {
            id,
            stack: 0,
            time_ns: t,
            thread: 1,
            addr: 0,
            size: 8,
            k: 8,
        };
        let a = s(1, 10);
        let b = s(2, 20);
        let w = Window { from_ns: 15, to_ns: 30 };
        assert!(!w.keeps(&Event::Sample(a)));
        assert!(w.keeps(&Event::Sample(b)));
        assert!(w.keeps(&Event::Free(Free::of(&b, 25))));
        assert!(!w.keeps(&Event::Free(Free::of(&b, 30))));
        assert!(!w.keeps(&Event::Free(Free::of(&a, 25))));
        assert!(Window::at(20).keeps(&Event::Sample(a)));
        assert!(!Window::at(20).keeps(&Event::Sample(b)));
    }
}
