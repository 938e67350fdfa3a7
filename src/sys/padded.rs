//! [`Padded`]: a value alone on its cache lines.
//!
//! The sample path reads a handful of globals on every allocation (the sampler's epoch, the
//! queue, the clock's calibration) while the drain thread writes others on every event it
//! hands over (delivery counters, the driver's lock). Placed side by side by the linker,
//! they would share cache lines, and every write on the drain thread's core would cost the
//! allocating thread a miss on a line it only reads (unpadded, those misses took a
//! large share of `record_alloc`'s time while a drain thread ran). Globals written often are therefore padded, and so are the
//! hottest read-only ones.

/// A value alone on its cache lines (two: the adjacent-line prefetcher pairs them). Derefs
/// to the value, which is at offset 0.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub(crate) T);

impl<T> Padded<T> {
    /// Wraps `value`.
    pub const fn new(value: T) -> Self {
        Padded(value)
    }
}

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
