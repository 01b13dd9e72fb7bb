//! How every wait in psyne waits, in one place: look without a system call for a while, then keep
//! looking but yield the core between looks, then block (on a descriptor, a futex, or a slot),
//! checking between blocks that the peer still lives and the deadline has not passed.
//!
//! [`WaitPolicy`] says how long each phase lasts; a group computes it once, when it forms.
//! [`Spinner`] walks one wait through the phases; every engine (scheduled steps over links, the
//! node board, shared buffers) and the shared-memory arrival lines use it, so a change to how
//! psyne waits is a change here. [`process_alive`] is the one liveness probe of a peer process on
//! this host.

use std::cell::Cell;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// What a group asks, while one of its calls is blocked waiting for its peers, whether to give
/// the call up: `Some(reason)` does ([`crate::Group::set_interrupt_check`]). A binding's way to
/// let Ctrl-C end a wait: Python's checks for a pending signal.
pub type InterruptCheck = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// How often a blocked call asks its group's [`InterruptCheck`]: once it has been blocked this
/// long, and then again after each such interval (so a signal ends a wait within about this
/// long, and a call that blocks only briefly never asks).
pub const INTERRUPT_CHECK_EVERY: Duration = Duration::from_millis(50);

/// One call's use of its group's [`InterruptCheck`]: asked where the call's waits block, at
/// most every [`INTERRUPT_CHECK_EVERY`].
pub(crate) struct Interrupt {
    check: Option<InterruptCheck>,
    /// When to ask next; set at the call's first block.
    next: Cell<Option<Instant>>,
}

impl Interrupt {
    /// A call with `check`, or with nothing to ask.
    pub(crate) fn new(check: Option<InterruptCheck>) -> Interrupt {
        Interrupt {
            check,
            next: Cell::new(None),
        }
    }

    /// The longest a block may last before the next look: `left`, and with a check to ask, at
    /// most [`INTERRUPT_CHECK_EVERY`].
    pub(crate) fn slice(&self, left: Duration) -> Duration {
        match self.check {
            Some(_) => left.min(INTERRUPT_CHECK_EVERY),
            None => left,
        }
    }

    /// Called where a wait is about to block: the reason to give the call up, if the check was
    /// due and gave one.
    pub(crate) fn poll(&self) -> Option<String> {
        let check = self.check.as_ref()?;
        let now = Instant::now();
        match self.next.get() {
            Some(due) if now >= due => {}
            Some(_) => return None,
            None => {
                self.next.set(Some(now + INTERRUPT_CHECK_EVERY));
                return None;
            }
        }
        self.next.set(Some(now + INTERRUPT_CHECK_EVERY));
        check()
    }
}

/// How a rank waits for a peer: poll without system calls for `poll`, then keep polling but yield
/// the core between looks until `spin` has passed, then block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Pure polling (no system call): worth it when every rank has a core of its own.
    pub poll: Duration,
    /// Total time before blocking, polling phase included.
    pub spin: Duration,
}

impl WaitPolicy {
    /// `spin` (`PSY_SPIN_US`), with a few µs of pure polling unless the ranks on this host
    /// (`local_ranks`) outnumber its cores, when polling would only keep a peer off its core.
    pub fn new(spin: Duration, local_ranks: usize) -> WaitPolicy {
        let poll = if oversubscribed(local_ranks) {
            Duration::ZERO
        } else {
            Duration::from_micros(3)
        };
        WaitPolicy {
            poll: poll.min(spin),
            spin,
        }
    }
}

/// Whether `local_ranks` ranks on this host outnumber its online CPUs.
pub(crate) fn oversubscribed(local_ranks: usize) -> bool {
    local_ranks > online_cores()
}

/// The host's online CPUs (read once per process), not this process's affinity mask: a launcher
/// that binds each rank to one core (mpirun does by default) does not make the host
/// oversubscribed.
fn online_cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if online > 0 {
            online as usize
        } else {
            1
        }
    })
}

