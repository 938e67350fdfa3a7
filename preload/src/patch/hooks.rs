//! The hooks of allocators linked into the executable under names of their own
//! (tikv-jemallocator's `_rjem_*`, mimalloc's `mi_*`) and of Rust's allocator shim
//! (`__rust_alloc`, ...). Each hooked function has a hook of its own and a slot of its own,
//! which holds the trampoline to the function's original code (`super` writes it before
//! it patches the function). Three kinds, by the work the original does:
//!
//! - allocating with the size first, at most two arguments and no call of another hooked
//!   function inside (`malloc`, `mallocx`, `mi_malloc`, `mi_zalloc`, and the
//!   `mi_malloc_aligned` and `mi_zalloc_aligned` that the `mimalloc` crate calls for every
//!   allocation: mimalloc's own calls inside them go to its internal and `mi_heap_*`
//!   functions, never hooked): `fast.rs`'s `malloc` in assembly, the countdown tested and charged, and a
//!   tail jump through the slot; when it runs out, a slow path that calls the original and
//!   samples with the program's `rsp` and `rbp` at the hook's entry, so the stack starts at
//!   the program's frame;
//! - freeing with the pointer first (`free`, `sdallocx(p, size, flags)`, `mi_free_size(p,
//!   size)`, `__rust_dealloc(p, size, align)`): `free`'s filter test, then a tail jump with
//!   every argument untouched; a block that may be sampled is reported first, unless the
//!   thread is busy (a reallocation that frees its old block through the family's own
//!   `free`, as mimalloc's does: the reallocation's hook reports that block's end itself,
//!   and took it out of the live table before the original ran);
//! - the rest (`calloc`, the aligned and zeroing ones, the reallocations): the register
//!   saving entry of `entry.rs`, then the original runs with the thread marked busy (its
//!   inner calls of hooked functions are not reported, and the countdown they charged is
//!   put back), and the result is reported once.
//!
//! None touches the stack before the original runs, and none changes an argument.

use crate::entry::{inside, realloc_by, sampled};
use crate::fast::countdown;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};
use memprof::__private::{on_alloc_slow_at, on_dealloc_counted, Busy};

/// A hook and the slot its original's trampoline goes in, by the symbol it hooks.
pub(crate) struct Hook {
    /// The symbol's name (a suffix for Rust's shim, whose names are mangled: see
    /// `super::symtab`).
    pub(crate) name: &'static str,
    /// The hook's entry point.
    pub(crate) entry: usize,
    /// Where the trampoline to the original goes.
    pub(crate) slot: &'static AtomicUsize,
    /// Whether the function frees (a family needs one that allocates and one that frees).
    pub(crate) frees: bool,
}

/// The original of a slot, as a function of the given type. Expanded only inside
/// `unsafe` blocks whose comment states why: the patcher stored the trampoline to a
/// function of this signature (the allocator's documented one) before it patched that
/// function, and the hook is reached only through that patch.
macro_rules! original {
    ($slot:expr, fn($($ty:ty),*) -> $ret:ty) => {{
        let f = $slot.load(Ordering::Relaxed);
        core::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> $ret>(f)
    }};
}

/// An allocating function with the size first, at most two arguments, and no allocation of
/// a hooked function inside (see the module documentation).
macro_rules! alloc_fast {
    ($m:ident) => {
        pub(crate) mod $m {
            use super::*;
            pub(crate) static SLOT: AtomicUsize = AtomicUsize::new(0);

            /// The hook (see the module documentation).
            ///
            /// # Safety
            /// As the hooked function.
            #[unsafe(naked)]
            pub(crate) unsafe extern "C" fn entry(size: usize, b: usize) -> *mut c_void {
                // Only rax and r11 are written before the jump: no argument register.
                core::arch::naked_asm!(
                    "mov rax, qword ptr [rip + memprof_preload_countdown@GOTTPOFF]",
                    "mov r11, qword ptr fs:[rax]",
                    "cmp rdi, r11",
                    "jae 2f",
                    "sub r11, rdi",
                    "mov qword ptr fs:[rax], r11",
                    "jmp qword ptr [rip + {slot}]",
                    "2:",
                    "mov rdx, rsp",
                    "mov rcx, rbp",
                    "jmp {slow}",
                    slot = sym SLOT,
                    slow = sym slow,
                )
            }

            extern "C" fn slow(size: usize, b: usize, sp: usize, bp: usize) -> *mut c_void {
                // SAFETY: the slot holds the original (see `original!`); the program's call,
                // its arguments unchanged (a one-argument original ignores `b`, as the SysV
                // calling convention allows).
                let p = unsafe { original!(SLOT, fn(usize, usize) -> *mut c_void)(size, b) };
                super::sampled_slow(p, size, sp, bp);
                p
            }
        }
    };
}

