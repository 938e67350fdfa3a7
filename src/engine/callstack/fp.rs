//! The frame-pointer walk, kept inside the thread's stack by its bounds (`per_thread`).

use super::frames::{Captured, INLINE_FRAMES};
use super::memo;
use super::per_thread::thread_hi;
use core::mem::MaybeUninit;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) const FP_SUPPORTED: bool = true;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) const FP_SUPPORTED: bool = false;

/// The frame pointer of the calling function's frame.
#[inline(always)]
pub(super) fn frame_pointer() -> usize {
    let fp: usize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads a register; no memory is touched.
    unsafe {
        core::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads a register; no memory is touched.
    unsafe {
        core::arch::asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        fp = 0;
    }
    fp
}

/// The current stack pointer (approximately: the address of a local).
#[inline(always)]
pub(super) fn stack_pointer() -> usize {
    let marker = 0u8;
    core::hint::black_box(&marker) as *const u8 as usize
}

/// Largest distance between two consecutive frame pointers that is believed.
const MAX_FRAME: usize = 16 << 20;

#[inline(never)]
pub(super) fn capture_fp(out: &mut Captured, depth: usize) {
    out.clear();
    capture_fp_from(out, depth, 0)
}

/// Frame-pointer walk, dropping the `skip` innermost return addresses.
#[inline(always)]
fn capture_fp_from(out: &mut Captured, depth: usize, skip: usize) {
    let hi = stack_hi();
    if hi == 0 {
        return;
    }
    capture_fp_walk(out, depth, skip, frame_pointer(), stack_pointer(), hi, None);
}

/// Frame-pointer walk from the frame record at `fp`, for a stack `[lo, hi)`, after the
/// frames already in `out` (at most one, in the inline buffer). With `log`, every word read
/// is noted there (§4).
#[inline(always)]
pub(super) fn capture_fp_walk(
    out: &mut Captured,
    depth: usize,
    skip: usize,
    fp: usize,
    lo: usize,
    hi: usize,
    mut log: Option<&mut memo::Log>,
) {
    // The highest frame record start that keeps [fp, fp + 16) inside the stack.
    let top = hi.saturating_sub(2 * core::mem::size_of::<usize>());
    let mut fp = fp;
    let mut skip = skip;
    let mut n = out.len;
    // The common case runs in the inline buffer without bounds checks or growth tests.
    let fast_limit = depth.min(INLINE_FRAMES);
    loop {
        // A frame record is [saved fp, return address], word-aligned, inside [lo, hi).
        if fp < lo || fp > top || fp % core::mem::size_of::<usize>() != 0 {
            break;
        }
        let at_limit = if skip == 0 { n >= fast_limit } else { false };
        if at_limit {
            // Inline buffer full or depth reached: hand over to the growing path.
            out.len = n;
            if n >= depth {
                out.truncated = true;
                return;
            }
            return capture_fp_slow(out, depth, fp, lo, top);
        }
        // SAFETY: fp is word-aligned and fp..fp+16 lies inside this thread's stack, which is
        // mapped and readable; the values read are plain integers.
        let (next, ret) =
            unsafe { ((fp as *const usize).read(), (fp as *const usize).add(1).read()) };
        if let Some(log) = log.as_deref_mut() {
            log.note(fp as u64, next as u64);
            log.note(fp as u64 + 8, ret as u64);
        }
        if ret == 0 {
            break;
        }
        if skip > 0 {
            skip -= 1;
        } else {
            // n < fast_limit <= INLINE_FRAMES, and the buffer is still the inline one (the
            // capture started empty: `clear` ran first).
            out.inline[n] = MaybeUninit::new(ret);
            n += 1;
        }
        if next <= fp || next - fp > MAX_FRAME {
            break;
        }
        fp = next;
    }
    out.len = n;
}

/// Continues a frame-pointer walk past the inline buffer, doubling it as needed.
#[cold]
#[inline(never)]
fn capture_fp_slow(out: &mut Captured, depth: usize, mut fp: usize, lo: usize, top: usize) {
    loop {
        if fp < lo || fp > top || fp % core::mem::size_of::<usize>() != 0 {
            break;
        }
        if out.len >= depth {
            out.truncated = true;
            break;
        }
        // SAFETY: as in `capture_fp_from`: the record lies inside this thread's stack.
        let (next, ret) =
            unsafe { ((fp as *const usize).read(), (fp as *const usize).add(1).read()) };
        if ret == 0 || !out.push(ret) {
            break;
        }
        if next <= fp || next - fp > MAX_FRAME {
            break;
        }
        fp = next;
    }
}

/// The top of the current thread's stack, cached per thread.
pub(super) fn stack_hi() -> usize {
    crate::engine::thread::blocks().map_or(0, |b| thread_hi(&b.callstack))
}
