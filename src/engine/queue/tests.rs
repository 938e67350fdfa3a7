//! The queue's tests, and the events other modules' tests build.

use super::*;

/// The death at `time` of a block whose every field tells it from another id's.
pub(crate) fn death(epoch: u64, id: u64, time: u64) -> WireEvent {
    let e = Entry::new(id, epoch, !id << 7 | 3, id * 5, id + 24, id % 5 + 1);
    let d = WireEvent::death(&e, time);
    let expected =
        DeathEvent { epoch, id, stack: e.stack, alloc_time: e.time, time, size: e.size, k: e.k };
    assert_eq!(d, WireEvent::Death(expected));
    // Through a slot's words and back, unchanged.
    assert_eq!(through_slot(d, 0), (Some(d), 0));
    d
}

/// A cell's bytes, aligned as the queue's.
#[repr(C, align(128))]
struct CellBytes([u8; 128]);

/// The cell an event leaves when written over bytes all `0xAA`, and what is read back
/// from it: (event, frame count).
fn through_cell(e: WireEvent, nframes: usize) -> (CellBytes, Option<WireEvent>, usize) {
    let mut cell = CellBytes([0xAA; 128]);
    let at = core::mem::offset_of!(SlotHead, event);
    // SAFETY: the `Wire` lies inside the cell at the slot's offset, aligned (the cell is
    // 128-byte aligned, the offset a multiple of 8); every field is an integer.
    let (read, n) = unsafe {
        let w = cell.0.as_mut_ptr().add(at) as *mut Wire;
        Wire::store(w, e, nframes);
        Wire::load(w)
    };
    (cell, read, n)
}

/// What an event is read back as from a slot: (event, frame count).
fn through_slot(e: WireEvent, nframes: usize) -> (Option<WireEvent>, usize) {
    let (_, read, n) = through_cell(e, nframes);
    (read, n)
}

/// Claims the next position of `q` and never publishes it, as a producer stuck inside
/// its push would.
pub(crate) fn claim_without_publishing(q: &Queue) {
    q.ctl().tail.fetch_add(1, Ordering::Relaxed);
}

/// An allocation event of sample `id` (epoch 1, thread 1, 8 bytes) for the tests.
pub(crate) fn ev(id: u64) -> WireEvent {
    WireEvent::Alloc(AllocEvent {
        epoch: 1,
        id,
        thread: 1,
        label: 0,
        time: 0,
        addr: 0,
        size: 8,
        k: 1,
        truncated: false,
        stack: StackRef::Here,
    })
}

/// A queue of `capacity` cells and `depth` frames laid out in a block of its own, and a
/// consumer's handle on it as another process would attach it: (producer, consumer).
pub(crate) fn shared(capacity: usize, depth: usize) -> (Queue, Queue) {
    let bytes = Queue::bytes_for(capacity, depth).unwrap();
    let mem = crate::sys::rawmem::alloc_zeroed(bytes + 127);
    let aligned = ((mem as usize + 127) & !127) as *mut u8;
    // SAFETY: a zeroed block of `bytes` bytes, 128-byte aligned, never freed, used by these
    // two handles only.
    unsafe {
        let producer = Queue::init_in(aligned, bytes, capacity, depth).unwrap();
        (producer, Queue::attach(aligned, bytes).unwrap())
    }
}

/// The sample id of an allocation or a death.
pub(crate) fn id_of(e: &WireEvent) -> u64 {
    match e {
        WireEvent::Alloc(a) => a.id,
        WireEvent::Death(d) => d.id,
        other => panic!("no sample id: {other:?}"),
    }
}

