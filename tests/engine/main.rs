//! The sampling engine, end to end, under its own `Sampled<System>` global allocator: exact
//! totals in the exact mode, confidence intervals with fixed seeds, the tracker contract
//! (tokens, reallocations, reentrancy, panics, lost events, one session at a time, the drain
//! thread), buffers grown by `realloc` (`realloc.rs`),
//! many threads freeing each other's blocks, and stack truncation.
//!
//! Sessions are process-global, so every test that starts one holds [`serial`]. Allocation
//! sites are `#[inline(never)]` functions whose names the reports must find
//! (`engine::<module>::<site>`); the memory they allocate is known exactly, so every check
//! compares memprof's numbers with the truth computed by the test itself.
//!
//! The managed heap's tests (`gc.rs`) share this binary, its allocator and [`serial`].
#![cfg(feature = "report")]

mod gc;
mod realloc;

use std::alloc::System;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;

use memprof::profile::{GcCycle, Profile, Stack, StackId, Totals};
use memprof::report::{site_totals, SiteTotal};
use memprof::{Allocation, Config, Deallocation, Poll, Recorder, SessionInfo, Stats, Tracker};

#[global_allocator]
static GLOBAL: memprof::Sampled<System> = memprof::Sampled::new(System);

#[path = "../common/mod.rs"]
mod common;
use common::serial;

/// Runs `work` under a session with a [`Recorder`] and returns the profile.
fn record(config: Config, work: impl FnOnce()) -> Profile {
    let session = memprof::start(config, Recorder::new()).expect("start");
    work();
    session.stop().expect("stop").into_profile()
}

/// A sample as the engine handed it to the tracker, with the stack the recorder interned
/// for it (profiles keep aggregates, not single samples or block addresses).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    pub(crate) id: u64,
    pub(crate) stack: StackId,
    pub(crate) addr: u64,
    pub(crate) size: u64,
    pub(crate) k: u64,
    pub(crate) thread: u32,
}

/// A [`Recorder`] that also keeps every sample and the sample id of every free, in the
/// order the engine delivered them: for the tests that follow single blocks.
#[derive(Default)]
pub(crate) struct Witness {
    recorder: Recorder,
    samples: Vec<Seen>,
    frees: Vec<u64>,
    /// The recorder's stack ids by stack, for the stacks indexed so far (the recorder
    /// appends new stacks to its profile's table).
    stack_ids: HashMap<Stack, StackId>,
}

/// The recorder's token for a live block (it names the block when it is freed).
type Held = <Recorder as Tracker>::Token;

impl Tracker for Witness {
    type Token = Held;

    fn started(&mut self, info: &SessionInfo) {
        self.recorder.started(info);
    }

    fn alloc(&mut self, a: &Allocation<'_>) -> Option<Held> {
        let token = self.recorder.alloc(a);
        // The recorder has just interned the block's stack (appending it to its table when
        // new) and entered the block in its live totals of its (stack, size) pair.
        let profile = self.recorder.profile();
        for id in self.stack_ids.len()..profile.stacks.len() {
            let again = self.stack_ids.insert(profile.stacks[id].clone(), id as StackId);
            assert_eq!(again, None, "stack {id} interned twice");
        }
        let frames = a.callstack.frames().iter().map(|&f| f as u64).collect();
        let key = Stack { frames, truncated: a.callstack.truncated(), label: 0 };
        let stack = *self.stack_ids.get(&key).expect("stack interned by the recorder");
        let (id, addr, size, k, thread) = (a.id, a.addr as u64, a.size as u64, a.k, a.thread);
        let live = profile.live.get(&(stack, size));
        assert!(live.is_some_and(|t| t.samples > 0 && t.k >= k), "recorded as live: {live:?}");
        self.samples.push(Seen { id, stack, addr, size, k, thread });
        token
    }

    fn dealloc(&mut self, token: Held, d: &Deallocation) {
        self.frees.push(d.id);
        self.recorder.dealloc(token, d);
    }

    fn gc_cycle(&mut self, cycle: &GcCycle) {
        self.recorder.gc_cycle(cycle);
    }

    fn after_poll(&mut self, why: Poll) {
        self.recorder.after_poll(why);
    }

    fn stopped(&mut self, stats: &Stats) {
        self.recorder.stopped(stats);
    }
}

/// What a session with a [`Witness`] saw: the profile, every sample, every freed sample id.
pub(crate) struct Witnessed {
    pub(crate) profile: Profile,
    pub(crate) samples: Vec<Seen>,
    pub(crate) frees: Vec<u64>,
}

impl From<Witness> for Witnessed {
    fn from(w: Witness) -> Self {
        Witnessed { profile: w.recorder.into_profile(), samples: w.samples, frees: w.frees }
    }
}

/// Runs `work` under a session with a [`Witness`].
pub(crate) fn record_witnessed(config: Config, work: impl FnOnce()) -> Witnessed {
    let session = memprof::start(config, Witness::default()).expect("start");
    work();
    session.stop().expect("stop").into()
}

/// Totals per (stack, size) pair of `samples`, as a profile keeps its live blocks.
pub(crate) fn pair_totals<'a>(
    samples: impl IntoIterator<Item = &'a Seen>,
) -> HashMap<(StackId, u64), Totals> {
    let mut totals: HashMap<(StackId, u64), Totals> = HashMap::new();
    for s in samples {
        let t = totals.entry((s.stack, s.size)).or_default();
        t.samples += 1;
        t.k += s.k;
    }
    totals
}

/// The profile's live totals of the (stack, size) pairs whose stack passes `keep`, leaving
/// out the pairs whose blocks were all freed (a profile may keep them with zero totals).
pub(crate) fn live_of(
    profile: &Profile,
    keep: impl Fn(StackId) -> bool,
) -> HashMap<(StackId, u64), Totals> {
    profile
        .live
        .iter()
        .filter(|((stack, _), t)| keep(*stack) && **t != Totals::default())
        .map(|(&p, &t)| (p, t))
        .collect()
}

