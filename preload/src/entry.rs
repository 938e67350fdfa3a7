//! The allocating entry points other than `malloc` (`calloc`, `realloc`, the aligned
//! ones, …), `malloc_usable_size`, and the managed-heap exports the program's own copy of
//! memprof calls.

use crate::fast::countdown;
use crate::next;
use core::ffi::{c_int, c_void};
use memprof::__private::{
    before_realloc_slow_in, before_realloc_unsampled, on_alloc_at, on_alloc_in, on_dealloc,
    on_realloc, on_realloc_at, skip_in, Busy,
};

/// The other allocating entry points. Each is a Rust function `*_at` taking the entry
/// point's arguments and then the program's `rsp` and `rbp` at its entry (both 0 where
/// they are not known), as `malloc`'s slow path does: a sampled block's call stack starts
/// at the program's frame (the capture's `capture_at_entry`). On x86-64 the
/// exported symbol is a naked function that appends the two registers to the arguments and
/// jumps to it (the stack is untouched, so `rsp` still points at the return address into
/// the program); elsewhere it is a plain function that passes zeros.
macro_rules! entry_points {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty =>
        $imp:ident, $sp:literal, $bp:literal;)*) => {
        $(
            $(#[$doc])*
            #[cfg(target_arch = "x86_64")]
            #[no_mangle]
            #[unsafe(naked)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                core::arch::naked_asm!(
                    concat!("mov ", $sp, ", rsp"),
                    concat!("mov ", $bp, ", rbp"),
                    "jmp {imp}",
                    imp = sym $imp,
                )
            }

            $(#[$doc])*
            #[cfg(not(target_arch = "x86_64"))]
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                // SAFETY: the caller's contract, which is `$imp`'s.
                unsafe { $imp($($arg,)* 0, 0) }
            }
        )*
    };
}

entry_points! {
    /// `calloc`: the next definition's (which checks `n * size` for overflow), sampled.
    ///
    /// # Safety
    /// As C's `calloc`.
    calloc(n: usize, size: usize) -> *mut c_void => calloc_at, "rdx", "rcx";
    /// `realloc`: the next definition's, reported with glibc's semantics: `realloc(NULL, n)`
    /// allocates, `realloc(p, 0)` frees, a failure leaves the block alone.
    ///
    /// # Safety
    /// As C's `realloc`.
    realloc(ptr: *mut c_void, size: usize) -> *mut c_void => realloc_at, "rdx", "rcx";
    /// `reallocarray`: the next definition's (`realloc(ptr, n * size)`, or NULL with ENOMEM
    /// when the product overflows), reported as `realloc`.
    ///
    /// # Safety
    /// As C's `reallocarray`.
    reallocarray(ptr: *mut c_void, n: usize, size: usize) -> *mut c_void =>
        reallocarray_at, "rcx", "r8";
    /// `memalign`: the next definition's (glibc's rounds the alignment up to a power of
    /// two), sampled.
    ///
    /// # Safety
    /// As C's `memalign`.
    memalign(align: usize, size: usize) -> *mut c_void => memalign_at, "rdx", "rcx";
    /// `posix_memalign`: the next definition's (EINVAL unless the alignment is a
    /// power-of-two multiple of `sizeof(void *)`, ENOMEM when out of memory), sampled.
    ///
    /// # Safety
    /// As C's `posix_memalign`: `out` is valid for a write.
    posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int =>
        posix_memalign_at, "rcx", "r8";
    /// `aligned_alloc`: the next definition's (glibc 2.38 and later reject an alignment
    /// that is not a power of two with EINVAL), sampled.
    ///
    /// # Safety
    /// As C's `aligned_alloc`.
    aligned_alloc(align: usize, size: usize) -> *mut c_void => aligned_alloc_at, "rdx", "rcx";
    /// `valloc`: the next definition's, sampled.
    ///
    /// # Safety
    /// As C's `valloc`.
    valloc(size: usize) -> *mut c_void => valloc_at, "rsi", "rdx";
    /// `pvalloc`: the next definition's (glibc's rounds the size up to whole pages),
    /// sampled with the size asked.
    ///
    /// # Safety
    /// As C's `pvalloc`.
    pvalloc(size: usize) -> *mut c_void => pvalloc_at, "rsi", "rdx";
}

