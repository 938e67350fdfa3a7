//! The consumer of the session's queue when it is another process (`memprof record`'s or
//! `attach`'s collector), as the producers see it: whether it is still there to make room.
//!
//! # 1. Signs of life
//! The collector renews a heartbeat at each of its passes, at least every 100 ms however
//! long it sleeps (`record/command/collect` §8), in the shared ring's header
//! ([`Consumer`]): a fresh one ([`STALE_NS`]) says it is alive at once. A stale one is not
//! a sign of death (a collector stopped, or starved of CPU, is still coming back): the
//! collector's pid and start time (written when the ring is made, from
//! `MEMPROF_COLLECTOR`, and when it attaches) are then looked up, at most every
//! [`LOOK_EVERY_NS`] for the whole process: no such process, a zombie, or a pid reused by
//! a process that started at another time ends every wait at once, and for good. A ring
//! that names no collector yet has only its heartbeat (set when the ring was made) to
//! speak for it.
//!
//! # 2. When the process cannot be looked up
//! The look-up makes system calls (`kill`, and an `open` and `read` of `/proc`), which a
//! seccomp filter may refuse (`sys::seccomp` §1). Under a filter none is made, and when a
//! look-up cannot tell (`/proc` refused for another reason than the process's absence) its
//! answer is not taken: the heartbeat alone speaks, with a long bound ([`SILENT_NS`]) that
//! a collector merely stopped or starved outlasts only in the rarest cases (then the
//! program drops what does not fit, counted, instead of waiting).
//!
//! # 3. The collector's verdict
//! The collector says what it made of the ring in [`Consumer::verdict`]: [`ACCEPTED`] when
//! it attached; [`REFUSED`] with its own ring version when the ring's version is not its
//! own (a preload library of another build, `record/ring` §6): it will never drain the
//! queue, so every wait ends at once and for good, and the program runs on unprofiled
//! (what does not fit is dropped and counted). A ring that names a collector which has not
//! attached after [`UNATTACHED_NS`] is taken as refused too: a collector of a build older
//! than the verdict (which skips such a ring without a word) would otherwise be waited for
//! as long as it lives.

use crate::engine::clock::monotonic_ns;
use crate::sys::errno::errno;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// When another process consumes the queue (`memprof record`'s collector): who it is, in
/// the shared ring's header, so that a full queue is waited for while it lives (`push` §1).
/// Null: the consumer is in this process.
pub(crate) static CONSUMER: AtomicPtr<Consumer> = AtomicPtr::new(core::ptr::null_mut());
/// A heartbeat younger than this: the consumer is alive (see `record/ring` §4).
pub(crate) const STALE_NS: u64 = 500_000_000;
/// How often a waiting producer wakes to look at the consumer, and how often the process
/// looks the collector up (§1).
pub(crate) const LOOK_EVERY_NS: u64 = 100_000_000;
/// How long a heartbeat may be silent before a collector that cannot be looked up is
/// taken as gone (§2).
pub(crate) const SILENT_NS: u64 = 10_000_000_000;
/// How long after its ring was made a collector that the ring names but has not attached
/// is waited for (§3).
pub(crate) const UNATTACHED_NS: u64 = 10_000_000_000;

/// [`Consumer::verdict`]: the collector attached to the ring (§3).
pub(crate) const ACCEPTED: u32 = 1;
/// [`Consumer::verdict`]: the collector refused the ring, or'ed with its own ring version
/// (§3).
pub(crate) const REFUSED: u32 = 1 << 31;

/// A consumer in another process, as the producers see it (in a shared mapping: atomics
/// only, `repr(C)`, zero when unknown). Its place in the ring's header does not change
/// from one ring version to the next (`record/ring` §6): a collector tells a ring of
/// any version that it refuses it.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Consumer {
    /// Its last sign of life: a [`monotonic_ns`] reading it renews at each pass (at least
    /// every 100 ms).
    pub(crate) heartbeat_ns: AtomicU64,
    /// Its process id, once it has attached (0: not yet).
    pub(crate) pid: AtomicU32,
    /// What it made of the ring (§3): 0 (nothing yet), [`ACCEPTED`], or [`REFUSED`] with
    /// its ring version.
    pub(crate) verdict: AtomicU32,
    /// Its process's start time (`/proc/<pid>/stat` field 22), to tell a reused pid.
    pub(crate) start: AtomicU64,
}

