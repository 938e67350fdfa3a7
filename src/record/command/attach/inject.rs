//! Loading the preload library into a running process and taking it out of the way again
//! (`memprof attach`'s §2 and §3).
//!
//! Attach: every thread is seized; one thread is borrowed, chosen where a call cannot
//! wait on a lock that thread itself holds (§ [`Process::borrow`]); on it, glibc's `dlopen`
//! loads the library (the other threads run meanwhile, so any lock the call needs is
//! released by its holder), then the library's `memprof_attach_start` starts the session
//! and plans which GOT slots to reroute. Then every thread is stopped, the planned writes
//! are made through `/proc/PID/mem` (each only where the bytes are still what the plan
//! read), every thread's sampling countdown is zeroed, and every thread is let go: no
//! thread ever sees half of the rerouting, and nothing of ours is left tracing the
//! process. Detach is the same with `memprof_attach_stop`, whose plan puts back what each
//! slot held.
//!
//! A library call that finds a lock it needs held (its thread was stopped inside `fork`,
//! or another holds the lock for long) answers busy having done nothing; it is made again
//! on a thread borrowed at another moment (`call_plan_when_free`). Should the stop call
//! not run at detach, [`undo`] puts back the attach's writes from outside.

use super::target::{self, Loaded};
use super::tracee::{Failed, Saved, Thread, DATA, LANDING};
use crate::error::Error;
use crate::record::attach_abi::{self, Owner, Plan, Write};
use nix::unistd::Pid;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// System calls the C library's allocator makes while it holds an arena's lock (x86-64
/// numbers): `mmap`, `mprotect`, `munmap`, `brk`, `mremap`, `madvise`. A thread stopped in
/// one of them is not borrowed (the call's `malloc` would wait for that lock for ever); a
/// thread stopped in any other system call holds no lock the calls take (the C library's
/// wrappers take none, and the loader's own system calls are told apart by where they
/// are made).
const ALLOCATOR_CALLS: [u64; 6] = [9, 10, 11, 12, 25, 28];

/// The system calls that make a process (x86-64 numbers): `clone`, `fork`, `vfork`,
/// `clone3`. A thread stopped in one is inside glibc's `fork`, which holds the locks of its
/// prepare handlers (the agent's and the session's, once the library is loaded) and, in a
/// process with other threads, every arena of the C library's allocator: a call on it
/// would wait for itself. It is not borrowed.
const PROCESS_CALLS: [u64; 4] = [56, 57, 58, 435];

/// How long the attacher keeps trying a call that answers that a lock it needs is held
/// (`attach_abi::STATUS_BUSY`), each time on a thread borrowed at another moment.
const BUSY_FOR: Duration = Duration::from_secs(10);

/// A range of code addresses, `start..end`.
type Range = (u64, u64);

/// The seized threads of a process and its memory.
pub(super) struct Process {
    pub(super) pid: u32,
    /// glibc's `__restore_rt` in the process, where calls return (`tracee` §5).
    landing: u64,
    mem: File,
    threads: Vec<Thread>,
    /// The word of a library loaded already that names the thread inside `fork`
    /// (`MEMPROF_FORKING_AT`'s target), read before a thread is borrowed.
    forking: Option<u64>,
}

/// What an attach did.
pub(super) struct Attached {
    /// Objects whose slots point at the library.
    pub(super) objects: u64,
    /// Entry points patched.
    pub(super) patched: u64,
    /// Entry points left unpatched: a thread kept standing in the bytes a patch replaces.
    pub(super) unpatched: bool,
    /// Slots written.
    pub(super) written: usize,
    /// The allocator families whose entry points the library could not patch, with the
    /// function and the reason (empty: none).
    pub(super) refused: String,
    /// The writes that put back what the attach changed ([`undo`]).
    pub(super) undo: Vec<Write>,
}

/// What the start call answered.
pub(super) enum Started {
    Attached(Attached),
    /// Nothing done: the session of another attacher runs (`attach_abi::STATUS_OWNED`).
    Owned(Owner),
}

fn other(e: Failed, pid: u32) -> Error {
    match e {
        Failed::Gone => Error::Other(format!("process {pid} ended while memprof attached to it")),
        Failed::Other(why) => Error::Other(why),
    }
}

