//! Errors of the cold paths (start, stop, files, reports). The hot path has no errors: it
//! counts what it could not do.
#![forbid(unsafe_code)]

use std::fmt;

/// What went wrong.
#[derive(Debug)]
pub enum Error {
    /// Bad settings.
    Config(String),
    /// A session is already running in this process.
    AlreadyRunning,
    /// An I/O error, with what was being done.
    Io(String, std::io::Error),
    /// A `.mprof` stream that cannot be read, with the reason.
    Format(String),
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

impl Error {
    /// Wraps an I/O error with a description of what was being done.
    pub fn io(what: impl Into<String>, e: std::io::Error) -> Self {
        Error::Io(what.into(), e)
    }
}
