//! Memory for the profiler's own bookkeeping, taken from glibc's allocator directly.
//!
//! The profiler must never allocate through the allocator it profiles: under
//! `Sampled<A>` that would recurse into the sampler, and under the preload library `malloc`
//! *is* the profiler. glibc exports its allocator under a second set of names
//! (`__libc_malloc`, `__libc_free`) that no interposer replaces: the event queue, made at
//! a session's start, comes from there ([`alloc_zeroed`]).
//!
//! What the sample path itself allocates (the live table's growth, deep call-stack
//! buffers) comes from [`map`] instead: `mmap` takes no lock of glibc's, so a signal
//! handler that interrupts the profiler there and calls `malloc` never finds glibc's arena
//! locked by its own thread.

use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Bytes mapped by [`map`] and not unmapped (less the reserves of [`map_reserving`]):
/// memprof's own memory in the process, which a reading of its resident memory counts
/// beside the program's.
static MAPPED: AtomicU64 = AtomicU64::new(0);

/// Where [`MAPPED`] is copied at each change, when set: the shared ring's header, which
/// `memprof record`'s collector reads from outside the process.
static MAPPED_SINK: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());

/// Copies the mapped bytes to `sink` from now on (null: nowhere), and now.
///
/// # Safety
/// A non-null `sink` stays valid as long as it is set (the ring's header is mapped until
/// the process ends, or until it is replaced here).
pub(crate) unsafe fn copy_mapped_to(sink: *mut AtomicU64) {
    MAPPED_SINK.store(sink, Ordering::Release);
    // SAFETY: the caller guarantees a non-null sink is valid.
    if let Some(s) = unsafe { sink.as_ref() } {
        s.store(MAPPED.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Bytes mapped by [`map`] and not unmapped, less the reserves of [`map_reserving`].
pub(crate) fn mapped() -> u64 {
    MAPPED.load(Ordering::Relaxed)
}

/// Adds `delta` bytes (two's complement for a removal) to [`MAPPED`] and copies it.
fn count_mapped(delta: u64) {
    let now = MAPPED.fetch_add(delta, Ordering::Relaxed).wrapping_add(delta);
    // SAFETY: a non-null sink is valid while set (`copy_mapped_to`).
    if let Some(s) = unsafe { MAPPED_SINK.load(Ordering::Acquire).as_ref() } {
        s.store(now, Ordering::Relaxed);
    }
}

extern "C" {
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
}

/// Allocates `bytes` of zeroed memory, or returns null.
pub(crate) fn alloc_zeroed(bytes: usize) -> *mut u8 {
    // SAFETY: __libc_calloc has no preconditions; a null return is passed on.
    unsafe { __libc_calloc(1, bytes) as *mut u8 }
}

/// Maps `bytes` of zeroed memory straight from the kernel (no lock of glibc's, see the
/// module documentation), or returns null. May set errno when it fails.
pub(crate) fn map(bytes: usize) -> *mut u8 {
    map_reserving(bytes, 0)
}

/// [`map`], with the first `reserve` bytes left out of [`mapped`]: memory mapped in case,
/// which the kernel backs only if it is ever touched (a guard page, the depth of a stack
/// below what its user takes), so not counted as resident.
pub(crate) fn map_reserving(bytes: usize, reserve: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping at an address the kernel chooses has no
    // preconditions; failure is reported as MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        core::ptr::null_mut()
    } else {
        count_mapped(bytes.saturating_sub(reserve) as u64);
        p as *mut u8
    }
}

/// Unmaps memory from [`map`].
///
/// # Safety
/// `ptr` came from [`map`] with the same `bytes` and is not used afterwards.
pub(crate) unsafe fn unmap(ptr: *mut u8, bytes: usize) {
    // SAFETY: the caller's guarantees.
    unsafe { unmap_reserving(ptr, bytes, 0) }
}

/// Unmaps memory from [`map_reserving`].
///
/// # Safety
/// `ptr` came from [`map_reserving`] with the same `bytes` and `reserve`, and is not used
/// afterwards.
pub(crate) unsafe fn unmap_reserving(ptr: *mut u8, bytes: usize, reserve: usize) {
    // SAFETY: the caller guarantees the range is a mapping of ours, no longer used. munmap
    // of a valid mapping does not fail (errno is left alone).
    unsafe { libc::munmap(ptr as *mut core::ffi::c_void, bytes) };
    count_mapped((bytes.saturating_sub(reserve) as u64).wrapping_neg());
}