/// Runs `f`, a call of the next definition, with the thread marked as inside the profiler
/// ([`Busy`]): an allocator whose `realloc`, `calloc` or `memalign` calls its own `malloc`
/// and `free` through the PLT (those calls come back to this library) is reported once,
/// for the program's call, and not again for the calls it makes itself. (`malloc` and
/// `free` tail-jump to the next definition and set no flag: an allocator whose `malloc`
/// calls another entry point of the family would be seen twice.) The thread's countdown is
/// put back as it was: such an inner `malloc` charged it on its fast path for bytes that
/// are the caller's, which are charged once, by the caller's report.
#[inline(always)]
pub(crate) fn inside<R>(f: impl FnOnce() -> R) -> R {
    let cd = countdown();
    let (left, epoch) = (cd.countdown.get(), cd.epoch.get());
    let r = {
        let _busy = Busy::enter();
        f()
    };
    cd.countdown.set(left);
    cd.epoch.set(epoch);
    r
}

/// The program's registers at an entry point (`sp`, `bp`), when known (`sp != 0`).
fn at(sp: usize, bp: usize) -> Option<(usize, usize)> {
    (sp != 0).then_some((sp, bp))
}

/// Reports a block an entry point allocated (see [`entry_points`]).
pub(crate) fn sampled(p: *mut c_void, size: usize, sp: usize, bp: usize) {
    if crate::before_start() {
        crate::early_start();
    }
    match at(sp, bp) {
        Some((sp, bp)) => on_alloc_at(countdown(), p.cast(), size, sp, bp),
        None => on_alloc_in(countdown(), p.cast(), size),
    }
    if crate::before_start() {
        crate::keep_counting();
    }
}

/// `calloc` (see [`entry_points`]).
unsafe extern "C" fn calloc_at(n: usize, size: usize, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: no preconditions.
    let p = inside(|| unsafe { next::calloc()(n, size) });
    if !p.is_null() {
        sampled(p, n.wrapping_mul(size), sp, bp);
    }
    p
}

/// `realloc` (see [`entry_points`]).
unsafe extern "C" fn realloc_at(
    ptr: *mut c_void,
    size: usize,
    sp: usize,
    bp: usize,
) -> *mut c_void {
    // SAFETY: the caller's contract, realloc's; the closure passes the caller's block (or
    // null) on to the next realloc.
    unsafe { realloc_by(ptr, size, sp, bp, |ptr| next::realloc()(ptr, size)) }
}

/// A reallocation of `ptr` to `size` bytes by `f` (`realloc` or `reallocarray`), reported:
/// `ptr` null is an allocation, `size` 0 a free (glibc's `realloc(p, 0)` frees `p`), and
/// otherwise the free of the old block and an allocation of `size` bytes (the engine's
/// `alloc` §4).
///
/// # Safety
/// As C's `realloc`, and `f(ptr)` is such a reallocation.
pub(crate) unsafe fn realloc_by(
    ptr: *mut c_void,
    size: usize,
    sp: usize,
    bp: usize,
    f: impl FnOnce(*mut c_void) -> *mut c_void,
) -> *mut c_void {
    if ptr.is_null() {
        let p = inside(|| f(ptr));
        sampled(p, size, sp, bp);
        return p;
    }
    if size == 0 {
        on_dealloc(ptr.cast());
        return inside(|| f(ptr));
    }
    if crate::before_start() {
        crate::early_start();
    }
    if skip_in(countdown(), size) {
        // The common case, kept short: no sample point in the new size. A sampled old block
        // still ends here, and leaves the live table before the real realloc can give its
        // address to another thread (one filter load when it is not sampled).
        let plan = before_realloc_unsampled(ptr.cast());
        let new = inside(|| f(ptr));
        on_realloc(ptr.cast(), plan, new.cast(), size);
        return new;
    }
    // SAFETY: as above.
    unsafe { realloc_slow(ptr, size, sp, bp, f) }
}

