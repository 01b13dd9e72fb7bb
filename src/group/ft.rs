//! Going on after a rank fails: [`Group::revoke`], [`Group::agree`] and [`Group::shrink`], as
//! ULFM's `MPIX_Comm_revoke`, `MPIX_Comm_agree` and `MPIX_Comm_shrink` (and NCCL's
//! `ncclCommRevoke`/`ncclCommShrink`) define them, over the group's store.
//!
//! - **Who is gone.** Every rank of a group formed with its store kept (`psyne::init()`,
//!   [`crate::GroupBuilder::shared_store`], [`Group::split`]) holds a key `PREFIX/alive/RANK` in the store
//!   for as long as its connection to the store lives ([`Store::set_ephemeral`]): when the
//!   process dies, however it dies, the store (psyrun's) sets the key to `gone`. That, not the
//!   group's links (which a failed call has already aborted), is how the survivors tell a dead
//!   rank from a slow one.
//! - **Agreement.** Each survivor votes under `PREFIX/ftN/vote/RANK`, then waits until every
//!   rank has voted or is gone, or another survivor's decision is in the store, or the group's
//!   timeout passes (the ranks still silent then count as failed); it proposes the AND of the
//!   votes it saw and the ranks it found gone or silent, and the first proposal written to
//!   `PREFIX/ftN/decision` ([`Store::set_once`]) is every rank's answer, so all survivors get
//!   the same one even when another rank dies or falls silent during the agreement. `N` counts
//!   the rank's agreements: every survivor makes the same ones, in the same order, so each
//!   holds the same set of ranks decided failed, and later agreements of the group count them
//!   failed without waiting for them again.
//! - **Silent ranks.** A rank counted failed whose process still holds its key (stopped by
//!   SIGSTOP, hung, or just slower than the timeout) is declared to psyrun in the job's store
//!   (its key holds its `PSY_RANK`; `losses::declare`), and psyrun ends it (SIGKILL to
//!   its process group) and reports it as failed: nothing waits for it afterwards.
//! - **Shrink.** The survivors agree on who is gone, form a new group of the rest (ranks
//!   renumbered densely in the old order) through the store, and agree again that every one of
//!   them formed it; if one did not (another rank died meanwhile), all drop it and start over.
//!   Forming has the group's timeout from the first decision (finding a silent rank took the
//!   agreement one timeout already).
//!
//! Where this differs from ULFM: the new group gets new links (the old ones were aborted by the
//! failure); a rank that stays silent past the group's timeout without dying is counted as failed
//! (it gets an error if it votes later, and under psyrun it is ended); the store is the one point
//! every survivor needs (psyrun serves it; under torchrun rank 0 does, so rank 0's death ends the
//! job); an agreement costs a store round trip per rank polled, so its time grows with the group
//! (fine for tens of ranks).

use super::{Group, GroupOptions};
use crate::bootstrap::Store;
use crate::comm::Communicator;
use crate::error::{Error, ErrorKind, Result};
use std::time::{Duration, Instant};

/// What a live rank's key holds (then, under psyrun, a space and its `PSY_RANK`), and what the
/// store writes there when it is gone.
const ALIVE: &[u8] = b"alive";
const GONE: &[u8] = b"gone";

/// How long a shrink first gives the new group to form before the survivors check whether
/// everyone did (a rank that died while it formed holds the others up this long); doubled at
/// each new try, up to the group's timeout.
const FIRST_FORMING_BUDGET: Duration = Duration::from_millis(500);

fn alive_key(prefix: &str, rank: usize) -> String {
    format!("{prefix}/alive/{rank}")
}

/// This process's rank in the psyrun job `job_id` (`PSY_RANK`), if psyrun started it for that
/// job: what psyrun is told when the others count this rank failed.
fn job_rank(job_id: &str) -> Option<usize> {
    let job = std::env::var(crate::names::JOB_ID).ok()?;
    if job != job_id {
        return None;
    }
    std::env::var(crate::names::RANK).ok()?.parse().ok()
}

/// Records in `store` that the rank of `options` is alive while its connection lives, with its
/// rank in the psyrun job if it has one.
pub(crate) fn register(store: &dyn Store, options: &GroupOptions) -> Result<()> {
    let mut value = ALIVE.to_vec();
    if let Some(r) = job_rank(&options.job_id) {
        value.extend_from_slice(format!(" {r}").as_bytes());
    }
    store.set_ephemeral(&alive_key(&options.prefix, options.rank), &value, GONE)
}

