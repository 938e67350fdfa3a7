//! The capture buffer: return addresses in a 32-entry inline array that moves to a doubling
//! buffer from `sys::rawmem` (never the profiled allocator) for deeper stacks.

use core::mem::MaybeUninit;

/// Frames kept inline before the buffer moves to the heap.
pub const INLINE_FRAMES: usize = 32;

/// Copies `n` words one at a time. The sample path copies a few frames at a time (ten at
/// statmemprof's depth), where a call to `memcpy` costs more than the copy, and its wide
/// loads of words just stored one by one miss store forwarding.
///
/// # Safety
/// `src` is valid for `n` reads and `dst` for `n` writes, and they do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_words(dst: *mut usize, src: *const usize, n: usize) {
    for i in 0..n {
        // SAFETY: i < n (the caller's guarantee). The volatile store keeps the compiler
        // from turning the loop back into a `memcpy` call.
        unsafe { dst.add(i).write_volatile(src.add(i).read()) };
    }
}

/// A captured call stack: return addresses, innermost first.
pub struct Captured {
    /// The first `len` entries are initialised while `heap` is null (not zeroed at
    /// creation: a capture per sample would pay for it).
    pub(super) inline: [MaybeUninit<usize>; INLINE_FRAMES],
    pub(super) heap: *mut usize,
    pub(super) cap: usize,
    pub(super) len: usize,
    pub(super) truncated: bool,
}

impl Default for Captured {
    fn default() -> Self {
        Self::new()
    }
}

impl Captured {
    /// An empty buffer with the inline capacity. The inline entries are left unwritten
    /// (a struct literal would be compiled to a `memset` of all 264 bytes, per sample).
    #[inline(always)]
    pub fn new() -> Self {
        let mut c = MaybeUninit::<Captured>::uninit();
        let p = c.as_mut_ptr();
        // SAFETY: every field but `inline` is written; `inline` is an array of
        // `MaybeUninit`, valid in any state, so the whole struct is initialised.
        unsafe {
            core::ptr::addr_of_mut!((*p).heap).write(core::ptr::null_mut());
            core::ptr::addr_of_mut!((*p).cap).write(INLINE_FRAMES);
            core::ptr::addr_of_mut!((*p).len).write(0);
            core::ptr::addr_of_mut!((*p).truncated).write(false);
            c.assume_init()
        }
    }

    /// The frames, innermost first.
    pub fn frames(&self) -> &[usize] {
        if self.heap.is_null() {
            // SAFETY: with no heap buffer, the first `len` inline entries were written.
            unsafe { core::slice::from_raw_parts(self.inline.as_ptr() as *const usize, self.len) }
        } else {
            // SAFETY: `heap` holds `cap >= len` initialised entries written by `push`.
            unsafe { core::slice::from_raw_parts(self.heap, self.len) }
        }
    }

    /// True when the stack was deeper than the requested depth.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Appends a frame, doubling the buffer when full. Returns false when it cannot grow.
    #[inline]
    pub(super) fn push(&mut self, ip: usize) -> bool {
        if self.len == self.cap && !self.grow() {
            return false;
        }
        if self.heap.is_null() {
            self.inline[self.len] = MaybeUninit::new(ip);
        } else {
            // SAFETY: len < cap and `heap` has room for `cap` entries.
            unsafe { self.heap.add(self.len).write(ip) };
        }
        self.len += 1;
        true
    }

    #[cold]
    fn grow(&mut self) -> bool {
        let new_cap = self.cap * 2;
        let Some(bytes) = new_cap.checked_mul(core::mem::size_of::<usize>()) else {
            return false;
        };
        let new = crate::sys::rawmem::alloc(bytes) as *mut usize;
        if new.is_null() {
            return false;
        }
        let old = self.frames();
        // SAFETY: `new` has room for new_cap > len entries; the regions do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(old.as_ptr(), new, self.len) };
        if !self.heap.is_null() {
            // SAFETY: `heap` came from rawmem::alloc and is replaced below.
            unsafe { crate::sys::rawmem::free(self.heap as *mut u8) };
        }
        self.heap = new;
        self.cap = new_cap;
        true
    }

    /// Empties the buffer and returns it to its inline storage.
    #[inline(always)]
    pub(super) fn clear(&mut self) {
        if !self.heap.is_null() {
            self.free_heap();
        }
        self.len = 0;
        self.truncated = false;
    }

    /// Gives back a buffer that outgrew the inline storage (deep stacks only).
    #[cold]
    #[inline(never)]
    fn free_heap(&mut self) {
        // SAFETY: `heap` came from rawmem::alloc and is not referenced after this.
        unsafe { crate::sys::rawmem::free(self.heap as *mut u8) };
        self.heap = core::ptr::null_mut();
        self.cap = INLINE_FRAMES;
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        if !self.heap.is_null() {
            // SAFETY: `heap` came from rawmem::alloc and is freed once.
            unsafe { crate::sys::rawmem::free(self.heap as *mut u8) };
        }
    }
}
