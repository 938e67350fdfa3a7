//! A ring's events handed to its recorder: the queue drained, side events (module lists,
//! GC cycles), the frees kept aside replayed, modules missing from every list looked up.
//!
//! Module lists come from the side log, each at its place among the events. A new stack
//! with a frame outside every listed module (a library `dlopen`ed since the last list)
//! makes the collector read `/proc/<pid>/maps` while the process lives; the object files
//! named there give the missing modules ([`process::modules_of`]).
//!
//! # 5. Frees, and lost events
//! In the sampled mode the collector keeps no map of the program's live blocks. A free's event names its block as the
//! program's live table holds it (`engine::live` §5): the key of its stack, its size, sample points
//! and allocation time. The recorder keys the stacks it interns by the same function of their raw
//! frames, so the key finds the stack, and the block is taken out of the aggregates by (stack,
//! size, allocation unit). The allocation time is the program's raw clock reading, converted again:
//! the conversion is a fixed function of the reading ([`Stable`](crate::engine::clock::Stable)), so
//! it gives the time the allocation's event was given. A key that names several stacks (two module
//! generations with the same raw frames, or a hash collision) is resolved by which of them holds
//! such a live block, newest first. A free that finds no live block is dropped, as one whose
//! allocation was never read (a free before the allocation never comes through the ring: the
//! program frees a block only after its allocation's event was published).
//!
//! In the exact mode the program keeps no table and its frees name only their addresses
//! (`engine::live` §6): the collector then keeps the process's live blocks by address
//! itself ([`super::blocks`]) and finds each free's block there.
//!
//! After each drain the collector takes the frees the queue kept aside because they did not
//! fit (`engine::queue` §3) and folds each once its block's allocation has been read (its
//! block is live). The file's Lost record counts what was lost, how many of those were
//! frees replayed and how many frees were lost for good (the table was full: that many
//! blocks may show as live); `record` says the same on stderr when anything was lost.

use super::super::process;
use super::blocks::{Block, NO_PAIR};
use super::{Attached, Output};
use crate::engine::queue::{DeathEvent, Queue, WireEvent};
use crate::profile::GcCycle;
use crate::record::ring::{self, Ring};
use crate::session::driver::MAX_WAITING_FREES;
use crate::session::recorder::Named;
use crate::session::{Allocation, Callstack, Poll, Tracker};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

/// Drains the ring's queue into its recorder. Returns the number of events.
pub(super) fn drain(r: &mut Attached) -> usize {
    let Some(out) = &mut r.out else {
        return 0;
    };
    let n = deliver(&r.queue, &r.ring, out, r.pid, false);
    out.recorder.after_poll(Poll::Periodic);
    n
}

