//! Incremental marking: the prefetching marker (OCaml's, ocaml/ocaml#10195 and its OCaml 5 port) and a plain depth-first
//! marker, sharing one bounded mark stack of `(start, end)` ranges.
//!
//! # 1. The invariant everything rests on
//! Every even word in a scanned field (tag below `NO_SCAN_TAG`) is the address of field 0
//! of a block of this heap that has not been freed: the embedder API only stores values
//! that came from this heap, and nothing is freed while marking runs (sweep starts only
//! once marking is complete). So the marker reads `word - 8` as a header without asking
//! whether the address is in the heap — no page table, no chunk lookup (the reasoning of
//! OCaml's `compare` without naked pointers, applied to marking).
//!
//! # 2. Colours and accounting
//! White: not reached. Black: reached (and scanned, or its range is on the mark stack or
//! being scanned). Gray: reached, but its scan was dropped because the mark stack was full
//! (§5). A block's `whsize` is added to `words_marked` exactly once, when it leaves white,
//! so rescans after an overflow never count twice. The slice budget counts work done
//! (fields scanned plus one per entry taken from the ring), which can include rescans.
//!
//! # 3. The prefetching loop
//! A 256-entry ring (the prefetch buffer) sits in front of the mark stack. Each step takes
//! its work from the ring when the ring holds more than its waterline, else a range from
//! the stack, else — the stack being empty — it switches the ring to *drain* mode
//! (waterline 0) and empties it; once the ring is above `PB_MIN` again it goes back to
//! *fill* mode (waterline `PB_MIN`, OCaml 5's port of ocaml/ocaml#10195). A block taken from the ring was prefetched
//! at least `PB_MIN` steps earlier, so its header read usually hits L1: only then is it
//! marked and its fields scanned. Each pointer found in a field is prefetched and enqueued
//! in the ring, nothing else: no header read. When the ring is full, the pointer is
//! *spilled* to the stack unread, as an entry `(v, null)`; popping such an entry puts it
//! back into the ring (prefetching it then), so every header the prefetching marker reads
//! was prefetched at least `PB_MIN` steps earlier. The stack therefore only grows when the
//! ring overflows. If the stack is full too, the pointer is marked on the spot and its
//! range overflows as in §5.
//!
//! **Reached bits: two passes through the ring.** In a heap past the caches, most pointers
//! a marker follows lead to blocks it reached already (in `examples/markbench`'s graph,
//! two of every three), and reading such a block's header to learn so costs a miss to
//! main memory. So the marker keeps a side bitmap, one bit per 16 bytes of the span of the
//! chunks (a 128th of its size: it stays in the last-level cache where the heap does not),
//! cleared when a cycle begins. A pointer into that span enters the ring as itself, its
//! bit's word prefetched; when it comes out (the first pass), its bit is tested and set.
//! A block whose bit was set already is dropped there, without touching its header. Any
//! other goes back into the ring tagged (`v | 1`), its header prefetched now; when it comes
//! out again (the second pass) it is marked and scanned as above. A pointer outside the
//! span (a large block, a chunk added during marking) enters tagged, its header prefetched.
//! The bit is a filter in front of the header, never the other way round: *bit set ⇒ the
//! block is queued for its second pass, or marked*. A clear bit says nothing, and the
//! header decides (a root, a write-barrier shade, a block allocated black). One bit per 16
//! bytes tells blocks apart because live headers are at least 16 bytes apart: every block
//! has a field, or, with none, a padding word that sweep keeps with it (`Heap::alloc`).
//! The first pass writes its second-pass entry whether the bit was set or not and keeps it
//! only if it was clear, and prefetches the ring's own line for a block reached before:
//! no branch on a bit that is as often set as not. When the chunks are scattered over more
//! than four times their size of address space, there are no bits and every pointer takes
//! the second pass at once.
//!
//! Two more things keep the loop's own instructions and the spills down. A block whose
//! fields all fit in the ring's free entries (nearly every small block) is scanned without
//! a room test per pointer. A range popped from the stack (a root array, the rest of a
//! large block) is scanned only as far as the ring has room, less `RANGE_MARGIN` entries
//! for the blocks it reaches, and the rest goes back on the stack: a long range fills the
//! ring instead of spilling most of its pointers one entry each. (Pushing back the rest of
//! a *fresh* block instead of spilling is slower: its line is cold when the range
//! returns. Testing the bit when a pointer is scanned, rather than in a first pass, is
//! slower still: the scan waits for the bitmap's line.)

