//! The queue's table of frees (§3 of the queue's notes): frees the ring refused, kept for the
//! consumer to replay, and frees a sampled session defers to it instead of waiting for room.
//! Claimed and published by a compare-and-swap on each entry's state word, on both sides.

use super::{Entry, Queue, WireEvent, CTL_HEAD_BYTES};
use core::sync::atomic::{AtomicU64, Ordering};

/// Entries of the lost-free table (§3), a power of two. At 64 bytes each the table takes
/// 64 KiB of the block, touched only when frees are lost; it holds the frees refused
/// between two passes of a consumer that fell behind for a second or two.
pub const LOST_FREES: usize = 1024;

/// [`LostFree::state`]: nothing here.
const FREE_EMPTY: u64 = 0;
/// [`LostFree::state`]: a producer is writing the entry.
const FREE_WRITING: u64 = 1;
/// [`LostFree::state`]: written, waiting for the consumer.
const FREE_PUBLISHED: u64 = 2;
/// [`LostFree::state`]: a consumer is reading the entry.
const FREE_TAKING: u64 = 3;
/// [`LostFree::state`]: written, waiting for the consumer, and a free named by its address
/// (a [`WireEvent::Free`], `live` §6) rather than a death.
const FREE_PUBLISHED_UNNAMED: u64 = 4;

/// One entry of the lost-free table: a free the ring refused. Atomics only (the table may
/// be shared with another process), zero (empty) in a fresh block.
#[repr(C)]
pub(super) struct LostFree {
    state: AtomicU64,
    epoch: AtomicU64,
    id: AtomicU64,
    time: AtomicU64,
    /// The block as a death names it ([`super::DeathEvent`]: for an unnamed free, `alloc`
    /// holds the block's address and the rest is 0).
    stack: AtomicU64,
    alloc: AtomicU64,
    size: AtomicU64,
    k: AtomicU64,
}

impl Queue {
    fn lost_free(&self, i: usize) -> &LostFree {
        // SAFETY: the table of LOST_FREES entries lies between the counters and the slots
        // of a block that outlives the handle (see the constructors and `CTL_BYTES`); a
        // zeroed entry is a valid, empty one.
        unsafe { &*((self.ctl as *const u8).add(CTL_HEAD_BYTES) as *const LostFree).add(i) }
    }

