//! Call-stack capture on the sample path.
//!
//! # 1. One pass
//! The stack is walked once, straight into a buffer: 32 entries inline on the caller's
//! stack, moved to a pooled `mmap`ed buffer (never an allocator: see `frames`) when a
//! deeper stack fills it, up to the configured depth. There is no first
//! pass to measure the depth (statmemprof's lesson: copying out of an oversized buffer is
//! cheaper than walking twice). When the real stack is deeper than the depth the capture is
//! marked truncated.
//!
//! # 2. Unwinders
//! Frame pointers: each frame holds the caller's frame pointer and the return address
//! beside it, so a walk is two loads a frame (tens of ns for 10 frames). Every pointer is
//! checked to lie in this thread's stack, above the previous one, before it is read, so a
//! function without a frame pointer ends the walk early instead of faulting.
//!
//! DWARF (x86_64): framehop over the `.eh_frame` tables of the loaded objects, read in place,
//! with its unwind rules cached per address (`cfi`): the capture reads its own `rip`, `rsp`
//! and `rbp` and framehop walks from there, reading only this thread's stack. A frame in
//! an object it has no table for (a library `dlopen`ed since the last refresh, code
//! without `PT_GNU_EH_FRAME`) or an unwinding error hands the whole capture to libgcc.
//!
//! libgcc: `backtrace::trace_unsynchronized`, correct for any code with unwind tables but
//! microseconds per sample; the fallback of the DWARF unwinder, and `Unwinder::Libgcc`.
//!
//! `Unwinder::Auto` decides at session start. In process (`Sampled`), the sampled
//! allocations come from Rust code built in one cargo build with the profiler, with the
//! same flags: it walks a known chain of the profiler's own calls both ways and uses frame
//! pointers when they agree, DWARF otherwise. Under the preload library the allocations
//! are the C library's, called from any object of the program, whatever compiled it: frame
//! pointers are used only when every loaded object's unwind tables show that it keeps them
//! (`fp_proof`), DWARF otherwise (on a distribution whose C library omits them, always).
//! Objects loaded after the start are not checked.
//!
//! # 3. Addresses
//! Frames are raw return addresses (the instruction after the call), innermost first,
//! starting inside the profiler; symbolization happens later, off the hot path, and the
//! reports trim the profiler's own frames by name.
//!
//! # 4. Remembered walks
//! A walk is a function of its start registers, of the unwind rules (the DWARF table's
//! generation) and of the stack words it reads. Each thread remembers its last few walks
//! with every word read and its value (`memo`), and a walk from a remembered start whose
//! words all still hold their values is replayed: the words are re-read as independent
//! loads, where the walk is a chain of dependent ones, and the frames are copied. The
//! frame-pointer walks and the DWARF walk use it; a walk that falls back to libgcc is not
//! remembered. The thread's memo and its stack top share one thread-local (`PerThread`).
//!
//! # 5. Shared outer frames
//! A walk replayed whole needs the same start; an interpreter allocates from hundreds of
//! places below the same few dozen frames of its loop. So the DWARF walk's compiled rules
//! also keep the thread's last walk step by step (`trail`), and a walk that reaches one of
//! its frames (the same stack pointer and address, the same `bp` where the steps use it)
//! checks the words those steps read and copies their frames instead of unwinding them.
//! The memo's log notes those reads as the walk would have, so what it remembers stays a
//! function of the words it checks.

use crate::config::Unwinder;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

#[cfg(target_arch = "x86_64")]
mod cfi;
mod dwarf;
mod fp;
#[cfg(target_arch = "x86_64")]
mod fp_proof;
pub(crate) mod frames;
mod memo;
pub(crate) mod per_thread;
mod trail;

use dwarf::{capture_dwarf, capture_dwarf_at, capture_dwarf_from};
#[cfg(test)]
use fp::stack_hi;
use fp::{capture_fp, capture_fp_walk, frame_pointer, stack_pointer, FP_SUPPORTED};
pub(crate) use frames::Captured;
use per_thread::{thread_hi, PerThread};

const USE_FP: u8 = 0;
const USE_LIBGCC: u8 = 1;
const USE_CFI: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(USE_LIBGCC);
/// Set when the sampled allocations are the C library's `malloc` family (the preload
/// library): `Auto` then needs every object's evidence (§2).
static MALLOC_FAMILY: AtomicBool = AtomicBool::new(false);

