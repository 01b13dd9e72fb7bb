//! `psyrun --max-restarts N` with real processes: a job whose rank fails is started again as a
//! new generation (new job id and secret, `PSY_RESTART_COUNT` counting up, nothing of the last
//! attempt left running or in /dev/shm) until it succeeds or the restarts run out; a signal or the
//! timeout ends it without a restart.

use crate::common;

use common::*;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

fn check_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_psyne-check"))
}

/// Every value of `key=VALUE` words in `text`, in order.
fn values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.split_whitespace()
        .filter_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

/// A rank script: says its generation, then rank 1 fails with `fail` (a shell command) in
/// every attempt below `until`, once every rank of the attempt has spoken.
fn flaky(dir: &TempDir, fail: &str, until: usize) -> PathBuf {
    dir.script(
        "flaky.sh",
        &format!(
            r#"#!/bin/sh
secret=$(printf %s "$PSY_JOB_SECRET" | cut -c1-16)
echo "rank=$PSY_RANK attempt=$PSY_RESTART_COUNT max=$PSY_MAX_RESTARTS torch=$TORCHELASTIC_RESTART_COUNT job=$PSY_JOB_ID secret=$secret"
touch "$D/said.$PSY_RESTART_COUNT.$PSY_RANK"
if [ "$PSY_RANK" = 1 ] && [ "$PSY_RESTART_COUNT" -lt {until} ]; then
  i=0; while [ "$(ls "$D" | grep -c "^said\.$PSY_RESTART_COUNT\.")" -lt "$PSY_WORLD_SIZE" ]; do
    i=$((i+1)); [ $i -gt 1000 ] && exit 99; sleep 0.01; done
  {fail}
fi
exit 0
"#
        ),
        0o755,
    )
}

#[test]
fn a_failing_job_is_started_again_as_a_new_generation_until_it_succeeds() {
    let dir = TempDir::new("restart-ok");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "3", "--max-restarts", "4"])
        .arg(flaky(&dir, "kill -9 $$", 2));
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "stderr:\n{}", done.stderr);
    let attempts: Vec<&str> = values(&done.stdout, "attempt");
    assert_eq!(attempts.len(), 9, "3 ranks x 3 attempts:\n{}", done.stdout);
    for a in ["0", "1", "2"] {
        assert_eq!(
            attempts.iter().filter(|&&x| x == a).count(),
            3,
            "{attempts:?}"
        );
    }
    assert_eq!(
        values(&done.stdout, "torch"),
        attempts,
        "torchrun's name agrees"
    );
    assert!(values(&done.stdout, "max").iter().all(|&m| m == "4"));
    let jobs: BTreeSet<&str> = values(&done.stdout, "job").into_iter().collect();
    let secrets: BTreeSet<&str> = values(&done.stdout, "secret").into_iter().collect();
    assert_eq!(jobs.len(), 3, "a job id per attempt: {jobs:?}");
    assert_eq!(secrets.len(), 3, "a secret per attempt: {secrets:?}");
    for line in [
        "attempt 1 failed: rank 1",
        "starting the job again (restart 1 of 4",
        "attempt 2 failed: rank 1",
        "starting the job again (restart 2 of 4",
        "3 attempts, 2 restarts of at most 4:",
        "attempt 3 (PSY_RESTART_COUNT=2): succeeded",
        "time in failed attempts",
    ] {
        assert!(
            done.stderr.contains(line),
            "{line:?} missing:\n{}",
            done.stderr
        );
    }
}

#[test]
fn a_job_failing_every_time_stops_at_the_limit_with_the_last_attempts_code() {
    let dir = TempDir::new("restart-limit");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "--max-restarts", "2"])
        .arg(flaky(&dir, "exit 7", 99));
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(7), "stderr:\n{}", done.stderr);
    assert_eq!(values(&done.stdout, "attempt").len(), 6, "{}", done.stdout);
    assert!(
        done.stderr.contains("attempt 3 failed: rank 1 (pid")
            && done.stderr.contains("no restarts left (--max-restarts 2)")
            && done.stderr.contains("3 attempts, 2 restarts of at most 2:"),
        "{}",
        done.stderr
    );
    assert_eq!(
        done.stderr.matches("exited with code 7").count(),
        9,
        "each failure is named by the supervisor, by the restart decision and in the summary:\n{}",
        done.stderr
    );
}

#[test]
fn without_max_restarts_a_failure_ends_the_job_and_nothing_is_said_of_attempts() {
    let dir = TempDir::new("restart-none");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2"]).arg(flaky(&dir, "exit 5", 99));
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(5));
    assert_eq!(values(&done.stdout, "attempt"), ["0", "0"]);
    assert!(!done.stderr.contains("attempt"), "{}", done.stderr);
}

