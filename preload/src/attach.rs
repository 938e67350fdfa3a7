//! Loaded into a running process by `memprof attach` (the crate's §6): the two calls the
//! attacher makes, on a thread of the process it borrows with ptrace while the others run.
//!
//! - [`memprof_attach_start`] starts a session on the attacher's ring
//!   (`memprof::__private::start_attached`) and plans the rerouting: every GOT slot of every
//!   other loaded object that binds a function this library exports (the malloc family,
//!   `dlclose`, `_exit`, the `exec` family, `pthread_attr_setstacksize`) and holds that
//!   function's definition (or the object's own lazy-binding stub) is to hold this
//!   library's export instead. "The definition" is two addresses when a non-PIC executable
//!   takes the function's address (node does for `malloc`, `calloc`, `realloc`, `free`):
//!   its PLT entry, which every pointer to the function in the process equals (GOT data
//!   slots hold it), and the definition the PLT slots were bound to, the executable's
//!   own included, which its PLT entry jumps through. Both are rerouted: a pointer to the
//!   function taken before the attach, anywhere, reaches the hook through the executable's
//!   slot. Slots bound elsewhere (another namespace's allocator) are left alone. The plan
//!   is a list of [`Write`]s the attacher makes while every thread is stopped; nothing
//!   here writes the process's GOT.
//! - [`memprof_attach_stop`] stops the session and plans the way back: each slot that still
//!   holds this library's export gets the value it held before.
//!
//! The start also plans the patch of the entry points of the allocator the program's calls
//! are bound to (`crate::patch::deferred`), glibc's in most programs: a slot is not the only
//! way to it, and a call through a pointer the program kept reaches the hook only there.
//! The plan's message names a family the patcher refused, for the attacher's note.
//!
//! One profiler a process: while a session runs, [`MEMPROF_ATTACH_OWNER`] names its
//! attacher (`attach_abi::Owner`); the start refuses, under the lock, a session owned by another attacher than the one the caller
//! says it takes over (`STATUS_OWNED`), and a process preloaded from its start.
//!
//! Neither call ever waits for ever or leaves a lock held (the attacher may have stopped
//! the thread anywhere, inside `fork` too, and may die meanwhile): each answers
//! `STATUS_BUSY`, having done nothing, when its thread is inside `fork` or a lock it needs
//! stays held for more than a moment (`agent/attached.rs`), and the attacher tries again.
//!
//! The exports forward to the definitions the program's own calls were bound to: the
//! global scope's, which the constructor's resolution finds (this library is loaded last,
//! so every object precedes it; `next`). What each slot held first is kept here for the
//! way back, across attaches: a slot found already rerouted (by an attacher that died
//! before it detached) keeps the value recorded then.

use core::ffi::{c_char, CStr};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use memprof::__private::attach_abi::{self, Owner, Plan, Write, WRITE_MAX};
use memprof::__private::{got, Refusal};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// The functions whose slots are rerouted: every export of this library that the program
/// may have bound before it was loaded (the malloc family of `next`'s table, then these),
/// except `posix_spawn` (its hook only names the program for `memprof record`).
const OTHERS: [&CStr; 12] = [
    c"dlclose",
    c"_exit",
    c"_Exit",
    c"execve",
    c"execv",
    c"execvp",
    c"execvpe",
    c"fexecve",
    c"execl",
    c"execle",
    c"execlp",
    c"pthread_attr_setstacksize",
];

/// `next`'s table and [`OTHERS`].
fn names() -> impl Iterator<Item = &'static CStr> {
    crate::next::NAMES.iter().chain(OTHERS.iter()).copied()
}

/// The slots named `dlopen` get [`attach_dlopen`], so that a library the process loads
/// while attached has its slots rerouted too.
const DLOPEN: &CStr = c"dlopen";

/// Sessions of an attach run: [`attach_dlopen`] reroutes what it loads.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The `dlopen` the program's calls were bound to.
static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);

