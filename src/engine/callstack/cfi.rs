//! The cached DWARF unwinder of the sample path (x86_64): framehop over the unwind tables
//! of the loaded objects, read in place from their mapped images.
//!
//! # 1. Modules
//! [`refresh`] lists the loaded objects with `dl_iterate_phdr`. An object whose program
//! headers have a `PT_GNU_EH_FRAME` segment becomes a framehop module: its `.eh_frame_hdr`
//! is that segment, its `.eh_frame` starts where the header's `eh_frame_ptr` points and runs
//! to the end of the `PT_LOAD` segment holding it (framehop only follows the header's
//! binary-search table into it, so the slack past the section is never read). Both are
//! slices of the mapped image: nothing is copied. Objects without the header are left out,
//! and so are their code ranges: a frame there sends the capture to libgcc.
//!
//! # 2. Publication
//! The module list and the sorted executable ranges it covers form a [`Table`], built off
//! the sample path (session start, the drain thread's polls when the loader's `dlpi_adds`
//! or `dlpi_subs` moved, after a `dlclose` seen by the preload library), or on it when a
//! walk failed and the loader's counts moved ([`refresh_on_miss`]: at most every millisecond,
//! with a try-lock; under `memprof record` no drain thread polls), and published
//! through an atomic pointer. A table is never mutated once published and never freed
//! (the few kilobytes of a superseded table are leaked: a thread may still be unwinding
//! with it), so the sample path reads it without a lock. Builders serialise on a spin lock
//! that no sampling thread ever takes. Around `dlclose` the table is withdrawn first
//! ([`before_dlclose`]: the sample path falls back to libgcc) and rebuilt after, so no
//! thread can look an address up in an image that is being unmapped; a table built while a
//! `dlclose` is in progress is not published.
//!
//! # 3. Caches
//! framehop's cache (a rule per recently seen address, and gimli's fixed-size evaluation
//! context: the `MustNotAllocateDuringUnwind` policy) is needed exclusively while unwinding.
//! [`SLOTS`] caches are allocated once, at the first session that uses this unwinder, and
//! never freed. A thread takes the slot its stack address hashes to with one atomic swap,
//! trying the others when it is taken; with every slot taken it falls back to libgcc. So
//! the sample path never allocates, never waits and never holds a lock user code can hold.
//!
//! # 4. Compiled rules
//! framehop spends about 20 ns a frame even when its cache hits (the lookup, the module
//! search, the rule's interpretation). Every rule it caches on x86-64 has one shape: the
//! canonical frame address (CFA, the caller's stack pointer) is `sp` or `bp` plus a
//! constant, the return address is at `CFA - 8`, and `bp` is either unchanged or loaded
//! from `sp` or `bp` plus a constant. So each slot also keeps a direct-mapped table of
//! [`Rule`]s in that shape, keyed by address and table generation, and the walk's loop
//! applies them itself (a few ns a frame). A rule is *derived* from framehop the first time
//! an address is seen: framehop unwinds the frame from two sets of symbolic registers, with
//! a memory callback that returns a tag plus the address read, and the results show which
//! register the CFA came from, at which offset, and where `bp` was loaded from. A rule is
//! kept only when both probes yield the same affine rule and the return address is the
//! word below the CFA; anything else (DWARF expressions, the first frame of a walk) is
//! marked and unwound by framehop every time. `MEMPROF_UNWIND_CHECK=1` makes every walk
//! also run framehop alone and count disagreements ([`check_stats`]; the record tests
//! require none).
//!
//! # 5. Reads
//! The memory-read callback reads only inside `[sp, stack top)` of the current thread, so a
//! wrong rule (code without unwind information falls back to frame pointers inside
//! framehop) ends the walk with an error instead of a fault.

use super::frames::{Captured, INLINE_FRAMES};
use super::memo::{Key, Log, Memo};
use crate::engine::thread::on_walk_stack;
use crate::sys::loader::{for_each_object, Object};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::Unwinder as _;
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind};

