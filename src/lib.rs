//! memprof: a statmemprof-style sampling heap profiler.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod config;
pub mod error;
pub mod profile;
#[cfg(feature = "report")]
pub mod report;

pub use config::Config;
pub use error::Error;