/// What a waiter should do after a look that found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Look again at once.
    Look,
    /// Yield the core, then look again.
    Yield,
    /// Block (check liveness and the deadline first); call [`Spinner::blocked`] after.
    Block,
}

/// Looks that are free of any clock read, at the start of a wait: a look at a ring or a slot
/// costs less than reading the clock.
const FREE_LOOKS: u32 = 64;
/// After the free looks, the clock is read every this many looks.
const CLOCK_EVERY: u32 = 16;

/// One wait's progress through the phases of a [`WaitPolicy`].
pub(crate) struct Spinner {
    policy: WaitPolicy,
    /// Whether to put a PAUSE between looks (while polling).
    pause: bool,
    looks: u32,
    since: Option<Instant>,
}

impl Spinner {
    /// A wait that looks flat out while polling (a PAUSE costs more than a look at a ring here).
    pub(crate) fn new(policy: WaitPolicy) -> Spinner {
        Spinner {
            policy,
            pause: false,
            looks: 0,
            since: None,
        }
    }

    /// A wait that puts a PAUSE between looks while polling, for a single cache line another core
    /// is about to write: polling it flat out slows down the very store it waits for.
    pub(crate) fn pausing(policy: WaitPolicy) -> Spinner {
        Spinner {
            pause: true,
            ..Spinner::new(policy)
        }
    }

    /// Something arrived: the next idle look starts a new wait.
    #[inline]
    pub(crate) fn progressed(&mut self) {
        self.looks = 0;
        self.since = None;
    }

    /// A block ended: yield and block again only after another spin.
    pub(crate) fn blocked(&mut self) {
        self.since = Some(Instant::now());
    }

    /// The phase after a look that found nothing.
    #[inline]
    pub(crate) fn idle(&mut self) -> Next {
        self.looks = self.looks.wrapping_add(1);
        if self.pause && !self.policy.poll.is_zero() {
            std::hint::spin_loop();
        }
        if self.looks < FREE_LOOKS || self.looks % CLOCK_EVERY != 0 {
            return Next::Look;
        }
        let idle = self.since.get_or_insert_with(Instant::now).elapsed();
        if idle < self.policy.poll {
            Next::Look
        } else if idle < self.policy.spin {
            std::thread::yield_now();
            Next::Yield
        } else {
            Next::Block
        }
    }
}

/// The position of the first of `pids` (the ranks' recorded process ids, by rank) whose process
/// has ended: for naming the rank a peer lost when only the kind of its error reached this rank.
pub(crate) fn first_ended(pids: impl IntoIterator<Item = u32>) -> Option<usize> {
    pids.into_iter().position(|pid| !process_alive(pid))
}

/// Whether process `pid` on this host exists (0, an unknown pid, counts as alive).
pub(crate) fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if pid == 0 {
        return true;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_ended_process_is_found_by_position() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let ended = child.id();
        child.wait().expect("reap true");
        let me = std::process::id();
        assert_eq!(first_ended([me, 0, ended, ended]), Some(2));
        assert_eq!(
            first_ended([me, 0]),
            None,
            "alive, and 0 (not recorded yet)"
        );
    }

    #[test]
    fn a_spinner_looks_then_yields_then_blocks() {
        let policy = WaitPolicy {
            poll: Duration::ZERO,
            spin: Duration::from_millis(20),
        };
        let mut s = Spinner::new(policy);
        assert_eq!(s.idle(), Next::Look, "the first looks read no clock");
        let mut seen_yield = false;
        let until = Instant::now() + Duration::from_secs(5);
        let block = loop {
            match s.idle() {
                Next::Yield => seen_yield = true,
                Next::Block => break true,
                Next::Look => {}
            }
            if Instant::now() > until {
                break false;
            }
        };
        assert!(seen_yield && block, "yields within the spin, then blocks");
        s.blocked();
        assert_ne!(s.idle(), Next::Block, "a block restarts the spin");
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(process_alive(std::process::id()));
        assert!(process_alive(0), "unknown counts as alive");
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait for true");
        assert!(!process_alive(pid));
    }
}
