//! The in-process side of `memprof record`: what the preload library runs inside the
//! profiled program, around the hooks in [`crate::engine::alloc`].
//!
//! # 1. Start
//! The preload library calls [`init`] once: from its constructor, or earlier, from the
//! first allocation made by the constructor of a library the program links (the preload
//! library's §4; the session then sees those allocations too). It reads the `MEMPROF_*` variables
//! ([`EnvSettings`]) with `getenv`, opens the output file and starts a session
//! whose tracker is a streaming [`Recorder`] and whose drain thread writes the file (the
//! writer never runs inside an allocating call). Everything here allocates through the
//! process's `malloc`, which is the preload library's own: before the session exists the
//! hooks are a countdown that never reaches zero, so these allocations pass straight to
//! glibc. Nothing needs Rust's runtime: a cdylib has none to initialise.
//!
//! # 2. Files
//! The first process (no `MEMPROF_STEM` in its environment) writes the path of
//! `MEMPROF_OUTPUT` with `%p` replaced by its pid. `memprof record` has created that file
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0644) before the program started; the process opens it
//! without following symlinks or blocking (`sys/files.rs`, §4) and refuses a file that is not
//! an empty regular file of this user's (a FIFO, a device, another user's file, another
//! run's profile): nothing is written and the program runs on unprofiled. Following, it
//! makes the tree's directory, `<output>.d/` (0700, or this user's real directory of that name: `sys/private_dir.rs`),
//! and a followed child creates `<pid>.mprof` there exclusively (`<pid>.<n>.mprof` for a
//! further image of the same pid after exec).
//! Every descriptor is close-on-exec.
//!
//! # 3. Children
//! Without `MEMPROF_FOLLOW_FORKS` the library removes itself from `LD_PRELOAD` at start, so
//! programs this one executes are not profiled, and a forked child stops sampling and
//! never writes to the inherited file (its recorder is leaked, never dropped). With it, the
//! library stays in `LD_PRELOAD`, `MEMPROF_STEM` tells exec'd descendants that they are
//! children, and a forked child starts a session of its own in the `pthread_atfork` child
//! handler. The prepare handler takes the agent's lock and the session's locks
//! ([`crate::session::fork_prepare`]), so `fork` in a multithreaded program never leaves a
//! lock held by a thread the child does not have. (A child made without glibc's `fork`: §9.)
//!
//! # 4. End
//! An exit handler registered at start with `on_exit` (so it runs after the program's own
//! handlers, and is given `exit`'s status) stops the session: the drain thread writes what is left, symbols are resolved in this
//! process and written with the end record. A process that dies another way (`_exit`, a
//! signal, `abort`) leaves a file that reads back up to the drain thread's last flush, which
//! is at most [`crate::session::recorder::FLUSH_EVERY`] old; a fatal signal whose
//! disposition is the default first has the drain thread flush (see [`on_fatal`]). Write
//! errors (a full disk, a descriptor the program closed: [`crate::sys::own_file`]) stop the
//! recording, never the program; they are reported on stderr at exit.
//!
//! # 5. dlclose
//! [`before_dlclose`] brings the file up to date while the library is still mapped: pending
//! events are written, the modules listed again and the symbols seen so far resolved. It
//! also withdraws the DWARF unwinder's module list, which [`after_dlclose`] rebuilds once
//! the library is gone (see `engine/callstack/cfi/`). Under `memprof record` the two also
//! write which objects the call may unmap and that it returned ([`log_closing`],
//! [`log_closed`]; `ring.rs` §3).
//!
//! # 6. Under `memprof record`: the shared ring
//! With `MEMPROF_RINGS` set (by `memprof record`), §2 and §4 do not apply: the process
//! writes no file and starts no thread. [`start_collected`] creates the process's ring
//! (`record/ring`), writes its command line and module list to the ring's side log, and
//! starts the session on the ring's queue, which only `record`'s collector drains
//! (`record/command/collect/`). The process keeps a mapping and nothing else: no descriptor a
//! daemon could close or reuse, no file `RLIMIT_FSIZE` applies to, no thread a signal
//! could be delivered to or that could keep the process alive, and nothing to flush when
//! it dies: the collector drains the queue after the process is gone, whatever killed it.
//! The module list is written again, when it changed, around `dlclose` and at exit, each
//! time with a side event that places it among the events; `exec` and `_exit` set the
//! header's `ending`, so the collector ends the file as §4 describes for them, and the exit
//! handler and `_exit` put their status there (the profile says how the process ended).
//! What memprof's own code maps in the process (`sys::rawmem`) is counted in the header
//! for the collector, which reads the process's memory from outside; a large process asks
//! it for a last look at its mappings from the exit handler and waits for it (at most
//! [`LAST_LOOK_WAIT_MS`]). A forked child unmaps its parent's ring and, when following,
//! creates its own.
//!
//! # 8. Attached
//! `memprof attach` loads the preload library into a running process (`dlopen`, from a
//! thread it borrows with ptrace) and calls [`start_attached`] with the settings as text:
//! the session starts on a shared ring as in §6, in a directory of the attacher's, and the
//! attacher's collector drains it. Nothing of §2 or §7 applies, and a forked child stops
//! sampling (§3). [`stop_attached`] stops the session when the attacher detaches: the ring
//! is told so and left mapped (a thread may still be inside a push; the collector drains it
//! to the last event), and a later attach starts a fresh session on a new ring. A session
//! whose attacher died without detaching is stopped the same way by the next attach, which
//! takes it over. Neither call waits on the agent's lock without end (`agent/attached.rs`).
//!
//! # 7. Programs not followed
//! Without `MEMPROF_FOLLOW_FORKS`, under `memprof record`, the preload library's `exec` and
//! `posix_spawn` hooks name what this process (or a forked child of it, followed or not)
//! starts, for `record` to print (see `record/unfollowed.rs`).
//!
//! # 9. Children no fork handler tells of
//! A process made by a raw `clone(SIGCHLD)` or `clone3` without `CLONE_VM` runs none of the
//! `pthread_atfork` handlers of §3, and used to sample into its parent's ring (its
//! allocations in the parent's profile, its frees of its copies of the parent's blocks
//! taking them out of it). Before a session starts the agent arms the engine's wiped mark
//! (`engine/forked.rs`, `fork::arm`): a page that reads 0 in such a child, looked at on
//! the sample path and on the free of a possibly sampled block before either touches the
//! parent's state. The child that finds it 0 runs `fork::clone_child` on its only thread:
//! the same as the fork child handler (the parent's session abandoned, its ring unmapped, a
//! session of its own with `--follow-forks`), with the locks other threads held at the
//! `clone` taken as held by nobody (the agent's, the live table's shards, the session's),
//! and the mark written again for its own children. A glibc `fork` child also reads 0 until the agent's child handler
//! has run: the prepare handler names the forking thread, and until then the mark's
//! handler declines. A child that neither samples nor frees a sampled block is never found,
//! and writes nothing anywhere: every other way into the ring (`exec`, `_exit`, `dlclose`,
//! the exit handler) checks that the process owns the session.

