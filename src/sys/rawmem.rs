//! Memory for the profiler's own bookkeeping, taken from glibc's allocator directly.
//!
//! The profiler must never allocate through the allocator it profiles: under
//! `Sampled<A>` that would recurse into the sampler, and under the preload library `malloc`
//! *is* the profiler. glibc exports its allocator under a second set of names
//! (`__libc_malloc`, `__libc_free`) that no interposer replaces, so the live table, the
//! event queue and deep call-stack buffers use those. They take only glibc's own arena
//! locks, which user code cannot hold. The engine's per-thread blocks, which a signal
//! handler's allocation may need first, are mapped from the kernel instead
//! ([`map_zeroed`]): no lock at all.

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

/// Maps `bytes` of zeroed, private memory straight from the kernel (`mmap`), or returns
/// null. Unlike [`alloc`] it takes no lock at all, so it is safe where glibc's allocator
/// may be interrupted on the same thread (a signal handler's allocation).
pub(crate) fn map_zeroed(bytes: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping at an address the kernel picks has no
    // preconditions; failure is MAP_FAILED, turned into null.
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
        p.cast()
    }
}

/// Unmaps memory from [`map_zeroed`].
///
/// # Safety
/// `ptr` and `bytes` are those of one [`map_zeroed`] mapping, which nothing uses any more.
pub(crate) unsafe fn unmap(ptr: *mut u8, bytes: usize) {
    // SAFETY: the caller's contract: the whole mapping, no longer used.
    unsafe { libc::munmap(ptr.cast(), bytes) };
}
