//! The watchdog: a small process that outlives psyrun (or an agent) to kill the ranks' process
//! groups when psyrun dies without doing it itself (SIGKILL, a crash, the OOM killer).
//!
//! A parent-death signal would reach the rank alone: a process the rank started
//! (`sh -c 'sleep 1000 & wait'`) stays in the rank's process group but is re-parented and keeps
//! running. So before starting ranks, psyrun forks a watchdog that holds the read end
//! of a pipe whose write end only psyrun has (close-on-exec, so no program inherits it). Each
//! rank tells it its own process group between the clone and `exec` ([`crate::spawn`]),
//! through the child's copy of the write end, so the watchdog knows the group before the
//! program runs and cannot see the pipe end before it has read it, however psyrun dies. When the pipe
//! ends without psyrun having disarmed it (psyrun died, however), the watchdog sends SIGKILL to
//! every group it was told of and exits. At a normal end psyrun has killed the groups itself; it disarms the
//! watchdog, which then exits without killing anything (so it never signals a group id that
//! may have been reused since).
//!
//! The watchdog is forked without exec from a process that has threads, so after the fork it
//! makes only async-signal-safe system calls (read, kill, close, dup2, open, setpgid,
//! sigaction, `_exit`) and never allocates: the table of groups is allocated before the fork.
//! It runs in a process group of its own, so a Ctrl-C on the terminal or a signal to psyrun's
//! group does not end it, and it holds none of psyrun's other descriptors.
//!
//! What escapes: a process that leaves its rank's process group (`setsid`, `setpgid`, a daemon
//! that double-forks into a new session) is in no group the watchdog knows.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The word that disarms the watchdog (no process group is 0).
const DISARM: i32 = 0;

/// psyrun's handle on its watchdog. Dropping it without [`Watchdog::disarm`] makes the watchdog
/// kill every group it was told of, as if psyrun had died.
#[derive(Debug)]
pub struct Watchdog {
    /// The write end of the pipe (the watchdog reads the other end); taken on drop.
    pipe: Option<std::fs::File>,
    /// The watchdog's pid, to reap it.
    pid: libc::pid_t,
}

impl Watchdog {
    /// Forks a watchdog able to hold `capacity` process groups (one per rank to start).
    pub fn start(capacity: usize) -> io::Result<Watchdog> {
        let (read, write) = pipe()?;
        // Allocated here: the child may not allocate.
        let mut groups = vec![0 as libc::pid_t; capacity];
        // SAFETY: fork has no memory-safety preconditions. In the child (0) only the
        // async-signal-safe code of `watch` runs, which never returns.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => Err(io::Error::last_os_error()),
            0 => watch(read.as_raw_fd(), &mut groups),
            pid => {
                // Also set here, so that it holds before psyrun goes on (no race with a
                // signal to psyrun's group); EACCES/ESRCH after the child's own call are moot.
                // SAFETY: setpgid takes plain integers.
                unsafe { libc::setpgid(pid, pid) };
                drop(read);
                Ok(Watchdog {
                    pipe: Some(std::fs::File::from(write)),
                    pid,
                })
            }
        }
    }

    /// The write end of the watchdog's pipe (close-on-exec), to which a rank's child writes its
    /// own process group before it execs (see [`crate::spawn`]); `None` once disarmed.
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.pipe.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// psyrun has stopped the ranks itself: the watchdog exits without killing anything.
    pub fn disarm(mut self) {
        self.send(DISARM);
    }

    /// Writes one word (four bytes: one atomic pipe write); a gone watchdog is ignored.
    fn send(&mut self, word: i32) {
        if let Some(pipe) = &mut self.pipe {
            let _ = pipe.write_all(&word.to_le_bytes());
        }
    }
}

