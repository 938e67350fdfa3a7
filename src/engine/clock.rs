//! The sample path's clock: the TSC where the kernel itself uses it as the clocksource
//! (constant-rate, synchronised across cores), else `CLOCK_MONOTONIC`. Reading the TSC
//! costs ~12 ns here against ~31 ns for `clock_gettime`, and a sample reads the clock twice
//! (its allocation and its free). Ticks become session nanoseconds at the safe point, by
//! interpolating between the session start and a fresh (TSC, monotonic) pair.

pub use crate::sys::monotonic::monotonic_ns;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// [`monotonic_ns`] when the session started.
static START_NS: AtomicU64 = AtomicU64::new(0);
static USE_TSC: AtomicBool = AtomicBool::new(false);
static TSC0: AtomicU64 = AtomicU64::new(0);

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no preconditions; it only reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rdtsc() -> u64 {
    monotonic_ns()
}

/// Chooses the clock and records the session's origin (cold path, at start).
pub(crate) fn start() {
    let tsc = cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc");
    USE_TSC.store(tsc, Ordering::Relaxed);
    START_NS.store(monotonic_ns(), Ordering::Relaxed);
    TSC0.store(rdtsc(), Ordering::Relaxed);
}

/// A clock reading on the sample path.
#[inline(always)]
pub(crate) fn now() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        rdtsc()
    } else {
        monotonic_ns()
    }
}

/// What converts this process's clock readings to session nanoseconds, for a consumer in
/// another process on the same machine (the TSC and the monotonic clock are system-wide).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Params {
    /// Readings are TSC ticks (else monotonic nanoseconds).
    pub(crate) use_tsc: bool,
    /// The TSC at the session start.
    pub(crate) tsc0: u64,
    /// [`monotonic_ns`] at the session start.
    pub(crate) start_ns: u64,
}

impl Params {
    /// A reading of the clock these parameters name, now (what a process with them would
    /// read: the TSC or the monotonic clock).
    pub(crate) fn now(&self) -> u64 {
        if self.use_tsc {
            rdtsc()
        } else {
            monotonic_ns()
        }
    }
}

/// This process's [`Params`] (of the running or last session).
pub(crate) fn params() -> Params {
    Params {
        use_tsc: USE_TSC.load(Ordering::Relaxed),
        tsc0: TSC0.load(Ordering::Relaxed),
        start_ns: START_NS.load(Ordering::Relaxed),
    }
}

/// Converts readings of [`now`] to nanoseconds since the session start.
pub(crate) struct Converter {
    scale: f64,
    params: Params,
}

impl Converter {
    /// Calibrates against the monotonic clock now (the readings to convert are older).
    pub(crate) fn new() -> Converter {
        Converter::with(params())
    }

    /// [`Converter::new`] for the readings of a session with these parameters (possibly
    /// another process's).
    pub(crate) fn with(params: Params) -> Converter {
        if !params.use_tsc {
            return Converter { scale: 0.0, params };
        }
        let (t, m) = (rdtsc(), monotonic_ns());
        let ticks = t.wrapping_sub(params.tsc0);
        let ns = m.wrapping_sub(params.start_ns);
        // Too short an interval to measure: assume a 1 GHz counter until it is not.
        let scale = if ticks > 1_000_000 { ns as f64 / ticks as f64 } else { 1.0 };
        Converter { scale, params }
    }

    pub(crate) fn session_ns(&self, reading: u64) -> u64 {
        if self.scale == 0.0 {
            reading.wrapping_sub(self.params.start_ns)
        } else {
            let ticks = reading.saturating_sub(self.params.tsc0);
            (ticks as f64 * self.scale) as u64
        }
    }
}
/// The collector's own first (TSC, monotonic) pair, taken by [`reference`]: older than any
/// session it reads, so it measures the TSC's rate over a longer stretch than the session's
/// own start does.
static REF_TSC: AtomicU64 = AtomicU64::new(0);
static REF_NS: AtomicU64 = AtomicU64::new(0);

/// Takes this process's reference pair for [`Stable`] (once; call it early).
pub(crate) fn reference() {
    if REF_NS.load(Ordering::Relaxed) == 0 {
        REF_TSC.store(rdtsc(), Ordering::Relaxed);
        REF_NS.store(monotonic_ns(), Ordering::Relaxed);
    }
}

/// Readings of the shortest segment of a [`Stable`] conversion, in ticks; a segment starting
/// `t` ticks after the session start is `t` ticks long, up to [`LONGEST_SEGMENT`].
const FIRST_SEGMENT: u64 = 1 << 20;
/// See [`FIRST_SEGMENT`] (about 0.1 s at 2.5 GHz).
const LONGEST_SEGMENT: u64 = 1 << 28;

