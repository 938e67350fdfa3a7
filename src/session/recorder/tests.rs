//! The recorder's tests: frees that name their blocks, frees before their allocations,
//! one key under two module generations, readings before the first sample.

use super::*;
use crate::config::Unwinder;
use crate::profile::ResidentSplit;
use crate::session::tracker::Callstack;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn collector(interval: f64) -> Recorder {
    let facts = ProcessFacts { pid: 7, executable: "/bin/prog".into(), ..Default::default() };
    let mut r = Recorder::new().of_process(facts).folding();
    let info = SessionInfo { interval, depth: 64, unwinder: Unwinder::Auto, start_unix_ns: 1 };
    r.started(&info);
    r
}

fn allocation<'a>(id: u64, frames: &'a [usize], size: usize, k: u64, t: u64) -> Allocation<'a> {
    Allocation {
        id,
        size,
        k,
        estimated_bytes: k as f64,
        thread: 1,
        time_ns: t,
        addr: 0x1000 * id as usize,
        callstack: Callstack { frames, truncated: false },
        label: None,
    }
}

/// What the reports read of a profile, in an order of its own.
fn folded(p: &Profile) -> String {
    fn sorted<K: Ord + Copy + std::fmt::Debug, S>(
        m: &HashMap<K, crate::profile::Totals, S>,
    ) -> String {
        let mut v: Vec<_> = m.iter().filter(|(_, t)| t.samples > 0).collect();
        v.sort_by_key(|(&pair, _)| pair);
        format!("{v:?}")
    }
    format!(
        "{:?}\n{}\n{}\n{} {:?}\n{}\n{}",
        p.counts,
        sorted(&p.allocated),
        sorted(&p.live),
        p.live_bytes,
        p.peak,
        sorted(&p.lifetimes.short),
        sorted(&p.lifetimes.histogram),
    )
}

/// The collector's way (a free names its block: stack key, size, points, allocation
/// time) folds what the token's way folds, event for event: 30,000 random allocations
/// and frees over 60 stacks, many of which share their 16 innermost frames (an
/// interpreter's), exact and sampled.
#[test]
fn frees_that_name_their_block_fold_as_tokens_do() {
    for interval in [1.0, 512.0] {
        let mut rng = SmallRng::seed_from_u64(26);
        let shared: Vec<usize> = (0..16).map(|i| 0x40_0000 + i * 0x10).collect();
        let stacks: Vec<Vec<usize>> = (0..60)
            .map(|s| {
                let mut f = if s % 2 == 0 { shared.clone() } else { vec![0x50_0000 + s] };
                let more = rng.random_range(1..30);
                f.extend((0..more).map(|j| 0x60_0000 + s * 0x1000 + j * 8));
                f
            })
            .collect();
        let (mut keyed, mut tokens) = (collector(interval), collector(interval));
        let mut live: Vec<(u64, usize, usize, u64, u64, Held)> = Vec::new();
        let mut t = 0u64;
        for id in 1..=30_000u64 {
            t += rng.random_range(0..50_000);
            if live.is_empty() || rng.random_bool(0.55) {
                let s = rng.random_range(0..stacks.len());
                let size = [16usize, 24, 100, 4096][rng.random_range(0..4)];
                let k = if interval == 1.0 { size as u64 } else { rng.random_range(1..4) };
                let a = allocation(id, &stacks[s], size, k, t);
                keyed.collected_alloc(&a);
                let held = tokens.alloc(&a).unwrap();
                live.push((id, s, size, k, t, held));
            } else {
                let i = rng.random_range(0..live.len());
                let (bid, s, size, k, at, held) = live.swap_remove(i);
                let (size, alloc_ns) = (size as u64, at);
                let b = Named { id: bid, key: key(&stacks[s], false), size, k, alloc_ns };
                assert!(keyed.collected_free(&b, t), "free {bid}");
                tokens.dealloc(held, &Deallocation { id: bid, thread: 0, time_ns: t });
            }
        }
        assert_eq!(folded(keyed.profile()), folded(tokens.profile()), "interval {interval}");
        assert_eq!(keyed.profile().counts.orphans, 0);
    }
}

