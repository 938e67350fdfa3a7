//! Shared outer frames: the last walk's steps, replayed from where a new walk meets them
//! (callstack/mod.rs §5).
//!
//! A remembered walk (`memo`) is replayed only whole: from the same start, with every word
//! it read unchanged. An interpreter's allocations come from hundreds of places, each at
//! the bottom of the same few dozen frames of the interpreter's loop, so few walks repeat
//! whole, while most share their outer part with the walk before. So each thread also
//! keeps its last walk's steps (the compiled rules' loop, `cfi` §4): for each frame, its
//! stack pointer, lookup address and `bp`, the words the step read and what it found. A new
//! walk that reaches a frame with the same stack pointer and lookup address as one of those
//! steps (and the same `bp`, when the steps from there use it) would go on exactly as the
//! last walk did, as long as every word those steps read still holds its value: a step is a
//! function of its registers, of the rule of its address (the same table generation gives
//! the same rules) and of the words it reads. So the words are compared (independent
//! loads, where the walk is a chain of dependent ones) and the frames copied.
//!
//! Only a walk whose steps from its last entry into the rules' loop ran there to the
//! stack's end (a rule that ends it, or a return address of 0) is kept, and at most
//! [`STEPS`] steps of it: the frames a replay copies are the ones such a walk would find
//! next and then stop. A walk that met the trail and went on as it is the trail from then
//! on: its own steps in front of the one it met (the next walk most likely shares most with
//! it), so a thread's trail follows the walks it makes.

/// Steps a trail holds.
pub(super) const STEPS: usize = 48;

/// One step of a walk: unwinding the frame at `sp` whose lookup address is `key`.
#[derive(Clone, Copy)]
pub(super) struct Step {
    pub(super) sp: u64,
    pub(super) key: u64,
    pub(super) bp: u64,
    /// The return address read (at `sp + ra_off`), the next frame; 0 for a step that ended
    /// the stack by its rule (it read nothing).
    pub(super) ra: u64,
    /// The word `bp` was loaded from and its value, when the step loads it.
    pub(super) bp_at: u64,
    pub(super) bp_val: u64,
    pub(super) ra_off: u32,
    pub(super) flags: u8,
}

// The trail, the steps being recorded, the remembered walks and the rest of a thread's
// state fit the pages its block counts (`engine::thread`).
const _: () = assert!(size_of::<Step>() == 56);

/// [`Step::flags`]: the CFA was computed from `bp`.
pub(super) const CFA_FROM_BP: u8 = 1;
/// [`Step::flags`]: the step loaded `bp` (from `bp_at`).
pub(super) const LOADS_BP: u8 = 2;
/// [`Step::flags`]: the load's address was computed from `bp`.
pub(super) const LOAD_FROM_BP: u8 = 4;
/// [`Step::flags`]: the rule ended the stack here.
pub(super) const ENDS: u8 = 8;
/// [`Step::flags`], set when a trail is kept: the steps from this one use the `bp` this
/// step starts with.
const BP_LIVE: u8 = 16;
/// [`Step::flags`], set when a trail is kept: a later step uses the `bp` this one loads.
const LOAD_USED: u8 = 32;

impl Step {
    pub(super) const EMPTY: Step =
        Step { sp: 0, key: 0, bp: 0, ra: 0, bp_at: 0, bp_val: 0, ra_off: 0, flags: 0 };

    /// Where the step read its return address.
    #[inline(always)]
    pub(super) fn ra_at(&self) -> u64 {
        self.sp.wrapping_add(u64::from(self.ra_off))
    }
}

/// A thread's trail: the last walk's steps, kept at the end of `steps` (its outermost
/// step last, at [`STEPS`] − 1, so that a walk that meets it at a step puts its own steps
/// in front of that one and moves nothing), and the steps of the walk being recorded.
pub(super) struct Trails {
    /// The rules' generation the last walk's steps were unwound with; [`u64::MAX`]: none.
    generation: u64,
    /// Where the last walk's steps start in `steps` ([`STEPS`]: none).
    start: usize,
    steps: [Step; STEPS],
    /// The walk being recorded, in its order.
    rec: [Step; STEPS],
    rec_n: usize,
    /// The walk being recorded took more steps than [`STEPS`], or one a trail cannot hold.
    spoiled: bool,
}

