//! The collector's sleep between two passes (§1): on the futex words of its rings, the
//! ring directory's bell and its own, until there is work or something is due.
//!
//! # 8. When the collector runs
//! While many events come, the collector follows them: a pass that drained a queue half
//! full is followed by the next at once, one that drained more than a sixteenth of one
//! ([`TRICKLE_PART`]) by the next a millisecond later; the producers are not asked to wake
//! it (they make no system call), and one that waits for room is drained within that
//! millisecond. A pass that drained less (a trickle: a program sampled at the default
//! interval, say) or nothing is followed by a sleep on every attached queue's word
//! (`engine::queue` §6), the producers asked to wake it once a sixteenth of the queue
//! waits, on the ring directory's bell (`record/ring` §7: a new ring is ready), and on
//! words of this process ([`Wake`]: `record` stops the collector, or has seen its program
//! end; a `--serve` request wants a copy of the profile); the bell and those words end the
//! shorter sleeps too. A pass costs the collector tens of microseconds however little it
//! drains (being woken, the pass's own work): a trickle followed every two milliseconds
//! would make most of the collector's time at the default interval. Every sleep
//! ends at the latest when the next thing on the collector's own schedule is due: a
//! process's resident size (`sys::smaps::RESIDENT_EVERY_MS`, less often while it stays the
//! same), a look for new rings and ended processes ([`LOOK_EVERY_NS`]; every
//! [`ENDING_EVERY_NS`] for a process that said it is ending), a flush of what it wrote
//! ([`FLUSH_EVERY_NS`]), and its heartbeat, which the program reads as a sign of life
//! ([`HEARTBEAT_EVERY_NS`], well within `engine::consumer::STALE_NS`). A queue whose events
//! it could not take (a slot claimed and not published) or whose producers asked to be
//! polled (a seccomp filter) is looked at again after a millisecond or two. So a program
//! that does nothing costs the collector a few wake-ups a second, and one that allocates
//! costs its producers a system call for each sixteenth of a queue that fills while the
//! collector sleeps, and none while it follows a flow.
//!
//! The words are waited on together (`futex_waitv`, Linux 5.16 and later, at most
//! [`futex::WAIT_ANY_MAX`]): on an older kernel, or past that many rings, the collector
//! sleeps [`POLL_NS`] at a time without saying so, as it always did.

use super::Attached;
use crate::sys::futex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The collector's passes so far in this process, each followed by a sleep or the next
/// pass (§8): what the collector prints at its end under `MEMPROF_DEBUG_PEAK`, for tests
/// that must tell a collector that polls from one that sleeps. A process's voluntary
/// context switches cannot: they count every read that waits for the disk too (a cold
/// page cache, the symbols' files).
static PASSES: AtomicU64 = AtomicU64::new(0);

/// The collector's passes so far in this process (see [`PASSES`]).
pub(crate) fn passes() -> u64 {
    PASSES.load(Ordering::Relaxed)
}

/// How often the collector looks for new rings (the bell rings for most) and ended
/// processes (§8).
pub(super) const LOOK_EVERY_NS: u64 = 100_000_000;
/// How often it looks at a process that said it is ending, for [`ENDING_FOR_NS`] after.
pub(super) const ENDING_EVERY_NS: u64 = 2_000_000;
/// How long after a process said it is ending the collector looks at it every
/// [`ENDING_EVERY_NS`] (an `exec` that failed says so and runs on).
pub(super) const ENDING_FOR_NS: u64 = 1_000_000_000;
/// The longest sleep after a pass that wrote something: the recorder flushes at least
/// this often (`session::recorder::FLUSH_EVERY`, and a little more).
pub(super) const FLUSH_EVERY_NS: u64 = 51_000_000;
/// The longest sleep: the heartbeat the program reads is renewed at least this often.
pub(super) const HEARTBEAT_EVERY_NS: u64 = 100_000_000;
/// The sleep after a pass that found a queue held up or polled (§8), and every sleep when
/// the collector cannot be woken.
pub(super) const POLL_NS: u64 = 2_000_000;
/// The sleep after a pass that drained more than a [trickle](TRICKLE_PART) (§8).
const BUSY_NS: u64 = 1_000_000;
/// What a pass drained is a trickle below a queue's limit over this (§8): the collector
/// then sleeps on the queue, and the producers wake it once as much waits.
const TRICKLE_PART: usize = 16;

/// A word of this process the collector sleeps on, and what it says.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    word: AtomicU32,
    set: AtomicBool,
}

impl Wake {
    /// Says it, and wakes the collector.
    pub(crate) fn set(&self) {
        self.set.store(true, Ordering::Release);
        self.ring();
    }

