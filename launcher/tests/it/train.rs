//! The `train` program (the `train` package of this workspace) as a user runs it: `psyrun -n N
//! train`, found by its bare name beside psyrun. `--check` must pass on 1, 2, 3 and 8 ranks
//! (parameters bitwise identical on every rank, loss curve equal to a 1-rank run within its
//! tolerance), rank 0 must print one line per epoch, and bad arguments must be a clear error.
//!
//! `cargo test` builds psyrun but not the `train` binary (another package): the test command
//! builds it beside psyrun first ([`common::built`]).

use crate::common;

use common::*;
use std::path::PathBuf;
use std::time::Duration;

/// The longest one training run may take (generous: unoptimised builds, 8 ranks on a shared
/// 2-core machine).
const LIMIT: Duration = Duration::from_secs(180);

/// The `train` binary, built beside the psyrun under test by the test command.
fn train_bin() -> PathBuf {
    built("train")
}

/// Runs `psyrun -n N train ARGS` with `train` by its bare name (a PATH without it, so psyrun
/// finds the one beside itself), to completion.
fn run_train(n: usize, args: &[&str]) -> Done {
    train_bin();
    let dir = TempDir::new(&format!("train-{n}"));
    let mut cmd = psyrun(&dir);
    cmd.args([
        "-n",
        &n.to_string(),
        "--grace",
        "2",
        "--timeout",
        "170",
        "train",
    ])
    .args(args)
    .env("PATH", "/usr/bin:/bin")
    .env("PSY_TIMEOUT", "120");
    Job::start(cmd, &dir).wait(LIMIT)
}

fn context(done: &Done) -> String {
    format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr)
}

/// Asserts a successful `--check --epochs E` run on `n` ranks: the header, one line per epoch in
/// order, the summary, and both checks passing.
fn assert_checked(n: usize, epochs: usize, done: &Done) {
    let ctx = context(done);
    assert_eq!(done.code(), Some(0), "{n} ranks: {ctx}");
    let out = &done.stdout;
    let ranks = format!("{n} rank{}", if n == 1 { "" } else { "s" });
    let header: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("train: digits"))
        .collect();
    assert_eq!(header.len(), 1, "{ctx}");
    assert!(header[0].contains(&format!("; {ranks} (")), "{ctx}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("epoch ")).collect();
    assert_eq!(
        lines.len(),
        epochs,
        "one line per epoch, from rank 0 only: {ctx}"
    );
    let mut losses = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let head = format!("epoch {}/{epochs}  train loss ", i + 1);
        assert!(
            line.starts_with(&head),
            "`{line}` should start with `{head}`: {ctx}"
        );
        for part in ["train acc", "test acc", "compute", "comm"] {
            assert!(line.contains(part), "`{line}` lacks `{part}`");
        }
        let loss: f64 = line[head.len()..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no loss in `{line}`"));
        losses.push(loss);
    }
    assert!(
        losses.last() < losses.first(),
        "the loss should fall: {losses:?}"
    );
    let summary = format!("train: {epochs} epochs on {ranks} in ");
    assert_eq!(out.matches(&summary).count(), 1, "{ctx}");
    assert!(
        out.contains(&format!(
            "check: parameters bitwise identical on all {n} ranks"
        )),
        "{ctx}"
    );
    assert_eq!(
        out.lines().filter(|l| *l == "check: OK").count(),
        1,
        "{ctx}"
    );
    assert!(!out.contains("FAILED"), "{ctx}");
}

fn assert_curve_matches(done: &Done) {
    let line = done
        .stdout
        .lines()
        .find(|l| l.starts_with("check: loss curve vs a 1-rank run of global batch"))
        .unwrap_or_else(|| panic!("no loss-curve check in:\n{}", done.stdout));
    assert!(line.ends_with("; tolerance 1e-4): OK"), "{line}");
}

#[test]
fn check_passes_on_1_rank() {
    let done = run_train(1, &["--check", "--epochs", "3"]);
    assert_checked(1, 3, &done);
    assert_curve_matches(&done);
}

#[test]
fn check_passes_on_2_ranks() {
    let done = run_train(2, &["--check", "--epochs", "3"]);
    assert_checked(2, 3, &done);
    assert_curve_matches(&done);
}

#[test]
fn check_passes_on_3_ranks() {
    let done = run_train(3, &["--check", "--epochs", "3"]);
    assert_checked(3, 3, &done);
    assert_curve_matches(&done);
}

