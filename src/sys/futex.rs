//! Futex waits and wakes on a 32-bit word, and a lock built on them: how a thread waits
//! for another (or for another process) without spinning.
//!
//! The operations are the shared kind (no `FUTEX_PRIVATE_FLAG`): the word may lie in a
//! `MAP_SHARED` mapping whose other user is another process (`memprof record`'s ring),
//! and on private memory a shared futex works the same, at the cost of a lookup of the
//! page in the kernel. They allocate nothing, take no lock of user space, and keep no
//! state; they may set errno (callers on the sample path save it, `sys::errno`).

use core::sync::atomic::{AtomicU32, Ordering};

/// Sleeps while `word` holds `expected`, at most `timeout_ns` (0: no limit), or until a
/// [`wake`] on it, a signal, or a spurious wake-up: the caller looks again either way. The
/// kernel compares the word and queues the caller atomically, so a wake after the caller
/// last looked at the word is never lost: either the word has moved (the call returns at
/// once) or the wake finds the caller queued.
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    let timeout: *const libc::timespec = if timeout_ns == 0 { core::ptr::null() } else { &ts };
    // SAFETY: `word` is a valid, aligned 32-bit word for the call's duration; `timeout` is
    // null or points at a valid relative timespec that outlives the call. FUTEX_WAIT only
    // reads the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            timeout,
            core::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// Wakes up to `n` threads (of any process mapping the word) sleeping in [`wait`] on
/// `word`.
pub(crate) fn wake(word: &AtomicU32, n: u32) {
    let n = n.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: `word` is a valid, aligned 32-bit word; FUTEX_WAKE neither reads nor writes
    // it (the kernel uses its address as the key only).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            core::ptr::null::<libc::timespec>(),
            core::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// A lock whose contended waiters sleep on a futex (Drepper's three-state mutex: 0 free,
/// 1 held, 2 held with sleepers), for cold paths of the profiler's own that may wait long
/// while holding it (the side log's writer waiting for the collector): no spinning, and
/// its release makes a system call only when someone sleeps. Not reentrant.
#[derive(Debug)]
pub(crate) struct Lock(AtomicU32);

impl Lock {
    /// A free lock.
    pub(crate) const fn new() -> Lock {
        Lock(AtomicU32::new(0))
    }

    /// Takes the lock, sleeping while another thread holds it.
    pub(crate) fn lock(&self) -> LockGuard<'_> {
        if self.0.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            while self.0.swap(2, Ordering::Acquire) != 0 {
                wait(&self.0, 2, 0);
            }
        }
        LockGuard(self)
    }
}

/// The lock held: released when dropped.
#[derive(Debug)]
pub(crate) struct LockGuard<'a>(&'a Lock);

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if self.0 .0.swap(0, Ordering::Release) == 2 {
            wake(&self.0 .0, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait on a word that no longer holds the expected value returns at once; one that
    /// does sleeps until the timeout or a wake.
    #[test]
    fn waits_end_on_a_changed_word_a_wake_or_the_timeout() {
        let w = AtomicU32::new(1);
        let t0 = std::time::Instant::now();
        wait(&w, 0, 5_000_000_000);
        assert!(t0.elapsed().as_millis() < 1000, "the word had moved");
        wait(&w, 1, 20_000_000);
        assert!(t0.elapsed().as_millis() >= 20, "timed out");
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(30));
                w.store(2, Ordering::Release);
                wake(&w, u32::MAX);
            });
            let t1 = std::time::Instant::now();
            while w.load(Ordering::Acquire) == 1 {
                wait(&w, 1, 10_000_000_000);
            }
            assert!(t1.elapsed().as_secs() < 5, "woken");
        });
    }

    /// The lock excludes: counted increments under it are all there.
    #[test]
    fn the_lock_excludes() {
        struct Count(core::cell::UnsafeCell<u64>);
        // SAFETY: the count is only touched under the lock.
        unsafe impl Sync for Count {}
        impl Count {
            fn bump(&self) {
                // SAFETY: called with the lock held: no other thread touches the count.
                unsafe { *self.0.get() += 1 };
            }
        }
        let (lock, count) = (Lock::new(), Count(core::cell::UnsafeCell::new(0)));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        let _g = lock.lock();
                        count.bump();
                    }
                });
            }
        });
        assert_eq!(count.0.into_inner(), 40_000);
    }
}
