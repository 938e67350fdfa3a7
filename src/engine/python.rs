//! CPython's own frames in a sampled allocation's call stack (3.11, 3.12 and 3.13): read
//! from the allocating thread's state on the sample path, and spliced into the native
//! stack where the interpreter runs them.
//!
//! # 1. What is read, and when
//! Only on a sampled allocation, and only in a process where the session found CPython
//! and reads its frames (not in the exact mode unless asked: [`wanted`]) ([`detect`], at
//! its start: `Py_Version` and the functions below among the loaded
//! objects' exports, found without `dlsym`). Nothing is added to the unsampled path and
//! no hook is set in the interpreter. The thread's state comes from the interpreter's own
//! accessor (`_PyThreadState_GetCurrent` in 3.12 and 3.13, `_PyThreadState_UncheckedGet`
//! in 3.11, which reads the holder of the GIL: its `thread_id` must be this thread's); a
//! thread that allocates with the GIL released (numpy's large arrays) has its state from
//! the interpreter's per-thread key instead (`PyGILState_GetThisThreadState`, asked only
//! while `Py_IsInitialized`). From it the chain of `_PyInterpreterFrame`s, the
//! innermost first, by offsets of our own for each version ([`LAYOUTS`], measured with
//! `offsetof` against each version's headers; in 3.13 they are checked against what the
//! interpreter publishes in `_Py_DebugOffsets`, and a build that disagrees, such as a
//! free-threaded one, gets native stacks only). A frame whose code is not a code object (`PyCode_Type`) ends the walk, as does a
//! null or misaligned link: the walk reads what CPython's own `faulthandler` reads in a
//! signal handler, the current thread's chain, which only that thread changes.
//!
//! # 2. The frames on the wire
//! Each Python frame becomes one word of the stack: [`TAG`] (the top bit, never set in a
//! user-space address), the instruction's index in code units (15 bits, saturated) and the
//! code object's address (48 bits). The collector reads the code object in the program's
//! memory once per such word (`record/command/collect/python.rs`): qualified name, file,
//! and the line of that instruction from the location table.
//!
//! # 3. Where they go
//! Each activation of `_PyEval_EvalFrameDefault` runs a run of Python frames: in 3.11 the
//! run ends with the frame marked `is_entry`; in 3.12 and 3.13 the activation pushes a shim
//! frame owned by the C stack (`FRAME_OWNED_BY_CSTACK`) below its first. The runs go, the
//! innermost first, just inside the native frames whose return address is in
//! `_PyEval_EvalFrameDefault` (its symbol's extent), also innermost first: the native frame
//! stays, so a stack reads `PyUnicode_New`, …, `build (app.py:2)`, `<module> (app.py:3)`,
//! `_PyEval_EvalFrameDefault`, …, `main`. Runs left over when the native stack was whole
//! (its unwinding stopped early) go at its outer end. The whole is cut at the session's
//! depth, as a native stack is.

use crate::engine::callstack::Captured;
use crate::sys::elf_lookup::{first_symbols, Prior};
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// The mark of a Python frame's word (§2).
pub const TAG: usize = 1 << 63;
/// Where the instruction index sits in a Python frame's word, and its bits.
pub const INDEX_SHIFT: u32 = 48;
/// The largest instruction index a word holds.
pub const INDEX_MAX: usize = (1 << 15) - 1;
/// The code object's address bits of a Python frame's word.
pub const CODE_MASK: usize = (1 << INDEX_SHIFT) - 1;

