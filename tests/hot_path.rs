//! The hot path neither allocates through the profiled allocator, nor loses errno, nor
//! panics, nor makes a system call (counted by `strace`, around this binary run again).
//!
//! The global allocator is `Sampled<Counting>`: `Counting` wraps `System` and counts the
//! calls that reach it. The profiler sits in front of it, so any allocation the profiler made
//! through the global allocator (for a call stack, a queue slot, the live table) would reach
//! `Counting` on top of the test's own. Each check counts the calls between two points with
//! no `poll` in between and compares with what the test itself allocated.
//!
//! Counting is per thread (a const thread-local flag marks the watched thread), so the test
//! harness's own threads cannot disturb the counts; the profiler does all its sample-path
//! work on the allocating thread, so nothing it does escapes the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use memprof::{Allocation, Config, Deallocation, SessionCounters, Tracker, Unwinder};

/// `System`, counting the calls of the watched thread.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static REALLOCS: AtomicU64 = AtomicU64::new(0);
static DEALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}

fn note(counter: &AtomicU64) {
    if WATCHED.try_with(Cell::get).unwrap_or(false) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments and returns its
// result; the counting touches only atomics and a const thread-local `Cell<bool>` (no
// allocation, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(&ALLOCS);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(&ALLOCS);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(&DEALLOCS);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(&REALLOCS);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: memprof::Sampled<Counting> = memprof::Sampled::new(Counting);

mod common;
use common::serial;

/// Calls that reached `Counting` from this thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Calls {
    alloc: u64,
    realloc: u64,
    dealloc: u64,
}

fn snapshot() -> Calls {
    Calls {
        alloc: ALLOCS.load(Ordering::SeqCst),
        realloc: REALLOCS.load(Ordering::SeqCst),
        dealloc: DEALLOCS.load(Ordering::SeqCst),
    }
}

/// The calls that `f` makes to the underlying allocator on this thread.
fn count<R>(f: impl FnOnce() -> R) -> (R, Calls) {
    WATCHED.with(|w| w.set(true));
    let before = snapshot();
    let r = f();
    let after = snapshot();
    WATCHED.with(|w| w.set(false));
    let calls = Calls {
        alloc: after.alloc - before.alloc,
        realloc: after.realloc - before.realloc,
        dealloc: after.dealloc - before.dealloc,
    };
    (r, calls)
}

/// Raw allocation through the global allocator (so the compiler cannot elide it).
fn alloc(size: usize) -> *mut u8 {
    let layout = Layout::from_size_align(size, 8).unwrap();
    // SAFETY: size > 0 in every call of this file.
    let p = unsafe { std::alloc::alloc(layout) };
    assert!(!p.is_null());
    black_box(p)
}

fn free(p: *mut u8, size: usize) {
    let layout = Layout::from_size_align(size, 8).unwrap();
    // SAFETY: p came from `alloc(size)` or `grow(.., size)` and is freed once.
    unsafe { std::alloc::dealloc(black_box(p), layout) }
}

fn grow(p: *mut u8, old: usize, new: usize) -> *mut u8 {
    let layout = Layout::from_size_align(old, 8).unwrap();
    // SAFETY: p came from `alloc(old)`; new > 0.
    let q = unsafe { std::alloc::realloc(p, layout, new) };
    assert!(!q.is_null());
    black_box(q)
}

/// Counts the samples and frees of blocks in a size range, and the deepest stack.
#[derive(Default)]
struct Seen {
    sizes: std::ops::Range<usize>,
    samples: u64,
    frees: u64,
    deepest: usize,
    stats: Option<SessionCounters>,
    /// (id, address) of sampled 100-byte blocks, and the ids of freed samples.
    hundreds: Vec<(u64, usize)>,
    freed: Vec<u64>,
}

impl Tracker for Seen {
    type Token = ();

    fn alloc(&mut self, a: &Allocation<'_>) -> Option<()> {
        if a.size == 100 {
            self.hundreds.push((a.id, a.addr));
        }
        if self.sizes.contains(&a.size) {
            self.samples += 1;
            self.deepest = self.deepest.max(a.callstack.frames().len());
            Some(())
        } else {
            None
        }
    }

    fn dealloc(&mut self, _: (), d: &Deallocation) {
        self.frees += 1;
        self.freed.push(d.id);
    }

    fn stopped(&mut self, stats: &SessionCounters) {
        self.stats = Some(*stats);
    }
}

fn seen(sizes: std::ops::Range<usize>) -> Seen {
    Seen { sizes, ..Seen::default() }
}