/// The totals of the site named `name` (all zero when it has no samples).
fn site(profile: &Profile, name: &str) -> SiteTotal {
    site_totals(profile)
        .into_iter()
        .find(|s| s.site == name)
        .unwrap_or_else(|| SiteTotal { site: name.to_owned(), ..SiteTotal::default() })
}

/// Site name of every stack of the profile, by stack id.
fn site_names(profile: &Profile) -> Vec<String> {
    (0..profile.stacks.len() as u32).map(|id| profile.site_name(id)).collect()
}

/// A tiny deterministic generator for workloads (not the sampler's).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

// ---------------------------------------------------------------------------------------------

mod exact {
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
}

// ---------------------------------------------------------------------------------------------

mod statistics {
    //! Sampled mode: per-site estimates within confidence intervals, and determinism.
    //!
    //! # The variance
    //! Every byte is a sample point independently with probability p = 1/R. A site that
    //! allocates n bytes in total has K ~ Binomial(n, p) points, whatever the block sizes, and
    //! its byte estimate K·R has mean n and variance R²·n·p(1−p) = n(R−1) ≈ n·R. A block of s
    //! bytes counts k·R/s objects (mean 1, variance (R−1)/s), so a site's object estimate has
    //! variance Σ (R−1)/sᵢ over its blocks. The bound is 5.7σ, as in OCaml's statmemprof
    //! tests.
    //!
    //! # False-failure probability
    //! With the workload below each site gets ≥ 1000 expected points per interval (≥ 250 per
    //! size class), so the estimates are close to normal, where P(|Z| > 5.7) ≈ 1.2e-8. Without
    //! the normal approximation: each byte check fails with probability 1.3e-8 to 1.7e-8
    //! (exact binomial tails), each object check with at most 4.6e-7 (a Chernoff bound from
    //! the exact binomial moment generating functions; the same bound overstates the byte
    //! tails 15-fold), so all 18 checks together fail with probability < 3e-6. The seeds are
    //! fixed: a given build either always passes or always fails.
    use super::*;
    use memprof::{Allocation, Tracker};

    #[inline(never)]
    fn site_a(size: usize) {
        black_box(Vec::<u8>::with_capacity(size));
        black_box(1); // distinct bodies: release builds would merge identical functions
    }

    #[inline(never)]
    fn site_b(size: usize) {
        black_box(Vec::<u8>::with_capacity(size));
        black_box(2);
    }

    #[inline(never)]
    fn site_c(size: usize) {
        black_box(Vec::<u8>::with_capacity(size));
        black_box(3);
    }

    const SITES: [&str; 3] =
        ["engine::statistics::site_a", "engine::statistics::site_b", "engine::statistics::site_c"];
    /// Bytes allocated per site, in units of 250·R per size class (so 1000·R per unit weight).
    const WEIGHTS: [usize; 3] = [6, 3, 1];

    /// Block sizes at interval R: below, around and above the interval.
    fn classes(r: usize) -> [usize; 4] {
        [r / 16 + 24, r / 2 + 8, 2 * r + 40, 7 * r]
    }

    /// The workload: (site, size) in a shuffled order.
    fn plan(r: usize) -> Vec<(usize, usize)> {
        let mut plan = Vec::new();
        for (site, w) in WEIGHTS.iter().enumerate() {
            for size in classes(r) {
                let count = (w * 250 * r).div_ceil(size);
                plan.extend(std::iter::repeat_n((site, size), count));
            }
        }
        let mut rng = Lcg(r as u64);
        for i in (1..plan.len()).rev() {
            plan.swap(i, rng.next() as usize % (i + 1));
        }
        plan
    }

    fn run(plan: &[(usize, usize)]) {
        for (i, &(site, size)) in plan.iter().enumerate() {
            match site {
                0 => site_a(size),
                1 => site_b(size),
                _ => site_c(size),
            }
            if i % 256 == 0 {
                memprof::poll();
            }
        }
    }

    const SIGMAS: f64 = 5.7;

    #[test]
    fn estimates_are_within_confidence_intervals() {
        let _g = serial();
        for (r, seed) in [(4096usize, 11u64), (65536, 12), (524288, 13)] {
            let plan = plan(r);
            let profile =
                record(Config { seed: Some(seed), ..Config::with_interval(r as f64) }, || {
                    run(&plan)
                });
            assert_eq!(profile.lost, Default::default(), "R={r}: nothing may be lost");
            let rf = r as f64;
            for (i, name) in SITES.iter().enumerate() {
                let (mut bytes, mut objects, mut obj_var) = (0f64, 0f64, 0f64);
                for &(_, size) in plan.iter().filter(|p| p.0 == i) {
                    bytes += size as f64;
                    objects += 1.0;
                    obj_var += (rf - 1.0) / size as f64;
                }
                let s = site(&profile, name);
                let sd = (bytes * (rf - 1.0)).sqrt();
                eprintln!(
                    "R={r} {name}: bytes z = {:+.2}, objects z = {:+.2}",
                    (s.alloc_bytes - bytes) / sd,
                    (s.alloc_objects - objects) / obj_var.sqrt()
                );
                assert!(
                    (s.alloc_bytes - bytes).abs() <= SIGMAS * sd,
                    "R={r} {name}: estimated {} bytes, true {bytes}, {SIGMAS}σ = {}",
                    s.alloc_bytes,
                    SIGMAS * sd
                );
                let sd = obj_var.sqrt();
                assert!(
                    (s.alloc_objects - objects).abs() <= SIGMAS * sd,
                    "R={r} {name}: estimated {} objects, true {objects}, {SIGMAS}σ = {}",
                    s.alloc_objects,
                    SIGMAS * sd
                );
                // Nothing is held at the end.
                assert_eq!(s.live_bytes, 0.0, "R={r} {name}: live bytes");
            }
        }
    }

