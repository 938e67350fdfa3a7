//! The monotonic clock in nanoseconds: what the sample path's clock (`engine::clock`)
//! falls back to and converts with, and what the readers of `/proc` (`smaps`) pace
//! themselves by. Here, at the bottom, so that every layer can read it.

/// Monotonic clock in nanoseconds (vDSO; no allocation, no lock).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer; CLOCK_MONOTONIC is always supported.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}