#[inline(never)]
fn recurse<R>(n: usize, f: &mut dyn FnMut() -> R) -> R {
    if n == 0 {
        f()
    } else {
        black_box(recurse(n - 1, f))
    }
}

/// (a) With a session whose interval is far beyond what the test allocates, no allocation
/// is sampled and the allocator sees exactly the test's own calls.
#[test]
fn unsampled_path_allocates_nothing() {
    let _g = serial();
    const N: usize = 10_000;
    let session = memprof::start(
        Config { seed: Some(1), ..Config::with_interval(1e14) },
        seen(1..usize::MAX),
    )
    .unwrap();
    let ((), calls) = count(|| {
        for i in 0..N {
            let size = 8 + i % 4000;
            let p = alloc(size);
            let p = grow(p, size, 2 * size);
            free(p, 2 * size);
        }
    });
    assert_eq!(calls, Calls { alloc: N as u64, realloc: N as u64, dealloc: N as u64 });
    let seen = session.stop().unwrap();
    assert_eq!(seen.samples, 0, "nothing sampled at an interval of 1e14 bytes");
}

/// (b) + (c) In the exact mode every allocation takes the slow path: call-stack capture
/// (with a stack deeper than the 32 inline frames, so the buffer doubles), the queue push
/// and the live-table insertion (growing the table). Then the frees take the live-table
/// removal and the dealloc push, and the reallocations both. None of it reaches the global
/// allocator.
fn sampled_paths_allocate_nothing(unwinder: Unwinder) {
    let _g = serial();
    const N: usize = 2000;
    const DEEP: usize = 60;
    const SIZE: usize = 1000;
    let mut blocks = vec![std::ptr::null_mut::<u8>(); N];
    // Room for every event between the polls: cells, ten for a stack of 128 frames.
    let config =
        Config { seed: Some(2), unwinder, queue_capacity: 16 * N, depth: 128, ..Config::exact() };
    let session = memprof::start(config, seen(SIZE..SIZE + 1)).unwrap();

    let ((), calls) = count(|| {
        for (i, b) in blocks.iter_mut().enumerate() {
            *b = if i % 4 == 0 { recurse(DEEP, &mut || alloc(SIZE)) } else { alloc(SIZE) };
        }
    });
    assert_eq!(calls, Calls { alloc: N as u64, ..Calls::default() }, "{unwinder:?}: capture");

    let ((), calls) = count(|| {
        for b in blocks.iter_mut().skip(N / 2) {
            *b = grow(*b, SIZE, 2 * SIZE);
        }
    });
    assert_eq!(calls, Calls { realloc: (N / 2) as u64, ..Calls::default() }, "{unwinder:?}");

    let ((), calls) = count(|| {
        for (i, &b) in blocks.iter().enumerate() {
            free(b, if i < N / 2 { SIZE } else { 2 * SIZE });
        }
    });
    assert_eq!(calls, Calls { dealloc: N as u64, ..Calls::default() }, "{unwinder:?}: frees");

    let seen = session.stop().unwrap();
    // The slow path really ran: every block was sampled, deep stacks were captured whole,
    // and every sampled block that was freed came back.
    assert_eq!(seen.samples, N as u64, "{unwinder:?}");
    assert_eq!(seen.frees, N as u64, "{unwinder:?}");
    assert!(seen.deepest > DEEP, "{unwinder:?}: deepest stack {}", seen.deepest);
    let stats = seen.stats.unwrap();
    assert_eq!((stats.lost_events, stats.untracked), (0, 0), "{unwinder:?}");
}

#[test]
fn sampled_paths_allocate_nothing_frame_pointers() {
    sampled_paths_allocate_nothing(Unwinder::FramePointer);
}

#[test]
fn sampled_paths_allocate_nothing_dwarf() {
    sampled_paths_allocate_nothing(Unwinder::Dwarf);
}

#[test]
fn sampled_paths_allocate_nothing_libgcc() {
    sampled_paths_allocate_nothing(Unwinder::Libgcc);
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

fn set_errno(v: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = v }
}

