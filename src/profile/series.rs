//! The heap over time, in a bounded number of buckets, and its peak.

/// Most buckets in a [`Series`].
pub const SERIES_POINTS: usize = 1024;

/// One bucket of a [`Series`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SeriesPoint {
    /// Estimated bytes allocated in the bucket.
    pub alloc_bytes: f64,
    /// Estimated bytes freed in the bucket.
    pub freed_bytes: f64,
    /// The largest estimated live heap after an event of the bucket (0 with no event).
    pub live_max: f64,
    /// The estimated live heap after the bucket's last event in stream order.
    pub live_end: f64,
    /// Events in the bucket.
    pub events: u64,
}

/// The heap over time in at most [`SERIES_POINTS`] buckets of `bucket_ns` nanoseconds
/// each, bucket `i` covering `[i·bucket_ns, (i+1)·bucket_ns)` since the start of the
/// recording. When an event falls past the last bucket, the width doubles and buckets are
/// merged in pairs, so the series stays the same size however long the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Width of a bucket.
    pub bucket_ns: u64,
    /// The buckets, from the start of the recording.
    pub points: Vec<SeriesPoint>,
}

impl Default for Series {
    fn default() -> Self {
        Series { bucket_ns: 1 << 20, points: Vec::new() }
    }
}

/// True when time `t` is past a grid of `buckets` buckets of `width` ns, which is then
/// widened: `t / width >= buckets`, tested with a multiply (saturating where it would
/// overflow, which answers the same), since it is asked at every event folded and the
/// widening is rare (the series' and the timeline's grids).
#[inline]
pub(crate) fn past_grid(t: u64, width: u64, buckets: u64) -> bool {
    t >= width.saturating_mul(buckets)
}

/// `t / width`, as a shift when `width` is a power of two: the widths of the fold's grids
/// and time units are (from a recording; a file read back may say otherwise), and the
/// fold divides by them at every event, where a division is the slowest instruction of
/// the collector's event loop.
#[inline(always)]
pub(crate) fn div_width(t: u64, width: u64) -> u64 {
    if width.is_power_of_two() {
        t >> width.trailing_zeros()
    } else {
        t / width.max(1)
    }
}

impl Series {
    /// The bucket of time `t`, widening the buckets as needed.
    #[inline]
    fn bucket(&mut self, t: u64) -> &mut SeriesPoint {
        if past_grid(t, self.bucket_ns, SERIES_POINTS as u64) {
            self.widen_to(t);
        }
        let i = div_width(t, self.bucket_ns) as usize;
        if self.points.len() <= i {
            let last = self.points.last().map_or(0.0, |p| p.live_end);
            self.points.resize(i + 1, SeriesPoint { live_end: last, ..SeriesPoint::default() });
        }
        &mut self.points[i]
    }

    #[cold]
    #[inline(never)]
    fn widen_to(&mut self, t: u64) {
        while t / self.bucket_ns >= SERIES_POINTS as u64 {
            self.widen();
        }
    }

    fn widen(&mut self) {
        self.bucket_ns = self.bucket_ns.saturating_mul(2);
        let merged = self
            .points
            .chunks(2)
            .map(|c| {
                let mut p = c[0];
                if let Some(q) = c.get(1) {
                    p.alloc_bytes += q.alloc_bytes;
                    p.freed_bytes += q.freed_bytes;
                    p.live_max = p.live_max.max(q.live_max);
                    p.live_end = q.live_end;
                    p.events += q.events;
                }
                p
            })
            .collect();
        self.points = merged;
    }

    /// Adds `other` (a series whose time 0 is `offset` ns into this one's), bucket by
    /// bucket: allocated and freed bytes add up; live maxima add up too (an upper bound).
    pub(crate) fn add(&mut self, other: &Series, offset: u64) {
        while self.bucket_ns < other.bucket_ns {
            self.widen();
        }
        let end =
            offset.saturating_add((other.points.len() as u64).saturating_mul(other.bucket_ns));
        while end / self.bucket_ns >= SERIES_POINTS as u64 {
            self.widen();
        }
        let mut folded: std::collections::BTreeMap<usize, SeriesPoint> = Default::default();
        for (j, q) in other.points.iter().enumerate() {
            let i = (offset.saturating_add((j as u64).saturating_mul(other.bucket_ns))
                / self.bucket_ns) as usize;
            let p = folded.entry(i).or_default();
            p.alloc_bytes += q.alloc_bytes;
            p.freed_bytes += q.freed_bytes;
            p.live_max = p.live_max.max(q.live_max);
            p.live_end = q.live_end;
            p.events += q.events;
        }
        for (i, q) in folded {
            let p = self.bucket(i as u64 * self.bucket_ns);
            p.alloc_bytes += q.alloc_bytes;
            p.freed_bytes += q.freed_bytes;
            p.live_max += q.live_max;
            p.live_end += q.live_end;
            p.events += q.events;
        }
    }

    /// The bucket with the largest live maximum (the first of equals), as a [`Peak`] at the
    /// bucket's start.
    pub fn peak(&self) -> Peak {
        let mut best = Peak::default();
        for (i, p) in self.points.iter().enumerate() {
            if p.live_max > best.bytes {
                let time_ns = i as u64 * self.bucket_ns;
                best = Peak { bytes: p.live_max, time_ns, moments_ns: [time_ns; 2] };
            }
        }
        best
    }

    #[inline]
    pub(super) fn record(&mut self, t: u64, alloc: f64, freed: f64, live: f64) {
        let p = self.bucket(t);
        p.alloc_bytes += alloc;
        p.freed_bytes += freed;
        p.live_max = p.live_max.max(live);
        p.live_end = live;
        p.events += 1;
    }
}

/// The peak of the live heap, and when: exact in the exact mode; sampled, the
/// cross-fitted estimate ([`Profile::peak`](crate::profile::Profile::peak)).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Peak {
    /// Estimated live bytes at the peak: in the exact mode the largest live heap after any
    /// event; sampled, `R·(K_B(t_A) + K_A(t_B))`, an unbiased estimate of the mean of the
    /// true live heap at the two moments of [`Peak::moments_ns`] (its 95 % interval is that
    /// of any live estimate, `report::confidence` §1); for a merged profile, an upper bound.
    pub bytes: f64,
    /// When, in nanoseconds since the start of the recording: the moment of the peak in
    /// the exact mode; sampled, whichever of the two moments has the larger held-out
    /// estimate.
    pub time_ns: u64,
    /// Sampled: `t_A` and `t_B`, the moments when half A's and half B's live points were
    /// largest (the first such moments), whose true live heaps the estimate averages. Both
    /// [`Peak::time_ns`] in the exact mode.
    pub moments_ns: [u64; 2],
}

#[cfg(test)]
mod tests {
    use super::div_width;

    /// The shift answers as the division, for powers of two and for other widths (a file
    /// read back may name any), and a zero width divides by one.
    #[test]
    fn div_width_is_the_division() {
        let times = [0, 1, 1023, 1024, 1025, 1 << 40, u64::MAX - 1, u64::MAX];
        for w in [1, 2, 1 << 10, 1 << 20, 1 << 63, 3, 1000, 1_000_000_007, u64::MAX] {
            for t in times {
                assert_eq!(div_width(t, w), t / w, "{t} / {w}");
            }
        }
        assert_eq!(div_width(77, 0), 77);
    }
}
