//! The shared ring: how a process profiled under `memprof record` hands its events to the
//! `record` process, which outlives it.
//!
//! # 1. Why outside the process
//! A profile is most needed when the program dies (a crash, an OOM kill, `abort`) and on
//! the programs hardest to run (daemons that close every descriptor, servers with a signal
//! thread, programs under `RLIMIT_FSIZE`). An encoder and a file inside the process lose what
//! it had not written when it is killed, and a thread and a descriptor of ours are things
//! such a program can trip over. So under `record` the process keeps no thread, no
//! descriptor and no file of ours: its sample path writes events into a queue in a shared
//! mapping, and `record` ([`super::collect`]) reads the queue, encodes and writes the file,
//! and drains what is left once the process is gone, whatever ended it.
//!
//! # 2. The file
//! `memprof record` makes a private directory (0700) on a memory file system
//! (`/dev/shm`, else the temporary directory) and names it in `MEMPROF_RINGS`. Each process
//! that loads the preload library creates `<pid>.<n>.ring` there (`pid` as `/proc` names it,
//! §5; `O_EXCL`, 0600; `n` counts the images of one pid across `exec`, and any other
//! ring of that name), sizes it, maps it shared and closes the
//! descriptor at once. The collector unlinks the file when it attaches (the mapping lives on
//! in both processes), so nothing stays on the file system after the program ends, even when
//! `record` itself is killed. Layout:
//!
//! | offset | size | what |
//! |---|---|---|
//! | 0 | 4 KiB | [`RingHeader`]: who wrote it, the session's settings, its clock |
//! | 4 KiB | [`LOG_BYTES`] | the side log: the process's command line and module lists |
//! | 4 KiB + [`LOG_BYTES`] | [`crate::engine::queue::Queue::bytes_for`] | the event queue |
//!
//! # 3. Order
//! Events are the queue's (one order per producer thread, as in-process). Module lists go
//! to the side log (they do not fit in a slot) and a side event (`WireEvent::Side`,
//! [`SIDE_MODULES`]) in the queue says where the log ended when they were written, so the
//! collector reads each list at its place among the events: the list written before a
//! `dlclose` precedes every event after it. A `dlclose` also writes which objects it may
//! unmap before it starts ([`LOG_CLOSING`]) and that it returned ([`LOG_CLOSED`]), after
//! the list that follows it: another thread's `dlopen` can map a library where the closed
//! one was, and sample its constructor, before that list is written (see
//! `session/recorder.rs`, `Generations`). GC cycles travel as side events
//! ([`SIDE_GC`]). Log positions only grow; the log is a ring of [`LOG_BYTES`] over them:
//! the collector publishes how far it has read (`log_read`), and a writer whose record
//! would overwrite what is unread sleeps until it has read more, while the collector is
//! alive (§4; a program that loads and unloads a library thousands of times writes a list
//! at each `dlclose`). Writers of one process take turns under a lock whose waiters sleep.
//!
//! # 4. A collector that goes away
//! When it attaches, the collector writes its pid and start time into the header, and
//! at each of its passes (at least every 100 ms: `record/command/collect` §8) it stores the
//! time into the heartbeat beside them ([`Consumer`]). A sampling thread that finds the queue full sleeps (a futex on the
//! queue's room word, which the collector's drain advances: `engine::queue` §5; under a
//! seccomp filter it spins, `engine::push` §1) until there is room, for as long as the
//! collector exists: a fresh heartbeat says so at once,
//! and past it the process is looked up (`engine::consumer` §1), so a collector that is merely
//! slow, starved of CPU or stopped is waited for, and one whose process is gone (killed,
//! or a zombie) ends every wait within a look. `memprof record` and `attach` name the
//! collector's process to the program (`MEMPROF_COLLECTOR`), so a ring names it from its
//! creation on; a ring made without (a program that cleared its environment before an
//! `exec`) gives the collector half a second, the heartbeat set when it was made, to
//! attach. A wait also ends when
//! the collector has taken nothing for [`crate::config::BACKPRESSURE_WAIT_MS`] because a
//! push never finished (a slot claimed and not published ahead of it). A free lost so is
//! kept in the queue's table of lost frees, which the collector reads after each drain
//! and replays (`engine::queue` §3): its block does not stay live in the profile. The side
//! log's writer waits the same way, on a word of the header the collector advances with
//! `log_read` (§3).
//!
//! # 5. Which process made a ring
//! The ring's file is named, and its header says, who made it as `/proc` names it:
//! `/proc/self`, whose number is the process's pid in the PID namespace of the `/proc`
//! mount, beside `getpid`, its pid in its own namespace (a process that `unshare -p -f`
//! started is pid 1 there, as is every other such process: its `getpid` names nothing for
//! the collector). When `/proc` shows the collector's process with the start time
//! `MEMPROF_COLLECTOR` gives, the mount is the collector's (or one where it has that pid:
//! the same view) and the pid is checked: the collector takes it as it is. Otherwise (a
//! namespace with its own `/proc` mounted, a process without `MEMPROF_COLLECTOR`) the
//! collector finds the process itself (`record/command/process.rs`): the one with the
//! ring's start time whose innermost pid (`NSpid`) is `getpid`'s, and, among several, the
//! one that maps the ring's file.
//!
//! # 6. Versions
//! The header's layout has a version ([`VERSION`]); the preload library writes its own and
//! the collector reads only its own. A ring of another version (a stale library beside an
//! older `memprof`, or `MEMPROF_PRELOAD` naming another build) is refused: its file is
//! removed, `record` says which library, and both versions, and the process is told, so
//! that its threads stop waiting for room in a queue nobody will drain (it runs on
//! unprofiled: what does not fit is dropped and counted). From version 8 on the first 40
//! bytes keep their place in every version: the magic, the version, the state and the
//! collector's [`Consumer`] ([`CONSUMER_AT`]), whose `verdict` the collector sets to
//! `REFUSED` with its own version (`engine::consumer` §3). A version-7 process, which
//! knows no verdict, is told through what it does read: its consumer's heartbeat is set
//! to 0 and the collector's start time to one no process has, so its next look finds the
//! collector gone. Older versions are left alone. A collector older than the verdict skips
//! a newer ring without a word: the process then stops waiting once the collector it
//! names has not attached for `engine::consumer::UNATTACHED_NS`.

