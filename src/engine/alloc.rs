//! The allocation hooks and `Sampled<A>`, the sampling `#[global_allocator]`.
//!
//! # 1. Hooks
//! [`on_alloc`], [`on_dealloc`] and [`on_realloc`] are the three places where an allocator
//! tells the profiler what happened; `Sampled<A>` calls them, the preload library calls
//! them from `malloc` and friends, the managed heap calls them from its allocator and sweep.
//!
//! # 2. Costs
//! An unsampled allocation costs the sampler's countdown (a thread-local subtract and a
//! branch, plus an epoch compare). A free costs one load from the live-table filter. Only
//! sampled blocks take the cold path: call-stack capture, a queue push and a live-table
//! insertion, all without allocating through the profiled allocator, without user-visible
//! locks and with errno preserved.
//!
//! # 3. Reentrancy
//! The sampler's [`Busy`](crate::engine::busy::Busy) flag is set on the cold path and while
//! callbacks run; allocations made then still advance the countdown but are never
//! reported, so the profiler never profiles itself and never recurses.
//!
//! # 4. Realloc
//! A reallocation ends the old block and allocates the new size (the sampler's §5 says why
//! this is the only unbiased rule). For sampling it is an allocation of `new_size` bytes
//! (heaptrack and jemalloc count it the same way, and so does the exact mode), decided
//! before the real `realloc` runs ([`before_realloc`]); if the new size holds points, it is
//! a new sample at the new address with the realloc's call stack. Whatever the new size
//! draws, a sampled old block dies at the realloc: its death is queued once the real
//! `realloc` returned, with that time. It leaves the live table *before* the real
//! `realloc` runs, which may hand its address to another thread at once (that thread may
//! sample it and insert it into the table: `live` §3), and goes back if `realloc` fails.
//! The removal is [`live::remove_freed`], one load of the block's filter counter when it is
//! 0, so an ordinary reallocation costs the countdown and that load; only a block whose
//! counter is set takes the table's lock. A measuring thread (`engine::measure`) hears of
//! the same two things: the removal counts its scope's old block free (the block's counter
//! is raised: `measure` §2), and a hit, `k == 0` when the session did not sample the new
//! size, hands it the new block. (A `realloc` that fails puts a sampled block back in the
//! table, but leaves a measured one counted free: the scope's figures say it ended there.)

use crate::engine::live::{self, Freed};
use crate::engine::sample_path;
use crate::engine::sampler::{self, Countdown, Hit};
use core::alloc::{GlobalAlloc, Layout};

/// Reports an allocation of `size` bytes at `addr` (null is ignored).
#[inline(always)]
pub fn on_alloc(addr: *mut u8, size: usize) {
    record(addr, size, sampler::sample(size));
}

/// [`on_alloc`] for an allocator that keeps the thread's countdown itself (see
/// [`Countdown`]).
#[inline(always)]
pub fn on_alloc_in(cd: &Countdown, addr: *mut u8, size: usize) {
    record(addr, size, sampler::sample_in(cd, size));
}

/// [`on_alloc_in`] for an allocator entry point that knows the program's registers at its
/// entry: `sp` points at the return address into the program and `bp` is the program's
/// frame-pointer register. The call stack then starts at the program's frame (the preload
/// library's `malloc`; see `callstack::capture_at_entry`).
#[inline(always)]
pub fn on_alloc_at(cd: &Countdown, addr: *mut u8, size: usize, sp: usize, bp: usize) {
    if let Some(hit) = sampler::sample_in(cd, size) {
        if !addr.is_null() {
            sample_path::record_alloc_at(addr as usize, size, hit, Some((sp, bp)));
        }
    }
}

/// [`on_alloc_at`] for an allocator whose own fast path found that the countdown ran out
/// (the preload library's `malloc`): the sampler's slow path (see
/// `sampler::sample_slow`) and the recording are inlined.
#[inline(always)]
pub fn on_alloc_slow_at(cd: &Countdown, addr: *mut u8, size: usize, sp: usize, bp: usize) {
    if let Some(hit) = sampler::sample_slow(cd, size) {
        if !addr.is_null() {
            sample_path::record_alloc_inline(addr as usize, size, hit, Some((sp, bp)));
        }
    }
}

#[inline(always)]
fn record(addr: *mut u8, size: usize, hit: Option<Hit>) {
    if let Some(hit) = hit {
        if !addr.is_null() {
            record_hit(addr as usize, size, hit);
        }
    }
}

/// A hit: a sample (`k > 0`), and an allocation a measuring thread counts
/// (`engine::measure`), or both.
#[cold]
#[inline(never)]
fn record_hit(addr: usize, size: usize, hit: Hit) {
    if crate::engine::measure::current().is_some() {
        crate::engine::measure::on_alloc(addr, size);
    }
    if hit.k > 0 {
        sample_path::record_alloc(addr, size, hit);
    }
}

/// Reports that the block at `addr` is about to be freed. Call it *before* the memory is
/// returned, so a concurrent reuse of the address cannot be confused with this block.
#[inline(always)]
pub fn on_dealloc(addr: *mut u8) {
    if let Some(freed) = live::remove_freed(addr as usize) {
        sample_path::record_free(addr as usize, freed);
    }
}

/// [`on_dealloc`] for an allocator whose own fast path found the block's filter counter
/// set (the preload library's `free`): the live-table lookup and the event are inlined.
#[inline(always)]
pub fn on_dealloc_counted(addr: *mut u8) {
    if let Some(freed) = live::remove_counted(addr as usize) {
        sample_path::record_free_inline(addr as usize, freed);
    }
}