/// What a rank's key says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    /// Its process is gone (its connection to the store ended).
    Gone,
    /// Its process holds its connection: `Some` of its rank in the psyrun job, if it has one.
    Alive(Option<usize>),
    /// It never registered (yet).
    Unknown,
}

fn liveness(store: &dyn Store, prefix: &str, rank: usize) -> Result<Liveness> {
    match store.get(&alive_key(prefix, rank), Instant::now()) {
        Ok(v) if v == GONE => Ok(Liveness::Gone),
        Ok(v) => Ok(Liveness::Alive(
            v.strip_prefix(ALIVE)
                .and_then(|rest| std::str::from_utf8(rest).ok())
                .and_then(|r| r.trim().parse().ok()),
        )),
        Err(e) if e.kind() == ErrorKind::Timeout => Ok(Liveness::Unknown),
        Err(e) => Err(e),
    }
}

/// A decision as the store holds it: the flag, then each failed rank as a u32 (little endian).
fn encode(flag: bool, failed: &[usize]) -> Vec<u8> {
    let mut out = vec![u8::from(flag)];
    for &r in failed {
        out.extend_from_slice(&(r as u32).to_le_bytes());
    }
    out
}

fn decode(bytes: &[u8]) -> Option<(bool, Vec<usize>)> {
    let (flag, rest) = bytes.split_first()?;
    if rest.len() % 4 != 0 {
        return None;
    }
    let failed = rest
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    Some((*flag == 1, failed))
}

/// One agreement among the ranks of group `prefix` of `size`, this rank voting `flag`.
pub(crate) struct Agreement<'a> {
    pub(crate) store: &'a dyn Store,
    pub(crate) prefix: &'a str,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    /// Which of this rank's agreements it is.
    pub(crate) round: u64,
    pub(crate) deadline: Instant,
    /// The ranks earlier agreements of the group decided failed: failed still, never waited for.
    pub(crate) failed_before: &'a [usize],
    /// The job whose launcher is told of ranks counted failed while they still run.
    pub(crate) job_id: &'a str,
}

/// What a rank saw while it waited for the votes.
enum Seen {
    /// Another rank's decision, already in the store.
    Decision(Vec<u8>),
    /// Its own proposal: the AND of the votes, and the ranks gone or silent past the deadline.
    Votes(bool, Vec<usize>),
}

