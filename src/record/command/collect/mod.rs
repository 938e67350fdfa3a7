//! `memprof record`'s collector: reads the shared rings of the processes it runs (see
//! [`crate::record::ring`]) and writes their profiles.
//!
//! # 1. The loop
//! One thread, at normal priority (it is the consumer the exact mode's backpressure waits
//! for). Every pass it lists the ring directory and attaches to new rings (mapping the file,
//! writing its own pid and start time into the header, then unlinking it: from then on the
//! program's threads wait for room while this process exists, `ring` §4), renews each
//! ring's heartbeat (a ring of another version is refused and said: `ring` §6), drains
//! each queue into a streaming
//! [`Recorder`] (the tracker the in-process drain thread would run: the same interning,
//! the same file, flushed at least every 50 ms) and, now and then, checks whether its
//! process is gone. Between passes it sleeps until there is work or something is due
//! (§8): a program that does nothing costs it a few wake-ups a second.
//!
//! The notes that follow are numbered across the folder, each in the file of the code it
//! describes: §2 the files written (`files.rs`), §3 the end of a process (`end.rs`), §4
//! modules and §5 frees and lost events (`deliver.rs`, the events handed to the recorder),
//! §6 resident memory (`resident.rs`), §7 which process made a ring, across PID namespaces
//! (`rings.rs`, the rings found and attached), §8 the sleep between passes (`sleep.rs`).
//! `publish.rs` holds the copy of the root process's profile that `--serve` reads.

mod blocks;
mod deliver;
mod end;
mod files;
mod publish;
mod resident;
mod rings;
mod sleep;
mod stacks;

pub(crate) use publish::Published;
pub(crate) use sleep::Wake;

use super::process;
use super::split_reader::SplitReader;
use crate::engine::clock::Stable;
use crate::engine::queue::Queue;
use crate::profile::{Ended, Profile};
use crate::record::env;
use crate::record::ring::{self, Ring};
use crate::session::recorder::{Named, Recorder};
use crate::sys::smaps::Memory;
use deliver::drain;
use end::finish_ring;
use files::open_output;
use resident::{read_resident, read_split};
use rings::attach_new;
use sleep::{Pass, Sleep};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What the collector is told of the run.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// The ring directory.
    pub(crate) dir: PathBuf,
    /// The program's pid.
    pub(crate) root_pid: u32,
    /// The program's profile (created by `record`, empty).
    pub(crate) root_output: PathBuf,
    /// `memprof attach`'s: the root process was running before its session started.
    pub(crate) attached: bool,
    /// Where the root process's profile is published while it runs (`--serve`).
    pub(crate) publish: Option<Arc<Published>>,
    /// How the root process ended, told by `record` once it waited for it (§3); `None`
    /// when it is not `record`'s child (`memprof attach`).
    pub(crate) root_ended: Option<Arc<RootEnded>>,
    /// Told the path of each module a sampled stack passes through, once each, as stacks
    /// are folded: `record` reads their symbols ahead of the program's end (those of a
    /// module no sample passes through are never needed).
    pub(crate) sampled_modules: Option<std::sync::mpsc::Sender<String>>,
}

/// How the root process ended, as its parent learned it: set once.
#[derive(Debug, Default)]
pub(crate) struct RootEnded(std::sync::OnceLock<Option<Ended>>, Wake);

impl RootEnded {
    /// Tells the collector (`None`: no way of ending could be told), and wakes it.
    pub(crate) fn set(&self, e: Option<Ended>) {
        let _ = self.0.set(e);
        self.1.set();
    }
}

/// What the collector leaves when it is finished.
#[derive(Default)]
pub(crate) struct Finished {
    /// Lines for stderr.
    pub(crate) messages: Vec<String>,
    /// The profile of every file written, as folded while writing it, by its path.
    pub(crate) profiles: Vec<(PathBuf, Profile)>,
    /// The files whose writing failed (a full disk): each keeps what was written before.
    pub(crate) unwritten: Vec<PathBuf>,
}

/// A running collector.
pub(crate) struct Collector {
    stop: Arc<Wake>,
    thread: std::thread::JoinHandle<Finished>,
}

impl Collector {
    /// Starts collecting.
    pub(crate) fn start(plan: Plan) -> std::io::Result<Collector> {
        // Before the program runs: the TSC's rate is then measured over its whole run.
        crate::engine::clock::reference();
        let stop = Arc::new(Wake::default());
        let flag = stop.clone();
        let thread =
            std::thread::Builder::new().name("memprof-collect".into()).spawn(move || {
                raise_priority();
                run(plan, &flag)
            })?;
        Ok(Collector { stop, thread })
    }

    /// Collects what is left (every process of the run has ended), finishes every file and
    /// returns the messages for stderr and the profiles.
    pub(crate) fn finish(self) -> Finished {
        self.stop.set();
        self.thread.join().unwrap_or_else(|_| Finished {
            messages: vec!["the profile collector failed".into()],
            ..Finished::default()
        })
    }
}

