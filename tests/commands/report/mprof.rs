//! The golden files `small-v4.mprof` and `small-v4-truncated.mprof` are what the writer
//! writes now (format version 4); `small-v3.mprof` and `small-v3-truncated.mprof` were
//! written by the previous writer (version 3), `small-v2.mprof` and
//! `small-v2-truncated.mprof` by the one before (version 2), `small.mprof`,
//! `small-truncated.mprof` and the two `small-before-*.mprof` files by older memprofs
//! (version 1): all must still read, with the time units they were written with.
use super::*;

fn small_bytes() -> Vec<u8> {
    let (tables, events) = three_sites_recording(true);
    format::write_events(Vec::new(), &tables, &events).unwrap()
}

/// The small profile as the drain thread writes a longer run: the same records, with a
/// block sealed (a flush) every four events.
fn small_in_blocks() -> Vec<u8> {
    let (tables, events) = three_sites_recording(true);
    let mut w = format::Writer::new(Vec::new(), &tables.header).unwrap();
    for m in &tables.modules {
        w.write_module(m).unwrap();
    }
    for (id, s) in tables.stacks.iter().enumerate() {
        w.write_stack(id as u32, s).unwrap();
    }
    let mut addrs: Vec<u64> = tables.symbols.keys().copied().collect();
    addrs.sort_unstable();
    for a in addrs {
        w.write_symbols(a, &tables.symbols[&a]).unwrap();
    }
    for (i, e) in events.iter().enumerate() {
        if i % 4 == 0 {
            w.flush().unwrap();
        }
        match e {
            Event::Sample(s) => w.write_sample(s).unwrap(),
            Event::Free(f) => w.write_free(f).unwrap(),
            Event::Move(m) => w.write_move(m).unwrap(),
            Event::GcCycle(c) => w.write_gc_cycle(c).unwrap(),
        }
    }
    w.finish().unwrap()
}

/// The small profile in blocks, cut three quarters in, inside a block.
fn truncated_bytes() -> Vec<u8> {
    let bytes = small_in_blocks();
    let cut = bytes.len() * 3 / 4 + 1;
    bytes[..cut].to_vec()
}

/// The events of a file, and its tables.
fn events_of(name: &str) -> (Profile, Vec<Event>) {
    let f = std::fs::File::open(fixtures().join(name)).unwrap();
    format::read_events(f).unwrap()
}

#[test]
fn small_fixture_is_what_the_writer_writes_and_reads_back() {
    golden("small-v4.mprof", &small_bytes());
    golden("small-v4-truncated.mprof", &truncated_bytes());
    let p = Profile::read_file(fixtures().join("small-v4.mprof")).unwrap();
    let (tables, events) = three_sites_recording(true);
    assert!(p.complete && p.warnings.is_empty(), "{:?}", p.warnings);
    // The writer sets the version and the time unit of the exact mode.
    let unit = format::TIME_UNIT_EXACT_NS;
    let header = Header { version: format::VERSION, time_unit_ns: unit, ..tables.header.clone() };
    assert_eq!(p.header, header);
    assert_eq!(p.modules, tables.modules, "modules, with their build ids");
    assert_eq!(p.stacks, tables.stacks);
    assert_eq!(p.symbols, tables.symbols);
    // Every event, in order, at the resolution of the file.
    let written = as_written(&events, unit);
    let (_, read) = events_of("small-v4.mprof");
    assert_eq!(read, written);
    let want = with_header(tables, header).with_events(&written);
    assert_same_aggregates(&p, &want, "small-v4.mprof");
    // The previous writers' files (version 3; version 2, no labels) read back the same
    // events, in the same unit, their frees without a lifetime of their own.
    for (name, version) in [("small-v3.mprof", 3), ("small-v2.mprof", 2)] {
        let (old, read) = events_of(name);
        assert_eq!(old.header.version, version);
        assert_eq!(old.header.time_unit_ns, unit, "{name}");
        assert_eq!(old.header.lifetime_unit_ns(), unit, "{name}");
        assert_eq!(read, before_v4(&written), "{name}");
        assert_eq!(old.stacks, p.stacks);
    }
    assert_eq!(p.header.lifetime_unit_ns(), format::LIFETIME_UNIT_NS);
    // At the file's time unit (≈ 1 ms) the frees 500 ns after their samples read back
    // with a lifetime of 0.
    let mut sites = expected(true);
    sites.iter_mut().flat_map(|s| &mut s.lifetimes).for_each(|l| l.0 = 0);
    assert_eq!(report::site_totals(&p), sites);
    // The blocks of a longer run read back the same.
    let q = Profile::read_from(&small_in_blocks()[..]).unwrap();
    assert!(q.complete && q.warnings.is_empty(), "{:?}", q.warnings);
    assert_same_aggregates(&q, &want, "small profile in blocks");
}

