//! Supervising the ranks of a running job: the one owner of the child processes.
//!
//! The [`Supervisor`] blocks on one channel of [`Event`]s (a rank exited, psyrun got a signal)
//! with a deadline (the job's `--timeout`, the end of the grace period, the last wait after
//! SIGKILL); it never polls. The first cause to end the job early wins and sets the exit code:
//!
//! - a rank exits with a non-zero code or dies by a signal: psyrun names it and stops the others;
//! - psyrun gets SIGINT, SIGTERM or SIGHUP: it stops every rank and exits with 128 + the signal;
//! - `--timeout` expires: it stops every rank and exits with 124.
//!
//! psyrun never waits forever for a rank that can no longer run. A rank the other ranks counted
//! failed while it still runs ([`Event::Declared`]: silent past `PSY_TIMEOUT` in their
//! agreement) is killed at once with SIGKILL; and a rank stopped by a signal ([`Event::Stopped`])
//! while every other rank has ended is killed once `--grace` has passed without a SIGCONT. Either
//! then counts as a rank killed by signal 9, and messages say why psyrun killed it.
//!
//! Stopping means SIGTERM (and SIGCONT, so a stopped rank can act on it) to each running rank's
//! process group, then SIGKILL to the groups still running when `--grace` has passed, then at most
//! [`KILL_WAIT`] more for the kernel to reap them. A second signal to psyrun skips the grace
//! period; a third stops waiting. Ranks that psyrun stopped never count as failures.
//!
//! How signals reach ranks is behind [`Stopper`], so the state machine is tested with a fake.

use crate::exit;
use crate::output::Console;
use crate::spawn::signal_group;
use crate::termination::{signal_name, Termination};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// How long psyrun waits for ranks to die after SIGKILL before it gives up on them (a process in
/// uninterruptible sleep cannot die until its system call returns).
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// How long psyrun waits, after a rank exits with a failing code, before it names that rank as
/// the cause: a survivor can notice a peer killed by a signal (the OOM killer, `kill -9`) and
/// exit before psyrun has reaped the killed one. A death by signal within this window is the
/// cause instead; one comes first in cause, whatever the order of the reports.
pub const SETTLE: Duration = Duration::from_millis(100);

/// Why a job ended before all its ranks finished on their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// This rank failed first.
    RankFailed {
        /// The rank.
        rank: usize,
        /// Its process id.
        pid: u32,
        /// How it ended.
        termination: Termination,
    },
    /// psyrun received this signal.
    Signal(i32),
    /// `--timeout` expired after this long.
    Timeout(Duration),
    /// psyrun could not start every rank (the error is returned separately).
    LaunchFailed,
    /// The ranks that failed first report losing this rank, which was still running (hung,
    /// stopped, or cut off): it is named as the cause.
    Lost {
        /// The rank the others lost.
        rank: usize,
        /// Its process id.
        pid: u32,
        /// The first rank that failed, having lost it.
        by: usize,
        /// How that rank ended (its exit code is the job's).
        termination: Termination,
    },
    /// The link to a host was lost while ranks ran there.
    HostLost {
        /// The host, as named on the command line.
        host: String,
        /// What was seen.
        why: String,
    },
    /// A rank called abort through its MPI library (`MPI_Abort`): the whole job ends with the
    /// code it gave.
    Aborted {
        /// The rank.
        rank: usize,
        /// Its process id.
        pid: u32,
        /// The code it gave.
        code: i32,
    },
}

impl Cause {
    /// What happened, in a few words: `rank 2 (pid 41) killed by signal 9 (SIGKILL)`.
    pub fn describe(&self) -> String {
        match self {
            Cause::RankFailed {
                rank,
                pid,
                termination,
            } => format!("rank {rank} (pid {pid}) {}", termination.describe()),
            Cause::Lost { rank, pid, by, .. } => {
                format!("rank {rank} (pid {pid}) was lost by rank {by}")
            }
            Cause::HostLost { host, why } => format!("host {host} was lost ({why})"),
            Cause::Aborted { rank, pid, code } => {
                format!("rank {rank} (pid {pid}) called MPI_Abort with code {code}")
            }
            Cause::Signal(sig) => format!("psyrun received signal {sig}"),
            Cause::Timeout(after) => format!("--timeout expired after {after:?}"),
            Cause::LaunchFailed => "the ranks could not be started".into(),
        }
    }

    /// The exit code for this cause (see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Cause::RankFailed { termination, .. } | Cause::Lost { termination, .. } => {
                termination.exit_code()
            }
            Cause::Aborted { code, .. } => (*code & 0xff) as u8,
            Cause::Signal(sig) => exit::for_signal(*sig),
            Cause::Timeout(_) => exit::TIMEOUT,
            Cause::LaunchFailed | Cause::HostLost { .. } => exit::LAUNCH_FAILED,
        }
    }
}

/// What became of one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankReport {
    /// The rank.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
    /// How it ended; `None` if it had not been reaped when psyrun gave up on it.
    pub termination: Option<Termination>,
    /// psyrun stopped it (it was running when the job was being stopped).
    pub stopped: bool,
    /// The host it ran on, for a multi-host job (messages name it).
    pub host: Option<String>,
}

/// The end of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Why the job ended early, if it did.
    pub cause: Option<Cause>,
    /// Every rank that was started, in rank order.
    pub ranks: Vec<RankReport>,
    /// Failures the job went on after (`--on-failure continue`), in order.
    pub tolerated: Vec<Cause>,
}

impl RankReport {
    /// `3 (pid 1234)`, or `3 on node2 (pid 1234)` in a multi-host job.
    pub fn name(&self) -> String {
        match &self.host {
            Some(h) => format!("{} on {h} (pid {})", self.rank, self.pid),
            None => format!("{} (pid {})", self.rank, self.pid),
        }
    }
}

impl Outcome {
    /// psyrun's exit code: 0 if every rank succeeded, else that of the [`Cause`].
    pub fn exit_code(&self) -> u8 {
        self.cause.as_ref().map_or(exit::SUCCESS, Cause::exit_code)
    }
}