    /// Records (size, k) of the test's own sampled blocks and the thread number.
    #[derive(Default)]
    struct Points {
        sizes: std::ops::Range<usize>,
        seen: Vec<(usize, u64)>,
        threads: Vec<u32>,
    }

    impl Tracker for Points {
        type Token = ();

        fn alloc(&mut self, a: &Allocation<'_>) -> Option<()> {
            if self.sizes.contains(&a.size) {
                self.seen.push((a.size, a.k));
                self.threads.push(a.thread);
            }
            None
        }
    }

    #[inline(never)]
    fn det_site(size: usize) -> Vec<u8> {
        Vec::with_capacity(size)
    }

    /// One run of a fixed allocation sequence; no polling, so nothing but the sequence
    /// advances this thread's countdown between `start` and `stop`.
    fn points(seed: u64) -> (Vec<(usize, u64)>, Vec<u32>) {
        let sizes = 10_000..100_000;
        let mut keep = Vec::with_capacity(2000);
        let session = memprof::start(
            Config { seed: Some(seed), ..Config::with_interval(64.0 * 1024.0) },
            Points { sizes: sizes.clone(), ..Points::default() },
        )
        .unwrap();
        let mut rng = Lcg(99);
        for i in 0..2000 {
            let v = det_site(sizes.start + rng.next() as usize % (sizes.end - sizes.start));
            if i % 2 == 0 {
                keep.push(v);
            }
        }
        let t = session.stop().unwrap();
        drop(keep);
        (t.seen, t.threads)
    }

    /// A fixed seed gives the same samples (same blocks, same k) on every run; another
    /// seed gives others.
    #[test]
    fn fixed_seed_is_deterministic() {
        let _g = serial();
        // The seed of a thread's generator mixes the session seed with the thread's number
        // in the session, which is the order of first allocation: a harness thread that
        // allocates first shifts it. Retry until both runs see the same thread number.
        for attempt in 0..5 {
            let (a, ta) = points(42);
            let (b, tb) = points(42);
            let thread = |t: &[u32]| {
                assert!(t.windows(2).all(|w| w[0] == w[1]), "one thread: {t:?}");
                t.first().copied()
            };
            if thread(&ta) != thread(&tb) {
                eprintln!("attempt {attempt}: thread numbers {:?} vs {:?}", ta[0], tb[0]);
                continue;
            }
            // 2000 blocks of 10–100 kB at 64 KiB: ~1700 samples expected.
            assert!(a.len() > 1000, "{} samples", a.len());
            assert_eq!(a, b, "same seed, same samples");
            let (c, _) = points(43);
            assert_ne!(a, c, "another seed, other samples");
            return;
        }
        panic!("the test thread never got the same thread number twice");
    }
}

// ---------------------------------------------------------------------------------------------

mod external_countdown {
    //! An allocator that keeps the thread's countdown itself (`sampler::Countdown`, as the
    //! preload library does in initial-exec TLS) samples exactly like `Sampled<A>`: a zeroed
    //! countdown draws at its first allocation, a countdown of a stopped session is redrawn
    //! by the next one, and the estimates are the truth in exact mode and within their
    //! confidence interval otherwise.
    use super::*;
    use memprof::__private::{on_alloc_in, on_dealloc};
    use memprof::__private::{Countdown, EPOCH};
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::atomic::Ordering;

    /// Allocates `n` blocks of `size` bytes straight from `System` (never through the global
    /// allocator) and reports them through `cd`; frees every block whose index `free`
    /// accepts, reporting the death first. The others stay allocated (and live) until the
    /// process ends; `kept` has room for them (it is allocated by the caller, elsewhere).
    #[inline(never)]
    fn site_ext(
        cd: &Countdown,
        n: usize,
        size: usize,
        free: impl Fn(usize) -> bool,
        kept: &mut Vec<*mut u8>,
    ) {
        let layout = Layout::from_size_align(size, 16).unwrap();
        for i in 0..n {
            // SAFETY: the layout has a non-zero size.
            let p = unsafe { System.alloc(layout) };
            assert!(!p.is_null());
            on_alloc_in(cd, p, size);
            if free(i) {
                on_dealloc(p);
                // SAFETY: allocated above with this layout.
                unsafe { System.dealloc(p, layout) };
            } else {
                assert!(kept.len() < kept.capacity());
                kept.push(p);
            }
        }
    }

    const SITE: &str = "engine::external_countdown::site_ext";

    #[test]
    fn exact_then_sampled_through_one_countdown() {
        let _g = serial();
        let cd = Countdown::new();
        let mut kept = Vec::with_capacity(300);
        // Exact mode: a zeroed countdown samples from its first byte.
        let profile = record(Config { seed: Some(3), ..Config::exact() }, || {
            site_ext(&cd, 300, 48, |i| i % 3 == 0, &mut kept);
        });
        let s = site(&profile, SITE);
        assert_eq!(s.alloc_bytes, 300.0 * 48.0, "{s:?}");
        assert_eq!(s.alloc_objects, 300.0);
        assert_eq!(s.live_objects, 200.0);
        assert_eq!(s.live_bytes, 200.0 * 48.0);

        // No session: the stale countdown takes the slow path once, is parked at u64::MAX,
        // and the other nine allocations take the fast path.
        site_ext(&cd, 10, 48, |_| true, &mut kept);
        assert_eq!(cd.countdown.get(), u64::MAX - 9 * 48);
        assert_eq!(cd.epoch.get(), EPOCH.load(Ordering::Relaxed));

        // Interval 64: n = 20 000 blocks of 32 bytes, 640 000 bytes. The byte estimate K·R
        // has variance n_bytes·(R−1) (see `statistics`), sd ≈ 6 350 here; with ≈ 10 000
        // expected points it is close to normal, and the 5.7σ bound fails with probability
        // ≈ 1.2e-8 (the seed is fixed, so a build always passes or always fails).
        let r = 64.0;
        let bytes = 20_000.0 * 32.0;
        let profile = record(Config { seed: Some(4), ..Config::with_interval(r) }, || {
            site_ext(&cd, 20_000, 32, |_| true, &mut kept);
        });
        assert_eq!(cd.epoch.get(), EPOCH.load(Ordering::Relaxed) - 1, "the session ended");
        let s = site(&profile, SITE);
        let sd = (bytes * (r - 1.0)).sqrt();
        assert!(
            (s.alloc_bytes - bytes).abs() < 5.7 * sd,
            "{} vs {bytes} ± {}",
            s.alloc_bytes,
            5.7 * sd
        );
        assert_eq!(s.live_bytes, 0.0, "every block was freed");
    }

