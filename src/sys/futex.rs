//! Futex waits and wakes on a 32-bit word, and a lock built on them (bare, or with the
//! data it guards): how a thread waits for another (or for another process) without
//! spinning.
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
/// once) or the wake finds the caller queued. Returns the call's errno (0: it returned
/// 0): a caller that may run under a seccomp filter tells a refusal by it
/// (`sys::seccomp::note_refused`).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout_ns: u64) -> i32 {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    let timeout: *const libc::timespec = if timeout_ns == 0 { core::ptr::null() } else { &ts };
    // SAFETY: `word` is a valid, aligned 32-bit word for the call's duration; `timeout` is
    // null or points at a valid relative timespec that outlives the call. FUTEX_WAIT only
    // reads the word.
    let r = unsafe {
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
    if r == 0 {
        0
    } else {
        crate::sys::errno::errno()
    }
}

/// The most words one [`wait_any`] sleeps on (the kernel's limit).
pub(crate) const WAIT_ANY_MAX: usize = 128;

/// One word of a [`wait_any`]: the kernel's `struct futex_waitv`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Waitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// `FUTEX2_SIZE_U32`: a 32-bit word, shared (no `FUTEX2_PRIVATE`), as [`wake`] wakes it.
const FUTEX2_SIZE_U32: u32 = 2;

/// Sleeps while every word of `words` holds its expected value, at most `timeout_ns` (0: no
/// limit), or until a [`wake`] on any of them, a signal, or a spurious wake-up (the caller
/// looks again either way): `futex_waitv`, Linux 5.16 and later. As with [`wait`], a wake
/// after the caller last looked at a word is never lost. Words past [`WAIT_ANY_MAX`] are
/// not waited on. Returns the call's errno (0: a word was woken): `ENOSYS` on a kernel
/// without the call, `ETIMEDOUT`, `EAGAIN` (a word had moved), `EINTR`.
pub(crate) fn wait_any(words: &[(&AtomicU32, u32)], timeout_ns: u64) -> i32 {
    let mut list = [Waitv { val: 0, uaddr: 0, flags: 0, reserved: 0 }; WAIT_ANY_MAX];
    let n = words.len().min(WAIT_ANY_MAX);
    for (w, (word, expected)) in list.iter_mut().zip(words) {
        *w = Waitv {
            val: u64::from(*expected),
            uaddr: word.as_ptr() as u64,
            flags: FUTEX2_SIZE_U32,
            reserved: 0,
        };
    }
    // The timeout is absolute, on the monotonic clock.
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    if timeout_ns != 0 {
        // SAFETY: `ts` is a valid out pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let at = (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64)
            .saturating_add(timeout_ns);
        ts.tv_sec = (at / 1_000_000_000) as libc::time_t;
        ts.tv_nsec = (at % 1_000_000_000) as libc::c_long;
    }
    let timeout: *const libc::timespec = if timeout_ns == 0 { core::ptr::null() } else { &ts };
    // SAFETY: `list` holds `n` valid entries, each naming a valid, aligned 32-bit word that
    // outlives the call (borrowed from `words`); `timeout` is null or a valid absolute
    // timespec on the clock named. The call only reads the words.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            list.as_ptr(),
            n as libc::c_uint,
            0 as libc::c_uint,
            timeout,
            libc::CLOCK_MONOTONIC,
        )
    };
    if r >= 0 {
        0
    } else {
        crate::sys::errno::errno()
    }
}

/// Wakes up to `n` threads (of any process mapping the word) sleeping in [`wait`] or
/// [`wait_any`] on `word`.
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

    /// Takes the lock when it is free; `None` when held.
    pub(crate) fn try_lock(&self) -> Option<LockGuard<'_>> {
        self.0.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).ok()?;
        Some(LockGuard(self))
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

