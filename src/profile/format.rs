//! The `.mprof` stream: versioned, streamed, append-only and readable after a crash.
//!
//! # 1. Layout
//! ```text
//! magic   8 bytes  "MPROF\0\0\x01"
//! record*          tag: u8 · len: LEB128 varint · payload[len] · crc32(tag ‖ payload): u32 LE
//! ```
//! The first record is always the header. Payload fields are LEB128 varints (`u`), IEEE
//! doubles little-endian (`f64`) and strings (`str` = `u` byte length, then UTF-8 bytes).
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
//! Stack ids are dense in order of first write (0, 1, 2, …); a stack is written before the
//! first sample that names it, and a sample before any free or move of its block.
//!
//! # 2. Compatibility
//! - The header's `version` is [`VERSION`]; a reader refuses versions it does not know.
//! - Within one version, a writer may append fields at the end of a known record's payload;
//!   readers ignore trailing payload bytes of the records they know.
//! - Tags with the high bit set (`0x80..=0xFF`) are *ancillary* (PNG's rule): a reader that
//!   does not know one skips it after checking its crc. Future optional records (GC cycle
//!   timings, thread names) use such tags. An unknown tag below `0x80` is *critical*: the
//!   reader cannot interpret the rest of the stream and stops there with a warning.
//!
//! # 3. Writing
//! Every record is encoded into an internal buffer and handed to the sink in a single
//! `write_all`, so a stream only ever ends in a half record when the process dies in the
//! middle of that call. The [`Writer`] refuses to write what the reader would reject
//! (oversized strings, undefined stacks, out-of-order stack ids).
//!
//! # 4. Reading untrusted input
//! The reader never panics and never trusts a length: a record is at most
//! [`MAX_RECORD`] bytes, a string [`MAX_STRING`], a stack [`MAX_FRAMES`] frames, and every
//! count is also bounded by the bytes left in its payload before anything is allocated.
//! - An empty file, a bad magic, a missing or damaged header or an unsupported version is an
//!   error: there is nothing to report.
//! - After the header the reader is lenient and keeps every complete record before a problem:
//!   a stream cut at any byte (a crash, a full disk) or ending without its end record yields
//!   `complete = false` and a warning naming the byte where it stops. A stream whose last
//!   record is a Stopping record and which ends right after it is whole: `complete =
//!   false`, no warning, and `stopped` says why (`exec`, `_exit`). A damaged record (crc
//!   mismatch, oversized length, undecodable payload, a sample naming an undefined stack, an
//!   unknown critical tag) stops the reading there the same way, with a warning naming the
//!   record and its byte offset. Records are numbered from 1 (the header).
//! - A free or move of a sample id that was never recorded is dropped and counted in one
//!   warning; bytes after the end record are ignored with a warning.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use super::{
    Free, GcCycle, Header, Lost, Module, Move, Profile, Sample, Stack, StackId, Stopped, Symbol,
};
use crate::Error;

/// The first eight bytes of every `.mprof` stream.
pub const MAGIC: &[u8; 8] = b"MPROF\0\0\x01";
/// The format version this module writes and the newest it reads.
pub const VERSION: u32 = 1;
/// Largest record payload accepted, in bytes.
pub const MAX_RECORD: u64 = 64 << 20;
/// Longest string accepted, in bytes.
pub const MAX_STRING: u64 = 1 << 20;
/// Longest build id accepted (GNU build ids are 16 or 20 bytes).
pub const MAX_BUILD_ID: usize = 64;
/// Most frames accepted in one stack.
pub const MAX_FRAMES: u64 = 65536;
/// Most inline symbols accepted at one address, and most command-line arguments.
pub const MAX_LIST: u64 = 65536;

const TAG_HEADER: u8 = 1;
const TAG_MODULE: u8 = 2;
const TAG_STACK: u8 = 3;
const TAG_SYMBOLS: u8 = 4;
const TAG_SAMPLE: u8 = 5;
const TAG_FREE: u8 = 6;
const TAG_MOVE: u8 = 7;
const TAG_LOST: u8 = 8;
const TAG_END: u8 = 9;
/// Tags at or above this are ancillary: skipped when unknown.
const ANCILLARY: u8 = 0x80;
const TAG_GC_CYCLE: u8 = ANCILLARY;
const TAG_STOPPING: u8 = ANCILLARY + 1;

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

/// Streams a profile as `.mprof` records. See the [module documentation](self).
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    payload: Vec<u8>,
    record: Vec<u8>,
    stacks: u64,
    samples: u64,
    frees: u64,
    moves: u64,
    /// Set when a write failed part-way: the stream may end in a half record, so nothing
    /// more may be appended after it (the reader then sees a cut, not a damaged record).
    failed: bool,
}