/// Hands the queue's events to the recorder; `abandoned`: the process is gone.
pub(super) fn deliver(
    q: &Queue,
    ring: &Ring,
    out: &mut Output,
    pid: u32,
    abandoned: bool,
) -> usize {
    let (epoch, interval) = (out.epoch, out.interval);
    let mut handle = |e: &WireEvent, frames: &[usize]| {
        if e.epoch() != epoch {
            return;
        }
        if let WireEvent::Side(side) = e {
            // A cycle's sweep may have sent its deaths to the table (`queue` §3) before the
            // cycle's event: they are folded first, so the cycle does not count as marked
            // blocks it swept.
            if side.what == ring::SIDE_GC {
                replay_table(q, out);
            }
            side_event(ring, out, side.what, side.word, frames);
            return;
        }
        let rec = &mut out.recorder;
        let clock = &mut out.clock;
        let blocks = &mut out.blocks;
        let sent = &mut out.sent;
        // The recorder is ours, but what it is handed was written by the program: a
        // panic on a damaged event loses that event, not the collector.
        let _ = catch_unwind(AssertUnwindSafe(|| match e {
            WireEvent::Alloc(a) => {
                let mut alloc = Allocation {
                    id: a.id,
                    size: a.size,
                    k: a.k,
                    estimated_bytes: a.k as f64 * interval,
                    thread: a.thread,
                    time_ns: clock.session_ns(a.time),
                    addr: a.addr,
                    callstack: Callstack { frames, truncated: a.truncated },
                    // Label ids are the other process's (and its preload library never sets
                    // one): they name nothing here.
                    label: None,
                };
                // Frames sent before are named by key (`engine::known`): the stack they
                // were interned as, or the frames kept.
                let got = match sent.interned(a.stack) {
                    Some(id) => rec.collected_alloc_as(&alloc, id),
                    None => None,
                };
                let got = match got {
                    Some(got) => got,
                    None => {
                        let Some(whole) = sent.frames(a.stack, frames, rec) else {
                            q.note_lost();
                            return;
                        };
                        alloc.callstack = Callstack { frames: whole, truncated: a.truncated };
                        let got = rec.collected_alloc(&alloc);
                        sent.keep(a.stack, frames, got.stack, rec);
                        got
                    }
                };
                if let Some(blocks) = blocks {
                    let b = Block {
                        stack: got.stack,
                        pair: got.pair.unwrap_or(NO_PAIR),
                        size: a.size as u64,
                        k: a.k,
                        alloc_raw: a.time,
                    };
                    if let Some((old, at)) = blocks.allocated(a.addr, b) {
                        rec.collected_end(&old.free(at, |t| clock.session_ns(t)), old.pair());
                    }
                }
            }
            WireEvent::Death(d) => {
                rec.collected_free(
                    &named(d, clock.session_ns(d.alloc_time)),
                    clock.session_ns(d.time),
                );
            }
            WireEvent::Free(f) => {
                if let Some(b) = blocks.as_mut().and_then(|b| b.freed(f.addr, f.time)) {
                    rec.collected_end(&b.free(f.time, |t| clock.session_ns(t)), b.pair());
                }
            }
            WireEvent::Side(_) => {}
        }));
    };
    let n =
        if abandoned { q.drain_abandoned(&mut handle) } else { q.drain(&mut handle).unwrap_or(0) };
    replay_table(q, out);
    if !abandoned && out.unknown_frames(ring) {
        // Frames outside every listed module, and no list pending in the log that could
        // name them in order: the process's maps name them, unless it wrote a list while
        // they were read (a `dlclose` under way: its list, read in order, will).
        let before = ring.header().log_len.load(Ordering::Acquire);
        let found = process::modules_of(pid);
        if ring.header().log_len.load(Ordering::Acquire) == before {
            out.recorder.add_modules(found);
            out.unknown = false;
        }
    }
    n
}

/// The block a death event names, allocated at `alloc_ns` (its event's clock reading
/// converted).
fn named(d: &DeathEvent, alloc_ns: u64) -> Named {
    Named { id: d.id, key: d.stack, size: d.size, k: d.k, alloc_ns }
}

/// Folds the frees in the queue's table (refused or deferred: `queue` §3), each once its
/// block's allocation is in (§5 here).
fn replay_table(q: &Queue, out: &mut Output) {
    let epoch = out.epoch;
    let mut unnamed = 0;
    q.take_lost_frees(|e| match e {
        WireEvent::Free(f) if f.epoch == epoch => {
            let (rec, clock) = (&mut out.recorder, &mut out.clock);
            if let Some(b) = out.blocks.as_mut().and_then(|b| b.freed_later(f.addr, f.time)) {
                let _ = catch_unwind(AssertUnwindSafe(|| {
                    rec.collected_end(&b.free(f.time, |t| clock.session_ns(t)), b.pair())
                }));
                unnamed += 1;
            }
        }
        WireEvent::Death(d) if d.epoch == epoch => {
            let b = named(d, out.clock.session_ns(d.alloc_time));
            out.waiting.push((b, out.clock.session_ns(d.time)));
        }
        _ => {}
    });
    if let Some(blocks) = &mut out.blocks {
        let (rec, clock) = (&mut out.recorder, &mut out.clock);
        unnamed += blocks.retry(|b, time_raw| {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                rec.collected_end(&b.free(time_raw, |t| clock.session_ns(t)), b.pair())
            }));
        });
    }
    out.replayed += unnamed;
    if !out.waiting.is_empty() {
        replay_waiting(out);
    }
}

