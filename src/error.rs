//! One error type for the whole library: a kind to match on and a message that says who, where,
//! what, and what to try.

use std::fmt;
use std::sync::Arc;

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
    /// A rank revoked the group ([`crate::Group::revoke`]): its pending and later calls fail,
    /// on every rank, until the survivors [`crate::Group::shrink`] it.
    Revoked,
    /// The group was used in a way it cannot serve: from a process other than the one that
    /// created it (a child forked after it was made), or from two threads at once.
    Usage,
}

/// The error returned by every fallible psyne call.
///
/// Errors compare equal when their kind and message are equal (the underlying cause, if any, is
/// not compared).
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The operating-system error behind it, for [`std::error::Error::source`].
    source: Option<Arc<std::io::Error>>,
    /// The rank of the group this error found gone or silent, if that is what it is about.
    peer: Option<usize>,
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for Error {}

impl Error {
    /// A new error of `kind` with a message that should name the problem and the fix.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
            peer: None,
        }
    }

    /// The same error, naming `peer` as the rank found gone or silent (see [`Error::peer`]).
    pub(crate) fn about_peer(self, peer: usize) -> Self {
        Error {
            peer: Some(peer),
            ..self
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

    /// An [`ErrorKind::Io`] error: `context` says what was being done; `err` stays its
    /// [`std::error::Error::source`].
    pub fn io(context: impl fmt::Display, err: std::io::Error) -> Self {
        let message = format!("{context}: {err}");
        Error {
            source: Some(Arc::new(err)),
            ..Self::new(ErrorKind::Io, message)
        }
    }

    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The rank (in the group of the failed call) this error found gone, disconnected or
    /// silent past the deadline: set on [`ErrorKind::PeerLost`] and on [`ErrorKind::Timeout`]
    /// errors of a collective, `None` on others (a mismatch, or an abort another rank announced).
    pub fn peer(&self) -> Option<usize> {
        self.peer
    }

    /// The full message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context` put in front of its message.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Error {
            message: format!("{context}: {}", self.message),
            ..self
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The result type of psyne.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn an_io_error_keeps_its_cause() {
        let cause = std::io::Error::new(std::io::ErrorKind::NotFound, "no such segment");
        let e = Error::io("opening /dev/shm/x", cause).context("rank 2");
        assert_eq!(e.kind(), ErrorKind::Io);
        assert_eq!(e.message(), "rank 2: opening /dev/shm/x: no such segment");
        let source = e.source().expect("the io error is the source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    }
}
