//! `prctl` and `syscall`: the two ways a C program installs a seccomp filter
//! (`prctl(PR_SET_SECCOMP, ...)`, and `syscall(SYS_seccomp, ...)` as libseccomp calls it),
//! seen so that the profiler makes none of its own system calls that the filter may refuse
//! (`memprof`'s `sys/seccomp.rs`).
//!
//! Both are variadic in C. On x86-64 and aarch64 Linux a variadic call passes its integer
//! arguments in the same registers (and, past six on x86-64, the same stack slots) as a
//! call with fixed ones, so a function with fixed `c_long` parameters receives them all and
//! passes them on unchanged; arguments the caller did not pass are whatever those
//! registers and slots held, passed on and ignored as they would have been. Each forwards
//! to the next definition (glibc's), found without allocating
//! ([`memprof::__private::next_definitions`]) when the library starts, or at the first call
//! if one comes earlier.
//!
//! `syscall` is also how the profiler's own code makes some calls (the futex), and Rust's
//! standard library some of its: those pass through here too, with two comparisons. One
//! that sets a thread's alternate signal stack is told to the profiler, as `sigaltstack`
//! tells it (`altstack`).

use core::ffi::{c_int, c_long, c_ulong, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};

/// The names forwarded to, in the order of [`NEXT`].
const NAMES: [&CStr; 2] = [c"syscall", c"prctl"];
/// Their next definitions (null until resolved).
static NEXT: [AtomicPtr<c_void>; 2] =
    [AtomicPtr::new(core::ptr::null_mut()), AtomicPtr::new(core::ptr::null_mut())];

/// Finds the next definitions of `syscall` and `prctl`, unless found already. Allocates
/// nothing, calls no `dlsym`; takes the loader's (recursive) lock. Called when the library
/// starts, before the session can sample.
pub(crate) fn resolve() {
    if NEXT.iter().all(|f| !f.load(Ordering::Acquire).is_null()) {
        return;
    }
    let mut found = [core::ptr::null_mut(); 2];
    // Any address inside this library names it: the lookup starts after it.
    memprof::__private::next_definitions(resolve as *const () as usize, &NAMES, &mut found);
    for (slot, f) in NEXT.iter().zip(found) {
        if !f.is_null() {
            slot.store(f, Ordering::Release);
        }
    }
}

/// The next definition of `NAMES[i]`, or null (then the call fails with ENOSYS).
fn next(i: usize) -> *mut c_void {
    let f = NEXT[i].load(Ordering::Acquire);
    if !f.is_null() {
        return f;
    }
    resolve();
    NEXT[i].load(Ordering::Acquire)
}

/// `seccomp(2)`'s operations that install a filter (strict mode is one too: it allows
/// four calls).
const SET_MODE_STRICT: c_long = 0;
const SET_MODE_FILTER: c_long = 1;

/// Runs `install`, a call that may install a seccomp filter, with the profiler told
/// before (a filter with `SECCOMP_FILTER_FLAG_TSYNC` lands on every thread at once),
/// and untold if it failed. errno is the call's.
fn installing(install: impl FnOnce() -> c_long) -> c_long {
    let before = memprof::__private::seccomp_installing();
    let r = install();
    if r != 0 {
        let saved = memprof::__private::errno();
        memprof::__private::seccomp_failed(before);
        memprof::__private::set_errno(saved);
    }
    r
}

/// `syscall`: glibc's, told of a `seccomp` call that installs a filter (see the module
/// documentation).
///
/// # Safety
/// As C's `syscall` with the arguments of system call `number`.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    number: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    type Real =
        unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;
    let f = next(0);
    if f.is_null() {
        memprof::__private::set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: `f` is the next definition of `syscall`, called with the caller's arguments
    // in the same registers and slots (module documentation).
    let f: Real = unsafe { core::mem::transmute::<*mut c_void, Real>(f) };
    if number == libc::SYS_seccomp && matches!(a1, SET_MODE_STRICT | SET_MODE_FILTER) {
        // SAFETY: as the caller's contract.
        return installing(|| unsafe { f(number, a1, a2, a3, a4, a5, a6) });
    }
    if number == libc::SYS_sigaltstack && a1 != 0 {
        // A new alternate signal stack for this thread (`altstack`).
        // SAFETY: as the caller's contract.
        let r = unsafe { f(number, a1, a2, a3, a4, a5, a6) };
        if r == 0 {
            memprof::__private::alt_stack_changed();
        }
        return r;
    }
    // SAFETY: as the caller's contract.
    unsafe { f(number, a1, a2, a3, a4, a5, a6) }
}

/// `prctl`: glibc's, told of a `PR_SET_SECCOMP` that installs a filter (see the module
/// documentation).
///
/// # Safety
/// As C's `prctl` with the arguments of `option`.
#[no_mangle]
pub unsafe extern "C" fn prctl(
    option: c_int,
    a2: c_ulong,
    a3: c_ulong,
    a4: c_ulong,
    a5: c_ulong,
) -> c_int {
    type Real = unsafe extern "C" fn(c_int, c_ulong, c_ulong, c_ulong, c_ulong) -> c_int;
    let f = next(1);
    if f.is_null() {
        memprof::__private::set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: `f` is the next definition of `prctl`, called with the caller's arguments in
    // the same registers (module documentation).
    let f: Real = unsafe { core::mem::transmute::<*mut c_void, Real>(f) };
    if option == libc::PR_SET_SECCOMP {
        // SAFETY: as the caller's contract.
        return installing(|| c_long::from(unsafe { f(option, a2, a3, a4, a5) })) as c_int;
    }
    // SAFETY: as the caller's contract.
    unsafe { f(option, a2, a3, a4, a5) }
}
