//! Symbolization: the modules of this process, addresses to functions, and the names that
//! reports give to frames.
//!
//! # 1. In process
//! [`current_modules`] lists the loaded objects (`dl_iterate_phdr`), so that a profile can be
//! symbolized later from the binaries even if the process crashed. [`resolve_in_process`]
//! turns return addresses into inline chains with `backtrace` (addr2line over the binaries'
//! debug info). It runs on a cold path only: it allocates and takes backtrace's lock.
//!
//! # 2. Naming frames
//! Stacks hold return addresses, innermost first. A return address points after its call, so
//! lookups use `addr - 1`; the maps stay keyed by the original address. An address expands
//! to its inline chain (innermost first); an address without symbols is named
//! `module+0xoffset` (offset from the module's load bias) or `0xaddr`.
//!
//! Every raw name, from any of the paths below (this process's symbols, DWARF, `.symtab`
//! and `.dynsym`), goes through [`demangle`]: a name is demangled only when it carries a
//! mangling's prefix (Rust's `_ZN…E` and `_R…`, Itanium C++'s `_Z…`). The demanglers
//! would read a C function named `f` or `Sa` as the type encoding it also is (`float`,
//! `std::allocator`). Profiles store names as they were given, demangled.
//!
//! Frames of the profiler itself (the allocator hooks, the capture, the preload library's
//! `malloc`) sit at the leaf end of every stack. [`Profile::frame_locations`] drops the
//! innermost frames up to and including the outermost such frame found within the first
//! [`TRIM_WINDOW`] expanded frames, so that reports start at the program's own call to the
//! allocator. [`Profile::site_name`] further skips allocation plumbing (the C and C++
//! runtimes, the Rust standard library, known wrappers: [`crate::profile::site`]) to name
//! the allocation *site*: the first frame of the program itself.
//!
//! # 3. Offline
//! [`resolve_offline`] reads the recorded modules' files (and their separate debug files).
//! Built with `debug = "line-tables-only"`, DWARF names functions without their module path
//! (`fill_table`, `{closure#0}`): the outermost frame of each inline chain then takes the
//! ELF symbol table's full name for its address (`sites::fill_table`) when that name ends
//! the same way. A stripped object whose exported functions are in its dynamic symbol table
//! (libstdc++'s `operator new`) still names them: addr2line's symbol map falls back to
//! `.dynsym` when there is no `.symtab`. [`unresolved_objects`] says, once per object, why
//! frames stayed unnamed and where a debug file was looked for, and which Debian package
//! would have one (found in dpkg's lists of files and kept beside the symbol cache:
//! `packages.rs`).
//!
//! Only the addresses the profile's stacks hold are looked up (those the symbol cache
//! lacks). The files are read on a few threads at once (one per core, at most four: each
//! file by one thread, the largest first), and what they found goes into the profile, the
//! notes and the cache in the modules' order: the same profile as one thread would make.
//!
//! Every file is read through `object_file.rs`: opened once under the file policy (a
//! regular file, never blocking on a FIFO), and judged by what that descriptor holds: the
//! build id (or size and time) that must be the module's, and the debug file's build id
//! that must be the object's. A path swapped after a check cannot pass another file's
//! symbols off as the module's.
//!
//! # 4. Files
//! - `process.rs`: this process's modules and in-process lookup (the folder's only
//!   `unsafe` block, reading the notes of a mapped object);
//! - `elf.rs`: what an ELF file says of itself (build id, segments, debug link, symbol
//!   tables), read with the `object` crate;
//! - `names.rs`: [`demangle`], the one rule every path above names a symbol by: only a
//!   name with a mangling's prefix is demangled (legacy hashes dropped, unreadable C++
//!   names read from their prefix), every other name kept as it is;
//! - `offline.rs`: addresses resolved from the recorded modules' files, and `Loaders` (each file opened once per run);
//! - `debug_file.rs`: where an object's separate debug file is looked for;
//! - `stripped.rs`: the notes on objects whose frames stayed unnamed;
//! - `cache.rs`: the frames resolved for each offset of a build, kept on disk by build id
//!   so that the next run of the same program reads no DWARF for them.
//!
//! The frames' names themselves (trimming, [`TRUNCATED`], [`FrameLocation`]) are
//! `profile/frame.rs`'s, which the site rules read too.

#[cfg(feature = "report")]
mod cache;
#[cfg(feature = "report")]
mod debug_file;
mod elf;
mod names;
#[cfg(feature = "report")]
mod offline;
#[cfg(feature = "report")]
mod packages;
mod process;
mod python;
#[cfg(feature = "report")]
mod stripped;

pub use super::frame::{is_profiler_frame, FrameLocation, TRIM_WINDOW, TRUNCATED, UNKNOWN_STACK};
#[cfg(feature = "report")]
pub use debug_file::debug_candidates;
pub use elf::build_id;
#[cfg(feature = "cli")] // its one user outside the folder is `record`'s collector
pub(crate) use elf::file_layout;
pub use names::{demangle, strip_hash, unmangled};
#[cfg(feature = "report")]
pub use offline::resolve_offline;
#[cfg(feature = "report")]
pub(crate) use offline::{resolve_offline_with, Loaders};
pub use process::{current_modules, file_identity, resolve_in_process};
#[cfg(feature = "cli")] // its one user outside the folder is `record`'s notes
pub(crate) use python::cpython_module;
pub(crate) use python::{minor_of_module as python_minor_of_module, Reader as PythonReader};
#[cfg(feature = "report")]
pub use stripped::unresolved_objects;
#[cfg(feature = "report")]
pub(crate) use stripped::unresolved_objects_in;

#[cfg(doc)]
use super::Profile;
