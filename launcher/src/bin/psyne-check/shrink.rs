//! `psyne-check --shrink-trial SEED [--second-failure] [--no-victim] [--stop-victim]`: one trial of going on after
//! a failure, for `launcher/tests/it/shrink.rs` (run under `psyrun --on-failure continue`).
//!
//! Every rank runs a loop of all-reduces of varying sizes, each checked against its oracle;
//! rank `SEED % size` SIGKILLs itself from a helper thread after a delay drawn from SEED (0 to
//! 30 ms), so it dies at a random point of a collective. The survivors' calls fail; each revokes
//! the group, shrinks it, and checks every collective × op × type on the new group against the
//! oracle. With `--no-victim` nobody kills itself: the loop runs until something outside (a host
//! cut off) makes a call fail. With `--stop-victim` the victim stops itself with SIGSTOP
//! instead (it neither dies nor answers): the survivors time out after `PSY_TIMEOUT`, count it
//! failed when it does not vote within another, and psyrun ends it. With `--second-failure`, the next rank after the victim also dies, at a random point
//! (0 to 3 ms) after it starts recovering: inside the agreement or the shrink.
//!
//! Each survivor prints `rank R: shrunk to S ranks as rank R2: ...` with the conformance verdict;
//! the victims print `rank R: killing itself ...` first.

use psyne::Communicator;
use psyne::{conformance, Group, ReduceOp};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long the loop may run before the trial counts as broken (the victim should be dead).
const LOOP_LIMIT: Duration = Duration::from_secs(20);

/// A small deterministic generator (splitmix64), so a seed names a whole trial.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Kills this process from a helper thread after `delay`, saying so first.
fn die_after(rank: usize, delay: Duration, when: &'static str) {
    raise_after(rank, delay, when, libc::SIGKILL);
}

/// Raises `signal` (SIGKILL: "killing itself"; SIGSTOP: "stopping itself") on this process
/// from a helper thread after `delay`, saying so first.
fn raise_after(rank: usize, delay: Duration, when: &'static str, signal: i32) {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        let what = if signal == libc::SIGSTOP {
            "stopping itself (SIGSTOP)"
        } else {
            "killing itself"
        };
        println!("rank {rank}: {what} {when} after {delay:?}");
        // SAFETY: raising a signal on this process has no memory-safety preconditions.
        unsafe {
            libc::raise(signal);
        }
    });
}

/// Runs the loop until a call fails (the victim died); an error if none did in time or a result
/// was wrong.
fn loop_until_failure(group: &Group, draw: &mut Draw) -> Result<psyne::Error, String> {
    let (rank, size) = (group.rank(), group.size());
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < LOOP_LIMIT {
        let n = 1 + draw.below(1 << 16) as usize;
        let mut buf: Vec<f64> = (0..n).map(|k| (rank * 1000 + k % 997) as f64).collect();
        if let Err(e) = group.all_reduce(&mut buf, ReduceOp::Sum) {
            return Ok(e);
        }
        let ranks_sum = (size * (size - 1) / 2 * 1000) as f64;
        if let Some(k) = (0..n).find(|&k| buf[k] != ranks_sum + (size * (k % 997)) as f64) {
            return Err(format!(
                "rank {rank}: all-reduce {i} of {n} elements is wrong at {k}: {}",
                buf[k]
            ));
        }
        i += 1;
    }
    Err(format!(
        "rank {rank}: no call failed within {LOOP_LIMIT:?}; the victim did not die"
    ))
}

/// What a trial kills.
pub struct Trial {
    /// Draws the victim, the moments and the sizes.
    pub seed: u64,
    /// A rank kills itself in the loop (`--no-victim`: no, the failure comes from outside,
    /// say a host cut off).
    pub victim: bool,
    /// The next rank dies while the others recover (`--second-failure`).
    pub second_failure: bool,
    /// The victim stops itself (SIGSTOP) instead of dying (`--stop-victim`).
    pub stop_victim: bool,
}

