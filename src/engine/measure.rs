//! Exact counting of one thread's allocations inside a scope ([`crate::testing::measure`]),
//! or sampling them at a rate of the scope's own ([`crate::testing::measure_sampled`], §4),
//! while every other thread runs at the ordinary sampled cost.
//!
//! # 1. How the thread's allocations reach it
//! Entering a scope keeps the thread's countdown (`sampler` §2) aside and writes 0 in its
//! place: a countdown of 0 sends every allocation of the thread to the sampler's slow path,
//! where a thread-local pointer, read only there, finds the scope. The slow path then
//! draws the session's own decision with the countdown kept aside (so the session samples
//! the thread as if nothing happened), writes 0 again, and returns a hit (with `k == 0`
//! when the session did not sample it). The allocation hook, on its path for hits only,
//! asks whether the thread measures and hands the block's address here. Outside a scope nothing changes on
//! any path: the fast path never reads the pointer.
//!
//! # 2. How its frees reach it
//! Each measured block's counter in the live table's filter (`live` §1) is raised, as a
//! sampled block's is, so its free leaves the one-load fast path and reaches the table's
//! slow removal, which asks here (a thread-local read, on that slow path only) whether
//! the freeing thread measures and the block is one of its scope's. Frees by other
//! threads are not counted: a block handed to another thread and freed there stays live
//! in the scope's figures. The raised counters outlive sessions: a session that starts or
//! ends while a scope is open leaves them (`live::clear` zeroes no counter of a shard
//! holding a scope's mark).
//!
//! # 3. Memory
//! Everything here lives in pages from `mmap` ([`crate::sys::rawmem::map`]), never in the
//! profiled allocator: the blocks' table (open addressing, backward-shift deletion,
//! doubling), the stacks' table ([`MAX_STACKS`] stacks of [`STACK_FRAMES`] frames; more
//! distinct stacks share the last one) and the levels (nested scopes, [`MAX_LEVELS`] at
//! most). The hooks never allocate, never block on a lock user code can hold, never panic,
//! and keep errno.
//!
//! # 4. Sampled scopes
//! A sampled scope ([`crate::testing::measure_sampled`]) counts only the blocks in which
//! a Bernoulli process of its own (one byte in `R` a point, its own generator, drawn as the
//! sampler draws: `sampler` §1–2) puts points, and weighs each by its points `k` instead of
//! its bytes; `testing::sampled` turns the sums into estimates. Its first gap is drawn when
//! it opens, so its first allocation is sampled no more often than any other. So that the
//! thread keeps the fast path, the thread's countdown is *armed* with the nearer of the two
//! next points, the session's and the scope's ([`Measure::arm`]); at the slow path, what
//! the fast path charged since is taken off both ([`Measure::disarm`]), the session
//! decides with its own countdown as in §1, then the scope with its own. Blocks estimate
//! as `Σ k·R/n` (`n` the block's bytes), kept per level and per stack. A sampled scope
//! neither nests nor holds an exact one: a thread has one countdown to arm.
//!
//! # 5. A sampled scope's peak
//! The largest live estimate over time picks the noise and reads high, so a sampled scope's
//! peak is cross-fitted as a profile's is (`report::confidence` §1): each sampled block's `k`
//! points are split into halves by fair coins from the scope's generator ([`half`]), the
//! moment half A's live points are most is chosen on A and measured on B (the points of B
//! live then), and the other way round. `R·(B at A's peak + A at B's peak)` estimates the
//! live bytes at two moments chosen without the points that measure them.

use crate::engine::busy::Busy;
use crate::engine::callstack::{self, Captured};
use crate::engine::live;
use crate::engine::sampler::cross_fit::CrossFit;
use crate::engine::sampler::{self, Countdown, Hit, Rate};
use crate::sys::errno::SavedErrno;
use crate::sys::rawmem;
use core::cell::Cell;
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// Nested scopes at most on one thread.
pub(crate) const MAX_LEVELS: usize = 4;
/// Distinct allocating stacks kept per thread (the rest share the last entry).
pub(crate) const MAX_STACKS: usize = 512;
/// Frames kept per stack.
pub(crate) const STACK_FRAMES: usize = 32;

/// One scope's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) blocks: u64,
    pub(crate) bytes: u64,
    pub(crate) frees: u64,
    pub(crate) freed_bytes: u64,
    pub(crate) live: u64,
    pub(crate) peak: u64,
    /// A sampled scope's cross-fitted peak (§5): half A's points live now, and each half's
    /// largest with the other's then.
    pub(crate) live_a: u64,
    pub(crate) fit: CrossFit,
}