/// Where a version keeps what the walk and the collector read (byte offsets; x86-64,
/// release builds, the default configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The minor version (11, 12, 13).
    pub minor: u8,
    /// `PyThreadState.thread_id` (`pthread_self()` of its thread).
    pub ts_thread_id: usize,
    /// `PyThreadState.cframe` (3.11, 3.12), then `_PyCFrame.current_frame`; or, with no
    /// `cframe`, `PyThreadState.current_frame` (3.13).
    pub ts_cframe: Option<usize>,
    /// `_PyCFrame.current_frame`, or `PyThreadState.current_frame`.
    pub current_frame: usize,
    /// `_PyInterpreterFrame.f_code` (`f_executable` in 3.13).
    pub f_code: usize,
    /// `_PyInterpreterFrame.previous`.
    pub f_previous: usize,
    /// `_PyInterpreterFrame.prev_instr` (`instr_ptr` in 3.13).
    pub f_instr: usize,
    /// `_PyInterpreterFrame.is_entry` (3.11 only).
    pub f_is_entry: Option<usize>,
    /// `_PyInterpreterFrame.owner`.
    pub f_owner: usize,
    /// `PyCodeObject.co_code_adaptive`: the first instruction.
    pub co_code: usize,
    /// `PyCodeObject.co_filename`, `co_name`, `co_qualname`, `co_firstlineno`,
    /// `co_linetable`.
    pub co_filename: usize,
    pub co_name: usize,
    pub co_qualname: usize,
    pub co_firstlineno: usize,
    pub co_linetable: usize,
    /// `sizeof(PyASCIIObject)` and `sizeof(PyCompactUnicodeObject)`: where a compact
    /// string's characters start.
    pub ascii_size: usize,
    pub compact_size: usize,
}

/// `FRAME_OWNED_BY_CSTACK` (3.12, 3.13): an activation's shim frame (§3).
const OWNED_BY_CSTACK: u8 = 3;

/// 3.12's layout; 3.11's and 3.13's are written as their differences from it.
const PY312: Layout = Layout {
    minor: 12,
    ts_thread_id: 136,
    ts_cframe: Some(56),
    current_frame: 0,
    f_code: 0,
    f_previous: 8,
    f_instr: 56,
    f_is_entry: None,
    f_owner: 70,
    co_code: 192,
    co_filename: 112,
    co_name: 120,
    co_qualname: 128,
    co_firstlineno: 68,
    co_linetable: 136,
    ascii_size: 40,
    compact_size: 56,
};

/// The layouts memprof knows, by minor version.
pub const LAYOUTS: [Layout; 3] = [
    Layout {
        minor: 11,
        ts_thread_id: 152,
        current_frame: 8,
        f_code: 32,
        f_previous: 48,
        f_is_entry: Some(68),
        f_owner: 69,
        co_code: 184,
        co_firstlineno: 72,
        ascii_size: 48,
        compact_size: 72,
        ..PY312
    },
    PY312,
    // No `_PyCFrame`: the thread state holds the current frame.
    Layout {
        minor: 13,
        ts_thread_id: 152,
        ts_cframe: None,
        current_frame: 72,
        co_code: 200,
        ..PY312
    },
];

/// The layout of CPython 3.`minor`, if memprof knows it.
pub fn layout(minor: u8) -> Option<&'static Layout> {
    LAYOUTS.iter().find(|l| l.minor == minor)
}

/// The CPython the session found (§1): its layout's index + 1 (0: none).
static FOUND: AtomicU8 = AtomicU8::new(0);
/// The thread-state accessor's address.
static GET_TSTATE: AtomicUsize = AtomicUsize::new(0);
/// `Py_IsInitialized` and `PyGILState_GetThisThreadState` (0: not found).
static IS_INITIALIZED: AtomicUsize = AtomicUsize::new(0);
static GET_OWN_TSTATE: AtomicUsize = AtomicUsize::new(0);
/// `PyCode_Type`'s address.
static CODE_TYPE: AtomicUsize = AtomicUsize::new(0);
/// `_PyEval_EvalFrameDefault`'s extent.
static EVAL_START: AtomicUsize = AtomicUsize::new(0);
static EVAL_END: AtomicUsize = AtomicUsize::new(0);

