//! Reports: what a [`Profile`](crate::profile::Profile) says, as a top-sites table, folded stacks, a flamegraph or a
//! pprof profile.
//!
//! # 1. Views
//! Every report counts samples through a [`View`]: [`View::Alloc`] counts every sampled
//! allocation (who allocated the memory), [`View::Live`] only the samples whose block was
//! never freed before the recording ended (who still holds it).
//!
//! # 2. Numbers
//! A sample stands for `k × interval` bytes and `k × interval / size` objects
//! ([`Profile::estimated_bytes`](crate::profile::Profile::estimated_bytes), [`Profile::estimated_objects`](crate::profile::Profile::estimated_objects)); sums are kept as `f64` and
//! rounded only when printed or encoded. In the exact mode (interval 1) every number is an
//! exact integer.
//!
//! # 3. Determinism
//! Every exporter's output depends only on the profile: folded lines are sorted, tables
//! are sorted by value then name, the pprof string table is insertion-ordered over a sorted
//! walk, and flamegraph colours are derived from the function names.
//!
//! # 4. Exporters
//! Every file a report writes is an `export::Exporter`, and `registry::EXPORTERS` lists
//! them: the commands' output flags and the writing follow that list (`export` §1).
#![forbid(unsafe_code)]

#[cfg(feature = "cli")]
pub mod command;
pub mod confidence;
pub mod diff;
pub(crate) mod export;
mod flame_lines;
mod flamegraph;
mod folded;
pub(crate) mod html;
pub mod json;
mod pprof;
pub(crate) mod registry;
mod resident;
pub mod text;
pub(crate) mod top;
mod tree;
mod unwinding;
mod view;
pub(crate) mod write;

pub(crate) use flamegraph::FlamegraphExporter;
pub use flamegraph::{default_subtitle, default_title, flamegraph, FlameOptions};
pub use folded::{
    collapsed, collapsed_grouped, folded_frame, write_collapsed, write_collapsed_grouped,
};
pub use pprof::{pprof, write_pprof, PprofOptions};
pub use top::{
    gc_table, short_lived_table, site_totals, site_totals_grouped, sort_sites, top_table,
    view_bytes, wrapper_suggestions, SiteTotal, TopOptions,
};
pub use tree::{process_table, TreeOptions};
pub use unwinding::shallow_stacks_note;
pub use view::{
    gc_cycle_samples, human_bytes, human_duration, is_gc_stack, sampling_summary, stack_totals,
    GcSampled, GroupBy, StackTotal, View, NO_SPAN,
};
pub use write::{write_file, write_html};
