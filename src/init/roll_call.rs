//! The roll call of an `env://` job (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, as
//! torchrun or a script sets them): there, nothing but each process's own environment says who
//! it is, so two processes may say they are the same rank, or disagree on the world's size.
//! Before forming the group, every process checks in on rank 0's store; a disagreement fails
//! every rank that joined, each with the same message naming it (`rank 1 says WORLD_SIZE=3,
//! rank 0 says 2`; `rank 1 joined twice`), instead of some ranks forming a group and the others
//! failing later with an error about a connection.
//!
//! 1. Each process claims its rank's seat, `torch/roll/RANK`, with [`Store::set_once`], writing
//!    its `WORLD_SIZE` and who it is (host, pid and a random number). The seat's holder is the
//!    first claimant; a later one learns it joined twice.
//! 2. Each reads rank 0's seat: rank 0's `WORLD_SIZE` is the job's (rank 0 serves the store).
//! 3. Each waits (one range read, until `PSY_TIMEOUT`) for every seat of the job, and checks
//!    each one's `WORLD_SIZE`. At the deadline, the ranks that never checked in are the verdict
//!    (`ranks 1, 3 of WORLD_SIZE=4 never checked in`).
//!
//! A process that finds a disagreement records it as the job's verdict (the first one recorded
//! is the one every rank reports) and fills every seat not yet claimed with it, so that the
//! ranks waiting in step 3 and the ranks yet to come in step 1 read it at once. Rank 0, whose
//! exit ends the store, waits until the holder of every other claimed seat said it read it (until
//! the job's deadline, and a few seconds at least): only a seat's holder says so, under its
//! seat's name, so a second process started with the same rank cannot say it for the first one,
//! which may still be waiting on the store. A process that
//! arrives after the others have formed the group can only fail itself; the ranks check the
//! verdict once more after forming, which catches one that arrived meanwhile.

use crate::bootstrap::Store;
use crate::error::{Error, ErrorKind, Result};
use std::time::{Duration, Instant};

/// The seats' keys: this, then the rank.
const SEAT: &str = "torch/roll/";
/// The job's verdict, once a process found a disagreement.
const VERDICT: &str = "torch/roll-verdict";
/// What a seat filled by a verdict starts with.
const REFUSED: &str = "refused ";
/// Where each rank says it read the verdict: this, then the rank.
const ACK: &str = "torch/roll-read/";
/// The least time rank 0 (which serves the store) gives, after a verdict, to the other seated
/// ranks of its world to read it before it exits (it waits until the job's deadline if that is
/// later).
const LINGER: Duration = Duration::from_secs(5);

/// What a seat holds.
enum Seat {
    /// Claimed by a process that says the world has `size` ranks; `who` names it.
    Claimed { size: usize, who: String },
    /// Filled with the job's verdict.
    Refused(String),
}

impl Seat {
    fn parse(bytes: &[u8], rank: usize) -> Result<Seat> {
        let text = String::from_utf8_lossy(bytes);
        if let Some(verdict) = text.strip_prefix(REFUSED) {
            return Ok(Seat::Refused(verdict.to_string()));
        }
        let (size, who) = text.split_once(' ').unwrap_or((&text, ""));
        match size.parse() {
            Ok(size) => Ok(Seat::Claimed {
                size,
                who: who.to_string(),
            }),
            Err(_) => Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "rank {rank}'s entry in the job's roll call is not one this psyne reads (is \
                     every process the same psyne version?)"
                ),
            )),
        }
    }
}

/// Checks in as `rank` of a world of `world_size` (see the module docs); every wait ends by
/// `deadline`.
pub(super) fn check_in(
    store: &dyn Store,
    rank: usize,
    world_size: usize,
    deadline: Instant,
) -> Result<()> {
    match roll(store, rank, world_size, deadline) {
        Ok(()) => Ok(()),
        Err(Ended::Failed(e)) => Err(e),
        Err(Ended::Refused { verdict, seated }) => {
            // Rank 0 serves the store: it stays until the holder of every other seat of its
            // world has read the verdict (or the job's deadline passes: some may never come), so
            // that they fail with it rather than with a lost connection. Only a seat's holder
            // acknowledges under its rank: a duplicate's word says nothing of the holder.
            if seated {
                let _ = store.set(&format!("{ACK}{rank}"), b"read");
            }
            if rank == 0 {
                linger(store, world_size, deadline.max(Instant::now() + LINGER));
            }
            Err(refused(rank, &verdict))
        }
    }
}

/// On rank 0 after a verdict: waits (until `until` at most) until every other process that
/// holds a seat of its world of `size` has said it read the verdict.
fn linger(store: &dyn Store, size: usize, until: Instant) {
    let now = Instant::now();
    let seated = |r: &usize| {
        store
            .get(&seat(*r), now)
            .is_ok_and(|b| matches!(Seat::parse(&b, *r), Ok(Seat::Claimed { .. })))
    };
    let acks: Vec<String> = (1..size)
        .filter(seated)
        .map(|r| format!("{ACK}{r}"))
        .collect();
    let _ = store.get_many(&acks, until);
}

