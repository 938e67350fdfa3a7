//! The check oracle (`cfi` §4, `MEMPROF_UNWIND_CHECK=1`): every walk, replayed or not, is
//! walked again by framehop alone and a disagreement is counted.

use super::frame::{read_stack, Frame};
use super::slots::take_slot;
use super::table::{Cache, Table, TABLE};
use crate::engine::callstack::frames::Captured;
use crate::engine::thread::on_walk_stack;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use framehop::x86_64::UnwindRegsX86_64;
use framehop::FrameAddress;
use framehop::Unwinder as _;

/// `MEMPROF_UNWIND_CHECK`: every walk is checked against framehop alone (`cfi` §4).
pub(super) static CHECK: AtomicBool = AtomicBool::new(false);
/// Checked walks, and those whose frames differed.
static CHECKED: AtomicU64 = AtomicU64::new(0);
static MISMATCHES: AtomicU64 = AtomicU64::new(0);

/// With the check of `cfi` §4 on, checks a walk replayed by the caller from [`key`]'s key (the
/// start of a walk at an allocator's entry: no frame skipped, `pc` a return address).
#[inline(always)]
pub(in crate::engine::callstack) fn check_replayed(
    out: &Captured,
    depth: usize,
    pc: u64,
    sp: u64,
    bp: u64,
    hi: usize,
) {
    if !CHECK.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: published tables are never mutated or freed (`cfi` §2).
    if let Some(table) = unsafe { TABLE.load(Ordering::Acquire).as_ref() } {
        let start = Frame { ip: pc, sp, bp, first: false };
        check_replay(table, out, depth, 0, start, sp as usize, hi);
    }
}

/// [`check`] for a replayed walk, with a cache of the pool.
#[cold]
#[inline(never)]
pub(super) fn check_replay(
    table: &Table,
    out: &Captured,
    depth: usize,
    skip: usize,
    start: Frame,
    lo: usize,
    hi: usize,
) {
    let Some(slot) = take_slot(hi) else {
        return;
    };
    // SAFETY: as in `walk`: the slot is this thread's until released.
    if let Some(cache) = unsafe { slot.cache.load(Ordering::Acquire).as_mut() } {
        check(table, cache, out, depth, skip, start, lo, hi);
    }
    slot.taken.store(false, Ordering::Release);
}

/// Walks again with framehop alone and counts a disagreement (`cfi` §4,
/// `MEMPROF_UNWIND_CHECK`).
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
pub(super) fn check(
    table: &Table,
    cache: &mut Cache,
    out: &Captured,
    depth: usize,
    mut skip: usize,
    start: Frame,
    lo: usize,
    hi: usize,
) {
    let last = hi - 8;
    let mut read = |addr: u64| read_stack(addr, lo, last).ok_or(());
    let mut regs = UnwindRegsX86_64::new(start.ip, start.sp, start.bp);
    let Some(mut frame) = start.frame_address() else {
        return;
    };
    let mut n = 0;
    let mut same = true;
    let frames = out.frames();
    loop {
        if skip > 0 {
            skip -= 1;
        } else {
            if n >= depth {
                same &= out.truncated();
                break;
            }
            if frames.get(n) != Some(&(frame.address() as usize)) {
                same = false;
                break;
            }
            n += 1;
        }
        let unwound =
            on_walk_stack(|| table.unwinder.unwind_frame(frame, &mut regs, cache, &mut read));
        match unwound {
            Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                Some(f) => frame = f,
                None => break,
            },
            Ok(None) => break,
            Err(_) => {
                same = false;
                break;
            }
        }
    }
    same &= n == frames.len();
    CHECKED.fetch_add(1, Ordering::Relaxed);
    if !same {
        MISMATCHES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Turns the check of `cfi` §4 on (every walk also runs framehop alone).
pub(in crate::engine::callstack) fn enable_check() {
    CHECK.store(true, Ordering::Relaxed);
}

/// (walks checked, walks whose frames differed from framehop's) since the process started.
pub(in crate::engine::callstack) fn check_stats() -> (u64, u64) {
    (CHECKED.load(Ordering::Relaxed), MISMATCHES.load(Ordering::Relaxed))
}
