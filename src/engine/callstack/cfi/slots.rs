//! The pool of unwinding caches (`cfi` §3): framehop's cache and the compiled rules, a
//! pair a slot, allocated once and never freed; a walk takes a slot with one atomic swap
//! and never waits for one.

use super::rules::{Rule, Rules, RULES};
use super::table::Cache;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// Caches in the pool.
pub(super) const SLOTS: usize = 8;

/// Each on its own cache lines: threads that sample at once take different slots, and
/// neither they nor the table's readers share a line with another's flag.
#[repr(align(128))]
pub(super) struct Slot {
    pub(super) taken: AtomicBool,
    pub(super) cache: AtomicPtr<Cache>,
    pub(super) rules: AtomicPtr<Rules>,
}

pub(super) static POOL: [Slot; SLOTS] = [const {
    Slot {
        taken: AtomicBool::new(false),
        cache: AtomicPtr::new(core::ptr::null_mut()),
        rules: AtomicPtr::new(core::ptr::null_mut()),
    }
}; SLOTS];

/// Allocates every slot's caches that are not yet (off the sample path).
pub(super) fn allocate() {
    for slot in &POOL {
        if slot.rules.load(Ordering::Acquire).is_null() {
            let rules =
                Box::into_raw(Box::new(Rules { generation: 0, entries: [Rule::EMPTY; RULES] }));
            if slot
                .rules
                .compare_exchange(core::ptr::null_mut(), rules, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: `rules` came from Box::into_raw above and was never published.
                drop(unsafe { Box::from_raw(rules) });
            }
        }
        if slot.cache.load(Ordering::Acquire).is_null() {
            let cache = Box::into_raw(Box::new(Cache::new_in()));
            if slot
                .cache
                .compare_exchange(core::ptr::null_mut(), cache, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: `cache` came from Box::into_raw above and was never published.
                drop(unsafe { Box::from_raw(cache) });
            }
        }
    }
}

/// Takes a cache from the pool; `key` spreads threads over the slots.
#[inline]
pub(super) fn take_slot(key: usize) -> Option<&'static Slot> {
    let first = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) % SLOTS;
    for i in 0..SLOTS {
        let slot = &POOL[(first + i) % SLOTS];
        if !slot.taken.load(Ordering::Relaxed) && !slot.taken.swap(true, Ordering::Acquire) {
            return Some(slot);
        }
    }
    None
}
