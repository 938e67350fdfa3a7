//! Allocation assertions in tests: what the calling thread allocates inside a closure,
//! counted exactly, while every other thread (the other tests `cargo test` runs at the
//! same time) runs at the ordinary sampled cost and is not counted.
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);
//!
//! let (v, stats) = memprof::testing::measure(|| vec![0u8; 1000]);
//! assert_eq!((stats.blocks, stats.bytes, stats.live_bytes), (1, 1000, 1000));
//! assert!(stats.bytes <= 4096, "{stats}"); // on failure: the figures, then the sites
//! drop(v);
//!
//! let n = memprof::assert_no_alloc!(1 + 1); // panics, naming the sites, if it allocates
//! # let _ = n;
//! ```
//!
//! # What is counted
//! [`measure`] counts the blocks the calling thread allocates inside `f` (`blocks`,
//! `bytes`), those of them it frees inside `f` (`frees`, `freed_bytes`), the most of them
//! live at once (`peak_bytes`) and what is still live when `f` returns (`live_bytes`: the
//! scope's leak). A reallocation is the free of the old block and the allocation of the
//! new one. Not counted: what other threads allocate, threads `f` spawns included (count
//! inside them with a `measure` of their own); a block of the scope that another thread
//! frees (it stays live in the figures). Scopes nest (four deep at most): an inner scope's
//! blocks count in the outer ones too.
//!
//! # How
//! `engine::measure`: entering a scope sends every allocation of the thread to the
//! sampler's slow path, which counts it and captures its call stack; its block's counter
//! in the live table's filter makes its free reach the table's slow path, which counts it.
//! A running session keeps sampling the thread as it would have. Outside a scope, no path
//! changes: the fast paths never look at the scope.
//!
//! # Sampled scopes
//! For long runs, [`measure_sampled`] samples one byte in `R` of the thread's allocations
//! instead, at about the cost of an ordinary session, and gives estimates with 95 %
//! intervals; its assertions ([`SampledAllocated::assert_bytes_at_most`],
//! [`SampledAllocated::assert_live_at_most`]) fail only when a bound is exceeded beyond
//! sampling noise, at a stated false-failure rate ([`FALSE_FAILURE_RATE`]).
//!
//! It needs [`crate::Sampled`] as the program's `#[global_allocator]` (a test binary's
//! own: `tests/*.rs` may each declare one); without it, `measure` panics saying so.

use crate::engine::measure::{self, Counts, Left, LeftStack};
use std::fmt;

mod sampled;
pub use sampled::{
    measure_sampled, measure_sampled_seeded, Estimate, SampledAllocated, SampledSite,
    FALSE_FAILURE_RATE,
};
#[cfg(feature = "budgets")]
mod budget;
#[cfg(feature = "budgets")]
pub use budget::{BudgetMode, Budgets};

/// What the calling thread allocated inside a [`measure`]d closure, exactly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Allocated {
    /// Blocks allocated.
    pub blocks: u64,
    /// Bytes allocated (the sizes asked for).
    pub bytes: u64,
    /// Blocks of the scope freed inside it.
    pub frees: u64,
    /// Their bytes.
    pub freed_bytes: u64,
    /// The most bytes of the scope's blocks live at once.
    pub peak_bytes: u64,
    /// Bytes of the scope's blocks still live at its end: its leak.
    pub live_bytes: u64,
    /// Blocks whose free could not be followed (no memory for the scope's table): counted
    /// as live.
    pub untracked: u64,
    /// The allocating sites, those still holding live bytes first, then by bytes.
    pub sites: Vec<SiteAllocated>,
}

/// One allocation site of a scope (the innermost frame that is not allocation plumbing,
/// as in `memprof report`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SiteAllocated {
    /// The function.
    pub site: String,
    /// Where it allocates (`file:line`), when the debug information says.
    pub location: Option<String>,
    /// Blocks it allocated.
    pub blocks: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Its blocks still live at the scope's end.
    pub live_blocks: u64,
    /// Their bytes.
    pub live_bytes: u64,
}

impl Allocated {
    /// The live blocks at the scope's end.
    pub fn live_blocks(&self) -> u64 {
        self.blocks - self.frees
    }

    /// Panics, with the figures and the sites ([`Allocated`]'s `Display`), when the scope
    /// allocated more than `blocks` blocks or `bytes` bytes.
    #[track_caller]
    pub fn assert_at_most(&self, blocks: u64, bytes: u64) {
        if self.blocks > blocks || self.bytes > bytes {
            panic!("allocated more than {blocks} blocks or {bytes} bytes: {self}");
        }
    }

