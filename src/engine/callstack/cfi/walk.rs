//! The walk (`cfi` §4, §5): from the capturing function's registers, a replay of a
//! remembered walk when its words still hold, else the compiled rules' loop, with framehop
//! for the frames they do not cover.

use super::check::{check, check_replay, CHECK};
use super::frame::{read_stack, record, Frame};
use super::rules::{derive, rule_index, run_rules, Kind, Rule, Rules};
use super::slots::take_slot;
use super::table::{Cache, Table, TABLE};
use crate::engine::callstack::frames::Captured;
use crate::engine::callstack::memo::{Key, Log, Memo};
use crate::engine::callstack::trail::Trails;
use crate::engine::thread::on_walk_stack;
use core::sync::atomic::Ordering;
use framehop::x86_64::UnwindRegsX86_64;
use framehop::Unwinder as _;

/// Walks the stack from the registers of the capturing function (`pc`, `sp`, `bp`), for a
/// thread whose stack ends at `hi`, dropping the `skip` innermost addresses (the program
/// counter counts as one) and keeping at most `depth`. Returns false, with `out` in an
/// unspecified state, when the walk cannot be trusted: the caller starts over with libgcc.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(in crate::engine::callstack) fn walk(
    out: &mut Captured,
    depth: usize,
    skip: usize,
    // Scalars, not a tuple: a tuple is passed through memory, and reading it back as one
    // 16-byte load right after the caller's two 8-byte stores stalls store forwarding.
    pc: u64,
    sp: u64,
    bp: u64,
    hi: usize,
    first: bool,
    // The thread's remembered walks, and whether to try a replay first (false when the
    // caller just tried one with the same key, see [`key`]).
    memo: Option<(&mut Memo, bool)>,
) -> bool {
    let (mut memo, try_replay) = match memo {
        Some((m, r)) => (Some(m), r),
        None => (None, false),
    };
    let table = TABLE.load(Ordering::Acquire);
    // SAFETY: published tables are never mutated or freed (`cfi` §2).
    let Some(table) = (unsafe { table.as_ref() }) else {
        return false;
    };
    let lo = sp as usize;
    if hi <= lo + 16 {
        return false;
    }
    let key = walk_key(table, pc, sp, bp, depth, skip, first);
    let start = Frame { ip: pc, sp, bp, first };
    if let Some(m) = memo.as_deref_mut().filter(|_| try_replay) {
        if m.replay(&key, lo, out) {
            if CHECK.load(Ordering::Relaxed) {
                check_replay(table, out, depth, skip, start, lo, hi);
            }
            return true;
        }
    }
    let Some(slot) = take_slot(hi) else {
        return false;
    };
    let cache = slot.cache.load(Ordering::Acquire);
    let rules = slot.rules.load(Ordering::Acquire);
    // SAFETY: the slot is taken by this thread until released below, so the caches
    // (allocated in `prepare`, never freed) are used by no one else meanwhile.
    let ok = match unsafe { (cache.as_mut(), rules.as_mut()) } {
        (Some(cache), Some(rules)) => {
            let (log, trails) = match memo.as_deref_mut().map(Memo::begin_with_trails) {
                Some((log, trails)) => (Some(log), Some(trails)),
                None => (None, None),
            };
            let ok = walk_with(table, cache, rules, out, depth, skip, start, lo, hi, log, trails);
            if ok && CHECK.load(Ordering::Relaxed) {
                check(table, cache, out, depth, skip, start, lo, hi);
            }
            ok
        }
        _ => false,
    };
    slot.taken.store(false, Ordering::Release);
    if ok {
        if let Some(m) = memo {
            m.commit(&key, out, false);
        }
    }
    ok
}

/// The memo key of a walk (its bound is its start: it reads nothing below `sp`).
#[inline(always)]
fn walk_key(
    table: &Table,
    pc: u64,
    sp: u64,
    bp: u64,
    depth: usize,
    skip: usize,
    first: bool,
) -> Key {
    Key {
        tag: u64::from(table.generation),
        pc,
        sp,
        bp,
        lo: sp,
        shape: Key::shape(depth, skip, first),
    }
}

/// The key [`walk`] would remember a walk with, for a caller that tries the replay itself
/// (`None` without a table: the walk falls back to libgcc).
#[inline(always)]
pub(in crate::engine::callstack) fn key(
    pc: u64,
    sp: u64,
    bp: u64,
    depth: usize,
    skip: usize,
    first: bool,
) -> Option<Key> {
    // SAFETY: published tables are never mutated or freed (`cfi` §2).
    let table = unsafe { TABLE.load(Ordering::Acquire).as_ref() }?;
    Some(walk_key(table, pc, sp, bp, depth, skip, first))
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn walk_with(
    table: &Table,
    cache: &mut Cache,
    rules: &mut Rules,
    out: &mut Captured,
    depth: usize,
    mut skip: usize,
    start: Frame,
    lo: usize,
    hi: usize,
    mut log: Option<&mut Log>,
    mut trails: Option<&mut Trails>,
) -> bool {
    let last = hi - 8;
    // The frame being unwound: its program counter (the first, when the walk starts from
    // the current registers) or return address, its stack pointer and its bp.
    let mut st = start;
    let pc = st.ip;
    let mut memo = (0u64, 0u64);
    if rules.generation != table.generation {
        rules.entries.fill(Rule::EMPTY);
        rules.generation = table.generation;
    }
    if !record(out, depth, &mut skip, pc) {
        return true;
    }
    loop {
        // As many frames as the compiled rules cover, in a loop of its own.
        if let Some(done) = run_rules(
            &rules.entries,
            rules.generation,
            &mut st,
            out,
            depth,
            &mut skip,
            lo,
            last,
            log.as_deref_mut(),
            trails.as_deref_mut(),
        ) {
            return done;
        }
        // This frame has no rule yet, or its rule is framehop's.
        let addr = st.lookup();
        let entry = &mut rules.entries[rule_index(addr)];
        if entry.addr != addr {
            // A rule derived with this table implies that the table covers `addr`.
            if !table.covers(addr, &mut memo) {
                return false;
            }
            let Some(frame) = st.frame_address() else {
                return true;
            };
            // On the thread's walk stack: framehop needs ~6 KB (`engine::thread` §3).
            *entry = on_walk_stack(|| derive(table, cache, frame));
        }
        match entry.kind {
            Kind::Keep | Kind::LoadFromSp | Kind::LoadFromBp => continue,
            Kind::End => return true,
            Kind::Empty | Kind::Framehop => {
                let Some(frame) = st.frame_address() else {
                    return true;
                };
                let mut regs = UnwindRegsX86_64::new(st.ip, st.sp, st.bp);
                // framehop may use bp in any way: whatever loaded it is a condition.
                if let Some(log) = log.as_deref_mut() {
                    log.use_bp();
                }
                let mut read = |addr: u64| {
                    let v = read_stack(addr, lo, last).ok_or(())?;
                    if let Some(log) = log.as_deref_mut() {
                        log.note(addr, v);
                    }
                    Ok(v)
                };
                let unwound = on_walk_stack(|| {
                    table.unwinder.unwind_frame(frame, &mut regs, cache, &mut read)
                });
                match unwound {
                    Ok(Some(ra)) => {
                        st = Frame { ip: ra, sp: regs.sp(), bp: regs.bp(), first: false }
                    }
                    Ok(None) => return true,
                    Err(_) => return false,
                }
            }
        }
        // A return address of 0 ends the stack (as framehop's `from_return_address`).
        if st.ip == 0 || !record(out, depth, &mut skip, st.ip) {
            return true;
        }
    }
}
