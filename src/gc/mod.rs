//! The managed heap: OCaml-style blocks, size-classed free lists, an incremental
//! prefetching marker, sweep, structural compare/hash and per-cycle timing — all seen by
//! memprof's sampler like any other allocator.
//!
//! # 1. The embedder's contract
//! A [`Value`] is an immediate integer or a block of this heap (layout in `gc/heap.rs`). Values
//! are plain words, like OCaml values in C stubs: a block stays valid as long as it is
//! reachable from a root at every collection point ([`Heap::major_slice`],
//! [`Heap::major_cycle`]). Allocation never collects. Functions that dereference or store
//! a value are `unsafe fn`s whose contract is exactly that: the value is an integer or a
//! live block *of this heap*. This is what keeps the heap free of naked pointers: the only
//! words ever stored in scanned fields are values that came from this heap, so the
//! marker, `compare` and `hash` follow pointers without checking them.
//!
//! # 2. Phases and the write barrier
//! `Idle` → (first slice: roots darkened) → `Mark` (slices) → sweep (in the slice that
//! completes marking) → `Idle`. Marking is snapshot-at-the-beginning, as in OCaml: during
//! `Mark`, [`Heap::set_field`] shades the *old* field value before overwriting it, and new
//! blocks are allocated black. Every block reachable when the cycle started is therefore
//! marked (a path to it can only be cut by an overwrite, which shades the old target), and
//! the mutator can only obtain values that were reachable then or allocated since, so
//! nothing it can still reach is swept. Root writes need no barrier: roots are darkened at
//! the start, and a value newly stored in a root is one the mutator could reach. Garbage
//! made during a cycle is collected by the next one.
//!
//! # 3. What allocates where
//! Chunks and large blocks come from `std::alloc::System` directly, never through the
//! global allocator, so a `Sampled<System>` global allocator does not sample heap memory
//! twice. Each block allocation calls [`crate::engine::alloc::on_alloc`] with the block's header
//! address and its size in bytes (header included); sweep calls
//! [`crate::engine::alloc::on_dealloc`] for every dead block before its memory can be reused. The
//! marker's stack and reached bits, the root table and the cycle records are ordinary Rust
//! collections.
//!
//! # 4. Timing
//! Each cycle yields a [`CycleRecord`]: mark time summed over slices, slice count, longest
//! slice, words marked, ns per word, sweep time, heap and live words. [`Heap::cycles`]
//! keeps them; [`Heap::set_cycle_hook`] streams them out as cycles end, and every cycle is
//! reported to the running profiling session ([`crate::session::record_gc_cycle`]), which puts it in
//! the profile beside the samples: `memprof report --view gc` attributes mark time to
//! allocation sites.

mod alloc;
mod compare;
mod cycles;
mod heap;
mod mark;
mod profiler;
mod sweep;

use core::cmp::Ordering;

pub use compare::{HASH_MEANINGFUL, HASH_TOTAL, RECORD_AFTER};
pub use cycles::{CycleRecord, HeapTotals};
pub use heap::{Value, DOUBLE_ARRAY_TAG, MAX_SMALL_WOSIZE, NO_SCAN_TAG, STRING_TAG};
pub use mark::Marker;
pub use profiler::under_record;

use crate::engine::clock::monotonic_ns;
use alloc::FreeLists;
use heap::{make_header, system_alloc, system_free, Chunk, Large, BLACK, WHITE};
use mark::MarkState;