impl<W: Write> Writer<W> {
    /// Writes the magic and the header (with `version` set to [`VERSION`]).
    pub fn new(out: W, header: &Header) -> Result<Self, Error> {
        let mut w = Writer {
            out,
            payload: Vec::with_capacity(256),
            record: Vec::with_capacity(256),
            stacks: 0,
            samples: 0,
            frees: 0,
            moves: 0,
            failed: false,
        };
        if !(header.interval.is_finite() && header.interval >= 1.0) {
            return Err(Error::Format(format!(
                "invalid sampling interval {} (must be at least 1 byte)",
                header.interval
            )));
        }
        w.out.write_all(MAGIC).map_err(|e| Error::io("writing profile magic", e))?;
        let p = &mut w.payload;
        p.clear();
        put_u(p, u64::from(VERSION));
        put_f64(p, header.interval);
        put_u(p, u64::from(header.depth));
        put_u(p, u64::from(header.pid));
        put_str(p, &header.executable)?;
        if header.cmdline.len() as u64 > MAX_LIST {
            return Err(Error::Format(format!(
                "command line of {} arguments is longer than the format allows",
                header.cmdline.len()
            )));
        }
        put_u(p, header.cmdline.len() as u64);
        for arg in &header.cmdline {
            put_str(p, arg)?;
        }
        put_u(p, header.start_unix_ns);
        w.emit(TAG_HEADER)?;
        Ok(w)
    }

    /// Frames the payload buffer as a record and writes it in one call.
    fn emit(&mut self, tag: u8) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Format(
                "an earlier write of this profile failed; the stream was left as it is".into(),
            ));
        }
        if self.payload.len() as u64 > MAX_RECORD {
            return Err(Error::Format(format!(
                "record of {} bytes is longer than the format allows ({MAX_RECORD})",
                self.payload.len()
            )));
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&[tag]);
        crc.update(&self.payload);
        let r = &mut self.record;
        r.clear();
        r.push(tag);
        put_u(r, self.payload.len() as u64);
        r.extend_from_slice(&self.payload);
        r.extend_from_slice(&crc.finalize().to_le_bytes());
        self.out.write_all(&self.record).map_err(|e| {
            self.failed = true;
            Error::io("writing profile record", e)
        })
    }

    /// Writes a loaded module.
    pub fn write_module(&mut self, m: &Module) -> Result<(), Error> {
        let p = &mut self.payload;
        p.clear();
        put_str(p, &m.path)?;
        put_u(p, m.base);
        put_u(p, m.start);
        put_u(p, m.end);
        // Appended field (§2): the build id, its length first (0: none).
        if m.build_id.len() > MAX_BUILD_ID {
            return Err(Error::Format(format!(
                "a build id of {} bytes is longer than the format allows ({MAX_BUILD_ID})",
                m.build_id.len()
            )));
        }
        put_u(p, m.build_id.len() as u64);
        p.extend_from_slice(&m.build_id);
        // Appended later still: the file's identity where there is no build id.
        put_u(p, m.file_size);
        put_u(p, m.file_mtime_ns);
        self.emit(TAG_MODULE)
    }

    /// Writes stack `id`, which must be the next id (stacks are numbered 0, 1, 2… in order
    /// of first write).
    pub fn write_stack(&mut self, id: StackId, stack: &Stack) -> Result<(), Error> {
        if u64::from(id) != self.stacks {
            return Err(Error::Format(format!(
                "stack {id} written out of order: the next stack id is {}",
                self.stacks
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
                put_u(p, zigzag(f.wrapping_sub(prev) as i64));
            }
            prev = f;
        }
        self.emit(TAG_STACK)?;
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
        self.emit(TAG_SYMBOLS)
    }

    /// Writes an alloc sample; its stack must have been written.
    pub fn write_sample(&mut self, s: &Sample) -> Result<(), Error> {
        if u64::from(s.stack) >= self.stacks {
            return Err(Error::Format(format!(
                "sample {} names stack {} which was never written",
                s.id, s.stack
            )));
        }
        let p = &mut self.payload;
        p.clear();
        for v in [s.id, u64::from(s.stack), s.time_ns, u64::from(s.thread), s.addr, s.size, s.k] {
            put_u(p, v);
        }
        self.emit(TAG_SAMPLE)?;
        self.samples += 1;
        Ok(())
    }

    /// Writes the free of a sampled block.
    pub fn write_free(&mut self, f: &Free) -> Result<(), Error> {
        let p = &mut self.payload;
        p.clear();
        put_u(p, f.id);
        put_u(p, f.time_ns);
        self.emit(TAG_FREE)?;
        self.frees += 1;
        Ok(())
    }

    /// Writes the move (reallocation) of a sampled block.
    pub fn write_move(&mut self, m: &Move) -> Result<(), Error> {
        let p = &mut self.payload;
        p.clear();
        for v in [m.id, m.time_ns, m.new_addr, m.new_size] {
            put_u(p, v);
        }
        self.emit(TAG_MOVE)?;
        self.moves += 1;
        Ok(())
    }

    /// Writes one garbage-collection cycle (an ancillary record: older readers skip it).
    pub fn write_gc_cycle(&mut self, c: &GcCycle) -> Result<(), Error> {
        let p = &mut self.payload;
        p.clear();
        for v in [c.cycle, c.start_ns, c.end_ns, c.mark_ns, c.slices, c.longest_slice_ns] {
            put_u(p, v);
        }
        put_u(p, c.words_marked);
        p.extend_from_slice(&c.ns_per_word.to_le_bytes());
        for v in [c.sweep_ns, c.heap_words, c.live_words] {
            put_u(p, v);
        }
        self.emit(TAG_GC_CYCLE)
    }

    /// Writes why the stream is about to end without its end record (an ancillary record).
    pub fn write_stopping(&mut self, why: Stopped) -> Result<(), Error> {
        let p = &mut self.payload;
        p.clear();
        put_u(
            p,
            match why {
                Stopped::Exec => 1,
                Stopped::QuickExit => 2,
            },
        );
        self.emit(TAG_STOPPING)
    }

    /// Writes the cumulative lost-event counters (the last such record wins).
    pub fn write_lost(&mut self, l: &Lost) -> Result<(), Error> {
        let p = &mut self.payload;
        p.clear();
        for v in [l.events, l.untracked, l.callback_panics] {
            put_u(p, v);
        }
        self.emit(TAG_LOST)
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.out.flush().map_err(|e| Error::io("flushing profile", e))
    }

    /// Writes the end record, flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, Error> {
        let p = &mut self.payload;
        p.clear();
        for v in [self.samples, self.frees, self.moves] {
            put_u(p, v);
        }
        self.emit(TAG_END)?;
        self.flush()?;
        Ok(self.out)
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }
}

