//! The seed examples (`examples/*.rs` of the psyne package) as a user runs them, under the real
//! psyrun on 1, 2, 3 and 4 ranks: each must exit 0 and rank 0 must print its summary line, once,
//! ending in `: OK` (every example checks its own result against a sequential computation and
//! exits 1 when it is wrong). Also: inputs so small that some ranks hold nothing, a bad
//! argument giving a clear error and exit code 2, and PyTorch's variables winning over an srun
//! step's. (The examples under Open MPI's `mpirun` are in `root::mpi_examples`, the tier of the
//! tests that need an installed MPI.)
//!
//! The example binaries are the plain ones cargo puts in `<target>/<profile>/examples/`, beside
//! the psyrun under test. `cargo test --all-targets` does not make those (it builds examples only
//! as test harnesses, under hashed names): the test command builds them first, with the same
//! profile and features ([`common::built`]).

use crate::common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The longest one example run may take (generous: unoptimised builds on a shared 2-core machine
/// running up to 4 ranks).
const LIMIT: Duration = Duration::from_secs(120);

/// Runs example `name` with `args` under psyrun on `n` ranks, to completion.
fn run_example(name: &str, n: usize, args: &[&str]) -> Done {
    let dir = TempDir::new(&format!("example-{name}-{n}"));
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", &n.to_string(), "--grace", "2", "--timeout", "100"])
        .arg(example(name))
        .args(args);
    cmd.env("PSY_TIMEOUT", "60");
    Job::start(cmd, &dir).wait(LIMIT)
}

/// "1 rank", "4 ranks", as the examples print it.
fn ranks(n: usize) -> String {
    format!("{n} rank{}", if n == 1 { "" } else { "s" })
}

/// Asserts that the run succeeded and printed exactly one line starting with `prefix` and ending
/// in `: OK`, and no mismatch; returns that line.
fn assert_ok(name: &str, n: usize, done: &Done, prefix: &str) -> String {
    let context = format!(
        "{name} on {}\nstdout:\n{}\nstderr:\n{}",
        ranks(n),
        done.stdout,
        done.stderr
    );
    assert_eq!(done.code(), Some(0), "{context}");
    let lines: Vec<&str> = done
        .stdout
        .lines()
        .filter(|l| l.starts_with(prefix))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one summary line starting with `{prefix}`: {context}"
    );
    assert!(lines[0].ends_with(": OK"), "{context}");
    assert!(!done.stderr.contains("MISMATCH"), "{context}");
    lines[0].to_string()
}

/// Runs `name` without arguments on 1 to 4 ranks; `prefix(n)` is the summary line's start.
fn on_1_to_4_ranks(name: &str, prefix: impl Fn(usize) -> String) {
    for n in 1..=4 {
        let done = run_example(name, n, &[]);
        assert_ok(name, n, &done, &prefix(n));
    }
}

#[test]
fn allreduce_on_1_to_4_ranks() {
    for n in 1..=4 {
        let done = run_example("allreduce", n, &["1000"]);
        assert_eq!(
            done.code(),
            Some(0),
            "stdout:\n{}\nstderr:\n{}",
            done.stdout,
            done.stderr
        );
        // Every rank prints its own line.
        for rank in 0..n {
            let prefix = format!("rank {rank}/{n} on ");
            assert!(
                done.stdout
                    .lines()
                    .any(|l| l.starts_with(&prefix) && l.ends_with(": OK")),
                "no `{prefix}... : OK` line in:\n{}",
                done.stdout
            );
        }
    }
}

#[test]
fn grid_on_1_to_4_ranks() {
    on_1_to_4_ranks("grid", |n| format!("grid of {} as ", ranks(n)));
}

#[test]
fn mean_on_1_to_4_ranks() {
    on_1_to_4_ranks("mean", |n| {
        format!("mean of 100001 values (seed 42) over {}: ", ranks(n))
    });
}

#[test]
fn softmax_on_1_to_4_ranks() {
    on_1_to_4_ranks("softmax", |n| {
        format!(
            "softmax of 10001 values (seed 42) over {}: global max ",
            ranks(n)
        )
    });
}

#[test]
fn argmax_on_1_to_4_ranks() {
    on_1_to_4_ranks("argmax", |n| {
        format!("argmax of 10001 values (seed 42) over {}: max ", ranks(n))
    });
}

#[test]
fn normalize_on_1_to_4_ranks() {
    on_1_to_4_ranks("normalize", |n| {
        format!("normalize 100001 values (seed 42) over {}: mean ", ranks(n))
    });
}

#[test]
fn ring_allreduce_on_1_to_4_ranks() {
    on_1_to_4_ranks("ring_allreduce", |n| {
        format!(
            "ring all-reduce by hand of 100003 i64 (seed 42) over {}: {} steps, ",
            ranks(n),
            2 * (n - 1)
        )
    });
}

