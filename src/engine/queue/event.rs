//! The queue's wire event ([`Event`]): what happened to a sampled block (its
//! [`EventKind`]), with its time, ids and sizes, in 72 bytes; the call stack of an
//! allocation follows it in its slot.

use crate::engine::entry::Entry;

/// What happened to a sampled block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EventKind {
    /// A sampled allocation (carries a call stack).
    Alloc,
    /// A sampled block was freed (or reallocated: `alloc` §4).
    Dealloc,
    /// Not a block's event: a record for a collector in another process (see
    /// [`crate::record::ring`]): `id` says which, the frames carry its words. Its byte in
    /// a slot stays 3, as when 2 named a move (no longer queued: `alloc` §4).
    Side = 3,
    /// A block was freed (or reallocated) in a session that names its frees by address
    /// (`live` §6): `addr` and `time_ns` say which block and when; the consumer, which
    /// keeps the blocks, finds it.
    Free = 4,
}

impl EventKind {
    pub(super) fn from_u8(b: u8) -> Option<EventKind> {
        Some(match b {
            0 => EventKind::Alloc,
            1 => EventKind::Dealloc,
            3 => EventKind::Side,
            4 => EventKind::Free,
            _ => return None,
        })
    }
}

/// One queued event. Plain data: `Copy`, no heap, `repr(C)` (a queue in shared memory is
/// read by another build of this crate: the collector in `memprof record`).
///
/// A `Dealloc` names its block as the live table holds it ([`live`] §5), in fields an
/// allocation uses for itself: `thread` and `label` are the low and high halves of its
/// stack key ([`Event::stack_key`]), `k` its sample points, `addr` its allocation's clock
/// reading and `size` the sampled size.
///
/// [`live`]: crate::engine::live
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// Session epoch the event belongs to.
    pub epoch: u64,
    /// Sample id (unique within the session).
    pub id: u64,
    /// Thread number within the session.
    pub thread: u32,
    /// The allocating thread's label (`Alloc` only; 0: none), see
    /// [`crate::engine::label`]. In the padding after `thread`: the event keeps its size.
    pub label: u32,
    /// When it happened: a raw reading of the sample path's clock in the queue (TSC ticks
    /// or monotonic ns), nanoseconds since the session started once handed to a tracker.
    pub time_ns: u64,
    /// Block address.
    pub addr: usize,
    /// Block size in bytes.
    pub size: usize,
    /// Sample points inside the block (`Alloc` only).
    pub k: u64,
    /// The call stack was deeper than the depth (`Alloc` only).
    pub truncated: bool,
}

impl Event {
    /// The death, at clock reading `time`, of the block of live-table entry `e`.
    #[inline(always)]
    pub(crate) fn death(e: &Entry, time: u64) -> Event {
        Event {
            kind: EventKind::Dealloc,
            epoch: e.epoch,
            id: e.id,
            thread: e.stack as u32,
            label: (e.stack >> 32) as u32,
            time_ns: time,
            addr: e.time as usize,
            size: e.size as usize,
            k: e.k,
            truncated: false,
        }
    }

    /// The free, at clock reading `time`, of the block at `addr`, in session `epoch`, named
    /// by its address only (`live` §6).
    #[inline(always)]
    pub(crate) fn free_at(addr: usize, epoch: u64, time: u64) -> Event {
        Event {
            kind: EventKind::Free,
            epoch,
            id: 0,
            thread: 0,
            label: 0,
            time_ns: time,
            addr,
            size: 0,
            k: 0,
            truncated: false,
        }
    }

    /// Whether the event ends a block (a `Dealloc` or a `Free`): one the queue's table of
    /// lost frees keeps when it does not fit (`queue` §3).
    #[inline(always)]
    pub fn is_free(&self) -> bool {
        matches!(self.kind, EventKind::Dealloc | EventKind::Free)
    }

    /// The stack key of a `Dealloc`'s block (see [`Event`]).
    pub fn stack_key(&self) -> u64 {
        u64::from(self.thread) | u64::from(self.label) << 32
    }
}

// The label went into the padding after `thread`: slots, and the shared rings of
// `memprof record`, keep their geometry.
const _: () = assert!(size_of::<Event>() == 72);