/// Whether a session of mean interval `interval` reads Python frames: `MEMPROF_PYTHON_FRAMES`
/// `on` or `off` (`record --python-frames`), else at every interval but the exact mode's,
/// where every allocation would walk the chain and every line would be a stack of its own
/// (the exact mode's whole cost about 1.4× on the pipeline bench's JSON workload).
fn wanted(interval: f64) -> bool {
    // SAFETY: a NUL-terminated name; getenv reads the environment without allocating, and
    // the pointer it returns is read at once.
    let v = unsafe { libc::getenv(c"MEMPROF_PYTHON_FRAMES".as_ptr()) };
    // SAFETY: a non-null answer of getenv is a NUL-terminated string.
    let v = (!v.is_null()).then(|| unsafe { core::ffi::CStr::from_ptr(v) }.to_bytes());
    match v {
        Some(b"on") => true,
        Some(b"off") => false,
        _ => interval > 1.0,
    }
}

/// Looks for CPython among the loaded objects, if the session reads Python frames
/// ([`wanted`]), at a session's start: never on the sample path. Never allocates.
pub(crate) fn detect(interval: f64) {
    let names = [
        c"Py_Version",
        c"PyCode_Type",
        c"_PyEval_EvalFrameDefault",
        c"_PyThreadState_GetCurrent",
        c"_PyThreadState_UncheckedGet",
        c"_PyRuntime",
        c"Py_IsInitialized",
        c"PyGILState_GetThisThreadState",
    ];
    let mut found = [None::<Prior>; 8];
    FOUND.store(0, Ordering::Relaxed);
    if !wanted(interval) {
        return;
    }
    first_symbols(&names, &mut found);
    let [Some(version), Some(code), Some(eval), current, unchecked, runtime, initialized, own] =
        found
    else {
        return;
    };
    // SAFETY: `Py_Version` is CPython's exported `const unsigned long`, mapped (the lookup
    // checks every address against the object's loaded segments).
    let hex = unsafe { (version.addr as *const u64).read() };
    let (major, minor) = ((hex >> 24) & 0xff, ((hex >> 16) & 0xff) as u8);
    let get = match minor {
        11 => unchecked,
        _ => current,
    };
    let (Some(l), Some(get), 3) = (LAYOUTS.iter().position(|l| l.minor == minor), get, major)
    else {
        // A version memprof does not know: native stacks only (`record` says so).
        return;
    };
    if eval.size == 0 || (minor >= 13 && !debug_offsets_agree(&LAYOUTS[l], runtime)) {
        return;
    }
    GET_TSTATE.store(get.addr, Ordering::Relaxed);
    // This thread's state however it holds the GIL (`current_frame`), when both are there.
    let (initialized, own) = match (initialized, own) {
        (Some(i), Some(o)) => (i.addr, o.addr),
        _ => (0, 0),
    };
    IS_INITIALIZED.store(initialized, Ordering::Relaxed);
    GET_OWN_TSTATE.store(own, Ordering::Relaxed);
    CODE_TYPE.store(code.addr, Ordering::Relaxed);
    EVAL_START.store(eval.addr, Ordering::Relaxed);
    EVAL_END.store(eval.addr + eval.size, Ordering::Relaxed);
    FOUND.store(l as u8 + 1, Ordering::Release);
}

/// Whether 3.13's `_Py_DebugOffsets` (the first member of `_PyRuntime`) publishes the
/// offsets of `l`: a build whose layout differs (free-threaded, another configuration)
/// gets no Python frames rather than a walk by wrong offsets.
fn debug_offsets_agree(l: &Layout, runtime: Option<Prior>) -> bool {
    let Some(runtime) = runtime.filter(|r| r.size >= 44 * 8) else {
        return false;
    };
    // SAFETY: `_PyRuntime` is CPython's exported runtime state, mapped for at least its
    // symbol's size (checked above), whose first 44 words are `_Py_DebugOffsets` in 3.13.
    let word = |i: usize| unsafe { ((runtime.addr + 8 * i) as *const u64).read() } as usize;
    let cookie = word(0).to_le_bytes();
    let free_threaded = word(2);
    let expected = [
        (23, l.current_frame),
        (24, l.ts_thread_id),
        (29, l.f_previous),
        (30, l.f_code),
        (31, l.f_instr),
        (33, l.f_owner),
        (35, l.co_filename),
        (36, l.co_name),
        (37, l.co_qualname),
        (38, l.co_linetable),
        (39, l.co_firstlineno),
        (43, l.co_code),
    ];
    &cookie == b"xdebugpy" && free_threaded == 0 && expected.iter().all(|&(i, v)| word(i) == v)
}

