//! The per-(stack, size) aggregates of a folding recorder's profile in a vector indexed by
//! pair id: what `memprof record`'s collector folds each event into, where the maps keyed by
//! pair ([`Profile::allocated`], [`Profile::live`], [`Lifetimes::short`], the changes since
//! the peak and a sampled profile's halves) cost one hash lookup each per event. A pair is
//! interned once, at its first sample; then an event costs one lookup (its pair id) and the
//! rest are indexes.
//!
//! The maps are the profile's public face: [`Profile::settle_pairs`] writes the slots into
//! them (each slot's entries as the maps' own fold would have made them), and
//! [`Profile::clone_aggregates_from`] copies a folding profile's slots over its maps, so a
//! mirror of a recording still folding is current. Folding through the public
//! [`Profile::add`] (or its parts) settles the slots and goes back to the maps.

use std::collections::HashMap;

use super::aggregate::{IdHash, Totals};
use super::tables::StackId;
use super::Profile;

/// The slots of a folding profile's pairs, and the ids of the pairs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pairs {
    ids: HashMap<(StackId, u64), u32, IdHash>,
    pub(super) slots: Vec<Slot>,
}

/// What the maps keyed by pair hold for one pair.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Slot {
    pub(super) pair: (StackId, u64),
    /// [`Profile::allocated`]'s and [`Profile::live`]'s totals (entries in both from the
    /// pair's first sample on).
    pub(super) allocated: Totals,
    pub(super) live: Totals,
    /// [`Lifetimes::short`](super::Lifetimes::short) (an entry once a short-lived block was
    /// freed).
    pub(super) short: Totals,
    /// The changes since the exact peak, since `t_A` and since `t_B` (`SincePeak`).
    pub(super) since: [Change; 3],
    /// Half A's live points (`Halves::live_a`), once a sampled event touched it.
    pub(super) live_a: Option<u64>,
}

/// One pair's entry of a `SincePeak` map.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Change {
    set: bool,
    generation: u64,
    totals: Totals,
}

impl Change {
    /// `SincePeak::change` for this pair.
    pub(super) fn change(&mut self, generation: u64, samples: u64, k: u64) {
        if !self.set || self.generation != generation {
            *self = Change { set: true, generation, totals: Totals::default() };
        }
        self.totals.samples = self.totals.samples.wrapping_add(samples);
        self.totals.k = self.totals.k.wrapping_add(k);
    }
}

impl Pairs {
    /// The id of `pair`, interned when new.
    pub(super) fn intern(&mut self, pair: (StackId, u64)) -> u32 {
        let next = self.slots.len() as u32;
        let id = *self.ids.entry(pair).or_insert(next);
        if id == next {
            self.slots.push(Slot { pair, ..Slot::default() });
        }
        id
    }

    /// The id of `pair`, if it was interned.
    pub(super) fn get(&self, pair: (StackId, u64)) -> Option<u32> {
        self.ids.get(&pair).copied()
    }
}

impl Profile {
    /// Folds the per-pair aggregates into vectors by pair id from the next event on (see
    /// the [module documentation](self)); the folding recorder's, before any event.
    pub(crate) fn keep_pairs(&mut self) {
        self.pairs.get_or_insert_with(Box::default);
    }

    /// The id of `(stack, size)` in the vectors (interned when new), when they are kept.
    pub(crate) fn pair_id(&mut self, stack: StackId, size: u64) -> Option<u32> {
        Some(self.pairs.as_mut()?.intern((stack, size)))
    }

    /// Writes the vectors into the maps keyed by pair, which then hold what folding into
    /// them would have made; the vectors stay the ones folded into.
    pub(crate) fn settle_pairs(&mut self) {
        if let Some(pairs) = self.pairs.take() {
            self.write_slots(&pairs);
            self.pairs = Some(pairs);
        }
    }

    /// Settles the vectors and folds into the maps from now on (someone folds through the
    /// public methods, which know no pair ids).
    pub(super) fn leave_pairs(&mut self) {
        if let Some(pairs) = self.pairs.take() {
            self.write_slots(&pairs);
        }
    }

    /// Writes the slots of `pairs` over this profile's maps keyed by pair.
    pub(super) fn write_slots(&mut self, pairs: &Pairs) {
        for s in &pairs.slots {
            let pair = s.pair;
            if s.allocated.samples > 0 {
                self.allocated.insert(pair, s.allocated);
                self.live.insert(pair, s.live);
            }
            if s.short.samples > 0 {
                self.lifetimes.short.insert(pair, s.short);
            }
            let [t_a, t_b] = &mut self.halves.since;
            let maps = [&mut self.since_peak.changes, &mut t_a.changes, &mut t_b.changes];
            for (map, c) in maps.into_iter().zip(&s.since) {
                if c.set {
                    map.insert(pair, (c.generation, c.totals));
                }
            }
            if let Some(a) = s.live_a {
                self.halves.live_a.insert(pair, a);
            }
        }
    }
}