    /// Wakes the collector (without saying anything).
    pub(crate) fn ring(&self) {
        self.word.fetch_add(1, Ordering::SeqCst);
        futex::wake(&self.word, 1);
    }

    /// Whether it was said.
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }
}

/// The collector's sleep: what it sleeps on, and whether the kernel lets it sleep on many
/// words at once.
pub(super) struct Sleep {
    bell: Option<&'static AtomicU32>,
    /// The bell and this process's words as last seen.
    seen: Vec<u32>,
    /// `futex_waitv` was refused (§8): sleeps of [`POLL_NS`].
    polling: bool,
}

/// What a pass found, for the sleep after it.
#[derive(Debug)]
pub(super) struct Pass {
    /// The largest share of a queue's capacity drained.
    pub(super) fullest: f64,
    /// When the next thing on the collector's own schedule is due
    /// ([`crate::engine::clock::monotonic_ns`]).
    pub(super) due: u64,
}

impl Pass {
    /// A pass starting at `now`: nothing due before the heartbeat.
    pub(super) fn new(now: u64) -> Pass {
        Pass { fullest: 0.0, due: now.saturating_add(HEARTBEAT_EVERY_NS) }
    }

    /// Something is due at `at`.
    pub(super) fn due_at(&mut self, at: u64) {
        self.due = self.due.min(at);
    }
}

impl Sleep {
    /// Sleeps on the bell `bell` (when the directory has one) and on this process's words.
    pub(super) fn new(bell: Option<&'static AtomicU32>) -> Sleep {
        Sleep { bell, seen: Vec::new(), polling: false }
    }

    /// True when the bell or one of `words` moved since the last sleep (a look is due).
    pub(super) fn rang(&mut self, words: &[&Wake]) -> bool {
        let now: Vec<u32> = self
            .bell
            .into_iter()
            .chain(words.iter().map(|w| &w.word))
            .map(|w| w.load(Ordering::Acquire))
            .collect();
        let moved = now != self.seen;
        self.seen = now;
        moved
    }

    /// Sleeps after `pass` (§8) on the queues of `rings`, the bell and `words`, at most
    /// until `pass.due`; `now` is when the pass started.
    pub(super) fn between_passes(
        &mut self,
        rings: &[Attached],
        words: &[&Wake],
        pass: &Pass,
        now: u64,
    ) {
        PASSES.fetch_add(1, Ordering::Relaxed);
        if pass.fullest >= 0.5 {
            return;
        }
        // Many events came: the next pass follows shortly, the queues not slept on (§8). A
        // trickle or nothing is slept on; producers that wait for room wake the sleeper
        // whatever waits (`engine::queue` §6).
        let flowing = pass.fullest >= 1.0 / TRICKLE_PART as f64;
        let mut timeout = pass.due.saturating_sub(now).min(HEARTBEAT_EVERY_NS);
        if flowing {
            timeout = timeout.min(BUSY_NS);
        }
        if self.polling {
            self.poll(words, timeout.min(POLL_NS));
            return;
        }
        let mut list: Vec<(&AtomicU32, u32)> = self
            .bell
            .into_iter()
            .chain(words.iter().map(|w| &w.word))
            .zip(self.seen.iter().copied())
            .collect();
        let mut asleep = Vec::new();
        for r in rings.iter().filter(|r| !r.done && !flowing) {
            let q = &r.queue;
            if list.len() >= futex::WAIT_ANY_MAX || q.consumer_polls() {
                timeout = timeout.min(POLL_NS);
                continue;
            }
            match q.consumer_sleeps(q.limit() / TRICKLE_PART) {
                Some(v) => {
                    list.push((q.consumer_word(), v));
                    asleep.push(q);
                }
                // Enough waits already, and the pass did not take it: a slot claimed and
                // not published holds the queue up.
                None => timeout = timeout.min(BUSY_NS),
            }
        }
        if timeout > 0 && futex::wait_any(&list, timeout) == libc::ENOSYS {
            self.polling = true;
        }
        for q in asleep {
            q.consumer_awake();
        }
        if self.polling {
            self.poll(words, timeout.min(POLL_NS));
        }
    }

    /// A sleep of `timeout` that only this process's first word (the stop) ends.
    fn poll(&self, words: &[&Wake], timeout: u64) {
        match words.first() {
            Some(stop) => {
                let seen = self.seen.get(usize::from(self.bell.is_some())).copied();
                futex::wait(&stop.word, seen.unwrap_or(0), timeout);
            }
            None => std::thread::sleep(std::time::Duration::from_nanos(timeout)),
        }
    }
}
