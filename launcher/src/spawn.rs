//! Starting one rank and signalling it.
//!
//! Each rank runs in its own process group (its pid is the group id), so psyrun can signal the
//! rank and everything it started at once, and a Ctrl-C on the terminal reaches psyrun alone,
//! which then stops the ranks in order. Each rank also asks the kernel for SIGKILL when psyrun
//! dies (`PR_SET_PDEATHSIG`), so no rank outlives psyrun even if psyrun is killed with SIGKILL.
//! That request is tied to the thread that forks the child: spawn every rank from a thread that
//! outlives it (psyrun uses the thread that runs the job). The kernel clears it in a rank's own
//! children, so a rank's descendants are only covered while psyrun is alive to signal the group.
//!
//! A bound rank sets its own CPU affinity in the same pre-exec hook (`sched_setaffinity` with a
//! mask computed by psyrun before the fork, see [`crate::binding`]), so the program runs bound
//! from its first instruction, and so does everything it starts.

use crate::binding::CpuSet;
use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Everything needed to start one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankCommand {
    /// The program (resolved: a path).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables to set on top of psyrun's environment, in order (a later one of a name wins):
    /// the `-x` ones, then the launch contract's (see [`psyne::contract::RankEnv::to_vars`]).
    pub env: Vec<(OsString, OsString)>,
    /// The working directory; psyrun's own if `None`.
    pub cwd: Option<PathBuf>,
    /// The CPUs to bind to; unbound if `None`.
    pub cpus: Option<CpuSet>,
}

/// The command that starts one rank: `program args...` with psyrun's environment plus the
/// rank's, stdin from /dev/null, stdout and stderr piped to psyrun, in a new process group, with
/// SIGKILL as its parent-death signal, and bound to its CPUs if it has any.
pub fn command(rank: &RankCommand) -> Command {
    let mut cmd = Command::new(&rank.program);
    cmd.args(&rank.args)
        .envs(rank.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = &rank.cwd {
        cmd.current_dir(dir);
    }
    // pid_t is i32 on Linux; process ids always fit.
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(libc::pid_t::MAX);
    // Built here, in the parent: the child may not allocate between fork and exec.
    let mask: Option<Vec<libc::c_ulong>> = rank.cpus.as_ref().map(CpuSet::to_mask);
    let hook = move || -> io::Result<()> {
        if let Some(mask) = &mask {
            // SAFETY: sched_setaffinity(0, len, mask) reads `len` bytes from `mask`, which is
            // a live Vec of exactly that many bytes; pid 0 is this (child) process. It is a
            // plain system call, async-signal-safe.
            let set = unsafe {
                libc::syscall(
                    libc::SYS_sched_setaffinity,
                    0 as libc::c_long,
                    std::mem::size_of_val(mask.as_slice()),
                    mask.as_ptr(),
                )
            };
            if set == -1 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: prctl(PR_SET_PDEATHSIG, sig) takes plain integers and touches no memory of
        // ours; the unused arguments are passed as zero as the man page asks.
        let set = unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if set == -1 {
            return Err(io::Error::last_os_error());
        }
        // If psyrun died between fork and prctl, the death signal will never come: the child
        // has been re-parented already. Give up rather than run unsupervised.
        // SAFETY: getppid has no preconditions and cannot fail.
        if unsafe { libc::getppid() } != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe calls
    // are allowed. It makes at most three system calls (sched_setaffinity, prctl, getppid),
    // reads a mask allocated before the fork, builds io::Errors from errno values without
    // allocating, takes no lock and touches no shared state.
    unsafe {
        cmd.pre_exec(hook);
    }
    cmd
}

/// Starts one rank (see [`command`]).
pub fn spawn(rank: &RankCommand) -> io::Result<Child> {
    command(rank).spawn()
}

/// Sends `signal` to the process group `pgid` (a rank's pid). A group that no longer exists is
/// not an error. Refuses group ids 0 and 1, which would mean psyrun's own group or init's.
pub fn signal_group(pgid: u32, signal: i32) -> io::Result<()> {
    let group = libc::pid_t::try_from(pgid)
        .ok()
        .filter(|&g| g > 1)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("refusing to signal process group {pgid}"),
            )
        })?;
    // SAFETY: killpg takes plain integers and has no memory-safety preconditions; `group` is
    // greater than 1, so it names one specific group, never psyrun's own (0) or every process.
    if unsafe { libc::killpg(group, signal) } == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    Ok(())
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
    fn groups_zero_and_one_are_refused() {
        assert!(signal_group(0, 0).is_err());
        assert!(signal_group(1, 0).is_err());
        assert!(signal_group(u32::MAX, 0).is_err());
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(40), "signal 40");
    }
}