/// Says that the sampled allocations are the C library's, made by any object of the
/// process (the preload library's agent, before its session starts).
pub(crate) fn sampling_the_c_library() {
    MALLOC_FAMILY.store(true, Ordering::Relaxed);
}

/// This thread's unwinding state, as a reference (`None` if its block could not be
/// mapped).
#[inline(always)]
fn this_thread<'a>() -> Option<&'a PerThread> {
    crate::engine::thread::blocks().map(|b| &b.callstack)
}

/// Runs `f` with this thread's stack top (0 when unknown) and its remembered walks (`None`
/// when a capture on this thread, interrupted by a signal, already uses them).
#[inline(always)]
fn with_thread<R>(f: impl FnOnce(usize, Option<&mut memo::Memo>) -> R) -> R {
    let Some(t) = this_thread() else {
        return f(0, None);
    };
    let hi = thread_hi(t);
    if t.memo_taken.replace(true) {
        return f(hi, None);
    }
    if !t.memo_ready.get() {
        // An empty memo copied from a constant (read-only data), not built on the stack
        // first: it is ~5.6 KB, and the sample path's stack must stay small.
        const EMPTY: memo::Memo = memo::Memo::new();
        // SAFETY: `memo_taken` was false and is now true, so nothing else refers to the
        // memo; it is this thread's own. Its first use on the thread fills it.
        unsafe { (*t.memo.get()).as_mut_ptr().copy_from_nonoverlapping(&EMPTY, 1) };
        t.memo_ready.set(true);
    }
    // SAFETY: the memo holds a value (`memo_ready`); `memo_taken` was false and is now
    // true: no other reference to it exists until it is cleared below, and the memo never
    // leaves the thread.
    let r = f(hi, Some(unsafe { (*t.memo.get()).assume_init_mut() }));
    t.memo_taken.set(false);
    r
}

/// Captures the current call stack into `out` (cleared first), at most `depth` frames.
///
/// The walk starts at the caller of `capture`'s caller: the return address into the
/// function that called `capture` (the profiler's sample path) is not recorded, so the
/// first frame is the allocator entry point and `depth` counts it and the program's frames.
/// `caller` is the address of the function that calls `capture` (used to find where to
/// start under libgcc, whose own frames vary).
///
/// Never allocates through the profiled allocator and never panics.
#[inline(never)]
pub fn capture(out: &mut Captured, depth: usize, caller: usize) {
    out.clear();
    match MODE.load(Ordering::Relaxed) {
        USE_FP => {
            // The walk starts at `capture`'s own frame record (read here, not in a closure
            // that might not be inlined), so the first return address is the one into
            // `caller`. Skipping it starts at the return from `caller` into its caller.
            let (fp, lo) = (frame_pointer(), stack_pointer());
            with_thread(|hi, memo| {
                if hi == 0 {
                    return;
                }
                let key = memo::Key {
                    tag: memo::Key::FRAME_POINTERS,
                    pc: 0,
                    sp: lo as u64,
                    bp: fp as u64,
                    lo: lo as u64,
                    shape: memo::Key::shape(depth, 1, false),
                };
                match memo {
                    Some(m) => {
                        if m.replay(&key, lo, out) {
                            return;
                        }
                        capture_fp_walk(out, depth, 1, fp, lo, hi, Some(m.begin()));
                        m.commit(&key, out, true);
                    }
                    None => capture_fp_walk(out, depth, 1, fp, lo, hi, None),
                }
            })
        }
        #[cfg(target_arch = "x86_64")]
        USE_CFI => {
            // The registers are `capture`'s own: the walk yields the program counter here,
            // then the return into `caller`, then the return from `caller`: skip two.
            let (pc, sp, bp) = registers();
            let mut walk = || {
                with_thread(|hi, memo| {
                    hi != 0
                        && cfi::walk(out, depth, 2, pc, sp, bp, hi, true, memo.map(|m| (m, true)))
                })
            };
            if walk() || (cfi::refresh_on_miss() && walk()) {
                return;
            }
            out.clear();
            cfi::count_fallback();
            capture_dwarf_from(out, depth, caller);
        }
        _ => capture_dwarf_from(out, depth, caller),
    }
}

