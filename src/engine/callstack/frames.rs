//! The capture buffer: return addresses in a 32-entry inline array that moves to a larger
//! buffer for deeper stacks.
//!
//! The larger buffers come from `mmap` ([`crate::sys::rawmem::map`]), never from an
//! allocator: not the profiled one, and not glibc's either, whose arena lock the sample
//! path would then hold where a signal handler on the same thread may call `malloc` (see
//! `sample_path` §1). A mapping per deep capture would cost two system calls, so [`POOL`] keeps
//! [`POOL_SLOTS`] buffers, mapped on first use and never unmapped: a capture takes a free
//! one with an atomic swap (as the DWARF unwinder takes its caches) and gives it back when
//! done. With every slot taken it maps a private buffer and unmaps it afterwards. Nested
//! captures on one thread never happen (the sampler's busy flag), so a slot is never
//! waited for.

use core::mem::{size_of, MaybeUninit};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// A 64-bit key of a call stack (its frames, innermost first, and whether it was cut at
/// the depth), computed on the sample path and kept in the live table with the block
/// (`live` §5), so that a block's free names its stack without the consumer keeping a map
/// of live blocks: `memprof record`'s collector computes the same key from the frames the
/// allocation's event carried and finds the stack by it. Every frame counts (two stacks
/// of an interpreter often differ only far from the allocation). Two lanes of
/// multiply-rotate, so that the multiplies of neighbouring frames overlap: the sample path
/// pays about a cycle and a half per frame. Not a defence against a hostile program,
/// which can make its own keys collide anyway: a consumer that finds several stacks under
/// one key tells them apart by what is live (`record/command/collect/deliver.rs` §5).
#[inline]
pub fn key(frames: &[usize], truncated: bool) -> u64 {
    const M0: u64 = 0x9e37_79b9_7f4a_7c15;
    const M1: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let mut a = M1 ^ frames.len() as u64;
    let mut b = M0 ^ u64::from(truncated);
    let mut pairs = frames.chunks_exact(2);
    for p in &mut pairs {
        a = (a ^ p[0] as u64).wrapping_mul(M0).rotate_left(31);
        b = (b ^ p[1] as u64).wrapping_mul(M1).rotate_left(27);
    }
    if let [last] = pairs.remainder() {
        a = (a ^ *last as u64).wrapping_mul(M0).rotate_left(31);
    }
    let h = (a ^ b.rotate_left(32)).wrapping_mul(M0);
    h ^ (h >> 29)
}

/// True when `stored` (a stack's frames as a profile keeps them) and `frames` (as captured)
/// are the same words: one comparison of memory on a 64-bit target, where a `usize` is a
/// `u64` (a recorder compares every sample's frames with its interned stack's).
pub(crate) fn same_words(stored: &[u64], frames: &[usize]) -> bool {
    #[cfg(target_pointer_width = "64")]
    {
        // SAFETY: on a 64-bit target `usize` and `u64` have the same size and alignment and
        // every bit pattern is a valid value of both: the same memory, read as as many u64s.
        let words =
            unsafe { core::slice::from_raw_parts(frames.as_ptr() as *const u64, frames.len()) };
        stored == words
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        stored.len() == frames.len() && stored.iter().zip(frames).all(|(&x, &y)| x == y as u64)
    }
}

/// Deep-stack buffers kept for reuse.
const POOL_SLOTS: usize = 16;

/// A pooled buffer: taken by one capture at a time.
#[repr(align(64))]
struct PoolSlot {
    taken: AtomicBool,
    buf: AtomicPtr<usize>,
    /// Words in `buf`.
    cap: AtomicUsize,
}

static POOL: [PoolSlot; POOL_SLOTS] = [const {
    PoolSlot {
        taken: AtomicBool::new(false),
        buf: AtomicPtr::new(core::ptr::null_mut()),
        cap: AtomicUsize::new(0),
    }
}; POOL_SLOTS];

/// Maps a buffer of at least `words` words (whole pages); returns it and its words.
fn map_words(words: usize) -> Option<(*mut usize, usize)> {
    let page = 4096usize;
    let bytes = words.checked_mul(size_of::<usize>())?.checked_add(page - 1)? & !(page - 1);
    // mmap sets errno when it fails; the sample path keeps the program's.
    let saved = crate::sys::errno::SavedErrno::save();
    let p = crate::sys::rawmem::map(bytes) as *mut usize;
    saved.restore();
    (!p.is_null()).then_some((p, bytes / size_of::<usize>()))
}

