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
    fn collected_stack(&self, key: u64, size: u64, k: u64, alloc_ns: u64) -> Option<StackId> {
        let ids = self.interned.get(&key)?;
        let stored = match self.stored_unit {
            Some(unit) => spec::stored_ns(alloc_ns, unit),
            None => alloc_ns,
        };
        match ids.as_slice() {
            [only] => Some(*only),
            _ => ids.iter().rev().copied().find(|&s| self.profile.holds(s, size, k, stored)),
        }
    }

    /// Folds the free, at `time_ns`, of another process's block (the fields of its death's
    /// event, times in session nanoseconds) and writes it. False, with nothing changed,
    /// when no such block is live: its allocation has not been read yet (a free kept aside
    /// by a full queue), or never will be.
    pub(crate) fn collected_free(&mut self, b: &Named, time_ns: u64) -> bool {
        let Named { id, key, size, k, alloc_ns } = *b;
        let Some(stack) = self.collected_stack(key, size, k, alloc_ns) else {
            return false;
        };
        self.collected_end(&Free { id, time_ns, stack, size, k, alloc_ns, life_ns: None }, None)
    }

    /// Folds free `f` of another process's block whose stack the collector knows (it keeps
    /// the blocks by address, `live` §6) and writes it. False, with nothing changed, when
    /// no such block is live. `pair`: the id its allocation's fold gave the block's pair
    /// ([`Collected::pair`]), when known: the fold then need not look the pair up.
    pub(crate) fn collected_end(&mut self, f: &Free, pair: Option<u32>) -> bool {
        let f = *f;
        let folded = match self.stored_unit {
            Some(unit) => self.profile.try_free_pair(&spec::free_as_stored(&f, unit), pair),
            None => self.profile.try_free_pair(&f, pair),
        };
        // The writer numbers the pair as the fold does, with no lookup of its own.
        if let Some(pair) = folded {
            self.write(|w| w.write_free_of(&f, pair));
        }
        folded.is_some()
    }
}
