//! How a rank ended, and the names of signals (a leaf: what spawning, supervising and the
//! agents' protocol all speak of).

use crate::exit;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// How a rank ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Termination {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
    /// Waiting for it failed; the text says why.
    Unknown(String),
}

impl Termination {
    /// From what `wait` returned.
    pub fn from_status(status: ExitStatus) -> Termination {
        match (status.code(), status.signal()) {
            (Some(code), _) => Termination::Exited(code),
            (None, Some(sig)) => Termination::Signaled(sig),
            (None, None) => Termination::Unknown(format!("unrecognised wait status {status}")),
        }
    }

    /// Exited with code 0.
    pub fn is_success(&self) -> bool {
        *self == Termination::Exited(0)
    }

    /// The exit code psyrun passes on for it: the code itself (its low 8 bits), 128 + a signal,
    /// or [`exit::LAUNCH_FAILED`] when unknown.
    pub fn exit_code(&self) -> u8 {
        match self {
            Termination::Exited(code) => (code & 0xff) as u8,
            Termination::Signaled(sig) => exit::for_signal(*sig),
            Termination::Unknown(_) => exit::LAUNCH_FAILED,
        }
    }

    /// `exited with code 3`, `killed by signal 9 (SIGKILL)`, ...
    pub fn describe(&self) -> String {
        match self {
            Termination::Exited(code) => format!("exited with code {code}"),
            Termination::Signaled(sig) => {
                format!("killed by signal {sig} ({})", signal_name(*sig))
            }
            Termination::Unknown(why) => format!("ended in an unknown way ({why})"),
        }
    }
}

/// The conventional name of a signal number (`SIGKILL`), or `signal N` for others.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(40), "signal 40");
    }
}
