//! memprof: a statmemprof-style sampling heap profiler.
//!
//! It answers "who allocated this memory, and who still holds it?" cheaply enough to
//! leave on in production.
//!
//! # How a sample flows
//! ```text
//! allocation (GlobalAlloc / malloc via the preload library / gc::Heap::alloc)
//!   └─ sampler: thread-local countdown of bytes to the next sample point (subtract, branch)
//!        └─ slow path: k = number of sample points inside this allocation
//!             ├─ callstack: return addresses, one pass, 32-entry buffer doubling up to depth
//!             ├─ live table: address → sample      ── free/realloc of a sampled block
//!             └─ postponed queue: waits for a safe point ── its dealloc event, queued too
//! safe point (poll, Session::stop, the drain thread)
//!   └─ Tracker callbacks / the built-in Recorder → Profile
//!        └─ .mprof stream → reports: top table · flamegraph · pprof · folded
//! ```
//!
//! # Quick use
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);
//!
//! let session = memprof::start(memprof::Config::default(), memprof::Recorder::new()).unwrap();
//! let v: Vec<u8> = vec![0; 1 << 20];
//! drop(v);
//! let profile = session.stop().unwrap().into_profile();
//! println!("{} samples", profile.samples.len());
//! ```
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod agent;
pub mod alloc;
pub mod bundled;
pub mod callstack;
pub mod config;
pub mod error;
pub mod gc;
pub mod launcher;
pub mod live;
mod padded;
pub mod postponed;
pub mod profile;
mod rawmem;
pub mod recorder;
#[cfg(feature = "report")]
pub mod report;
pub mod sampler;
mod tls;
pub mod tracker;

pub use alloc::Sampled;
pub use config::{Config, Unwinder};
pub use error::Error;
pub use recorder::Recorder;
pub use tracker::{
    poll, record_gc_cycle, start, Allocation, Callstack, Deallocation, Reallocation, Session,
    SessionInfo, Stats, Tracker,
};
