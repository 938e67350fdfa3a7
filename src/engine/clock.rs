//! The sample path's clock: the TSC where the kernel itself uses it as the clocksource
//! (constant-rate, synchronised across cores), else `CLOCK_MONOTONIC`. Reading the TSC
//! costs ~12 ns here against ~31 ns for `clock_gettime`, and a sample reads the clock twice
//! (its allocation and its free). Ticks become session nanoseconds at the safe point, by
//! interpolating between the session start and a fresh (TSC, monotonic) pair.

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
/// [`monotonic_ns`] when the running (or last) session started.
pub(crate) fn start_ns() -> u64 {
    START_NS.load(Ordering::Relaxed)
}

/// Monotonic clock in nanoseconds (vDSO; no allocation, no lock).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer; CLOCK_MONOTONIC is always supported.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}
