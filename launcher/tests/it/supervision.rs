//! Failures, signals and timeouts end the whole job with the right code and leave no rank behind.

use crate::common;

use common::*;
use std::time::Duration;

/// A rank that records its pid and then *is* a sleeping process for five minutes.
fn sleeper() -> String {
    format!("{RECORD_PID}; exec sleep 300")
}

fn assert_all_gone(pids: &[i32]) {
    eventually(DEADLINE, "every rank to be gone", || {
        pids.iter().all(|&p| gone(p))
    });
}

#[test]
fn a_failing_ranks_code_is_psyruns_and_the_others_are_stopped() {
    let dir = TempDir::new("fail");
    let script = format!(
        r#"if [ "$PSY_RANK" = 0 ]; then {}; exit 3; fi; {}"#,
        wait_for_pids_sh(3),
        sleeper()
    );
    let mut cmd = psyrun(&dir);
    let grace = Duration::from_secs(60);
    let grace_arg = grace.as_secs().to_string();
    cmd.args(["-n", "4", "--grace", &grace_arg, "sh", "-c", &script]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(3), "stderr: {}", done.stderr);
    assert!(
        done.stderr.contains("psyrun: rank 0 (pid ")
            && done
                .stderr
                .contains(") exited with code 3; stopping the other 3 ranks"),
        "{}",
        done.stderr
    );
    // SIGTERM ends `sleep` at once: no need for the grace period (a fraction of it is plenty).
    assert!(done.elapsed < grace / 4, "took {:?}", done.elapsed);
    let pids = rank_pids(dir.path());
    assert_eq!(pids.len(), 3);
    assert_all_gone(&pids);
}

#[test]
fn a_rank_killed_by_sigkill_gives_137() {
    let dir = TempDir::new("sigkill-rank");
    let script = format!(
        r#"if [ "$PSY_RANK" = 1 ]; then {}; kill -9 $$; fi; {}"#,
        wait_for_pids_sh(1),
        sleeper()
    );
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "sh", "-c", &script]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(137), "stderr: {}", done.stderr);
    assert!(
        done.stderr.contains("rank 1 (pid ")
            && done
                .stderr
                .contains("killed by signal 9 (SIGKILL); stopping the other rank"),
        "{}",
        done.stderr
    );
    assert_all_gone(&rank_pids(dir.path()));
}

#[test]
fn ranks_that_ignore_sigterm_are_killed_after_the_grace_period() {
    let dir = TempDir::new("grace");
    let script = format!(
        r#"if [ "$PSY_RANK" = 0 ]; then {}; exit 1; fi; trap '' TERM; {}"#,
        wait_for_pids_sh(2),
        sleeper()
    );
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "3", "--grace", "0.5", "sh", "-c", &script]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(1), "stderr: {}", done.stderr);
    assert!(
        done.stderr
            .contains("2 ranks still running 500ms after SIGTERM"),
        "{}",
        done.stderr
    );
    assert!(done.stderr.contains("sending SIGKILL"), "{}", done.stderr);
    assert!(done.elapsed >= Duration::from_millis(500));
    assert_all_gone(&rank_pids(dir.path()));
}

#[test]
fn the_timeout_stops_the_job_with_124() {
    let dir = TempDir::new("timeout");
    let mut cmd = psyrun(&dir);
    cmd.args([
        "-n",
        "2",
        "--timeout",
        "1",
        "--grace",
        "60",
        "sh",
        "-c",
        &sleeper(),
    ]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(124), "stderr: {}", done.stderr);
    assert!(
        done.stderr
            .contains("ran longer than --timeout 1s; stopping 2 ranks"),
        "{}",
        done.stderr
    );
    assert!(done.elapsed >= Duration::from_secs(1) && done.elapsed < Duration::from_secs(30));
    assert_all_gone(&rank_pids(dir.path()));
}

