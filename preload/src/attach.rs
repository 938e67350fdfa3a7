//! Loaded into a running process by `memprof attach` (the crate's §6): the two calls the
//! attacher makes, on a thread of the process it borrows with ptrace while the others run.
//!
//! - [`memprof_attach_start`] starts a session on the attacher's ring
//!   (`memprof::__private::start_attached`) and plans the rerouting: every GOT slot of every
//!   other loaded object that binds a function this library exports (the malloc family,
//!   `dlclose`, `_exit`, the `exec` family, `pthread_attr_setstacksize`) and holds that
//!   function's definition (or the object's own lazy-binding stub) is to hold this
//!   library's export instead. Slots bound elsewhere (another namespace's allocator) are
//!   left alone. The plan is a list of [`Write`]s the attacher makes while every thread is
//!   stopped; nothing here writes the process's GOT.
//! - [`memprof_attach_stop`] stops the session and plans the way back: each slot that still
//!   holds this library's export gets the value it held before.
//!
//! The exports forward to the definitions the program's own calls were bound to: the
//! global scope's, which the constructor's resolution finds (this library is loaded last,
//! so every object precedes it; `next`). What each slot held first is kept here for the
//! way back, across attaches: a slot found already rerouted (by an attacher that died
//! before it detached) keeps the value recorded then.

use core::ffi::{c_char, CStr};
use memprof::__private::attach_abi::{Plan, Write, WRITE_MAX};
use memprof::__private::got;
use std::sync::Mutex;

/// The functions whose slots are rerouted: every export of this library that the program
/// may have bound before it was loaded, except `posix_spawn` (its hook only names the
/// program for `memprof record`).
const NAMES: [&CStr; 23] = [
    c"malloc",
    c"free",
    c"calloc",
    c"realloc",
    c"reallocarray",
    c"memalign",
    c"posix_memalign",
    c"aligned_alloc",
    c"valloc",
    c"pvalloc",
    c"malloc_usable_size",
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

/// What the attacher reads: the answer to its last call, and the writes it names.
struct State {
    plan: Plan,
    writes: Vec<Write>,
    /// Each rerouted slot's address, the value it held before and the export it holds.
    original: Vec<(usize, usize, usize)>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// The address of this library's export of each of [`NAMES`] (0: none).
fn exports() -> [usize; NAMES.len()] {
    let this = exports as *const () as usize;
    let mut out = [0usize; NAMES.len()];
    for (names, out) in NAMES.chunks(16).zip(out.chunks_mut(16)) {
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

/// Publishes `plan` with `writes` and returns the plan's address, which stays valid until
/// the next call.
fn publish(state: &mut Option<State>, mut plan: Plan, writes: Vec<Write>) -> *const Plan {
    let s = state.get_or_insert_with(|| State {
        plan: Plan::default(),
        writes: Vec::new(),
        original: Vec::new(),
    });
    s.writes = writes;
    plan.writes = s.writes.as_ptr() as u64;
    plan.count = s.writes.len() as u64;
    plan.countdown_tpoff = crate::fast::countdown_tpoff();
    s.plan = plan;
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
    let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if crate::preloaded() {
        let why = "the preload library was loaded when this process started (memprof record, \
                   or LD_PRELOAD): it is profiled already";
        return publish(&mut state, Plan::refused(why), Vec::new());
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(settings) }.to_string_lossy().into_owned();
    crate::next::resolve_once();
    // Allocations reach the hooks only once the slots are written; by then the session
    // runs, and nothing must start another (the crate's §4).
    crate::STARTED.store(true, core::sync::atomic::Ordering::Release);
    if let Err(why) = memprof::__private::start_attached(&text) {
        return publish(&mut state, Plan::refused(&why), Vec::new());
    }
    let hooks = exports();
    let names: Vec<&[u8]> = NAMES.iter().map(|n| n.to_bytes()).collect();
    // What the program's calls are bound to: the global scope's definitions.
    let defs: Vec<usize> = NAMES
        .iter()
        // SAFETY: RTLD_DEFAULT is a valid pseudo-handle and the names are C strings.
        .map(|n| unsafe { libc::dlsym(libc::RTLD_DEFAULT, n.as_ptr()) } as usize)
        .collect();
    let original = &mut state.get_or_insert_with(|| State {
        plan: Plan::default(),
        writes: Vec::new(),
        original: Vec::new(),
    });
    let mut writes = Vec::new();
    let mut objects = Vec::new();
    got::slots(&names, hooks[0], |s| {
        let hook = hooks[s.name];
        if hook == 0 {
            return;
        }
        if s.value == hook {
            // Rerouted by an attacher that never came back: its record stays.
            if !objects.contains(&s.object) {
                objects.push(s.object);
            }
            return;
        }
        if !(s.own || (s.value == defs[s.name] && s.value != 0)) {
            return;
        }
        writes.push(slot_write(s.addr, s.value, hook));
        original.original.retain(|&(a, _, _)| a != s.addr);
        original.original.push((s.addr, s.value, hook));
        if !objects.contains(&s.object) {
            objects.push(s.object);
        }
    });
    let plan = Plan { objects: objects.len() as u64, ..Plan::default() };
    publish(&mut state, plan, writes)
}

/// Stops the session and plans the way back (see the module documentation).
///
/// # Safety
/// Called by `memprof attach` only, on one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn memprof_attach_stop() -> *const Plan {
    let _busy = memprof::__private::Busy::enter();
    let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    memprof::__private::stop_attached();
    let writes = state
        .as_ref()
        .map(|s| {
            s.original
                .iter()
                .map(|&(addr, before, hook)| slot_write(addr, hook, before))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    publish(&mut state, Plan::default(), writes)
}
