//! `memprof record`, split by the process each part runs in:
//!
//! - `program`: runs inside the profiled program, loaded by the preload library: the
//!   agent that starts its session and follows its `fork`, `exec`, `dlclose` and exit.
//! - `command` (the `cli` feature): runs in `memprof`: the bundled preload library and its
//!   cache, the launcher, the collector that drains the rings and writes the profiles, and
//!   [`run`], what `memprof record` does from its arguments to its last note.
//! - Shared by both: `ring.rs` (the shared memory between a profiled process and the
//!   collector: the producer side in the program, the consumer side in `memprof`), `env.rs`
//!   (the `MEMPROF_*` contract) and `unfollowed.rs` (the programs a process started
//!   unfollowed: written in the program, read by `memprof`).
//!
//! The binary's entry points are [`run`] and [`preload_path`]; what they use inside is not
//! API.

pub(crate) mod attach_abi;
#[cfg(feature = "cli")]
pub(crate) mod command;
pub(crate) mod env;
pub(crate) mod program;
pub(crate) mod ring;
pub(crate) mod unfollowed;

#[cfg(feature = "cli")]
pub use command::attach::request::AttachRequest;
#[cfg(feature = "cli")]
pub use command::attach::run as attach;
#[cfg(feature = "cli")]
pub use command::bundled::Bundled;
#[cfg(feature = "cli")]
pub use command::request::RecordRequest;
#[cfg(feature = "cli")]
pub use command::run::run;
#[cfg(feature = "cli")]
pub use command::{preload_path, record_program, Recorded};