/// Where a new walk is in the last one's steps (a position only moves outward).
pub(super) struct Cursor {
    at: usize,
}

impl Trails {
    pub(super) const fn new() -> Trails {
        Trails {
            generation: u64::MAX,
            start: STEPS,
            steps: [Step::EMPTY; STEPS],
            rec: [Step::EMPTY; STEPS],
            rec_n: 0,
            spoiled: false,
        }
    }

    /// Starts recording a walk's steps (each entry into the rules' loop starts over).
    #[inline(always)]
    pub(super) fn begin(&mut self) -> Cursor {
        self.rec_n = 0;
        self.spoiled = false;
        Cursor { at: self.start }
    }

    /// Records a step of the walk being recorded.
    #[inline(always)]
    pub(super) fn record(&mut self, s: Step) {
        match self.rec.get_mut(self.rec_n) {
            Some(slot) => {
                *slot = s;
                self.rec_n += 1;
            }
            None => self.spoiled = true,
        }
    }

    /// The walk being recorded took a step a trail cannot hold: it is not to be kept.
    #[cold]
    pub(super) fn spoil(&mut self) {
        self.spoiled = true;
    }

    /// The walk being recorded reached the stack's end in the rules' loop under rules of
    /// `generation`: its steps become the last walk's.
    #[inline]
    pub(super) fn keep(&mut self, generation: u32) {
        let n = self.rec_n;
        if self.spoiled || n == 0 {
            return;
        }
        self.steps[STEPS - n..].copy_from_slice(&self.rec[..n]);
        self.start = STEPS - n;
        self.generation = u64::from(generation);
        self.work_out(STEPS, false);
    }

    /// The walk being recorded met the last one at its step `from` (as [`Trails::meet`]
    /// found) and went on as it: its own steps go in front of that one, and the whole is the
    /// last walk now (the next walk most likely shares most with this one).
    #[inline]
    pub(super) fn keep_met(&mut self, from: usize) {
        let n = self.rec_n;
        if self.spoiled || n > from || from >= STEPS {
            return;
        }
        self.steps[from - n..from].copy_from_slice(&self.rec[..n]);
        self.start = from - n;
        let live = self.steps[from].flags & BP_LIVE != 0;
        self.work_out(from, live);
    }

    /// Works out, backwards from step `end` (whose steps on use the `bp` they start with
    /// when `live`), which steps' starting `bp` the rest uses and which loads are used.
    fn work_out(&mut self, end: usize, mut live: bool) {
        for s in self.steps[self.start..end].iter_mut().rev() {
            let loads = s.flags & LOADS_BP != 0;
            let uses = s.flags & (CFA_FROM_BP | LOAD_FROM_BP) != 0;
            s.flags &= !(BP_LIVE | LOAD_USED);
            if loads && live {
                s.flags |= LOAD_USED;
            }
            live = uses || (!loads && live);
            if live {
                s.flags |= BP_LIVE;
            }
        }
    }

    /// The steps of the last walk from the one that unwinds the frame at `sp` with lookup
    /// address `key` and `bp` (moving `c` outward to it), and where that step is, when that
    /// walk was kept under rules of `generation` and there is such a step: the new walk
    /// goes on as they went, if their words still hold.
    #[inline(always)]
    pub(super) fn meet(
        &self,
        c: &mut Cursor,
        generation: u32,
        sp: u64,
        key: u64,
        bp: u64,
    ) -> Option<(usize, &[Step])> {
        while c.at < STEPS && self.steps[c.at].sp < sp {
            c.at += 1;
        }
        let s = self.steps.get(c.at)?;
        if s.sp != sp || s.key != key || self.generation != u64::from(generation) {
            return None;
        }
        if s.flags & BP_LIVE != 0 && s.bp != bp {
            return None;
        }
        Some((c.at, &self.steps[c.at..]))
    }
}

