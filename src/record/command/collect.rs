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
//! the same file, flushed at least every 50 ms) and checks whether its process is gone. A
//! pass that found little to do sleeps 2 ms.
//!
//! # 2. Files
//! The first ring of the program's own pid writes the output `record` created; any other
//! ring (a followed child, or a further image after `exec`) creates `<pid>[.<n>].mprof`
//! exclusively in the tree's directory beside it (`<output>.d/`, which `record` created
//! 0700 before the program ran), as the preload library does in-process: `pid` as this
//! process sees it (§7), and a name taken is never opened again (the next `n` is tried).
//! A ring whose process never got its session running leaves no file.
//!
//! # 3. The end of a process
//! A ring is finished when its process is gone (no `/proc/<pid>`, a zombie, or a pid reused
//! by a process with another start time), when a newer ring of the same pid appears (the
//! image was replaced by `exec`), or when `record` stops the collector after the program and
//! its descendants were waited for. Whatever ended the process, its queue is drained to the
//! last published event ([`Queue::drain_abandoned`]), the side log read to its end, and the
//! file finished with its end record: a SIGKILL loses nothing that was sampled before it.
//!
//! Before the end record goes how the process ended ([`Ended`]), from what it said (its
//! exit handler, registered with `on_exit`, gives `exit`'s status; `_exit` its own; `exec`
//! and a detach say so), else from its wait status: `record`'s for the program it ran
//! ([`Plan::root_ended`], with the OOM killer named when the kernel counted a kill; the
//! root's ring waits for it), else the zombie's exit code in `/proc/<pid>/stat`, else, once
//! its parent reaped it, the exit code the kernel keeps for the pidfd the collector opened
//! when it attached (`PIDFD_INFO_EXIT`, Linux 6.15 and later). A signal seen there wins over
//! what the process said (it came after). A child killed by a signal before the collector
//! attached to its ring (in its first few milliseconds) and reaped before it looked leaves
//! nothing to read: its way of ending stays unknown.
//!
//! # 4. Modules
//! Module lists come from the side log, each at its place among the events. A new stack
//! with a frame outside every listed module (a library `dlopen`ed since the last list)
//! makes the collector read `/proc/<pid>/maps` while the process lives; the object files
//! named there give the missing modules ([`process::modules_of`]).
//!
//! # 5. Frees, and lost events
//! The collector keeps no map of the program's live blocks. A free's event names its block
//! as the program's live table holds it (`engine::live` §5): the key of its stack, its
//! size, sample points and allocation time. The recorder keys the stacks it interns by the
//! same function of their raw frames, so the key finds the stack, and the block is taken
//! out of the aggregates by (stack, size, allocation unit). The allocation time is the
//! program's raw clock reading, converted again: the conversion is a fixed function of the
//! reading ([`Stable`]), so it gives the time the allocation's event was given. A key that
//! names several stacks (two module generations with the same raw frames, or a hash
//! collision) is resolved by which of them holds such a live block, newest first. A free
//! that finds no live block is dropped, as one whose allocation was never read (a free
//! before the allocation never comes through the ring: the program frees a block only after
//! its allocation's event was published).
//!
//! After each drain the collector takes the frees the queue kept aside because they did not
//! fit (`engine::queue` §3) and folds each once its block's allocation has been read (its
//! block is live). The file's Lost record counts what was lost, how many of those were
//! frees replayed and how many frees were lost for good (the table was full: that many
//! blocks may show as live); `record` says the same on stderr when anything was lost.
//!
//! # 6. Resident memory
//! Every [`crate::profile::RESIDENT_EVERY_MS`] milliseconds the collector reads each process's resident
//! size from its `/proc/PID/statm` (opened when its ring was attached, so a pid reused
//! later reads nothing) and records it in the profile ([`Profile::resident`]) with the
//! time on the program's clock: nothing is added to the program's sample path. A process
//! that has exited reads nothing, so the last reading is its last resident size alive.
//!
//! Now and then a thread of its own per process ([`super::split_reader`], which says why
//! not the loop) reads the process's `/proc/PID/smaps`, and the loop records its resident
//! memory by kind of mapping beside the live heap folded when the reading began
//! ([`crate::profile::ResidentSplit`], kinds in `sys::smaps`): what explains the gap between the two. The
//! kernel walks the page tables to write that file, a few milliseconds for a few hundred
//! megabytes, so the next reading waits [`crate::profile::SPLIT_EVERY_MS`] or the time the
//! last one took divided by [`crate::profile::SPLIT_COST_SHARE`], whichever is longer. A process of
//! [`ring::LOOK_WANTED_BYTES`] or more resident is asked for a last look: its exit handler
//! sets `last_look` and waits (100 ms at most) until the collector, after draining its
//! queue, has read both files once more (itself, and with its reader thread let go); the
//! split at the end is then the end's. A live
//! heap a tenth above the largest one a split was read beside (and 32 MiB or more) is
//! read as soon as the cost bound allows, without waiting for [`crate::profile::SPLIT_EVERY_MS`]:
//! so a split lies near the heap's peak, where the process was largest.
//!
//! # 7. Which process, across PID namespaces
//! Everything above reads `/proc/<pid>`, so a ring's pid must be the process's in this
//! process's `/proc`, not in its own PID namespace: two programs started by `unshare -p -f`
//! are both pid 1 there, and `/proc/1` here is `init`. The ring's header says how `/proc`
//! names its maker, and whether the maker found that `/proc` to be the collector's view
//! (`ring` §5); when it could not, [`process::ring_owner`] finds the maker among this
//! `/proc`'s processes by its start time, its innermost pid and, among several, the ring's
//! file in its maps. Images of one process follow one another by that pid (a namespace's
//! pid 1 replaces no other namespace's pid 1), the file is named by it and records it, and
//! the parent is the one `/proc` names. A maker not found has ended (nothing more comes
//! through its ring): its ring is drained and finished at once, its file named by the
//! header's pid, and no `/proc` file is read for it.