/// The layout of the CPython in this process, if the session found one it knows.
#[inline]
pub(crate) fn found() -> Option<&'static Layout> {
    match FOUND.load(Ordering::Acquire) {
        0 => None,
        i => LAYOUTS.get(i as usize - 1),
    }
}

/// Reads a `T` at `addr`, which the caller vouches for (§1).
///
/// # Safety
/// `addr` is a readable address of a `T` (the current thread's interpreter state).
#[inline]
unsafe fn at<T: Copy>(addr: usize) -> T {
    // SAFETY: the caller's guarantee.
    unsafe { (addr as *const T).read_unaligned() }
}

/// The current thread's innermost `_PyInterpreterFrame`, or 0 when the thread runs no
/// Python code now.
fn current_frame(l: &Layout) -> usize {
    let get = GET_TSTATE.load(Ordering::Relaxed);
    // SAFETY: `get` is CPython's thread-state accessor, found by name at the session's
    // start (`detect`), a function of no arguments returning a pointer: it reads a
    // thread-local or an atomic and takes no lock.
    let get: extern "C" fn() -> usize = unsafe { core::mem::transmute(get) };
    let ours = |ts: usize| {
        ts != 0
            && ts % 8 == 0
            // SAFETY: a live thread state (an accessor's answer) has `thread_id` as a field.
            && unsafe { at::<u64>(ts + l.ts_thread_id) } == this_thread()
    };
    let mut ts = get();
    if !ours(ts) {
        // The thread does not hold the GIL now (3.11's accessor names the holder; 3.12's
        // is null while detached): an extension that allocates with the GIL released
        // (numpy's large arrays, lzma's encoder). Its own frames are still its chain.
        ts = own_thread_state();
        if !ours(ts) {
            return 0;
        }
    }
    let holder = match l.ts_cframe {
        // SAFETY: `cframe` is a field of the thread state, pointing at a live `_PyCFrame`.
        Some(off) => unsafe { at::<usize>(ts + off) },
        None => ts,
    };
    if holder == 0 || holder % 8 != 0 {
        return 0;
    }
    // SAFETY: the current frame's field of a live `_PyCFrame` or thread state.
    unsafe { at::<usize>(holder + l.current_frame) }
}

/// This thread's state from the interpreter's own per-thread key
/// (`PyGILState_GetThisThreadState`), whether or not it holds the GIL; asked only while
/// the interpreter is initialized (`Py_IsInitialized`), when that key exists. 0 if unknown.
fn own_thread_state() -> usize {
    let (init, own) =
        (IS_INITIALIZED.load(Ordering::Relaxed), GET_OWN_TSTATE.load(Ordering::Relaxed));
    if init == 0 || own == 0 {
        return 0;
    }
    // SAFETY: both are CPython's exported functions of no arguments, found by name at the
    // session's start: `Py_IsInitialized` reads a flag; `PyGILState_GetThisThreadState`
    // reads the thread's value of a key the runtime created before setting that flag
    // (`pthread_getspecific`), taking no lock and allocating nothing.
    unsafe {
        let init: extern "C" fn() -> i32 = core::mem::transmute(init);
        if init() == 0 {
            return 0;
        }
        let own: extern "C" fn() -> usize = core::mem::transmute(own);
        own()
    }
}

