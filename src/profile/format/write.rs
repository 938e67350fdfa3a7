//! The `.mprof` writer: a profile's tables and events, streamed as blocks.
//!
//! # 1. What it writes
//! The layout of [the format](super) §1, version [`VERSION`]: the magic and the header,
//! then blocks of inner records, each sealed at a flush or at [`BLOCK_BYTES`] raw bytes and
//! compressed with zstd. Events are delta-coded against the block's previous event and name
//! their blocks by interned (stack, size) pairs; the writer checks what a reader would
//! refuse (ids out of order, undefined stacks and labels, lengths over the limits) and
//! returns an error instead of writing it.
//!
//! # 2. Failures
//! A write that fails part-way poisons the [`Writer`]: the stream may end in a half record,
//! so nothing more is appended after it, and a reader sees a cut, not a damaged record.
//! [`append_symbols`] adds one block to a finished file and never rewrites what is there.

use std::io::{self, Write};
use std::path::Path;

use super::spec::{
    fine_life, time_unit_ns, zigzag, Delta, Event, BLOCK_BYTES, CODEC_ZSTD, EV_FREE, EV_MOVE,
    EV_SAMPLE, LIFETIME_UNIT_NS, MAGIC, MAX_BUILD_ID, MAX_FRAMES, MAX_LIST, MAX_RECORD, MAX_STRING,
    TAG_BLOCK, TAG_END, TAG_ENDED, TAG_GC_CYCLE, TAG_HEADER, TAG_LABEL, TAG_LOST, TAG_MODULE,
    TAG_NOTE, TAG_PAIR, TAG_RESIDENT, TAG_SPLIT, TAG_STACK, TAG_STOPPING, TAG_SYMBOLS, VERSION,
};
use crate::error::Error;
use crate::profile::events::{
    expected_k, Ended, Free, GcCycle, Move, Resident, ResidentSplit, Sample,
};
use crate::profile::header::{Header, Lost, Stopped};
use crate::profile::tables::{Module, Stack, StackId, Symbol};
use crate::profile::Profile;

/// zstd's level for blocks: level 3 about halves CPython's exact-mode file against level 1
/// (its pair ids and ages repeat at distances level 1 does not search) while still
/// compressing far faster than events arrive; on the worst case's repetitive blocks both
/// give the same size. lz4 gives files several times larger. `cargo bench --bench codec`
/// measures all three side by side on real recordings.
const ZSTD_LEVEL: i32 = 3;

