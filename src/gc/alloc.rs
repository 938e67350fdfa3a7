//! Size-classed free lists for small blocks, with the "last known free index" heuristic.
//!
//! # 1. Classes
//! A free block of `w` fields (`w >= 1`; field 0 holds the link) sits in class
//! `min(w, TOP)` where `TOP = MAX_SMALL_WOSIZE + 1` collects every larger free run (the
//! tail of a fresh chunk, runs coalesced by sweep). A request for `n` fields first pops
//! class `n` (exact fit, O(1)); otherwise it searches the classes above for a block to
//! split. The split carves the new block off the *end* of the free block, so the free
//! block keeps its start address (a chunk walk that stopped at that address stays on a
//! block boundary) and its remainder goes back to the class of its new size.
//!
//! # 2. The heuristic (Emacs bug#65491)
//! `last_known` is the class that most recently received a free block. The search for a
//! block to split starts at `max(n + 2, last_known)`: classes below it are not searched,
//! even if they hold blocks. Sweep resets `last_known` to "nothing known" (`NCLASSES`)
//! before it rebuilds the lists, and every run it frees moves it, exactly like Emacs's
//! `sweep_vectors`/`setup_on_free_list`: when sweep found nothing free the search is
//! skipped entirely. The heuristic may pass over usable blocks (the price is a little
//! fragmentation) in exchange for not scanning hundreds of empty list heads on every
//! miss. The TOP list is looked at (O(1)) before the heap grows, so a skipped search costs
//! at most one pop, never a chunk. With the heuristic off, the search always starts at
//! `n + 2` — that is what `benches/freelist.rs` compares against.
//!
//! # 3. Invariants
//! Every block on list `c` is blue, has `min(wosize, TOP) == c`, lies inside a chunk, and
//! is on exactly one list. A block handed out is removed from its list before its header
//! is rewritten, so the allocator never hands out a block in use.

use super::heap::{make_header, wosize, BLUE, MAX_SMALL_WOSIZE};

/// The class of runs larger than any small block.
pub(crate) const TOP: usize = MAX_SMALL_WOSIZE + 1;
/// Number of classes (index 0 unused: a 0-field free block has no room for a link).
pub(crate) const NCLASSES: usize = TOP + 1;

/// The free lists of the small-block heap.
pub(crate) struct FreeLists {
    heads: [*mut u64; NCLASSES],
    /// The class that last received a free block (`NCLASSES`: none since the last sweep).
    pub last_known: usize,
    /// Use the heuristic.
    pub heuristic: bool,
    /// Free words on the lists.
    pub free_words: usize,
    /// Classes examined by split searches (for the benchmark and tests).
    pub probes: u64,
}

impl FreeLists {
    pub(crate) fn new(heuristic: bool) -> Self {
        FreeLists {
            heads: [core::ptr::null_mut(); NCLASSES],
            last_known: NCLASSES,
            heuristic,
            free_words: 0,
            probes: 0,
        }
    }

    /// Empties every list (sweep rebuilds them) and forgets `last_known`.
    pub(crate) fn clear(&mut self) {
        self.heads = [core::ptr::null_mut(); NCLASSES];
        self.last_known = NCLASSES;
        self.free_words = 0;
    }

    /// Turns the run of `whsize` words at `hdr` into a free block and lists it (a run of
    /// one word becomes an unlisted fragment).
    ///
    /// # Safety
    /// `[hdr, hdr + whsize)` lies in a chunk, is owned by no block in use and by no list.
    #[inline]
    pub(crate) unsafe fn push(&mut self, hdr: *mut u64, whsize: usize) {
        let w = whsize - 1;
        // SAFETY: hdr is in a chunk and the run is free (caller's guarantee).
        unsafe { *hdr = make_header(w, BLUE, 0) };
        if w == 0 {
            return;
        }
        let c = w.min(TOP);
        // SAFETY: w >= 1, so field 0 (hdr + 1) is inside the run.
        unsafe { *hdr.add(1) = self.heads[c] as u64 };
        self.heads[c] = hdr;
        self.last_known = c;
        self.free_words += whsize;
    }

