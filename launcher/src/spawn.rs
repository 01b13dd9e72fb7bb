//! Starting one rank, watching its output and its end, and signalling it.
//!
//! Each rank runs in its own process group (its pid is the group id), so psyrun can signal the
//! rank and everything it started at once, and a Ctrl-C on the terminal reaches psyrun alone,
//! which then stops the ranks in order. If psyrun dies without stopping them (SIGKILL, a crash),
//! its [`crate::watchdog`] kills every rank's group.
//!
//! Ranks are started with a `vfork`-style clone (`CLONE_VM | CLONE_VFORK`, what `posix_spawn`
//! does inside glibc), not `fork`: a fork copies psyrun's page tables, and psyrun holds a few
//! threads per rank and the store's, so forking rank after rank cost O(N²): 512 ranks spent most
//! of the job's CPU time in `copy_page_range` and the faults after it. The child shares psyrun's
//! memory until it execs (psyrun's spawning thread waits meanwhile), so everything it needs is
//! prepared before the clone and the child makes only async-signal-safe system calls on a
//! stack of its own: default signal handling, its own process group, **the watchdog told of that
//! group** (one word written to the watchdog's pipe), stdin from /dev/null and stdout and
//! stderr to pipes, the working directory, the CPU binding, an empty signal mask, `execve`.
//! (`posix_spawn` cannot do the fourth; that is why this is not `posix_spawn`.)
//!
//! Telling the watchdog from inside the child closes the window in which psyrun could die with
//! a rank running that the watchdog does not know of: the child holds its own copy of the
//! watchdog pipe's write end (close-on-exec) until it execs, so the watchdog, which acts when the
//! last write end closes, reads the rank's group before it can act, at whatever instant psyrun
//! dies; and the program never runs before its group is known.
//!
//! A bound rank binds itself in the child (`sched_setaffinity`), so the program runs bound from
//! its first instruction, and so does everything it starts.

use crate::binding::CpuSet;
use crate::error::Error;
use crate::output::Stream;
use crate::termination::Termination;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

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
    /// A descriptor of psyrun's the rank inherits under the same number (its PMI socket:
    /// [`crate::pmi`]); every other descriptor of psyrun's is closed in the rank.
    pub inherit: Option<RawFd>,
}

/// A rank just started by [`spawn`]: its pid (and process group id) and psyrun's ends of its
/// stdout and stderr pipes. Nothing waits for it yet: see [`wait_for`].
#[derive(Debug)]
pub struct Spawned {
    /// The pid.
    pub pid: u32,
    /// The read end of its stdout.
    pub stdout: File,
    /// The read end of its stderr.
    pub stderr: File,
}

/// Starts one rank: `program args...` with psyrun's environment plus the rank's, stdin from
/// /dev/null, stdout and stderr piped to psyrun, in a new process group, bound to its CPUs if it
/// has any. If `watchdog` is given (the write end of a [`crate::watchdog::Watchdog`]'s pipe),
/// the rank's process group is written to it before the program runs (see the module docs).
/// An error if the program cannot be executed (what `execve` said) or a resource runs out.
pub fn spawn(rank: &RankCommand, watchdog: Option<RawFd>) -> io::Result<Spawned> {
    let prepared = Prepared::new(rank)?;
    let (out_read, out_write) = pipe()?;
    let (err_read, err_write) = pipe()?;
    let null = File::open("/dev/null")?;
    let fds = ChildFds {
        stdin: null.as_raw_fd(),
        stdout: out_write.as_raw_fd(),
        stderr: err_write.as_raw_fd(),
        watchdog: watchdog.unwrap_or(-1),
        inherit: rank.inherit.unwrap_or(-1),
    };
    let pid = prepared.start(&fds)?;
    Ok(Spawned {
        pid,
        stdout: File::from(out_read),
        stderr: File::from(err_read),
    })
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the two-element array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// C strings packed in one buffer (each NUL-terminated), for `execve`'s arrays: one allocation
/// per array, not one per string.
#[derive(Default)]
struct CStrings {
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

impl CStrings {
    /// Appends the string made of `parts`; an error naming `what` if they hold a NUL byte.
    fn push(&mut self, parts: &[&[u8]], what: &str) -> io::Result<()> {
        if parts.iter().any(|p| p.contains(&0)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what} contains a NUL byte"),
            ));
        }
        self.starts.push(self.bytes.len());
        for p in parts {
            self.bytes.extend_from_slice(p);
        }
        self.bytes.push(0);
        Ok(())
    }

    /// A null-terminated array of pointers to the strings, valid while `self` lives unchanged
    /// (moving `self` does not move its buffer).
    fn pointers(&self) -> Vec<*const libc::c_char> {
        let base = self.bytes.as_ptr().cast::<libc::c_char>();
        self.starts
            .iter()
            // SAFETY: every start is an offset inside `bytes`.
            .map(|&at| unsafe { base.add(at) })
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    }
}