/// Folds the frees kept aside whose blocks' allocations are in (§5).
fn replay_waiting(out: &mut Output) {
    let rec = &mut out.recorder;
    let mut replayed = 0;
    out.waiting.retain(|(b, time_ns)| {
        let folded = catch_unwind(AssertUnwindSafe(|| rec.collected_free(b, *time_ns)));
        if folded.unwrap_or(true) {
            replayed += 1;
            return false;
        }
        true
    });
    out.replayed += replayed;
    // A free waits only for an allocation already published, so the list stays short; but
    // the table is written by the profiled process, which may write anything: frees whose
    // blocks never come are let go, oldest first.
    if out.waiting.len() > MAX_WAITING_FREES {
        out.waiting.drain(..out.waiting.len() - MAX_WAITING_FREES);
    }
}

impl Output {
    /// True when frames outside every listed module wait to be looked up and every module
    /// list the process wrote has been read (so the lookup is not ahead of one).
    fn unknown_frames(&mut self, ring: &Ring) -> bool {
        self.unknown |= self.recorder.take_unknown_frames();
        self.unknown && ring.header().log_len.load(Ordering::Acquire) <= self.log_read
    }
}

/// A side event (see `ring.rs` §3).
fn side_event(ring: &Ring, out: &mut Output, what: u64, word: u64, frames: &[usize]) {
    match what {
        ring::SIDE_MODULES => read_log(ring, out, word),
        ring::SIDE_GC => {
            let words: Vec<u64> = frames.iter().map(|&w| w as u64).collect();
            if let Some(c) = GcCycle::from_words(&words) {
                // The cycle marks the live blocks allocated before it: the fold reads them.
                lend_live_blocks(out);
                out.recorder.gc_cycle(&c);
            }
        }
        _ => {}
    }
}

/// Hands the recorder's fold the live blocks the map by address keeps, when it keeps them
/// (`Profile::keep_live_outside`): before a GC cycle and at the end, where the fold reads
/// its index of them.
pub(super) fn lend_live_blocks(out: &mut Output) {
    let Some(blocks) = &out.blocks else {
        return;
    };
    let clock = &mut out.clock;
    let live = blocks.live().map(|b| (b.stack, b.size, clock.session_ns(b.alloc_raw), b.k));
    out.recorder.set_live_blocks(live);
}

/// Reads the side log up to `to` and hands its module lists to the recorder.
pub(super) fn read_log(ring: &Ring, out: &mut Output, to: u64) {
    let (records, end) = ring.log_records(out.log_read, to);
    out.log_read = end.max(out.log_read);
    ring.log_consumed(out.log_read);
    for (kind, payload) in records {
        let tracker = &mut out.recorder;
        // A closing record's call id and the loader's count of loads then.
        let word = |i: usize| {
            payload.get(8 * i..8 * i + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        };
        match (kind, word(0), word(1)) {
            (ring::LOG_MODULES, _, _) => {
                if let Some(m) = ring::decode_modules(&payload) {
                    tracker.module_snapshot(m);
                }
            }
            (ring::LOG_CLOSING, Some(id), Some(adds)) => {
                if let Some(m) = ring::decode_modules(&payload[16..]) {
                    tracker.module_closing(id, adds, m);
                }
            }
            (ring::LOG_CLOSED, Some(id), Some(adds)) => tracker.module_closed(id, adds),
            _ => {}
        }
    }
}