impl Process {
    /// Seizes every thread of `pid` (threads started meanwhile too).
    pub(super) fn seize(pid: u32, landing: u64) -> Result<Process, Error> {
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| Error::io(format!("cannot open the memory of process {pid}"), e))?;
        let mut p = Process { pid, landing, mem, threads: Vec::new(), forking: None };
        p.seize_new()?;
        Ok(p)
    }

    /// Seizes the threads not seized yet; false when there were none.
    fn seize_new(&mut self) -> Result<bool, Error> {
        let mut any = false;
        for tid in target::threads(self.pid) {
            if self.threads.iter().any(|t| t.tid.as_raw() == tid) {
                continue;
            }
            match Thread::seize(Pid::from_raw(tid)) {
                Ok(t) => {
                    self.threads.push(t);
                    any = true;
                }
                // Ended since it was listed.
                Err(nix::Error::ESRCH) => {}
                Err(e) if self.threads.is_empty() => {
                    return Err(target::seize_refusal(self.pid, e));
                }
                Err(e) => {
                    return Err(Error::Other(format!(
                        "cannot trace thread {tid} of process {}: {}",
                        self.pid,
                        e.desc()
                    )))
                }
            }
        }
        if self.threads.is_empty() {
            return Err(Error::Other(format!("process {} has ended", self.pid)));
        }
        Ok(any)
    }

    /// Stops every thread, those started meanwhile too (a stopped thread starts none).
    fn stop_all(&mut self) -> Result<(), Error> {
        loop {
            let mut gone = Vec::new();
            for (i, t) in self.threads.iter_mut().enumerate() {
                match t.stop() {
                    Ok(()) => {}
                    Err(Failed::Gone) => gone.push(i),
                    Err(e) => return Err(other(e, self.pid)),
                }
            }
            for i in gone.into_iter().rev() {
                self.threads.remove(i);
            }
            if !self.seize_new()? {
                return Ok(());
            }
        }
    }

    /// Lets every thread but `keep` run on.
    fn resume_all_but(&mut self, keep: Option<usize>) {
        for (i, t) in self.threads.iter_mut().enumerate() {
            if Some(i) != keep {
                let _ = t.resume();
            }
        }
    }

    /// Ends the tracing of every thread (each runs on with any signal its stop reported).
    pub(super) fn release(self) {
        for t in self.threads {
            let _ = t.detach();
        }
    }

    /// Stops a thread that can run a call of the library (or the loader) without waiting
    /// on a lock it holds itself: one in a system call other than the allocator's
    /// ([`ALLOCATOR_CALLS`]) made outside the loader (whose lock a `dlopen` under way
    /// holds), or one running outside `avoid` (the C library, the loader and the preload
    /// library, whose hooks take locks). The others run on. Returns its index and saved
    /// state.
    fn borrow(&mut self, avoid: &[Range], loader: &[Range]) -> Result<(usize, Saved), Error> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            for i in 0..self.threads.len() {
                let t = &mut self.threads[i];
                match t.stop() {
                    Ok(()) => {}
                    Err(Failed::Gone) => continue,
                    Err(e) => return Err(other(e, self.pid)),
                }
                if !t.has_pending_signal() {
                    let regs = t.regs().map_err(|e| other(e, self.pid))?;
                    let in_call = regs.orig_rax as i64 >= 0;
                    let fine = if in_call {
                        !ALLOCATOR_CALLS.contains(&regs.orig_rax)
                            && !PROCESS_CALLS.contains(&regs.orig_rax)
                            && !loader.iter().any(|&(lo, hi)| (lo..hi).contains(&regs.rip))
                    } else {
                        !avoid.iter().any(|&(lo, hi)| (lo..hi).contains(&regs.rip))
                    };
                    // Inside `fork`, as the library says: its locks (and, with other threads,
                    // the allocator's arenas) are held by this very thread.
                    let mut word = [0u8; 8];
                    let in_fork = self.forking.is_some_and(|at| {
                        self.mem.read_exact_at(&mut word, at).is_ok()
                            && u64::from_le_bytes(word) == regs.fs_base
                    });
                    if fine && !in_fork {
                        let saved = t.save().map_err(|e| other(e, self.pid))?;
                        return Ok((i, saved));
                    }
                }
                let _ = t.resume();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(Error::Other(format!(
            "no thread of process {} could be borrowed within 5 s: each was inside the C \
             library or the dynamic loader every time it was looked at; try again",
            self.pid
        )))
    }

    /// The code ranges where a borrowed thread must not stand: the C library's, the
    /// loader's and the preload library's (`lib`, when mapped); and the loader's alone.
    /// Also finds the library's word that names the thread inside `fork`, when it is loaded.
    fn avoid(&mut self, lib: &Path) -> (Vec<Range>, Vec<Range>) {
        let maps = target::mappings(self.pid).unwrap_or_default();
        self.forking = loaded_library(self.pid, lib)
            .ok()
            .and_then(|l| l.symbol(&["MEMPROF_FORKING_AT"]))
            .and_then(|at| self.read(at, 8).ok())
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
            .filter(|&a| a != 0);
        let code = |keep: &dyn Fn(&target::Mapping) -> bool| {
            maps.iter().filter(|m| m.exec && keep(m)).map(|m| (m.start, m.end)).collect()
        };
        (
            code(&|m| target::is_libc(m) || target::is_loader(m) || Path::new(&m.path) == lib),
            code(&target::is_loader),
        )
    }

    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, Error> {
        let mut buf = vec![0u8; len];
        self.mem
            .read_exact_at(&mut buf, addr)
            .map_err(|e| Error::io(format!("cannot read the memory of process {}", self.pid), e))?;
        Ok(buf)
    }

    /// The plan at `addr` and its writes.
    fn plan(&self, addr: u64) -> Result<(Plan, Vec<Write>), Error> {
        let bytes = self.read(addr, size_of::<Plan>())?;
        let plan = Plan::from_bytes(&bytes).ok_or_else(|| {
            Error::Other("the preload library in the process is of another build".into())
        })?;
        if plan.status != 0 {
            return Ok((plan, Vec::new()));
        }
        let len = usize::try_from(plan.count).unwrap_or(0).min(1 << 20) * size_of::<Write>();
        let writes = Write::all_from_bytes(&self.read(plan.writes, len)?);
        Ok((plan, writes))
    }

    /// Makes `writes` with every thread stopped and none inside a guarded range, then zeroes
    /// each thread's countdown at `tpoff` from its thread pointer (when given). The borrowed
    /// thread `held` is stopped already, its state restored. Returns the slot writes made
    /// (writes without a guarded range), and false when the entry points' writes were left
    /// out.
    fn apply(
        &mut self,
        held: Option<usize>,
        writes: &[Write],
        tpoff: Option<i64>,
    ) -> Result<(usize, bool), Error> {
        let held_tid = held.map(|h| self.threads[h].tid);
        let mut clear = false;
        for _ in 0..1000 {
            self.stop_all()?;
            clear = true;
            for t in &self.threads {
                let rip = t.regs().map_err(|e| other(e, self.pid))?.rip;
                if writes.iter().any(|w| (w.guard_lo..w.guard_hi).contains(&rip)) {
                    clear = false;
                }
            }
            if clear {
                break;
            }
            let keep = self.threads.iter().position(|t| Some(t.tid) == held_tid);
            self.resume_all_but(keep);
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut made = 0;
        for w in writes {
            // Entry points are patched all or none (a family half patched would lose its
            // frees): none while a thread kept standing in one's moved bytes.
            if !clear && w.guard_lo < w.guard_hi {
                continue;
            }
            let len = w.len as usize;
            // A slot of an object unloaded since it was planned: nothing to write.
            let Ok(now) = self.read(w.addr, len) else {
                continue;
            };
            if now[..] != w.old[..len] {
                continue;
            }
            self.mem.write_all_at(&w.new[..len], w.addr).map_err(|e| {
                Error::io(format!("cannot write the memory of process {}", self.pid), e)
            })?;
            if w.guard_lo >= w.guard_hi {
                made += 1;
            }
        }
        if let Some(off) = tpoff {
            for t in &self.threads {
                let fs = t.regs().map_err(|e| other(e, self.pid))?.fs_base;
                // A thread whose block cannot be written keeps a countdown that runs out
                // by itself.
                let _ = self.mem.write_all_at(&[0u8; 16], fs.wrapping_add(off as u64));
            }
        }
        Ok((made, clear))
    }

    /// Runs `f` with a borrowed thread, then lets every thread go.
    fn with_borrowed<R>(
        mut self,
        lib: &Path,
        f: impl FnOnce(&mut Process, usize, &mut Saved) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let (avoid, loader) = self.avoid(lib);
        let (i, mut saved) = match self.borrow(&avoid, &loader) {
            Ok(b) => b,
            Err(e) => {
                self.release();
                return Err(e);
            }
        };
        let r = f(&mut self, i, &mut saved);
        self.release();
        r
    }
}

