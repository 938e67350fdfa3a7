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

/// A sink that accepts `room` bytes, then fails (a full disk).
struct Full {
    data: Vec<u8>,
    room: usize,
}

impl Write for Full {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.data.len() >= self.room {
            return Err(io::Error::other("disk full"));
        }
        let n = buf.len().min(self.room - self.data.len());
        self.data.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failed_write_ends_the_stream() {
    let mut w = Writer::new(Full { data: Vec::new(), room: 60 }, &Header::default()).unwrap();
    // Incompressible frames: the block is longer than the room left.
    let frames = (0..200u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
    w.write_stack(0, &Stack { frames, truncated: false, label: 0 }).unwrap();
    assert!(w.flush().is_err());
    // Later blocks would follow a half block: refused, and the stream stays a clean cut.
    w.write_lost(&Lost::default()).unwrap();
    let e = w.flush().unwrap_err();
    assert!(e.to_string().contains("earlier write"), "{e}");
    let q = Profile::read_from(&w.get_ref().data[..]).unwrap();
    assert!(!q.complete);
    assert!(q.warnings[0].contains("cut at byte 60"), "{:?}", q.warnings);
}

#[test]
fn invalid_interval_is_refused() {
    for interval in [0.0, 0.5, f64::NAN, f64::INFINITY] {
        let h = Header { interval, ..Header::default() };
        assert!(Writer::new(Vec::new(), &h).is_err());
    }
}

/// Writes `events` in blocks of `per_block` events; returns the stream and the byte offset
/// where each block ends.
fn blocks(p: &Profile, events: &[Event], per_block: usize) -> (Vec<u8>, Vec<usize>) {
    let mut w = Writer::new(Vec::new(), &p.header).unwrap();
    for (i, s) in p.stacks.iter().enumerate() {
        w.write_stack(i as StackId, s).unwrap();
    }
    let mut ends = Vec::new();
    for chunk in events.chunks(per_block) {
        for e in chunk {
            match e {
                Event::Sample(s) => w.write_sample(s).unwrap(),
                Event::Free(f) => w.write_free(f).unwrap(),
                Event::Move(m) => w.write_move(m).unwrap(),
                Event::GcCycle(c) => w.write_gc_cycle(c).unwrap(),
            }
        }
        w.flush().unwrap();
        ends.push(w.get_ref().len());
    }
    (w.finish().unwrap(), ends)
}

#[test]
fn a_cut_at_every_byte_keeps_every_complete_block() {
    let (p, events) = rich();
    let (bytes, ends) = blocks(&p, &events, 4);
    let (_, all) = read_events(&bytes[..]).unwrap();
    let events = as_v2(&events);
    assert_eq!(all, events);
    let mut header_end = None;
    for cut in 0..bytes.len() {
        match read_events(&bytes[..cut]) {
            Err(e) => {
                assert!(header_end.is_none(), "cut at {cut} failed after the header: {e}");
                let m = e.to_string();
                assert!(m.contains("cut") || m.contains("empty") || m.contains("no header"), "{m}");
            }
            Ok((q, read)) => {
                header_end.get_or_insert(cut);
                assert!(!q.complete);
                assert!(
                    q.warnings.iter().any(|w| w.contains(&format!("cut at byte {cut}"))),
                    "{:?}",
                    q.warnings
                );
                // Exactly the events of the blocks that end at or before the cut.
                let whole = ends.iter().filter(|&&e| e <= cut).count();
                let want = events.chunks(4).take(whole).map(<[Event]>::len).sum::<usize>();
                assert_eq!(read[..], events[..want], "cut at {cut}");
                assert_eq!(q.header, p.header);
            }
        }
    }
    assert!(header_end.is_some());
}

#[test]
fn random_byte_flips_never_panic() {
    use rand::{Rng, SeedableRng};
    let (p, events) = rich();
    let (bytes, _) = blocks(&p, &events, 3);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x006d_7072_6f66);
    let mut detected = 0;
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..rng.random_range(1..4) {
            let i = rng.random_range(0..b.len());
            b[i] ^= 1 << rng.random_range(0..8);
        }
        if rng.random_bool(0.2) {
            b.truncate(rng.random_range(0..b.len()));
        }
        match Profile::read_from(&b[..]) {
            Ok(q) if q.complete && q.warnings.is_empty() => {}
            _ => detected += 1,
        }
    }
    assert!(detected > 2900, "crc should catch nearly every flip: {detected}");
}