/// A freeing function with the pointer first and at most four arguments.
macro_rules! free_fast {
    ($m:ident) => {
        pub(crate) mod $m {
            use super::*;
            pub(crate) static SLOT: AtomicUsize = AtomicUsize::new(0);

            /// The hook (see the module documentation).
            ///
            /// # Safety
            /// As the hooked function.
            #[unsafe(naked)]
            pub(crate) unsafe extern "C" fn entry(p: *mut c_void, a: usize, b: usize, c: usize) {
                // Only rax and r11 are written: every argument goes on as it came.
                core::arch::naked_asm!(
                    "mov rax, rdi",
                    "shr rax, {shift}",
                    "mov r11, qword ptr [rip + {filter}@GOTPCREL]",
                    // The filter's mask is its first word (`free`'s test, fast.rs).
                    "and rax, qword ptr [r11]",
                    "cmp byte ptr [r11 + rax + {counters}], 0",
                    "jne 2f",
                    "jmp qword ptr [rip + {slot}]",
                    "2:",
                    "jmp {slow}",
                    shift = const memprof::__private::FILTER_SHIFT,
                    counters = const memprof::__private::FILTER_COUNTERS_AT,
                    filter = sym memprof::__private::FILTER,
                    slot = sym SLOT,
                    slow = sym slow,
                )
            }

            extern "C" fn slow(p: *mut c_void, a: usize, b: usize, c: usize) {
                // Busy: inside a hook of the third kind (a reallocation freeing its old
                // block through the family's own free), which reports that block itself
                // (and took it out of the live table before the original ran).
                if !p.is_null() && !Busy::is_busy() {
                    on_dealloc_counted(p.cast());
                }
                // SAFETY: the slot holds the original (see `original!`); the program's call,
                // its arguments unchanged (an original of fewer arguments ignores the
                // others, as the SysV calling convention allows).
                unsafe { original!(SLOT, fn(*mut c_void, usize, usize, usize) -> ())(p, a, b, c) }
            }
        }
    };
}

/// Any other function: `$report` gets the program's `sp` and `bp` and a closure that calls
/// the original with the hook's arguments, and returns what the original returned.
macro_rules! busy {
    ($m:ident($($arg:ident: $ty:ty),*) -> $ret:ty, $sp:literal, $bp:literal, $report:expr) => {
        pub(crate) mod $m {
            use super::*;
            pub(crate) static SLOT: AtomicUsize = AtomicUsize::new(0);

            /// The hook (see the module documentation).
            ///
            /// # Safety
            /// As the hooked function.
            #[unsafe(naked)]
            pub(crate) unsafe extern "C" fn entry($($arg: $ty),*) -> $ret {
                core::arch::naked_asm!(
                    concat!("mov ", $sp, ", rsp"),
                    concat!("mov ", $bp, ", rbp"),
                    "jmp {imp}",
                    imp = sym imp,
                )
            }

            unsafe extern "C" fn imp($($arg: $ty,)* sp: usize, bp: usize) -> $ret {
                // SAFETY: the slot holds the original (see `original!`); the program's call,
                // its arguments unchanged.
                let call = || unsafe { original!(SLOT, fn($($ty),*) -> $ret)($($arg),*) };
                #[allow(clippy::redundant_closure_call)]
                ($report)(sp, bp, call)
            }
        }
    };
}

