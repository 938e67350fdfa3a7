//! `libmemprof_preload.so`: the malloc family of an unmodified, dynamically linked program,
//! sampled by memprof. `memprof record -- ./prog` loads it with `LD_PRELOAD`.
//!
//! # 1. What is here
//! Only the exported functions and the constructor; the work is in the `memprof` library
//! (its engine's allocation hooks, and its agent for start, fork and exit, reached through
//! `memprof::__private`).
//!
//! # 2. Forwarding
//! Every export forwards to glibc's own allocator under the names no interposer replaces
//! (`__libc_malloc`, `__libc_free`, …), so there is no `dlsym` on the allocation path and no
//! bootstrap problem: the exports work from the first allocation the loader makes, before
//! any constructor. glibc's semantics are kept: `realloc(NULL, n)` is `malloc(n)`,
//! `realloc(p, 0)` frees `p` and returns NULL, `free(NULL)` does nothing, `calloc` and
//! `reallocarray` overflows fail with ENOMEM, `posix_memalign` returns EINVAL for a bad
//! alignment, `aligned_alloc` sets EINVAL for one where the running glibc does (2.38 and
//! later), and `free` preserves errno. `malloc_usable_size`, `dlclose` and `_exit` are
//! found once with `dlsym(RTLD_NEXT)` (none is called by the loader before the constructors
//! run). `dlclose` and `_exit` first bring the profile up to date (while the library is
//! still mapped; before the process ends without exit handlers).
//!
//! # 3. Hooks
//! A block is reported after glibc returned it, and its free before glibc gets it back (so
//! an address reused at once by another thread is never confused with it). The hooks
//! never allocate through `malloc` and keep errno; the profiler's own allocations come back
//! here and pass through untracked (the sampler's busy flag).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
use memprof::__private::{
    around_dlclose, before_realloc, on_alloc_at, on_alloc_in, on_alloc_slow_at, on_dealloc,
    on_dealloc_counted, on_realloc_at, on_realloc_in,
};

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
    fn __libc_pvalloc(size: usize) -> *mut c_void;
    fn gnu_get_libc_version() -> *const core::ffi::c_char;
}

fn set_errno(v: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = v };
}

/// The fast paths of `malloc` and `free`, in assembly (x86-64).
///
/// A shared library's Rust thread-locals are reached through `__tls_get_addr` (the
/// general-dynamic model; stable Rust cannot ask for another), which costs more than the
/// rest of an unsampled `malloc`. So the thread's [`Countdown`] lives in a thread-local of
/// the initial-exec model declared here (the library is loaded at start-up, so its TLS is
/// in the static block), and `malloc` and `free` are naked functions whose common case is
/// a handful of instructions ending in a tail jump to glibc:
///
/// - `malloc(n)`: if `n < countdown`, `countdown -= n` and jump to `__libc_malloc`
///   (the sampler's `sample_in` fast path without its session check, see below);
///   otherwise jump to
///   `malloc_slow` with the program's `rsp` (pointing at the return address into it) and
///   `rbp`, which allocates, samples through `sample_in`, and starts the call stack at the
///   program's frame (the capture's `capture_at_entry`): none of the profiler's
///   frames is unwound, and `--depth` counts the program's frames only.
/// - `free(p)`: if `p`'s counter in the live table's filter ([`memprof::__private::FILTER`]) is
///   0, `p` is not a sampled block: jump to `__libc_free`; otherwise jump to `free_slow`.
///
/// Neither touches the stack, so the slow paths and glibc see the caller's own frame and
/// alignment. The other entry points reach the same countdown through [`countdown`].
///
/// `sample_in` also compares the countdown's epoch with the sampler's
/// [`EPOCH`](memprof::__private::EPOCH), so that a countdown drawn in another session (at
/// another rate) is drawn again. This library's sessions all sample at one rate (a forked
/// child's follows its parent's settings) and the geometric gap is memoryless, so a
/// countdown left from an earlier session is as good as a new draw, and `malloc` skips the
/// check (two loads and a compare). The slow path still sees a session change when the
/// countdown runs out. What the check also did, `reset_countdown` does: the countdown a
/// thread parked while no session ran is zeroed when one starts (at start-up and in a
/// followed child, on the only thread there is).
#[cfg(target_arch = "x86_64")]
mod fast {
    use super::*;
    use memprof::__private::Countdown;