/// Converts another process's readings to session nanoseconds as a fixed function of the
/// reading, for `memprof record`'s collector: a sampled block's free carries its
/// allocation's raw reading (`live` §5), which is converted again when the free is read,
/// and must give the very time its allocation's event was given, to the nanosecond (a
/// [`Converter`], recalibrated at every drain, moves by microseconds). The readings are
/// cut into segments of ticks, each converted at the TSC rate measured when a reading in
/// it was first converted, and never again changed; a segment is about as long as the
/// session had run when it starts (so it costs at most the error of a rate measured over
/// that long), up to [`LONGEST_SEGMENT`].
pub(crate) struct Stable {
    params: Params,
    /// (first tick after the session start, session ns then, ns per tick in 32.32 fixed
    /// point), in order. Integers: the conversion is three of the collector's per-event
    /// steps, and from and to floating point it took a tenth of its event loop.
    segments: Vec<(u64, u64, u64)>,
}

/// `ticks` at `scale` ns per tick (32.32 fixed point), in ns. Within a segment (at most
/// [`LONGEST_SEGMENT`] ticks) its rounding is below a tenth of a nanosecond.
#[inline(always)]
fn ticks_ns(ticks: u64, scale: u64) -> u64 {
    ((u128::from(ticks) * u128::from(scale)) >> 32) as u64
}

impl Stable {
    /// The conversion of the readings of a session with these parameters.
    pub(crate) fn new(params: Params) -> Stable {
        reference();
        Stable { params, segments: Vec::new() }
    }

    /// Nanoseconds since the session start now.
    pub(crate) fn now_ns(&mut self) -> u64 {
        let reading = if self.params.use_tsc { rdtsc() } else { monotonic_ns() };
        self.session_ns(reading)
    }

    /// Nanoseconds since the session start of `reading`.
    #[inline]
    pub(crate) fn session_ns(&mut self, reading: u64) -> u64 {
        if !self.params.use_tsc {
            return reading.wrapping_sub(self.params.start_ns);
        }
        let ticks = reading.saturating_sub(self.params.tsc0);
        // Most readings are recent: in the last segment.
        if let Some(&(start, ns, scale)) = self.segments.last() {
            if ticks >= start && ticks - start < segment_len(start) {
                return ns.wrapping_add(ticks_ns(ticks - start, scale));
            }
        }
        self.session_ns_slow(ticks)
    }

    #[cold]
    #[inline(never)]
    fn session_ns_slow(&mut self, ticks: u64) -> u64 {
        let end = self.segments.last().map_or(0, |&(start, _, _)| start + segment_len(start));
        if self.segments.is_empty() || ticks >= end {
            self.extend_to(ticks)
        } else {
            self.at(ticks)
        }
    }

    /// Makes the segments up to `ticks` and converts it. A reading is in the past, give or
    /// take the cores' skew: one from further in the future (a hostile or damaged one) is
    /// taken as now, so it cannot make segments without end.
    fn extend_to(&mut self, ticks: u64) -> u64 {
        let now = rdtsc().saturating_sub(self.params.tsc0);
        let ticks = if ticks > now.saturating_add(FUTURE_SLACK) { now } else { ticks };
        loop {
            let next = match self.segments.last() {
                None => (0, 0),
                Some(&(start, ns, scale)) => {
                    let len = segment_len(start);
                    if ticks < start + len {
                        break;
                    }
                    (start + len, ns.wrapping_add(ticks_ns(len, scale)))
                }
            };
            self.segments.push((next.0, next.1, self.rate()));
        }
        self.at(ticks)
    }

    /// The conversion of `ticks`, in a segment made already: an old reading (a long-lived
    /// block's allocation, converted again at its free), whose segment is found by its
    /// index rather than searched for.
    fn at(&self, ticks: u64) -> u64 {
        let i = segment_index(ticks).min(self.segments.len().saturating_sub(1));
        let (start, ns, scale) = self.segments[i];
        ns.wrapping_add(ticks_ns(ticks.saturating_sub(start), scale))
    }

    /// Nanoseconds per tick (32.32 fixed point) as measured now, over the longer of two
    /// stretches: since this process's [`reference`] and since the session started. Too
    /// short a stretch to measure (a session read at once, in a process that took its
    /// reference just now) is waited out, once per process: at most [`MIN_STRETCH`] ticks.
    fn rate(&self) -> u64 {
        let stretches = || {
            let (t, m) = (rdtsc(), monotonic_ns());
            let since = |tsc: u64, ns: u64| (t.wrapping_sub(tsc), m.wrapping_sub(ns));
            let own = since(REF_TSC.load(Ordering::Relaxed), REF_NS.load(Ordering::Relaxed));
            let session = since(self.params.tsc0, self.params.start_ns);
            // A wrapped difference (a reference taken after the reading) is no stretch.
            let valid = |s: (u64, u64)| s.0 < (1 << 62) && s.1 < (1 << 62);
            match (valid(own), valid(session)) {
                (true, true) => own.max(session),
                (true, false) => own,
                (false, true) => session,
                (false, false) => (0, 0),
            }
        };
        let deadline = monotonic_ns() + 10_000_000;
        let mut best = stretches();
        while best.0 <= MIN_STRETCH && monotonic_ns() < deadline {
            std::hint::spin_loop();
            best = stretches();
        }
        if best.0 > MIN_STRETCH {
            let q = (u128::from(best.1) << 32) / u128::from(best.0);
            u64::try_from(q).unwrap_or(u64::MAX)
        } else {
            // No counter moving at a measurable rate: take it as 1 GHz.
            1 << 32
        }
    }
}

