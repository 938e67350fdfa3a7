//! The allocating thread's label: one thread-local word that the sampled slow path copies
//! into its event, and nothing else reads.
//!
//! A label is an id that code outside the allocator interned (`memprof::tracing`'s span
//! layer, through `crate::session::label`): the path of the tracing spans entered on the
//! thread, 0 for none. The layer writes the word in user context when a span is entered or
//! left; the sample path ([`crate::engine::sample_path`]) reads it once per *sampled* allocation,
//! so the unsampled fast path does not change, and the word is a plain `Cell` in the same
//! kind of per-thread block as the sampler's (initial-exec TLS with `static-tls`): reading
//! it takes no lock, allocates nothing and cannot fail. A signal handler's sample reads the
//! label of the code it interrupted, which is the thread's.

use core::cell::Cell;

crate::sys::tls::thread_block! {
    /// This thread's label id (0: none).
    fn slot() -> Cell<u32> = Cell::new(0), "memprof_0_1_label"
}

/// The calling thread's label (0: none). One thread-local load.
#[inline(always)]
pub(crate) fn current() -> u32 {
    // SAFETY: `slot()` is this thread's block, valid until the thread exits; the reference
    // never leaves this call and the field is a cell.
    unsafe { &*slot() }.get()
}

/// Sets the calling thread's label (outside the allocator: the span layer).
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
#[inline]
pub(crate) fn set(label: u32) {
    // SAFETY: as in `current`.
    unsafe { &*slot() }.set(label)
}
