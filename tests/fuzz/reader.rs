//! The `.mprof` reader, fuzzed: property-based (proptest, on stable Rust, inside `cargo
//! test`, with shrinking to a minimal input when a case fails), seeded with real
//! recordings — the committed version-1, version-2 and version-3 fixtures (whole and cut
//! short) and a multi-block version-3 recording with span labels, GC cycles and appended
//! symbols written here — and mutated two ways:
//!
//! - **bytes**: bit flips, overwritten and inserted bytes, truncation, a slice duplicated
//!   elsewhere (exercises the framing, the CRCs, the header, the cut-file paths);
//! - **inside blocks**: a block is decompressed, its records are mutated the same way, and
//!   it is compressed again with a valid CRC, so that mutations reach the inner decoder
//!   (pairs, stacks, deltas, appendix rules, the aggregates) instead of stopping at the
//!   checksum. A coverage-guided fuzzer (cargo-fuzz, AFL) would need nightly or an external
//!   toolchain; this one runs wherever the tests run.
//!
//! The property: reading never panics and never hangs, whatever the input, in the reader,
//! the aggregates, or the reports built from them. Cases per run: `PROPTEST_CASES` (512 by
//! default: a few seconds). Every input that ever failed is kept in `fixtures/fuzz/` and
//! read by [`regressions_read_without_panicking`].

use crate::mutation::{apply, mutation_of, Mutation};
use memprof::profile::format::{self, Event};
use memprof::profile::{Free, GcCycle, Module, Profile, Sample, Stack, Symbol};
use proptest::prelude::*;
use std::path::Path;

use crate::common::{fixtures, proptest_cases};

/// A version-3 recording with span labels, several blocks, GC cycles, frees and moves, and
/// a block of symbols appended after its end record.
fn multi_block() -> Vec<u8> {
    let mut meta = Profile::default();
    meta.header.interval = 512.0;
    meta.modules.push(Module {
        path: "/bin/prog".into(),
        base: 0x1000,
        start: 0x1000,
        end: 0x9000,
        build_id: vec![7; 20],
        ..Default::default()
    });
    // Two span labels (version 3), so that mutations reach the label records too.
    meta.labels = vec!["server".into(), "server;handle{endpoint=/upload}".into()];
    for i in 0..6u64 {
        let frames = vec![0x1100 + i, 0x1200, 0x1300 + i * 3];
        meta.stacks.push(Stack { frames, truncated: i == 5, label: (i % 3) as u32 });
    }
    let mut w = format::Writer::new(Vec::new(), &meta.header).unwrap();
    for m in &meta.modules {
        w.write_module(m).unwrap();
    }
    for (i, l) in meta.labels.iter().enumerate() {
        w.write_label(i as u32 + 1, l).unwrap();
    }
    for (i, s) in meta.stacks.iter().enumerate() {
        w.write_stack(i as u32, s).unwrap();
    }
    let mut samples = Vec::new();
    for i in 0..400u64 {
        let s = Sample {
            id: i + 1,
            stack: (i % 6) as u32,
            time_ns: i * 70_000,
            thread: 1 + (i % 3) as u32,
            addr: 0,
            size: 8 + (i % 5) * 24,
            k: 1 + i % 3,
        };
        w.write_sample(&s).unwrap();
        samples.push(s);
        if i % 3 == 1 {
            w.write_free(&Free::of(&samples[(i / 2) as usize], i * 70_000 + 10)).unwrap();
        }
        if i % 50 == 49 {
            let c = GcCycle {
                cycle: i / 50,
                start_ns: i * 70_000,
                end_ns: i * 70_000 + 5,
                ..Default::default()
            };
            w.write_gc_cycle(&c).unwrap();
            w.flush().unwrap();
        }
    }
    let mut bytes = w.finish().unwrap();
    let sym = vec![Symbol { function: "site".into(), file: Some("a.c".into()), line: Some(3) }];
    let mut w = format::Writer::new(Vec::new(), &meta.header).unwrap();
    let header_len = w.get_ref().len();
    w.write_symbols(0x1100, &sym).unwrap();
    w.flush().unwrap();
    bytes.extend_from_slice(&w.get_ref()[header_len..]);
    bytes
}

fn seeds() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = ["small.mprof", "small-v2.mprof", "small-truncated.mprof"]
        .iter()
        .map(|n| std::fs::read(fixtures().join(n)).unwrap())
        .collect();
    v.push(multi_block());
    // The committed version-3 recordings (a real run's, and the same cut short) and the cut
    // version-2 one: the cut-file paths of each version.
    for n in ["small-v3.mprof", "small-v3-truncated.mprof", "small-v2-truncated.mprof"] {
        v.push(std::fs::read(fixtures().join(n)).unwrap());
    }
    v
}

fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let x = *b.get(*at)?;
        *at += 1;
        v |= u64::from(x & 0x7f) << (7 * i);
        if x & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// The outer records of a stream after its magic: (start, tag, payload range, end).
fn records(b: &[u8]) -> Vec<(usize, u8, std::ops::Range<usize>, usize)> {
    let mut out = Vec::new();
    let mut at = 8;
    while at < b.len() {
        let start = at;
        let tag = b[at];
        at += 1;
        let Some(len) = varint(b, &mut at) else { break };
        let end = at + len as usize + 4;
        if end > b.len() {
            break;
        }
        out.push((start, tag, at..at + len as usize, end));
        at = end;
    }
    out
}

fn mutation() -> impl Strategy<Value = Mutation> {
    mutation_of(any::<u8>().boxed())
}

/// Mutates the records inside the `which`-th block of a version-2 stream, then compresses
/// the block again and frames it with a valid CRC.
fn mutate_inside(b: &[u8], which: usize, ms: &[Mutation]) -> Vec<u8> {
    let blocks: Vec<_> = records(b).into_iter().filter(|r| r.1 == 10).collect();
    if blocks.is_empty() {
        return b.to_vec();
    }
    let (start, _, payload, end) = blocks[which % blocks.len()].clone();
    let p = &b[payload];
    let mut at = 0;
    let (Some(_codec), Some(raw_len)) = (varint(p, &mut at), varint(p, &mut at)) else {
        return b.to_vec();
    };
    let Ok(mut raw) = zstd::bulk::decompress(&p[at..], raw_len as usize) else {
        return b.to_vec();
    };
    for m in ms {
        apply(&mut raw, m);
    }
    let packed = zstd::bulk::compress(&raw, 1).unwrap();
    let mut payload = Vec::new();
    put_varint(&mut payload, 1);
    put_varint(&mut payload, raw.len() as u64);
    payload.extend_from_slice(&packed);
    let mut rec = vec![10u8];
    put_varint(&mut rec, payload.len() as u64);
    rec.extend_from_slice(&payload);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[10]);
    crc.update(&payload);
    rec.extend_from_slice(&crc.finalize().to_le_bytes());
    let mut out = b[..start].to_vec();
    out.extend_from_slice(&rec);
    out.extend_from_slice(&b[end..]);
    out
}

/// [`read_everything`]; an input that panics is saved (in the target directory's
/// `fuzz-failures/`, named by its hash) to become a regression file in `fixtures/fuzz/`,
/// and the case fails.
fn check(bytes: &[u8]) {
    if std::panic::catch_unwind(|| read_everything(bytes)).is_err() {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
        let _ = std::fs::create_dir_all(&dir);
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let path = dir.join(format!("{hash:016x}.mprof"));
        let _ = std::fs::write(&path, bytes);
        panic!(
            "reading this input panicked; saved as {} (add it to fixtures/fuzz/)",
            path.display()
        );
    }
}

/// Reads `bytes` the ways the tools do; any panic fails the case.
fn read_everything(bytes: &[u8]) {
    if let Ok(p) = Profile::read_from(bytes) {
        // The reports read the aggregates: they must cope with whatever came through.
        let _ = memprof::report::top_table(&p, &Default::default());
        for view in
            [memprof::report::View::Alloc, memprof::report::View::Live, memprof::report::View::Gc]
        {
            let _ = memprof::report::collapsed(&p, view);
        }
        let _ = memprof::report::pprof(&p, &Default::default());
        let _ = memprof::profile::merge::merge(vec![p.clone(), p], &[]);
    }
    if let Ok((_, events)) = format::read_events(bytes) {
        let _ = Profile::default()
            .with_events(events.iter().filter(|e| !matches!(e, Event::GcCycle(_))));
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: proptest_cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn byte_mutations_never_panic(seed in 0usize..7, ms in proptest::collection::vec(mutation(), 1..6)) {
        let mut b = seeds()[seed].clone();
        for m in &ms {
            apply(&mut b, m);
        }
        check(&b);
    }

    #[test]
    fn mutations_inside_blocks_never_panic(
        which in any::<usize>(),
        ms in proptest::collection::vec(mutation(), 1..6),
    ) {
        let seeds = seeds();
        for seed in [&seeds[1], &seeds[3], &seeds[4]] {
            let b = mutate_inside(seed, which, &ms);
            check(&b);
        }
    }
}

/// Every input that ever broke the reader (kept in `fixtures/fuzz/`) reads without panic.
#[test]
fn regressions_read_without_panicking() {
    let dir = fixtures().join("fuzz");
    let Ok(entries) = std::fs::read_dir(&dir) else { return };
    for e in entries.flatten() {
        let bytes = std::fs::read(e.path()).unwrap();
        read_everything(&bytes);
    }
}
