//! The core error type. Core modules return `Result<T>`; the C layer turns an `Err` into -1 plus a
//! thread-local message (see `capi::error`).

use std::fmt;

/// What kind of failure an [`Error`] is. The C API only sees the message; the kind lets Rust callers
/// and tests tell failures apart without matching on text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A caller passed an argument that is out of range, of the wrong kind, or inconsistent.
    InvalidArgument,
    /// The operation is valid MXNet but this build of mxrt does not implement it (yet).
    NotSupported,
    /// An allocation failed even after the storage pool released its cache.
    OutOfMemory,
    /// A file or stream could not be read or written.
    Io,
    /// Serialised data is corrupt, truncated or of an unknown format.
    Format,
    /// An operation pushed to the engine failed; the message is the op's own.
    OpFailed,
    /// The engine was shut down (MXNotifyShutdown) and takes no new work.
    Shutdown,
    /// Another process of a distributed job reported an error, or did not answer within the
    /// deadline (`MXRT_DIST_TIMEOUT_S`).
    Distributed,
    /// A bug in mxrt (an internal invariant was broken or code panicked).
    Internal,
}

/// A failure with a human-readable message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// Result alias used throughout the core modules.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }
    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotSupported, message)
    }
    pub fn out_of_memory(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::OutOfMemory, message)
    }
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Io, message)
    }
    pub fn format(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Format, message)
    }
    pub fn distributed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Distributed, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    /// The same error with `context: ` put in front of its message.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::io(e.to_string())
    }
}

/// Return early with an `InvalidArgument` error built from a format string.
#[macro_export]
macro_rules! bail_invalid {
    ($($arg:tt)*) => { return Err($crate::error::Error::invalid(format!($($arg)*))) };
}
