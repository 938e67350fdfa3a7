//! `memprof::testing`: exact counts per test, while other threads allocate heavily at the
//! same time (cargo runs this file's tests in parallel, and some spawn allocating threads
//! of their own), and failure texts that name the allocating function.

use memprof::testing::{measure, Stats};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

/// Threads that allocate and free as fast as they can until dropped.
struct Noise {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Noise {
    fn start(n: usize) -> Noise {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|i| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut keep = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let v = black_box(vec![i as u8; 64 + i * 100]);
                        keep.push(v);
                        if keep.len() > 1000 {
                            keep.clear();
                        }
                    }
                })
            })
            .collect();
        Noise { stop, threads }
    }
}

impl Drop for Noise {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn figures(s: &Stats) -> (u64, u64, u64, u64, u64) {
    (s.blocks, s.bytes, s.frees, s.peak_bytes, s.live_bytes)
}

/// One block, kept; then one block freed inside the scope.
#[test]
fn one_block_exactly() {
    let _noise = Noise::start(3);
    for _ in 0..3 {
        let (v, s) = measure(|| black_box(vec![1u8; 1000]));
        assert_eq!(figures(&s), (1, 1000, 0, 1000, 1000), "{s}");
        drop(v);
        let ((), s) = measure(|| drop(black_box(vec![1u8; 1000])));
        assert_eq!(figures(&s), (1, 1000, 1, 1000, 0), "{s}");
    }
}

/// The peak is the most live at once, not the sum.
#[test]
fn peak_is_the_most_live_at_once() {
    let _noise = Noise::start(2);
    for _ in 0..3 {
        let (kept, s) = measure(|| {
            for _ in 0..10 {
                drop(black_box(vec![0u8; 100]));
            }
            let a = black_box(vec![0u8; 300]);
            let b = black_box(vec![0u8; 200]);
            drop(a);
            b
        });
        assert_eq!(figures(&s), (12, 1500, 11, 500, 200), "{s}");
        drop(kept);
    }
}

/// A reallocation is the free of the old block and the allocation of the new one.
#[test]
fn a_reallocation_is_a_free_and_an_allocation() {
    let (v, s) = measure(|| {
        let mut v: Vec<u8> = Vec::with_capacity(16);
        v.extend_from_slice(&[1; 16]);
        v.reserve_exact(16); // 16 → 32 bytes
        black_box(v)
    });
    assert_eq!((s.blocks, s.bytes, s.frees, s.live_bytes), (2, 48, 1, 32), "{s}");
    drop(v);
}

/// Scopes nest: the inner one's blocks count in the outer one.
#[test]
fn scopes_nest() {
    let (inner, outer) = measure(|| {
        let a = black_box(vec![0u8; 10]);
        let (b, inner) = measure(|| black_box(vec![0u8; 20]));
        drop(a);
        drop(b);
        inner
    });
    assert_eq!(figures(&inner), (1, 20, 0, 20, 20), "{inner}");
    // The inner scope's figures (its naming of sites allocates) are the profiler's own.
    assert_eq!(figures(&outer), (2, 30, 2, 30, 0), "{outer}");
}

/// Blocks allocated by other threads are not the scope's, even when the scope waits for
/// them.
#[test]
fn other_threads_are_not_counted() {
    let ((), s) = measure(|| {
        std::thread::scope(|t| {
            t.spawn(|| black_box(vec![0u8; 5000]));
        });
    });
    assert!(s.bytes < 5000, "{s}");
}

#[inline(never)]
fn leaky_helper() -> usize {
    let v: &'static mut [u8] = Box::leak(vec![7u8; 4096].into_boxed_slice());
    black_box(v).len()
}

#[inline(never)]
fn tidy_helper() -> usize {
    black_box(vec![1u8; 512]).len()
}

/// A leak's failure text names the function that leaked, first.
#[test]
fn a_leak_names_its_site() {
    let (_, s) = measure(|| leaky_helper() + tidy_helper());
    assert_eq!(s.live_bytes, 4096, "{s}");
    let text = s.to_string();
    let first = text.lines().nth(1).unwrap_or_default();
    assert!(first.contains("leaky_helper") && first.contains("4096 bytes live"), "{text}");
    assert!(text.contains("tidy_helper"), "{text}");
    let failed = std::panic::catch_unwind(|| s.assert_no_leak());
    let msg = failed.unwrap_err();
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(msg.starts_with("leaked 4096 bytes: ") && msg.contains("leaky_helper"), "{msg}");
}

/// `assert_no_alloc!` passes what does not allocate and names what does.
#[test]
fn assert_no_alloc_names_the_allocation() {
    let four = memprof::assert_no_alloc!(black_box(2) + black_box(2));
    assert_eq!(four, 4);
    let failed = std::panic::catch_unwind(|| memprof::assert_no_alloc!(tidy_helper()));
    let msg = failed.unwrap_err();
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(msg.contains("`tidy_helper()` allocated: 1 blocks, 512 bytes"), "{msg}");
    assert!(msg.contains("tidy_helper ("), "the site and its line: {msg}");
    let (_, s) = measure(tidy_helper);
    s.assert_at_most(1, 512);
    assert!(std::panic::catch_unwind(|| s.assert_at_most(0, 512)).is_err());
}

/// A panic inside the scope closes it: the next scope counts from zero.
#[test]
fn a_panic_closes_the_scope() {
    let r = std::panic::catch_unwind(|| {
        measure(|| {
            let _v = black_box(vec![0u8; 64]);
            panic!("inside");
        })
    });
    assert!(r.is_err());
    let (_, s) = measure(|| black_box(vec![0u8; 8]));
    assert_eq!((s.blocks, s.bytes), (1, 8), "{s}");
}

/// With a session sampling every thread, the scope's figures are the same, and the
/// session still sees the thread's allocations.
#[test]
fn a_running_session_keeps_sampling() {
    let _noise = Noise::start(2);
    let session = memprof::start(
        memprof::Config { interval: 1.0, ..Default::default() },
        memprof::Recorder::new(),
    );
    let (v, s) = measure(|| black_box(vec![3u8; 777]));
    assert_eq!(figures(&s), (1, 777, 0, 777, 777), "{s}");
    if let Ok(session) = session {
        let recorder = session.stop().unwrap();
        let p = recorder.profile();
        assert!(p.counts.samples > 0);
        assert!(p.allocated.keys().any(|&(_, size)| size == 777), "the session saw the block");
    }
    drop(v);
}

/// Many blocks (the scope's table grows several times), half of them freed inside.
#[test]
fn many_blocks_exactly() {
    let _noise = Noise::start(2);
    let (kept, s) = measure(|| {
        let mut all: Vec<Box<[u8; 24]>> = Vec::with_capacity(100_000);
        for i in 0..100_000u32 {
            all.push(Box::new([i as u8; 24]));
        }
        let kept: Vec<Box<[u8; 24]>> = all.drain(..).step_by(2).collect();
        (kept, all)
    });
    // The two vectors' buffers, the boxes; half the boxes dropped by `step_by`.
    let vec_bytes = 100_000 * std::mem::size_of::<Box<[u8; 24]>>() as u64;
    assert_eq!(s.frees, 50_000, "{s}");
    assert_eq!(s.live_bytes, 50_000 * 24 + vec_bytes + 50_000 * 8, "{s}");
    assert_eq!(s.blocks, 100_000 + 2, "{s}");
    drop(kept);
}
