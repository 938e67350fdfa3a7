//! The built-in [`Tracker`]: folds every event into a [`Profile`]'s aggregates (so a
//! session that runs for days keeps memory for its live sampled blocks and its stacks, not
//! for its events), and optionally streams the events to a `.mprof` file as they go.
//!
//! Call stacks are interned as they arrive; symbols are resolved once, when the session
//! stops, in this process (where the code is mapped), and written into the profile, so a
//! report needs neither this process nor its binaries. The preload library's recorders
//! leave that to the reader instead ([`Recorder::offline_symbols`]): `memprof record`
//! resolves them from the recorded modules right after the program exits and writes them
//! into the file.
//!
//! # Streaming
//! A file recorder encodes each record as its event arrives; the [`Writer`] seals them into
//! a compressed block when [`BLOCK_BYTES`](crate::profile::format::BLOCK_BYTES) are pending
//! and at least every [`FLUSH_EVERY`] ([`Tracker::after_poll`]: the drain thread polls every
//! few milliseconds), so a process that dies reads back everything up to the last flush. The
//! header and the modules are flushed at once. Modules loaded later (`dlopen`) are noticed
//! through the loader's `dlpi_adds` counter at each poll, and when a new stack has a frame
//! outside every known module; they are written as they appear. A forced poll
//! ([`Poll::BeforeUnload`], before `dlclose`) also resolves the symbols seen so far while
//! their library is still mapped. [`Recorder::streaming`] keeps only the stack table in
//! memory, so a long run costs memory for its distinct stacks, not for its samples.
//! `memprof record`'s collector streams and folds at once ([`Recorder::folding`]): the
//! aggregates it keeps are those a reader of the file gets back (times in the file's
//! units), and the reports are made from them, so the file is written once and never
//! decoded again by `record`.

mod collected;
mod python;

#[cfg(feature = "cli")] // its one user outside: the collector (`record::command`)
pub(crate) use collected::Named;

use crate::engine::callstack::frames::{key, same_words};
use crate::error::Error;
use crate::profile::format::{spec, Writer};
use crate::profile::{
    symbolize, Free, GcCycle, Header, Lost, Module, Profile, Resident, Sample, Stack, StackId,
    Stopped,
};
use crate::session::generations::{Generations, Piece};
use crate::session::tracker::{
    Allocation, Deallocation, Poll, SessionCounters, SessionInfo, Tracker,
};
use crate::sys::own_file::OwnFile;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Capacity of a streaming recorder's write buffer.
pub(crate) const STREAM_BUFFER: usize = 64 * 1024;
/// Longest time written records wait in the buffer.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Opens a file to stream to: its path and the file.
pub(crate) type Opener = Box<dyn FnOnce() -> Result<(PathBuf, File), Error> + Send>;

/// Builds a [`Profile`] from a session's samples.
#[derive(Default)]
pub struct Recorder {
    profile: Profile,
    /// Stack ids by a hash of their frames (collisions compared against the stack table),
    /// so that a lookup neither allocates nor hashes with SipHash.
    interned: HashMap<u64, Vec<StackId>, crate::sys::hash::FastHash>,
    /// Deaths' stacks and pairs by what they name (`collected.rs`).
    death_hints: collected::DeathHints,
    /// Profile label ids by the address and length of the session's label text (the
    /// registry's texts are unique, so a lookup hashes two words, not the text).
    label_ids: HashMap<(usize, usize), u32, crate::sys::hash::FastHash>,
    output: Option<(PathBuf, Option<Writer<BufWriter<OwnFile>>>)>,
    /// An already open file to stream to (taken at `started`).
    opened: Option<File>,
    /// Opens the file at the first sample (taken then).
    deferred: Option<Opener>,
    /// Fold samples, frees and moves into the profile's aggregates (false: they only go to
    /// the file).
    stream_only: bool,
    /// Fold the heap over time by stack in too ([`Recorder::folding`]).
    timeline: bool,
    /// Writing a file of this time unit: the aggregates fold the events as the file stores
    /// them (`format::spec::free_as_stored`), so that they are the file's.
    stored_unit: Option<u64>,
    /// Modules written so far, by (path, base).
    modules_seen: HashSet<(String, u64)>,
    /// The loader's `dlpi_adds` when the modules were last listed.
    loader_adds: u64,
    /// The (stack, size) pairs of the live blocks' [`Held`] tokens, and their ids.
    pairs: Vec<(StackId, u64)>,
    pair_ids: HashMap<(StackId, u64), u32, crate::sys::hash::FastHash>,
    /// Addresses whose symbols were written already (by a forced poll).
    resolved: HashSet<u64>,
    /// Leave symbols out at the end (see [`Recorder::offline_symbols`]).
    offline_symbols: bool,
    last_flush: Option<Instant>,
    /// This process's memory files, read at periodic polls by a recorder that writes a
    /// file of this process (opened at the first).
    memory: Option<Box<crate::sys::smaps::Memory>>,
    error: Option<Error>,
    /// Recording another process (`memprof record`'s collector): its facts, and its
    /// modules come from [`Recorder::add_modules`] instead of this process's loader.
    other: Option<ProcessFacts>,
    /// The reader of the process's CPython code objects, once a stack held a Python frame
    /// and its modules named a CPython memprof knows (`python.rs`).
    python: Option<crate::profile::symbolize::PythonReader>,
    /// A new stack had a frame outside every module known (only with `other`).
    unknown_frames: bool,
    /// Module generations of another process (see [`Generations`]).
    generations: Generations,
}

