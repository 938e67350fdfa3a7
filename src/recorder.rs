//! The built-in [`Tracker`]: records every sample into a [`Profile`], and optionally
//! streams it to a `.mprof` file as it goes.
//!
//! Call stacks are interned as they arrive; symbols are resolved once, when the session
//! stops, in this process (where the code is mapped), and written into the profile, so a
//! report needs neither this process nor its binaries.

use crate::error::Error;
use crate::profile::format::Writer;
use crate::profile::{
    symbolize, Free, GcCycle, Header, Lost, Move, Profile, Sample, Stack, StackId,
};
use crate::tracker::{Allocation, Deallocation, Reallocation, SessionInfo, Stats, Tracker};
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

/// Builds a [`Profile`] from a session's samples.
#[derive(Default)]
pub struct Recorder {
    profile: Profile,
    interned: HashMap<Stack, StackId>,
    output: Option<(PathBuf, Option<Writer<BufWriter<File>>>)>,
    error: Option<Error>,
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

    /// The profile recorded so far.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The profile, and the first error met while writing the file (if any).
    pub fn finish(self) -> Result<Profile, Error> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.profile),
        }
    }

    /// The profile, ignoring file errors.
    pub fn into_profile(self) -> Profile {
        self.profile
    }

    fn write(&mut self, f: impl FnOnce(&mut Writer<BufWriter<File>>) -> Result<(), Error>) {
        if let Some((_, Some(w))) = &mut self.output {
            if let Err(e) = f(w) {
                self.error.get_or_insert(e);
                if let Some((_, w)) = &mut self.output {
                    *w = None;
                }
            }
        }
    }
}

impl Tracker for Recorder {
    type Token = ();

    fn started(&mut self, info: &SessionInfo) {
        self.profile.header = Header {
            interval: info.interval,
            depth: info.depth as u32,
            pid: std::process::id(),
            executable: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            cmdline: std::env::args().collect(),
            start_unix_ns: info.start_unix_ns,
            ..Header::default()
        };
        self.profile.modules = symbolize::current_modules();
        if let Some((path, writer)) = &mut self.output {
            let opened = File::create(&*path)
                .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))
                .and_then(|f| Writer::new(BufWriter::new(f), &self.profile.header));
            match opened {
                Ok(w) => *writer = Some(w),
                Err(e) => {
                    self.error.get_or_insert(e);
                }
            }
        }
        let modules = self.profile.modules.clone();
        self.write(|w| modules.iter().try_for_each(|m| w.write_module(m)));
    }

    fn alloc(&mut self, a: &Allocation<'_>) -> Option<()> {
        let stack = Stack {
            frames: a.callstack.frames().iter().map(|&f| f as u64).collect(),
            truncated: a.callstack.truncated(),
        };
        let id = match self.interned.get(&stack) {
            Some(&id) => id,
            None => {
                let id = self.profile.stacks.len() as StackId;
                self.write(|w| w.write_stack(id, &stack));
                self.profile.stacks.push(stack.clone());
                self.interned.insert(stack, id);
                id
            }
        };
        let sample = Sample {
            id: a.id,
            stack: id,
            time_ns: a.time_ns,
            thread: a.thread,
            addr: a.addr as u64,
            size: a.size as u64,
            k: a.k,
        };
        self.write(|w| w.write_sample(&sample));
        self.profile.samples.push(sample);
        Some(())
    }

    fn realloc(&mut self, _: &mut (), r: &Reallocation) {
        let m = Move {
            id: r.id,
            time_ns: r.time_ns,
            new_addr: r.new_addr as u64,
            new_size: r.new_size as u64,
        };
        self.write(|w| w.write_move(&m));
        self.profile.moves.push(m);
    }

    fn dealloc(&mut self, _: (), d: &Deallocation) {
        let f = Free { id: d.id, time_ns: d.time_ns };
        self.write(|w| w.write_free(&f));
        self.profile.frees.push(f);
    }

    fn gc_cycle(&mut self, cycle: &GcCycle) {
        self.write(|w| w.write_gc_cycle(cycle));
        self.profile.gc_cycles.push(*cycle);
    }

    fn stopped(&mut self, stats: &Stats) {
        self.profile.lost = Lost {
            events: stats.lost_events,
            untracked: stats.untracked,
            callback_panics: stats.callback_panics,
        };
        let addrs: BTreeSet<u64> =
            self.profile.stacks.iter().flat_map(|s| s.frames.iter().copied()).collect();
        self.profile.symbols = symbolize::resolve_in_process(addrs.iter().copied());
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
    }
}
