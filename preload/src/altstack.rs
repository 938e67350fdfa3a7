//! `sigaltstack`: a thread's alternate signal stack set, seen so that the profiler looks it
//! up again (`memprof`'s `engine/thread.rs` §3: a sample taken in a handler running on that
//! stack blocks signals while the unwinder runs on its own stack). The profiler looks a
//! thread's alternate stack up once, at its first switch to that stack; a program that sets
//! one later (most do it after their first `malloc`) is told here, on the thread whose stack
//! it is, and so is one that sets it through `syscall(SYS_sigaltstack, ...)` (`seccomp`).
//! A raw system call is not seen (the limit `docs/limits.md` states).
//!
//! The next definition (glibc's) is found without allocating when the library starts
//! ([`resolve`]), so that a call from a signal handler finds it resolved.

use core::ffi::{c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};

/// The next definition of `sigaltstack` (null until resolved).
static NEXT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// Finds the next definition of `sigaltstack`, unless found already. Allocates nothing,
/// calls no `dlsym`; takes the loader's (recursive) lock. Called when the library starts.
pub(crate) fn resolve() {
    if !NEXT.load(Ordering::Acquire).is_null() {
        return;
    }
    let names: [&CStr; 1] = [c"sigaltstack"];
    let mut found = [core::ptr::null_mut(); 1];
    // Any address inside this library names it: the lookup starts after it.
    memprof::__private::next_definitions(resolve as *const () as usize, &names, &mut found);
    if !found[0].is_null() {
        NEXT.store(found[0], Ordering::Release);
    }
}

/// `sigaltstack`: glibc's; a new alternate stack set on this thread is told to the profiler.
/// errno is the call's.
///
/// # Safety
/// As C's `sigaltstack`.
#[no_mangle]
pub unsafe extern "C" fn sigaltstack(ss: *const libc::stack_t, old: *mut libc::stack_t) -> c_int {
    let mut f = NEXT.load(Ordering::Acquire);
    if f.is_null() {
        resolve();
        f = NEXT.load(Ordering::Acquire);
    }
    let r = if f.is_null() {
        // No later definition (not seen under `LD_PRELOAD`, where glibc's follows): the
        // system call itself, whose result and errno are the function's.
        // SAFETY: as the caller's contract; the kernel reads `ss` and writes `old`.
        unsafe { libc::syscall(libc::SYS_sigaltstack, ss, old) as c_int }
    } else {
        type Real = unsafe extern "C" fn(*const libc::stack_t, *mut libc::stack_t) -> c_int;
        // SAFETY: `f` is the next definition of `sigaltstack`, of this signature.
        let f: Real = unsafe { core::mem::transmute::<*mut c_void, Real>(f) };
        // SAFETY: the caller's contract, which is glibc's function's.
        unsafe { f(ss, old) }
    };
    if r == 0 && !ss.is_null() {
        memprof::__private::alt_stack_changed();
    }
    r
}
