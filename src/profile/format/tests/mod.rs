use super::*;
use crate::profile::aggregate::Totals;
use crate::profile::lifetime::lifetime_bucket;

fn rich() -> (Profile, Vec<Event>) {
    let mut p = Profile {
        header: Header {
            version: VERSION,
            interval: 4096.5,
            depth: 64,
            pid: 4242,
            ppid: 4241,
            ns_pid: 1,
            executable: "/usr/bin/ünïcode prog".into(),
            cmdline: vec!["prog".into(), "--flag".into(), String::new()],
            start_unix_ns: 1_700_000_000_123_456_789,
            time_unit_ns: TIME_UNIT_SAMPLED_NS,
            collected: false,
            attached: false,
        },
        ..Profile::default()
    };
    p.modules.push(Module {
        path: "/bin/prog".into(),
        base: 0x5555_0000,
        start: 0x5555_1000,
        end: 0x5556_0000,
        build_id: (0u8..20).collect(),
        ..Default::default()
    });
    p.modules.push(Module {
        path: "/lib/libc.so.6".into(),
        base: 0x7f00_0000_0000,
        start: 0x7f00_0000_0000,
        end: 0x7f00_0020_0000,
        file_size: 1_922_136,
        file_mtime_ns: 1_700_000_000_123_456_789,
        ..Default::default()
    });
    p.stacks.push(Stack {
        frames: vec![0x5555_1234, 0x5555_1100, 0x7f00_0000_1000, u64::MAX, 0],
        truncated: false,
        label: 0,
    });
    p.stacks.push(Stack { frames: vec![], truncated: true, label: 0 });
    p.stacks.push(Stack { frames: vec![0x5555_2000; 3], truncated: true, label: 0 });
    p.symbols.insert(
        0x5555_1234,
        vec![
            Symbol { function: "inner".into(), file: Some("src/a.rs".into()), line: Some(12) },
            Symbol { function: "outer".into(), file: None, line: Some(u32::MAX) },
        ],
    );
    p.symbols.insert(
        0x5555_1100,
        vec![Symbol { function: "main".into(), file: Some("m.rs".into()), line: None }],
    );
    p.symbols.insert(0x1, vec![]);
    let mut events = Vec::new();
    let mut samples = Vec::new();
    for i in 0..20u64 {
        let s = Sample {
            // The reader numbers version-2 samples 1, 2, 3…: these ids read back unchanged.
            id: i + 1,
            stack: (i % 3) as u32,
            // Multiples of the unit, so that they read back unchanged.
            time_ns: i * 100 * TIME_UNIT_SAMPLED_NS,
            thread: (i % 4) as u32 + 1,
            addr: 0,
            size: 10 + i,
            k: 1 + i % 2,
        };
        samples.push(s);
        events.push(Event::Sample(s));
        if i == 2 {
            let m = Move::of(&samples[0], 250 * TIME_UNIT_SAMPLED_NS, 77);
            events.push(Event::Move(m));
        }
        if i == 5 {
            events.push(Event::Free(Free::of(&samples[3], 550 * TIME_UNIT_SAMPLED_NS)));
        }
    }
    events.push(Event::Free(Free::of(&samples[9], 1000 * TIME_UNIT_SAMPLED_NS)));
    events.push(Event::GcCycle(GcCycle {
        cycle: 1,
        // Between events, so that a sample's unit does not straddle the cycle's start.
        start_ns: 350 * TIME_UNIT_SAMPLED_NS + 1,
        end_ns: 1200 * TIME_UNIT_SAMPLED_NS,
        mark_ns: 600,
        slices: 3,
        longest_slice_ns: 250,
        words_marked: 1200,
        ns_per_word: 0.5,
        sweep_ns: 150,
        heap_words: 4096,
        live_words: 1200,
    }));
    p.lost = Lost {
        events: 1,
        untracked: 2,
        callback_panics: u64::MAX,
        frees_replayed: 4,
        frees_unknown: 5,
    };
    (p, events)
}

/// What a version-2 stream reads back of `events`: frees and moves without their ids (they
/// name the block by its pair and allocation time), no addresses.
fn as_v2(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .map(|e| match *e {
            Event::Free(f) => Event::Free(Free { id: 0, ..f }),
            Event::Move(m) => Event::Move(Move { id: 0, new_addr: 0, ..m }),
            e => e,
        })
        .collect()
}

fn encode(p: &Profile, events: &[Event]) -> Vec<u8> {
    write_events(Vec::new(), p, events).unwrap()
}

fn assert_same_tables(a: &Profile, b: &Profile) {
    assert_eq!(a.header, b.header);
    assert_eq!(a.modules, b.modules);
    assert_eq!(a.stacks, b.stacks);
    assert_eq!(a.labels, b.labels);
    assert_eq!(a.symbols, b.symbols);
    assert_eq!(a.lost, b.lost);
}

