//! Poisson sampling over allocated bytes.
//!
//! # 1. The process
//! Every allocated byte is a *sample point* independently with probability `p = 1/R`,
//! where `R` is the mean interval in bytes. An allocation of `n` bytes therefore holds
//! `k ~ Binomial(n, p)` points and is recorded when `k ≥ 1`; it stands for `k × R` bytes,
//! an unbiased estimate of `n` (E\[k\] = n/R). `R = 1` makes every byte a point: `k = n` and
//! the estimates are the exact totals (the exact mode).
//!
//! # 2. The countdown
//! Rather than draw per byte, each thread keeps the number of bytes until its next sample
//! point. The gap between points of a Bernoulli process is geometric, `P(G = g) =
//! (1-p)^(g-1) p`, drawn as `1 + ⌊E / -ln(1-p)⌋` with `E ~ Exp(1)` (rand_distr's ziggurat
//! `Exp1`; exact, and much cheaper than a geometric sampler for tiny `p`). The fast path is
//! a thread-local subtract and a branch: `n < countdown` means no point falls inside the
//! allocation. On the slow path the first point is at byte `countdown`; further points are
//! counted by drawing more gaps (memorylessness makes the leftover gap the next countdown),
//! or, when many points are expected inside one large allocation, by one binomial draw for
//! the rest and a fresh gap after it.
//!
//! # 3. Sessions and threads
//! Session parameters live in atomics. Starting or stopping a session bumps a global epoch;
//! a thread whose countdown was drawn in another epoch takes the slow path once and redraws
//! it, so a session sees every thread from its first byte. With no session the countdown is
//! `u64::MAX` and the slow path is never taken. An allocator that keeps the countdown itself
//! ([`sample_in`]) may skip the epoch check when all its sessions sample at one rate (the
//! gap is memoryless, so a leftover countdown is as good as a new one), provided it zeroes
//! a thread's parked countdown when a session starts: the preload library does. Each
//! thread gets a small number in the order it first allocates in a session, and its
//! generator is seeded from the session seed and that number, so a fixed seed gives a
//! fixed sequence per thread.
//!
//! # 4. Reentrancy
//! [`Busy`](crate::engine::busy::Busy) marks a thread that is inside the profiler (the
//! sample path, or a callback). Bytes allocated while busy still advance the countdown (so
//! user bytes stay a Bernoulli process) but are never reported. The profiler's own
//! allocations at safe points ([`Busy::enter`](crate::engine::busy::Busy::enter)) are not
//! the program's, and are simply not reported. An allocation that finds its thread in the
//! sample path ([`Busy::enter_sampling`](crate::engine::busy::Busy::enter_sampling)) or in
//! the middle of a draw can only be a signal handler's that interrupted it: a sample point
//! that falls in it is skipped and counted as a lost event
//! ([`lost::skipped`](crate::engine::lost::skipped)), never waited for.
//!
//! # 5. Reallocation: the old block ends, the new size is a new allocation
//! A `realloc` to `n` bytes is an allocation of `n` bytes: it charges the countdown with
//! `n` and, when points fall in it, is a new sample at the new address with the realloc's
//! call stack. Whether or not it is sampled, the old block ends there: a sampled old block
//! dies at the realloc (its lifetime ends, its bytes leave the live set), exactly as if the
//! program had freed it and allocated afresh. tcmalloc does the same for a `realloc` that
//! changes the block (a new allocation, sampled as any, and a free), Go's runtime has no
//! other way to grow a slice, and the exact mode (`R = 1`, every realloc a new sample)
//! always did.
//!
//! The rule is what makes every estimate unbiased. A sample's weight `k × R` is unbiased
//! for the bytes of the allocation its `k` was drawn from, and only for those. A block
//! that kept its sample through unsampled reallocations (a *move*, the rule before this
//! one) carried a weight drawn at one size into its later sizes: a buffer grown in steps
//! held a sample at the end when any size it passed through drew a point, so with a
//! probability near the sum of those sizes over `R` rather than its final size over `R`.
//! Grown from 256 B to 8 KiB in 256-byte steps, such buffers were counted about sixteen
//! times over in the live bytes; by doubling, about twice. Under the rule here each
//! block's weight is drawn from its own bytes alone: its live, peak and lifetime
//! contributions are those of any allocation of its size, and the bytes allocated count
//! each realloc as an allocation of its new size, as heaptrack and the exact mode count
//! them. What it costs: a sampled block that is reallocated queues its death (it queued
//! a move before) and leaves the live table before the real `realloc` runs; a block whose
//! filter counter is 0 pays one load for that (`alloc` §4).

