//! The queue's cells (§2a): an event takes as many 128-byte cells as its call stack needs,
//! one after another in the ring, instead of a slot sized for the deepest stack.
//!
//! # 2a. Cells
//! A slot sized for `depth` frames (a kibibyte at the default depth) held a free, which has
//! no frames, as it held the deepest stack: the ring of the exact mode, where most events
//! are frees and allocations' stacks are a few dozen frames, was tens of mebibytes of the
//! program's memory, each event on a page of its own. So the ring is of cells of
//! [`CELL`] bytes. An event's first cell holds its head (sequence number, owner, event,
//! frame count) and its first [`FIRST_FRAMES`] frames; each further cell holds a sequence
//! number and [`MORE_FRAMES`] frames ([`cells_for`]). A producer claims all of an event's
//! cells with one compare-and-swap on the tail (in cells), after it saw the last of them
//! handed back a lap ago: the consumer hands an event's cells back in order, the last
//! one last, so the last one free means all are. The first cell's sequence number
//! publishes the event; the others' are only ever the hand-back. Positions, the tail, the
//! head, the limit and a sleeping consumer's fill all count cells. An event goes into an
//! empty ring whatever the limit, so a limit below the deepest event's cells (a session's
//! small capacity) still lets every event through, one at a time.

use super::{Queue, SlotHead};
use core::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of a cell.
pub(super) const CELL: usize = 128;
/// Frames in an event's first cell, after its head.
pub(super) const FIRST_FRAMES: usize = (CELL - size_of::<SlotHead>()) / 8;
/// Frames in each further cell, after its sequence number.
pub(super) const MORE_FRAMES: usize = (CELL - 8) / 8;

const _: () = assert!(size_of::<SlotHead>() % 8 == 0 && FIRST_FRAMES >= 1);

/// Cells an event of `frames` frames takes.
#[inline(always)]
pub(super) fn cells_for(frames: usize) -> usize {
    1 + frames.saturating_sub(FIRST_FRAMES).div_ceil(MORE_FRAMES)
}

/// The geometry of a queue of `capacity` cells whose events keep at most `depth` frames:
/// (cells, bytes of the whole block). The cells are a power of two, at least the deepest
/// event's.
pub(super) fn geometry(capacity: usize, depth: usize) -> Option<(usize, usize)> {
    let cap = capacity.max(cells_for(depth)).max(2).checked_next_power_of_two()?;
    let bytes = CELL.checked_mul(cap)?.checked_add(super::CTL_BYTES)?;
    Some((cap, bytes))
}

impl Queue {
    /// The first word of the cell at `pos`: its sequence number.
    #[inline(always)]
    pub(super) fn cell_seq(&self, pos: usize) -> &AtomicUsize {
        // SAFETY: (pos & mask) < cells, so the cell lies inside the block; every cell
        // starts with its sequence number (an event's first with `SlotHead::seq`).
        unsafe { &*(self.base.add((pos & self.mask) * CELL) as *const AtomicUsize) }
    }

    /// True when the event whose first cell is at `pos` is published: its sequence number,
    /// stored relative to the cell's index, is `pos + 1` (`SlotHead::seq`). An Acquire
    /// load: a `true` makes the producer's writes of the event visible.
    #[inline(always)]
    pub(super) fn published(&self, pos: usize) -> bool {
        let seq = self.cell_seq(pos).load(Ordering::Acquire);
        seq.wrapping_add(pos & self.mask) == pos.wrapping_add(1)
    }

    /// The `i`-th frame word of the event whose first cell is at `pos`.
    #[inline(always)]
    fn frame_word(&self, pos: usize, i: usize) -> *mut usize {
        let (cell, word) = match i.checked_sub(FIRST_FRAMES) {
            None => (pos, size_of::<SlotHead>() / 8 + i),
            Some(j) => (pos.wrapping_add(1 + j / MORE_FRAMES), 1 + j % MORE_FRAMES),
        };
        // SAFETY: the cell lies inside the block (index masked) and the word inside it.
        unsafe { (self.base.add((cell & self.mask) * CELL) as *mut usize).add(word) }
    }

    /// Writes `frames` into the cells of the event at `pos`, which the caller claimed
    /// (enough of them for `frames.len()`).
    #[inline(always)]
    pub(super) fn write_frames(&self, pos: usize, frames: &[usize]) {
        let first = frames.len().min(FIRST_FRAMES);
        // SAFETY: the caller owns the cells; each run of words lies inside one cell.
        unsafe {
            crate::engine::callstack::frames::copy_words(
                self.frame_word(pos, 0),
                frames.as_ptr(),
                first,
            )
        };
        let mut i = first;
        while i < frames.len() {
            let n = (frames.len() - i).min(MORE_FRAMES);
            // SAFETY: as above.
            unsafe {
                crate::engine::callstack::frames::copy_words(
                    self.frame_word(pos, i),
                    frames.as_ptr().add(i),
                    n,
                )
            };
            i += n;
        }
    }

    /// Appends the `n` frames of the published event at `pos` to `out`.
    #[inline(always)]
    pub(super) fn read_frames(&self, pos: usize, n: usize, out: &mut Vec<usize>) {
        let mut i = 0;
        while i < n {
            let room = if i < FIRST_FRAMES { FIRST_FRAMES - i } else { MORE_FRAMES };
            let run = (n - i).min(room);
            // SAFETY: the event is published, so its frames are written; the run lies
            // inside one cell of the block.
            out.extend_from_slice(unsafe {
                core::slice::from_raw_parts(self.frame_word(pos, i), run)
            });
            i += run;
        }
    }

    /// Hands the `cells` cells from `pos` back to producers, one lap later: in order, the
    /// last one last (§2a).
    #[inline(always)]
    pub(super) fn hand_back(&self, pos: usize, cells: usize) {
        for i in 0..cells {
            let p = pos.wrapping_add(i);
            self.cell_seq(p).store(self.lap_end(p), Ordering::Release);
        }
    }

    /// Whether the `cells` cells from `pos` are all handed back for this lap (the last one
    /// is, §2a): the sequence number of the last less its position, 0 when free.
    #[inline(always)]
    pub(super) fn free_from(&self, pos: usize, cells: usize) -> isize {
        let last = pos.wrapping_add(cells - 1);
        let seq = self.cell_seq(last).load(Ordering::Acquire).wrapping_add(last & self.mask);
        seq.wrapping_sub(last) as isize
    }
}