/// `NAME=VALUE` for psyrun's environment with `extra` on top (a later one of a name wins), in
/// the order of first appearance. What an outer launcher told psyrun itself (a PMI socket, a
/// PMIx server, an Open MPI or Slurm step's identity: [`crate::pmi::outer::outer_launcher_variable`])
/// is not passed on: the ranks are psyrun's, and such a variable would make an MPI library
/// join the outer job instead.
fn environment(extra: &[(OsString, OsString)]) -> io::Result<CStrings> {
    let last_of = |key: &[u8]| extra.iter().rev().find(|(k, _)| k.as_bytes() == key);
    let mut out = CStrings::default();
    let mut inherited = Vec::new();
    for (k, v) in std::env::vars_os() {
        if crate::pmi::outer::outer_launcher_variable(&k) && last_of(k.as_bytes()).is_none() {
            continue;
        }
        let value = last_of(k.as_bytes()).map_or(v.as_bytes(), |(_, v)| v.as_bytes());
        out.push(&[k.as_bytes(), b"=", value], "an environment variable")?;
        inherited.push(k);
    }
    for (i, (k, v)) in extra.iter().enumerate() {
        let later = extra[i + 1..].iter().any(|(l, _)| l == k);
        if !later && !inherited.contains(k) {
            out.push(
                &[k.as_bytes(), b"=", v.as_bytes()],
                "an environment variable",
            )?;
        }
    }
    Ok(out)
}

/// The descriptors the child puts in place.
struct ChildFds {
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    /// The watchdog pipe's write end, or -1.
    watchdog: RawFd,
    /// A descriptor the program keeps (close-on-exec cleared), or -1.
    inherit: RawFd,
}

/// Everything the child needs, allocated before the clone (the child may not allocate).
struct Prepared {
    /// The program's path; also `argv[0]`.
    _argv: CStrings,
    argv: Vec<*const libc::c_char>,
    _envp: CStrings,
    envp: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    mask: Option<Vec<libc::c_ulong>>,
}

/// Bytes of the child's stack: it makes a few system calls and nothing else (debug builds'
/// frames included, with room to spare).
const CHILD_STACK: usize = 64 * 1024;

/// What the child reads (through a pointer: it shares psyrun's memory) and where it leaves the
/// `errno` of the step that failed (0: it exec'd).
struct ChildArgs<'a> {
    prepared: &'a Prepared,
    fds: &'a ChildFds,
    error: AtomicI32,
}

impl Prepared {
    fn new(rank: &RankCommand) -> io::Result<Prepared> {
        let mut argv = CStrings::default();
        argv.push(&[rank.program.as_os_str().as_bytes()], "the program's path")?;
        for a in &rank.args {
            argv.push(&[a.as_bytes()], "an argument")?;
        }
        let envp = environment(&rank.env)?;
        let cwd = match &rank.cwd {
            Some(d) => Some(CString::new(d.as_os_str().as_bytes()).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the working directory contains a NUL byte",
                )
            })?),
            None => None,
        };
        Ok(Prepared {
            argv: argv.pointers(),
            _argv: argv,
            envp: envp.pointers(),
            _envp: envp,
            cwd,
            mask: rank.cpus.as_ref().map(CpuSet::to_mask),
        })
    }

    /// Clones the child (see the module docs) and returns its pid once it has exec'd; an error
    /// (the child reaped) if a step before the program failed.
    fn start(&self, fds: &ChildFds) -> io::Result<u32> {
        let args = ChildArgs {
            prepared: self,
            fds,
            error: AtomicI32::new(0),
        };
        let mut stack = vec![0u8; CHILD_STACK];
        // The stack grows down from its end, which must be 16-byte aligned.
        let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
        let blocked = BlockedSignals::all()?;
        // SAFETY: `child` runs on `stack`, which lives (unused by anything else) until clone
        // returns; CLONE_VFORK suspends this thread until the child has exec'd or exited, so
        // `args` and everything it points to outlive the child's use of them. The child makes
        // only async-signal-safe system calls and never returns into this code. Every signal
        // is blocked meanwhile, so no handler of psyrun's runs in the child.
        let pid = unsafe {
            libc::clone(
                child,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                std::ptr::addr_of!(args) as *mut libc::c_void,
            )
        };
        let clone_error = io::Error::last_os_error();
        drop(blocked);
        drop(stack);
        if pid == -1 {
            return Err(clone_error);
        }
        match args.error.load(Ordering::SeqCst) {
            0 => Ok(pid as u32),
            errno => {
                reap(pid);
                Err(io::Error::from_raw_os_error(errno))
            }
        }
    }
}