/// What a [`Recorder`] of another process writes into the header for it.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProcessFacts {
    pub(crate) pid: u32,
    pub(crate) ppid: u32,
    /// The pid in the process's own PID namespace, when it differs from `pid` (else 0).
    pub(crate) ns_pid: u32,
    pub(crate) executable: String,
    pub(crate) cmdline: Vec<String>,
    /// Recorded by `memprof attach` in a process that was already running.
    pub(crate) attached: bool,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.path())
            .field("samples", &self.profile.counts.samples)
            .field("stacks", &self.profile.stacks.len())
            .field("stream_only", &self.stream_only)
            .field("offline_symbols", &self.offline_symbols)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder that keeps the profile in memory.
    pub fn new() -> Self {
        Recorder::default()
    }

    /// A recorder that also streams the profile to `path` (created, or truncated if it is a
    /// regular file already).
    pub fn to_file(path: impl AsRef<Path>) -> Self {
        Recorder { output: Some((path.as_ref().to_path_buf(), None)), ..Recorder::default() }
    }

    /// A recorder that streams to `file` (already open for writing; `path` names it in
    /// messages) and keeps only the tables in memory: samples, frees and moves go to the
    /// file only, so [`Recorder::finish`] returns a profile without their aggregates.
    pub fn streaming(path: impl AsRef<Path>, file: File) -> Self {
        Recorder {
            output: Some((path.as_ref().to_path_buf(), None)),
            opened: Some(file),
            stream_only: true,
            ..Recorder::default()
        }
    }

    /// Like [`Recorder::streaming`], but the file is opened by `open` when the first sample
    /// arrives, so that a process that never allocates leaves no file (a forked child that
    /// calls `exec` at once).
    pub(crate) fn streaming_deferred(open: Opener) -> Self {
        Recorder { deferred: Some(open), stream_only: true, ..Recorder::default() }
    }

    /// Writes no symbols when the session stops: whoever reads the file resolves them from
    /// the recorded modules ([`crate::profile::symbolize::resolve_offline`]; `memprof
    /// record` does it as soon as the program has exited and writes them into the file).
    /// Resolving in the profiled process means loading the DWARF of every object its stacks
    /// touch (glibc's separate debug file is compressed), which cost the worst-case program
    /// more instructions at exit than its whole run. Forced polls (before `_exit` and
    /// `exec`) only flush; the one before `dlclose` ([`Poll::BeforeUnload`]) still resolves in
    /// process, as a library about to be unmapped may be gone from its address range by
    /// the time the file is read.
    pub fn offline_symbols(mut self) -> Self {
        self.offline_symbols = true;
        self
    }

    /// Folds every event into the aggregates as it streams them (a [`Recorder::streaming`]
    /// one only writes them), the timeline of the HTML page included: `memprof record`'s
    /// collector, whose reports come from this fold rather than from reading the file
    /// again. The aggregates are those a reader of the file gets (times in its units).
    pub(crate) fn folding(mut self) -> Self {
        self.stream_only = false;
        self.timeline = true;
        self
    }

    /// Records another process's events (`memprof record`'s collector): the header names
    /// `facts`, and its modules are those given to [`Recorder::add_modules`].
    pub(crate) fn of_process(mut self, facts: ProcessFacts) -> Self {
        self.other = Some(facts);
        self
    }

    /// Modules of the recorded process found mapped (with [`Recorder::of_process`]): those
    /// not written yet are written.
    pub(crate) fn add_modules(&mut self, modules: Vec<Module>) {
        let pieces = self.generations.add_modules(modules);
        self.write_module_pieces(pieces);
    }

    /// The recorded process's full module list at this point of its events (with
    /// [`Recorder::of_process`]): modules gone since the last list are retired (see
    /// [`Generations`]), new ones written. Objects of a `dlclose` under way only take the
    /// frames recorded in their range so far.
    pub(crate) fn module_snapshot(&mut self, modules: Vec<Module>) {
        let pieces = self.generations.snapshot(modules);
        self.write_module_pieces(pieces);
    }

    /// A `dlclose` starts (call `id`; the loader had loaded `adds` objects), which may unmap
    /// `modules` (see [`Generations::closing`]).
    pub(crate) fn module_closing(&mut self, id: u64, adds: u64, modules: Vec<Module>) {
        let pieces = self.generations.closing(id, adds, modules);
        self.write_module_pieces(pieces);
    }

    /// The `dlclose` call `id` returned (the loader had loaded `adds` objects by then), and
    /// the latest list was read after it (see [`Generations::closed`]).
    pub(crate) fn module_closed(&mut self, id: u64, adds: u64) {
        let pieces = self.generations.closed(id, adds);
        self.write_module_pieces(pieces);
    }

    /// Writes the module pieces [`Generations`] settled, in its order.
    fn write_module_pieces(&mut self, pieces: Vec<Piece>) {
        for Piece { module, lo, hi, delta } in pieces {
            self.write_module_piece(&module, lo, hi, delta);
        }
    }

    /// Writes the piece `lo..hi` of module `m` recorded at `+ delta`, unless written already.
    fn write_module_piece(&mut self, m: &crate::profile::Module, lo: u64, hi: u64, delta: u64) {
        let piece = crate::profile::Module {
            base: m.base.wrapping_add(delta),
            start: lo.wrapping_add(delta),
            end: hi.wrapping_add(delta),
            ..m.clone()
        };
        let written = self
            .profile
            .modules
            .iter()
            .any(|x| x.path == piece.path && x.base == piece.base && x.start == piece.start);
        if !written {
            self.modules_seen.insert((piece.path.clone(), piece.base));
            self.write(|w| w.write_module(&piece));
            self.profile.modules.push(piece);
        }
    }

    /// Ends the file as a process image that ended without exit handlers leaves it (what
    /// the in-process recorder writes before `exec` or `_exit`): the counters, a Stopping
    /// record saying `why`, and no end record. For `memprof record`'s collector, which
    /// learns how the image ended from its ring.
    pub(crate) fn stop_as(&mut self, why: Stopped, stats: &SessionCounters) {
        let lost = self.take_lost(stats);
        self.write(|w| w.write_lost(&lost));
        self.write(|w| w.write_stopping(why));
        self.flush();
        self.profile.stopped = Some(why);
        self.profile.finish_timeline();
        if let Some((_, w)) = &mut self.output {
            // Dropped without `finish`: no end record.
            *w = None;
        }
    }

    /// Records the session's drop counters in the profile, and returns them.
    fn take_lost(&mut self, stats: &SessionCounters) -> Lost {
        self.profile.lost = Lost {
            events: stats.lost_events,
            untracked: stats.untracked,
            callback_panics: stats.callback_panics,
            frees_replayed: stats.frees_replayed,
            frees_unknown: stats.frees_unknown,
        };
        self.profile.lost
    }

    /// True once, after a new stack had a frame outside every known module (with
    /// [`Recorder::of_process`]): the caller may look the process's modules up.
    pub(crate) fn take_unknown_frames(&mut self) -> bool {
        std::mem::take(&mut self.unknown_frames)
    }

    /// The path of the file being written, once it is open.
    pub fn path(&self) -> Option<&Path> {
        self.output.as_ref().map(|(p, _)| p.as_path())
    }

    /// Opens the output now if it was deferred (see [`Recorder::streaming_deferred`]):
    /// writes the header, the modules known so far and the readings taken before.
    fn open_deferred(&mut self) {
        let Some(open) = self.deferred.take() else {
            return;
        };
        match open() {
            Ok((path, file)) => {
                self.output = Some((path, None));
                self.opened = Some(file);
                self.open_output();
                let modules = self.profile.modules.clone();
                self.write(|w| modules.iter().try_for_each(|m| w.write_module(m)));
                // Readings of the process taken before its first sample (a forked child
                // read before it allocates): in the file as in the profile, in their order.
                let (resident, splits) =
                    (self.profile.resident.clone(), self.profile.splits.clone());
                self.write(|w| resident.iter().try_for_each(|r| w.write_resident(r)));
                self.write(|w| splits.iter().try_for_each(|r| w.write_split(r)));
                self.flush();
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// Creates the writer (and the file, when it was not given open) and writes the header.
    fn open_output(&mut self) {
        if let Some((path, writer)) = &mut self.output {
            let file = match self.opened.take() {
                Some(f) => Ok(f),
                None => File::create(&*path)
                    .map_err(|e| Error::io(format!("cannot create {}", path.display()), e)),
            };
            let opened = file.and_then(|f| {
                let f = OwnFile::new(f)
                    .map_err(|e| Error::io(format!("cannot use {}", path.display()), e))?;
                Writer::new(BufWriter::with_capacity(STREAM_BUFFER, f), &self.profile.header)
            });
            match opened {
                Ok(w) => *writer = Some(w),
                Err(e) => {
                    self.error.get_or_insert(e);
                }
            }
            // This process's memory files, opened now with the profile (before `main`
            // under the preload library), not later from the drain thread: a daemon that
            // closes every descriptor and opens its own expecting the lowest numbers never
            // finds one of ours opened in between.
            if self.other.is_none() {
                let memory = crate::sys::smaps::Memory::open(None, String::new());
                self.memory = Some(Box::new(memory));
            }
        }
    }

    /// The first error met while writing the file, if any.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// The profile recorded so far.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The profile, and the first error met while writing the file (if any).
    pub fn finish(mut self) -> Result<Profile, Error> {
        self.profile.settle_pairs();
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.profile),
        }
    }

    /// The profile so far, while the session runs (`session/live.rs`); `None` for a
    /// streaming recorder, which keeps no aggregates in memory.
    pub(crate) fn profile_so_far(&mut self) -> Option<&Profile> {
        self.profile.settle_pairs();
        (!self.stream_only).then_some(&self.profile)
    }

    /// The profile, ignoring file errors.
    pub fn into_profile(mut self) -> Profile {
        self.profile.settle_pairs();
        self.profile
    }

    /// Takes the profile out, leaving an empty one (the collector's, once its process is
    /// finished).
    pub(crate) fn take_profile(&mut self) -> Profile {
        self.profile.settle_pairs();
        std::mem::take(&mut self.profile)
    }

    fn write(&mut self, f: impl FnOnce(&mut Writer<BufWriter<OwnFile>>) -> Result<(), Error>) {
        if let Some((path, Some(w))) = &mut self.output {
            if let Err(e) = f(w) {
                self.error.get_or_insert(Error::Other(format!("{}: {e}", path.display())));
                if let Some((_, w)) = &mut self.output {
                    *w = None;
                }
            }
        }
    }

    fn flush(&mut self) {
        self.last_flush = Some(Instant::now());
        self.write(|w| w.flush());
    }

    /// Lists the loaded modules again and writes those not written yet.
    fn refresh_modules(&mut self) {
        if self.other.is_some() {
            // Another process's modules come from `add_modules`.
            return;
        }
        self.loader_adds = loader_adds();
        let fresh: Vec<_> = symbolize::current_modules()
            .into_iter()
            .filter(|m| !self.modules_seen.contains(&(m.path.clone(), m.base)))
            .collect();
        for m in fresh {
            self.modules_seen.insert((m.path.clone(), m.base));
            self.write(|w| w.write_module(&m));
            self.profile.modules.push(m);
        }
    }

    fn in_known_module(&self, addr: u64) -> bool {
        crate::profile::is_python_word(addr)
            || self.profile.modules.iter().any(|m| m.start <= addr && addr < m.end)
    }

    /// Return addresses of the recorded stacks whose symbols were not resolved yet.
    fn unresolved_addrs(&self) -> BTreeSet<u64> {
        self.profile
            .stacks
            .iter()
            .flat_map(|s| s.frames.iter().copied())
            .filter(|a| !self.resolved.contains(a))
            .collect()
    }

    /// Resolves the symbols of the stack frames not resolved yet and writes them.
    fn resolve_pending(&mut self) {
        let addrs = self.unresolved_addrs();
        let symbols = symbolize::resolve_in_process(addrs.iter().copied());
        for a in addrs {
            self.resolved.insert(a);
            if let Some(s) = symbols.get(&a) {
                let s = s.clone();
                self.write(|w| w.write_symbols(a, &s));
                self.profile.symbols.insert(a, s);
            }
        }
    }
}

