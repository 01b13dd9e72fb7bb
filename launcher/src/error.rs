//! Why psyrun could not run a job at all (as opposed to a job whose rank failed, which is an
//! [`crate::Outcome`]). Each error knows its exit code from [`crate::exit`].

use crate::binding::BindError;
use crate::exit;
use crate::placement::PlacementError;
use crate::program::LookupError;
use std::path::PathBuf;

/// A failure of psyrun itself, with the context to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program was not found or is not executable.
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// The ranks could not be placed.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// The command line asks for something this machine cannot give (an unset `-x VAR`, a
    /// missing `--wdir`); nothing was started.
    #[error("{0}")]
    Usage(String),
    /// The ranks cannot be bound as asked.
    #[error("binding ranks on {host}: {source}")]
    Binding {
        /// The host.
        host: String,
        /// Why.
        #[source]
        source: BindError,
    },
    /// The job's store (or its secret) could not be set up.
    #[error("setting up the job's store: {0}")]
    Store(#[from] psyne::Error),
    /// An operating-system call failed; `context` says what psyrun was doing.
    #[error("{context}: {source}")]
    Io {
        /// What psyrun was doing.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Starting the job on other hosts failed (the message names the hosts and causes).
    #[error("{message}")]
    Remote {
        /// What happened where.
        message: String,
        /// The exit code.
        code: u8,
    },
    /// A rank could not be started.
    #[error("{}", spawn_message(*.rank, .program, .source))]
    Spawn {
        /// The rank.
        rank: usize,
        /// The program.
        program: PathBuf,
        /// What `exec` (or `fork`) said.
        #[source]
        source: std::io::Error,
    },
}

fn spawn_message(rank: usize, program: &std::path::Path, source: &std::io::Error) -> String {
    let hint = match (source.kind(), source.raw_os_error()) {
        (std::io::ErrorKind::NotFound, _) => {
            "; if it is a script, check the interpreter on its #! line"
        }
        (std::io::ErrorKind::PermissionDenied, _) => "; check its permissions (chmod +x)",
        (_, Some(libc::ENOEXEC)) => {
            "; it is not a binary for this machine, or a script without a #! line"
        }
        _ => "",
    };
    format!(
        "cannot start rank {rank} ({}): {source}{hint}",
        program.display()
    )
}

impl Error {
    /// An [`Error::Io`] with what psyrun was doing.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The exit code psyrun ends with for this error (see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Lookup(e) => e.exit_code(),
            Error::Placement(_) | Error::Usage(_) => exit::USAGE,
            Error::Binding {
                source: BindError::Hwloc(_),
                ..
            } => exit::LAUNCH_FAILED,
            Error::Binding { .. } => exit::USAGE,
            Error::Store(_) | Error::Io { .. } => exit::LAUNCH_FAILED,
            Error::Remote { code, .. } => *code,
            Error::Spawn { source, .. } => match (source.kind(), source.raw_os_error()) {
                (std::io::ErrorKind::NotFound, _) => exit::NOT_FOUND,
                (std::io::ErrorKind::PermissionDenied, _) => exit::NOT_EXECUTABLE,
                (_, Some(libc::ENOEXEC)) => exit::NOT_EXECUTABLE,
                _ => exit::LAUNCH_FAILED,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawn_errors_map_like_a_shell() {
        let spawn = |e: std::io::Error| Error::Spawn {
            rank: 1,
            program: "/x/p".into(),
            source: e,
        };
        let e = spawn(std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.exit_code(), exit::NOT_FOUND);
        assert!(e.to_string().contains("rank 1 (/x/p)"), "{e}");
        assert!(e.to_string().contains("#!"), "{e}");
        let e = spawn(std::io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(e.exit_code(), exit::NOT_EXECUTABLE);
        let e = spawn(std::io::Error::from_raw_os_error(libc::ENOEXEC));
        assert_eq!(e.exit_code(), exit::NOT_EXECUTABLE);
        let e = spawn(std::io::Error::from_raw_os_error(libc::EAGAIN));
        assert_eq!(e.exit_code(), exit::LAUNCH_FAILED);
        let e = Error::io(
            "creating x",
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert_eq!(e.exit_code(), exit::LAUNCH_FAILED);
        assert!(e.to_string().starts_with("creating x: "), "{e}");
    }
}