use crate::engine::queue::Queue;
use crate::engine::sample_path::Consumer;
use crate::sys::futex;
use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Bytes of the side log.
pub(crate) const LOG_BYTES: usize = 1 << 20;
/// Cells of a ring's queue (`engine::queue` §2a), whatever the session's capacity: 2 MiB.
/// The collector drains it as it fills (a producer wakes it at a sixteenth full), so it
/// holds a burst, not a run; and it is memory of the program's, which the exact mode of a
/// program of many small blocks keeps to heaptrack's or less (the pipeline bench's
/// `cpython` row).
pub(crate) const RING_CELLS: usize = 16 * 1024;
/// Bytes reserved for the header.
const HEADER_BYTES: usize = 4096;
/// [`RingHeader::magic`] ("mpring01").
const MAGIC: u64 = u64::from_le_bytes(*b"mpring01");
/// The layout's version (2: a queue slot names the thread that claimed it; 3: the side
/// log is a ring, with the collector's `log_read`; 4: the queue's block holds its table of
/// lost frees, see `engine::queue` §3; 5: the exit status, memprof's own mapped bytes and
/// the last look at exit; 6: the collector's pid and start time beside its heartbeat, the
/// futex words of the queue's waiters and of the side log's, §4; 7: the pid in the
/// process's own namespace, whether `pid` is the collector's view, when the ring was made,
/// §5; 8: the collector's part right after the state, where it stays, with its verdict,
/// §6; 9: the queue's block holds the word the collector sleeps on, `engine::queue` §6,
/// and the ring directory a bell, §7; 10: an exact session's frees name only their
/// addresses, `engine::live` §6; 11: the queue is of 128-byte cells, an event taking as
/// many as its stack needs, `engine::queue` §2a; 12: a free is the first line of its
/// cell, and an allocation may name a stack its thread sent before, `engine::known`).
pub(crate) const VERSION: u32 = 12;
// The side events' kinds belong to the session, which queues them (`session::push_side`).
#[cfg(feature = "cli")] // read by the collector only
pub(crate) use crate::session::SIDE_GC;
pub(crate) use crate::session::SIDE_MODULES;
/// Frames a shared queue's slot holds at least (a side event's words).
pub(crate) const MIN_DEPTH: usize = 16;