    /// Panics, with the figures and the sites, when the scope left bytes live (a leak).
    #[track_caller]
    pub fn assert_no_leak(&self) {
        if self.live_bytes > 0 {
            panic!("leaked {} bytes: {self}", self.live_bytes);
        }
    }
}

impl fmt::Display for Allocated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} blocks, {} bytes allocated; {} freed ({} bytes); peak {} bytes; {} bytes live \
             at the end in {} blocks",
            self.blocks,
            self.bytes,
            self.frees,
            self.freed_bytes,
            self.peak_bytes,
            self.live_bytes,
            self.live_blocks()
        )?;
        if self.untracked > 0 {
            write!(f, " ({} blocks untracked)", self.untracked)?;
        }
        let sites = self.sites.iter().map(|s| {
            let mut figures = format!("{} bytes in {} blocks", s.bytes, s.blocks);
            if s.live_bytes > 0 {
                figures += &format!(", {} bytes live in {} blocks", s.live_bytes, s.live_blocks);
            }
            (figures, s.site.as_str(), s.location.as_deref())
        });
        write_sites(f, sites)
    }
}

/// Writes a scope's sites after its figures, one a line: the first ten, each as its
/// figures then `: site (file:line)`, and how many more there are.
fn write_sites<'a>(
    f: &mut fmt::Formatter<'_>,
    sites: impl ExactSizeIterator<Item = (String, &'a str, Option<&'a str>)>,
) -> fmt::Result {
    let n = sites.len();
    for (figures, site, location) in sites.take(10) {
        write!(f, "\n  {figures}: {site}")?;
        if let Some(at) = location {
            write!(f, " ({at})")?;
        }
    }
    if n > 10 {
        write!(f, "\n  … {} more sites", n - 10)?;
    }
    Ok(())
}

/// Closes the scope when `measure`'s closure returns or unwinds.
struct Scope {
    open: bool,
}

impl Scope {
    /// Closes the scope (once) and returns what it counted.
    fn close(&mut self) -> Left {
        self.open = false;
        crate::engine::sampler::with_countdown(measure::leave)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.open {
            drop(self.close());
        }
    }
}

/// Opens a scope on the calling thread, or panics saying why not.
fn open() -> Scope {
    // With no session, the call stacks are walked as a session would walk them.
    static SELECTED: std::sync::Once = std::sync::Once::new();
    if !crate::engine::sampler::active() {
        SELECTED.call_once(|| {
            crate::engine::callstack::select(crate::Unwinder::Auto);
        });
    }
    if !crate::engine::sampler::with_countdown(measure::enter) {
        panic!(
            "memprof::testing::measure: scopes nest {} deep at most, and not inside a \
             sampled scope (or no memory could be mapped for one)",
            measure::MAX_LEVELS
        );
    }
    Scope { open: true }
}

/// Runs `f` on the calling thread and returns its result with what the thread allocated
/// inside it, exactly (see the [module documentation](self)). Panics when
/// [`crate::Sampled`] is not the global allocator.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Allocated) {
    check_sampled();
    let mut scope = open();
    let r = f();
    let left = scope.close();
    // Naming the sites allocates: the profiler's own, not an enclosing scope's.
    let busy = crate::engine::busy::Busy::enter();
    let stats = stats(left);
    drop(busy);
    (r, stats)
}

/// Panics unless allocations reach the sampler ([`crate::Sampled`] is the global
/// allocator): a probe allocation in a scope of its own must be counted.
fn check_sampled() {
    static CHECKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let sampled = *CHECKED.get_or_init(|| {
        let mut scope = open();
        drop(std::hint::black_box(Box::new(std::hint::black_box(7u64))));
        scope.close().counts.blocks > 0
    });
    if !sampled {
        panic!(
            "memprof::testing::measure needs memprof::Sampled as the global allocator: add \
             `#[global_allocator] static GLOBAL: memprof::Sampled<std::alloc::System> = \
             memprof::Sampled::new(std::alloc::System);` to the test binary"
        );
    }
}

