//! Lifetimes as the exact and sampled modes store them, and what the reader gets back.

use super::*;

/// The exact mode's time unit is ≈ 1.05 ms, but a free 0 or 1 unit after its allocation
/// says how long its block lived, to ≈ 131 µs (§2c): a block freed 150 ns after its
/// allocation across a unit boundary is short-lived (it read as one unit old, ≥ 1 ms,
/// before version 4); longer lifetimes are the difference of the times, as before.
#[test]
fn exact_mode_lifetimes_are_finer_than_the_time_unit() {
    const U: u64 = TIME_UNIT_EXACT_NS;
    let mut p = Profile::default();
    p.header.interval = 1.0;
    p.stacks.push(Stack { frames: vec![1], truncated: false, label: 0 });
    // (size, allocated, freed, the lifetime read back)
    let blocks = [
        (10, U - 100, U + 50, Some(0)), // 150 ns, across a boundary
        (20, 3 * U + 10, 3 * U + 200_000, Some(131_072)), // 0.2 ms, within a unit
        (30, 5 * U + 100_000, 5 * U + 1_090_000, Some(917_504)), // 0.99 ms, across
        (40, 8 * U + 10, 9 * U + 500_000, Some(1_441_792)), // 1.55 ms, one unit apart
        (50, 10 * U, 13 * U + 5, None), // 3 units: to the unit
    ];
    let mut events = Vec::new();
    for (i, &(size, at, freed, _)) in blocks.iter().enumerate() {
        let s =
            Sample { id: i as u64 + 1, stack: 0, time_ns: at, thread: 1, addr: 0, size, k: size };
        events.push(Event::Sample(s));
        events.push(Event::Free(Free::of(&s, freed)));
    }
    let bytes = encode(&p, &events);
    let (q, read) = read_events(&bytes[..]).unwrap();
    assert!(q.complete && q.warnings.is_empty(), "{:?}", q.warnings);
    assert_eq!((q.header.version, q.header.time_unit_ns), (VERSION, U));
    assert_eq!(q.header.lifetime_unit_ns(), LIFETIME_UNIT_NS);
    let frees: Vec<Free> = read
        .iter()
        .filter_map(|e| match e {
            Event::Free(f) => Some(*f),
            _ => None,
        })
        .collect();
    for (f, &(size, at, freed, life)) in frees.iter().zip(&blocks) {
        assert_eq!((f.size, f.alloc_ns, f.time_ns), (size, at / U * U, freed / U * U));
        assert_eq!(f.life_ns, life, "block of {size} B");
    }
    assert_eq!(frees[4].lifetime_ns(), 3 * U);
    // Short-lived (below 1 ms): the first three, exactly.
    let agg = Profile::read_from(&bytes[..]).unwrap();
    let mut short: Vec<(u64, Totals)> =
        agg.lifetimes.short.iter().map(|(&(_, size), &t)| (size, t)).collect();
    short.sort_unstable_by_key(|&(size, _)| size);
    let one = |k| Totals { samples: 1, k };
    assert_eq!(short, [(10, one(10)), (20, one(20)), (30, one(30))]);
    // The histogram sorts each block by its lifetime read back.
    let buckets: Vec<u16> = [0, 131_072, 917_504, 1_441_792, 3 * U].map(lifetime_bucket).into();
    let mut got: Vec<u16> = agg.lifetimes.histogram.keys().map(|&(_, b)| b).collect();
    got.sort_unstable();
    assert_eq!(got, buckets);
    // Rewritten, the lifetimes read back say the same (what a merge or a window writes).
    let again = encode(&q, &read);
    assert_eq!(read_events(&again[..]).unwrap().1, read);
}