/// Calls `func(args)` on the borrowed thread `i` (its result is not kept: `tracee` §5).
fn call(
    p: &mut Process,
    i: usize,
    saved: &mut Saved,
    func: u64,
    args: &[u64],
    data: &[u8],
) -> Result<(), Error> {
    let (pid, landing) = (p.pid, p.landing);
    let (threads, mem) = (&mut p.threads, &p.mem);
    let others = threads.iter().enumerate().filter(|&(j, t)| j != i && !t.stopped);
    threads[i].serve = others.map(|(_, t)| t.tid).collect();
    threads[i].call(mem, saved, func, args, data, landing).map_err(|e| failed_call(e, pid))
}

fn failed_call(e: Failed, pid: u32) -> Error {
    match e {
        Failed::Gone => Error::Other(format!("process {pid} ended while memprof attached to it")),
        Failed::Other(why) => Error::Other(format!("a call in process {pid} failed: {why}")),
    }
}

/// Calls a function of the library that answers with a [`Plan`], published at `slot`
/// (`MEMPROF_ATTACH_PLAN`), and reads the answer.
fn call_plan(
    p: &mut Process,
    i: usize,
    saved: &mut Saved,
    slot: u64,
    func: u64,
    args: &[u64],
    data: &[u8],
) -> Result<(Plan, Vec<Write>), Error> {
    p.mem
        .write_all_at(&0u64.to_le_bytes(), slot)
        .map_err(|e| Error::io(format!("cannot write the memory of process {}", p.pid), e))?;
    call(p, i, saved, func, args, data)?;
    let at = u64::from_le_bytes(p.read(slot, 8)?.try_into().unwrap_or_default());
    if at == 0 {
        return Err(Error::Other("the preload library did not answer".into()));
    }
    p.plan(at)
}

