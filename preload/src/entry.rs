//! The allocating entry points other than `malloc` (`calloc`, `realloc`, the aligned
//! ones, …), `malloc_usable_size`, and the managed-heap exports the program's own copy of
//! memprof calls.

use crate::fast::countdown;
use crate::{
    __libc_calloc, __libc_malloc, __libc_memalign, __libc_pvalloc, __libc_realloc, __libc_valloc,
    gnu_get_libc_version, next_symbol,
};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
use memprof::__private::{
    before_realloc_slow_in, on_alloc_at, on_alloc_in, on_dealloc, on_realloc, on_realloc_at,
    on_realloc_unsampled, set_errno, skip_in,
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
    /// `calloc`: glibc's (which checks `n * size` for overflow), sampled.
    ///
    /// # Safety
    /// As C's `calloc`.
    calloc(n: usize, size: usize) -> *mut c_void => calloc_at, "rdx", "rcx";
    /// `realloc` with glibc's semantics: `realloc(NULL, n)` allocates, `realloc(p, 0)` frees
    /// and returns NULL, a failure leaves the block alone.
    ///
    /// # Safety
    /// As C's `realloc`.
    realloc(ptr: *mut c_void, size: usize) -> *mut c_void => realloc_at, "rdx", "rcx";
    /// `reallocarray`: `realloc(ptr, n * size)`, or NULL with ENOMEM when the product
    /// overflows.
    ///
    /// # Safety
    /// As C's `reallocarray`.
    reallocarray(ptr: *mut c_void, n: usize, size: usize) -> *mut c_void =>
        reallocarray_at, "rcx", "r8";
    /// `memalign`: glibc's (which rounds the alignment up to a power of two), sampled.
    ///
    /// # Safety
    /// As C's `memalign`.
    memalign(align: usize, size: usize) -> *mut c_void => memalign_at, "rdx", "rcx";
    /// `posix_memalign`: EINVAL unless the alignment is a power-of-two multiple of
    /// `sizeof(void *)`, ENOMEM when out of memory (glibc's checks), sampled.
    ///
    /// # Safety
    /// As C's `posix_memalign`: `out` is valid for a write.
    posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int =>
        posix_memalign_at, "rcx", "r8";
    /// `aligned_alloc`: as the running glibc's (see `ALIGNED_ALLOC_CHECKS`), sampled.
    ///
    /// # Safety
    /// As C's `aligned_alloc`.
    aligned_alloc(align: usize, size: usize) -> *mut c_void => aligned_alloc_at, "rdx", "rcx";
    /// `valloc`: glibc's, sampled.
    ///
    /// # Safety
    /// As C's `valloc`.
    valloc(size: usize) -> *mut c_void => valloc_at, "rsi", "rdx";
    /// `pvalloc`: glibc's (the size is rounded up to whole pages), sampled with the size
    /// asked.
    ///
    /// # Safety
    /// As C's `pvalloc`.
    pvalloc(size: usize) -> *mut c_void => pvalloc_at, "rsi", "rdx";
}

/// The program's registers at an entry point (`sp`, `bp`), when known (`sp != 0`).
fn at(sp: usize, bp: usize) -> Option<(usize, usize)> {
    (sp != 0).then_some((sp, bp))
}

/// Reports a block an entry point allocated (see [`entry_points`]).
fn sampled(p: *mut c_void, size: usize, sp: usize, bp: usize) {
    match at(sp, bp) {
        Some((sp, bp)) => on_alloc_at(countdown(), p.cast(), size, sp, bp),
        None => on_alloc_in(countdown(), p.cast(), size),
    }
}