/// [`RingHeader::ending`]: the image is being replaced (`exec`).
pub(crate) const ENDING_EXEC: u32 = 1;
/// [`RingHeader::ending`]: the process ends without exit handlers (`_exit`).
pub(crate) const ENDING_QUICK: u32 = 2;
/// [`RingHeader::ending`]: `memprof attach` detached; the process runs on.
pub(crate) const ENDING_DETACHED: u32 = 3;
/// [`RingHeader::ending`]: the process runs its exit handlers (`exit`, or `main` returned).
pub(crate) const ENDING_EXIT: u32 = 4;
/// [`RingHeader::exit_status`]: set when the status is known (it is the low 32 bits).
pub(crate) const STATUS_KNOWN: u64 = 1 << 32;
/// [`RingHeader::last_look`]: the exiting process asks for a last reading of its memory.
pub(crate) const LOOK_ASKED: u32 = 1;
/// [`RingHeader::last_look`]: the collector took it.
pub(crate) const LOOK_TAKEN: u32 = 2;
/// [`RingHeader::last_look`]: the collector wants a last look when the process exits (its
/// resident memory is large enough for the look to matter: [`LOOK_WANTED_BYTES`]).
pub(crate) const LOOK_WANTED: u32 = 3;
/// The resident size from which the collector wants a last look at an exiting process: a
/// smaller one is explained well enough by the last periodic reading, and a program that
/// runs many small processes (a build, a shell script) does not wait at each exit.
pub(crate) const LOOK_WANTED_BYTES: u64 = 32 << 20;

/// Side-log record kinds.
pub(crate) const LOG_PROCESS: u8 = 1;
/// A side-log record: the loaded modules.
pub(crate) const LOG_MODULES: u8 = 2;
/// A side-log record: a `dlclose` starts: its id (`u64`), the loader's count of objects
/// loaded (`dlpi_adds`, `u64`), then the modules it may unmap (as [`encode_modules`]).
pub(crate) const LOG_CLOSING: u8 = 3;
/// A side-log record: the `dlclose` of this id (`u64`) returned; the loader's count of
/// objects loaded (`u64`) when the record was placed among the events.
pub(crate) const LOG_CLOSED: u8 = 4;

/// The ring's header, written by the process (the collector writes `consumer`, `log_read`,
/// `log_room` and its side of `last_look`).
#[repr(C)]
pub(crate) struct RingHeader {
    magic: u64,
    version: u32,
    /// 0 while the process sets up, 1 once its session runs.
    pub(crate) state: AtomicU32,
    /// The collector: its last sign of life ([`crate::engine::clock::monotonic_ns`]), which
    /// process it is once it has attached (§4), and its verdict on the ring (§6). Here in
    /// every version from 8 on ([`CONSUMER_AT`]).
    pub(crate) consumer: Consumer,
    /// The process's pid as `/proc` names it (§5): the collector's view when
    /// [`RingHeader::pid_checked`] says so.
    pub(crate) pid: u32,
    /// The process's pid in its own PID namespace (`getpid`).
    pub(crate) ns_pid: u32,
    /// 1 when `pid` is the collector's view of the process: `/proc` shows the collector as
    /// `MEMPROF_COLLECTOR` names it (§5).
    pub(crate) pid_checked: u32,
    _pad: u32,
    /// The process's start time (`/proc/<pid>/stat` field 22), to tell a reused pid.
    pub(crate) proc_start: u64,
    /// When the ring was made ([`crate::engine::clock::monotonic_ns`]): the order of one
    /// process's images, whatever their rings are named (§5).
    pub(crate) made_ns: u64,
    pub(crate) epoch: AtomicU64,
    pub(crate) interval_bits: AtomicU64,
    pub(crate) depth: AtomicU64,
    pub(crate) use_tsc: AtomicU64,
    pub(crate) tsc0: AtomicU64,
    pub(crate) start_ns: AtomicU64,
    pub(crate) start_unix_ns: AtomicU64,
    /// Sampled blocks the live table could not take (copied at exit).
    pub(crate) untracked: AtomicU64,
    /// Bytes of the side log written and published (a position: the log wraps, §3).
    pub(crate) log_len: AtomicU64,
    /// The position up to which the collector has read the side log (written by it).
    pub(crate) log_read: AtomicU64,
    /// Advanced by the collector when `log_read` moves: the futex word a writer waiting
    /// for room in the log sleeps on (§3).
    log_room: AtomicU32,
    /// Writers sleeping on `log_room`: the collector wakes them only when some are.
    log_waiters: AtomicU32,
    /// How the image is ending without exit handlers, when it says so: [`ENDING_EXEC`]
    /// (before `exec`), [`ENDING_QUICK`] (`_exit`, `quick_exit`); 0 otherwise (a normal
    /// exit clears it: an `exec` that failed is followed by more).
    pub(crate) ending: AtomicU32,
    /// The exit handshake (written by both): [`LOOK_WANTED`] while the collector wants a
    /// last reading of the process's memory when it exits; [`LOOK_ASKED`] when the process
    /// runs its exit handlers and waits a little for it (its mappings are gone once it has
    /// exited); [`LOOK_TAKEN`] once it was taken.
    pub(crate) last_look: AtomicU32,
    /// The status given to `exit` or `_exit`, or'ed with [`STATUS_KNOWN`]; 0 when unknown.
    pub(crate) exit_status: AtomicU64,
    /// Bytes memprof's library has mapped in the process for itself (the live table, the
    /// per-thread blocks, frame buffers: `sys::rawmem::map`), which its resident memory
    /// counts and the program did not ask for.
    pub(crate) own_mapped: AtomicU64,
    queue_bytes: u64,
}

