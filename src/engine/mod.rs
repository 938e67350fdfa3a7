//! Everything that runs inside the allocator: the hooks, the sampler, the live table, the
//! event queue, the call-stack capture and its clock. Nothing here takes a `std::sync` lock
//! or allocates through the profiled allocator (its memory comes from `mmap` on the sample
//! path and from glibc's own entry points at a session's start, [`crate::sys::rawmem`]),
//! nothing here waits for a lock its own thread holds (a signal handler that allocates,
//! see `sample_path` §1), and nothing here depends on the session, the recorder,
//! the profile or the reports: `grep -rn "use crate::" src/engine` names only `engine`,
//! `sys` and `config`.
//!
//! Imports run downward, and the files several others need are floors of their own: the
//! busy guard (`busy`), the lost-sample counters (`lost`), the pushes into the session's
//! queue (`push`, below the live table that reports deferred deaths through it), the
//! capture buffer (`callstack::frames`) and the per-thread state types
//! (`sampler::per_thread`, `callstack::per_thread`, `known`) that `thread` maps. `sample_path` composes
//! them into the sample path, and `alloc` calls it from the hooks; nothing below reaches
//! back into either.

pub(crate) mod alloc;
pub(crate) mod busy;
pub(crate) mod callstack;
pub(crate) mod clock;
pub(crate) mod consumer;
pub(crate) mod entry;
pub(crate) mod forked;
pub(crate) mod known;
pub(crate) mod label;
pub(crate) mod live;
pub(crate) mod lost;
pub(crate) mod measure;
pub(crate) mod push;
pub(crate) mod python;
pub(crate) mod queue;
pub(crate) mod sample_path;
pub(crate) mod sampler;
pub(crate) mod thread;
