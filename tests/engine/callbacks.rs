//! The tracker contract: tokens, reallocations, reentrancy, panics, lost events, one session at a
//! time, the drain thread.
use super::*;
use memprof::{Allocation, Deallocation, Error, SessionCounters, Tracker};
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
    stopped: Option<SessionCounters>,
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

    fn stopped(&mut self, stats: &SessionCounters) {
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
                    let birth =
                        log.events.iter().find(|e| matches!(e, Ev::Alloc { id, .. } if *id == n));
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
        memprof::start(Config { queue_capacity: 2, ..Config::exact() }, Log::default()).unwrap();
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
        memprof::start(Config { drain_thread: true, ..Config::exact() }, Log::default()).unwrap();
    let mut last = SessionCounters::default();
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
