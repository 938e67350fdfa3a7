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
//! | 1 (outer) | Header | version `u`, interval `f64`, depth `u`, pid `u`, executable `str`, argc `u`, argv `str`×argc, start_unix_ns `u`, time_unit_ns `u` (version 2), then (appended, may be absent: 0) ppid `u`, the parent's pid, then (appended, may be absent: 0) flags `u`: bit 0 set when `memprof record`'s collector wrote the file (it ends the file whatever ends the program, so a file of it cut short means `record` itself stopped) |
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
//! | 0x40 | Sample (event) | pair `u`, Δtime `z`, thread `u`, Δk `z` |
//! | 0x41 | Free (event) | Δtime `z`, pair `u`, age `z`, [life `u`], Δk `z` (life: version 4, §2c) |
//! | 0x42 | Move (event) | Δtime `z`, pair `u`, age `z`, Δk `z`, new_size `u` |
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
//! the run of events it happened. Measured on the statmemprof worst case's program (8 M events in 1.3 s,
//! exact mode), the file is 42 KB with 64 µs units, 33 KB with 256 µs, 14 KB with ≈ 1 ms
//! and 7.8 KB with 16 ms (heaptrack's: 8.5 KB, with a 10 ms timeline); at an interval of
//! 800 B (0.84 M events) it is 324 KB with ≈ 1 µs units, 0.39 bytes per event. So:
//! - exact mode: [`TIME_UNIT_EXACT_NS`] = 2²⁰ ns ≈ 1.05 ms, ten times finer than heaptrack's
//!   timeline, within 2× of its file size; fine enough to order a program's phases and to
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
//! allocation's, between a block's allocation and its free: 50 µs naps); at ≈ 4 µs those
//! made a churning program's file half as large again, past twice heaptrack's. At 131 µs
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
//! has [`Free::life_ns`] set to `life × LIFETIME_UNIT_NS`; other frees, and every free of
//! versions 1 to 3, leave it unset, and their lifetime is the difference of their
//! quantised times ([`Free::lifetime_ns`]). Moves are unchanged (a lifetime ends at the
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
#![forbid(unsafe_code)]

use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use super::{
    Free, GcCycle, Header, Lost, Module, Move, Profile, Sample, Stack, StackId, Stopped, Symbol,
};
use crate::Error;

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
/// flush. Each block starts zstd afresh (a frame header, new tables): with 1 MiB blocks,
/// the worst case's exact-mode file was 66 KB, with 4 MiB 57 KB (heaptrack's: 32 KB). A block
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
/// zstd's level for blocks (`cargo bench --bench codec`): level 3 halves CPython's
/// exact-mode file against level 1 (1.11 MB vs 2.19 MB for 15.9 M events: its pair ids
/// and ages repeat at distances level 1 does not search), still compressing at over
/// 1 GB/s there; on the worst case's repetitive blocks both give the same size (level 3 at a
/// quarter of level 1's speed, still ≈ 1 GB/s). lz4 is 2.6–14× larger.
const ZSTD_LEVEL: i32 = 3;

const TAG_HEADER: u8 = 1;
const TAG_MODULE: u8 = 2;
const TAG_STACK: u8 = 3;
const TAG_SYMBOLS: u8 = 4;
const TAG_SAMPLE: u8 = 5;
const TAG_FREE: u8 = 6;
const TAG_MOVE: u8 = 7;
const TAG_LOST: u8 = 8;
const TAG_END: u8 = 9;
const TAG_BLOCK: u8 = 10;
const TAG_PAIR: u8 = 11;
const TAG_LABEL: u8 = 12;
const EV_SAMPLE: u8 = 0x40;
const EV_FREE: u8 = 0x41;
const EV_MOVE: u8 = 0x42;
/// Tags at or above this are ancillary: skipped when unknown.
const ANCILLARY: u8 = 0x80;
const TAG_GC_CYCLE: u8 = ANCILLARY;
const TAG_STOPPING: u8 = ANCILLARY + 1;
const CODEC_ZSTD: u64 = 1;

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

// ---------------------------------------------------------------------------------------------
// Encoding

fn put_u(buf: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf.push(byte);
            return;
        }
        buf.push(byte | 0x80);
    }
}

fn put_z(buf: &mut Vec<u8>, v: i64) {
    put_u(buf, zigzag(v));
}