type Fh = UnwinderX86_64<&'static [u8], MustNotAllocateDuringUnwind>;
type Cache = CacheX86_64<MustNotAllocateDuringUnwind>;
/// A module and the executable ranges it covers.
type ModuleRanges = (Module<&'static [u8]>, Vec<(u64, u64)>);

/// A published module list.
struct Table {
    /// Distinguishes the rules derived with this table from older ones (§4).
    generation: u32,
    unwinder: Fh,
    /// Executable ranges of the modules, sorted and disjoint: `[start, end)`.
    ranges: Vec<(u64, u64)>,
}

impl Table {
    /// Is `addr` inside code whose unwind information the table holds? `memo` is the range
    /// found last: consecutive frames are mostly in the same object.
    #[inline(always)]
    fn covers(&self, addr: u64, memo: &mut (u64, u64)) -> bool {
        if addr.wrapping_sub(memo.0) < memo.1.wrapping_sub(memo.0) {
            return true;
        }
        // The last range starting at or below addr.
        let i = self.ranges.partition_point(|r| r.0 <= addr);
        match i.checked_sub(1).and_then(|i| self.ranges.get(i)) {
            Some(&r) if addr < r.1 => {
                *memo = r;
                true
            }
            _ => false,
        }
    }
}

static TABLE: AtomicPtr<Table> = AtomicPtr::new(core::ptr::null_mut());
/// Serialises builders (never taken on the sample path).
static BUILDING: AtomicBool = AtomicBool::new(false);
/// `dlclose` calls in progress (see §2).
static CLOSING: AtomicU32 = AtomicU32::new(0);
/// The loader's (adds, subs) when the published table was built.
static LOADER_ADDS: AtomicU64 = AtomicU64::new(u64::MAX);
static LOADER_SUBS: AtomicU64 = AtomicU64::new(u64::MAX);
/// Captures handed to libgcc (no table, no free cache, a frame outside the table, or an
/// unwinding error).
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// Caches in the pool.
pub(super) const SLOTS: usize = 8;

/// Generation of the last table built; tables and the rules derived with them carry it.
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// `MEMPROF_UNWIND_CHECK`: every walk is checked against framehop alone (§4).
static CHECK: AtomicBool = AtomicBool::new(false);
/// Checked walks, and those whose frames differed.
static CHECKED: AtomicU64 = AtomicU64::new(0);
static MISMATCHES: AtomicU64 = AtomicU64::new(0);

/// Entries of a slot's rule table (a power of two).
const RULES: usize = 1024;

/// How a frame is unwound (§4). The kinds the walk's loop applies itself come first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Kind {
    /// `cfa = base + cfa_off`, `ra = [cfa - 8]`, `bp` unchanged.
    Keep,
    /// As `Keep`, and `bp = [sp + bp_off]` (the frame's own `sp`, before unwinding).
    LoadFromSp,
    /// As `Keep`, and `bp = [bp + bp_off]`.
    LoadFromBp,
    /// The end of the stack: the walk stops here.
    End,
    /// framehop unwinds this address every time.
    Framehop,
    /// The slot is empty.
    Empty,
}

/// A compiled rule for one lookup address (§4): 16 bytes, four to a cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(16))]
struct Rule {
    addr: u64,
    cfa_off: i32,
    bp_off: i16,
    kind: Kind,
    /// The CFA is `bp + cfa_off` (else `sp + cfa_off`).
    cfa_from_bp: bool,
}

impl Rule {
    const EMPTY: Rule =
        Rule { addr: 0, cfa_off: 0, bp_off: 0, kind: Kind::Empty, cfa_from_bp: false };
}

/// A slot's rule table, for the table (module list) of generation `generation`: emptied
/// when a walk finds a newer table published, so an entry never outlives the modules it
/// was derived from.
struct Rules {
    generation: u32,
    entries: [Rule; RULES],
}

#[inline(always)]
fn rule_index(addr: u64) -> usize {
    (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - RULES.trailing_zeros())) as usize
}

/// Each on its own cache lines: threads that sample at once take different slots, and
/// neither they nor the table's readers share a line with another's flag.
#[repr(align(128))]
struct Slot {
    taken: AtomicBool,
    cache: AtomicPtr<Cache>,
    rules: AtomicPtr<Rules>,
}

static POOL: [Slot; SLOTS] = [const {
    Slot {
        taken: AtomicBool::new(false),
        cache: AtomicPtr::new(core::ptr::null_mut()),
        rules: AtomicPtr::new(core::ptr::null_mut()),
    }
}; SLOTS];

fn build_lock() {
    while BUILDING.swap(true, Ordering::Acquire) {
        std::thread::yield_now();
    }
}

fn build_unlock() {
    BUILDING.store(false, Ordering::Release);
}

/// Makes the unwinder ready: allocates the cache pool (once) and publishes a table of the
/// objects loaded now. Called off the sample path, at session start. Returns false when no
/// table could be built (the caller uses libgcc).
pub(super) fn prepare() -> bool {
    for slot in &POOL {
        if slot.rules.load(Ordering::Acquire).is_null() {
            let rules =
                Box::into_raw(Box::new(Rules { generation: 0, entries: [Rule::EMPTY; RULES] }));
            if slot
                .rules
                .compare_exchange(core::ptr::null_mut(), rules, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: `rules` came from Box::into_raw above and was never published.
                drop(unsafe { Box::from_raw(rules) });
            }
        }
        if slot.cache.load(Ordering::Acquire).is_null() {
            let cache = Box::into_raw(Box::new(Cache::new_in()));
            if slot
                .cache
                .compare_exchange(core::ptr::null_mut(), cache, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: `cache` came from Box::into_raw above and was never published.
                drop(unsafe { Box::from_raw(cache) });
            }
        }
    }
    refresh(true);
    !TABLE.load(Ordering::Acquire).is_null()
}

