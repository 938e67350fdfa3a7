//! The collector's readings of a process's `/proc/PID/smaps` (`collect` §6), on a thread of
//! their own.
//!
//! The kernel writes that file with the process's memory-map lock held for reading, and a
//! program that maps and unmaps all the time (glibc's arenas of hundreds of threads grow
//! and shrink their heaps with `mmap`, `mprotect` and `munmap`) holds it for writing over
//! and over: a reading then waited up to a third of a second. Made by the loop that drains
//! the queues, that wait stopped the draining; the queue filled, the program's threads
//! waited for room, and threads woken together preempted each other right after their
//! pushes, holding the blocks they had just sampled: sampled blocks outlived the program's
//! others and the live heap and its peak read high (the calibration suite's overloaded
//! churn). So the regular readings, and those at a new peak of the heap, are made here,
//! and the loop folds what they read when it comes. A last look asked for by an exiting
//! process stays the loop's own (the process waits for it, and has stopped allocating).
//!
//! A reading is given the moment it started, and the live heap the loop had folded when it
//! saw that it started (it looks at every pass: often while the program allocates, a few
//! times a second while it does not, `collect` §8).

use crate::engine::clock::{monotonic_ns, Params};
use crate::sys::smaps::{Kinds, Memory};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// A reading of the process's memory by kind.
pub(super) struct Reading {
    /// The process's clock when the reading started.
    pub(super) at: u64,
    /// The live heap the loop had folded then.
    pub(super) live: f64,
    pub(super) kinds: Kinds,
}

/// One process's reader thread, as the loop sees it.
pub(super) struct SplitReader {
    /// A new peak of the heap: read as soon as the cost bound allows (one pending at most).
    peaks: SyncSender<()>,
    readings: Receiver<(u64, Kinds)>,
    /// The clock reading at the start of the reading under way (0: none yet).
    started: Arc<AtomicU64>,
    /// The last start the loop saw, and the live heap then.
    seen: (u64, f64),
}

impl SplitReader {
    /// Starts reading `memory` (a process's files, opened for this reader) with the
    /// process's clock `clock`. `None` when no thread can be started: the loop then reads
    /// nothing but its last looks.
    pub(super) fn start(memory: Memory, clock: Params, pid: u32) -> Option<SplitReader> {
        let (peaks, hints) = mpsc::sync_channel(1);
        let (found, readings) = mpsc::channel();
        let started = Arc::new(AtomicU64::new(0));
        let at = started.clone();
        std::thread::Builder::new()
            .name(format!("memprof-smaps-{pid}"))
            // One per process alive (a followed tree may have many): little stack, as the
            // file's text and its parse are on the heap.
            .stack_size(256 * 1024)
            .spawn(move || read(memory, clock, &hints, &found, &at))
            .ok()?;
        Some(SplitReader { peaks, readings, started, seen: (0, 0.0) })
    }

    /// Asks for a reading at a new peak of the heap.
    pub(super) fn peak(&self) {
        match self.peaks.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }

    /// The readings finished since the last call, each with the live heap `live` gave when
    /// the loop first saw it under way (called every pass, with the live heap folded so far).
    pub(super) fn take(&mut self, live: f64) -> Vec<Reading> {
        let started = self.started.load(Ordering::Acquire);
        if started != self.seen.0 {
            self.seen = (started, live);
        }
        self.readings
            .try_iter()
            .map(|(at, kinds)| {
                // A reading begun and ended between two passes: the heap now.
                let live = if at == self.seen.0 { self.seen.1 } else { live };
                Reading { at, live, kinds }
            })
            .collect()
    }
}

/// The reader thread: reads when a reading is due, or at a new peak when its cost allows,
/// until the loop drops its [`SplitReader`] (after a reading under way, if any, returns).
fn read(
    mut memory: Memory,
    clock: Params,
    hints: &Receiver<()>,
    found: &Sender<(u64, Kinds)>,
    started: &AtomicU64,
) {
    let mut peak = false;
    loop {
        let now = monotonic_ns();
        let due = memory.next_due(false).min(if peak { memory.next_due(true) } else { u64::MAX });
        if due > now {
            let wait = Duration::from_nanos((due - now).min(3_600_000_000_000));
            match hints.recv_timeout(wait) {
                Ok(()) => peak = true,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            continue;
        }
        let at = clock.now();
        started.store(at, Ordering::Release);
        let now = monotonic_ns();
        let kinds = match peak {
            true => memory.kinds_if_affordable(now).or_else(|| memory.kinds(now, false)),
            false => memory.kinds(now, false),
        };
        peak = false;
        if let Some(k) = kinds {
            if found.send((at, k)).is_err() {
                return;
            }
        }
    }
}
