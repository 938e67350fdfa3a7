//! Events folded into a profile's aggregates: the add/free bookkeeping of live sets,
//! lifetimes, GC attribution, the series and the peak, and moving or copying aggregates
//! between profiles.

use std::collections::HashMap;

use super::aggregate::{split_points, GcMarked, IdHash, Totals};
use super::events::{Free, GcCycle, Move, Sample};
use super::format;
use super::series::Peak;
use super::tables::StackId;
use super::timeline::Timeline;
use super::{Profile, DEFAULT_SHORT_LIVED_NS};

impl Profile {
    /// Folds the heap over time by stack in too, from the next event on (what the HTML
    /// page reads: [`super::timeline`]).
    pub(crate) fn keep_timeline(&mut self) {
        let unit = self.header.time_unit_ns;
        self.timeline.get_or_insert_with(|| Box::new(Timeline::new(unit)));
    }

    /// Finishes the timeline at the profile's end, if it was kept: no event comes after.
    pub(crate) fn finish_timeline(&mut self) {
        let (end, unit) = (self.end_ns, self.header.time_unit_ns.max(1));
        if let Some(tl) = &mut self.timeline {
            // The blocks never freed are the live ones, by their allocation unit.
            let live = self.live_by_time.index.iter().filter(|(_, t)| t.samples > 0);
            tl.finish(end, unit, live.map(|(&(s, _, u), t)| (s, u * unit, t.k, t.samples)));
        }
    }

    /// Folds one event into the aggregates.
    pub fn add(&mut self, e: &format::Event) {
        match e {
            format::Event::Sample(s) => self.add_sample(s),
            format::Event::Free(f) => self.add_free(f),
            format::Event::Move(m) => self.add_move(m),
            format::Event::GcCycle(c) => self.add_gc_cycle(c),
        }
    }