//! # 4. Ranges and large blocks
//! Stack entries are `(start, end)` field ranges, so finishing the tail of a long block
//! needs no header read. A range longer than `SCAN_CHUNK` words is scanned `SCAN_CHUNK`
//! words at a time, the rest pushed back — which never overflows, as the range was just
//! popped. The ring and the stack persist between slices (nothing moves and nothing is
//! freed while marking, so their entries stay valid).
//!
//! # 5. Mark-stack overflow
//! The stack holds at most `limit` entries (`HeapConfig::mark_stack_limit`; by default
//! heap words / 16, i.e. at most an eighth of the heap's size in 16-byte entries). Pushing a block's range onto a full stack
//! instead colours the block gray and records where: for a chunk block, the chunk's
//! `pending_lo` (lowest offset that may hold a gray block) drops to its offset; a large
//! block goes on `pending_large` (at most one entry per large block, as only a white or
//! black block turns gray). When stack and ring are both empty and gray blocks remain, the
//! marker *redarkens*: it walks the recorded chunks from `pending_lo`, turns gray blocks
//! black and pushes their ranges until the stack is full again, remembering where it
//! stopped. Pushes only happen for a block whose header is in hand (a fresh block, an
//! evicted ring entry, a root, a write-barrier shade, a redarkened block), so no range ever
//! has to be traced back to its block. Nothing is lost (a gray block is found by the walk)
//! and nothing is counted twice (§2). Marking is complete when ring, stack and gray count
//! are all empty.
//!
//! # 6. The depth-first marker
//! Pops a range, scans it, and marks and pushes every white child it finds (reading the
//! child's header immediately: the cache miss ocaml/ocaml#10195 measures). Same stack, same
//! overflow handling, same chunking.

use super::heap::{
    tag, wosize, Chunk, BLACK, COLOUR_MASK, GRAY, MAX_SMALL_WOSIZE, NO_SCAN_TAG, WHITE,
};
use super::ReachedBits;

/// Entries in the prefetch ring.
pub(crate) const PB_SIZE: usize = 256;
const PB_MASK: usize = PB_SIZE - 1;
/// Fill-mode waterline: take from the ring only when it holds more than this.
pub(crate) const PB_MIN: usize = 64;
/// Longest run of fields scanned in one step; longer ranges are split.
pub(crate) const SCAN_CHUNK: usize = 512;
/// Ring entries a range popped from the stack leaves free, for the pointers of the blocks
/// its words reach (§3).
const RANGE_MARGIN: usize = 64;

/// A range of fields still to scan.
#[derive(Clone, Copy)]
pub(crate) struct Range {
    start: *mut u64,
    end: *mut u64,
}

/// Marking strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Marker {
    /// The prefetching marker (ring in front of the mark stack).
    #[default]
    Prefetch,
    /// Plain depth-first marking with the same mark stack.
    DepthFirst,
}

/// Hints the CPU to fetch the cache line holding `p`. Never faults.
#[inline(always)]
fn prefetch(p: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetch is a hint; it does not fault on any address. SSE is part of the
        // x86_64 baseline.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = p;
    }
}

/// True when reached bits pay for a heap spanning `span` bytes beside a last-level cache
/// of `llc` bytes (`ReachedBits::Auto`): the heap is more than twice the cache, and its
/// bitmap (a 128th) at most a quarter of it.
fn bits_pay(span: usize, llc: usize) -> bool {
    span > 2 * llc && span / 128 <= llc / 4
}