/// Rebuilds the table when the loader has mapped or unmapped objects since the last build
/// (or always, with `force`). Off the sample path only.
pub(super) fn refresh(force: bool) {
    let (adds, subs) = crate::sys::loader::counts();
    if !force
        && adds == LOADER_ADDS.load(Ordering::Relaxed)
        && subs == LOADER_SUBS.load(Ordering::Relaxed)
        && !TABLE.load(Ordering::Acquire).is_null()
    {
        return;
    }
    build_lock();
    let table = build();
    if CLOSING.load(Ordering::Acquire) == 0 {
        let new = Box::into_raw(Box::new(table));
        // The old table is leaked: a thread may still be unwinding with it (§2).
        TABLE.store(new, Ordering::Release);
        LOADER_ADDS.store(adds, Ordering::Relaxed);
        LOADER_SUBS.store(subs, Ordering::Relaxed);
    }
    build_unlock();
}

/// When the last refresh from the sample path ran ([`refresh_on_miss`]).
static LAST_MISS_REFRESH: AtomicU64 = AtomicU64::new(0);
/// At most one refresh from the sample path per this many nanoseconds.
const MISS_REFRESH_NS: u64 = 1_000_000;

/// [`refresh`] from the sample path, after a walk failed (an address outside the table's
/// objects: a library `dlopen`ed since, in a process whose safe points never come, as
/// under `memprof record`, where no drain thread polls). At most once per
/// [`MISS_REFRESH_NS`] in the process, and never waiting: the builders' lock is only tried,
/// and nothing happens while a `dlclose` is under way. Listing the objects takes the
/// loader's lock, as libgcc's unwinder (the fallback) does for every frame; the table is
/// allocated through the profiler's own (busy, so untracked) allocations. Returns true when
/// a new table was published (the caller may walk again).
pub(super) fn refresh_on_miss() -> bool {
    if CLOSING.load(Ordering::Acquire) != 0 {
        return false;
    }
    let now = crate::engine::clock::monotonic_ns();
    let last = LAST_MISS_REFRESH.load(Ordering::Relaxed);
    if now.saturating_sub(last) < MISS_REFRESH_NS
        || LAST_MISS_REFRESH
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return false;
    }
    if BUILDING.swap(true, Ordering::Acquire) {
        return false;
    }
    let (adds, subs) = crate::sys::loader::counts();
    let stale =
        adds != LOADER_ADDS.load(Ordering::Relaxed) || subs != LOADER_SUBS.load(Ordering::Relaxed);
    let mut published = false;
    if stale {
        // The table's allocations, its box included, are the profiler's own, not a
        // handler's (sampler §4): counted as skipped samples, they made exact mode report
        // lost events for every table built here.
        let table = crate::engine::busy::Busy::own_allocations(|| Box::new(build()));
        if CLOSING.load(Ordering::Acquire) == 0 {
            TABLE.store(Box::into_raw(table), Ordering::Release);
            LOADER_ADDS.store(adds, Ordering::Relaxed);
            LOADER_SUBS.store(subs, Ordering::Relaxed);
            published = true;
        }
    }
    build_unlock();
    published
}

/// Withdraws the table before `dlclose` may unmap an object (see §2).
pub(super) fn before_dlclose() {
    CLOSING.fetch_add(1, Ordering::AcqRel);
    build_lock();
    TABLE.store(core::ptr::null_mut(), Ordering::Release);
    build_unlock();
}

/// After `dlclose` returned: rebuilds the table when the unwinder is in use.
pub(super) fn after_dlclose(in_use: bool) {
    CLOSING.fetch_sub(1, Ordering::AcqRel);
    if in_use {
        refresh(true);
    }
}

/// In a forked child, whose only thread is the one that called `fork`: no other thread
/// builds a table or holds a cache any more.
pub(super) fn fork_child() {
    BUILDING.store(false, Ordering::Release);
    for slot in &POOL {
        slot.taken.store(false, Ordering::Release);
    }
}

/// Captures handed to libgcc so far.
pub(super) fn fallbacks() -> u64 {
    FALLBACKS.load(Ordering::Relaxed)
}

pub(super) fn count_fallback() {
    FALLBACKS.fetch_add(1, Ordering::Relaxed);
}