use crate::sys::padded::Padded;
use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use rand::rngs::SmallRng;
#[cfg(test)]
use rand::SeedableRng;

pub(crate) mod cross_fit;
pub(crate) mod per_thread;
pub(crate) mod rate;
use per_thread::ThreadState;
pub(crate) use rate::{points_in, Rate};

/// A sample hit: the allocation holds `k` sample points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Number of sample points inside the allocation (≥ 1).
    pub k: u64,
    /// The thread's number within the session (1-based).
    pub thread: u32,
    /// The session epoch the hit belongs to.
    pub epoch: u64,
    /// The sample's id, unique within the session (see [`ID_BLOCK`]). A hit with `k == 0`
    /// is no sample: the allocation of a measuring thread that the session did not sample
    /// (`engine::measure`).
    pub id: u64,
}

/// Sample ids are handed to each thread in blocks of this many from a session-wide
/// counter, so a sample costs no atomic read-modify-write (and threads sampling at once do
/// not fight over one cache line). Ids are unique within a session; they follow time within
/// a thread, not across threads.
pub const ID_BLOCK: u64 = 1024;
/// The next block of ids (padded: every thread's refill writes it).
static ID_BLOCKS: Padded<AtomicU64> = Padded::new(AtomicU64::new(1));

/// The session epoch (§3). Public only for allocators that inline the fast path themselves
/// (the preload library's, in assembly): see [`Countdown`].
#[doc(hidden)]
pub static EPOCH: Padded<AtomicU64> = Padded::new(AtomicU64::new(1));
static ACTIVE: AtomicBool = AtomicBool::new(false);
static INTERVAL_BITS: AtomicU64 = AtomicU64::new(0);
static SEED: AtomicU64 = AtomicU64::new(0);
static THREADS: AtomicU32 = AtomicU32::new(0);

/// A thread's countdown: the bytes until its next sample point (the point is the
/// `countdown`-th byte from here) and the epoch it was drawn in.
///
/// Every thread has one in a thread-local of the sampler's, used by [`sample`]. An allocator
/// may keep it elsewhere, in thread-local storage it reaches faster, and sample through
/// [`sample_in`]: the preload library keeps it in initial-exec TLS, because a shared
/// library's Rust thread-locals cost a `__tls_get_addr` call. The fast path is then, in any
/// language: `size < countdown && epoch == EPOCH` → `countdown -= size`, not sampled;
/// otherwise [`sample_in`]. The layout is fixed (`repr(C)`: the countdown, then the epoch)
/// for code outside Rust. A zeroed `Countdown` is valid: its first allocation takes the
/// slow path and draws. So is a countdown of 0 whatever its epoch: writing 0 makes the
/// thread draw a fresh gap at its next allocation (a drawn countdown is never 0).
#[repr(C)]
#[derive(Debug, Default)]
pub struct Countdown {
    /// Bytes until the next sample point.
    pub countdown: Cell<u64>,
    /// The epoch the countdown was drawn in.
    pub epoch: Cell<u64>,
}

impl Countdown {
    /// A zeroed countdown (takes the slow path at its first allocation).
    pub const fn new() -> Self {
        Countdown { countdown: Cell::new(0), epoch: Cell::new(0) }
    }
}

thread_local! {
    /// The countdown of allocations sampled through [`sample`] (the in-process allocator's
    /// fast path). A `thread_local!` of its own rather than a field of the block below: in
    /// an executable, the linker turns it into one `fs:`-relative access, one instruction
    /// fewer than a pointer to the block.
    static COUNTDOWN: Countdown = const { Countdown::new() };
}

/// The slow path of a thread whose countdown an open scope holds (`engine::measure` §1).
pub(crate) type HeldSlow = fn(&Countdown, u64) -> Option<Hit>;

thread_local! {
    /// The calling thread's [`HeldSlow`]: set while a scope is open, read on the slow path
    /// only. A hook, not a call: the scope is built on the sampler (it draws with it), so
    /// the sampler may not name it (imports run downward).
    static HELD: Cell<Option<HeldSlow>> = const { Cell::new(None) };
}

/// Sets the calling thread's [`HeldSlow`] (`None` clears it): an open scope's.
pub(crate) fn hold(hook: Option<HeldSlow>) {
    HELD.with(|h| h.set(hook));
}

/// Starts sampling with mean interval `interval` bytes. Returns the new epoch.
pub(crate) fn begin(interval: f64, seed: u64) -> u64 {
    INTERVAL_BITS.store(interval.to_bits(), Ordering::Relaxed);
    SEED.store(seed, Ordering::Relaxed);
    THREADS.store(0, Ordering::Relaxed);
    ID_BLOCKS.store(1, Ordering::Relaxed);
    crate::engine::thread::prepare();
    ACTIVE.store(true, Ordering::Relaxed);
    EPOCH.fetch_add(1, Ordering::AcqRel) + 1
}