/// Whether a step's words still hold what it read: its return address, and the `bp` it
/// loaded when a later step uses it. `read` reads a word of the stack (`None`: outside the
/// walk's bounds).
#[inline(always)]
pub(super) fn holds(s: &Step, read: impl Fn(u64) -> Option<u64>) -> bool {
    if s.flags & ENDS != 0 {
        return true;
    }
    if read(s.ra_at()) != Some(s.ra) {
        return false;
    }
    s.flags & LOAD_USED == 0 || read(s.bp_at) == Some(s.bp_val)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(sp: u64, key: u64, ra: u64, flags: u8) -> Step {
        Step { sp, key, bp: 0, ra, bp_at: 0, bp_val: 0, ra_off: 8, flags }
    }

    /// A walk is met at the step with its stack pointer and lookup address, only once it
    /// was kept, only under the same rules, and with the same `bp` where the steps use it.
    #[test]
    fn a_walk_meets_the_last_one_where_they_coincide() {
        let mut t = Trails::new();
        t.begin();
        t.record(step(100, 1, 11, 0));
        t.record(step(200, 10, 21, CFA_FROM_BP));
        t.record(step(300, 20, 0, 0));
        let mut c = Cursor { at: t.start };
        assert!(t.meet(&mut c, 7, 200, 10, 0).is_none(), "not kept yet");
        t.keep(7);
        let mut c = t.begin();
        assert!(t.meet(&mut c, 7, 150, 10, 0).is_none(), "no step at that sp");
        let met = t.meet(&mut c, 7, 200, 10, 0).map(|s| s.1.len());
        assert_eq!(met, Some(2));
        let mut c = Cursor { at: t.start };
        assert!(t.meet(&mut c, 8, 200, 10, 0).is_none(), "other rules");
        let mut c = Cursor { at: t.start };
        assert!(t.meet(&mut c, 7, 200, 10, 5).is_none(), "the CFA comes from another bp");
        let mut c = Cursor { at: t.start };
        assert!(t.meet(&mut c, 7, 300, 20, 5).is_some(), "this step does not use bp");
        let mut c = Cursor { at: t.start };
        assert!(t.meet(&mut c, 7, 200, 11, 0).is_none(), "another address");
    }

    /// A step's words hold when its return address does, and its `bp` load where a later
    /// step uses it; a load nobody uses is no condition.
    #[test]
    fn only_the_words_used_are_conditions() {
        let mut t = Trails::new();
        t.begin();
        let mut loads = step(100, 1, 11, LOADS_BP);
        (loads.bp_at, loads.bp_val) = (90, 5);
        t.record(loads);
        t.record(step(200, 10, 0, CFA_FROM_BP));
        t.keep(1);
        let mut c = Cursor { at: t.start };
        let steps = t.meet(&mut c, 1, 100, 1, 0).unwrap().1;
        let mem = |ra: u64, bp: u64| move |a: u64| Some(if a == 90 { bp } else { ra });
        assert!(holds(&steps[0], mem(11, 5)));
        assert!(!holds(&steps[0], mem(12, 5)), "the return address changed");
        assert!(!holds(&steps[0], mem(11, 6)), "the used bp changed");
        let mut t = Trails::new();
        t.begin();
        t.record(loads);
        t.record(step(200, 10, 0, 0));
        t.keep(1);
        let mut c = Cursor { at: t.start };
        let steps = t.meet(&mut c, 1, 100, 1, 0).unwrap().1;
        assert!(holds(&steps[0], mem(11, 6)), "nobody uses that bp");
    }

    #[test]
    fn walks_deeper_than_the_trail_are_not_kept() {
        let mut t = Trails::new();
        t.begin();
        for i in 0..=STEPS as u64 {
            t.record(step(100 + i * 16, i, i + 1, 0));
        }
        t.keep(1);
        let mut c = Cursor { at: t.start };
        assert!(t.meet(&mut c, 1, 100, 0, 0).is_none());
    }
}