    /// `hits` of `n` sessions sampled a 37-byte block at interval 64: within 5.7 σ of
    /// Binomial(n, q), q = 1 − (63/64)^37 (see the tests below for the false-failure rate).
    fn assert_binomial_37(hits: u64, n: u64) {
        let q = 1.0 - (63.0f64 / 64.0).powi(37);
        let (mean, sd) = (n as f64 * q, (n as f64 * q * (1.0 - q)).sqrt());
        assert!(
            (hits as f64 - mean).abs() < 5.7 * sd,
            "sampled in {hits} of {n} sessions; expected {mean:.1} ± {:.1}",
            5.7 * sd
        );
    }

    /// A countdown set to 0 in the current session (what the preload library writes when
    /// its session starts, after its own start-up allocations drew one) makes the thread
    /// draw a fresh gap, not sample its next allocation whatever its size. At interval 64 a
    /// 37-byte block holds a point with probability q = 1 − (63/64)^37 ≈ 0.442: over 400
    /// sessions the count is Binomial(400, q), mean 176.6, σ 9.9, checked at ± 5.7 σ (false
    /// failure ≈ 1e-8 from the exact binomial tails; fixed seeds, so a build always passes
    /// or always fails). A countdown taken as "the point is here" samples it 400 times.
    #[test]
    fn a_zeroed_countdown_draws_afresh_in_its_session() {
        let _g = serial();
        let cd = Countdown::new();
        let layout = Layout::from_size_align(37, 16).unwrap();
        let n = 400u64;
        let mut hits = 0u64;
        for seed in 1..=n {
            // SAFETY: the layout has a non-zero size.
            let p = unsafe { System.alloc(layout) };
            assert!(!p.is_null());
            let w = record_witnessed(
                Config { seed: Some(seed), ..Config::with_interval(64.0) },
                || {
                    // A draw of this session, as the start-up's allocations leave it, then the
                    // reset.
                    on_alloc_in(&cd, core::ptr::null_mut(), 0);
                    cd.epoch.set(EPOCH.load(Ordering::Relaxed));
                    cd.countdown.set(0);
                    on_alloc_in(&cd, p, 37);
                    on_dealloc(p);
                },
            );
            // SAFETY: allocated above with this layout.
            unsafe { System.dealloc(p, layout) };
            hits += u64::from(w.samples.iter().any(|s| s.addr == p as u64 && s.size == 37));
        }
        assert_binomial_37(hits, n);
    }

    /// The same through `Sampled<System>`: a thread started in a session samples its first
    /// allocation (37 bytes) with probability q, as any later one (same bound and false-
    /// failure rate as above).
    #[test]
    fn a_new_threads_first_allocation_is_an_ordinary_draw() {
        let _g = serial();
        let n = 400u64;
        let mut hits = 0u64;
        for seed in 1..=n {
            let mut addr = 0u64;
            let w = record_witnessed(
                Config { seed: Some(seed), ..Config::with_interval(64.0) },
                || {
                    addr = std::thread::spawn(|| {
                        let v = black_box(Vec::<u8>::with_capacity(37));
                        v.as_ptr() as u64
                    })
                    .join()
                    .unwrap();
                },
            );
            hits += u64::from(w.samples.iter().any(|s| s.addr == addr && s.size == 37));
        }
        assert_binomial_37(hits, n);
    }
}