/// Reads the encoded pointer at `p` (in `.eh_frame_hdr`, encoding `enc`); None for an
/// encoding other than the absolute or pc-relative 4- and 8-byte forms.
///
/// # Safety
/// `p..p + 8` is readable.
pub(super) unsafe fn read_encoded(p: usize, enc: u8) -> Option<usize> {
    // SAFETY: the caller guarantees the bytes are readable; unaligned reads are used.
    let v = unsafe {
        match enc & 0x0f {
            0x03 => (p as *const u32).read_unaligned() as usize,
            0x0b => (p as *const i32).read_unaligned() as isize as usize,
            0x04 | 0x0c => (p as *const u64).read_unaligned() as usize,
            _ => return None,
        }
    };
    match enc & 0x70 {
        0x00 => Some(v),
        0x10 => Some(p.wrapping_add(v)),
        _ => None,
    }
}

/// One loaded object's module and executable ranges, or None without usable unwind data.
///
/// # Safety
/// The module refers to the object's mapped unwind tables as `'static` data: it may be
/// used only while the object stays mapped (the table is withdrawn around `dlclose`, §2).
unsafe fn module_of(object: &Object<'_>) -> Option<ModuleRanges> {
    let phdrs = object.phdrs();
    if phdrs.is_empty() {
        return None;
    }
    let bias = object.bias();
    let hdr = phdrs.iter().find(|p| p.p_type == libc::PT_GNU_EH_FRAME)?;
    let loads = || phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD);
    let lo = loads().map(|p| p.p_vaddr as usize).min()?;
    let hi = loads().map(|p| (p.p_vaddr + p.p_memsz) as usize).max()?;
    let hdr_svma = hdr.p_vaddr as usize;
    let hdr_len = hdr.p_memsz as usize;
    if hdr_len < 8 {
        return None;
    }
    let hdr_avma = bias.wrapping_add(hdr_svma);
    // SAFETY: the header segment is mapped (it lies inside a PT_LOAD of a loaded object)
    // and at least 8 bytes long.
    let (version, ptr_enc) =
        unsafe { ((hdr_avma as *const u8).read(), (hdr_avma as *const u8).add(1).read()) };
    if version != 1 || hdr_len < 4 + 8 {
        return None;
    }
    // SAFETY: bytes 4..12 of the header are inside the segment (checked above).
    let eh_avma = unsafe { read_encoded(hdr_avma + 4, ptr_enc) }?;
    let eh_svma = eh_avma.wrapping_sub(bias);
    // .eh_frame runs to the end of the PT_LOAD that holds it (see §1).
    let seg = loads().find(|p| {
        let s = p.p_vaddr as usize;
        s <= eh_svma && eh_svma < s + p.p_memsz as usize
    })?;
    let eh_end_svma = (seg.p_vaddr + seg.p_memsz) as usize;
    // SAFETY: both ranges lie inside PT_LOAD segments of an object that stays mapped while
    // the table is published (withdrawn around dlclose, §2).
    let (hdr_data, eh_data): (&'static [u8], &'static [u8]) = unsafe {
        (
            core::slice::from_raw_parts(hdr_avma as *const u8, hdr_len),
            core::slice::from_raw_parts(eh_avma as *const u8, eh_end_svma - eh_svma),
        )
    };
    let ranges: Vec<(u64, u64)> = loads()
        .filter(|p| p.p_flags & libc::PF_X != 0 && p.p_memsz > 0)
        .map(|p| {
            let s = bias.wrapping_add(p.p_vaddr as usize) as u64;
            (s, s + p.p_memsz)
        })
        .collect();
    let name = object.name().to_string_lossy().into_owned();
    let section_info = ExplicitModuleSectionInfo {
        base_svma: 0,
        eh_frame_svma: Some(eh_svma as u64..eh_end_svma as u64),
        eh_frame: Some(eh_data),
        eh_frame_hdr_svma: Some(hdr_svma as u64..(hdr_svma + hdr_len) as u64),
        eh_frame_hdr: Some(hdr_data),
        ..Default::default()
    };
    let start = bias.wrapping_add(lo) as u64;
    let end = bias.wrapping_add(hi) as u64;
    Some((Module::new(name, start..end, bias as u64, section_info), ranges))
}

/// Lists the loaded objects into a new table.
fn build() -> Table {
    let mut unwinder = Fh::new();
    let mut ranges = Vec::new();
    // module_of does not panic on loader data.
    for_each_object(|object| {
        if !object.has_counters() {
            return;
        }
        // SAFETY: the table this module goes into is withdrawn before any object is
        // unmapped (§2).
        if let Some((module, r)) = unsafe { module_of(object) } {
            unwinder.add_module(module);
            ranges.extend(r);
        }
    });
    ranges.sort_unstable();
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    Table { generation, unwinder, ranges }
}

