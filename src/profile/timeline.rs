//! The heap over time by call stack, folded in with the other aggregates: what the HTML
//! page's timeline, ranges and flamegraph of any moment need (`report/html.rs` §1), so a
//! page is written from the fold that read or recorded the profile, never from a second
//! pass over the file.
//!
//! The run is cut into at most [`BUCKETS`] buckets of `w` nanoseconds, `w` the stream's
//! time unit times a power of two, bucket `i` covering `[i·w, (i+1)·w)`. As events come,
//! `w` starts at one unit and doubles whenever an event falls past the last bucket: two
//! neighbouring buckets become one, and since `⌊⌊t/w⌋/2⌋ = ⌊t/2w⌋`, every figure is then
//! exactly what a fold on the wider grid from the start would have made. At the end,
//! [`Timeline::finish`] widens it to [`Grid::of`] the run's end. So the page of a recording
//! is the same whether `memprof record` folded the events as they were drained or
//! `memprof report` read them from the file.
//!
//! Every sampled block falls into one *cell*: (its stack, the bucket it was allocated in,
//! the bucket it was freed in or "never" = the number of buckets), which sums the blocks'
//! sample points and counts. A free makes its block's cell; the blocks never freed are
//! the profile's live blocks at the end (by allocation time: `Profile::live_by_time`), so
//! an allocation costs the fold no cell of its own. The folding profile feeds only what it folds itself: frees
//! of blocks it never saw (orphans) are left out, as [`Profile::add`](super::Profile::add)
//! leaves them out.

use std::collections::HashMap;

use super::aggregate::IdHash;
use super::tables::StackId;

/// Most buckets of the timeline (and so the resolution of moments and ranges).
pub const BUCKETS: u64 = 200;

/// Sample points and sample count of one cell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cell {
    pub(crate) k: u64,
    pub(crate) n: u64,
}

impl Cell {
    fn add(&mut self, k: u64, n: u64) {
        self.k = self.k.wrapping_add(k);
        self.n = self.n.wrapping_add(n);
    }
}

/// The buckets of a page: their width and count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grid {
    pub(crate) w: u64,
    pub(crate) buckets: u64,
}

impl Grid {
    /// The run of `end_ns` in at most [`BUCKETS`] buckets, `unit` times the least power of
    /// two wide enough.
    pub(crate) fn of(end_ns: u64, unit: u64) -> Grid {
        let span = end_ns.saturating_add(1);
        let mut w = unit.max(1);
        while span.div_ceil(w) > BUCKETS {
            w = w.saturating_mul(2);
        }
        Grid { w, buckets: span.div_ceil(w).max(1) }
    }
}

/// The heap over time by call stack (see the [module documentation](self)).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Timeline {
    w: u64,
    /// Cells of the freed blocks: (stack, alloc bucket, free bucket).
    freed_cells: HashMap<(StackId, u32, u32), Cell, IdHash>,
    /// The blocks never freed by (stack, alloc bucket), taken from the profile's live
    /// blocks when the timeline is finished (nothing per allocation while folding).
    pub(super) never: HashMap<(StackId, u32), Cell, IdHash>,
    /// Per stack, the sample points of short-lived blocks.
    pub(crate) short: HashMap<StackId, u64, IdHash>,
    /// Per bucket: estimated bytes allocated and freed, the largest live heap after an
    /// event, the live heap after its last event, and whether it had one.
    pub(crate) alloc: Vec<f64>,
    pub(crate) freed: Vec<f64>,
    pub(crate) live_max: Vec<f64>,
    live_end: Vec<f64>,
    had: Vec<bool>,
    finished: bool,
}

impl Timeline {
    /// An empty timeline for a stream whose times are multiples of `unit` ns.
    pub(crate) fn new(unit: u64) -> Timeline {
        Timeline {
            w: unit.max(1),
            freed_cells: HashMap::default(),
            never: HashMap::default(),
            short: HashMap::default(),
            alloc: Vec::new(),
            freed: Vec::new(),
            live_max: Vec::new(),
            live_end: Vec::new(),
            had: Vec::new(),
            finished: false,
        }
    }

    /// The bucket width, ns.
    pub(crate) fn width(&self) -> u64 {
        self.w
    }

    /// The number of buckets (after [`Timeline::finish`]).
    pub(crate) fn buckets(&self) -> u64 {
        self.alloc.len() as u64
    }

