//! Compiled rules (`cfi` §4): the affine shape every rule framehop caches on x86-64 has,
//! derived from framehop once per address, kept per slot in a direct-mapped table and
//! applied by the walk's own loop.

use super::frame::{inline_limit, keep_frame, read_stack, Frame};
use super::table::{Cache, Table};
use crate::engine::callstack::frames::Captured;
use crate::engine::callstack::memo::{Log, FRAMES as MEMO_FRAMES};
use crate::engine::callstack::trail::{
    holds, Step, Trails, CFA_FROM_BP, ENDS, LOADS_BP, LOAD_FROM_BP,
};
use framehop::x86_64::UnwindRegsX86_64;
use framehop::FrameAddress;
use framehop::Unwinder as _;

/// Entries of a slot's rule table (a power of two).
pub(super) const RULES: usize = 1024;

/// How a frame is unwound (`cfi` §4). The kinds the walk's loop applies itself come
/// first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(super) enum Kind {
    /// `cfa = base + cfa_off`, `ra = [cfa - 8]`, `bp` unchanged.
    Keep,
    /// As `Keep`, and `bp = [sp + bp_off]` (the frame's own `sp`, before unwinding).
    LoadFromSp,
    /// As `Keep`, and `bp = [bp + bp_off]`.
    LoadFromBp,
    /// The end of the stack: the walk stops here.
    End,
    /// framehop unwinds this address every time.
    Framehop,
    /// The slot is empty.
    Empty,
}

/// A compiled rule for one lookup address (`cfi` §4): 16 bytes, four to a cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(16))]
pub(super) struct Rule {
    pub(super) addr: u64,
    pub(super) cfa_off: i32,
    pub(super) bp_off: i16,
    pub(super) kind: Kind,
    /// The CFA is `bp + cfa_off` (else `sp + cfa_off`).
    pub(super) cfa_from_bp: bool,
}

impl Rule {
    pub(super) const EMPTY: Rule =
        Rule { addr: 0, cfa_off: 0, bp_off: 0, kind: Kind::Empty, cfa_from_bp: false };
}

/// A slot's rule table, for the table (module list) of generation `generation`: emptied
/// when a walk finds a newer table published, so an entry never outlives the modules it
/// was derived from.
pub(super) struct Rules {
    pub(super) generation: u32,
    pub(super) entries: [Rule; RULES],
}

#[inline(always)]
pub(super) fn rule_index(addr: u64) -> usize {
    (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - RULES.trailing_zeros())) as usize
}