/// Takes a cache from the pool; `key` spreads threads over the slots.
#[inline]
fn take_slot(key: usize) -> Option<&'static Slot> {
    let first = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) % SLOTS;
    for i in 0..SLOTS {
        let slot = &POOL[(first + i) % SLOTS];
        if !slot.taken.load(Ordering::Relaxed) && !slot.taken.swap(true, Ordering::Acquire) {
            return Some(slot);
        }
    }
    None
}

/// Walks the stack from the registers of the capturing function (`pc`, `sp`, `bp`), for a
/// thread whose stack ends at `hi`, dropping the `skip` innermost addresses (the program
/// counter counts as one) and keeping at most `depth`. Returns false, with `out` in an
/// unspecified state, when the walk cannot be trusted: the caller starts over with libgcc.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn walk(
    out: &mut Captured,
    depth: usize,
    skip: usize,
    // Scalars, not a tuple: a tuple is passed through memory, and reading it back as one
    // 16-byte load right after the caller's two 8-byte stores stalls store forwarding.
    pc: u64,
    sp: u64,
    bp: u64,
    hi: usize,
    first: bool,
    // The thread's remembered walks, and whether to try a replay first (false when the
    // caller just tried one with the same key, see [`key`]).
    memo: Option<(&mut Memo, bool)>,
) -> bool {
    let (mut memo, try_replay) = match memo {
        Some((m, r)) => (Some(m), r),
        None => (None, false),
    };
    let table = TABLE.load(Ordering::Acquire);
    // SAFETY: published tables are never mutated or freed (§2).
    let Some(table) = (unsafe { table.as_ref() }) else {
        return false;
    };
    let lo = sp as usize;
    if hi <= lo + 16 {
        return false;
    }
    let key = walk_key(table, pc, sp, bp, depth, skip, first);
    let start = Frame { ip: pc, sp, bp, first };
    if let Some(m) = memo.as_deref_mut().filter(|_| try_replay) {
        if m.replay(&key, lo, out) {
            if CHECK.load(Ordering::Relaxed) {
                check_replay(table, out, depth, skip, start, lo, hi);
            }
            return true;
        }
    }
    let Some(slot) = take_slot(hi) else {
        return false;
    };
    let cache = slot.cache.load(Ordering::Acquire);
    let rules = slot.rules.load(Ordering::Acquire);
    // SAFETY: the slot is taken by this thread until released below, so the caches
    // (allocated in `prepare`, never freed) are used by no one else meanwhile.
    let ok = match unsafe { (cache.as_mut(), rules.as_mut()) } {
        (Some(cache), Some(rules)) => {
            let log = memo.as_deref_mut().map(Memo::begin);
            let ok = walk_with(table, cache, rules, out, depth, skip, start, lo, hi, log);
            if ok && CHECK.load(Ordering::Relaxed) {
                check(table, cache, out, depth, skip, start, lo, hi);
            }
            ok
        }
        _ => false,
    };
    slot.taken.store(false, Ordering::Release);
    if ok {
        if let Some(m) = memo {
            m.commit(&key, out, false);
        }
    }
    ok
}

/// The memo key of a walk (its bound is its start: it reads nothing below `sp`).
#[inline(always)]
fn walk_key(
    table: &Table,
    pc: u64,
    sp: u64,
    bp: u64,
    depth: usize,
    skip: usize,
    first: bool,
) -> Key {
    Key {
        tag: u64::from(table.generation),
        pc,
        sp,
        bp,
        lo: sp,
        shape: Key::shape(depth, skip, first),
    }
}

/// The key [`walk`] would remember a walk with, for a caller that tries the replay itself
/// (`None` without a table: the walk falls back to libgcc).
#[inline(always)]
pub(super) fn key(
    pc: u64,
    sp: u64,
    bp: u64,
    depth: usize,
    skip: usize,
    first: bool,
) -> Option<Key> {
    // SAFETY: published tables are never mutated or freed (§2).
    let table = unsafe { TABLE.load(Ordering::Acquire).as_ref() }?;
    Some(walk_key(table, pc, sp, bp, depth, skip, first))
}

/// With the check of §4 on, checks a walk replayed by the caller from [`key`]'s key (the
/// start of a walk at an allocator's entry: no frame skipped, `pc` a return address).
#[inline(always)]
pub(super) fn check_replayed(out: &Captured, depth: usize, pc: u64, sp: u64, bp: u64, hi: usize) {
    if !CHECK.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: published tables are never mutated or freed (§2).
    if let Some(table) = unsafe { TABLE.load(Ordering::Acquire).as_ref() } {
        let start = Frame { ip: pc, sp, bp, first: false };
        check_replay(table, out, depth, 0, start, sp as usize, hi);
    }
}

