//! Interval 1: every allocation is a sample with k = size, so the reports are the truth.
use super::*;

const SIZES_A: [usize; 3] = [100, 1000, 10_000];

#[inline(never)]
fn site_a(i: usize) -> Vec<u8> {
    Vec::with_capacity(SIZES_A[i % 3])
}

#[inline(never)]
fn site_b(i: usize) -> Box<[u64; 16]> {
    Box::new([i as u64; 16])
}

#[inline(never)]
fn site_c(i: usize) -> Vec<u32> {
    // alloc_zeroed for even i, alloc + fill for odd i; 4 × (250..257) bytes.
    vec![(i % 2) as u32; 250 + i % 7]
}

/// True totals of one site: allocated and still-held bytes and objects.
#[derive(Default, Debug)]
struct Truth {
    bytes: u64,
    objects: u64,
    live_bytes: u64,
    live_objects: u64,
}

impl Truth {
    fn alloc(&mut self, bytes: usize, kept: bool) {
        self.bytes += bytes as u64;
        self.objects += 1;
        if kept {
            self.live_bytes += bytes as u64;
            self.live_objects += 1;
        }
    }

    fn check(&self, profile: &Profile, name: &str) {
        let s = site(profile, name);
        assert_eq!(s.alloc_bytes, self.bytes as f64, "{name}: allocated bytes ({s:?})");
        assert_eq!(s.alloc_objects, self.objects as f64, "{name}: allocated objects");
        assert_eq!(s.live_bytes, self.live_bytes as f64, "{name}: live bytes");
        assert_eq!(s.live_objects, self.live_objects as f64, "{name}: live objects");
    }
}

#[test]
fn totals_are_exact() {
    let _g = serial();
    const N: usize = 300;
    // Containers for the kept blocks are allocated here, outside the sites.
    let mut kept_a: Vec<Vec<u8>> = Vec::with_capacity(N);
    let mut kept_b: Vec<Box<[u64; 16]>> = Vec::with_capacity(N);
    let mut kept_c: Vec<Vec<u32>> = Vec::with_capacity(N);
    let (mut ta, mut tb, mut tc) = (Truth::default(), Truth::default(), Truth::default());
    let profile = record(Config { seed: Some(1), ..Config::exact() }, || {
        for i in 0..N {
            let a = site_a(i);
            let keep = i % 3 != 1;
            ta.alloc(a.capacity(), keep);
            if keep {
                kept_a.push(a);
            }
            let b = site_b(i);
            let keep = i % 5 == 0;
            tb.alloc(std::mem::size_of::<[u64; 16]>(), keep);
            if keep {
                kept_b.push(b);
            } else {
                drop(black_box(b));
            }
            let c = site_c(i);
            let keep = i % 2 == 0;
            tc.alloc(c.capacity() * 4, keep);
            if keep {
                kept_c.push(c);
            }
        }
    });
    drop((kept_a, kept_b, kept_c));
    assert_eq!(profile.lost, Default::default(), "nothing may be lost in this test");
    assert_eq!(profile.header.interval, 1.0);
    ta.check(&profile, "engine::exact::site_a");
    tb.check(&profile, "engine::exact::site_b");
    tc.check(&profile, "engine::exact::site_c");
    // Exact mode: k is the size of every sample.
    assert!(
        profile.allocated.iter().all(|(&(_, size), t)| t.k == t.samples * size),
        "k == size in exact mode"
    );
    assert!(profile.complete);
}

#[inline(never)]
fn kept_site() -> Vec<u8> {
    Vec::with_capacity(5555)
}

/// Frees that do not fit in a full queue are replayed, not lost: blocks allocated one
/// at a time (each drained at once, through a queue of 4 events) and then freed all
/// together (all but 4 frees refused) are all dead in the profile, which counts the
/// refused frees as lost and replayed. A free lost for good would leave its block live
/// for ever (as every refused free did before the queue kept them).
#[test]
fn frees_refused_by_a_full_queue_are_replayed() {
    let _g = serial();
    const N: usize = 300;
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(N);
    let config = Config { queue_capacity: 4, ..Config::exact() };
    let profile = record(config, || {
        for _ in 0..N {
            kept.push(kept_site());
            memprof::poll();
        }
        kept.clear();
        memprof::poll();
    });
    let size = |s: u64| -> (u64, u64) {
        let sum = |m: &HashMap<(StackId, u64), Totals, _>| {
            m.iter().filter(|((_, z), _)| *z == s).map(|(_, t)| t.samples).sum::<u64>()
        };
        (sum(&profile.allocated), sum(&profile.live))
    };
    // Other tests' threads allocate too (every thread is sampled) and may take a slot
    // one of these allocations needed: that sample is lost, and so is not live.
    let (allocated, live) = size(5555);
    assert!(allocated >= N as u64 / 2 && allocated <= N as u64, "{allocated}");
    assert_eq!(live, 0, "no phantom live blocks: {:?}", profile.lost);
    let l = profile.lost;
    assert!(l.frees_replayed + 4 >= allocated, "{l:?}");
    assert!(l.events >= l.frees_replayed && l.frees_unknown == 0, "{l:?}");
}
