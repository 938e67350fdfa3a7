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
//! A reallocation is an allocation of the new size as far as sampling goes (heaptrack and
//! jemalloc count it the same way), decided before the real `realloc` runs
//! ([`before_realloc`]). If the new size is sampled, the old sample (if any) dies and a new
//! one is born: the old block leaves the live table before the real `realloc` can free it,
//! and goes back if `realloc` fails. Otherwise a sampled old block *moves*, keeping its
//! sample and token. That is the common case of a loop that resizes one long-lived block,
//! and it touches the live table only when the block really moved: a block resized in place
//! keeps its address, so its entry stays right, and a block whose filter counter is 0 was
//! not sampled at all. The tracker's `realloc` callback hears of a move at most once per
//! block between two samples of its thread (moves are coalesced: see [`hot`] §2).

use crate::engine::hot;
use crate::engine::live::{self, Entry};
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
            hot::record_alloc_at(addr as usize, size, hit, Some((sp, bp)));
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
            hot::record_alloc_inline(addr as usize, size, hit, Some((sp, bp)));
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
        hot::record_alloc(addr, size, hit);
    }
}

/// Reports that the block at `addr` is about to be freed. Call it *before* the memory is
/// returned, so a concurrent reuse of the address cannot be confused with this block.
#[inline(always)]
pub fn on_dealloc(addr: *mut u8) {
    if let Some(entry) = live::remove_freed(addr as usize) {
        hot::record_free(entry);
    }
}

/// [`on_dealloc`] for an allocator whose own fast path found the block's filter counter
/// set (the preload library's `free`): the live-table lookup and the event are inlined.
#[inline(always)]
pub fn on_dealloc_counted(addr: *mut u8) {
    if let Some(entry) = live::remove_counted(addr as usize) {
        hot::record_free_inline(entry);
    }
}

/// What [`before_realloc`] decided, for [`on_realloc`] once the real reallocation returned.
#[derive(Clone, Copy, Debug)]
pub struct ReallocPlan {
    /// The new size is sampled: the old block's sample (if any) dies, a new one is born.
    hit: Option<Hit>,
    /// The old block's sample, taken out of the live table (only when `hit`).
    old: Option<Entry>,
}

/// The first half of a reallocation to `new_size` bytes: decides whether the new size is
/// sampled, and if so takes the old block out of the live table (see §4). Pass the result
/// to [`on_realloc`] once the real reallocation has returned.
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

/// [`on_realloc`] after a reallocation whose new size holds no sample point (the preload
/// library's `realloc` when [`sampler::skip_in`] said so): a sampled old block keeps its
/// sample (§4).
#[inline(always)]
pub fn on_realloc_unsampled(old: *mut u8, new: *mut u8, new_size: usize) {
    if !new.is_null() && !old.is_null() && live::may_hold(old as usize) {
        kept(old, new, new_size);
    }
}

/// A block that may be sampled was reallocated without a new sample.
#[inline(always)]
fn kept(old: *mut u8, new: *mut u8, new_size: usize) {
    if new == old {
        if !hot::move_queued_here(old as usize) {
            hot::moved_in_place(old as usize, new_size);
        }
    } else {
        hot::moved(old as usize, new as usize, new_size);
    }
}

#[inline(always)]
fn plan(old: *mut u8, hit: Option<Hit>) -> ReallocPlan {
    let old = match hit {
        // A hit of a measuring thread's scope alone (`k == 0`) is no sample: the old
        // block keeps its own, as without a hit.
        Some(h) if h.k > 0 && !old.is_null() => live::remove_freed(old as usize),
        _ => None,
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
        if let Some(e) = plan.old {
            hot::restore(e, old as usize);
        }
        return;
    }
    match plan.hit {
        // A measuring thread's reallocation that the session did not sample: the scope
        // counts the free of the old block and the new one; a sampled old block keeps its
        // sample (`engine::measure`).
        Some(hit) if hit.k == 0 => {
            if !old.is_null() {
                crate::engine::measure::on_free_if_measuring(old as usize);
            }
            crate::engine::measure::on_alloc(new as usize, new_size);
            if !old.is_null() && live::may_hold(old as usize) {
                kept(old, new, new_size);
            }
        }
        Some(hit) => {
            if let Some(e) = plan.old {
                hot::record_free(e);
            }
            if crate::engine::measure::current().is_some() {
                crate::engine::measure::on_alloc(new as usize, new_size);
            }
            match entry {
                Some(_) => hot::record_alloc_at(new as usize, new_size, hit, entry),
                None => hot::record_alloc(new as usize, new_size, hit),
            }
        }
        // Not sampled: a sampled old block keeps its sample. Only a block whose filter
        // counter is set can be one (§4, and the live table's §1).
        None if !old.is_null() && live::may_hold(old as usize) => kept(old, new, new_size),
        None => {}
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