/// [`check`] for a replayed walk, with a cache of the pool.
#[cold]
#[inline(never)]
fn check_replay(
    table: &Table,
    out: &Captured,
    depth: usize,
    skip: usize,
    start: Frame,
    lo: usize,
    hi: usize,
) {
    let Some(slot) = take_slot(hi) else {
        return;
    };
    // SAFETY: as in `walk`: the slot is this thread's until released.
    if let Some(cache) = unsafe { slot.cache.load(Ordering::Acquire).as_mut() } {
        check(table, cache, out, depth, skip, start, lo, hi);
    }
    slot.taken.store(false, Ordering::Release);
}

/// Reads a word of the stack inside `[lo, last]` (`last` = the stack's top − 8), with one
/// unsigned compare (`last - lo` is loop-invariant where this is inlined into a walk).
#[inline(always)]
fn read_stack(addr: u64, lo: usize, last: usize) -> Option<u64> {
    let a = addr as usize;
    if a.wrapping_sub(lo) > last.wrapping_sub(lo) {
        return None;
    }
    // SAFETY: [a, a + 8) lies inside this thread's stack between the current stack pointer
    // and the stack's top, which is mapped and readable.
    Some(unsafe { (a as *const u64).read_unaligned() })
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn walk_with(
    table: &Table,
    cache: &mut Cache,
    rules: &mut Rules,
    out: &mut Captured,
    depth: usize,
    mut skip: usize,
    start: Frame,
    lo: usize,
    hi: usize,
    mut log: Option<&mut Log>,
) -> bool {
    let last = hi - 8;
    // The frame being unwound: its program counter (the first, when the walk starts from
    // the current registers) or return address, its stack pointer and its bp.
    let mut st = start;
    let pc = st.ip;
    let mut memo = (0u64, 0u64);
    if rules.generation != table.generation {
        rules.entries.fill(Rule::EMPTY);
        rules.generation = table.generation;
    }
    if !record(out, depth, &mut skip, pc) {
        return true;
    }
    loop {
        // As many frames as the compiled rules cover, in a loop of its own.
        if let Some(done) =
            run_rules(&rules.entries, &mut st, out, depth, &mut skip, lo, last, log.as_deref_mut())
        {
            return done;
        }
        // This frame has no rule yet, or its rule is framehop's.
        let addr = st.lookup();
        let entry = &mut rules.entries[rule_index(addr)];
        if entry.addr != addr {
            // A rule derived with this table implies that the table covers `addr`.
            if !table.covers(addr, &mut memo) {
                return false;
            }
            let Some(frame) = st.frame_address() else {
                return true;
            };
            // On the thread's walk stack: framehop needs ~6 KB (engine::thread, §3).
            *entry = on_walk_stack(|| derive(table, cache, frame));
        }
        match entry.kind {
            Kind::Keep | Kind::LoadFromSp | Kind::LoadFromBp => continue,
            Kind::End => return true,
            Kind::Empty | Kind::Framehop => {
                let Some(frame) = st.frame_address() else {
                    return true;
                };
                let mut regs = UnwindRegsX86_64::new(st.ip, st.sp, st.bp);
                // framehop may use bp in any way: whatever loaded it is a condition.
                if let Some(log) = log.as_deref_mut() {
                    log.use_bp();
                }
                let mut read = |addr: u64| {
                    let v = read_stack(addr, lo, last).ok_or(())?;
                    if let Some(log) = log.as_deref_mut() {
                        log.note(addr, v);
                    }
                    Ok(v)
                };
                let unwound = on_walk_stack(|| {
                    table.unwinder.unwind_frame(frame, &mut regs, cache, &mut read)
                });
                match unwound {
                    Ok(Some(ra)) => {
                        st = Frame { ip: ra, sp: regs.sp(), bp: regs.bp(), first: false }
                    }
                    Ok(None) => return true,
                    Err(_) => return false,
                }
            }
        }
        // A return address of 0 ends the stack (as framehop's `from_return_address`).
        if st.ip == 0 || !record(out, depth, &mut skip, st.ip) {
            return true;
        }
    }
}

/// The registers of the frame being unwound.
#[derive(Clone, Copy)]
struct Frame {
    /// The program counter of the first frame, a return address for the others.
    ip: u64,
    sp: u64,
    bp: u64,
    first: bool,
}

impl Frame {
    /// framehop's lookup address: a return address minus one (inside the call).
    #[inline(always)]
    fn lookup(&self) -> u64 {
        if self.first {
            self.ip
        } else {
            self.ip - 1
        }
    }

    fn frame_address(&self) -> Option<FrameAddress> {
        if self.first {
            Some(FrameAddress::from_instruction_pointer(self.ip))
        } else {
            FrameAddress::from_return_address(self.ip)
        }
    }
}

/// Keeps `ip` as the next frame of the capture (after `skip` more are dropped). False when
/// the capture is complete: the depth is reached (truncated) or the buffer cannot grow.
#[inline(always)]
fn record(out: &mut Captured, depth: usize, skip: &mut usize, ip: u64) -> bool {
    if *skip > 0 {
        *skip -= 1;
        return true;
    }
    if out.len >= depth {
        out.truncated = true;
        return false;
    }
    out.push(ip as usize)
}

/// How many frames `run_rules` may write straight into the inline buffer.
#[inline(always)]
fn inline_limit(out: &Captured, depth: usize) -> usize {
    if out.heap.is_null() {
        depth.min(INLINE_FRAMES)
    } else {
        0
    }
}

/// `record` for `run_rules`, out of its loop: `n` frames kept so far, `skip` still to drop.
/// Returns (more frames wanted, frames kept, still to skip, the new inline limit).
#[cold]
#[inline(never)]
fn record_cold(
    out: &mut Captured,
    n: usize,
    depth: usize,
    mut skip: usize,
    ip: u64,
) -> (bool, usize, usize, usize) {
    out.len = n;
    let more = record(out, depth, &mut skip, ip);
    (more, out.len, skip, inline_limit(out, depth))
}

/// Unwinds from `st` while the compiled rules cover the frames (the walk's common case:
/// a few instructions a frame). Returns `Some(result of the walk)` when the walk ends,
/// `None` at a frame without a compiled rule (`st` is that frame, already recorded). With
/// `log`, every word read is noted there.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn run_rules(
    entries: &[Rule; RULES],
    st: &mut Frame,
    out: &mut Captured,
    depth: usize,
    skip: &mut usize,
    lo: usize,
    last: usize,
    mut log: Option<&mut Log>,
) -> Option<bool> {
    let (mut sp, mut bp) = (st.sp, st.bp);
    // The lookup address of the frame: its program counter for the first frame, its return
    // address minus one (inside the call) for the others.
    let mut key = st.lookup();
    let mut first = st.first;
    // Frames go straight into the inline buffer while it has room (the common case); the
    // general `record` takes over past it, and while frames are being skipped.
    let mut n = out.len;
    let mut sk = *skip;
    let mut limit = inline_limit(out, depth);
    // Recursion repeats return addresses: the rule found last is tried first.
    let mut prev = &Rule::EMPTY;
    let result = loop {
        let rule = if prev.addr == key {
            prev
        } else {
            let e = &entries[rule_index(key)];
            if e.addr != key {
                break None;
            }
            e
        };
        if rule.kind > Kind::LoadFromBp {
            break if rule.kind == Kind::End { Some(true) } else { None };
        }
        if rule.cfa_from_bp {
            if let Some(log) = log.as_deref_mut() {
                log.use_bp();
            }
        }
        let cfa = if rule.cfa_from_bp { bp } else { sp }.wrapping_add(rule.cfa_off as i64 as u64);
        // The stack pointer only grows while unwinding: a walk always ends. Every read stays
        // inside [lo, last].
        if cfa <= sp {
            break Some(false);
        }
        let Some(ra) = read_stack(cfa.wrapping_sub(8), lo, last) else {
            break Some(false);
        };
        if let Some(log) = log.as_deref_mut() {
            log.note(cfa.wrapping_sub(8), ra);
        }
        if rule.kind != Kind::Keep {
            let base = if rule.kind == Kind::LoadFromSp {
                sp
            } else {
                if let Some(log) = log.as_deref_mut() {
                    log.use_bp();
                }
                bp
            };
            let at = base.wrapping_add(rule.bp_off as i64 as u64);
            match read_stack(at, lo, last) {
                Some(v) => {
                    if let Some(log) = log.as_deref_mut() {
                        log.note_bp(at, v);
                    }
                    bp = v
                }
                None => break Some(false),
            }
        }
        sp = cfa;
        prev = rule;
        first = false;
        // A return address of 0 ends the stack (as framehop's `from_return_address`).
        if ra == 0 {
            break Some(true);
        }
        key = ra - 1;
        if sk == 0 && n < limit {
            // SAFETY: n < limit <= INLINE_FRAMES, the inline buffer's length.
            unsafe { *out.inline.get_unchecked_mut(n) = core::mem::MaybeUninit::new(ra as usize) };
            n += 1;
        } else {
            let more;
            (more, n, sk, limit) = record_cold(out, n, depth, sk, ra);
            if !more {
                break Some(true);
            }
        }
    };
    out.len = n;
    *skip = sk;
    let ip = if first { key } else { key + 1 };
    *st = Frame { ip, sp, bp, first };
    result
}