mod callbacks {
    //! The tracker contract: tokens, reallocations, reentrancy, panics, lost events, one session at a
    //! time, the drain thread.
    use super::*;
    use memprof::{Allocation, Deallocation, Error, Stats, Tracker};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Ev {
        Alloc { id: u64, addr: usize, size: usize, k: u64 },
        Dealloc { id: u64, token: Token },
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Token {
        id: u64,
        addr: usize,
        size: usize,
    }

    /// Logs every callback. Optionally allocates inside callbacks, panics on a size, counts
    /// allocations of a size into a shared counter.
    #[derive(Default)]
    struct Log {
        events: Vec<Ev>,
        stopped: Option<Stats>,
        allocate_in_callbacks: bool,
        panic_on_size: Option<usize>,
        count_size: Option<(usize, Arc<AtomicUsize>)>,
    }

    const CALLBACK_ALLOC: usize = 54_321;

    impl Tracker for Log {
        type Token = Token;

        fn alloc(&mut self, a: &Allocation<'_>) -> Option<Token> {
            if self.allocate_in_callbacks {
                black_box(Vec::<u8>::with_capacity(CALLBACK_ALLOC));
            }
            if self.panic_on_size == Some(a.size) {
                panic!("tracker panics on purpose (size {})", a.size);
            }
            if let Some((size, n)) = &self.count_size {
                if a.size == *size {
                    n.fetch_add(1, Ordering::SeqCst);
                }
            }
            self.events.push(Ev::Alloc { id: a.id, addr: a.addr, size: a.size, k: a.k });
            Some(Token { id: a.id, addr: a.addr, size: a.size })
        }

        fn dealloc(&mut self, token: Token, d: &Deallocation) {
            if self.allocate_in_callbacks {
                black_box(Vec::<u8>::with_capacity(CALLBACK_ALLOC));
            }
            self.events.push(Ev::Dealloc { id: d.id, token });
        }

        fn stopped(&mut self, stats: &Stats) {
            self.stopped = Some(*stats);
        }
    }

    impl Log {
        /// Alloc events of blocks of `size` bytes at `addr`.
        fn allocs_of(&self, addr: usize, size: usize) -> Vec<u64> {
            self.events
                .iter()
                .filter_map(|e| match e {
                    Ev::Alloc { id, addr: a, size: s, .. } if *a == addr && *s == size => Some(*id),
                    _ => None,
                })
                .collect()
        }

        fn deallocs_of(&self, id: u64) -> Vec<&Token> {
            self.events
                .iter()
                .filter_map(|e| match e {
                    Ev::Dealloc { id: i, token } if *i == id => Some(token),
                    _ => None,
                })
                .collect()
        }

        /// Every dealloc carries the token of its own sample.
        fn check_tokens(&self) {
            for e in &self.events {
                match e {
                    Ev::Dealloc { id, token } => assert_eq!(*id, token.id, "{e:?}"),
                    Ev::Alloc { .. } => {}
                }
            }
        }
    }

    #[inline(never)]
    fn token_site(size: usize) -> Vec<u8> {
        Vec::with_capacity(size)
    }

    #[test]
    fn each_freed_block_returns_its_token_once() {
        let _g = serial();
        const N: usize = 200;
        let mut blocks: Vec<Option<Vec<u8>>> = Vec::with_capacity(N);
        let mut addrs = Vec::with_capacity(N);
        let session = memprof::start(Config::exact(), Log::default()).unwrap();
        for i in 0..N {
            let v = token_site(5000 + i);
            addrs.push(v.as_ptr() as usize);
            blocks.push(Some(v));
        }
        memprof::poll();
        for (i, b) in blocks.iter_mut().enumerate() {
            if i % 2 == 0 {
                drop(b.take());
            }
        }
        let log = session.stop().unwrap();
        drop(blocks);
        log.check_tokens();
        for (i, &addr) in addrs.iter().enumerate() {
            let ids = log.allocs_of(addr, 5000 + i);
            assert_eq!(ids.len(), 1, "block {i}: one sample");
            let frees = log.deallocs_of(ids[0]);
            if i % 2 == 0 {
                assert_eq!(frees.len(), 1, "block {i}: freed once");
                assert_eq!(frees[0], &Token { id: ids[0], addr, size: 5000 + i });
            } else {
                assert!(frees.is_empty(), "block {i} is still held: {frees:?}");
            }
        }
        let stats = log.stopped.expect("stopped was called");
        assert_eq!(stats.lost_events, 0);
        assert!(stats.samples >= N as u64 && stats.frees >= N as u64 / 2, "{stats:?}");
    }

    #[inline(never)]
    fn grow(v: &mut Vec<u8>, to: usize) {
        v.reserve_exact(to - v.len());
    }

    #[inline(never)]
    fn shrink(v: &mut Vec<u8>, to: usize) {
        v.shrink_to(to);
    }

    /// A reallocation ends its old block (`engine::sampler` §5): a sampled old block dies
    /// at the realloc, its token back with its own address and size, whether or not the
    /// new size is sampled; a sampled new size is a new sample at the new address, told
    /// after the old one's death; nothing is carried across. Blocks grown (glibc moves most
    /// of them) and blocks shrunk (glibc resizes them in place).
    #[test]
    fn realloc_ends_the_old_sample() {
        let _g = serial();
        const N: usize = 3000;
        // First sizes are 0 mod 16, new sizes 8 mod 16: an event's size says which it is.
        let first = |i: usize| 4096 + 16 * i;
        let resized = |i: usize| if i % 2 == 0 { 3 * first(i) + 8 } else { first(i) / 2 + 8 };
        let mut blocks: Vec<Vec<u8>> = Vec::with_capacity(N);
        let mut addrs = Vec::with_capacity(N);
        let session = memprof::start(
            Config { seed: Some(7), ..Config::with_interval(64.0 * 1024.0) },
            Log::default(),
        )
        .unwrap();
        for i in 0..N {
            let mut v = token_site(first(i));
            let before = v.as_ptr() as usize;
            match i % 2 {
                0 => grow(&mut v, resized(i)),
                _ => shrink(&mut v, resized(i)),
            }
            assert_eq!(v.capacity(), resized(i));
            addrs.push((before, v.as_ptr() as usize));
            blocks.push(v);
            if i % 256 == 0 {
                memprof::poll();
            }
        }
        drop(blocks);
        let log = session.stop().unwrap();
        log.check_tokens();
        let position = |e: &Ev| log.events.iter().position(|x| x == e).unwrap();
        let (mut ended, mut resampled, mut newly, mut in_place) = (0, 0, 0, 0);
        for (i, &(before, after)) in addrs.iter().enumerate() {
            let old = log.allocs_of(before, first(i));
            let new = log.allocs_of(after, resized(i));
            assert!(old.len() <= 1 && new.len() <= 1, "block {i}: {old:?} {new:?}");
            if let Some(&o) = old.first() {
                let f = log.deallocs_of(o);
                assert_eq!(f.len(), 1, "block {i}: the old sample dies at the realloc");
                assert_eq!(f[0], &Token { id: o, addr: before, size: first(i) });
                match new.first() {
                    Some(&n) => {
                        let death = Ev::Dealloc { id: o, token: f[0].clone() };
                        let birth = log
                            .events
                            .iter()
                            .find(|e| matches!(e, Ev::Alloc { id, .. } if *id == n));
                        assert!(position(&death) < position(birth.unwrap()), "block {i}");
                        resampled += 1;
                    }
                    None => ended += 1,
                }
                in_place += usize::from(before == after);
            }
            if let Some(&n) = new.first() {
                newly += usize::from(old.is_empty());
                let f = log.deallocs_of(n);
                assert_eq!(f.len(), 1, "block {i}: freed once at the end");
                assert_eq!(f[0], &Token { id: n, addr: after, size: resized(i) }, "block {i}");
            }
        }
        eprintln!("{ended} ended, {resampled} resampled, {newly} new, {in_place} in place");
        // Expected about 550 old samples ended without a new one, 500 resampled and 800 new
        // samples at the realloc alone; most sampled blocks are resized in place (every
        // shrink, and growths at the top of the heap).
        assert!(ended > 100 && resampled > 100 && newly > 100, "{ended} {resampled} {newly}");
        assert!(in_place > 50, "{in_place} sampled blocks resized in place");
        assert_eq!(log.stopped.unwrap().lost_events, 0);
    }

    /// In the exact mode every reallocation is sampled: the old sample dies, a new one with
    /// the new size is born.
    #[test]
    fn exact_realloc_is_a_free_and_a_new_sample() {
        let _g = serial();
        let session = memprof::start(Config::exact(), Log::default()).unwrap();
        let mut v = token_site(1111);
        let before = v.as_ptr() as usize;
        grow(&mut v, 7777);
        let after = v.as_ptr() as usize;
        let log = session.stop().unwrap();
        drop(v);
        let old = log.allocs_of(before, 1111);
        let new = log.allocs_of(after, 7777);
        assert_eq!((old.len(), new.len()), (1, 1), "{:?}", log.events);
        assert_eq!(log.deallocs_of(old[0]), [&Token { id: old[0], addr: before, size: 1111 }]);
        assert!(log.deallocs_of(new[0]).is_empty(), "still held at stop");
        assert!(log.events.contains(&Ev::Alloc { id: new[0], addr: after, size: 7777, k: 7777 }));
    }

    #[test]
    fn callback_allocations_are_not_sampled() {
        let _g = serial();
        let session =
            memprof::start(Config::exact(), Log { allocate_in_callbacks: true, ..Log::default() })
                .unwrap();
        for round in 0..10 {
            for _ in 0..10 {
                drop(black_box(token_site(777)));
            }
            // Half the callbacks run at poll, the rest at stop.
            if round % 2 == 0 {
                memprof::poll();
            }
        }
        let log = session.stop().unwrap();
        let sizes: Vec<usize> = log
            .events
            .iter()
            .filter_map(|e| match e {
                Ev::Alloc { size, .. } => Some(*size),
                _ => None,
            })
            .collect();
        assert_eq!(sizes.iter().filter(|&&s| s == 777).count(), 100);
        assert!(!sizes.contains(&CALLBACK_ALLOC), "a callback's allocation was sampled");
    }

    #[test]
    fn panicking_callback_is_caught_and_counted() {
        let _g = serial();
        let session =
            memprof::start(Config::exact(), Log { panic_on_size: Some(4242), ..Log::default() })
                .unwrap();
        let doomed = token_site(4242);
        assert!(memprof::poll() >= 1);
        assert_eq!(session.stats().callback_panics, 1);
        // The session keeps working: later samples are delivered.
        let later: Vec<Vec<u8>> = (0..10).map(|_| token_site(999)).collect();
        drop(doomed); // its sample has no token: its free is not delivered
        let log = session.stop().unwrap();
        let stats = log.stopped.unwrap();
        assert_eq!(stats.callback_panics, 1, "{stats:?}");
        for v in &later {
            assert_eq!(log.allocs_of(v.as_ptr() as usize, 999).len(), 1);
        }
        assert!(!log.events.iter().any(|e| matches!(e, Ev::Alloc { size: 4242, .. })));
    }

    #[test]
    fn full_queue_counts_lost_events() {
        let _g = serial();
        const N: usize = 100;
        let session =
            memprof::start(Config { queue_capacity: 2, ..Config::exact() }, Log::default())
                .unwrap();
        let keep: Vec<Vec<u8>> = (0..N).map(|_| token_site(3333)).collect();
        let lost = session.stats().lost_events;
        assert!(lost >= (N - 2) as u64, "{lost} events lost of {N} with room for 2");
        let log = session.stop().unwrap();
        let stats = log.stopped.unwrap();
        assert!(stats.lost_events >= lost, "{stats:?}");
        let delivered = log.events.iter().filter(|e| matches!(e, Ev::Alloc { size: 3333, .. }));
        assert!(delivered.count() <= 2);
        drop(keep);
        // The next session with the default capacity loses nothing.
        let session = memprof::start(Config::exact(), Log::default()).unwrap();
        let keep: Vec<Vec<u8>> = (0..N).map(|_| token_site(3333)).collect();
        let log = session.stop().unwrap();
        assert_eq!(log.stopped.unwrap().lost_events, 0);
        for v in &keep {
            assert_eq!(log.allocs_of(v.as_ptr() as usize, 3333).len(), 1);
        }
    }

    #[test]
    fn one_session_at_a_time() {
        let _g = serial();
        let first = memprof::start(Config::exact(), Log::default()).unwrap();
        match memprof::start(Config::exact(), Log::default()) {
            Err(Error::AlreadyRunning) => {}
            Err(e) => panic!("expected AlreadyRunning, got {e}"),
            Ok(_) => panic!("a second session started while one runs"),
        }
        // The refused start did not disturb the running session.
        let v = token_site(2468);
        let log = first.stop().unwrap();
        assert_eq!(log.allocs_of(v.as_ptr() as usize, 2468).len(), 1);
        // After stop, a new session can start.
        let again = memprof::start(Config::exact(), Log::default()).unwrap();
        again.stop().unwrap();
    }

    #[test]
    fn drain_thread_delivers_without_poll() {
        let _g = serial();
        const N: usize = 50;
        let seen = Arc::new(AtomicUsize::new(0));
        let session = memprof::start(
            Config { drain_thread: true, ..Config::exact() },
            Log { count_size: Some((3131, seen.clone())), ..Log::default() },
        )
        .unwrap();
        let keep: Vec<Vec<u8>> = (0..N).map(|_| token_site(3131)).collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.load(Ordering::SeqCst) < N && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(seen.load(Ordering::SeqCst), N, "the drain thread delivered the samples");
        let stats = session.stats();
        assert!(stats.samples >= N as u64, "stats while the drain thread runs: {stats:?}");
        let log = session.stop().unwrap();
        drop(keep);
        assert_eq!(log.stopped.unwrap().lost_events, 0);
    }

    /// `Session::stats` counts what was delivered so far, also while the drain thread is in
    /// the middle of delivering: the counts never go back.
    #[test]
    fn stats_are_monotonic_under_the_drain_thread() {
        let _g = serial();
        let session =
            memprof::start(Config { drain_thread: true, ..Config::exact() }, Log::default())
                .unwrap();
        let mut last = Stats::default();
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            drop(black_box(token_site(64)));
            let now = session.stats();
            assert!(
                now.samples >= last.samples && now.frees >= last.frees,
                "went back: {last:?} then {now:?}"
            );
            last = now;
        }
        assert!(last.samples > 0);
        session.stop().unwrap();
    }