/// Only the exact mode's frees carry a lifetime: the sampled mode's unit is the lifetime's.
#[test]
fn sampled_frees_carry_no_lifetime_of_their_own() {
    let (p, events) = rich();
    let (q, read) = read_events(&encode(&p, &events)[..]).unwrap();
    assert_eq!(q.header.lifetime_unit_ns(), TIME_UNIT_SAMPLED_NS);
    assert!(read.iter().all(|e| !matches!(e, Event::Free(f) if f.life_ns.is_some())));
}

/// A lifetime longer than its free's age allows is a damaged record (the reader stops there
/// with a warning); the writer refuses to write one.
#[test]
fn a_lifetime_beyond_its_age_is_refused() {
    const U: u64 = TIME_UNIT_EXACT_NS;
    let header = Header { interval: 1.0, ..Header::default() };
    let mut w = Writer::new(Vec::new(), &header).unwrap();
    w.write_stack(0, &Stack { frames: vec![1], truncated: false, label: 0 }).unwrap();
    let s = Sample { id: 1, stack: 0, time_ns: 5, thread: 1, addr: 0, size: 8, k: 8 };
    w.write_sample(&s).unwrap();
    let bad = Free { life_ns: Some(U), ..Free::of(&s, 10) };
    let e = w.write_free(&bad).unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
    // By hand: age 0, life 1024 lifetime units: four time units.
    w.block.extend_from_slice(&[EV_FREE, 0, 0, 0, 0x80, 0x08, 0]);
    let p = Profile::read_from(&w.finish().unwrap()[..]).unwrap();
    assert!(p.warnings[0].contains("exceeds its age of 0 time units"), "{:?}", p.warnings);
    assert_eq!((p.counts.samples, p.counts.frees), (1, 0));
}

/// What the collector folds ([`spec::free_as_stored`] and the others) is what a reader
/// gets back from the file, in both units: times, ages of every sign, fine lifetimes.
#[test]
fn events_as_stored_are_what_the_reader_gets_back() {
    use super::spec::{free_as_stored, move_as_stored, sample_as_stored};
    for interval in [1.0, 512.0] {
        let mut p = Profile::default();
        p.header.interval = interval;
        p.stacks.push(Stack { frames: vec![1], truncated: false, label: 0 });
        let unit = super::time_unit_ns(interval);
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.random::<u64>();
        let mut events = Vec::new();
        let mut want = Vec::new();
        for i in 0..5_000u64 {
            let t = next() % (1 << 34);
            let s = Sample { id: i + 1, stack: 0, time_ns: t, thread: 1, addr: 0, size: 64, k: 64 };
            // Lifetimes from nothing to many units, and a few frees before their sample.
            let life = match i % 4 {
                0 => next() % 1_000,
                1 => next() % (3 * unit),
                2 => next() % (1 << 30),
                _ => 0,
            };
            let at = if i % 97 == 0 { t.saturating_sub(next() % unit) } else { t + life };
            events.push(Event::Sample(s));
            want.push(Event::Sample(sample_as_stored(&s, unit)));
            if i % 5 == 0 {
                let m = Move::of(&s, at, 128);
                events.push(Event::Move(m));
                want.push(Event::Move(move_as_stored(&m, unit)));
            }
            let f = Free::of(&s, at);
            events.push(Event::Free(f));
            want.push(Event::Free(free_as_stored(&f, unit)));
        }
        let (_, read) = read_events(&encode(&p, &events)[..]).unwrap();
        let ids = |e: &Event| match *e {
            Event::Sample(s) => Event::Sample(Sample { id: 0, ..s }),
            Event::Free(f) => Event::Free(Free { id: 0, ..f }),
            Event::Move(m) => Event::Move(Move { id: 0, new_addr: 0, ..m }),
            e => e,
        };
        let read: Vec<Event> = read.iter().map(ids).collect();
        let want: Vec<Event> = want.iter().map(ids).collect();
        assert_eq!(read.len(), want.len());
        for (r, w) in read.iter().zip(&want) {
            assert_eq!(r, w, "interval {interval}");
        }
    }
}
