//! What `memprof record`'s collector hands a recorder from another process: readings of
//! its resident memory, how it ended, its allocations, and the frees that name their
//! blocks (`live` §5) or whose blocks the collector found by address (`live` §6) instead
//! of a token.

use super::Recorder;
use crate::profile::format::spec;
use crate::profile::{Ended, Free, Resident, ResidentSplit, StackId};
use crate::session::tracker::Allocation;

/// What a recorder made of another process's allocation: the stack it was interned as,
/// and the id the fold gave its (stack, size) pair (`None` when the profile keeps no
/// vectors by pair id).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Collected {
    pub(crate) stack: StackId,
    pub(crate) pair: Option<u32>,
}

/// Another process's sampled block as its free names it (`live` §5): its sample
/// id, the key of its stack, its sampled size and points, and its allocation's time in
/// session nanoseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Named {
    pub(crate) id: u64,
    pub(crate) key: u64,
    pub(crate) size: u64,
    pub(crate) k: u64,
    pub(crate) alloc_ns: u64,
}

impl Recorder {
    /// Records a reading of the recorded process's resident memory (`memprof record`'s
    /// collector).
    pub(crate) fn resident(&mut self, r: Resident) {
        self.write(|w| w.write_resident(&r));
        self.profile.resident.push(r);
    }

    /// Records a reading of the recorded process's resident memory by kind of mapping
    /// (`memprof record`'s collector).
    pub(crate) fn split(&mut self, r: ResidentSplit) {
        self.write(|w| w.write_split(&r));
        self.profile.splits.push(r);
    }

    /// Records how the recorded process ended (`memprof record`'s collector, before
    /// [`Recorder::stop_as`] or the end).
    pub(crate) fn ended(&mut self, e: Ended) {
        self.write(|w| w.write_ended(&e));
        self.profile.ended = Some(e);
    }

    /// The collector keeps the process's live blocks itself (its map by address, `live`
    /// §6): the fold keeps no index of its own ([`Profile::keep_live_outside`]).
    ///
    /// [`Profile::keep_live_outside`]: crate::profile::Profile::keep_live_outside
    pub(crate) fn keep_live_outside(&mut self) {
        self.profile.keep_live_outside();
    }

    /// Hands the fold the live blocks the collector keeps: (stack, size, allocation time in
    /// session nanoseconds, points) of each, times taken as the file stores them.
    pub(crate) fn set_live_blocks(
        &mut self,
        blocks: impl Iterator<Item = (StackId, u64, u64, u64)>,
    ) {
        let unit = self.stored_unit;
        let stored = move |t| unit.map_or(t, |u| spec::stored_ns(t, u));
        self.profile.set_live_blocks(blocks.map(|(stack, size, t, k)| (stack, size, stored(t), k)));
    }

    /// Folds an allocation of another process (`memprof record`'s collector, with
    /// [`Recorder::of_process`] and [`Recorder::folding`]): no token is kept, as its free
    /// names the block itself ([`Recorder::collected_free`]).
    /// Returns the stack it was interned as, which a collector that keeps the blocks by
    /// address (`live` §6) hands back with the block's free ([`Recorder::collected_end`]).
    pub(crate) fn collected_alloc(&mut self, a: &Allocation<'_>) -> Collected {
        let (sample, pair) = self.sample(a);
        Collected { stack: sample.stack, pair }
    }

    /// [`Recorder::collected_alloc`] of an allocation whose frames are those of stack
    /// `stack`, as it was interned (the words as they came: `engine::known`), without
    /// interning them again; `None`, with nothing done, when the frames might intern as
    /// another stack now (a module generation shifts addresses: the caller hands them
    /// whole).
    pub(crate) fn collected_alloc_as(
        &mut self,
        a: &Allocation<'_>,
        stack: StackId,
    ) -> Option<Collected> {
        if self.generations.shifting() || a.label.is_some() {
            return None;
        }
        let s = self.profile.stacks.get(stack as usize)?;
        if s.label != 0 || s.truncated != a.callstack.truncated() {
            return None;
        }
        if self.deferred.is_some() {
            self.open_deferred();
        }
        let (_, pair) = self.sample_as(a, stack);
        Some(Collected { stack, pair })
    }

    /// The stack a free of another process names by `key` (`live` §5), of a
    /// block of `size` bytes with `k` points allocated at `alloc_ns` that is live, newest
    /// stack first: several stacks share a key only when their raw frames are the same
    /// under two module generations (a library unloaded and another mapped at its place),
    /// or by a hash collision, and the live one is the block's (of two live candidates the
    /// aggregates, which count blocks by stack, size and allocation unit, cannot tell).
    /// With it, whether it is the only stack of its key.
    fn collected_stack(
        &self,
        key: u64,
        size: u64,
        k: u64,
        alloc_ns: u64,
    ) -> Option<(StackId, bool)> {
        let ids = self.interned.get(&key)?;
        let stored = match self.stored_unit {
            Some(unit) => spec::stored_ns(alloc_ns, unit),
            None => alloc_ns,
        };
        match ids.as_slice() {
            [only] => Some((*only, true)),
            _ => ids
                .iter()
                .rev()
                .copied()
                .find(|&s| self.profile.holds(s, size, k, stored))
                .map(|s| (s, false)),
        }
    }

