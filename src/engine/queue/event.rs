//! The queue's wire event ([`WireEvent`]): what happened to a sampled block, each kind
//! with the fields it has, and its 72 bytes in a slot ([`Wire`]); the call stack of an
//! allocation follows it in its slot.
//!
//! Producers build a [`WireEvent`] and the queue writes it into the slot's [`Wire`]; the
//! consumer gets it back from the slot, checked when another process wrote it. The slot's
//! layout is fixed (`repr(C)`, read by another build of this crate: the collector in
//! `memprof record`), and its fields are the same words for every kind; what they hold
//! is said once, in [`WireEvent::to_wire`] and [`Wire::event`], and nowhere else.

use crate::engine::entry::Entry;

/// One queued event. Plain data: `Copy`, no heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireEvent {
    /// A sampled allocation (its call stack follows it in the slot).
    Alloc(AllocEvent),
    /// A sampled block's death, named as the program's live table held it (`live` §5).
    Death(DeathEvent),
    /// A block's free named by its address only, in a session that keeps no live table
    /// (`live` §6): the consumer, which keeps the blocks, finds it.
    Free(FreeEvent),
    /// Not a block's event: a record for a collector in another process (see
    /// [`crate::record::ring`]); its words follow it in the slot, as frames.
    Side(SideEvent),
}

/// A sampled allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocEvent {
    /// Session epoch the event belongs to.
    pub epoch: u64,
    /// Sample id (unique within the session).
    pub id: u64,
    /// Thread number within the session.
    pub thread: u32,
    /// The allocating thread's label (0: none), see [`crate::engine::label`].
    pub label: u32,
    /// When the program got the block: a raw reading of the sample path's clock in the
    /// queue (TSC ticks or monotonic ns), nanoseconds since the session started once
    /// handed to a tracker.
    pub time: u64,
    /// Block address.
    pub addr: usize,
    /// Block size in bytes.
    pub size: usize,
    /// Sample points inside the block.
    pub k: u64,
    /// The call stack was deeper than the depth.
    pub truncated: bool,
}

/// A sampled block's death, with what a consumer that keeps no map of blocks needs to take
/// it out of its aggregates (`live` §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeathEvent {
    /// Session epoch.
    pub epoch: u64,
    /// The block's sample id.
    pub id: u64,
    /// The key of the block's allocating stack ([`crate::engine::callstack::frames::key`];
    /// 0 when the consumer is in this process, which keeps a token per sample instead).
    pub stack: u64,
    /// The block's allocation time (the clock reading its allocation's event had).
    pub alloc_time: u64,
    /// When the block was freed (the clock reading at the free's start).
    pub time: u64,
    /// The block's sampled size.
    pub size: u64,
    /// The block's sample points.
    pub k: u64,
}

/// A block's free named by its address (`live` §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeEvent {
    /// Session epoch.
    pub epoch: u64,
    /// The block's address.
    pub addr: usize,
    /// When it was freed (the clock reading at the free's start).
    pub time: u64,
}

/// A side record for a collector: which (`what`, e.g. `ring::SIDE_MODULES`) and its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SideEvent {
    /// Session epoch.
    pub epoch: u64,
    /// Which record.
    pub what: u64,
    /// Its word (a module list's end in the side log).
    pub word: u64,
    /// When it was queued.
    pub time: u64,
}

impl WireEvent {
    /// The death, at clock reading `time`, of the block of live-table entry `e`.
    #[inline(always)]
    pub(crate) fn death(e: &Entry, time: u64) -> WireEvent {
        WireEvent::Death(DeathEvent {
            epoch: e.epoch,
            id: e.id,
            stack: e.stack,
            alloc_time: e.time,
            time,
            size: e.size,
            k: e.k,
        })
    }

    /// The session epoch the event belongs to.
    #[inline(always)]
    pub fn epoch(&self) -> u64 {
        match self {
            WireEvent::Alloc(a) => a.epoch,
            WireEvent::Death(d) => d.epoch,
            WireEvent::Free(f) => f.epoch,
            WireEvent::Side(s) => s.epoch,
        }
    }

    /// When it happened (an allocation: when the program got the block; a death or a
    /// free: the free's start).
    #[inline(always)]
    pub fn time(&self) -> u64 {
        match self {
            WireEvent::Alloc(a) => a.time,
            WireEvent::Death(d) => d.time,
            WireEvent::Free(f) => f.time,
            WireEvent::Side(s) => s.time,
        }
    }