/// Writes a whole profile: header, modules, stacks, symbols (by address), samples, frees and
/// moves in time order (a free or move never before its sample), lost counts, end.
pub fn write_profile<W: Write>(out: W, profile: &Profile) -> Result<W, Error> {
    let mut w = Writer::new(out, &profile.header)?;
    for m in &profile.modules {
        w.write_module(m)?;
    }
    for (id, s) in profile.stacks.iter().enumerate() {
        let id = StackId::try_from(id)
            .map_err(|_| Error::Format("more stacks than a stack id can name".into()))?;
        w.write_stack(id, s)?;
    }
    let mut addrs: Vec<&u64> = profile.symbols.keys().collect();
    addrs.sort_unstable();
    for addr in addrs {
        w.write_symbols(*addr, &profile.symbols[addr])?;
    }

    // Events in time order. Frees and moves are placed no earlier than their sample, so the
    // stream never names a sample before defining it.
    let sample_time: HashMap<u64, u64> =
        profile.samples.iter().map(|s| (s.id, s.time_ns)).collect();
    let after_sample = |id: u64, t: u64| sample_time.get(&id).map_or(t, |&st| st.max(t));
    let mut events: Vec<(u64, u8, usize)> =
        Vec::with_capacity(profile.samples.len() + profile.frees.len() + profile.moves.len());
    events.extend(profile.samples.iter().enumerate().map(|(i, s)| (s.time_ns, 0, i)));
    events.extend(
        profile.moves.iter().enumerate().map(|(i, m)| (after_sample(m.id, m.time_ns), 1, i)),
    );
    events.extend(
        profile.frees.iter().enumerate().map(|(i, f)| (after_sample(f.id, f.time_ns), 2, i)),
    );
    events.extend(profile.gc_cycles.iter().enumerate().map(|(i, c)| (c.end_ns, 3, i)));
    events.sort_unstable();
    for (_, kind, i) in events {
        match kind {
            0 => w.write_sample(&profile.samples[i])?,
            1 => w.write_move(&profile.moves[i])?,
            2 => w.write_free(&profile.frees[i])?,
            _ => w.write_gc_cycle(&profile.gc_cycles[i])?,
        }
    }
    if profile.lost != Lost::default() {
        w.write_lost(&profile.lost)?;
    }
    w.finish()
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// A cursor over one record's payload. Every read is bounds-checked.
struct Payload<'a> {
    rest: &'a [u8],
}

impl<'a> Payload<'a> {
    fn byte(&mut self) -> Result<u8, String> {
        let (&b, rest) = self.rest.split_first().ok_or("payload ends too early")?;
        self.rest = rest;
        Ok(b)
    }

