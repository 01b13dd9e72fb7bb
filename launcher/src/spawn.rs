//! Starting one rank, watching its output and its end, and signalling it.
//!
//! Each rank runs in its own process group (its pid is the group id), so psyrun can signal the
//! rank and everything it started at once, and a Ctrl-C on the terminal reaches psyrun alone,
//! which then stops the ranks in order. If psyrun dies without stopping them (SIGKILL, a crash),
//! its [`crate::watchdog`] kills every rank's group.
//!
//! Ranks are started with `posix_spawn` (the kernel's `vfork`-style clone, which the standard
//! library uses when no code must run between fork and exec), not `fork`: a fork copies
//! psyrun's page tables, and psyrun holds a few threads per rank and the store's, so forking
//! rank after rank cost O(N²): 512 ranks spent most of the job's CPU time in `copy_page_range`
//! and the faults after it. The price: no parent-death signal (`PR_SET_PDEATHSIG` must be asked
//! for by the child itself), so a rank started in the instant before psyrun tells the watchdog
//! its group, and psyrun dies just then, is not killed.
//!
//! A bound rank inherits its CPU affinity from the thread that starts it: that thread takes the
//! rank's mask (computed by psyrun, see [`crate::binding`]) for the moment of the spawn and then
//! gets its own back, so the program runs bound from its first instruction, and so does
//! everything it starts.

use crate::binding::CpuSet;
use crate::output::Stream;
use crate::supervise::Termination;
use crate::Error;
use std::ffi::OsString;
use std::io::{self, Read};
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
/// rank's, stdin from /dev/null, stdout and stderr piped to psyrun, in a new process group.
/// Binding is [`spawn`]'s.
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
    cmd
}

/// Starts one rank (see [`command`]), bound to its CPUs if it has any.
pub fn spawn(rank: &RankCommand) -> io::Result<Child> {
    let _bound = rank.cpus.as_ref().map(ThreadMask::take).transpose()?;
    command(rank).spawn()
}

/// The calling thread's CPU affinity, replaced by a rank's for as long as this lives (a child
/// started meanwhile inherits it), and given back on drop.
struct ThreadMask {
    saved: Vec<libc::c_ulong>,
}

/// Words of an affinity mask read back: 8,192 CPUs.
const MASK_WORDS: usize = 128;

/// `sched_setaffinity` of the calling thread (pid 0) to `mask`.
fn set_thread_mask(mask: &[libc::c_ulong]) -> io::Result<()> {
    // SAFETY: sched_setaffinity(0, len, mask) reads `len` bytes from `mask`, a live slice of
    // exactly that many bytes; pid 0 is the calling thread.
    let set = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            0 as libc::c_long,
            std::mem::size_of_val(mask),
            mask.as_ptr(),
        )
    };
    if set == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl ThreadMask {
    fn take(cpus: &CpuSet) -> io::Result<ThreadMask> {
        let mut saved = vec![0 as libc::c_ulong; MASK_WORDS];
        // SAFETY: sched_getaffinity(0, len, mask) writes at most `len` bytes into `saved`, a
        // live Vec of exactly that many bytes, and returns how many it wrote.
        let got = unsafe {
            libc::syscall(
                libc::SYS_sched_getaffinity,
                0 as libc::c_long,
                std::mem::size_of_val(saved.as_slice()),
                saved.as_mut_ptr(),
            )
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        let words = (got as usize).div_ceil(std::mem::size_of::<libc::c_ulong>());
        saved.truncate(words.max(1));
        set_thread_mask(&cpus.to_mask())?;
        Ok(ThreadMask { saved })
    }
}

impl Drop for ThreadMask {
    fn drop(&mut self) {
        // It was this thread's mask a moment ago: setting it again cannot fail for a reason
        // worth stopping psyrun for.
        let _ = set_thread_mask(&self.saved);
    }
}

/// Stack size of psyrun's helper threads (they only copy bytes or wait for a process).
pub(crate) const HELPER_STACK: usize = 256 * 1024;

/// Starts a helper thread named `name` with a [`HELPER_STACK`] stack, not joined.
pub(crate) fn helper_thread(
    name: impl Into<String>,
    f: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(HELPER_STACK)
        .spawn(f)
        .map(|_| ())
}

/// Where one of a rank's output streams goes: called on a thread of its own with the stream,
/// it returns when the stream ends.
pub type OutputSink = Box<dyn FnOnce(Box<dyn Read + Send>) + Send>;

/// A rank started by [`spawn_watched`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watched {
    /// Its pid (and process group id).
    pub pid: u32,
    /// How many output streams are being forwarded (each calls its sink once).
    pub forwarders: usize,
}

/// Starts rank `rank` (see [`spawn`]) and watches it: one thread per output stream hands the
/// stream to the sink `sinks` gives for it, and one thread waits for the rank and hands how it
/// ended to `on_exit`. The threads are named `THREADS-RANK-stdout` and `THREADS-wait-RANK`.
/// Local ranks and an agent's ranks are started through this one function; only their sinks
/// differ (the console and files, or frames to psyrun).
///
/// If a helper thread cannot be started, the rank's process group is killed and the error
/// returned.
pub fn spawn_watched(
    rank: usize,
    command: &RankCommand,
    threads: &str,
    mut sinks: impl FnMut(Stream) -> OutputSink,
    on_exit: impl FnOnce(Termination) + Send + 'static,
) -> Result<Watched, Error> {
    let mut child = spawn(command).map_err(|source| Error::Spawn {
        rank,
        program: command.program.clone(),
        source,
    })?;
    let pid = child.id();
    let thread_failed = |what: &str, e: io::Error| {
        // Started but not watchable: killed, and not waited for.
        let _ = signal_group(pid, libc::SIGKILL);
        Error::io(format!("starting the thread that {what} rank {rank}"), e)
    };
    let streams: [(Option<Box<dyn Read + Send>>, Stream); 2] = [
        (boxed(child.stdout.take()), Stream::Stdout),
        (boxed(child.stderr.take()), Stream::Stderr),
    ];
    let mut forwarders = 0;
    for (reader, stream) in streams {
        let Some(reader) = reader else { continue };
        let sink = sinks(stream);
        helper_thread(format!("{threads}-{rank}-{}", stream.name()), move || {
            sink(reader);
        })
        .map_err(|e| thread_failed("forwards the output of", e))?;
        forwarders += 1;
    }
    helper_thread(format!("{threads}-wait-{rank}"), move || {
        on_exit(match child.wait() {
            Ok(status) => Termination::from_status(status),
            Err(e) => Termination::Unknown(format!("waiting for it failed: {e}")),
        });
    })
    .map_err(|e| thread_failed("waits for", e))?;
    Ok(Watched { pid, forwarders })
}

/// A child's pipe as a boxed reader.
fn boxed(pipe: Option<impl Read + Send + 'static>) -> Option<Box<dyn Read + Send>> {
    pipe.map(|r| Box::new(r) as Box<dyn Read + Send>)
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