/// A [`Lock`] with the data it guards: the session's own state. Unlike std's `Mutex`, a
/// child process made by a raw `clone` (no fork handler ran: `engine::forked`) can take it
/// as free when a thread it lacks held it at the `clone` ([`Mutex::reset_in_child`]): a
/// std `Mutex` held so stays held for good. Not poisoned by a panic (the session's callers
/// took a poisoned one as it was).
#[derive(Debug)]
pub(crate) struct Mutex<T> {
    lock: Lock,
    data: core::cell::UnsafeCell<T>,
}

// SAFETY: the data is only reached through a guard, and the lock makes guards exclusive;
// it moves between threads with them, hence `T: Send`.
unsafe impl<T: Send> Sync for Mutex<T> {}

impl<T> Mutex<T> {
    /// A free lock around `value`.
    pub(crate) const fn new(value: T) -> Mutex<T> {
        Mutex { lock: Lock::new(), data: core::cell::UnsafeCell::new(value) }
    }

    /// Takes the lock, sleeping while another thread holds it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        MutexGuard { _held: self.lock.lock(), data: &self.data }
    }

    /// Takes the lock when it is free; `None` when held.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        Some(MutexGuard { _held: self.lock.try_lock()?, data: &self.data })
    }

    /// In a child made by a raw `clone`: the lock is free, and its data `value`. The old
    /// data is leaked, never read (the thread that held the lock may have been changing
    /// it), never dropped (it may name what only the parent has: a thread, a file).
    ///
    /// # Safety
    /// The calling thread is the only one of its process and holds no guard of this lock.
    pub(crate) unsafe fn reset_in_child(&self, value: T) {
        // SAFETY: the caller's contract: nobody else can reach the data, and no reference
        // to it exists; the write neither reads nor drops what was there.
        unsafe { core::ptr::write(self.data.get(), value) };
        self.lock.0.store(0, Ordering::Release);
    }
}

/// A [`Mutex`] held: its data, and the lock released when dropped.
#[derive(Debug)]
pub(crate) struct MutexGuard<'a, T> {
    _held: LockGuard<'a>,
    data: &'a core::cell::UnsafeCell<T>,
}

impl<T> core::ops::Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock: no other reference to the data exists.
        unsafe { &*self.data.get() }
    }
}

impl<T> core::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.data.get() }
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

    /// A wait on several words ends at a wake of any of them, at once when one has moved,
    /// and at the timeout otherwise (a kernel without `futex_waitv` says so).
    #[test]
    fn a_wait_on_several_words_ends_on_any() {
        let (a, b) = (AtomicU32::new(0), AtomicU32::new(0));
        let t0 = std::time::Instant::now();
        let err = wait_any(&[(&a, 0), (&b, 0)], 20_000_000);
        if err == libc::ENOSYS {
            return;
        }
        assert_eq!(err, libc::ETIMEDOUT);
        assert!(t0.elapsed().as_millis() >= 20);
        assert_eq!(wait_any(&[(&a, 0), (&b, 1)], 5_000_000_000), libc::EAGAIN, "b had moved");
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(30));
                b.store(2, Ordering::Release);
                wake(&b, 1);
            });
            let t1 = std::time::Instant::now();
            while b.load(Ordering::Acquire) == 0 {
                wait_any(&[(&a, 0), (&b, 0)], 10_000_000_000);
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

    /// A `Mutex` left held (its guard forgotten, as a thread the child lacks leaves it) is
    /// free again after `reset_in_child`, with the new data.
    #[test]
    fn a_held_mutex_is_free_after_a_reset() {
        let m = Mutex::new(vec![1u8, 2, 3]);
        let held = m.lock();
        assert!(m.try_lock().is_none());
        core::mem::forget(held);
        // SAFETY: the test's own lock: no other thread uses it, and no guard is alive.
        unsafe { m.reset_in_child(vec![4]) };
        let mut g = m.try_lock().expect("free after the reset");
        assert_eq!(*g, vec![4]);
        g.push(5);
        drop(g);
        assert_eq!(*m.lock(), vec![4, 5]);
    }
}