/// A version-1 encoder (this module only reads version 1 now), for the compatibility tests.
fn encode_v1(p: &Profile, events: &[Event]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    let mut b = Vec::new();
    put_u(&mut b, 1);
    put_f64(&mut b, p.header.interval);
    put_u(&mut b, u64::from(p.header.depth));
    put_u(&mut b, u64::from(p.header.pid));
    put_str(&mut b, &p.header.executable).unwrap();
    put_u(&mut b, p.header.cmdline.len() as u64);
    for a in &p.header.cmdline {
        put_str(&mut b, a).unwrap();
    }
    put_u(&mut b, p.header.start_unix_ns);
    frame(&mut out, TAG_HEADER, &b);
    // Tables through the version-2 writer's encoders: the payloads are the same.
    let mut w = Writer::bare(Vec::new(), &p.header).unwrap();
    let table = |tag: u8, w: &mut Writer<Vec<u8>>, out: &mut Vec<u8>| {
        let payload = std::mem::take(&mut w.block);
        // The writer's block holds `tag len payload`: strip the first two fields.
        let mut q = Payload { rest: &payload[1..] };
        let n = q.u().unwrap();
        frame(out, tag, q.take(n).unwrap());
    };
    for m in &p.modules {
        w.write_module(m).unwrap();
        table(TAG_MODULE, &mut w, &mut out);
    }
    for (i, s) in p.stacks.iter().enumerate() {
        w.write_stack(i as StackId, s).unwrap();
        table(TAG_STACK, &mut w, &mut out);
    }
    let mut addrs: Vec<_> = p.symbols.keys().copied().collect();
    addrs.sort_unstable();
    for a in addrs {
        w.write_symbols(a, &p.symbols[&a]).unwrap();
        table(TAG_SYMBOLS, &mut w, &mut out);
    }
    let mut counts = [0u64; 3];
    for e in events {
        let mut b = Vec::new();
        match e {
            Event::Sample(s) => {
                for v in [s.id, u64::from(s.stack), s.time_ns, u64::from(s.thread)] {
                    put_u(&mut b, v);
                }
                for v in [s.addr, s.size, s.k] {
                    put_u(&mut b, v);
                }
                frame(&mut out, TAG_SAMPLE, &b);
                counts[0] += 1;
            }
            Event::Free(f) => {
                put_u(&mut b, f.id);
                put_u(&mut b, f.time_ns);
                frame(&mut out, TAG_FREE, &b);
                counts[1] += 1;
            }
            Event::Move(m) => {
                for v in [m.id, m.time_ns, m.new_addr, m.new_size] {
                    put_u(&mut b, v);
                }
                frame(&mut out, TAG_MOVE, &b);
                counts[2] += 1;
            }
            Event::GcCycle(c) => {
                w.write_gc_cycle(c).unwrap();
                table(TAG_GC_CYCLE, &mut w, &mut out);
            }
        }
    }
    w.write_lost(&p.lost).unwrap();
    table(TAG_LOST, &mut w, &mut out);
    let mut b = Vec::new();
    for c in counts {
        put_u(&mut b, c);
    }
    frame(&mut out, TAG_END, &b);
    out
}

#[test]
fn round_trip_of_tables_and_events() {
    let (p, events) = rich();
    let bytes = encode(&p, &events);
    assert_eq!(&bytes[..8], MAGIC);
    let (q, read) = read_events(&bytes[..]).unwrap();
    assert_same_tables(&p, &q);
    assert!(q.complete, "{:?}", q.warnings);
    assert!(q.warnings.is_empty(), "{:?}", q.warnings);
    assert_eq!(read, as_v2(&events));
    // Deterministic: the same events encode to the same bytes.
    assert_eq!(bytes, encode(&q, &read));
}

