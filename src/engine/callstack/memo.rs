//! Repeated stacks: a walk replayed by checking the words it read (callstack/mod.rs §4).
//!
//! A stack walk is a function of its start (program counter, stack pointer, frame pointer),
//! of the unwind rules of the addresses it meets and of the stack words it reads: nothing
//! else. So each thread remembers its last few walks: the start, the rules' generation,
//! every word read (address and value) and the frames found. A walk from the same start,
//! with the same generation, whose words all still hold the values read, would find the
//! same frames; it is replayed instead: the words are re-read and compared (independent
//! loads that overlap, where the walk is a chain of dependent ones), and the frames copied.
//! Programs sample the same few stacks over and over (an allocation in a loop), so most
//! walks are replays; any difference, in any word, is a miss and the walk runs.
//!
//! Only what the result depends on is kept. Code built without frame pointers uses `rbp`
//! as an ordinary register: the DWARF walk restores it from the stack in each frame that
//! saved it, but no rule of such code ever *uses* it. So a `bp` loaded from the stack is
//! logged only once a later rule uses `bp` (or framehop takes over, which may), and the
//! start's `bp` is part of the key only when a rule used it before any load replaced it:
//! a program's `rbp` at `malloc` (a loop variable, say) does not make every walk a miss.

use super::frames::{copy_words, Captured, INLINE_FRAMES};
use super::trail::Trails;

/// Walks remembered per thread.
const WAYS: usize = 4;
/// Deepest capture remembered (frames), and the most words such a walk may read.
pub(super) const FRAMES: usize = INLINE_FRAMES;
const READS: usize = 2 * FRAMES + 2;
/// Replays of at most this many frames copy a fixed block.
const SHORT: usize = 16;

/// What a walk started from, and how it was asked for. Two walks with equal keys and the
/// same words in memory give the same frames.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Key {
    /// The unwinder, and for the DWARF one the generation of its rules (module list).
    pub tag: u64,
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
    /// The lowest address the walk may read (its stack bound): where a word lies against
    /// it decides whether the walk reads it.
    pub lo: u64,
    /// Depth, frames skipped, whether `pc` is a program counter or a return address.
    pub shape: u64,
}

impl Key {
    /// The tag of frame-pointer walks (DWARF walks use their 32-bit rules generation).
    pub(super) const FRAME_POINTERS: u64 = 1 << 32;
    /// Never the key of a walk: marks an empty entry.
    const NONE: Key = Key { tag: u64::MAX, pc: 0, sp: 0, bp: 0, lo: 0, shape: 0 };

    /// Equal keys, `bp` aside.
    #[inline(always)]
    fn same_but_bp(&self, o: &Key) -> bool {
        self.tag == o.tag
            && self.pc == o.pc
            && self.sp == o.sp
            && self.lo == o.lo
            && self.shape == o.shape
    }

    /// A summary of the key, compared first (one word for each remembered walk, on one
    /// cache line).
    #[inline(always)]
    fn fingerprint(&self) -> u64 {
        // Not `bp`: a walk may not depend on it.
        self.pc.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ self.sp
            ^ self.lo.rotate_left(16)
            ^ self.shape
            ^ self.tag.rotate_left(48)
    }

    pub(super) fn shape(depth: usize, skip: usize, first: bool) -> u64 {
        (depth as u64 & 0xffff_ffff)
            | ((skip as u64 & 0x7fff_ffff) << 32)
            | (u64::from(first) << 63)
    }
}

/// The words a walk read, in order. Counting goes on past the room, which then marks the
/// walk as too long to remember.
pub(super) struct Log {
    n: usize,
    /// A read did not fit: the walk cannot be remembered.
    overflowed: bool,
    /// The index of the read that loaded the current `bp`, while no rule has used it
    /// ([`NO_BP`]: `bp` is the start's, or its load was used).
    pending_bp: usize,
    /// A rule used the start's `bp` (before any load replaced it).
    start_bp_used: bool,
    /// No load has replaced the start's `bp` yet.
    bp_is_start: bool,
    reads: [(u64, u64); READS],
}