/// Something the supervisor must react to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A rank's process was reaped.
    Exited {
        /// The rank.
        rank: usize,
        /// How it ended.
        termination: Termination,
    },
    /// A signal stopped a rank (SIGSTOP, SIGTSTP, ...): it runs no further until SIGCONT.
    Stopped {
        /// The rank.
        rank: usize,
        /// The signal that stopped it.
        signal: i32,
    },
    /// SIGCONT resumed a stopped rank.
    Continued {
        /// The rank.
        rank: usize,
    },
    /// psyrun received a signal.
    Signal(i32),
    /// The other ranks counted this rank failed while it still runs (it did not answer an
    /// agreement before `PSY_TIMEOUT`: stopped, hung): psyrun ends it.
    Declared {
        /// The rank.
        rank: usize,
        /// Why they counted it failed, as they said.
        why: String,
    },
    /// A rank called abort through its MPI library's process-management interface
    /// ([`crate::pmi`]): the job ends with its code.
    Aborted {
        /// The rank.
        rank: usize,
        /// The exit code it asked for.
        code: i32,
        /// Its message, if it gave one.
        message: String,
    },
    /// The link to a host was lost: its ranks are out of reach.
    HostLost {
        /// The host.
        host: String,
        /// Why.
        why: String,
    },
}

/// Delivers signals to ranks.
pub trait Stopper {
    /// Sends `signal` to `rank` (process `pid`) and whatever it started.
    fn signal(&mut self, rank: usize, pid: u32, signal: i32) -> std::io::Result<()>;
}

/// The real [`Stopper`]: signals each rank's process group (see [`signal_group`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessGroups;

impl Stopper for ProcessGroups {
    fn signal(&mut self, _rank: usize, pid: u32, signal: i32) -> std::io::Result<()> {
        signal_group(pid, signal)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// A rank failed with an exit code; until `until`, a death by signal may still turn up as
    /// the cause (see [`SETTLE`]).
    Settling {
        until: Instant,
        first: usize,
    },
    Terminating {
        kill_at: Instant,
    },
    Killing {
        give_up_at: Instant,
    },
}

/// Watches the ranks of one job until all have ended (see the module docs).
pub struct Supervisor<'c, S: Stopper> {
    console: &'c Console,
    stopper: S,
    grace: Duration,
    timeout: Option<Duration>,
    started: Instant,
    events: Receiver<Event>,
    ranks: Vec<RankReport>,
    cause: Option<Cause>,
    phase: Phase,
    /// Which rank a rank reported losing, if it did (see [`Supervisor::with_losses`]).
    losses: Option<LostBy<'c>>,
    /// `--on-failure continue`: a rank that fails while others run is reported, not fatal.
    go_on: bool,
    /// The failures gone on from, in order.
    tolerated: Vec<Cause>,
    /// The ranks psyrun killed because the others counted them failed, or because they stayed
    /// stopped once every other rank had ended (index, and why, as messages say it).
    killed: Vec<(usize, String)>,
    /// The signal that stopped each rank (by index) while it is stopped.
    stopped: Vec<Option<i32>>,
    /// When the ranks still running, all stopped with every other rank ended, are killed
    /// (see [`Supervisor::watch_abandoned`]).
    abandoned_at: Option<Instant>,
}

/// Reads which rank (if any) a rank reported losing when its call failed.
pub type LostBy<'c> = Box<dyn FnMut(usize) -> Option<usize> + 'c>;

impl<S: Stopper> std::fmt::Debug for Supervisor<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("ranks", &self.ranks)
            .field("cause", &self.cause)
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

/// `1 rank`, `3 ranks`.
pub(crate) fn count(n: usize) -> String {
    if n == 1 {
        "1 rank".into()
    } else {
        format!("{n} ranks")
    }
}

fn list(ranks: &[&RankReport]) -> String {
    let shown: Vec<String> = ranks.iter().take(8).map(|r| r.name()).collect();
    let more = ranks.len().saturating_sub(shown.len());
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{}{tail}", shown.join(", "))
}

impl<'c, S: Stopper> Supervisor<'c, S> {
    /// A supervisor that reads `events`, stops ranks through `stopper`, and reports on
    /// `console`. The `timeout` clock starts now.
    pub fn new(
        console: &'c Console,
        stopper: S,
        grace: Duration,
        timeout: Option<Duration>,
        events: Receiver<Event>,
    ) -> Self {
        Supervisor {
            console,
            stopper,
            grace,
            timeout,
            started: Instant::now(),
            events,
            ranks: Vec::new(),
            cause: None,
            phase: Phase::Running,
            losses: None,
            go_on: false,
            tolerated: Vec::new(),
            killed: Vec::new(),
            stopped: Vec::new(),
            abandoned_at: None,
        }
    }

    /// `--on-failure continue`: a rank that fails (or a host lost) while other ranks still run
    /// is named and left out, and the others go on (they may shrink their groups and finish
    /// without it: [`psyne::Group::shrink`]). The failure of the last ranks running is the
    /// job's, as without this; a signal or the timeout stops everything as always.
    pub fn going_on_after_failures(mut self) -> Self {
        self.go_on = true;
        self
    }

    /// Reads what failed ranks report losing (`lost_by(rank)`), so that a rank that exited
    /// because it lost a peer is not named as the cause when that peer is known: the peer is,
    /// whether it failed later or still runs.
    pub fn with_losses(mut self, lost_by: LostBy<'c>) -> Self {
        self.losses = Some(lost_by);
        self
    }

    /// Adds a started rank. Ranks must be added in rank order, before [`Supervisor::run`].
    pub fn add_rank(&mut self, rank: usize, pid: u32) {
        self.add_rank_on(rank, pid, None);
    }

    /// Adds a started rank that runs on `host` (a multi-host job), as [`Supervisor::add_rank`].
    pub fn add_rank_on(&mut self, rank: usize, pid: u32, host: Option<String>) {
        self.ranks.push(RankReport {
            rank,
            pid,
            termination: None,
            stopped: false,
            host,
        });
        self.stopped.push(None);
    }

    fn running(&self) -> impl Iterator<Item = &RankReport> {
        self.ranks.iter().filter(|r| r.termination.is_none())
    }

