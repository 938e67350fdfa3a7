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
    /// Keep each process's timeline, which the HTML page reads (`profile/timeline.rs`).
    pub timeline: bool,
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
    /// Its resident bytes at the last reading and at most (`memprof record`'s readings).
    pub resident: Option<(u64, u64)>,
    /// What its allocator held free at the last reading of its mappings.
    pub allocator_free: Option<f64>,
    /// How it ended, when the recording says.
    pub ended: Option<super::Ended>,
    /// What a tree's HTML page shows of it, when its timeline was kept.
    pub(crate) page: Option<std::sync::Arc<Page>>,
}

/// What a tree's HTML page shows of one of its processes (`report/html.rs` §4).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Page {
    /// Its timeline, finished.
    pub(crate) timeline: super::timeline::Timeline,
    pub(crate) start_unix_ns: u64,
    pub(crate) cmdline: Vec<String>,
    /// How many stacks it has (its stacks follow the previous processes' in the merge).
    pub(crate) stacks: super::StackId,
    pub(crate) peak: super::Peak,
    /// Its live set at its peak: sample points per stack.
    pub(crate) peak_live: Vec<(super::StackId, u64)>,
}

impl Process {
    /// `p`'s totals; `page`: with what a tree's page shows of it, its timeline moved there
    /// (when it kept one: the merge of a tree keeps none).
    fn of(file: &std::path::Path, p: &mut Profile, page: bool) -> Process {
        let timeline = if page { p.timeline.take() } else { None };
        let page = match timeline {
            Some(tl) => {
                let mut peak_live: Vec<(super::StackId, u64)> = Vec::new();
                if let Some(at_peak) = p.peak_live() {
                    let mut by_stack: std::collections::BTreeMap<super::StackId, u64> =
                        Default::default();
                    for (&(stack, _), t) in &at_peak {
                        let k = by_stack.entry(stack).or_default();
                        *k = k.wrapping_add(t.k);
                    }
                    peak_live.extend(by_stack);
                }
                Some(std::sync::Arc::new(Page {
                    timeline: *tl,
                    start_unix_ns: p.header.start_unix_ns,
                    cmdline: p.header.cmdline.clone(),
                    stacks: p.stacks.len() as super::StackId,
                    peak: p.peak,
                    peak_live,
                }))
            }
            None => None,
        };
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
            resident: p
                .resident
                .last()
                .map(|last| (last.bytes, p.resident.iter().map(|r| r.bytes).max().unwrap_or(0))),
            allocator_free: p
                .splits
                .last()
                .map(|r| super::allocator::as_told(super::allocator::allocator_name(p), r))
                .map(|r| r.allocator_free()),
            ended: p.ended,
            page,
        }
    }
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
    load_with_folded(files, options, loaders, Vec::new())
}

/// [`load_with`], the profiles of some files already folded (by `memprof record`'s
/// collector, as it wrote them): those are not read again.
pub(crate) fn load_with_folded(
    files: &[PathBuf],
    options: LoadOptions,
    loaders: &mut super::symbolize::Loaders,
    mut folded: Vec<(PathBuf, Profile)>,
) -> Result<Loaded, Error> {
    let recorded = options.recorded;
    let mut profiles = Vec::with_capacity(files.len());
    let mut labels = Vec::with_capacity(files.len());
    let mut messages = Vec::new();
    // The files read (a child's that cannot be read is left out).
    let mut names: Vec<String> = Vec::with_capacity(files.len());
    let mut processes = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let read = match folded.iter().position(|(path, _)| path == f) {
            Some(at) => Ok(folded.swap_remove(at).1),
            None => Profile::read_file_with(f, options.timeline),
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
        processes.push(Process::of(f, &mut p, files.len() > 1));
        profiles.push(p);
    }
    let mut profile = super::merge::merge(profiles, &names)?;
    // Once per object, whichever of the files its frames came from.
    for note in super::symbolize::unresolved_objects_in(&profile, loaders.cache_dir()) {
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
        crate::sys::test_dir("load", name)
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
        assert!(load(&files, LoadOptions { recorded: false, ..Default::default() }).is_err());
        let loaded = load(&files, LoadOptions { recorded: true, ..Default::default() }).unwrap();
        assert_eq!(loaded.labels.len(), 1);
        assert!(matches!(&loaded.messages[..], [Message::Warning(w)] if w.contains("left out")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