const NO_BP: usize = usize::MAX;

impl Log {
    /// Notes that the word at `addr` held `value`, which the walk depends on.
    #[inline(always)]
    pub(super) fn note(&mut self, addr: u64, value: u64) {
        match self.reads.get_mut(self.n) {
            Some(r) => {
                *r = (addr, value);
                self.n += 1;
            }
            None => self.overflowed = true,
        }
    }

    /// The walk will not be remembered (it is too deep to be): nothing more need be noted.
    #[inline(always)]
    pub(super) fn give_up(&mut self) {
        self.overflowed = true;
    }

    /// Whether the walk can no longer be remembered ([`Log::give_up`], or a read that did
    /// not fit).
    #[inline(always)]
    pub(super) fn given_up(&self) -> bool {
        self.overflowed
    }

    /// Notes that `bp` was loaded from the word at `addr`: needed only if a rule uses it
    /// before the next load (see the module documentation). A previous load nobody used is
    /// dropped.
    #[inline(always)]
    pub(super) fn note_bp(&mut self, addr: u64, value: u64) {
        self.bp_is_start = false;
        // The load nobody used gives its place to this one (the reads' order does not
        // matter): moving the last read into it instead read back, as one wide load, the
        // two words `note` had just stored, which waits for them to reach the cache.
        let i = self.pending_bp;
        if i < self.n {
            self.reads[i] = (addr, value);
            return;
        }
        if self.n < READS {
            self.pending_bp = self.n;
        }
        self.note(addr, value);
    }

    /// Notes that a rule (or framehop) uses the current `bp`.
    #[inline(always)]
    pub(super) fn use_bp(&mut self) {
        self.pending_bp = NO_BP;
        if self.bp_is_start {
            self.start_bp_used = true;
        }
    }

    /// Forgets the load of a `bp` that nothing used (the reads' order does not matter).
    #[inline(always)]
    fn drop_pending_bp(&mut self) {
        let i = self.pending_bp;
        if i < self.n {
            self.n -= 1;
            self.reads[i] = self.reads[self.n];
        }
        self.pending_bp = NO_BP;
    }
}

struct Entry {
    key: Key,
    /// The walk used the start's `bp`: it is compared with the key's.
    uses_bp: bool,
    /// Lowest address read: a replay needs it inside the stack bounds of its own walk.
    lowest: u64,
    len: usize,
    truncated: bool,
    log: Log,
    frames: [usize; FRAMES],
}

/// A thread's remembered walks.
pub(super) struct Memo {
    /// The fingerprints of the entries' keys (0 for an empty entry).
    prints: [u64; WAYS],
    entries: [Entry; WAYS],
    /// The entry the next remembered walk replaces.
    next: usize,
    /// The last walk's steps, for walks that share its outer frames (`trail`).
    trails: Trails,
    /// Replays so far (tests).
    #[cfg(test)]
    pub(super) hits: usize,
}

impl Memo {
    pub(super) const fn new() -> Memo {
        const EMPTY: Entry = Entry {
            key: Key::NONE,
            lowest: 0,
            len: 0,
            truncated: false,
            uses_bp: true,
            log: Log {
                n: 0,
                overflowed: false,
                pending_bp: NO_BP,
                start_bp_used: false,
                bp_is_start: true,
                reads: [(0, 0); READS],
            },
            frames: [0; FRAMES],
        };
        Memo {
            prints: [0; WAYS],
            entries: [EMPTY; WAYS],
            next: 0,
            trails: Trails::new(),
            #[cfg(test)]
            hits: 0,
        }
    }

