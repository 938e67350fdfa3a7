//! The tables a recording interns: modules, stacks and their symbols.

/// Index of a stack in [`Profile::stacks`](crate::profile::Profile::stacks).
pub type StackId = u32;

/// A loaded object (executable or shared library) of the profiled process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Module {
    /// Path of the file as the loader saw it.
    pub path: String,
    /// Load bias: runtime address minus the address in the file.
    pub base: u64,
    /// Lowest runtime address covered by the module's segments.
    pub start: u64,
    /// One past the highest runtime address covered.
    pub end: u64,
    /// The object's GNU build id, read from its mapped notes (empty when it has none, or in
    /// files written before build ids were recorded). Offline symbolization refuses a file
    /// whose build id differs: it is not the object that ran.
    pub build_id: Vec<u8>,
    /// For an object without a build id: its file's size and modification time (ns since
    /// the epoch) when the run saw it, else 0. Offline symbolization refuses a file that
    /// differs in either.
    pub file_size: u64,
    /// See [`Module::file_size`].
    pub file_mtime_ns: u64,
}

/// One interned call stack. Its label is part of its identity: one site allocating under
/// two tracing spans is two stacks (see [`format`](mod@crate::profile::format) §2b).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stack {
    /// Return addresses, innermost (the allocating frame) first.
    pub frames: Vec<u64>,
    /// True when the real stack was deeper than the configured depth.
    pub truncated: bool,
    /// The label of the allocating thread when the stack was sampled: 0 for none, else `n` names
    /// [`Profile::labels`](crate::profile::Profile::labels)`[n - 1]` (the tracing span path, e.g.
    /// `server;handle{endpoint=/upload}`).
    pub label: u32,
}

/// One source-level frame at an address. An address can have several (inlining).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// Demangled function name.
    pub function: String,
    /// Source file, when debug info has it.
    pub file: Option<String>,
    /// Line number, when debug info has it.
    pub line: Option<u32>,
}