#[test]
fn check_passes_on_8_ranks() {
    let done = run_train(8, &["--check", "--epochs", "3"]);
    assert_checked(8, 3, &done);
    assert_curve_matches(&done);
}

#[test]
fn buckets_per_tensor_without_overlap_and_small_buckets_pass_the_check() {
    let done = run_train(
        3,
        &[
            "--check",
            "--epochs",
            "2",
            "--bucket-mb",
            "0",
            "--no-overlap",
        ],
    );
    assert_checked(3, 2, &done);
    assert_curve_matches(&done);
    assert!(
        done.stdout.contains("all-reduced in 4 buckets of at most 0 MiB [b2 40 B, W2 2560 B, b1 256 B, W1 16384 B], overlap off"),
        "{}",
        context(&done)
    );

    let done = run_train(2, &["--check", "--epochs", "2", "--bucket-mb", "0.004"]);
    assert_checked(2, 2, &done);
    assert!(
        done.stdout.contains("all-reduced in 2 buckets of at most 0.004 MiB [b2+W2+b1 2856 B, W1 16384 B], overlap on"),
        "{}",
        context(&done)
    );
}

#[test]
fn local_sgd_checks_the_parameters_only_and_says_so() {
    let done = run_train(3, &["--check", "--epochs", "2", "--sync-every", "5"]);
    assert_checked(3, 2, &done);
    assert!(
        done.stdout
            .contains("local SGD: parameters averaged every 5 steps"),
        "{}",
        context(&done)
    );
    assert!(
        done.stdout
            .contains("check: loss curve not compared: with --sync-every 5 (local SGD)"),
        "{}",
        context(&done)
    );
}

#[test]
fn quiet_prints_the_summary_but_no_epochs() {
    let done = run_train(2, &["--epochs", "2", "--quiet"]);
    assert_eq!(done.code(), Some(0), "{}", context(&done));
    assert!(
        !done.stdout.lines().any(|l| l.starts_with("epoch ")),
        "{}",
        context(&done)
    );
    assert!(
        done.stdout.contains("train: 2 epochs on 2 ranks in "),
        "{}",
        context(&done)
    );
    assert!(done.stdout.contains("test accuracy"), "{}", context(&done));
}

#[test]
fn bad_arguments_are_a_clear_error_and_exit_code_2() {
    for (args, want) in [
        (
            &["--sync-every", "0"][..],
            "train: --sync-every must be at least 1",
        ),
        (
            &["--batch", "5000"],
            "train: --batch must be between 1 and the 1500 training samples, not 5000",
        ),
        (
            &["--bucket-mb", "-1"],
            "train: --bucket-mb must be a number of MiB",
        ),
        (
            &["--epochs", "many"],
            "invalid value 'many' for '--epochs <N>'",
        ),
    ] {
        let done = run_train(2, args);
        assert_eq!(done.code(), Some(2), "{args:?}: {}", context(&done));
        assert!(done.stderr.contains(want), "{args:?}: {}", context(&done));
        assert!(!done.stdout.contains("epoch "), "{}", context(&done));
    }
}

#[test]
fn help_lists_every_flag() {
    let out = std::process::Command::new(train_bin())
        .arg("--help")
        .output()
        .expect("running train --help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--epochs",
        "--lr",
        "--batch",
        "--hidden",
        "--seed",
        "--bucket-mb",
        "--no-overlap",
        "--sync-every",
        "--check",
        "--quiet",
    ] {
        assert!(text.contains(flag), "`{flag}` missing from:\n{text}");
    }
}

/// The value of `KEY` in process `pid`'s environment, if it can be read.
fn environ_var(pid: i32, key: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix(key)?.strip_prefix('=').map(str::to_string)
    })
}

/// SIGKILLs rank `rank` of the running `job` (psyrun's child whose PSY_RANK says so); its pid.
fn kill_rank(job: &Job, rank: usize) -> i32 {
    signal_rank(job, rank, libc::SIGKILL)
}

/// Sends `signal` to the process of rank `rank` of `job`; returns its pid.
fn signal_rank(job: &Job, rank: usize, signal: i32) -> i32 {
    let want = rank.to_string();
    let pid = children(job.pid())
        .into_iter()
        .find(|&p| environ_var(p, "PSY_RANK").as_deref() == Some(want.as_str()))
        .unwrap_or_else(|| panic!("rank {rank} among psyrun's children"));
    // SAFETY: kill takes plain integers; `pid` is an unreaped child of the psyrun the test
    // started (found a moment ago), so the pid is not reused.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    pid
}

