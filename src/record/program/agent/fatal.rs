//! A fatal signal in a program that does not handle it (§4): the profile is brought up to
//! date, then the signal is delivered as it would have been.

use super::{pid, OWNER};
use core::cell::UnsafeCell;
use core::sync::atomic::Ordering;

/// The signals that kill a program that does not handle them, after which nothing of it
/// runs: the profile is brought up to date first (see [`on_fatal`]).
const FATAL: [libc::c_int; 5] =
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

/// The dispositions [`install_fatal_handlers`] replaced, by index in [`FATAL`].
struct OldActions(UnsafeCell<[Option<libc::sigaction>; 5]>);

// SAFETY: written once, in the constructor before any other thread of the process runs
// code of ours; only read afterwards (by the handler).
unsafe impl Sync for OldActions {}

static OLD_ACTIONS: OldActions = OldActions(UnsafeCell::new([None; 5]));

/// Installs [`on_fatal`] for the [`FATAL`] signals whose disposition is the default (a
/// program's own handler, installed before us or after, is left to run instead).
///
/// # Safety
/// Call once, from the constructor, before other threads run.
pub(super) unsafe fn install_fatal_handlers() {
    // SAFETY: the caller guarantees no concurrent access to OLD_ACTIONS.
    let old = unsafe { &mut *OLD_ACTIONS.0.get() };
    for (i, &sig) in FATAL.iter().enumerate() {
        // SAFETY: sigaction is plain data; a null new action only reads the current one.
        let mut cur: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: valid signal number and out pointer.
        if unsafe { libc::sigaction(sig, core::ptr::null(), &mut cur) } != 0
            || cur.sa_sigaction != libc::SIG_DFL
        {
            continue;
        }
        // SAFETY: zeroed sigaction is valid; fields set below.
        let mut act: libc::sigaction = unsafe { core::mem::zeroed() };
        act.sa_sigaction = on_fatal as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: sa_mask is a valid sigset_t to initialise.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: valid signal number, action and out pointer.
        if unsafe { libc::sigaction(sig, &act, core::ptr::null_mut()) } == 0 {
            old[i] = Some(cur);
        }
    }
}

/// A fatal signal in a program that does not handle it: the drain thread writes what is
/// queued and flushes (waited for at most 500 ms, with async-signal-safe calls only: see
/// [`crate::session::flush_from_signal`]), then the program's own disposition is put back
/// and the signal raised again, so the program dies as it would have (a fault re-executes
/// the faulting instruction; `abort` raises again). errno is kept.
extern "C" fn on_fatal(sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let saved = crate::sys::errno::errno();
    if OWNER.load(Ordering::Acquire) == pid() {
        crate::session::flush_from_signal(500);
    }
    // SAFETY: OLD_ACTIONS is only read after the constructor wrote it.
    let old = unsafe { &*OLD_ACTIONS.0.get() };
    if let Some(i) = FATAL.iter().position(|&s| s == sig) {
        if let Some(act) = &old[i] {
            // SAFETY: restores the disposition sigaction returned for this signal.
            unsafe { libc::sigaction(sig, act, core::ptr::null_mut()) };
        }
    }
    // Raised again: pending until this handler returns (the signal is blocked meanwhile),
    // then delivered with the program's disposition.
    // SAFETY: raise is async-signal-safe.
    unsafe { libc::raise(sig) };
    crate::sys::errno::set_errno(saved);
}
