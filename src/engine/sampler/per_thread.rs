//! A thread's sampler state beyond its countdown: its number in the session, its block of
//! sample ids, its generator and the rates cached for the session. It lives in the
//! thread's lazily mapped block ([`crate::engine::thread`]), so the block's file sees only
//! this type, not the sampler that uses it.

use core::cell::{Cell, UnsafeCell};
use core::mem::MaybeUninit;
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// A thread's sampler state beyond its countdown (in its lazily mapped block,
/// `crate::engine::thread`).
pub(crate) struct ThreadState {
    /// The epoch of the thread's number and generator.
    pub(super) epoch: Cell<u64>,
    /// The thread's next sample id and the end of its block (see [`ID_BLOCK`](super::ID_BLOCK)).
    pub(super) next_id: Cell<u64>,
    pub(super) id_end: Cell<u64>,
    /// Thread number within the current epoch's session.
    pub(super) thread: Cell<u32>,
    /// The session's rate (`p`, the gap scale, the many-points threshold), cached per
    /// epoch (all-zero in a fresh block: written before it is read).
    pub(super) rate: Cell<super::rate::Rate>,
    /// The generator holds a value (seeded in some session).
    seeded: Cell<bool>,
    /// A draw is running on this thread (a signal handler's allocation may interrupt it).
    drawing: Cell<bool>,
    /// The thread's generator, valid while `seeded`.
    rng: UnsafeCell<MaybeUninit<SmallRng>>,
}

impl ThreadState {
    /// Seeds the generator. False while a draw runs (an interrupted one keeps it).
    pub(super) fn seed(&self, seed: u64) -> bool {
        if self.drawing.get() {
            return false;
        }
        // SAFETY: no draw runs on this thread (checked above), so nothing borrows the
        // generator; the state is this thread's own. `SmallRng` has no destructor, so
        // overwriting an earlier value leaks nothing.
        unsafe { (*self.rng.get()).write(SmallRng::seed_from_u64(seed)) };
        self.seeded.set(true);
        true
    }

    /// Runs `f` with the generator: `None` before it is seeded, or while a draw it would
    /// interrupt runs.
    #[inline(always)]
    pub(super) fn draw<R>(&self, f: impl FnOnce(&mut SmallRng) -> R) -> Option<R> {
        if !self.seeded.get() || self.drawing.replace(true) {
            return None;
        }
        // SAFETY: `seeded` says the generator holds a value; `drawing` was false and is
        // now true, so no other reference to it exists until it is cleared below (the
        // state never leaves its thread).
        let r = f(unsafe { (*self.rng.get()).assume_init_mut() });
        self.drawing.set(false);
        Some(r)
    }
}