impl Counts {
    /// A block of `weight` points, `weight_a` of them half A's (§5), is allocated.
    fn allocated(&mut self, weight: u64, weight_a: u64) {
        self.blocks += 1;
        self.bytes += weight;
        self.live += weight;
        self.peak = self.peak.max(self.live);
        self.live_a += weight_a;
        self.fit.note([self.live_a, self.live.saturating_sub(self.live_a)]);
    }
}

/// One allocating stack, with its figures per level.
#[derive(Clone, Copy)]
pub(crate) struct StackRec {
    hash: u64,
    pub(crate) n: usize,
    pub(crate) frames: [usize; STACK_FRAMES],
    pub(crate) blocks: [u64; MAX_LEVELS],
    pub(crate) bytes: [u64; MAX_LEVELS],
    pub(crate) live_blocks: [u64; MAX_LEVELS],
    pub(crate) live: [u64; MAX_LEVELS],
    /// The blocks it stands for (its blocks in an exact scope; `Σ k·R/n` in a sampled one).
    pub(crate) objects: [f64; MAX_LEVELS],
}

/// A measured block.
#[derive(Clone, Copy, Default)]
struct Block {
    /// 0: an empty slot.
    addr: usize,
    /// Its bytes in an exact scope, its sample points in a sampled one (§4).
    weight: u64,
    /// Of a sampled scope's points, those of half A (§5); 0 in an exact scope.
    weight_a: u64,
    stack: u32,
    /// The levels open when it was allocated (it belongs to `levels[..open]` of that
    /// time), and the sequence number of the innermost one.
    open: u32,
    seq: u64,
}

/// A level: its figures, and the sequence number it was opened with.
#[derive(Clone, Copy, Default)]
struct Level {
    counts: Counts,
    /// A sampled scope's estimate of its blocks, `Σ k·R/n` over its sampled blocks (`k`
    /// points in `n` bytes), and that estimate's variance estimate, `Σ k·R·(R−1)/n²` (§4).
    objects: f64,
    objects_var: f64,
    seq: u64,
}

/// A sampled scope's own Bernoulli process over the thread's bytes (§4).
struct Own {
    rate: Rate,
    /// Its mean interval.
    interval: f64,
    rng: SmallRng,
    /// Bytes to its next point, as of when the thread's countdown was last armed.
    countdown: u64,
    /// A draw runs (a signal handler's allocation that interrupts it draws nothing).
    drawing: bool,
}

/// A thread's measuring state (one mapping; the tables are mappings of their own).
pub(crate) struct Measure {
    depth: usize,
    levels: [Level; MAX_LEVELS],
    next_seq: u64,
    /// The thread's countdown kept aside: (countdown, epoch).
    saved: (u64, u64),
    /// What was written in the thread's countdown when it was last armed: 0 in an exact
    /// scope; the nearer of the session's and the scope's next points in a sampled one.
    armed: u64,
    /// A sampled scope's own process; `None` in an exact scope.
    own: Option<Own>,
    /// The slow path's word to the allocation hook that follows it: count the allocation,
    /// with this weight (its size, or its points in a sampled scope).
    pending: Option<u64>,
    blocks: *mut Block,
    cap: usize,
    len: usize,
    stacks: *mut StackRec,
    nstacks: usize,
    /// Blocks that could not be tracked (no memory for the table).
    pub(crate) untracked: u64,
}

thread_local! {
    /// The calling thread's measuring state; null when it measures nothing. Read on the
    /// sampler's slow path and the live table's slow removal only.
    static CURRENT: Cell<*mut Measure> = const { Cell::new(core::ptr::null_mut()) };
}

/// The calling thread's measuring state, if it measures.
#[inline(always)]
pub(crate) fn current() -> Option<&'static mut Measure> {
    let p = CURRENT.with(Cell::get);
    // SAFETY: a non-null pointer is this thread's own state, mapped by `enter` and unmapped
    // only by the `leave` that nulls the pointer; nothing else refers to it meanwhile
    // (the hooks run one at a time on the thread, and a signal handler's allocation is
    // busy and not measured: see `slow`).
    unsafe { p.as_mut() }
}

fn map_array<T>(n: usize) -> *mut T {
    rawmem::map(n * core::mem::size_of::<T>()) as *mut T
}