/// The trial (see the module docs); the exit status of a survivor.
pub fn run(group: &Group, trial: &Trial) -> ExitCode {
    let (seed, second_failure) = (trial.seed, trial.second_failure);
    let (rank, size) = (group.rank(), group.size());
    let mut draw = Draw(seed);
    let victim = (seed % size as u64) as usize;
    let second = (victim + 1) % size;
    println!(
        "rank {rank}: job {}",
        std::env::var("PSY_JOB_ID").unwrap_or_default()
    );
    let delay = Duration::from_micros(draw.below(30_000));
    if trial.victim && rank == victim {
        let signal = if trial.stop_victim {
            libc::SIGSTOP
        } else {
            libc::SIGKILL
        };
        raise_after(rank, delay, "in the loop", signal);
    }
    let failure = match loop_until_failure(group, &mut draw) {
        Ok(e) => e,
        Err(why) => {
            eprintln!("psyne-check: {why}");
            return ExitCode::from(1);
        }
    };
    println!(
        "rank {rank}: the loop failed: {:?}: {failure}",
        failure.kind()
    );
    if second_failure && rank == second {
        die_after(
            rank,
            Duration::from_micros(draw.below(3_000)),
            "while recovering",
        );
    }
    recover(group, seed)
}

/// Recovers until a shrunk group gets through the whole check: a rank that dies after a shrink
/// completed is a new failure, met by shrinking again, as a program would. The exit status of
/// a survivor.
fn recover(group: &Group, seed: u64) -> ExitCode {
    let rank = group.rank();
    let mut current = group.clone();
    for round in 1..=3 {
        let began = Instant::now();
        let smaller = match current.revoke().and_then(|()| current.shrink()) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("psyne-check: rank {rank}: shrink failed: {e}");
                return ExitCode::from(2);
            }
        };
        let took = began.elapsed();
        let counts = conformance::default_counts(smaller.size());
        match conformance::check_all_types(&smaller, &counts, seed) {
            Ok(bad) if bad.is_empty() => {
                if let Err(why) = agreements_hold(&smaller) {
                    eprintln!("psyne-check: rank {rank}: {why}");
                    return ExitCode::from(1);
                }
                println!(
                    "rank {rank}: shrunk to {} ranks as rank {} in {:.1} ms (shrink {round}): every collective x op x type matches the oracle",
                    smaller.size(),
                    smaller.rank(),
                    took.as_secs_f64() * 1e3
                );
                return ExitCode::SUCCESS;
            }
            Ok(bad) => {
                for m in bad.iter().take(10) {
                    println!(
                        "rank {rank}: WRONG {m} (shrunk to {} ranks)",
                        smaller.size()
                    );
                }
                return ExitCode::from(1);
            }
            Err(e) => {
                println!(
                    "rank {rank}: the group shrunk to {} ranks failed too ({:?}: {e}); shrinking again",
                    smaller.size(),
                    e.kind()
                );
                current = smaller;
            }
        }
    }
    eprintln!("psyne-check: rank {rank}: still failing after 3 shrinks");
    ExitCode::from(2)
}

/// On a healthy group, agreements are the AND of the flags and find nobody gone.
fn agreements_hold(g: &Group) -> Result<(), String> {
    let mixed = g.agree(g.rank() != 0).map_err(|e| e.to_string())?;
    let all = g.agree(true).map_err(|e| e.to_string())?;
    if mixed != (g.size() == 1, vec![]) || all != (true, vec![]) {
        return Err(format!(
            "agree on the shrunk group gave {mixed:?} and {all:?}, not (false, []) and (true, [])"
        ));
    }
    Ok(())
}

