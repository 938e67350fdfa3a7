//! The queue's wire event ([`WireEvent`]): what happened to a sampled block, each kind
//! with the fields it has, and its 80 bytes in a slot ([`Wire`]); the call stack of an
//! allocation follows it in its slot, unless the consumer has it already ([`StackRef`]).
//!
//! Producers build a [`WireEvent`] and the queue writes it into the slot's [`Wire`]; the
//! consumer gets it back from the slot, checked when another process wrote it. The slot's
//! layout is fixed (`repr(C)`, read by another build of this crate: the collector in
//! `memprof record`), and its fields are the same words for every kind; what they hold
//! is said once, in [`Wire::store`] and [`Wire::load`], and nowhere else.
//!
//! # The first line
//! A slot's words are written by a producer on one core and read by the consumer on
//! another: each cache line of it crosses between the cores twice a lap, and in the exact
//! mode, where every allocation and free is an event, those crossings bound how many
//! events a second the queue carries (the pipeline bench's 8-thread row). So a kind's
//! fields are written and read one by one, never the whole [`Wire`], and a free's fields
//! (with the kind, the frame count and the thread, in the first word) come first: with
//! the slot's sequence number and owner, a free is the first 64 bytes of its cell, one
//! line ([`FREE_ENDS_AT`]).

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
    /// Whether its frames follow it in the slot, or the consumer has them already.
    pub stack: StackRef,
}

/// Where an allocation's call stack is. A producer whose consumer is another process
/// (`memprof record`'s collector) sends each stack whole once per thread and names it
/// by its key after that (`engine::known`): a stack of a dozen frames is two cells of the
/// queue more, of a hundred (an interpreter's) seven, and each of their lines crosses
/// between the cores twice (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackRef {
    /// The frames follow the event in its slot.
    Here,
    /// The frames follow, and later events of this thread may name them by this key
    /// ([`crate::engine::callstack::frames::key`] of the frames and `truncated`; never 0):
    /// the consumer keeps them.
    Kept(u64),
    /// No frames follow: they are those an earlier event of the same thread, queue and
    /// session carried with [`StackRef::Kept`] of this key.
    Sent(u64),
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
}

/// [`Wire::kind`] of an allocation whose frames follow it.
const KIND_ALLOC: u8 = 0;
/// [`Wire::kind`] of a death.
const KIND_DEATH: u8 = 1;
/// [`Wire::kind`] of a side record (3, as when 2 named a move, no longer queued: `alloc`
/// §4).
const KIND_SIDE: u8 = 3;
/// [`Wire::kind`] of a free named by its address.
const KIND_FREE: u8 = 4;
/// [`Wire::kind`] of an allocation whose frames an earlier event carried
/// ([`StackRef::Sent`]).
const KIND_ALLOC_SENT: u8 = 5;

/// An event as a slot holds it: `repr(C)`, the same words for every kind (a queue in
/// shared memory is read by another build of this crate), every field an integer (any
/// bytes another process left are some value of it). Only [`Wire::store`] writes one and
/// [`Wire::load`] reads one, each only the fields of the event's kind.
#[repr(C)]
pub(super) struct Wire {
    kind: u8,
    /// 1: the call stack was deeper than the depth.
    truncated: u8,
    /// Frames that follow in the slot.
    nframes: u16,
    thread: u32,
    epoch: u64,
    time: u64,
    /// An allocation's or a free's block; a side record's word.
    addr: u64,
    /// A sample id; a side record's `what`.
    id: u64,
    size: u64,
    k: u64,
    /// The key of an allocation's stack (0: none, [`StackRef::Here`]) or of a death's.
    stack: u64,
    alloc_time: u64,
    label: u32,
    _pad: u32,
}

/// Where a free's fields end in a slot whose head is `head` bytes: within the first
/// line (see the module documentation).
pub(super) const fn free_ends_at(head: usize) -> usize {
    head + core::mem::offset_of!(Wire, addr) + 8
}