#[test]
fn bad_inputs_are_clear_errors() {
    let msg = |b: &[u8]| Profile::read_from(b).unwrap_err().to_string();
    assert!(msg(b"").contains("empty"));
    assert!(msg(b"GIF89a\0\0\0\0\0").contains("bad magic"));
    assert!(msg(b"MPROF").contains("cut at byte 5"));
    assert!(msg(MAGIC).contains("no header"));

    let mut bytes = MAGIC.to_vec();
    let mut b = Vec::new();
    put_u(&mut b, 7);
    put_f64(&mut b, 1.0);
    frame(&mut bytes, TAG_HEADER, &b);
    let m = msg(&bytes);
    assert!(m.contains("unsupported version 7") && m.contains("newer memprof"), "{m}");

    // A first record that is not a header.
    let mut bytes = MAGIC.to_vec();
    frame(&mut bytes, TAG_FREE, &[1, 1]);
    assert!(msg(&bytes).contains("no header"));
}

#[test]
fn a_damaged_block_keeps_the_blocks_before_it() {
    let (p, events) = rich();
    let (mut bytes, ends) = blocks(&p, &events, 4);
    // Damage the third block's compressed bytes.
    let at = ends[1];
    bytes[at + 8] ^= 0x40;
    let (q, read) = read_events(&bytes[..]).unwrap();
    assert!(!q.complete);
    assert_eq!(read[..], as_v2(&events)[..8]);
    assert!(q.warnings[0].contains(&format!("at byte {at}: crc mismatch")), "{:?}", q.warnings);
}

/// Builds a stream of hand-made inner records in one block.
fn with_block(inner: &[u8]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    w.block.extend_from_slice(inner);
    w.flush().unwrap();
    w.out
}

/// A Lost record of an older writer (three counts) reads with no replayed or unknown frees.
#[test]
fn a_lost_record_of_three_counts_still_reads() {
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    w.block.extend_from_slice(&[TAG_LOST, 3, 7, 8, 9]);
    let p = Profile::read_from(&w.finish().unwrap()[..]).unwrap();
    assert!(p.complete, "{:?}", p.warnings);
    assert_eq!(p.lost, Lost { events: 7, untracked: 8, callback_panics: 9, ..Lost::default() });
}

