//! The per-(stack, size) aggregates of a folding recorder's profile in a vector indexed by
//! pair id: what `memprof record`'s collector folds each event into, where the maps keyed by
//! pair ([`Profile::allocated`], [`Profile::live`],
//! [`Lifetimes::short`](super::Lifetimes::short), the changes since the peak and a sampled
//! profile's halves) cost one hash lookup each per event. A pair is interned once, at its
//! first sample; then an event costs one lookup (its pair id) and the rest are indexes.
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
    #[inline]
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

#[cfg(test)]
mod tests {
    use super::super::{Free, GcCycle, Profile, Sample};
    use rand::{Rng, SeedableRng};

    /// The same events folded into the maps and into the vectors (then settled) make the
    /// same aggregates, exact and sampled, GC attribution and the timeline included, and a
    /// mirror of the folding profile taken midway is the maps' profile of that moment.
    #[test]
    fn the_vectors_settle_into_the_maps_fold() {
        // Units of about one event, and of about forty.
        for (interval, unit) in [(1.0, 1 << 10), (64.0, 1 << 10), (1.0, 1 << 16), (64.0, 1 << 16)] {
            let (mut maps, mut vecs) = (Profile::default(), Profile::default());
            for p in [&mut maps, &mut vecs] {
                p.header.interval = interval;
                p.header.time_unit_ns = unit;
                p.keep_timeline();
            }
            vecs.keep_pairs();
            let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
            let mut live: Vec<Sample> = Vec::new();
            let (mut t, mut mirror) = (0u64, Profile::default());
            for id in 0..20_000u64 {
                t += rng.random_range(0..3_000);
                if !live.is_empty() && rng.random_bool(0.45) {
                    let s = live.swap_remove(rng.random_range(0..live.len()));
                    let f = Free::of(&s, t);
                    maps.add_free(&f);
                    assert!(vecs.try_free(&f));
                } else {
                    let size = 8 << rng.random_range(0..6);
                    let k = if interval == 1.0 { size } else { rng.random_range(1..4) };
                    let stack = rng.random_range(0..40);
                    // Threads' events come a little out of order.
                    let time_ns = t.saturating_sub(rng.random_range(0..3) * 2_000);
                    let s = Sample { id, stack, time_ns, thread: 1, addr: 0, size, k };
                    maps.add_sample(&s);
                    assert!(vecs.fold_sample(&s).is_some());
                    live.push(s);
                }
                if id % 5_000 == 2_500 {
                    let c = GcCycle { cycle: id, start_ns: t / 2, end_ns: t, ..GcCycle::default() };
                    maps.add_gc_cycle(&c);
                    vecs.add_gc_cycle(&c);
                }
                if id == 10_000 {
                    mirror.header = vecs.header.clone();
                    mirror.clone_aggregates_from(&vecs);
                    same(&maps, &mirror);
                }
            }
            for p in [&mut maps, &mut vecs] {
                p.finish_timeline();
            }
            vecs.settle_pairs();
            same(&maps, &vecs);
            assert_eq!(maps.timeline, vecs.timeline);
            assert_eq!(maps.gc_marked, vecs.gc_marked);
            // Folding goes on after a settle (a mirror, the stop).
            for (i, s) in live.iter().enumerate().take(200) {
                assert!(vecs.holds(s.stack, s.size, s.k, s.time_ns));
                let f = Free::of(s, t + i as u64 * 700);
                maps.add_free(&f);
                assert!(vecs.try_free(&f));
                let again = Sample { id: 1 << 40 | i as u64, time_ns: f.time_ns, ..*s };
                maps.add_sample(&again);
                vecs.fold_sample(&again);
            }
            vecs.settle_pairs();
            same(&maps, &vecs);
        }
    }

    /// Live blocks kept outside the fold (`memprof record`'s collector in the exact mode,
    /// `Profile::keep_live_outside`) and handed over before each GC cycle and at the end
    /// make what the fold's own index makes: the same aggregates, GC attribution, timeline
    /// and index of live blocks by time.
    #[test]
    fn live_blocks_kept_outside_make_the_same_profile() {
        for unit in [1 << 10, 1 << 16] {
            let (mut inside, mut outside) = (Profile::default(), Profile::default());
            for p in [&mut inside, &mut outside] {
                p.header.interval = 1.0;
                p.header.time_unit_ns = unit;
                p.keep_timeline();
                p.keep_pairs();
            }
            outside.keep_live_outside();
            let mut rng = rand::rngs::SmallRng::seed_from_u64(46);
            let mut live: Vec<Sample> = Vec::new();
            let hand_over = |p: &mut Profile, live: &[Sample]| {
                p.set_live_blocks(live.iter().map(|s| (s.stack, s.size, s.time_ns, s.k)));
            };
            let mut t = 0u64;
            for id in 0..20_000u64 {
                t += rng.random_range(0..3_000);
                if !live.is_empty() && rng.random_bool(0.45) {
                    let s = live.swap_remove(rng.random_range(0..live.len()));
                    let f = Free::of(&s, t);
                    assert!(inside.try_free(&f));
                    assert!(outside.try_free(&f));
                } else {
                    let size = 8 << rng.random_range(0..6);
                    let stack = rng.random_range(0..40);
                    let s = Sample { id, stack, time_ns: t, thread: 1, addr: 0, size, k: size };
                    inside.fold_sample(&s);
                    outside.fold_sample(&s);
                    live.push(s);
                }
                if id % 5_000 == 2_500 {
                    let c = GcCycle { cycle: id, start_ns: t / 2, end_ns: t, ..GcCycle::default() };
                    inside.add_gc_cycle(&c);
                    hand_over(&mut outside, &live);
                    outside.add_gc_cycle(&c);
                }
            }
            hand_over(&mut outside, &live);
            for p in [&mut inside, &mut outside] {
                p.finish_timeline();
                p.settle_pairs();
            }
            same(&inside, &outside);
            assert_eq!(inside.timeline, outside.timeline);
            // In the same order too: the page numbers stacks in the order cells come.
            let never = |p: &Profile| {
                let tl = p.timeline.as_ref().unwrap();
                tl.never.iter().map(|(&k, c)| (k, c.k, c.n)).collect::<Vec<_>>()
            };
            assert_eq!(never(&inside), never(&outside));
            assert_eq!(inside.gc_marked, outside.gc_marked);
            inside.live_by_time.index.retain(|_, t| t.samples > 0);
            assert_eq!(inside.live_by_time.index, outside.live_by_time.index);
        }
    }

    fn same(a: &Profile, b: &Profile) {
        assert_eq!(a.allocated, b.allocated);
        assert_eq!(a.live, b.live);
        assert_eq!(a.lifetimes.short, b.lifetimes.short);
        assert_eq!(a.lifetimes.histogram, b.lifetimes.histogram);
        assert_eq!(a.since_peak.generation, b.since_peak.generation);
        assert_eq!(a.since_peak.changes, b.since_peak.changes);
        assert_eq!(a.halves.live_a, b.halves.live_a);
        for (x, y) in a.halves.since.iter().zip(&b.halves.since) {
            assert_eq!((x.generation, &x.changes), (y.generation, &y.changes));
        }
        assert_eq!((a.peak, a.live_bytes, a.counts), (b.peak, b.live_bytes, b.counts));
        assert_eq!(a.peak_live(), b.peak_live());
    }
}