/// The figures and the named sites of a closed scope.
fn stats(left: Left) -> Allocated {
    // An exact scope: its peak is the largest live count (the halves are a sampled one's).
    let Counts { blocks, bytes, frees, freed_bytes, live, peak, .. } = left.counts;
    Allocated {
        blocks,
        bytes,
        frees,
        freed_bytes,
        peak_bytes: peak,
        live_bytes: live,
        untracked: left.untracked,
        sites: sites(&left.stacks),
    }
}

/// A site of a scope, named, with its figures (estimates in a sampled scope).
struct Named {
    site: String,
    location: Option<String>,
    blocks: f64,
    bytes: f64,
    live_blocks: f64,
    live_bytes: f64,
}

/// The sites of the scope's stacks (`[blocks, weight, live blocks, live weight]` each, the
/// weights bytes or, at `interval` > 1, sample points), named as `memprof report` names
/// them, those still holding live bytes first, then by bytes.
#[cfg(feature = "report")]
fn named_sites(stacks: &[LeftStack], interval: f64) -> Vec<Named> {
    use crate::profile::{Profile, Stack, Totals};
    let mut p = Profile::default();
    p.header.interval = interval;
    p.modules = crate::profile::symbolize::current_modules();
    let addrs: std::collections::BTreeSet<u64> =
        stacks.iter().flat_map(|(f, _, _)| f.iter().map(|&a| a as u64)).collect();
    p.symbols = crate::profile::symbolize::resolve_in_process(addrs).into_iter().collect();
    for (i, (frames, [blocks, weight, live_blocks, live], objects)) in stacks.iter().enumerate() {
        p.stacks.push(Stack {
            frames: frames.iter().map(|&a| a as u64).collect(),
            truncated: frames.len() == measure::STACK_FRAMES,
            label: 0,
        });
        let id = i as crate::profile::StackId;
        // One pair per stack, at the size that makes its objects (estimated as bytes /
        // size) the blocks it stands for.
        let size = (*weight as f64 * interval / objects.max(1e-9)).round().max(1.0) as u64;
        p.allocated.insert((id, size), Totals { samples: *blocks, k: *weight });
        if *live_blocks > 0 {
            p.live.insert((id, size), Totals { samples: *live_blocks, k: *live });
        }
    }
    let mut sites: Vec<Named> = crate::report::site_totals(&p)
        .into_iter()
        .map(|s| Named {
            site: s.site,
            location: s.location,
            blocks: s.alloc_objects,
            bytes: s.alloc_bytes,
            live_blocks: s.live_objects,
            live_bytes: s.live_bytes,
        })
        .collect();
    sites.sort_by(|a, b| b.live_bytes.total_cmp(&a.live_bytes).then(b.bytes.total_cmp(&a.bytes)));
    sites
}

/// Without the `report` feature, a site is its innermost frame's address.
#[cfg(not(feature = "report"))]
fn named_sites(stacks: &[LeftStack], interval: f64) -> Vec<Named> {
    let mut sites: Vec<Named> = stacks
        .iter()
        .map(|(frames, [blocks, weight, live_blocks, live], objects)| Named {
            site: frames.first().map_or("?".into(), |a| format!("{a:#x}")),
            location: None,
            blocks: *objects,
            bytes: *weight as f64 * interval,
            live_blocks: *live_blocks as f64 * objects / (*blocks).max(1) as f64,
            live_bytes: *live as f64 * interval,
        })
        .collect();
    sites.sort_by(|a, b| b.live_bytes.total_cmp(&a.live_bytes).then(b.bytes.total_cmp(&a.bytes)));
    sites
}

/// The sites of an exact scope.
fn sites(stacks: &[LeftStack]) -> Vec<SiteAllocated> {
    named_sites(stacks, 1.0)
        .into_iter()
        .map(|s| SiteAllocated {
            site: s.site,
            location: s.location,
            blocks: s.blocks.round() as u64,
            bytes: s.bytes as u64,
            live_blocks: s.live_blocks.round() as u64,
            live_bytes: s.live_bytes as u64,
        })
        .collect()
}

/// Evaluates `expr`, and panics (naming the sites) if the calling thread allocated inside
/// it; returns its value otherwise. Needs [`crate::Sampled`] as the global allocator.
///
/// ```no_run
/// let x = memprof::assert_no_alloc!(2 + 2);
/// ```
#[macro_export]
macro_rules! assert_no_alloc {
    ($e:expr) => {{
        let (value, stats) = $crate::testing::measure(|| $e);
        if stats.blocks != 0 {
            panic!("`{}` allocated: {}", stringify!($e), stats);
        }
        value
    }};
}