    /// Folds in an alloc sample.
    pub fn add_sample(&mut self, s: &Sample) {
        self.counts.samples += 1;
        // Sums wrap rather than panic: a damaged or hostile file may name any k.
        let t = self.allocated.entry((s.stack, s.size)).or_default();
        t.samples += 1;
        t.k = t.k.wrapping_add(s.k);
        let t = self.live.entry((s.stack, s.size)).or_default();
        t.samples += 1;
        t.k = t.k.wrapping_add(s.k);
        let unit = s.time_ns / self.header.time_unit_ns.max(1);
        match self.live_by_time.index.entry((s.stack, s.size, unit)) {
            std::collections::hash_map::Entry::Occupied(mut o) => {
                let t = o.get_mut();
                if t.samples == 0 {
                    // Refilling an entry emptied earlier (not swept yet).
                    self.live_by_time.empty = self.live_by_time.empty.saturating_sub(1);
                }
                t.samples += 1;
                t.k = t.k.wrapping_add(s.k);
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Totals { samples: 1, k: s.k });
            }
        }
        let bytes = self.estimated_bytes(s.k);
        self.live_bytes += bytes;
        if let Some(tl) = &mut self.timeline {
            tl.sample(s.time_ns, bytes, self.live_bytes);
        }
        if self.exact() {
            if !self.note(s.time_ns, bytes, 0.0) {
                self.since_peak.change((s.stack, s.size), 1, s.k);
            }
        } else {
            self.note(s.time_ns, bytes, 0.0);
            self.halves_change((s.stack, s.size), unit, s.k, s.time_ns, false);
        }
    }

    /// True in the exact mode (interval 1), whose peak is the exact maximum.
    fn exact(&self) -> bool {
        self.header.interval <= 1.0
    }

    /// A sampled block of `pair`, allocated in time unit `unit` with `k` points, joins the
    /// live halves at `t` (or `leaves` them): the cross-fitted peak (§3 of the module
    /// documentation, `report::stats` §1).
    fn halves_change(&mut self, pair: (StackId, u64), unit: u64, k: u64, t: u64, leaves: bool) {
        let a = split_points(pair.0, pair.1, unit, k);
        let b = k - a;
        let h = &mut self.halves;
        let live_a = h.live_a.entry(pair).or_default();
        // Saturating: a damaged file's free may name points its sample did not bring.
        let neg = |x: u64| if leaves { x.wrapping_neg() } else { x };
        if leaves {
            *live_a = live_a.saturating_sub(a);
            h.total[0] = h.total[0].saturating_sub(a);
            h.total[1] = h.total[1].saturating_sub(b);
        } else {
            *live_a = live_a.saturating_add(a);
            h.total[0] = h.total[0].saturating_add(a);
            h.total[1] = h.total[1].saturating_add(b);
        }
        // Since t_A the other half's points (B) are what matters, since t_B half A's.
        h.since[0].change(pair, neg(1), neg(b));
        h.since[1].change(pair, neg(1), neg(a));
        for half in 0..2 {
            // A new peak of a half (only an allocation makes one): the live sets now are
            // those at the new moment, so the changes just noted go stale with the rest.
            if h.total[half] > h.best[half] {
                h.best[half] = h.total[half];
                h.at_ns[half] = t;
                h.held_out[half] = h.total[1 - half];
                h.since[half].generation += 1;
            }
        }
        // Each half's held-out count doubled, the two averaged: R·(K_B(t_A) + K_A(t_B)).
        let [ka, kb] = h.held_out;
        let bytes = self.header.interval * (ka as f64 + kb as f64);
        let time_ns = if ka >= kb { h.at_ns[0] } else { h.at_ns[1] };
        self.peak = Peak { bytes, time_ns, moments_ns: h.at_ns };
    }

    /// Takes one block of `(stack, size)` allocated at `alloc_ns` with `k` points out of
    /// the live sets; false when there is none (an orphan).
    fn unlive(&mut self, stack: StackId, size: u64, k: u64, alloc_ns: u64) -> bool {
        let unit = alloc_ns / self.header.time_unit_ns.max(1);
        let key = (stack, size, unit);
        let Some(t) = self.live_by_time.index.get_mut(&key) else {
            return false;
        };
        if t.samples == 0 || t.k < k {
            return false;
        }
        t.samples -= 1;
        t.k -= k;
        if t.samples == 0 {
            // Emptied entries are swept in bulk: a block that dies young empties the entry
            // its allocation just made, and removing it each time cost a rehash per free.
            let l = &mut self.live_by_time;
            l.empty += 1;
            if l.empty > 4096 && l.empty > l.index.len() / 2 {
                l.index.retain(|_, t| t.samples > 0);
                l.empty = 0;
            }
        }
        // Emptied pairs stay (as many as the pairs; reports skip them).
        if let Some(t) = self.live.get_mut(&(stack, size)) {
            t.samples = t.samples.saturating_sub(1);
            t.k = t.k.wrapping_sub(k);
        }
        true
    }

    /// Folds in a free; a free of a block not live is counted as an orphan.
    pub fn add_free(&mut self, f: &Free) {
        if !self.try_free(f) {
            self.counts.orphans += 1;
        }
    }

    /// True when a block of the free's stack, size and allocation unit, with at least its
    /// sample points, is live: what [`Profile::add_free`] and [`Profile::add_move`] look
    /// for.
    pub(crate) fn holds(&self, stack: StackId, size: u64, k: u64, alloc_ns: u64) -> bool {
        let unit = alloc_ns / self.header.time_unit_ns.max(1);
        let live = self.live_by_time.index.get(&(stack, size, unit));
        live.is_some_and(|t| t.samples > 0 && t.k >= k)
    }

    /// [`Profile::add_free`], but a free of a block not live changes nothing and returns
    /// false (a collector that was told of a block's free before its allocation keeps it
    /// for later).
    pub(crate) fn try_free(&mut self, f: &Free) -> bool {
        if !self.unlive(f.stack, f.size, f.k, f.alloc_ns) {
            return false;
        }
        self.counts.frees += 1;
        self.lifetimes.add(f);
        if self.exact() {
            self.since_peak.change((f.stack, f.size), 1u64.wrapping_neg(), f.k.wrapping_neg());
        } else {
            let unit = f.alloc_ns / self.header.time_unit_ns.max(1);
            self.halves_change((f.stack, f.size), unit, f.k, f.time_ns, true);
        }
        let bytes = self.estimated_bytes(f.k);
        self.live_bytes -= bytes;
        if let Some(tl) = &mut self.timeline {
            let short = f.lifetime_ns() < DEFAULT_SHORT_LIVED_NS;
            tl.free(f.stack, f.alloc_ns, f.time_ns, f.k, short, bytes, self.live_bytes);
        }
        // Cycles already attributed that ended after this free: the block was dead by then.
        let half = self.header.time_unit_ns / 2;
        let death = f.time_ns.saturating_add(half);
        for (c, marked) in self.gc_cycles.iter().zip(&mut self.gc_marked).rev() {
            if c.end_ns < death {
                break;
            }
            if f.alloc_ns.saturating_add(half) < c.start_ns {
                if let Some(m) = marked.get_mut(&f.stack) {
                    m.samples = m.samples.saturating_sub(1);
                    m.bytes -= bytes;
                    m.objects -= f.k as f64 * self.header.interval / f.size.max(1) as f64;
                }
            }
        }
        self.note(f.time_ns, 0.0, bytes);
        true
    }

    /// Folds in a move; a move of a block not live is counted as an orphan.
    pub fn add_move(&mut self, m: &Move) {
        if self.holds(m.stack, m.size, m.k, m.alloc_ns) {
            self.counts.moves += 1;
        } else {
            self.counts.orphans += 1;
        }
    }

    /// Folds in a GC cycle: it marked the live sampled blocks allocated before it began.
    pub fn add_gc_cycle(&mut self, c: &GcCycle) {
        let unit = self.header.time_unit_ns.max(1);
        let half = unit / 2;
        let interval = self.header.interval;
        let mut marked: HashMap<StackId, GcMarked, IdHash> = HashMap::default();
        for (&(stack, size, u), t) in &self.live_by_time.index {
            if t.samples > 0 && u.saturating_mul(unit).saturating_add(half) < c.start_ns {
                let m = marked.entry(stack).or_default();
                m.samples += t.samples;
                m.bytes += t.k as f64 * interval;
                m.objects += t.k as f64 * interval / size.max(1) as f64;
            }
        }
        self.gc_cycles.push(*c);
        self.gc_marked.push(marked);
    }

    /// Notes an event at `t` in the series and, in the exact mode, the peak; true when it
    /// made a new peak.
    fn note(&mut self, t: u64, alloc: f64, freed: f64) -> bool {
        self.end_ns = self.end_ns.max(t);
        self.series.record(t, alloc, freed, self.live_bytes);
        if self.exact() && self.live_bytes > self.peak.bytes {
            self.peak = Peak { bytes: self.live_bytes, time_ns: t, moments_ns: [t; 2] };
            self.since_peak.generation += 1;
            return true;
        }
        false
    }

    /// True when [`Profile::peak_live`] is known (not for a merged profile).
    pub fn since_peak_known(&self) -> bool {
        !self.since_peak.unknown
    }

    /// The sampled blocks live at [`Profile::peak`], per (stack, size) as in
    /// [`Profile::live`] (pairs with none left out). In the exact mode, the live set right
    /// after the event that made the peak, in stream order: the program's true live heap at
    /// its peak. Sampled, each pair's share of the cross-fitted peak (§3 of the module
    /// documentation): `k` is half B's points live at `t_A` plus half A's live at `t_B`, so
    /// that `k × interval` is the pair's peak estimate and the pairs sum to the peak;
    /// `samples` is the mean of the blocks live at the two moments, rounded up. `None` for
    /// a merged profile (its processes peak each on their own).
    pub fn peak_live(&self) -> Option<HashMap<(StackId, u64), Totals, IdHash>> {
        if self.since_peak.unknown {
            return None;
        }
        if !self.exact() {
            return Some(self.crossfit_live());
        }
        let sp = &self.since_peak;
        let mut out: HashMap<(StackId, u64), Totals, IdHash> = HashMap::default();
        for (&pair, t) in &self.live {
            let mut t = *t;
            if let Some((g, d)) = sp.changes.get(&pair) {
                if *g == sp.generation {
                    t.samples = t.samples.wrapping_sub(d.samples);
                    t.k = t.k.wrapping_sub(d.k);
                }
            }
            if t.samples > 0 {
                out.insert(pair, t);
            }
        }
        Some(out)
    }

    /// [`Profile::peak_live`] of a sampled profile: `live at t_A = live now − changes since
    /// t_A` for half B's points, the same at `t_B` for half A's.
    fn crossfit_live(&self) -> HashMap<(StackId, u64), Totals, IdHash> {
        let h = &self.halves;
        let mut out: HashMap<(StackId, u64), Totals, IdHash> = HashMap::default();
        for (&pair, t) in &self.live {
            let ka = h.live_a.get(&pair).copied().unwrap_or(0);
            let now = [(t.samples, t.k.wrapping_sub(ka)), (t.samples, ka)];
            let mut at = [(0u64, 0u64); 2];
            for half in 0..2 {
                let sp = &h.since[half];
                let (mut samples, mut k) = now[half];
                if let Some((g, d)) = sp.changes.get(&pair) {
                    if *g == sp.generation {
                        samples = samples.wrapping_sub(d.samples);
                        k = k.wrapping_sub(d.k);
                    }
                }
                at[half] = (samples, k);
            }
            let k = at[0].1.wrapping_add(at[1].1);
            if k > 0 {
                let samples = at[0].0.wrapping_add(at[1].0).div_ceil(2);
                out.insert(pair, Totals { samples, k });
            }
        }
        out
    }

    /// Moves the aggregates of `agg` (folded in by another thread) into this profile, whose
    /// tables were read.
    pub(crate) fn take_aggregates(&mut self, agg: Profile) {
        self.allocated = agg.allocated;
        self.live = agg.live;
        self.live_by_time = agg.live_by_time;
        self.gc_cycles = agg.gc_cycles;
        self.gc_marked = agg.gc_marked;
        self.series = agg.series;
        self.peak = agg.peak;
        self.end_ns = agg.end_ns;
        self.counts = agg.counts;
        self.live_bytes = agg.live_bytes;
        self.lifetimes = agg.lifetimes;
        self.since_peak = agg.since_peak;
        self.halves = agg.halves;
        // A second fold (a window) keeps no timeline: the page is of the whole run.
        self.timeline = agg.timeline.or(self.timeline.take());
    }

    /// Copies the aggregates of `from` into this profile (a mirror of a profile still being
    /// read or recorded), reusing this one's allocations: all that [`Profile::take_aggregates`]
    /// moves but the GC attribution index ([`Profile::live_by_time`]), which no report reads.
    pub(crate) fn clone_aggregates_from(&mut self, from: &Profile) {
        self.allocated.clone_from(&from.allocated);
        self.live.clone_from(&from.live);
        self.gc_cycles.clone_from(&from.gc_cycles);
        self.gc_marked.clone_from(&from.gc_marked);
        self.series.clone_from(&from.series);
        self.peak = from.peak;
        self.since_peak.clone_from(&from.since_peak);
        self.halves.clone_from(&from.halves);
        self.lifetimes.clone_from(&from.lifetimes);
        self.end_ns = from.end_ns;
        self.counts = from.counts;
        self.live_bytes = from.live_bytes;
    }

    /// Adds a warning for the orphans counted so far (after reading a stream).
    pub(crate) fn note_orphans(&mut self) {
        if self.counts.orphans > 0 {
            self.warnings.push(format!(
                "ignored {} frees or moves of samples that were never recorded",
                self.counts.orphans
            ));
        }
    }

    /// A profile with the tables of `self` (header, modules, stacks, symbols) and the
    /// events folded in: for tests and tools that build a recording by hand.
    pub fn with_events<'a>(mut self, events: impl IntoIterator<Item = &'a format::Event>) -> Self {
        for e in events {
            self.add(e);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frees_sort_lifetimes() {
        let mut p = Profile::default();
        let s = |id, t| Sample { id, stack: 0, time_ns: t, thread: 1, addr: 0, size: 10, k: 10 };
        let (a, b) = (s(1, 0), s(2, 0));
        p.add_sample(&a);
        p.add_sample(&b);
        p.add_free(&Free::of(&a, 999_999));
        p.add_free(&Free::of(&b, 1_000_000));
        assert_eq!(p.lifetimes.short[&(0, 10)], Totals { samples: 1, k: 10 });
        assert_eq!(p.lifetimes.histogram.values().map(|t| t.samples).sum::<u64>(), 2);
    }
}