/// Gives the collector thread the highest priority of the ordinary class when memprof may
/// (root, or `CAP_SYS_NICE`): a program of hundreds of busy threads would otherwise leave it
/// a share of the cores too small to keep up (one thread's among hundreds), its queue full,
/// and the program's threads waiting for room. A thread that waited in a sample path
/// runs late holding the block it sampled, so sampled blocks outlive the program's others,
/// and the live heap and its peak read high. At nice −20 the collector's weight is some
/// ninety threads' (it sleeps between its passes, so it takes no more than it needs).
/// Without the right the priority stays as it was and the waits do the throttling.
fn raise_priority() {
    // SAFETY: setpriority on the calling thread (its tid) changes only its nice value;
    // failure (EACCES, EPERM) changes nothing.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, -20);
    }
}

/// One attached ring.
struct Attached {
    ring: Ring,
    queue: Queue,
    /// The process, as this process's `/proc` names it (§7); 0 when it was not found.
    pid: u32,
    /// The pid its profile is named by and records: `pid`, or the ring's own when not found.
    shown: u32,
    /// Its parent as `/proc` names it, for a process whose own namespace names it otherwise.
    ppid: Option<u32>,
    proc_start: u64,
    /// Rings of this pid attached before this one.
    image: u32,
    /// Set up once the process's session runs.
    out: Option<Output>,
    /// A newer ring of the same pid was attached: this image was replaced.
    replaced: bool,
    done: bool,
    /// The process's memory files (§6).
    memory: Memory,
    /// The exit code of the process seen as a zombie (a wait status), when it was.
    zombie_status: Option<i32>,
    /// When the collector first saw that the process said it is ending (0: not yet).
    ending_seen: u64,
    /// A pidfd of the process, opened while it ran: what tells its exit code after its
    /// parent reaped it (§3).
    pidfd: Option<std::os::fd::OwnedFd>,
}

struct Output {
    /// Stacks with frames outside every listed module were seen, not yet looked up.
    unknown: bool,
    recorder: Recorder,
    /// The process's clock readings to session time (the same every time: §5).
    clock: Stable,
    /// Frees the queue kept aside, waiting for their blocks' allocations (§5): the block
    /// and the time of its free.
    waiting: Vec<(Named, u64)>,
    /// Frees kept aside and folded since.
    replayed: u64,
    /// The process's live blocks by address, when its session names its frees by address
    /// (the exact mode: `engine::live` §6).
    blocks: Option<blocks::Blocks>,
    epoch: u64,
    interval: f64,
    /// Bytes of the side log read so far.
    log_read: u64,
    /// The largest live heap a split was asked for at (§6).
    split_peak: f64,
    /// The thread that reads the process's `/proc/PID/smaps` (§6).
    split_reader: Option<SplitReader>,
    /// Stacks whose modules were told for their symbols to be read ahead.
    warmed_stacks: usize,
    /// The stacks the process's threads sent whole, by key (`engine::known`).
    sent: stacks::SentStacks,
}

fn run(plan: Plan, stop: &Wake) -> Finished {
    let mut done = Finished::default();
    let mut rings: Vec<Attached> = Vec::new();
    let mut images: HashMap<u32, u32> = HashMap::new();
    let stem = env::tree_dir(&plan.root_output.display().to_string());
    let mut sleep = Sleep::new(ring::map_bell(&plan.dir.display().to_string()));
    // What wakes the collector in this process: the stop first (`Sleep::poll`).
    let mut words = vec![stop];
    words.extend(plan.root_ended.as_deref().map(|r| &r.1));
    words.extend(plan.publish.as_deref().map(Published::wake));
    let mut last_look = 0u64;
    let mut warm = plan.sampled_modules.clone().map(|tell| (tell, HashSet::new()));
    loop {
        // New rings and ended processes are looked for when the bell rang, when `record`
        // saw its program end, and now and then (§8), not on every pass.
        let rang = sleep.rang(&words);
        // Read before the pass: a stop seen now follows the end of every process, so this
        // pass sees all they wrote. And read after the words: a stop said since they were
        // read moves one again, and the sleep after this pass returns at once.
        let stopping = stop.is_set();
        let now = crate::engine::clock::monotonic_ns();
        let look = rang || stopping || now.saturating_sub(last_look) >= sleep::LOOK_EVERY_NS;
        if look {
            last_look = now;
            attach_new(&plan.dir, &mut rings, &mut images, &mut done.messages);
        }
        let mut pass = Pass::new(now);
        pass.due_at(last_look.saturating_add(sleep::LOOK_EVERY_NS));
        for r in rings.iter_mut().filter(|r| !r.done) {
            pass_ring(r, &plan, &stem, now, look, stopping, &mut pass, &mut done);
        }
        if let Some((tell, told)) = &mut warm {
            for r in rings.iter_mut() {
                tell_modules(r, tell, told);
            }
        }
        rings.retain(|r| !r.done);
        if stopping {
            if let Some(publish) = &plan.publish {
                publish.end();
            }
            if std::env::var_os("MEMPROF_DEBUG_PEAK").is_some() {
                eprintln!("memprof: collector passes {}", sleep::passes());
            }
            return done;
        }
        sleep.between_passes(&rings, &words, &pass, now);
    }
}