#[test]
fn times_are_quantized_to_the_unit_and_deltas_go_both_ways() {
    let mut p = Profile::default();
    p.stacks.push(Stack { frames: vec![1], truncated: false, label: 0 });
    let unit = TIME_UNIT_SAMPLED_NS;
    // Threads' clocks interleave: times go back as well as forward; ids jump.
    let times = [5 * unit + 7, 3 * unit, 3 * unit + unit - 1, 1 << 40, 0];
    let samples: Vec<Sample> = times
        .iter()
        .enumerate()
        .map(|(i, &t)| Sample {
            id: i as u64 + 1,
            stack: 0,
            time_ns: t,
            thread: 3,
            addr: 0,
            size: 9,
            k: 2,
        })
        .collect();
    // A free stamped before its sample's time (another thread's clock): a negative age.
    let events: Vec<Event> = samples
        .iter()
        .map(|s| Event::Sample(*s))
        .chain([Event::Free(Free::of(&samples[3], 2 * unit))])
        .collect();
    let (q, read) = read_events(&encode(&p, &events)[..]).unwrap();
    assert!(q.complete && q.warnings.is_empty(), "{:?}", q.warnings);
    let quantize = |e: &Event| match *e {
        Event::Sample(s) => Event::Sample(Sample { time_ns: s.time_ns / unit * unit, ..s }),
        Event::Free(f) => Event::Free(Free {
            id: 0,
            time_ns: f.time_ns / unit * unit,
            alloc_ns: f.alloc_ns / unit * unit,
            ..f
        }),
        e => e,
    };
    assert_eq!(read, events.iter().map(quantize).collect::<Vec<_>>());
    let agg = Profile::read_from(&encode(&p, &events)[..]).unwrap();
    assert_eq!((agg.counts.frees, agg.counts.orphans), (1, 0));
    assert_eq!(agg.live[&(0, 9)], Totals { samples: 4, k: 8 });
}

#[test]
fn the_exact_mode_writes_coarser_units_and_k_equal_to_size_for_free() {
    let mut p = Profile::default();
    p.header.interval = 1.0;
    p.stacks.push(Stack { frames: vec![1, 2, 3], truncated: false, label: 0 });
    let mut events = Vec::new();
    for i in 0..100_000u64 {
        let s = Sample { id: i, stack: 0, time_ns: i * 40, thread: 1, addr: 0, size: 168, k: 168 };
        events.push(Event::Sample(s));
        events.push(Event::Free(Free::of(&s, i * 40 + 20)));
    }
    let bytes = encode(&p, &events);
    let (q, read) = read_events(&bytes[..]).unwrap();
    assert_eq!(q.header.time_unit_ns, TIME_UNIT_EXACT_NS);
    assert_eq!(read.len(), events.len());
    // 200 000 events of a repetitive program: a few bytes in all, after the tables.
    assert!(bytes.len() < 2_000, "{} bytes", bytes.len());
    let agg = Profile::read_from(&bytes[..]).unwrap();
    assert_eq!(agg.counts.samples, 100_000);
    assert_eq!(agg.allocated[&(0, 168)], Totals { samples: 100_000, k: 16_800_000 });
    assert!(agg.live.values().all(|t| t.samples == 0), "{:?}", agg.live);
}

#[test]
fn version_1_streams_read_to_the_same_aggregates() {
    let (p, events) = rich();
    let v1 = encode_v1(&p, &events);
    let v2 = encode(&p, &events);
    let a = Profile::read_from(&v1[..]).unwrap();
    let b = Profile::read_from(&v2[..]).unwrap();
    assert!(a.complete && b.complete, "{:?} {:?}", a.warnings, b.warnings);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    assert_eq!(a.header.version, 1);
    assert_eq!(a.header.time_unit_ns, 1);
    assert_eq!(
        (a.modules.clone(), a.stacks.clone(), a.symbols.clone()),
        (b.modules, b.stacks, b.symbols)
    );
    assert_eq!(a.allocated, b.allocated);
    assert_eq!(a.live, b.live);
    assert_eq!(a.counts, b.counts);
    assert_eq!(a.gc_marked, b.gc_marked);
    assert_eq!(a.gc_marked[0][&0].samples, 1, "{:?}", a.gc_marked);
    // And the events themselves.
    let (_, e1) = read_events(&v1[..]).unwrap();
    assert_eq!(e1, events);
}

#[test]
fn a_stream_is_readable_before_it_is_finished_and_checks_ids() {
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    let s = Stack { frames: vec![1, 2, 3], truncated: false, label: 0 };
    assert!(w.write_stack(1, &s).is_err());
    w.write_stack(0, &s).unwrap();
    let bad = Sample { id: 1, stack: 1, time_ns: 0, thread: 1, addr: 0, size: 1, k: 1 };
    assert!(w.write_sample(&bad).is_err());
    w.write_sample(&Sample { stack: 0, ..bad }).unwrap();
    w.flush().unwrap();
    let partial = w.get_ref().clone();
    let bytes = w.finish().unwrap();
    let p = Profile::read_from(&bytes[..]).unwrap();
    assert!(p.complete);
    assert_eq!(p.counts.samples, 1);
    // Before finish() the stream is readable, just incomplete.
    let q = Profile::read_from(&partial[..]).unwrap();
    assert!(!q.complete);
    assert_eq!(q.counts.samples, 1);
    assert!(q.warnings[0].contains("may have crashed"), "{:?}", q.warnings);
}

