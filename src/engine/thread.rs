//! The sample path's per-thread state, allocated when a thread first needs it.
//!
//! # 1. Why not thread-local storage
//! Every thread-local of the preload library is part of its `PT_TLS` segment, and glibc
//! carves the static TLS block of every thread, its TLS included, out of the thread's own
//! stack: a thread created with a `PTHREAD_STACK_MIN` stack lost ~5.9 KB of its 16 KiB to
//! memprof before it ran a line. So only what the fast path and the reentrancy check need
//! stays there (the preload library's countdown, the sampler's busy flag, and the pointer
//! below: a few words); the rest (the sampler's generator and ids, the unwinder's stack top,
//! remembered walks and last walk's steps, the stacks sent to a collector: ~15 KB) is a
//! [`Blocks`] allocated the first time the thread takes the sample path while a session
//! runs. A thread that never samples never gets one.
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
//! 8 KiB `sigaltstack`. So the block starts with a stack of its own, above a `PROT_NONE`
//! guard page, and [`on_walk_stack`] runs such calls there (through `sys::on_stack`, whose
//! switch unwinders and debuggers walk back through): they read the program's stack only
//! through the bounds the capture passes them, so which stack they run on does not change
//! their result. Its top [`WALK_USE`] bytes are the walk's (16 KiB; 256 KiB in an
//! unoptimised build).
//!
//! Signals stay deliverable meanwhile, and no system call is made: a mask around each
//! switch (two `rt_sigprocmask` calls) cost as much as the rest of the sample on programs
//! whose walks need framehop at most samples (a CPython interpreter: more call sites than
//! the compiled rules' table holds). A handler of the program that lands during such a
//! call, and was not installed on an alternate stack, runs on the walk stack below the
//! walk's frames, so below the walk's part lies [`HANDLER_ROOM`] (128 KiB) for it: as
//! much as a whole thread stack of musl's default size, eight times glibc's
//! `PTHREAD_STACK_MIN`, sixteen times `SIGSTKSZ`; what a handler may take on the thread's
//! own stack is the program's business, and one that works on every thread of a program
//! built against either C library, or on an alternate stack, works here. A handler that
//! needs more faults on the guard page, as it would at the end of a small thread's stack,
//! rather than writing over anything. Pages of the stack that are never touched are never
//! backed by memory, and are not counted as the profiler's (`rawmem::map_reserving`): a
//! walk touches its top few pages.
//!
//! What such a handler may do, and what follows:
//! - Allocate or free: the thread is inside the sample path (`busy`), so its allocations
//!   are not sampled (counted as skipped) and its frees of sampled blocks are deferred
//!   (`live` §4): the walk stack is never entered twice on a thread ([`Blocks`] says
//!   whether it is taken, as a second guard).
//! - Leave by `siglongjmp`: the walk never ends, the thread stays marked busy and its walk
//!   stack taken, so it takes no further sample (each counted as skipped); nothing of the
//!   walk's lives on the program's stack. The mask would only have moved the handler's
//!   landing after the walk, still inside the sample path.
//! - Unwind the interrupted stack (a CPU profiler's `SIGPROF`, `backtrace()`): it crosses
//!   the switch's frame back to the program's frames (`sys::on_stack`).
//! - Run on an alternate stack (`SA_ONSTACK`): the kernel moves to it, as it would from
//!   the thread's own stack. The one case that needs care is a sample taken *inside* a
//!   handler that runs on the thread's alternate stack: on the walk stack, a second
//!   `SA_ONSTACK` handler would be put at the top of the alternate stack (the kernel
//!   tells whether a thread is on it by its stack pointer alone), over the frames of the
//!   first. So the thread's alternate stack is looked up at its first switch (one
//!   `sigaltstack` call), and again at its next switch after the thread sets one (the
//!   preload library's `sigaltstack` and `syscall` say so: [`alt_stack_changed`]); a
//!   switch made from inside it blocks signals for the call as before: two
//!   `rt_sigprocmask` calls, for walks made in such handlers only. An alternate stack that
//!   disarms itself while in use (`SS_AUTODISARM`) needs none. One set where nothing tells
//!   (a raw system call, as Go's runtime makes; a program that profiles itself through
//!   `Sampled`, or one `memprof attach` reached, setting it after the thread's first
//!   switch) is not known; but a switch made with the stack pointer off the thread's own
//!   stack (above its top, or more than [`OWN_STACK_SPAN`] below it) blocks signals too, so
//!   only such a stack carved out of the thread's own stack is left unguarded: a sample in
//!   a handler on it whose walk needs framehop, while a second signal with an
//!   `SA_ONSTACK` handler arrives. Under a seccomp filter, which may
//!   refuse the calls (`sys::seccomp`), neither the lookup nor the mask is made.