    /// Pops the head of class `c`.
    ///
    /// # Safety
    /// List invariants hold (module doc §3).
    #[inline]
    unsafe fn pop(&mut self, c: usize) -> *mut u64 {
        let h = self.heads[c];
        if !h.is_null() {
            // SAFETY: a listed block has a link in field 0.
            self.heads[c] = unsafe { *h.add(1) } as *mut u64;
        }
        h
    }

    /// Takes a free run of exactly `n + 1` words (for a block of `n` fields,
    /// `1 <= n <= MAX_SMALL_WOSIZE`) and returns its first word, or null when the lists
    /// cannot serve the request (the caller grows the heap). The header is not written.
    ///
    /// # Safety
    /// List invariants hold (module doc §3).
    #[inline]
    pub(crate) unsafe fn take(&mut self, n: usize) -> *mut u64 {
        debug_assert!((1..=MAX_SMALL_WOSIZE).contains(&n));
        // SAFETY: list invariants (caller).
        let h = unsafe { self.pop(n) };
        if !h.is_null() {
            self.free_words -= n + 1;
            return h;
        }
        let from = if self.heuristic { (n + 2).max(self.last_known) } else { n + 2 };
        let mut c = from;
        while c < NCLASSES {
            self.probes += 1;
            if !self.heads[c].is_null() {
                // SAFETY: list invariants (caller); class c is non-empty.
                return unsafe { self.split(c, n) };
            }
            c += 1;
        }
        if from > TOP && !self.heads[TOP].is_null() {
            // SAFETY: as above; the TOP list is non-empty.
            return unsafe { self.split(TOP, n) };
        }
        core::ptr::null_mut()
    }

    /// Pops a block of class `c` (whose blocks have at least `n + 1` fields) and carves
    /// `n + 1` words off its end.
    ///
    /// # Safety
    /// Class `c` is non-empty and list invariants hold.
    #[inline]
    unsafe fn split(&mut self, c: usize, n: usize) -> *mut u64 {
        // SAFETY: class c is non-empty (caller).
        let h = unsafe { self.pop(c) };
        // SAFETY: h is a listed (blue) block; its header is readable.
        let w = wosize(unsafe { *h });
        debug_assert!(w > n);
        self.free_words -= w + 1;
        let rest = w - n; // whsize of the remainder (>= 1)
                          // SAFETY: the remainder [h, h + rest) is the front of the run we just unlisted.
        unsafe { self.push(h, rest) };
        // SAFETY: h + rest + n + 1 == h + w + 1, the end of the run: still inside it.
        unsafe { h.add(rest) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_fit_then_split_from_top() {
        let mut mem = vec![0u64; 1024];
        let base = mem.as_mut_ptr();
        let mut fl = FreeLists::new(true);
        // SAFETY: the vector is a private run of 1024 words.
        unsafe {
            fl.push(base, 1024);
            let a = fl.take(3);
            assert_eq!(a, base.add(1020));
            assert_eq!(fl.last_known, TOP);
            fl.push(a, 4);
            assert_eq!(fl.last_known, 3);
            assert_eq!(fl.take(3), a);
            // With last_known = TOP, classes below are skipped.
            let b = fl.take(5);
            assert_eq!(b, base.add(1020 - 6));
        }
    }

    #[test]
    fn heuristic_skips_lower_classes() {
        let mut mem = vec![0u64; 1024];
        let base = mem.as_mut_ptr();
        let mut fl = FreeLists::new(true);
        // SAFETY: disjoint runs of a private vector.
        unsafe {
            fl.push(base, 11); // class 10
            fl.push(base.add(100), 31); // class 30, last_known = 30
            assert_eq!(fl.take(2), base.add(100 + 31 - 3));
            fl.clear();
            assert_eq!(fl.take(2), core::ptr::null_mut());
        }
        let mut fl = FreeLists::new(false);
        // SAFETY: as above.
        unsafe {
            fl.push(base.add(100), 31);
            fl.push(base, 11);
            assert_eq!(fl.take(2), base.add(11 - 3));
        }
    }
}