const _: () = assert!(core::mem::size_of::<RingHeader>() <= HEADER_BYTES);

/// Where the header holds the collector's [`Consumer`] in every ring version from 8 on
/// (§6): a collector refuses a ring of any such version through it.
const CONSUMER_AT: usize = 16;
const _: () = assert!(core::mem::offset_of!(RingHeader, consumer) == CONSUMER_AT);
const _: () = assert!(core::mem::offset_of!(Consumer, verdict) == 12);

/// Version 7's header kept the collector's [`Consumer`] (then without its verdict: a
/// padding word) at this offset (§6).
const V7_CONSUMER_AT: usize = 104;

/// Why the collector does not attach to a ring ([`Ring::attach`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NotAttached {
    /// Not a ring of ours, or not set up yet: the next pass looks again.
    NotYet,
    /// A ring of another version: refused (§6), never to be looked at again.
    Refused {
        /// The ring's version (its preload library's).
        version: u32,
    },
}

/// A mapped ring: the header, the log and the queue's block.
pub(crate) struct Ring {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping has no thread affinity; the header's shared fields are atomics, the
// log is written under `LOG_LOCK` and read only up to the published length.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

/// Serialises writers of the side log within a process (one may wait long for the
/// collector while holding it: the others sleep).
static LOG_LOCK: futex::Lock = futex::Lock::new();

impl Ring {
    /// Total bytes of a ring whose queue holds `capacity` events of `depth` frames.
    fn bytes(capacity: usize, depth: usize) -> Option<usize> {
        HEADER_BYTES.checked_add(LOG_BYTES)?.checked_add(Queue::bytes_for(capacity, depth)?)
    }