use crate::engine::callstack::per_thread::PerThread;
use crate::engine::sampler::per_thread::ThreadState;
use crate::sys::rawmem;
use core::cell::Cell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, Ordering};

/// The part of the walk stack the unwinder's framehop calls use (§3). An unoptimised build
/// (a `cargo test` of a crate that uses `memprof::testing`, whose binaries keep no frame
/// pointers, so the DWARF unwinder runs) takes several times the stack of an optimised
/// one: the same unwinding overflowed 16 KiB there.
const WALK_USE: usize = if cfg!(debug_assertions) { 256 * 1024 } else { 16 * 1024 };

/// The part of the walk stack below the walk's: room for a signal handler of the program
/// that lands during a walk (§3).
const HANDLER_ROOM: usize = 128 * 1024;

/// The size of the stack the unwinder's framehop calls run on ([`on_walk_stack`]).
const WALK_STACK: usize = WALK_USE + HANDLER_ROOM;

/// A thread's state beyond its countdown and busy flag. `repr(C)`: the walk stack comes
/// first, right above the guard page below the block, so that an overflow faults.
#[repr(C)]
pub(crate) struct Blocks {
    /// The stack framehop runs on (§3), 16-byte aligned at its top.
    walk_stack: WalkStack,
    /// The walk stack is in use on this thread (a signal handler's sample runs on its own
    /// stack instead).
    walk_stack_taken: Cell<bool>,
    /// The thread's alternate signal stack, as a switch found it (§3).
    alt_stack: AltStack,
    /// The sampler's (generator, ids, thread number).
    pub(crate) sampler: ThreadState,
    /// The unwinder's (stack top, remembered walks).
    pub(crate) callstack: PerThread,
    /// The stacks this thread sent whole to a consumer in another process (`known`).
    pub(crate) known: crate::engine::known::Known,
}

/// The walk stack's bytes.
#[repr(C, align(16))]
struct WalkStack([u8; WALK_STACK]);

/// A thread's alternate signal stack as a switch to the walk stack found it: where a
/// switch must block signals (§3). All zero: not looked up yet.
struct AltStack {
    /// Looked up, and not set since ([`alt_stack_changed`]).
    known: Cell<bool>,
    /// Its lowest address.
    lo: Cell<usize>,
    /// Its size; 0 when there is none, or when it disarms itself while in use.
    size: Cell<usize>,
}

impl AltStack {
    /// Looks the thread's alternate signal stack up: one `sigaltstack` query.
    #[cold]
    #[inline(never)]
    fn look_up(&self) {
        self.known.set(true);
        let saved = crate::sys::errno::SavedErrno::save();
        let mut ss = libc::stack_t { ss_sp: core::ptr::null_mut(), ss_flags: 0, ss_size: 0 };
        // SAFETY: a query only (no new stack): writes the current one into `ss`, a valid
        // local.
        let ok = unsafe { libc::sigaltstack(core::ptr::null(), &mut ss) } == 0;
        saved.restore();
        let armed = ok && ss.ss_flags & (libc::SS_DISABLE | SS_AUTODISARM) == 0;
        self.lo.set(if armed { ss.ss_sp as usize } else { 0 });
        self.size.set(if armed { ss.ss_size } else { 0 });
    }

    /// Whether stack pointer `sp` lies in the thread's alternate signal stack (as the
    /// kernel tells: above its lowest address, at most its size above), looked up at the
    /// first call unless a seccomp filter may refuse the call (§3).
    #[inline(always)]
    fn holds(&self, sp: usize) -> bool {
        if !self.known.get() {
            if crate::sys::seccomp::filtered() {
                return false;
            }
            self.look_up();
        }
        let off = sp.wrapping_sub(self.lo.get());
        off != 0 && off <= self.size.get()
    }
}

/// The calling thread has set its alternate signal stack (the preload library's
/// `sigaltstack` and `syscall`, after the call): its next switch to the walk stack looks
/// it up again (§3). Maps nothing; a thread without a block has nothing to forget.
pub fn alt_stack_changed() {
    // SAFETY: the slot is this thread's own.
    let p = unsafe { &*slot() }.get();
    // SAFETY: a non-null slot holds this thread's mapped, live block (as in `blocks`).
    if let Some(b) = unsafe { p.as_ref() } {
        b.alt_stack.known.set(false);
    }
}