    /// A thread that polls all the time does not make a new session drop its first events:
    /// every block allocated right after `start` is delivered.
    #[test]
    fn concurrent_poll_at_start_loses_nothing() {
        let _g = serial();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let poller = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    memprof::poll();
                }
            })
        };
        let mut missed = 0;
        for _ in 0..1000 {
            let session = memprof::start(Config::exact(), Log::default()).unwrap();
            let v = token_site(1717);
            let log = session.stop().unwrap();
            missed += usize::from(log.allocs_of(v.as_ptr() as usize, 1717).len() != 1);
        }
        stop.store(true, Ordering::Relaxed);
        poller.join().unwrap();
        assert_eq!(missed, 0, "sessions whose first sample was dropped");
    }
}

// ---------------------------------------------------------------------------------------------

mod threads {
    //! Eight threads in the exact mode, freeing each other's blocks and reusing addresses at
    //! once.
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    const THREADS: usize = 8;
    const PER_THREAD: usize = 3000;
    const SITE: &str = "engine::threads::thread_site";

    /// Blocks handed to another thread, which frees them.
    type Pool = Mutex<Vec<Box<[u8]>>>;

    #[inline(never)]
    fn thread_site(size: usize, fill: u8) -> Box<[u8]> {
        vec![fill; size].into_boxed_slice()
    }