    // The thread's countdown (the layout of `Countdown`: countdown, then epoch), zeroed at
    // thread creation, which `Countdown` allows. Global and hidden: visible to every object
    // file of this library, exported by none.
    core::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".p2align 4",
        ".globl memprof_preload_countdown",
        ".hidden memprof_preload_countdown",
        ".type memprof_preload_countdown,@object",
        ".size memprof_preload_countdown,16",
        "memprof_preload_countdown:",
        ".zero 16",
        ".popsection",
    );
    const _: () = assert!(core::mem::size_of::<Countdown>() == 16);

    /// The calling thread's countdown block.
    #[inline(always)]
    fn countdown_addr() -> *const Countdown {
        let p: *const Countdown;
        // SAFETY: `fs:[0]` holds the thread pointer (x86-64 TLS ABI) and the GOT slot the
        // symbol's offset from it, written by the dynamic linker before this library runs:
        // the sum is this thread's block. Only a register is written, and the result is
        // the same for every call on one thread (`pure`).
        unsafe {
            core::arch::asm!(
                "mov {p}, qword ptr fs:[0]",
                "add {p}, qword ptr [rip + memprof_preload_countdown@GOTTPOFF]",
                p = out(reg) p,
                options(nostack, pure, readonly),
            )
        };
        p
    }

    /// The calling thread's countdown.
    #[inline]
    pub(super) fn countdown<'a>() -> &'a Countdown {
        // SAFETY: the address is this thread's block of the TLS variable above, valid and
        // initialised (zeroed) for the thread's lifetime; the reference never leaves the
        // allocation call it was made for, and only this thread touches the block.
        unsafe { &*countdown_addr() }
    }

    /// `malloc`: glibc's, sampled (see the module documentation).
    ///
    /// # Safety
    /// As C's `malloc`.
    #[no_mangle]
    #[unsafe(naked)]
    pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
        core::arch::naked_asm!(
            "mov rax, qword ptr [rip + memprof_preload_countdown@GOTTPOFF]",
            "mov rcx, qword ptr fs:[rax]",
            "cmp rdi, rcx",
            "jae 2f",
            "sub rcx, rdi",
            "mov qword ptr fs:[rax], rcx",
            "jmp qword ptr [rip + {real}@GOTPCREL]",
            // The slow path gets the program's stack pointer (at the return address into
            // it) and frame pointer, where the call stack starts.
            "2:",
            "mov rsi, rsp",
            "mov rdx, rbp",
            "jmp {slow}",
            real = sym __libc_malloc,
            slow = sym malloc_slow,
        )
    }

    /// `malloc` when the countdown runs out (or was drawn in another session); `sp` and
    /// `bp` are the program's registers at `malloc`'s entry.
    extern "C" fn malloc_slow(size: usize, sp: usize, bp: usize) -> *mut c_void {
        // SAFETY: no preconditions.
        let p = unsafe { __libc_malloc(size) };
        on_alloc_slow_at(countdown(), p.cast(), size, sp, bp);
        p
    }

    /// `free`: glibc's; a sampled block's death is recorded first. Keeps errno (checked by
    /// `fixtures/c/edge.c`): the fast path touches no errno, the slow path restores it, and
    /// glibc's free keeps it since 2.33.
    ///
    /// # Safety
    /// As C's `free`: `ptr` is null or a live block of this allocator.
    #[no_mangle]
    #[unsafe(naked)]
    pub unsafe extern "C" fn free(ptr: *mut c_void) {
        core::arch::naked_asm!(
            "mov rax, rdi",
            "shr rax, {shift}",
            "and rax, {mask}",
            "mov rdx, qword ptr [rip + {filter}@GOTPCREL]",
            "cmp byte ptr [rdx + rax], 0",
            "jne 2f",
            "jmp qword ptr [rip + {real}@GOTPCREL]",
            "2:",
            "jmp {slow}",
            shift = const memprof::__private::FILTER_SHIFT,
            mask = const memprof::__private::FILTER_MASK,
            filter = sym memprof::__private::FILTER,
            real = sym __libc_free,
            slow = sym free_slow,
        )
    }

    /// `free` of a block whose filter counter is not 0 (it may be sampled). As
    /// `free_checked`, with the filter test already done.
    extern "C" fn free_slow(ptr: *mut c_void) {
        if ptr.is_null() {
            return;
        }
        on_dealloc_counted(ptr.cast());
        // SAFETY: the caller's contract (free's): a live block of this allocator.
        unsafe { __libc_free(ptr) };
    }
}