/// `--revoke-trial`: rank 0 revokes the group while the others wait in an all-reduce for it;
/// they must fail with `Revoked`; then all shrink (nobody is gone: same size) and the new group
/// gets an all-reduce right.
pub fn revoke_trial(group: &Group) -> ExitCode {
    let (rank, size) = (group.rank(), group.size());
    let outcome = if rank == 0 {
        std::thread::sleep(Duration::from_millis(50));
        group.revoke().map(|()| "revoked it".to_string())
    } else {
        let mut x = vec![1.0f32; 1000];
        match group.all_reduce(&mut x, ReduceOp::Sum) {
            Ok(()) => Err(psyne::Error::invalid(
                "the all-reduce succeeded on a revoked group",
            )),
            Err(e) if e.kind() == psyne::ErrorKind::Revoked => Ok(format!("got {:?}", e.kind())),
            Err(e) => Err(e),
        }
    };
    let said = match outcome {
        Ok(s) => s,
        Err(e) => {
            eprintln!("psyne-check: rank {rank}: {e}");
            return ExitCode::from(1);
        }
    };
    let checked = group.shrink().and_then(|g| {
        let mut x = vec![(g.rank() + 1) as f64; 333];
        g.all_reduce(&mut x, ReduceOp::Sum)?;
        let want = (g.size() * (g.size() + 1) / 2) as f64;
        Ok((g.size(), x.iter().all(|&v| v == want)))
    });
    match checked {
        Ok((n, true)) if n == size => {
            println!("rank {rank}: {said}; shrunk to {n} ranks, all-reduce right");
            ExitCode::SUCCESS
        }
        Ok((n, right)) => {
            eprintln!("psyne-check: rank {rank}: shrunk to {n} ranks (of {size}), all-reduce right: {right}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("psyne-check: rank {rank}: {e}");
            ExitCode::from(2)
        }
    }
}

/// `--split-revoke-trial` (4 ranks, under `psyrun --on-failure continue`): the group is split
/// into {0, 1} and {2, 3}; rank 3 dies after 300 ms; ranks 1 and 2 wait to receive from it on the
/// parent, fail, and revoke the parent, which revokes their subgroups; rank 0, waiting in its
/// subgroup's all-reduce for rank 1 (busy recovering), must fail with `Revoked` then, not at its
/// deadline. Then the three shrink the parent and check an all-reduce on it.
pub fn split_revoke_trial(group: &Group) -> ExitCode {
    let rank = group.rank();
    match split_revoke(group) {
        Ok(said) => {
            println!("rank {rank}: {said}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("psyne-check: rank {rank}: {e}");
            ExitCode::from(2)
        }
    }
}

fn split_revoke(group: &Group) -> psyne::Result<String> {
    let rank = group.rank();
    if group.size() != 4 {
        return Err(psyne::Error::invalid("--split-revoke-trial needs 4 ranks"));
    }
    let sub = group
        .split(Some((rank / 2) as u32), rank as i64)?
        .ok_or_else(|| psyne::Error::invalid("every rank joins a subgroup"))?;
    let began = Instant::now();
    let what = match rank {
        3 => {
            die_after(rank, Duration::from_millis(300), "on purpose");
            std::thread::sleep(Duration::from_secs(60));
            unreachable!("killed")
        }
        0 => {
            let mut x = vec![1.0f32; 100];
            match sub.all_reduce(&mut x, ReduceOp::Sum) {
                Err(e) if e.kind() == psyne::ErrorKind::Revoked => format!(
                    "its subgroup's all-reduce failed with Revoked after {:.0} ms",
                    began.elapsed().as_secs_f64() * 1e3
                ),
                Err(e) => return Err(e),
                Ok(()) => return Err(psyne::Error::invalid("the subgroup call succeeded")),
            }
        }
        _ => {
            let mut x = [0u8; 1];
            match group.recv(&mut x, 3) {
                Err(e) => format!("lost rank 3 ({:?}) and revoked the parent", e.kind()),
                Ok(()) => return Err(psyne::Error::invalid("received from rank 3")),
            }
        }
    };
    group.revoke()?;
    let smaller = group.shrink()?;
    let mut x = vec![(smaller.rank() + 1) as f64; 100];
    smaller.all_reduce(&mut x, ReduceOp::Sum)?;
    if x.iter().any(|&v| v != 6.0) || smaller.size() != 3 {
        return Err(psyne::Error::invalid(format!(
            "the shrunk group of {} summed to {}",
            smaller.size(),
            x[0]
        )));
    }
    Ok(format!("{what}; shrunk to 3 ranks, all-reduce right"))
}