/// A free read before its block's allocation (the queue kept it aside) finds nothing
/// live and changes nothing; once the allocation is in, it ends the block. A free that
/// names no stack ever seen is refused too.
#[test]
fn a_free_before_its_allocation_waits() {
    let mut r = collector(1.0);
    let frames = [0x40_1000usize, 0x40_2000];
    let stack = key(&frames, false);
    assert!(!r.collected_free(&Named { id: 1, key: stack, size: 64, k: 64, alloc_ns: 10 }, 20));
    assert!(!r.collected_free(&Named { id: 1, key: stack ^ 1, size: 64, k: 64, alloc_ns: 10 }, 20));
    r.collected_alloc(&allocation(1, &frames, 64, 64, 10));
    assert!(
        !r.collected_free(&Named { id: 1, key: stack, size: 64, k: 64, alloc_ns: 11 }, 20),
        "another allocation time"
    );
    assert!(
        !r.collected_free(&Named { id: 1, key: stack, size: 32, k: 32, alloc_ns: 10 }, 20),
        "another size"
    );
    assert_eq!(r.profile().counts.frees, 0);
    assert!(r.collected_free(&Named { id: 1, key: stack, size: 64, k: 64, alloc_ns: 10 }, 20));
    assert!(
        !r.collected_free(&Named { id: 1, key: stack, size: 64, k: 64, alloc_ns: 10 }, 20),
        "ended once"
    );
    assert_eq!((r.profile().counts.frees, r.profile().counts.orphans), (1, 0));
}

/// The same raw frames in two module generations (a library closed, another mapped
/// where it was) are two stacks under one key: each free ends the block of its own.
#[test]
fn one_key_two_generations() {
    let module = |path: &str, id: u8| Module {
        path: path.into(),
        base: 0x7f00_0000_0000,
        start: 0x7f00_0000_0000,
        end: 0x7f00_0000_4000,
        build_id: vec![id; 20],
        file_size: 0,
        file_mtime_ns: 0,
    };
    let mut r = collector(1.0);
    let frames = [0x7f00_0000_0123usize];
    r.module_snapshot(vec![module("./libc0.so", 1)]);
    r.collected_alloc(&allocation(1, &frames, 64, 64, 100));
    r.module_closing(1, 5, vec![module("./libc0.so", 1)]);
    r.module_snapshot(vec![]);
    r.module_closed(1, 5);
    r.module_snapshot(vec![module("./liba.so", 2)]);
    r.collected_alloc(&allocation(2, &frames, 64, 64, 200));
    let p = r.profile();
    assert_eq!(p.stacks.len(), 2, "the second library's frames are a stack of their own");
    let stack = key(&frames, false);
    assert!(r.collected_free(&Named { id: 1, key: stack, size: 64, k: 64, alloc_ns: 100 }, 300));
    assert!(r.collected_free(&Named { id: 2, key: stack, size: 64, k: 64, alloc_ns: 200 }, 300));
    let p = r.profile();
    assert_eq!((p.counts.frees, p.counts.orphans), (2, 0));
    assert!(p.live.values().all(|t| t.samples == 0), "both ended: {:?}", p.live);
}

/// A forked child's file is opened at its first sample; the readings of its resident
/// memory taken before that are in the file all the same, as they are in the profile
/// `record` prints from (a reading lost this way showed as `-` in `memprof report`'s
/// table of processes, beside the figure `record` had printed).
#[test]
fn readings_before_the_first_sample_reach_a_deferred_file() {
    let dir = std::env::temp_dir().join(format!("memprof-deferred-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("child.mprof");
    let at = path.clone();
    let facts = ProcessFacts { pid: 9, executable: "/bin/child".into(), ..Default::default() };
    let mut r = Recorder::streaming_deferred(Box::new(move || {
        Ok((at.clone(), File::create(&at).map_err(|e| Error::io("creating", e))?))
    }))
    .offline_symbols()
    .of_process(facts)
    .folding();
    let info = SessionInfo { interval: 1.0, depth: 64, unwinder: Unwinder::Auto, start_unix_ns: 1 };
    r.started(&info);
    let early = Resident { time_ns: 5, bytes: 3 << 20 };
    let split =
        ResidentSplit { time_ns: 6, resident: 3 << 20, allocator: 1 << 20, ..Default::default() };
    r.resident(early);
    r.split(split);
    assert!(!path.exists(), "no file before the first sample");
    r.collected_alloc(&allocation(1, &[0x1000, 0x2000], 100, 100, 10));
    let later = Resident { time_ns: 20, bytes: 4 << 20 };
    r.resident(later);
    r.stopped(&SessionCounters::default());
    let p = Profile::read_file(&path).unwrap();
    assert_eq!(p.resident, [early, later]);
    assert_eq!(p.splits, [split]);
    assert_eq!(p.counts.samples, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