mod attached;
mod fatal;
mod fork;

pub use attached::{forking_word, in_fork, start_attached, stop_attached, Refusal};

use crate::engine::busy::Busy;
use crate::record::env::{self, EnvSettings};
use crate::record::ring::{self, Ring};
use crate::session::recorder::Recorder;
use crate::session::{self, Poll, Session};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::ffi::{CStr, CString};
use std::fs::File;

struct Agent {
    session: Option<Session<Recorder>>,
    path: String,
    settings: EnvSettings,
    /// The tree's directory, where descendants write their files (when following).
    stem: String,
    /// The shared ring `memprof record` collects (§6), when this process has one.
    ring: Option<Ring>,
    /// The module list last written to the ring's side log.
    logged_modules: Vec<(String, u64)>,
    /// Started by `memprof attach` in a process that was already running (§8).
    attached: bool,
}

/// The agent's state, guarded by `LOCK` (a spin lock, so that the fork handlers can hold it
/// across `fork` without a guard object).
struct Slot(UnsafeCell<Option<Agent>>);

// SAFETY: the cell is only accessed by a thread holding `LOCK`.
unsafe impl Sync for Slot {}

static AGENT: Slot = Slot(UnsafeCell::new(None));
static LOCK: AtomicBool = AtomicBool::new(false);
/// The pid whose session this process's agent runs (0: none).
static OWNER: AtomicU32 = AtomicU32::new(0);
static REGISTERED: AtomicBool = AtomicBool::new(false);
/// This process's session queues into a shared ring (§6).
static COLLECTED: AtomicBool = AtomicBool::new(false);
/// The header of this process's ring (null: none), for hooks that must not lock.
static RING_HEADER: AtomicPtr<ring::RingHeader> = AtomicPtr::new(core::ptr::null_mut());