impl Consumer {
    /// A consumer not attached yet, with a heartbeat at `now` (a new ring's: the collector
    /// is given [`STALE_NS`] to attach before a full queue stops being waited for).
    pub(crate) fn new(now: u64) -> Consumer {
        Consumer {
            heartbeat_ns: AtomicU64::new(now),
            pid: AtomicU32::new(0),
            verdict: AtomicU32::new(0),
            start: AtomicU64::new(0),
        }
    }

    /// Says that process `pid`, started at `start`, consumes the queue now.
    pub(crate) fn attach(&self, pid: u32, start: u64) {
        self.start.store(start, Ordering::Relaxed);
        self.pid.store(pid, Ordering::Release);
    }

    /// The collector of ring version `version` refuses the ring (§3): every wait for it
    /// ends.
    pub(crate) fn refuse(&self, version: u32) {
        self.verdict.store(REFUSED | version, Ordering::Release);
    }
}

/// The last consumer process seen alive ([`identity`]) and when ([`monotonic_ns`]); the one
/// found gone (for good).
static SEEN_ALIVE: AtomicU64 = AtomicU64::new(0);
static SEEN_ALIVE_AT: AtomicU64 = AtomicU64::new(0);
static SEEN_GONE: AtomicU64 = AtomicU64::new(0);

/// A process's pid and start time in one word (never 0 for a real pid).
fn identity(pid: u32, start: u64) -> u64 {
    u64::from(pid) | start.wrapping_mul(0x9e37_79b9_7f4a_7c15) << 32 | 1 << 63
}

/// True unless the queue's consumer is in another process that no longer exists, or that
/// refused the ring (§1, §3). No allocation; may set errno.
pub(crate) fn consumer_alive() -> bool {
    let c = CONSUMER.load(Ordering::Acquire);
    // SAFETY: a non-null consumer points into a shared mapping that is never unmapped
    // while sampling may push (see `record/ring`).
    unsafe { c.as_ref() }.is_none_or(Consumer::alive)
}

impl Consumer {
    /// True unless this consumer refused the ring, or its process no longer exists (§1 to
    /// §3). A fresh heartbeat answers at once; past it, the process is looked up at most
    /// every [`LOOK_EVERY_NS`] (the answer is shared by every thread), unless a seccomp
    /// filter is on (§2). No allocation; may set errno.
    pub(crate) fn alive(&self) -> bool {
        self.alive_as(crate::sys::seccomp::filtered())
    }

    /// [`Consumer::alive`], with the look-up's system calls allowed unless `filtered`.
    fn alive_as(&self, filtered: bool) -> bool {
        let verdict = self.verdict.load(Ordering::Acquire);
        if verdict & REFUSED != 0 {
            return false;
        }
        let now = monotonic_ns();
        let age = now.saturating_sub(self.heartbeat_ns.load(Ordering::Relaxed));
        if age < STALE_NS {
            return true;
        }
        let pid = self.pid.load(Ordering::Acquire);
        if pid == 0 {
            // No collector has attached, and the ring is older than the time given it to.
            return false;
        }
        if verdict == 0 && age >= UNATTACHED_NS {
            // Named, and never attached: a collector that does not read this ring (§3).
            return false;
        }
        if filtered {
            return age < SILENT_NS;
        }
        let start = self.start.load(Ordering::Relaxed);
        let me = identity(pid, start);
        if SEEN_GONE.load(Ordering::Relaxed) == me {
            return false;
        }
        if SEEN_ALIVE.load(Ordering::Acquire) == me
            && now.saturating_sub(SEEN_ALIVE_AT.load(Ordering::Relaxed)) < LOOK_EVERY_NS
        {
            return true;
        }
        match process_alive(pid, start) {
            Some(true) => {
                SEEN_ALIVE_AT.store(now, Ordering::Relaxed);
                SEEN_ALIVE.store(me, Ordering::Release);
                true
            }
            Some(false) => {
                SEEN_GONE.store(me, Ordering::Relaxed);
                false
            }
            // Cannot tell (§2): the heartbeat speaks.
            None => age < SILENT_NS,
        }
    }
}