/// (d) errno survives allocation, reallocation and free, sampled or not, including the
/// first sample of a thread (stack bounds are queried then) and live-table growth.
#[test]
fn errno_is_preserved() {
    let _g = serial();
    const SENTINEL: i32 = 4321;
    const N: usize = 500;
    let run = |label: &str| {
        // A fresh thread: its first sample queries the stack bounds.
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut blocks = Vec::with_capacity(N);
                for i in 0..N {
                    set_errno(SENTINEL);
                    let p =
                        if i % 8 == 0 { recurse(40, &mut || alloc(64 + i)) } else { alloc(64 + i) };
                    let e = errno(); // read first: formatting a message allocates
                    assert_eq!(e, SENTINEL, "{label}: alloc {i} changed errno");
                    set_errno(SENTINEL);
                    let p = grow(p, 64 + i, 128 + i);
                    let e = errno();
                    assert_eq!(e, SENTINEL, "{label}: realloc {i} changed errno");
                    blocks.push(p);
                }
                for (i, p) in blocks.into_iter().enumerate() {
                    set_errno(SENTINEL);
                    free(p, 128 + i);
                    let e = errno();
                    assert_eq!(e, SENTINEL, "{label}: free {i} changed errno");
                }
            });
        });
    };
    run("no session");
    for (label, config) in [
        ("exact", Config { seed: Some(3), ..Config::exact() }),
        ("R = 256", Config { seed: Some(4), ..Config::with_interval(256.0) }),
        ("R = 1e14", Config { seed: Some(5), ..Config::with_interval(1e14) }),
        ("full queue", Config { queue_capacity: 2, ..Config::exact() }),
        ("dwarf", Config { unwinder: Unwinder::Dwarf, ..Config::exact() }),
        ("libgcc", Config { unwinder: Unwinder::Libgcc, ..Config::exact() }),
    ] {
        let session = memprof::start(config, seen(1..usize::MAX)).unwrap();
        run(label);
        let seen = session.stop().unwrap();
        if label != "R = 1e14" {
            assert!(seen.samples > 0, "{label}: the slow path ran");
        }
    }
}

static PANICS: AtomicUsize = AtomicUsize::new(0);

/// (e) The hot path does not panic (a panic inside the allocator would abort the process):
/// tiny and huge sizes, failed allocations and reallocations, a full queue, direct calls
/// of the sampler and the hooks with extreme sizes. A full queue also allocates nothing.
#[test]
fn hot_path_never_panics() {
    let _g = serial();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    let huge = Layout::from_size_align(isize::MAX as usize - 4095, 4096).unwrap();
    for config in [
        Config { seed: Some(6), ..Config::exact() },
        Config { seed: Some(7), ..Config::with_interval(4096.0) },
        Config { seed: Some(8), queue_capacity: 2, ..Config::exact() },
    ] {
        let full = config.queue_capacity == 2;
        let exact = config.interval == 1.0;
        let session = memprof::start(config, seen(1..usize::MAX)).unwrap();
        let ((), calls) = count(|| {
            for i in 0..1000 {
                let p = alloc(1 + i % 3);
                free(p, 1 + i % 3);
            }
        });
        assert_eq!(calls, Calls { alloc: 1000, realloc: 0, dealloc: 1000 });
        if full {
            assert!(session.stats().lost_events >= 998, "{:?}", session.stats());
        }
        // SAFETY: a valid layout of non-zero size; the allocation fails and returns null.
        // (black_box: an allocation whose result is unused may be assumed to succeed.)
        let p = black_box(unsafe { std::alloc::alloc(black_box(huge)) });
        assert!(p.is_null());
        // A sampled block whose reallocation fails stays tracked, and is freed later.
        let p = alloc(100);
        // SAFETY: p came from alloc(100); the new size is valid for the layout but too big.
        let q = unsafe {
            std::alloc::realloc(p, Layout::from_size_align(100, 8).unwrap(), huge.size())
        };
        let q = black_box(q);
        assert!(q.is_null());
        free(p, 100);
        // The sampler and the hooks with extreme sizes.
        for size in [0, 1, 7, usize::MAX / 2, usize::MAX - 1, usize::MAX] {
            black_box(memprof::__private::sample(size));
        }
        let fake = 0x10usize as *mut u8; // never a real block: 16 bytes into page zero
        memprof::__private::on_alloc(fake, usize::MAX);
        memprof::__private::on_dealloc(fake);
        let seen = session.stop().unwrap();
        assert!(seen.stats.unwrap().samples > 0, "{:?}", seen.stats);
        if exact && !full {
            let id = seen.hundreds.iter().rev().find(|h| h.1 == p as usize).expect("sampled").0;
            assert!(seen.freed.contains(&id), "the failed realloc lost track of the block");
        }
    }
    drop(std::panic::take_hook());
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "the hot path panicked");
}

