//! Process primitives the engine is built on: memory from glibc's own entry points,
//! per-thread blocks without destructors, cache-line padding, errno, hashing, the loader's
//! list of objects and the next definition of a symbol in it. Nothing here knows about sampling.

#[cfg(test)]
pub(crate) mod alloc_count;
pub(crate) mod elf_lookup;
pub(crate) mod errno;
pub mod files;
pub(crate) mod hash;
pub(crate) mod loader;
pub(crate) mod own_file;
pub(crate) mod padded;
pub(crate) mod private_dir;
pub(crate) mod procfs;
pub(crate) mod rawmem;
pub(crate) mod signals;
pub(crate) mod tls;