/// Derives the compiled rule of the return address `frame` from framehop (§4).
#[cold]
#[inline(never)]
fn derive(table: &Table, cache: &mut Cache, frame: FrameAddress) -> Rule {
    let addr = frame.address_for_lookup();
    let slow = Rule { addr, kind: Kind::Framehop, ..Rule::EMPTY };
    // Symbolic registers far apart (bp above sp, as framehop's frame-pointer rule checks),
    // and tags far above any address read.
    const PROBES: [(u64, u64, u64); 2] = [
        (0x1000_0000_0000, 0x2000_0000_0000, 0x4000_0000_0000_0000),
        (0x3100_0000_0000, 0x5300_0000_0000, 0x2000_0000_0000_0000),
    ];
    const NEAR: u64 = 1 << 31;
    let mut derived: Option<Rule> = None;
    for (s0, b0, tag) in PROBES {
        // Only words near the symbolic registers can be read: a rule that reads anywhere
        // else (a DWARF expression dereferencing a loaded value) fails here and stays slow.
        let near = |a: u64, base: u64| a.wrapping_sub(base).wrapping_add(NEAR) < 2 * NEAR;
        let mut read = |a: u64| -> Result<u64, ()> {
            if near(a, s0) || near(a, b0) {
                Ok(tag.wrapping_add(a))
            } else {
                Err(())
            }
        };
        let mut regs = UnwindRegsX86_64::new(frame.address(), s0, b0);
        let rule = match table.unwinder.unwind_frame(frame, &mut regs, cache, &mut read) {
            Ok(None) => Rule { kind: Kind::End, ..slow },
            Ok(Some(ra)) => {
                // Which register plus which offset, for a value near one of them.
                let rel = |v: u64| -> Option<(bool, i32)> {
                    let from = |base: u64| {
                        let d = v.wrapping_sub(base) as i64;
                        (d.unsigned_abs() < NEAR).then_some(d as i32)
                    };
                    from(s0).map(|d| (false, d)).or_else(|| from(b0).map(|d| (true, d)))
                };
                let cfa = regs.sp();
                let Some((cfa_from_bp, cfa_off)) = rel(cfa) else {
                    return slow;
                };
                if ra != tag.wrapping_add(cfa.wrapping_sub(8)) {
                    return slow;
                }
                let new_bp = regs.bp();
                let (kind, bp_off) = if new_bp == b0 {
                    (Kind::Keep, 0)
                } else {
                    // An offset that does not fit the entry's 16 bits (a frame of more than
                    // 32 KiB) leaves the frame to framehop.
                    let (kind, off) = match rel(new_bp.wrapping_sub(tag)) {
                        Some((false, off)) => (Kind::LoadFromSp, off),
                        Some((true, off)) => (Kind::LoadFromBp, off),
                        None => return slow,
                    };
                    match i16::try_from(off) {
                        Ok(off) => (kind, off),
                        Err(_) => return slow,
                    }
                };
                Rule { kind, cfa_from_bp, cfa_off, bp_off, ..slow }
            }
            Err(_) => return slow,
        };
        match derived {
            None => derived = Some(rule),
            Some(r) if r == rule => {}
            Some(_) => return slow,
        }
    }
    derived.unwrap_or(slow)
}