/// What a [`Recorder`] remembers of a live sampled block until its free (16 bytes, kept by
/// the session with the block): its (stack, size) pair, its sample points and when it was
/// allocated, which the free names (see [`Free`]).
#[derive(Clone, Copy, Debug)]
pub struct Held {
    pair: u32,
    /// `k` minus its expected value (its size in the exact mode, else 1), saturated.
    k_delta: u32,
    time_ns: u64,
}

impl Recorder {
    fn held(&mut self, s: &Sample) -> Held {
        let next = self.pairs.len() as u32;
        let pair = *self.pair_ids.entry((s.stack, s.size)).or_insert(next);
        if pair == next {
            self.pairs.push((s.stack, s.size));
        }
        let expected = crate::profile::expected_k(self.profile.header.interval, s.size);
        let k_delta = u32::try_from(s.k.saturating_sub(expected)).unwrap_or(u32::MAX);
        Held { pair, k_delta, time_ns: s.time_ns }
    }

    fn sample_of(&self, h: &Held, id: u64) -> Sample {
        let (stack, size) = self.pairs[h.pair as usize];
        let expected = crate::profile::expected_k(self.profile.header.interval, size);
        let k = expected + u64::from(h.k_delta);
        Sample { id, stack, time_ns: h.time_ns, thread: 0, addr: 0, size, k }
    }
}