/// The calling thread's state, mapped and installed (its countdown armed) when it measures
/// nothing yet; `own` is a sampled scope's process. `None` when no memory could be had.
fn install(countdown: &Countdown, own: Option<Own>) -> Option<&'static mut Measure> {
    if let Some(m) = current() {
        return Some(m);
    }
    let p = map_array::<Measure>(1);
    let stacks = map_array::<StackRec>(MAX_STACKS);
    let blocks = map_array::<Block>(1024);
    if p.is_null() || stacks.is_null() || blocks.is_null() {
        // SAFETY: each non-null one was mapped just above with that size, and is unused.
        unsafe {
            if !p.is_null() {
                rawmem::unmap(p as *mut u8, core::mem::size_of::<Measure>());
            }
            if !stacks.is_null() {
                rawmem::unmap(stacks as *mut u8, MAX_STACKS * core::mem::size_of::<StackRec>());
            }
            if !blocks.is_null() {
                rawmem::unmap(blocks as *mut u8, 1024 * core::mem::size_of::<Block>());
            }
        }
        return None;
    }
    // SAFETY: `p` maps a Measure's bytes, used by this thread only; a whole value is
    // written over them.
    unsafe {
        p.write(Measure {
            depth: 0,
            levels: [Level::default(); MAX_LEVELS],
            next_seq: 1,
            saved: (countdown.countdown.get(), countdown.epoch.get()),
            armed: 0,
            own,
            pending: None,
            blocks,
            cap: 1024,
            len: 0,
            stacks,
            nstacks: 0,
            untracked: 0,
        })
    };
    // SAFETY: just written.
    let m = unsafe { &mut *p };
    // From now on every allocation of the thread takes the slow path (§1), or, in a
    // sampled scope, those in which the session's or the scope's next point falls (§4).
    m.arm(countdown);
    CURRENT.with(|c| c.set(p));
    // The paths below reach the scope through these hooks (set after `CURRENT`, cleared
    // before it: a hook never finds the state gone).
    sampler::hold(Some(held_slow));
    live::on_marked_free(Some(marked_free));
    Some(m)
}

/// Opens a level on the calling thread; `countdown` is the thread's sampler countdown.
/// `false` when no memory could be had, [`MAX_LEVELS`] are open, or a sampled scope is.
pub(crate) fn enter(countdown: &Countdown) -> bool {
    let Some(m) = install(countdown, None) else { return false };
    if m.depth == MAX_LEVELS || m.own.is_some() {
        return false;
    }
    m.open_level();
    true
}

/// Opens a sampled scope (§4) at mean interval `interval` bytes, its generator seeded
/// with `seed`. `false` when a scope is open on the thread or no memory could be had.
pub(crate) fn enter_sampled(countdown: &Countdown, interval: f64, seed: u64) -> bool {
    if current().is_some() {
        return false;
    }
    let rate = Rate::new(interval);
    let mut rng = SmallRng::seed_from_u64(sampler::mix(seed));
    // A fresh gap: the scope's first allocation is sampled no more often than any other.
    let countdown_own = rate.gap(&mut rng);
    let own = Own { rate, interval, rng, countdown: countdown_own, drawing: false };
    let Some(m) = install(countdown, Some(own)) else { return false };
    m.open_level();
    true
}

/// A stack's part of a level: its frames; its blocks, weight, live blocks and live
/// weight; and the blocks it stands for.
pub(crate) type LeftStack = (Vec<usize>, [u64; 4], f64);

/// What a level leaves: its figures and, per stack, its blocks, bytes, live blocks and
/// live bytes (stacks it allocated nothing from are left out).
pub(crate) struct Left {
    pub(crate) counts: Counts,
    /// A sampled scope's blocks estimate and its variance (§4); 0 in an exact one.
    pub(crate) objects: (f64, f64),
    pub(crate) untracked: u64,
    pub(crate) stacks: Vec<LeftStack>,
}