    /// Keeps a free the ring refused (`death`, a `Dealloc` event) for the consumer to
    /// replay (§3). False when the table is full: the
    /// free is then counted as one of [`Queue::frees_unknown`]. Lock-free, async-signal-safe,
    /// no allocation; called only after a push failed.
    #[cold]
    #[inline(never)]
    pub fn keep_lost_free(&self, death: &WireEvent) -> bool {
        if self.put_free(death) {
            return true;
        }
        self.ctl().frees_unknown.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Puts a free that found the ring full into the table at once, instead of waiting for
    /// room (§3): false when the table is full (nothing is counted then). Not a loss: the
    /// consumer replays it at its own time. Lock-free, async-signal-safe, no allocation.
    #[cold]
    #[inline(never)]
    pub fn defer_free(&self, death: &WireEvent) -> bool {
        if !self.put_free(death) {
            return false;
        }
        self.ctl().frees_deferred.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Frees deferred to the table ([`Queue::defer_free`]) since the queue was made: among
    /// the consumer's replays, and not among [`Queue::lost`].
    pub fn frees_deferred(&self) -> u64 {
        self.ctl().frees_deferred.load(Ordering::Relaxed)
    }

    /// Writes `death` (a death or a free) into a free entry of the table; false when every
    /// entry is taken.
    fn put_free(&self, death: &WireEvent) -> bool {
        // The entry's words: (state, epoch, id, time, stack, alloc, size, k).
        let words = match *death {
            WireEvent::Death(d) => {
                [FREE_PUBLISHED, d.epoch, d.id, d.time, d.stack, d.alloc_time, d.size, d.k]
            }
            WireEvent::Free(f) => {
                [FREE_PUBLISHED_UNNAMED, f.epoch, 0, f.time, 0, f.addr as u64, 0, 0]
            }
            WireEvent::Alloc(_) | WireEvent::Side(_) => return false,
        };
        let c = self.ctl();
        if c.lost_frees_waiting.load(Ordering::Relaxed) < LOST_FREES {
            let start = c.lost_frees_hint.fetch_add(1, Ordering::Relaxed);
            for i in 0..LOST_FREES {
                let e = self.lost_free(start.wrapping_add(i) & (LOST_FREES - 1));
                if e.state.load(Ordering::Relaxed) != FREE_EMPTY
                    || e.state
                        .compare_exchange(
                            FREE_EMPTY,
                            FREE_WRITING,
                            Ordering::Acquire,
                            Ordering::Relaxed,
                        )
                        .is_err()
                {
                    continue;
                }
                let [state, epoch, id, time, stack, alloc, size, k] = words;
                e.epoch.store(epoch, Ordering::Relaxed);
                e.id.store(id, Ordering::Relaxed);
                e.time.store(time, Ordering::Relaxed);
                e.stack.store(stack, Ordering::Relaxed);
                e.alloc.store(alloc, Ordering::Relaxed);
                e.size.store(size, Ordering::Relaxed);
                e.k.store(k, Ordering::Relaxed);
                e.state.store(state, Ordering::Release);
                c.lost_frees_waiting.fetch_add(1, Ordering::Release);
                return true;
            }
        }
        false
    }

    /// Takes the frees kept in the lost-free table (§3) and runs `f` on each (a death or a
    /// free, as it was refused), in no particular order. The consumer replays each once the block's allocation
    /// has been delivered (it may still wait in the ring, behind a slot not yet published).
    pub fn take_lost_frees(&self, mut f: impl FnMut(&WireEvent)) {
        let c = self.ctl();
        if c.lost_frees_waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        for i in 0..LOST_FREES {
            let e = self.lost_free(i);
            let state = e.state.load(Ordering::Relaxed);
            if !matches!(state, FREE_PUBLISHED | FREE_PUBLISHED_UNNAMED)
                || e.state
                    .compare_exchange(state, FREE_TAKING, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            if state == FREE_PUBLISHED_UNNAMED {
                let free = WireEvent::Free(super::FreeEvent {
                    epoch: e.epoch.load(Ordering::Relaxed),
                    addr: e.alloc.load(Ordering::Relaxed) as usize,
                    time: e.time.load(Ordering::Relaxed),
                });
                e.state.store(FREE_EMPTY, Ordering::Release);
                c.lost_frees_waiting.fetch_sub(1, Ordering::Relaxed);
                f(&free);
                continue;
            }
            let entry = Entry::new(
                e.id.load(Ordering::Relaxed),
                e.epoch.load(Ordering::Relaxed),
                e.stack.load(Ordering::Relaxed),
                e.alloc.load(Ordering::Relaxed),
                e.size.load(Ordering::Relaxed),
                e.k.load(Ordering::Relaxed),
            );
            let death = WireEvent::death(&entry, e.time.load(Ordering::Relaxed));
            e.state.store(FREE_EMPTY, Ordering::Release);
            c.lost_frees_waiting.fetch_sub(1, Ordering::Relaxed);
            f(&death);
        }
    }

    /// Frees refused while the lost-free table was full, since the queue was made: blocks
    /// whose end is unknown (§3). They are among [`Queue::lost`].
    pub fn frees_unknown(&self) -> u64 {
        self.ctl().frees_unknown.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;

    #[test]
    fn lost_frees_are_kept_until_the_table_is_full() {
        let q = Queue::new(2, 1).unwrap();
        for i in 0..LOST_FREES as u64 {
            assert!(q.keep_lost_free(&death(7, i, 1000 + i)), "entry {i}");
        }
        assert!(!q.keep_lost_free(&death(7, 9999, 1)), "full");
        assert!(!q.keep_lost_free(&death(7, 9998, 1)), "still full");
        assert_eq!(q.frees_unknown(), 2);
        let mut taken = Vec::new();
        q.take_lost_frees(|e| taken.push(*e));
        taken.sort_unstable_by_key(id_of);
        let all: Vec<_> = (0..LOST_FREES as u64).map(|i| death(7, i, 1000 + i)).collect();
        assert_eq!(taken, all, "every kept free, once, whole");
        q.take_lost_frees(|e| panic!("{} taken twice", id_of(e)));
        assert!(q.keep_lost_free(&death(8, 5, 6)), "room again");
        let mut again = Vec::new();
        q.take_lost_frees(|e| again.push(*e));
        assert_eq!(again, [death(8, 5, 6)]);
        assert_eq!(q.frees_unknown(), 2);
    }

    /// A consumer in another process (attached to the same block) sees the kept frees.
    #[test]
    fn lost_frees_reach_an_attached_consumer() {
        let (producer, consumer) = shared(4, 1);
        assert!(producer.keep_lost_free(&death(1, 42, 43)));
        let mut seen = Vec::new();
        consumer.take_lost_frees(|e| seen.push(*e));
        assert_eq!(seen, [death(1, 42, 43)]);
    }

    /// A free named by its address (`live` §6) is kept and taken back as one.
    #[test]
    fn an_unnamed_free_is_kept_as_it_was() {
        let q = Queue::new(2, 1).unwrap();
        let free = WireEvent::Free(FreeEvent { epoch: 4, addr: 0x7f00_1230, time: 99 });
        assert!(q.keep_lost_free(&free));
        assert!(q.defer_free(&death(4, 1, 100)));
        assert!(!q.keep_lost_free(&ev(3)), "an allocation is no free");
        let mut seen = Vec::new();
        q.take_lost_frees(|e| seen.push(*e));
        seen.sort_unstable_by_key(|e| e.time());
        assert_eq!(seen, [free, death(4, 1, 100)]);
    }
}
