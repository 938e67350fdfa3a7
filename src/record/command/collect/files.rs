//! A ring's profile opened once its process's session runs, and the recorder that writes
//! it started.
//!
//! # 2. Files
//! The first ring of the program's own pid writes the output `record` created; any other
//! ring (a followed child, or a further image after `exec`) creates `<pid>[.<n>].mprof`
//! exclusively in the tree's directory beside it (`<output>.d/`, which `record` created
//! 0700 before the program ran), as the preload library does in-process: `pid` as this
//! process sees it (§7), and a name taken is never opened again (the next `n` is tried).
//! A ring whose process never got its session running leaves no file.

use super::super::split_reader::SplitReader;
use super::{Attached, Output, Plan};
use crate::config::Unwinder;
use crate::engine::clock::Stable;
use crate::record::env;
use crate::record::ring;
use crate::session::recorder::{ProcessFacts, Recorder};
use crate::session::{SessionInfo, Tracker};
use crate::sys::smaps::Memory;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Once the ring's process runs its session: opens its profile and starts its recorder.
pub(super) fn open_output(r: &mut Attached, plan: &Plan, stem: &str, messages: &mut Vec<String>) {
    let h = r.ring.header();
    if h.state.load(Ordering::Acquire) != 1 {
        return;
    }
    let root = r.pid == plan.root_pid && r.image == 0;
    let opened = if root {
        open_root(&plan.root_output).map(|f| Some((plan.root_output.clone(), f)))
    } else {
        Ok(None)
    };
    let opened = match opened {
        Ok(x) => Ok(x),
        Err(e) => {
            messages.push(e);
            Err(())
        }
    };
    let (log, _) = r.ring.log_records(0, u64::MAX);
    let mut facts = ProcessFacts {
        pid: r.shown,
        ns_pid: if h.ns_pid != r.shown { h.ns_pid } else { 0 },
        attached: root && plan.attached,
        ..ProcessFacts::default()
    };
    // Only the process's facts are read here: module lists wait for their side events.
    let mut read = 0;
    for (kind, payload) in &log {
        if *kind == ring::LOG_PROCESS {
            if let Some((exe, args, ppid)) = ring::decode_process(payload) {
                facts.executable = exe;
                facts.cmdline = args;
                facts.ppid = r.ppid.unwrap_or(ppid);
            }
            read += 5 + payload.len() as u64;
        } else {
            break;
        }
    }
    let interval = f64::from_bits(h.interval_bits.load(Ordering::Relaxed));
    let info = SessionInfo {
        interval,
        depth: h.depth.load(Ordering::Relaxed) as usize,
        unwinder: Unwinder::Auto,
        start_unix_ns: h.start_unix_ns.load(Ordering::Relaxed),
    };
    let mut recorder = match opened {
        Ok(Some((path, file))) => Recorder::streaming(&path, file),
        // A child's file is created at its first sample: a child that only calls `exec`
        // leaves none.
        Ok(None) => {
            let (stem, pid, image) = (stem.to_owned(), r.shown, r.image);
            Recorder::streaming_deferred(Box::new(move || {
                create_child(&stem, pid, image).map_err(crate::error::Error::Other)
            }))
        }
        // The queue is still drained (its events dropped), so the program never waits
        // for a collector that cannot write.
        Err(()) => Recorder::new(),
    }
    .offline_symbols()
    .of_process(facts)
    .folding();
    recorder.started(&info);
    let by_address = crate::engine::live::names_by_address(interval, true);
    if by_address {
        // Its map by address keeps the live blocks (`deliver::lend_live_blocks`).
        recorder.keep_live_outside();
    }
    let memory = Memory::open(Some(r.pid), plan.dir.display().to_string());
    r.out = Some(Output {
        split_reader: SplitReader::start(memory, r.ring.clock(), r.pid),
        unknown: false,
        recorder,
        clock: Stable::new(r.ring.clock()),
        waiting: Vec::new(),
        replayed: 0,
        blocks: by_address.then(Default::default),
        epoch: h.epoch.load(Ordering::Relaxed),
        interval,
        log_read: read,
        split_peak: 0.0,
        warmed_stacks: 0,
        sent: Default::default(),
    });
    r.ring.log_consumed(read);
}

/// Opens the program's profile, which `record` created empty.
fn open_root(path: &Path) -> Result<File, String> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot open the profile {}: {e}", path.display()))?;
    let meta = file.metadata().map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if !meta.is_file() || meta.len() != 0 {
        return Err(format!(
            "{} is no longer the empty file record created; it is left alone",
            path.display()
        ));
    }
    Ok(file)
}

/// Creates `<dir>/<pid>[.<n>].mprof` exclusively, from the `image`th name on.
fn create_child(dir: &str, pid: u32, image: u32) -> Result<(PathBuf, File), String> {
    for n in image..image + 100 {
        let path = PathBuf::from(env::child_output(dir, pid, n));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create the profile {}: {e}", path.display())),
        }
    }
    Err(format!("cannot create a profile named {dir}/{pid}.*.mprof: all names taken"))
}
