//! The reentrancy guard: a thread-local flag that marks a thread inside the profiler, and
//! [`Busy`], the RAII guard that sets it. What the sampler does with an allocation that
//! finds its thread busy is [`sampler`](crate::engine::sampler) §4: bytes allocated while
//! busy still advance the countdown but are never reported, and a sample point that falls
//! in an allocation made during the sample path (a signal handler's) is counted as lost.
//!
//! The flag lives in static thread-local storage, not in the thread's lazily mapped block
//! (`crate::engine::thread`): the check runs on every path, before any block exists.

use core::cell::Cell;

crate::sys::tls::thread_block! {
    /// Inside the profiler: allocations are not reported (see [`Busy`]). Static
    /// thread-local storage, beside the countdown: the reentrancy check needs it on every
    /// path, before any block is mapped.
    fn busy_flag() -> Cell<u8> = Cell::new(NOT_BUSY), "memprof_0_1_sampler_busy"
}

/// This thread's busy flag, as a reference.
#[inline(always)]
fn busy<'a>() -> &'a Cell<u8> {
    // SAFETY: `busy_flag()` is this thread's block, valid until the thread exits; the
    // reference is used only on this thread, within the call that made it.
    unsafe { &*busy_flag() }
}

/// This thread's flag: [`NOT_BUSY`], [`SAMPLING`] or at a safe point.
#[inline(always)]
pub(crate) fn state() -> u8 {
    busy().get()
}

/// The thread is not inside the profiler.
pub(crate) const NOT_BUSY: u8 = 0;
/// The thread is at a safe point of the profiler (callbacks, the agent): its allocations are
/// the profiler's own.
const SAFE_POINT: u8 = 1;
/// The thread is in the sample path: an allocation now is a signal handler's (`sampler` §4).
pub(crate) const SAMPLING: u8 = 2;

/// Marks the current thread as inside the profiler for the guard's lifetime.
#[derive(Debug)]
pub struct Busy {
    /// This thread's flag (thread-local storage without a destructor: valid until the
    /// thread exits), kept so that leaving needs no second thread-local lookup.
    flag: *const Cell<u8>,
}

impl Busy {
    /// Enters the profiler at a safe point on this thread; `None` when the thread is inside
    /// already.
    #[inline]
    pub fn enter() -> Option<Busy> {
        Busy::enter_as(SAFE_POINT)
    }

    /// Enters the sample path on this thread; `None` when the thread is inside the profiler
    /// already.
    #[inline]
    pub fn enter_sampling() -> Option<Busy> {
        Busy::enter_as(SAMPLING)
    }

    #[inline(always)]
    fn enter_as(how: u8) -> Option<Busy> {
        let flag = busy() as *const Cell<u8>;
        // SAFETY: `flag` is this thread's own flag (static thread-local storage), alive for
        // the thread's lifetime, and is only used on this thread (Busy is not Send). A
        // signal handler between the read and the write leaves the flag as it found it.
        unsafe {
            if (*flag).get() != NOT_BUSY {
                return None;
            }
            (*flag).set(how);
        }
        Some(Busy { flag })
    }

    /// Runs `f`, a call of the sample path into the C library that may allocate (the stack
    /// bounds' query), with the thread marked as at a safe point: those
    /// allocations are the profiler's own, neither reported nor counted as skipped (`sampler` §4).
    /// (A signal handler's allocation during `f` is then not counted either.)
    #[inline]
    pub(crate) fn own_allocations<R>(f: impl FnOnce() -> R) -> R {
        let flag = busy();
        let was = flag.get();
        if was == SAMPLING {
            flag.set(SAFE_POINT);
        }
        let r = f();
        if was == SAMPLING {
            flag.set(SAMPLING);
        }
        r
    }

    /// True when this thread is inside the profiler.
    #[inline]
    pub fn is_busy() -> bool {
        busy().get() != NOT_BUSY
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // SAFETY: as in `enter`: the guard lives on the thread that made it (not Send), so
        // the thread and its flag are alive.
        unsafe { (*self.flag).set(NOT_BUSY) };
    }
}