/// Reads a golden file written by an older memprof (format version 1, which kept times in
/// nanoseconds and block addresses) and checks that it reads as the three sites do now
/// (events, stacks, aggregates, totals; modules by path, in order).
fn older_fixture_reads(name: &str) -> Profile {
    let p = Profile::read_file(fixtures().join(name)).unwrap();
    let (tables, events) = three_sites_recording(true);
    assert!(p.complete && p.warnings.is_empty(), "{name}: {:?}", p.warnings);
    assert_eq!(p.header.version, 1, "{name}");
    let paths = |p: &Profile| p.modules.iter().map(|m| m.path.clone()).collect::<Vec<_>>();
    assert_eq!(paths(&p), paths(&tables));
    let (_, read) = events_of(name);
    assert_eq!(read, events, "{name}: every event, exactly");
    assert_eq!(p.stacks, tables.stacks);
    let want = with_header(tables, p.header.clone()).with_events(&events);
    assert_same_aggregates(&p, &want, name);
    assert_eq!(report::site_totals(&p), expected(true));
    p
}

/// The golden file of version 1, with everything a module record carries now.
#[test]
fn version_1_fixture_still_reads() {
    let p = older_fixture_reads("small.mprof");
    let want = three_sites(true);
    assert_eq!(p.header, Header { version: 1, time_unit_ns: 1, ..want.header });
    assert_eq!(p.modules, want.modules, "modules, with their build ids");
    assert_eq!(p.symbols, want.symbols);
}

/// A file written before module records carried build ids (the field is appended to
/// the record: §2 of the format) reads the same, with no build ids.
#[test]
fn fixture_without_build_ids_still_reads() {
    let p = older_fixture_reads("small-before-build-ids.mprof");
    assert!(p.modules.iter().all(|m| m.build_id.is_empty()));
}

/// The golden file as written before modules carried their file's size and time (for
/// objects without a build id): it reads the same, with those left at 0 (unknown).
#[test]
fn fixture_without_file_identity_still_reads() {
    let p = older_fixture_reads("small-before-file-identity.mprof");
    assert!(p.modules.iter().all(|m| m.file_size == 0 && m.file_mtime_ns == 0));
    let old = |m: &Module| (m.path.clone(), m.base, m.start, m.end, m.build_id.clone());
    let want: Vec<_> = three_sites(true).modules.iter().map(old).collect();
    assert_eq!(p.modules.iter().map(old).collect::<Vec<_>>(), want);
}

/// A cut file (version 2, cut inside a block; version 1, cut inside a record) reads
/// back the events before the cut, exactly, and says it was cut.
#[test]
fn truncated_fixture_reads_the_prefix() {
    let (tables, events) = three_sites_recording(true);
    for (name, full) in [
        ("small-v2-truncated.mprof", before_v4(&as_written(&events, format::TIME_UNIT_EXACT_NS))),
        ("small-v3-truncated.mprof", before_v4(&as_written(&events, format::TIME_UNIT_EXACT_NS))),
        ("small-v4-truncated.mprof", as_written(&events, format::TIME_UNIT_EXACT_NS)),
        // Version 1 kept times in nanoseconds, and the blocks' addresses.
        ("small-truncated.mprof", events.clone()),
    ] {
        let path = fixtures().join(name);
        let p = Profile::read_file(&path).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(!p.complete, "{name}");
        assert!(
            p.warnings.iter().any(|w| w.contains(&format!("cut at byte {len}"))),
            "{name}: {:?}",
            p.warnings
        );
        let (read_tables, read) = events_of(name);
        assert!(!read_tables.complete, "{name}");
        let samples = |e: &[Event]| e.iter().filter(|e| matches!(e, Event::Sample(_))).count();
        assert!(samples(&read) > 0 && samples(&read) < samples(&full), "{name}: {read:?}");
        assert_eq!(read[..], full[..read.len()], "{name}: the events before the cut");
        let want = with_header(tables.clone(), p.header.clone()).with_events(&read);
        assert_same_aggregates(&p, &want, name);
        // Reports still work on a cut profile and say so.
        let text = report::top_table(&p, &TopOptions::default());
        assert!(text.contains("INCOMPLETE") && text.contains("may have crashed"), "{text}");
    }
}

#[test]
fn missing_file_is_an_io_error() {
    let e = Profile::read_file(fixtures().join("no-such-file.mprof")).unwrap_err();
    assert!(matches!(e, memprof::Error::Io(..)), "{e}");
}
