//! The `.mprof` stream: versioned, streamed, append-only, compact, and readable after a crash.
//!
//! # 1. Layout (version 4)
//! ```text
//! magic   8 bytes  "MPROF\0\0\x01"
//! record*          tag: u8 · len: LEB128 varint · payload[len] · crc32(tag ‖ payload): u32 LE
//! ```
//! The first record is the header (tag 1); every later record is a *block* (tag 10) whose
//! payload is `codec u` (1: zstd), `raw_len u`, then `raw_len` bytes once decompressed: a
//! run of *inner records*. The writer seals a block at every flush of the drain thread
//! (at most 50 ms of events) and whenever
//! [`BLOCK_BYTES`] raw bytes are pending, so a file cut at any byte still yields every
//! complete block: one length and one checksum per block, not per event. Payload fields
//! are LEB128 varints (`u`), zigzag varints (`z`), IEEE doubles little-endian (`f64`) and
//! strings (`str` = `u` byte length, then UTF-8 bytes).
//!
//! | tag | record | payload |
//! |-----|--------|---------|
//! | 1 (outer) | Header | version `u`, interval `f64`, depth `u`, pid `u`, executable `str`, argc `u`, argv `str`×argc, start_unix_ns `u`, time_unit_ns `u` (version 2), then (appended, may be absent: 0) ppid `u`, the parent's pid, then (appended, may be absent: 0) flags `u`: bit 0 set when `memprof record`'s collector wrote the file (it ends the file whatever ends the program, so a file of it cut short means `record` itself stopped), bit 1 when `memprof attach`'s did (the recording began in a running process: blocks allocated before it are unknown), then (appended, may be absent: 0) ns_pid `u`, the process's pid in its own PID namespace when it differs from pid (pid and ppid are as `memprof` saw them) |
//! | 10 (outer) | Block | codec `u`, raw_len `u`, compressed inner records |
//!
//! Inner records are `tag u8 · len u · payload`, except the three *events*, whose layout
//! every version-2 reader knows and which therefore carry no length:
//!
//! | tag | inner record | payload |
//! |-----|--------------|---------|
//! | 2 | Module | as in version 1 (below) |
//! | 3 | Stack | as in version 1, then (version 3, may be absent: 0) label `u`: 0 for none, else a label defined before it |
//! | 4 | Symbols | as in version 1 |
//! | 8 | Lost | as in version 1, then (appended, may be absent: 0) frees_replayed `u`, frees_unknown `u`: of the lost events, the frees replayed from the queue's table of lost frees and those lost for good |
//! | 9 | End | as in version 1 |
//! | 11 | Pair | stack `u`, size `u`: defines the next (stack, size) pair id (0, 1, 2, … per file) |
//! | 12 | Label | id `u`, text `str`: defines label `id` (1, 2, 3, … per file, in order), e.g. the tracing span path `server;handle{endpoint=/upload}` (version 3) |
//! | 0x80, 0x81 | GcCycle, Stopping | as in version 1 |
//! | 0x82 | Resident | time_ns, bytes `u` (ancillary): the process's resident size then, read by `memprof record`'s collector from `/proc/PID/statm`; times in nanoseconds, not the stream's units; a Stopping record stays the last word after it |
//! | 0x83 | Ended | how `u` (1 `exit`, 2 `_exit`, 3 a signal, 4 the OOM killer, 5 `exec`, 6 detached), status `i` (the exit status or the signal), limit `u` (bytes, the memory limit an OOM kill reached; 0 unknown) (ancillary): how the process ended, written by `memprof record`'s collector before the end record or the Stopping record |
//! | 0x84 | Split | time_ns, resident, allocator, stacks, files, own, other `u` (bytes), live `f64`, then outside `u` (bytes; appended later, absent in older files) (ancillary): the process's resident memory by kind of mapping (`/proc/PID/smaps`), beside the estimated live heap then ([`crate::profile::ResidentSplit`]) |
//! | 0x85 | Note | text `str` (ancillary; also after the end record, appended): a note that qualifies the profile's numbers ([`crate::profile::Profile::notes`]; at most 64 kept) |
//! | 0x40 | Sample (event) | pair `u`, Δtime `z`, thread `u`, Δk `z` |
//! | 0x41 | Free (event) | Δtime `z`, pair `u`, age `z`, [life `u`], Δk `z` (life: version 4, §2c) |
//! | 0x42 | Move (event) | Δtime `z`, pair `u`, age `z`, Δk `z`, new_size `u` (written by older builds only: a reallocation now ends its block, `engine::sampler` §5; still read, and written again when a file that holds moves is) |
//!
//! Events are delta-coded against the previous event of the same block (the time starts
//! at 0 in every block, so that blocks decode independently of each other's events):
//! - time in units of the header's `time_unit_ns` (§ "Time units"): Δtime is the difference
//!   from the previous event's time (zigzag: the drain thread interleaves threads whose
//!   clocks are read independently); an event read back has the time at the start of its
//!   unit;
//! - no sample ids: samples read back numbered 1, 2, 3… in stream order. A free or move
//!   names the block it ends the way the aggregates need it, by its (stack, size) pair, its
//!   age (its time minus its sample's, in units) and its `k`, so that a reader keeps live
//!   totals per pair and never a map of live blocks (heaptrack's frees name their
//!   allocation's (size, stack) entry the same way); the writer learns them from the
//!   token the session keeps with each sampled block;
//! - a sample's `k` as its difference from the expected value (its size in the exact mode,
//!   1 otherwise);
//! - the (stack, size) pair is interned, as heaptrack does: the allocation sites of a program
//!   repeat a few sizes each, and zstd then sees the same bytes again and again.
//!
//! Addresses of blocks are not written (no report reads them): events read back with
//! `addr` and `new_addr` 0. Symbols and late metadata are *appended*, as blocks after the
//! end record ([`append_symbols`]), never by rewriting the file.
//!
//! ## Time units
//! A timestamp is the one field of an event that never repeats, so its resolution sets the
//! floor of the compressed size: what is left after zstd is, per change of unit, where in
//! the run of events it happened. On the statmemprof worst case's program in the exact mode
//! (`fixtures/c/worst_case.c` recorded with `--interval 1`; `cargo bench --bench codec`
//! records it and prints its blocks' sizes), the file shrinks steeply as the unit grows
//! from tens of microseconds to about a millisecond, and little after; at about a
//! millisecond it is near heaptrack's, whose timeline has 10 ms steps. At an interval of
//! 800 B, microsecond units cost a fraction of a byte per event. So:
//! - exact mode: [`TIME_UNIT_EXACT_NS`] = 2²⁰ ns ≈ 1.05 ms, ten times finer than heaptrack's
//!   timeline, at a file size near its; fine enough to order a program's phases and to
//!   draw its heap over time. Within one unit, the order of events is the stream's.
//! - sampled: [`TIME_UNIT_SAMPLED_NS`] = 2¹⁰ ns ≈ 1 µs: samples are sparse enough that µs
//!   times cost a fraction of a byte each, and lifetimes and GC attribution stay precise.
//!
//! A lifetime is the one time that needs more than the unit: the difference of two times
//! quantised to ≈ 1.05 ms is ≈ 1.05 ms for a block freed 100 ns after its allocation when a
//! unit boundary falls in between, and the short-lived view (1 ms by default) then misses
//! it. So from version 4 a free whose age is 0 or 1 unit, in a stream whose unit is coarser
//! than [`LIFETIME_UNIT_NS`], also says how long its block lived, in units of
//! [`LIFETIME_UNIT_NS`] = 2¹⁷ ns ≈ 131 µs (an eighth of the time unit), rounded down from
//! the difference of the two unquantised times (§2c): lifetimes under one time unit are
//! known to ≈ 131 µs, longer ones to the unit. A block freed within microseconds of its
//! allocation writes 0 there every time, which zstd reduces to nothing; only a free
//! between 131 µs and 2 units after its allocation writes another value, and each such
//! value costs a few bytes (it breaks zstd's runs). Why not finer: in the exact mode the
//! profiler itself stretches lifetimes by microseconds (the stack walk of a sample taken
//! in between) and, on a loaded machine, by its waits for room in the queue (another
//! allocation's, between a block's allocation and its free: 50 µs naps); a unit of a few
//! microseconds turns that noise into distinct values that zstd cannot fold, and a
//! churning program's file grows well past heaptrack's (compare the sizes of
//! `fixtures/c/churn_pairs.c` recorded in the exact mode by both). At 131 µs
//! the short-lived threshold is still exact for blocks that live microseconds, and off
//! only for blocks that live within 131 µs above it.
//!
//! GC cycles keep nanosecond times; a sample's time is taken as the middle of its unit when
//! compared with them (see [`crate::profile`] §3).
//!
//! # 2. Version 1 (read only)
//! Every record is an outer record, events included:
//!
//! | tag | record  | payload |
//! |-----|---------|---------|
//! | 1   | Header  | version `u`, interval `f64`, depth `u`, pid `u`, executable `str`, argc `u`, argv `str`×argc, start_unix_ns `u` |
//! | 2   | Module  | path `str`, base `u`, start `u`, end `u`, then (appended, may be absent) build id: length `u`, bytes, then (appended, may be absent) file size `u`, mtime_ns `u` (0: unknown; recorded for objects without a build id) |
//! | 3   | Stack   | id `u`, flags `u` (bit 0: truncated), n `u`, first frame `u`, then n-1 zigzag deltas `u` |
//! | 4   | Symbols | addr `u`, n `u`, n × (function `str`, flags `u` (bit 0: file, bit 1: line), [file `str`], [line `u`]) |
//! | 5   | Sample  | id `u`, stack `u`, time_ns `u`, thread `u`, addr `u`, size `u`, k `u` |
//! | 6   | Free    | id `u`, time_ns `u` |
//! | 7   | Move    | id `u`, time_ns `u`, new_addr `u`, new_size `u` |
//! | 8   | Lost    | events `u`, untracked `u`, callback_panics `u` (cumulative: the last one wins) |
//! | 9   | End     | samples `u`, frees `u`, moves `u` written before it |
//! | 0x80 | GcCycle | cycle, start_ns, end_ns, mark_ns, slices, longest_slice_ns, words_marked `u`, ns_per_word `f64`, sweep_ns, heap_words, live_words `u` (ancillary) |
//! | 0x81 | Stopping | reason `u` (1: `exec`, 2: `_exit`) (ancillary): the last write before the process image ends without an end record; meaningful only as the stream's last record (an `exec` that failed is followed by more) |
//!
//! In every version stack ids are dense in order of first write (0, 1, 2, …); a stack is
//! written before the first sample that names it, and a sample before any free or move of
//! its block.
//!
//! # 2b. Version 3: labels
//! Version 3 is version 2 with labels: a stack's identity is its frames, its truncation and
//! its *label* (what [`crate::profile::Stack::label`] holds: the tracing span path of the
//! allocating thread, see `memprof::tracing`), so one site allocating under two spans is two
//! stacks, and every aggregate keyed by stack (allocated, live, frees, peak, windows) keeps
//! the label. A label is defined by a Label record (tag 12) before the first stack that
//! names it; label ids are dense (1, 2, 3, …) in order of definition, 0 meaning "no label".
//! A stack without a label writes no label field, so a version-3 stream without labels has
//! the bytes of a version-2 one but for the header's version. Readers of version 1 and 2
//! files see no labels (every stack's label is 0): in a stream of an older version a Label
//! record is an unknown critical record (the reading stops there, §3) and bytes after a
//! stack's frames are ignored trailing bytes.
//!
//! # 2c. Version 4: lifetimes finer than the time unit
//! Version 4 is version 3 with one more field in the Free event: when the header's
//! `time_unit_ns` is larger than [`LIFETIME_UNIT_NS`] (the exact mode) and the free's age
//! is 0 or 1 unit, the age is followed by `life u`: ⌊(free time − allocation time) /
//! [`LIFETIME_UNIT_NS`]⌋, both times in nanoseconds before quantisation. A life that the
//! age rules out (not below (age + 1) units) is a damaged record. Read back, such a free
//! has [`Free::life_ns`](crate::profile::Free::life_ns) set to `life × LIFETIME_UNIT_NS`; other frees, and every free of
//! versions 1 to 3, leave it unset, and their lifetime is the difference of their
//! quantised times ([`Free::lifetime_ns`](crate::profile::Free::lifetime_ns)). Moves are unchanged (a lifetime ends at the
//! free). A version-3 reader refuses a version-4 file (§3): events have no length, so it
//! could not skip the field.
//!
//! # 3. Compatibility
//! - The header's `version` is [`VERSION`]; a reader refuses versions it does not know.
//! - Within one version, a writer may append fields at the end of a known record's payload;
//!   readers ignore trailing payload bytes of the records they know (not of the events,
//!   which have no length).
//! - Tags with the high bit set (`0x80..=0xFF`) are *ancillary* (PNG's rule): a reader that
//!   does not know one skips it. An unknown tag below `0x80` is *critical*: the reader
//!   cannot interpret the rest of the stream and stops there with a warning.
//!
//! # 4. Reading untrusted input
//! The reader ([`Reader`]) streams: it holds one block and the tables (modules, stacks,
//! symbols, pairs), never the events, which it hands out one at a time. It never panics
//! and never trusts a length: a record is at most [`MAX_RECORD`] bytes, a decompressed
//! block [`MAX_BLOCK`], a string [`MAX_STRING`], a stack [`MAX_FRAMES`] frames, and every
//! count is also bounded by the bytes left in its payload before anything is allocated.
//! - An empty file, a bad magic, a missing or damaged header or an unsupported version is an
//!   error: there is nothing to report.
//! - After the header the reader is lenient and keeps everything before a problem: a stream
//!   cut at any byte (a crash, a full disk) or ending without its end record yields
//!   `complete = false` and a warning naming the byte where it stops. A stream whose last
//!   record is a Stopping record and which ends right after it is whole: `complete =
//!   false`, no warning, and `stopped` says why (`exec`, `_exit`). A damaged record (crc
//!   mismatch, oversized length, undecodable payload or block, a sample naming an
//!   undefined stack or pair, an unknown critical tag) stops the reading there the same
//!   way, with a warning naming the record and its byte offset. Records are numbered from 1
//!   (the header).
//! - In a version-1 stream, bytes after the end record are ignored with a warning; in a
//!   version-2 stream, blocks after the end record may add symbols and modules only.
//!
//! # 5. Where the code is
//! - this file: the spec above, the limits, the record tags and what writer and reader
//!   share (zigzag, the delta state of a block, when a free carries its lifetime);
//! - `write.rs`: [`Writer`], [`write_events`], [`append_symbols`];
//! - `read.rs`: [`Reader`] (the reader of untrusted input, §4), [`read_events`] and
//!   [`Profile::read_from`](super::Profile::read_from);
//! - `read/record.rs`: outer records (lengths, checksums, cuts) read from untrusted bytes;
//! - `read/v1.rs`: the events of version-1 streams, which name their blocks by id;
//! - `tests.rs`: round trips, old versions, damaged and truncated files.
#![forbid(unsafe_code)]

mod read;
pub(crate) mod spec;
mod write;

pub use read::{read_events, Reader};
pub use spec::{
    time_unit_ns, Event, BLOCK_BYTES, LIFETIME_UNIT_NS, MAGIC, MAX_BLOCK, MAX_BUILD_ID, MAX_FRAMES,
    MAX_LIST, MAX_RECORD, MAX_STRING, TIME_UNIT_EXACT_NS, TIME_UNIT_SAMPLED_NS, VERSION,
};
pub use write::{append_notes, append_symbols, write_events, Writer};

#[cfg(test)]
use {
    super::{
        Free, GcCycle, Header, Lost, Module, Move, Profile, Sample, Stack, StackId, Stopped, Symbol,
    },
    read::Payload,
    spec::*,
    std::io::{self, Write},
    std::path::Path,
    write::{frame, put_f64, put_str, put_u},
};

#[cfg(test)]
mod tests;