/// How far below the top of its stack a thread's own frames may lie, as far as the switch
/// trusts (§3): the default thread stack and main stack limit. Deeper (a larger stack), or
/// above the top, is taken for another stack.
const OWN_STACK_SPAN: usize = 8 << 20;

/// Whether `sp` lies off the thread's own stack (§3): above its top, or more than
/// [`OWN_STACK_SPAN`] below it. An alternate signal stack set where nothing told the
/// profiler lies there unless it was carved out of the thread's own stack; so does a
/// coroutine's stack, whose switches then pay the mask. False while the top is not known.
#[inline(always)]
fn off_own_stack(t: &PerThread, sp: usize) -> bool {
    let hi = crate::engine::callstack::per_thread::known_hi(t);
    hi != 0 && (sp > hi || hi - sp > OWN_STACK_SPAN)
}

/// `SS_AUTODISARM` (Linux 4.7), which the `libc` crate does not name: the kernel disarms
/// the alternate stack while a handler runs on it.
const SS_AUTODISARM: i32 = 1 << 31;

/// The guard page below a block.
const GUARD: usize = 4096;

/// The size of a block's mapping: the guard page and whole pages for the block.
const MAPPED: usize = GUARD + ((core::mem::size_of::<Blocks>() + 4095) & !4095);

/// The bytes at the start of a block's mapping that are never or seldom touched: the guard
/// page and the handlers' room of the walk stack, not counted as the profiler's memory
/// (§3).
const RESERVE: usize = GUARD + HANDLER_ROOM;

// What is counted is the walk's part and the rest of the state, a few pages.
const _: () = assert!(MAPPED - RESERVE <= WALK_USE + 16 * 1024);

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
    unsafe { rawmem::unmap_reserving(block.cast::<u8>().sub(GUARD), MAPPED, RESERVE) };
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
    let mapping = rawmem::map_reserving(MAPPED, RESERVE);
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
/// aborts) and must not capture a call stack (its frames end at the switch). No system
/// call, but the first time on a thread and in a handler on its alternate stack (§3).
#[inline(never)]
pub(crate) fn on_walk_stack<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if let Some(b) = blocks() {
        if !b.walk_stack_taken.replace(true) {
            let here = 0u8;
            let sp = core::hint::black_box(&here) as *const u8 as usize;
            let masked = (b.alt_stack.holds(sp) || off_own_stack(&b.callstack, sp))
                && !crate::sys::seccomp::filtered();
            let old_mask = if masked { Some(block_signals()) } else { None };
            let mut f = Some(f);
            let mut result = None;
            let mut run = || result = f.take().map(|f| f());
            // The top of the walk stack (16-byte aligned: its type's alignment and size).
            let top = b.walk_stack.0.as_ptr_range().end.cast_mut();
            // SAFETY: `top` is the 16-byte-aligned end of this thread's walk stack, which
            // nothing else uses (`walk_stack_taken`), above its guard page, deep enough for
            // framehop's call (`WALK_USE`); `run` cannot unwind (`f` does not, by contract).
            unsafe { crate::sys::on_stack::call_on(top, &mut run) };
            b.walk_stack_taken.set(false);
            if let Some(old) = old_mask {
                restore_signals(old);
            }
            if let Some(r) = result {
                return r;
            }
            unreachable_fallback();
        }
    }
    f()
}

/// Blocks every signal but glibc's own for this thread; returns the mask to restore. The
/// raw system call, with the kernel's 8-byte set: glibc's wrapper costs the sample path
/// ~300 bytes of stack. Keeps errno.
#[cfg(target_arch = "x86_64")]
#[cold]
#[inline(never)]
fn block_signals() -> u64 {
    let saved = crate::sys::errno::SavedErrno::save();
    let mut old_mask: u64 = 0;
    // SAFETY: rt_sigprocmask reads one 8-byte set and writes one, both valid locals, for
    // this thread only; the mask keeps glibc's internal signals (SIGCANCEL, SIGSETXID: 32
    // and 33) deliverable, as pthread_sigmask does.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &ALL_BUT_GLIBCS,
            &mut old_mask,
            8usize,
        )
    };
    saved.restore();
    old_mask
}

/// Sets this thread's signal mask back to `old` ([`block_signals`]). Keeps errno.
#[cfg(target_arch = "x86_64")]
#[cold]
#[inline(never)]
fn restore_signals(old: u64) {
    let saved = crate::sys::errno::SavedErrno::save();
    // SAFETY: sets the mask saved by `block_signals`, a valid local.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &old,
            core::ptr::null_mut::<u64>(),
            8usize,
        )
    };
    saved.restore();
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
        assert!(MAPPED >= GUARD + core::mem::size_of::<Blocks>());
    }
}
