//! The unit tests' global allocator: the system's, counting the live heap bytes of a
//! *scope* (a test thread and the threads it hands the scope to, [`enter`]) and their
//! peak, so that a test can bound the memory of what it runs while other tests run on
//! their own threads.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

struct Counting;

/// Scopes: index 0 is "not counted".
const SCOPES: usize = 64;
static LIVE: [AtomicI64; SCOPES] = [const { AtomicI64::new(0) }; SCOPES];
static PEAK: [AtomicI64; SCOPES] = [const { AtomicI64::new(0) }; SCOPES];
static NEXT: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static SCOPE: Cell<usize> = const { Cell::new(0) };
}

fn add(n: i64) {
    // `try_with`: a thread's allocations after its TLS is torn down are not counted.
    let scope = SCOPE.try_with(Cell::get).unwrap_or(0);
    if scope != 0 {
        let v = LIVE[scope].fetch_add(n, Ordering::Relaxed) + n;
        PEAK[scope].fetch_max(v, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` with the same arguments; the counting touches
// only a const-initialised thread-local without destructor and static atomics (no
// allocation, no reentry).
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

/// The calling thread's scope (0: none), to hand to a thread it starts.
pub(crate) fn current() -> usize {
    SCOPE.with(Cell::get)
}

/// Counts the calling thread's allocations in `scope` (from [`current`]).
pub(crate) fn enter(scope: usize) {
    SCOPE.with(|s| s.set(scope));
}

/// Runs `f` in a new scope and returns its result and the peak of the scope's live heap
/// bytes (what `f` and the threads it handed the scope to allocated and had not freed).
pub(crate) fn peak_during<R>(f: impl FnOnce() -> R) -> (R, i64) {
    let scope = NEXT.fetch_add(1, Ordering::Relaxed);
    assert!(scope < SCOPES, "too many counting scopes");
    let outer = current();
    enter(scope);
    let r = f();
    enter(outer);
    (r, PEAK[scope].load(Ordering::Relaxed))
}
