//! Memory for the profiler's own bookkeeping, taken from glibc's allocator directly.
//!
//! The profiler must never allocate through the allocator it profiles: under
//! `Sampled<A>` that would recurse into the sampler, and under the preload library `malloc`
//! *is* the profiler. glibc exports its allocator under a second set of names
//! (`__libc_malloc`, `__libc_free`) that no interposer replaces, so the live table, the
//! event queue and deep call-stack buffers use those. They take only glibc's own arena
//! locks, which user code cannot hold.
//!
//! What the sample path itself allocates while it holds one of its own locks (the live
//! table's growth) comes from [`map`] instead: `mmap` takes no lock of glibc's, so a signal
//! handler that interrupts the profiler there and calls `malloc` finds glibc's arena free.

use core::ffi::c_void;

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
}

/// Allocates `bytes` of uninitialised memory, or returns null.
pub(crate) fn alloc(bytes: usize) -> *mut u8 {
    // SAFETY: __libc_malloc has no preconditions; a null return is passed on.
    unsafe { __libc_malloc(bytes) as *mut u8 }
}

/// Allocates `bytes` of zeroed memory, or returns null.
pub(crate) fn alloc_zeroed(bytes: usize) -> *mut u8 {
    // SAFETY: __libc_calloc has no preconditions; a null return is passed on.
    unsafe { __libc_calloc(1, bytes) as *mut u8 }
}

/// Frees memory from [`alloc`] or [`alloc_zeroed`].
///
/// # Safety
/// `ptr` is null or came from this module and has not been freed.
pub(crate) unsafe fn free(ptr: *mut u8) {
    // SAFETY: the caller guarantees ptr came from __libc_malloc/__libc_calloc (or is null).
    unsafe { __libc_free(ptr as *mut c_void) }
}

/// Maps `bytes` of zeroed memory straight from the kernel (no lock of glibc's, see the
/// module documentation), or returns null. May set errno when it fails.
pub(crate) fn map(bytes: usize) -> *mut u8 {
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
        p as *mut u8
    }
}

/// Unmaps memory from [`map`].
///
/// # Safety
/// `ptr` came from [`map`] with the same `bytes` and is not used afterwards.
pub(crate) unsafe fn unmap(ptr: *mut u8, bytes: usize) {
    // SAFETY: the caller guarantees the range is a mapping of ours, no longer used. munmap
    // of a valid mapping does not fail (errno is left alone).
    unsafe { libc::munmap(ptr as *mut core::ffi::c_void, bytes) };
}