/// Unwinds from `st` while the compiled rules cover the frames (the walk's common case:
/// a few instructions a frame). Returns `Some(result of the walk)` when the walk ends,
/// `None` at a frame without a compiled rule (`st` is that frame, already recorded). With
/// `log`, every word read is noted there. With `trails`, the steps are recorded, and the
/// walk goes on as the last one kept did from where it meets it (`trail`), when the words
/// read from there still hold; `generation` is the rules'.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn run_rules(
    entries: &[Rule; RULES],
    generation: u32,
    st: &mut Frame,
    out: &mut Captured,
    depth: usize,
    skip: &mut usize,
    lo: usize,
    last: usize,
    mut log: Option<&mut Log>,
    mut trails: Option<&mut Trails>,
) -> Option<bool> {
    let (mut sp, mut bp) = (st.sp, st.bp);
    // The lookup address of the frame: its program counter for the first frame, its return
    // address minus one (inside the call) for the others.
    let mut key = st.lookup();
    let mut first = st.first;
    // Frames go straight into the inline buffer while it has room (the common case); the
    // general `record` takes over past it, and while frames are being skipped.
    let mut n = out.len;
    let mut sk = *skip;
    let mut limit = inline_limit(out, depth);
    // Recursion repeats return addresses: the rule found last is tried first.
    let mut prev = &Rule::EMPTY;
    let mut cursor = trails.as_deref_mut().map(Trails::begin);
    // The walk reached the stack's end here (not the depth): its steps may be kept.
    let mut to_the_end = false;
    // Where the walk met the last one and went on as it.
    let mut met = None;
    let result = loop {
        if let (Some(t), Some(c), 0) = (trails.as_deref(), cursor.as_mut(), sk) {
            if let Some((from, steps)) = t.meet(c, generation, sp, key, bp) {
                let read = |a: u64| read_stack(a, lo, last);
                if steps.iter().all(|s| holds(s, read)) {
                    (n, sk) =
                        replay_steps(steps, out, n, depth, sk, limit, log.as_deref_mut(), read);
                    met = Some(from);
                    break Some(true);
                }
            }
        }
        let rule = if prev.addr == key {
            prev
        } else {
            let e = &entries[rule_index(key)];
            if e.addr != key {
                break None;
            }
            e
        };
        if rule.kind > Kind::LoadFromBp {
            if rule.kind == Kind::End {
                if let Some(t) = trails.as_deref_mut() {
                    let s = Step { sp, key, bp, flags: ENDS, ..Step::EMPTY };
                    t.record(s);
                }
                to_the_end = true;
                break Some(true);
            }
            break None;
        }
        if rule.cfa_from_bp {
            if let Some(log) = log.as_deref_mut() {
                log.use_bp();
            }
        }
        let cfa = if rule.cfa_from_bp { bp } else { sp }.wrapping_add(rule.cfa_off as i64 as u64);
        // The stack pointer only grows while unwinding: a walk always ends. Every read stays
        // inside [lo, last].
        if cfa <= sp {
            break Some(false);
        }
        let Some(ra) = read_stack(cfa.wrapping_sub(8), lo, last) else {
            break Some(false);
        };
        if let Some(log) = log.as_deref_mut() {
            log.note(cfa.wrapping_sub(8), ra);
        }
        let ra_off = u32::try_from(cfa.wrapping_sub(8).wrapping_sub(sp)).unwrap_or(u32::MAX);
        let mut step = Step { sp, key, bp, ra, ra_off, ..Step::EMPTY };
        if ra_off == u32::MAX {
            if let Some(t) = trails.as_deref_mut() {
                t.spoil();
            }
        }
        if rule.cfa_from_bp {
            step.flags |= CFA_FROM_BP;
        }
        if rule.kind != Kind::Keep {
            let base = if rule.kind == Kind::LoadFromSp {
                sp
            } else {
                if let Some(log) = log.as_deref_mut() {
                    log.use_bp();
                }
                step.flags |= LOAD_FROM_BP;
                bp
            };
            let at = base.wrapping_add(rule.bp_off as i64 as u64);
            match read_stack(at, lo, last) {
                Some(v) => {
                    if let Some(log) = log.as_deref_mut() {
                        log.note_bp(at, v);
                    }
                    (step.bp_at, step.bp_val) = (at, v);
                    step.flags |= LOADS_BP;
                    bp = v
                }
                None => break Some(false),
            }
        }
        if let Some(t) = trails.as_deref_mut() {
            t.record(step);
        }
        sp = cfa;
        prev = rule;
        first = false;
        // A return address of 0 ends the stack (as framehop's `from_return_address`).
        if ra == 0 {
            to_the_end = true;
            break Some(true);
        }
        key = ra - 1;
        if !keep_frame(out, depth, &mut n, &mut sk, &mut limit, ra) {
            break Some(true);
        }
    };
    if let (Some(from), Some(t)) = (met, trails.as_deref_mut()) {
        t.keep_met(from);
    }
    if to_the_end {
        if let Some(t) = trails {
            t.keep(generation);
        }
    }
    out.len = n;
    *skip = sk;
    let ip = if first { key } else { key + 1 };
    *st = Frame { ip, sp, bp, first };
    result
}

