//! Streams cut, flipped, refused or written past a full disk, and the oddities a reader
//! must tell apart from damage.

use super::*;

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