impl Agreement<'_> {
    /// Votes `flag` and returns the decision: the AND of the votes of the ranks that voted, and
    /// the ranks that did not because they are gone or were silent past the deadline (sorted).
    /// A rank it counts failed while that rank's process still runs is declared to psyrun
    /// (`losses::declare`), which ends it.
    pub(crate) fn run(&self, flag: bool) -> Result<(bool, Vec<usize>)> {
        let base = format!("{}/ft{}", self.prefix, self.round);
        self.store
            .set(&format!("{base}/vote/{}", self.rank), &[u8::from(flag)])?;
        let proposal = match self.collect(&base)? {
            Seen::Decision(bytes) => bytes,
            Seen::Votes(all, failed) => encode(all, &failed),
        };
        let decided = self
            .store
            .set_once(&format!("{base}/decision"), &proposal)?;
        let (flag, failed) = decode(&decided).ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "agreement {}: the store holds a malformed decision",
                    self.round
                ),
            )
        })?;
        if failed.contains(&self.rank) {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "agreement {} on rank {}: the other ranks counted this rank as failed (it did \
                     not vote before their deadline, PSY_TIMEOUT); it is not part of what they \
                     decided",
                    self.round, self.rank
                ),
            ));
        }
        self.declare_silent(&failed);
        Ok((flag, failed))
    }

    /// Waits until every rank has voted or is gone, a decision is in the store, or the
    /// deadline passes (the ranks still silent then count as failed, as a failure detector
    /// would have it).
    fn collect(&self, base: &str) -> Result<Seen> {
        let mut votes: Vec<Option<bool>> = vec![None; self.size];
        let mut gone = vec![false; self.size];
        for &j in self.failed_before.iter().filter(|&&j| j < self.size) {
            gone[j] = true;
        }
        let mut pause = Duration::from_micros(100);
        loop {
            self.poll_votes(base, &mut votes, &mut gone)?;
            let waiting: Vec<usize> = (0..self.size)
                .filter(|&j| votes[j].is_none() && !gone[j])
                .collect();
            if waiting.is_empty() {
                break;
            }
            if let Some(decided) = self.decision(base)? {
                return Ok(Seen::Decision(decided));
            }
            if Instant::now() >= self.deadline {
                for j in waiting {
                    gone[j] = true;
                }
                break;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
        let all = votes.iter().flatten().all(|&v| v);
        let failed = (0..self.size).filter(|&j| gone[j]).collect();
        Ok(Seen::Votes(all, failed))
    }

    /// Reads the votes not seen yet, and for each rank that has not voted, whether it is gone.
    fn poll_votes(&self, base: &str, votes: &mut [Option<bool>], gone: &mut [bool]) -> Result<()> {
        for j in 0..self.size {
            if votes[j].is_some() || gone[j] {
                continue;
            }
            match self.store.get(&format!("{base}/vote/{j}"), Instant::now()) {
                Ok(v) => votes[j] = Some(v.first() == Some(&1)),
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    gone[j] = liveness(self.store, self.prefix, j)? == Liveness::Gone;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The decision, if a rank has written it already.
    fn decision(&self, base: &str) -> Result<Option<Vec<u8>>> {
        match self.store.get(&format!("{base}/decision"), Instant::now()) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == ErrorKind::Timeout => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Declares to psyrun each rank of `failed` newly counted failed whose process still holds
    /// its key (silent, not dead), so psyrun ends it. Best effort: a store that cannot be
    /// reached changes nothing the survivors decided.
    fn declare_silent(&self, failed: &[usize]) {
        let me = format!("{} rank {}", self.prefix, self.rank);
        for &j in failed.iter().filter(|j| !self.failed_before.contains(j)) {
            let Ok(Liveness::Alive(Some(job_rank))) = liveness(self.store, self.prefix, j) else {
                continue;
            };
            let why = format!(
                "it did not vote in agreement {} of its group ({}, where it is rank {j} of {}) \
                 before the others' deadline (PSY_TIMEOUT), and still runs",
                self.round, self.prefix, self.size
            );
            let _ = super::losses::declare(self.store, self.job_id, job_rank, &me, &why);
        }
    }
}

/// The new group's place of this rank: its rank among the survivors, and their number.
fn survivor_rank(rank: usize, size: usize, failed: &[usize]) -> (usize, usize) {
    let before = (0..rank).filter(|r| !failed.contains(r)).count();
    (before, size - failed.len())
}

impl Group {
    /// What [`Group::agree`] and [`Group::shrink`] need: the store and options the group was
    /// formed with.
    fn kept(&self, what: &str) -> Result<&super::split::Splitter> {
        self.splitter.as_deref().ok_or_else(|| {
            Error::invalid(format!(
                "{what}: this group was formed without keeping its store (GroupBuilder::store); \
                 form it with psyne::init() or GroupBuilder::shared_store"
            ))
        })
    }

    /// Revokes the group, as `MPIX_Comm_revoke`: every later call on it fails, on this rank and,
    /// as soon as they hear from this one, on every other (with [`ErrorKind::Revoked`]), so that
    /// no survivor stays blocked in a collective that a failed or departed rank will not join.
    /// A call that failed already did the same (its error went to every peer), so after a
    /// failure this only makes sure. Then [`Group::shrink`] to go on.
    ///
    /// Subgroups split from this group ([`Group::split`]) are revoked with it, and theirs in
    /// turn: a rank waiting in a subgroup for a peer that is busy recovering this group is not
    /// left blocked until its deadline.
    pub fn revoke(&self) -> Result<()> {
        self.core.birth.check("revoke")?;
        if let Some(splitter) = &self.splitter {
            splitter.revoke_subgroups();
        }
        self.core.revoke()
    }

    /// A fault-tolerant agreement, as `MPIX_Comm_agree`: every live rank of the group calls it
    /// (after a failure, after [`Group::revoke`]; it does not use the group's links), and every
    /// one gets the same answer: the AND of the `flag`s of the ranks that voted, and the ranks
    /// that are gone (died, or silent past the group's timeout), sorted. It completes even if
    /// ranks die during it. A rank the others counted as failed gets an error instead.
    pub fn agree(&self, flag: bool) -> Result<(bool, Vec<usize>)> {
        self.core.birth.check("agree")?;
        let kept = self.kept("agree")?;
        let options = kept.template();
        let failed_before = kept.failed();
        let (flag, failed) = Agreement {
            store: kept.store(),
            prefix: &options.prefix,
            rank: self.rank(),
            size: self.size(),
            round: kept.next_round(),
            deadline: Instant::now() + options.tunables.timeout,
            failed_before: &failed_before,
            job_id: &options.job_id,
        }
        .run(flag)?;
        kept.add_failed(&failed);
        Ok((flag, failed))
    }

    /// The survivors' new group, as `MPIX_Comm_shrink`: every live rank calls it after a
    /// failure; they agree on who is gone and form a group of the others, renumbered densely in
    /// their old order, over new links (shared memory and TCP as `PSY_TRANSPORT` says), which
    /// runs every collective at once. If another rank dies while it forms, the survivors agree
    /// on that too and form it again without it.
    pub fn shrink(&self) -> Result<Group> {
        self.core.birth.check("shrink")?;
        let kept = self.kept("shrink")?;
        let template = kept.template();
        let mut budget = FIRST_FORMING_BUDGET.min(template.tunables.timeout);
        let mut until = None;
        loop {
            let (_, failed) = self.agree(true)?;
            // Forming gets its own timeout from the first decision: finding that a rank is
            // silent took the agreement a whole timeout already.
            let until = *until.get_or_insert_with(|| Instant::now() + template.tunables.timeout);
            let (rank, size) = survivor_rank(self.rank(), self.size(), &failed);
            let attempt = kept.next_round();
            let options = GroupOptions {
                rank,
                size,
                prefix: format!("{}/shrink{attempt}", template.prefix),
                ..template.clone()
            };
            let forming_until = until.min(Instant::now() + budget);
            let formed = Group::builder(options)
                .shared_store(kept.store_arc())
                .until(forming_until)
                .build();
            let (all_formed, failed_now) = self.agree(formed.is_ok())?;
            if all_formed && failed_now == failed {
                return formed;
            }
            if Instant::now() >= until {
                return Err(formed.err().unwrap_or_else(|| {
                    Error::new(
                        ErrorKind::Timeout,
                        "shrink: ranks kept failing while the new group formed; gave up at the \
                         group's deadline (PSY_TIMEOUT)",
                    )
                }));
            }
            budget = (budget * 2).min(template.tunables.timeout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_round_trip_and_survivors_renumber_in_order() {
        assert_eq!(decode(&encode(true, &[1, 7])), Some((true, vec![1, 7])));
        assert_eq!(decode(&encode(false, &[])), Some((false, vec![])));
        assert_eq!(decode(&[1, 2, 3]), None);
        assert_eq!(survivor_rank(0, 5, &[1, 3]), (0, 3));
        assert_eq!(survivor_rank(2, 5, &[1, 3]), (1, 3));
        assert_eq!(survivor_rank(4, 5, &[1, 3]), (2, 3));
    }

    /// Three ranks, rank 2 silent (alive, never voting): the first survivor to reach its
    /// deadline decides that rank 2 failed, a survivor with a far deadline adopts that decision
    /// as soon as it is in the store, the silent rank is declared once for psyrun, and a later
    /// agreement that knows rank 2 failed does not wait for it.
    #[test]
    fn a_silent_rank_is_excluded_by_every_survivor_alike_and_not_waited_for_again() {
        use crate::bootstrap::MemoryStore;
        let store = MemoryStore::new();
        store.set("p/alive/2", b"alive 7").unwrap();
        let agreement = |rank, round, wait: Duration, failed_before: &'static [usize]| {
            let store = &store;
            move || {
                Agreement {
                    store,
                    prefix: "p",
                    rank,
                    size: 3,
                    round,
                    deadline: Instant::now() + wait,
                    failed_before,
                    job_id: "job",
                }
                .run(true)
            }
        };
        let started = Instant::now();
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(agreement(0, 0, Duration::from_millis(200), &[]));
            let b = s.spawn(agreement(1, 0, Duration::from_secs(60), &[]));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!(a.unwrap(), (true, vec![2]));
        assert_eq!(b.unwrap(), (true, vec![2]));
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "rank 1 adopted the decision"
        );
        let declared = store.get("job/declared/1", Instant::now()).unwrap();
        assert_eq!(
            crate::group::losses::parse_declaration(&declared).map(|d| d.0),
            Some(7)
        );
        assert!(
            store.get("job/declared/2", Instant::now()).is_err(),
            "declared once"
        );
        let started = Instant::now();
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(agreement(0, 1, Duration::from_secs(60), &[2]));
            let b = s.spawn(agreement(1, 1, Duration::from_secs(60), &[2]));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!(a.unwrap(), (true, vec![2]));
        assert_eq!(b.unwrap(), (true, vec![2]));
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nobody waited for rank 2"
        );
    }
}