/// Stops sampling: every thread's next allocation sees the new epoch and stops counting.
pub(crate) fn end() {
    ACTIVE.store(false, Ordering::Relaxed);
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// The sampler's decision for an allocation of `size` bytes: `None` on the fast path.
///
/// Never allocates, never blocks, never panics.
#[inline(always)]
pub fn sample(size: usize) -> Option<Hit> {
    COUNTDOWN.with(|cd| sample_in(cd, size))
}

/// [`sample`] with the thread's countdown kept by the caller (see [`Countdown`]). `cd` must
/// be the calling thread's own: one countdown per thread and allocator path, never shared.
///
/// Never allocates, never blocks, never panics.
#[inline(always)]
pub fn sample_in(cd: &Countdown, size: usize) -> Option<Hit> {
    let size = size as u64;
    let c = cd.countdown.get();
    if size < c && cd.epoch.get() == EPOCH.load(Ordering::Relaxed) {
        cd.countdown.set(c - size);
        None
    } else {
        slow(cd, size)
    }
}

/// [`sample_in`]'s fast path alone: true, with the countdown charged, when no sample point
/// falls in an allocation of `size` bytes and the countdown is this session's; false when
/// [`sample_slow`] must decide (nothing was changed).
///
/// Never allocates, never blocks, never panics.
#[doc(hidden)]
#[inline(always)]
pub fn skip_in(cd: &Countdown, size: usize) -> bool {
    let size = size as u64;
    let c = cd.countdown.get();
    if size < c && cd.epoch.get() == EPOCH.load(Ordering::Relaxed) {
        cd.countdown.set(c - size);
        true
    } else {
        false
    }
}

#[cold]
#[inline(never)]
fn slow(cd: &Countdown, size: u64) -> Option<Hit> {
    // A thread that measures (`engine::measure` §1) keeps a countdown of 0 in the
    // thread-local one, which sends every allocation here.
    if let Some(held) = HELD.with(Cell::get) {
        if COUNTDOWN.with(|c| core::ptr::eq(c, cd)) {
            return held(cd, size);
        }
    }
    sample_slow(cd, size as usize)
}

/// True while a session samples.
pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Runs `f` with the calling thread's own countdown (the one [`sample`] uses).
pub(crate) fn with_countdown<R>(f: impl FnOnce(&Countdown) -> R) -> R {
    COUNTDOWN.with(f)
}

/// [`sample_in`]'s slow path, inlined: for an allocator whose own fast path already found
/// that the countdown ran out (or may belong to another session), such as the preload
/// library's `malloc`. Gives the same answer as [`sample_in`] for any countdown.
///
/// Never allocates, never blocks, never panics.
#[doc(hidden)]
#[inline(always)]
pub fn sample_slow(cd: &Countdown, size: usize) -> Option<Hit> {
    let size = size as u64;
    let epoch = EPOCH.load(Ordering::Acquire);
    // A countdown of 0 was never drawn: every drawn countdown is at least 1 (the point is
    // its `countdown`-th byte), so 0 is what a new thread starts with and what an allocator
    // that keeps the countdown itself writes to make the thread draw again (the preload
    // library, when a session starts). It gets a fresh gap like a countdown of another
    // epoch. Taking it as "the point is here" would sample the thread's next allocation
    // whatever its size: a first-sample bias.
    let fresh = cd.epoch.get() != epoch || cd.countdown.get() == 0;
    if fresh {
        cd.epoch.set(epoch);
        if !ACTIVE.load(Ordering::Relaxed) {
            cd.countdown.set(u64::MAX);
            return None;
        }
    }
    let Some(blocks) = crate::engine::thread::blocks() else {
        // No memory for the thread's state: it stops sampling in this session.
        cd.countdown.set(u64::MAX);
        return None;
    };
    let s = &blocks.sampler;
    if s.epoch.get() != epoch {
        // The thread's first slow path in this session: its number, its generator, and
        // no ids yet.
        s.epoch.set(epoch);
        s.next_id.set(0);
        s.id_end.set(0);
        let interval = f64::from_bits(INTERVAL_BITS.load(Ordering::Relaxed));
        let thread = THREADS.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        s.thread.set(thread);
        s.rate.set(Rate::new(interval));
        let seed = mix(SEED.load(Ordering::Relaxed) ^ mix(u64::from(thread)));
        if !s.seed(seed) {
            cd.countdown.set(u64::MAX);
            return None;
        }
    }
    if fresh {
        // A countdown drawn in another session: its first gap in this one.
        let rate = s.rate.get();
        let Some(g) = s.draw(|rng| rate.gap(rng)) else {
            cd.countdown.set(u64::MAX);
            return None;
        };
        cd.countdown.set(g);
    }
    if !ACTIVE.load(Ordering::Relaxed) || size == 0 {
        // Stopped sessions keep a countdown of u64::MAX, so only size 0 lands here.
        return None;
    }
    let c = cd.countdown.get();
    if size < c {
        cd.countdown.set(c - size);
        return None;
    }
    // The first point is byte `c` of the allocation.
    let Some(k) = s.draw(|rng| points(s, rng, cd, size, c)) else {
        // A signal handler's allocation interrupted a draw of this thread (§4).
        crate::engine::lost::skipped();
        return None;
    };
    match crate::engine::busy::state() {
        crate::engine::busy::NOT_BUSY => {}
        crate::engine::busy::SAMPLING => {
            crate::engine::lost::skipped();
            return None;
        }
        _ => return None,
    }
    if crate::engine::forked::unhandled() {
        // A child that no fork handler told of (`forked` §2): nothing of the parent's
        // session may be pushed or entered from here. Drawn again in the child's own.
        return sample_in_child(cd, size as usize);
    }
    let mut id = s.next_id.get();
    if id >= s.id_end.get() {
        id = ID_BLOCKS.fetch_add(ID_BLOCK, Ordering::Relaxed);
        s.id_end.set(id + ID_BLOCK);
    }
    s.next_id.set(id + 1);
    Some(Hit { k, thread: s.thread.get(), epoch, id })
}

/// [`sample_slow`] in a child found by its mark (`forked` §3): once the handler has given
/// the process its own state, the allocation is drawn again there (a countdown of the
/// parent's session gets a fresh gap in the child's, or none without one); no sample when
/// the handler declined.
#[cold]
#[inline(never)]
fn sample_in_child(cd: &Countdown, size: usize) -> Option<Hit> {
    if crate::engine::forked::handle() {
        sample_slow(cd, size)
    } else {
        None
    }
}

/// The number of sample points in an allocation of `size` bytes whose first point is byte
/// `c` of it, drawn with `rng`; sets the countdown to the next point after the allocation.
#[inline(always)]
fn points(s: &ThreadState, rng: &mut SmallRng, cd: &Countdown, size: u64, c: u64) -> u64 {
    let (k, next) = points_in(&s.rate.get(), rng, size, c);
    cd.countdown.set(next);
    k
}

/// SplitMix64's finaliser: spreads a seed over all bits.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seed from the clock, the pid and an address, for sessions without a fixed seed.
pub(crate) fn entropy_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let local = 0u8;
    mix(t ^ mix(u64::from(std::process::id())) ^ (&local as *const u8 as u64))
}

