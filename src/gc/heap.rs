//! Blocks, headers, values, chunks and large blocks: the memory layout of the managed heap.
//!
//! # 1. Values
//! A [`Value`] is one machine word. Low bit 1: an immediate integer (`n << 1 | 1`). Low bit
//! 0: the address of field 0 of a block of this heap (never null: fields start as
//! [`Value::UNIT`]). Nothing else is ever stored in a scanned field (no naked pointers).
//!
//! # 2. Headers
//! The word before field 0 is the header: `wosize << 10 | colour << 8 | tag`. `wosize` is
//! the number of fields, the block occupies `wosize + 1` words ("whsize"). Colours:
//! white (unmarked / dead after marking), gray (marked, scan pending after a mark-stack
//! overflow), black (marked), blue (free memory, in a free list or a fragment).
//!
//! # 3. Chunks and large blocks
//! Small blocks live in chunks: word arrays obtained from `std::alloc::System` (never the
//! global allocator, so a `Sampled<System>` global allocator does not count heap memory
//! twice). Every word of a chunk belongs to exactly one block, allocated or free, so a
//! chunk can be walked header to header (sweep, overflow recovery). Large blocks (more than
//! [`MAX_SMALL_WOSIZE`] fields) get their own `System` allocation and are freed by sweep.
//! Nothing ever moves. A block of no field is followed by a padding word (a blue fragment
//! of no field) that sweep keeps with it while it lives, so the headers of live blocks are
//! always at least 16 bytes apart (the marker's reached bits, `gc::mark` §3, tell blocks
//! apart by their header's 16-byte granule).

use core::fmt;

/// Tag at and above which a block's fields are opaque words the collector does not scan.
pub const NO_SCAN_TAG: u8 = 251;
/// Tag of byte strings made by [`Heap::alloc_bytes`](super::Heap::alloc_bytes).
pub const STRING_TAG: u8 = 252;
/// Tag of float arrays made by [`Heap::alloc_floats`](super::Heap::alloc_floats).
pub const DOUBLE_ARRAY_TAG: u8 = 254;

/// Largest number of fields of a block allocated in a chunk; bigger blocks are large.
pub const MAX_SMALL_WOSIZE: usize = 256;

pub(crate) const COLOUR_MASK: u64 = 3 << 8;
pub(crate) const WHITE: u64 = 0;
pub(crate) const GRAY: u64 = 1 << 8;
pub(crate) const BLUE: u64 = 2 << 8;
pub(crate) const BLACK: u64 = 3 << 8;
pub(crate) const WOSIZE_SHIFT: u32 = 10;

/// Builds a header word.
#[inline(always)]
pub(crate) const fn make_header(wosize: usize, colour: u64, tag: u8) -> u64 {
    ((wosize as u64) << WOSIZE_SHIFT) | colour | tag as u64
}

/// Fields of the block with header `hd`.
#[inline(always)]
pub(crate) const fn wosize(hd: u64) -> usize {
    (hd >> WOSIZE_SHIFT) as usize
}

/// Tag of the block with header `hd`.
#[inline(always)]
pub(crate) const fn tag(hd: u64) -> u8 {
    hd as u8
}

/// A tagged word: an immediate integer or a block of a [`Heap`](super::Heap).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Value(pub(crate) usize);

impl Value {
    /// The integer 0, the initial content of every scanned field.
    pub const UNIT: Value = Value(1);

    /// The immediate integer `n` (63 bits; the top bit of `n` is lost).
    #[inline]
    pub const fn int(n: i64) -> Value {
        Value(((n as usize) << 1) | 1)
    }

    /// True for an immediate integer.
    #[inline]
    pub const fn is_int(self) -> bool {
        self.0 & 1 == 1
    }

    /// True for a block pointer.
    #[inline]
    pub const fn is_block(self) -> bool {
        self.0 & 1 == 0
    }

    /// The integer, if this is one.
    #[inline]
    pub const fn as_int(self) -> Option<i64> {
        if self.is_int() {
            Some((self.0 as i64) >> 1)
        } else {
            None
        }
    }

    /// The raw word (for hashing into tables, debugging; a block's word is its address).
    #[inline]
    pub const fn bits(self) -> usize {
        self.0
    }

    /// The address of the block's header (for a block value).
    #[inline(always)]
    pub(crate) fn header_ptr(self) -> *mut u64 {
        (self.0 as *mut u64).wrapping_sub(1)
    }

    /// The address of the block's first field (for a block value).
    #[inline(always)]
    pub(crate) fn fields_ptr(self) -> *mut u64 {
        self.0 as *mut u64
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_int() {
            Some(n) => write!(f, "Int({n})"),
            None => write!(f, "Block({:#x})", self.0),
        }
    }
}

/// A chunk of the small-block heap.
pub(crate) struct Chunk {
    /// First word (a header).
    pub base: *mut u64,
    /// Length in words.
    pub words: usize,
    /// Lowest word offset at which a gray block may sit (`usize::MAX`: none).
    pub pending_lo: usize,
}

/// A large block: its own allocation.
pub(crate) struct Large {
    /// Its header.
    pub hdr: *mut u64,
    /// Whole size in words (header included).
    pub whsize: usize,
}

/// Alignment of chunks and large blocks (a cache line).
pub(crate) const ALIGN: usize = 64;

/// Allocates `words` words from `System`, aligned to a cache line; null on failure.
pub(crate) fn system_alloc(words: usize) -> *mut u64 {
    use std::alloc::{GlobalAlloc, Layout, System};
    let Ok(layout) = Layout::from_size_align(words * 8, ALIGN) else {
        return core::ptr::null_mut();
    };
    // SAFETY: the layout has a non-zero size (callers ask for at least one word).
    unsafe { System.alloc(layout) as *mut u64 }
}

/// Asks for transparent huge pages (`MADV_HUGEPAGE`) for the 2 MiB-aligned part of the
/// `words` words at `base`, a chunk fresh from [`system_alloc`]. Only advice: where the
/// kernel has none to give (or transparent huge pages are off), the chunk keeps 4 KiB pages.
pub(crate) fn advise_huge_pages(base: *mut u64, words: usize) {
    const HUGE: usize = 2 << 20;
    let start = (base as usize).next_multiple_of(HUGE);
    let end = (base as usize + words * 8) & !(HUGE - 1);
    if end > start {
        // SAFETY: [start, end) lies inside the chunk's allocation, which the heap owns;
        // the advice changes no content and no mapping's extent.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// Frees memory from [`system_alloc`].
///
/// # Safety
/// `p` came from `system_alloc(words)` with this `words` and was not freed yet.
pub(crate) unsafe fn system_free(p: *mut u64, words: usize) {
    use std::alloc::{GlobalAlloc, Layout, System};
    // SAFETY: the same layout was valid at allocation (caller's guarantee).
    let layout = unsafe { Layout::from_size_align_unchecked(words * 8, ALIGN) };
    // SAFETY: p came from System.alloc with this layout (caller's guarantee).
    unsafe { System.dealloc(p as *mut u8, layout) }
}