/// Every kind goes through a slot's words and comes back as it was, whatever the slot held
/// before; a slot whose kind is none of ours, or whose flag is no flag, is no event.
#[test]
fn events_survive_the_slot() {
    let alloc = AllocEvent {
        epoch: 3,
        id: 5,
        thread: 7,
        label: 9,
        time: 11,
        addr: 0x1234_5678,
        size: 13,
        k: 15,
        truncated: true,
        stack: StackRef::Here,
    };
    let events = [
        WireEvent::Alloc(alloc),
        WireEvent::Alloc(AllocEvent { stack: StackRef::Kept(0xfeed), ..alloc }),
        WireEvent::Alloc(AllocEvent { stack: StackRef::Sent(0xbeef), truncated: false, ..alloc }),
        death(3, 17, 19),
        WireEvent::Free(FreeEvent { epoch: 3, addr: 0xdead_bee0, time: 21 }),
        WireEvent::Side(SideEvent { epoch: 3, what: 2, word: 23, time: 25 }),
    ];
    for (i, e) in events.into_iter().enumerate() {
        assert_eq!(through_slot(e, i), (Some(e), i));
    }
    let free = WireEvent::Free(FreeEvent { epoch: 3, addr: 8, time: 21 });
    let (mut cell, _, _) = through_cell(free, 0);
    let at = core::mem::offset_of!(SlotHead, event);
    cell.0[at] = 2;
    // SAFETY: as in `through_cell`.
    assert_eq!(unsafe { Wire::load(cell.0.as_ptr().add(at) as *const Wire) }.0, None, "kind 2");
    cell.0[at] = 4;
    cell.0[at + 1] = 2;
    // SAFETY: as above.
    assert_eq!(unsafe { Wire::load(cell.0.as_ptr().add(at) as *const Wire) }.0, None, "flag 2");
}

/// A free writes the first line of its cell only, and reads back from it alone (`event`
/// §1): its second line is never the producer's to send to the consumer's core.
#[test]
fn a_free_is_one_line() {
    let free = WireEvent::Free(FreeEvent { epoch: 9, addr: 0xdead_bee0, time: 21 });
    let (mut cell, read, _) = through_cell(free, 0);
    assert_eq!(read, Some(free));
    assert!(cell.0[64..].iter().all(|&b| b == 0xAA), "the second line was written");
    cell.0[64..].fill(0x55);
    let at = core::mem::offset_of!(SlotHead, event);
    // SAFETY: as in `through_cell`.
    let again = unsafe { Wire::load(cell.0.as_ptr().add(at) as *const Wire) };
    assert_eq!(again, (Some(free), 0), "the second line was read");
}

#[test]
fn fifo_and_full() {
    let q = Queue::new(4, 3).unwrap();
    for i in 0..4 {
        assert!(q.push(&ev(i), &[i as usize, 2, 3, 4]));
    }
    assert!(!q.push(&ev(9), &[]));
    assert_eq!(q.lost(), 1);
    let mut seen = Vec::new();
    q.drain(|e, f| seen.push((id_of(e), f.to_vec()))).unwrap();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[2], (2, vec![2, 2, 3]));
    assert!(q.push(&ev(5), &[]));
}

/// A stamped push publishes what its stamp made of the event, after the frames are in,
/// and says the time it published; a full queue calls no stamp (`push` §2).
#[test]
fn a_stamped_push_publishes_the_stamp() {
    let q = Queue::new(2, 2).unwrap();
    let later = |e: WireEvent| match e {
        WireEvent::Alloc(a) => WireEvent::Alloc(AllocEvent { time: a.time + 1_000, ..a }),
        other => other,
    };
    assert_eq!(q.try_push_stamped(ev(1), &[7, 8], later), Some(ev(1).time() + 1_000));
    assert_eq!(q.try_push_stamped(ev(2), &[], |e| e), Some(ev(2).time()));
    let called = core::cell::Cell::new(false);
    let stamp = |e| {
        called.set(true);
        e
    };
    assert_eq!(q.try_push_stamped(ev(3), &[], stamp), None);
    assert!(!called.get(), "a full queue stamps nothing");
    let mut seen = Vec::new();
    q.drain(|e, f| seen.push((id_of(e), e.time(), f.to_vec()))).unwrap();
    assert_eq!(seen, [(1, ev(1).time() + 1_000, vec![7, 8]), (2, ev(2).time(), vec![])]);
}

