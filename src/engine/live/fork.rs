//! The live table around `fork` and a raw `clone`: every shard taken before `fork`, released
//! after it, and reset in a child that no fork handler prepared (`engine::forked`).

use super::*;

/// Takes every shard lock (before `fork`, so the child never inherits a held lock).
pub(crate) fn lock_all() {
    let me = crate::sys::tls::thread_id();
    for shard in TABLE.iter() {
        while shard.lock.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed).is_err() {
            core::hint::spin_loop();
        }
    }
}

/// Releases the locks taken by [`lock_all`], waking a sleeper of each (§4a).
pub(crate) fn unlock_all() {
    for shard in TABLE.iter() {
        shard.lock.swap(0, Ordering::SeqCst);
        if shard.sleepers.load(Ordering::Relaxed) != 0 {
            wake_one(shard);
        }
    }
}

/// [`unlock_all`] in a forked child: the threads the parent counted as sleeping for a
/// shard do not exist here, and a count they left would make every release wake nobody.
pub(crate) fn unlock_all_in_child() {
    for shard in TABLE.iter() {
        shard.sleepers.store(0, Ordering::Relaxed);
    }
    unlock_all();
}

/// True when this thread holds a shard's lock: in a child made by a raw `clone`, only a
/// signal handler that made it inside the table (its interrupted frame still in there)
/// could; [`reset_in_child`] must not run under that frame.
pub(crate) fn held_here() -> bool {
    let me = crate::sys::tls::thread_id();
    TABLE.iter().any(|s| s.lock.load(Ordering::Relaxed) == me)
}

/// In a child made by a raw `clone` (`engine::forked`), which no fork handler prepared:
/// a shard's lock may be held by a thread the child lacks, with its table in the middle of
/// an update. Such a table is forgotten (its pages stay mapped, unused) and its lock
/// released; every shard forgets its sleepers and deferred frees (their threads and
/// handlers are the parent's). Then [`clear`] empties the rest, and sweeps the counters of
/// the forgotten entries from the filter. Only with this thread alone in the process and
/// holding no shard ([`held_here`] false).
pub(crate) fn reset_in_child() {
    let mut forgot = false;
    for shard in TABLE.iter() {
        shard.sleepers.store(0, Ordering::Relaxed);
        if shard.lock.load(Ordering::Relaxed) != 0 {
            // SAFETY: the lock's holder is a thread this process does not have, and this
            // one does not hold it: nothing else can touch the table.
            unsafe { *shard.table.get() = Table::EMPTY };
            forgot = true;
            shard.lock.store(0, Ordering::Release);
        }
        for d in &shard.deferred {
            d.addr.store(0, Ordering::Relaxed);
        }
        shard.pending.store(false, Ordering::Relaxed);
    }
    if forgot {
        // The forgotten entries' counters are swept by `clear` (only an unmarked shard's).
        SATURATED.store(true, Ordering::Relaxed);
    }
    clear();
}
