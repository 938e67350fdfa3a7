//! The process's memory read into its profile: its resident size, and its resident memory
//! by kind of mapping beside the live heap.
//!
//! # 6. Resident memory
//! Every [`crate::sys::smaps::RESIDENT_EVERY_MS`] milliseconds while it changes (less often while it
//! stays the same) the collector reads each process's resident size from its `/proc/PID/statm` (opened when its ring was attached, so a pid reused
//! later reads nothing) and records it in the profile
//! ([`Profile::resident`](crate::profile::Profile::resident)) with the time on the program's clock:
//! nothing is added to the program's sample path. A process that has exited reads nothing, so the
//! last reading is its last resident size alive.
//!
//! Now and then a thread of its own per process ([`split_reader`](super::super::split_reader),
//! which says why not the loop) reads the process's `/proc/PID/smaps`, and the loop records its
//! resident memory by kind of mapping beside the live heap folded when the reading began
//! ([`crate::profile::ResidentSplit`], kinds in `sys::smaps`): what explains the gap between the
//! two. The kernel walks the page tables to write that file, a few milliseconds for a few hundred
//! megabytes, so the next reading waits [`crate::sys::smaps::SPLIT_EVERY_MS`] or the time the last one
//! took divided by [`crate::sys::smaps::SPLIT_COST_SHARE`], whichever is longer. A process of
//! [`ring::LOOK_WANTED_BYTES`] or more resident is asked for a last look: its exit handler sets
//! `last_look` and waits (100 ms at most) until the collector, after draining its queue, has read
//! both files once more (itself, and with its reader thread let go); the split at the end is then
//! the end's. A live heap a tenth above the largest one a split was read beside (and 32 MiB or
//! more) is read as soon as the cost bound allows, without waiting for
//! [`crate::sys::smaps::SPLIT_EVERY_MS`]: so a split lies near the heap's peak, where the process was
//! largest.

use super::Attached;
use crate::profile::Resident;
use crate::record::ring;
use std::sync::atomic::Ordering;

/// Reads the process's resident memory into its profile when a reading is due at `now`
/// or `force`d (§6). True when one was recorded.
pub(super) fn read_resident(r: &mut Attached, now: u64, force: bool) -> bool {
    let Some(out) = &mut r.out else {
        return false;
    };
    let Some(bytes) = r.memory.resident(now, force) else {
        return false;
    };
    let time_ns = out.clock.now_ns();
    out.recorder.resident(Resident { time_ns, bytes });
    // A last look at its mappings when it exits, if it is large (`RingHeader::last_look`);
    // an asked or taken look is left alone.
    let look = &r.ring.header().last_look;
    let (from, to) = if bytes >= ring::LOOK_WANTED_BYTES {
        (0, ring::LOOK_WANTED)
    } else {
        (ring::LOOK_WANTED, 0)
    };
    let _ = look.compare_exchange(from, to, Ordering::AcqRel, Ordering::Relaxed);
    true
}

/// Folds the process's resident memory by kind of mapping into its profile, beside the
/// live heap folded then (§6): the readings its reader thread finished, and, `force`d, a
/// last look read here (the exiting process waits for it).
pub(super) fn read_split(r: &mut Attached, now: u64, force: bool) {
    let Some(out) = &mut r.out else {
        return;
    };
    // What memprof's library mapped in the process is anonymous memory, counted with the
    // allocator's by the mappings alone.
    let mapped = r.ring.header().own_mapped.load(Ordering::Relaxed);
    let live = out.recorder.profile().live_bytes;
    if let Some(reader) = &mut out.split_reader {
        // A new peak of the heap (a tenth above the largest one asked for, and 32 MiB or
        // more) is read as soon as the cost bound allows: the split at the heap's peak is
        // what explains a process's largest size.
        if live >= out.split_peak * 1.1 && live >= ring::LOOK_WANTED_BYTES as f64 {
            out.split_peak = live;
            reader.peak();
        }
        for reading in reader.take(live) {
            let time_ns = out.clock.session_ns(reading.at);
            out.recorder.split(reading.kinds.split(time_ns, mapped, reading.live));
        }
    }
    if force {
        // The last one: no reading of the thread's may follow it.
        out.split_reader = None;
        // The reading's moment is its start: the kernel walks the mappings from there on.
        let time_ns = out.clock.now_ns();
        if let Some(k) = r.memory.kinds(now, true) {
            out.recorder.split(k.split(time_ns, mapped, live));
        }
    }
}
