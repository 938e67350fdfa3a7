//! The sample path's per-thread state, allocated when a thread first needs it.
//!
//! # 1. Why not thread-local storage
//! Every thread-local of the preload library is part of its `PT_TLS` segment, and glibc
//! carves the static TLS block of every thread, its TLS included, out of the thread's own
//! stack: a thread created with a `PTHREAD_STACK_MIN` stack lost ~5.9 KB of its 16 KiB to
//! memprof before it ran a line. So only what the fast path and the reentrancy check need
//! stays there (the preload library's countdown, the sampler's busy flag, and the pointer
//! below: a few words); the rest (the sampler's generator and ids, the unwinder's stack top
//! and remembered walks, ~5.8 KB) is a [`Blocks`] allocated the first time the thread takes
//! the sample path while a session runs. A thread that never samples never gets one.
//!
//! # 2. Memory and release
//! A block is mapped from the kernel ([`rawmem::map`]): no lock, so a signal
//! handler's allocation may be the one that creates it, and zeroed, which every field
//! allows (the types of `crate::sys::tls`: cells, flags, `MaybeUninit`s behind a flag).
//! The thread's pointer is set before anything else can run on the thread, then the block
//! is registered with a `pthread` key whose destructor unmaps it when the thread exits
//! (after clearing the pointer: an allocation in a later destructor maps a fresh one, which
//! glibc's next round of destructors releases; after its last round, the block of an
//! allocation made then is not unmapped). The key is created when a session begins
//! ([`prepare`]), off the sample path; `pthread_setspecific` of one of the first 32 keys a
//! process creates allocates nothing (glibc keeps them in the thread descriptor); for a
//! later key it may call `calloc`, which comes back to the profiler and finds the pointer
//! already set. If no key could be created, blocks are not released (documented leak of
//! one block per sampling thread, only when the process has used up its keys).
//!
//! If the kernel refuses the mapping, the thread does not sample (the callers stop its
//! countdown).
//!
//! # 3. The walk stack
//! The DWARF unwinder's first walk through an address hands the frame to framehop, whose
//! gimli unwind-table rows take ~6 KB of stack: on the program's stack, a sampled `malloc`
//! needed ~7.3 KB, too much for a thread on a `PTHREAD_STACK_MIN` stack or a handler on an
//! 8 KiB `sigaltstack`. The block starts with a 16 KiB stack (256 KiB in an unoptimised
//! build: [`WALK_STACK`]), above a `PROT_NONE` guard page, and [`on_walk_stack`] runs such calls there: they read the program's stack only
//! through the bounds the capture passes them, so which stack they run on does not change
//! their result. Signals are blocked meanwhile (two `rt_sigprocmask` calls, only when
//! framehop runs: a return address seen for the first time, or a frame whose rule is a
//! DWARF expression), so that no handler of the program ever runs on that stack (but under
//! a seccomp filter, which may refuse the calls: `sys::seccomp`). Pages of it that are
//! never touched are never backed by memory.

use crate::engine::callstack::per_thread::PerThread;
use crate::engine::sampler::per_thread::ThreadState;
use crate::sys::rawmem;
use core::cell::Cell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, Ordering};

/// The size of the stack the unwinder's framehop calls run on ([`on_walk_stack`]). An
/// unoptimised build (a `cargo test` of a crate that uses `memprof::testing`, whose
/// binaries keep no frame pointers, so the DWARF unwinder runs) takes several times the
/// stack of an optimised one: the same unwinding overflowed 16 KiB there. Untouched pages
/// cost nothing (§3).
const WALK_STACK: usize = if cfg!(debug_assertions) { 256 * 1024 } else { 16 * 1024 };

/// A thread's state beyond its countdown and busy flag. `repr(C)`: the walk stack comes
/// first, right above the guard page below the block, so that an overflow faults.
#[repr(C)]
pub(crate) struct Blocks {
    /// The stack framehop runs on (§3), 16-byte aligned at its top.
    walk_stack: WalkStack,
    /// The walk stack is in use on this thread (a signal handler's sample runs on its own
    /// stack instead).
    walk_stack_taken: Cell<bool>,
    /// The sampler's (generator, ids, thread number).
    pub(crate) sampler: ThreadState,
    /// The unwinder's (stack top, remembered walks).
    pub(crate) callstack: PerThread,
}

/// The walk stack's bytes.
#[repr(C, align(16))]
struct WalkStack([u8; WALK_STACK]);

/// The guard page below a block.
const GUARD: usize = 4096;

