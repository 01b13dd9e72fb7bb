//! psyne collectives in real processes under psyrun: every collective × op × type against the
//! oracle, and the failures a job must survive or report (a rank that exits, one killed by
//! SIGKILL, ranks that disagree about a count, a stranger at the store, Ctrl-C).

use crate::common;

use common::*;
use std::path::PathBuf;
use std::time::Duration;

fn check_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_psyne-check"))
}

/// The ranks' `PSY_TIMEOUT` under [`psyrun_check`]: a rank that hung would end only after it.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

fn psyrun_check(dir: &TempDir, n: usize, extra: &[&str]) -> std::process::Command {
    let mut cmd = psyrun(dir);
    cmd.args(["-n", &n.to_string(), "--tag-output", "--grace", "2"])
        .arg(check_bin())
        .args(extra);
    cmd.env("PSY_TIMEOUT", CHECK_TIMEOUT.as_secs().to_string());
    cmd
}

#[test]
fn every_collective_matches_the_oracle_in_4_processes() {
    let dir = TempDir::new("check4");
    let done = run(psyrun_check(&dir, 4, &[]), &dir);
    assert_eq!(
        done.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    for rank in 0..4 {
        let line =
            format!("[{rank}] rank {rank}/4: every collective x op x type matches the oracle");
        assert!(
            done.stdout.contains(&line),
            "missing `{line}` in:\n{}",
            done.stdout
        );
    }
}

#[test]
fn every_collective_matches_the_oracle_in_5_oversubscribed_processes() {
    let dir = TempDir::new("check5");
    let done = run(psyrun_check(&dir, 5, &["--counts", "0,4,6,777"]), &dir);
    assert_every_rank_matched(&done, 5);
}

/// Canonical reduce order in processes: `PSY_REDUCE_ORDER=canonical` over TCP (3 ranks) and
/// `--reduce-order canonical` over shared memory (4 ranks; 4500 f32 or f64 take the staging
/// buffers in /dev/shm) make psyne-check also compare float sums, products and means bit for bit
/// with the rank-order oracle, which they must match.
#[test]
fn canonical_order_matches_the_oracle_bit_for_bit_in_processes() {
    let dir = TempDir::new("canonical3");
    let mut cmd = psyrun_check(&dir, 3, &["--counts", "5,3001"]);
    cmd.env("PSY_REDUCE_ORDER", "canonical")
        .env("PSY_TRANSPORT", "tcp");
    let done = run(cmd, &dir);
    assert_every_rank_matched(&done, 3);
    assert_eq!(
        done.stdout.matches("bit for bit").count(),
        3,
        "{}",
        done.stdout
    );
    let dir = TempDir::new("canonical4");
    let args = ["--counts", "7,4500", "--reduce-order", "canonical"];
    let mut cmd = psyrun_check(&dir, 4, &args);
    cmd.env("PSY_TRANSPORT", "shm");
    let done = run(cmd, &dir);
    assert_every_rank_matched(&done, 4);
    assert_eq!(
        done.stdout.matches("bit for bit").count(),
        4,
        "{}",
        done.stdout
    );
}

#[test]
fn a_rank_exiting_3_makes_psyrun_exit_3_and_the_others_report_the_lost_peer() {
    let dir = TempDir::new("exit3");
    let done = run(psyrun_check(&dir, 3, &["--fault", "exit3:1"]), &dir);
    assert_eq!(done.code(), Some(3), "stderr:\n{}", done.stderr);
    assert!(
        done.stderr.contains("rank 1 (pid") && done.stderr.contains("exited with code 3"),
        "{}",
        done.stderr
    );
    // Survivors either noticed the lost peer (naming it) or were stopped by psyrun first.
    for line in done.stdout.lines().filter(|l| l.contains("error kind")) {
        assert!(
            line.contains("PeerLost") && line.contains("rank 1"),
            "{line}"
        );
    }
}

#[test]
fn a_hung_rank_is_named_rather_than_the_first_rank_that_timed_out_waiting_for_it() {
    // Rank 1 hangs; ranks 0 and 2 time out waiting for it and exit 2, and each records in the
    // job's store that it lost rank 1: psyrun names rank 1 and stops it.
    for transport in ["tcp", "shm"] {
        let dir = TempDir::new("hang");
        let mut cmd = psyrun_check(&dir, 3, &["--fault", "hang:1"]);
        cmd.env("PSY_TIMEOUT", "2").env("PSY_TRANSPORT", transport);
        let done = run(cmd, &dir);
        assert_eq!(done.code(), Some(2), "stderr:\n{}", done.stderr);
        let first = done
            .stderr
            .lines()
            .find(|l| l.starts_with("psyrun: rank "))
            .unwrap_or_default();
        assert!(
            first.starts_with("psyrun: rank 1 (pid") && first.contains("the others lost"),
            "{transport}: the first failure named should be rank 1:\n{}",
            done.stderr
        );
    }
}

#[test]
fn a_rank_killed_by_sigkill_gives_137() {
    let dir = TempDir::new("kill9");
    let done = run(psyrun_check(&dir, 3, &["--fault", "sigkill:2"]), &dir);
    assert_eq!(done.code(), Some(137), "stderr:\n{}", done.stderr);
    assert!(
        done.stderr.contains("rank 2") && done.stderr.contains("SIGKILL"),
        "{}",
        done.stderr
    );
}

#[test]
fn ranks_disagreeing_about_the_count_get_a_mismatch_error_not_a_hang() {
    let dir = TempDir::new("count");
    let done = run(psyrun_check(&dir, 3, &["--fault", "count:1"]), &dir);
    assert_eq!(
        done.code(),
        Some(2),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    // A hang would last the ranks' PSY_TIMEOUT (see psyrun_check); the mismatch ends it sooner.
    assert!(done.elapsed < CHECK_TIMEOUT, "took {:?}", done.elapsed);
    let reports: Vec<&str> = done
        .stdout
        .lines()
        .filter(|l| l.contains("error kind"))
        .collect();
    assert!(!reports.is_empty(), "{}", done.stdout);
    for line in reports {
        assert!(
            line.contains("Mismatch") && line.contains("count 10") && line.contains("count 20"),
            "{line}"
        );
    }
}

#[test]
fn a_stranger_at_the_store_is_refused_and_the_job_goes_on() {
    let dir = TempDir::new("stranger");
    let done = run(psyrun_check(&dir, 3, &["--fault", "stranger:0"]), &dir);
    assert_eq!(
        done.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    assert!(
        done.stdout.contains("stranger refused as expected"),
        "{}",
        done.stdout
    );
    assert!(
        done.stderr.contains("refused a connection"),
        "the refusal is logged: {}",
        done.stderr
    );
    assert_eq!(
        done.stdout.matches("all_reduce succeeded").count(),
        3,
        "{}",
        done.stdout
    );
}

#[test]
fn ctrl_c_during_a_blocked_collective_leaves_no_process_behind() {
    let dir = TempDir::new("ctrlc");
    let job = Job::start(psyrun_check(&dir, 3, &["--fault", "hang:1"]), &dir);
    let mut pids = Vec::new();
    eventually(DEADLINE, "3 ranks to start", || {
        // psyrun's children are the ranks and its watchdog (a fork of psyrun).
        pids = children(job.pid())
            .into_iter()
            .filter(|&p| common::command_name(p) == "psyne-check")
            .collect();
        pids.len() == 3
    });
    job.signal(libc::SIGINT);
    let done = job.wait(DEADLINE);
    assert_eq!(done.code(), Some(130), "stderr:\n{}", done.stderr);
    eventually(DEADLINE, "every rank to be gone", || {
        pids.iter().all(|&p| gone(p))
    });
}

#[test]
fn without_psyrun_rank_0_serves_the_store_at_master_addr_like_under_torchrun() {
    // A port for MASTER_PORT, reserved for this job until it ends.
    let reserved = free_port();
    let port = reserved.port();
    let secret = psyne::Secret::generate().unwrap().to_hex();
    let ranks: Vec<_> = (0..3)
        .map(|rank| {
            std::process::Command::new(check_bin())
                .args(["--counts", "0,5,300"])
                .env_clear()
                .env("RANK", rank.to_string())
                // As torchrun gives each run: psyne names the job's shared memory after it, and
                // other env:// jobs may run on this host meanwhile (in this test binary too).
                .env("TORCHELASTIC_RUN_ID", format!("test{port}"))
                .env("WORLD_SIZE", "3")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("PSY_JOB_SECRET", &secret)
                .env("PSY_TIMEOUT", "30")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("starting psyne-check")
        })
        .collect();
    // Each process has its own deadline (PSY_TIMEOUT), so these waits end.
    for (rank, child) in ranks.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "rank {rank}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(&format!("rank {rank}/3: every collective")),
            "{text}"
        );
    }
}

#[test]
fn a_rank_killed_during_a_large_shm_all_reduce_fails_the_others_and_leaves_no_segment() {
    let dir = TempDir::new("shmkill");
    let mut cmd = psyrun_check(&dir, 3, &["--fault", "sigkill-during:1"]);
    let timeout = Duration::from_secs(20);
    cmd.env("PSY_TRANSPORT", "shm")
        .env("PSY_TIMEOUT", timeout.as_secs().to_string());
    let done = run(cmd, &dir);
    assert_eq!(
        done.code(),
        Some(137),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    // The others learned of the death, not from their own PSY_TIMEOUT.
    assert!(done.elapsed < timeout, "took {:?}", done.elapsed);
    assert!(
        done.stderr.contains("rank 1") && done.stderr.contains("SIGKILL"),
        "{}",
        done.stderr
    );
    // Survivors that reported before psyrun stopped them name the dead rank.
    for line in done.stdout.lines().filter(|l| l.contains("error kind")) {
        assert!(
            line.contains("PeerLost") && line.contains("rank 1"),
            "{line}"
        );
    }
    assert_no_segments_left(&done.stdout, "");
}

#[test]
fn single_copy_pulls_between_processes_match_the_oracle() {
    // PSY_SHM_CMA_MIN=1024: nearly every payload is read straight out of the sender's memory
    // (process_vm_readv) instead of passing through the rings.
    let dir = TempDir::new("cma");
    let mut cmd = psyrun_check(&dir, 3, &["--counts", "0,1001,20000"]);
    cmd.env("PSY_TRANSPORT", "shm")
        .env("PSY_SHM_CMA", "1")
        .env("PSY_SHM_CMA_MIN", "1024");
    let done = run(cmd, &dir);
    assert_every_rank_matched(&done, 3);
}

#[test]
fn eight_ranks_on_two_cores_complete_every_collective_over_shared_memory() {
    let dir = TempDir::new("check8");
    let mut cmd = psyrun_check(&dir, 8, &["--counts", "0,9,1001"]);
    cmd.env("PSY_TRANSPORT", "shm");
    let done = run(cmd, &dir);
    assert_every_rank_matched(&done, 8);
}