/// Goes on as the last walk's `steps` went, their words checked (`trail`): records their
/// frames (up to the depth, as the loop does) and notes their reads in `log` as the loop
/// would have. Returns (frames kept, still to skip).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn replay_steps(
    steps: &[Step],
    out: &mut Captured,
    mut n: usize,
    depth: usize,
    mut sk: usize,
    mut limit: usize,
    mut log: Option<&mut Log>,
    read: impl Fn(u64) -> Option<u64>,
) -> (usize, usize) {
    // A walk that ends with as many frames as the memo keeps at most (the steps' frames,
    // up to the depth) is not remembered whole: its reads need no noting.
    if let Some(l) = log.as_deref_mut() {
        if (n + steps.len()).min(depth) >= MEMO_FRAMES {
            l.give_up();
        }
    }
    let mut log = log.filter(|l| !l.given_up());
    for s in steps {
        if s.flags & ENDS != 0 {
            break;
        }
        if let Some(log) = log.as_deref_mut() {
            if s.flags & CFA_FROM_BP != 0 {
                log.use_bp();
            }
            log.note(s.ra_at(), s.ra);
            if s.flags & LOADS_BP != 0 {
                if s.flags & LOAD_FROM_BP != 0 {
                    log.use_bp();
                }
                // A load no later step uses was not checked: the word as it is now.
                log.note_bp(s.bp_at, read(s.bp_at).unwrap_or(s.bp_val));
            }
        }
        if s.ra == 0 {
            break;
        }
        if !keep_frame(out, depth, &mut n, &mut sk, &mut limit, s.ra) {
            break;
        }
    }
    (n, sk)
}

/// Derives the compiled rule of the return address `frame` from framehop (`cfi` §4).
#[cold]
#[inline(never)]
pub(super) fn derive(table: &Table, cache: &mut Cache, frame: FrameAddress) -> Rule {
    let addr = frame.address_for_lookup();
    let slow = Rule { addr, kind: Kind::Framehop, ..Rule::EMPTY };
    // Symbolic registers far apart (bp above sp, as framehop's frame-pointer rule checks),
    // and tags far above any address read.
    const PROBES: [(u64, u64, u64); 2] = [
        (0x1000_0000_0000, 0x2000_0000_0000, 0x4000_0000_0000_0000),
        (0x3100_0000_0000, 0x5300_0000_0000, 0x2000_0000_0000_0000),
    ];
    const NEAR: u64 = 1 << 31;
    let mut derived: Option<Rule> = None;
    for (s0, b0, tag) in PROBES {
        // Only words near the symbolic registers can be read: a rule that reads anywhere
        // else (a DWARF expression dereferencing a loaded value) fails here and stays slow.
        let near = |a: u64, base: u64| a.wrapping_sub(base).wrapping_add(NEAR) < 2 * NEAR;
        let mut read = |a: u64| -> Result<u64, ()> {
            if near(a, s0) || near(a, b0) {
                Ok(tag.wrapping_add(a))
            } else {
                Err(())
            }
        };
        let mut regs = UnwindRegsX86_64::new(frame.address(), s0, b0);
        let rule = match table.unwinder.unwind_frame(frame, &mut regs, cache, &mut read) {
            Ok(None) => Rule { kind: Kind::End, ..slow },
            Ok(Some(ra)) => {
                // Which register plus which offset, for a value near one of them.
                let rel = |v: u64| -> Option<(bool, i32)> {
                    let from = |base: u64| {
                        let d = v.wrapping_sub(base) as i64;
                        (d.unsigned_abs() < NEAR).then_some(d as i32)
                    };
                    from(s0).map(|d| (false, d)).or_else(|| from(b0).map(|d| (true, d)))
                };
                let cfa = regs.sp();
                let Some((cfa_from_bp, cfa_off)) = rel(cfa) else {
                    return slow;
                };
                if ra != tag.wrapping_add(cfa.wrapping_sub(8)) {
                    return slow;
                }
                let new_bp = regs.bp();
                let (kind, bp_off) = if new_bp == b0 {
                    (Kind::Keep, 0)
                } else {
                    // An offset that does not fit the entry's 16 bits (a frame of more than
                    // 32 KiB) leaves the frame to framehop.
                    let (kind, off) = match rel(new_bp.wrapping_sub(tag)) {
                        Some((false, off)) => (Kind::LoadFromSp, off),
                        Some((true, off)) => (Kind::LoadFromBp, off),
                        None => return slow,
                    };
                    match i16::try_from(off) {
                        Ok(off) => (kind, off),
                        Err(_) => return slow,
                    }
                };
                Rule { kind, cfa_from_bp, cfa_off, bp_off, ..slow }
            }
            Err(_) => return slow,
        };
        match derived {
            None => derived = Some(rule),
            Some(r) if r == rule => {}
            Some(_) => return slow,
        }
    }
    derived.unwrap_or(slow)
}