/// Tells `tell` the path of each module that the stacks folded since the last call pass
/// through, unless `told` holds it already (the symbols read ahead: `record/command/run`).
fn tell_modules(
    r: &mut Attached,
    tell: &std::sync::mpsc::Sender<String>,
    told: &mut HashSet<String>,
) {
    let Some(out) = &mut r.out else {
        return;
    };
    let p = out.recorder.profile();
    // The range of the module last looked up, whose path `told` holds by then: a stack's
    // frames run through few modules, mostly one after another, and a look-up is a scan
    // of the modules and a hash of a path.
    let mut last = None;
    for stack in p.stacks.get(out.warmed_stacks..).unwrap_or_default() {
        for &addr in &stack.frames {
            let at = addr.saturating_sub(1);
            if last.is_some_and(|(start, end)| start <= at && at < end) {
                continue;
            }
            let Some(m) = p.modules.iter().find(|m| m.start <= at && at < m.end) else {
                continue;
            };
            last = Some((m.start, m.end));
            if !told.contains(&m.path) {
                told.insert(m.path.clone());
                let _ = tell.send(m.path.clone());
            }
        }
    }
    out.warmed_stacks = p.stacks.len();
}

/// One ring's part of a pass (§1): its heartbeat, its output opened, its queue drained, its
/// memory read, its end looked for (when `look`s are due, or it said it is ending) and,
/// once its process is gone, its file finished. What is due next goes to `pass`.
#[allow(clippy::too_many_arguments)]
fn pass_ring(
    r: &mut Attached,
    plan: &Plan,
    stem: &str,
    now: u64,
    look: bool,
    stopping: bool,
    pass: &mut Pass,
    done: &mut Finished,
) {
    let messages = &mut done.messages;
    r.ring.header().consumer.heartbeat_ns.store(now, Ordering::Relaxed);
    if r.out.is_none() {
        open_output(r, plan, stem, messages);
    }
    // How full the ring was: the cells taken (an event takes one or more), of all.
    let before = r.queue.head();
    let n = drain(r);
    let cells = r.queue.head().wrapping_sub(before);
    pass.fullest = pass.fullest.max(cells as f64 / r.queue.capacity() as f64);
    // The exiting process waits for this one (`RingHeader::last_look`).
    let asked = r.ring.header().last_look.load(Ordering::Acquire) == ring::LOOK_ASKED;
    let read = read_resident(r, now, asked);
    read_split(r, now, asked);
    if asked {
        r.ring.header().last_look.store(ring::LOOK_TAKEN, Ordering::Release);
    }
    if n > 0 || read {
        // Written, and flushed within `FLUSH_EVERY` of it.
        pass.due_at(now.saturating_add(sleep::FLUSH_EVERY_NS));
    }
    if r.out.is_some() {
        pass.due_at(r.memory.resident_due());
    }
    // A process that said it is ending is looked at often for a while (§8).
    if r.ending_seen == 0 && r.ring.header().ending.load(Ordering::Acquire) != 0 {
        r.ending_seen = now;
    }
    let ending = r.ending_seen != 0 && now.saturating_sub(r.ending_seen) < sleep::ENDING_FOR_NS;
    if ending {
        pass.due_at(now.saturating_add(sleep::ENDING_EVERY_NS));
    }
    let root = r.pid == plan.root_pid && r.image == 0;
    let mut gone = (look || ending)
        && (stopping
            || r.replaced
            || process::process_gone(r.pid, r.proc_start, &mut r.zombie_status));
    // The root process's way of ending comes from `record`, which waits for it right
    // after it ended: its ring is finished once that is known (or at the stop).
    if gone && root && !stopping && !r.replaced {
        if let Some(told) = &plan.root_ended {
            gone = told.0.get().is_some();
        }
    }
    if let (Some(publish), Some(out), true) = (&plan.publish, &r.out, root) {
        publish.offer(out.recorder.profile(), false);
    }
    if gone {
        let told = plan.root_ended.as_ref().filter(|_| root).and_then(|t| t.0.get());
        finish_ring(r, told.copied().flatten(), messages);
        if let Some(out) = &mut r.out {
            let rec = &mut out.recorder;
            if let (Some(_), Some(path)) = (rec.error(), rec.path()) {
                done.unwritten.push(path.to_path_buf());
            }
            if let (Some(publish), true) = (&plan.publish, root) {
                publish.offer(rec.profile(), true);
            }
            if let Some(path) = rec.path().map(Path::to_path_buf) {
                done.profiles.push((path, rec.take_profile()));
            }
        }
    }
}