    fn u(&mut self) -> Result<u64, String> {
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

fn read_raw<R: Read>(r: &mut Counting<R>) -> io::Result<Raw> {
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
    let mut payload = Vec::new();
    let got = (&mut r.inner).take(len).read_to_end(&mut payload)?;
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
    h.update(&payload);
    if h.finalize() != u32::from_le_bytes(crc) {
        return Ok(Raw::Bad("crc mismatch".into()));
    }
    Ok(Raw::Record { tag, payload })
}

fn decode_header(p: &mut Payload<'_>) -> Result<Header, Error> {
    let bad = |m: String| Error::Format(format!("profile header is damaged: {m}"));
    let version = p.u32("version").map_err(bad)?;
    if version == 0 || version > VERSION {
        return Err(Error::Format(format!(
            "unsupported version {version} (this memprof reads versions 1 to {VERSION})"
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
    Ok(Header { version, interval, depth, pid, executable, cmdline, start_unix_ns })
}

/// Reading state after the header.
struct Reader {
    profile: Profile,
    sample_ids: std::collections::HashSet<u64>,
    orphans: u64,
    end_counts: Option<[u64; 3]>,
    /// The reason of a Stopping record when it is the last record read so far.
    stopping: Option<Stopped>,
}

impl Reader {
    /// Applies one known record. `Err` means the record is damaged.
    fn apply(&mut self, tag: u8, p: &mut Payload<'_>) -> Result<(), String> {
        let prof = &mut self.profile;
        self.stopping = None;
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
                // The build id was appended later (§2): absent in older files.
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
                prof.modules.push(Module {
                    path,
                    base,
                    start,
                    end,
                    build_id,
                    file_size,
                    file_mtime_ns,
                });
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
                prof.stacks.push(Stack { frames, truncated });
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
            TAG_SAMPLE => {
                let id = p.u()?;
                let stack = p.u()?;
                let index = prof.samples.len();
                if stack >= prof.stacks.len() as u64 {
                    return Err(format!(
                        "sample {index} names stack {stack} which was never defined"
                    ));
                }
                let stack = stack as StackId; // < stacks.len() ≤ StackId::MAX + 1
                let time_ns = p.u()?;
                let thread = p.u32("thread")?;
                let (addr, size, k) = (p.u()?, p.u()?, p.u()?);
                prof.samples.push(Sample { id, stack, time_ns, thread, addr, size, k });
                self.sample_ids.insert(id);
            }
            TAG_FREE => {
                let (id, time_ns) = (p.u()?, p.u()?);
                if self.sample_ids.contains(&id) {
                    prof.frees.push(Free { id, time_ns });
                } else {
                    self.orphans += 1;
                }
            }
            TAG_MOVE => {
                let (id, time_ns, new_addr, new_size) = (p.u()?, p.u()?, p.u()?, p.u()?);
                if self.sample_ids.contains(&id) {
                    prof.moves.push(Move { id, time_ns, new_addr, new_size });
                } else {
                    self.orphans += 1;
                }
            }
            TAG_LOST => {
                prof.lost = Lost { events: p.u()?, untracked: p.u()?, callback_panics: p.u()? };
            }
            TAG_END => self.end_counts = Some([p.u()?, p.u()?, p.u()?]),
            TAG_GC_CYCLE => {
                let (cycle, start_ns, end_ns, mark_ns) = (p.u()?, p.u()?, p.u()?, p.u()?);
                let (slices, longest_slice_ns, words_marked) = (p.u()?, p.u()?, p.u()?);
                let ns_per_word = p.f64()?;
                let (sweep_ns, heap_words, live_words) = (p.u()?, p.u()?, p.u()?);
                prof.gc_cycles.push(GcCycle {
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
                });
            }
            t if t >= ANCILLARY => {} // unknown ancillary record: skipped
            t => return Err(format!("unknown record kind {t} (written by a newer memprof?)")),
        }
        Ok(())
    }
}

impl Profile {
    /// Reads a `.mprof` stream. See the [format module](crate::profile::format) for what is an error
    /// and what is a warning.
    pub fn read_from(r: impl Read) -> Result<Profile, Error> {
        let mut r = Counting { inner: BufReader::new(r), pos: 0 };
        let io_err = |e| Error::io("reading profile", e);

        let mut magic = [0u8; 8];
        match r.fill(&mut magic).map_err(io_err)? {
            Got::Eof(0) => return Err(Error::Format("empty file: not a memprof profile".into())),
            Got::Eof(n) if magic.get(..n) == MAGIC.get(..n) => {
                return Err(Error::Format(format!(
                    "profile was cut at byte {n}, inside its magic number"
                )))
            }
            Got::All if &magic == MAGIC => {}
            _ => return Err(Error::Format("not a memprof profile (bad magic)".into())),
        }

        let header = match read_raw(&mut r).map_err(io_err)? {
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
                    r.pos
                )))
            }
            Raw::Bad(m) => return Err(Error::Format(format!("profile header is damaged: {m}"))),
        };

        let mut rd = Reader {
            profile: Profile { header, ..Profile::default() },
            sample_ids: Default::default(),
            orphans: 0,
            end_counts: None,
            stopping: None,
        };
        let mut record = 1u64; // the header
        loop {
            let start = r.pos;
            record += 1;
            let raw = read_raw(&mut r).map_err(io_err)?;
            let samples = rd.profile.samples.len();
            match raw {
                Raw::Record { tag, payload } => {
                    if let Err(m) = rd.apply(tag, &mut Payload { rest: &payload }) {
                        rd.profile.warnings.push(format!(
                            "record {record} at byte {start}: {m}; stopped reading there, \
                             kept the {samples} samples before it"
                        ));
                        break;
                    }
                    if rd.end_counts.is_some() {
                        let mut rest = Vec::new();
                        let extra = (&mut r.inner).take(MAX_RECORD).read_to_end(&mut rest);
                        let extra = extra.map_err(io_err)?;
                        if extra > 0 {
                            rd.profile.warnings.push(format!(
                                "ignored {}{extra} bytes after the end record at byte {start}",
                                if extra as u64 == MAX_RECORD { "at least " } else { "" }
                            ));
                        }
                        break;
                    }
                }
                Raw::End | Raw::Cut => {
                    // A clean end right after the program said it was stopping: whole, so
                    // no warning (`stopped` says why there is no end record).
                    let stopped = if matches!(raw, Raw::End) { rd.stopping } else { None };
                    rd.profile.stopped = stopped;
                    if stopped.is_none() {
                        rd.profile.warnings.push(format!(
                            "profile was cut at byte {} (the program may have crashed); \
                             read {samples} samples",
                            r.pos
                        ));
                    }
                    break;
                }
                Raw::Bad(m) => {
                    rd.profile.warnings.push(format!(
                        "record {record} at byte {start}: {m}; stopped reading there, \
                         kept the {samples} samples before it"
                    ));
                    break;
                }
            }
        }

        let mut p = rd.profile;
        if rd.orphans > 0 {
            p.warnings.push(format!(
                "ignored {} frees or moves of samples that were never recorded",
                rd.orphans
            ));
        }
        if let Some(counts) = rd.end_counts {
            // The end record counts what the writer wrote, orphans included.
            let seen = [p.samples.len() as u64, p.frees.len() as u64, p.moves.len() as u64];
            let seen_events = seen[1] + seen[2] + rd.orphans;
            if counts[0] != seen[0] || counts[1] + counts[2] != seen_events {
                p.warnings.push(format!(
                    "end record counts {} samples, {} frees and {} moves but the stream holds \
                     {} samples, {} frees and {} moves",
                    counts[0], counts[1], counts[2], seen[0], seen[1], seen[2]
                ));
            }
        }
        p.complete = rd.end_counts.is_some();
        Ok(p)
    }

    /// Reads a `.mprof` file.
    pub fn read_file(path: impl AsRef<Path>) -> Result<Profile, Error> {
        let path = path.as_ref();
        let named = |m: String| Error::Format(format!("{}: {m}", path.display()));
        if path.is_dir() {
            return Err(named("is a directory, not a profile".into()));
        }
        let f = std::fs::File::open(path).map_err(|e| Error::io(path.display().to_string(), e))?;
        Profile::read_from(f).map_err(|e| match e {
            Error::Format(m) => named(m),
            Error::Io(what, e) => Error::io(format!("{}: {what}", path.display()), e),
            other => other,
        })
    }

    /// Writes this profile as a `.mprof` stream (see [`write_profile`]).
    pub fn write_to<W: Write>(&self, out: W) -> Result<W, Error> {
        write_profile(out, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rich() -> Profile {
        let mut p = Profile {
            header: Header {
                version: VERSION,
                interval: 4096.5,
                depth: 64,
                pid: 4242,
                executable: "/usr/bin/ünïcode prog".into(),
                cmdline: vec!["prog".into(), "--flag".into(), String::new()],
                start_unix_ns: 1_700_000_000_123_456_789,
            },
            ..Profile::default()
        };
        p.modules.push(Module {
            path: "/bin/prog".into(),
            base: 0x5555_0000,
            start: 0x5555_1000,
            end: 0x5556_0000,
            build_id: (0u8..20).collect(),
            ..Default::default()
        });
        p.modules.push(Module {
            path: "/lib/libc.so.6".into(),
            base: 0x7f00_0000_0000,
            start: 0x7f00_0000_0000,
            end: 0x7f00_0020_0000,
            file_size: 1_922_136,
            file_mtime_ns: 1_700_000_000_123_456_789,
            ..Default::default()
        });
        p.stacks.push(Stack {
            frames: vec![0x5555_1234, 0x5555_1100, 0x7f00_0000_1000, u64::MAX, 0],
            truncated: false,
        });
        p.stacks.push(Stack { frames: vec![], truncated: true });
        p.stacks.push(Stack { frames: vec![0x5555_2000; 3], truncated: true });
        p.symbols.insert(
            0x5555_1234,
            vec![
                Symbol { function: "inner".into(), file: Some("src/a.rs".into()), line: Some(12) },
                Symbol { function: "outer".into(), file: None, line: Some(u32::MAX) },
            ],
        );
        p.symbols.insert(
            0x5555_1100,
            vec![Symbol { function: "main".into(), file: Some("m.rs".into()), line: None }],
        );
        p.symbols.insert(0x1, vec![]);
        for i in 0..20u64 {
            p.samples.push(Sample {
                id: i * 3,
                stack: (i % 3) as u32,
                time_ns: i * 100,
                thread: (i % 4) as u32 + 1,
                addr: 0x1000 + i * 64,
                size: 10 + i,
                k: 1 + i % 2,
            });
        }
        p.frees.push(Free { id: 3, time_ns: 150 });
        p.frees.push(Free { id: 9, time_ns: 1000 });
        p.moves.push(Move { id: 0, time_ns: 50, new_addr: 0x9999, new_size: 77 });
        p.lost = Lost { events: 1, untracked: 2, callback_panics: u64::MAX };
        p.gc_cycles.push(GcCycle {
            cycle: 1,
            start_ns: 50,
            end_ns: 900,
            mark_ns: 600,
            slices: 3,
            longest_slice_ns: 250,
            words_marked: 1200,
            ns_per_word: 0.5,
            sweep_ns: 150,
            heap_words: 4096,
            live_words: 1200,
        });
        p.complete = true;
        p
    }

    fn encode(p: &Profile) -> Vec<u8> {
        write_profile(Vec::new(), p).unwrap()
    }

    fn assert_same(a: &Profile, b: &Profile) {
        assert_eq!(a.header, b.header);
        assert_eq!(a.modules, b.modules);
        assert_eq!(a.stacks, b.stacks);
        assert_eq!(a.symbols, b.symbols);
        assert_eq!(a.samples, b.samples);
        assert_eq!(a.frees, b.frees);
        assert_eq!(a.moves, b.moves);
        assert_eq!(a.lost, b.lost);
        assert_eq!(a.gc_cycles, b.gc_cycles);
    }

    #[test]
    fn round_trip() {
        let p = rich();
        let bytes = encode(&p);
        assert_eq!(&bytes[..8], MAGIC);
        let q = Profile::read_from(&bytes[..]).unwrap();
        assert_same(&p, &q);
        assert!(q.complete, "{:?}", q.warnings);
        assert!(q.warnings.is_empty());
        // Deterministic: the same profile encodes to the same bytes.
        assert_eq!(bytes, encode(&q));
    }

    #[test]
    fn varints_and_zigzag() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put_u(&mut b, v);
            assert!(b.len() <= 10);
            assert_eq!(Payload { rest: &b }.u().unwrap(), v);
        }
        for v in [0i64, 1, -1, i64::MIN, i64::MAX, -12345] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        // An 11-byte varint and a 10th byte with high bits are rejected.
        assert!(Payload { rest: &[0xff; 11] }.u().is_err());
        let mut over = vec![0xffu8; 9];
        over.push(0x02);
        assert!(Payload { rest: &over }.u().is_err());
    }

    #[test]
    fn events_written_in_time_order_and_never_before_their_sample() {
        let mut p = rich();
        // A free stamped before its own sample (clock skew between threads).
        p.frees.push(Free { id: 57, time_ns: 0 });
        let q = Profile::read_from(&encode(&p)[..]).unwrap();
        assert!(q.complete, "{:?}", q.warnings);
        assert_eq!(q.frees.len(), 3);
        assert!(q.frees.iter().any(|f| f.id == 57));
    }

    #[test]
    fn streaming_writer_matches_and_checks_ids() {
        let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
        let s = Stack { frames: vec![1, 2, 3], truncated: false };
        assert!(w.write_stack(1, &s).is_err());
        w.write_stack(0, &s).unwrap();
        let bad = Sample { id: 1, stack: 1, time_ns: 0, thread: 1, addr: 0, size: 1, k: 1 };
        assert!(w.write_sample(&bad).is_err());
        w.write_sample(&Sample { stack: 0, ..bad }).unwrap();
        w.flush().unwrap();
        let partial = w.get_ref().clone();
        let bytes = w.finish().unwrap();
        let p = Profile::read_from(&bytes[..]).unwrap();
        assert!(p.complete);
        assert_eq!(p.samples.len(), 1);
        // Before finish() the stream is readable, just incomplete.
        let q = Profile::read_from(&partial[..]).unwrap();
        assert!(!q.complete);
        assert_eq!(q.samples.len(), 1);
        assert!(q.warnings[0].contains("may have crashed"), "{:?}", q.warnings);
    }

    /// A stream whose last record says the program is stopping (exec, _exit) reads as
    /// whole; the same record followed by more (an exec that failed) claims nothing, and
    /// neither does one cut inside the next record.
    #[test]
    fn stopping_record_tells_an_exec_from_a_crash() {
        let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
        w.write_stack(0, &Stack { frames: vec![1, 2], truncated: false }).unwrap();
        let s = Sample { id: 1, stack: 0, time_ns: 0, thread: 1, addr: 16, size: 8, k: 8 };
        w.write_sample(&s).unwrap();
        w.write_stopping(Stopped::Exec).unwrap();
        w.flush().unwrap();
        let stopped = w.get_ref().clone();
        let p = Profile::read_from(&stopped[..]).unwrap();
        assert!(!p.complete);
        assert_eq!(p.stopped, Some(Stopped::Exec));
        assert_eq!(p.samples.len(), 1);
        assert!(p.warnings.is_empty(), "nothing was lost: {:?}", p.warnings);

        // The exec failed and the program went on, then died.
        w.write_sample(&Sample { id: 2, ..s }).unwrap();
        w.flush().unwrap();
        let went_on = w.get_ref().clone();
        let q = Profile::read_from(&went_on[..]).unwrap();
        assert_eq!((q.stopped, q.samples.len()), (None, 2));
        assert!(q.warnings[0].contains("may have crashed"), "{:?}", q.warnings);
        // Cut inside the record after the marker.
        let r = Profile::read_from(&went_on[..went_on.len() - 2]).unwrap();
        assert_eq!((r.stopped, r.samples.len()), (None, 1));
        assert!(r.warnings[0].contains("may have crashed"), "{:?}", r.warnings);

        let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
        w.write_stopping(Stopped::QuickExit).unwrap();
        w.flush().unwrap();
        let p = Profile::read_from(&w.get_ref()[..]).unwrap();
        assert_eq!(p.stopped, Some(Stopped::QuickExit));
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    /// A sink that accepts `room` bytes, then fails (a full disk).
    struct Full {
        data: Vec<u8>,
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.data.len() >= self.room {
                return Err(io::Error::other("disk full"));
            }
            let n = buf.len().min(self.room - self.data.len());
            self.data.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_ends_the_stream() {
        let mut w = Writer::new(Full { data: Vec::new(), room: 60 }, &Header::default()).unwrap();
        let s = Stack { frames: (0..50).collect(), truncated: false };
        assert!(w.write_stack(0, &s).is_err());
        // Later records would follow a half record: refused, and the stream stays a clean cut.
        let e = w.write_lost(&Lost::default()).unwrap_err();
        assert!(e.to_string().contains("earlier write"), "{e}");
        let q = Profile::read_from(&w.get_ref().data[..]).unwrap();
        assert!(!q.complete);
        assert!(q.warnings[0].contains("cut at byte 60"), "{:?}", q.warnings);
    }

    #[test]
    fn invalid_interval_is_refused() {
        for interval in [0.0, 0.5, f64::NAN, f64::INFINITY] {
            let h = Header { interval, ..Header::default() };
            assert!(Writer::new(Vec::new(), &h).is_err());
        }
    }

    #[test]
    fn truncation_at_every_byte() {
        let mut p = rich();
        p.symbols.clear();
        let bytes = encode(&p);
        // Where the header ends: the first cut that reads at all.
        let mut header_end = None;
        let mut last_samples = 0;
        for cut in 0..bytes.len() {
            match Profile::read_from(&bytes[..cut]) {
                Err(e) => {
                    assert!(header_end.is_none(), "cut at {cut} failed after the header: {e}");
                    let m = e.to_string();
                    assert!(
                        m.contains("cut") || m.contains("empty") || m.contains("no header"),
                        "{m}"
                    );
                }
                Ok(q) => {
                    header_end.get_or_insert(cut);
                    assert!(!q.complete);
                    assert!(
                        q.warnings.iter().any(|w| w.contains(&format!("cut at byte {cut}"))),
                        "{:?}",
                        q.warnings
                    );
                    assert!(q.samples.len() >= last_samples, "sample count must grow with the cut");
                    last_samples = q.samples.len();
                    assert_eq!(q.samples[..], p.samples[..q.samples.len()]);
                    assert_eq!(q.header, p.header);
                }
            }
        }
        assert!(header_end.is_some());
        assert_eq!(last_samples, p.samples.len());
        let full = Profile::read_from(&bytes[..]).unwrap();
        assert!(full.complete);
    }

    #[test]
    fn random_byte_flips_never_panic() {
        use rand::{Rng, SeedableRng};
        let bytes = encode(&rich());
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x006d_7072_6f66);
        let mut detected = 0;
        for _ in 0..3000 {
            let mut b = bytes.clone();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..b.len());
                b[i] ^= 1 << rng.random_range(0..8);
            }
            if rng.random_bool(0.2) {
                b.truncate(rng.random_range(0..b.len()));
            }
            match Profile::read_from(&b[..]) {
                Ok(q) if q.complete => {}
                _ => detected += 1,
            }
        }
        assert!(detected > 2900, "crc should catch nearly every flip: {detected}");
    }

