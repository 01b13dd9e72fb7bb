//! `--max-restarts N`: when a rank fails, the job is stopped (as always) and then started again,
//! up to N times, as torchrun restarts its workers.
//!
//! Each attempt is a new generation: [`run`] hands the attempt a copy of the [`Launch`] with
//! [`Launch::restart_count`] set, and the attempt serves a new store with a new job id and
//! secret, so a straggler of one attempt cannot reach the next one's store, links or shared
//! memory (its names derive from the job id). Every rank of an attempt is gone (the tear-down
//! kills their process groups) before the next starts.
//!
//! What restarts: a rank that failed or was lost, or a lost host. What does not: a signal to
//! psyrun, `--timeout` (which counts across attempts), or a launch that could not start (a
//! program not found fails the same way every time). psyrun says before each new attempt what
//! ended the last one, and at the end, if any attempt failed, prints a summary: every attempt,
//! what ended it, how long it ran, and the time lost. The exit code is the last attempt's.
//!
//! Across hosts, `--exclude-failed-hosts` leaves a host out of the next attempts once it has
//! failed in two ([`HostFailures`]), if the other hosts' slots still hold the job.

use crate::args::Launch;
use crate::error::Error;
use crate::hosts::HostList;
use crate::output::Console;
use crate::supervise::{Cause, Outcome, STOP_SIGNALS};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether a job that ended for `cause` is started again when restarts are left.
pub fn restartable(cause: &Cause) -> bool {
    match cause {
        Cause::RankFailed { .. }
        | Cause::Lost { .. }
        | Cause::HostLost { .. }
        | Cause::Aborted { .. } => true,
        Cause::Signal(_) | Cause::Timeout(_) | Cause::LaunchFailed => false,
    }
}

/// The host an attempt's failure happened on, if it ended with one: a lost host, or the host
/// of the rank that failed or was lost.
pub fn failed_host(outcome: &Outcome) -> Option<String> {
    let on_rank = |rank: usize| {
        outcome
            .ranks
            .iter()
            .find(|r| r.rank == rank)
            .and_then(|r| r.host.clone())
    };
    match outcome.cause.as_ref()? {
        Cause::HostLost { host, .. } => Some(host.clone()),
        Cause::RankFailed { rank, .. } | Cause::Lost { rank, .. } => on_rank(*rank),
        // An abort is the program's decision, not its host's failure.
        Cause::Aborted { .. } | Cause::Signal(_) | Cause::Timeout(_) | Cause::LaunchFailed => None,
    }
}

/// `--exclude-failed-hosts`: which hosts have failed in how many attempts, and the hosts the
/// next attempt runs on.
#[derive(Debug, Clone)]
pub struct HostFailures {
    counts: BTreeMap<String, usize>,
    hosts: HostList,
}

/// Failures after which a host is left out.
const FAILURES_TO_LEAVE_OUT: usize = 2;

impl HostFailures {
    /// Starts with every host of `hosts`.
    pub fn new(hosts: HostList) -> HostFailures {
        HostFailures {
            counts: BTreeMap::new(),
            hosts,
        }
    }

    /// The hosts the next attempt runs on.
    pub fn hosts(&self) -> &HostList {
        &self.hosts
    }

    /// Counts the failure of the attempt that ended with `outcome`, and leaves its host out of
    /// the next attempts when it has failed twice and the others' known slots hold `world`
    /// ranks. Returns what to tell the user, if anything changed or could not.
    pub fn record(&mut self, outcome: &Outcome, world: usize) -> Option<String> {
        let host = failed_host(outcome)?;
        let n = self.counts.entry(host.clone()).or_insert(0);
        *n += 1;
        if *n < FAILURES_TO_LEAVE_OUT || !self.hosts.iter().any(|h| h.name == host) {
            return None;
        }
        let rest = self.hosts.without(&host);
        let slots: Option<usize> = rest.iter().map(|h| h.slots).sum();
        match slots {
            Some(s) if s >= world => {
                self.hosts = rest;
                Some(format!(
                    "host {host} failed in {n} attempts; leaving it out of the next ones                      (--exclude-failed-hosts): the other {} hosts' {s} slots hold the {world} ranks",
                    self.hosts.len()
                ))
            }
            Some(s) => Some(format!(
                "host {host} failed in {n} attempts, but the other hosts have {s} slots for                  {world} ranks; keeping it"
            )),
            None => Some(format!(
                "host {host} failed in {n} attempts, but not every other host has a slot count                  (-H NAME:N or slots=N) to tell whether they hold the {world} ranks; keeping it"
            )),
        }
    }
}