/// (e) A block resized many times (mostly in place, now and then moved by glibc), sampled
/// at first and now and then again, allocates nothing and keeps errno through every
/// path of a reallocation: unsampled with no sampled block behind its filter counter (one
/// load), unsampled ending a sampled old block (taken out of the live table before the
/// real realloc), sampled (a death and a sample). Every sample dies at the next realloc
/// or at the final free: each is told as freed, once.
#[test]
fn reallocations_allocate_nothing_keep_errno_and_end_their_samples() {
    let _g = serial();
    const SENTINEL: i32 = 777;
    // 4 MiB at a 64 KiB interval: sampled unless its 2^22 bytes hold no point (e^-64).
    const BIG: usize = 4 << 20;
    const N: usize = 20_000;
    let config = Config { seed: Some(6), ..Config::with_interval(65536.0) };
    let session = memprof::start(config, seen(1..usize::MAX)).unwrap();
    let mut p = alloc(BIG);
    let mut size = BIG;
    let ((), calls) = count(|| {
        for i in 0..N {
            // Mostly in place; every 64th a size beyond what the block's chunk can hold
            // next to its neighbours' (moved), then back.
            let new = match i % 64 {
                0 => 20_000,
                _ if i % 2 == 0 => 64,
                _ => 128,
            };
            set_errno(SENTINEL);
            p = grow(p, size, new);
            let e = errno();
            assert_eq!(e, SENTINEL, "realloc {i} changed errno");
            size = new;
        }
    });
    assert_eq!(calls, Calls { realloc: N as u64, ..Calls::default() });
    free(p, size);
    let seen = session.stop().unwrap();
    let stats = seen.stats.unwrap();
    assert_eq!((stats.lost_events, stats.untracked), (0, 0));
    // About 110 samples expected: 313 reallocations to 20,000 bytes sampled with
    // probability 1 - e^(-20000/65536) ≈ 0.26, the rest 96 bytes on average each. Fewer
    // than 2 has probability e^-110-ish.
    assert!(seen.samples >= 2 && seen.frees >= seen.samples, "{} {}", seen.samples, seen.frees);
    let mut freed = seen.freed.clone();
    freed.sort_unstable();
    freed.dedup();
    assert_eq!(freed.len(), seen.freed.len(), "a sample told as freed twice");
}

/// The lifetimes a tracker is told, in ns, of the blocks of one size.
struct Lives {
    size: usize,
    lives: Vec<u64>,
}

impl Tracker for Lives {
    type Token = u64;

    fn alloc(&mut self, a: &Allocation<'_>) -> Option<u64> {
        (a.size == self.size).then_some(a.time_ns)
    }

    fn dealloc(&mut self, allocated: u64, d: &Deallocation) {
        self.lives.push(d.time_ns.saturating_sub(allocated));
    }
}

/// With backpressure, an allocation that finds the queue full waits for room inside
/// `malloc` (asleep until the drain thread drains, every millisecond or so); its block is
/// not the program's before `malloc` returns, so the wait is not part of its life: a block
/// freed right after its allocation is told with a lifetime of microseconds, not of the
/// wait. A queue of 2 slots is full at nearly every allocation, so were the wait counted,
/// nearly every block would seem to live a wait or more. The bound is on the median: fewer than half of 400 such blocks may live
/// 40 µs or more. (When other sessions ran in the process before, up to a third of the
/// blocks have been seen at 10–55 µs on a 2-vCPU VM, uniformly spread; a bound on the 95th
/// percentile failed there most runs, so it would not tell that regression from this.)
#[test]
fn a_wait_for_room_is_not_in_the_blocks_life() {
    let _g = serial();
    const SIZE: usize = 7777;
    let config =
        Config { queue_capacity: 2, backpressure: true, drain_thread: true, ..Config::exact() };
    let session = memprof::start(config, Lives { size: SIZE, lives: Vec::new() }).unwrap();
    for _ in 0..400 {
        let p = alloc(SIZE);
        free(p, SIZE);
    }
    let lives = session.stop().unwrap().lives;
    assert!(lives.len() > 380, "{} of 400 blocks told", lives.len());
    let long = lives.iter().filter(|&&l| l >= 40_000).count();
    assert!(long < lives.len() / 2, "{long} of {} blocks lived ≥ 40 µs", lives.len());
}

/// One of [`SITES`]: allocates and frees `64 + i % 256` bytes; each `N` a function of its
/// own, with its own return address into it.
#[inline(never)]
fn site<const N: usize>(i: usize) -> usize {
    let size = 64 + ((i ^ N) & 255);
    let p = alloc(size);
    free(p, size);
    black_box(N) + 1
}

