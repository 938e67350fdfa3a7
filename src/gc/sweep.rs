//! Sweep: dead blocks back to the free lists (coalesced), dead large blocks freed, and the
//! death of every block reported to the profiler first.
//!
//! # 1. Order of events
//! Sweep runs in one step, right after marking completes (so the mutator never allocates
//! into a half-swept chunk, and allocation colour depends only on the phase). For every
//! white block it calls `crate::engine::alloc::on_dealloc(header)` *before* the memory can be
//! reused: that is one load from the live-table filter for an unsampled block, and a
//! dealloc event for a sampled one.
//!
//! # 2. Coalescing and the free lists
//! The free lists are rebuilt from scratch: each maximal run of dead and free blocks in a
//! chunk becomes one free block, listed in its class. `FreeLists::clear` resets the
//! "last known free index" first (Emacs's `sweep_vectors` (bug#65491)), and every listed run moves
//! it. Surviving blocks are whitened for the next cycle.

use super::alloc::FreeLists;
use super::heap::{system_free, wosize, Chunk, Large, BLUE, COLOUR_MASK, WHITE};

/// What a sweep found.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Swept {
    pub live_words: usize,
    pub freed_words: usize,
    pub freed_blocks: usize,
}

/// Sweeps every chunk and large block.
///
/// # Safety
/// Marking is complete (no gray blocks; every reachable block is black), `chunks` and
/// `large` are the heap's own, and `free` is its free-list set.
pub(crate) unsafe fn sweep(
    chunks: &mut [Chunk],
    large: &mut Vec<Large>,
    free: &mut FreeLists,
    profiler: &super::profiler::Hooks,
) -> Swept {
    let mut s = Swept::default();
    free.clear();
    for c in chunks.iter() {
        let mut p = c.base;
        // SAFETY: one past the end of the chunk's allocation.
        let end = unsafe { c.base.add(c.words) };
        let mut run: *mut u64 = core::ptr::null_mut();
        while p < end {
            // SAFETY: p is a block boundary inside the chunk (every word belongs to a block).
            let hd = unsafe { *p };
            let wh = wosize(hd) + 1;
            match hd & COLOUR_MASK {
                WHITE => {
                    profiler.free(p as *mut u8);
                    s.freed_words += wh;
                    s.freed_blocks += 1;
                    if run.is_null() {
                        run = p;
                    }
                }
                BLUE => {
                    if run.is_null() {
                        run = p;
                    }
                }
                _ => {
                    if !run.is_null() {
                        // SAFETY: [run, p) is dead or free memory of this chunk, unlisted
                        // (the lists were cleared).
                        unsafe { free.push(run, p.offset_from(run) as usize) };
                        run = core::ptr::null_mut();
                    }
                    // SAFETY: p is a live header.
                    unsafe { *p = hd & !COLOUR_MASK };
                    s.live_words += wh;
                    if wh == 1 {
                        // A 0-field block's second word is its padding (`Heap::alloc`),
                        // kept out of the free lists while the block lives: a block
                        // allocated there would have its header 8 bytes from this one,
                        // within one of the marker's reached bits (`mark` §3).
                        // SAFETY: the padding word is inside the chunk, after p.
                        p = unsafe { p.add(1) };
                    }
                }
            }
            // SAFETY: the next block starts right after this one (or at `end`).
            p = unsafe { p.add(wh) };
        }
        if !run.is_null() {
            // SAFETY: as above, [run, end).
            unsafe { free.push(run, end.offset_from(run) as usize) };
        }
    }
    large.retain(|b| {
        // SAFETY: b.hdr is the header of a large block owned by the heap.
        let hd = unsafe { *b.hdr };
        if hd & COLOUR_MASK == WHITE {
            profiler.free(b.hdr as *mut u8);
            s.freed_words += b.whsize;
            s.freed_blocks += 1;
            // SAFETY: allocated by system_alloc(b.whsize); unreachable, so never used again.
            unsafe { system_free(b.hdr, b.whsize) };
            false
        } else {
            // SAFETY: as above.
            unsafe { *b.hdr = hd & !COLOUR_MASK };
            s.live_words += b.whsize;
            true
        }
    });
    s
}