/// The size of a block's mapping: the guard page and whole pages for the block.
const MAPPED: usize = GUARD + ((core::mem::size_of::<Blocks>() + 4095) & !4095);

crate::sys::tls::thread_block! {
    /// This thread's block, or null before its first sample.
    fn slot() -> Cell<*mut Blocks> = Cell::new(core::ptr::null_mut()), "memprof_0_1_thread_blocks"
}

/// The key whose destructor releases a thread's block: 0 before [`prepare`], the key + 2
/// after, 1 when none could be created.
static KEY: AtomicU32 = AtomicU32::new(0);

/// Creates the key that releases blocks at thread exit, once (a session begins). Not on the
/// sample path.
pub(crate) fn prepare() {
    crate::engine::callstack::per_thread::bind_stack_queries();
    if KEY.load(Ordering::Acquire) != 0 {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; `release` is an `extern "C"` function that lives
    // as long as the process.
    let created = unsafe { libc::pthread_key_create(&mut key, Some(release)) } == 0;
    let v = if created { key.saturating_add(2) } else { 1 };
    if KEY.compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire).is_err() && created {
        // Another session start won the race: its key serves.
        // SAFETY: the key was just created and is used by nobody.
        unsafe { libc::pthread_key_delete(key) };
    }
}

/// Unmaps a thread's block at its exit (the key's destructor).
extern "C" fn release(block: *mut c_void) {
    // SAFETY: the slot is this exiting thread's own.
    let s = unsafe { &*slot() };
    if s.get() == block.cast() {
        s.set(core::ptr::null_mut());
    }
    // SAFETY: `block` lies `GUARD` bytes into the mapping `first_block` made for this
    // thread (the only value ever stored under the key), and the thread is exiting: no
    // call of the profiler on it holds a reference into the block (destructors run outside
    // any allocation call).
    unsafe { rawmem::unmap(block.cast::<u8>().sub(GUARD), MAPPED) };
}

/// This thread's block, mapped on first use; `None` if the kernel refused the mapping.
/// Never blocks, never panics, keeps errno, allocates nothing through the profiled
/// allocator (see the module documentation).
#[inline(always)]
pub(crate) fn blocks<'a>() -> Option<&'a Blocks> {
    // SAFETY: the slot is this thread's own.
    let p = unsafe { &*slot() }.get();
    if p.is_null() {
        return first_block();
    }
    // SAFETY: a non-null slot holds this thread's mapped, live block (cleared before the
    // block is unmapped); only this thread uses it, within the call that asked for it, and
    // every field is a cell.
    Some(unsafe { &*p })
}

#[cold]
#[inline(never)]
fn first_block<'a>() -> Option<&'a Blocks> {
    let saved = crate::sys::errno::SavedErrno::save();
    let mapping = rawmem::map(MAPPED);
    if mapping.is_null() {
        saved.restore();
        return None;
    }
    // A seccomp filter may refuse `mprotect` (`sys::seccomp`): then the block goes without
    // its guard page, as when the call fails.
    if !crate::sys::seccomp::filtered() {
        // SAFETY: the first page of a fresh mapping of our own; a failure leaves it
        // readable (no guard, nothing else changes).
        unsafe { libc::mprotect(mapping.cast(), GUARD, libc::PROT_NONE) };
    }
    // SAFETY: `GUARD` bytes into a mapping of `MAPPED` bytes: in bounds, page-aligned.
    let p = unsafe { mapping.add(GUARD) }.cast::<Blocks>();
    // SAFETY: the slot is this thread's own.
    unsafe { &*slot() }.set(p);
    let key = KEY.load(Ordering::Acquire);
    if key >= 2 {
        // SAFETY: `key - 2` is a key `prepare` created and never deletes; the value is
        // this thread's block.
        unsafe { libc::pthread_setspecific(key - 2, p.cast()) };
    }
    saved.restore();
    // SAFETY: `p` is fresh zeroed memory of at least `size_of::<Blocks>()` bytes,
    // page-aligned, and all-zero is a valid `Blocks` (module documentation, §2).
    Some(unsafe { &*p })
}