    /// The bucket of time `t`, the grid widened first when `t` is past its last bucket.
    #[inline]
    fn bucket(&mut self, t: u64) -> u32 {
        self.reach(t);
        let b = super::series::div_width(t, self.w) as usize;
        if self.alloc.len() <= b {
            self.grow(b + 1);
        }
        b as u32
    }

    /// Widens the grid until `t` is in one of its buckets.
    #[inline]
    fn reach(&mut self, t: u64) {
        if super::series::past_grid(t, self.w, BUCKETS) {
            self.widen_to(t);
        }
    }

    #[cold]
    #[inline(never)]
    fn widen_to(&mut self, t: u64) {
        while t / self.w >= BUCKETS {
            self.widen();
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, n: usize) {
        self.alloc.resize(n, 0.0);
        self.freed.resize(n, 0.0);
        self.live_max.resize(n, 0.0);
        self.live_end.resize(n, 0.0);
        self.had.resize(n, false);
    }

    /// Doubles the bucket width: buckets `2i` and `2i + 1` become bucket `i`.
    fn widen(&mut self) {
        *self = self.moved(0, 1);
    }

    /// This timeline with bucket `i` moved to `(i + shift) >> m`: `shift` buckets later,
    /// on a grid `2^m` times as wide. The per-bucket figures merge as a fold on the new
    /// grid would have made them (sums, the largest live heap, the last live heap).
    fn moved(&self, shift: u64, m: u32) -> Timeline {
        let to = |i: u32| ((u64::from(i) + shift) >> m) as u32;
        let mut t = Timeline {
            w: self.w.saturating_mul(1 << m),
            freed_cells: HashMap::default(),
            never: HashMap::default(),
            short: self.short.clone(),
            alloc: Vec::new(),
            freed: Vec::new(),
            live_max: Vec::new(),
            live_end: Vec::new(),
            had: Vec::new(),
            finished: self.finished,
        };
        for (&(s, a, f), c) in &self.freed_cells {
            t.freed_cells.entry((s, to(a), to(f))).or_default().add(c.k, c.n);
        }
        for (&(s, a), c) in &self.never {
            t.never.entry((s, to(a))).or_default().add(c.k, c.n);
        }
        if !self.alloc.is_empty() {
            t.grow(to(self.alloc.len() as u32 - 1) as usize + 1);
        }
        for i in 0..self.alloc.len() {
            let j = to(i as u32) as usize;
            t.alloc[j] += self.alloc[i];
            t.freed[j] += self.freed[i];
            if self.had[i] {
                t.live_max[j] =
                    if t.had[j] { t.live_max[j].max(self.live_max[i]) } else { self.live_max[i] };
                t.live_end[j] = self.live_end[i];
                t.had[j] = true;
            }
        }
        t
    }

    /// The live heap is `live` bytes after an event in bucket `b`.
    fn after(&mut self, b: u32, live: f64) {
        let i = b as usize;
        self.live_max[i] = self.live_max[i].max(live);
        self.live_end[i] = live;
        self.had[i] = true;
    }

    /// A sampled block allocated at `t` (`bytes` estimated); the live heap is `live` after
    /// it. Its cell is made by its free, or from the live blocks at the end.
    #[inline]
    pub(crate) fn sample(&mut self, t: u64, bytes: f64, live: f64) {
        let a = self.bucket(t);
        self.alloc[a as usize] += bytes;
        self.after(a, live);
    }

    /// The free at `t` of a block of `stack` allocated at `alloc_t`; `short`: it lived less
    /// than the short-lived threshold.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn free(
        &mut self,
        stack: StackId,
        alloc_t: u64,
        t: u64,
        k: u64,
        short: bool,
        bytes: f64,
        live: f64,
    ) {
        // The later time first: the grid widened for it, the other's bucket stays right.
        self.reach(t.max(alloc_t));
        let (a, b) = (self.bucket(alloc_t), self.bucket(t));
        self.freed_cells.entry((stack, a, b)).or_default().add(k, 1);
        if short {
            *self.short.entry(stack).or_default() += k;
        }
        self.freed[b as usize] += bytes;
        self.after(b, live);
    }

