//! The fast paths of `malloc` and `free`, in assembly (x86-64).
//!
//! A shared library's Rust thread-locals are reached through `__tls_get_addr` (the
//! general-dynamic model; stable Rust cannot ask for another), which costs more than the
//! rest of an unsampled `malloc`. So the thread's [`Countdown`] lives in a thread-local of
//! the initial-exec model declared here (the library is loaded at start-up, so its TLS is
//! in the static block), and `malloc` and `free` are naked functions whose common case is
//! a handful of instructions ending in a tail jump to the next definition (glibc's, or the
//! program's own allocator: the slot of `crate::next`'s table, one load and an indirect
//! jump, as the GOT slot of `__libc_malloc` was before):
//!
//! - `malloc(n)`: if `n < countdown`, `countdown -= n` and jump to the next `malloc`
//!   (the sampler's `sample_in` fast path without its session check, see below);
//!   otherwise jump to
//!   `malloc_slow` with the program's `rsp` (pointing at the return address into it) and
//!   `rbp`, which allocates, samples through `sample_in`, and starts the call stack at the
//!   program's frame (the capture's `capture_at_entry`): none of the profiler's
//!   frames is unwound, and `--depth` counts the program's frames only.
//! - `free(p)`: if `p`'s counter in the live table's filter ([`memprof::__private::FILTER`],
//!   indexed with the filter's own mask word) is 0, `p` is not a sampled block: jump to the
//!   next `free`; otherwise jump to `free_slow`.
//!
//! Neither touches the stack, so the slow paths and the next allocator see the caller's
//! own frame and alignment. The other entry points reach the same countdown through [`countdown`].
//!
//! `sample_in` also compares the countdown's epoch with the sampler's
//! [`EPOCH`](memprof::__private::EPOCH), so that a countdown drawn in another session (at
//! another rate) is drawn again. This library's sessions all sample at one rate (a forked
//! child's follows its parent's settings) and the geometric gap is memoryless, so a
//! countdown left from an earlier session is as good as a new draw, and `malloc` skips the
//! check (two loads and a compare). The slow path still sees a session change when the
//! countdown runs out. What the check also did, `reset_countdown` does: the countdown a
//! thread parked while no session ran is zeroed when one starts (at start-up and in a
//! followed child, on the only thread there is).

use crate::next;
use core::ffi::c_void;
#[cfg(not(target_arch = "x86_64"))]
use memprof::__private::{on_alloc_in, on_dealloc};
#[cfg(target_arch = "x86_64")]
use memprof::__private::{on_alloc_slow_at, on_dealloc_counted};

pub(crate) use imp::countdown;
#[cfg(target_arch = "x86_64")]
pub(crate) use imp::countdown_tpoff;

#[cfg(target_arch = "x86_64")]
mod imp {
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

    /// The offset of this library's countdown block from a thread's thread pointer (the
    /// same in every thread: the block is in the static TLS area).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn countdown_tpoff() -> i64 {
        let tp: usize;
        // SAFETY: `fs:[0]` holds the thread pointer (x86-64 TLS ABI); only a register is
        // written.
        unsafe {
            core::arch::asm!("mov {tp}, qword ptr fs:[0]", tp = out(reg) tp,
                options(nostack, readonly, preserves_flags))
        };
        (countdown_addr() as usize).wrapping_sub(tp) as i64
    }

    /// The calling thread's countdown.
    #[inline]
    pub(crate) fn countdown<'a>() -> &'a Countdown {
        // SAFETY: the address is this thread's block of the TLS variable above, valid and
        // initialised (zeroed) for the thread's lifetime; the reference never leaves the
        // allocation call it was made for, and only this thread touches the block.
        unsafe { &*countdown_addr() }
    }

    /// `malloc`: the next definition's, sampled (see the module documentation).
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
            "jmp qword ptr [rip + {next} + {slot}]",
            // The slow path gets the program's stack pointer (at the return address into
            // it) and frame pointer, where the call stack starts.
            "2:",
            "mov rsi, rsp",
            "mov rdx, rbp",
            "jmp {slow}",
            next = sym next::NEXT,
            slot = const next::MALLOC * 8,
            slow = sym malloc_slow,
        )
    }

    /// `malloc` when the countdown runs out (or was drawn in another session); `sp` and
    /// `bp` are the program's registers at `malloc`'s entry.
    extern "C" fn malloc_slow(size: usize, sp: usize, bp: usize) -> *mut c_void {
        // SAFETY: no preconditions.
        let p = unsafe { next::malloc()(size) };
        if crate::before_start() {
            crate::early_start();
        }
        on_alloc_slow_at(countdown(), p.cast(), size, sp, bp);
        if crate::before_start() {
            crate::keep_counting();
        }
        p
    }

    /// `free`: the next definition's; a sampled block's death is recorded first. Keeps errno (checked by
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
            "mov rdx, qword ptr [rip + {filter}@GOTPCREL]",
            // The mask is the filter's first word: 0 sends every free to counter 0.
            "and rax, qword ptr [rdx]",
            "cmp byte ptr [rdx + rax + {counters}], 0",
            "jne 2f",
            "jmp qword ptr [rip + {next} + {slot}]",
            "2:",
            "jmp {slow}",
            shift = const memprof::__private::FILTER_SHIFT,
            counters = const memprof::__private::FILTER_COUNTERS_AT,
            filter = sym memprof::__private::FILTER,
            next = sym next::NEXT,
            slot = const next::FREE * 8,
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
        unsafe { next::free()(ptr) };
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::*;
    use memprof::__private::Countdown;

    thread_local! {
        static COUNTDOWN: Countdown = const { Countdown::new() };
    }

    /// The calling thread's countdown.
    pub(crate) fn countdown<'a>() -> &'a Countdown {
        // SAFETY: the thread-local lives as long as the thread (it has no destructor); the
        // reference never leaves the allocation call it was made for.
        COUNTDOWN.with(|c| unsafe { &*(c as *const Countdown) })
    }

    /// `malloc`: the next definition's, sampled.
    ///
    /// # Safety
    /// As C's `malloc`.
    #[no_mangle]
    pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
        // SAFETY: no preconditions.
        let p = unsafe { next::malloc()(size) };
        if crate::before_start() {
            crate::early_start();
        }
        on_alloc_in(countdown(), p.cast(), size);
        if crate::before_start() {
            crate::keep_counting();
        }
        p
    }

    /// `free`: the next definition's; a sampled block's death is recorded first. Keeps errno.
    ///
    /// # Safety
    /// As C's `free`: `ptr` is null or a live block of this allocator.
    #[no_mangle]
    pub unsafe extern "C" fn free(ptr: *mut c_void) {
        // SAFETY: the caller's contract.
        unsafe { free_checked(ptr) }
    }
}

/// `free` past the fast path: a sampled block's death is recorded, then the next `free`
/// frees it.
/// (On x86-64, `free`'s own filter test comes first: see `imp::free_slow`.)
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
    unsafe { next::free()(ptr) };
}