    #[test]
    fn bad_inputs_are_clear_errors() {
        let msg = |b: &[u8]| Profile::read_from(b).unwrap_err().to_string();
        assert!(msg(b"").contains("empty"));
        assert!(msg(b"GIF89a\0\0\0\0\0").contains("bad magic"));
        assert!(msg(b"MPROF").contains("cut at byte 5"));
        assert!(msg(MAGIC).contains("no header"));

        let mut bytes = MAGIC.to_vec();
        let mut w = Writer {
            out: Vec::new(),
            payload: Vec::new(),
            record: Vec::new(),
            stacks: 0,
            samples: 0,
            frees: 0,
            moves: 0,
            failed: false,
        };
        put_u(&mut w.payload, 7);
        put_f64(&mut w.payload, 1.0);
        w.emit(TAG_HEADER).unwrap();
        bytes.extend_from_slice(&w.out);
        assert!(msg(&bytes).contains("unsupported version 7"), "{}", msg(&bytes));

        // A first record that is not a header.
        let mut w = Writer { out: MAGIC.to_vec(), ..w };
        w.out.truncate(8);
        w.payload.clear();
        put_u(&mut w.payload, 1);
        put_u(&mut w.payload, 1);
        w.emit(TAG_FREE).unwrap();
        assert!(msg(&w.out).contains("no header"));
    }