/// What the attacher reads: the answer to its last call, and the writes it names.
struct State {
    plan: Plan,
    writes: Vec<Write>,
    /// Each rerouted slot's address, the value it held before and the export it holds.
    original: Vec<(usize, usize, usize)>,
    /// The entry points patched (`crate::patch::deferred`): the writes that patched them.
    code: Vec<Write>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// The attacher whose session runs (`attach_abi::Owner`'s words; all zero: none). Exported
/// so that a look from outside (a debugger, `/proc/PID/mem`) can tell who profiles.
#[no_mangle]
pub static MEMPROF_ATTACH_OWNER: [AtomicU64; 4] =
    [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

fn owner() -> Option<Owner> {
    Owner::from_words(MEMPROF_ATTACH_OWNER.each_ref().map(|w| w.load(Ordering::Acquire)))
}

fn set_owner(o: Owner) {
    for (w, v) in MEMPROF_ATTACH_OWNER.iter().zip(o.to_words()) {
        w.store(v, Ordering::Release);
    }
}

/// The address of the word that names the thread inside `fork` (`forking_word`), set at
/// the first start: a later attacher reads it and borrows no thread it names.
#[no_mangle]
pub static MEMPROF_FORKING_AT: AtomicUsize = AtomicUsize::new(0);

/// The answer of a call that did nothing ([`attach_abi::STATUS_BUSY`]).
static BUSY: Plan = Plan::busy();

/// Publishes [`BUSY`] (no lock, no allocation).
fn busy() -> *const Plan {
    MEMPROF_ATTACH_PLAN.store(&BUSY as *const Plan as usize, Ordering::Release);
    &BUSY
}

/// [`STATE`], if it frees within a moment: a call on another thread (`attach_dlopen`) lets
/// go at once, and one abandoned by an attacher that timed out must not stop the next.
fn state() -> Option<MutexGuard<'static, Option<State>>> {
    let start = std::time::Instant::now();
    loop {
        match STATE.try_lock() {
            Ok(g) => return Some(g),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if start.elapsed().as_millis() < 200 => {
                std::thread::yield_now()
            }
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

/// The address of the answer to the attacher's last call (its [`Plan`]), which the
/// attacher reads here: a call it runs returns through a signal frame, not to it.
#[no_mangle]
pub static MEMPROF_ATTACH_PLAN: AtomicUsize = AtomicUsize::new(0);

/// The address of this library's export of each of [`names`] (0: none).
fn exports() -> Vec<usize> {
    let this = exports as *const () as usize;
    let all: Vec<&CStr> = names().collect();
    let mut out = vec![0usize; all.len()];
    for (names, out) in all.chunks(16).zip(out.chunks_mut(16)) {
        let mut found = [core::ptr::null_mut(); 16];
        memprof::__private::own_definitions(this, names, &mut found[..names.len()]);
        for (o, f) in out.iter_mut().zip(found) {
            *o = f as usize;
        }
    }
    out
}

/// The slot write that puts `new` where `old` is.
fn slot_write(addr: usize, old: usize, new: usize) -> Write {
    let mut w = Write { addr: addr as u64, len: 8, ..Write::default() };
    w.old[..8].copy_from_slice(&old.to_le_bytes());
    w.new[..8].copy_from_slice(&new.to_le_bytes());
    const _: () = assert!(WRITE_MAX >= 8);
    w
}

/// Whether the entry point patch `w` is still in place (an attacher that died never put
/// it back).
fn in_place(w: &Write) -> bool {
    let len = (w.len as usize).min(WRITE_MAX);
    // SAFETY: `w.addr` is an entry point this library patched, in a code segment that
    // stays mapped (executables and the libraries of a running process's allocator are
    // not unloaded while their functions are patched: the patched functions are the
    // program's allocator).
    let now = unsafe { core::slice::from_raw_parts(w.addr as *const u8, len) };
    now == &w.new[..len]
}

/// Publishes `plan` with `writes` and returns the plan's address, which stays valid until
/// the next call.
fn publish(state: &mut Option<State>, mut plan: Plan, writes: Vec<Write>) -> *const Plan {
    let s = state.get_or_insert_with(|| State {
        plan: Plan::default(),
        writes: Vec::new(),
        original: Vec::new(),
        code: Vec::new(),
    });
    s.writes = writes;
    plan.writes = s.writes.as_ptr() as u64;
    plan.count = s.writes.len() as u64;
    plan.countdown_tpoff = crate::fast::countdown_tpoff();
    s.plan = plan;
    MEMPROF_ATTACH_PLAN.store(&s.plan as *const Plan as usize, Ordering::Release);
    &s.plan
}

/// Starts a session with the settings `settings` (`KEY=VALUE` lines) and plans the
/// rerouting (see the module documentation). Returns the plan; its `status` is non-zero,
/// with a message, when the session could not start.
///
/// # Safety
/// `settings` is a NUL-terminated string. Called by `memprof attach` only, on one thread
/// at a time.
#[no_mangle]
pub unsafe extern "C" fn memprof_attach_start(settings: *const c_char) -> *const Plan {
    let _busy = memprof::__private::Busy::enter();
    let forking = memprof::__private::forking_word() as *const AtomicUsize as usize;
    MEMPROF_FORKING_AT.store(forking, Ordering::Release);
    if memprof::__private::in_fork() {
        return busy();
    }
    let Some(mut state) = state() else {
        return busy();
    };
    if crate::preloaded() {
        let why = "already profiled by memprof since it started (memprof record, or the \
                   preload library in LD_PRELOAD): one profiler a process";
        return publish(&mut state, Plan::refused(why), Vec::new());
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(settings) }.to_string_lossy().into_owned();
    // One profiler a process: the session of another attacher than the one the caller
    // takes over (which it found dead) stays.
    let takeover = attach_abi::setting(&text, attach_abi::TAKEOVER).and_then(Owner::decode);
    if let Some(now) = owner() {
        if !takeover.is_some_and(|t| t.same_attacher(&now)) {
            let mut plan = Plan::refused("");
            plan.status = attach_abi::STATUS_OWNED;
            plan.set_message(&now.encode());
            return publish(&mut state, plan, Vec::new());
        }
    }
    crate::next::resolve_once();
    // Allocations reach the hooks only once the slots are written; by then the session
    // runs, and nothing must start another (the crate's §4).
    crate::STARTED.store(true, core::sync::atomic::Ordering::Release);
    match memprof::__private::start_attached(&text) {
        Ok(()) => {}
        Err(Refusal::Busy) => return busy(),
        Err(Refusal::Why(why)) => return publish(&mut state, Plan::refused(&why), Vec::new()),
    }
    // SAFETY: time(NULL) has no preconditions.
    let since = unsafe { libc::time(core::ptr::null_mut()) }.max(0) as u64;
    set_owner(Owner::of_settings(&text, since).unwrap_or_default());
    let table = Table::new();
    REAL_DLOPEN.store(table.dlopen(), Ordering::Release);
    let original = &mut state.get_or_insert_with(|| State {
        plan: Plan::default(),
        writes: Vec::new(),
        original: Vec::new(),
        code: Vec::new(),
    });
    let mut writes = Vec::new();
    let mut objects = Vec::new();
    table.slots(|s, hook| {
        if !objects.contains(&s.object) {
            objects.push(s.object);
        }
        // Rerouted by an attacher that never came back: its record stays.
        if s.value != hook {
            writes.push(slot_write(s.addr, s.value, hook));
            original.original.retain(|&(a, _, _)| a != s.addr);
            original.original.push((s.addr, s.value, hook));
        }
    });
    // The entry points of the allocator the program's calls are bound to (glibc's, or an
    // earlier object's that defines malloc) and of those under names of their own in the
    // executable, patched as at start-up: the slots never reach the latter, nor the former
    // through a pointer the program kept (a table in a PIE's data, a copy made at run time,
    // the loader's own). A family refused is named for the attacher's note.
    let kept: Vec<Write> = original.code.iter().filter(|w| in_place(w)).copied().collect();
    let in_place: Vec<usize> = kept.iter().map(|w| w.addr as usize).collect();
    let (code, refused) = crate::patch::deferred(&in_place);
    original.code = kept.into_iter().chain(code.iter().copied()).collect();
    let patched = original.code.len() as u64;
    writes.extend(code);
    let mut plan = Plan { objects: objects.len() as u64, patched, ..Plan::default() };
    if !refused.is_empty() {
        // What the slots alone leave out, for the attacher's note.
        plan.set_message(&refused.join("; "));
    }
    ACTIVE.store(true, Ordering::Release);
    publish(&mut state, plan, writes)
}

/// The functions whose slots are rerouted, where each goes, and what the program's calls
/// were bound to.
struct Table {
    names: Vec<&'static [u8]>,
    hooks: Vec<usize>,
    /// Each function's address as a pointer to it compares (`dlsym(RTLD_DEFAULT)`): its
    /// definition, or the executable's PLT entry when a non-PIC executable takes its address
    /// (node does for `malloc`, `calloc`, `realloc` and `free`).
    defs: Vec<usize>,
    /// The definition the PLT slots were bound to (`first_definitions`): the same as
    /// `defs` but in that case, where every PLT slot, the executable's own included, holds
    /// the definition while `defs` names the executable's PLT entry, which jumps through
    /// the executable's slot.
    bound: Vec<usize>,
}

impl Table {
    fn new() -> Table {
        let mut listed: Vec<&'static [u8]> = names().map(CStr::to_bytes).collect();
        listed.push(DLOPEN.to_bytes());
        let mut hooks = exports();
        hooks.push(attach_dlopen as *const () as usize);
        // What the program's calls are bound to: the global scope's definitions.
        let defs = names()
            .chain(core::iter::once(DLOPEN))
            // SAFETY: RTLD_DEFAULT is a valid pseudo-handle and the names are C strings.
            .map(|n| unsafe { libc::dlsym(libc::RTLD_DEFAULT, n.as_ptr()) } as usize)
            .collect();
        let all: Vec<&CStr> = names().chain(core::iter::once(DLOPEN)).collect();
        let mut bound = vec![0usize; all.len()];
        for (names, out) in all.chunks(16).zip(bound.chunks_mut(16)) {
            let mut found = [core::ptr::null_mut(); 16];
            memprof::__private::first_definitions(names, &mut found[..names.len()]);
            for (o, f) in out.iter_mut().zip(found) {
                *o = f as usize;
            }
        }
        Table { names: listed, hooks, defs, bound }
    }

    /// The `dlopen` the program's calls reach in the end: the definition, never the
    /// executable's PLT entry (whose slot is rerouted to [`attach_dlopen`]).
    fn dlopen(&self) -> usize {
        match self.bound.last() {
            Some(&b) if b != 0 => b,
            _ => self.defs.last().copied().unwrap_or(0),
        }
    }

    /// Calls `f` with each slot to reroute (or rerouted already) and its hook: slots that
    /// hold the program's definition (as bound, or as its address compares), or their own
    /// object's lazy-binding stub. Slots bound elsewhere (another namespace's allocator)
    /// are left alone.
    fn slots(&self, mut f: impl FnMut(got::Slot, usize)) {
        got::slots(&self.names, self.hooks[0], |s| {
            let hook = self.hooks[s.name];
            let program = |d: usize| d != 0 && s.value == d;
            if hook != 0
                && (s.value == hook
                    || s.own
                    || program(self.defs[s.name])
                    || program(self.bound[s.name]))
            {
                f(s, hook);
            }
        });
    }
}

/// `dlopen` while attached: the program's `dlopen`, then the slots of what it loaded are
/// rerouted here, in the process (no thread can be in a slot write: each is one aligned
/// 8-byte store, the page made writable around it when the loader sealed it read-only).
unsafe extern "C" fn attach_dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    let real = REAL_DLOPEN.load(Ordering::Acquire);
    if real == 0 {
        return core::ptr::null_mut();
    }
    // SAFETY: `real` is the definition of `dlopen` the program's calls were bound to.
    let real: unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void =
        unsafe { core::mem::transmute(real) };
    // SAFETY: the caller's contract, which is dlopen's.
    let handle = unsafe { real(file, mode) };
    if !handle.is_null() && ACTIVE.load(Ordering::Acquire) {
        let saved = memprof::__private::errno();
        reroute_loaded();
        memprof::__private::set_errno(saved);
    }
    handle
}

/// Reroutes the slots no attach planned (objects loaded since), in the process.
fn reroute_loaded() {
    let _busy = memprof::__private::Busy::enter();
    let Some(mut state) = state() else {
        return;
    };
    let Some(s) = state.as_mut() else {
        return;
    };
    if !ACTIVE.load(Ordering::Acquire) {
        return;
    }
    let table = Table::new();
    let mut todo = Vec::new();
    table.slots(|slot, hook| {
        if slot.value != hook {
            todo.push((slot.addr, slot.value, hook));
        }
    });
    if todo.is_empty() {
        return;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    for (addr, before, hook) in todo {
        // SAFETY: `addr` is a GOT slot of a loaded object (an aligned word inside one of
        // its PT_LOAD segments, `got`), whose page protection `store_slot` restores.
        if unsafe { store_slot(&maps, addr, before, hook) } {
            s.original.retain(|&(a, _, _)| a != addr);
            s.original.push((addr, before, hook));
        }
    }
}

/// Stores `hook` in the slot at `addr` if it still holds `before`, making its page
/// writable for the store when it is not (`maps`: this process's `/proc/self/maps`).
///
/// # Safety
/// `addr` is an aligned GOT slot of a loaded object.
unsafe fn store_slot(maps: &str, addr: usize, before: usize, hook: usize) -> bool {
    let page = addr & !4095;
    let prot = maps
        .lines()
        .find_map(|l| {
            let (range, rest) = l.split_once(' ')?;
            let (lo, hi) = range.split_once('-')?;
            let (lo, hi) =
                (usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?);
            (lo..hi).contains(&addr).then(|| {
                let p = rest.as_bytes();
                let mut prot = 0;
                if p.first() == Some(&b'r') {
                    prot |= libc::PROT_READ;
                }
                if p.get(1) == Some(&b'w') {
                    prot |= libc::PROT_WRITE;
                }
                if p.get(2) == Some(&b'x') {
                    prot |= libc::PROT_EXEC;
                }
                prot
            })
        })
        .unwrap_or(libc::PROT_READ);
    let sealed = prot & libc::PROT_WRITE == 0;
    // SAFETY: the page holds the slot (the caller's contract); only its protection changes,
    // to one that keeps it readable.
    if sealed && unsafe { libc::mprotect(page as *mut c_void, 4096, prot | libc::PROT_WRITE) } != 0
    {
        return false;
    }
    // SAFETY: an aligned word of a loaded object, writable now.
    let slot = unsafe { &*(addr as *const AtomicUsize) };
    let stored = slot.compare_exchange(before, hook, Ordering::AcqRel, Ordering::Acquire).is_ok();
    if sealed {
        // SAFETY: as above; back to what the loader left.
        unsafe { libc::mprotect(page as *mut c_void, 4096, prot) };
    }
    stored
}

/// Stops the session and plans the way back (see the module documentation).
///
/// # Safety
/// Called by `memprof attach` only, on one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn memprof_attach_stop() -> *const Plan {
    let _busy = memprof::__private::Busy::enter();
    if memprof::__private::in_fork() {
        return busy();
    }
    let Some(mut state) = state() else {
        return busy();
    };
    if let Err(Refusal::Busy) = memprof::__private::stop_attached() {
        return busy();
    }
    ACTIVE.store(false, Ordering::Release);
    set_owner(Owner::default());
    let writes = state
        .as_ref()
        .map(|s| {
            let slots =
                s.original.iter().map(|&(addr, before, hook)| slot_write(addr, hook, before));
            // An entry point gets its first bytes back; a thread at it then runs them.
            let code = s.code.iter().map(|w| Write {
                old: w.new,
                new: w.old,
                guard_lo: 0,
                guard_hi: 0,
                ..*w
            });
            slots.chain(code).collect::<Vec<_>>()
        })
        .unwrap_or_default();
    publish(&mut state, Plan::default(), writes)
}