#[test]
fn sigint_stops_every_rank_and_exits_130() {
    let dir = TempDir::new("sigint");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "3", "sh", "-c", &sleeper()]);
    let mut job = Job::start(cmd, &dir);
    let pids = job.wait_for_pids(3);
    job.signal(libc::SIGINT);
    let done = job.wait(DEADLINE);
    assert_eq!(done.code(), Some(130), "stderr: {}", done.stderr);
    assert!(
        done.stderr
            .contains("psyrun: received SIGINT; stopping 3 ranks"),
        "{}",
        done.stderr
    );
    assert_all_gone(&pids);
}

#[test]
fn sigterm_and_sighup_give_128_plus_the_signal() {
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGHUP, 129)] {
        let dir = TempDir::new("sigterm");
        let mut cmd = psyrun(&dir);
        cmd.args(["-n", "2", "sh", "-c", &sleeper()]);
        let mut job = Job::start(cmd, &dir);
        let pids = job.wait_for_pids(2);
        job.signal(sig);
        let done = job.wait(DEADLINE);
        assert_eq!(done.code(), Some(code), "stderr: {}", done.stderr);
        assert_all_gone(&pids);
    }
}

#[test]
fn a_second_sigint_skips_the_grace_period() {
    let dir = TempDir::new("sigint2");
    let mut cmd = psyrun(&dir);
    let script = format!("trap '' TERM; {}", sleeper());
    cmd.args(["-n", "2", "--grace", "120", "sh", "-c", &script]);
    let mut job = Job::start(cmd, &dir);
    let pids = job.wait_for_pids(2);
    job.signal(libc::SIGINT);
    // Two signals sent back to back may arrive as one: wait until psyrun acted on the first.
    eventually(DEADLINE, "psyrun to act on the first SIGINT", || {
        job.stderr.text().contains("received SIGINT; stopping")
    });
    job.signal(libc::SIGINT);
    let done = job.wait(DEADLINE);
    assert_eq!(done.code(), Some(130), "stderr: {}", done.stderr);
    assert!(
        done.stderr
            .contains("received SIGINT again; killing the 2 ranks still running now"),
        "{}",
        done.stderr
    );
    assert_all_gone(&pids);
}

#[test]
fn ranks_die_with_psyrun_even_when_it_is_sigkilled() {
    let dir = TempDir::new("pdeathsig");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "3", "sh", "-c", &sleeper()]);
    let mut job = Job::start(cmd, &dir);
    let pids = job.wait_for_pids(3);
    job.signal(libc::SIGKILL);
    let done = job.wait(DEADLINE);
    assert_eq!(done.status.code(), None, "psyrun was killed");
    assert_all_gone(&pids);
}

#[test]
fn grandchildren_die_with_psyrun_even_when_it_is_sigkilled() {
    let dir = TempDir::new("gc-sigkill");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "sh", "-c", GRANDCHILD]);
    let job = Job::start(cmd, &dir);
    let grandchildren = Known::grandchildren(&dir, 2);
    job.signal(libc::SIGKILL);
    let done = job.wait(DEADLINE);
    assert_eq!(done.status.code(), None, "psyrun was killed");
    grandchildren.assert_gone(Duration::from_secs(10));
}

#[test]
fn grandchildren_go_on_sigterm() {
    let dir = TempDir::new("gc-term");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "sh", "-c", GRANDCHILD]);
    let job = Job::start(cmd, &dir);
    let grandchildren = Known::grandchildren(&dir, 2);
    job.signal(libc::SIGTERM);
    let done = job.wait(DEADLINE);
    assert_eq!(done.code(), Some(143), "stderr: {}", done.stderr);
    grandchildren.assert_gone(Duration::from_secs(10));
}

/// Kills, on drop, every process still tagged `PSYRUN_TEST_TAG=.0` (those this test started,
/// by pid, each checked for the tag a moment before), so a failing test leaves nothing.
struct KillTagged(String);