/// [`call_plan`], made again on a thread borrowed at another moment while the library
/// answers that a lock it needs is held (the borrowed thread was inside `fork`, or another
/// held the lock): such an answer changed nothing. `i` and `saved` become the thread last
/// borrowed.
#[allow(clippy::too_many_arguments)]
fn call_plan_when_free(
    p: &mut Process,
    lib: &Path,
    i: &mut usize,
    saved: &mut Saved,
    slot: u64,
    func: u64,
    args: &[u64],
    data: &[u8],
) -> Result<(Plan, Vec<Write>), Error> {
    let deadline = Instant::now() + BUSY_FOR;
    loop {
        let (plan, writes) = call_plan(p, *i, saved, slot, func, args, data)?;
        if plan.status != attach_abi::STATUS_BUSY {
            return Ok((plan, writes));
        }
        if Instant::now() >= deadline {
            return Err(Error::Other(format!(
                "process {}: every thread memprof borrowed for {} s held a lock memprof \
                 needs (inside fork, most often); nothing was changed; try again",
                p.pid,
                BUSY_FOR.as_secs()
            )));
        }
        let _ = p.threads[*i].resume();
        std::thread::sleep(Duration::from_millis(2));
        let (avoid, loader) = p.avoid(lib);
        (*i, *saved) = p.borrow(&avoid, &loader)?;
    }
}

