//! The live table's tests: entries round trip, shards, the filter, the frees signal
//! handlers defer.

use super::packed::K_IS_SIZE;
use super::*;

/// A slot gives back the entry it was given: exact (points = size) and sampled, the
/// largest id and size kept, an epoch some sessions back; what does not fit is refused
/// (and left out of the table, as untracked).
#[test]
fn packed_entries_round_trip() {
    let now = crate::engine::sampler::EPOCH.load(Ordering::Relaxed);
    let cases = [
        Entry::new(1, now, u64::MAX, 0, 4096, 4096),
        Entry::new((1 << 48) - 1, now, 7, u64::MAX, (1 << 40) - 1, (1 << 40) - 1),
        Entry::new(42, now.saturating_sub(300), 9, 123, 1 << 30, K_IS_SIZE - 1),
        Entry::new(43, now, 9, 123, 16, 1),
    ];
    for e in cases {
        assert_eq!(Packed::of(&e).map(|p| p.entry()), Some(e));
    }
    let refused = [
        Entry::new(1 << 48, now, 0, 0, 16, 1),
        Entry::new(1, now, 0, 0, 1 << 40, 1),
        Entry::new(1, now, 0, 0, 1 << 35, K_IS_SIZE),
    ];
    for e in refused {
        assert!(Packed::of(&e).is_none(), "{e:?}");
        assert_eq!(insert(0x7777_0000, e), Insert::NoMemory);
        assert_eq!(remove(0x7777_0000), None);
    }
    assert_eq!(size_of::<Slot>(), 40);
}

/// An entry whose every field differs from the same field of another id's, so that a
/// round trip shows the whole entry kept. Its epoch is one no session is behind (the
/// tests run beside sessions, which move the epoch on).
fn entry(id: u64, epoch: u64) -> Entry {
    Entry::new(id, epoch, id ^ 0x5a5a_5a5a_5a5a, id.wrapping_mul(3), id + 16, id % 7 + 1)
}

// The table is process-global; each test uses its own address range.

#[test]
fn insert_remove_many() {
    let base = 0x7000_0000_0000usize;
    for i in 0..10_000usize {
        assert_eq!(insert(base + i * 16, entry(i as u64, 1)), Insert::Done);
    }
    for i in (0..10_000usize).rev() {
        assert_eq!(remove(base + i * 16), Some(entry(i as u64, 1)));
        assert_eq!(remove(base + i * 16), None);
    }
}