    /// Replays the remembered walk of `key` into `out` (empty) when every word it read lies
    /// at or above `lo` and still holds the value read then. False on a miss (`out` is
    /// left empty).
    #[inline(always)]
    pub(super) fn replay(&mut self, key: &Key, lo: usize, out: &mut Captured) -> bool {
        let print = key.fingerprint();
        // Walks from one start can differ further up (another caller): try each.
        for (i, e) in self.entries.iter().enumerate() {
            if self.prints[i] != print
                || !e.key.same_but_bp(key)
                || (e.uses_bp && e.key.bp != key.bp)
                || e.lowest < lo as u64
            {
                continue;
            }
            let mut diff = 0u64;
            for &(addr, value) in &e.log.reads[..e.log.n] {
                // SAFETY: the walk that read this word checked it lay in `[lo', stack top)`
                // of this thread (the memo is thread-local), with `lo'` its own lower bound.
                // The word is at or above `lo` (checked above), the current walk's lower
                // bound, which is at or above the current stack pointer: the word is in the
                // live part of this thread's stack, mapped and readable. Stack words are
                // plain integers.
                diff |= unsafe { (addr as *const u64).read_unaligned() } ^ value;
            }
            if diff != 0 {
                continue;
            }
            let dst = out.inline.as_mut_ptr() as *mut usize;
            if e.len <= SHORT {
                // One fixed-size copy (a few vector moves) for the usual short stacks.
                // SAFETY: both arrays hold FRAMES >= SHORT words and are distinct objects;
                // the words past `len` are not read (`out.len` says how many are frames).
                unsafe {
                    (dst as *mut [usize; SHORT])
                        .write((e.frames.as_ptr() as *const [usize; SHORT]).read())
                };
            } else {
                // SAFETY: e.len < FRAMES = INLINE_FRAMES (checked in `commit`): within both
                // arrays, which are distinct objects.
                unsafe { copy_words(dst, e.frames.as_ptr(), e.len) };
            }
            out.len = e.len;
            out.truncated = e.truncated;
            #[cfg(test)]
            {
                self.hits += 1;
            }
            return true;
        }
        false
    }

    /// The log for a walk about to run: the entry it may replace is emptied first, so a
    /// walk cut short leaves no entry behind.
    #[inline]
    pub(super) fn begin(&mut self) -> &mut Log {
        self.prints[self.next] = 0;
        let e = &mut self.entries[self.next];
        e.key = Key::NONE;
        e.log.n = 0;
        e.log.overflowed = false;
        e.log.pending_bp = NO_BP;
        e.log.start_bp_used = false;
        e.log.bp_is_start = true;
        &mut e.log
    }

    /// [`Memo::begin`], and the thread's trails of steps beside the log.
    #[inline]
    pub(super) fn begin_with_trails(&mut self) -> (&mut Log, &mut Trails) {
        self.begin();
        (&mut self.entries[self.next].log, &mut self.trails)
    }