/// A C string read from the process (at most 4 KiB).
fn c_string(p: &Process, addr: u64) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while out.len() < 4096 {
        let Ok(n) = p.mem.read_at(&mut buf, addr + out.len() as u64) else {
            break;
        };
        if n == 0 {
            break;
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return String::from_utf8_lossy(&out).into_owned();
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The library as the process maps it, once loaded.
fn loaded_library(pid: u32, lib: &Path) -> Result<Loaded, Error> {
    let inode = std::fs::metadata(lib).map(|m| m.ino()).unwrap_or(0);
    let maps = target::mappings(pid).map_err(|e| Error::io("cannot read the maps", e))?;
    Loaded::find(&maps, |m| m.inode == inode && Path::new(&m.path) == lib)
        .ok_or_else(|| Error::Other(format!("the preload library is not mapped in process {pid}")))
}

/// Loads `lib` into process `pid`, starts its session with `settings` and reroutes the
/// process's calls (see the module documentation).
pub(super) fn attach(pid: u32, lib: &Path, settings: &str) -> Result<Started, Error> {
    let maps = target::mappings(pid)
        .map_err(|e| Error::io(format!("cannot read the maps of {pid}"), e))?;
    let libc = Loaded::find(&maps, target::is_libc)
        .ok_or_else(|| Error::Other(format!("cannot find the C library in process {pid}")))?;
    let dlopen = libc.symbol(&["dlopen", "__libc_dlopen_mode"]).ok_or_else(|| {
        Error::Other(format!("cannot find dlopen in {} (process {pid})", libc.path))
    })?;
    let dlerror = libc.symbol(&["dlerror"]);
    let mut path = lib.as_os_str().as_encoded_bytes().to_vec();
    path.push(0);
    let mut text = settings.as_bytes().to_vec();
    text.push(0);
    let landing = landing_in(&libc, &maps, pid)?;
    Process::seize(pid, landing)?.with_borrowed(lib, |p, mut i, saved| {
        call(p, i, saved, dlopen, &[DATA, libc::RTLD_NOW as u64], &path)?;
        let Ok(ours) = loaded_library(pid, lib) else {
            let why = match dlerror {
                Some(f) => {
                    let (threads, mem) = (&mut p.threads, &p.mem);
                    let at = threads[i]
                        .call_value(mem, saved, f, &[])
                        .map_err(|e| failed_call(e, pid))?;
                    if at == 0 {
                        String::new()
                    } else {
                        c_string(p, at)
                    }
                }
                None => String::new(),
            };
            return Err(Error::Other(format!(
                "process {pid} could not load the preload library {}: {why}",
                lib.display()
            )));
        };
        let (start, slot) = entry(&ours, "memprof_attach_start")?;
        let (plan, writes) =
            call_plan_when_free(p, lib, &mut i, saved, slot, start, &[DATA], &text)?;
        if plan.status == attach_abi::STATUS_OWNED {
            let owner = Owner::decode(&plan.message()).unwrap_or_default();
            return Ok(Started::Owned(owner));
        }
        if plan.status != 0 {
            return Err(Error::Other(format!("cannot profile process {pid}: {}", plan.message())));
        }
        let (written, clear) = p.apply(Some(i), &writes, Some(plan.countdown_tpoff))?;
        let patched = if clear { plan.patched } else { 0 };
        let made = |w: &&Write| clear || w.guard_lo >= w.guard_hi;
        let undo = writes.iter().filter(made).map(Write::undo).collect();
        let refused = plan.message();
        Ok(Started::Attached(Attached {
            objects: plan.objects,
            patched,
            unpatched: !clear,
            written,
            refused,
            undo,
        }))
    })
}

/// Stops the session of the library in process `pid` and puts back what its attach
/// rerouted. Nothing to do (Ok) when the process no longer maps the library (it executed
/// another program).
pub(super) fn detach(pid: u32, lib: &Path) -> Result<usize, Error> {
    let Ok(ours) = loaded_library(pid, lib) else {
        return Ok(0);
    };
    let (stop, slot) = entry(&ours, "memprof_attach_stop")?;
    let maps = target::mappings(pid)
        .map_err(|e| Error::io(format!("cannot read the maps of {pid}"), e))?;
    let libc = Loaded::find(&maps, target::is_libc)
        .ok_or_else(|| Error::Other(format!("cannot find the C library in process {pid}")))?;
    let landing = landing_in(&libc, &maps, pid)?;
    Process::seize(pid, landing)?.with_borrowed(lib, |p, mut i, saved| {
        let (_, writes) = call_plan_when_free(p, lib, &mut i, saved, slot, stop, &[], &[])?;
        p.apply(Some(i), &writes, None).map(|(made, _)| made)
    })
}

/// Puts back what an attach changed, from outside, when the library's stop could not run
/// (it never returned, or a lock it needs stayed held): with every thread stopped, each
/// slot and entry point still holding what the attach wrote gets what it held before. The
/// session itself is left to a later attach, which takes it over; calls no longer reach it.
pub(super) fn undo(pid: u32, writes: &[Write]) -> Result<usize, Error> {
    let mut p = Process::seize(pid, 0)?;
    let r = p.apply(None, writes, None).map(|(made, _)| made);
    p.release();
    r
}

/// The library's function `name` and the slot where it publishes its answer.
fn entry(ours: &Loaded, name: &str) -> Result<(u64, u64), Error> {
    let missing = |what: &str| Error::Other(format!("the preload library has no {what}"));
    let f = ours.symbol(&[name]).ok_or_else(|| missing(name))?;
    let slot =
        ours.symbol(&["MEMPROF_ATTACH_PLAN"]).ok_or_else(|| missing("MEMPROF_ATTACH_PLAN"))?;
    Ok((f, slot))
}

/// glibc's `__restore_rt` in the process: the bytes of [`LANDING`] in its C library's code.
fn landing_in(libc: &Loaded, maps: &[target::Mapping], pid: u32) -> Result<u64, Error> {
    libc.find_code(&LANDING, maps).ok_or_else(|| {
        Error::Other(format!(
            "cannot find rt_sigreturn's trampoline in {} (process {pid})",
            libc.path
        ))
    })
}