/// What the walk of a thread's frames finds next.
enum Found {
    /// A Python frame's word (§2).
    Frame(usize),
    /// The end of an activation's run (§3).
    RunEnd,
}

/// The walk of the current thread's chain, innermost first (§1, §3).
struct Walk<'l> {
    l: &'l Layout,
    frame: usize,
    code_type: usize,
    /// 3.11: the frame just given was its activation's first (`is_entry`).
    run_ended: bool,
    /// Frames left to read: a chain longer than this (a damaged one, a cycle) is cut.
    left: usize,
}

/// The most frames a walk reads.
const MAX_WALK: usize = 4096;

impl Walk<'_> {
    fn next(&mut self) -> Option<Found> {
        if core::mem::take(&mut self.run_ended) {
            return Some(Found::RunEnd);
        }
        let (l, f) = (self.l, self.frame);
        if f == 0 || f % 8 != 0 || self.left == 0 {
            return None;
        }
        self.left -= 1;
        // SAFETY: `f` is a frame of the current thread's chain (§1): its fields are read as
        // CPython's faulthandler reads them.
        let (code, instr, previous, owner) = unsafe {
            (
                at::<usize>(f + l.f_code),
                at::<usize>(f + l.f_instr),
                at::<usize>(f + l.f_previous),
                at::<u8>(f + l.f_owner),
            )
        };
        if l.f_is_entry.is_none() && owner == OWNED_BY_CSTACK {
            // The shim of an activation: the run inside it ends here.
            self.frame = previous;
            return Some(Found::RunEnd);
        }
        // SAFETY: `code` is the frame's code field; its type word is read only once it is
        // known not null and aligned.
        if code == 0 || code % 8 != 0 || unsafe { at::<usize>(code + 8) } != self.code_type {
            self.frame = 0;
            return None;
        }
        if let Some(e) = l.f_is_entry {
            // SAFETY: a field of the same frame.
            self.run_ended = unsafe { at::<u8>(f + e) } != 0;
        }
        self.frame = previous;
        let index = instr.saturating_sub(code + l.co_code) / 2;
        Some(Found::Frame(TAG | (index.min(INDEX_MAX) << INDEX_SHIFT) | (code & CODE_MASK)))
    }
}

/// `pthread_self()`, which CPython keeps as a thread state's `thread_id`.
fn this_thread() -> u64 {
    // SAFETY: no preconditions; it reads the thread pointer.
    unsafe { libc::pthread_self() as u64 }
}

/// Splices the calling thread's Python frames into `stack` (§3), cut at `max` frames.
/// Does nothing outside CPython or in a thread running no Python code. Never allocates
/// through the profiled allocator (a stack deeper than the inline buffer takes a pooled
/// one, as a capture does).
#[inline]
pub(crate) fn splice(stack: &mut Captured, max: usize) {
    if let Some(l) = found() {
        splice_with(l, stack, max);
    }
}