/// Draws from a fresh generator: used by tests to check the gap distribution in isolation.
#[cfg(test)]
fn gaps(seed: u64, interval: f64, n: usize) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let rate = Rate::new(interval);
    (0..n).map(|_| rate.gap(&mut rng)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_gaps_are_one() {
        assert!(gaps(1, 1.0, 1000).iter().all(|&g| g == 1));
    }

    /// The mean gap is R. With n = 200_000 gaps of a geometric law with mean 800 the
    /// standard error of the mean is ≈ 800/√n ≈ 1.79; the bound of 6σ fails with
    /// probability ≈ 2e-9 (and the seed is fixed, so the outcome is deterministic).
    #[test]
    fn gap_mean_is_interval() {
        let n = 200_000;
        for (seed, r) in [(7u64, 800.0), (8, 8.0), (9, 524288.0)] {
            let g = gaps(seed, r, n);
            let mean = g.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
            let sd = (r * (r - 1.0)).sqrt() / (n as f64).sqrt();
            assert!((mean - r).abs() < 6.0 * sd, "R={r}: mean gap {mean}, 6σ = {}", 6.0 * sd);
        }
    }

    /// P(G = 1) = p: with R = 8 and n = 200_000, the count of ones has sd ≈ 148;
    /// 6σ bound, false-failure probability ≈ 2e-9.
    #[test]
    fn gap_is_geometric_at_one() {
        let n = 200_000;
        let ones = gaps(3, 8.0, n).iter().filter(|&&g| g == 1).count() as f64;
        let expect = n as f64 / 8.0;
        let sd = (n as f64 * (1.0 / 8.0) * (7.0 / 8.0)).sqrt();
        assert!((ones - expect).abs() < 6.0 * sd, "ones {ones} vs {expect}");
    }
}