/// `calloc` (see [`entry_points`]).
unsafe extern "C" fn calloc_at(n: usize, size: usize, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: no preconditions.
    let p = unsafe { __libc_calloc(n, size) };
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
    if ptr.is_null() {
        // SAFETY: no preconditions.
        let p = unsafe { __libc_malloc(size) };
        sampled(p, size, sp, bp);
        return p;
    }
    if size == 0 {
        on_dealloc(ptr.cast());
        // SAFETY: the caller passes a live block; glibc frees it and returns NULL.
        return unsafe { __libc_realloc(ptr, 0) };
    }
    if skip_in(countdown(), size) {
        // The common case, kept short: no sample point in the new size (the old block, if
        // sampled, keeps its sample: see the engine's `alloc` §4).
        // SAFETY: the caller passes a live block.
        let new = unsafe { __libc_realloc(ptr, size) };
        on_realloc_unsampled(ptr.cast(), new.cast(), size);
        return new;
    }
    // SAFETY: as above.
    unsafe { realloc_slow(ptr, size, sp, bp) }
}

/// `realloc` of a block to a size that may hold a sample point (the countdown ran out).
///
/// # Safety
/// As C's `realloc`, with `ptr` not null and `size` not 0.
#[cold]
#[inline(never)]
unsafe fn realloc_slow(ptr: *mut c_void, size: usize, sp: usize, bp: usize) -> *mut c_void {
    let plan = before_realloc_slow_in(countdown(), ptr.cast(), size);
    // SAFETY: the caller passes a live block.
    let new = unsafe { __libc_realloc(ptr, size) };
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
    match n.checked_mul(size) {
        // SAFETY: as C's realloc.
        Some(total) => unsafe { realloc_at(ptr, total, sp, bp) },
        None => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// `memalign` (see [`entry_points`]).
unsafe extern "C" fn memalign_at(align: usize, size: usize, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: no preconditions.
    let p = unsafe { __libc_memalign(align, size) };
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
    let word = core::mem::size_of::<*mut c_void>();
    if align == 0 || align % word != 0 || !(align / word).is_power_of_two() {
        return libc::EINVAL;
    }
    // SAFETY: no preconditions.
    let p = unsafe { __libc_memalign(align, size) };
    if p.is_null() {
        return libc::ENOMEM;
    }
    sampled(p, size, sp, bp);
    // SAFETY: the caller passes a writable `out`.
    unsafe { *out = p };
    0
}

/// 0: not known yet; 1: glibc before 2.38 (aligned_alloc is memalign); 2: 2.38 or later
/// (aligned_alloc rejects alignments that are not powers of two with EINVAL).
static ALIGNED_ALLOC_CHECKS: AtomicU8 = AtomicU8::new(0);

fn aligned_alloc_checks() -> bool {
    let mut v = ALIGNED_ALLOC_CHECKS.load(Ordering::Relaxed);
    if v == 0 {
        // SAFETY: returns a static NUL-terminated string such as "2.36".
        let s = unsafe { core::ffi::CStr::from_ptr(gnu_get_libc_version()) };
        let mut parts = s.to_str().unwrap_or("").split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        v = if version >= (2, 38) { 2 } else { 1 };
        ALIGNED_ALLOC_CHECKS.store(v, Ordering::Relaxed);
    }
    v == 2
}

/// `aligned_alloc` (see [`entry_points`]).
unsafe extern "C" fn aligned_alloc_at(
    align: usize,
    size: usize,
    sp: usize,
    bp: usize,
) -> *mut c_void {
    if aligned_alloc_checks() && !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    // SAFETY: as C's memalign.
    unsafe { memalign_at(align, size, sp, bp) }
}

/// `valloc` (see [`entry_points`]).
unsafe extern "C" fn valloc_at(size: usize, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: no preconditions.
    let p = unsafe { __libc_valloc(size) };
    sampled(p, size, sp, bp);
    p
}

/// `pvalloc` (see [`entry_points`]).
unsafe extern "C" fn pvalloc_at(size: usize, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: no preconditions.
    let p = unsafe { __libc_pvalloc(size) };
    sampled(p, size, sp, bp);
    p
}

/// `malloc_usable_size`: glibc's.
///
/// # Safety
/// As C's `malloc_usable_size`.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let f = next_symbol(&REAL, c"malloc_usable_size");
    if f.is_null() {
        return 0;
    }
    // SAFETY: `f` is glibc's malloc_usable_size, of this signature.
    let f: unsafe extern "C" fn(*mut c_void) -> usize = unsafe { core::mem::transmute(f) };
    // SAFETY: as the caller's contract.
    unsafe { f(ptr) }
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