/// Closes the innermost level of the calling thread and returns what it counted; the last
/// level gives the thread's countdown back. Must follow a successful [`enter`].
pub(crate) fn leave(countdown: &Countdown) -> Left {
    let Some(m) = current() else {
        return Left {
            counts: Counts::default(),
            objects: (0.0, 0.0),
            untracked: 0,
            stacks: Vec::new(),
        };
    };
    m.depth -= 1;
    let level = m.depth;
    let counts = m.levels[level].counts;
    let objects = (m.levels[level].objects, m.levels[level].objects_var);
    let untracked = m.untracked;
    // Copied out before anything is allocated (the copy's own allocations are the
    // profiler's, not the scope's: busy).
    let _busy = Busy::enter();
    let mut stacks = Vec::new();
    for s in m.stacks_mut() {
        if s.blocks[level] > 0 {
            let figures = [s.blocks[level], s.bytes[level], s.live_blocks[level], s.live[level]];
            stacks.push((s.frames[..s.n].to_vec(), figures, s.objects[level]));
        }
    }
    if m.depth == 0 {
        // The thread's blocks still tracked stop being measured: their filter counters go
        // back down.
        for i in 0..m.cap {
            // SAFETY: `i` is below the table's capacity.
            let b = unsafe { *m.blocks.add(i) };
            if b.addr != 0 {
                live::unmark(b.addr);
            }
        }
        m.disarm(countdown);
        sampler::hold(None);
        live::on_marked_free(None);
        CURRENT.with(|c| c.set(core::ptr::null_mut()));
        // SAFETY: the mappings were made by `enter`/`grow` with these sizes, and nothing
        // refers to them now that the thread's pointer is null.
        unsafe {
            rawmem::unmap(m.blocks as *mut u8, m.cap * core::mem::size_of::<Block>());
            rawmem::unmap(m.stacks as *mut u8, MAX_STACKS * core::mem::size_of::<StackRec>());
            rawmem::unmap(m as *mut Measure as *mut u8, core::mem::size_of::<Measure>());
        }
    }
    Left { counts, objects, untracked, stacks }
}

/// The sampler's slow path of the measuring thread (§1, §4): the session's decision with
/// the countdown kept aside, then the scope's (every allocation in an exact scope). A hit
/// when either counts it (`k == 0`: the session did not sample it). `None` for the
/// profiler's own allocations (the thread is busy): they are not the scope's.
fn slow(m: &mut Measure, cd: &Countdown, size: u64) -> Option<Hit> {
    m.disarm(cd);
    // The sampler's own fast path and slow path, with the kept countdown (not
    // `sample_in`, whose slow path would come back here).
    let hit = if sampler::skip_in(cd, size as usize) {
        None
    } else {
        sampler::sample_slow(cd, size as usize)
    };
    m.saved = (cd.countdown.get(), cd.epoch.get());
    let weight = match &mut m.own {
        None => Some(size),
        Some(own) => own.points(size),
    };
    m.arm(cd);
    if crate::engine::busy::state() != crate::engine::busy::NOT_BUSY {
        m.pending = None;
        return hit;
    }
    m.pending = weight;
    if weight.is_none() {
        return hit;
    }
    // The hook then asks [`current`]; an allocation the session did not sample has no
    // points of the session's.
    Some(hit.unwrap_or(Hit { k: 0, thread: 0, epoch: 0, id: 0 }))
}

impl Own {
    /// The scope's points in an allocation of `size` bytes (its countdown already charged
    /// with what went by on the fast path). `None` when it has none.
    fn points(&mut self, size: u64) -> Option<u64> {
        if self.drawing {
            // A signal handler's allocation interrupted a draw: it is not the scope's.
            return None;
        }
        let left = self.countdown;
        if size < left {
            self.countdown = left - size;
            return None;
        }
        self.drawing = true;
        let (k, next) = sampler::points_in(&self.rate, &mut self.rng, size, left);
        self.countdown = next;
        self.drawing = false;
        Some(k)
    }
}

/// A measured allocation of `size` bytes at `addr` (§1).
#[cold]
#[inline(never)]
pub(crate) fn on_alloc(addr: usize, size: usize) {
    let Some(m) = current() else { return };
    // The slow path said whether the allocation is the scope's, and its weight.
    let Some(weight) = m.pending.take() else { return };
    let Some(_busy) = Busy::enter_sampling() else { return };
    let saved = SavedErrno::save();
    let mut frames = Captured::new();
    callstack::capture(&mut frames, STACK_FRAMES, on_alloc as *const () as usize);
    let stack = m.intern(frames.frames());
    let open = m.depth;
    // A sampled block of `n` bytes with `k` points stands for `k·R/n` blocks (§4).
    let (objects, objects_var) = match &m.own {
        Some(own) => {
            let (r, n) = (own.interval, size.max(1) as f64);
            (weight as f64 * r / n, weight as f64 * r * (r - 1.0) / (n * n))
        }
        None => (1.0, 0.0),
    };
    let weight_a = match &mut m.own {
        Some(own) => half(&mut own.rng, weight),
        None => 0,
    };
    for level in &mut m.levels[..open] {
        level.counts.allocated(weight, weight_a);
        level.objects += objects;
        level.objects_var += objects_var;
    }
    // SAFETY: `stack` is an index below `nstacks` (intern's result).
    let s = unsafe { &mut *m.stacks.add(stack) };
    for level in 0..open {
        s.blocks[level] += 1;
        s.bytes[level] += weight;
        s.live_blocks[level] += 1;
        s.live[level] += weight;
        s.objects[level] += objects;
    }
    let seq = m.levels[open - 1].seq;
    let block = Block { addr, weight, weight_a, stack: stack as u32, open: open as u32, seq };
    match m.insert(block) {
        // A block of this address was there: its free was not seen (another thread freed
        // it), and its counter is raised already.
        Some(false) => {}
        Some(true) if live::mark(addr) => {}
        // Not tracked: its free will not be seen. It stays live in the figures.
        _ => {
            m.untracked += 1;
            m.remove(addr);
        }
    }
    saved.restore();
}

