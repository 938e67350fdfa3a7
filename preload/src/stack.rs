//! `pthread_attr_setstacksize`: a thread gets the stack its program asked for, plus what
//! this library takes from it.
//!
//! A thread's static TLS is carved out of its stack, and a preloaded library's TLS is
//! static: every thread of a profiled program has a few hundred bytes less stack than the
//! program sized it for. Its first `malloc` also takes the sample path's slow branch (a
//! fresh countdown, and when sampled the stack capture: up to a few KiB through libgcc's
//! unwinder), where glibc's `malloc` needs a few hundred bytes. A program that sizes its
//! threads' stacks tightly (`PTHREAD_STACK_MIN`, with its first call of a function, and the
//! loader's lazy binding of it, 8 KB deep) would overflow under the profiler and not
//! without it. So the size a program sets is raised by [`EXTRA`]: stack is reserved
//! address space, touched only as used. A stack the program provides itself
//! (`pthread_attr_setstack`) cannot grow and is left as it is.

use crate::next_symbol;
use core::ffi::{c_int, c_void};
use core::sync::atomic::AtomicPtr;
use memprof::__private::{errno, set_errno};

/// Bytes added to a stack size the program sets: the library's static TLS (under 300 B)
/// and the sample path's use beyond glibc's `malloc` (libgcc's unwinder being the
/// deepest), rounded up to two pages.
pub(crate) const EXTRA: usize = 8192;

/// `pthread_attr_setstacksize`: see the module documentation. The size is checked by
/// glibc's function as given (EINVAL below the minimum), then raised.
///
/// # Safety
/// As C's `pthread_attr_setstacksize`.
#[no_mangle]
pub unsafe extern "C" fn pthread_attr_setstacksize(
    attr: *mut libc::pthread_attr_t,
    size: usize,
) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let saved = errno();
    let f = next_symbol(&REAL, c"pthread_attr_setstacksize");
    set_errno(saved);
    if f.is_null() {
        return libc::ENOSYS;
    }
    type Real = unsafe extern "C" fn(*mut libc::pthread_attr_t, usize) -> c_int;
    // SAFETY: `f` is the next definition of this function, of this signature.
    let f: Real = unsafe { core::mem::transmute::<*mut c_void, Real>(f) };
    // SAFETY: the caller's contract, which is glibc's function's.
    let checked = unsafe { f(attr, size) };
    if checked != 0 {
        return checked;
    }
    let Some(raised) = size.checked_add(EXTRA) else { return 0 };
    // SAFETY: as above; `attr` was just accepted with the smaller size.
    unsafe { f(attr, raised) }
}