impl Drop for KillTagged {
    fn drop(&mut self) {
        for pid in tagged(&self.0) {
            // SAFETY: kill takes plain integers; the pid carried this test's unique tag.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// psyrun SIGKILLed the instant a rank's start returns (`PSYRUN_TEST_SIGKILL_AFTER_SPAWN`, a
/// test hook), on the first start and on a restart: that rank and what it starts die too, as
/// every other rank of the attempt. (Until the ranks told the watchdog their process group
/// themselves, before their program ran, that rank survived psyrun.)
#[test]
fn a_rank_started_the_instant_before_psyrun_is_sigkilled_dies_with_the_rest() {
    // (attempt whose start psyrun dies in, --max-restarts, the rank after whose start it dies)
    for (attempt, restarts, rank) in [(0, 0, 1), (1, 1, 2)] {
        let dir = TempDir::new(&format!("start-window-{attempt}"));
        let tag = format!("start-window-{}-{attempt}", std::process::id());
        let _cleanup = KillTagged(tag.clone());
        let mut cmd = psyrun(&dir);
        // The first attempt of the restarted job fails at once (rank 0 exits 1).
        let script = r#"[ "$PSY_MAX_RESTARTS$PSY_RESTART_COUNT$PSY_RANK" != 100 ] || exit 1; sleep 300 & wait"#;
        cmd.args(["-n", "3", "--max-restarts", &restarts.to_string()])
            .args(["-x", &format!("PSYRUN_TEST_TAG={tag}")])
            .args(["sh", "-c", script])
            .env(
                "PSYRUN_TEST_SIGKILL_AFTER_SPAWN",
                format!("{attempt}:{rank}"),
            );
        let done = Job::start(cmd, &dir).wait(DEADLINE);
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&done.status),
            Some(libc::SIGKILL),
            "psyrun killed itself after starting rank {rank} of attempt {attempt}: {}",
            done.stderr
        );
        let limit = Duration::from_secs(10);
        let until = std::time::Instant::now() + limit;
        let mut left = tagged(&tag);
        while !left.is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
            left = tagged(&tag);
        }
        let described: Vec<String> = left
            .iter()
            .map(|p| {
                let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                let env = std::fs::read(format!("/proc/{p}/environ")).unwrap_or_default();
                let rank_var = env
                    .split(|&b| b == 0)
                    .find(|v| v.starts_with(b"PSY_RANK="))
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                format!(
                    "pid {p} {rank_var}: {}",
                    String::from_utf8_lossy(&cmdline).replace('\0', " ")
                )
            })
            .collect();
        assert!(
            left.is_empty(),
            "attempt {attempt}: still running {limit:?} after psyrun died: {described:?}"
        );
    }
}

/// A rank stopped by SIGSTOP while every other rank ends: nothing in the job can resume it, so
/// psyrun kills it after `--grace`, names it, and ends with 128 + 9 instead of waiting forever
/// (also under `--on-failure continue`).
#[test]
fn a_rank_left_stopped_when_the_others_end_is_killed_and_named() {
    for policy in ["stop", "continue"] {
        let dir = TempDir::new(&format!("left-stopped-{policy}"));
        let mut cmd = psyrun(&dir);
        cmd.args(["-n", "3", "--grace", "1", "--on-failure", policy])
            .args([
                "sh",
                "-c",
                r#"[ "$PSY_RANK" != 1 ] || kill -STOP $$; exit 0"#,
            ]);
        let done = Job::start(cmd, &dir).wait(DEADLINE);
        assert_eq!(done.code(), Some(137), "{policy}: {}", done.stderr);
        assert!(
            done.stderr.contains(
                "is stopped (SIGSTOP) and every other rank has ended: nothing in the job can resume it"
            ) && done.stderr.contains(
                "killed by signal 9 (SIGKILL), by psyrun, after it stayed stopped with every other rank ended"
            ),
            "{policy}: {}",
            done.stderr
        );
    }
}
