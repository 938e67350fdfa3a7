//! The published table of the loaded objects' unwind information (`cfi` §1, §2): built off
//! the sample path, or on it after a miss, published through an atomic pointer, never
//! mutated nor freed once published, and withdrawn around `dlclose`.

use crate::sys::loader::{for_each_object, Object};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use framehop::x86_64::{CacheX86_64, UnwinderX86_64};
use framehop::Unwinder as _;
use framehop::{ExplicitModuleSectionInfo, Module, MustNotAllocateDuringUnwind};

type Fh = UnwinderX86_64<&'static [u8], MustNotAllocateDuringUnwind>;
pub(super) type Cache = CacheX86_64<MustNotAllocateDuringUnwind>;
/// A module and the executable ranges it covers.
type ModuleRanges = (Module<&'static [u8]>, Vec<(u64, u64)>);

/// A published module list.
pub(super) struct Table {
    /// Distinguishes the rules derived with this table from older ones (`cfi` §4).
    pub(super) generation: u32,
    pub(super) unwinder: Fh,
    /// Executable ranges of the modules, sorted and disjoint: `[start, end)`.
    pub(super) ranges: Vec<(u64, u64)>,
}

impl Table {
    /// Is `addr` inside code whose unwind information the table holds? `memo` is the range
    /// found last: consecutive frames are mostly in the same object.
    #[inline(always)]
    pub(super) fn covers(&self, addr: u64, memo: &mut (u64, u64)) -> bool {
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

pub(super) static TABLE: AtomicPtr<Table> = AtomicPtr::new(core::ptr::null_mut());
/// Serialises builders (never taken on the sample path).
pub(super) static BUILDING: AtomicBool = AtomicBool::new(false);
/// `dlclose` calls in progress (see `cfi` §2).
static CLOSING: AtomicU32 = AtomicU32::new(0);
/// The loader's (adds, subs) when the published table was built.
static LOADER_ADDS: AtomicU64 = AtomicU64::new(u64::MAX);
static LOADER_SUBS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Generation of the last table built; tables and the rules derived with them carry it.
static GENERATION: AtomicU32 = AtomicU32::new(0);

fn build_lock() {
    while BUILDING.swap(true, Ordering::Acquire) {
        std::thread::yield_now();
    }
}

fn build_unlock() {
    BUILDING.store(false, Ordering::Release);
}

/// Rebuilds the table when the loader has mapped or unmapped objects since the last build
/// (or always, with `force`). Off the sample path only.
pub(in crate::engine::callstack) fn refresh(force: bool) {
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
        // The old table is leaked: a thread may still be unwinding with it (`cfi` §2).
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
pub(in crate::engine::callstack) fn refresh_on_miss() -> bool {
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

/// Withdraws the table before `dlclose` may unmap an object (see `cfi` §2).
pub(in crate::engine::callstack) fn before_dlclose() {
    CLOSING.fetch_add(1, Ordering::AcqRel);
    build_lock();
    TABLE.store(core::ptr::null_mut(), Ordering::Release);
    build_unlock();
}

/// After `dlclose` returned: rebuilds the table when the unwinder is in use.
pub(in crate::engine::callstack) fn after_dlclose(in_use: bool) {
    CLOSING.fetch_sub(1, Ordering::AcqRel);
    if in_use {
        refresh(true);
    }
}

/// Reads the encoded pointer at `p` (in `.eh_frame_hdr`, encoding `enc`); None for an
/// encoding other than the absolute or pc-relative 4- and 8-byte forms.
///
/// # Safety
/// `p..p + 8` is readable.
pub(in crate::engine::callstack) unsafe fn read_encoded(p: usize, enc: u8) -> Option<usize> {
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
/// used only while the object stays mapped (the table is withdrawn around `dlclose`,
/// `cfi` §2).
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
    // .eh_frame runs to the end of the PT_LOAD that holds it (see `cfi` §1).
    let seg = loads().find(|p| {
        let s = p.p_vaddr as usize;
        s <= eh_svma && eh_svma < s + p.p_memsz as usize
    })?;
    let eh_end_svma = (seg.p_vaddr + seg.p_memsz) as usize;
    // SAFETY: both ranges lie inside PT_LOAD segments of an object that stays mapped while
    // the table is published (withdrawn around dlclose, `cfi` §2).
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
        // unmapped (`cfi` §2).
        if let Some((module, r)) = unsafe { module_of(object) } {
            unwinder.add_module(module);
            ranges.extend(r);
        }
    });
    ranges.sort_unstable();
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    Table { generation, unwinder, ranges }
}