#[cfg(target_arch = "x86_64")]
use fast::countdown;
#[cfg(target_arch = "x86_64")]
pub use fast::{free, malloc};

#[cfg(not(target_arch = "x86_64"))]
mod fast {
    use super::*;
    use memprof::__private::Countdown;

    thread_local! {
        static COUNTDOWN: Countdown = const { Countdown::new() };
    }

    /// The calling thread's countdown.
    pub(super) fn countdown<'a>() -> &'a Countdown {
        // SAFETY: the thread-local lives as long as the thread (it has no destructor); the
        // reference never leaves the allocation call it was made for.
        COUNTDOWN.with(|c| unsafe { &*(c as *const Countdown) })
    }

    /// `malloc`: glibc's, sampled.
    ///
    /// # Safety
    /// As C's `malloc`.
    #[no_mangle]
    pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
        // SAFETY: no preconditions.
        let p = unsafe { __libc_malloc(size) };
        on_alloc_in(countdown(), p.cast(), size);
        p
    }

    /// `free`: glibc's; a sampled block's death is recorded first. Keeps errno.
    ///
    /// # Safety
    /// As C's `free`: `ptr` is null or a live block of this allocator.
    #[no_mangle]
    pub unsafe extern "C" fn free(ptr: *mut c_void) {
        // SAFETY: the caller's contract.
        unsafe { free_checked(ptr) }
    }
}

#[cfg(not(target_arch = "x86_64"))]
use fast::countdown;
#[cfg(not(target_arch = "x86_64"))]
pub use fast::{free, malloc};

/// `free` past the fast path: a sampled block's death is recorded, then glibc frees it.
/// (On x86-64, `free`'s own filter test comes first: see `fast::free_slow`.)
///
/// # Safety
/// As C's `free`: `ptr` is null or a live block of this allocator.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn free_checked(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    // The hook keeps errno (its slow path saves and restores it; the fast path is one
    // load), and so does glibc's free since 2.33.
    on_dealloc(ptr.cast());
    // SAFETY: the caller passes a live block.
    unsafe { __libc_free(ptr) };
}

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
    let old = before_realloc(ptr.cast());
    // SAFETY: the caller passes a live block.
    let new = unsafe { __libc_realloc(ptr, size) };
    match at(sp, bp) {
        Some(regs) => on_realloc_at(countdown(), ptr.cast(), old, new.cast(), size, regs),
        None => on_realloc_in(countdown(), ptr.cast(), old, new.cast(), size),
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

/// Looks `name` up in the objects after this one, once, caching it in `slot`.
fn next_symbol(slot: &AtomicPtr<c_void>, name: &core::ffi::CStr) -> *mut c_void {
    let mut f = slot.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: `name` is NUL-terminated; RTLD_NEXT is a valid pseudo-handle.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(f, Ordering::Release);
    }
    f
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

/// `dlclose`: glibc's, inside [`around_dlclose`], which writes what the profile needs from
/// the library while it is still mapped and then lets the DWARF unwinder list the objects
/// still loaded.
///
/// # Safety
/// As C's `dlclose`.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let f = next_symbol(&REAL, c"dlclose");
    if f.is_null() {
        return -1;
    }
    // SAFETY: `f` is glibc's dlclose, of this signature.
    let f: unsafe extern "C" fn(*mut c_void) -> c_int = unsafe { core::mem::transmute(f) };
    // SAFETY: as the caller's contract.
    around_dlclose(|| unsafe { f(handle) })
}