/// [`capture`] for an allocator entry point that knows the program's registers at its entry:
/// `sp` is the stack pointer there (pointing at the return address into the program) and
/// `bp` the program's frame pointer register (the preload library's `malloc` passes both
/// from its first instruction). The walk starts at the program's frame, so none of the
/// profiler's frames is unwound or recorded and `depth` counts the program's frames only.
/// Falls back to [`capture`] when it cannot use them.
///
/// Never allocates through the profiled allocator and never panics.
#[inline(never)]
pub fn capture_at_entry(out: &mut Captured, depth: usize, caller: usize, sp: usize, bp: usize) {
    out.clear();
    with_thread(|hi, mut memo| {
        let Some(ra) = entry_return_address(hi, sp, depth) else {
            return capture(out, depth, caller);
        };
        let mode = MODE.load(Ordering::Relaxed);
        // The program's frame: its return address, and the stack pointer after the return.
        let (pc, after) = (ra as u64, sp as u64 + 8);
        // A repeated stack is replayed before any walker is set up (§4).
        let key = entry_key(mode, ra, sp, bp, depth);
        if let (Some(m), Some(key)) = (memo.as_deref_mut(), &key) {
            if m.replay(key, key.lo as usize, out) {
                #[cfg(target_arch = "x86_64")]
                if mode == USE_CFI {
                    cfi::check_replayed(out, depth, pc, after, bp as u64, hi);
                }
                return;
            }
        }
        match mode {
            USE_FP => {
                out.inline[0] = MaybeUninit::new(ra);
                out.len = 1;
                match (memo, key) {
                    (Some(m), Some(key)) => {
                        capture_fp_walk(out, depth, 0, bp, sp, hi, Some(m.begin()));
                        m.commit(&key, out, true);
                    }
                    _ => capture_fp_walk(out, depth, 0, bp, sp, hi, None),
                }
            }
            #[cfg(target_arch = "x86_64")]
            USE_CFI => {
                let mut memo = memo;
                let mut walk = |out: &mut Captured| {
                    let memo = memo.as_deref_mut().map(|m| (m, false));
                    cfi::walk(out, depth, 0, pc, after, bp as u64, hi, false, memo)
                };
                if walk(out) {
                    return;
                }
                // A library loaded since the table was built: list the objects again.
                if cfi::refresh_on_miss() {
                    out.clear();
                    if walk(out) {
                        return;
                    }
                }
                cfi::count_fallback();
                out.clear();
                capture_dwarf_at(out, depth, caller, ra);
            }
            _ => capture_dwarf_at(out, depth, caller, ra),
        }
    })
}

/// The return address at an allocator's entry `sp`, when a walk can start there: `sp` lies
/// in this thread's stack (whose top is `hi`, 0 when unknown), above the profiler's frames,
/// aligned, and holds a return address; `depth` asks for frames at all. Inlined, so the
/// profiler's frames are the caller's.
#[inline(always)]
fn entry_return_address(hi: usize, sp: usize, depth: usize) -> Option<usize> {
    let lo = stack_pointer();
    if hi == 0 || sp < lo || sp > hi.saturating_sub(8) || sp % 8 != 0 || depth == 0 {
        return None;
    }
    // SAFETY: [sp, sp + 8) is inside this thread's stack (checked above), mapped and
    // readable.
    let ra = unsafe { (sp as *const usize).read() };
    (ra != 0).then_some(ra)
}

/// The memo key of a walk from an allocator's entry (see [`capture_at_entry`]): `ra` is the
/// return address at `sp`. `None` for unwinders that do not remember walks.
#[inline(always)]
fn entry_key(mode: u8, ra: usize, sp: usize, bp: usize, depth: usize) -> Option<memo::Key> {
    let pc = ra as u64;
    match mode {
        // Frame records are looked for from the program's stack pointer up, as before the
        // memo: a stray `bp` never leads into the profiler's own frames.
        USE_FP => Some(memo::Key {
            tag: memo::Key::FRAME_POINTERS,
            pc,
            sp: sp as u64,
            bp: bp as u64,
            lo: sp as u64,
            shape: memo::Key::shape(depth, 0, false),
        }),
        #[cfg(target_arch = "x86_64")]
        // The walk starts at the program's frame: `sp + 8` once the return is taken.
        USE_CFI => cfi::key(pc, sp as u64 + 8, bp as u64, depth, 0, false),
        _ => None,
    }
}