    /// Stops the job for `cause` (if no cause was recorded before): SIGTERM now, SIGKILL after
    /// the grace period. Used for causes found outside the event loop, such as a failed launch.
    pub fn stop(&mut self, cause: Cause) {
        if self.cause.is_none() {
            self.cause = Some(cause);
        }
        if !self.accepting_causes() {
            return;
        }
        for i in 0..self.ranks.len() {
            if self.ranks[i].termination.is_none() {
                self.ranks[i].stopped = true;
                self.send(i, libc::SIGTERM);
                self.send(i, libc::SIGCONT);
            }
        }
        if self.grace.is_zero() {
            self.kill_remaining();
        } else {
            self.phase = Phase::Terminating {
                kill_at: Instant::now() + self.grace,
            };
        }
    }

    fn send(&mut self, i: usize, signal: i32) {
        let (rank, pid) = (self.ranks[i].rank, self.ranks[i].pid);
        if let Err(e) = self.stopper.signal(rank, pid, signal) {
            self.console.message(&format!(
                "cannot send {} to rank {rank} (pid {pid}): {e}",
                signal_name(signal)
            ));
        }
    }

    fn kill_remaining(&mut self) {
        for i in 0..self.ranks.len() {
            if self.ranks[i].termination.is_none() {
                self.ranks[i].stopped = true;
                self.send(i, libc::SIGKILL);
            }
        }
        self.phase = Phase::Killing {
            give_up_at: Instant::now() + KILL_WAIT,
        };
    }

    fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running => {
                let timeout = self.timeout.map(|t| self.started + t);
                match (timeout, self.abandoned_at) {
                    (Some(t), Some(a)) => Some(t.min(a)),
                    (t, a) => t.or(a),
                }
            }
            Phase::Settling { until, .. } => Some(until),
            Phase::Terminating { kill_at } => Some(kill_at),
            Phase::Killing { give_up_at } => Some(give_up_at),
        }
    }

    /// Handles events until every rank has ended (or psyrun gives up on the ones that do not
    /// die), and returns the outcome.
    pub fn run(mut self) -> Outcome {
        while self.running().next().is_some() {
            let deadline = self.deadline();
            let event = match deadline {
                None => self
                    .events
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => self
                    .events
                    .recv_timeout(d.saturating_duration_since(Instant::now())),
            };
            let go_on = match event {
                Ok(Event::Exited { rank, termination }) => {
                    self.on_exit(rank, termination);
                    true
                }
                Ok(Event::Signal(sig)) => self.on_signal(sig),
                Ok(Event::Declared { rank, why }) => {
                    self.on_declared(rank, &why);
                    true
                }
                Ok(Event::Stopped { rank, signal }) => {
                    self.set_stopped(rank, Some(signal));
                    true
                }
                Ok(Event::Continued { rank }) => {
                    self.set_stopped(rank, None);
                    true
                }
                Ok(Event::Aborted {
                    rank,
                    code,
                    message,
                }) => {
                    self.on_abort(rank, code, &message);
                    true
                }
                Ok(Event::HostLost { host, why }) => {
                    self.on_host_lost(&host, &why);
                    true
                }
                Err(RecvTimeoutError::Timeout) => {
                    deadline.is_some_and(|d| Instant::now() < d) || self.on_deadline()
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.console.message(
                        "lost track of the ranks (their watchers are gone); not waiting for them",
                    );
                    false
                }
            };
            if !go_on {
                break;
            }
        }
        // Every rank ended while psyrun was settling who failed first.
        if let Phase::Settling { first, .. } = self.phase {
            self.blame_settled(first);
        }
        if !self.tolerated.is_empty() {
            let what: Vec<String> = self.tolerated.iter().map(Cause::describe).collect();
            self.console.message(&format!(
                "the job went on after {} failure{}: {}",
                what.len(),
                if what.len() == 1 { "" } else { "s" },
                what.join("; ")
            ));
        }
        Outcome {
            cause: self.cause,
            ranks: self.ranks,
            tolerated: self.tolerated,
        }
    }

    fn on_exit(&mut self, rank: usize, termination: Termination) {
        let Some(i) = self.ranks.iter().position(|r| r.rank == rank) else {
            return;
        };
        // SIGPIPE kills a process that wrote to a pipe or socket whose other end was gone: a
        // survivor that noticed a loss (an MPI rank whose PMI socket psyrun closed after a peer
        // died), blamed like a rank that exited with a code, not like one killed from outside.
        let by_signal = matches!(termination, Termination::Signaled(s) if s != libc::SIGPIPE);
        let failed = !termination.is_success();
        self.ranks[i].termination = Some(termination);
        self.stopped[i] = None;
        if failed {
            self.on_failure(i, by_signal);
        }
        self.watch_abandoned();
    }

    /// The `rank` was stopped by `signal` (`Some`) or resumed (`None`).
    fn set_stopped(&mut self, rank: usize, signal: Option<i32>) {
        if let Some(i) = self.ranks.iter().position(|r| r.rank == rank) {
            if self.ranks[i].termination.is_none() {
                self.stopped[i] = signal;
            }
        }
        self.watch_abandoned();
    }

    /// Once every rank still running is stopped (by SIGSTOP, say) and every other rank has
    /// ended, nothing in the job can resume them: unless one is resumed within `--grace`, they
    /// are killed ([`Supervisor::kill_abandoned`]), so that psyrun never waits forever for a
    /// stopped rank once the job is otherwise over.
    fn watch_abandoned(&mut self) {
        let mut running = self
            .ranks
            .iter()
            .enumerate()
            .filter(|(_, r)| r.termination.is_none());
        let abandoned = self.phase == Phase::Running
            && self.running().count() < self.ranks.len()
            && running.clone().next().is_some()
            && running.all(|(i, _)| self.stopped[i].is_some());
        self.abandoned_at = match (abandoned, self.abandoned_at) {
            (false, _) => None,
            (true, Some(at)) => Some(at),
            (true, None) => Some(Instant::now() + self.grace),
        };
    }

    /// Kills the ranks still stopped when every other rank has ended (see
    /// [`Supervisor::watch_abandoned`]).
    fn kill_abandoned(&mut self) {
        self.abandoned_at = None;
        for i in 0..self.ranks.len() {
            let Some(signal) = self.stopped[i].filter(|_| self.ranks[i].termination.is_none())
            else {
                continue;
            };
            self.kill_failed(
                i,
                &format!(
                    "is stopped ({}) and every other rank has ended: nothing in the job can \
                     resume it, and nobody did within --grace {:?}",
                    signal_name(signal),
                    self.grace
                ),
                "after it stayed stopped with every other rank ended",
            );
        }
    }

    /// The `i`th rank failed (`by_signal`: killed by one).
    fn on_failure(&mut self, i: usize, by_signal: bool) {
        if self.go_on && self.phase == Phase::Running {
            return self.tolerate_or_blame(i);
        }
        match self.phase {
            Phase::Running | Phase::Settling { .. } if by_signal => self.blame(i),
            Phase::Running => {
                self.phase = Phase::Settling {
                    until: Instant::now() + SETTLE,
                    first: i,
                }
            }
            _ => {}
        }
    }

    /// The other ranks counted `rank` failed while it still runs (see [`Event::Declared`]): it
    /// is killed now (see [`Supervisor::kill_failed`]). Ignored once the job is being stopped
    /// (it is stopped with the rest).
    fn on_declared(&mut self, rank: usize, why: &str) {
        let Some(i) = self.ranks.iter().position(|r| r.rank == rank) else {
            return;
        };
        if self.ranks[i].termination.is_some() || !self.accepting_causes() {
            return;
        }
        self.kill_failed(
            i,
            &format!("was counted failed by the other ranks ({why})"),
            "after the other ranks counted it failed",
        );
    }

    /// `rank` called `MPI_Abort` with `code`: the job stops (even with `--on-failure continue`:
    /// an MPI abort ends the whole world) and exits with `code`.
    fn on_abort(&mut self, rank: usize, code: i32, message: &str) {
        let Some(i) = self.ranks.iter().position(|r| r.rank == rank) else {
            return;
        };
        if !self.accepting_causes() {
            return;
        }
        let said = match message.trim() {
            "" => String::new(),
            m => format!(" ({m})"),
        };
        let (pid, name) = (self.ranks[i].pid, self.ranks[i].name());
        let stopping = match self.running().filter(|r| r.rank != rank).count() {
            0 => String::new(),
            1 => "; stopping the other rank".to_string(),
            n => format!("; stopping the other {n} ranks"),
        };
        self.console.message(&format!(
            "rank {name} called MPI_Abort with code {code}{said}{stopping}"
        ));
        self.stop(Cause::Aborted { rank, pid, code });
    }

    /// Kills the `i`th rank, which the others count failed or lost while it still runs
    /// (stopped, hung): SIGKILL to its process group, since a stopped process acts on nothing
    /// else and a hung one may ignore SIGTERM. It counts as failed when it is reaped, as any
    /// rank killed by a signal; messages then add `after` to how it ended.
    fn kill_failed(&mut self, i: usize, what: &str, after: &str) {
        if self.killed.iter().any(|(k, _)| *k == i) {
            return;
        }
        self.killed.push((i, after.to_string()));
        self.console.message(&format!(
            "rank {} {what}; killing it (SIGKILL to its process group)",
            self.ranks[i].name()
        ));
        self.send(i, libc::SIGKILL);
    }

    /// How the `i`th rank ended, as messages say it: its termination, and why psyrun killed it
    /// if it did because the others counted it failed or lost.
    fn ended(&self, i: usize) -> String {
        let how = self.ranks[i]
            .termination
            .as_ref()
            .map_or_else(|| "is running".to_string(), Termination::describe);
        match self.killed.iter().find(|(k, _)| *k == i) {
            Some((_, after)) => format!("{how}, by psyrun, {after}"),
            None => how,
        }
    }

    /// `--on-failure continue`: the `i`th rank failed; the job goes on if others still run,
    /// else this failure is the job's.
    fn tolerate_or_blame(&mut self, i: usize) {
        let left = self.running().count();
        if left == 0 {
            return self.blame(i);
        }
        let Some(termination) = self.ranks[i].termination.clone() else {
            return;
        };
        let (rank, pid, name) = (self.ranks[i].rank, self.ranks[i].pid, self.ranks[i].name());
        self.console.message(&format!(
            "rank {name} {}; the other {} {} on without it (--on-failure continue)",
            self.ended(i),
            count(left),
            if left == 1 { "goes" } else { "go" }
        ));
        self.tolerated.push(Cause::RankFailed {
            rank,
            pid,
            termination,
        });
    }

    /// Whether a cause may still be recorded (the job is not being stopped yet).
    fn accepting_causes(&self) -> bool {
        matches!(self.phase, Phase::Running | Phase::Settling { .. })
    }

    /// The settle window ended with the `first`th rank the earliest to fail with an exit code:
    /// names the rank it lost instead, if it reported one that failed too or still runs.
    fn blame_settled(&mut self, first: usize) {
        let Some(lost) = self.lost_cause(first) else {
            return self.blame(first);
        };
        let by = self.ranks[first].rank;
        match self.ranks[lost].termination.clone() {
            None => self.blame_running(lost, first),
            Some(t) if !t.is_success() => {
                let (name, stopping) = (self.ranks[lost].name(), self.stopping_the_others());
                self.console.message(&format!(
                    "rank {name} {} (rank {by} failed first, after losing it){stopping}",
                    t.describe()
                ));
                self.stop(Cause::RankFailed {
                    rank: self.ranks[lost].rank,
                    pid: self.ranks[lost].pid,
                    termination: t,
                });
            }
            Some(_) => self.blame(first),
        }
    }

    /// The rank the `first`th rank reported losing, followed while each reports losing another
    /// (the index of the last; `None` if `first` reported none).
    fn lost_cause(&mut self, first: usize) -> Option<usize> {
        let lost_by = self.losses.as_mut()?;
        let mut seen = vec![first];
        let mut at = first;
        while let Some(lost) = lost_by(self.ranks[at].rank) {
            let Some(j) = self.ranks.iter().position(|r| r.rank == lost) else {
                break;
            };
            if seen.contains(&j) {
                break;
            }
            seen.push(j);
            at = j;
            if self.ranks[j].termination.is_none() {
                break;
            }
        }
        (at != first).then_some(at)
    }

    /// Names the still running `lost`th rank as the cause: the `first`th failed having lost it.
    fn blame_running(&mut self, lost: usize, first: usize) {
        let Some(termination) = self.ranks[first].termination.clone() else {
            return;
        };
        let (name, by) = (self.ranks[lost].name(), self.ranks[first].rank);
        let stopping = self.stopping_the_others();
        self.console.message(&format!(
            "rank {name} is the rank the others lost: rank {by} {} after losing it (it had stopped responding or was cut off){stopping}",
            termination.describe()
        ));
        self.stop(Cause::Lost {
            rank: self.ranks[lost].rank,
            pid: self.ranks[lost].pid,
            by,
            termination,
        });
    }

    /// Names the `i`th rank as the failure that ends the job, and stops the others.
    fn blame(&mut self, i: usize) {
        let Some(termination) = self.ranks[i].termination.clone() else {
            return;
        };
        let (rank, pid, name) = (self.ranks[i].rank, self.ranks[i].pid, self.ranks[i].name());
        let stopping = self.stopping_the_others();
        self.console
            .message(&format!("rank {name} {}{stopping}", self.ended(i)));
        self.stop(Cause::RankFailed {
            rank,
            pid,
            termination,
        });
    }

    /// The ranks on `host` are out of reach: they count as ended, and if any was still running
    /// the job stops (the host is named as the cause).
    fn on_host_lost(&mut self, host: &str, why: &str) {
        let mut lost = Vec::new();
        for r in &mut self.ranks {
            if r.termination.is_none() && r.host.as_deref() == Some(host) {
                r.termination = Some(Termination::Unknown(format!(
                    "lost with the link to {host}: {why}"
                )));
                lost.push(r.rank);
            }
        }
        if lost.is_empty() {
            return;
        }
        if !self.accepting_causes() {
            // Hosts lost with one already blamed (the hosts a lost relay reached, say).
            self.console.message(&format!(
                "also lost the link to host {host} ({why}) with {} running there",
                count(lost.len())
            ));
            return;
        }
        if self.go_on && self.phase == Phase::Running && self.running().next().is_some() {
            self.console.message(&format!(
                "lost the link to host {host} ({why}) with {} running there; the other {} go \
                 on without them (--on-failure continue)",
                count(lost.len()),
                count(self.running().count())
            ));
            self.tolerated.push(Cause::HostLost {
                host: host.to_string(),
                why: why.to_string(),
            });
            return;
        }
        let stopping = self.stopping_the_others();
        let ranks: Vec<String> = lost.iter().map(ToString::to_string).collect();
        self.console.message(&format!(
            "lost the link to host {host} ({why}) with rank{} {} running there{stopping}",
            if lost.len() == 1 { "" } else { "s" },
            ranks.join(", ")
        ));
        self.stop(Cause::HostLost {
            host: host.to_string(),
            why: why.to_string(),
        });
    }

    /// `; stopping the other 3 ranks` (empty when none is left running), for failure messages.
    fn stopping_the_others(&self) -> String {
        match self.running().count() {
            0 => String::new(),
            1 => "; stopping the other rank".to_string(),
            n => format!("; stopping the other {n} ranks"),
        }
    }

    /// Returns whether to keep waiting.
    fn on_signal(&mut self, sig: i32) -> bool {
        let name = signal_name(sig);
        let left = self.running().count();
        match self.phase {
            Phase::Running | Phase::Settling { .. } => {
                let how = if self.grace.is_zero() {
                    "with SIGKILL".to_string()
                } else {
                    format!(
                        "(SIGTERM, then SIGKILL after {:?}; send {name} again to kill them now)",
                        self.grace
                    )
                };
                self.console
                    .message(&format!("received {name}; stopping {} {how}", count(left)));
                self.stop(Cause::Signal(sig));
                true
            }
            Phase::Terminating { .. } => {
                self.console.message(&format!(
                    "received {name} again; killing the {} still running now",
                    count(left)
                ));
                self.kill_remaining();
                true
            }
            Phase::Killing { .. } => {
                let stuck: Vec<&RankReport> = self.running().collect();
                self.console.message(&format!(
                    "received {name} again; not waiting any longer for {}",
                    list(&stuck)
                ));
                false
            }
        }
    }

    /// The current deadline passed. Returns whether to keep waiting.
    fn on_deadline(&mut self) -> bool {
        let left: Vec<&RankReport> = self.running().collect();
        match self.phase {
            Phase::Settling { first, .. } => {
                self.blame_settled(first);
                true
            }
            Phase::Running if self.abandoned_at.is_some_and(|a| Instant::now() >= a) => {
                self.kill_abandoned();
                true
            }
            Phase::Running => {
                let limit = self.timeout.unwrap_or_default();
                self.console.message(&format!(
                    "the job ran longer than --timeout {limit:?}; stopping {}",
                    count(left.len())
                ));
                self.stop(Cause::Timeout(limit));
                true
            }
            Phase::Terminating { .. } => {
                self.console.message(&format!(
                    "{} still running {:?} after SIGTERM: {}; sending SIGKILL",
                    count(left.len()),
                    self.grace,
                    list(&left)
                ));
                self.kill_remaining();
                true
            }
            Phase::Killing { .. } => {
                self.console.message(&format!(
                    "{} still not reaped {KILL_WAIT:?} after SIGKILL (stuck in the kernel?): {}; not waiting for them",
                    count(left.len()),
                    list(&left)
                ));
                false
            }
        }
    }
}