/// Walks again with framehop alone and counts a disagreement (§4, `MEMPROF_UNWIND_CHECK`).
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
fn check(
    table: &Table,
    cache: &mut Cache,
    out: &Captured,
    depth: usize,
    mut skip: usize,
    start: Frame,
    lo: usize,
    hi: usize,
) {
    let last = hi - 8;
    let mut read = |addr: u64| read_stack(addr, lo, last).ok_or(());
    let mut regs = UnwindRegsX86_64::new(start.ip, start.sp, start.bp);
    let Some(mut frame) = start.frame_address() else {
        return;
    };
    let mut n = 0;
    let mut same = true;
    let frames = out.frames();
    loop {
        if skip > 0 {
            skip -= 1;
        } else {
            if n >= depth {
                same &= out.truncated();
                break;
            }
            if frames.get(n) != Some(&(frame.address() as usize)) {
                same = false;
                break;
            }
            n += 1;
        }
        let unwound =
            on_walk_stack(|| table.unwinder.unwind_frame(frame, &mut regs, cache, &mut read));
        match unwound {
            Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                Some(f) => frame = f,
                None => break,
            },
            Ok(None) => break,
            Err(_) => {
                same = false;
                break;
            }
        }
    }
    same &= n == frames.len();
    CHECKED.fetch_add(1, Ordering::Relaxed);
    if !same {
        MISMATCHES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Turns the check of §4 on (every walk also runs framehop alone).
pub(super) fn enable_check() {
    CHECK.store(true, Ordering::Relaxed);
}

/// (walks checked, walks whose frames differed from framehop's) since the process started.
pub(super) fn check_stats() -> (u64, u64) {
    (CHECKED.load(Ordering::Relaxed), MISMATCHES.load(Ordering::Relaxed))
}