/// Settings of a [`Heap`].
#[derive(Clone, Debug, PartialEq)]
pub struct HeapConfig {
    /// Marking strategy.
    pub marker: Marker,
    /// Smallest chunk the heap grows by, in bytes (chunks also grow with the heap: each new
    /// chunk is at least a quarter of the current heap).
    pub chunk_bytes: usize,
    /// Emacs's "last known free index" heuristic (bug#65491) in the free lists.
    pub free_list_heuristic: bool,
    /// Most entries (16 bytes each) the mark stack may hold before blocks are grayed for a
    /// later rescan; 0 = automatic: a sixteenth of the heap's words (at least 65536).
    pub mark_stack_limit: usize,
    /// Ask the kernel for transparent huge pages for the chunks (`MADV_HUGEPAGE` on their
    /// 2 MiB-aligned part, so chunks of 2 MiB or less are never concerned): a marker's
    /// random visits then miss the TLB less often (`examples/markbench.rs` measures both
    /// settings, and the machine's limit under each). The cost is resident memory: a chunk's
    /// first touch of a 2 MiB range makes all of it resident.
    pub huge_pages: bool,
    /// The prefetching marker's reached bits (`gc::mark` §3): a side bitmap of one bit per
    /// 16 bytes of the chunks' span (a 128th of the heap), so that a pointer to a block
    /// marked already costs a bit in cache instead of a header read from memory.
    pub reached_bits: ReachedBits,
}

/// When the prefetching marker keeps its reached bits ([`HeapConfig::reached_bits`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReachedBits {
    /// In the window of heap sizes where they pay (`examples/markbench.rs` measures it):
    /// a heap more than twice the last-level cache, whose bitmap is at most a quarter of
    /// it. A heap the cache holds has its headers in cache already; a larger bitmap misses
    /// the cache itself. Off when the cache's size is unknown.
    #[default]
    Auto,
    /// Whatever the heap's size (unless its chunks are scattered over more than four times
    /// their size of address space).
    On,
    /// Never: saves the bitmap's memory.
    Off,
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig {
            marker: Marker::Prefetch,
            chunk_bytes: 1 << 20,
            free_list_heuristic: true,
            mark_stack_limit: 0,
            huge_pages: true,
            reached_bits: ReachedBits::Auto,
        }
    }
}

/// A callback that receives each cycle's record as the cycle ends.
pub type CycleHook = Box<dyn FnMut(&CycleRecord)>;

/// A registered root: the collector treats the value in its slot as reachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RootId(u32);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Idle,
    Mark,
}

/// A garbage-collected heap of OCaml-style blocks (see the module documentation).
pub struct Heap {
    config: HeapConfig,
    /// Sorted by address.
    chunks: Vec<Chunk>,
    large: Vec<Large>,
    free: FreeLists,
    roots: Vec<Value>,
    root_used: Vec<bool>,
    root_free: Vec<u32>,
    phase: Phase,
    marker: Marker,
    mark: MarkState,
    current: CycleRecord,
    cycles: Vec<CycleRecord>,
    hook: Option<CycleHook>,
    /// Where blocks and cycles are reported (this process, or `memprof record`'s session).
    profiler: profiler::Hooks,
    chunk_words: usize,
    large_words: usize,
    live_words: usize,
    allocated_words: u64,
    allocated_blocks: u64,
}

impl std::fmt::Debug for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heap")
            .field("config", &self.config)
            .field("chunks", &self.chunks.len())
            .field("large", &self.large.len())
            .field("roots", &self.root_used.iter().filter(|u| **u).count())
            .field("live_words", &self.live_words)
            .field("allocated_words", &self.allocated_words)
            .field("allocated_blocks", &self.allocated_blocks)
            .field("cycles", &self.cycles.len())
            .finish_non_exhaustive()
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        for c in &self.chunks {
            // SAFETY: each chunk came from system_alloc(c.words) and is freed once, here.
            unsafe { system_free(c.base, c.words) };
        }
        for b in &self.large {
            // SAFETY: as above for large blocks.
            unsafe { system_free(b.hdr, b.whsize) };
        }
    }
}

impl Default for Heap {
    fn default() -> Self {
        Heap::new(HeapConfig::default())
    }
}

impl Heap {
    /// An empty heap (no memory until the first allocation).
    pub fn new(config: HeapConfig) -> Heap {
        Heap {
            chunks: Vec::new(),
            large: Vec::new(),
            free: FreeLists::new(config.free_list_heuristic),
            roots: Vec::new(),
            root_used: Vec::new(),
            root_free: Vec::new(),
            phase: Phase::Idle,
            marker: config.marker,
            mark: MarkState::new(),
            current: CycleRecord::default(),
            cycles: Vec::new(),
            hook: None,
            profiler: profiler::Hooks::resolve(),
            chunk_words: 0,
            large_words: 0,
            live_words: 0,
            allocated_words: 0,
            allocated_blocks: 0,
            config,
        }
    }

