//! The live table's counting filter (§1), which every free asks first, and the mode in
//! which a session names its frees by address and keeps no table (§6): the filter's mask
//! set to 0, so that every free reaches the slow path.

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

pub(super) const FILTER_LEN: usize = 1 << 21;
/// The filter's index of `addr` is `(addr >> FILTER_SHIFT) & FILTER_MASK`.
#[doc(hidden)]
pub const FILTER_SHIFT: u32 = 4;
/// See [`FILTER_SHIFT`].
#[doc(hidden)]
pub const FILTER_MASK: usize = FILTER_LEN - 1;
/// The counting filter in front of the table: a block whose counter is 0 is not in it.
/// Public only for allocators that inline [`remove`](super::remove)'s first test (the preload library's
/// `free`, in assembly): with `i = (addr >> FILTER_SHIFT) & FILTER.mask`, `FILTER.counters[i]
/// == 0` means "not sampled", anything else calls [`remove`](super::remove). The mask is a word of the
/// filter, beside its first counters (one load of a line every free reads), so that a
/// session that names its frees by address (§6) sends every free to the slow path with
/// one counter set and the mask 0, not two mebibytes of counters set in the program.
///
/// The mask starts at 0 too, and is set to [`FILTER_MASK`] before the first block is
/// counted in (a session's start, [`ready`]): an all-zero filter is in `.bss`, where its
/// two mebibytes take no room in the file of the library or program that holds it (a
/// non-zero word would put all of them in `.data`, to be read from disk and compared at
/// every `record`). Until then every free asks counter 0, which is 0: not sampled.
#[doc(hidden)]
pub static FILTER: Filter =
    Filter { mask: AtomicUsize::new(0), counters: [const { AtomicU8::new(0) }; FILTER_LEN] };

/// The filter's layout (see [`FILTER`]): the mask, then the counters.
#[doc(hidden)]
#[repr(C, align(64))]
pub struct Filter {
    /// [`FILTER_MASK`], or 0 while frees are named by address (§6) and before the first
    /// block is counted in.
    pub mask: AtomicUsize,
    /// The counters.
    pub counters: [AtomicU8; FILTER_LEN],
}

impl core::fmt::Debug for Filter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Filter").field("mask", &self.mask).finish_non_exhaustive()
    }
}

/// The offset of [`Filter::counters`] in the filter (for code in assembly).
#[doc(hidden)]
pub const FILTER_COUNTERS_AT: usize = core::mem::offset_of!(Filter, counters);

/// The filter is direct-mapped on the address: malloc's blocks are 16-byte aligned and
/// spread over the low bits already, and skipping the multiply keeps `free` short.
/// The mask read is also cut to [`FILTER_MASK`], which it never exceeds: the index is then
/// known to be in bounds, and `free`'s test has no bounds check (an `and` where the check
/// was a compare and a branch).
#[inline]
pub(super) fn filter_index(addr: usize) -> usize {
    (addr >> FILTER_SHIFT) & FILTER.mask.load(Ordering::Relaxed) & FILTER_MASK
}

/// Set once any counter has saturated (then `clear` must sweep the whole filter).
pub(super) static SATURATED: AtomicBool = AtomicBool::new(false);

/// The session names its frees by address and keeps no table (§6).
pub(super) static BY_ADDRESS: AtomicBool = AtomicBool::new(false);

/// Whether a session of mean interval `interval` whose consumer is in another process
/// (`external`) names its frees by address and keeps no table (§6): an exact one. The
/// collector asks the same question of the ring's settings.
pub(crate) fn names_by_address(interval: f64, external: bool) -> bool {
    external && interval <= 1.0
}

/// Whether the session names its frees by address and keeps no table (§6).
#[inline(always)]
pub(crate) fn by_address() -> bool {
    BY_ADDRESS.load(Ordering::Relaxed)
}

/// Starts (`true`) or ends naming frees by address (§6). Started before the session
/// samples, with the table empty: the filter's mask is 0 and its counter 0 saturated, so
/// every free reaches the slow path; ended before `clear`, which then sweeps the counter.
pub(crate) fn name_by_address(on: bool) {
    BY_ADDRESS.store(on, Ordering::Relaxed);
    if on {
        // Every free to counter 0, which is set: the slow path.
        FILTER.counters[0].store(u8::MAX, Ordering::Relaxed);
        SATURATED.store(true, Ordering::Relaxed);
        FILTER.mask.store(0, Ordering::Release);
    } else {
        FILTER.mask.store(FILTER_MASK, Ordering::Release);
    }
}

/// Sets the mask before a block is counted in outside a session (a scope's mark,
/// `engine::measure` §2), where no session start set it: a block counted in at counter 0
/// under the initial mask 0 would be looked for at another counter once the mask is set.
/// Stores what `name_by_address(false)` stores, so a race with it is harmless; a session
/// that names its frees by address keeps its mask 0.
pub(super) fn ready() {
    if FILTER.mask.load(Ordering::Relaxed) == 0 && !by_address() {
        FILTER.mask.store(FILTER_MASK, Ordering::Release);
    }
}

/// Counts a block in at counter `i`; the caller holds the lock of `i`'s shard, which
/// serialises every update of the counter (§2).
#[inline(always)]
pub(super) fn filter_inc(i: usize) {
    let c = &FILTER.counters[i];
    let v = c.load(Ordering::Relaxed);
    if v < u8::MAX {
        c.store(v + 1, Ordering::Relaxed);
        if v + 1 == u8::MAX {
            SATURATED.store(true, Ordering::Relaxed);
        }
    }
}

/// Counts a block out at counter `i` (a saturated counter stays); the caller holds the lock
/// of `i`'s shard.
#[inline(always)]
pub(super) fn filter_dec(i: usize) {
    let c = &FILTER.counters[i];
    let v = c.load(Ordering::Relaxed);
    if v > 0 && v < u8::MAX {
        c.store(v - 1, Ordering::Relaxed);
    }
}