/// The size in bytes of the CPU's last-level cache (the largest level that `sysfs` lists
/// for CPU 0), read once; `None` when it does not say.
fn last_level_cache() -> Option<usize> {
    static SIZE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
        let mut best: Option<(u32, usize)> = None;
        for entry in dir.flatten() {
            let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
            let (Some(level), Some(size)) = (read("level"), read("size")) else {
                continue;
            };
            let Ok(level) = level.trim().parse::<u32>() else {
                continue;
            };
            let size = size.trim();
            let (digits, unit) = match size.find(|c: char| !c.is_ascii_digit()) {
                Some(at) => size.split_at(at),
                None => (size, ""),
            };
            let scale = match unit {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                _ => continue,
            };
            let Some(bytes) = digits.parse::<usize>().ok().and_then(|n| n.checked_mul(scale))
            else {
                continue;
            };
            if best.is_none_or(|(l, _)| level > l) {
                best = Some((level, bytes));
            }
        }
        best.map(|(_, bytes)| bytes).filter(|&b| b > 0)
    })
}

/// The state of the marker; lives across slices.
pub(crate) struct MarkState {
    stack: Vec<Range>,
    limit: usize,
    pb: Box<[usize; PB_SIZE]>,
    enq: usize,
    deq: usize,
    waterline: usize,
    /// Words (headers included) of blocks marked this cycle.
    pub words_marked: u64,
    /// Gray blocks awaiting redarkening.
    grays: usize,
    pending_large: Vec<*mut u64>,
    /// Blocks grayed because the stack was full (all cycles).
    pub overflows: u64,
    /// Deepest the stack has been (all cycles).
    pub max_stack: usize,
    /// The reached bits (§3): one per 16 bytes of the chunks' span, by header address.
    bits: Vec<u64>,
    /// The span's start plus 8: a block value minus this is its header's offset in it.
    lo8: usize,
    /// Bytes covered by `bits` (0: none; every block goes by its header).
    span: usize,
}

impl MarkState {
    pub(crate) fn new() -> Self {
        MarkState {
            stack: Vec::new(),
            limit: 1,
            pb: Box::new([0; PB_SIZE]),
            enq: 0,
            deq: 0,
            waterline: PB_MIN,
            words_marked: 0,
            grays: 0,
            pending_large: Vec::new(),
            overflows: 0,
            max_stack: 0,
            bits: Vec::new(),
            lo8: 8,
            span: 0,
        }
    }

    /// Resets the per-cycle counters (the stack and ring are empty between cycles), and
    /// the reached bits when `bits` (§3).
    pub(crate) fn begin_cycle(
        &mut self,
        limit: usize,
        chunks: &[Chunk],
        bits: ReachedBits,
        huge_pages: bool,
    ) {
        debug_assert!(self.stack.is_empty() && self.enq == self.deq && self.grays == 0);
        self.limit = limit.max(1);
        self.words_marked = 0;
        self.waterline = PB_MIN;
        self.cover(chunks, bits, huge_pages);
    }

    /// Clears the reached bits and sizes them to cover the chunks' span, or drops them
    /// (§3).
    fn cover(&mut self, chunks: &[Chunk], when: ReachedBits, huge_pages: bool) {
        self.span = 0;
        let (Some(first), Some(last)) = (chunks.first(), chunks.last()) else {
            return;
        };
        let lo = first.base as usize & !1023;
        let hi = (last.base as usize + last.words * 8).next_multiple_of(1024);
        let words: usize = chunks.iter().map(|c| c.words).sum();
        // The bits pay only in a window of heap sizes (`ReachedBits::Auto`, measured with
        // `examples/markbench`): in a heap that the last-level cache holds, headers are
        // cache hits and the first pass gains nothing; once the bitmap is more than a
        // quarter of that cache, its own misses cost more than the header misses it saves.
        // Chunks scattered over the address space would make the bitmap larger than the
        // heap's 128th. Without bits, every block goes by its header.
        let pays = match when {
            ReachedBits::Off => false,
            ReachedBits::On => true,
            ReachedBits::Auto => last_level_cache().is_some_and(|c| bits_pay(hi - lo, c)),
        };
        if !pays || hi - lo > words * 8 * 4 {
            self.bits = Vec::new();
            return;
        }
        let n = (hi - lo) / 1024;
        if self.bits.capacity() < n {
            // Fresh memory, advised before its first touch: the bits are read at random,
            // so huge pages spare their TLB misses as they do the heap's.
            self.bits = Vec::with_capacity(n + n / 4);
            if huge_pages {
                super::heap::advise_huge_pages(self.bits.as_mut_ptr(), self.bits.capacity());
            }
        }
        self.bits.clear();
        self.bits.resize(n, 0);
        self.lo8 = lo + 8;
        self.span = hi - lo;
    }