    /// Widens the grid to [`Grid::of`] `end_ns` (its buckets all there), and takes the
    /// blocks never freed from `live`: (stack, allocation time, sample points, blocks).
    /// Once: a later event would go on folding on the finished grid.
    pub(crate) fn finish(
        &mut self,
        end_ns: u64,
        unit: u64,
        live: impl Iterator<Item = (StackId, u64, u64, u64)>,
    ) {
        if self.finished {
            return;
        }
        self.finished = true;
        let grid = Grid::of(end_ns, unit);
        while self.w < grid.w {
            self.widen();
        }
        self.grow(grid.buckets.max(self.alloc.len() as u64) as usize);
        for (stack, t, k, n) in live {
            let a = (t / self.w).min(self.alloc.len() as u64 - 1) as u32;
            self.never.entry((stack, a)).or_default().add(k, n);
        }
    }

    /// Per bucket, the largest live heap after one of its events; a bucket without events
    /// holds the live heap the bucket before it ended with.
    pub(crate) fn live_max(&self) -> Vec<f64> {
        let mut carry = 0.0;
        let mut out = self.live_max.clone();
        for (i, m) in out.iter_mut().enumerate() {
            if self.had[i] {
                carry = self.live_end[i];
            } else {
                *m = carry;
            }
        }
        out
    }

    /// Every cell, its stack mapped by `node` (several stacks may map to one node): the
    /// freed blocks' cells, and the never-freed ones (free bucket = the number of buckets).
    pub(crate) fn cells(
        &self,
        mut node: impl FnMut(StackId) -> u32,
        out: &mut HashMap<(u32, u32, u32), Cell, IdHash>,
        never: u32,
    ) {
        for (&(s, a, f), c) in &self.freed_cells {
            out.entry((node(s), a, f)).or_default().add(c.k, c.n);
        }
        for (&(s, a), c) in &self.never {
            if c.n > 0 || c.k > 0 {
                out.entry((node(s), a, never)).or_default().add(c.k, c.n);
            }
        }
    }

    /// This timeline (finished) on a tree's grid of width `w` and `buckets` buckets (`w` a
    /// power-of-two multiple of its own width), its times shifted by `offset_ns` rounded
    /// to whole buckets of its own width: its buckets stay exact, and a moment is off by
    /// less than one of the tree's buckets (`report/html.rs` §4).
    pub(crate) fn on_grid(&self, w: u64, buckets: u64, offset_ns: u64) -> Timeline {
        let shift = (offset_ns.saturating_add(self.w / 2)) / self.w;
        let m = (w / self.w).max(1).trailing_zeros();
        let mut t = self.moved(shift, m);
        t.grow((buckets as usize).max(t.alloc.len()));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events at pseudo-random times folded with widening give what a fold on the final
    /// grid from the start gives.
    #[test]
    fn widening_is_exact() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x1234_5678_9abc_def0);
        let mut next = move || rng.random::<u64>();
        let unit = 64;
        let mut events = Vec::new();
        for i in 0..2000u64 {
            let t = (next() % 5_000_000) / unit * unit;
            let life = (next() % 300_000) / unit * unit;
            events.push((i % 7, t, t + life, next() % 50 + 1, i % 3 == 0));
        }
        let end = events.iter().map(|e| e.2).max().unwrap();
        let mut grown = Timeline::new(unit);
        let mut fixed = Timeline::new(unit);
        fixed.w = Grid::of(end, unit).w;
        let never: Vec<(StackId, u64, u64, u64)> =
            events.iter().filter(|e| !e.4).map(|e| (e.0 as StackId, e.1, e.3, 1)).collect();
        for (tl, name) in [(&mut grown, "grown"), (&mut fixed, "fixed")] {
            let mut live = 0.0;
            for &(s, t, f, k, freed) in &events {
                live += k as f64;
                tl.sample(t, k as f64, live);
                if freed {
                    live -= k as f64;
                    tl.free(s as StackId, t, f, k, f - t < 1000, k as f64, live);
                }
            }
            tl.finish(end, unit, never.iter().copied());
            assert_eq!(tl.w, Grid::of(end, unit).w, "{name}");
        }
        assert_eq!(grown, fixed);
        assert!(grown.buckets() > BUCKETS / 2 && grown.buckets() <= BUCKETS);
    }

    #[test]
    fn grids_are_powers_of_two_of_the_unit() {
        assert_eq!(Grid::of(0, 8), Grid { w: 8, buckets: 1 });
        assert_eq!(Grid::of(199 * 8, 8), Grid { w: 8, buckets: 200 });
        assert_eq!(Grid::of(200 * 8, 8), Grid { w: 16, buckets: 101 });
        let g = Grid::of(u64::MAX - 1, 1);
        assert!(g.buckets <= BUCKETS);
    }
}