/// `malloc`'s slow path for a hook of the first kind (`fast.rs`'s `malloc_slow`).
fn sampled_slow(p: *mut c_void, size: usize, sp: usize, bp: usize) {
    if crate::before_start() {
        crate::early_start();
    }
    on_alloc_slow_at(countdown(), p.cast(), size, sp, bp);
    if crate::before_start() {
        crate::keep_counting();
    }
}

/// An allocation of `size` bytes by `call`, reported once.
fn alloc(size: usize, sp: usize, bp: usize, call: impl FnOnce() -> *mut c_void) -> *mut c_void {
    let p = inside(call);
    sampled(p, size, sp, bp);
    p
}

/// An allocation of `n * size` bytes by `call` (a calloc), reported once.
fn calloc(
    n: usize,
    size: usize,
    sp: usize,
    bp: usize,
    call: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    let p = inside(call);
    if !p.is_null() {
        sampled(p, n.wrapping_mul(size), sp, bp);
    }
    p
}

/// A `posix_memalign` of `size` bytes into `out` by `call`, reported once.
fn posix(
    out: *mut *mut c_void,
    size: usize,
    sp: usize,
    bp: usize,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let r = inside(call);
    if r == 0 {
        // SAFETY: on success the allocator wrote the block's address to `out`.
        sampled(unsafe { *out }, size, sp, bp);
    }
    r
}

/// A reallocation of `ptr` to `size` bytes by `call`, reported as `realloc` is (the old
/// block's end, then an allocation of `size` bytes).
fn realloc(
    ptr: *mut c_void,
    size: usize,
    sp: usize,
    bp: usize,
    call: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    // SAFETY: the program's call of a reallocating function on its own block.
    unsafe { realloc_by(ptr, size, sp, bp, |_| call()) }
}

/// A reallocation of `ptr` to `n * size` bytes by `call`; an overflow fails in the
/// original and changes nothing.
fn reallocn(
    ptr: *mut c_void,
    n: usize,
    size: usize,
    sp: usize,
    bp: usize,
    call: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    match n.checked_mul(size) {
        Some(total) => realloc(ptr, total, sp, bp, call),
        None => inside(call),
    }
}

type P = *mut c_void;

// tikv-jemallocator's jemalloc (`_rjem_` prefix). `xallocx` is not hooked: it never moves
// or allocates a block, and one it resizes keeps its size in the profile.
alloc_fast!(je_malloc);
alloc_fast!(je_mallocx);
busy!(je_calloc(n: usize, size: usize) -> P, "rdx", "rcx", |sp, bp, f| calloc(n, size, sp, bp, f));
busy!(je_posix_memalign(out: *mut P, align: usize, size: usize) -> c_int, "rcx", "r8",
    |sp, bp, f| { let _ = align; posix(out, size, sp, bp, f) });
busy!(je_aligned_alloc(align: usize, size: usize) -> P, "rdx", "rcx",
    |sp, bp, f| { let _ = align; alloc(size, sp, bp, f) });
busy!(je_memalign(align: usize, size: usize) -> P, "rdx", "rcx",
    |sp, bp, f| { let _ = align; alloc(size, sp, bp, f) });
busy!(je_valloc(size: usize) -> P, "rsi", "rdx", |sp, bp, f| alloc(size, sp, bp, f));
busy!(je_realloc(ptr: P, size: usize) -> P, "rdx", "rcx", |sp, bp, f| realloc(ptr, size, sp, bp, f));
busy!(je_rallocx(ptr: P, size: usize, flags: c_int) -> P, "rcx", "r8",
    |sp, bp, f| { let _ = flags; realloc(ptr, size, sp, bp, f) });
free_fast!(je_free);
free_fast!(je_sdallocx);
free_fast!(je_dallocx);