/// Runs `f` on this thread's walk stack (§3) when it has one and it is free, else on the
/// current stack. For code whose stack use is large and independent of the program's
/// stack contents: framehop's unwinding of one frame (gimli's unwind-table rows alone are
/// ~6 KB of stack). `f` must not unwind (it runs under an `extern "C"` frame: a panic
/// aborts) and must not capture a call stack (its frames end at the switch).
#[inline(never)]
pub(crate) fn on_walk_stack<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if let Some(b) = blocks() {
        if !b.walk_stack_taken.replace(true) {
            // No signal handler of the program may run on the walk stack (its use of stack
            // is the program's business): signals wait until the call is over. The raw
            // system call, with the kernel's 8-byte set: glibc's wrapper costs the sample
            // path ~300 bytes of stack.
            // Under a seccomp filter, which may refuse the call (`sys::seccomp`), signals
            // stay deliverable: a handler that lands in the call runs on the walk stack.
            let masked = !crate::sys::seccomp::filtered();
            let saved = crate::sys::errno::SavedErrno::save();
            let mut old_mask: u64 = 0;
            if masked {
                // SAFETY: rt_sigprocmask reads one 8-byte set and writes one, both valid
                // locals, for this thread only; the mask keeps glibc's internal signals
                // (SIGCANCEL, SIGSETXID: 32 and 33) deliverable, as pthread_sigmask does.
                unsafe {
                    libc::syscall(
                        libc::SYS_rt_sigprocmask,
                        libc::SIG_SETMASK,
                        &ALL_BUT_GLIBCS,
                        &mut old_mask,
                        8usize,
                    )
                };
            }
            let mut f = Some(f);
            let mut result = None;
            let mut run = || result = f.take().map(|f| f());
            let mut run: &mut dyn FnMut() = &mut run;
            // The top of the walk stack (16-byte aligned: its type's alignment and size).
            let top = b.walk_stack.0.as_ptr_range().end;
            extern "C" fn trampoline(data: *mut c_void) {
                // SAFETY: `data` is the `&mut &mut dyn FnMut()` below, alive and not
                // otherwise used during the call.
                let run = unsafe { &mut *(data as *mut &mut dyn FnMut()) };
                run();
            }
            // SAFETY: `top` is the 16-byte-aligned end of this thread's walk stack, which
            // nothing else uses (`walk_stack_taken`), with a guard page below the block;
            // the old stack pointer is kept in r12 (callee-saved, so the call preserves it)
            // and restored after the call; the call follows the C ABI (`clobber_abi`).
            unsafe {
                core::arch::asm!(
                    "mov r12, rsp",
                    "mov rsp, {top}",
                    "call {trampoline}",
                    "mov rsp, r12",
                    top = in(reg) top,
                    trampoline = sym trampoline,
                    in("rdi") &mut run as *mut &mut dyn FnMut() as *mut c_void,
                    out("r12") _,
                    clobber_abi("C"),
                )
            };
            b.walk_stack_taken.set(false);
            if masked {
                // SAFETY: restores the mask saved above, a valid local.
                unsafe {
                    libc::syscall(
                        libc::SYS_rt_sigprocmask,
                        libc::SIG_SETMASK,
                        &old_mask,
                        core::ptr::null_mut::<u64>(),
                        8usize,
                    )
                };
            }
            saved.restore();
            if let Some(r) = result {
                return r;
            }
            unreachable_fallback();
        }
    }
    f()
}

/// Every signal but glibc's internal ones (32 and 33, bits 31 and 32), as the kernel's
/// 8-byte signal set.
#[cfg(target_arch = "x86_64")]
const ALL_BUT_GLIBCS: u64 = !((1 << 31) | (1 << 32));

/// The closure ran and left no result: impossible (it always stores one). Aborts rather
/// than panics (the sample path must not unwind).
#[cold]
fn unreachable_fallback() -> ! {
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's block is mapped once and stays the same; its release clears the slot
    /// and unmaps it, and the next use maps a fresh one; a new thread starts without one.
    #[test]
    fn one_block_per_thread_until_released() {
        prepare();
        std::thread::spawn(|| {
            let a = blocks().expect("mapped") as *const Blocks;
            assert_eq!(blocks().map(|b| b as *const Blocks), Some(a));
            release(a as *mut c_void);
            // SAFETY: this thread's own slot.
            assert!(unsafe { &*slot() }.get().is_null());
            // SAFETY: msync on an address range only reports whether it is mapped.
            let r = unsafe { libc::msync(a as *mut c_void, 4096, libc::MS_ASYNC) };
            assert_eq!((r, crate::sys::errno::errno()), (-1, libc::ENOMEM), "unmapped");
            assert!(blocks().is_some());
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            // SAFETY: this thread's own slot.
            assert!(unsafe { &*slot() }.get().is_null());
        })
        .join()
        .unwrap();
        assert!(MAPPED >= GUARD + core::mem::size_of::<Blocks>() && MAPPED <= 32 * 1024);
    }
}