#[test]
fn limit_below_the_ring() {
    let q = Queue::new(3, 1).unwrap();
    assert_eq!(q.capacity(), 4);
    for i in 0..3 {
        assert!(q.push(&ev(i), &[]));
    }
    assert!(!q.push(&ev(3), &[]), "capacity 3 holds 3 events");
    q.set_limit(2);
    assert_eq!(q.drain(|_, _| {}), Some(3));
    assert!(q.push(&ev(4), &[]) && q.push(&ev(5), &[]));
    assert!(!q.push(&ev(6), &[]));
    assert_eq!(q.lost(), 2);
    q.set_limit(100);
    assert!(q.push(&ev(7), &[]) && q.push(&ev(8), &[]));
    assert!(!q.push(&ev(9), &[]), "never more than the ring");
}

/// A drain stops at the tail it read when it began: an event pushed while it runs (by a
/// callback, or by another thread) waits for the next drain, whose slot the consumer
/// did not touch before then.
#[test]
fn a_drain_stops_at_the_tail_it_began_with() {
    let q = Queue::new(16, 1).unwrap();
    for i in 0..3 {
        assert!(q.push(&ev(i), &[]));
    }
    let mut seen = Vec::new();
    let n = q.drain(|e, _| {
        seen.push(id_of(e));
        if id_of(e) == 0 {
            assert!(q.push(&ev(10), &[]));
        }
    });
    assert_eq!((n, seen.as_slice()), (Some(3), &[0, 1, 2][..]));
    assert!(q.has_unpublished());
    assert_eq!(q.drain(|e, _| seen.push(id_of(e))), Some(1));
    assert_eq!(seen, [0, 1, 2, 10]);
    assert!(!q.has_unpublished());
}

/// A push interrupted between its claim and its publication (simulated: a slot claimed
/// and named, not published) holds the consumer up; its own thread is told not to wait
/// for room, any other thread is.
#[test]
fn a_queue_held_up_by_this_thread_is_not_waited_for() {
    let q = Queue::new(4, 1).unwrap();
    let pos = q.ctl().tail.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the slot was claimed above (the tail moved past it); only atomics change.
    unsafe { (*q.slot(pos)).owner.store(owner_tag(pos), Ordering::Relaxed) };
    for i in 0..3 {
        assert!(q.push(&ev(i), &[]));
    }
    assert!(!q.push(&ev(9), &[]), "full");
    assert!(q.waits_for_me());
    std::thread::scope(|s| s.spawn(|| assert!(!q.waits_for_me())).join().unwrap());
    // Published: the consumer can go on, so room is worth waiting for.
    // SAFETY: as above.
    unsafe {
        (*q.slot(pos)).seq.store(pos.wrapping_add(1).wrapping_sub(pos & q.mask), Ordering::Release)
    };
    assert!(!q.waits_for_me());
}

/// A slot claimed by another thread that has not named itself yet still holds the
/// name this thread left there a lap earlier: that is no reason not to wait.
#[test]
fn a_name_left_from_an_earlier_lap_is_not_this_threads_claim() {
    let q = Queue::new(4, 1).unwrap();
    for i in 0..4 {
        assert!(q.push(&ev(i), &[]));
    }
    assert_eq!(q.drain(|_, _| {}), Some(4));
    // Another thread claims the next position (the first slot again) and is preempted
    // before it stores its name: the slot names this thread, from the last lap.
    q.ctl().tail.fetch_add(1, Ordering::Relaxed);
    for i in 0..3 {
        assert!(q.push(&ev(i), &[]));
    }
    assert!(!q.push(&ev(9), &[]), "full");
    assert!(!q.waits_for_me(), "the claim is another thread's: room is worth waiting for");
}

/// Frees the ring refused are kept for the consumer up to the table's size, each taken
/// once; past it they are counted as unknown ends; taken entries make room again.
#[test]
fn many_producers_one_consumer() {
    let q = std::sync::Arc::new(Queue::new(1024, 4).unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let q = q.clone();
            std::thread::spawn(move || {
                let mut pushed = 0;
                for i in 0..20_000u64 {
                    let id = t * 1_000_000 + i;
                    while !q.push(&ev(id), &[id as usize]) {
                        std::thread::yield_now();
                    }
                    pushed += 1;
                }
                pushed
            })
        })
        .collect();
    let mut seen = std::collections::HashMap::new();
    let mut total = 0;
    while total < 80_000 {
        q.drain(|e, f| {
            let id = id_of(e);
            assert_eq!(f, &[id as usize]);
            let last = seen.entry(id / 1_000_000).or_insert(-1i64);
            assert!((id % 1_000_000) as i64 > *last, "per-producer order kept");
            *last = (id % 1_000_000) as i64;
            total += 1;
        });
    }
    for t in threads {
        assert_eq!(t.join().unwrap(), 20_000);
    }
    assert_eq!(total, 80_000);
}