macro_rules! four {
    ($b:expr) => {
        [site::<{ $b }>, site::<{ $b + 1 }>, site::<{ $b + 2 }>, site::<{ $b + 3 }>]
    };
}
macro_rules! sixteen {
    ($b:expr) => {
        [four!($b), four!($b + 4), four!($b + 8), four!($b + 12)]
    };
}
macro_rules! sixty_four {
    ($b:expr) => {
        [sixteen!($b), sixteen!($b + 16), sixteen!($b + 32), sixteen!($b + 48)]
    };
}
macro_rules! two_fifty_six {
    ($b:expr) => {
        [sixty_four!($b), sixty_four!($b + 64), sixty_four!($b + 128), sixty_four!($b + 192)]
    };
}

/// 2,048 call sites: more return addresses than the DWARF unwinder's compiled rules hold,
/// so that most sampled walks derive a rule again through framehop, on the walk stack.
#[allow(clippy::type_complexity)]
static SITES: [[[[[fn(usize) -> usize; 4]; 4]; 4]; 4]; 8] = [
    two_fifty_six!(0),
    two_fifty_six!(256),
    two_fifty_six!(512),
    two_fifty_six!(768),
    two_fifty_six!(1024),
    two_fifty_six!(1280),
    two_fifty_six!(1536),
    two_fifty_six!(1792),
];

/// Tells the profiler every block, to keep its frees.
struct Keep;

impl Tracker for Keep {
    type Token = ();

    fn alloc(&mut self, _: &Allocation<'_>) -> Option<()> {
        Some(())
    }
}

/// The child of [`the_sample_path_makes_no_system_call_in_process`] (this binary run again
/// under `strace`, with `MEMPROF_TEST_SYSCALLS` set to the interval): a session with a drain
/// thread (and backpressure in the exact mode), a warm-up over every site (the thread's
/// first-time costs: at the default interval long enough to sample at every address the
/// loop's blocks take, so that their live-table shards have their first tables), then
/// 100,000 calls of sites drawn at random between two marks.
#[test]
#[ignore = "a child of the_sample_path_makes_no_system_call_in_process"]
fn sites_between_marks() {
    let Some(interval) = std::env::var_os("MEMPROF_TEST_SYSCALLS") else { return };
    let interval: f64 = interval.to_str().and_then(|v| v.parse().ok()).expect("an interval");
    let _g = serial();
    let sites: Vec<fn(usize) -> usize> =
        SITES.as_flattened().as_flattened().as_flattened().as_flattened().to_vec();
    let config = Config {
        unwinder: Unwinder::Dwarf,
        drain_thread: true,
        backpressure: interval == 1.0,
        ..Config::with_interval(interval)
    };
    let session = memprof::start(config, Keep).unwrap();
    let mut x: u32 = 12345;
    let mut next = || {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        (x >> 8) as usize
    };
    let mut sum = 0;
    let warm = if interval == 1.0 { 2 } else { 1300 };
    for _ in 0..warm {
        for s in &sites {
            sum += s(next());
        }
    }
    let mark = |m: &[u8]| {
        // SAFETY: a write to no descriptor: it fails with EBADF and does nothing else.
        assert_eq!(unsafe { libc::write(-1, m.as_ptr().cast(), m.len()) }, -1);
    };
    mark(b"begin");
    for _ in 0..100_000 {
        let i = next();
        sum += sites[i % sites.len()](i);
    }
    mark(b"end");
    black_box(sum);
    session.stop().unwrap();
}

/// The sample path makes no system call in a program that profiles itself (`Sampled`):
/// this binary's [`sites_between_marks`] under `strace -f`, in the exact mode and at the
/// default interval, with the DWARF unwinder (this crate keeps frame pointers; the DWARF
/// unwinder still hands most of these walks to framehop). Between its marks the thread
/// makes no system call but `futex` (waiting for the drain thread to make room).
#[test]
fn the_sample_path_makes_no_system_call_in_process() {
    if !common::have_strace("the in-process sample path's system calls") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-hot-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (mode, interval) in [("exact", "1"), ("default", "524288")] {
        let file = dir.join(format!("{mode}.strace"));
        let out = std::process::Command::new("strace")
            .arg("-f")
            .arg("-o")
            .arg(&file)
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "sites_between_marks", "--include-ignored", "--nocapture"])
            .env("MEMPROF_TEST_SYSCALLS", interval)
            .output()
            .unwrap();
        assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
        let trace = std::fs::read_to_string(&file).unwrap();
        let (left, marked, futexes) = common::syscalls_between_marks(&trace);
        eprintln!("{mode}: {futexes} futex calls between the marks");
        assert_eq!(marked, 1, "{mode}: the marks are in the trace");
        assert!(left.is_empty(), "{mode}: system calls on the sample path: {left:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