/// How a roll call ended other than in agreement.
enum Ended {
    /// With the job's verdict; `seated` when this process holds its rank's seat (a duplicate
    /// or a process that found its seat filled by the verdict does not).
    Refused { verdict: String, seated: bool },
    /// With an error of the store.
    Failed(Error),
}

impl From<Error> for Ended {
    fn from(e: Error) -> Ended {
        Ended::Failed(e)
    }
}

/// The roll call itself (see the module docs).
fn roll(
    store: &dyn Store,
    rank: usize,
    world_size: usize,
    deadline: Instant,
) -> std::result::Result<(), Ended> {
    let me = format!("{world_size} {}", identity());
    let held = store.set_once(&seat(rank), me.as_bytes())?;
    match Seat::parse(&held, rank)? {
        Seat::Refused(verdict) => return Err(refused_with(verdict, false)),
        Seat::Claimed { who, .. } if held != me.as_bytes() => {
            let mine = me.split_once(' ').map_or("", |(_, w)| w);
            let why = format!(
                "rank {rank} joined twice ({who} and {mine} were both started with RANK={rank}); \
                 give each process its own RANK, from 0 to WORLD_SIZE-1"
            );
            return Err(unseated(refuse(store, world_size, &why)));
        }
        Seat::Claimed { .. } => {}
    }
    let size = if rank == 0 {
        world_size
    } else {
        match Seat::parse(&store.get(&seat(0), deadline)?, 0)? {
            Seat::Refused(verdict) => return Err(refused_with(verdict, true)),
            Seat::Claimed { size, .. } => size,
        }
    };
    if size != world_size {
        return Err(refuse(store, size, &disagree(rank, world_size, size)));
    }
    let seats = match store.get_range(SEAT, 0..size, deadline) {
        Ok(seats) => seats,
        Err(e) if e.kind() == ErrorKind::Timeout => {
            return Err(match missing(store, size) {
                Some(why) => refuse(store, size, &why),
                // Every seat is taken now: maybe by another rank's verdict, recorded since.
                None => match store.get(VERDICT, Instant::now()) {
                    Ok(verdict) => {
                        refused_with(String::from_utf8_lossy(&verdict).into_owned(), true)
                    }
                    Err(_) => Ended::Failed(e),
                },
            });
        }
        Err(e) => return Err(e.into()),
    };
    for (r, bytes) in seats.iter().enumerate() {
        match Seat::parse(bytes, r)? {
            Seat::Refused(verdict) => return Err(refused_with(verdict, true)),
            Seat::Claimed { size: theirs, .. } if theirs != size => {
                return Err(refuse(store, size, &disagree(r, theirs, size)))
            }
            Seat::Claimed { .. } => {}
        }
    }
    Ok(())
}

/// When `PSY_TIMEOUT` passed before every seat of a world of `size` was claimed: which ranks
/// never checked in (up to [`MISSING_NAMED`] of them), and the fix; `None` if all have now.
fn missing(store: &dyn Store, size: usize) -> Option<String> {
    let now = Instant::now();
    let absent: Vec<usize> = (0..size)
        .filter(|&r| store.get(&seat(r), now).is_err())
        .take(MISSING_NAMED + 1)
        .collect();
    let named = match absent.as_slice() {
        [] => return None,
        [r] => format!("rank {r}"),
        _ if absent.len() > MISSING_NAMED => {
            format!("ranks {} and more", join(&absent[..MISSING_NAMED]))
        }
        _ => format!("ranks {}", join(&absent)),
    };
    Some(format!(
        "{named} of WORLD_SIZE={size} never checked in within PSY_TIMEOUT; start every process \
         of the job, with RANK 0 to {}",
        size - 1
    ))
}

/// How many missing ranks an error names.
const MISSING_NAMED: usize = 8;