/// The replay half of [`capture_at_entry`], to be inlined into an allocator's slow path
/// (the preload library's `malloc`): true when `out` now holds this thread's remembered
/// walk from the same entry, with every word it read unchanged (§4), so that a repeated
/// stack costs no call. On false `out` holds nothing useful: call [`capture_at_entry`],
/// which checks the same and walks.
///
/// Never allocates and never panics.
#[inline(always)]
pub fn replay_at_entry(out: &mut Captured, depth: usize, sp: usize, bp: usize) -> bool {
    let Some(t) = this_thread() else {
        return false;
    };
    // An unknown stack top (0) leaves it to `capture_at_entry`, which looks it up.
    let hi = t.hi.get();
    let Some(ra) = entry_return_address(hi, sp, depth) else {
        return false;
    };
    let mode = MODE.load(Ordering::Relaxed);
    let Some(key) = entry_key(mode, ra, sp, bp, depth) else {
        return false;
    };
    // A memo in use (a capture interrupted by a signal) or not yet filled: the full path.
    if !t.memo_ready.get() || t.memo_taken.replace(true) {
        return false;
    }
    out.clear();
    // SAFETY: the memo holds a value (`memo_ready`); `memo_taken` was false and is now
    // true, so no other reference to it exists until it is cleared below, and the memo
    // never leaves the thread.
    let replayed = unsafe { (*t.memo.get()).assume_init_mut() }.replay(&key, key.lo as usize, out);
    t.memo_taken.set(false);
    #[cfg(target_arch = "x86_64")]
    if replayed && mode == USE_CFI {
        cfi::check_replayed(out, depth, ra as u64, sp as u64 + 8, bp as u64, hi);
    }
    replayed
}

/// This function's `rip`, `rsp` and `rbp` (inlined: the caller's).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn registers() -> (u64, u64, u64) {
    let (pc, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers; no memory is touched and the stack is left alone.
    unsafe {
        core::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags)
        )
    };
    (pc, sp, bp)
}

/// Chooses the unwinder for the sample path. `Auto` uses frame pointers where they are
/// shown to be kept (§2), DWARF otherwise. Returns the unwinder in use: `Dwarf`
/// becomes `Libgcc` where the cached DWARF unwinder is unavailable (not x86_64, or no
/// loaded object has unwind tables), `FramePointer` becomes a DWARF one where frame
/// pointers are not walked.
pub fn select(unwinder: Unwinder) -> Unwinder {
    let chosen = match unwinder {
        Unwinder::Auto => {
            if probe_frame_pointers()
                && (!MALLOC_FAMILY.load(Ordering::Relaxed) || every_object_keeps_fp())
            {
                Unwinder::FramePointer
            } else {
                Unwinder::Dwarf
            }
        }
        other => other,
    };
    let (mode, used) = match chosen {
        Unwinder::FramePointer if FP_SUPPORTED => (USE_FP, Unwinder::FramePointer),
        Unwinder::Libgcc => (USE_LIBGCC, Unwinder::Libgcc),
        _ if cfi_prepare() => (USE_CFI, Unwinder::Dwarf),
        _ => (USE_LIBGCC, Unwinder::Libgcc),
    };
    MODE.store(mode, Ordering::Relaxed);
    used
}

/// Every loaded object's unwind tables show that it keeps frame pointers (§2).
fn every_object_keeps_fp() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        fp_proof::all_objects_keep_frame_pointers()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn cfi_prepare() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cfi::prepare()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Keeps the DWARF unwinder's module list current: rebuilds it when the loader has mapped
/// or unmapped objects since. Called at safe points (the tracker's polls), never on the
/// sample path.
pub fn maintain() {
    #[cfg(target_arch = "x86_64")]
    if MODE.load(Ordering::Relaxed) == USE_CFI {
        cfi::refresh(false);
    }
}

