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
//! The module list and the sorted executable ranges it covers form a [`Table`](table::Table), built
//! off the sample path (session start, the drain thread's polls when the loader's `dlpi_adds` or
//! `dlpi_subs` moved, after a `dlclose` seen by the preload library), or on it when a walk failed
//! and the loader's counts moved ([`refresh_on_miss`]: at most every millisecond, with a try-lock;
//! under `memprof record` no drain thread polls), and published through an atomic pointer. A table
//! is never mutated once published and never freed (the few kilobytes of a superseded table are
//! leaked: a thread may still be unwinding with it), so the sample path reads it without a lock.
//! Builders serialise on a spin lock that no sampling thread ever takes. Around `dlclose` the table
//! is withdrawn first ([`before_dlclose`]: the sample path falls back to libgcc) and rebuilt after,
//! so no thread can look an address up in an image that is being unmapped; a table built while a
//! `dlclose` is in progress is not published.
//!
//! # 3. Caches
//! framehop's cache (a rule per recently seen address, and gimli's fixed-size evaluation context:
//! the `MustNotAllocateDuringUnwind` policy) is needed exclusively while unwinding.
//! [`SLOTS`](slots::SLOTS) caches are allocated once, at the first session that uses this unwinder,
//! and never freed. A thread takes the slot its stack address hashes to with one atomic swap,
//! trying the others when it is taken; with every slot taken it falls back to libgcc. So the sample
//! path never allocates, never waits and never holds a lock user code can hold.
//!
//! # 4. Compiled rules
//! framehop spends tens of nanoseconds a frame even when its cache hits (the lookup, the
//! module search, the rule's interpretation; `cargo test --release --lib time_walks --
//! --ignored --nocapture` times the walks side by side). Every rule it caches on x86-64 has one shape: the
//! canonical frame address (CFA, the caller's stack pointer) is `sp` or `bp` plus a
//! constant, the return address is at `CFA - 8`, and `bp` is either unchanged or loaded
//! from `sp` or `bp` plus a constant. So each slot also keeps a direct-mapped table of
//! [`Rule`](rules::Rule)s in that shape, keyed by address and table generation, and the walk's loop
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
//!
//! # 6. Files
//! `table` builds and publishes the table (§1, §2); `slots` is the pool of caches (§3);
//! `rules` derives and applies the compiled rules (§4); `walk` is the walk itself, `frame`
//! the frame it unwinds and the bounded reads of §5; `check` the oracle of §4.

mod check;
mod frame;
mod rules;
mod slots;
mod table;
mod walk;

pub(super) use check::{check_replayed, check_stats, enable_check};
pub(super) use table::{after_dlclose, before_dlclose, read_encoded, refresh, refresh_on_miss};
pub(super) use walk::{key, walk};

use core::sync::atomic::{AtomicU64, Ordering};

/// Captures handed to libgcc (no table, no free cache, a frame outside the table, or an
/// unwinding error).
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// Makes the unwinder ready: allocates the cache pool (once) and publishes a table of the
/// objects loaded now. Called off the sample path, at session start. Returns false when no
/// table could be built (the caller uses libgcc).
pub(super) fn prepare() -> bool {
    slots::allocate();
    table::refresh(true);
    !table::TABLE.load(Ordering::Acquire).is_null()
}

/// In a forked child, whose only thread is the one that called `fork`: no other thread
/// builds a table or holds a cache any more.
pub(super) fn fork_child() {
    table::BUILDING.store(false, Ordering::Release);
    for slot in &slots::POOL {
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
