//! Reading profiles as `memprof record` and `memprof report` do: one or more `.mprof` files,
//! each read once into its aggregates, frames without symbols resolved from the recorded
//! modules, merged into one profile; and, for a just-recorded file, the resolved symbols
//! appended to it ([`format::append_symbols`](super::format::append_symbols)), so that it
//! reads the same wherever and whenever it is opened. Nothing is copied or rewritten.
#![forbid(unsafe_code)]

use super::Profile;
use crate::error::Error;
use std::path::PathBuf;

/// How [`load`] treats its files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The files were just recorded (`memprof record`, right after the program exited): the
    /// first is the program's own and the others its followed children's. A file that ends
    /// cleanly gets its resolved symbols appended, and a child's file that cannot be
    /// read (a child that exec'd or died before its first flush) is left out, with a
    /// warning, rather than failing the whole load.
    pub recorded: bool,
}

/// Something [`load`] has to tell the user; each names its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Part of the data is missing or suspect.
    Warning(String),
    /// For information (a module whose symbols could not be read).
    Note(String),
}

/// What [`load`] read.
#[derive(Debug)]
pub struct Loaded {
    /// The files' profiles, merged.
    pub profile: Profile,
    /// One line per file read: `<path>: <n> samples`.
    pub labels: Vec<String>,
    /// Warnings and notes, in the order they arose.
    pub messages: Vec<Message>,
    /// One per file read, in order: what the table of a tree's processes shows.
    pub processes: Vec<Process>,
}

/// One process of what [`load`] read, before merging: its own totals.
#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    /// Its file.
    pub file: PathBuf,
    /// Its executable (else its first argument), as recorded: a program's string.
    pub executable: String,
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid (0: not recorded).
    pub ppid: u32,
    /// Samples in its file.
    pub samples: u64,
    /// Estimated bytes it allocated.
    pub allocated: f64,
    /// Estimated live bytes at its peak.
    pub peak: f64,
    /// Estimated bytes still live at its end.
    pub live: f64,
}

impl Process {
    fn of(file: &std::path::Path, p: &Profile) -> Process {
        let h = &p.header;
        let executable = if h.executable.is_empty() {
            h.cmdline.first().cloned().unwrap_or_default()
        } else {
            h.executable.clone()
        };
        let k: u64 = p.allocated.values().map(|t| t.k).sum();
        Process {
            file: file.to_path_buf(),
            executable,
            pid: h.pid,
            ppid: h.ppid,
            samples: p.counts.samples,
            allocated: k as f64 * h.interval,
            peak: p.peak.bytes,
            live: p.live_bytes,
        }
    }
}