fn put_f64(buf: &mut Vec<u8>, v: f64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

fn put_str(buf: &mut Vec<u8>, s: &str) -> Result<(), Error> {
    if s.len() as u64 > MAX_STRING {
        return Err(Error::Format(format!(
            "string of {} bytes is longer than the format allows ({MAX_STRING})",
            s.len()
        )));
    }
    put_u(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
    Ok(())
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// True when a free of `age` units in a stream of `unit` ns carries its lifetime (§2c):
/// when the unit is coarser than [`LIFETIME_UNIT_NS`] and the age could be a block that
/// lived less than one unit.
fn fine_life(unit: u64, age: i64) -> bool {
    unit > LIFETIME_UNIT_NS && (age == 0 || age == 1)
}

/// Frames `payload` as an outer record (tag, length, payload, crc) into `out`.
fn frame(out: &mut Vec<u8>, tag: u8, payload: &[u8]) {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[tag]);
    crc.update(payload);
    out.push(tag);
    put_u(out, payload.len() as u64);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
}

/// The delta-coding state of one block (reset at every block).
#[derive(Clone, Copy, Debug, Default)]
struct Delta {
    time: u64,
}

/// Streams a profile as `.mprof` version 3. See the [module documentation](self).
pub struct Writer<W: Write> {
    out: W,
    /// Inner records of the block being built.
    block: Vec<u8>,
    /// One record's payload.
    payload: Vec<u8>,
    /// The sealed block (framed), reused.
    sealed: Vec<u8>,
    zstd: zstd::bulk::Compressor<'static>,
    delta: Delta,
    /// (stack, size) pair ids, and the next one.
    pairs: std::collections::HashMap<(StackId, u64), u64, crate::sys::hash::FastHash>,
    interval: f64,
    unit: u64,
    stacks: u64,
    /// Labels written so far (the next one's id is this + 1).
    labels: u64,
    samples: u64,
    frees: u64,
    moves: u64,
    /// Set when a write failed part-way: the stream may end in a half record, so nothing
    /// more may be appended after it (the reader then sees a cut, not a damaged record).
    failed: bool,
}

impl<W: Write> std::fmt::Debug for Writer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("pending", &self.block.len())
            .field("samples", &self.samples)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl<W: Write> Writer<W> {
    fn bare(out: W, header: &Header) -> Result<Self, Error> {
        if !(header.interval.is_finite() && header.interval >= 1.0) {
            return Err(Error::Format(format!(
                "invalid sampling interval {} (must be at least 1 byte)",
                header.interval
            )));
        }
        let zstd = zstd::bulk::Compressor::new(ZSTD_LEVEL)
            .map_err(|e| Error::io("starting the zstd compressor", e))?;
        Ok(Writer {
            out,
            block: Vec::with_capacity(BLOCK_BYTES + 4096),
            payload: Vec::with_capacity(256),
            sealed: Vec::new(),
            zstd,
            delta: Delta::default(),
            pairs: Default::default(),
            interval: header.interval,
            unit: time_unit_ns(header.interval),
            stacks: 0,
            labels: 0,
            samples: 0,
            frees: 0,
            moves: 0,
            failed: false,
        })
    }

    /// Writes the magic and the header (with `version` set to [`VERSION`] and
    /// `time_unit_ns` to [`time_unit_ns`] of its interval, whatever `header` says).
    pub fn new(out: W, header: &Header) -> Result<Self, Error> {
        let mut w = Writer::bare(out, header)?;
        let mut p = Vec::with_capacity(256);
        put_u(&mut p, u64::from(VERSION));
        put_f64(&mut p, header.interval);
        put_u(&mut p, u64::from(header.depth));
        put_u(&mut p, u64::from(header.pid));
        put_str(&mut p, &header.executable)?;
        if header.cmdline.len() as u64 > MAX_LIST {
            return Err(Error::Format(format!(
                "command line of {} arguments is longer than the format allows",
                header.cmdline.len()
            )));
        }
        put_u(&mut p, header.cmdline.len() as u64);
        for arg in &header.cmdline {
            put_str(&mut p, arg)?;
        }
        put_u(&mut p, header.start_unix_ns);
        put_u(&mut p, w.unit);
        put_u(&mut p, u64::from(header.ppid));
        // Flags only when one is set: a file written in the process keeps the bytes it had.
        if header.collected {
            put_u(&mut p, 1);
        }
        let mut bytes = MAGIC.to_vec();
        frame(&mut bytes, TAG_HEADER, &p);
        w.put(&bytes)?;
        Ok(w)
    }

    /// Writes `bytes` to the sink; a failure poisons the writer.
    fn put(&mut self, bytes: &[u8]) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Format(
                "an earlier write of this profile failed; the stream was left as it is".into(),
            ));
        }
        self.out.write_all(bytes).map_err(|e| {
            self.failed = true;
            Error::io("writing profile", e)
        })
    }

    /// Appends the payload buffer as an inner record with a length.
    fn record(&mut self, tag: u8) -> Result<(), Error> {
        if self.payload.len() as u64 > MAX_RECORD {
            return Err(Error::Format(format!(
                "record of {} bytes is longer than the format allows ({MAX_RECORD})",
                self.payload.len()
            )));
        }
        self.block.push(tag);
        put_u(&mut self.block, self.payload.len() as u64);
        self.block.extend_from_slice(&self.payload);
        self.maybe_seal()
    }

    fn maybe_seal(&mut self) -> Result<(), Error> {
        if self.block.len() >= BLOCK_BYTES {
            self.seal()?;
        }
        Ok(())
    }

    /// Compresses the pending records into one block and hands it to the sink.
    fn seal(&mut self) -> Result<(), Error> {
        if self.block.is_empty() {
            return Ok(());
        }
        if self.failed {
            return self.put(&[]);
        }
        let compressed = self
            .zstd
            .compress(&self.block)
            .map_err(|e| Error::io("compressing a profile block", e))?;
        self.payload.clear();
        put_u(&mut self.payload, CODEC_ZSTD);
        put_u(&mut self.payload, self.block.len() as u64);
        self.payload.extend_from_slice(&compressed);
        let mut sealed = std::mem::take(&mut self.sealed);
        sealed.clear();
        frame(&mut sealed, TAG_BLOCK, &self.payload);
        let r = self.put(&sealed);
        self.sealed = sealed;
        self.block.clear();
        self.delta = Delta::default();
        r
    }

    /// Writes a loaded module.
    pub fn write_module(&mut self, m: &Module) -> Result<(), Error> {
        let p = &mut self.payload;
        p.clear();
        put_str(p, &m.path)?;
        put_u(p, m.base);
        put_u(p, m.start);
        put_u(p, m.end);
        if m.build_id.len() > MAX_BUILD_ID {
            return Err(Error::Format(format!(
                "a build id of {} bytes is longer than the format allows ({MAX_BUILD_ID})",
                m.build_id.len()
            )));
        }
        put_u(p, m.build_id.len() as u64);
        p.extend_from_slice(&m.build_id);
        put_u(p, m.file_size);
        put_u(p, m.file_mtime_ns);
        self.record(TAG_MODULE)
    }

    /// Writes label `id` (§2b), which must be the next id (labels are numbered 1, 2, 3… in
    /// order of first write), before any stack that names it.
    pub fn write_label(&mut self, id: u32, text: &str) -> Result<(), Error> {
        if u64::from(id) != self.labels + 1 {
            return Err(Error::Format(format!(
                "label {id} written out of order: the next label id is {}",
                self.labels + 1
            )));
        }
        let p = &mut self.payload;
        p.clear();
        put_u(p, u64::from(id));
        put_str(p, text)?;
        self.record(TAG_LABEL)?;
        self.labels += 1;
        Ok(())
    }

    /// Writes stack `id`, which must be the next id (stacks are numbered 0, 1, 2… in order
    /// of first write); its label, if any, must have been written.
    pub fn write_stack(&mut self, id: StackId, stack: &Stack) -> Result<(), Error> {
        if u64::from(id) != self.stacks {
            return Err(Error::Format(format!(
                "stack {id} written out of order: the next stack id is {}",
                self.stacks
            )));
        }
        if u64::from(stack.label) > self.labels {
            return Err(Error::Format(format!(
                "stack {id} names label {} before it was written",
                stack.label
            )));
        }
        if stack.frames.len() as u64 > MAX_FRAMES {
            return Err(Error::Format(format!(
                "stack of {} frames is deeper than the format allows ({MAX_FRAMES})",
                stack.frames.len()
            )));
        }
        let p = &mut self.payload;
        p.clear();
        put_u(p, u64::from(id));
        put_u(p, u64::from(stack.truncated));
        put_u(p, stack.frames.len() as u64);
        let mut prev = 0u64;
        for (i, &f) in stack.frames.iter().enumerate() {
            if i == 0 {
                put_u(p, f);
            } else {
                put_z(p, f.wrapping_sub(prev) as i64);
            }
            prev = f;
        }
        if stack.label != 0 {
            put_u(p, u64::from(stack.label));
        }
        self.record(TAG_STACK)?;
        self.stacks += 1;
        Ok(())
    }

    /// Writes the symbols of one address (its inline chain, innermost first).
    pub fn write_symbols(&mut self, addr: u64, symbols: &[Symbol]) -> Result<(), Error> {
        if symbols.len() as u64 > MAX_LIST {
            return Err(Error::Format(format!(
                "{} inline frames at one address are more than the format allows",
                symbols.len()
            )));
        }
        let p = &mut self.payload;
        p.clear();
        put_u(p, addr);
        put_u(p, symbols.len() as u64);
        for s in symbols {
            put_str(p, &s.function)?;
            let flags = u64::from(s.file.is_some()) | (u64::from(s.line.is_some()) << 1);
            put_u(p, flags);
            if let Some(file) = &s.file {
                put_str(p, file)?;
            }
            if let Some(line) = s.line {
                put_u(p, u64::from(line));
            }
        }
        self.record(TAG_SYMBOLS)
    }

    /// The time field of an event: its delta from the block's previous event, in units.
    fn time_delta(&mut self, time_ns: u64) -> i64 {
        // Units are powers of two (a shift, not a division, per event).
        let t = time_ns >> self.unit.trailing_zeros();
        let d = t.wrapping_sub(self.delta.time) as i64;
        self.delta.time = t;
        d
    }

    /// Writes an alloc sample; its stack must have been written.
    pub fn write_sample(&mut self, s: &Sample) -> Result<(), Error> {
        if u64::from(s.stack) >= self.stacks {
            return Err(Error::Format(format!(
                "sample {} names stack {} which was never written",
                s.id, s.stack
            )));
        }
        let pair = self.pair(s.stack, s.size)?;
        let dt = self.time_delta(s.time_ns);
        let expected = super::expected_k(self.interval, s.size);
        let b = &mut self.block;
        b.push(EV_SAMPLE);
        put_u(b, pair);
        put_z(b, dt);
        put_u(b, u64::from(s.thread));
        put_z(b, s.k.wrapping_sub(expected) as i64);
        self.samples += 1;
        self.maybe_seal()
    }

    /// The pair id of `(stack, size)`, defined first if it is new.
    fn pair(&mut self, stack: StackId, size: u64) -> Result<u64, Error> {
        let next = self.pairs.len() as u64;
        let pair = *self.pairs.entry((stack, size)).or_insert(next);
        if pair == next {
            self.payload.clear();
            put_u(&mut self.payload, u64::from(stack));
            put_u(&mut self.payload, size);
            self.record(TAG_PAIR)?;
        }
        Ok(pair)
    }

    /// The fields that name the block of a free or move: its pair, its age in units, (a
    /// free's) lifetime when the unit is too coarse for it (§2c), its sample points.
    #[allow(clippy::too_many_arguments)]
    fn block_of(
        &mut self,
        tag: u8,
        time_ns: u64,
        stack: StackId,
        size: u64,
        k: u64,
        alloc_ns: u64,
        life_ns: u64,
    ) -> Result<(), Error> {
        if u64::from(stack) >= self.stacks {
            return Err(Error::Format(format!(
                "a free or move names stack {stack} which was never written"
            )));
        }
        let pair = self.pair(stack, size)?;
        let dt = self.time_delta(time_ns);
        let age =
            (self.delta.time as i64).wrapping_sub((alloc_ns >> self.unit.trailing_zeros()) as i64);
        let life = (tag == EV_FREE && fine_life(self.unit, age)).then_some(life_ns);
        if let Some(life) = life {
            // What the reader checks (§2c): a hand-built free can say anything.
            if life >= (age as u64 + 1) * self.unit {
                return Err(Error::Format(format!(
                    "a free's lifetime of {life} ns does not fit its allocation and free times"
                )));
            }
        }
        let expected = super::expected_k(self.interval, size);
        let b = &mut self.block;
        b.push(tag);
        put_z(b, dt);
        put_u(b, pair);
        put_z(b, age);
        if let Some(life) = life {
            put_u(b, life >> LIFETIME_UNIT_NS.trailing_zeros());
        }
        put_z(b, k.wrapping_sub(expected) as i64);
        Ok(())
    }

    /// Writes the free of a sampled block (named by its stack, size, points and
    /// allocation time; the id is not written).
    pub fn write_free(&mut self, f: &Free) -> Result<(), Error> {
        self.block_of(EV_FREE, f.time_ns, f.stack, f.size, f.k, f.alloc_ns, f.lifetime_ns())?;
        self.frees += 1;
        self.maybe_seal()
    }

    /// Writes the move (reallocation) of a sampled block (named as a free names it).
    pub fn write_move(&mut self, m: &Move) -> Result<(), Error> {
        self.block_of(EV_MOVE, m.time_ns, m.stack, m.size, m.k, m.alloc_ns, 0)?;
        put_u(&mut self.block, m.new_size);
        self.moves += 1;
        self.maybe_seal()
    }

    /// Writes one garbage-collection cycle (an ancillary record: older readers skip it).
    pub fn write_gc_cycle(&mut self, c: &GcCycle) -> Result<(), Error> {
        let p = &mut self.payload;
        p.clear();
        for v in [c.cycle, c.start_ns, c.end_ns, c.mark_ns, c.slices, c.longest_slice_ns] {
            put_u(p, v);
        }
        put_u(p, c.words_marked);
        put_f64(p, c.ns_per_word);
        for v in [c.sweep_ns, c.heap_words, c.live_words] {
            put_u(p, v);
        }
        self.record(TAG_GC_CYCLE)
    }

    /// Writes why the stream is about to end without its end record (an ancillary record).
    pub fn write_stopping(&mut self, why: Stopped) -> Result<(), Error> {
        self.payload.clear();
        put_u(
            &mut self.payload,
            match why {
                Stopped::Exec => 1,
                Stopped::QuickExit => 2,
            },
        );
        self.record(TAG_STOPPING)
    }

    /// Writes the cumulative lost-event counters (the last such record wins).
    pub fn write_lost(&mut self, l: &Lost) -> Result<(), Error> {
        self.payload.clear();
        for v in [l.events, l.untracked, l.callback_panics, l.frees_replayed, l.frees_unknown] {
            put_u(&mut self.payload, v);
        }
        self.record(TAG_LOST)
    }

    /// Seals the pending records into a block and flushes the underlying writer.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.seal()?;
        self.out.flush().map_err(|e| {
            self.failed = true;
            Error::io("flushing profile", e)
        })
    }

    /// Writes the end record, flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, Error> {
        self.payload.clear();
        for v in [self.samples, self.frees, self.moves] {
            put_u(&mut self.payload, v);
        }
        self.record(TAG_END)?;
        self.flush()?;
        Ok(self.out)
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }
}

