//! A ring whose process is gone, finished: its last events read, how it ended, its
//! losses, its file's end record, and what stderr is told.
//!
//! # 3. The end of a process
//! A ring is finished when its process is gone (no `/proc/<pid>`, a zombie, or a pid reused by a
//! process with another start time), when a newer ring of the same pid appears (the image was
//! replaced by `exec`), or when `record` stops the collector after the program and its descendants
//! were waited for. Whatever ended the process, its queue is drained to the last published event
//! ([`Queue::drain_abandoned`](crate::engine::queue::Queue::drain_abandoned)), the side log read to
//! its end, and the file finished with its end record: a SIGKILL loses nothing that was sampled
//! before it.
//!
//! Before the end record goes how the process ended ([`Ended`]), from what it said (its exit
//! handler, registered with `on_exit`, gives `exit`'s status; `_exit` its own; `exec` and a detach
//! say so), else from its wait status: `record`'s for the program it ran
//! ([`Plan::root_ended`](super::Plan::root_ended), with the OOM killer named when the kernel
//! counted a kill; the root's ring waits for it), else the zombie's exit code in
//! `/proc/<pid>/stat`, else, once its parent reaped it, the exit code the kernel keeps for the
//! pidfd the collector opened when it attached (`PIDFD_INFO_EXIT`, Linux 6.15 and later). A signal
//! seen there wins over what the process said (it came after). A child killed by a signal before
//! the collector attached to its ring (in its first few milliseconds) and reaped before it looked
//! leaves nothing to read: its way of ending stays unknown.
//!

use super::super::process;
use super::deliver::{deliver, lend_live_blocks, read_log};
use super::Attached;
use crate::profile::{Ended, EndedHow, Stopped};
use crate::record::ring::{self, Ring};
use crate::session::{SessionCounters, Tracker};
use std::sync::atomic::Ordering;

/// Finishes a ring whose process is gone (§3); `told` is how `record` saw the root
/// process end.
pub(super) fn finish_ring(r: &mut Attached, told: Option<Ended>, messages: &mut Vec<String>) {
    r.done = true;
    let Some(out) = &mut r.out else {
        return;
    };
    deliver(&r.queue, &r.ring, out, r.pid, true);
    read_log(&r.ring, out, u64::MAX);
    let status = r.zombie_status.or_else(|| r.pidfd.as_ref().and_then(process::reaped_status));
    if let Some(e) = ended(&r.ring, told, status) {
        out.recorder.ended(e);
    }
    let stats = SessionCounters {
        lost_events: r.queue.lost(),
        untracked: r.ring.header().untracked.load(Ordering::Relaxed),
        // Replays of frees the table took at once are no losses (`queue` §3).
        frees_replayed: out.replayed.saturating_sub(r.queue.frees_deferred()),
        frees_unknown: r.queue.frees_unknown(),
        ..SessionCounters::default()
    };
    // An image that said it was ending without exit handlers: its file ends as the
    // in-process recorder leaves it then (the reader tells why there is no end record).
    let ending = match r.ring.header().ending.load(Ordering::Acquire) {
        ring::ENDING_EXEC => Some(Stopped::Exec),
        ring::ENDING_QUICK => Some(Stopped::QuickExit),
        _ => None,
    };
    // The fold's index of live blocks, kept by the map by address until now, is read
    // when the recorder stops (the timeline's blocks never freed).
    lend_live_blocks(out);
    match ending {
        Some(why) => out.recorder.stop_as(why, &stats),
        None => out.recorder.stopped(&stats),
    }
    // `memprof attach` detached: the process runs on with the ring mapped, but its memory
    // is given back now that it is read.
    if r.ring.header().ending.load(Ordering::Acquire) == ring::ENDING_DETACHED {
        r.ring.release_pages();
    }
    let rec = &out.recorder;
    if let Some(e) = rec.error() {
        // A full disk, most often: what was written stays, a clean cut the reader reads
        // (`profile::format` keeps a half block out), and the fold is whole.
        let path = rec.path().map(|p| p.to_path_buf());
        let kept = path.as_deref().and_then(|p| std::fs::metadata(p).ok()).map_or(0, |m| m.len());
        let shown = path.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
        let keeps = match kept {
            0 => format!("{shown} holds nothing"),
            _ => format!(
                "{shown} keeps the {kept} bytes written before (`memprof report` reads them as \
                 a profile cut there)"
            ),
        };
        messages.push(format!(
            "error: the profile of pid {} could not be written whole: {e}. {keeps}; this run's \
             table is from all the collector saw",
            r.shown
        ));
    } else if !rec.profile().lost.is_none() {
        let path = rec.path().map(|p| p.display().to_string()).unwrap_or_default();
        messages.push(format!("{path}: {}", rec.profile().lost.describe()));
    }
}

/// How the process of `ring` ended (§3), from what it said before (its exit handler's or
/// `_exit`'s status, `exec`, a detach), what its parent `record` saw (`told`), and its exit
/// code as a zombie. `None` when nothing says.
fn ended(ring: &Ring, told: Option<Ended>, zombie: Option<i32>) -> Option<Ended> {
    let h = ring.header();
    let status = h.exit_status.load(Ordering::Acquire);
    let said = (status & ring::STATUS_KNOWN != 0).then_some(status as u32 as i32);
    let seen = told.or_else(|| zombie.and_then(Ended::from_wait_status));
    let exited = |how| Ended { how, status: said.unwrap_or(0), limit_bytes: 0 };
    let own = match h.ending.load(Ordering::Acquire) {
        ring::ENDING_EXEC => Some(Ended { how: EndedHow::Exec, status: 0, limit_bytes: 0 }),
        ring::ENDING_DETACHED => Some(Ended { how: EndedHow::Detached, status: 0, limit_bytes: 0 }),
        ring::ENDING_QUICK => Some(exited(EndedHow::QuickExit)),
        ring::ENDING_EXIT => Some(exited(EndedHow::Exit)),
        _ => None,
    };
    match (own, seen) {
        // A signal (during the exit handlers, say) is what ended it.
        (_, Some(s)) if matches!(s.how, EndedHow::Signal | EndedHow::OomKill) => Some(s),
        // The parent's status is the one that counts (a handler may have called `_exit`).
        (Some(o), Some(s)) if matches!(o.how, EndedHow::Exit | EndedHow::QuickExit) => {
            Some(Ended { status: s.status, ..o })
        }
        (Some(o), _) => Some(o),
        (None, s) => s,
    }
}