/// One attempt's end, for the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptEnd {
    /// What ended it early, if anything did.
    pub cause: Option<Cause>,
    /// How long it ran.
    pub ran: Duration,
}

/// Remembers the first stop signal psyrun receives while restarts are possible, so a signal
/// that arrives between two attempts (when no supervisor is watching) ends the job instead of
/// being lost. Registered beside the supervisor's own handling, which it does not replace.
struct StopRequests {
    signal: Arc<AtomicUsize>,
    ids: Vec<signal_hook::SigId>,
}

impl StopRequests {
    fn register() -> std::io::Result<StopRequests> {
        let signal = Arc::new(AtomicUsize::new(0));
        let mut ids = Vec::new();
        for sig in STOP_SIGNALS {
            ids.push(signal_hook::flag::register_usize(
                sig,
                signal.clone(),
                sig as usize,
            )?);
        }
        Ok(StopRequests { signal, ids })
    }

    /// The stop signal received, if one was.
    fn received(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            sig => i32::try_from(sig).ok(),
        }
    }
}

impl Drop for StopRequests {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Runs `launch` through `attempt` (one whole job: start, supervise, tear down) and, while its
/// [`Launch::max_restarts`] allow and the job failed in a way that restarts, again; see the
/// module docs. Returns the last attempt's outcome, or the error of an attempt that could not
/// be run.
pub fn run(
    launch: &Launch,
    console: &Console,
    mut attempt: impl FnMut(&Launch) -> Result<Outcome, Error>,
) -> Result<Outcome, Error> {
    if launch.max_restarts == 0 {
        return attempt(launch);
    }
    let stops = StopRequests::register()
        .map_err(|e| Error::io("installing psyrun's signal handlers", e))?;
    let t0 = Instant::now();
    let mut ends: Vec<AttemptEnd> = Vec::new();
    let mut this = launch.clone();
    loop {
        this.timeout = launch.timeout.map(|t| t.saturating_sub(t0.elapsed()));
        let started = Instant::now();
        let outcome = attempt(&this)?;
        ends.push(AttemptEnd {
            cause: outcome.cause.clone(),
            ran: started.elapsed(),
        });
        let Some(cause) = outcome.cause.as_ref().filter(|c| restartable(c)) else {
            summarise(console, &ends, launch.max_restarts);
            return Ok(outcome);
        };
        if let Some(sig) = stops.received() {
            console.message(&format!(
                "received signal {sig} after attempt {} failed; not restarting",
                ends.len()
            ));
            summarise(console, &ends, launch.max_restarts);
            return Ok(Outcome {
                cause: Some(Cause::Signal(sig)),
                ..outcome
            });
        }
        if this.restart_count == launch.max_restarts {
            console.message(&format!(
                "attempt {} failed: {}; no restarts left (--max-restarts {})",
                ends.len(),
                cause.describe(),
                launch.max_restarts
            ));
            summarise(console, &ends, launch.max_restarts);
            return Ok(outcome);
        }
        this.restart_count += 1;
        console.message(&format!(
            "attempt {} failed: {}; starting the job again (restart {} of {}; a new job id, \
             secret and store)",
            ends.len(),
            cause.describe(),
            this.restart_count,
            launch.max_restarts
        ));
        if let Some(sig) = stops.received() {
            // Arrived while the message was written: the job is not started again.
            summarise(console, &ends, launch.max_restarts);
            return Ok(Outcome {
                cause: Some(Cause::Signal(sig)),
                ..outcome
            });
        }
    }
}

/// Prints what each attempt of a restarted job ended with, and the time lost to the failed
/// ones; nothing if the first attempt was the last.
fn summarise(console: &Console, ends: &[AttemptEnd], max_restarts: usize) {
    if ends.len() < 2 && ends.iter().all(|e| e.cause.is_none()) {
        return;
    }
    for line in summary(ends, max_restarts) {
        console.message(&line);
    }
}

/// The summary's lines (what `summarise` prints).
pub fn summary(ends: &[AttemptEnd], max_restarts: usize) -> Vec<String> {
    let restarts = ends.len().saturating_sub(1);
    let mut lines = vec![format!(
        "{} attempt{}, {restarts} restart{} of at most {max_restarts}:",
        ends.len(),
        if ends.len() == 1 { "" } else { "s" },
        if restarts == 1 { "" } else { "s" },
    )];
    for (i, end) in ends.iter().enumerate() {
        let how = match &end.cause {
            None => "succeeded".to_string(),
            Some(c) => c.describe(),
        };
        lines.push(format!(
            "  attempt {} (PSY_RESTART_COUNT={i}): {how}, after {:.2} s",
            i + 1,
            end.ran.as_secs_f64()
        ));
    }
    let lost: Duration = ends
        .iter()
        .filter(|e| e.cause.as_ref().is_some_and(restartable))
        .map(|e| e.ran)
        .sum();
    lines.push(format!(
        "  time in failed attempts: {:.2} s",
        lost.as_secs_f64()
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::termination::Termination;

    fn failed(rank: usize) -> Cause {
        Cause::RankFailed {
            rank,
            pid: 100 + rank as u32,
            termination: Termination::Signaled(libc::SIGKILL),
        }
    }

    #[test]
    fn failures_restart_and_stops_do_not() {
        assert!(restartable(&failed(1)));
        assert!(restartable(&Cause::HostLost {
            host: "b".into(),
            why: "silent".into()
        }));
        assert!(!restartable(&Cause::Signal(libc::SIGINT)));
        assert!(!restartable(&Cause::Timeout(Duration::from_secs(1))));
        assert!(!restartable(&Cause::LaunchFailed));
    }

    fn outcome_on(host: &str, rank: usize) -> Outcome {
        use crate::supervise::RankReport;
        Outcome {
            cause: Some(failed(rank)),
            ranks: (0..4)
                .map(|r| RankReport {
                    rank: r,
                    pid: 100 + r as u32,
                    termination: None,
                    stopped: false,
                    host: Some(if r == rank { host.into() } else { "a".into() }),
                })
                .collect(),
            tolerated: Vec::new(),
        }
    }

    #[test]
    fn a_host_failing_twice_is_left_out_when_the_others_hold_the_job() {
        use crate::hosts::Host;
        let slots = |name: &str, n| Host {
            slots: Some(n),
            ..Host::new(name)
        };
        let list = HostList::from_hosts([slots("a", 2), slots("b", 2), slots("c", 2)]).unwrap();
        let mut f = HostFailures::new(list.clone());
        assert_eq!(f.record(&outcome_on("c", 3), 4), None, "once is not enough");
        let said = f.record(&outcome_on("c", 3), 4).unwrap();
        assert!(said.contains("leaving it out"), "{said}");
        assert_eq!(f.hosts().len(), 2);
        // Too few slots left: kept, saying why.
        let mut f = HostFailures::new(list);
        f.record(&outcome_on("c", 3), 6);
        let said = f.record(&outcome_on("c", 3), 6).unwrap();
        assert!(said.contains("keeping it"), "{said}");
        assert_eq!(f.hosts().len(), 3);
        // Unknown slots: kept.
        let unknown = HostList::from_hosts([Host::new("a"), Host::new("c")]).unwrap();
        let mut f = HostFailures::new(unknown);
        f.record(&outcome_on("c", 1), 1);
        assert!(f
            .record(&outcome_on("c", 1), 1)
            .unwrap()
            .contains("slot count"));
    }

    #[test]
    fn the_summary_names_every_attempt_and_the_time_lost() {
        let ends = [
            AttemptEnd {
                cause: Some(failed(2)),
                ran: Duration::from_millis(1500),
            },
            AttemptEnd {
                cause: None,
                ran: Duration::from_millis(2000),
            },
        ];
        let lines = summary(&ends, 3);
        assert_eq!(lines[0], "2 attempts, 1 restart of at most 3:");
        assert_eq!(
            lines[1],
            "  attempt 1 (PSY_RESTART_COUNT=0): rank 2 (pid 102) killed by signal 9 (SIGKILL), after 1.50 s"
        );
        assert_eq!(
            lines[2],
            "  attempt 2 (PSY_RESTART_COUNT=1): succeeded, after 2.00 s"
        );
        assert_eq!(lines[3], "  time in failed attempts: 1.50 s");
    }
}
