//! The format's constants, record tags and the coding helpers its reader and writer
//! share (the spec itself is the folder's documentation, `format/mod.rs`).

use crate::profile::events::{Free, GcCycle, Move, Sample};

/// The first eight bytes of every `.mprof` stream.
pub const MAGIC: &[u8; 8] = b"MPROF\0\0\x01";
/// The format version this module writes and the newest it reads.
pub const VERSION: u32 = 4;
/// The unit of event times in the version-2 streams this module writes in the exact mode
/// (§1 "Time units").
pub const TIME_UNIT_EXACT_NS: u64 = 1 << 20;
/// The unit of event times in sampled streams (§1 "Time units").
pub const TIME_UNIT_SAMPLED_NS: u64 = 1 << 10;
/// The unit of the lifetimes that version-4 frees carry when the time unit is coarser
/// (§1 "Time units", §2c).
pub const LIFETIME_UNIT_NS: u64 = 1 << 17;

/// The time unit this module writes for a sampling interval.
pub fn time_unit_ns(interval: f64) -> u64 {
    if interval == 1.0 {
        TIME_UNIT_EXACT_NS
    } else {
        TIME_UNIT_SAMPLED_NS
    }
}
/// Largest record payload accepted, in bytes.
pub const MAX_RECORD: u64 = 64 << 20;
/// Largest decompressed block accepted, in bytes.
pub const MAX_BLOCK: u64 = MAX_RECORD + (1 << 20);
/// Raw bytes of pending records at which the writer seals a block without waiting for a
/// flush. Each block starts zstd afresh (a frame header, new tables), so larger blocks make
/// smaller files (`cargo bench --bench codec` prints a recording's blocks and sizes). A block
/// still holds at most one flush interval of events (50 ms).
pub const BLOCK_BYTES: usize = 4 << 20;
/// Longest string accepted, in bytes.
pub const MAX_STRING: u64 = 1 << 20;
/// Longest build id accepted (GNU build ids are 16 or 20 bytes).
pub const MAX_BUILD_ID: usize = 64;
/// Most frames accepted in one stack.
pub const MAX_FRAMES: u64 = 65536;
/// Most inline symbols accepted at one address, and most command-line arguments.
pub const MAX_LIST: u64 = 65536;

pub(super) const TAG_HEADER: u8 = 1;
pub(super) const TAG_MODULE: u8 = 2;
pub(super) const TAG_STACK: u8 = 3;
pub(super) const TAG_SYMBOLS: u8 = 4;
pub(super) const TAG_SAMPLE: u8 = 5;
pub(super) const TAG_FREE: u8 = 6;
pub(super) const TAG_MOVE: u8 = 7;
pub(super) const TAG_LOST: u8 = 8;
pub(super) const TAG_END: u8 = 9;
pub(super) const TAG_BLOCK: u8 = 10;
pub(super) const TAG_PAIR: u8 = 11;
pub(super) const TAG_LABEL: u8 = 12;
pub(super) const EV_SAMPLE: u8 = 0x40;
pub(super) const EV_FREE: u8 = 0x41;
pub(super) const EV_MOVE: u8 = 0x42;
/// Tags at or above this are ancillary: skipped when unknown.
pub(super) const ANCILLARY: u8 = 0x80;
pub(super) const TAG_GC_CYCLE: u8 = ANCILLARY;
pub(super) const TAG_STOPPING: u8 = ANCILLARY + 1;
pub(super) const TAG_RESIDENT: u8 = ANCILLARY + 2;
pub(super) const TAG_ENDED: u8 = ANCILLARY + 3;
pub(super) const TAG_SPLIT: u8 = ANCILLARY + 4;
pub(super) const TAG_NOTE: u8 = ANCILLARY + 5;
/// Notes a profile keeps at most (a hostile file may hold any number of note records).
pub const MAX_NOTES: usize = 64;
pub(super) const CODEC_ZSTD: u64 = 1;

/// One event of a recording, in stream order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    /// A sampled allocation.
    Sample(Sample),
    /// The free of a sampled block.
    Free(Free),
    /// The reallocation of a sampled block that kept its sample.
    Move(Move),
    /// A garbage-collection cycle of a managed heap.
    GcCycle(GcCycle),
}

pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(super) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// True when a free of `age` units in a stream of `unit` ns carries its lifetime (§2c):
/// when the unit is coarser than [`LIFETIME_UNIT_NS`] and the age could be a block that
/// lived less than one unit.
pub(super) fn fine_life(unit: u64, age: i64) -> bool {
    unit > LIFETIME_UNIT_NS && (age == 0 || age == 1)
}

/// `t` as a stream of time unit `unit` (a power of two) stores it: in whole units.
pub(crate) fn stored_ns(t: u64, unit: u64) -> u64 {
    (t >> unit.trailing_zeros()) << unit.trailing_zeros()
}

/// A sample as a reader gets it back from a stream of time unit `unit` (a power of two):
/// its time in whole units. With [`free_as_stored`], what `memprof record`'s collector folds
/// as it writes, so that its aggregates are the file's.
pub(crate) fn sample_as_stored(s: &Sample, unit: u64) -> Sample {
    Sample { time_ns: stored_ns(s.time_ns, unit), ..*s }
}

/// A free as a reader of this version gets it back from a stream of time unit `unit`: its
/// times in whole units, its lifetime kept (in [`LIFETIME_UNIT_NS`]) only when the unit is
/// too coarse for it (§2c).
pub(crate) fn free_as_stored(f: &Free, unit: u64) -> Free {
    let shift = unit.trailing_zeros();
    let age = (f.time_ns >> shift).wrapping_sub(f.alloc_ns >> shift) as i64;
    let life_ns = fine_life(unit, age).then(|| stored_ns(f.lifetime_ns(), LIFETIME_UNIT_NS));
    Free {
        time_ns: stored_ns(f.time_ns, unit),
        alloc_ns: stored_ns(f.alloc_ns, unit),
        life_ns,
        ..*f
    }
}

/// A move (of an older recording: no build writes one now, `engine::sampler` §5) as a
/// reader gets it back from a stream of time unit `unit`.
#[cfg(test)]
pub(crate) fn move_as_stored(m: &Move, unit: u64) -> Move {
    Move { time_ns: stored_ns(m.time_ns, unit), alloc_ns: stored_ns(m.alloc_ns, unit), ..*m }
}

/// The delta-coding state of one block (reset at every block).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Delta {
    pub(super) time: u64,
}