/// A profile file that is still being written (by a program under `memprof record`): at
/// its end, [`std::io::Read::read`] waits for more until `done` is set, then reads what is left. A
/// file that does not exist yet is waited for the same way. So a reader can fold the
/// profile in while the program runs ([`follow`]), and little is left to read once it
/// exits.
#[derive(Debug)]
pub(crate) struct Follow {
    path: PathBuf,
    file: Option<std::fs::File>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// How long [`Follow`] sleeps at the end of the file before looking again.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(5);

impl Follow {
    /// Follows `path` until `done` is set.
    pub fn new(path: PathBuf, done: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        Follow { path, file: None, done }
    }
}

impl std::io::Read for Follow {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::sync::atomic::Ordering;
        loop {
            // Read `done` before reading the file: once it is set, the writer has exited,
            // and a read that comes after sees everything it wrote.
            let done = self.done.load(Ordering::Acquire);
            let file = match &mut self.file {
                Some(f) => f,
                None => match crate::sys::files::open_input_regular(&self.path) {
                    Ok(f) => self.file.insert(f),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && !done => {
                        std::thread::sleep(FOLLOW_POLL);
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            let n = file.read(buf)?;
            if n > 0 || done || buf.is_empty() {
                return Ok(n);
            }
            std::thread::sleep(FOLLOW_POLL);
        }
    }
}

/// Reads the profile at `path` while it is being written, into its aggregates (see
/// [`Follow`]); returns when `done` is set and the file is read to its end.
pub(crate) fn follow(
    path: PathBuf,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<Profile, Error> {
    Profile::read_from(Follow::new(path.clone(), done)).map_err(|e| super::format::naming(&path, e))
}

/// A profile being read while it is written ([`follow_shared`]), shared with other threads:
/// each event is folded in under a lock, so [`Followed::snapshot_into`] sees the file as
/// read so far (the reader waits at the file's end: a snapshot is as old as the file's
/// last flush, plus 5 ms). For `memprof record --serve`.
#[derive(Debug, Default)]
pub(crate) struct Followed {
    state: std::sync::Mutex<FollowedState>,
}

#[derive(Debug, Default)]
struct FollowedState {
    /// The header has been read.
    started: bool,
    /// The tables read so far (header, modules, stacks, symbols, lost counts).
    tables: Profile,
    /// The events folded in so far.
    agg: Profile,
}

impl Followed {
    fn lock(&self) -> std::sync::MutexGuard<'_, FollowedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings `mirror` up to the profile read so far: the stacks and modules read since it
    /// was last brought up (its symbols are kept), and the aggregates. False before the
    /// file's header has been read.
    pub fn snapshot_into(&self, mirror: &mut Profile) -> bool {
        let s = self.lock();
        if !s.started {
            return false;
        }
        let (t, a) = (&s.tables, &s.agg);
        if mirror.header != t.header {
            *mirror = Profile { header: t.header.clone(), ..Profile::default() };
        }
        let known = mirror.stacks.len().min(t.stacks.len());
        mirror.stacks.extend_from_slice(&t.stacks[known..]);
        let known = mirror.labels.len().min(t.labels.len());
        mirror.labels.extend_from_slice(&t.labels[known..]);
        if mirror.modules != t.modules {
            mirror.modules.clone_from(&t.modules);
        }
        for (addr, sym) in &t.symbols {
            mirror.symbols.entry(*addr).or_insert_with(|| sym.clone());
        }
        mirror.lost = t.lost;
        mirror.stopped = t.stopped;
        mirror.clone_aggregates_from(a);
        // Whole as of now (the recording goes on).
        mirror.complete = true;
        true
    }
}

/// [`follow`], publishing the profile read so far in `shared` as it goes (one thread:
/// each event is folded in under `shared`'s lock, and the tables the event needs are
/// copied there first).
pub(crate) fn follow_shared(
    path: PathBuf,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    shared: &Followed,
) -> Result<Profile, Error> {
    let named = |e| super::format::naming(&path, e);
    let mut rd = super::format::Reader::new(Follow::new(path.clone(), done)).map_err(named)?;
    {
        let mut s = shared.lock();
        s.tables = Profile { header: rd.profile().header.clone(), ..Profile::default() };
        s.agg = Profile { header: rd.profile().header.clone(), ..Profile::default() };
        s.started = true;
    }
    let mut symbols = 0;
    while let Some(e) = rd.next_event() {
        let t = rd.profile();
        let mut s = shared.lock();
        let known = s.tables.stacks.len();
        if known < t.stacks.len() {
            s.tables.stacks.extend_from_slice(&t.stacks[known..]);
        }
        let known = s.tables.labels.len();
        if known < t.labels.len() {
            s.tables.labels.extend_from_slice(&t.labels[known..]);
        }
        if s.tables.modules.len() != t.modules.len() {
            s.tables.modules.clone_from(&t.modules);
        }
        if symbols != t.symbols.len() {
            symbols = t.symbols.len();
            s.tables.symbols.clone_from(&t.symbols);
        }
        s.tables.lost = t.lost;
        s.agg.add(&e);
    }
    let mut p = rd.finish();
    // `shared` keeps its copy: requests may still come until the caller stops serving.
    let agg = shared.lock().agg.clone();
    p.take_aggregates(agg);
    p.note_orphans();
    Ok(p)
}

/// Reads one or more profiles (merged when several). Frames without symbols are resolved
/// from the recorded modules, before merging, while the addresses are still each process's
/// own.
pub fn load(files: &[PathBuf], options: LoadOptions) -> Result<Loaded, Error> {
    load_with(files, options, &mut super::symbolize::Loaders::default())
}

/// [`load`] with symbol readers loaded ahead (`memprof record` reads the program's objects
/// while it runs: [`super::symbolize::Loaders`]); objects loaded here are kept in `loaders`.
pub(crate) fn load_with(
    files: &[PathBuf],
    options: LoadOptions,
    loaders: &mut super::symbolize::Loaders,
) -> Result<Loaded, Error> {
    load_with_first(files, options, loaders, None)
}

/// [`load_with`], the first file's profile already read (by [`follow`], while the program
/// ran) when `first` is given.
pub(crate) fn load_with_first(
    files: &[PathBuf],
    options: LoadOptions,
    loaders: &mut super::symbolize::Loaders,
    mut first: Option<Profile>,
) -> Result<Loaded, Error> {
    let recorded = options.recorded;
    let mut profiles = Vec::with_capacity(files.len());
    let mut labels = Vec::with_capacity(files.len());
    let mut messages = Vec::new();
    // The files read (a child's that cannot be read is left out).
    let mut names: Vec<String> = Vec::with_capacity(files.len());
    let mut processes = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let read = match first.take() {
            Some(p) if i == 0 => Ok(p),
            _ => Profile::read_file(f),
        };
        let mut p = match read {
            Ok(p) => p,
            Err(e) if recorded && i > 0 => {
                messages.push(Message::Warning(format!("a child's profile is left out: {e}")));
                continue;
            }
            Err(e) => return Err(e),
        };
        for w in &p.warnings {
            messages.push(Message::Warning(format!("{}: {w}", f.display())));
        }
        // Symbols were not written in process (the preload library leaves them to the
        // reader), or the process died first: resolve them from its modules.
        let unresolved: Vec<u64> = {
            let mut a: Vec<u64> = p
                .stacks
                .iter()
                .flat_map(|s| s.frames.iter().copied())
                .filter(|a| !p.symbols.contains_key(a))
                .collect();
            a.sort_unstable();
            a.dedup();
            a
        };
        if !unresolved.is_empty() && !p.modules.is_empty() {
            for note in super::symbolize::resolve_offline_with(&mut p, loaders) {
                messages.push(Message::Note(format!("{}: {note}", f.display())));
            }
            let ends_cleanly = (p.complete || p.stopped.is_some()) && p.warnings.is_empty();
            if recorded && ends_cleanly && p.header.version >= 2 {
                let fresh =
                    unresolved.iter().filter_map(|a| p.symbols.get(a).map(|s| (*a, s.as_slice())));
                if let Err(e) = super::format::append_symbols(f, &p.header, fresh) {
                    messages.push(Message::Warning(format!(
                        "{}: symbols not written into the file: {e}",
                        f.display()
                    )));
                }
            }
        }
        labels.push(format!("{}: {} samples", f.display(), p.counts.samples));
        names.push(f.display().to_string());
        processes.push(Process::of(f, &p));
        profiles.push(p);
    }
    let mut profile = super::merge::merge(profiles, &names)?;
    // Once per object, whichever of the files its frames came from.
    for note in super::symbolize::unresolved_objects(&profile) {
        messages.push(Message::Note(note));
    }
    if names.len() > 1 {
        // Each file's warnings are in `messages` already.
        profile.warnings.clear();
    }
    Ok(Loaded { profile, labels, messages, processes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::format::{self, Event};
    use crate::profile::{Sample, Stack, Symbol};
    use std::path::Path;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("memprof-load-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(path: &Path, p: &Profile, events: &[Event]) {
        std::fs::write(path, format::write_events(Vec::new(), p, events).unwrap()).unwrap();
    }

    #[test]
    fn appended_symbols_read_back_as_if_written_before_the_end() {
        let dir = scratch("append");
        let path = dir.join("p.mprof");
        let mut p = Profile::default();
        p.header.pid = 42;
        p.stacks.push(Stack { frames: vec![0x1234], truncated: false, label: 0 });
        let s = Sample { id: 1, stack: 0, time_ns: 0, thread: 1, addr: 0, size: 8, k: 1 };
        write(&path, &p, &[Event::Sample(s)]);
        let len = std::fs::metadata(&path).unwrap().len();
        let sym = vec![Symbol { function: "site".into(), file: None, line: Some(3) }];
        format::append_symbols(&path, &p.header, [(0x1234, sym.as_slice())]).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > len, "appended, not rewritten");
        let loaded = load(std::slice::from_ref(&path), LoadOptions::default()).unwrap();
        let q = &loaded.profile;
        assert!(q.complete && q.warnings.is_empty(), "{:?}", q.warnings);
        assert_eq!(q.symbols[&0x1234], sym);
        assert_eq!(q.site_name(0), "site");
        assert_eq!(loaded.labels, [format!("{}: 1 samples", path.display())]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unreadable_child_is_left_out_of_a_recording() {
        let dir = scratch("child");
        let root = dir.join("p.mprof");
        write(&root, &Profile::default(), &[]);
        let child = dir.join("p.7.mprof");
        std::fs::write(&child, b"").unwrap();
        let files = [root.clone(), child];
        assert!(load(&files, LoadOptions { recorded: false }).is_err());
        let loaded = load(&files, LoadOptions { recorded: true }).unwrap();
        assert_eq!(loaded.labels.len(), 1);
        assert!(matches!(&loaded.messages[..], [Message::Warning(w)] if w.contains("left out")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