    /// True when this cycle marks with reached bits (§3).
    pub(crate) fn has_bits(&self) -> bool {
        self.span > 0
    }

    /// The ring entry of block value `v`, with what it needs next prefetched: its reached
    /// bit's word for a block the bitmap covers (`v`, the first pass), else its header
    /// (`v | 1`, the second pass at once).
    #[inline(always)]
    fn entry(bits: *const u64, lo8: usize, span: usize, v: usize) -> usize {
        let off = v.wrapping_sub(lo8);
        if off < span {
            prefetch(bits.wrapping_add(off >> 10) as usize);
            v
        } else {
            prefetch(v - 8);
            v | 1
        }
    }

    /// Colours the block at `hp` gray and records it for redarkening.
    ///
    /// # Safety
    /// `hp` is the header of a black block of this heap; `chunks` are the heap's chunks.
    #[cold]
    #[inline(never)]
    unsafe fn gray(&mut self, hp: *mut u64, chunks: &mut [Chunk]) {
        // SAFETY: hp is a live header (caller).
        let hd = unsafe { *hp };
        // SAFETY: as above.
        unsafe { *hp = (hd & !COLOUR_MASK) | GRAY };
        self.grays += 1;
        self.overflows += 1;
        if wosize(hd) > MAX_SMALL_WOSIZE {
            self.pending_large.push(hp);
        } else {
            // Small blocks live in chunks, sorted by address.
            let i = chunks.partition_point(|c| c.base <= hp) - 1;
            let c = &mut chunks[i];
            // SAFETY: hp lies in chunk i (it is a small block and chunk i is the last chunk
            // starting at or below it).
            let off = unsafe { hp.offset_from(c.base) } as usize;
            c.pending_lo = c.pending_lo.min(off);
        }
    }

    /// Pushes the fields of the black block at `hp` (with `wosz > 0` fields), or grays it
    /// when the stack is full.
    ///
    /// # Safety
    /// `hp` is the header of a black, scannable block of this heap.
    #[inline(always)]
    unsafe fn push_block(&mut self, hp: *mut u64, wosz: usize, chunks: &mut [Chunk]) {
        if self.stack.len() >= self.limit {
            // SAFETY: forwarded (caller).
            unsafe { self.gray(hp, chunks) };
            return;
        }
        // SAFETY: fields are hp+1 .. hp+1+wosz, inside the block.
        let start = unsafe { hp.add(1) };
        // SAFETY: as above (one past the last field).
        let end = unsafe { start.add(wosz) };
        self.stack.push(Range { start, end });
    }

    /// Marks the block `v` (an even word from a field, a root or the write barrier) and
    /// queues its fields for scanning.
    ///
    /// # Safety
    /// `v` is a block value of this heap that has not been freed (§1).
    #[inline]
    pub(crate) unsafe fn darken(&mut self, v: usize, chunks: &mut [Chunk]) {
        let hp = (v as *mut u64).wrapping_sub(1);
        // SAFETY: v is a live block (caller), so its header is readable.
        let hd = unsafe { *hp };
        if hd & COLOUR_MASK != WHITE {
            return;
        }
        // SAFETY: as above.
        unsafe { *hp = hd | BLACK };
        let wosz = wosize(hd);
        self.words_marked += wosz as u64 + 1;
        if tag(hd) < NO_SCAN_TAG && wosz > 0 {
            // SAFETY: hp is now black and scannable.
            unsafe { self.push_block(hp, wosz, chunks) };
        }
    }