    /// The event at another time (its clock reading converted to session nanoseconds, for
    /// a tracker).
    #[inline(always)]
    pub(crate) fn with_time(self, time: u64) -> WireEvent {
        match self {
            WireEvent::Alloc(a) => WireEvent::Alloc(AllocEvent { time, ..a }),
            WireEvent::Death(d) => WireEvent::Death(DeathEvent { time, ..d }),
            WireEvent::Free(f) => WireEvent::Free(FreeEvent { time, ..f }),
            WireEvent::Side(s) => WireEvent::Side(SideEvent { time, ..s }),
        }
    }

    /// Whether the event ends a block (a death or a free): one the queue's table of lost
    /// frees keeps when it does not fit (`queue` §3).
    #[inline(always)]
    pub fn is_free(&self) -> bool {
        matches!(self, WireEvent::Death(_) | WireEvent::Free(_))
    }

    /// The event in a slot's words.
    #[inline(always)]
    pub(super) fn to_wire(self) -> Wire {
        let blank = Wire {
            kind: 0,
            epoch: self.epoch(),
            id: 0,
            thread: 0,
            label: 0,
            time: self.time(),
            addr: 0,
            size: 0,
            k: 0,
            truncated: false,
        };
        match self {
            WireEvent::Alloc(a) => Wire {
                kind: KIND_ALLOC,
                id: a.id,
                thread: a.thread,
                label: a.label,
                addr: a.addr,
                size: a.size,
                k: a.k,
                truncated: a.truncated,
                ..blank
            },
            // The stack key in `thread` and `label`, the allocation time in `addr`: the
            // words an allocation uses for itself.
            WireEvent::Death(d) => Wire {
                kind: KIND_DEATH,
                id: d.id,
                thread: d.stack as u32,
                label: (d.stack >> 32) as u32,
                addr: d.alloc_time as usize,
                size: d.size as usize,
                k: d.k,
                ..blank
            },
            WireEvent::Free(f) => Wire { kind: KIND_FREE, addr: f.addr, ..blank },
            WireEvent::Side(s) => {
                Wire { kind: KIND_SIDE, id: s.what, addr: s.word as usize, ..blank }
            }
        }
    }
}

/// [`Wire::kind`] of an allocation.
const KIND_ALLOC: u8 = 0;
/// [`Wire::kind`] of a death.
const KIND_DEATH: u8 = 1;
/// [`Wire::kind`] of a side record (3, as when 2 named a move, no longer queued: `alloc`
/// §4).
const KIND_SIDE: u8 = 3;
/// [`Wire::kind`] of a free named by its address.
const KIND_FREE: u8 = 4;

/// An event as a slot holds it: `repr(C)`, the same words for every kind (a queue in
/// shared memory is read by another build of this crate). Only [`WireEvent::to_wire`]
/// writes one and [`Wire::event`] reads one.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct Wire {
    kind: u8,
    epoch: u64,
    id: u64,
    thread: u32,
    label: u32,
    time: u64,
    addr: usize,
    size: usize,
    k: u64,
    truncated: bool,
}

impl Wire {
    /// The event the slot holds; `None` when its kind is none of ours (a slot another
    /// process wrote over).
    #[inline(always)]
    pub(super) fn event(&self) -> Option<WireEvent> {
        let (epoch, time) = (self.epoch, self.time);
        Some(match self.kind {
            KIND_ALLOC => WireEvent::Alloc(AllocEvent {
                epoch,
                id: self.id,
                thread: self.thread,
                label: self.label,
                time,
                addr: self.addr,
                size: self.size,
                k: self.k,
                truncated: self.truncated,
            }),
            KIND_DEATH => WireEvent::Death(DeathEvent {
                epoch,
                id: self.id,
                stack: u64::from(self.thread) | u64::from(self.label) << 32,
                alloc_time: self.addr as u64,
                time,
                size: self.size as u64,
                k: self.k,
            }),
            KIND_FREE => WireEvent::Free(FreeEvent { epoch, addr: self.addr, time }),
            KIND_SIDE => {
                WireEvent::Side(SideEvent { epoch, what: self.id, word: self.addr as u64, time })
            }
            _ => return None,
        })
    }

    /// The offset of the one field not every byte is valid for (a `bool`), for reading a
    /// slot another process wrote.
    pub(super) const TRUNCATED_AT: usize = core::mem::offset_of!(Wire, truncated);
}

// The slots, and the shared rings of `memprof record`, keep their geometry.
const _: () = assert!(size_of::<Wire>() == 72);