/// [`realloc_by`] of a block to a size that may hold a sample point (the countdown ran out).
///
/// # Safety
/// As [`realloc_by`], with `ptr` not null and `size` not 0.
#[cold]
#[inline(never)]
unsafe fn realloc_slow(
    ptr: *mut c_void,
    size: usize,
    sp: usize,
    bp: usize,
    f: impl FnOnce(*mut c_void) -> *mut c_void,
) -> *mut c_void {
    let plan = before_realloc_slow_in(countdown(), ptr.cast(), size);
    let new = inside(|| f(ptr));
    match at(sp, bp) {
        Some(regs) => on_realloc_at(ptr.cast(), plan, new.cast(), size, regs),
        None => on_realloc(ptr.cast(), plan, new.cast(), size),
    }
    new
}

/// `reallocarray` (see [`entry_points`]).
unsafe extern "C" fn reallocarray_at(
    ptr: *mut c_void,
    n: usize,
    size: usize,
    sp: usize,
    bp: usize,
) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        // The next reallocarray fails (ENOMEM) and leaves the block alone: nothing to report.
        // SAFETY: the caller's contract, reallocarray's.
        return inside(|| unsafe { next::reallocarray()(ptr, n, size) });
    };
    // SAFETY: the caller's contract (reallocarray is realloc of the product); the closure
    // passes the caller's block (or null) on to the next reallocarray.
    unsafe { realloc_by(ptr, total, sp, bp, |ptr| next::reallocarray()(ptr, n, size)) }
}

/// `memalign` (see [`entry_points`]).
unsafe extern "C" fn memalign_at(align: usize, size: usize, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: no preconditions.
    let p = inside(|| unsafe { next::memalign()(align, size) });
    sampled(p, size, sp, bp);
    p
}

/// `posix_memalign` (see [`entry_points`]).
unsafe extern "C" fn posix_memalign_at(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    sp: usize,
    bp: usize,
) -> c_int {
    // SAFETY: the caller's contract: `out` is writable.
    let r = inside(|| unsafe { next::posix_memalign()(out, align, size) });
    if r == 0 {
        // SAFETY: on success the allocator wrote the block's address to `out`.
        let p = unsafe { *out };
        sampled(p, size, sp, bp);
    }
    r
}

/// `aligned_alloc` (see [`entry_points`]).
unsafe extern "C" fn aligned_alloc_at(
    align: usize,
    size: usize,
    sp: usize,
    bp: usize,
) -> *mut c_void {
    // SAFETY: no preconditions (a bad alignment is the allocator's to report).
    let p = inside(|| unsafe { next::aligned_alloc()(align, size) });
    sampled(p, size, sp, bp);
    p
}

/// `valloc` (see [`entry_points`]).
unsafe extern "C" fn valloc_at(size: usize, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: no preconditions.
    let p = inside(|| unsafe { next::valloc()(size) });
    sampled(p, size, sp, bp);
    p
}

/// `pvalloc` (see [`entry_points`]).
unsafe extern "C" fn pvalloc_at(size: usize, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: no preconditions.
    let p = inside(|| unsafe { next::pvalloc()(size) });
    sampled(p, size, sp, bp);
    p
}

/// `malloc_usable_size`: the next definition's.
///
/// # Safety
/// As C's `malloc_usable_size`.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    // SAFETY: as the caller's contract.
    unsafe { next::malloc_usable_size()(ptr) }
}

/// A block of a managed heap ([`memprof::gc`]) in the profiled program was allocated: the
/// program's copy of memprof reports it here, to the session of `memprof record`.
///
/// # Safety
/// `ptr` is the block's address and `size` its size in bytes.
#[no_mangle]
pub unsafe extern "C" fn memprof_preload_gc_alloc(ptr: *mut u8, size: usize) {
    on_alloc_in(countdown(), ptr, size);
}

/// A block of a managed heap died (found dead by its sweep, before its memory is reused).
///
/// # Safety
/// `ptr` was reported by [`memprof_preload_gc_alloc`].
#[no_mangle]
pub unsafe extern "C" fn memprof_preload_gc_free(ptr: *mut u8) {
    on_dealloc(ptr);
}

/// A collection cycle of a managed heap finished (times on the monotonic clock).
///
/// # Safety
/// `cycle` points at a valid `GcCycle` for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn memprof_preload_gc_cycle(cycle: *const memprof::profile::GcCycle) {
    // SAFETY: the caller passes a valid pointer (memprof::gc's profiler hooks).
    if let Some(c) = unsafe { cycle.as_ref() } {
        memprof::record_gc_cycle(c);
    }
}