/// The free of the block at `addr` by the calling thread, if it measures and the block is
/// its scope's (§2).
/// The live table's hook while the thread measures (`live::on_marked_free`, §2).
fn marked_free(addr: usize) {
    if let Some(m) = current() {
        on_free(m, addr);
    }
}

/// The sampler's hook while the thread measures (`sampler::hold`, §1).
fn held_slow(cd: &Countdown, size: u64) -> Option<Hit> {
    match current() {
        Some(m) => slow(m, cd, size),
        // Not reached: the hook is set only while the state is (see `install`).
        None => sampler::sample_slow(cd, size as usize),
    }
}

/// Binomial(k, ½): how many of a block's `k` points fall in half A (§5), as the bits set in
/// `k` fair random bits (64 at a time).
fn half(rng: &mut SmallRng, k: u64) -> u64 {
    use rand::Rng;
    let mut left = k;
    let mut a = 0;
    while left > 0 {
        let bits: u64 = rng.random();
        let n = left.min(64);
        let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        a += u64::from((bits & mask).count_ones());
        left -= n;
    }
    a
}

#[cold]
#[inline(never)]
fn on_free(m: &mut Measure, addr: usize) {
    let Some(b) = m.remove(addr) else { return };
    live::unmark(addr);
    let open = (b.open as usize).min(m.depth);
    // SAFETY: a block's stack is an index below `nstacks`.
    let s = unsafe { &mut *m.stacks.add(b.stack as usize) };
    for level in 0..open {
        // The level it was allocated in, still open (not one opened again since).
        if m.levels[level].seq > b.seq {
            continue;
        }
        let c = &mut m.levels[level].counts;
        c.frees += 1;
        c.freed_bytes += b.weight;
        c.live = c.live.saturating_sub(b.weight);
        c.live_a = c.live_a.saturating_sub(b.weight_a);
        s.live_blocks[level] = s.live_blocks[level].saturating_sub(1);
        s.live[level] = s.live[level].saturating_sub(b.weight);
    }
}

impl Measure {
    /// Opens the next level (below [`MAX_LEVELS`]).
    fn open_level(&mut self) {
        let level = self.depth;
        self.levels[level] = Level { seq: self.next_seq, ..Level::default() };
        self.next_seq += 1;
        for s in self.stacks_mut() {
            s.blocks[level] = 0;
            s.bytes[level] = 0;
            s.live_blocks[level] = 0;
            s.live[level] = 0;
            s.objects[level] = 0.0;
        }
        self.depth += 1;
    }

    /// Writes the thread's countdown for the scope: 0 in an exact scope (every
    /// allocation comes to [`slow`]); the nearer of the session's and the scope's next
    /// points in a sampled one (§4).
    fn arm(&mut self, cd: &Countdown) {
        self.armed = match &self.own {
            None => 0,
            Some(own) => own.countdown.min(self.saved.0),
        };
        cd.countdown.set(self.armed);
        cd.epoch.set(self.saved.1);
    }

    /// Gives the session its countdown back, less what the fast path charged since
    /// [`arm`](Self::arm); a sampled scope's process is charged the same bytes.
    fn disarm(&mut self, cd: &Countdown) {
        let charged = self.armed.saturating_sub(cd.countdown.get());
        cd.countdown.set(self.saved.0.saturating_sub(charged));
        cd.epoch.set(self.saved.1);
        if let Some(own) = &mut self.own {
            own.countdown = own.countdown.saturating_sub(charged).max(1);
        }
        self.armed = 0;
    }