    #[test]
    fn corrupt_record_in_the_middle_keeps_what_came_before() {
        let p = rich();
        let mut bytes = encode(&p);
        // Walk the records to find the 6th sample record.
        let mut at = MAGIC.len();
        let mut seen = 0;
        loop {
            let mut c = Counting { inner: &bytes[at..], pos: 0 };
            let Ok(Raw::Record { tag, .. }) = read_raw(&mut c) else { panic!("walk failed") };
            if tag == TAG_SAMPLE {
                if seen == 5 {
                    break;
                }
                seen += 1;
            }
            at += c.pos as usize;
        }
        bytes[at + 3] ^= 0x40;
        let q = Profile::read_from(&bytes[..]).unwrap();
        assert!(!q.complete);
        assert_eq!(q.samples.len(), 5);
        assert!(q.warnings[0].contains(&format!("at byte {at}: crc mismatch")), "{:?}", q.warnings);
    }

    #[test]
    fn undefined_stack_unknown_tags_and_orphans() {
        let mut w = Writer::new(Vec::new(), &Header::default()).unwrap();
        w.write_stack(0, &Stack { frames: vec![1], truncated: false }).unwrap();
        let s = Sample { id: 1, stack: 0, time_ns: 0, thread: 1, addr: 0, size: 8, k: 1 };
        w.write_sample(&s).unwrap();
        // An unknown ancillary record is skipped, trailing payload bytes are ignored.
        w.payload = vec![1, 2, 3];
        w.emit(0xC1).unwrap();
        w.payload.clear();
        put_u(&mut w.payload, 1);
        put_u(&mut w.payload, 5);
        w.payload.extend_from_slice(b"future fields");
        w.emit(TAG_FREE).unwrap();
        w.write_free(&Free { id: 99, time_ns: 6 }).unwrap();
        let good = w.get_ref().clone();
        let bytes = w.finish().unwrap();
        let p = Profile::read_from(&bytes[..]).unwrap();
        assert_eq!(p.frees, vec![Free { id: 1, time_ns: 5 }]);
        assert!(p.warnings.iter().any(|m| m.contains("1 frees or moves")), "{:?}", p.warnings);

        // A sample naming an undefined stack, and an unknown critical tag, stop the reading.
        let mut w = Writer {
            out: good.clone(),
            payload: Vec::new(),
            record: Vec::new(),
            stacks: 10,
            samples: 0,
            frees: 0,
            moves: 0,
            failed: false,
        };
        w.write_sample(&Sample { stack: 9, ..s }).unwrap();
        let p = Profile::read_from(&w.out[..]).unwrap();
        assert!(
            p.warnings[0].contains("sample 1 names stack 9 which was never defined"),
            "{:?}",
            p.warnings
        );
        assert_eq!(p.samples.len(), 1);

        let mut w = Writer { out: good, ..w };
        w.payload.clear();
        w.emit(0x33).unwrap();
        let p = Profile::read_from(&w.out[..]).unwrap();
        assert!(p.warnings[0].contains("unknown record kind 51"), "{:?}", p.warnings);
    }
}