/// Writes a whole stream: `meta`'s header, modules, stacks and symbols (by address), then
/// `events` in the order given (each free or move after its sample), `meta`'s lost counts,
/// and the end record. For tests and tools that build a recording by hand.
pub fn write_events<W: Write>(out: W, meta: &Profile, events: &[Event]) -> Result<W, Error> {
    let mut w = Writer::new(out, &meta.header)?;
    for m in &meta.modules {
        w.write_module(m)?;
    }
    for (i, text) in meta.labels.iter().enumerate() {
        let id = u32::try_from(i + 1)
            .map_err(|_| Error::Format("more labels than a label id can name".into()))?;
        w.write_label(id, text)?;
    }
    for (id, s) in meta.stacks.iter().enumerate() {
        let id = StackId::try_from(id)
            .map_err(|_| Error::Format("more stacks than a stack id can name".into()))?;
        w.write_stack(id, s)?;
    }
    let mut addrs: Vec<&u64> = meta.symbols.keys().collect();
    addrs.sort_unstable();
    for addr in addrs {
        w.write_symbols(*addr, &meta.symbols[addr])?;
    }
    for e in events {
        match e {
            Event::Sample(s) => w.write_sample(s)?,
            Event::Free(f) => w.write_free(f)?,
            Event::Move(m) => w.write_move(m)?,
            Event::GcCycle(c) => w.write_gc_cycle(c)?,
        }
    }
    if meta.lost != Lost::default() {
        w.write_lost(&meta.lost)?;
    }
    w.finish()
}