    /// Folds the free, at `time_ns`, of another process's block (the fields of its death's
    /// event, times in session nanoseconds) and writes it. False, with nothing changed,
    /// when no such block is live: its allocation has not been read yet (a free kept aside
    /// by a full queue), or never will be.
    pub(crate) fn collected_free(&mut self, b: &Named, time_ns: u64) -> bool {
        let Named { id, key, size, k, alloc_ns } = *b;
        // `only`: the key names one stack, and the hint may be remembered.
        let (stack, hint, only) = match self.death_hints.get(key, size) {
            Some((stack, pair)) => (stack, Some(pair), false),
            None => match self.collected_stack(key, size, k, alloc_ns) {
                Some((stack, only)) => (stack, None, only),
                None => return false,
            },
        };
        let free = Free { id, time_ns, stack, size, k, alloc_ns, life_ns: None };
        let Some(pair) = self.end(&free, hint) else {
            return false;
        };
        // Remembered only for a key that names one stack: `collected_stack`'s answer.
        if let (true, Some(pair)) = (only, pair) {
            self.death_hints.put(key, size, stack, pair);
        }
        true
    }

    /// Folds free `f` of another process's block whose stack the collector knows (it keeps
    /// the blocks by address, `live` §6) and writes it. False, with nothing changed, when
    /// no such block is live. `pair`: the id its allocation's fold gave the block's pair
    /// ([`Collected::pair`]), when known: the fold then need not look the pair up.
    pub(crate) fn collected_end(&mut self, f: &Free, pair: Option<u32>) -> bool {
        self.end(f, pair).is_some()
    }

    /// [`Recorder::collected_end`]: the id of the pair it folded into (`None` inside when
    /// the profile keeps no vectors by pair id), `None` when no such block was live.
    fn end(&mut self, f: &Free, pair: Option<u32>) -> Option<Option<u32>> {
        let f = *f;
        let folded = match self.stored_unit {
            Some(unit) => self.profile.try_free_pair(&spec::free_as_stored(&f, unit), pair),
            None => self.profile.try_free_pair(&f, pair),
        };
        // The writer numbers the pair as the fold does, with no lookup of its own.
        if let Some(pair) = folded {
            self.write(|w| w.write_free_of(&f, pair));
        }
        folded
    }
}

/// Slots of [`DeathHints`] (a power of two).
const HINTS: usize = 256;

/// The stack and pair of the last death folded for each of a few (stack key, size): a
/// sampled block's death names its stack by the program's key and its pair by (stack,
/// size), two hash lookups, and most deaths repeat a few of them (the sites that allocate
/// the most). A slot is one (key, size); another takes it over. The pair is a hint the
/// fold checks; the stack is the one [`Recorder::collected_stack`] finds for a key that
/// names one stack, so every hint goes when a key comes to name a second (a module
/// generation moved its frames).
#[derive(Default)]
pub(crate) struct DeathHints {
    slots: Vec<(u64, u64, StackId, u32)>,
}

impl DeathHints {
    fn slot(key: u64, size: u64) -> usize {
        let h =
            (key ^ size.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        (h >> 56) as usize % HINTS
    }

    /// The stack and pair of (`key`, `size`), when remembered.
    #[inline]
    fn get(&self, key: u64, size: u64) -> Option<(StackId, u32)> {
        let &(k, s, stack, pair) = self.slots.get(Self::slot(key, size))?;
        (k == key && s == size && pair != u32::MAX).then_some((stack, pair))
    }

    fn put(&mut self, key: u64, size: u64, stack: StackId, pair: u32) {
        if self.slots.is_empty() {
            self.slots = vec![(0, 0, 0, u32::MAX); HINTS];
        }
        self.slots[Self::slot(key, size)] = (key, size, stack, pair);
    }

    /// Forgets every hint.
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hint is what was put for that very (key, size), until another takes its slot or
    /// all are cleared.
    #[test]
    fn death_hints_answer_only_for_what_they_hold() {
        let mut h = DeathHints::default();
        assert_eq!(h.get(7, 64), None);
        h.put(7, 64, 3, 11);
        assert_eq!(h.get(7, 64), Some((3, 11)));
        assert_eq!(h.get(7, 65), None, "another size");
        assert_eq!(h.get(8, 64), None, "another key");
        // Another (key, size) in the same slot takes it over.
        let other = (1..u64::MAX)
            .find(|&k| DeathHints::slot(k, 64) == DeathHints::slot(7, 64) && k != 7)
            .unwrap();
        h.put(other, 64, 4, 12);
        assert_eq!((h.get(7, 64), h.get(other, 64)), (None, Some((4, 12))));
        h.clear();
        assert_eq!(h.get(other, 64), None);
    }
}
