//! The `.mprof` reader: untrusted bytes to a profile's tables and events.
//!
//! # 1. Streaming
//! [`Reader`] holds one decompressed block and the tables (modules, stacks, symbols,
//! pairs, labels) and hands the events out one at a time; [`Profile::read_from`] folds them
//! into the aggregates as they come (with a second core, one thread decodes while the
//! calling one folds).
//!
//! # 2. Untrusted input
//! Every length and count is checked against [the format](super)'s limits and against the
//! bytes left before anything is allocated, and nothing here panics. What is an error and
//! what is a warning is [the format](super) §4: the header must be whole; after it, a
//! cut or damaged record stops the reading there and keeps everything before it.
//!
//! # 3. Old versions
//! Versions 2 to 4 differ by fields that are read, or left unset (no label, no fine
//! lifetime), according to the header's version. Version 1 writes its events as outer records naming their blocks by
//! id; their decoding is in `read/v1.rs`. The framing of outer records (lengths, checksums,
//! cuts) is in `read/record.rs`.

mod payload;
mod record;
mod tables;
mod v1;

use std::io::{self, BufReader, Read};
use std::path::Path;

use super::spec::{
    fine_life, unzigzag, Delta, Event, ANCILLARY, CODEC_ZSTD, EV_FREE, EV_MOVE, EV_SAMPLE,
    LIFETIME_UNIT_NS, MAGIC, MAX_BLOCK, MAX_NOTES, MAX_RECORD, TAG_BLOCK, TAG_END, TAG_ENDED,
    TAG_GC_CYCLE, TAG_HEADER, TAG_LABEL, TAG_LOST, TAG_MODULE, TAG_NOTE, TAG_PAIR, TAG_RESIDENT,
    TAG_SPLIT, TAG_STACK, TAG_STOPPING, TAG_SYMBOLS,
};
use crate::error::Error;
use crate::profile::events::{expected_k, Ended, EndedHow, Free, Move, Resident, Sample};
use crate::profile::header::{Lost, Stopped};
use crate::profile::tables::StackId;
use crate::profile::Profile;
use payload::decode_header;
pub(super) use payload::Payload;
use record::{read_raw, Counting, Got, Raw};

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
/// number of events. See the [format documentation](super) for what is an error and what
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
            Got::Eof(0) => {
                return Err(Error::Format(
                    "empty file: not a memprof profile (nothing was written to it: a recording \
                     on a full disk, or one that never started)"
                        .into(),
                ))
            }
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
                            crate::profile::header::RECORD_STOPPED
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
        if self.state == State::Appendix && !matches!(tag, TAG_SYMBOLS | TAG_MODULE | TAG_NOTE) {
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
                let expected = expected_k(self.profile.header.interval, size);
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
                let expected = expected_k(self.profile.header.interval, size);
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
        // it the last word: they add names, not events (and a resident reading a fact).
        if !matches!(
            tag,
            TAG_SYMBOLS | TAG_MODULE | TAG_RESIDENT | TAG_SPLIT | TAG_ENDED | TAG_NOTE
        ) {
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
            TAG_MODULE => prof.modules.push(tables::module(p)?),
            TAG_STACK => {
                let stack =
                    tables::stack(p, prof.stacks.len(), prof.labels.len(), prof.header.version)?;
                prof.stacks.push(stack);
            }
            TAG_LABEL if prof.header.version >= 3 => {
                let text = tables::label(p, prof.labels.len())?;
                prof.labels.push(text);
            }
            TAG_SYMBOLS => {
                let (addr, syms) = tables::symbols(p)?;
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
            TAG_NOTE => {
                let note = p.str()?;
                if prof.notes.len() < MAX_NOTES && !prof.notes.contains(&note) {
                    prof.notes.push(note);
                }
            }
            TAG_RESIDENT => {
                let (time_ns, bytes) = (p.u()?, p.u()?);
                prof.resident.push(Resident { time_ns, bytes });
            }
            TAG_SPLIT => prof.splits.push(tables::split(p)?),
            TAG_ENDED => {
                let (how, status, limit_bytes) = (p.u()?, unzigzag(p.u()?), p.u()?);
                // A way of ending of a newer writer: no claim.
                prof.ended = EndedHow::from_code(how).map(|how| Ended {
                    how,
                    status: status.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
                    limit_bytes,
                });
            }
            TAG_GC_CYCLE => return Ok(Some(Event::GcCycle(tables::gc_cycle(p)?))),
            t if t >= ANCILLARY => {} // unknown ancillary record: skipped
            t => return Err(format!("unknown record kind {t} (written by a newer memprof?)")),
        }
        Ok(None)
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
        Profile::aggregate(Reader::new(r)?, false)
    }

    /// Reads a `.mprof` file (see [`Profile::read_from`]).
    pub fn read_file(path: impl AsRef<Path>) -> Result<Profile, Error> {
        Profile::aggregate(Reader::open(path)?, false)
    }

    /// [`Profile::read_file`], keeping the timeline the HTML page reads when `timeline`
    /// ([`crate::profile::timeline`]; finished).
    pub(crate) fn read_file_with(path: impl AsRef<Path>, timeline: bool) -> Result<Profile, Error> {
        Profile::aggregate(Reader::open(path)?, timeline)
    }

    /// Folds every event of `rd` in. With a second core, one thread decodes (decompression,
    /// varints) and hands batches of events to this one, which folds them in: the two
    /// halves of the work, side by side.
    fn aggregate<R: Read + Send>(mut rd: Reader<R>, timeline: bool) -> Result<Profile, Error> {
        const BATCH: usize = 8192;
        let parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
        let mut agg = Profile { header: rd.profile.header.clone(), ..Profile::default() };
        if timeline {
            agg.keep_timeline();
        }
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
        p.finish_timeline();
        p.fill_split_lives();
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