/// Appends symbols to the version-2 profile at `path`, which must end cleanly (read whole,
/// with its end record or a Stopping record last): one block after what is there, then
/// `fsync`. A reader applies them as if they had been written before the end. Nothing of
/// the file is rewritten, so a failure part-way leaves at worst a cut last block, which
/// readers ignore with a warning.
pub fn append_symbols<'a>(
    path: &Path,
    header: &Header,
    symbols: impl IntoIterator<Item = (u64, &'a [Symbol])>,
) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    if header.version < 2 {
        return Err(Error::Format(format!(
            "{}: a version-{} profile cannot be appended to",
            path.display(),
            header.version
        )));
    }
    let file = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open {} to append", path.display()), e))?;
    let mut w = Writer::bare(io::BufWriter::new(file), header)?;
    for (addr, s) in symbols {
        w.write_symbols(addr, s)?;
    }
    w.flush()?;
    let file = w.out.into_inner().map_err(|e| Error::io("appending symbols", e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(format!("cannot sync {}", path.display()), e))
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// A cursor over one record's payload. Every read is bounds-checked.
struct Payload<'a> {
    rest: &'a [u8],
}

impl<'a> Payload<'a> {
    #[inline]
    fn byte(&mut self) -> Result<u8, String> {
        let (&b, rest) = self.rest.split_first().ok_or("payload ends too early")?;
        self.rest = rest;
        Ok(b)
    }

