//! libgcc's DWARF unwinder (through `backtrace`): the fallback of the other walks, and
//! the unwinder of `Unwinder::Libgcc`.

use super::frames::Captured;

#[inline(never)]
pub(super) fn capture_dwarf(out: &mut Captured, depth: usize) {
    capture_dwarf_from(out, depth, 0)
}

/// DWARF walk. With `caller != 0`, frames are skipped up to and including the frame of the
/// function starting at `caller` (looked for among the first few frames only).
#[inline(never)]
pub(super) fn capture_dwarf_from(out: &mut Captured, depth: usize, caller: usize) {
    capture_dwarf_at(out, depth, caller, 0)
}

/// libgcc's walk, recording from the frame whose return address is `start` (the program's
/// frame at an allocator's entry, see [`capture_at_entry`]), or when `start` is 0 from the
/// frame after `caller`'s. If the start is not met within the first frames, everything from
/// there on is kept rather than lose the stack.
pub(super) fn capture_dwarf_at(out: &mut Captured, depth: usize, caller: usize, start: usize) {
    let mut more = false;
    let mut skipping = caller != 0 || start != 0;
    let mut seen = 0usize;
    // SAFETY: trace_unsynchronized requires that no other thread calls it concurrently in a
    // way that breaks libgcc's unwinder; _Unwind_Backtrace is thread-safe on glibc targets,
    // and the closure only writes into `out`, which this thread owns. (Not wrapped in
    // `Busy::own_allocations`: the frames to skip are counted from here.)
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            if skipping {
                seen += 1;
                // With `start`, this frame is the first one kept; with `caller`, the next.
                let found_start = start != 0 && frame.ip() as usize == start;
                if start == 0 && frame.symbol_address() as usize == caller {
                    skipping = false;
                    return true;
                }
                if !found_start && seen < 8 {
                    return true;
                }
                // Found, or not found soon enough: keep everything from here rather than
                // lose the stack.
                skipping = false;
            }
            let ip = frame.ip() as usize;
            if ip == 0 {
                // libgcc reports the outermost frame (whose return address is undefined) as
                // a frame at 0: the end of the stack.
                return false;
            }
            if out.len >= depth {
                more = true;
                return false;
            }
            out.push(ip)
        });
    }
    out.truncated = more;
}