/// `_exit` (and `_Exit`, the same function in glibc): writes what the profile has so far
/// ([`memprof::__private::before_quick_exit`]), then glibc's `_exit`.
///
/// # Safety
/// As C's `_exit`.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    memprof::__private::before_quick_exit();
    let f = next_symbol(&REAL, c"_exit");
    if !f.is_null() {
        // SAFETY: `f` is glibc's _exit, of this signature.
        let f: unsafe extern "C" fn(c_int) -> ! = unsafe { core::mem::transmute(f) };
        // SAFETY: as the caller's contract.
        unsafe { f(status) }
    }
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

type Argv = *const *const core::ffi::c_char;

/// Brings the profile up to date, then calls glibc's `name` (found once, cached in `slot`)
/// through `call`; -1 with ENOSYS when it cannot be found. errno is glibc's.
fn exec_with(
    slot: &AtomicPtr<c_void>,
    name: &core::ffi::CStr,
    call: impl FnOnce(*mut c_void) -> c_int,
) -> c_int {
    let f = before_exec(slot, name);
    if f.is_null() {
        return -1;
    }
    call(f)
}

/// Brings the profile up to date ([`memprof::__private::before_exec`]) and returns glibc's
/// `name` (found once, cached in `slot`), with errno as the caller left it; null with
/// ENOSYS when it cannot be found.
fn before_exec(slot: &AtomicPtr<c_void>, name: &core::ffi::CStr) -> *mut c_void {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    let saved = unsafe { *libc::__errno_location() };
    memprof::__private::before_exec();
    let f = next_symbol(slot, name);
    set_errno(if f.is_null() { libc::ENOSYS } else { saved });
    f
}

/// `execve`: writes what the profile has so far ([`memprof::__private::before_exec`]: the new
/// image never finishes this one's file), then glibc's. The other `exec` functions glibc
/// exports call its `execve` internally, past this hook, so they are hooked too.
///
/// # Safety
/// As C's `execve`.
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const core::ffi::c_char, argv: Argv, envp: Argv) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    exec_with(&REAL, c"execve", |f| {
        // SAFETY: `f` is glibc's execve, of this signature; the arguments are the caller's.
        unsafe {
            let f: unsafe extern "C" fn(*const core::ffi::c_char, Argv, Argv) -> c_int =
                core::mem::transmute(f);
            f(path, argv, envp)
        }
    })
}

/// `execv`: see [`execve`].
///
/// # Safety
/// As C's `execv`.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const core::ffi::c_char, argv: Argv) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    exec_with(&REAL, c"execv", |f| {
        // SAFETY: `f` is glibc's execv, of this signature; the arguments are the caller's.
        unsafe {
            let f: unsafe extern "C" fn(*const core::ffi::c_char, Argv) -> c_int =
                core::mem::transmute(f);
            f(path, argv)
        }
    })
}

/// `execvp`: see [`execve`].
///
/// # Safety
/// As C's `execvp`.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const core::ffi::c_char, argv: Argv) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    exec_with(&REAL, c"execvp", |f| {
        // SAFETY: `f` is glibc's execvp, of this signature; the arguments are the caller's.
        unsafe {
            let f: unsafe extern "C" fn(*const core::ffi::c_char, Argv) -> c_int =
                core::mem::transmute(f);
            f(file, argv)
        }
    })
}