    #[inline]
    fn u(&mut self) -> Result<u64, String> {
        if let Some((&b, rest)) = self.rest.split_first() {
            if b < 0x80 {
                self.rest = rest;
                return Ok(u64::from(b));
            }
        }
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            if i == 9 && b > 1 {
                return Err("varint overflows 64 bits".into());
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn z(&mut self) -> Result<i64, String> {
        self.u().map(unzigzag)
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let v = self.u()?;
        u32::try_from(v).map_err(|_| format!("{what} {v} does not fit in 32 bits"))
    }

    fn f64(&mut self) -> Result<f64, String> {
        let bytes = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(bytes);
        Ok(f64::from_le_bytes(a))
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], String> {
        let n = usize::try_from(n).map_err(|_| "length does not fit in memory")?;
        if n > self.rest.len() {
            return Err("payload ends too early".into());
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn str(&mut self) -> Result<String, String> {
        let n = self.u()?;
        if n > MAX_STRING {
            return Err(format!("string of {n} bytes exceeds the limit of {MAX_STRING}"));
        }
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| "string is not valid UTF-8".into())
    }

    /// A count of items that each take at least one payload byte, bounded by `max`.
    fn count(&mut self, what: &str, max: u64) -> Result<usize, String> {
        let n = self.u()?;
        if n > max {
            return Err(format!("{n} {what} exceed the limit of {max}"));
        }
        if n > self.rest.len() as u64 {
            return Err(format!("{n} {what} cannot fit in the {} bytes left", self.rest.len()));
        }
        // n ≤ rest.len(), so it fits in usize.
        Ok(n as usize)
    }
}

/// Reads bytes while counting them, so that messages can name byte offsets.
struct Counting<R> {
    inner: R,
    pos: u64,
}

/// Outcome of trying to read some bytes of a record.
enum Got {
    /// All requested bytes.
    All,
    /// End of input after this many bytes (0 = clean end before the first byte).
    Eof(usize),
}

impl<R: Read> Counting<R> {
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<Got> {
        let mut done = 0;
        while done < buf.len() {
            let Some(dst) = buf.get_mut(done..) else { break };
            match self.inner.read(dst) {
                Ok(0) => return Ok(Got::Eof(done)),
                Ok(n) => {
                    done += n.min(dst.len());
                    self.pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Got::All)
    }
}

/// One raw record, or why there is none.
enum Raw {
    Record {
        tag: u8,
        payload: Vec<u8>,
    },
    /// Clean end of input at a record boundary.
    End,
    /// Input ended inside a record.
    Cut,
    /// A damaged record; the message says why.
    Bad(String),
}

fn read_raw<R: Read>(r: &mut Counting<R>, payload: &mut Vec<u8>) -> io::Result<Raw> {
    let mut tag = [0u8; 1];
    if let Got::Eof(_) = r.fill(&mut tag)? {
        return Ok(Raw::End);
    }
    let tag = tag[0];
    let mut len = 0u64;
    let mut i = 0;
    loop {
        let mut b = [0u8; 1];
        if let Got::Eof(_) = r.fill(&mut b)? {
            return Ok(Raw::Cut);
        }
        let b = b[0];
        if i == 9 && b > 1 {
            return Ok(Raw::Bad("record length overflows 64 bits".into()));
        }
        len |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            break;
        }
        i += 1;
        if i == 10 {
            return Ok(Raw::Bad("record length varint longer than 10 bytes".into()));
        }
    }
    if tag == 0 {
        return Ok(Raw::Bad("invalid record tag 0".into()));
    }
    if len > MAX_RECORD {
        return Ok(Raw::Bad(format!("record length {len} exceeds the limit of {MAX_RECORD}")));
    }
    // Read through `take` so that a cut file with a large declared length never makes us
    // allocate the declared length up front.
    payload.clear();
    let got = (&mut r.inner).take(len).read_to_end(payload)?;
    r.pos += got as u64;
    if (got as u64) < len {
        return Ok(Raw::Cut);
    }
    let mut crc = [0u8; 4];
    if let Got::Eof(_) = r.fill(&mut crc)? {
        return Ok(Raw::Cut);
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&[tag]);
    h.update(payload);
    if h.finalize() != u32::from_le_bytes(crc) {
        return Ok(Raw::Bad("crc mismatch".into()));
    }
    Ok(Raw::Record { tag, payload: std::mem::take(payload) })
}

fn decode_header(p: &mut Payload<'_>) -> Result<Header, Error> {
    let bad = |m: String| Error::Format(format!("profile header is damaged: {m}"));
    let version = p.u32("version").map_err(bad)?;
    if version == 0 || version > VERSION {
        return Err(Error::Format(format!(
            "unsupported version {version} (this memprof reads versions 1 to {VERSION}; \
             the file was written by a newer memprof)"
        )));
    }
    let interval = p.f64().map_err(bad)?;
    if !interval.is_finite() || interval < 1.0 {
        return Err(bad(format!("invalid sampling interval {interval}")));
    }
    let depth = p.u32("depth").map_err(bad)?;
    let pid = p.u32("pid").map_err(bad)?;
    let executable = p.str().map_err(bad)?;
    let argc = p.count("arguments", MAX_LIST).map_err(bad)?;
    let mut cmdline = Vec::with_capacity(argc);
    for _ in 0..argc {
        cmdline.push(p.str().map_err(bad)?);
    }
    let start_unix_ns = p.u().map_err(bad)?;
    let time_unit_ns = if version >= 2 { p.u().map_err(bad)? } else { 1 };
    if time_unit_ns == 0 || time_unit_ns > 1_000_000_000 {
        return Err(bad(format!("invalid time unit of {time_unit_ns} ns")));
    }
    // Appended later in version 2: absent from older files.
    let ppid = if version >= 2 && !p.rest.is_empty() { p.u32("ppid").map_err(bad)? } else { 0 };
    // Appended after it: flags, bit 0 set by `memprof record`'s collector.
    let collected = version >= 2 && !p.rest.is_empty() && p.u().map_err(bad)? & 1 == 1;
    Ok(Header {
        version,
        interval,
        depth,
        pid,
        ppid,
        executable,
        cmdline,
        start_unix_ns,
        time_unit_ns,
        collected,
    })
}

/// Where the reader is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading records.
    Reading,
    /// After a version-2 end record: only symbols and modules may follow.
    Appendix,
    /// Nothing more to read.
    Done,
}

/// Streams a `.mprof` file: the tables (header, modules, stacks, symbols, GC cycles, lost
/// counts) go into [`Reader::profile`] as they are read, the events are handed out one at
/// a time by [`Reader::next_event`]. Memory: one block and the tables, whatever the
/// number of events. See the [module documentation](self) for what is an error and what
/// is a warning.
pub struct Reader<R: Read> {
    input: Counting<BufReader<R>>,
    profile: Profile,
    state: State,
    /// Outer records read, the header included.
    record: u64,
    /// The current block's decompressed records, and the position in them.
    block: Vec<u8>,
    at: usize,
    /// Byte offset of the current block (or of the current version-1 record).
    block_start: u64,
    compressed: Vec<u8>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    delta: Delta,
    pairs: Vec<(StackId, u64)>,
    /// Events read: samples, frees, moves.
    seen: [u64; 3],
    /// Version 1 only: the samples not freed yet, by id (version-1 frees name only the
    /// id; the aggregates need the block).
    v1_live: std::collections::HashMap<u64, Sample, crate::sys::hash::FastHash>,
    end_counts: Option<[u64; 3]>,
    /// The reason of a Stopping record when it is the last record read so far.
    stopping: Option<Stopped>,
}

impl<R: Read> std::fmt::Debug for Reader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("header", &self.profile.header)
            .field("at_byte", &self.input.pos)
            .field("events_read", &self.seen)
            .finish_non_exhaustive()
    }
}

impl<R: Read> Reader<R> {
    /// Reads the magic and the header.
    pub fn new(r: R) -> Result<Self, Error> {
        let mut input = Counting { inner: BufReader::with_capacity(256 << 10, r), pos: 0 };
        let io_err = |e| Error::io("reading profile", e);
        let mut magic = [0u8; 8];
        match input.fill(&mut magic).map_err(io_err)? {
            Got::Eof(0) => return Err(Error::Format("empty file: not a memprof profile".into())),
            Got::Eof(n) if magic.get(..n) == MAGIC.get(..n) => {
                return Err(Error::Format(format!(
                    "profile was cut at byte {n}, inside its magic number"
                )))
            }
            Got::All if &magic == MAGIC => {}
            _ => return Err(Error::Format("not a memprof profile (bad magic)".into())),
        }
        let mut buf = Vec::new();
        let header = match read_raw(&mut input, &mut buf).map_err(io_err)? {
            Raw::Record { tag: TAG_HEADER, payload } => {
                decode_header(&mut Payload { rest: &payload })?
            }
            Raw::Record { tag, .. } => {
                return Err(Error::Format(format!(
                    "profile has no header: its first record has tag {tag}"
                )))
            }
            Raw::End => {
                return Err(Error::Format(
                    "profile has no header (file ends after its magic)".into(),
                ))
            }
            Raw::Cut => {
                return Err(Error::Format(format!(
                    "profile was cut at byte {}, inside its header",
                    input.pos
                )))
            }
            Raw::Bad(m) => return Err(Error::Format(format!("profile header is damaged: {m}"))),
        };
        Ok(Reader {
            input,
            profile: Profile { header, ..Profile::default() },
            state: State::Reading,
            record: 1,
            block: Vec::new(),
            at: 0,
            block_start: 0,
            compressed: Vec::new(),
            zstd: None,
            delta: Delta::default(),
            pairs: Vec::new(),
            seen: [0; 3],
            v1_live: Default::default(),
            end_counts: None,
            stopping: None,
        })
    }

    /// The tables read so far (no events: see [`Profile::read_from`] for the aggregates).
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Stops reading with a warning about the record at `self.block_start`.
    fn stop(&mut self, m: &str) {
        self.profile.warnings.push(format!(
            "record {} at byte {}: {m}; stopped reading there, kept the {} samples before it",
            self.record, self.block_start, self.seen[0]
        ));
        self.state = State::Done;
    }