    /// Refills the stack from gray blocks (§5). Called with an empty stack.
    fn redarken(&mut self, chunks: &mut [Chunk]) {
        while let Some(hp) = self.pending_large.pop() {
            if self.stack.len() >= self.limit {
                self.pending_large.push(hp);
                return;
            }
            // SAFETY: entries of pending_large are gray large blocks, alive while marking.
            let hd = unsafe { *hp };
            // SAFETY: as above.
            unsafe { *hp = (hd & !COLOUR_MASK) | BLACK };
            self.grays -= 1;
            // SAFETY: the block is black and was scannable when it was first pushed.
            unsafe { self.push_block(hp, wosize(hd), chunks) };
        }
        for ci in 0..chunks.len() {
            let (base, words, lo) = (chunks[ci].base, chunks[ci].words, chunks[ci].pending_lo);
            if lo == usize::MAX {
                continue;
            }
            chunks[ci].pending_lo = usize::MAX;
            let mut off = lo;
            while off < words {
                // SAFETY: off is a block boundary inside the chunk: pending_lo was a gray
                // block's offset and we step header to header (chunk doc: every word
                // belongs to a block; splitting a free block keeps its start).
                let hp = unsafe { base.add(off) };
                // SAFETY: hp is a header inside the chunk.
                let hd = unsafe { *hp };
                if hd & COLOUR_MASK == GRAY {
                    if self.stack.len() >= self.limit {
                        chunks[ci].pending_lo = chunks[ci].pending_lo.min(off);
                        return;
                    }
                    // SAFETY: as above.
                    unsafe { *hp = (hd & !COLOUR_MASK) | BLACK };
                    self.grays -= 1;
                    // SAFETY: black scannable block; the stack has room.
                    unsafe { self.push_block(hp, wosize(hd), chunks) };
                }
                off += wosize(hd) + 1;
            }
        }
    }

    /// Takes the next range off the stack, splitting a long one (the rest goes back and
    /// fits, as one entry was just popped).
    #[inline(always)]
    fn pop_range(&mut self) -> Option<Range> {
        let r = self.stack.pop()?;
        Some(self.front(r, SCAN_CHUNK))
    }

    /// The first `most` fields of `r`, a range just popped, the rest pushed back (it fits).
    #[inline(always)]
    fn front(&mut self, r: Range, most: usize) -> Range {
        // SAFETY: start and end bound one block's fields.
        let len = unsafe { r.end.offset_from(r.start) } as usize;
        if len > most {
            // SAFETY: start + most < end, inside the block.
            let mid = unsafe { r.start.add(most) };
            self.stack.push(Range { start: mid, end: r.end });
            return Range { start: r.start, end: mid };
        }
        r
    }

    /// Runs one slice of marking with `budget` units of work. Returns true when marking
    /// is complete.
    pub(crate) fn run(&mut self, marker: Marker, chunks: &mut [Chunk], budget: usize) -> bool {
        let budget = budget.min(isize::MAX as usize) as isize;
        let done = match marker {
            Marker::Prefetch => self.run_prefetch(chunks, budget),
            Marker::DepthFirst => self.run_dfs(chunks, budget),
        };
        self.max_stack = self.max_stack.max(self.stack.len());
        done
    }