    fn stacks_mut(&mut self) -> &mut [StackRec] {
        // SAFETY: `stacks` maps MAX_STACKS records, of which `nstacks` are written.
        unsafe { core::slice::from_raw_parts_mut(self.stacks, self.nstacks) }
    }

    /// The index of the stack `frames`, added when new (the last entry takes every stack
    /// past [`MAX_STACKS`]).
    fn intern(&mut self, frames: &[usize]) -> usize {
        let n = frames.len().min(STACK_FRAMES);
        let frames = &frames[..n];
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for &f in frames {
            h = (h ^ f as u64).wrapping_mul(0x0100_0000_01b3);
        }
        for (i, s) in self.stacks_mut().iter().enumerate() {
            if s.hash == h && &s.frames[..s.n] == frames {
                return i;
            }
        }
        if self.nstacks == MAX_STACKS {
            return MAX_STACKS - 1;
        }
        let mut rec = StackRec {
            hash: h,
            n,
            frames: [0; STACK_FRAMES],
            blocks: [0; MAX_LEVELS],
            bytes: [0; MAX_LEVELS],
            live_blocks: [0; MAX_LEVELS],
            live: [0; MAX_LEVELS],
            objects: [0.0; MAX_LEVELS],
        };
        rec.frames[..n].copy_from_slice(frames);
        // SAFETY: `nstacks` < MAX_STACKS: a slot of the mapping.
        unsafe { self.stacks.add(self.nstacks).write(rec) };
        self.nstacks += 1;
        self.nstacks - 1
    }

    fn slot_of(&self, addr: usize) -> usize {
        (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) & (self.cap - 1)
    }

    /// Adds a block: `Some(true)` when its address is new here, `Some(false)` when a
    /// block of the address was there (freed unseen, by another thread) and is replaced,
    /// `None` when the table cannot grow.
    fn insert(&mut self, b: Block) -> Option<bool> {
        if (self.len + 1) * 2 > self.cap && !self.grow() {
            return None;
        }
        let mut i = self.slot_of(b.addr);
        loop {
            // SAFETY: `i` is below the capacity.
            let slot = unsafe { &mut *self.blocks.add(i) };
            if slot.addr == 0 {
                *slot = b;
                self.len += 1;
                return Some(true);
            }
            if slot.addr == b.addr {
                *slot = b;
                return Some(false);
            }
            i = (i + 1) & (self.cap - 1);
        }
    }

    fn grow(&mut self) -> bool {
        let cap = self.cap * 2;
        let new = map_array::<Block>(cap);
        if new.is_null() {
            return false;
        }
        let (old, old_cap) = (self.blocks, self.cap);
        self.blocks = new;
        self.cap = cap;
        self.len = 0;
        for i in 0..old_cap {
            // SAFETY: `i` is below the old table's capacity.
            let b = unsafe { *old.add(i) };
            if b.addr != 0 {
                // Room for all: the new table is twice as large.
                let _ = self.insert(b);
            }
        }
        // SAFETY: the old table was mapped with `old_cap` blocks and is no longer used.
        unsafe { rawmem::unmap(old as *mut u8, old_cap * core::mem::size_of::<Block>()) };
        true
    }

    /// Takes the block at `addr` out (backward-shift deletion).
    fn remove(&mut self, addr: usize) -> Option<Block> {
        if addr == 0 {
            return None;
        }
        let mask = self.cap - 1;
        let mut i = self.slot_of(addr);
        loop {
            // SAFETY: `i` is below the capacity.
            let slot = unsafe { *self.blocks.add(i) };
            if slot.addr == 0 {
                return None;
            }
            if slot.addr == addr {
                break;
            }
            i = (i + 1) & mask;
        }
        // SAFETY: as above.
        let found = unsafe { *self.blocks.add(i) };
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            // SAFETY: `j` is below the capacity.
            let b = unsafe { *self.blocks.add(j) };
            if b.addr == 0 {
                break;
            }
            let home = self.slot_of(b.addr);
            // Moves back when its home is not in (hole, j] cyclically.
            let between =
                if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !between {
                // SAFETY: both indices are below the capacity.
                unsafe { *self.blocks.add(hole) = b };
                hole = j;
            }
            j = (j + 1) & mask;
        }
        // SAFETY: as above.
        unsafe { *self.blocks.add(hole) = Block::default() };
        self.len -= 1;
        Some(found)
    }
}