    /// The next event, or `None` at the end of what can be read (then see
    /// [`Reader::finish`]).
    pub fn next_event(&mut self) -> Option<Event> {
        loop {
            if self.state == State::Done {
                return None;
            }
            if self.at < self.block.len() {
                match self.inner() {
                    Ok(Some(e)) => return Some(e),
                    Ok(None) => continue,
                    Err(m) => {
                        self.stop(&m);
                        return None;
                    }
                }
            }
            match self.outer() {
                Ok(Some(e)) => return Some(e),
                Ok(None) => {}
                Err(e) => {
                    self.profile.warnings.push(format!("reading stopped: {e}"));
                    self.state = State::Done;
                }
            }
        }
    }

    /// Reads the next outer record: a version-1 event is returned, a block is loaded.
    fn outer(&mut self) -> io::Result<Option<Event>> {
        self.block.clear();
        self.at = 0;
        self.block_start = self.input.pos;
        self.record += 1;
        let mut buf = std::mem::take(&mut self.compressed);
        let raw = read_raw(&mut self.input, &mut buf)?;
        match raw {
            Raw::Record { tag, payload } => {
                let mut p = Payload { rest: &payload };
                let r = if self.profile.header.version >= 2 {
                    self.load_block(tag, &mut p).map(|_| None)
                } else {
                    self.apply_v1(tag, &mut p)
                };
                self.compressed = payload;
                match r {
                    Ok(e) => Ok(e),
                    Err(m) => {
                        self.stop(&m);
                        Ok(None)
                    }
                }
            }
            Raw::End | Raw::Cut => {
                self.compressed = buf;
                if self.state == State::Appendix || self.end_counts.is_some() {
                    if matches!(raw, Raw::Cut) {
                        self.profile.warnings.push(format!(
                            "a block appended after the end record was cut at byte {}; \
                             it is ignored",
                            self.input.pos
                        ));
                    }
                    self.state = State::Done;
                    return Ok(None);
                }
                // A clean end right after the program said it was stopping: whole, so no
                // warning (`stopped` says why there is no end record).
                let stopped = if matches!(raw, Raw::End) { self.stopping } else { None };
                self.profile.stopped = stopped;
                if stopped.is_none() {
                    // The collector of `memprof record` ends its files whatever ends the
                    // program: a file of it cut short outlived its writer, not the program.
                    let (at, samples) = (self.input.pos, self.seen[0]);
                    self.profile.warnings.push(if self.profile.header.collected {
                        format!(
                            "profile was cut at byte {at}, after {samples} samples: {}",
                            crate::profile::RECORD_STOPPED
                        )
                    } else {
                        format!(
                            "profile was cut at byte {at} (the program may have crashed); \
                             read {samples} samples"
                        )
                    });
                }
                self.state = State::Done;
                Ok(None)
            }
            Raw::Bad(m) => {
                self.compressed = buf;
                self.stop(&m);
                Ok(None)
            }
        }
    }

    /// Decompresses a version-2 block into `self.block`.
    fn load_block(&mut self, tag: u8, p: &mut Payload<'_>) -> Result<(), String> {
        if tag != TAG_BLOCK {
            self.stopping = None;
            if tag >= ANCILLARY {
                return Ok(());
            }
            return Err(format!("unknown record kind {tag} (written by a newer memprof?)"));
        }
        let codec = p.u()?;
        let raw_len = p.u()?;
        if raw_len > MAX_BLOCK {
            return Err(format!("block of {raw_len} bytes exceeds the limit of {MAX_BLOCK}"));
        }
        if codec != CODEC_ZSTD {
            return Err(format!("unknown compression {codec} (written by a newer memprof?)"));
        }
        let z = match &mut self.zstd {
            Some(z) => z,
            None => self.zstd.insert(
                zstd::bulk::Decompressor::new()
                    .map_err(|e| format!("cannot start the zstd decompressor: {e}"))?,
            ),
        };
        self.block.clear();
        self.block.reserve_exact(raw_len as usize);
        let n = z
            .decompress_to_buffer(p.rest, &mut self.block)
            .map_err(|e| format!("damaged block: {e}"))?;
        if n as u64 != raw_len {
            return Err(format!("block holds {n} bytes, its header says {raw_len}"));
        }
        self.at = 0;
        self.delta = Delta::default();
        Ok(())
    }

    /// The (stack, size) of pair `pair`.
    fn pair_at(&self, pair: u64) -> Result<(StackId, u64), String> {
        usize::try_from(pair)
            .ok()
            .and_then(|i| self.pairs.get(i).copied())
            .ok_or_else(|| format!("an event names pair {pair} which was never defined"))
    }

    /// Decodes the next inner record of the current block.
    fn inner(&mut self) -> Result<Option<Event>, String> {
        let block = std::mem::take(&mut self.block);
        let mut p = Payload { rest: &block[self.at..] };
        let r = self.inner_from(&mut p);
        self.at = block.len() - p.rest.len();
        self.block = block;
        r
    }

    fn inner_from(&mut self, p: &mut Payload<'_>) -> Result<Option<Event>, String> {
        let tag = p.byte()?;
        if self.state == State::Appendix && !matches!(tag, TAG_SYMBOLS | TAG_MODULE) {
            return Err(format!("record kind {tag} after the end record"));
        }
        let unit = self.profile.header.time_unit_ns;
        let time = |p: &mut Payload<'_>, d: &mut Delta| -> Result<u64, String> {
            d.time = d.time.wrapping_add(p.z()? as u64);
            Ok(d.time.saturating_mul(unit))
        };
        match tag {
            EV_SAMPLE => {
                let (stack, size) = self.pair_at(p.u()?)?;
                let time_ns = time(p, &mut self.delta)?;
                let thread = p.u32("thread")?;
                let expected = super::expected_k(self.profile.header.interval, size);
                let k = expected.wrapping_add(p.z()? as u64);
                self.stopping = None;
                self.seen[0] += 1;
                let id = self.seen[0];
                Ok(Some(Event::Sample(Sample { id, stack, time_ns, thread, addr: 0, size, k })))
            }
            EV_FREE | EV_MOVE => {
                let time_ns = time(p, &mut self.delta)?;
                let (stack, size) = self.pair_at(p.u()?)?;
                let age = p.z()?;
                let alloc_ns = self.delta.time.wrapping_sub(age as u64).saturating_mul(unit);
                let life_ns =
                    if tag == EV_FREE && self.profile.header.version >= 4 && fine_life(unit, age) {
                        let life = p.u()?.saturating_mul(LIFETIME_UNIT_NS);
                        // age ≤ 1 and unit ≤ 1 s: no overflow.
                        if life >= (age as u64 + 1) * unit {
                            return Err(format!(
                            "a free's lifetime of {life} ns exceeds its age of {age} time units"
                        ));
                        }
                        Some(life)
                    } else {
                        None
                    };
                let expected = super::expected_k(self.profile.header.interval, size);
                let k = expected.wrapping_add(p.z()? as u64);
                self.stopping = None;
                if tag == EV_FREE {
                    self.seen[1] += 1;
                    let f = Free { id: 0, time_ns, stack, size, k, alloc_ns, life_ns };
                    return Ok(Some(Event::Free(f)));
                }
                let new_size = p.u()?;
                self.seen[2] += 1;
                let m = Move { id: 0, time_ns, new_addr: 0, new_size, stack, size, k, alloc_ns };
                Ok(Some(Event::Move(m)))
            }
            _ => {
                let len = p.u()?;
                if len > MAX_RECORD {
                    return Err(format!("record length {len} exceeds the limit of {MAX_RECORD}"));
                }
                let body = p.take(len)?;
                self.apply(tag, &mut Payload { rest: body })
            }
        }
    }