#[test]
fn undefined_pairs_unknown_tags_and_orphans() {
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    w.write_stack(0, &Stack { frames: vec![1], truncated: false, label: 0 }).unwrap();
    let s = Sample { id: 1, stack: 0, time_ns: 0, thread: 1, addr: 0, size: 8, k: 1 };
    w.write_sample(&s).unwrap();
    // An unknown ancillary record is skipped; trailing payload bytes of a table record too.
    w.block.extend_from_slice(&[0xC1, 3, 1, 2, 3]);
    w.block.extend_from_slice(&[TAG_LOST, 6, 1, 2, 3, 4, 5, 99]);
    w.write_free(&Free::of(&s, 5)).unwrap();
    // A free of a block that is not live (allocated at another time).
    w.write_free(&Free { alloc_ns: 1 << 30, ..Free::of(&s, 6) }).unwrap();
    let bytes = w.finish().unwrap();
    let p = Profile::read_from(&bytes[..]).unwrap();
    assert!(p.complete);
    let lost =
        Lost { events: 1, untracked: 2, callback_panics: 3, frees_replayed: 4, frees_unknown: 5 };
    assert_eq!(p.lost, lost);
    assert_eq!((p.counts.frees, p.counts.orphans), (1, 1));
    assert!(p.warnings.iter().any(|m| m.contains("1 frees or moves")), "{:?}", p.warnings);

    // A sample naming an undefined pair, a pair naming an undefined stack, and an unknown
    // critical tag stop the reading.
    let p = Profile::read_from(&with_block(&[EV_SAMPLE, 5, 0, 1, 0])[..]).unwrap();
    assert!(p.warnings[0].contains("names pair 5 which was never defined"), "{:?}", p.warnings);
    let p = Profile::read_from(&with_block(&[TAG_PAIR, 2, 9, 8])[..]).unwrap();
    assert!(p.warnings[0].contains("names stack 9"), "{:?}", p.warnings);
    let p = Profile::read_from(&with_block(&[0x33, 0])[..]).unwrap();
    assert!(p.warnings[0].contains("unknown record kind 51"), "{:?}", p.warnings);
    // An event cut inside its block.
    let p = Profile::read_from(&with_block(&[EV_FREE, 0x80])[..]).unwrap();
    assert!(p.warnings[0].contains("payload ends too early"), "{:?}", p.warnings);
}

#[test]
fn blocks_after_the_end_add_symbols_only() {
    let (p, events) = rich();
    let mut bytes = encode(&p, &events);
    let mut w = Writer::bare(Vec::new(), &p.header).unwrap();
    let sym = [Symbol { function: "late".into(), file: None, line: None }];
    w.write_symbols(0x5555_2000, &sym).unwrap();
    w.flush().unwrap();
    let appendix = w.out;
    bytes.extend_from_slice(&appendix);
    let q = Profile::read_from(&bytes[..]).unwrap();
    assert!(q.complete && q.warnings.is_empty(), "{:?}", q.warnings);
    assert_eq!(q.symbols[&0x5555_2000], sym);
    // A cut appendix is ignored with a warning; the profile stays complete.
    let q = Profile::read_from(&bytes[..bytes.len() - 2]).unwrap();
    assert!(q.complete);
    assert!(!q.symbols.contains_key(&0x5555_2000));
    assert!(q.warnings[0].contains("appended after the end record was cut"), "{:?}", q.warnings);
    // Events after the end are refused.
    let mut w = Writer::bare(Vec::new(), &p.header).unwrap();
    w.block.extend_from_slice(&[EV_FREE, 0, 0]);
    w.flush().unwrap();
    let mut bad = encode(&p, &events);
    bad.extend_from_slice(&w.out);
    let q = Profile::read_from(&bad[..]).unwrap();
    assert!(q.complete);
    assert!(q.warnings[0].contains("after the end record"), "{:?}", q.warnings);
}

#[test]
fn varints_and_zigzag() {
    for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
        let mut b = Vec::new();
        put_u(&mut b, v);
        assert!(b.len() <= 10);
        assert_eq!(Payload { rest: &b }.u().unwrap(), v);
    }
    for v in [0i64, 1, -1, i64::MIN, i64::MAX, -12345] {
        assert_eq!(unzigzag(zigzag(v)), v);
    }
    // An 11-byte varint and a 10th byte with high bits are rejected.
    assert!(Payload { rest: &[0xff; 11] }.u().is_err());
    let mut over = vec![0xffu8; 9];
    over.push(0x02);
    assert!(Payload { rest: &over }.u().is_err());
}