/// Events of every depth take their cells, wrap around the ring's end whole, and come
/// back with their frames in order; a full ring refuses an event whose cells do not fit
/// while a smaller one still goes in (§2a).
#[test]
fn events_take_cells_by_depth_and_wrap_whole() {
    use super::cells::{cells_for, FIRST_FRAMES, MORE_FRAMES};
    let depth = FIRST_FRAMES + 3 * MORE_FRAMES;
    let q = Queue::new(16, depth).unwrap();
    assert_eq!((cells_for(0), cells_for(FIRST_FRAMES), cells_for(FIRST_FRAMES + 1)), (1, 1, 2));
    assert_eq!(cells_for(depth), 4);
    let frames = |id: u64, n: usize| (0..n).map(|i| (id as usize) << 16 | i).collect::<Vec<_>>();
    let mut seen = Vec::new();
    let mut next = 0u64;
    // Many laps of mixed depths, drained now and then: every wrap point is crossed.
    for round in 0..200usize {
        for _ in 0..(round % 3 + 1) {
            let n = (next as usize * 7) % (depth + 5);
            if q.push(&ev(next), &frames(next, n)) {
                next += 1;
            } else {
                break;
            }
        }
        if round % 2 == 0 {
            q.drain(|e, f| seen.push((id_of(e), f.to_vec()))).unwrap();
        }
    }
    q.drain(|e, f| seen.push((id_of(e), f.to_vec()))).unwrap();
    assert_eq!(seen.len() as u64, next, "every event pushed came back");
    for (id, f) in &seen {
        let n = (*id as usize * 7) % (depth + 5);
        assert_eq!(f, &frames(*id, n.min(depth)), "event {id}");
    }
    // Full: 15 of 16 cells taken by one-cell events; a four-cell one does not fit, a
    // one-cell one does.
    for i in 0..15 {
        assert!(q.push(&ev(1000 + i), &[]));
    }
    assert!(!q.push(&ev(2000), &frames(2000, depth)));
    assert!(q.push(&ev(2001), &[1]));
    assert!(!q.push(&ev(2002), &[]));
}

/// A consumer in another process takes a frame count that claims cells past the tail as
/// no event: counted lost, nothing read beyond what was published.
#[test]
fn a_frame_count_past_the_tail_is_no_event() {
    let (producer, consumer) = shared(8, 40);
    assert!(producer.push(&ev(1), &[1, 2, 3]));
    // SAFETY: the first cell's head, written by the producer above and not read now.
    unsafe { Wire::set_nframes((*producer.slot(0)).event.get(), 40) };
    let mut seen = 0;
    assert_eq!(consumer.drain(|_, _| seen += 1), Some(0));
    assert_eq!((seen, consumer.lost()), (0, 1));
}

/// A limit below the deepest event's cells (a session's small capacity) lets such an
/// event into an empty ring, and only then (§2a).
#[test]
fn a_deep_event_goes_into_an_empty_ring_whatever_the_limit() {
    let q = Queue::new(2, 64).unwrap();
    let deep: Vec<usize> = (0..64).collect();
    assert!(q.capacity() >= super::cells::cells_for(64));
    assert!(q.push(&ev(1), &deep));
    assert!(!q.push(&ev(2), &[]), "the limit is taken");
    let mut seen = Vec::new();
    q.drain(|e, f| seen.push((id_of(e), f.len()))).unwrap();
    assert_eq!(seen, [(1, 64)]);
    assert!(q.push(&ev(3), &[]) && q.push(&ev(4), &[]));
    assert!(!q.push(&ev(5), &deep), "not into a ring that holds events");
}