    /// Applies a table record (both versions). Events are returned.
    fn apply(&mut self, tag: u8, p: &mut Payload<'_>) -> Result<Option<Event>, String> {
        let prof = &mut self.profile;
        // Symbols and modules after a Stopping record (appended by `memprof record`) leave
        // it the last word: they add names, not events.
        if !matches!(tag, TAG_SYMBOLS | TAG_MODULE) {
            self.stopping = None;
        }
        match tag {
            TAG_HEADER => return Err("a second header record".into()),
            TAG_STOPPING => {
                self.stopping = match p.u()? {
                    1 => Some(Stopped::Exec),
                    2 => Some(Stopped::QuickExit),
                    _ => None, // a reason of a newer writer: no claim
                };
            }
            TAG_MODULE => {
                let path = p.str()?;
                let (base, start, end) = (p.u()?, p.u()?, p.u()?);
                // The build id was appended later (§3): absent in older files.
                let build_id = if p.rest.is_empty() {
                    Vec::new()
                } else {
                    let n = p.u()?;
                    if n > MAX_BUILD_ID as u64 {
                        return Err(format!("a build id of {n} bytes exceeds {MAX_BUILD_ID}"));
                    }
                    p.take(n)?.to_vec()
                };
                // As is the file's identity, after it.
                let (file_size, file_mtime_ns) =
                    if p.rest.is_empty() { (0, 0) } else { (p.u()?, p.u()?) };
                let m = Module { path, base, start, end, build_id, file_size, file_mtime_ns };
                prof.modules.push(m);
            }
            TAG_STACK => {
                let id = p.u()?;
                if id != prof.stacks.len() as u64 {
                    return Err(format!(
                        "stack record defines id {id}, expected {}",
                        prof.stacks.len()
                    ));
                }
                if id > u64::from(StackId::MAX) {
                    return Err(format!("stack id {id} does not fit in 32 bits"));
                }
                let truncated = p.u()? & 1 == 1;
                let n = p.count("frames", MAX_FRAMES)?;
                let mut frames = Vec::with_capacity(n);
                let mut prev = 0u64;
                for i in 0..n {
                    let v = p.u()?;
                    let f = if i == 0 { v } else { prev.wrapping_add(unzigzag(v) as u64) };
                    frames.push(f);
                    prev = f;
                }
                // The label was appended in version 3 (§2b): absent when 0.
                let label = if p.rest.is_empty() || prof.header.version < 3 {
                    0
                } else {
                    let l = p.u()?;
                    if l > prof.labels.len() as u64 {
                        return Err(format!("stack {id} names label {l} which was never defined"));
                    }
                    l as u32
                };
                prof.stacks.push(Stack { frames, truncated, label });
            }
            TAG_LABEL if prof.header.version >= 3 => {
                let id = p.u()?;
                if id != prof.labels.len() as u64 + 1 {
                    return Err(format!(
                        "label record defines id {id}, expected {}",
                        prof.labels.len() + 1
                    ));
                }
                if id > u64::from(u32::MAX) {
                    return Err(format!("label id {id} does not fit in 32 bits"));
                }
                let text = p.str()?;
                prof.labels.push(text);
            }
            TAG_SYMBOLS => {
                let addr = p.u()?;
                let n = p.count("inline frames", MAX_LIST)?;
                let mut syms = Vec::with_capacity(n);
                for _ in 0..n {
                    let function = p.str()?;
                    let flags = p.u()?;
                    let file = if flags & 1 != 0 { Some(p.str()?) } else { None };
                    let line = if flags & 2 != 0 { Some(p.u32("line")?) } else { None };
                    syms.push(Symbol { function, file, line });
                }
                prof.symbols.insert(addr, syms);
            }
            TAG_PAIR if prof.header.version >= 2 => {
                let stack = p.u()?;
                if stack >= prof.stacks.len() as u64 {
                    return Err(format!("a pair names stack {stack} which was never defined"));
                }
                let size = p.u()?;
                self.pairs.push((stack as StackId, size));
            }
            TAG_LOST => {
                let (events, untracked, callback_panics) = (p.u()?, p.u()?, p.u()?);
                let (frees_replayed, frees_unknown) =
                    if p.rest.is_empty() { (0, 0) } else { (p.u()?, p.u()?) };
                prof.lost =
                    Lost { events, untracked, callback_panics, frees_replayed, frees_unknown };
            }
            TAG_END => {
                self.end_counts = Some([p.u()?, p.u()?, p.u()?]);
                self.state = State::Appendix;
            }
            TAG_GC_CYCLE => {
                let (cycle, start_ns, end_ns, mark_ns) = (p.u()?, p.u()?, p.u()?, p.u()?);
                let (slices, longest_slice_ns, words_marked) = (p.u()?, p.u()?, p.u()?);
                let ns_per_word = p.f64()?;
                let (sweep_ns, heap_words, live_words) = (p.u()?, p.u()?, p.u()?);
                let c = GcCycle {
                    cycle,
                    start_ns,
                    end_ns,
                    mark_ns,
                    slices,
                    longest_slice_ns,
                    words_marked,
                    ns_per_word,
                    sweep_ns,
                    heap_words,
                    live_words,
                };
                return Ok(Some(Event::GcCycle(c)));
            }
            t if t >= ANCILLARY => {} // unknown ancillary record: skipped
            t => return Err(format!("unknown record kind {t} (written by a newer memprof?)")),
        }
        Ok(None)
    }