/// The reader's memory is bounded by the live blocks and the tables, not by the events:
/// 50 M events (25 M samples, each freed soon after) stream through a reader whose
/// allocations are counted, and its peak stays under a stated bound.
#[test]
fn reading_50_million_events_keeps_memory_bounded() {
    let mut p = Profile::default();
    p.header.interval = 1.0;
    p.stacks.push(Stack { frames: vec![0x1000, 0x2000], truncated: false, label: 0 });
    p.stacks.push(Stack { frames: vec![0x1000, 0x3000], truncated: false, label: 0 });
    // Generated block by block, so the test itself never holds the events.
    let mut w = Writer::new(Vec::new(), &p.header).unwrap();
    for (i, s) in p.stacks.iter().enumerate() {
        w.write_stack(i as StackId, s).unwrap();
    }
    const SAMPLES: u64 = 25_000_000;
    for i in 0..SAMPLES {
        let size = 16 + (i % 7) * 8;
        let s = Sample {
            id: i,
            stack: (i % 2) as u32,
            time_ns: i * 30,
            thread: 1,
            addr: 0,
            size,
            k: size,
        };
        w.write_sample(&s).unwrap();
        // Keep ~1000 blocks live at any time.
        if i >= 1000 {
            let j = i - 1000;
            let size = 16 + (j % 7) * 8;
            let s = Sample {
                id: j,
                stack: (j % 2) as u32,
                time_ns: j * 30,
                thread: 1,
                addr: 0,
                size,
                k: size,
            };
            w.write_free(&Free::of(&s, i * 30 + 10)).unwrap();
        }
    }
    let bytes = w.finish().unwrap();
    let (q, peak) = crate::sys::alloc_count::peak_during(|| Profile::read_from(&bytes[..]));
    let q = q.unwrap();
    assert!(q.complete, "{:?}", q.warnings);
    assert_eq!(q.counts.samples + q.counts.frees, 2 * SAMPLES - 1000);
    assert_eq!(q.live.values().map(|t| t.samples).sum::<u64>(), 1000);
    // One block (≤ 4 MiB raw, its compressed copy in a buffer that grows by doubling, the
    // 256 KiB read buffer), at most six batches of 8192 events between the decoding and
    // the folding threads (4.7 MiB) and the aggregates: under 24 MiB,
    // where the events alone would take 2.4 GB. Deterministic up to the batches in
    // flight: no false failures.
    assert!(peak < 24 << 20, "the reader's peak heap was {peak} bytes");
    eprintln!("{} bytes for {} events; reader peak heap {peak} bytes", bytes.len(), 2 * SAMPLES);
}

/// The committed version-1 fixtures, written again as version 2, read to the same
/// aggregates (their times are multiples of the unit or the aggregates do not depend on
/// them) and the same tables.
#[test]
fn committed_version_1_fixtures_convert_to_the_same_aggregates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    for name in ["small.mprof", "small-before-build-ids.mprof", "small-before-file-identity.mprof"]
    {
        let v1 = std::fs::read(dir.join(name)).unwrap();
        let (meta, events) = read_events(&v1[..]).unwrap();
        assert_eq!(meta.header.version, 1, "{name}");
        assert!(meta.complete, "{name}: {:?}", meta.warnings);
        let v2 = write_events(Vec::new(), &meta, &events).unwrap();
        let (a, b) = (Profile::read_from(&v1[..]).unwrap(), Profile::read_from(&v2[..]).unwrap());
        assert!(b.complete && b.warnings.is_empty(), "{name}: {:?}", b.warnings);
        assert_eq!(b.header.version, VERSION);
        assert_eq!((&a.modules, &a.stacks, &a.symbols), (&b.modules, &b.stacks, &b.symbols));
        assert_eq!(a.allocated, b.allocated, "{name}");
        assert_eq!(a.live, b.live);
        assert_eq!(a.counts, b.counts, "{name}");
        assert_eq!(a.live_bytes, b.live_bytes, "{name}");
        assert!(v2.len() < v1.len(), "{name}: {} bytes as v2, {} as v1", v2.len(), v1.len());
    }
}