/// Waits for the child `pid` that exited before its program ran.
fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid on our own child with a valid pointer to a status word.
    while unsafe { libc::waitpid(pid, &mut status, 0) } == -1 && interrupted() {}
}

/// Whether the last system call failed with EINTR.
fn interrupted() -> bool {
    io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

/// Every signal blocked for the calling thread while this lives; the old mask back on drop.
struct BlockedSignals(libc::sigset_t);

impl BlockedSignals {
    fn all() -> io::Result<BlockedSignals> {
        // SAFETY: sigfillset and pthread_sigmask write only into the sigset_t values given,
        // which live on this stack.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(BlockedSignals(old))
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask read by `all`, a valid sigset_t.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// The child, from the clone to `execve`: async-signal-safe system calls only, no allocation,
/// no locks, no return (see the module docs). A failing step leaves its `errno` in the
/// arguments and exits 127.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` that `Prepared::start` passed to clone; it lives until
    // this child has exec'd or exited (CLONE_VFORK).
    let args = unsafe { &*(arg as *const ChildArgs<'_>) };
    // SAFETY: only async-signal-safe system calls, on descriptors and buffers prepared before
    // the clone that stay valid while the parent thread waits; nothing here allocates.
    unsafe {
        default_signal_handling();
        let failed = setup(args.prepared, args.fds);
        args.error.store(failed, Ordering::SeqCst);
        libc::_exit(127)
    }
}

/// In the child: every signal psyrun catches goes back to its default action (its handlers
/// must not run in a process that shares psyrun's memory, and SIGPIPE, which Rust ignores, is
/// the program's to have by default).
///
/// # Safety
///
/// Only in the child of [`Prepared::start`], with every signal blocked.
unsafe fn default_signal_handling() {
    // SAFETY: sigaction reads and writes only the sigaction values on this stack; the caller
    // guarantees the context (see above).
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        // Linux numbers signals 1 to 64; the ones glibc keeps for itself refuse (EINVAL).
        for sig in 1..=64 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let caught = |old: &libc::sigaction| {
                old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN
            };
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && (caught(&old) || sig == libc::SIGPIPE)
            {
                libc::sigaction(sig, &default, std::ptr::null_mut());
            }
        }
    }
}

/// In the child: the steps up to `execve`; returns the `errno` of the one that failed.
///
/// # Safety
///
/// Only in the child of [`Prepared::start`]: `p`'s pointers are valid and `fds` open.
unsafe fn setup(p: &Prepared, fds: &ChildFds) -> libc::c_int {
    // SAFETY: __errno_location returns this thread's errno slot, always valid to read.
    let errno = || unsafe { *libc::__errno_location() };
    // SAFETY: system calls on descriptors and C strings prepared before the clone, valid while
    // the parent thread waits (the caller's guarantee).
    unsafe {
        if libc::setpgid(0, 0) == -1 {
            return errno();
        }
        if fds.watchdog >= 0 {
            // The group id is the pid. One four-byte write: atomic on a pipe. A watchdog that is
            // gone (EPIPE) is ignored, as psyrun ignores it.
            let word = libc::getpid().to_le_bytes();
            while libc::write(fds.watchdog, word.as_ptr().cast(), word.len()) == -1
                && errno() == libc::EINTR
            {}
        }
        for (from, to) in [(fds.stdin, 0), (fds.stdout, 1), (fds.stderr, 2)] {
            if libc::dup2(from, to) == -1 {
                return errno();
            }
        }
        // The child has its own copy of the descriptor table (no CLONE_FILES), so this keeps
        // the descriptor open across execve in the rank alone.
        if fds.inherit > 2 && libc::fcntl(fds.inherit, libc::F_SETFD, 0) == -1 {
            return errno();
        }
        if let Some(dir) = &p.cwd {
            if libc::chdir(dir.as_ptr()) == -1 {
                return errno();
            }
        }
        if let Some(mask) = &p.mask {
            let bytes = std::mem::size_of_val(mask.as_slice());
            if libc::syscall(libc::SYS_sched_setaffinity, 0, bytes, mask.as_ptr()) == -1 {
                return errno();
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(p.argv[0], p.argv.as_ptr(), p.envp.as_ptr());
    }
    errno()
}

/// What the thread that waits for a rank reports ([`wait_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankState {
    /// A signal stopped it (SIGSTOP, SIGTSTP, ...).
    Stopped(i32),
    /// SIGCONT resumed it.
    Continued,
    /// It ended.
    Ended(Termination),
}

/// Waits for the rank `pid` (a child of psyrun's) until it ends, reporting each stop and
/// resumption on the way, then how it ended.
pub fn wait_for(pid: u32, mut report: impl FnMut(RankState)) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return report(RankState::Ended(Termination::Unknown(format!(
            "pid {pid} out of range"
        ))));
    };
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid pointer to a status word.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED | libc::WCONTINUED) };
        if rc == -1 {
            if interrupted() {
                continue;
            }
            let e = io::Error::last_os_error();
            return report(RankState::Ended(Termination::Unknown(format!(
                "waiting for it failed: {e}"
            ))));
        }
        let state = if libc::WIFSTOPPED(status) {
            RankState::Stopped(libc::WSTOPSIG(status))
        } else if libc::WIFCONTINUED(status) {
            RankState::Continued
        } else if libc::WIFEXITED(status) {
            RankState::Ended(Termination::Exited(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            RankState::Ended(Termination::Signaled(libc::WTERMSIG(status)))
        } else {
            RankState::Ended(Termination::Unknown(format!(
                "unrecognised wait status {status:#x}"
            )))
        };
        let ended = matches!(state, RankState::Ended(_));
        report(state);
        if ended {
            return;
        }
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

/// Starts rank `rank` (see [`spawn`], telling `watchdog` its group) and watches it: one thread
/// per output stream hands the stream to the sink `sinks` gives for it, and one thread waits for
/// the rank and hands each stop, resumption and finally its end to `on_state`. The threads are
/// named `THREADS-RANK-stdout` and `THREADS-wait-RANK`. Local ranks and an agent's ranks are
/// started through this one function; only their sinks differ (the console and files, or frames
/// to psyrun).
///
/// If a helper thread cannot be started, the rank's process group is killed and the error
/// returned.
pub fn spawn_watched(
    rank: usize,
    command: &RankCommand,
    watchdog: Option<RawFd>,
    threads: &str,
    mut sinks: impl FnMut(Stream) -> OutputSink,
    on_state: impl FnMut(RankState) + Send + 'static,
) -> Result<Watched, Error> {
    let child = spawn(command, watchdog).map_err(|source| Error::Spawn {
        rank,
        program: command.program.clone(),
        source,
    })?;
    let pid = child.pid;
    let thread_failed = |what: &str, e: io::Error| {
        // Started but not watchable: killed, and not waited for.
        let _ = signal_group(pid, libc::SIGKILL);
        Error::io(format!("starting the thread that {what} rank {rank}"), e)
    };
    let streams: [(Box<dyn Read + Send>, Stream); 2] = [
        (Box::new(child.stdout), Stream::Stdout),
        (Box::new(child.stderr), Stream::Stderr),
    ];
    let mut forwarders = 0;
    for (reader, stream) in streams {
        let sink = sinks(stream);
        helper_thread(format!("{threads}-{rank}-{}", stream.name()), move || {
            sink(reader);
        })
        .map_err(|e| thread_failed("forwards the output of", e))?;
        forwarders += 1;
    }
    helper_thread(format!("{threads}-wait-{rank}"), move || {
        wait_for(pid, on_state);
    })
    .map_err(|e| thread_failed("waits for", e))?;
    Ok(Watched { pid, forwarders })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_zero_and_one_are_refused() {
        assert!(signal_group(0, 0).is_err());
        assert!(signal_group(1, 0).is_err());
        assert!(signal_group(u32::MAX, 0).is_err());
    }
}