/// Call before `dlclose`: the DWARF unwinder stops using the module list until
/// [`after_dlclose`] (captures meanwhile go to libgcc), so no thread reads the unwind
/// tables of an object being unmapped.
pub(crate) fn before_dlclose() {
    #[cfg(target_arch = "x86_64")]
    cfi::before_dlclose();
}

/// Call after `dlclose` returned (see [`before_dlclose`]).
pub(crate) fn after_dlclose() {
    #[cfg(target_arch = "x86_64")]
    cfi::after_dlclose(MODE.load(Ordering::Relaxed) == USE_CFI);
}

/// In a forked child: releases what threads the child lacks held in the DWARF unwinder.
pub(crate) fn fork_child() {
    frames::fork_child();
    #[cfg(target_arch = "x86_64")]
    cfi::fork_child();
}

/// Makes every cached DWARF walk also run framehop alone and count disagreements (a
/// self-check for tests: `MEMPROF_UNWIND_CHECK=1` under `memprof record`). No effect where
/// the cached DWARF unwinder does not exist.
pub fn enable_unwind_check() {
    #[cfg(target_arch = "x86_64")]
    cfi::enable_check();
}

/// With [`enable_unwind_check`] on: (walks checked, walks whose frames differed from
/// framehop's own walk).
pub fn unwind_check_stats() -> (u64, u64) {
    #[cfg(target_arch = "x86_64")]
    {
        cfi::check_stats()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (0, 0)
    }
}

/// Captures the DWARF unwinder handed to libgcc since the process started (a frame in an
/// object without a table, no free cache, or an unwinding error).
pub fn dwarf_fallbacks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        cfi::fallbacks()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

#[inline(never)]
fn probe_frame_pointers() -> bool {
    if !FP_SUPPORTED {
        return false;
    }
    let mut fp = Captured::new();
    let mut dw = Captured::new();
    probe_outer(&mut fp, &mut dw);
    // The two walks were called from different call sites in `probe_inner`; from its
    // caller outwards they must see the same return addresses.
    let fp = fp.frames().get(1..).unwrap_or(&[]);
    let dw = dw.frames();
    if fp.len() < 4 {
        return false;
    }
    let Some(start) = dw.iter().position(|&a| a == fp[0]) else {
        return false;
    };
    let agree = fp.iter().zip(&dw[start..]).take(4).filter(|(a, b)| a == b).count();
    agree == 4.min(fp.len()).min(dw.len() - start)
}

#[inline(never)]
fn probe_outer(fp: &mut Captured, dw: &mut Captured) {
    probe_middle(fp, dw);
    core::hint::black_box(());
}

#[inline(never)]
fn probe_middle(fp: &mut Captured, dw: &mut Captured) {
    probe_inner(fp, dw);
    core::hint::black_box(());
}

#[inline(never)]
fn probe_inner(fp: &mut Captured, dw: &mut Captured) {
    capture_fp(fp, 16);
    capture_dwarf(dw, 64);
    core::hint::black_box(());
}