use super::process;
use super::split_reader::SplitReader;
use crate::config::Unwinder;
use crate::engine::clock::Stable;
use crate::engine::queue::{Event, EventKind, Queue};
use crate::profile::{Ended, EndedHow, GcCycle, Profile, Resident, Stopped};
use crate::record::env;
use crate::record::ring::{self, Ring};
use crate::session::driver::MAX_WAITING_FREES;
use crate::session::recorder::{Named, ProcessFacts, Recorder};
use crate::session::{Allocation, Callstack, Poll, SessionInfo, Stats, Tracker};
use crate::sys::smaps::Memory;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::panic::{catch_unwind, AssertUnwindSafe};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

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
}

/// How the root process ended, as its parent learned it: set once.
#[derive(Debug, Default)]
pub(crate) struct RootEnded(std::sync::OnceLock<Option<Ended>>);

impl RootEnded {
    /// Tells the collector (`None`: no way of ending could be told).
    pub(crate) fn set(&self, e: Option<Ended>) {
        let _ = self.0.set(e);
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

/// The root process's profile as folded so far, for `--serve`. A request asks for it and
/// waits; the collector copies its fold in between two drains (so serving costs the
/// collector nothing until a request comes, and a snapshot is at most one pass old).
#[derive(Debug, Default)]
pub(crate) struct Published {
    state: Mutex<PublishedState>,
    wanted: AtomicBool,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct PublishedState {
    /// The copy (tables and aggregates; not the timeline), once the session runs.
    profile: Option<Profile>,
    /// Copies made so far.
    generation: u64,
    /// No newer copy will come (the root process is finished).
    ended: bool,
}

impl Published {
    fn lock(&self) -> std::sync::MutexGuard<'_, PublishedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings `mirror` up to the profile as folded now (waiting at most a second for the
    /// collector's next pass). False before the session has started.
    pub(crate) fn snapshot_into(&self, mirror: &mut Profile) -> bool {
        let mut s = self.lock();
        if !s.ended {
            let seen = s.generation;
            self.wanted.store(true, Ordering::Release);
            s = self
                .ready
                .wait_timeout_while(s, Duration::from_secs(1), |s| s.generation == seen && !s.ended)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        match &s.profile {
            Some(p) => {
                mirror_into(p, mirror);
                true
            }
            None => false,
        }
    }

    /// Copies `p` in when a request asked for it; `last`: no newer copy will come.
    fn offer(&self, p: &Profile, last: bool) {
        if !last && !self.wanted.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut s = self.lock();
        mirror_into(p, s.profile.get_or_insert_with(Profile::default));
        s.generation += 1;
        s.ended |= last;
        drop(s);
        self.ready.notify_all();
    }

    /// No newer copy will come.
    fn end(&self) {
        self.lock().ended = true;
        self.ready.notify_all();
    }
}

/// Brings `mirror` up to `p`: the stacks, labels and modules added since it was last
/// brought up (its symbols are kept), and the aggregates (not the timeline).
fn mirror_into(p: &Profile, mirror: &mut Profile) {
    if mirror.header != p.header {
        *mirror = Profile { header: p.header.clone(), ..Profile::default() };
    }
    let known = mirror.stacks.len().min(p.stacks.len());
    mirror.stacks.extend_from_slice(&p.stacks[known..]);
    let known = mirror.labels.len().min(p.labels.len());
    mirror.labels.extend_from_slice(&p.labels[known..]);
    if mirror.modules != p.modules {
        mirror.modules.clone_from(&p.modules);
    }
    for (addr, sym) in &p.symbols {
        mirror.symbols.entry(*addr).or_insert_with(|| sym.clone());
    }
    mirror.lost = p.lost;
    mirror.stopped = p.stopped;
    mirror.clone_aggregates_from(p);
    // Whole as of now (the recording goes on).
    mirror.complete = true;
}

/// A running collector.
pub(crate) struct Collector {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Finished>,
}

impl Collector {
    /// Starts collecting.
    pub(crate) fn start(plan: Plan) -> std::io::Result<Collector> {
        // Before the program runs: the TSC's rate is then measured over its whole run.
        crate::engine::clock::reference();
        let stop = Arc::new(AtomicBool::new(false));
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
        self.stop.store(true, Ordering::Release);
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
    epoch: u64,
    interval: f64,
    /// Bytes of the side log read so far.
    log_read: u64,
    /// The largest live heap a split was asked for at (§6).
    split_peak: f64,
    /// The thread that reads the process's `/proc/PID/smaps` (§6).
    split_reader: Option<SplitReader>,
}

fn run(plan: Plan, stop: &AtomicBool) -> Finished {
    let mut done = Finished::default();
    let messages = &mut done.messages;
    let mut rings: Vec<Attached> = Vec::new();
    let mut images: HashMap<u32, u32> = HashMap::new();
    let stem = env::tree_dir(&plan.root_output.display().to_string());
    let mut last_look = 0u64;
    loop {
        // Read before the pass: a stop seen now follows the end of every process, so this
        // pass sees all they wrote.
        let stopping = stop.load(Ordering::Acquire);
        // New rings and ended processes are looked for every few milliseconds, not on every
        // pass: a busy pass follows the last at once.
        let now = crate::engine::clock::monotonic_ns();
        let look = stopping || now.saturating_sub(last_look) >= LOOK_EVERY_NS;
        if look {
            last_look = now;
            attach_new(&plan.dir, &mut rings, &mut images, messages);
        }
        let mut fullest = 0f64;
        for r in rings.iter_mut().filter(|r| !r.done) {
            r.ring.header().consumer.heartbeat_ns.store(now, Ordering::Relaxed);
            if r.out.is_none() {
                open_output(r, &plan, &stem, messages);
            }
            let n = drain(r);
            fullest = fullest.max(n as f64 / r.queue.capacity() as f64);
            // The exiting process waits for this one (`RingHeader::last_look`).
            let asked = r.ring.header().last_look.load(Ordering::Acquire) == ring::LOOK_ASKED;
            read_resident(r, now, asked);
            read_split(r, now, asked);
            if asked {
                r.ring.header().last_look.store(ring::LOOK_TAKEN, Ordering::Release);
            }
            let root = r.pid == plan.root_pid && r.image == 0;
            let mut gone = look
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
        rings.retain(|r| !r.done);
        if stopping {
            if let Some(publish) = &plan.publish {
                publish.end();
            }
            return done;
        }
        // As the in-process drain thread does: an idle queue is drained every 2 ms, a busy
        // one every millisecond, one that was half full again at once. The pause keeps the
        // consumer well behind the producers: a consumer that catches up reads the slots
        // they are about to write, and both slow down (`Queue::drain`).
        if fullest < 1024.0 / 16384.0 {
            std::thread::sleep(Duration::from_millis(2));
        } else if fullest < 0.5 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Reads the process's resident memory into its profile when a reading is due at `now`
/// or `force`d (§6).
fn read_resident(r: &mut Attached, now: u64, force: bool) {
    let Some(out) = &mut r.out else {
        return;
    };
    let Some(bytes) = r.memory.resident(now, force) else {
        return;
    };
    let time_ns = out.clock.now_ns();
    out.recorder.resident(Resident { time_ns, bytes });
    // A last look at its mappings when it exits, if it is large (`RingHeader::last_look`);
    // an asked or taken look is left alone.
    let look = &r.ring.header().last_look;
    let (from, to) = if bytes >= ring::LOOK_WANTED_BYTES {
        (0, ring::LOOK_WANTED)
    } else {
        (ring::LOOK_WANTED, 0)
    };
    let _ = look.compare_exchange(from, to, Ordering::AcqRel, Ordering::Relaxed);
}

/// Folds the process's resident memory by kind of mapping into its profile, beside the
/// live heap folded then (§6): the readings its reader thread finished, and, `force`d, a
/// last look read here (the exiting process waits for it).
fn read_split(r: &mut Attached, now: u64, force: bool) {
    let Some(out) = &mut r.out else {
        return;
    };
    // What memprof's library mapped in the process is anonymous memory, counted with the
    // allocator's by the mappings alone.
    let mapped = r.ring.header().own_mapped.load(Ordering::Relaxed);
    let live = out.recorder.profile().live_bytes;
    if let Some(reader) = &mut out.split_reader {
        // A new peak of the heap (a tenth above the largest one asked for, and 32 MiB or
        // more) is read as soon as the cost bound allows: the split at the heap's peak is
        // what explains a process's largest size.
        if live >= out.split_peak * 1.1 && live >= ring::LOOK_WANTED_BYTES as f64 {
            out.split_peak = live;
            reader.peak();
        }
        for reading in reader.take(live) {
            let time_ns = out.clock.session_ns(reading.at);
            out.recorder.split(reading.kinds.split(time_ns, mapped, reading.live));
        }
    }
    if force {
        // The last one: no reading of the thread's may follow it.
        out.split_reader = None;
        // The reading's moment is its start: the kernel walks the mappings from there on.
        let time_ns = out.clock.now_ns();
        if let Some(k) = r.memory.kinds(now, true) {
            out.recorder.split(k.split(time_ns, mapped, live));
        }
    }
}

/// How often the collector looks for new rings and ended processes.
const LOOK_EVERY_NS: u64 = 5_000_000;

/// Attaches to the rings that appeared in `dir` (§1), oldest image first per pid; each
/// ring's process found as this process's `/proc` names it (§7).
fn attach_new(
    dir: &Path,
    rings: &mut Vec<Attached>,
    images: &mut HashMap<u32, u32>,
    messages: &mut Vec<String>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut found: Vec<(u32, u32, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            let (pid, n) = name.strip_suffix(".ring")?.split_once('.')?;
            Some((pid.parse().ok()?, n.parse().ok()?, e.path()))
        })
        .collect();
    found.sort();
    let mut mapped = Vec::new();
    for (pid, n, path) in found {
        match map_ring(&path, pid) {
            Ok(Some((ring, queue, file))) => {
                if ring.header().pid != pid {
                    continue;
                }
                let owner = process::ring_owner(ring.header(), file);
                let made = ring.header().made_ns;
                mapped.push((owner.unwrap_or(0), made, n, pid, ring, queue));
            }
            Ok(None) => {}
            Err(e) => messages.push(e),
        }
    }
    // The images of one process in the order they were made (their rings' names may
    // differ: an image that mounted its namespace's own `/proc` before `exec`).
    mapped.sort_by_key(|m| (m.0, m.1, m.2));
    for (pid, _, _, named, ring, queue) in mapped {
        let h = ring.header();
        let proc_start = h.proc_start;
        // A process seen under another pid in its own namespace: its parent as `/proc`
        // names it (its own `getppid` names a process of its namespace, or none).
        let ppid = (pid != 0 && pid != h.ns_pid).then(|| process::parent_of(pid)).flatten();
        if pid != 0 {
            for older in rings.iter_mut().filter(|r| r.pid == pid) {
                older.replaced = true;
            }
        }
        // A ring whose process was not found is named by its header's pid, from the first
        // name not taken (`create_child`).
        let image = if pid == 0 { &mut 0 } else { images.entry(pid).or_insert(0) };
        rings.push(Attached {
            ring,
            queue,
            pid,
            shown: if pid == 0 { named } else { pid },
            ppid,
            proc_start,
            image: *image,
            out: None,
            replaced: false,
            done: false,
            // Opened now, the file is this process's: a pid reused later reads
            // nothing through it (nor pid 0: no process).
            memory: Memory::open(Some(pid), dir.display().to_string()),
            zombie_status: None,
            pidfd: (pid != 0).then(|| process::open_pidfd(pid, proc_start)).flatten(),
        });
        *image += 1;
    }
}

/// A ring mapped, its queue, and its file's device and inode (§7).
type Mapped = (Ring, Queue, (u64, u64));

/// Maps a ring file (made by process `pid`) and unlinks it (the mapping keeps it). `None`:
/// not a ring of ours, or not yet. The error is a message for stderr.
fn map_ring(path: &Path, pid: u32) -> Result<Option<Mapped>, String> {
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    // SAFETY: getuid has no preconditions.
    if !meta.is_file() || meta.uid() != unsafe { libc::getuid() } {
        return Ok(None);
    }
    let len = meta.len() as usize;
    if len == 0 {
        // Not sized yet: the next pass looks again.
        return Ok(None);
    }
    use std::os::fd::AsRawFd;
    // SAFETY: maps `len` bytes of an open regular file, shared; no address hint.
    let base = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(cannot(std::io::Error::last_os_error()));
    }
    // SAFETY: `base` maps `len` bytes; the ring (or this function) unmaps it.
    match unsafe { Ring::attach(base as *mut u8, len) } {
        Ok((ring, queue)) => {
            // Attached: the mapping keeps the memory, and nothing is left behind on the
            // file system whatever happens to either process.
            let _ = std::fs::remove_file(path);
            Ok(Some((ring, queue, (meta.dev(), meta.ino()))))
        }
        Err(ring::NotAttached::Refused { version }) => {
            // Another build's preload library (`ring` §6): told, it stops waiting and runs
            // on unprofiled; its file is not looked at again.
            let _ = std::fs::remove_file(path);
            // SAFETY: unmaps the mapping made above, which nothing references.
            unsafe { libc::munmap(base, len) };
            let library = process::preload_library(pid).unwrap_or_else(|| "unknown".into());
            Err(format!(
                "process {pid} is not profiled: its preload library ({library}) is of another \
                 memprof build (shared ring version {version}, this memprof's is {}); it runs \
                 on unprofiled. Use the library built with this memprof (see {})",
                ring::VERSION,
                env::ENV_PRELOAD
            ))
        }
        Err(ring::NotAttached::NotYet) => {
            // Not set up yet (the next pass looks again), or never will be: a process
            // that died while setting up leaves its file to the directory's removal.
            // SAFETY: unmaps the mapping made above, which nothing references.
            unsafe { libc::munmap(base, len) };
            Ok(None)
        }
    }
}

/// Once the ring's process runs its session: opens its profile and starts its recorder.
fn open_output(r: &mut Attached, plan: &Plan, stem: &str, messages: &mut Vec<String>) {
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
    let memory = Memory::open(Some(r.pid), plan.dir.display().to_string());
    r.out = Some(Output {
        split_reader: SplitReader::start(memory, r.ring.clock(), r.pid),
        unknown: false,
        recorder,
        clock: Stable::new(r.ring.clock()),
        waiting: Vec::new(),
        replayed: 0,
        epoch: h.epoch.load(Ordering::Relaxed),
        interval,
        log_read: read,
        split_peak: 0.0,
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

/// Drains the ring's queue into its recorder. Returns the number of events.
fn drain(r: &mut Attached) -> usize {
    let Some(out) = &mut r.out else {
        return 0;
    };
    let n = deliver(&r.queue, &r.ring, out, r.pid, false);
    out.recorder.after_poll(Poll::Periodic);
    n
}

/// Hands the queue's events to the recorder; `abandoned`: the process is gone.
fn deliver(q: &Queue, ring: &Ring, out: &mut Output, pid: u32, abandoned: bool) -> usize {
    let (epoch, interval) = (out.epoch, out.interval);
    let mut handle = |e: &crate::engine::queue::Event, frames: &[usize]| {
        if e.epoch != epoch {
            return;
        }
        if e.kind == EventKind::Side {
            // A cycle's sweep may have sent its deaths to the table (`queue` §3) before the
            // cycle's event: they are folded first, so the cycle does not count as marked
            // blocks it swept.
            if e.id == ring::SIDE_GC {
                replay_table(q, out);
            }
            side_event(ring, out, e.id, e.addr as u64, frames);
            return;
        }
        let rec = &mut out.recorder;
        let clock = &mut out.clock;
        let time_ns = clock.session_ns(e.time_ns);
        // The recorder is ours, but what it is handed was written by the program: a
        // panic on a damaged event loses that event, not the collector.
        let _ = catch_unwind(AssertUnwindSafe(|| match e.kind {
            EventKind::Alloc => rec.collected_alloc(&Allocation {
                id: e.id,
                size: e.size,
                k: e.k,
                estimated_bytes: e.k as f64 * interval,
                thread: e.thread,
                time_ns,
                addr: e.addr,
                callstack: Callstack { frames, truncated: e.truncated },
                // Label ids are the other process's (and its preload library never sets
                // one): they name nothing here.
                label: None,
            }),
            EventKind::Dealloc => {
                let alloc_ns = clock.session_ns(e.addr as u64);
                rec.collected_free(&named(e, alloc_ns), time_ns);
            }
            EventKind::Side => {}
        }));
    };
    let n =
        if abandoned { q.drain_abandoned(&mut handle) } else { q.drain(&mut handle).unwrap_or(0) };
    replay_table(q, out);
    if !abandoned && out.unknown_frames(ring) {
        // Frames outside every listed module, and no list pending in the log that could
        // name them in order: the process's maps name them, unless it wrote a list while
        // they were read (a `dlclose` under way: its list, read in order, will).
        let before = ring.header().log_len.load(Ordering::Acquire);
        let found = process::modules_of(pid);
        if ring.header().log_len.load(Ordering::Acquire) == before {
            out.recorder.add_modules(found);
            out.unknown = false;
        }
    }
    n
}

/// The block a death event names, allocated at `alloc_ns` (its event's clock reading
/// converted).
fn named(e: &Event, alloc_ns: u64) -> Named {
    Named { id: e.id, key: e.stack_key(), size: e.size as u64, k: e.k, alloc_ns }
}

/// Folds the frees kept aside whose blocks' allocations are in (§5).
/// Folds the frees in the queue's table (refused or deferred: `queue` §3), each once its
/// block's allocation is in (§5 here).
fn replay_table(q: &Queue, out: &mut Output) {
    let epoch = out.epoch;
    q.take_lost_frees(|e| {
        if e.epoch == epoch {
            let b = named(e, out.clock.session_ns(e.addr as u64));
            out.waiting.push((b, out.clock.session_ns(e.time_ns)));
        }
    });
    if !out.waiting.is_empty() {
        replay_waiting(out);
    }
}

fn replay_waiting(out: &mut Output) {
    let rec = &mut out.recorder;
    let mut replayed = 0;
    out.waiting.retain(|(b, time_ns)| {
        let folded = catch_unwind(AssertUnwindSafe(|| rec.collected_free(b, *time_ns)));
        if folded.unwrap_or(true) {
            replayed += 1;
            return false;
        }
        true
    });
    out.replayed += replayed;
    // A free waits only for an allocation already published, so the list stays short; but
    // the table is written by the profiled process, which may write anything: frees whose
    // blocks never come are let go, oldest first.
    if out.waiting.len() > MAX_WAITING_FREES {
        out.waiting.drain(..out.waiting.len() - MAX_WAITING_FREES);
    }
}

impl Output {
    /// True when frames outside every listed module wait to be looked up and every module
    /// list the process wrote has been read (so the lookup is not ahead of one).
    fn unknown_frames(&mut self, ring: &Ring) -> bool {
        self.unknown |= self.recorder.take_unknown_frames();
        self.unknown && ring.header().log_len.load(Ordering::Acquire) <= self.log_read
    }
}

/// A side event (see `ring.rs` §3).
fn side_event(ring: &Ring, out: &mut Output, what: u64, addr: u64, frames: &[usize]) {
    match what {
        ring::SIDE_MODULES => read_log(ring, out, addr),
        ring::SIDE_GC => {
            let words: Vec<u64> = frames.iter().map(|&w| w as u64).collect();
            if let Some(c) = GcCycle::from_words(&words) {
                out.recorder.gc_cycle(&c);
            }
        }
        _ => {}
    }
}

/// Reads the side log up to `to` and hands its module lists to the recorder.
fn read_log(ring: &Ring, out: &mut Output, to: u64) {
    let (records, end) = ring.log_records(out.log_read, to);
    out.log_read = end.max(out.log_read);
    ring.log_consumed(out.log_read);
    for (kind, payload) in records {
        let tracker = &mut out.recorder;
        // A closing record's call id and the loader's count of loads then.
        let word = |i: usize| {
            payload.get(8 * i..8 * i + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        };
        match (kind, word(0), word(1)) {
            (ring::LOG_MODULES, _, _) => {
                if let Some(m) = ring::decode_modules(&payload) {
                    tracker.module_snapshot(m);
                }
            }
            (ring::LOG_CLOSING, Some(id), Some(adds)) => {
                if let Some(m) = ring::decode_modules(&payload[16..]) {
                    tracker.module_closing(id, adds, m);
                }
            }
            (ring::LOG_CLOSED, Some(id), Some(adds)) => tracker.module_closed(id, adds),
            _ => {}
        }
    }
}

/// Finishes a ring whose process is gone (§3); `told` is how `record` saw the root
/// process end.
fn finish_ring(r: &mut Attached, told: Option<Ended>, messages: &mut Vec<String>) {
    r.done = true;
    let Some(out) = &mut r.out else {
        return;
    };
    deliver(&r.queue, &r.ring, out, r.pid, true);
    read_log(&r.ring, out, u64::MAX);
    let status = r.zombie_status.or_else(|| r.pidfd.as_ref().and_then(process::reaped_status));
    if let Some(e) = ended(&r.ring, told, status) {
        out.recorder.ended(e);
    }
    let stats = Stats {
        lost_events: r.queue.lost(),
        untracked: r.ring.header().untracked.load(Ordering::Relaxed),
        // Replays of frees the table took at once are no losses (`queue` §3).
        frees_replayed: out.replayed.saturating_sub(r.queue.frees_deferred()),
        frees_unknown: r.queue.frees_unknown(),
        ..Stats::default()
    };
    // An image that said it was ending without exit handlers: its file ends as the
    // in-process recorder leaves it then (the reader tells why there is no end record).
    let ending = match r.ring.header().ending.load(Ordering::Acquire) {
        ring::ENDING_EXEC => Some(Stopped::Exec),
        ring::ENDING_QUICK => Some(Stopped::QuickExit),
        _ => None,
    };
    match ending {
        Some(why) => out.recorder.stop_as(why, &stats),
        None => out.recorder.stopped(&stats),
    }
    // `memprof attach` detached: the process runs on with the ring mapped, but its memory
    // is given back now that it is read.
    if r.ring.header().ending.load(Ordering::Acquire) == ring::ENDING_DETACHED {
        r.ring.release_pages();
    }
    let rec = &out.recorder;
    if let Some(e) = rec.error() {
        // A full disk, most often: what was written stays, a clean cut the reader reads
        // (`profile::format` keeps a half block out), and the fold is whole.
        let path = rec.path().map(|p| p.to_path_buf());
        let kept = path.as_deref().and_then(|p| std::fs::metadata(p).ok()).map_or(0, |m| m.len());
        let shown = path.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
        let keeps = match kept {
            0 => format!("{shown} holds nothing"),
            _ => format!(
                "{shown} keeps the {kept} bytes written before (`memprof report` reads them as \
                 a profile cut there)"
            ),
        };
        messages.push(format!(
            "error: the profile of pid {} could not be written whole: {e}. {keeps}; this run's \
             table is from all the collector saw",
            r.shown
        ));
    } else if !rec.profile().lost.is_none() {
        let path = rec.path().map(|p| p.display().to_string()).unwrap_or_default();
        messages.push(format!("{path}: {}", rec.profile().lost.describe()));
    }
}

/// How the process of `ring` ended (§3), from what it said before (its exit handler's or
/// `_exit`'s status, `exec`, a detach), what its parent `record` saw (`told`), and its exit
/// code as a zombie. `None` when nothing says.
fn ended(ring: &Ring, told: Option<Ended>, zombie: Option<i32>) -> Option<Ended> {
    let h = ring.header();
    let status = h.exit_status.load(Ordering::Acquire);
    let said = (status & ring::STATUS_KNOWN != 0).then_some(status as u32 as i32);
    let seen = told.or_else(|| zombie.and_then(Ended::from_wait_status));
    let exited = |how| Ended { how, status: said.unwrap_or(0), limit_bytes: 0 };
    let own = match h.ending.load(Ordering::Acquire) {
        ring::ENDING_EXEC => Some(Ended { how: EndedHow::Exec, status: 0, limit_bytes: 0 }),
        ring::ENDING_DETACHED => Some(Ended { how: EndedHow::Detached, status: 0, limit_bytes: 0 }),
        ring::ENDING_QUICK => Some(exited(EndedHow::QuickExit)),
        ring::ENDING_EXIT => Some(exited(EndedHow::Exit)),
        _ => None,
    };
    match (own, seen) {
        // A signal (during the exit handlers, say) is what ended it.
        (_, Some(s)) if matches!(s.how, EndedHow::Signal | EndedHow::OomKill) => Some(s),
        // The parent's status is the one that counts (a handler may have called `_exit`).
        (Some(o), Some(s)) if matches!(o.how, EndedHow::Exit | EndedHow::QuickExit) => {
            Some(Ended { status: s.status, ..o })
        }
        (Some(o), _) => Some(o),
        (None, s) => s,
    }
}
