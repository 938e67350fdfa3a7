//! Process primitives the engine is built on: memory straight from `mmap`, per-thread
//! blocks without destructors, cache-line padding.

pub(crate) mod errno;
pub(crate) mod hash;
pub(crate) mod padded;
pub(crate) mod rawmem;
pub(crate) mod tls;