/// A stream whose last record says the program is stopping (exec, _exit) reads as whole;
/// the same record followed by more (an exec that failed) claims nothing, and neither does
/// one cut inside the next block.
#[test]
fn stopping_record_tells_an_exec_from_a_crash() {
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    w.write_stack(0, &Stack { frames: vec![1, 2], truncated: false, label: 0 }).unwrap();
    let s = Sample { id: 1, stack: 0, time_ns: 0, thread: 1, addr: 0, size: 8, k: 8 };
    w.write_sample(&s).unwrap();
    w.write_stopping(Stopped::Exec).unwrap();
    w.flush().unwrap();
    let whole = w.get_ref().clone();
    let p = Profile::read_from(&whole[..]).unwrap();
    assert_eq!((p.complete, p.stopped), (false, Some(Stopped::Exec)));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);

    w.write_sample(&Sample { id: 2, ..s }).unwrap();
    w.flush().unwrap();
    let more = w.get_ref().clone();
    let p = Profile::read_from(&more[..]).unwrap();
    assert_eq!(p.stopped, None);
    assert_eq!(p.counts.samples, 2);
    assert!(p.warnings[0].contains("may have crashed"), "{:?}", p.warnings);
    let p = Profile::read_from(&more[..more.len() - 1]).unwrap();
    assert_eq!((p.stopped, p.counts.samples), (None, 1));

    w.write_stopping(Stopped::QuickExit).unwrap();
    w.flush().unwrap();
    let p = Profile::read_from(&w.get_ref()[..]).unwrap();
    assert_eq!(p.stopped, Some(Stopped::QuickExit));
}

/// Resident readings read back in order, beside the events; one after a Stopping record
/// leaves it the last word (a fact, not an event); `write_events` keeps them.
#[test]
fn resident_readings_round_trip() {
    use crate::profile::Resident;
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    w.write_stack(0, &Stack { frames: vec![1, 2], truncated: false, label: 0 }).unwrap();
    let r = |t: u64, b: u64| Resident { time_ns: t, bytes: b };
    w.write_resident(&r(5, 1 << 20)).unwrap();
    let s = Sample { id: 1, stack: 0, time_ns: 7, thread: 1, addr: 0, size: 8, k: 8 };
    w.write_sample(&s).unwrap();
    w.write_stopping(Stopped::Exec).unwrap();
    w.write_resident(&r(9, u64::MAX)).unwrap();
    w.flush().unwrap();
    let p = Profile::read_from(&w.get_ref()[..]).unwrap();
    assert_eq!(p.resident, [r(5, 1 << 20), r(9, u64::MAX)]);
    assert_eq!((p.stopped, p.counts.samples), (Some(Stopped::Exec), 1));
    let (tables, events) = read_events(&w.get_ref()[..]).unwrap();
    let again = write_events(Vec::new(), &tables, &events).unwrap();
    assert_eq!(Profile::read_from(&again[..]).unwrap().resident, p.resident);
}

/// Readings by kind of mapping and the way of ending read back, the Stopping record still
/// the last word after them; a way of ending of a newer writer is no claim.
#[test]
fn splits_and_endings_round_trip() {
    use crate::profile::{Ended, EndedHow, ResidentSplit};
    let split = |t: u64| ResidentSplit {
        time_ns: t,
        resident: 9 << 20,
        allocator: 6 << 20,
        outside: 5 << 20,
        stacks: 1,
        files: 2,
        own: 3,
        other: u64::MAX,
        live_bytes: 1234.5,
    };
    let end = Ended { how: EndedHow::QuickExit, status: -3, limit_bytes: 7 };
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    w.write_split(&split(4)).unwrap();
    w.write_split(&split(8)).unwrap();
    w.write_ended(&end).unwrap();
    w.write_stopping(Stopped::QuickExit).unwrap();
    w.flush().unwrap();
    let p = Profile::read_from(&w.get_ref()[..]).unwrap();
    assert_eq!(p.splits, [split(4), split(8)]);
    assert_eq!((p.ended, p.stopped), (Some(end), Some(Stopped::QuickExit)));
    let (tables, events) = read_events(&w.get_ref()[..]).unwrap();
    assert_eq!(tables.ended, Some(end));
    let again = write_events(Vec::new(), &tables, &events).unwrap();
    let q = Profile::read_from(&again[..]).unwrap();
    assert_eq!((q.splits, q.ended), (p.splits, p.ended));
    for how in 1..=6 {
        let how = EndedHow::from_code(how).unwrap();
        assert_eq!(EndedHow::from_code(how.code()), Some(how));
    }
    // A code this reader does not know.
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    w.payload.clear();
    for v in [99, 0, 0] {
        super::write::put_u(&mut w.payload, v);
    }
    w.record(super::spec::TAG_ENDED).unwrap();
    let cut = w.finish().unwrap();
    let p = Profile::read_from(&cut[..]).unwrap();
    assert!(p.complete && p.ended.is_none());
}

mod damaged;
mod lifetimes;