/// Unmaps a buffer from [`map_words`].
///
/// # Safety
/// `p` came from `map_words` with `words` words and is not used afterwards.
unsafe fn unmap_words(p: *mut usize, words: usize) {
    // SAFETY: the caller's contract.
    unsafe { crate::sys::rawmem::unmap(p as *mut u8, words * size_of::<usize>()) };
}

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
    /// The pool slot `heap` belongs to, or null for a private mapping (§ module docs).
    slot: *const PoolSlot,
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
            core::ptr::addr_of_mut!((*p).slot).write(core::ptr::null());
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

    /// [`Captured::push`] for a caller outside the unwinders (a stack rebuilt with an
    /// interpreter's frames, `engine::python`).
    #[inline]
    pub(crate) fn push_frame(&mut self, ip: usize) -> bool {
        self.push(ip)
    }

    /// Says whether the stack was cut at the requested depth.
    pub(crate) fn set_truncated(&mut self, truncated: bool) {
        self.truncated = truncated;
    }

    #[cold]
    fn grow(&mut self) -> bool {
        let Some(want) = self.cap.checked_mul(2) else {
            return false;
        };
        if self.heap.is_null() {
            if let Some(slot) = POOL.iter().find(|s| {
                !s.taken.load(Ordering::Relaxed) && !s.taken.swap(true, Ordering::Acquire)
            }) {
                if slot.cap.load(Ordering::Relaxed) < want && !Self::regrow(slot, want, 0) {
                    slot.taken.store(false, Ordering::Release);
                    return false;
                }
                let buf = slot.buf.load(Ordering::Relaxed);
                // SAFETY: the slot's buffer holds at least `want` > len words and is this
                // capture's until it gives the slot back; the inline entries up to len
                // were written.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        self.inline.as_ptr() as *const usize,
                        buf,
                        self.len,
                    )
                };
                self.heap = buf;
                self.cap = slot.cap.load(Ordering::Relaxed);
                self.slot = slot;
                return true;
            }
        } else if !self.slot.is_null() {
            // SAFETY: `slot` points into the static pool.
            let slot = unsafe { &*self.slot };
            if !Self::regrow(slot, want, self.len) {
                return false;
            }
            self.heap = slot.buf.load(Ordering::Relaxed);
            self.cap = slot.cap.load(Ordering::Relaxed);
            return true;
        }
        // No pool slot: a private mapping.
        let Some((new, cap)) = map_words(want) else {
            return false;
        };
        let old = self.frames();
        // SAFETY: `new` has room for cap >= want > len entries; the regions do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(old.as_ptr(), new, self.len) };
        if !self.heap.is_null() {
            // SAFETY: a private `heap` came from map_words with `cap` words, replaced below.
            unsafe { unmap_words(self.heap, self.cap) };
        }
        self.heap = new;
        self.cap = cap;
        true
    }

    /// Replaces the buffer of `slot` (taken by the caller) with one of at least `want`
    /// words, keeping its first `keep` words.
    #[cold]
    fn regrow(slot: &PoolSlot, want: usize, keep: usize) -> bool {
        let Some((new, cap)) = map_words(want) else {
            return false;
        };
        let old = slot.buf.load(Ordering::Relaxed);
        if !old.is_null() {
            // SAFETY: the old buffer holds at least `keep` words; the new one `cap` >= keep;
            // they do not overlap. The slot is taken, so nobody else uses either.
            unsafe {
                core::ptr::copy_nonoverlapping(old, new, keep);
                unmap_words(old, slot.cap.load(Ordering::Relaxed));
            }
        }
        slot.buf.store(new, Ordering::Relaxed);
        slot.cap.store(cap, Ordering::Relaxed);
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

    /// Gives back a buffer that outgrew the inline storage (deep stacks only): a pool
    /// slot is released, a private mapping unmapped.
    #[cold]
    #[inline(never)]
    fn free_heap(&mut self) {
        if self.slot.is_null() {
            // SAFETY: a private `heap` came from map_words with `cap` words and is not
            // referenced after this.
            unsafe { unmap_words(self.heap, self.cap) };
        } else {
            // SAFETY: `slot` points into the static pool; this capture took it.
            unsafe { (*self.slot).taken.store(false, Ordering::Release) };
            self.slot = core::ptr::null();
        }
        self.heap = core::ptr::null_mut();
        self.cap = INLINE_FRAMES;
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        if !self.heap.is_null() {
            self.free_heap();
        }
    }
}

/// In a forked child, whose only thread is the one that called `fork`: no other thread
/// holds a pool slot any more.
pub(super) fn fork_child() {
    for slot in &POOL {
        slot.taken.store(false, Ordering::Release);
    }
}