/// `memprof record` appends symbols to a file that ends with a Stopping record (`exec`,
/// `_exit`): it still reads as whole and stopped.
#[test]
fn symbols_appended_after_a_stopping_record_keep_it_stopped() {
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    w.write_stack(0, &Stack { frames: vec![7], truncated: false, label: 0 }).unwrap();
    let s = Sample { id: 1, stack: 0, time_ns: 0, thread: 1, addr: 0, size: 8, k: 1 };
    w.write_sample(&s).unwrap();
    w.write_stopping(Stopped::QuickExit).unwrap();
    w.flush().unwrap();
    let sym = [Symbol { function: "f".into(), file: None, line: None }];
    w.write_symbols(7, &sym).unwrap();
    w.flush().unwrap();
    let p = Profile::read_from(&w.get_ref()[..]).unwrap();
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!((p.complete, p.stopped), (false, Some(Stopped::QuickExit)));
    assert_eq!(p.symbols[&7], sym);
}

#[test]
fn labels_round_trip_and_are_part_of_a_stacks_identity() {
    let mut p = Profile::default();
    p.header.interval = 1.0;
    p.header.time_unit_ns = TIME_UNIT_EXACT_NS;
    p.labels = vec!["server".into(), "server;handle{endpoint=/upload}".into(), "ünï;code".into()];
    // One site under no span, under each of two spans.
    for label in [0, 1, 2] {
        p.stacks.push(Stack { frames: vec![0x10, 0x20], truncated: false, label });
    }
    p.stacks.push(Stack { frames: vec![0x30], truncated: true, label: 3 });
    let samples: Vec<Sample> = (0..4u32)
        .map(|i| Sample {
            id: u64::from(i) + 1,
            stack: i,
            time_ns: 0,
            thread: 1,
            addr: 0,
            size: 100 * (u64::from(i) + 1),
            k: 100 * (u64::from(i) + 1),
        })
        .collect();
    let mut events: Vec<Event> = samples.iter().map(|s| Event::Sample(*s)).collect();
    // The free names its sample's (stack, size): its label goes with it.
    events.push(Event::Free(Free::of(&samples[2], 10)));
    let bytes = encode(&p, &events);
    let (q, read) = read_events(&bytes[..]).unwrap();
    assert!(q.complete && q.warnings.is_empty(), "{:?}", q.warnings);
    assert_eq!(q.header.version, VERSION);
    assert_same_tables(&p, &q);
    assert_eq!(read.len(), events.len());
    let agg = Profile::read_from(&bytes[..]).unwrap();
    assert_eq!(agg.stack_label(0), None);
    assert_eq!(agg.stack_label(1), Some("server"));
    assert_eq!(agg.stack_label(2), Some("server;handle{endpoint=/upload}"));
    assert_eq!(agg.stack_label(3), Some("ünï;code"));
    assert_eq!(agg.allocated[&(1, 200)], Totals { samples: 1, k: 200 });
    assert_eq!(agg.live[&(2, 300)], Totals { samples: 0, k: 0 });
    assert_eq!(agg.live[&(1, 200)], Totals { samples: 1, k: 200 });
    // Without labels the label field is not written: only the header's version differs
    // from what version 2 wrote.
    let mut plain = p.clone();
    plain.labels.clear();
    plain.stacks.iter_mut().for_each(|s| s.label = 0);
    let plain_bytes = encode(&plain, &events);
    assert!(plain_bytes.len() < bytes.len());
    let q = Profile::read_from(&plain_bytes[..]).unwrap();
    assert!(q.labels.is_empty() && q.stacks.iter().all(|s| s.label == 0));
}