/// Whether process `pid`, started at `start` (0: any start), exists and has not ended (a
/// zombie has): `kill(pid, 0)` first, then its `/proc/<pid>/stat`, read into the stack.
/// `None` when it cannot be told (`/proc` unreadable for another reason than the process's
/// absence, as under a seccomp filter's `SECCOMP_RET_ERRNO`). No allocation; may set errno.
fn process_alive(pid: u32, start: u64) -> Option<bool> {
    // SAFETY: signal 0 sends nothing; the call only checks that the process exists.
    if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 && errno() == libc::ESRCH {
        return Some(false);
    }
    let mut path = [0u8; 32];
    let mut at = 0;
    for b in b"/proc/" {
        path[at] = *b;
        at += 1;
    }
    at += crate::sys::procfs::write_decimal(&mut path[at..], pid);
    for b in b"/stat" {
        path[at] = *b;
        at += 1;
    }
    // `path` ends with the NUL its zeroes left after `at` (at most 21 bytes are written).
    // SAFETY: `path` is NUL-terminated; the flags need no mode.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return match errno() {
            libc::ENOENT | libc::ESRCH => Some(false),
            _ => None,
        };
    }
    let mut buf = [0u8; 512];
    // SAFETY: reads at most `buf.len()` bytes into `buf`, from the descriptor opened above.
    let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    let read_errno = errno();
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    if got <= 0 {
        return match (got, read_errno) {
            (0, _) => Some(true),
            (_, libc::ESRCH) => Some(false),
            _ => None,
        };
    }
    let text = &buf[..got as usize];
    // The command name (field 2, in parentheses) may hold anything: the fields after it
    // start past its last ')'.
    let Some(close) = text.iter().rposition(|&b| b == b')') else {
        return Some(true);
    };
    let mut fields = text[close + 1..].split(|&b| b == b' ').filter(|f| !f.is_empty());
    if matches!(fields.next(), Some([b'Z' | b'X', ..])) {
        return Some(false);
    }
    // Field 22 is the 19th after the state (field 3).
    let started = fields.nth(18).and_then(|f| {
        f.iter().try_fold(0u64, |v, &d| {
            d.is_ascii_digit().then(|| v.wrapping_mul(10).wrapping_add(u64::from(d - b'0')))
        })
    });
    Some(match started {
        Some(s) if start != 0 => s == start,
        _ => true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The collector's process is looked up: this process is alive (with its own start
    /// time, or any), a pid with another start time is not the same process, a reaped
    /// child is gone.
    #[test]
    fn a_collector_is_alive_while_its_process_is() {
        let me = std::process::id();
        let start =
            crate::sys::procfs::stat_field("/proc/self/stat", crate::sys::procfs::START_TIME)
                .and_then(|s| s.parse().ok())
                .unwrap();
        assert_eq!((process_alive(me, start), process_alive(me, 0)), (Some(true), Some(true)));
        assert_eq!(process_alive(me, start + 1), Some(false), "a reused pid");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(process_alive(pid, 0), Some(false), "reaped");
    }

    /// A refusal ends the wait whatever the heartbeat says; under a filter a stale
    /// heartbeat is waited for up to `SILENT_NS`, without a look-up (the pid named here is
    /// nobody's, which a look-up would find gone); a collector named and never attached is
    /// waited for up to `UNATTACHED_NS`.
    #[test]
    fn verdicts_heartbeats_and_filters() {
        // Above any pid_max (2^22): no process has it.
        const NOBODY: u32 = 999_999_999;
        let now = monotonic_ns();
        let c = Consumer::new(now);
        c.attach(NOBODY, 1);
        c.verdict.store(ACCEPTED, Ordering::Relaxed);
        assert!(c.alive_as(false) && c.alive_as(true), "a fresh heartbeat");
        c.refuse(7);
        assert!(!c.alive_as(false) && !c.alive_as(true));
        assert_eq!(c.verdict.load(Ordering::Relaxed), REFUSED | 7);

        let c = Consumer::new(now - 2 * STALE_NS);
        c.attach(NOBODY, 1);
        c.verdict.store(ACCEPTED, Ordering::Relaxed);
        assert!(c.alive_as(true), "filtered: the heartbeat is within SILENT_NS");
        assert!(!c.alive_as(false), "looked up: nobody has that pid");
        c.heartbeat_ns.store(now - SILENT_NS - 1, Ordering::Relaxed);
        assert!(!c.alive_as(true), "filtered, and silent too long");

        // Named (MEMPROF_COLLECTOR) and never attached: this process, which is alive.
        let (me, start) = (std::process::id(), 0);
        let c = Consumer::new(now - 2 * STALE_NS);
        c.attach(me, start);
        assert!(c.alive_as(false), "looked up, alive, and within UNATTACHED_NS");
        c.heartbeat_ns.store(now - UNATTACHED_NS - 1, Ordering::Relaxed);
        assert!(!c.alive_as(false), "never attached: another build's collector");
        c.verdict.store(ACCEPTED, Ordering::Relaxed);
        assert!(c.alive_as(false), "attached once, alive: waited for");
    }
}
