//! Exact counting of one thread's allocations inside a scope ([`crate::testing::measure`]),
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
//! in the scope's figures.
//!
//! # 3. Memory
//! Everything here lives in pages from `mmap` ([`crate::sys::rawmem::map`]), never in the
//! profiled allocator: the blocks' table (open addressing, backward-shift deletion,
//! doubling), the stacks' table ([`MAX_STACKS`] stacks of [`STACK_FRAMES`] frames; more
//! distinct stacks share the last one) and the levels (nested scopes, [`MAX_LEVELS`] at
//! most). The hooks never allocate, never block on a lock user code can hold, never panic,
//! and keep errno.

use crate::engine::busy::Busy;
use crate::engine::callstack::{self, Captured};
use crate::engine::live;
use crate::engine::sampler::{Countdown, Hit};
use crate::sys::errno::SavedErrno;
use crate::sys::rawmem;
use core::cell::Cell;

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
}

/// A measured block.
#[derive(Clone, Copy, Default)]
struct Block {
    /// 0: an empty slot.
    addr: usize,
    size: u64,
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
    seq: u64,
}

/// A thread's measuring state (one mapping; the tables are mappings of their own).
pub(crate) struct Measure {
    depth: usize,
    levels: [Level; MAX_LEVELS],
    next_seq: u64,
    /// The thread's countdown kept aside: (countdown, epoch).
    saved: (u64, u64),
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

/// Opens a level on the calling thread; `countdown` is the thread's sampler countdown.
/// `false` when no memory could be had or [`MAX_LEVELS`] are open.
pub(crate) fn enter(countdown: &Countdown) -> bool {
    let m = match current() {
        Some(m) => m,
        None => {
            let p = map_array::<Measure>(1);
            let stacks = map_array::<StackRec>(MAX_STACKS);
            let blocks = map_array::<Block>(1024);
            if p.is_null() || stacks.is_null() || blocks.is_null() {
                return false;
            }
            // SAFETY: `p` maps a Measure's bytes, zeroed (a valid all-zero state is
            // written over it), used by this thread only.
            unsafe {
                p.write(Measure {
                    depth: 0,
                    levels: [Level::default(); MAX_LEVELS],
                    next_seq: 1,
                    saved: (countdown.countdown.get(), countdown.epoch.get()),
                    blocks,
                    cap: 1024,
                    len: 0,
                    stacks,
                    nstacks: 0,
                    untracked: 0,
                })
            };
            // Every allocation of the thread takes the slow path from now on (§1).
            countdown.countdown.set(0);
            CURRENT.with(|c| c.set(p));
            // SAFETY: just written.
            unsafe { &mut *p }
        }
    };
    if m.depth == MAX_LEVELS {
        return false;
    }
    let level = m.depth;
    m.levels[level] = Level { counts: Counts::default(), seq: m.next_seq };
    m.next_seq += 1;
    for s in m.stacks_mut() {
        s.blocks[level] = 0;
        s.bytes[level] = 0;
        s.live_blocks[level] = 0;
        s.live[level] = 0;
    }
    m.depth += 1;
    true
}

/// What a level leaves: its figures and, per stack, its blocks, bytes, live blocks and
/// live bytes (stacks it allocated nothing from are left out).
pub(crate) struct Left {
    pub(crate) counts: Counts,
    pub(crate) untracked: u64,
    pub(crate) stacks: Vec<(Vec<usize>, [u64; 4])>,
}

/// Closes the innermost level of the calling thread and returns what it counted; the last
/// level gives the thread's countdown back. Must follow a successful [`enter`].
pub(crate) fn leave(countdown: &Countdown) -> Left {
    let Some(m) = current() else {
        return Left { counts: Counts::default(), untracked: 0, stacks: Vec::new() };
    };
    m.depth -= 1;
    let level = m.depth;
    let counts = m.levels[level].counts;
    let untracked = m.untracked;
    // Copied out before anything is allocated (the copy's own allocations are the
    // profiler's, not the scope's: busy).
    let _busy = Busy::enter();
    let mut stacks = Vec::new();
    for s in m.stacks_mut() {
        if s.blocks[level] > 0 {
            let figures = [s.blocks[level], s.bytes[level], s.live_blocks[level], s.live[level]];
            stacks.push((s.frames[..s.n].to_vec(), figures));
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
        countdown.countdown.set(m.saved.0);
        countdown.epoch.set(m.saved.1);
        CURRENT.with(|c| c.set(core::ptr::null_mut()));
        // SAFETY: the mappings were made by `enter`/`grow` with these sizes, and nothing
        // refers to them now that the thread's pointer is null.
        unsafe {
            rawmem::unmap(m.blocks as *mut u8, m.cap * core::mem::size_of::<Block>());
            rawmem::unmap(m.stacks as *mut u8, MAX_STACKS * core::mem::size_of::<StackRec>());
            rawmem::unmap(m as *mut Measure as *mut u8, core::mem::size_of::<Measure>());
        }
    }
    Left { counts, untracked, stacks }
}

/// The sampler's slow path of the measuring thread (§1): the session's decision with the
/// countdown kept aside, then a hit for every allocation (`k == 0`: not sampled). `None`
/// for the profiler's own allocations (the thread is busy): they are not the scope's.
pub(crate) fn slow(m: &mut Measure, cd: &Countdown, size: u64) -> Option<Hit> {
    cd.countdown.set(m.saved.0);
    cd.epoch.set(m.saved.1);
    // The sampler's own fast path and slow path, with the kept countdown (not
    // `sample_in`, whose slow path would come back here).
    let hit = if crate::engine::sampler::skip_in(cd, size as usize) {
        None
    } else {
        crate::engine::sampler::sample_slow(cd, size as usize)
    };
    m.saved = (cd.countdown.get(), cd.epoch.get());
    cd.countdown.set(0);
    if crate::engine::busy::state() != crate::engine::busy::NOT_BUSY {
        return hit;
    }
    // Every allocation of the thread comes back as a hit (the hook then asks
    // [`current`]); one the session did not sample has no points.
    Some(hit.unwrap_or(Hit { k: 0, thread: 0, epoch: 0, id: 0 }))
}

/// A measured allocation of `size` bytes at `addr` (§1).
#[cold]
#[inline(never)]
pub(crate) fn on_alloc(addr: usize, size: usize) {
    let Some(m) = current() else { return };
    let Some(_busy) = Busy::enter_sampling() else { return };
    let saved = SavedErrno::save();
    let mut frames = Captured::new();
    callstack::capture(&mut frames, STACK_FRAMES, on_alloc as *const () as usize);
    let stack = m.intern(frames.frames());
    let size = size as u64;
    let open = m.depth;
    for level in &mut m.levels[..open] {
        let c = &mut level.counts;
        c.blocks += 1;
        c.bytes += size;
        c.live += size;
        c.peak = c.peak.max(c.live);
    }
    // SAFETY: `stack` is an index below `nstacks` (intern's result).
    let s = unsafe { &mut *m.stacks.add(stack) };
    for level in 0..open {
        s.blocks[level] += 1;
        s.bytes[level] += size;
        s.live_blocks[level] += 1;
        s.live[level] += size;
    }
    let seq = m.levels[open - 1].seq;
    let block = Block { addr, size, stack: stack as u32, open: open as u32, seq };
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
#[inline(always)]
pub(crate) fn on_free_if_measuring(addr: usize) {
    if let Some(m) = current() {
        on_free(m, addr);
    }
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
        c.freed_bytes += b.size;
        c.live = c.live.saturating_sub(b.size);
        s.live_blocks[level] = s.live_blocks[level].saturating_sub(1);
        s.live[level] = s.live[level].saturating_sub(b.size);
    }
}

impl Measure {
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