/// A cheap hash of a call stack (the frames are return addresses: already well spread).
/// Only the innermost [`HASHED_FRAMES`] frames (and the depth) are hashed: stacks that
/// differ mostly differ near the allocation, and a lookup compares whole stacks anyway.
/// Deep stacks (an interpreter's 64 frames) then cost the drain thread a quarter of the
/// hashing.
fn stack_hash(frames: &[usize], truncated: bool) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(truncated) ^ ((frames.len() as u64) << 32);
    for &f in frames.iter().take(HASHED_FRAMES) {
        h = (h.rotate_left(5) ^ f as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h
}

/// See [`stack_hash`].
const HASHED_FRAMES: usize = 16;

/// This process's arguments; read from `/proc/self/cmdline` when the standard library has
/// not seen them (inside a preload library whose constructor runs before std's).
pub(crate) fn command_line() -> Vec<String> {
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    if !args.is_empty() {
        return args;
    }
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The loader's count of objects ever loaded (`dlpi_adds`): it changes when `dlopen` maps
/// a new object.
fn loader_adds() -> u64 {
    crate::sys::loader::counts().0
}

impl Recorder {
    /// The profile's id of a session label, added to the profile (and written) when new.
    fn label_id(&mut self, text: &'static str) -> u32 {
        let key = (text.as_ptr() as usize, text.len());
        if let Some(&id) = self.label_ids.get(&key) {
            return id;
        }
        let before = self.profile.labels.len();
        let id = self.profile.intern_label(text);
        if self.profile.labels.len() > before {
            self.write(|w| w.write_label(id, text));
        }
        self.label_ids.insert(key, id);
        id
    }
}

impl Recorder {
    /// Interns an allocation's stack, writes its sample and folds it in: the work of an
    /// allocation, but for the token an in-process session keeps with the block.
    fn sample(&mut self, a: &Allocation<'_>) -> (Sample, Option<u32>) {
        // Another process's stacks are keyed as its live table keys them (`live` §5), from
        // the frames as recorded, so that a free's key finds its stack here.
        let raw_key =
            self.other.is_some().then(|| key(a.callstack.frames(), a.callstack.truncated()));
        if self.deferred.is_some() {
            self.open_deferred();
        }
        let translated: Vec<usize>;
        let mut frames = a.callstack.frames();
        if self.other.is_some() && self.generations.shifting() {
            let g = &mut self.generations;
            translated = frames.iter().map(|&f| g.translate(f as u64) as usize).collect();
            frames = &translated;
        }
        let truncated = a.callstack.truncated();
        let label = match a.label {
            None => 0,
            Some(text) => self.label_id(text),
        };
        let key = match raw_key {
            Some(k) => k,
            None => stack_hash(frames, truncated) ^ u64::from(label).wrapping_mul(0x9e37_79b9),
        };
        let same = |s: &Stack| {
            s.truncated == truncated && s.label == label && same_words(&s.frames, frames)
        };
        let found = self.interned.get(&key).and_then(|ids| {
            ids.iter().copied().find(|&id| same(&self.profile.stacks[id as usize]))
        });
        let id = match found {
            Some(id) => id,
            None => {
                let frames = frames.iter().map(|&f| f as u64).collect();
                let stack = Stack { frames, truncated, label };
                let id = self.profile.stacks.len() as StackId;
                if self.output.is_some() && !stack.frames.iter().all(|&a| self.in_known_module(a)) {
                    self.unknown_frames = self.other.is_some();
                    self.refresh_modules();
                }
                self.write(|w| w.write_stack(id, &stack));
                let python = stack.frames.iter().any(|&a| crate::profile::is_python_word(a));
                self.profile.stacks.push(stack);
                let ids = self.interned.entry(key).or_default();
                if !ids.is_empty() {
                    // A key that names two stacks: its deaths must choose (`collected.rs`).
                    self.death_hints.clear();
                }
                ids.push(id);
                if python {
                    self.name_python_frames(id);
                }
                id
            }
        };
        self.sample_as(a, id)
    }

    /// Writes and folds allocation `a` as a sample of stack `id`: the sample, and the id
    /// the fold gave its pair (`None` when the profile keeps no vectors by pair id).
    fn sample_as(&mut self, a: &Allocation<'_>, id: StackId) -> (Sample, Option<u32>) {
        let sample = Sample {
            id: a.id,
            stack: id,
            time_ns: a.time_ns,
            thread: a.thread,
            addr: a.addr as u64,
            size: a.size as u64,
            k: a.k,
        };
        // Folded first: a folding profile numbers the pair, which the writer then indexes.
        let pair = match (self.stream_only, self.stored_unit) {
            (true, _) => None,
            (false, Some(unit)) => self.profile.fold_sample(&spec::sample_as_stored(&sample, unit)),
            (false, None) => self.profile.fold_sample(&sample),
        };
        self.write(|w| w.write_sample_of(&sample, pair));
        (sample, pair)
    }
}

impl Recorder {
    /// Reads this process's resident memory, and now and then by kind of mapping, when
    /// readings are due (as `memprof record`'s collector reads a recorded process's: see
    /// [`crate::sys::smaps`]).
    fn read_memory(&mut self) {
        let Some(memory) = &mut self.memory else {
            return;
        };
        let now = crate::engine::clock::monotonic_ns();
        let time_ns = now.saturating_sub(crate::engine::clock::start_ns());
        let resident = memory.resident(now, false);
        let kinds = memory.kinds(now, false);
        if let Some(bytes) = resident {
            self.resident(Resident { time_ns, bytes });
        }
        if let Some(k) = kinds {
            // A streaming recorder keeps no live heap: the reader gives the reading the
            // live heap of its moment (`Profile::fill_split_lives`).
            let live = if self.stream_only { f64::NAN } else { self.profile.live_bytes };
            self.split(k.split(time_ns, crate::sys::rawmem::mapped(), live));
        }
    }
}

impl Tracker for Recorder {
    type Token = Held;

    fn started(&mut self, info: &SessionInfo) {
        let facts = match &self.other {
            Some(f) => f.clone(),
            None => ProcessFacts {
                pid: std::process::id(),
                ppid: std::os::unix::process::parent_id(),
                ns_pid: 0,
                executable: std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                cmdline: command_line(),
                attached: false,
            },
        };
        self.profile.header = Header {
            interval: info.interval,
            depth: info.depth as u32,
            pid: facts.pid,
            ppid: facts.ppid,
            ns_pid: facts.ns_pid,
            executable: facts.executable,
            cmdline: facts.cmdline,
            start_unix_ns: info.start_unix_ns,
            // Times in memory are nanoseconds (a file gets its own unit: the writer's).
            time_unit_ns: 1,
            // A recorder of another process is `memprof record`'s collector.
            collected: self.other.is_some(),
            attached: facts.attached,
            ..Header::default()
        };
        if self.output.is_some() || self.deferred.is_some() {
            let unit = crate::profile::format::time_unit_ns(info.interval);
            self.stored_unit = Some(unit);
            self.profile.header.time_unit_ns = unit;
            self.profile.header.version = crate::profile::format::VERSION;
        }
        if self.timeline {
            self.profile.keep_timeline();
            self.profile.keep_pairs();
        }
        self.open_output();
        self.refresh_modules();
        self.flush();
    }

    fn after_poll(&mut self, why: Poll) {
        if !matches!(self.output, Some((_, Some(_)))) {
            return;
        }
        if why.is_forced() {
            self.refresh_modules();
            if !self.offline_symbols || why == Poll::BeforeUnload {
                self.resolve_pending();
            }
            // The image ends without the end record: say why, so the reader can tell the
            // file is whole rather than cut by a crash.
            let stopped = match why {
                Poll::BeforeExec => Some(Stopped::Exec),
                Poll::BeforeQuickExit => Some(Stopped::QuickExit),
                _ => None,
            };
            if let Some(stopped) = stopped {
                self.write(|w| w.write_stopping(stopped));
            }
            self.flush();
            return;
        }
        if self.other.is_none() && loader_adds() != self.loader_adds {
            self.refresh_modules();
        }
        if self.other.is_none() {
            self.read_memory();
        }
        if self.last_flush.is_none_or(|t| t.elapsed() >= FLUSH_EVERY) {
            self.flush();
        }
    }

    fn alloc(&mut self, a: &Allocation<'_>) -> Option<Held> {
        let (sample, _) = self.sample(a);
        Some(self.held(&sample))
    }

    fn dealloc(&mut self, h: Held, d: &Deallocation) {
        let f = Free::of(&self.sample_of(&h, d.id), d.time_ns);
        self.write(|w| w.write_free(&f));
        if !self.stream_only {
            match self.stored_unit {
                Some(unit) => self.profile.fold_free(&spec::free_as_stored(&f, unit)),
                None => self.profile.fold_free(&f),
            }
        }
    }

    fn gc_cycle(&mut self, cycle: &GcCycle) {
        self.write(|w| w.write_gc_cycle(cycle));
        self.profile.add_gc_cycle(cycle);
    }

    fn stopped(&mut self, stats: &SessionCounters) {
        self.take_lost(stats);
        let addrs = if self.offline_symbols { BTreeSet::new() } else { self.unresolved_addrs() };
        let fresh = symbolize::resolve_in_process(addrs.iter().copied());
        self.profile.symbols.extend(fresh);
        let lost = self.profile.lost;
        let symbols: Vec<_> =
            addrs.iter().filter_map(|a| self.profile.symbols.get(a).map(|s| (*a, s))).collect();
        if let Some((_, Some(w))) = &mut self.output {
            let r = symbols
                .iter()
                .try_for_each(|(a, s)| w.write_symbols(*a, s))
                .and_then(|_| w.write_lost(&lost));
            if let Err(e) = r {
                self.error.get_or_insert(e);
            }
        }
        if let Some((path, w)) = &mut self.output {
            if let Some(w) = w.take() {
                if let Err(e) = w.finish() {
                    self.error.get_or_insert(Error::Other(format!(
                        "cannot finish {}: {e}",
                        path.display()
                    )));
                }
            }
        }
        self.profile.complete = true;
        self.profile.finish_timeline();
        self.profile.settle_pairs();
    }
}

#[cfg(test)]
mod tests;