#[test]
fn labels_out_of_order_or_undefined_are_refused() {
    let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
    assert!(w.write_label(2, "a").is_err());
    assert!(w.write_stack(0, &Stack { frames: vec![1], truncated: false, label: 1 }).is_err());
    w.write_label(1, "a").unwrap();
    w.write_stack(0, &Stack { frames: vec![1], truncated: false, label: 1 }).unwrap();
    // A reader stops at a label defined out of order, or a stack naming an undefined one.
    let p = Profile::read_from(&with_block(&[TAG_LABEL, 3, 2, 1, b'x'])[..]).unwrap();
    assert!(p.warnings[0].contains("label record defines id 2"), "{:?}", p.warnings);
    let p = Profile::read_from(&with_block(&[TAG_STACK, 5, 0, 0, 1, 7, 4])[..]).unwrap();
    assert!(p.warnings[0].contains("names label 4"), "{:?}", p.warnings);
    let p = Profile::read_from(
        &with_block(&[TAG_LABEL, 3, 1, 1, b'x', TAG_STACK, 5, 0, 0, 1, 7, 1])[..],
    )
    .unwrap();
    assert!(p.warnings.is_empty() || !p.warnings[0].contains("label"), "{:?}", p.warnings);
    assert_eq!((p.labels.len(), p.stack_label(0)), (1, Some("x")));
}

#[test]
fn committed_version_2_fixture_reads_without_labels() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let bytes = std::fs::read(dir.join("small-v2.mprof")).unwrap();
    let (meta, events) = read_events(&bytes[..]).unwrap();
    assert_eq!(meta.header.version, 2);
    assert!(meta.complete, "{:?}", meta.warnings);
    assert!(meta.labels.is_empty() && meta.stacks.iter().all(|s| s.label == 0));
    // Rewritten as version 3, it reads back to the same aggregates.
    let v3 = write_events(Vec::new(), &meta, &events).unwrap();
    let (a, b) = (Profile::read_from(&bytes[..]).unwrap(), Profile::read_from(&v3[..]).unwrap());
    assert_eq!(b.header.version, VERSION);
    assert_eq!((&a.stacks, &a.allocated, &a.live), (&b.stacks, &b.allocated, &b.live));
}

/// A file of `memprof record`'s collector says so in its header; cut short, it blames the
/// collector, not the program (which it outlives). Files of older writers claim nothing.
#[test]
fn a_collected_file_cut_short_says_record_stopped() {
    let header = Header { collected: true, ..Header::default() };
    let mut w = Writer::new(Vec::new(), &header).unwrap();
    w.write_stack(0, &Stack { frames: vec![1, 2], truncated: false, label: 0 }).unwrap();
    w.write_sample(&Sample { id: 1, stack: 0, time_ns: 0, thread: 1, addr: 0, size: 8, k: 8 })
        .unwrap();
    w.flush().unwrap();
    let cut = Profile::read_from(&w.get_ref()[..]).unwrap();
    assert!(cut.header.collected && !cut.complete);
    assert!(cut.warnings[0].contains(crate::profile::header::RECORD_STOPPED), "{:?}", cut.warnings);
    assert!(!cut.warnings[0].contains("crashed"), "{:?}", cut.warnings);
    let whole = Profile::read_from(&w.finish().unwrap()[..]).unwrap();
    assert!(whole.header.collected && whole.complete && whole.warnings.is_empty());
    let plain = Profile::read_from(
        &Writer::new(Vec::new(), &Header::default()).unwrap().finish().unwrap()[..],
    )
    .unwrap();
    assert!(!plain.header.collected);
}

/// `memprof attach`'s files say so (flags bit 1), beside the collector's bit; other files
/// do not.
#[test]
fn an_attached_recording_says_so() {
    for collected in [false, true] {
        let header = Header { collected, attached: true, ..Header::default() };
        let bytes = Writer::new(Vec::new(), &header).unwrap().finish().unwrap();
        let p = Profile::read_from(&bytes[..]).unwrap();
        assert!(p.header.attached && p.header.collected == collected && p.complete);
    }
    let header = Header { collected: true, ..Header::default() };
    let bytes = Writer::new(Vec::new(), &header).unwrap().finish().unwrap();
    assert!(!Profile::read_from(&bytes[..]).unwrap().header.attached);
}

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