// mimalloc's public entry points (`mi_`), without the `mi_heap_*` ones that they call
// inside (hooking both would see an allocation twice) and without those that copy
// strings or paths.
alloc_fast!(mi_malloc);
alloc_fast!(mi_zalloc);
busy!(mi_calloc(n: usize, size: usize) -> P, "rdx", "rcx", |sp, bp, f| calloc(n, size, sp, bp, f));
busy!(mi_mallocn(n: usize, size: usize) -> P, "rdx", "rcx", |sp, bp, f| calloc(n, size, sp, bp, f));
alloc_fast!(mi_malloc_aligned);
busy!(mi_malloc_aligned_at(size: usize, align: usize, off: usize) -> P, "rcx", "r8",
    |sp, bp, f| { let _ = (align, off); alloc(size, sp, bp, f) });
alloc_fast!(mi_zalloc_aligned);
busy!(mi_zalloc_aligned_at(size: usize, align: usize, off: usize) -> P, "rcx", "r8",
    |sp, bp, f| { let _ = (align, off); alloc(size, sp, bp, f) });
busy!(mi_calloc_aligned(n: usize, size: usize, align: usize) -> P, "rcx", "r8",
    |sp, bp, f| { let _ = align; calloc(n, size, sp, bp, f) });
busy!(mi_calloc_aligned_at(n: usize, size: usize, align: usize, off: usize) -> P, "r8", "r9",
    |sp, bp, f| { let _ = (align, off); calloc(n, size, sp, bp, f) });
busy!(mi_realloc(ptr: P, size: usize) -> P, "rdx", "rcx", |sp, bp, f| realloc(ptr, size, sp, bp, f));
busy!(mi_reallocn(ptr: P, n: usize, size: usize) -> P, "rcx", "r8",
    |sp, bp, f| reallocn(ptr, n, size, sp, bp, f));
busy!(mi_realloc_aligned(ptr: P, size: usize, align: usize) -> P, "rcx", "r8",
    |sp, bp, f| { let _ = align; realloc(ptr, size, sp, bp, f) });
busy!(mi_realloc_aligned_at(ptr: P, size: usize, align: usize, off: usize) -> P, "r8", "r9",
    |sp, bp, f| { let _ = (align, off); realloc(ptr, size, sp, bp, f) });
busy!(mi_rezalloc(ptr: P, size: usize) -> P, "rdx", "rcx", |sp, bp, f| realloc(ptr, size, sp, bp, f));
busy!(mi_rezalloc_aligned(ptr: P, size: usize, align: usize) -> P, "rcx", "r8",
    |sp, bp, f| { let _ = align; realloc(ptr, size, sp, bp, f) });
busy!(mi_recalloc(ptr: P, n: usize, size: usize) -> P, "rcx", "r8",
    |sp, bp, f| reallocn(ptr, n, size, sp, bp, f));
busy!(mi_posix_memalign(out: *mut P, align: usize, size: usize) -> c_int, "rcx", "r8",
    |sp, bp, f| { let _ = align; posix(out, size, sp, bp, f) });
busy!(mi_memalign(align: usize, size: usize) -> P, "rdx", "rcx",
    |sp, bp, f| { let _ = align; alloc(size, sp, bp, f) });
busy!(mi_aligned_alloc(align: usize, size: usize) -> P, "rdx", "rcx",
    |sp, bp, f| { let _ = align; alloc(size, sp, bp, f) });
busy!(mi_valloc(size: usize) -> P, "rsi", "rdx", |sp, bp, f| alloc(size, sp, bp, f));
busy!(mi_pvalloc(size: usize) -> P, "rsi", "rdx", |sp, bp, f| alloc(size, sp, bp, f));
free_fast!(mi_free);
free_fast!(mi_cfree);
free_fast!(mi_free_size);
free_fast!(mi_free_aligned);
free_fast!(mi_free_size_aligned);

// Rust's allocator shim, hooked only when the program's global allocator is neither the
// default (whose blocks come from `malloc`, hooked already) nor of a family above. Busy
// like the third kind, so a custom allocator that ends in `malloc` is reported once.
busy!(rust_alloc(size: usize, align: usize) -> P, "rdx", "rcx",
    |sp, bp, f| { let _ = align; alloc(size, sp, bp, f) });