    /// The settings this heap was made with (and the marker set since).
    pub fn config(&self) -> &HeapConfig {
        &self.config
    }

    /// Chooses the marker for the next cycle (a cycle in progress keeps its marker).
    pub fn set_marker(&mut self, marker: Marker) {
        self.config.marker = marker;
    }

    /// Sets when the prefetching marker keeps its reached bits, from the next cycle
    /// ([`HeapConfig::reached_bits`]).
    pub fn set_reached_bits(&mut self, when: ReachedBits) {
        self.config.reached_bits = when;
    }

    /// True while a cycle is marking (between slices).
    pub fn is_marking(&self) -> bool {
        self.phase == Phase::Mark
    }

    // -----------------------------------------------------------------------------------
    // Allocation

    fn grow(&mut self, min_words: usize) {
        let total = self.chunk_words + self.large_words;
        let words = (self.config.chunk_bytes / 8).max(total / 4).max(min_words).max(64);
        let words = (words + 511) & !511;
        let base = system_alloc(words);
        if base.is_null() {
            std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(words * 8, heap::ALIGN)
                    .unwrap_or(std::alloc::Layout::new::<u64>()),
            );
        }
        if self.config.huge_pages {
            // Before the free list's first write touches the chunk: pages are chosen when
            // first touched.
            heap::advise_huge_pages(base, words);
        }
        let at = self.chunks.partition_point(|c| c.base < base);
        self.chunks.insert(at, Chunk { base, words, pending_lo: usize::MAX });
        self.chunk_words += words;
        // SAFETY: the new chunk is a fresh run owned by nothing.
        unsafe { self.free.push(base, words) };
    }

    /// Allocates a block with `tag` and `wosize` fields: scanned fields start as
    /// [`Value::UNIT`], opaque ones (`tag >= NO_SCAN_TAG`) as zero words. Never collects.
    pub fn alloc(&mut self, tag: u8, wosize: usize) -> Value {
        let colour = if self.phase == Phase::Mark { BLACK } else { WHITE };
        let fill = if tag >= NO_SCAN_TAG { 0 } else { Value::UNIT.0 as u64 };
        let hp = if wosize > MAX_SMALL_WOSIZE {
            let whsize = wosize + 1;
            let hp = system_alloc(whsize);
            if hp.is_null() {
                std::alloc::handle_alloc_error(
                    std::alloc::Layout::from_size_align(whsize * 8, heap::ALIGN)
                        .unwrap_or(std::alloc::Layout::new::<u64>()),
                );
            }
            self.large.push(Large { hdr: hp, whsize });
            self.large_words += whsize;
            hp
        } else {
            let n = wosize.max(1);
            // SAFETY: the free lists hold only free runs of our chunks.
            let mut hp = unsafe { self.free.take(n) };
            if hp.is_null() {
                self.grow(n + 1);
                // SAFETY: as above; the new chunk can serve any small request.
                hp = unsafe { self.free.take(n) };
                debug_assert!(!hp.is_null());
            }
            if wosize == 0 {
                // A 0-field block in a 2-word run: the second word stays a free fragment,
                // so that headers of blocks are at least 16 bytes apart (the marker's
                // reached bits are one per 16 bytes, `mark` §3).
                // SAFETY: hp is a fresh 2-word run.
                unsafe { *hp.add(1) = make_header(0, heap::BLUE, 0) };
            }
            hp
        };
        // SAFETY: hp is a fresh run of wosize + 1 words owned by this call.
        unsafe {
            *hp = make_header(wosize, colour, tag);
            for i in 1..=wosize {
                *hp.add(i) = fill;
            }
        }
        self.allocated_words += wosize as u64 + 1;
        self.allocated_blocks += 1;
        self.profiler.alloc(hp as *mut u8, (wosize + 1) * 8);
        Value(hp as usize + 8)
    }

    /// Allocates a string block holding `bytes` (opaque: never scanned).
    pub fn alloc_bytes(&mut self, bytes: &[u8]) -> Value {
        let wosize = bytes.len() / 8 + 1;
        let v = self.alloc(STRING_TAG, wosize);
        let p = v.fields_ptr() as *mut u8;
        // SAFETY: the block has wosize * 8 > bytes.len() bytes; the last byte records the
        // padding (wosize * 8 - 1 - len < 8), OCaml's string layout.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
            *p.add(wosize * 8 - 1) = (wosize * 8 - 1 - bytes.len()) as u8;
        }
        v
    }

    /// Allocates a float array block (opaque: never scanned).
    pub fn alloc_floats(&mut self, xs: &[f64]) -> Value {
        let v = self.alloc(DOUBLE_ARRAY_TAG, xs.len());
        for (i, x) in xs.iter().enumerate() {
            // SAFETY: i < xs.len() fields.
            unsafe { *v.fields_ptr().add(i) = x.to_bits() };
        }
        v
    }

    // -----------------------------------------------------------------------------------
    // Access

    /// Number of fields of block `v`.
    ///
    /// # Safety
    /// `v` is a live block of this heap (module doc §1).
    pub unsafe fn size(&self, v: Value) -> usize {
        assert!(v.is_block(), "size of an integer");
        // SAFETY: v is a live block (caller).
        heap::wosize(unsafe { *v.header_ptr() })
    }

    /// Tag of block `v`.
    ///
    /// # Safety
    /// As for [`Heap::size`].
    pub unsafe fn tag(&self, v: Value) -> u8 {
        assert!(v.is_block(), "tag of an integer");
        // SAFETY: v is a live block (caller).
        heap::tag(unsafe { *v.header_ptr() })
    }

    /// Field `i` of the scanned block `v`. Panics when `i` is out of range or `v` is opaque.
    ///
    /// # Safety
    /// As for [`Heap::size`].
    #[inline]
    pub unsafe fn field(&self, v: Value, i: usize) -> Value {
        // SAFETY: v is a live block (caller).
        let hd = unsafe { *v.header_ptr() };
        assert!(v.is_block() && heap::tag(hd) < NO_SCAN_TAG && i < heap::wosize(hd));
        // SAFETY: i < wosize.
        Value(unsafe { *v.fields_ptr().add(i) } as usize)
    }

    /// Stores `x` in field `i` of the scanned block `v`, with the write barrier (module
    /// doc §2). Panics when `i` is out of range or `v` is opaque.
    ///
    /// # Safety
    /// `v` is a live block of this heap and `x` an integer or a live block of this heap.
    #[inline]
    pub unsafe fn set_field(&mut self, v: Value, i: usize, x: Value) {
        // SAFETY: v is a live block (caller).
        let hd = unsafe { *v.header_ptr() };
        assert!(v.is_block() && heap::tag(hd) < NO_SCAN_TAG && i < heap::wosize(hd));
        // SAFETY: i < wosize.
        let slot = unsafe { v.fields_ptr().add(i) };
        if self.phase == Phase::Mark {
            // SAFETY: slot is a field of a live block.
            let old = unsafe { *slot } as usize;
            if old & 1 == 0 {
                // SAFETY: the old value is a live block of this heap (invariant).
                unsafe { self.mark.darken(old, &mut self.chunks) };
            }
        }
        // SAFETY: as above.
        unsafe { *slot = x.0 as u64 };
    }

    /// The bytes of string block `v`. Panics if `v` is not a string.
    ///
    /// # Safety
    /// As for [`Heap::size`]; the slice must not outlive the block (a collection that
    /// frees it).
    pub unsafe fn bytes(&self, v: Value) -> &[u8] {
        // SAFETY: v is a live block (caller).
        assert!(v.is_block() && heap::tag(unsafe { *v.header_ptr() }) == STRING_TAG);
        // SAFETY: a live string block.
        unsafe { compare::string_bytes(v) }
    }

    /// The floats of float-array block `v`. Panics if `v` is not a float array.
    ///
    /// # Safety
    /// As for [`Heap::bytes`].
    pub unsafe fn floats(&self, v: Value) -> Vec<f64> {
        // SAFETY: v is a live block (caller).
        assert!(v.is_block() && heap::tag(unsafe { *v.header_ptr() }) == DOUBLE_ARRAY_TAG);
        // SAFETY: a live opaque block.
        unsafe { compare::raw_words(v) }.iter().map(|w| f64::from_bits(*w)).collect()
    }

    /// Structural comparison (`gc/compare.rs`: OCaml's `compare` on values).
    ///
    /// # Safety
    /// `a` and `b` are integers or live blocks of this heap.
    pub unsafe fn compare(&self, a: Value, b: Value) -> Ordering {
        // SAFETY: forwarded.
        unsafe { compare::compare(a, b) }
    }

    /// Structural hash (`gc/compare.rs`: breadth-first like OCaml's `caml_hash`).
    ///
    /// # Safety
    /// `v` is an integer or a live block of this heap.
    pub unsafe fn hash(&self, v: Value) -> u64 {
        // SAFETY: forwarded.
        unsafe { compare::hash(v) }
    }

    /// True when `addr` lies inside this heap's chunks or large blocks (for tools and
    /// tests; the collector itself never asks).
    pub fn contains(&self, addr: usize) -> bool {
        let in_chunk = self.chunks.iter().any(|c| {
            let b = c.base as usize;
            addr >= b && addr < b + c.words * 8
        });
        in_chunk
            || self.large.iter().any(|l| {
                let b = l.hdr as usize;
                addr >= b && addr < b + l.whsize * 8
            })
    }

    // -----------------------------------------------------------------------------------
    // Roots

    /// Registers `v` as a root.
    ///
    /// # Safety
    /// `v` is an integer or a live block of this heap.
    pub unsafe fn register_root(&mut self, v: Value) -> RootId {
        if let Some(i) = self.root_free.pop() {
            self.roots[i as usize] = v;
            self.root_used[i as usize] = true;
            return RootId(i);
        }
        self.roots.push(v);
        self.root_used.push(true);
        RootId((self.roots.len() - 1) as u32)
    }

    /// Forgets a root. Panics if it is not registered.
    pub fn unregister_root(&mut self, id: RootId) {
        assert!(self.root_used[id.0 as usize], "root {id:?} is not registered");
        self.root_used[id.0 as usize] = false;
        self.roots[id.0 as usize] = Value::UNIT;
        self.root_free.push(id.0);
    }

    /// The value of a root.
    pub fn root_get(&self, id: RootId) -> Value {
        assert!(self.root_used[id.0 as usize], "root {id:?} is not registered");
        self.roots[id.0 as usize]
    }

    /// Changes the value of a root.
    ///
    /// # Safety
    /// `v` is an integer or a live block of this heap.
    pub unsafe fn root_set(&mut self, id: RootId, v: Value) {
        assert!(self.root_used[id.0 as usize], "root {id:?} is not registered");
        self.roots[id.0 as usize] = v;
    }

    // -----------------------------------------------------------------------------------
    // Collection

    fn start_cycle(&mut self) {
        self.phase = Phase::Mark;
        self.marker = self.config.marker;
        let limit = match self.config.mark_stack_limit {
            0 => ((self.chunk_words + self.large_words) / 16).max(1 << 16),
            n => n,
        };
        let bits = match self.marker {
            Marker::Prefetch => self.config.reached_bits,
            Marker::DepthFirst => ReachedBits::Off,
        };
        self.mark.begin_cycle(limit, &self.chunks, bits, self.config.huge_pages);
        let reached_bits = self.mark.has_bits();
        self.current = CycleRecord {
            start_ns: monotonic_ns(),
            marker: self.marker,
            overflows: self.mark.overflows,
            reached_bits,
            ..CycleRecord::default()
        };
        for i in 0..self.roots.len() {
            let v = self.roots[i];
            if v.is_block() {
                // SAFETY: registered roots are live blocks of this heap (register contract).
                unsafe { self.mark.darken(v.0, &mut self.chunks) };
            }
        }
    }

    /// Runs one increment of the major GC: starts a cycle if none is running, marks with a
    /// budget of about `budget_words` words scanned, and sweeps once marking completes.
    /// Returns true when this slice completed a cycle.
    pub fn major_slice(&mut self, budget_words: usize) -> bool {
        let t0 = monotonic_ns();
        if self.phase == Phase::Idle {
            self.start_cycle();
        }
        let done = self.mark.run(self.marker, &mut self.chunks, budget_words.max(1));
        let t1 = monotonic_ns();
        let slice = t1.saturating_sub(t0);
        self.current.mark_ns += slice;
        self.current.slices += 1;
        self.current.longest_slice_ns = self.current.longest_slice_ns.max(slice);
        if done {
            debug_assert!(self.mark.is_empty());
            // SAFETY: marking is complete; these are the heap's own structures.
            let s = unsafe {
                sweep::sweep(&mut self.chunks, &mut self.large, &mut self.free, &self.profiler)
            };
            self.large_words = self.large.iter().map(|b| b.whsize).sum();
            self.live_words = s.live_words;
            let t2 = monotonic_ns();
            let c = &mut self.current;
            c.end_ns = t2;
            c.sweep_ns = t2.saturating_sub(t1);
            c.words_marked = self.mark.words_marked;
            c.ns_per_word =
                if c.words_marked > 0 { c.mark_ns as f64 / c.words_marked as f64 } else { 0.0 };
            c.heap_words = (self.chunk_words + self.large_words) as u64;
            c.live_words = s.live_words as u64;
            c.overflows = self.mark.overflows - c.overflows;
            self.phase = Phase::Idle;
            let rec = core::mem::take(&mut self.current);
            if let Some(h) = self.hook.as_mut() {
                h(&rec);
            }
            // Into the running profiling session (if any), after the samples before it.
            self.profiler.cycle(&crate::profile::GcCycle {
                cycle: self.cycles.len() as u64 + 1,
                start_ns: rec.start_ns,
                end_ns: rec.end_ns,
                mark_ns: rec.mark_ns,
                slices: u64::from(rec.slices),
                longest_slice_ns: rec.longest_slice_ns,
                words_marked: rec.words_marked,
                ns_per_word: rec.ns_per_word,
                sweep_ns: rec.sweep_ns,
                heap_words: rec.heap_words,
                live_words: rec.live_words,
            });
            self.cycles.push(rec);
        }
        done
    }

    /// A full major collection: finishes the cycle in progress (if any), then runs a
    /// complete new one, so everything unreachable now is freed.
    pub fn major_cycle(&mut self) {
        if self.phase == Phase::Mark {
            while !self.major_slice(usize::MAX) {}
        }
        while !self.major_slice(usize::MAX) {}
    }

    /// Records of the completed cycles, oldest first.
    pub fn cycles(&self) -> &[CycleRecord] {
        &self.cycles
    }

    /// Calls `hook` with the record of every cycle as it completes.
    pub fn set_cycle_hook(&mut self, hook: CycleHook) {
        self.hook = Some(hook);
    }

    /// Heap totals now.
    pub fn stats(&self) -> HeapTotals {
        HeapTotals {
            heap_words: self.chunk_words + self.large_words,
            chunk_words: self.chunk_words,
            large_words: self.large_words,
            chunks: self.chunks.len(),
            large_blocks: self.large.len(),
            free_words: self.free.free_words,
            live_words: self.live_words,
            allocated_words: self.allocated_words,
            allocated_blocks: self.allocated_blocks,
            cycles: self.cycles.len() as u64,
            free_list_probes: self.free.probes,
            mark_stack_overflows: self.mark.overflows,
            max_mark_stack: self.mark.max_stack,
            roots: self.roots.len() - self.root_free.len(),
        }
    }
}
