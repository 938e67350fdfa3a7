//! Signal masks and thread counts for the threads the profiler keeps in a program.
#![forbid(unsafe_op_in_unsafe_fn)]

/// Restores the calling thread's signal mask when dropped (see [`block_all`]).
pub(crate) struct Blocked(libc::sigset_t);

impl Drop for Blocked {
    fn drop(&mut self) {
        // SAFETY: restores a mask that `pthread_sigmask` itself returned.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, core::ptr::null_mut()) };
    }
}

/// Blocks every signal on the calling thread until the guard is dropped: a thread spawned
/// meanwhile inherits the full mask, so no signal is ever delivered to it.
pub(crate) fn block_all() -> Blocked {
    // SAFETY: sigset_t is plain data, initialised by sigfillset/pthread_sigmask before use.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        Blocked(old)
    }
}

/// True when the process's main thread has ended (`pthread_exit` from `main`: it stays a
/// zombie, counted in the thread count, until the process ends) and the calling thread is
/// the only other one left. Reads `/proc/self/stat` (the thread count) and the main
/// thread's state; false when either cannot be read.
pub(crate) fn only_this_thread_left() -> bool {
    let pid = std::process::id();
    // SAFETY: gettid has no preconditions.
    if unsafe { libc::gettid() } as u32 == pid {
        return false;
    }
    use super::procfs::stat_field;
    let threads = stat_field("/proc/self/stat", 17).and_then(|n| n.parse::<u64>().ok());
    if threads != Some(2) {
        return false;
    }
    let main_state = stat_field(&format!("/proc/self/task/{pid}/stat"), 0);
    matches!(main_state.as_deref(), Some("Z" | "X"))
}