    /// A version-1 record: events are returned, the rest applied.
    fn apply_v1(&mut self, tag: u8, p: &mut Payload<'_>) -> Result<Option<Event>, String> {
        let e = match tag {
            TAG_SAMPLE => {
                let id = p.u()?;
                let stack = p.u()?;
                if stack >= self.profile.stacks.len() as u64 {
                    return Err(format!(
                        "sample {} names stack {stack} which was never defined",
                        self.seen[0]
                    ));
                }
                let stack = stack as StackId; // < stacks.len() ≤ StackId::MAX + 1
                let time_ns = p.u()?;
                let thread = p.u32("thread")?;
                let (addr, size, k) = (p.u()?, p.u()?, p.u()?);
                self.seen[0] += 1;
                let s = Sample { id, stack, time_ns, thread, addr, size, k };
                self.v1_live.insert(id, s);
                Event::Sample(s)
            }
            TAG_FREE => {
                self.seen[1] += 1;
                let (id, time_ns) = (p.u()?, p.u()?);
                match self.v1_live.remove(&id) {
                    Some(s) => Event::Free(Free::of(&s, time_ns)),
                    // Names no block: the aggregates count it as an orphan.
                    None => {
                        Event::Free(Free { id, time_ns, stack: StackId::MAX, ..Free::default() })
                    }
                }
            }
            TAG_MOVE => {
                let (id, time_ns, new_addr, new_size) = (p.u()?, p.u()?, p.u()?, p.u()?);
                self.seen[2] += 1;
                match self.v1_live.get(&id) {
                    Some(s) => Event::Move(Move { new_addr, ..Move::of(s, time_ns, new_size) }),
                    None => Event::Move(Move {
                        id,
                        time_ns,
                        new_addr,
                        new_size,
                        stack: StackId::MAX,
                        ..Move::default()
                    }),
                }
            }
            TAG_PAIR | TAG_BLOCK => {
                return Err(format!("unknown record kind {tag} (written by a newer memprof?)"))
            }
            _ => {
                let r = self.apply(tag, p);
                if self.end_counts.is_some() {
                    // Version 1: nothing may follow the end record.
                    self.state = State::Done;
                    let mut rest = Vec::new();
                    let extra = (&mut self.input.inner)
                        .take(MAX_RECORD)
                        .read_to_end(&mut rest)
                        .map_err(|e| format!("reading after the end record: {e}"))?;
                    if extra > 0 {
                        self.profile.warnings.push(format!(
                            "ignored {}{extra} bytes after the end record at byte {}",
                            if extra as u64 == MAX_RECORD { "at least " } else { "" },
                            self.block_start
                        ));
                    }
                }
                return r;
            }
        };
        self.stopping = None;
        Ok(Some(e))
    }

    /// The tables and what the reading found (warnings, completeness). Call after
    /// [`Reader::next_event`] returned `None`.
    pub fn finish(self) -> Profile {
        let mut p = self.profile;
        if let Some(counts) = self.end_counts {
            if counts != self.seen {
                p.warnings.push(format!(
                    "end record counts {} samples, {} frees and {} moves but the stream holds \
                     {} samples, {} frees and {} moves",
                    counts[0], counts[1], counts[2], self.seen[0], self.seen[1], self.seen[2]
                ));
            }
        }
        p.complete = self.end_counts.is_some();
        p
    }
}

impl Reader<std::fs::File> {
    /// Opens a `.mprof` file; errors name it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        if path.is_dir() {
            return Err(Error::Format(format!(
                "{}: is a directory, not a profile",
                path.display()
            )));
        }
        // Never blocks on a FIFO or a device, reads only a regular file (`sys/files.rs`).
        let f = crate::sys::files::open_input_regular(path)
            .map_err(|e| Error::io(path.display().to_string(), e))?;
        Reader::new(f).map_err(|e| naming(path, e))
    }
}

/// `e`, reading the file at `path`, with the file named in its message.
pub(crate) fn naming(path: &Path, e: Error) -> Error {
    match e {
        Error::Format(m) => Error::Format(format!("{}: {m}", path.display())),
        Error::Io(what, e) => Error::io(format!("{}: {what}", path.display()), e),
        other => other,
    }
}

impl Profile {
    /// Reads a `.mprof` stream into its aggregates, in one pass and in memory bounded by the
    /// blocks still live and the tables (see [`Reader`] and [`crate::profile`]).
    pub fn read_from(r: impl Read + Send) -> Result<Profile, Error> {
        Profile::aggregate(Reader::new(r)?)
    }

    /// Reads a `.mprof` file (see [`Profile::read_from`]).
    pub fn read_file(path: impl AsRef<Path>) -> Result<Profile, Error> {
        Profile::aggregate(Reader::open(path)?)
    }

    /// Folds every event of `rd` in. With a second core, one thread decodes (decompression,
    /// varints) and hands batches of events to this one, which folds them in: the two
    /// halves of the work, side by side.
    fn aggregate<R: Read + Send>(mut rd: Reader<R>) -> Result<Profile, Error> {
        const BATCH: usize = 8192;
        let parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
        let mut agg = Profile { header: rd.profile.header.clone(), ..Profile::default() };
        if !parallel {
            while let Some(e) = rd.next_event() {
                agg.add(&e);
            }
        } else {
            let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Vec<Event>>(4);
            let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Vec<Event>>();
            #[cfg(test)]
            let counted = crate::sys::alloc_count::current();
            rd = std::thread::scope(|scope| {
                let decoder = scope.spawn(move || {
                    #[cfg(test)]
                    crate::sys::alloc_count::enter(counted);
                    loop {
                        let mut batch =
                            empty_rx.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH));
                        while batch.len() < BATCH {
                            match rd.next_event() {
                                Some(e) => batch.push(e),
                                None => break,
                            }
                        }
                        let last = batch.len() < BATCH;
                        if full_tx.send(batch).is_err() || last {
                            break;
                        }
                    }
                    rd
                });
                for mut batch in full_rx {
                    for e in &batch {
                        agg.add(e);
                    }
                    batch.clear();
                    let _ = empty_tx.send(batch);
                }
                decoder.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
            });
        }
        let mut p = rd.finish();
        p.take_aggregates(agg);
        p.note_orphans();
        Ok(p)
    }
}

/// Every event of a stream, in order, and its tables: for tests and tools that look at
/// single events (memory: every event).
pub fn read_events(r: impl Read) -> Result<(Profile, Vec<Event>), Error> {
    let mut rd = Reader::new(r)?;
    let mut events = Vec::new();
    while let Some(e) = rd.next_event() {
        events.push(e);
    }
    Ok((rd.finish(), events))
}

#[cfg(test)]
mod tests;
