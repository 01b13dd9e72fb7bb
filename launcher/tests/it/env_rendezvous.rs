//! `env://` without psyrun (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` set by hand or by
//! a script, as torchrun would): processes that disagree on `WORLD_SIZE`, or two that say they
//! are the same rank, fail the whole job, every process with an error naming the disagreement,
//! well before `PSY_TIMEOUT`.

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Each process's `PSY_TIMEOUT`; the errors must come well before it.
const PSY_TIMEOUT: u64 = 30;

fn check_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_psyne-check"))
}

/// Starts psyne-check as `RANK=rank`, `WORLD_SIZE=world_size` of the job at `port`, with
/// `PSY_TIMEOUT=timeout` (seconds).
fn start(rank: usize, world_size: usize, port: u16, secret: &str, timeout: u64) -> Child {
    Command::new(check_bin())
        .args(["--counts", "5"])
        .env_clear()
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world_size.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("PSY_JOB_SECRET", secret)
        .env("PSY_TIMEOUT", timeout.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting psyne-check")
}

/// Starts the processes `(RANK, WORLD_SIZE)` (rank 0 first: it serves the store) and returns,
/// for each, whether it succeeded and its stderr. Each must end within half of `PSY_TIMEOUT`
/// (past that, all of them are killed, by pid, and the test fails).
fn job(members: &[(usize, usize)]) -> Vec<(bool, String)> {
    job_within(members, PSY_TIMEOUT, Duration::from_secs(PSY_TIMEOUT / 2))
}

/// [`job`] with `PSY_TIMEOUT=timeout` for a job that fails at its deadline: it must end within
/// three times that (the deadline, the processes' start on a busy machine, rank 0's wait for the
/// others to read the verdict).
fn job_with_timeout(members: &[(usize, usize)], timeout: u64) -> Vec<(bool, String)> {
    job_within(members, timeout, Duration::from_secs(3 * timeout))
}

/// Starts `members` with `PSY_TIMEOUT=timeout`; they must end within `limit`.
fn job_within(members: &[(usize, usize)], timeout: u64, limit: Duration) -> Vec<(bool, String)> {
    // A port for MASTER_PORT, reserved for this job until it ends.
    let reserved = common::free_port();
    let port = reserved.port();
    let secret = psyne::Secret::generate().unwrap().to_hex();
    let mut children: Vec<Child> = members
        .iter()
        .map(|&(rank, size)| start(rank, size, port, &secret, timeout))
        .collect();
    let started = Instant::now();
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        if started.elapsed() > limit {
            for c in &mut children {
                let _ = c.kill();
                let _ = c.wait();
            }
            panic!(
                "the job {members:?} did not end within {limit:?} (PSY_TIMEOUT {PSY_TIMEOUT} s)"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .collect()
}

#[test]
fn ranks_that_disagree_on_world_size_all_fail_naming_both_sizes() {
    let results = job(&[(0, 2), (1, 3)]);
    for (i, (ok, err)) in results.iter().enumerate() {
        assert!(!ok, "process {i} succeeded: {results:?}");
        assert!(
            err.contains("the job cannot form: rank 1 says WORLD_SIZE=3, rank 0 says 2"),
            "process {i}: {err}"
        );
    }
}

#[test]
fn a_rank_started_twice_fails_every_process_naming_it() {
    // Ranks 0, 1 and 1 of a world of 3: no rank 2 ever comes, and the duplicate is named.
    let results = job(&[(0, 3), (1, 3), (1, 3)]);
    for (i, (ok, err)) in results.iter().enumerate() {
        assert!(!ok, "process {i} succeeded: {results:?}");
        assert!(
            err.contains("the job cannot form: rank 1 joined twice (pid "),
            "process {i}: {err}"
        );
        assert!(
            err.contains("were both started with RANK=1"),
            "process {i}: {err}"
        );
    }
}

#[test]
fn a_rank_that_never_comes_is_named_by_every_process_at_the_deadline() {
    // Ranks 0 and 2 of 3: rank 1 is never started. Each process's PSY_TIMEOUT is short here; the
    // job must end within it (plus the time to start), every process naming rank 1.
    let results = job_with_timeout(&[(0, 3), (2, 3)], 3);
    for (i, (ok, err)) in results.iter().enumerate() {
        assert!(!ok, "process {i} succeeded: {results:?}");
        assert!(
            err.contains(
                "the job cannot form: rank 1 of WORLD_SIZE=3 never checked in within PSY_TIMEOUT"
            ),
            "process {i}: {err}"
        );
    }
}