    #[derive(Default)]
    struct Counts {
        allocs: usize,
        frees: usize,
        reused: usize,
    }

    fn worker(t: usize, pools: &[Pool]) -> (Counts, Vec<Box<[u8]>>) {
        let mut n = Counts::default();
        let mut held = Vec::with_capacity(PER_THREAD);
        for i in 0..PER_THREAD {
            let size = 16 + (i * 7 + t * 13) % 2000;
            let b = thread_site(size, (t + i) as u8);
            n.allocs += 1;
            match i % 4 {
                0 => {
                    // Free, then allocate the same size at once: the address usually comes back.
                    let addr = b.as_ptr();
                    drop(b);
                    n.frees += 1;
                    let b = thread_site(size, 1);
                    n.allocs += 1;
                    n.reused += usize::from(b.as_ptr() == addr);
                    held.push(b);
                }
                // For the next thread to free.
                1 => pools[(t + 1) % THREADS].lock().unwrap().push(b),
                2 => held.push(b),
                _ => {
                    drop(b);
                    n.frees += 1;
                }
            }
            if i % 8 == 0 {
                // Free a block another thread allocated.
                let other = pools[t].lock().unwrap().pop();
                if other.is_some() {
                    drop(other);
                    n.frees += 1;
                }
            }
            if i % 64 == 0 {
                memprof::poll();
            }
        }
        (n, held)
    }

    #[test]
    fn eight_threads_exact() {
        let _g = serial();
        let pools: Arc<Vec<Pool>> =
            Arc::new((0..THREADS).map(|_| Mutex::new(Vec::with_capacity(PER_THREAD))).collect());
        let mut held: Vec<Box<[u8]>> = Vec::new();
        let mut total = Counts::default();
        let config =
            Config { queue_capacity: 1 << 16, depth: 32, seed: Some(3), ..Config::exact() };
        let seen = record_witnessed(config, || {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let pools = pools.clone();
                    std::thread::spawn(move || worker(t, &pools))
                })
                .collect();
            for h in handles {
                let (n, h) = h.join().unwrap();
                total.allocs += n.allocs;
                total.frees += n.frees;
                total.reused += n.reused;
                held.extend(h);
            }
        });
        for p in pools.iter() {
            held.append(&mut p.lock().unwrap());
        }
        let profile = &seen.profile;
        assert_eq!(profile.lost, Default::default(), "nothing may be lost in this test");
        assert!(total.reused > 0, "the test never reused an address at once");

        let names = site_names(profile);
        let ours: Vec<_> =
            seen.samples.iter().filter(|s| names[s.stack as usize] == SITE).collect();
        assert_eq!(ours.len(), total.allocs, "one sample per allocation");
        let ids: HashSet<u64> = ours.iter().map(|s| s.id).collect();
        assert_eq!(ids.len(), ours.len(), "sample ids are unique");
        let freed: Vec<u64> = seen.frees.iter().copied().filter(|id| ids.contains(id)).collect();
        let unique: HashSet<u64> = freed.iter().copied().collect();
        assert_eq!(unique.len(), freed.len(), "no block is freed twice");
        assert_eq!(freed.len(), total.frees, "one free per freed block");

        // The live set is exactly what is still held: no free was reported for a live block.
        let live: HashSet<(u64, u64)> =
            ours.iter().filter(|s| !unique.contains(&s.id)).map(|s| (s.addr, s.size)).collect();
        let truth: HashSet<(u64, u64)> =
            held.iter().map(|b| (b.as_ptr() as u64, b.len() as u64)).collect();
        assert_eq!(truth.len(), held.len());
        assert_eq!(live, truth, "live samples = blocks still held");
        // And the profile's live totals of the site are those samples', pair by pair.
        let live_samples = ours.iter().copied().filter(|s| !unique.contains(&s.id));
        assert_eq!(
            live_of(profile, |stack| names[stack as usize] == SITE),
            pair_totals(live_samples),
            "the profile's live blocks = samples not freed"
        );
        let s = site(profile, SITE);
        let held_bytes: usize = held.iter().map(|b| b.len()).sum();
        assert_eq!(s.live_bytes, held_bytes as f64);
        assert_eq!(s.live_objects, held.len() as f64);
        // Every thread got its own number.
        let threads: HashSet<u32> = ours.iter().map(|s| s.thread).collect();
        assert_eq!(threads.len(), THREADS);
    }
}