#[test]
fn no_rank_of_a_failed_attempt_is_alive_when_the_next_starts() {
    // Rank 0 of the first attempt ignores SIGTERM and records its pid; the next attempt's rank 0
    // checks that it is gone (psyrun killed it after the grace period, before restarting).
    let dir = TempDir::new("restart-straggler");
    let script = dir.script(
        "straggler.sh",
        r#"#!/bin/sh
if [ "$PSY_RESTART_COUNT" = 0 ]; then
  if [ "$PSY_RANK" = 0 ]; then trap '' TERM; echo $$ > "$D/first"; sleep 30; fi
  while [ ! -s "$D/first" ]; do sleep 0.01; done
  exit 3
fi
old=$(cat "$D/first")
if kill -0 "$old" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$old/status"; then
  echo "straggler $old alive"; exit 9
fi
echo "rank $PSY_RANK: attempt $PSY_RESTART_COUNT sees no straggler"
"#,
        0o755,
    );
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "--max-restarts", "1", "--grace", "0.5"])
        .arg(script);
    let done = run(cmd, &dir);
    assert_eq!(
        done.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    assert_eq!(done.stdout.matches("sees no straggler").count(), 2);
}

#[test]
fn a_signal_to_psyrun_stops_the_job_without_a_restart() {
    let dir = TempDir::new("restart-signal");
    let script = dir.script(
        "sleepy.sh",
        &format!("#!/bin/sh\necho attempt=$PSY_RESTART_COUNT\n{RECORD_PID}\nexec sleep 30\n"),
        0o755,
    );
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "--max-restarts", "3", "--grace", "1"])
        .arg(script);
    let mut job = Job::start(cmd, &dir);
    job.wait_for_pids(2);
    job.signal(libc::SIGTERM);
    let done = job.wait(DEADLINE);
    assert_eq!(done.code(), Some(143), "stderr:\n{}", done.stderr);
    assert_eq!(
        values(&done.stdout, "attempt"),
        ["0", "0"],
        "no second attempt"
    );
    assert!(
        !done.stderr.contains("starting the job again"),
        "{}",
        done.stderr
    );
}

#[test]
fn the_timeout_counts_across_attempts() {
    let dir = TempDir::new("restart-timeout");
    let script = dir.script(
        "slowfail.sh",
        "#!/bin/sh\necho attempt=$PSY_RESTART_COUNT\nsleep 0.4\n[ \"$PSY_RANK\" = 1 ] && exit 4\nexit 0\n",
        0o755,
    );
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "--max-restarts", "100", "--timeout", "1.5"])
        .arg(script);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(124), "stderr:\n{}", done.stderr);
    let attempts = values(&done.stdout, "attempt").len() / 2;
    assert!(
        (1..=5).contains(&attempts),
        "about 1.5 s / 0.4 s attempts (fewer on a loaded machine), not 101: {attempts}\n{}",
        done.stderr
    );
    // Far less than the 101 attempts of 0.4 s each that a timeout per attempt would allow.
    let all_attempts = Duration::from_millis(400) * 101;
    assert!(done.elapsed < all_attempts / 2, "{:?}", done.elapsed);
}

/// psyne's collectives after a restart: rank 1 dies by SIGKILL inside a large all-reduce in the
/// first attempt; the second attempt's ranks form a new group, and every collective matches
/// the oracle. Neither attempt leaves shared memory behind.
fn a_rank_killed_in_a_collective_is_restarted_and_the_job_checks_out(transport: &str) {
    let dir = TempDir::new(&format!("restart-psyne-{transport}"));
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "3", "--max-restarts", "2", "--grace", "2"])
        .arg(check_bin())
        .args(["--fault", "sigkill-during:1", "--fault-attempts", "1"])
        .env("PSY_TRANSPORT", transport)
        .env("PSY_TIMEOUT", "20");
    let done = run(cmd, &dir);
    assert_eq!(
        done.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    assert!(
        done.stderr.contains("attempt 1 failed: rank 1")
            && done.stderr.contains("SIGKILL")
            && done
                .stderr
                .contains("attempt 2 (PSY_RESTART_COUNT=1): succeeded"),
        "{}",
        done.stderr
    );
    assert_eq!(
        done.stdout
            .matches("every collective x op x type matches the oracle")
            .count(),
        3,
        "{}",
        done.stdout
    );
    let ids = job_ids(&done.stdout);
    assert_eq!(ids.len(), 2, "one job id per attempt: {ids:?}");
    for id in &ids {
        let left = segments_of(id);
        assert!(left.is_empty(), "job {id} left {left:?} in /dev/shm");
    }
}

#[test]
fn a_rank_killed_in_a_shm_collective_is_restarted_and_the_job_checks_out() {
    a_rank_killed_in_a_collective_is_restarted_and_the_job_checks_out("shm");
}

#[test]
fn a_rank_killed_in_a_tcp_collective_is_restarted_and_the_job_checks_out() {
    a_rank_killed_in_a_collective_is_restarted_and_the_job_checks_out("tcp");
}
