//! The unit tests' global allocator: the system's, counting each thread's live heap bytes
//! and their peak, so that a test can bound the memory of what it runs on its own thread
//! while other tests run on theirs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn add(n: i64) {
    // `try_with`: a thread's allocations after its TLS is torn down are not counted.
    let _ = LIVE.try_with(|l| {
        let v = l.get() + n;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call is forwarded to `System` with the same arguments; the counting touches
// only const-initialised thread-locals without destructors (no allocation, no reentry).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (the caller upholds `alloc`'s contract).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (i.e. `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's arguments.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            add(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Runs `f` and returns its result and the peak of this thread's live heap bytes above
/// what was live when it started.
pub(crate) fn peak_during<R>(f: impl FnOnce() -> R) -> (R, i64) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = f();
    (r, PEAK.with(Cell::get) - base)
}