busy!(rust_alloc_zeroed(size: usize, align: usize) -> P, "rdx", "rcx",
    |sp, bp, f| { let _ = align; alloc(size, sp, bp, f) });
busy!(rust_realloc(ptr: P, old: usize, align: usize, size: usize) -> P, "r8", "r9",
    |sp, bp, f| { let _ = (old, align); realloc(ptr, size, sp, bp, f) });
free_fast!(rust_dealloc);

/// One row of a family's table.
macro_rules! row {
    ($name:literal, $m:ident, $frees:literal) => {
        Hook { name: $name, entry: $m::entry as *const () as usize, slot: &$m::SLOT, frees: $frees }
    };
}

/// tikv-jemallocator's family.
pub(crate) fn jemalloc() -> [Hook; 12] {
    [
        row!("_rjem_malloc", je_malloc, false),
        row!("_rjem_mallocx", je_mallocx, false),
        row!("_rjem_calloc", je_calloc, false),
        row!("_rjem_posix_memalign", je_posix_memalign, false),
        row!("_rjem_aligned_alloc", je_aligned_alloc, false),
        row!("_rjem_memalign", je_memalign, false),
        row!("_rjem_valloc", je_valloc, false),
        row!("_rjem_realloc", je_realloc, false),
        row!("_rjem_rallocx", je_rallocx, false),
        row!("_rjem_free", je_free, true),
        row!("_rjem_sdallocx", je_sdallocx, true),
        row!("_rjem_dallocx", je_dallocx, true),
    ]
}

/// mimalloc's family.
pub(crate) fn mimalloc() -> [Hook; 27] {
    [
        row!("mi_malloc", mi_malloc, false),
        row!("mi_zalloc", mi_zalloc, false),
        row!("mi_calloc", mi_calloc, false),
        row!("mi_mallocn", mi_mallocn, false),
        row!("mi_malloc_aligned", mi_malloc_aligned, false),
        row!("mi_malloc_aligned_at", mi_malloc_aligned_at, false),
        row!("mi_zalloc_aligned", mi_zalloc_aligned, false),
        row!("mi_zalloc_aligned_at", mi_zalloc_aligned_at, false),
        row!("mi_calloc_aligned", mi_calloc_aligned, false),
        row!("mi_calloc_aligned_at", mi_calloc_aligned_at, false),
        row!("mi_realloc", mi_realloc, false),
        row!("mi_reallocn", mi_reallocn, false),
        row!("mi_realloc_aligned", mi_realloc_aligned, false),
        row!("mi_realloc_aligned_at", mi_realloc_aligned_at, false),
        row!("mi_rezalloc", mi_rezalloc, false),
        row!("mi_rezalloc_aligned", mi_rezalloc_aligned, false),
        row!("mi_recalloc", mi_recalloc, false),
        row!("mi_posix_memalign", mi_posix_memalign, false),
        row!("mi_memalign", mi_memalign, false),
        row!("mi_aligned_alloc", mi_aligned_alloc, false),
        row!("mi_valloc", mi_valloc, false),
        row!("mi_pvalloc", mi_pvalloc, false),
        row!("mi_free", mi_free, true),
        row!("mi_cfree", mi_cfree, true),
        row!("mi_free_size", mi_free_size, true),
        row!("mi_free_aligned", mi_free_aligned, true),
        row!("mi_free_size_aligned", mi_free_size_aligned, true),
    ]
}

/// Rust's allocator shim (names are suffixes of the mangled symbols: see `super::symtab`).
pub(crate) fn rust_shim() -> [Hook; 4] {
    [
        row!("__rust_alloc", rust_alloc, false),
        row!("__rust_alloc_zeroed", rust_alloc_zeroed, false),
        row!("__rust_realloc", rust_realloc, false),
        row!("__rust_dealloc", rust_dealloc, true),
    ]
}