/// Forwards SIGINT, SIGTERM and SIGHUP received by psyrun to a supervisor's channel, from the
/// moment it is started until it is dropped (which restores the previous handling).
pub struct SignalWatch {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for SignalWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignalWatch")
    }
}

/// The signals that stop a job.
pub const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

impl SignalWatch {
    /// Starts catching [`STOP_SIGNALS`] and sending them to `events`.
    pub fn start(events: Sender<Event>) -> std::io::Result<SignalWatch> {
        let mut signals = signal_hook::iterator::Signals::new(STOP_SIGNALS)?;
        let handle = signals.handle();
        let thread = std::thread::Builder::new()
            .name("psyrun-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if events.send(Event::Signal(sig)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(SignalWatch {
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            // The thread only forwards signals; a panic there has nothing left to report.
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Sender};
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Text(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Text {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Text {
        fn get(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// A fake: records signals; ranks in `obey` die of SIGTERM, every rank dies of SIGKILL,
    /// and the events of `then` follow the first death by SIGKILL.
    struct Fake {
        sent: Arc<Mutex<Vec<(usize, i32)>>>,
        events: Sender<Event>,
        obey: Vec<usize>,
        then: Vec<Event>,
    }
    impl Stopper for Fake {
        fn signal(&mut self, rank: usize, _pid: u32, signal: i32) -> std::io::Result<()> {
            self.sent.lock().unwrap().push((rank, signal));
            if signal == libc::SIGKILL || (signal == libc::SIGTERM && self.obey.contains(&rank)) {
                let termination = Termination::Signaled(signal);
                let _ = self.events.send(Event::Exited { rank, termination });
                if signal == libc::SIGKILL {
                    for event in self.then.drain(..) {
                        let _ = self.events.send(event);
                    }
                }
            }
            Ok(())
        }
    }

    struct Setup {
        err: Text,
        console: Console,
        sent: Arc<Mutex<Vec<(usize, i32)>>>,
        tx: Sender<Event>,
    }

    fn go(
        n: usize,
        obey: &[usize],
        grace: Duration,
        timeout: Option<Duration>,
        before: impl FnOnce(&Sender<Event>),
    ) -> (Outcome, Setup) {
        go_reporting(n, obey, grace, timeout, &[], before)
    }

    /// [`go`], with rank `a` reporting that it lost rank `b` for each `(a, b)` of `losses`.
    fn go_reporting(
        n: usize,
        obey: &[usize],
        grace: Duration,
        timeout: Option<Duration>,
        losses: &[(usize, usize)],
        before: impl FnOnce(&Sender<Event>),
    ) -> (Outcome, Setup) {
        supervise_fake(n, obey, grace, timeout, losses, false, before, Vec::new())
    }

    /// `n` ranks, all obeying SIGTERM, supervised with `--on-failure continue`.
    fn go_on(n: usize, before: impl FnOnce(&Sender<Event>)) -> (Outcome, Setup) {
        go_on_then(n, before, Vec::new())
    }

    /// [`go_on`], with the events of `then` after the first death by SIGKILL.
    fn go_on_then(
        n: usize,
        before: impl FnOnce(&Sender<Event>),
        then: Vec<Event>,
    ) -> (Outcome, Setup) {
        let all: Vec<usize> = (0..n).collect();
        let grace = Duration::from_secs(1);
        supervise_fake(n, &all, grace, None, &[], true, before, then)
    }

    /// Supervises `n` fake ranks after the events `before` sends (see [`go_reporting`]), going
    /// on after failures if `continuing`; `then` follows the first death by SIGKILL.
    #[allow(clippy::too_many_arguments)]
    fn supervise_fake(
        n: usize,
        obey: &[usize],
        grace: Duration,
        timeout: Option<Duration>,
        losses: &[(usize, usize)],
        continuing: bool,
        before: impl FnOnce(&Sender<Event>),
        then: Vec<Event>,
    ) -> (Outcome, Setup) {
        let err = Text::default();
        let console = Console::new(Box::new(Text::default()), Box::new(err.clone()));
        let (tx, rx) = channel();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let fake = Fake {
            sent: sent.clone(),
            events: tx.clone(),
            obey: obey.to_vec(),
            then,
        };
        before(&tx);
        let setup = Setup {
            err,
            console,
            sent,
            tx,
        };
        let mut sup = Supervisor::new(&setup.console, fake, grace, timeout, rx);
        if continuing {
            sup = sup.going_on_after_failures();
        }
        let losses = losses.to_vec();
        sup = sup.with_losses(Box::new(move |rank| {
            losses.iter().find(|(a, _)| *a == rank).map(|(_, b)| *b)
        }));
        for r in 0..n {
            sup.add_rank(r, 1000 + r as u32);
        }
        let outcome = sup.run();
        (outcome, setup)
    }

    #[test]
    fn going_on_a_failure_is_named_and_the_survivors_decide_the_code() {
        let killed = |rank| Event::Exited {
            rank,
            termination: Termination::Signaled(libc::SIGKILL),
        };
        let (out, setup) = go_on(3, |tx| {
            tx.send(killed(1)).unwrap();
            tx.send(exited(0, 0)).unwrap();
            tx.send(exited(2, 0)).unwrap();
        });
        assert_eq!(out.exit_code(), 0, "the survivors finished");
        assert_eq!(out.tolerated.len(), 1);
        assert!(setup.sent.lock().unwrap().is_empty(), "nobody was stopped");
        let err = setup.err.get();
        assert!(
            err.contains("rank 1 (pid 1001) killed by signal 9 (SIGKILL); the other 2 ranks go on")
                && err.contains("the job went on after 1 failure"),
            "{err}"
        );
        // The last rank running fails: that failure is the job's.
        let (out, _) = go_on(3, |tx| {
            tx.send(killed(1)).unwrap();
            tx.send(exited(0, 0)).unwrap();
            tx.send(exited(2, 3)).unwrap();
        });
        assert_eq!(out.exit_code(), 3);
        // A signal to psyrun still stops everyone.
        let (out, setup) = go_on(2, |tx| {
            tx.send(killed(1)).unwrap();
            tx.send(Event::Signal(libc::SIGTERM)).unwrap();
        });
        assert_eq!(out.exit_code(), 143);
        assert!(setup.sent.lock().unwrap().contains(&(0, libc::SIGTERM)));
    }

    #[test]
    fn a_rank_the_others_counted_failed_is_killed_and_counts_as_failed() {
        let declared = |rank| Event::Declared {
            rank,
            why: "it did not vote".into(),
        };
        // Going on: killed at once, tolerated; the survivors decide the code.
        let (out, setup) = go_on_then(
            3,
            |tx| {
                tx.send(declared(1)).unwrap();
                tx.send(declared(1)).unwrap();
            },
            vec![exited(0, 0), exited(2, 0)],
        );
        assert_eq!(out.exit_code(), 0);
        assert_eq!(out.tolerated.len(), 1);
        assert_eq!(
            setup.sent.lock().unwrap().clone(),
            vec![(1, libc::SIGKILL)],
            "killed once"
        );
        let err = setup.err.get();
        assert!(
            err.contains("rank 1 (pid 1001) was counted failed by the other ranks (it did not vote); killing it (SIGKILL to its process group)")
                && err.contains("rank 1 (pid 1001) killed by signal 9 (SIGKILL), by psyrun, after the other ranks counted it failed; the other 2 ranks go on"),
            "{err}"
        );
        // Stopping on failure: the declared rank is the cause (128 + 9).
        let (out, setup) = go(2, &[0], Duration::from_secs(30), None, |tx| {
            tx.send(declared(1)).unwrap();
        });
        assert_eq!(out.exit_code(), 137);
        assert!(
            setup
                .err
                .get()
                .contains("after the other ranks counted it failed; stopping the other rank"),
            "{}",
            setup.err.get()
        );
        // A declaration for a rank that already ended changes nothing.
        let (out, setup) = go_on(2, |tx| {
            tx.send(exited(1, 0)).unwrap();
            tx.send(declared(1)).unwrap();
            tx.send(exited(0, 0)).unwrap();
        });
        assert_eq!(out.exit_code(), 0);
        assert!(setup.sent.lock().unwrap().is_empty());
    }

    #[test]
    fn a_rank_left_stopped_when_the_others_ended_is_killed_after_the_grace_period() {
        let stopped = |rank| Event::Stopped {
            rank,
            signal: libc::SIGSTOP,
        };
        let start = Instant::now();
        let (out, setup) = go(3, &[], Duration::from_millis(100), None, |tx| {
            tx.send(stopped(2)).unwrap();
            tx.send(exited(0, 0)).unwrap();
            tx.send(exited(1, 0)).unwrap();
        });
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert_eq!(out.exit_code(), 137);
        assert_eq!(setup.sent.lock().unwrap().clone(), vec![(2, libc::SIGKILL)]);
        let err = setup.err.get();
        assert!(
            err.contains("rank 2 (pid 1002) is stopped (SIGSTOP) and every other rank has ended"),
            "{err}"
        );
        // Resumed in time, or still others running: nobody is killed.
        let (out, setup) = go(2, &[], Duration::from_millis(50), None, |tx| {
            tx.send(stopped(1)).unwrap();
            tx.send(Event::Continued { rank: 1 }).unwrap();
            tx.send(exited(0, 0)).unwrap();
            tx.send(stopped(1)).unwrap();
            tx.send(Event::Continued { rank: 1 }).unwrap();
            tx.send(exited(1, 0)).unwrap();
        });
        assert_eq!(out.exit_code(), 0);
        assert!(setup.sent.lock().unwrap().is_empty());
    }

    fn exited(rank: usize, code: i32) -> Event {
        Event::Exited {
            rank,
            termination: Termination::Exited(code),
        }
    }

    #[test]
    fn all_succeed() {
        let (o, s) = go(3, &[], Duration::from_secs(5), None, |tx| {
            (0..3).for_each(|r| tx.send(exited(r, 0)).unwrap())
        });
        assert_eq!(o.exit_code(), 0);
        assert_eq!(o.cause, None);
        assert!(o
            .ranks
            .iter()
            .all(|r| !r.stopped && r.termination == Some(Termination::Exited(0))));
        assert!(s.sent.lock().unwrap().is_empty());
        assert_eq!(s.err.get(), "");
        drop(s.tx);
    }

    #[test]
    fn first_failure_wins_and_the_stopped_ranks_do_not_count() {
        let (o, s) = go(4, &[0, 1, 3], Duration::from_secs(30), None, |tx| {
            tx.send(exited(2, 3)).unwrap()
        });
        assert_eq!(o.exit_code(), 3);
        assert_eq!(
            o.cause,
            Some(Cause::RankFailed {
                rank: 2,
                pid: 1002,
                termination: Termination::Exited(3)
            })
        );
        assert_eq!(
            s.err.get(),
            "psyrun: rank 2 (pid 1002) exited with code 3; stopping the other 3 ranks\n"
        );
        let sent = s.sent.lock().unwrap().clone();
        assert!(sent.contains(&(0, libc::SIGTERM)) && sent.contains(&(0, libc::SIGCONT)));
        assert!(!sent.iter().any(|&(r, sig)| r == 2 || sig == libc::SIGKILL));
        assert!(o.ranks.iter().all(|r| r.stopped == (r.rank != 2)));
    }

    #[test]
    fn a_rank_the_first_failure_lost_is_the_cause_whether_running_or_failed_later() {
        // Rank 0 timed out waiting for rank 1 (still running, hung) and exited 2.
        let (o, s) = go_reporting(3, &[1, 2], Duration::from_secs(30), None, &[(0, 1)], |tx| {
            tx.send(exited(0, 2)).unwrap();
        });
        assert_eq!(o.exit_code(), 2);
        assert_eq!(
            o.cause,
            Some(Cause::Lost {
                rank: 1,
                pid: 1001,
                by: 0,
                termination: Termination::Exited(2)
            })
        );
        assert!(
            s.err.get().starts_with(
                "psyrun: rank 1 (pid 1001) is the rank the others lost: rank 0 exited with code 2"
            ),
            "{}",
            s.err.get()
        );
        drop(s.tx);
        // Rank 2 lost rank 0, which exited 1 a moment later (its exit was reaped second).
        let (o, s) = go_reporting(3, &[1], Duration::from_secs(30), None, &[(2, 0)], |tx| {
            tx.send(exited(2, 2)).unwrap();
            tx.send(exited(0, 1)).unwrap();
        });
        assert_eq!(o.exit_code(), 1);
        assert!(
            matches!(o.cause, Some(Cause::RankFailed { rank: 0, .. })),
            "{:?}",
            o.cause
        );
        assert!(
            s.err.get().contains(
                "rank 0 (pid 1000) exited with code 1 (rank 2 failed first, after losing it)"
            ),
            "{}",
            s.err.get()
        );
        drop(s.tx);
    }

    #[test]
    fn a_death_by_signal_reported_just_after_a_survivors_exit_is_the_cause() {
        // Rank 0 noticed that rank 2 was killed and exited 2 before psyrun reaped rank 2.
        let (o, s) = go(3, &[1], Duration::from_secs(30), None, |tx| {
            tx.send(exited(0, 2)).unwrap();
            tx.send(Event::Exited {
                rank: 2,
                termination: Termination::Signaled(libc::SIGKILL),
            })
            .unwrap();
        });
        assert_eq!(o.exit_code(), 137);
        assert_eq!(
            o.cause,
            Some(Cause::RankFailed {
                rank: 2,
                pid: 1002,
                termination: Termination::Signaled(libc::SIGKILL)
            })
        );
        assert_eq!(
            s.err.get(),
            "psyrun: rank 2 (pid 1002) killed by signal 9 (SIGKILL); stopping the other rank\n"
        );
        // A failing exit code alone is still named, after the settling time.
        let (o, _) = go(2, &[1], Duration::from_secs(30), None, |tx| {
            tx.send(exited(0, 3)).unwrap()
        });
        assert_eq!(o.exit_code(), 3);
    }

    #[test]
    fn a_sigpipe_death_just_after_an_exit_is_not_the_cause() {
        // Rank 1 exited 3; rank 0 then wrote to a socket rank 1's end closed and died of SIGPIPE:
        // rank 1's exit is the cause, as it was first.
        let (o, _) = go(3, &[2], Duration::from_secs(30), None, |tx| {
            tx.send(exited(1, 3)).unwrap();
            tx.send(Event::Exited {
                rank: 0,
                termination: Termination::Signaled(libc::SIGPIPE),
            })
            .unwrap();
        });
        assert_eq!(o.exit_code(), 3);
        assert!(
            matches!(o.cause, Some(Cause::RankFailed { rank: 1, .. })),
            "{:?}",
            o.cause
        );
    }

    #[test]
    fn a_signal_death_is_128_plus_the_signal() {
        let (o, s) = go(2, &[0], Duration::from_secs(30), None, |tx| {
            tx.send(Event::Exited {
                rank: 1,
                termination: Termination::Signaled(libc::SIGKILL),
            })
            .unwrap()
        });
        assert_eq!(o.exit_code(), 137);
        assert!(s
            .err
            .get()
            .contains("rank 1 (pid 1001) killed by signal 9 (SIGKILL); stopping the other rank\n"));
    }

    #[test]
    fn ranks_ignoring_sigterm_get_sigkill_after_the_grace_period() {
        let start = Instant::now();
        let (o, s) = go(3, &[0], Duration::from_millis(100), None, |tx| {
            tx.send(exited(0, 1)).unwrap()
        });
        // Rank 0 failed before any signal; ranks 1 and 2 ignore SIGTERM.
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert_eq!(o.exit_code(), 1);
        let sent = s.sent.lock().unwrap().clone();
        assert!(sent.contains(&(1, libc::SIGKILL)) && sent.contains(&(2, libc::SIGKILL)));
        assert!(s.err.get().contains("2 ranks still running 100ms after SIGTERM: 1 (pid 1001), 2 (pid 1002); sending SIGKILL"), "{}", s.err.get());
    }

    #[test]
    fn a_signal_stops_everyone_and_a_second_one_skips_the_grace() {
        let start = Instant::now();
        let (o, s) = go(2, &[], Duration::from_secs(60), None, |tx| {
            tx.send(Event::Signal(libc::SIGINT)).unwrap();
            tx.send(Event::Signal(libc::SIGINT)).unwrap();
        });
        assert!(start.elapsed() < Duration::from_secs(30));
        assert_eq!(o.exit_code(), 130);
        assert_eq!(o.cause, Some(Cause::Signal(libc::SIGINT)));
        let err = s.err.get();
        assert!(err.contains("received SIGINT; stopping 2 ranks"), "{err}");
        assert!(
            err.contains("received SIGINT again; killing the 2 ranks still running now"),
            "{err}"
        );
        assert!(o.ranks.iter().all(|r| r.stopped));
    }

    #[test]
    fn the_timeout_gives_124() {
        let (o, s) = go(
            2,
            &[0, 1],
            Duration::from_secs(60),
            Some(Duration::from_millis(50)),
            |_| {},
        );
        assert_eq!(o.exit_code(), exit::TIMEOUT);
        assert!(s
            .err
            .get()
            .contains("ran longer than --timeout 50ms; stopping 2 ranks"));
    }

    #[test]
    fn zero_grace_kills_at_once() {
        let (o, s) = go(2, &[], Duration::ZERO, None, |tx| {
            tx.send(Event::Signal(libc::SIGTERM)).unwrap()
        });
        assert_eq!(o.exit_code(), 143);
        let sent = s.sent.lock().unwrap().clone();
        assert!(sent.contains(&(0, libc::SIGKILL)) && sent.contains(&(1, libc::SIGKILL)));
    }

    #[test]
    fn termination_codes_and_texts() {
        assert_eq!(Termination::Exited(256 + 7).exit_code(), 7);
        assert_eq!(
            Termination::Signaled(15).describe(),
            "killed by signal 15 (SIGTERM)"
        );
        assert_eq!(
            Termination::Unknown("x".into()).exit_code(),
            exit::LAUNCH_FAILED
        );
        assert_eq!(Cause::Timeout(Duration::from_secs(1)).exit_code(), 124);
        assert_eq!(Cause::Signal(libc::SIGHUP).exit_code(), 129);
    }
}