/// The summary's `final train loss L, test accuracy A% (C/N)`.
fn final_result(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| {
            l.split_once("; final train loss ")
                .map(|(_, r)| r.to_string())
        })
        .unwrap_or_else(|| panic!("no summary in:\n{stdout}"))
}

#[test]
fn a_rank_killed_mid_training_restarts_from_the_checkpoint_and_ends_as_an_uninterrupted_run() {
    const ARGS: [&str; 4] = ["--epochs", "8", "--hidden", "512"];
    let reference = run_train(2, &ARGS);
    assert_eq!(reference.code(), Some(0), "{}", context(&reference));

    let dir = TempDir::new("train-restart");
    let ckpt = dir.path().join("ckpt");
    std::fs::create_dir(&ckpt).unwrap();
    let mut cmd = psyrun(&dir);
    cmd.args([
        "-n",
        "2",
        "--max-restarts",
        "2",
        "--grace",
        "2",
        "--timeout",
        "170",
    ])
    .arg("train")
    .args(ARGS)
    .arg("--checkpoint")
    .arg(&ckpt)
    .arg("--check")
    .env("PATH", "/usr/bin:/bin")
    .env("PSY_TIMEOUT", "120");
    let job = Job::start(cmd, &dir);
    eventually(LIMIT, "epoch 3 of the first attempt", || {
        job.stdout.text().contains("epoch 3/8")
    });
    let rank1 = kill_rank(&job, 1);
    let done = job.wait(LIMIT);
    let ctx = context(&done);
    assert_eq!(done.code(), Some(0), "{ctx}");
    assert!(
        done.stderr.contains(&format!(
            "attempt 1 failed: rank 1 (pid {rank1}) killed by signal 9"
        )),
        "{ctx}"
    );
    let resumed: usize = done
        .stdout
        .lines()
        .find_map(|l| {
            l.split(" after epoch ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("the second attempt says where it resumes: {ctx}"));
    // Epoch lines of the first attempt: those before the second attempt's header.
    let first = done
        .stdout
        .split("train: digits")
        .nth(1)
        .unwrap_or_default();
    let reached = first.lines().filter(|l| l.starts_with("epoch ")).count();
    assert!(
        (3..8).contains(&resumed),
        "resumed after epoch {resumed}: {ctx}"
    );
    assert_eq!(
        final_result(&done.stdout),
        final_result(&reference.stdout),
        "the same final loss and test accuracy as without the failure: {ctx}"
    );
    assert!(done.stdout.contains("check: OK"), "{ctx}");
    assert!(resumed <= reached, "{ctx}");
    eprintln!(
        "killed rank 1 once epoch 3 was printed; the first attempt printed {reached} epochs, the \
         second resumed after epoch {resumed}: {} whole epochs repeated, plus the part of epoch {} \
         done before the kill",
        reached - resumed,
        reached + 1
    );
}

/// The summary's test accuracy, in percent.
fn accuracy(stdout: &str) -> f64 {
    final_result(stdout)
        .split("test accuracy ")
        .nth(1)
        .and_then(|r| r.split('%').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no accuracy in:\n{stdout}"))
}

/// How far `--elastic`'s final test accuracy may be from an uninterrupted run's, in percentage
/// points (the README states it): the survivors repeat or skip the step the rank was lost in.
const ELASTIC_TOLERANCE: f64 = 3.0;

#[test]
fn with_elastic_the_survivors_of_a_killed_rank_shrink_and_finish_near_the_uninterrupted_accuracy() {
    const ARGS: [&str; 4] = ["--epochs", "8", "--hidden", "512"];
    let reference = run_train(4, &ARGS);
    assert_eq!(reference.code(), Some(0), "{}", context(&reference));

    let dir = TempDir::new("train-elastic");
    let mut cmd = psyrun(&dir);
    cmd.args([
        "-n",
        "4",
        "--on-failure",
        "continue",
        "--grace",
        "2",
        "--timeout",
        "170",
    ])
    .arg("train")
    .args(ARGS)
    .args(["--elastic", "--check"])
    .env("PATH", "/usr/bin:/bin")
    .env("PSY_TIMEOUT", "60");
    let job = Job::start(cmd, &dir);
    eventually(LIMIT, "epoch 3", || job.stdout.text().contains("epoch 3/8"));
    kill_rank(&job, 2);
    let done = job.wait(LIMIT);
    let ctx = context(&done);
    assert_eq!(done.code(), Some(0), "{ctx}");
    assert!(done.stdout.contains("train: lost 1 rank ("), "{ctx}");
    assert!(done.stdout.contains("; 3 go on from epoch "), "{ctx}");
    assert!(
        done.stdout
            .contains("epochs on 3 ranks (started on 4; 1 lost, 1 shrink)"),
        "{ctx}"
    );
    assert!(
        done.stdout
            .contains("check: parameters bitwise identical on all 3 ranks"),
        "{ctx}"
    );
    assert!(done.stdout.contains("check: OK"), "{ctx}");
    let (got, want) = (accuracy(&done.stdout), accuracy(&reference.stdout));
    assert!(
        (got - want).abs() <= ELASTIC_TOLERANCE,
        "elastic {got}% vs uninterrupted {want}%: {ctx}"
    );
    eprintln!("elastic: test accuracy {got}% after losing rank 2 during epoch 3 or 4; uninterrupted {want}%");
}

/// `--elastic` with a rank stopped (SIGSTOP), not killed, during epoch 3: the survivors' step
/// times out after `PSY_TIMEOUT`, they count the silent rank failed when it does not answer
/// their agreement within another, shrink without it and finish; psyrun, told through its
/// store, kills the stopped rank and names it, and the job ends 0 instead of waiting for it.
#[test]
fn with_elastic_the_survivors_of_a_stopped_rank_shrink_and_psyrun_ends_it() {
    const TIMEOUT_S: u64 = 10;
    train_bin();
    let dir = TempDir::new("train-elastic-stopped");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "4", "--on-failure", "continue", "--grace", "2"])
        .args([
            "--timeout",
            "170",
            "train",
            "--epochs",
            "6",
            "--hidden",
            "64",
        ])
        .args(["--elastic", "--check"])
        .env("PATH", "/usr/bin:/bin")
        .env("PSY_TIMEOUT", TIMEOUT_S.to_string());
    let job = Job::start(cmd, &dir);
    eventually(LIMIT, "epoch 3", || job.stdout.text().contains("epoch 3/6"));
    let stopped = signal_rank(&job, 2, libc::SIGSTOP);
    let done = job.wait(LIMIT);
    let ctx = context(&done);
    assert_eq!(done.code(), Some(0), "{ctx}");
    assert!(done.stdout.contains("train: lost 1 rank ("), "{ctx}");
    assert!(
        done.stdout
            .contains("epochs on 3 ranks (started on 4; 1 lost, 1 shrink)"),
        "{ctx}"
    );
    assert!(done.stdout.contains("check: OK"), "{ctx}");
    assert!(
        done.stderr.contains(&format!(
            "rank 2 (pid {stopped}) was counted failed by the other ranks"
        )) && done.stderr.contains(&format!(
            "rank 2 (pid {stopped}) killed by signal 9 (SIGKILL), by psyrun, after the other ranks counted it failed"
        )),
        "{ctx}"
    );
}

/// FNV-1a, 64 bits: the checksum that ends a checkpoint (`train::checkpoint`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    })
}

/// `bytes` (a checkpoint) with `epochs_done` and only the first `reports` epoch reports, and a
/// valid checksum again: a file whose checksum holds and whose counts lie. The layout (see
/// `train::checkpoint`): magic, fingerprint, epochs done, parameter count (8 bytes each), the
/// parameters (4 each), the report count (8), the reports (12 numbers of 8 bytes), the checksum.
fn forged(bytes: &[u8], epochs_done: u64, reports: usize) -> Vec<u8> {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let params = u64_at(24) as usize;
    let count_at = 32 + 4 * params;
    let mut out = bytes[..count_at].to_vec();
    out[16..24].copy_from_slice(&epochs_done.to_le_bytes());
    out.extend_from_slice(&(reports as u64).to_le_bytes());
    out.extend_from_slice(&bytes[count_at + 8..count_at + 8 + 96 * reports]);
    let sum = fnv1a(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

#[test]
fn a_checkpoint_whose_counts_do_not_add_up_or_that_is_a_fifo_is_refused() {
    const ARGS: [&str; 2] = ["--epochs", "4"];
    let dir = TempDir::new("train-forged");
    let ckpt = dir.path().join("ckpt");
    std::fs::create_dir(&ckpt).unwrap();
    let ckpt_arg = ckpt.to_str().unwrap();
    let first = run_train(1, &[ARGS[0], ARGS[1], "--checkpoint", ckpt_arg]);
    assert_eq!(first.code(), Some(0), "{}", context(&first));
    let file = ckpt.join("train.ckpt");
    let good = std::fs::read(&file).unwrap();
    // The untouched file (all 4 epochs done) is taken: nothing left to train.
    let again = run_train(1, &[ARGS[0], ARGS[1], "--checkpoint", ckpt_arg]);
    assert_eq!(again.code(), Some(0), "{}", context(&again));
    assert!(
        again.stdout.contains("every epoch was done already"),
        "{}",
        context(&again)
    );
    for (epochs_done, reports, why) in [
        (1000, 4, "claims 1000 of 4 epochs done"),
        // Missing reports made the time per step wrong (the summary skips the epochs resumed).
        (
            2,
            1,
            "holds 1 epoch report for 2 epochs done (one per epoch)",
        ),
        (
            3,
            2,
            "holds 2 epoch reports for 3 epochs done (one per epoch)",
        ),
    ] {
        std::fs::write(&file, forged(&good, epochs_done, reports)).unwrap();
        let done = run_train(1, &[ARGS[0], ARGS[1], "--checkpoint", ckpt_arg]);
        let ctx = context(&done);
        assert_eq!(
            done.code(),
            Some(1),
            "{epochs_done} done, {reports} reports: {ctx}"
        );
        assert!(
            done.stderr.contains(&format!(
                "--checkpoint: {} {why}: it is damaged or not a train checkpoint; remove it to start over",
                file.display()
            )),
            "{ctx}"
        );
        assert!(!done.stdout.contains("epoch 1/4"), "nothing trained: {ctx}");
    }
    // A FIFO where the checkpoint goes (no writer ever): refused at once, not waited on.
    std::fs::remove_file(&file).unwrap();
    let c = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let done = run_train(1, &[ARGS[0], ARGS[1], "--checkpoint", ckpt_arg]);
    let ctx = context(&done);
    assert_eq!(done.code(), Some(1), "{ctx}");
    assert!(
        done.stderr.contains(&format!(
            "--checkpoint: reading {}: it is a FIFO or pipe, not a regular file",
            file.display()
        )),
        "{ctx}"
    );
}

/// The parameters in a checkpoint file (`train/src/checkpoint.rs`: magic, fingerprint, epochs,
/// the parameter count at byte 24, then the parameters as f32 from byte 32), as bits.
fn checkpoint_params(path: &std::path::Path) -> Vec<u32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let n = u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes")) as usize;
    bytes[32..32 + 4 * n]
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect()
}

/// Issue 38: the same training run twice in canonical reduction order, once over shared memory
/// with the built-in algorithm choice (small buckets on the node board) and once over TCP with
/// a tuning file that picks other all-reduce algorithms by size, ends with bitwise-equal
/// parameters (in fast order the same two runs differed in 1293 of 3610 parameters when this
/// test was written).
#[test]
fn canonical_order_makes_runs_over_other_transports_and_tuning_files_bitwise_equal() {
    train_bin();
    let dir = TempDir::new("train-canonical");
    let tuning = dir.path().join("tuning");
    std::fs::write(
        &tuning,
        "[net 2]\nallreduce 2K binomial\nallreduce 64K ring\nallreduce max rabenseifner\n",
    )
    .expect("writing the tuning file");
    let mut params = Vec::new();
    for (name, transport, tuning) in [
        ("shm", "shm", "off".into()),
        ("tcp", "tcp", tuning.display().to_string()),
    ] {
        let ckpt = dir.path().join(name);
        std::fs::create_dir(&ckpt).expect("a checkpoint directory");
        let mut cmd = psyrun(&dir);
        cmd.args(["-n", "3", "--grace", "2", "--timeout", "170", "train"])
            .args([
                "--epochs",
                "2",
                "--hidden",
                "48",
                "--bucket-mb",
                "0.004",
                "--quiet",
            ])
            .arg("--checkpoint")
            .arg(&ckpt)
            .env("PATH", "/usr/bin:/bin")
            .env("PSY_TIMEOUT", "120")
            .env("PSY_REDUCE_ORDER", "canonical")
            .env("PSY_TRANSPORT", transport)
            .env("PSY_TUNING", tuning);
        let done = Job::start(cmd, &dir).wait(LIMIT);
        assert_eq!(done.code(), Some(0), "{name}: {}", context(&done));
        params.push(checkpoint_params(&ckpt.join("train.ckpt")));
    }
    assert!(!params[0].is_empty());
    let differing = params[0]
        .iter()
        .zip(&params[1])
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(differing, 0, "of {} parameters", params[0].len());
}
