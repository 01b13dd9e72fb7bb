//! MPMD: several programs, each with its own rank count and arguments, form one world.

use crate::common;

use common::*;
use std::path::PathBuf;

#[test]
fn a_server_and_four_workers_are_one_world_of_five() {
    let dir = TempDir::new("mpmd");
    let body = r#"echo "rank=$PSY_RANK world=$PSY_WORLD_SIZE local=$PSY_LOCAL_RANK/$PSY_LOCAL_SIZE torch=$RANK/$WORLD_SIZE prog=$(basename "$0") args=$*""#;
    let server = dir.script("server", &format!("#!/bin/sh\n{body}\n"), 0o755);
    let worker = dir.script("worker", &format!("#!/bin/sh\n{body}\n"), 0o755);
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "1"])
        .arg(&server)
        .args(["--port", "7"])
        .args([":", "-n", "4"])
        .arg(&worker)
        .args(["--threads", "2", "a b"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let mut lines: Vec<&str> = done.stdout.lines().collect();
    lines.sort();
    let mut want = vec!["rank=0 world=5 local=0/5 torch=0/5 prog=server args=--port 7".to_string()];
    for r in 1..5 {
        want.push(format!(
            "rank={r} world=5 local={r}/5 torch={r}/5 prog=worker args=--threads 2 a b"
        ));
    }
    assert_eq!(lines, want, "{}", done.stdout);
}

#[test]
fn the_programs_of_an_mpmd_job_share_one_store_and_run_collectives_together() {
    let check = PathBuf::from(env!("CARGO_BIN_EXE_psyne-check"));
    let dir = TempDir::new("mpmd-check");
    let mut cmd = psyrun(&dir);
    cmd.env("PSY_TIMEOUT", "30")
        .args(["--tag-output", "--grace", "2", "-n", "1"])
        .arg(&check)
        .args(["--counts", "0,5"])
        .args([":", "-n", "2"])
        .arg(&check)
        .args(["--counts", "0,5"]);
    let done = run(cmd, &dir);
    assert_eq!(
        done.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    for r in 0..3 {
        let want = format!("[{r}] rank {r}/3: every collective x op x type matches the oracle");
        assert!(
            done.stdout.contains(&want),
            "missing `{want}` in:\n{}",
            done.stdout
        );
    }
}

#[test]
fn a_bad_part_is_a_usage_error_and_starts_nothing() {
    let dir = TempDir::new("mpmd-bad");
    let mark = r#"touch "$D/started""#;
    for (tail, want) in [
        (vec![":"], "empty"),
        (vec![":", "sh", "-c", mark], "-n"),
        (vec![":", "-n", "1", "--tag-output", "sh"], "--tag-output"),
        (
            vec![":", "-n", "1", "no-such-program-psyrun-mpmd"],
            "not found",
        ),
    ] {
        let mut cmd = psyrun(&dir);
        cmd.args(["-n", "1", "sh", "-c", mark]).args(&tail);
        let done = run(cmd, &dir);
        assert!(
            matches!(done.code(), Some(2) | Some(127)),
            "{tail:?}: {}",
            done.stderr
        );
        assert!(done.stderr.contains(want), "{tail:?}: {}", done.stderr);
        assert!(
            !dir.path().join("started").exists(),
            "{tail:?} started a rank"
        );
    }
}