    // Never inlined: a slice's loop, called once a slice (and named in profiles).
    #[inline(never)]
    fn run_prefetch(&mut self, chunks: &mut [Chunk], mut work: isize) -> bool {
        // Locals, so the loop keeps them in registers.
        let pb: *mut usize = self.pb.as_mut_ptr();
        let mut enq = self.enq;
        let mut deq = self.deq;
        let mut waterline = self.waterline;
        let mut marked = 0u64;
        let bits = self.bits.as_mut_ptr();
        let (lo8, span) = (self.lo8, self.span);
        let done = loop {
            if work <= 0 {
                break false;
            }
            let (mut p, end): (*mut u64, *mut u64);
            if enq - deq > waterline {
                // SAFETY: the index is masked into the ring.
                let e = unsafe { *pb.add(deq & PB_MASK) };
                deq += 1;
                work -= 1;
                if e & 1 == 0 {
                    // First pass: the block's reached bit, prefetched when it was queued.
                    let off = e - lo8;
                    let (i, b) = (off >> 10, (off >> 4) & 63);
                    // SAFETY: first-pass entries are covered (`entry`): off < span, so i
                    // is inside `bits`.
                    let word = unsafe { *bits.add(i) };
                    // SAFETY: as above.
                    unsafe { *bits.add(i) = word | (1 << b) };
                    // Second pass, for a block not reached before: its header, prefetched
                    // now. Without a branch on the bit, which is as often set as not: the
                    // entry is written either way and kept only if the bit was clear, and
                    // the prefetch of a block reached before goes to the ring's own line.
                    // The ring has room: an entry was just taken.
                    let new = usize::from((word >> b) & 1 == 0);
                    // A mask select (all ones when new), which compiles to no branch.
                    let own = pb as usize;
                    prefetch(own ^ (((e - 8) ^ own) & new.wrapping_neg()));
                    // SAFETY: masked index.
                    unsafe { *pb.add(enq & PB_MASK) = e | 1 };
                    enq += new;
                    continue;
                }
                let v = e & !1;
                let hp = (v as *mut u64).wrapping_sub(1);
                // SAFETY: ring entries are block values read from scanned fields (§1).
                let hd = unsafe { *hp };
                if hd & COLOUR_MASK != WHITE {
                    continue;
                }
                // SAFETY: as above.
                unsafe { *hp = hd | BLACK };
                let wosz = wosize(hd);
                marked += wosz as u64 + 1;
                if tag(hd) >= NO_SCAN_TAG {
                    continue;
                }
                p = v as *mut u64;
                if wosz <= PB_SIZE - (enq - deq) {
                    // The common case (§3): every field fits in the ring, so the scan
                    // needs no room test and nothing spills. A block this small is at most
                    // one ring's worth of words, below `SCAN_CHUNK`.
                    work -= wosz as isize;
                    for i in 0..wosz {
                        // SAFETY: i < wosz: a field of this black block.
                        let w = unsafe { *p.add(i) } as usize;
                        if w & 1 == 0 {
                            // SAFETY: masked index; the ring had room for every field.
                            unsafe { *pb.add(enq & PB_MASK) = Self::entry(bits, lo8, span, w) };
                            enq += 1;
                        }
                    }
                    // Back to fill mode once the ring is above its minimum (a move, not a
                    // branch: this runs for nearly every block).
                    waterline = if enq - deq > PB_MIN { PB_MIN } else { waterline };
                    continue;
                }
                if wosz > SCAN_CHUNK {
                    if self.stack.len() >= self.limit {
                        // SAFETY: hp is black; it will be rescanned whole.
                        unsafe { self.gray(hp, chunks) };
                        continue;
                    }
                    // SAFETY: p + SCAN_CHUNK < p + wosz: inside the block.
                    let mid = unsafe { p.add(SCAN_CHUNK) };
                    // SAFETY: one past the last field.
                    self.stack.push(Range { start: mid, end: unsafe { p.add(wosz) } });
                    end = mid;
                } else {
                    // SAFETY: one past the last field.
                    end = unsafe { p.add(wosz) };
                }
            } else if let Some(r) = self.stack.pop() {
                if r.end.is_null() {
                    // A spilled pointer (§3): back into the ring, prefetched now and read
                    // at least PB_MIN steps from now. The ring is at or below its
                    // waterline, so it has room.
                    let v = r.start as usize;
                    // SAFETY: masked index.
                    unsafe { *pb.add(enq & PB_MASK) = Self::entry(bits, lo8, span, v) };
                    enq += 1;
                    continue;
                }
                p = r.start;
                // A range is scanned as far as the ring can take its words, less a
                // margin for the blocks they reach, so a long range (a root array) fills
                // the ring instead of spilling most of its pointers; the rest goes back.
                // The ring is at or below its waterline here, so `take` is at least
                // `PB_SIZE - PB_MIN - RANGE_MARGIN`.
                let take = (PB_SIZE - (enq - deq)).saturating_sub(RANGE_MARGIN).max(1);
                let r = self.front(r, take);
                end = r.end;
            } else if enq != deq {
                waterline = 0; // drain mode
                continue;
            } else if self.grays > 0 {
                self.redarken(chunks);
                continue;
            } else {
                break true;
            }
            // SAFETY: p and end bound fields of one block.
            work -= unsafe { end.offset_from(p) };
            while p < end {
                // SAFETY: p is a field of a black block, before `end`.
                let w = unsafe { *p } as usize;
                // SAFETY: stays within or one past the range.
                p = unsafe { p.add(1) };
                if w & 1 == 0 {
                    if enq - deq < PB_SIZE {
                        // SAFETY: masked index.
                        unsafe { *pb.add(enq & PB_MASK) = Self::entry(bits, lo8, span, w) };
                        enq += 1;
                    } else if self.stack.len() < self.limit {
                        // Ring full: spill the pointer, unread, to the stack.
                        self.stack.push(Range { start: w as *mut u64, end: core::ptr::null_mut() });
                        self.max_stack = self.max_stack.max(self.stack.len());
                    } else {
                        // Both full: mark it now; its range overflows to gray (§5).
                        // SAFETY: w is a live block value (§1).
                        unsafe { self.darken(w, chunks) };
                    }
                }
            }
            if enq - deq > PB_MIN {
                waterline = PB_MIN; // fill mode
            }
        };
        self.enq = enq;
        self.deq = deq;
        self.waterline = waterline;
        self.words_marked += marked;
        done
    }