    /// Creates this process's ring in `dir` (see §2) with a queue of `capacity` events of
    /// `depth` frames, naming `collector` (pid, start time) when it is known (§4), and returns it with the queue (set up, consumed elsewhere). Leaves
    /// no descriptor open. The error is a message for stderr.
    pub(crate) fn create(
        dir: &str,
        capacity: usize,
        depth: usize,
        collector: Option<(u32, u64)>,
    ) -> Result<(Ring, Queue), String> {
        let depth = depth.max(MIN_DEPTH);
        let len = Ring::bytes(capacity, depth).ok_or("the event queue is too large")?;
        // Sizing the file past RLIMIT_FSIZE would kill the process with SIGXFSZ.
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `lim` is a valid out pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim) } == 0
            && lim.rlim_cur != libc::RLIM_INFINITY
            && (lim.rlim_cur as u128) < len as u128
        {
            return Err(format!(
                "the file size limit (RLIMIT_FSIZE, {} bytes) leaves no room for the {len}-byte \
                 shared queue",
                lim.rlim_cur
            ));
        }
        // SAFETY: getpid has no preconditions.
        let ns_pid = unsafe { libc::getpid() } as u32;
        let (pid, pid_checked) = seen_pid(ns_pid, collector);
        let mut fd = -1;
        let mut name = String::new();
        for n in 0..1000 {
            name = format!("{dir}/{pid}.{n}.ring");
            let c =
                std::ffi::CString::new(name.as_bytes()).map_err(|_| "a NUL in MEMPROF_RINGS")?;
            let flags =
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            // SAFETY: `c` is NUL-terminated; the mode is the variadic third argument.
            fd = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
            if fd >= 0
                || std::io::Error::last_os_error().kind() != std::io::ErrorKind::AlreadyExists
            {
                break;
            }
        }
        if fd < 0 {
            return Err(format!("cannot create {name}: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is the descriptor just opened.
        let sized = unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0;
        let err = std::io::Error::last_os_error();
        let base = if sized {
            // SAFETY: maps `len` bytes of the file just sized; no address hint.
            unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            }
        } else {
            libc::MAP_FAILED
        };
        let err = if sized { std::io::Error::last_os_error() } else { err };
        // SAFETY: closes the descriptor this function opened; the mapping stays valid.
        unsafe { libc::close(fd) };
        if base == libc::MAP_FAILED {
            if let Ok(c) = std::ffi::CString::new(name.as_bytes()) {
                // SAFETY: `c` is NUL-terminated.
                unsafe { libc::unlink(c.as_ptr()) };
            }
            return Err(format!("cannot map {name}: {err}"));
        }
        let base = base as *mut u8;
        let ring = Ring { base, len };
        bell::keep_bell(dir);
        let proc_start = own_start_time();
        // Tests of the refusal (§6) make a ring that says it is of another build.
        let version = std::env::var(crate::record::env::ENV_TEST_RING_VERSION)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(VERSION);
        // SAFETY: the mapping is `len` ≥ HEADER_BYTES bytes, page-aligned, zeroed (a new
        // file) and not yet read by anyone (the state says "starting").
        unsafe {
            (base as *mut RingHeader).write(RingHeader {
                // Written last (below), when the rest is in place.
                magic: 0,
                version,
                state: AtomicU32::new(0),
                pid,
                ns_pid,
                pid_checked: u32::from(pid_checked),
                _pad: 0,
                proc_start,
                made_ns: crate::engine::clock::monotonic_ns(),
                epoch: AtomicU64::new(0),
                interval_bits: AtomicU64::new(0),
                depth: AtomicU64::new(0),
                use_tsc: AtomicU64::new(0),
                tsc0: AtomicU64::new(0),
                start_ns: AtomicU64::new(0),
                start_unix_ns: AtomicU64::new(0),
                consumer: Consumer::new(crate::engine::clock::monotonic_ns()),
                untracked: AtomicU64::new(0),
                log_len: AtomicU64::new(0),
                log_read: AtomicU64::new(0),
                log_room: AtomicU32::new(0),
                log_waiters: AtomicU32::new(0),
                ending: AtomicU32::new(0),
                last_look: AtomicU32::new(0),
                exit_status: AtomicU64::new(0),
                own_mapped: AtomicU64::new(0),
                queue_bytes: (len - HEADER_BYTES - LOG_BYTES) as u64,
            })
        };
        if let Some((pid, start)) = collector {
            // Known from the start (`MEMPROF_COLLECTOR`): waited for before it attaches.
            ring.consumer().attach(pid, start);
        }
        let qlen = len - HEADER_BYTES - LOG_BYTES;
        // SAFETY: the queue's part of the mapping is zeroed, 4 KiB-aligned, lives as long as
        // the process (never unmapped while sampling may push) and used by nothing else.
        let queue = unsafe { Queue::init_in(ring.queue_mem(), qlen, capacity, depth) }
            .ok_or("cannot lay out the shared queue")?;
        // SAFETY: the magic is an aligned u64 at the start of the mapping; viewed as an
        // atomic, its Release store publishes the header and the queue written above to a
        // collector that reads it with Acquire (`Ring::attach`).
        unsafe { (*(base as *const AtomicU64)).store(MAGIC, Ordering::Release) };
        Ok((ring, queue))
    }

    /// The collector's view of the ring mapped at `base` (`len` bytes), when it holds a
    /// header of this version. A ring of another version is refused (§6): its process is
    /// told, where its version allows, and stops waiting for this collector.
    ///
    /// # Safety
    /// `base` is a mapping of `len` bytes that stays mapped while the ring lives.
    pub(crate) unsafe fn attach(base: *mut u8, len: usize) -> Result<(Ring, Queue), NotAttached> {
        if len < HEADER_BYTES + LOG_BYTES {
            return Err(NotAttached::NotYet);
        }
        // SAFETY: the mapping holds at least a header; its first word read atomically
        // (see `create`).
        let magic = unsafe { (*(base as *const AtomicU64)).load(Ordering::Acquire) };
        if magic != MAGIC {
            return Err(NotAttached::NotYet);
        }
        // SAFETY: the version follows the magic, written before its Release store, in
        // every version.
        let version = unsafe { *(base.add(8) as *const u32) };
        if version != VERSION {
            // SAFETY: the mapping holds a whole header of some version (checked above).
            unsafe { refuse(base, version) };
            return Err(NotAttached::Refused { version });
        }
        let ring = Ring { base, len };
        let h = ring.header();
        let qlen = usize::try_from(h.queue_bytes).unwrap_or(usize::MAX);
        if qlen > len - HEADER_BYTES - LOG_BYTES {
            // Dropping `ring` would unmap: the caller owns the mapping until this succeeds.
            core::mem::forget(ring);
            return Err(NotAttached::NotYet);
        }
        // SAFETY: the queue's part lies inside the mapping (checked above).
        match unsafe { Queue::attach(ring.queue_mem(), qlen) } {
            Some(queue) => {
                // From now on the process's waits for room last while this process lives
                // (§4).
                let (pid, start) = this_process();
                h.consumer.attach(pid, start);
                h.consumer.verdict.store(crate::engine::consumer::ACCEPTED, Ordering::Release);
                Ok((ring, queue))
            }
            None => {
                core::mem::forget(ring);
                Err(NotAttached::NotYet)
            }
        }
    }

    /// The process's parent, named as the collector names processes (§5): from `/proc/self`
    /// when the ring's pid is checked (`getppid` names a process of this one's PID
    /// namespace, or 0 for the first process of a new one), else `getppid`'s.
    pub(crate) fn parent_pid(&self) -> u32 {
        let checked = (self.header().pid_checked == 1)
            .then(|| crate::sys::procfs::stat_field("/proc/self/stat", 1)?.parse().ok())
            .flatten();
        checked.unwrap_or_else(std::os::unix::process::parent_id)
    }

    /// The header.
    pub(crate) fn header(&self) -> &RingHeader {
        // SAFETY: the mapping starts with a header (written by `create`, checked by
        // `attach`) and outlives `self`.
        unsafe { &*(self.base as *const RingHeader) }
    }

    fn queue_mem(&self) -> *mut u8 {
        // SAFETY: the offset lies inside the mapping (its size is checked by the
        // constructors).
        unsafe { self.base.add(HEADER_BYTES + LOG_BYTES) }
    }

    fn log_mem(&self) -> *mut u8 {
        // SAFETY: as `queue_mem`.
        unsafe { self.base.add(HEADER_BYTES) }
    }

    /// Publishes the session's settings and clock: the collector may start reading.
    pub(crate) fn ready(&self, epoch: u64, interval: f64, depth: usize, start_unix_ns: u64) {
        let h = self.header();
        let c = crate::engine::clock::params();
        h.epoch.store(epoch, Ordering::Relaxed);
        h.interval_bits.store(interval.to_bits(), Ordering::Relaxed);
        h.depth.store(depth as u64, Ordering::Relaxed);
        h.use_tsc.store(u64::from(c.use_tsc), Ordering::Relaxed);
        h.tsc0.store(c.tsc0, Ordering::Relaxed);
        h.start_ns.store(c.start_ns, Ordering::Relaxed);
        h.start_unix_ns.store(start_unix_ns, Ordering::Relaxed);
        h.state.store(1, Ordering::Release);
        // The collector attaches at once, however long it sleeps otherwise (§7).
        bell::ring_bell();
    }

    /// The clock of the process's session.
    pub(crate) fn clock(&self) -> crate::engine::clock::Params {
        let h = self.header();
        crate::engine::clock::Params {
            use_tsc: h.use_tsc.load(Ordering::Relaxed) != 0,
            tsc0: h.tsc0.load(Ordering::Relaxed),
            start_ns: h.start_ns.load(Ordering::Relaxed),
        }
    }

    /// The collector as the sample path sees it (see `engine::push` §1).
    pub(crate) fn consumer(&self) -> &Consumer {
        &self.header().consumer
    }

    /// Appends a record to the side log and returns the log's position after it (the side
    /// event's `addr`), or `None` when it cannot: a record larger than the log, or no room
    /// once the collector is gone (§4; while it lives, the writer sleeps until it has read
    /// enough).
    pub(crate) fn log_append(&self, kind: u8, payload: &[u8]) -> Option<u64> {
        let need = 5 + payload.len();
        if need > LOG_BYTES {
            return None;
        }
        let _lock = LOG_LOCK.lock();
        let h = self.header();
        let at = h.log_len.load(Ordering::Relaxed);
        let room = |h: &RingHeader| {
            at + need as u64 - h.log_read.load(Ordering::Acquire).min(at) <= LOG_BYTES as u64
        };
        while !room(h) {
            // As a producer waits for room in the queue (`engine::queue` §5): registered,
            // then a last look, then a sleep on the value read before registering.
            let seen = h.log_room.load(Ordering::Acquire);
            h.log_waiters.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if room(h) {
                h.log_waiters.fetch_sub(1, Ordering::Relaxed);
                break;
            }
            if !h.consumer.alive() {
                h.log_waiters.fetch_sub(1, Ordering::Relaxed);
                return None;
            }
            // A collector asleep is woken: room comes from its reading (`engine::queue` §6).
            if let Some(q) = crate::engine::sample_path::queue() {
                q.wake_consumer();
            }
            if crate::sys::seccomp::filtered() {
                // No system call under a seccomp filter (`sys::seccomp` §1).
                crate::sys::seccomp::spin(256);
            } else {
                let err = futex::wait(&h.log_room, seen, crate::engine::sample_path::LOOK_EVERY_NS);
                crate::sys::seccomp::after_futex_wait(
                    err,
                    h.log_room.load(Ordering::Relaxed) == seen,
                );
            }
            h.log_waiters.fetch_sub(1, Ordering::Relaxed);
        }
        let mut rec = Vec::with_capacity(need);
        rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        rec.push(kind);
        rec.extend_from_slice(payload);
        let start = (at % LOG_BYTES as u64) as usize;
        let first = need.min(LOG_BYTES - start);
        // SAFETY: `start + first` ≤ LOG_BYTES and `need - first` < LOG_BYTES: the bytes lie
        // inside the log, in what the collector has read or never held (the room check
        // above), past what is published (nobody reads them until the Release store
        // below); this thread holds LOG_LOCK.
        unsafe {
            core::ptr::copy_nonoverlapping(rec.as_ptr(), self.log_mem().add(start), first);
            core::ptr::copy_nonoverlapping(rec[first..].as_ptr(), self.log_mem(), need - first);
        }
        let end = at + need as u64;
        h.log_len.store(end, Ordering::Release);
        Some(end)
    }

    /// Says that the collector has read the side log up to `pos`: its room may be
    /// written again.
    pub(crate) fn log_consumed(&self, pos: u64) {
        let h = self.header();
        if h.log_read.fetch_max(pos, Ordering::AcqRel) >= pos {
            return;
        }
        h.log_room.fetch_add(1, Ordering::SeqCst);
        // Pairs with the writer's fence after it registers (`log_append`).
        fence(Ordering::SeqCst);
        if h.log_waiters.load(Ordering::Relaxed) != 0 {
            futex::wake(&h.log_room, u32::MAX);
        }
    }

    /// The side log's records in bytes `from..to` (clamped to what is published): (kind,
    /// payload) pairs, and where the last whole one ended.
    pub(crate) fn log_records(&self, from: u64, to: u64) -> (Vec<(u8, Vec<u8>)>, u64) {
        let published = self.header().log_len.load(Ordering::Acquire);
        // What the log still holds: at most its size below the published position (a
        // writer never passes what the collector has read, and the collector reads from
        // where it was).
        let from = from.max(published.saturating_sub(LOG_BYTES as u64));
        let to = to.min(published).max(from);
        // SAFETY: the log's bytes are mapped for as long as the ring; those below the
        // published position were written before its Release store, which the Acquire
        // load above saw.
        let mem = unsafe { core::slice::from_raw_parts(self.log_mem(), LOG_BYTES) };
        let log: Vec<u8> = (from..to).map(|p| mem[(p % LOG_BYTES as u64) as usize]).collect();
        let (out, used) = Self::parse_records(&log);
        (out, from + used as u64)
    }

    /// The whole (kind, payload) records at the start of `log`, and the bytes they took.
    fn parse_records(log: &[u8]) -> (Vec<(u8, Vec<u8>)>, usize) {
        let to = log.len();
        let mut at = 0usize;
        let mut out = Vec::new();
        while at + 5 <= to {
            let len = u32::from_le_bytes(log[at..at + 4].try_into().unwrap_or_default()) as usize;
            let kind = log[at + 4];
            let Some(end) = (at + 5).checked_add(len).filter(|&e| e <= to) else {
                break;
            };
            out.push((kind, log[at + 5..end].to_vec()));
            at = end;
        }
        (out, at)
    }
}

/// This process's start time (`/proc/self/stat` field 22; 0 when unreadable: any start).
fn own_start_time() -> u64 {
    crate::sys::procfs::stat_field("/proc/self/stat", crate::sys::procfs::START_TIME)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// This process's pid as `/proc` names it (`/proc/self`, in the PID namespace of the
/// `/proc` mount), and whether that is the collector's view (§5): `/proc` shows the
/// collector's process, as `collector` (its pid and start time, `MEMPROF_COLLECTOR`) names
/// it, with that start time. `(ns_pid, false)` when `/proc` cannot be read.
fn seen_pid(ns_pid: u32, collector: Option<(u32, u64)>) -> (u32, bool) {
    let Some(pid) = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()))
    else {
        return (ns_pid, false);
    };
    let checked = collector.is_some_and(|(cpid, start)| {
        let path = format!("/proc/{cpid}/stat");
        start != 0
            && crate::sys::procfs::stat_field(&path, crate::sys::procfs::START_TIME)
                .and_then(|s| s.parse::<u64>().ok())
                == Some(start)
    });
    (pid, checked)
}