/// `execvpe`: see [`execve`].
///
/// # Safety
/// As C's `execvpe`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const core::ffi::c_char, argv: Argv, envp: Argv) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    exec_with(&REAL, c"execvpe", |f| {
        // SAFETY: `f` is glibc's execvpe, of this signature; the arguments are the caller's.
        unsafe {
            let f: unsafe extern "C" fn(*const core::ffi::c_char, Argv, Argv) -> c_int =
                core::mem::transmute(f);
            f(file, argv, envp)
        }
    })
}

/// `fexecve`: see [`execve`].
///
/// # Safety
/// As C's `fexecve`.
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    exec_with(&REAL, c"fexecve", |f| {
        // SAFETY: `f` is glibc's fexecve, of this signature; the arguments are the caller's.
        unsafe {
            let f: unsafe extern "C" fn(c_int, Argv, Argv) -> c_int = core::mem::transmute(f);
            f(fd, argv, envp)
        }
    })
}

/// `execl`, `execlp` and `execle`: see [`execve`]. They are C-variadic, which stable Rust
/// cannot define, so each is a naked function that keeps every argument register (and
/// `al`, the count of vector registers a variadic call passes) and the stack as they came,
/// calls [`before_variadic_exec`] in between, and tail-jumps to glibc's function with the
/// caller's arguments untouched (x86-64; elsewhere glibc's run unhooked).
#[cfg(target_arch = "x86_64")]
mod variadic_exec {
    use super::*;

    /// glibc's `execl`, `execlp` and `execle`, found once.
    static REAL: [AtomicPtr<c_void>; 3] = [const { AtomicPtr::new(core::ptr::null_mut()) }; 3];
    const NAMES: [&core::ffi::CStr; 3] = [c"execl", c"execlp", c"execle"];

    /// Brings the profile up to date and returns glibc's function number `which` (null,
    /// with ENOSYS, when it cannot be found), keeping errno.
    extern "C" fn before_variadic_exec(which: usize) -> *mut c_void {
        let which = which.min(2);
        before_exec(&REAL[which], NAMES[which])
    }

    /// glibc's function could not be found: -1 (errno is ENOSYS, see `before_exec`).
    extern "C" fn not_found() -> c_int {
        -1
    }

    macro_rules! hook {
        ($name:ident, $which:literal) => {
            /// See the module documentation.
            ///
            /// # Safety
            /// As C's function of this name (declared variadic in C).
            #[no_mangle]
            #[unsafe(naked)]
            pub unsafe extern "C" fn $name() -> c_int {
                core::arch::naked_asm!(
                    // Entry: rsp = 8 mod 16. Seven pushes align it for the call.
                    "push rdi",
                    "push rsi",
                    "push rdx",
                    "push rcx",
                    "push r8",
                    "push r9",
                    "push rax",
                    "mov edi, {which}",
                    "call {before}",
                    "mov r11, rax",
                    "pop rax",
                    "pop r9",
                    "pop r8",
                    "pop rcx",
                    "pop rdx",
                    "pop rsi",
                    "pop rdi",
                    "test r11, r11",
                    "jz {fail}",
                    "jmp r11",
                    which = const $which,
                    before = sym before_variadic_exec,
                    fail = sym not_found,
                )
            }
        };
    }

    hook!(execl, 0);
    hook!(execlp, 1);
    hook!(execle, 2);
}

/// `_Exit`: see [`_exit`].
///
/// # Safety
/// As C's `_Exit`.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    // SAFETY: the same contract.
    unsafe { _exit(status) }
}

extern "C" fn init() {
    memprof::__private::init();
    reset_countdown();
    // After the agent's own handler (child handlers run in the order registered), which
    // starts a followed child's session.
    // SAFETY: registers a plain function without arguments; no preconditions.
    unsafe { libc::pthread_atfork(None, None, Some(reset_countdown)) };
}

/// Zeroes the calling thread's countdown after a session started: its next allocation
/// takes the slow path and draws a gap in the new session (see `fast`). A countdown parked
/// while no session ran would otherwise be used up before the thread sampled again.
extern "C" fn reset_countdown() {
    countdown().countdown.set(0);
}

/// The constructor: starts profiling when the loader has initialised the process.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

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