/// The cached DWARF walk on its own (tests): the first frame is the return into the
/// caller. False when it would have fallen back to libgcc.
#[cfg(all(test, target_arch = "x86_64"))]
#[inline(never)]
fn capture_cfi(out: &mut Captured, depth: usize) -> bool {
    out.clear();
    let (pc, sp, bp) = registers();
    let hi = stack_hi();
    hi != 0 && cfi::walk(out, depth, 1, pc, sp, bp, hi, true, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum How {
        Fp,
        Libgcc,
        #[cfg(target_arch = "x86_64")]
        Cfi,
    }

    const ALL: &[How] = &[
        How::Fp,
        How::Libgcc,
        #[cfg(target_arch = "x86_64")]
        How::Cfi,
    ];

    #[inline(never)]
    fn recurse(n: usize, out: &mut Captured, depth: usize, how: How) -> usize {
        if n == 0 {
            match how {
                How::Fp => capture_fp(out, depth),
                How::Libgcc => capture_dwarf(out, depth),
                #[cfg(target_arch = "x86_64")]
                How::Cfi => {
                    assert!(cfi::prepare());
                    assert!(capture_cfi(out, depth), "the cached DWARF walk fell back");
                }
            }
            return core::hint::black_box(0);
        }
        core::hint::black_box(recurse(n - 1, out, depth, how)) + 1
    }

    #[test]
    fn frame_pointers_are_kept_in_this_build() {
        assert!(probe_frame_pointers(), "this crate is built with -C force-frame-pointers=yes");
    }

    #[test]
    fn buffer_doubles_and_truncates() {
        for &how in ALL {
            let mut c = Captured::new();
            recurse(100, &mut c, 70, how);
            assert_eq!(c.frames().len(), 70, "{how:?}");
            assert!(c.truncated());
            let mut c = Captured::new();
            recurse(5, &mut c, 128, how);
            assert!(c.frames().len() >= 6 && c.frames().len() < 128, "{how:?}");
            assert!(!c.truncated());
        }
    }

    #[test]
    fn fp_and_dwarf_agree_on_a_recursion() {
        let mut a = Captured::new();
        let mut b = Captured::new();
        recurse(10, &mut a, 8, How::Fp);
        recurse(10, &mut b, 64, How::Libgcc);
        // The recursion's return addresses are the same in both walks.
        let a_frames = &a.frames()[1..];
        let b_frames = b.frames();
        let start = b_frames.iter().position(|x| *x == a_frames[0]).expect("common frame");
        assert_eq!(a_frames, &b_frames[start..start + a_frames.len()]);
    }

    /// The cached DWARF walk sees exactly libgcc's frames, from the recursion to the end of
    /// the stack (through the test harness and the standard library's thread start).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn cfi_and_libgcc_agree_to_the_end_of_the_stack() {
        #[inline(never)]
        fn both(n: usize, a: &mut Captured, b: &mut Captured) -> usize {
            if n == 0 {
                assert!(cfi::prepare());
                assert!(capture_cfi(a, 4096), "the cached DWARF walk fell back");
                capture_dwarf(b, 4096);
                return core::hint::black_box(0);
            }
            core::hint::black_box(both(n - 1, a, b)) + 1
        }
        // Twice each: the first walk derives the compiled rules, the second applies them.
        for n in [0, 3, 40, 0, 3, 40] {
            let (mut a, mut b) = (Captured::new(), Captured::new());
            both(n, &mut a, &mut b);
            assert!(!a.truncated() && !b.truncated());
            // The first frame is the return into `both` from its call of the walk, which
            // differs between the two; from the next one on they must be identical.
            let a_frames = &a.frames()[1..];
            let b_frames = b.frames();
            let start = b_frames.iter().position(|x| *x == a_frames[0]).expect("common frame");
            assert_eq!(a_frames, &b_frames[start..], "recursion {n}");
            assert!(a_frames.len() > n + 3, "recursion {n}: {} frames", a_frames.len());
        }
    }

    /// With the self-check on, every compiled-rule walk (cold and warm, at several depths,
    /// on several threads) agrees with framehop's own walk.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn compiled_rules_agree_with_framehop() {
        cfi::enable_check();
        let (walks, differed) = cfi::check_stats();
        let handles: Vec<_> = (0..3)
            .map(|t| {
                std::thread::spawn(move || {
                    for n in [0, 5, 17, 60] {
                        for depth in [4, 10, 128] {
                            let mut c = Captured::new();
                            recurse(n + t, &mut c, depth, How::Cfi);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let (walks2, differed2) = cfi::check_stats();
        assert!(walks2 >= walks + 36, "{walks} -> {walks2} walks checked");
        assert_eq!(differed2, differed, "walks that differed from framehop's");
    }

    /// Two callers with identical frames call the same capturing function, so both walks
    /// start from the same registers; only a word deeper in the stack (the return address
    /// into the caller) tells them apart. The remembered walks must replay each caller's
    /// own stack, and replay at all. (Two frames: the return into the caller and the one
    /// into `call`, the same for both walks of a round.)
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn remembered_walks_tell_apart_stacks_with_one_start() {
        #[inline(never)]
        fn walk_here(out: &mut Captured, memo: Option<&mut memo::Memo>) -> (u64, u64) {
            out.clear();
            let (pc, sp, bp) = registers();
            assert!(cfi::walk(out, 2, 1, pc, sp, bp, stack_hi(), true, memo.map(|m| (m, true))));
            (pc, sp)
        }
        #[inline(never)]
        fn via_a(out: &mut Captured, memo: Option<&mut memo::Memo>) -> (u64, u64) {
            // Different code in the two callers, so they are not folded into one.
            core::hint::black_box(1u8);
            let r = walk_here(out, memo);
            core::hint::black_box(r)
        }
        #[inline(never)]
        fn via_b(out: &mut Captured, memo: Option<&mut memo::Memo>) -> (u64, u64) {
            core::hint::black_box(2u16);
            let r = walk_here(out, memo);
            core::hint::black_box(r)
        }
        type Via = fn(&mut Captured, Option<&mut memo::Memo>) -> (u64, u64);
        // One call site for the walks with and without the memo: their stacks are equal.
        #[inline(never)]
        fn call(via: Via, out: &mut Captured, memo: Option<&mut memo::Memo>) -> (u64, u64) {
            let r = via(out, memo);
            core::hint::black_box(r)
        }
        assert!(cfi::prepare());
        let generation = || cfi::key(0, 0, 0, 0, 0, false).map(|k| k.tag);
        // Other tests rebuild the unwinder's table meanwhile (a new generation empties the
        // memo's use): a round that saw one is run again.
        for _ in 0..20 {
            let before = generation();
            let mut memo = Box::new(memo::Memo::new());
            let mut plain = Captured::new();
            let mut replayed = Captured::new();
            let mut starts = Vec::new();
            let (a, b): (Via, Via) = (via_a, via_b);
            for (i, via) in [a, b, a, a, b, b].into_iter().enumerate() {
                for remembered in [false, true] {
                    let (out, m) = if remembered {
                        (&mut replayed, Some(&mut *memo))
                    } else {
                        (&mut plain, None)
                    };
                    let start = call(via, out, m);
                    if remembered {
                        starts.push(start);
                    }
                }
                assert_eq!(replayed.frames(), plain.frames(), "walk {i}");
                assert_eq!(replayed.truncated(), plain.truncated());
            }
            assert!(starts.windows(2).all(|w| w[0] == w[1]), "one start: {starts:x?}");
            assert_ne!(via_a as *const () as usize, via_b as *const () as usize);
            if generation() != before {
                continue;
            }
            // a, b: walked (b from the start a's walk was remembered with, but another
            // word); then a, a, b, b: replayed.
            assert_eq!(memo.hits, 4);
            return;
        }
        panic!("the unwinder's table changed during every round");
    }

    #[test]
    fn threads_have_stack_bounds() {
        for &how in ALL {
            std::thread::spawn(move || {
                let mut c = Captured::new();
                recurse(3, &mut c, 32, how);
                assert!(c.frames().len() >= 4, "{how:?}");
            })
            .join()
            .unwrap();
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod timing {
    use super::*;
    #[inline(never)]
    fn rec(n: usize, f: &mut dyn FnMut()) -> usize {
        if n == 0 {
            f();
            return core::hint::black_box(0);
        }
        core::hint::black_box(rec(n - 1, f)) + 1
    }
    #[test]
    #[ignore]
    fn time_walks() {
        assert!(cfi::prepare());
        let mut c = Captured::new();
        let mut memo = Box::new(memo::Memo::new());
        let named = [("fp", 0), ("cfi", 1), ("cfi, replayed", 3), ("libgcc", 2)];
        for (name, how) in named {
            let n = if how == 2 { 20_000 } else { 1_000_000 };
            rec(20, &mut || {
                let t = std::time::Instant::now();
                for _ in 0..n {
                    match how {
                        0 => capture_fp(&mut c, 10),
                        1 => {
                            capture_cfi(&mut c, 10);
                        }
                        3 => {
                            c.clear();
                            let (pc, sp, bp) = registers();
                            let memo = Some((&mut *memo, true));
                            cfi::walk(&mut c, 10, 1, pc, sp, bp, stack_hi(), true, memo);
                        }
                        _ => capture_dwarf(&mut c, 10),
                    }
                }
                let ns = t.elapsed().as_nanos() as f64 / n as f64;
                eprintln!("{name}: {ns:.1} ns per 10-frame capture ({} frames)", c.frames().len());
            });
        }
    }
}