/// The length of the [`Stable`] segment that starts `start` ticks after the session start.
#[inline(always)]
fn segment_len(start: u64) -> u64 {
    start.clamp(FIRST_SEGMENT, LONGEST_SEGMENT)
}

/// The index of the [`Stable`] segment that holds `ticks`. The segments start at 0, then at
/// each power of two from [`FIRST_SEGMENT`] to [`LONGEST_SEGMENT`] (each as long as the
/// time before it), then every [`LONGEST_SEGMENT`] ticks ([`segment_len`]).
#[inline]
fn segment_index(ticks: u64) -> usize {
    const FIRST: u32 = FIRST_SEGMENT.trailing_zeros();
    const LONGEST: u32 = LONGEST_SEGMENT.trailing_zeros();
    if ticks < FIRST_SEGMENT {
        0
    } else if ticks < LONGEST_SEGMENT {
        (1 + ticks.ilog2() - FIRST) as usize
    } else {
        (1 + LONGEST - FIRST) as usize + ((ticks - LONGEST_SEGMENT) >> LONGEST) as usize
    }
}

/// How far in the future (in ticks, about a second) a reading may be before [`Stable`]
/// takes it as now: far beyond any skew between cores.
const FUTURE_SLACK: u64 = 1 << 32;

/// The shortest stretch, in ticks, a [`Stable`] conversion measures the TSC's rate over.
const MIN_STRETCH: u64 = 1_000_000;

/// [`monotonic_ns`] when the running (or last) session started.
pub(crate) fn start_ns() -> u64 {
    START_NS.load(Ordering::Relaxed)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// A reading converts to the same nanoseconds every time, however many segments were
    /// made since and however the measured rate moved; readings in order convert in order;
    /// and the times agree with a fresh [`Converter`]'s to within a hundredth.
    #[test]
    fn a_reading_converts_the_same_every_time() {
        reference();
        let params = Params { use_tsc: true, tsc0: rdtsc(), start_ns: monotonic_ns() };
        let mut stable = Stable::new(params);
        let mut seen: Vec<(u64, u64)> = Vec::new();
        let t0 = monotonic_ns();
        while monotonic_ns() - t0 < 60_000_000 {
            let r = rdtsc();
            seen.push((r, stable.session_ns(r)));
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        assert!(stable.segments.len() > 5, "{} segments", stable.segments.len());
        for w in seen.windows(2) {
            assert!(w[0].1 <= w[1].1, "in order: {w:?}");
        }
        let fresh = Converter::with(params);
        for &(r, ns) in &seen {
            assert_eq!(stable.session_ns(r), ns, "reading {r} again");
            let other = fresh.session_ns(r) as f64;
            assert!((ns as f64 - other).abs() <= 0.01 * other + 50_000.0, "{ns} vs {other}");
        }
        // A reading from far in the future is taken as now: no segments without end.
        let before = stable.segments.len();
        stable.session_ns(u64::MAX);
        assert!(stable.segments.len() <= before + 1);
    }

    /// A segment's index, worked out, is the one the segments as made say, at every
    /// boundary and between them.
    #[test]
    fn segment_index_is_where_the_segments_start() {
        let mut starts = vec![0u64];
        while *starts.last().unwrap() < 40 * LONGEST_SEGMENT {
            let s = *starts.last().unwrap();
            starts.push(s + segment_len(s));
        }
        let searched = |t: u64| starts.partition_point(|&s| s <= t) - 1;
        for &s in &starts[..starts.len() - 1] {
            for t in [s, s + 1, s + segment_len(s) / 2, s + segment_len(s) - 1] {
                assert_eq!(segment_index(t), searched(t), "{t} ticks");
            }
        }
    }

    /// The fixed-point conversion agrees with the real-valued one to within a nanosecond
    /// over a whole segment, for clocks from 100 MHz to 10 GHz.
    #[test]
    fn fixed_point_ticks_agree_with_the_real_rate() {
        for ghz in [0.1, 1.0, 2.5, 3.1, 10.0] {
            let rate = 1.0 / ghz;
            let scale = (rate * (1u64 << 32) as f64).round() as u64;
            for ticks in [0, 1, 1000, FIRST_SEGMENT, LONGEST_SEGMENT - 1, LONGEST_SEGMENT] {
                let want = ticks as f64 * rate;
                let got = ticks_ns(ticks, scale) as f64;
                assert!((got - want).abs() <= 1.0, "{ghz} GHz, {ticks} ticks: {got} vs {want}");
            }
        }
    }
}
