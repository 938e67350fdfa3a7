//! Whether the kernel may refuse the profiler's own system calls on the program's threads:
//! a seccomp filter is on (or a call came back refused as one does).
//!
//! # 1. Why
//! A sandboxed program installs a filter that allows the system calls it makes itself and
//! kills the process (`SECCOMP_RET_KILL_PROCESS`, `SIGSYS`) or fails the call
//! (`SECCOMP_RET_ERRNO`) for any other. The profiler's code runs on the program's threads,
//! inside its `malloc`: a `futex` sleep while the queue is full, a `kill` and an `open` of
//! `/proc` to look the collector up, a thread's alternate signal stack looked up and, for a
//! sample taken in a handler running on it, `rt_sigprocmask` around the unwinder's own
//! stack (`engine::thread` §3), `getpid` at exit. Once a filter is on, those are not made: waits spin
//! (`core::hint::spin_loop`) instead of sleeping, the collector's liveness is judged by its
//! heartbeat alone (with a long bound: `engine::consumer` §2), and the rest is done without
//! them or skipped (each place says how). What stays is what the sample path cannot do
//! without and what the program's own allocator needs too: `mmap` and `munmap` for the
//! profiler's memory, and the clock (`clock_gettime`, which the vDSO answers without a
//! system call on every clock source that allows it; `rdtsc` where the session uses it).
//!
//! # 2. How a filter is seen
//! The preload library interposes the two ways a C program installs one: `prctl
//! (PR_SET_SECCOMP, ...)` and `syscall(SYS_seccomp, ...)` (libseccomp's way), and marks the
//! process filtered *before* the call (with `SECCOMP_FILTER_FLAG_TSYNC` the filter lands
//! on every thread at once, one of which may be about to sleep), unmarking it if the call
//! failed and the process was not marked before. The mark is process-wide although a
//! filter is per-thread (others may inherit it): a thread that spins where it could have
//! slept costs CPU, one that makes a refused call costs the program. A `futex` that fails
//! with an error it never gives on its own (`EPERM`, `ENOSYS`, ...: a filter's
//! `SECCOMP_RET_ERRNO`) marks it too ([`after_futex_wait`]).
//!
//! A filter installed by a raw `syscall` instruction (Go's runtime, Chromium's sandbox, a
//! statically linked helper) or inherited across `exec` is not seen: the profiler then
//! makes its calls as usual, and a filter that refuses them kills the program or fails
//! them (the waits then end as for a collector that cannot be looked up).

use core::sync::atomic::{AtomicBool, Ordering};

/// Set once a filter may refuse the profiler's system calls (§2). Never cleared but by a
/// failed installation that set it.
static FILTERED: AtomicBool = AtomicBool::new(false);

/// True once a seccomp filter may refuse the profiler's own system calls (§1): make none
/// that can be avoided. One relaxed load.
#[inline(always)]
pub(crate) fn filtered() -> bool {
    FILTERED.load(Ordering::Relaxed)
}

/// A filter is being installed (§2): the profiler makes no more avoidable system calls.
/// Returns whether it was marked before, for [`install_failed`].
pub fn installing() -> bool {
    FILTERED.swap(true, Ordering::SeqCst)
}

/// The installation `installing` announced failed: the mark goes back to `before`.
pub fn install_failed(before: bool) {
    if !before {
        FILTERED.store(false, Ordering::SeqCst);
    }
}

/// Whether a `futex` wait that returned errno `err` (0: it returned 0) was refused by a
/// filter (§2): an error the call never gives on its own (anything but `EAGAIN`,
/// `ETIMEDOUT`, `EINTR`), or `EAGAIN` ("the word has moved") on a word that only ever
/// counts up and has not (`unchanged`): a filter's `SECCOMP_RET_ERRNO` may pick any
/// number, and a sleep that returns at once for ever would make every wait a hot loop.
pub(crate) fn futex_refused(err: i32, unchanged: bool) -> bool {
    match err {
        0 | libc::ETIMEDOUT | libc::EINTR => false,
        libc::EAGAIN => unchanged,
        _ => true,
    }
}

/// After a `futex` wait of the profiler's on a word that only counts up: marks the process
/// filtered when the wait was refused ([`futex_refused`]; `unchanged`: the word still holds
/// the value waited on), so that no more avoidable system call is made (§2).
pub(crate) fn after_futex_wait(err: i32, unchanged: bool) {
    if futex_refused(err, unchanged) {
        FILTERED.store(true, Ordering::SeqCst);
    }
}

/// Spins for about `rounds` pause instructions: a wait that may make no system call (§1).
/// `spin_loop` tells the CPU (`pause`, `yield`), which lets a sibling hyperthread run and
/// saves power; it never enters the kernel.
#[inline]
pub(crate) fn spin(rounds: u32) {
    for _ in 0..rounds {
        core::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The futex's own results are not a filter's; any other error is, and so is "the word
    /// has moved" on a word that has not.
    #[test]
    fn a_refused_futex_is_told_from_its_own_results() {
        for own in [0, libc::ETIMEDOUT, libc::EINTR] {
            assert!(!futex_refused(own, true) && !futex_refused(own, false), "{own}");
        }
        assert!(!futex_refused(libc::EAGAIN, false), "the word moved");
        assert!(futex_refused(libc::EAGAIN, true), "it did not: a filter's EAGAIN");
        for filter in [libc::EPERM, libc::ENOSYS, libc::EACCES] {
            assert!(futex_refused(filter, false), "{filter}");
        }
    }
}