fn lock() {
    while LOCK.swap(true, Ordering::Acquire) {
        std::thread::yield_now();
    }
}

fn unlock() {
    LOCK.store(false, Ordering::Release);
}

/// Takes the lock if it frees within `limit` (a holder on another thread lets go soon; one
/// on this thread never would: §8's calls never wait on it without end).
fn try_lock_for(limit: core::time::Duration) -> bool {
    let start = std::time::Instant::now();
    while LOCK.swap(true, Ordering::Acquire) {
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// Runs `f` on the agent state under the lock.
fn with_agent<R>(f: impl FnOnce(&mut Option<Agent>) -> R) -> R {
    lock();
    // SAFETY: this thread holds LOCK, the only way to reach the cell.
    let r = f(unsafe { &mut *AGENT.0.get() });
    unlock();
    r
}

fn pid() -> u32 {
    std::process::id()
}

/// This process owns the agent's session ([`OWNER`] names it). Under a seccomp filter,
/// which may refuse `getpid` (`sys::seccomp`), [`OWNER`] being set is enough: a forked
/// child clears it in its handler, so only a child of a raw `clone` that has not taken
/// the sample path yet (`engine::forked`) would be taken for its parent.
fn owns() -> bool {
    let owner = OWNER.load(Ordering::Acquire);
    owner != 0 && (crate::sys::seccomp::filtered() || owner == pid())
}

/// Writes `memprof: <msg>` to stderr in one `write` call.
fn say(msg: &str) {
    let line = format!("memprof: {msg}\n");
    // SAFETY: writes `line.len()` bytes from a live buffer to fd 2.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

fn getenv(name: &str) -> Option<&'static str> {
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is NUL-terminated; getenv returns null or a NUL-terminated string in the
    // environment, which stays valid while nobody changes that variable (only `init` does,
    // after it has copied what it read).
    let p = unsafe { libc::getenv(c.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: p is a non-null NUL-terminated string (see above).
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

fn setenv(name: &str, value: &str) {
    if let (Ok(n), Ok(v)) = (CString::new(name), CString::new(value)) {
        // SAFETY: both strings are NUL-terminated; called while the process has one thread
        // (the constructor, or a fork child handler).
        unsafe { libc::setenv(n.as_ptr(), v.as_ptr(), 1) };
    }
}

/// Removes the preload library from `LD_PRELOAD`, so that exec'd programs are not profiled.
fn strip_preload() {
    let Some(list) = getenv("LD_PRELOAD") else {
        return;
    };
    let kept: Vec<&str> = list
        .split([':', ' '])
        .filter(|e| !e.is_empty())
        .filter(|e| {
            let name = e.rsplit('/').next().unwrap_or(e);
            !name.starts_with("libmemprof_preload")
        })
        .collect();
    if kept.is_empty() {
        // SAFETY: the name is a NUL-terminated literal; single-threaded (constructor).
        unsafe { libc::unsetenv(c"LD_PRELOAD".as_ptr()) };
    } else {
        let joined = kept.join(":");
        setenv("LD_PRELOAD", &joined);
    }
}

/// Opens the first process's output file (see the module documentation, §2).
fn open_root(path: &str) -> Result<File, String> {
    crate::sys::files::open_profile_in_process(path, false)
        .map_err(|e| format!("cannot write the profile {path}: {e}; it is left alone"))
}

/// Creates a followed child's file, `<dir>/<pid>[.<n>].mprof`, exclusively.
fn create_child(stem: &str, me: u32) -> Result<(std::path::PathBuf, File), crate::error::Error> {
    for n in 0..100 {
        let path = env::child_output(stem, me, n);
        match crate::sys::files::open_profile_in_process(&path, true) {
            Ok(f) => return Ok((path.into(), f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(crate::error::Error::io(format!("cannot create the profile {path}"), e))
            }
        }
    }
    Err(crate::error::Error::Other(format!(
        "cannot create a profile named {stem}/{me}.*.mprof: all names taken"
    )))
}

/// Creates the shared ring and starts the session on its queue (§6); `Err` is a message
/// for stderr.
fn start_collected(settings: EnvSettings, dir: &str) -> Result<Agent, String> {
    let mut config = settings.config.clone();
    config.drain_thread = false;
    config.queue_capacity = ring::RING_CELLS;
    let (ring, mut queue) =
        Ring::create(dir, config.queue_capacity, config.depth, settings.collector)
            .map_err(|e| format!("cannot share the profile with memprof record: {e}"))?;
    queue.set_external();
    if crate::sys::seccomp::filtered() {
        // The collector cannot be woken from here (`engine::queue` §6).
        queue.consumer_must_poll();
    }
    let exe =
        std::fs::read_link("/proc/self/exe").map(|p| p.display().to_string()).unwrap_or_default();
    let cmdline = crate::session::recorder::command_line();
    ring.log_append(ring::LOG_PROCESS, &ring::encode_process(&exe, &cmdline, ring.parent_pid()));
    crate::engine::sample_path::CONSUMER.store(
        ring.consumer() as *const crate::engine::sample_path::Consumer
            as *mut crate::engine::sample_path::Consumer,
        Ordering::Release,
    );
    // The tracker is never fed (the queue's events go to the collector): it only sees the
    // session start and stop.
    let session = match crate::session::start_on(config.clone(), Recorder::new(), Some(queue)) {
        Ok(s) => s,
        Err(e) => {
            crate::engine::sample_path::CONSUMER.store(core::ptr::null_mut(), Ordering::Release);
            return Err(format!("cannot start profiling: {e}"));
        }
    };
    ring.ready(session.epoch(), config.interval, config.depth, session.info().start_unix_ns);
    RING_HEADER.store(
        ring.header() as *const ring::RingHeader as *mut ring::RingHeader,
        Ordering::Release,
    );
    // SAFETY: the header is mapped until the process ends (a forked child clears the sink
    // before it unmaps its parent's ring).
    unsafe {
        crate::sys::rawmem::copy_mapped_to(
            &ring.header().own_mapped as *const AtomicU64 as *mut AtomicU64,
        )
    };
    COLLECTED.store(true, Ordering::Release);
    OWNER.store(pid(), Ordering::Release);
    let stem = String::new();
    let mut agent = Agent {
        session: Some(session),
        path: String::new(),
        settings,
        stem,
        ring: Some(ring),
        logged_modules: Vec::new(),
        attached: false,
    };
    log_modules(&mut agent);
    Ok(agent)
}

/// Writes the loaded modules to the ring's side log when they changed since the last
/// list, and tells the collector where they are among the events (§6).
fn log_modules(agent: &mut Agent) {
    let (Some(ring), Some(session)) = (&agent.ring, &agent.session) else {
        return;
    };
    if crate::sys::seccomp::filtered() {
        // Listing reads `/proc/self/exe` and the objects' files, which a seccomp filter may
        // refuse: the collector reads `/proc/<pid>/maps` for what it lacks (`collect` §4).
        return;
    }
    let _busy = Busy::enter();
    let epoch = session.epoch();
    let logged = &mut agent.logged_modules;
    // The list is read and its side event queued while no other thread can load or unload
    // an object: a sample queued before the event was taken with those objects mapped,
    // one queued after it with what the next list says (the collector's module
    // generations depend on it). Queuing waits only for the collector, another process.
    crate::sys::loader::while_list_is_fixed(|| {
        let modules = crate::profile::symbolize::current_modules();
        let key: Vec<(String, u64)> = modules.iter().map(|m| (m.path.clone(), m.base)).collect();
        if key == *logged {
            return;
        }
        if let Some(end) = ring.log_append(ring::LOG_MODULES, &ring::encode_modules(&modules)) {
            if let Some(q) = crate::engine::sample_path::queue() {
                crate::session::push_side(q, epoch, ring::SIDE_MODULES, end, &[]);
            }
            *logged = key;
        }
    });
}

/// Opens the output and starts the session; `Err` is a message for stderr. A child's file
/// is created at its first sample, so that a child that only calls `exec` leaves none.
fn start_agent(settings: EnvSettings) -> Result<Agent, String> {
    if let Some(dir) = settings.rings.clone() {
        return start_collected(settings, &dir);
    }
    let me = pid();
    let (recorder, path, stem) = match &settings.stem {
        None => {
            let path = env::expand_output(&settings.output, me);
            let file = open_root(&path)?;
            let stem = env::tree_dir(&path);
            if settings.follow_forks {
                let mut c = stem.clone().into_bytes();
                c.push(0);
                let errno = crate::sys::private_dir::create(&c, true);
                if errno != 0 {
                    let e = std::io::Error::from_raw_os_error(errno);
                    return Err(format!("cannot create the directory of the tree {stem}: {e}"));
                }
            }
            (Recorder::streaming(&path, file).offline_symbols(), path, stem)
        }
        Some(stem) => {
            let s = stem.clone();
            let open: crate::session::recorder::Opener = Box::new(move || create_child(&s, me));
            let shown = env::child_output(stem, me, 0);
            (Recorder::streaming_deferred(open).offline_symbols(), shown, stem.clone())
        }
    };
    let session = crate::session::start(settings.config.clone(), recorder)
        .map_err(|e| format!("cannot start profiling: {e}"))?;
    OWNER.store(me, Ordering::Release);
    Ok(Agent {
        session: Some(session),
        path,
        settings,
        stem,
        ring: None,
        logged_modules: Vec::new(),
        attached: false,
    })
}

/// Starts profiling this process from the `MEMPROF_*` environment. Called once by the
/// preload library: from its constructor, or from an allocation that runs before it. Problems are reported on stderr and leave the program
/// running unprofiled.
pub fn init() {
    // The agent's own allocations (the file name, the handler registrations) are not the
    // program's: not sampled.
    let _busy = Busy::enter();
    let settings = match EnvSettings::from_lookup(getenv) {
        Ok(s) => s,
        Err(e) => {
            say(&format!("{e}; this process is not profiled"));
            return;
        }
    };
    if !settings.follow_forks {
        strip_preload();
        // What this process and its forked children execute is not profiled: `record`
        // is told its name instead.
        if let Some(dir) = &settings.rings {
            crate::record::unfollowed::set_dir(dir);
        }
    }
    // Armed before the session starts: a raw clone child is found from its first sample.
    fork::arm();
    crate::engine::callstack::sampling_the_c_library();
    if getenv(env::ENV_UNWIND_CHECK) == Some("1") {
        crate::engine::callstack::enable_unwind_check();
    }
    with_agent(|agent| {
        if agent.is_some() {
            return;
        }
        match start_agent(settings) {
            Ok(a) => {
                if a.settings.follow_forks && a.settings.stem.is_none() && a.ring.is_none() {
                    setenv(env::ENV_STEM, &a.stem);
                }
                *agent = Some(a);
            }
            Err(msg) => say(&format!("{msg}; this process is not profiled")),
        }
    });
    if !REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: the handlers are `extern "C"` functions that live as long as the process
        // (the preload library is never unloaded).
        unsafe {
            on_exit(at_exit, core::ptr::null_mut());
            at_quick_exit(at_quick);
            // With a collector nothing is left to flush when the program dies.
            if !collected() {
                fatal::install_fatal_handlers();
            }
        }
        fork::register();
    }
}

/// Stops the session and finishes the file (from the exit handler). Safe to call more
/// than once; does nothing in a process that does not own a session.
pub(crate) fn finish() {
    if !owns() {
        return;
    }
    let collected = with_agent(|agent| match agent {
        Some(a) if a.ring.is_some() => {
            // Modules loaded since the last list, for a collector that reads them after
            // the process is gone; then the counters only this process has.
            log_modules(a);
            if let Some(r) = &a.ring {
                let untracked = crate::engine::sample_path::UNTRACKED
                    .load(core::sync::atomic::Ordering::Relaxed);
                r.header().untracked.store(untracked, Ordering::Relaxed);
                // Exiting normally: an earlier `exec` failed, if one was tried.
                let h = r.header();
                h.exit_status.store(EXIT_STATUS.load(Ordering::Acquire), Ordering::Relaxed);
                h.ending.store(ring::ENDING_EXIT, Ordering::Release);
                // The collector, asleep, looks for the process's end from now on.
                wake_collector();
                last_look(h);
            }
            // The session stops (sampling ends); its queue and the ring stay mapped for
            // the collector, and for producers still inside a push.
            if let Some(s) = a.session.take() {
                core::mem::forget(s.stop());
            }
            true
        }
        _ => false,
    });
    if collected {
        report_unwind_check();
        OWNER.store(0, Ordering::Release);
        return;
    }
    let taken = with_agent(|agent| {
        // Nothing may allocate before the session stops (it would be sampled as the
        // program's): the path is moved out, not cloned.
        agent.as_mut().and_then(|a| a.session.take().map(|s| (s, std::mem::take(&mut a.path))))
    });
    let Some((session, path)) = taken else {
        return;
    };
    match session.stop() {
        Ok(recorder) => {
            let stats = recorder.profile().lost;
            if let Some(e) = recorder.error() {
                say(&format!("the profile {path} is incomplete: {e}"));
            } else if !stats.is_none() {
                say(&format!("{path}: {}", stats.describe()));
            }
        }
        Err(e) => say(&format!("cannot stop profiling: {e}")),
    }
    report_unwind_check();
    OWNER.store(0, Ordering::Release);
}

/// With `MEMPROF_UNWIND_CHECK=1`: the DWARF walks checked against framehop alone, how many
/// differed, and how many captures fell back to libgcc; with `MEMPROF_TEST_WAITS=1`, how
/// the waits for room went and how often the collector was woken.
fn report_unwind_check() {
    if getenv(env::ENV_TEST_WAITS) == Some("1") {
        let (slept, spun) = crate::engine::push::waits();
        say(&format!("waits for room: {slept} slept, {spun} spun"));
        say(&format!("collector woken: {} times", crate::engine::queue::consumer_wakes()));
    }
    if getenv(env::ENV_UNWIND_CHECK) == Some("1") {
        let (walks, differed) = crate::engine::callstack::unwind_check_stats();
        let fallbacks = crate::engine::callstack::dwarf_fallbacks();
        say(&format!(
            "unwind check: {walks} walks, {differed} differed from framehop's, {fallbacks} fell \
             back to libgcc"
        ));
    }
}

/// Brings the profile up to date when the process ends without exit handlers (`_exit`):
/// every event so far, flushed (the reader resolves the symbols), then a record that says
/// why the file has no end record. `status` is `_exit`'s, when known.
pub fn before_quick_exit(status: Option<libc::c_int>) {
    if let Some(status) = status {
        let r = RING_HEADER.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is the header of this process's ring, mapped until the
        // process ends (only a forked child unmaps its parent's, after clearing this).
        if let (Some(h), true) = (unsafe { r.as_ref() }, owns()) {
            h.exit_status.store(ring::STATUS_KNOWN | u64::from(status as u32), Ordering::Relaxed);
        }
    }
    set_ending(ring::ENDING_QUICK);
    sync_owned(Poll::BeforeQuickExit);
}

/// With a shared ring: tells the collector how this image is ending (see
/// `RingHeader::ending`). Async-signal-safe (one atomic store), and takes no lock: `_exit`
/// may be called from anywhere.
fn set_ending(how: u32) {
    if collected() && owns() {
        let r = RING_HEADER.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is the header of this process's ring, mapped until the
        // process ends (only a forked child unmaps its parent's, after clearing this).
        if let Some(h) = unsafe { r.as_ref() } {
            h.ending.store(how, Ordering::Release);
            wake_collector();
        }
    }
}

/// Wakes the collector if it sleeps (`engine::queue` §6): this process is ending, or
/// waits for its last look. One system call at most; none under a seccomp filter.
/// Async-signal-safe.
fn wake_collector() {
    if let Some(q) = crate::engine::sample_path::queue() {
        q.wake_consumer();
    }
}

/// The forced poll, in the process that owns the session (not in a forked child that
/// does not follow).
fn sync_owned(why: Poll) {
    if owns() {
        session::sync(why);
    }
}

/// Brings the profile up to date before the process image is replaced (`execve` and its
/// relatives): every event so far reaches the file, which the new image never finishes (it
/// reads back as cut, with everything this image did).
pub fn before_exec() {
    set_ending(ring::ENDING_EXEC);
    sync_owned(Poll::BeforeExec);
}

/// Runs `dlclose` (the real one, called by the closure) between `before_dlclose` and
/// `after_dlclose`, which must come in pairs around it: the profile is brought up to date
/// while the library is still mapped (see §5), and the DWARF unwinder's module list is
/// withdrawn meanwhile and rebuilt once the library is gone. errno is `dlclose`'s.
pub fn around_dlclose<R>(handle: *const core::ffi::c_void, dlclose: impl FnOnce() -> R) -> R {
    /// Runs [`after_dlclose`] even if `dlclose` unwinds, so the pair stays balanced.
    struct After(u64);
    impl Drop for After {
        fn drop(&mut self) {
            let saved = crate::sys::errno::errno();
            after_dlclose(self.0);
            crate::sys::errno::set_errno(saved);
        }
    }
    let close = before_dlclose(handle);
    let _after = After(close);
    dlclose()
}

/// Brings the profile up to date before a library is unloaded (see §5), and withdraws the
/// DWARF unwinder's module list until [`after_dlclose`]. Only through [`around_dlclose`].
/// Returns the id of the call's closing record (§6), or 0.
fn before_dlclose(handle: *const core::ffi::c_void) -> u64 {
    log_owned_modules();
    let close = log_owned(|a| log_closing(a, handle)).unwrap_or(0);
    sync_owned(Poll::BeforeUnload);
    crate::engine::callstack::before_dlclose();
    close
}

/// After `dlclose` returned: the DWARF unwinder lists the objects still loaded. Only
/// through [`around_dlclose`], once per [`before_dlclose`].
fn after_dlclose(close: u64) {
    {
        let _busy = Busy::enter();
        crate::engine::callstack::after_dlclose();
    }
    log_owned_modules();
    if close != 0 {
        log_owned(|a| log_closed(a, close));
    }
}

/// With a shared ring, in the process that owns it: the module list, if it changed.
fn log_owned_modules() {
    log_owned(log_modules);
}

/// With a shared ring, in the process that owns it: `f` on its agent.
fn log_owned<R>(f: impl FnOnce(&mut Agent) -> R) -> Option<R> {
    if owns() && collected() {
        with_agent(|agent| agent.as_mut().map(f))
    } else {
        None
    }
}

/// Ids of `dlclose` calls' closing records (0: none written).
static CLOSES: AtomicU64 = AtomicU64::new(1);

/// Writes which objects `dlclose(handle)` may unmap ([`ring::LOG_CLOSING`]) and places the
/// record among the events, before the call can unmap anything. The collector retires
/// them until the matching [`ring::LOG_CLOSED`], so a library that another thread's
/// `dlopen` maps where they were meanwhile keeps its own samples (`ring.rs` §3). Returns the
/// record's id, or 0 when none was written (a handle not on the loader's list).
fn log_closing(agent: &mut Agent, handle: *const core::ffi::c_void) -> u64 {
    if crate::sys::seccomp::filtered() {
        // The list reads files a filter may refuse (see `log_modules`).
        return 0;
    }
    let _busy = Busy::enter();
    let mut id = 0;
    crate::sys::loader::while_list_is_fixed(|| {
        let Some(objects) = crate::sys::loader::closable_from(handle) else {
            return;
        };
        let modules: Vec<_> = crate::profile::symbolize::current_modules()
            .into_iter()
            .filter(|m| objects.iter().any(|(b, n)| *b == m.base && n == m.path.as_bytes()))
            .collect();
        if modules.is_empty() {
            return;
        }
        let next = CLOSES.fetch_add(1, Ordering::Relaxed);
        let mut bytes = next.to_le_bytes().to_vec();
        bytes.extend_from_slice(&crate::sys::loader::counts().0.to_le_bytes());
        bytes.extend_from_slice(&ring::encode_modules(&modules));
        if log_side(agent, ring::LOG_CLOSING, &bytes) {
            id = next;
        }
    });
    id
}

/// Writes that the `dlclose` whose closing record was `id` returned
/// ([`ring::LOG_CLOSED`]), with the loader's count of objects loaded, read while no object
/// can be added to its list until the record is among the events: an object loaded before
/// any event that precedes the record is counted.
fn log_closed(agent: &mut Agent, id: u64) {
    let _busy = Busy::enter();
    crate::sys::loader::while_list_is_fixed(|| {
        let mut bytes = id.to_le_bytes().to_vec();
        bytes.extend_from_slice(&crate::sys::loader::counts().0.to_le_bytes());
        log_side(agent, ring::LOG_CLOSED, &bytes);
    });
}

/// Appends a record to the ring's side log and places it among the events (a side event
/// that says where the log ends). False when the log could not take it.
fn log_side(agent: &mut Agent, kind: u8, payload: &[u8]) -> bool {
    let (Some(ring), Some(session)) = (&agent.ring, &agent.session) else {
        return false;
    };
    let _busy = Busy::enter();
    let Some(end) = ring.log_append(kind, payload) else {
        return false;
    };
    if let Some(q) = crate::engine::sample_path::queue() {
        crate::session::push_side(q, session.epoch(), ring::SIDE_MODULES, end, &[]);
    }
    true
}

/// True when this process's events go to `memprof record`'s collector (§6).
fn collected() -> bool {
    COLLECTED.load(Ordering::Acquire)
}

extern "C" {
    /// glibc's `on_exit`: an exit handler that is given the status passed to `exit` (not in
    /// the libc crate for this target).
    fn on_exit(
        f: extern "C" fn(libc::c_int, *mut libc::c_void),
        arg: *mut libc::c_void,
    ) -> libc::c_int;
}

/// The exit handler: the status is the ring's (the collector's way of ending, §6), then
/// [`finish`].
extern "C" fn at_exit(status: libc::c_int, _arg: *mut libc::c_void) {
    EXIT_STATUS.store(ring::STATUS_KNOWN | u64::from(status as u32), Ordering::Release);
    finish();
}

/// The status the exit handler was given, or'ed with [`ring::STATUS_KNOWN`]; 0 before.
static EXIT_STATUS: AtomicU64 = AtomicU64::new(0);

/// The longest an exiting process waits for the collector's last reading of its memory.
/// The kernel walks the process's page tables for it: a few milliseconds for a process of
/// a few hundred megabytes, ten times that for gigabytes.
const LAST_LOOK_WAIT_MS: u64 = 100;

/// Asks the collector for a last reading of this process's memory (its resident memory by
/// kind of mapping, beside the live heap), and waits for it at most [`LAST_LOOK_WAIT_MS`]:
/// once the process has exited its mappings are gone, and what the allocator held at the
/// end can no longer be read. Only when the collector wants it (the process is large) and
/// shows signs of life.
fn last_look(h: &ring::RingHeader) {
    let now = crate::engine::clock::monotonic_ns();
    let beat = h.consumer.heartbeat_ns.load(Ordering::Relaxed);
    if now.saturating_sub(beat) > 500_000_000 {
        return;
    }
    let wanted = (ring::LOOK_WANTED, ring::LOOK_ASKED);
    if h.last_look
        .compare_exchange(wanted.0, wanted.1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    wake_collector();
    let until = now + LAST_LOOK_WAIT_MS * 1_000_000;
    while h.last_look.load(Ordering::Acquire) != ring::LOOK_TAKEN
        && crate::engine::clock::monotonic_ns() < until
    {
        if crate::sys::seccomp::filtered() {
            // No system call under a seccomp filter (`sys::seccomp` §1): a bounded spin.
            crate::sys::seccomp::spin(1024);
            continue;
        }
        let pause = libc::timespec { tv_sec: 0, tv_nsec: 200_000 };
        // SAFETY: a valid timespec; the remainder is not wanted.
        unsafe { libc::nanosleep(&pause, core::ptr::null_mut()) };
    }
}

extern "C" {
    /// glibc's `at_quick_exit` (C11; not in the libc crate for this target).
    fn at_quick_exit(f: extern "C" fn()) -> libc::c_int;
}

/// `quick_exit` runs these handlers, then `_exit` (glibc's internal one, which the preload
/// library's `_exit` hook does not see): bring the profile up to date here.
extern "C" fn at_quick() {
    before_quick_exit(None);
}