/// `1, 2, 5`.
fn join(ranks: &[usize]) -> String {
    ranks
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// After the group formed: the job's verdict, if a process that came late recorded one.
pub(super) fn verdict_since(store: &dyn Store, rank: usize) -> Result<()> {
    match store.get(VERDICT, Instant::now()) {
        Ok(verdict) => Err(refused(rank, &String::from_utf8_lossy(&verdict))),
        Err(_) => Ok(()),
    }
}

/// The key of `rank`'s seat.
fn seat(rank: usize) -> String {
    format!("{SEAT}{rank}")
}

/// Who this process is, for a message about two of them: `pid 1234 on host a (#5f3a)`.
fn identity() -> String {
    let mut tag = [0u8; 4];
    let tag = match getrandom::fill(&mut tag) {
        Ok(()) => u32::from_le_bytes(tag),
        Err(_) => 0,
    };
    format!(
        "pid {} on host {} (#{tag:08x})",
        std::process::id(),
        crate::hostname()
    )
}

/// `rank r says WORLD_SIZE=3, rank 0 says 2`, and the fix.
fn disagree(r: usize, theirs: usize, size: usize) -> String {
    format!(
        "rank {r} says WORLD_SIZE={theirs}, rank 0 says {size}; start every process of the job \
         with the same WORLD_SIZE"
    )
}

/// Records `why` as the job's verdict unless another was first, fills every seat of the job
/// (`size` ranks) not yet claimed with the verdict, and returns the verdict.
fn refuse(store: &dyn Store, size: usize, why: &str) -> Ended {
    let verdict = match store.set_once(VERDICT, why.as_bytes()) {
        Ok(first) => String::from_utf8_lossy(&first).into_owned(),
        Err(_) => why.to_string(),
    };
    let fill = format!("{REFUSED}{verdict}");
    for r in 0..size {
        // A seat claimed already keeps its claim; its rank reads the verdict in its own
        // range read, where this fill ends the wait.
        let _ = store.set_once(&seat(r), fill.as_bytes());
    }
    refused_with(verdict, true)
}

/// The end of a roll call with `verdict`, by a process that holds its seat (`seated`) or not.
fn refused_with(verdict: String, seated: bool) -> Ended {
    Ended::Refused { verdict, seated }
}

/// `ended`, by a process that does not hold its seat (a second process of the same rank).
fn unseated(ended: Ended) -> Ended {
    match ended {
        Ended::Refused { verdict, .. } => refused_with(verdict, false),
        failed => failed,
    }
}

/// This rank's error for the job's `verdict`.
fn refused(rank: usize, verdict: &str) -> Error {
    Error::new(
        ErrorKind::Bootstrap,
        format!("rank {rank}: the job cannot form: {verdict}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn a_job_whose_processes_agree_checks_in() {
        let store = std::sync::Arc::new(MemoryStore::new());
        let joined: Vec<_> = (0..3)
            .map(|r| {
                let s = store.clone();
                std::thread::spawn(move || check_in(&*s, r, 3, soon()))
            })
            .collect();
        for j in joined {
            j.join().unwrap().unwrap();
        }
        verdict_since(&*store, 0).unwrap();
    }

    #[test]
    fn a_world_size_disagreement_fails_every_rank_naming_both() {
        let store = std::sync::Arc::new(MemoryStore::new());
        let s = store.clone();
        let rank0 = std::thread::spawn(move || check_in(&*s, 0, 2, soon()));
        let e1 = check_in(&*store, 1, 3, soon()).unwrap_err();
        let e0 = rank0.join().unwrap().unwrap_err();
        let want = "the job cannot form: rank 1 says WORLD_SIZE=3, rank 0 says 2";
        assert!(e1.to_string().contains(want), "{e1}");
        assert!(e0.to_string().contains(want), "{e0}");
        assert_eq!(e0.kind(), ErrorKind::Bootstrap);
    }

    #[test]
    fn a_rank_that_joins_twice_fails_the_job() {
        let store = std::sync::Arc::new(MemoryStore::new());
        let s = store.clone();
        // Rank 0 and the first rank 1 wait for rank 2, which never comes.
        let rank0 = std::thread::spawn(move || check_in(&*s, 0, 3, soon()));
        store.set_once(&seat(1), b"3 pid 1 on host a (#0)").unwrap();
        let e = check_in(&*store, 1, 3, soon()).unwrap_err();
        assert!(e.to_string().contains("rank 1 joined twice"), "{e}");
        // A rank that comes later reads the verdict in its seat.
        let e2 = check_in(&*store, 2, 3, soon()).unwrap_err();
        assert!(e2.to_string().contains("rank 1 joined twice"), "{e2}");
        // Rank 0 ends once the holder of seat 1 (this test) said it read it; the duplicate's
        // refusal does not say so for the holder.
        assert!(
            !rank0.is_finished(),
            "rank 0 ended before seat 1's holder read the verdict"
        );
        store.set(&format!("{ACK}1"), b"read").unwrap();
        let e0 = rank0.join().unwrap().unwrap_err();
        assert!(
            e0.to_string()
                .contains("rank 1 joined twice (pid 1 on host a"),
            "{e0}"
        );
        assert!(verdict_since(&*store, 0).is_err());
    }

    #[test]
    fn ranks_that_never_come_are_named_at_the_deadline() {
        let store = MemoryStore::new();
        store.set_once(&seat(2), b"4 pid 2 on host a (#0)").unwrap();
        // That process reads the verdict at once (rank 0 waits for it before it ends).
        store.set(&format!("{ACK}2"), b"read").unwrap();
        let soon = Instant::now() + Duration::from_millis(100);
        let e = check_in(&store, 0, 4, soon).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Bootstrap);
        assert!(
            e.message()
                .contains("the job cannot form: ranks 1, 3 of WORLD_SIZE=4 never checked in"),
            "{e}"
        );
    }
}