/// This process as a collector names itself (§4, `MEMPROF_COLLECTOR`): its pid and start
/// time.
pub(crate) fn this_process() -> (u32, u64) {
    (std::process::id(), own_start_time())
}

/// Tells the process whose ring of version `version` (not [`VERSION`]) is mapped at `base`
/// that this collector will never drain it (§6): from version 8 on, the verdict at its
/// fixed place; in version 7, whose producers know no verdict, a heartbeat as old as can
/// be and a start time no process has, so that the process's next look finds the collector
/// gone. Older versions are left alone (their layout is not known here).
///
/// # Safety
/// `base` maps a whole header of ring version `version`, shared with its process.
unsafe fn refuse(base: *mut u8, version: u32) {
    if version > VERSION {
        // SAFETY: versions after 7 keep the consumer at CONSUMER_AT (§6), aligned and
        // inside the header; its words are atomics the producers read.
        let c = unsafe { &*(base.add(CONSUMER_AT) as *const Consumer) };
        c.refuse(VERSION);
    } else if version == 7 {
        // SAFETY: version 7 kept its consumer, of the same layout (its verdict a padding
        // word), at V7_CONSUMER_AT, aligned and inside the header.
        let c = unsafe { &*(base.add(V7_CONSUMER_AT) as *const Consumer) };
        c.start.store(u64::MAX, Ordering::Relaxed);
        c.heartbeat_ns.store(0, Ordering::Release);
    }
}

impl Ring {
    /// Frees the ring's memory for every process that maps it (`MADV_REMOVE` punches a hole
    /// in the shared file): the collector's last act on the ring of a process that `memprof
    /// attach` detached from, which keeps its mapping (a thread may still be inside a push)
    /// but need not keep the memory. A late push faults in a zeroed page, where it finds a
    /// full queue, a stale heartbeat and no collector: nothing waits, nothing breaks.
    pub(crate) fn release_pages(&self) {
        // SAFETY: advice on this ring's own mapping; the caller reads nothing of it again.
        unsafe { libc::madvise(self.base.cast(), self.len, libc::MADV_REMOVE) };
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping this ring owns; no reference into it outlives the ring
        // (the queue handle made with it is dropped first by its owners).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

mod bell;
#[cfg(feature = "cli")] // read by the collector, made by `record` and `attach`
pub(crate) use bell::{create_bell, map_bell};
mod records;
// The collector (`record::command`, with the `cli` feature) decodes what the program
// encodes; the ring's tests do both.
#[cfg(any(feature = "cli", test))]
pub(crate) use records::{decode_modules, decode_process};
pub(crate) use records::{encode_modules, encode_process};
#[cfg(test)]
mod tests;