    #[inline(never)]
    fn run_dfs(&mut self, chunks: &mut [Chunk], mut work: isize) -> bool {
        debug_assert!(self.enq == self.deq);
        loop {
            if work <= 0 {
                return false;
            }
            let Some(Range { start: mut p, end }) = self.pop_range() else {
                if self.grays > 0 {
                    self.redarken(chunks);
                    continue;
                }
                return true;
            };
            // SAFETY: p and end bound fields of one block.
            work -= unsafe { end.offset_from(p) };
            while p < end {
                // SAFETY: p is a field of a black block, before `end`.
                let w = unsafe { *p } as usize;
                // SAFETY: stays within or one past the range.
                p = unsafe { p.add(1) };
                if w & 1 == 0 {
                    // SAFETY: w is a live block value (§1).
                    unsafe { self.darken(w, chunks) };
                }
            }
            if self.stack.len() > self.max_stack {
                self.max_stack = self.stack.len();
            }
        }
    }

    /// True when no marking work is queued (ring, stack, gray blocks).
    pub(crate) fn is_empty(&self) -> bool {
        self.enq == self.deq && self.stack.is_empty() && self.grays == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window where reached bits pay, on this repository's VM's 32 MiB cache: past
    /// 64 MiB of heap, up to 1 GiB (a bitmap of 8 MiB).
    #[test]
    fn reached_bits_pay_in_a_window_of_heap_sizes() {
        let llc = 32 << 20;
        assert!(!bits_pay(8 << 20, llc));
        assert!(!bits_pay(64 << 20, llc));
        assert!(bits_pay(65 << 20, llc));
        assert!(bits_pay(800 << 20, llc));
        assert!(bits_pay(1 << 30, llc));
        assert!(!bits_pay((1 << 30) + (1 << 20), llc));
        assert!(!bits_pay(2500 << 20, llc));
    }

    /// The machine's cache is read from sysfs when it lists one.
    #[test]
    fn the_last_level_cache_is_read_when_listed() {
        if std::path::Path::new("/sys/devices/system/cpu/cpu0/cache/index0/size").exists() {
            let llc = last_level_cache().expect("a cache size");
            assert!(llc >= 32 << 10, "{llc}");
        }
    }
}