impl Wire {
    /// Writes `event`, followed by `nframes` frames (at most `u16::MAX`: the depth is at
    /// most [`crate::config::MAX_DEPTH`]), into the slot's words at `w`: its kind's fields
    /// only.
    ///
    /// # Safety
    /// `w` is valid for writes of a `Wire` and owned by the caller (a claimed slot).
    #[inline(always)]
    pub(super) unsafe fn store(w: *mut Wire, event: WireEvent, nframes: usize) {
        use core::ptr::addr_of_mut as at;
        let nframes = nframes.min(u16::MAX as usize) as u16;
        // SAFETY: the caller owns the `Wire` at `w`; each write is of one of its fields.
        unsafe {
            at!((*w).epoch).write(event.epoch());
            at!((*w).time).write(event.time());
            let (kind, truncated, thread) = match event {
                WireEvent::Alloc(a) => {
                    let (kind, stack) = match a.stack {
                        StackRef::Here => (KIND_ALLOC, 0),
                        StackRef::Kept(key) => (KIND_ALLOC, key),
                        StackRef::Sent(key) => (KIND_ALLOC_SENT, key),
                    };
                    at!((*w).addr).write(a.addr as u64);
                    at!((*w).id).write(a.id);
                    at!((*w).size).write(a.size as u64);
                    at!((*w).k).write(a.k);
                    at!((*w).stack).write(stack);
                    at!((*w).label).write(a.label);
                    (kind, a.truncated, a.thread)
                }
                WireEvent::Death(d) => {
                    at!((*w).id).write(d.id);
                    at!((*w).size).write(d.size);
                    at!((*w).k).write(d.k);
                    at!((*w).stack).write(d.stack);
                    at!((*w).alloc_time).write(d.alloc_time);
                    (KIND_DEATH, false, 0)
                }
                WireEvent::Free(f) => {
                    at!((*w).addr).write(f.addr as u64);
                    (KIND_FREE, false, 0)
                }
                WireEvent::Side(s) => {
                    at!((*w).id).write(s.what);
                    at!((*w).addr).write(s.word);
                    (KIND_SIDE, false, 0)
                }
            };
            at!((*w).kind).write(kind);
            at!((*w).truncated).write(u8::from(truncated));
            at!((*w).nframes).write(nframes);
            at!((*w).thread).write(thread);
        }
    }

    /// The event in the slot's words at `w` and the frames that follow it, reading its
    /// kind's fields only; `None` for the event when its kind is none of ours or a flag
    /// holds no flag's value (a slot another process wrote over).
    ///
    /// # Safety
    /// `w` is valid for reads of a `Wire`, published (nobody writes it meanwhile).
    #[inline(always)]
    pub(super) unsafe fn load(w: *const Wire) -> (Option<WireEvent>, usize) {
        use core::ptr::addr_of as at;
        // SAFETY: the caller's `Wire` at `w` is readable; every field is an integer, valid
        // whatever its bytes.
        unsafe {
            let kind = at!((*w).kind).read();
            let nframes = usize::from(at!((*w).nframes).read());
            let truncated = at!((*w).truncated).read();
            let (epoch, time) = (at!((*w).epoch).read(), at!((*w).time).read());
            if truncated > 1 {
                return (None, nframes);
            }
            let event = match kind {
                KIND_ALLOC | KIND_ALLOC_SENT => {
                    let key = at!((*w).stack).read();
                    WireEvent::Alloc(AllocEvent {
                        epoch,
                        id: at!((*w).id).read(),
                        thread: at!((*w).thread).read(),
                        label: at!((*w).label).read(),
                        time,
                        addr: at!((*w).addr).read() as usize,
                        size: at!((*w).size).read() as usize,
                        k: at!((*w).k).read(),
                        truncated: truncated == 1,
                        stack: match (kind, key) {
                            (KIND_ALLOC_SENT, key) => StackRef::Sent(key),
                            (_, 0) => StackRef::Here,
                            (_, key) => StackRef::Kept(key),
                        },
                    })
                }
                KIND_DEATH => WireEvent::Death(DeathEvent {
                    epoch,
                    id: at!((*w).id).read(),
                    stack: at!((*w).stack).read(),
                    alloc_time: at!((*w).alloc_time).read(),
                    time,
                    size: at!((*w).size).read(),
                    k: at!((*w).k).read(),
                }),
                KIND_FREE => {
                    WireEvent::Free(FreeEvent { epoch, addr: at!((*w).addr).read() as usize, time })
                }
                KIND_SIDE => WireEvent::Side(SideEvent {
                    epoch,
                    what: at!((*w).id).read(),
                    word: at!((*w).addr).read(),
                    time,
                }),
                _ => return (None, nframes),
            };
            (Some(event), nframes)
        }
    }
}

#[cfg(test)]
impl Wire {
    /// Writes over the frame count of the event at `w` (as another process might).
    ///
    /// # Safety
    /// As [`Wire::store`].
    pub(super) unsafe fn set_nframes(w: *mut Wire, n: u16) {
        // SAFETY: the caller owns the `Wire` at `w`.
        unsafe { core::ptr::addr_of_mut!((*w).nframes).write(n) }
    }
}

// The slots, and the shared rings of `memprof record`, keep their geometry.
const _: () = assert!(size_of::<Wire>() == 80);