/// [`splice`] in a process running CPython: a frame of its own, so that the sample path
/// of any other program keeps its stack use (`tests/commands/forwarding.rs`).
#[inline(never)]
fn splice_with(l: &Layout, stack: &mut Captured, max: usize) {
    let frame = current_frame(l);
    if frame == 0 {
        return;
    }
    let code_type = CODE_TYPE.load(Ordering::Relaxed);
    let mut walk = Walk { l, frame, code_type, run_ended: false, left: MAX_WALK };
    let (start, end) = (EVAL_START.load(Ordering::Relaxed), EVAL_END.load(Ordering::Relaxed));
    let mut out = Captured::new();
    let mut room = max;
    let mut put = |out: &mut Captured, w: usize| -> bool {
        if room == 0 || !out.push_frame(w) {
            return false;
        }
        room -= 1;
        true
    };
    let mut full = false;
    let mut walked = false;
    'native: for &ra in stack.frames() {
        if !walked && ra.wrapping_sub(1).wrapping_sub(start) < end - start {
            // This activation's run.
            loop {
                match walk.next() {
                    Some(Found::Frame(w)) => {
                        if !put(&mut out, w) {
                            full = true;
                            break 'native;
                        }
                    }
                    Some(Found::RunEnd) => break,
                    None => {
                        walked = true;
                        break;
                    }
                }
            }
        }
        if !put(&mut out, ra) {
            full = true;
            break;
        }
    }
    if !full && !walked && !stack.truncated() {
        // Runs whose activations the native stack did not reach (its unwinding stopped).
        while let Some(f) = walk.next() {
            if let Found::Frame(w) = f {
                if !put(&mut out, w) {
                    full = true;
                    break;
                }
            }
        }
    }
    let truncated = stack.truncated() || full;
    out.set_truncated(truncated);
    core::mem::swap(stack, &mut out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_holds_a_user_space_address_and_an_index() {
        let code = 0x7f12_3456_7890usize;
        let w = TAG | (300 << INDEX_SHIFT) | (code & CODE_MASK);
        assert_eq!(w & CODE_MASK, code);
        assert_eq!((w & !TAG) >> INDEX_SHIFT, 300);
        assert!(w & TAG != 0 && code & TAG == 0);
        assert_eq!(INDEX_MAX << INDEX_SHIFT & TAG, 0, "the index stays below the tag");
    }

    /// A fake interpreter in memory: a thread state, a chain of frames and code objects laid
    /// out by `l`, the accessor answering with it.
    static FAKE_TSTATE: AtomicUsize = AtomicUsize::new(0);
    static FAKE_TYPE: u64 = 0;

    extern "C" fn fake_get() -> usize {
        FAKE_TSTATE.load(Ordering::Relaxed)
    }

    /// A frame of a fake chain: a Python frame (code object, instruction index, 3.11's
    /// `is_entry`) or 3.12's and 3.13's shim frame of an activation.
    #[derive(Clone, Copy)]
    enum Fake {
        Py(usize, usize, bool),
        Shim,
    }

    /// Splices `native` with the frames of `chain` (innermost first) laid out by `l`;
    /// Python words come back as `0xc0de_0000 + code * 0x100 + index`.
    fn splice_fake(l: &Layout, chain: &[Fake], native: &[usize]) -> Vec<usize> {
        let codes: Vec<Box<[u64; 64]>> = (0..4).map(|_| Box::new([0u64; 64])).collect();
        let code_addr = |c: usize| codes[c].as_ptr() as usize;
        let put = |base: usize, off: usize, v: usize| {
            // SAFETY: `off` + 8 is inside the box written to (frames 128 bytes, states 256,
            // code objects 512), which outlives the splice.
            unsafe { ((base + off) as *mut usize).write_unaligned(v) }
        };
        let put8 = |base: usize, off: usize, v: u8| {
            // SAFETY: as above.
            unsafe { ((base + off) as *mut u8).write(v) }
        };
        // Code objects 0 to 2 are code objects; 3's type is another.
        for c in 0..3 {
            put(code_addr(c), 8, &FAKE_TYPE as *const u64 as usize);
        }
        let frames: Vec<Box<[u64; 16]>> = chain.iter().map(|_| Box::new([0u64; 16])).collect();
        for (i, f) in chain.iter().enumerate() {
            let base = frames[i].as_ptr() as usize;
            put(base, l.f_previous, frames.get(i + 1).map_or(0, |n| n.as_ptr() as usize));
            match *f {
                Fake::Py(c, index, entry) => {
                    put(base, l.f_code, code_addr(c));
                    put(base, l.f_instr, code_addr(c) + l.co_code + 2 * index);
                    if let Some(e) = l.f_is_entry {
                        put8(base, e, u8::from(entry));
                    }
                }
                Fake::Shim => put8(base, l.f_owner, OWNED_BY_CSTACK),
            }
        }
        let ts = Box::new([0u64; 32]);
        let cframe = Box::new([0u64; 4]);
        let tsa = ts.as_ptr() as usize;
        put(tsa, l.ts_thread_id, this_thread() as usize);
        let first = frames.first().map_or(0, |f| f.as_ptr() as usize);
        match l.ts_cframe {
            Some(off) => {
                put(tsa, off, cframe.as_ptr() as usize);
                put(cframe.as_ptr() as usize, l.current_frame, first);
            }
            None => put(tsa, l.current_frame, first),
        }
        let mut stack = Captured::new();
        for &ra in native {
            assert!(stack.push_frame(ra));
        }
        FAKE_TSTATE.store(tsa, Ordering::Relaxed);
        GET_TSTATE.store(fake_get as *const () as usize, Ordering::Relaxed);
        CODE_TYPE.store(&FAKE_TYPE as *const u64 as usize, Ordering::Relaxed);
        EVAL_START.store(0x1000, Ordering::Relaxed);
        EVAL_END.store(0x2000, Ordering::Relaxed);
        let i = LAYOUTS.iter().position(|x| x == l).unwrap();
        FOUND.store(i as u8 + 1, Ordering::Release);
        splice(&mut stack, 64);
        FOUND.store(0, Ordering::Release);
        FAKE_TSTATE.store(0, Ordering::Relaxed);
        let words = stack.frames().to_vec();
        words
            .into_iter()
            .map(|w| match w & TAG {
                0 => w,
                _ => {
                    let c = (0..codes.len()).position(|c| code_addr(c) == w & CODE_MASK);
                    0xc0de_0000
                        + c.expect("a fake code object") * 0x100
                        + ((w & !TAG) >> INDEX_SHIFT)
                }
            })
            .collect()
    }

    #[test]
    fn python_runs_go_inside_their_activations() {
        use Fake::{Py, Shim};
        // Native: a leaf, the inner activation's return address (in the eval function's
        // extent), a C call, the outer activation, main.
        let native = [0x500, 0x1010, 0x600, 0x1500, 0x700];
        let py = |c: usize, i: usize| 0xc0de_0000 + c * 0x100 + i;
        let want = vec![0x500, py(0, 3), py(1, 5), 0x1010, 0x600, py(2, 7), 0x1500, 0x700];
        for minor in [12, 13] {
            let chain = [Py(0, 3, false), Py(1, 5, false), Shim, Py(2, 7, false), Shim];
            assert_eq!(splice_fake(layout(minor).unwrap(), &chain, &native), want, "3.{minor}");
        }
        // 3.11: no shim frames; each activation's first frame is marked `is_entry`.
        let chain = [Py(0, 3, false), Py(1, 5, true), Py(2, 7, true)];
        assert_eq!(splice_fake(layout(11).unwrap(), &chain, &native), want, "3.11");
        // Fewer activations in the native stack than runs (its unwinding stopped early,
        // not cut at the depth): the runs left go at the outer end.
        let chain = [Py(0, 3, false), Shim, Py(1, 5, false), Shim];
        let got = splice_fake(layout(12).unwrap(), &chain, &[0x500, 0x1010, 0x700]);
        assert_eq!(got, vec![0x500, py(0, 3), 0x1010, 0x700, py(1, 5)]);
        // An object of another type as a frame's code ends the walk: the frames before it
        // stay, as the innermost run.
        let chain = [Py(0, 3, false), Py(3, 1, false), Py(1, 5, false), Shim];
        let got = splice_fake(layout(12).unwrap(), &chain, &native);
        assert_eq!(got, vec![0x500, py(0, 3), 0x1010, 0x600, 0x1500, 0x700]);
    }

    #[test]
    fn every_known_version_has_one_layout() {
        for minor in [11, 12, 13] {
            assert_eq!(layout(minor).map(|l| l.minor), Some(minor));
        }
        assert!(layout(10).is_none() && layout(14).is_none());
    }
}