#[test]
fn pipeline_on_1_to_4_ranks() {
    on_1_to_4_ranks("pipeline", |n| {
        let split = ["4", "2,2", "2,1,1", "1,1,1,1"][n - 1];
        format!(
            "pipeline of 4 stages over {} (stages per rank: {split}): 16 batches of 1000 i64 \
             from rank 0, 16 checked on rank {} against the sequential composition, 0 wrong",
            ranks(n),
            n - 1
        )
    });
}

#[test]
fn barrier_timing_on_1_to_4_ranks() {
    for n in 1..=4 {
        let done = run_example("barrier_timing", n, &["5"]);
        assert_ok(
            "barrier_timing",
            n,
            &done,
            &format!(
                "barrier_timing: 4 sizes x 8 all_reduces over {}, every result checked",
                ranks(n)
            ),
        );
        // The table: a header and one row per size.
        assert!(done.stdout.contains("slowest rank µs"), "{}", done.stdout);
        for bytes in ["8", "1024", "65536", "1048576"] {
            assert!(
                done.stdout
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(bytes)),
                "no row for {bytes} B in:\n{}",
                done.stdout
            );
        }
    }
}

#[test]
fn inputs_smaller_than_the_world_leave_some_ranks_empty_handed() {
    let n = 4;
    let cases: [(&str, &[&str], String); 5] = [
        (
            "mean",
            &["3"],
            format!("mean of 3 values (seed 42) over {}", ranks(n)),
        ),
        (
            "softmax",
            &["2"],
            format!("softmax of 2 values (seed 42) over {}", ranks(n)),
        ),
        (
            "argmax",
            &["1"],
            format!("argmax of 1 values (seed 42) over {}", ranks(n)),
        ),
        (
            "ring_allreduce",
            &["3"],
            format!(
                "ring all-reduce by hand of 3 i64 (seed 42) over {}",
                ranks(n)
            ),
        ),
        (
            "pipeline",
            &["2", "2", "1"],
            format!(
                "pipeline of 2 stages over {} (stages per rank: 1,1,0,0)",
                ranks(n)
            ),
        ),
    ];
    for (name, args, prefix) in cases {
        let done = run_example(name, n, args);
        assert_ok(name, n, &done, &prefix);
    }
}

#[test]
fn a_bad_argument_is_a_clear_error_and_exit_code_2() {
    let done = run_example("pipeline", 2, &["lots"]);
    assert_eq!(done.code(), Some(2), "stderr:\n{}", done.stderr);
    assert!(
        done.stderr
            .contains("pipeline: BATCHES must be a positive integer, not `lots`"),
        "{}",
        done.stderr
    );
    assert!(!done.stdout.contains(": OK"), "{}", done.stdout);

    let done = run_example("mean", 3, &["0"]);
    assert_eq!(done.code(), Some(2), "stderr:\n{}", done.stderr);
    assert!(
        done.stderr.contains("mean: COUNT must be at least 1"),
        "{}",
        done.stderr
    );
}

/// An srun wrapper's way: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (as torchrun does) in
/// two processes that also carry an srun step's variables; PyTorch's names win and the two form
/// one world (rank 0 serves the store). Plain torchrun-style launches are covered by
/// collectives.rs (`without_psyrun_rank_0_serves_the_store_at_master_addr_like_under_torchrun`).
#[test]
fn torchrun_style_variables_win_over_the_srun_step_they_are_set_in() {
    let dir = TempDir::new("example-torch");
    let allreduce = example("allreduce");
    let reserved = free_port();
    let port = reserved.port();
    let jobs: Vec<Job> = (0..2)
        .map(|rank| {
            let mut cmd = Command::new(&allreduce);
            cmd.arg("1000")
                .env_clear()
                .env("RANK", rank.to_string())
                // As torchrun gives each run: psyne names the job's shared memory after it, and
                // other env:// jobs may run on this host meanwhile (in this test binary too).
                .env("TORCHELASTIC_RUN_ID", format!("test{port}"))
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("SLURM_PROCID", rank.to_string())
                .env("SLURM_STEP_NUM_TASKS", "2")
                .env("PSY_TIMEOUT", "60")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            Job::start(cmd, &dir)
        })
        .collect();
    for (rank, job) in jobs.into_iter().enumerate() {
        let done = job.wait(LIMIT);
        let context = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
        assert_eq!(done.code(), Some(0), "rank {rank}: {context}");
        let prefix = format!("rank {rank}/2 on ");
        assert!(
            done.stdout
                .lines()
                .any(|l| l.starts_with(&prefix) && l.ends_with(": OK")),
            "no `{prefix}... : OK` in:\n{context}"
        );
    }
}
