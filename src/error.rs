//! One error type for the whole library: a kind to match on and a message that says who, where,
//! what, and what to try.

use std::fmt;

/// What went wrong, coarsely; the message has the details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller passed something that cannot work (a bitwise op on floats, a root out of range).
    InvalidArgument,
    /// The environment or a configuration value is malformed (`PSY_RANK=abc`, `PSY_ALGO=bogus`).
    Config,
    /// Ranks could not find or reach each other while the group was being formed.
    Bootstrap,
    /// A connection failed to prove it belongs to this job.
    Auth,
    /// A wait reached its deadline (`PSY_TIMEOUT`).
    Timeout,
    /// Ranks called different collectives, or the same one with different arguments.
    Mismatch,
    /// A peer disconnected or died.
    PeerLost,
    /// An operating-system call failed.
    Io,
    /// This group failed earlier; every later call returns that first error.
    Aborted,
}

/// The error returned by every fallible psyne call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// A new error of `kind` with a message that should name the problem and the fix.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// Shorthand for [`ErrorKind::InvalidArgument`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// Shorthand for [`ErrorKind::Config`].
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }

    /// An [`ErrorKind::Io`] error: `context` says what was being done.
    pub fn io(context: impl fmt::Display, err: std::io::Error) -> Self {
        Self::new(ErrorKind::Io, format!("{context}: {err}"))
    }

    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The full message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context` put in front of its message.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Error {
            kind: self.kind,
            message: format!("{context}: {}", self.message),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The result type of psyne.
pub type Result<T, E = Error> = std::result::Result<T, E>;