/// What [`before_realloc`] decided, for [`on_realloc`] once the real reallocation returned.
#[derive(Clone, Copy, Debug)]
pub struct ReallocPlan {
    /// The sampler's hit for the new size, if any (a sample when `k > 0`; `k == 0` is a
    /// measuring thread's allocation that the session did not sample, `engine::measure`).
    hit: Option<Hit>,
    /// The old block's sample, taken out of the live table (or its free's reading, in a
    /// session that names frees by address): it dies at the realloc (§4).
    old: Option<Freed>,
}

/// The first half of a reallocation to `new_size` bytes: charges the countdown with
/// `new_size` bytes, and takes a sampled old block out of the live table (§4). Pass the
/// result to [`on_realloc`] once the real reallocation has returned.
#[inline(always)]
pub fn before_realloc(old: *mut u8, new_size: usize) -> ReallocPlan {
    plan(old, sampler::sample(new_size))
}

/// [`before_realloc`] for an allocator that keeps the thread's countdown itself (see
/// [`Countdown`]).
#[inline(always)]
pub fn before_realloc_in(cd: &Countdown, old: *mut u8, new_size: usize) -> ReallocPlan {
    plan(old, sampler::sample_in(cd, new_size))
}

/// [`before_realloc_in`] for an allocator whose own fast path found that the countdown ran
/// out ([`sampler::skip_in`] said false; the preload library's `realloc`): the sampler's
/// slow path decides.
#[inline(always)]
pub fn before_realloc_slow_in(cd: &Countdown, old: *mut u8, new_size: usize) -> ReallocPlan {
    plan(old, sampler::sample_slow(cd, new_size))
}

/// [`before_realloc_in`] for an allocator whose own fast path found, and charged, a new
/// size that holds no sample point ([`sampler::skip_in`] said true; the preload library's
/// `realloc`): only a sampled old block is taken out of the table, at the cost of one
/// filter load when there is none (§4).
#[inline(always)]
pub fn before_realloc_unsampled(old: *mut u8) -> ReallocPlan {
    plan(old, None)
}

#[inline(always)]
fn plan(old: *mut u8, hit: Option<Hit>) -> ReallocPlan {
    // The old block ends here whatever the new size drew (§4). Out of the table before
    // the real realloc can give its address to another thread (`live` §3); the removal
    // also counts its free for a measuring thread (`engine::measure` §2).
    let old = match old.is_null() {
        true => None,
        false => live::remove_freed(old as usize),
    };
    ReallocPlan { hit, old }
}

/// The second half of a reallocation: `new` is the result (null if it failed, in which case
/// the old block stays live), `new_size` the requested size.
#[inline(always)]
pub fn on_realloc(old: *mut u8, plan: ReallocPlan, new: *mut u8, new_size: usize) {
    finish_realloc(old, plan, new, new_size, None);
}

/// [`on_realloc`] for an allocator entry point that knows the program's registers at its
/// entry (see [`on_alloc_at`]): a new sample's call stack starts at the program's frame.
#[inline(always)]
pub fn on_realloc_at(
    old: *mut u8,
    plan: ReallocPlan,
    new: *mut u8,
    new_size: usize,
    (sp, bp): (usize, usize),
) {
    finish_realloc(old, plan, new, new_size, Some((sp, bp)));
}

#[inline(always)]
fn finish_realloc(
    old: *mut u8,
    plan: ReallocPlan,
    new: *mut u8,
    new_size: usize,
    entry: Option<(usize, usize)>,
) {
    if new.is_null() {
        // A block named by its address had no event yet: it lives on as it was.
        if let Some(Freed::Sampled { entry, .. }) = plan.old {
            sample_path::restore(entry, old as usize);
        }
        return;
    }
    // The old block's sample dies now, before the new block's can be born (its event
    // then follows the death in the queue, also when the address is the same). One named
    // by its address has the reading taken before the real `realloc` (`live` §6).
    if let Some(freed) = plan.old {
        sample_path::record_free(old as usize, freed);
    }
    if let Some(hit) = plan.hit {
        realloc_hit(new as usize, new_size, hit, entry);
    }
}

/// The new block of a reallocation is a hit: a sample (`k > 0`), an allocation a measuring
/// thread counts, or both (see [`record_hit`]).
#[cold]
#[inline(never)]
fn realloc_hit(addr: usize, size: usize, hit: Hit, entry: Option<(usize, usize)>) {
    if crate::engine::measure::current().is_some() {
        crate::engine::measure::on_alloc(addr, size);
    }
    if hit.k > 0 {
        match entry {
            Some(_) => sample_path::record_alloc_at(addr, size, hit, entry),
            None => sample_path::record_alloc(addr, size, hit),
        }
    }
}

/// A `GlobalAlloc` that samples the allocations of `A`:
///
/// ```no_run
/// #[global_allocator]
/// static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);
/// ```
///
/// With no session running it costs a few instructions per allocation.
pub struct Sampled<A> {
    inner: A,
}

impl<A> Sampled<A> {
    /// Wraps `inner`.
    pub const fn new(inner: A) -> Self {
        Sampled { inner }
    }

    /// The wrapped allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }
}

impl<A> core::fmt::Debug for Sampled<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sampled").finish_non_exhaustive()
    }
}

// SAFETY: every method forwards to `A` with the caller's arguments unchanged and returns
// A's result; the hooks only observe addresses and sizes.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Sampled<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.inner.alloc(layout) };
        on_alloc(p, layout.size());
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.inner.alloc_zeroed(layout) };
        on_alloc(p, layout.size());
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        on_dealloc(ptr);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let plan = before_realloc(ptr, new_size);
        // SAFETY: forwarded with the caller's guarantees.
        let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
        on_realloc(ptr, plan, new, new_size);
        new
    }
}
