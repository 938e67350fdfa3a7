//! The frame being unwound, the bounded read of the stack every unwinding step goes
//! through (`cfi` §5), and the recording of frames into the capture.

use crate::engine::callstack::frames::{Captured, INLINE_FRAMES};
use framehop::FrameAddress;

/// Reads a word of the stack inside `[lo, last]` (`last` = the stack's top − 8), with one
/// unsigned compare (`last - lo` is loop-invariant where this is inlined into a walk).
#[inline(always)]
pub(super) fn read_stack(addr: u64, lo: usize, last: usize) -> Option<u64> {
    let a = addr as usize;
    if a.wrapping_sub(lo) > last.wrapping_sub(lo) {
        return None;
    }
    // SAFETY: [a, a + 8) lies inside this thread's stack between the current stack pointer
    // and the stack's top, which is mapped and readable.
    Some(unsafe { (a as *const u64).read_unaligned() })
}

/// The registers of the frame being unwound.
#[derive(Clone, Copy)]
pub(super) struct Frame {
    /// The program counter of the first frame, a return address for the others.
    pub(super) ip: u64,
    pub(super) sp: u64,
    pub(super) bp: u64,
    pub(super) first: bool,
}

impl Frame {
    /// framehop's lookup address: a return address minus one (inside the call).
    #[inline(always)]
    pub(super) fn lookup(&self) -> u64 {
        if self.first {
            self.ip
        } else {
            self.ip - 1
        }
    }

    pub(super) fn frame_address(&self) -> Option<FrameAddress> {
        if self.first {
            Some(FrameAddress::from_instruction_pointer(self.ip))
        } else {
            FrameAddress::from_return_address(self.ip)
        }
    }
}

/// Keeps `ip` as the next frame of the capture (after `skip` more are dropped). False when
/// the capture is complete: the depth is reached (truncated) or the buffer cannot grow.
#[inline(always)]
pub(super) fn record(out: &mut Captured, depth: usize, skip: &mut usize, ip: u64) -> bool {
    if *skip > 0 {
        *skip -= 1;
        return true;
    }
    if out.len >= depth {
        out.truncated = true;
        return false;
    }
    out.push(ip as usize)
}

/// How many frames `run_rules` may write straight into the inline buffer.
#[inline(always)]
pub(super) fn inline_limit(out: &Captured, depth: usize) -> usize {
    if out.heap.is_null() {
        depth.min(INLINE_FRAMES)
    } else {
        0
    }
}

/// Keeps return address `ra` as the next frame of the capture in the rules' loop (and its
/// replay of a trail's steps): straight into the inline buffer while `n`, the frames kept
/// so far, is below `limit` and nothing is left to skip, else through [`record_cold`],
/// which updates the three. False when the capture is complete.
#[inline(always)]
pub(super) fn keep_frame(
    out: &mut Captured,
    depth: usize,
    n: &mut usize,
    skip: &mut usize,
    limit: &mut usize,
    ra: u64,
) -> bool {
    if *skip == 0 && *n < *limit {
        // SAFETY: n < limit <= INLINE_FRAMES, the inline buffer's length.
        unsafe { *out.inline.get_unchecked_mut(*n) = core::mem::MaybeUninit::new(ra as usize) };
        *n += 1;
        return true;
    }
    let more;
    (more, *n, *skip, *limit) = record_cold(out, *n, depth, *skip, ra);
    more
}

/// `record` for `run_rules`, out of its loop: `n` frames kept so far, `skip` still to drop.
/// Returns (more frames wanted, frames kept, still to skip, the new inline limit).
#[cold]
#[inline(never)]
pub(super) fn record_cold(
    out: &mut Captured,
    n: usize,
    depth: usize,
    mut skip: usize,
    ip: u64,
) -> (bool, usize, usize, usize) {
    out.len = n;
    let more = record(out, depth, &mut skip, ip);
    (more, out.len, skip, inline_limit(out, depth))
}