// ---------------------------------------------------------------------------------------------

mod depth {
    //! Stacks deeper than the configured depth are cut at exactly `depth` frames and marked.
    use super::*;
    use memprof::profile::symbolize::TRUNCATED;
    use memprof::Unwinder;

    const DEEP: &str = "engine::depth::deep";

    #[inline(never)]
    fn deep(n: usize) -> Box<[u8; 333]> {
        if n == 0 {
            Box::new([3; 333])
        } else {
            // Not a tail call: the frame stays on the stack.
            black_box(deep(n - 1))
        }
    }

    /// The stack of the sampled 333-byte block at `addr`: (frame count, truncated, names).
    fn stack_of(seen: &Witnessed, addr: usize) -> (usize, bool, Vec<String>) {
        let s = seen
            .samples
            .iter()
            .find(|s| s.addr == addr as u64 && s.size == 333)
            .expect("the block was sampled");
        let profile = &seen.profile;
        // The only block of its (stack, size) pair, still live in the profile.
        assert_eq!(
            profile.live.get(&(s.stack, s.size)),
            Some(&Totals { samples: 1, k: s.k }),
            "still live, in the profile"
        );
        let stack = &profile.stacks[s.stack as usize];
        (stack.frames.len(), stack.truncated, profile.frame_names(s.stack))
    }

    fn check(unwinder: Unwinder) {
        for (recursion, depth) in [(200usize, 128usize), (200, 10), (5, 128)] {
            let mut block = None;
            let seen = record_witnessed(Config { depth, unwinder, ..Config::exact() }, || {
                block = Some(deep(recursion))
            });
            let block = block.unwrap();
            let (frames, truncated, names) = stack_of(&seen, block.as_ptr() as usize);
            let deep_frames = names.iter().filter(|n| *n == DEEP).count();
            let what = format!("{unwinder:?}, recursion {recursion}, depth {depth}: {names:?}");
            if recursion > depth {
                assert_eq!(frames, depth, "{what}");
                assert!(truncated, "{what}");
                assert_eq!(names.first().map(String::as_str), Some(TRUNCATED), "{what}");
                // Only a few profiler and allocator frames sit below the recursion.
                assert!(deep_frames + 12 >= depth, "{what}");
            } else {
                assert!(frames < depth, "{what}");
                assert!(!truncated, "{what}");
                assert_eq!(deep_frames, recursion + 1, "{what}");
            }
            let sample = seen.samples.iter().find(|s| s.addr == block.as_ptr() as u64).unwrap();
            assert_eq!(seen.profile.site_name(sample.stack), DEEP, "{what}");
        }
    }

    #[test]
    fn truncation_frame_pointers() {
        let _g = serial();
        check(Unwinder::FramePointer);
    }

    #[test]
    fn truncation_dwarf() {
        let _g = serial();
        // The cached DWARF unwinder walks these stacks itself (to the end of the stack for
        // the whole ones): not one capture is handed to libgcc.
        let fallbacks = memprof::__private::dwarf_fallbacks();
        check(Unwinder::Dwarf);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(memprof::__private::dwarf_fallbacks(), fallbacks, "captures fell back");
        let _ = fallbacks;
    }

    #[test]
    fn truncation_libgcc() {
        let _g = serial();
        check(Unwinder::Libgcc);
    }
}

mod offline_symbols {
    //! A profile whose process never wrote its symbols is symbolized from the recorded
    //! modules' files, and agrees with what the process itself resolved.
    use super::*;

    #[inline(never)]
    fn offline_site(n: usize) -> Vec<u8> {
        black_box(vec![7u8; n + 40_000])
    }

    #[test]
    fn offline_matches_in_process() {
        let _g = serial();
        let profile = record(Config::exact(), || {
            for i in 0..10 {
                drop(offline_site(i));
            }
        });
        let mut bare = profile.clone();
        bare.symbols.clear();
        let notes = memprof::profile::symbolize::resolve_offline(&mut bare);
        assert!(notes.is_empty(), "{notes:?}");
        let mine: Vec<(StackId, u64)> = profile
            .allocated
            .iter()
            .filter(|((_, size), _)| *size >= 40_000)
            .map(|(&(stack, _), t)| (stack, t.samples))
            .collect();
        assert_eq!(mine.iter().map(|(_, n)| n).sum::<u64>(), 10);
        let stack = mine[0].0;
        assert!(profile.frame_names(stack).iter().any(|f| f.ends_with("offline_site")));
        // Same functions (the inline chains come from the same DWARF), in the same order.
        // A system library without DWARF or a full symbol table (libc's start_thread is a
        // local symbol) may stay `libc.so.6+0x…` offline; every frame of this program agrees.
        let (off, on) = (bare.frame_names(stack), profile.frame_names(stack));
        assert_eq!(off.len(), on.len());
        for (a, b) in off.iter().zip(&on) {
            assert!(a == b || a.contains(".so"), "offline {a:?} vs in-process {b:?}");
        }
        assert!(off.iter().filter(|f| f.contains(".so")).count() <= 2, "{off:?}");
        assert_eq!(bare.site_name(stack), profile.site_name(stack));
    }
}