#[test]
fn concurrent_reuse() {
    let threads: Vec<_> = (0..4usize)
        .map(|t| {
            std::thread::spawn(move || {
                let base = 0x6000_0000_0000usize + t * 0x1000_0000;
                for round in 0..2_000u64 {
                    for i in 0..50usize {
                        assert_eq!(insert(base + i * 32, entry(round, 1)), Insert::Done);
                    }
                    for i in 0..50usize {
                        assert_eq!(remove(base + i * 32).map(|e| e.id), Some(round));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// An address above `from` whose block falls in shard `shard`. An address's shard goes
/// through the filter's mask, which a session's start sets: a test run alone, with no
/// session before it, sets it here (under a mask of 0 every address is in one shard, and
/// the search would never end).
fn in_shard(shard: usize, from: usize) -> usize {
    filter::ready();
    (0..1 << 20)
        .map(|i| from + i * 16)
        .find(|&a| shard_index(filter_index(a)) == shard)
        .expect("an address in the shard: the filter's mask is set")
}

/// A signal handler that interrupts this thread inside a shard (simulated by calling
/// in from the locked section itself) never waits: its insertion is refused, its
/// removal deferred, and the block taken out once the interrupted section ends.
#[test]
fn same_thread_reentry_never_waits() {
    let a = in_shard(5, 0x5000_0000_0000);
    let b = in_shard(5, a + 16);
    let c = in_shard(5, b + 16);
    assert_eq!(insert(a, entry(1, 0)), Insert::Done);
    assert_eq!(insert(c, entry(3, 0)), Insert::Done);
    let inside = with_shard(5, |_| {
        // The "handler": frees a and c, then allocates b and samples it.
        (remove(a), remove(c), insert(b, entry(2, 0)))
    });
    assert_eq!(inside, Some((None, None, Insert::Reentrant)));
    // The interrupted owner took the deferred blocks out as it released the shard.
    assert!(!TABLE[5].pending.load(Ordering::Relaxed));
    assert_eq!(remove(a), None);
    assert_eq!(remove(c), None);
    assert_eq!(insert(b, entry(2, 0)), Insert::Done);
    assert_eq!(remove(b), Some(entry(2, 0)));
    // A reentrant call on another shard goes through.
    let d = in_shard(6, 0x5100_0000_0000);
    assert_eq!(with_shard(5, |_| insert(d, entry(4, 0))), Some(Insert::Done));
    assert_eq!(remove(d), Some(entry(4, 0)));
}

/// A thread that waits for a shard another holds does not count the wait in a sampled
/// block's life (§4a, `push` §2): an insertion is stamped once it has the lock, a free
/// before it waits for it; errno is kept through the wait. Deterministic: the holder
/// keeps the shard for 50 ms.
#[test]
fn a_wait_for_a_shard_is_the_profilers_time() {
    use crate::engine::clock;
    use std::sync::mpsc;
    let a = in_shard(11, 0x5300_0000_0000);
    let b = in_shard(11, a + 16);
    assert_eq!(insert(b, entry(7, 0)), Insert::Done);
    for freeing in [false, true] {
        let (held, waiting) = (mpsc::channel(), mpsc::channel::<()>());
        let holder = std::thread::spawn(move || {
            with_shard(11, |_| {
                held.0.send(()).unwrap();
                waiting.1.recv().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(50));
                clock::now()
            })
            .unwrap()
        });
        held.1.recv().unwrap();
        waiting.0.send(()).unwrap();
        let before = clock::now();
        // The wait sleeps on a futex, which sets errno (a timeout); a free keeps it.
        crate::sys::errno::set_errno(4242);
        if freeing {
            let freed = remove_freed(b).expect("b is in the table");
            assert_eq!(crate::sys::errno::errno(), 4242, "errno kept through the wait");
            let released = holder.join().unwrap();
            let Freed::Sampled { entry, time } = freed else {
                panic!("a sampled block's free names it: {freed:?}")
            };
            assert!(before <= time && time < released, "{freed:?} {released}");
            assert_eq!(entry.id, 7);
        } else {
            let (done, time) = insert_stamped(a, entry(8, 0));
            let released = holder.join().unwrap();
            assert_eq!(done, Insert::Done);
            assert!(time > released, "stamped at {time}, the holder let go at {released}");
            assert_eq!(remove(a).map(|e| e.time), Some(time));
        }
    }
}

/// Threads that sleep for a shard (§4a) are all woken: eight threads on one shard, each
/// inserting and removing many times, finish, and leave no sleeper counted.
#[test]
fn sleepers_for_a_shard_are_woken() {
    let threads: Vec<_> = (0..8usize)
        .map(|t| {
            std::thread::spawn(move || {
                let mut at = 0x5400_0000_0000usize + t * 0x100_0000;
                let addrs: Vec<usize> = (0..16)
                    .map(|_| {
                        at = in_shard(12, at + 16);
                        at
                    })
                    .collect();
                for round in 0..3_000u64 {
                    for &a in &addrs {
                        assert_eq!(insert(a, entry(round, 1)), Insert::Done);
                    }
                    for &a in &addrs {
                        assert_eq!(remove(a).map(|e| e.id), Some(round));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(TABLE[12].sleepers.load(Ordering::SeqCst), 0);
    assert_eq!(TABLE[12].lock.load(Ordering::SeqCst), 0);
}

/// More deferred frees than slots: the rest stay in the table (and are counted as
/// untracked; the counter is not checked here, since a session started by another test
/// resets it).
#[test]
fn deferred_slots_overflow_is_counted() {
    let mut addrs = Vec::new();
    let mut at = 0x5200_0000_0000;
    for i in 0..DEFERRED + 2 {
        at = in_shard(9, at + 16);
        assert_eq!(insert(at, entry(i as u64, 0)), Insert::Done);
        addrs.push(at);
    }
    let _ = with_shard(9, |_| {
        for &a in &addrs {
            assert_eq!(remove(a), None);
        }
    });
    flush_deferred();
    let left: Vec<_> = addrs.iter().filter_map(|&a| remove(a)).map(|e| e.id).collect();
    assert_eq!(left, [DEFERRED as u64, DEFERRED as u64 + 1]);
}
