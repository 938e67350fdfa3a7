//! Errors of the cold paths (start, stop, files, reports). The hot path has no errors: it
//! counts what it could not do.
#![forbid(unsafe_code)]

use std::fmt;

/// What a Go program is told of its heap: in its note (`record::command::runtimes`), and
/// when a static one is refused (which adds that linking it dynamically would not help).
pub(crate) const GO_HEAP: &str = "Go's heap is the Go runtime's own and never goes through \
     malloc, so memprof cannot see it; Go's heap profile (runtime/pprof or net/http/pprof, \
     read by `go tool pprof`) shows it";

/// What went wrong.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Bad settings.
    Config(String),
    /// A session is already running in this process.
    AlreadyRunning,
    /// An I/O error, with what was being done.
    Io(String, std::io::Error),
    /// A `.mprof` stream that cannot be read, with the reason.
    Format(String),
    /// `memprof record` cannot run or profile the program.
    Launch(LaunchError),
    /// Anything else on a cold path, with the reason.
    Other(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "invalid configuration: {m}"),
            Error::AlreadyRunning => {
                write!(f, "a memprof session is already running in this process")
            }
            Error::Io(what, e) => write!(f, "{what}: {e}"),
            Error::Format(m) => write!(f, "{m}"),
            Error::Launch(e) => write!(f, "{e}"),
            Error::Other(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(_, e) => Some(e),
            _ => None,
        }
    }
}

impl From<LaunchError> for Error {
    fn from(e: LaunchError) -> Self {
        Error::Launch(e)
    }
}

/// Why `memprof record` cannot run or profile a program (the `String`s are the program or
/// file as the user named it).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaunchError {
    /// A name without a slash that is not in `PATH`.
    NotInPath(String),
    /// A path that does not exist.
    NotFound(String),
    /// A directory.
    Directory(String),
    /// Neither a regular file nor a directory.
    NotRegularFile(String),
    /// Not executable by this user.
    NotExecutable(String),
    /// The program's path contains a NUL byte.
    NulInPath(String),
    /// The output path contains a NUL byte.
    NulInOutput,
    /// setuid or setgid: the loader ignores `LD_PRELOAD` for it.
    SetId(String),
    /// Statically linked: it never loads the preload library.
    StaticallyLinked {
        /// The program as the user named it.
        program: String,
        /// A Rust program, which `memprof::Sampled` as its global allocator would profile.
        rust: bool,
        /// A Go program, whose heap no linking would show (`record::command::runtimes`).
        go: bool,
    },
    /// The output file exists and replacing it was not asked for.
    OutputExists(String),
    /// `MEMPROF_PRELOAD` names something that is not a file.
    PreloadNotAFile(String),
    /// The preload library found is not safe to load into programs (why, naming the file).
    PreloadUnsafe(String),
    /// No preload library beside the executable, and none carried in it (the path tried).
    PreloadNotFound(String),
    /// The library carried in the executable could not be written anywhere: each place
    /// tried, with why.
    PreloadNotWritten(Vec<String>),
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::NotInPath(p) => {
                write!(f, "program not found: {p} (not a path, and not in PATH)")
            }
            LaunchError::NotFound(p) => write!(f, "program not found: {p}"),
            LaunchError::Directory(p) => write!(f, "{p} is a directory, not a program"),
            LaunchError::NotRegularFile(p) => write!(f, "{p} is not a regular file"),
            LaunchError::NotExecutable(p) => write!(f, "{p} is not executable"),
            LaunchError::NulInPath(p) => write!(f, "{p}: path contains a NUL byte"),
            LaunchError::NulInOutput => write!(f, "output path contains a NUL byte"),
            LaunchError::SetId(p) => write!(
                f,
                "{p} is setuid or setgid: the loader ignores LD_PRELOAD for such programs, \
                 so memprof cannot profile it"
            ),
            LaunchError::StaticallyLinked { program, go: true, .. } => write!(
                f,
                "{program} is a statically linked Go program: {} (linking it dynamically would \
                 not help)",
                GO_HEAP
            ),
            LaunchError::StaticallyLinked { program, rust, .. } => write!(
                f,
                "{program} is statically linked: it never loads the preload library, so \
                 memprof cannot see its allocations (link it dynamically{})",
                if *rust { ", or make `memprof::Sampled` its global allocator" } else { "" }
            ),
            LaunchError::OutputExists(p) => write!(
                f,
                "cannot create the profile {p}: it exists (use --force to replace it, or -o)"
            ),
            LaunchError::PreloadNotAFile(p) => {
                write!(f, "MEMPROF_PRELOAD is set to {p}, which is not a file")
            }
            LaunchError::PreloadUnsafe(why) => {
                write!(f, "refusing the preload library: {why}")
            }
            LaunchError::PreloadNotFound(p) => write!(
                f,
                "cannot find the preload library libmemprof_preload.so (tried {p}; set \
                 MEMPROF_PRELOAD to its path)"
            ),
            LaunchError::PreloadNotWritten(tried) => write!(
                f,
                "cannot write the preload library anywhere (tried {}); set MEMPROF_PRELOAD to \
                 a copy of libmemprof_preload.so",
                if tried.is_empty() { "nothing".to_owned() } else { tried.join("; ") }
            ),
        }
    }
}

impl std::error::Error for LaunchError {}

impl Error {
    /// Wraps an I/O error with a description of what was being done.
    pub fn io(what: impl Into<String>, e: std::io::Error) -> Self {
        Error::Io(what.into(), e)
    }
}