    /// Remembers the walk just logged (after [`Memo::begin`]) as the one for `key`, with
    /// the frames it gave, unless it was too deep or read too many words. `uses_bp`: the
    /// walk depends on the start's `bp` whatever the log says (the frame-pointer walk).
    #[inline]
    pub(super) fn commit(&mut self, key: &Key, out: &Captured, uses_bp: bool) {
        let e = &mut self.entries[self.next];
        let frames = out.frames();
        // A walk that filled the inline buffer may have gone on in a path that does not log
        // (the frame-pointer walk's growing loop): only shorter ones are kept.
        if e.log.overflowed || frames.len() >= FRAMES || !out.heap.is_null() {
            return;
        }
        e.log.drop_pending_bp();
        e.uses_bp = uses_bp || e.log.start_bp_used;
        e.lowest = e.log.reads[..e.log.n].iter().map(|r| r.0).min().unwrap_or(u64::MAX);
        e.frames[..frames.len()].copy_from_slice(frames);
        e.len = frames.len();
        e.truncated = out.truncated();
        e.key = *key;
        self.prints[self.next] = key.fingerprint();
        self.next = (self.next + 1) % WAYS;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_only_while_every_word_is_unchanged() {
        let stack = [10u64, 20, 30, 40];
        let lo = stack.as_ptr() as usize;
        let key = Key {
            tag: 1,
            pc: 5,
            sp: lo as u64,
            bp: 0,
            lo: lo as u64,
            shape: Key::shape(4, 0, false),
        };
        let mut memo = Memo::new();
        let log = memo.begin();
        for w in &stack[1..3] {
            log.note(w as *const u64 as u64, *w);
        }
        let mut out = Captured::new();
        out.inline[0] = core::mem::MaybeUninit::new(7);
        out.inline[1] = core::mem::MaybeUninit::new(8);
        out.len = 2;
        memo.commit(&key, &out, true);

        let mut again = Captured::new();
        assert!(memo.replay(&key, lo, &mut again));
        assert_eq!(again.frames(), &[7, 8]);
        assert!(!again.truncated());

        let other = Key { bp: 1, ..key };
        assert!(!memo.replay(&other, lo, &mut Captured::new()), "another start");
        assert!(!memo.replay(&key, lo + 16, &mut Captured::new()), "a word below the bound");
        let mut changed = stack;
        let key2 = Key { sp: changed.as_ptr() as u64, ..key };
        let log = memo.begin();
        for w in &changed[1..3] {
            log.note(w as *const u64 as u64, *w);
        }
        memo.commit(&key2, &out, true);
        changed[2] = 31;
        let lo2 = core::hint::black_box(&changed).as_ptr() as usize;
        assert!(!memo.replay(&key2, lo2, &mut Captured::new()), "a word changed");
        changed[2] = 30;
        assert!(memo.replay(
            &key2,
            core::hint::black_box(&changed).as_ptr() as usize,
            &mut Captured::new()
        ));
    }

    /// A `bp` loaded and never used is not a condition of the replay, nor is the start's
    /// when no rule used it; once used, both are.
    #[test]
    fn only_the_bp_a_walk_used_is_checked() {
        let mut stack = [10u64, 20, 30, 40];
        let lo = stack.as_ptr() as usize;
        let at = |i: usize| &stack[i] as *const u64 as u64;
        let (a0, a1, a2) = (at(0), at(1), at(2));
        let key = Key { tag: 1, pc: 5, sp: lo as u64, bp: 77, lo: lo as u64, shape: 0 };
        let mut out = Captured::new();
        out.inline[0] = core::mem::MaybeUninit::new(7);
        out.len = 1;

        // ra at [0]; bp loaded from [1] and replaced by a load from [2], neither used.
        let mut memo = Memo::new();
        let log = memo.begin();
        log.note(a0, 10);
        log.note_bp(a1, 20);
        log.note_bp(a2, 30);
        memo.commit(&key, &out, false);
        assert!(memo.replay(&Key { bp: 1, ..key }, lo, &mut Captured::new()), "another bp");
        stack[1] = 21;
        stack[2] = 31;
        let lo2 = core::hint::black_box(&stack).as_ptr() as usize;
        assert!(memo.replay(&key, lo2, &mut Captured::new()), "unused loads changed");
        stack[0] = 11;
        let lo3 = core::hint::black_box(&stack).as_ptr() as usize;
        assert!(!memo.replay(&key, lo3, &mut Captured::new()), "the return address changed");
        stack[0] = 10;

        // The start's bp used, then a load from [1] used: both are conditions.
        let mut memo = Memo::new();
        let log = memo.begin();
        log.use_bp();
        log.note(a0, 10);
        log.note_bp(a1, 21);
        log.use_bp();
        memo.commit(&key, &out, false);
        let lo4 = core::hint::black_box(&stack).as_ptr() as usize;
        assert!(memo.replay(&key, lo4, &mut Captured::new()));
        assert!(!memo.replay(&Key { bp: 1, ..key }, lo4, &mut Captured::new()), "start bp");
        stack[1] = 22;
        let lo5 = core::hint::black_box(&stack).as_ptr() as usize;
        assert!(!memo.replay(&key, lo5, &mut Captured::new()), "the used load changed");
    }

    #[test]
    fn long_walks_are_not_remembered() {
        let word = 1u64;
        let key = Key { tag: 1, pc: 5, sp: 0, bp: 0, lo: 0, shape: 0 };
        let mut memo = Memo::new();
        let log = memo.begin();
        for _ in 0..=READS {
            log.note(&word as *const u64 as u64, 1);
        }
        memo.commit(&key, &Captured::new(), true);
        assert!(!memo.replay(&key, 0, &mut Captured::new()));
    }
}