impl Drop for Watchdog {
    /// Closes the pipe (the watchdog kills the groups, or just exits if disarmed) and reaps the
    /// watchdog, waiting at most a second for it (past that, init reaps it).
    fn drop(&mut self) {
        drop(self.pipe.take());
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own child with a valid pointer to a status word.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if rc != 0 || Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
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

/// The watchdog's life, in the forked child: detach, read group ids until the pipe ends or
/// says [`DISARM`], kill the groups (unless disarmed), exit. Async-signal-safe throughout.
fn watch(fd: libc::c_int, groups: &mut [libc::pid_t]) -> ! {
    let fd = detach(fd);
    let mut known = 0;
    let mut word = [0u8; 4];
    let mut have = 0;
    let mut buf = [0u8; 512];
    loop {
        // SAFETY: reads at most buf.len() bytes into `buf`, which lives across the call.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 || (n < 0 && !interrupted()) {
            break;
        }
        for &b in buf.iter().take(usize::try_from(n).unwrap_or(0)) {
            word[have] = b;
            have += 1;
            if have < word.len() {
                continue;
            }
            have = 0;
            let g = i32::from_le_bytes(word);
            if g == DISARM {
                exit_now();
            }
            if let Some(slot) = groups.get_mut(known) {
                *slot = g;
                known += 1;
            }
        }
    }
    for &g in groups.iter().take(known) {
        if g > 1 {
            // SAFETY: kill takes plain integers; -g names the process group g (> 1).
            unsafe { libc::kill(-g, libc::SIGKILL) };
        }
    }
    exit_now()
}

/// In the child: a process group of its own, default signal handling (psyrun's handlers would
/// write to descriptors that are gone), stdin/stdout/stderr on /dev/null and every other
/// descriptor closed but the pipe, which becomes descriptor 3. Returns the pipe's descriptor
/// (its old one, with nothing closed, if it cannot be moved).
fn detach(fd: libc::c_int) -> libc::c_int {
    // SAFETY: only async-signal-safe system calls with plain integers, a static C string and a
    // zeroed sigset/sigaction on the stack.
    unsafe {
        libc::setpgid(0, 0);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_DFL);
        }
        if fd != 3 && libc::dup2(fd, 3) != 3 {
            // Keep every descriptor rather than lose the pipe.
            return fd;
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for std in 0..3 {
                libc::dup2(null, std);
            }
        }
        libc::syscall(
            libc::SYS_close_range,
            4 as libc::c_uint,
            libc::c_uint::MAX,
            0,
        );
        3
    }
}

/// Whether the last system call failed with EINTR.
fn interrupted() -> bool {
    // SAFETY: __errno_location returns this thread's errno slot, always valid to read.
    unsafe { *libc::__errno_location() == libc::EINTR }
}

/// Ends the child at once (no atexit handlers, no flushing of psyrun's buffers).
fn exit_now() -> ! {
    // SAFETY: _exit takes a plain integer and never returns.
    unsafe { libc::_exit(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: u32) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .map(|(_, s)| s.trim_start().chars().next());
        matches!(state, Some(Some(c)) if c != 'Z' && c != 'X')
    }

    /// `sleep 60` started as psyrun starts a rank: in a group of its own, which it tells `dog`
    /// before it runs ([`crate::spawn::spawn`]). Returns its pid.
    fn sleeper(dog: &Watchdog) -> u32 {
        let rank = crate::spawn::RankCommand {
            program: "/bin/sleep".into(),
            args: vec!["60".into()],
            env: Vec::new(),
            cwd: None,
            cpus: None,
            inherit: None,
        };
        crate::spawn::spawn(&rank, dog.fd()).unwrap().pid
    }

    /// Waits for child `pid`; the signal that ended it, if one did.
    fn reap(pid: u32) -> Option<i32> {
        let mut status = 0;
        // SAFETY: waitpid writes one int into `status`, which is valid and writable.
        let reaped = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        assert_eq!(reaped, pid as i32);
        libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status))
    }

    #[test]
    fn a_dropped_watchdog_kills_its_groups_and_a_disarmed_one_does_not() {
        let dog = Watchdog::start(4).unwrap();
        let killed = sleeper(&dog);
        drop(dog);
        assert_eq!(reap(killed), Some(9));
        let dog = Watchdog::start(4).unwrap();
        let spared = sleeper(&dog);
        dog.disarm();
        assert!(alive(spared));
        // SAFETY: kill sends a signal to our own child; no memory is involved.
        unsafe { libc::kill(spared as i32, libc::SIGKILL) };
        assert_eq!(reap(spared), Some(9));
    }
}