pub(super) fn put_u(buf: &mut Vec<u8>, mut v: u64) {
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

pub(super) fn put_f64(buf: &mut Vec<u8>, v: f64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_str(buf: &mut Vec<u8>, s: &str) -> Result<(), Error> {
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

/// Frames `payload` as an outer record (tag, length, payload, crc) into `out`.
pub(super) fn frame(out: &mut Vec<u8>, tag: u8, payload: &[u8]) {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[tag]);
    crc.update(payload);
    out.push(tag);
    put_u(out, payload.len() as u64);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
}

/// Streams a profile as `.mprof` (version [`VERSION`]). See the [format documentation](super).
pub struct Writer<W: Write> {
    pub(super) out: W,
    /// Inner records of the block being built.
    pub(super) block: Vec<u8>,
    /// One record's payload.
    pub(super) payload: Vec<u8>,
    /// The sealed block (framed), reused.
    sealed: Vec<u8>,
    zstd: zstd::bulk::Compressor<'static>,
    delta: Delta,
    /// (stack, size) pair ids, and the next one.
    pairs: std::collections::HashMap<(StackId, u64), u64, crate::sys::hash::FastHash>,
    /// Pair ids by the caller's own dense id of the pair ([`Writer::write_sample_of`];
    /// `u64::MAX`: not seen yet), so that a sample costs an index, not a lookup.
    by_caller: Vec<u64>,
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
    pub(super) fn bare(out: W, header: &Header) -> Result<Self, Error> {
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
            by_caller: Vec::new(),
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
        // Flags only when one is set or a field follows them: a file written in the process
        // keeps the bytes it had.
        let flags = u64::from(header.collected) | u64::from(header.attached) << 1;
        if flags != 0 || header.ns_pid != 0 {
            put_u(&mut p, flags);
        }
        if header.ns_pid != 0 {
            put_u(&mut p, u64::from(header.ns_pid));
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
    pub(super) fn record(&mut self, tag: u8) -> Result<(), Error> {
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

    /// Writes a note that qualifies the profile's numbers (an ancillary record).
    pub fn write_note(&mut self, note: &str) -> Result<(), Error> {
        self.payload.clear();
        put_str(&mut self.payload, note)?;
        self.record(TAG_NOTE)
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
        self.write_sample_of(s, None)
    }

    /// [`Writer::write_sample`] of a sample whose (stack, size) pair the caller numbers
    /// `caller_pair` (its own dense ids: one pair, one id, always).
    pub(crate) fn write_sample_of(
        &mut self,
        s: &Sample,
        caller_pair: Option<u32>,
    ) -> Result<(), Error> {
        if u64::from(s.stack) >= self.stacks {
            return Err(Error::Format(format!(
                "sample {} names stack {} which was never written",
                s.id, s.stack
            )));
        }
        let pair = self.pair_of(s.stack, s.size, caller_pair)?;
        let dt = self.time_delta(s.time_ns);
        let expected = expected_k(self.interval, s.size);
        let b = &mut self.block;
        b.push(EV_SAMPLE);
        put_u(b, pair);
        put_z(b, dt);
        put_u(b, u64::from(s.thread));
        put_z(b, s.k.wrapping_sub(expected) as i64);
        self.samples += 1;
        self.maybe_seal()
    }

    /// The pair id of `(stack, size)`, which the caller numbers `caller_pair` (its own
    /// dense ids: one pair, one id, always), if it does: then looked up by that number.
    #[inline]
    fn pair_of(
        &mut self,
        stack: StackId,
        size: u64,
        caller_pair: Option<u32>,
    ) -> Result<u64, Error> {
        let Some(c) = caller_pair else {
            return self.pair(stack, size);
        };
        match self.by_caller.get(c as usize) {
            Some(&p) if p != u64::MAX => Ok(p),
            _ => self.pair_first(stack, size, c),
        }
    }

    /// [`Writer::pair_of`] of a pair the caller's number does not name yet.
    #[cold]
    #[inline(never)]
    fn pair_first(&mut self, stack: StackId, size: u64, c: u32) -> Result<u64, Error> {
        let p = self.pair(stack, size)?;
        if self.by_caller.len() <= c as usize {
            self.by_caller.resize(c as usize + 1, u64::MAX);
        }
        self.by_caller[c as usize] = p;
        Ok(p)
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
        (stack, size, caller_pair): (StackId, u64, Option<u32>),
        k: u64,
        alloc_ns: u64,
        life_ns: u64,
    ) -> Result<(), Error> {
        if u64::from(stack) >= self.stacks {
            return Err(Error::Format(format!(
                "a free or move names stack {stack} which was never written"
            )));
        }
        let pair = self.pair_of(stack, size, caller_pair)?;
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
        let expected = expected_k(self.interval, size);
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
        self.write_free_of(f, None)
    }

    /// [`Writer::write_free`] of a block whose (stack, size) pair the caller numbers
    /// `caller_pair`, as [`Writer::write_sample_of`]'s.
    pub(crate) fn write_free_of(
        &mut self,
        f: &Free,
        caller_pair: Option<u32>,
    ) -> Result<(), Error> {
        let pair = (f.stack, f.size, caller_pair);
        self.block_of(EV_FREE, f.time_ns, pair, f.k, f.alloc_ns, f.lifetime_ns())?;
        self.frees += 1;
        self.maybe_seal()
    }

    /// Writes the move (reallocation) of a sampled block (named as a free names it).
    pub fn write_move(&mut self, m: &Move) -> Result<(), Error> {
        self.block_of(EV_MOVE, m.time_ns, (m.stack, m.size, None), m.k, m.alloc_ns, 0)?;
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

    /// Writes a reading of the process's resident memory (an ancillary record: older
    /// readers skip it).
    pub fn write_resident(&mut self, r: &Resident) -> Result<(), Error> {
        self.payload.clear();
        put_u(&mut self.payload, r.time_ns);
        put_u(&mut self.payload, r.bytes);
        self.record(TAG_RESIDENT)
    }

    /// Writes a reading of the process's resident memory by kind of mapping (an ancillary
    /// record).
    pub fn write_split(&mut self, r: &ResidentSplit) -> Result<(), Error> {
        self.payload.clear();
        for v in [r.time_ns, r.resident, r.allocator, r.stacks, r.files, r.own, r.other] {
            put_u(&mut self.payload, v);
        }
        put_f64(&mut self.payload, r.live_bytes);
        // Appended later (§3): absent in older files.
        put_u(&mut self.payload, r.outside);
        self.record(TAG_SPLIT)
    }

    /// Writes how the process ended (an ancillary record, before the end record or the
    /// Stopping record, which stay the last word).
    pub fn write_ended(&mut self, e: &Ended) -> Result<(), Error> {
        self.payload.clear();
        put_u(&mut self.payload, e.how.code());
        put_u(&mut self.payload, zigzag(i64::from(e.status)));
        put_u(&mut self.payload, e.limit_bytes);
        self.record(TAG_ENDED)
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
    for r in &meta.resident {
        w.write_resident(r)?;
    }
    for r in &meta.splits {
        w.write_split(r)?;
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
    if let Some(e) = &meta.ended {
        w.write_ended(e)?;
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
    append(path, header, |w| {
        for (addr, s) in symbols {
            w.write_symbols(addr, s)?;
        }
        Ok(())
    })
}

/// Appends notes to the version-2 profile at `path`, as [`append_symbols`] appends symbols:
/// what `memprof record` learned of the run once it was over (a runtime whose heap is not
/// malloc's, programs started unprofiled), kept for `report` and every export.
pub fn append_notes(path: &Path, header: &Header, notes: &[String]) -> Result<(), Error> {
    append(path, header, |w| notes.iter().try_for_each(|n| w.write_note(n)))
}

/// One block of records written by `write` after what the file at `path` holds, then
/// `fsync` (see [`append_symbols`]).
fn append(
    path: &Path,
    header: &Header,
    write: impl FnOnce(&mut Writer<io::BufWriter<std::fs::File>>) -> Result<(), Error>,
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
    write(&mut w)?;
    w.flush()?;
    let file = w.out.into_inner().map_err(|e| Error::io("appending symbols", e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(format!("cannot sync {}", path.display()), e))
}
