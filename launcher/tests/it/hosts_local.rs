//! The multi-host path without SSH: `--launcher local` runs every host's agent on this machine,
//! so placement, the agent protocol, output, exit codes and teardown across "hosts" are tested
//! without root. (The same path over real SSH is in `root/multihost.rs`.)

use crate::common;

use common::{
    check_long_lines, children, eventually, gone, long_lines_sh, psyrun, run, Job, Known, TempDir,
    GRANDCHILD, LONG, RECORD_PID,
};
use std::time::Duration;

fn psyne_check() -> &'static str {
    env!("CARGO_BIN_EXE_psyne-check")
}

fn local(dir: &TempDir, args: &[&str]) -> std::process::Command {
    let mut cmd = psyrun(dir);
    cmd.args(["--launcher", "local"]).args(args);
    cmd
}

#[test]
fn two_hosts_run_every_collective_and_tag_lines_with_their_host() {
    let dir = TempDir::new("hl-coll");
    let done = run(
        local(
            &dir,
            &["-H", "a:2,b:2", "-n", "4", "--tag-output", psyne_check()],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for (rank, host) in [(0, "a"), (1, "a"), (2, "b"), (3, "b")] {
        let line = format!("[{host}][{rank}] rank {rank}/4: every collective");
        assert!(done.stdout.contains(&line), "{line:?} in:\n{}", done.stdout);
    }
}

#[test]
fn the_contract_counts_hosts_and_a_host_without_slots_takes_its_cores() {
    let dir = TempDir::new("hl-env");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = (2 * cores).to_string();
    let done = run(
        local(
            &dir,
            &[
                "-H",
                "a,b",
                "-n",
                &n,
                "--bind-to",
                "none",
                "sh",
                "-c",
                "echo $PSY_RANK $PSY_NODE_RANK $PSY_LOCAL_RANK $PSY_LOCAL_SIZE $PSY_WORLD_SIZE",
            ],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for rank in 0..2 * cores {
        let line = format!(
            "{rank} {} {} {cores} {}",
            rank / cores,
            rank % cores,
            2 * cores
        );
        assert!(
            done.stdout.lines().any(|l| l == line),
            "{line:?} in:\n{}",
            done.stdout
        );
    }
}

#[test]
fn the_first_failure_names_its_rank_and_host_and_stops_the_others() {
    let dir = TempDir::new("hl-fail");
    let done = run(
        local(
            &dir,
            &[
                "-H",
                "a:1,b:1",
                "-n",
                "2",
                "sh",
                "-c",
                "if [ $PSY_RANK = 1 ]; then exit 7; fi; exec sleep 60",
            ],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(7), "{}", done.stderr);
    assert!(
        done.stderr.contains("rank 1 on b (pid ")
            && done
                .stderr
                .contains("exited with code 7; stopping the other rank"),
        "{}",
        done.stderr
    );
    // Well before the other rank's sleep (60 s) would end: psyrun stopped it.
    assert!(
        done.elapsed < Duration::from_secs(60) / 3,
        "{:?}",
        done.elapsed
    );
}

#[test]
fn a_program_missing_on_a_host_starts_nothing_anywhere() {
    let dir = TempDir::new("hl-missing");
    let done = run(
        local(&dir, &["-H", "a:1,b:1", "-n", "2", "no-such-program-psy"]),
        &dir,
    );
    assert_eq!(done.code(), Some(127), "{}", done.stderr);
    assert!(
        done.stderr
            .contains("a: program \"no-such-program-psy\" not found")
            && done.stderr.contains("nothing was started on any host"),
        "{}",
        done.stderr
    );
}

#[test]
fn more_ranks_than_slots_says_how_to_allow_it() {
    let dir = TempDir::new("hl-slots");
    let done = run(local(&dir, &["-H", "a:1,b:1", "-n", "3", "true"]), &dir);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(done.stderr.contains("--oversubscribe"), "{}", done.stderr);
    let done = run(
        local(
            &dir,
            &["-H", "a:1,b:1", "-n", "3", "--oversubscribe", "true"],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
}

#[test]
fn a_bad_hostfile_line_is_named_and_a_good_hostfile_places_ranks() {
    let dir = TempDir::new("hl-hostfile");
    let bad = dir.script("bad", "# hosts\nnode01 slots=x\n", 0o644);
    let done = run(
        local(
            &dir,
            &["--hostfile", bad.to_str().unwrap(), "-n", "1", "true"],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains(&format!("{}:2", bad.display())),
        "{}",
        done.stderr
    );
    let good = dir.script(
        "good",
        "# Open MPI style\nx slots=1\ny:2 # MPICH style\n",
        0o644,
    );
    let done = run(
        local(
            &dir,
            &[
                "--hostfile",
                good.to_str().unwrap(),
                "-n",
                "3",
                "--tag-output",
                "sh",
                "-c",
                "echo node $PSY_NODE_RANK",
            ],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for line in ["[x][0] node 0", "[y][1] node 1", "[y][2] node 1"] {
        assert!(done.stdout.contains(line), "{line:?} in:\n{}", done.stdout);
    }
}

#[test]
fn output_dir_and_timestamps_work_across_hosts() {
    let dir = TempDir::new("hl-out");
    let outdir = dir.path().join("out");
    let done = run(
        local(
            &dir,
            &[
                "-H",
                "a:1,b:1",
                "-n",
                "2",
                "--timestamp-output",
                "--output-dir",
                outdir.to_str().unwrap(),
                "sh",
                "-c",
                "echo out $PSY_RANK; echo err $PSY_RANK >&2",
            ],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for rank in 0..2 {
        let out = std::fs::read_to_string(outdir.join(format!("rank.{rank}.stdout"))).unwrap();
        assert_eq!(out, format!("out {rank}\n"));
        let err = std::fs::read_to_string(outdir.join(format!("rank.{rank}.stderr"))).unwrap();
        assert_eq!(err, format!("err {rank}\n"));
    }
    // `2026-11-21T10:00:00.123456Z out 0`
    let stamped = done
        .stdout
        .lines()
        .find(|l| l.ends_with(" out 0"))
        .unwrap_or_else(|| panic!("{}", done.stdout));
    assert_eq!(
        stamped.len(),
        "2026-11-21T10:00:00.123456Z out 0".len(),
        "{stamped}"
    );
    assert!(stamped.as_bytes()[26] == b'Z', "{stamped}");
}

#[test]
fn dry_run_and_check_start_nothing() {
    let dir = TempDir::new("hl-dry");
    let marker = dir.path().join("started");
    let body = format!("touch {}", marker.display());
    let done = run(
        local(
            &dir,
            &["-H", "a:2,b:2", "-n", "4", "--dry-run", "sh", "-c", &body],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for line in [
        "dry run: 4 ranks on 2 hosts",
        "host a: slots 2; local child: ",
        "rank 3 on b (local rank 1 of 2, node 1)",
    ] {
        assert!(done.stdout.contains(line), "{line:?} in:\n{}", done.stdout);
    }
    let done = run(local(&dir, &["--check", "-H", "a,b"]), &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert!(
        done.stderr.contains("psyrun: b: ok (local, psyrun "),
        "{}",
        done.stderr
    );
    let mut alone = psyrun(&dir);
    alone.arg("--check").env_remove("SLURM_JOB_NODELIST");
    let done = run(alone, &dir);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("--check needs hosts"),
        "{}",
        done.stderr
    );
    assert!(!marker.exists());
}

#[test]
fn a_killed_launcher_leaves_no_rank_behind_on_any_host() {
    let dir = TempDir::new("hl-kill");
    let body = format!("{RECORD_PID}; exec sleep 60");
    let mut job = Job::start(
        local(
            &dir,
            &[
                "-H", "a:2,b:2", "-n", "4", "-x", "D", "--grace", "1", "sh", "-c", &body,
            ],
        ),
        &dir,
    );
    let pids = job.wait_for_pids(4);
    job.signal(libc::SIGKILL);
    let done = job.wait(Duration::from_secs(10));
    assert_eq!(done.status.code(), None);
    eventually(Duration::from_secs(15), "every rank to end", || {
        pids.iter().all(|&p| gone(p))
    });
}

#[test]
fn a_sigkilled_agent_leaves_no_grandchild_behind() {
    let dir = TempDir::new("hl-agent-kill");
    let job = Job::start(
        local(
            &dir,
            &[
                "-H", "a:1,b:1", "-n", "2", "-x", "D", "sh", "-c", GRANDCHILD,
            ],
        ),
        &dir,
    );
    let grandchildren = Known::grandchildren(&dir, 2);
    let agents = children(job.pid());
    assert_eq!(agents.len(), 2, "psyrun's children: {agents:?}");
    for agent in agents {
        // SAFETY: kill takes plain integers; the pid is a child of our unreaped psyrun, so it
        // cannot have been reused.
        unsafe { libc::kill(agent, libc::SIGKILL) };
    }
    let _ = job.wait(common::DEADLINE);
    grandchildren.assert_gone(Duration::from_secs(10));
}

#[test]
fn ten_mib_lines_from_two_hosts_arrive_whole_and_tagged_once() {
    let dir = TempDir::new("hl-long");
    let body = long_lines_sh(LONG);
    let mut cmd = local(
        &dir,
        &[
            "-H",
            "a:1,b:1",
            "-n",
            "2",
            "-x",
            "D",
            "--tag-output",
            "sh",
            "-c",
            &body,
        ],
    );
    // The ranks finish at once.
    std::fs::write(dir.path().join("go"), "").unwrap();
    cmd.stdin(std::process::Stdio::null());
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "stderr: {}", done.stderr);
    check_long_lines(&done.stdout, LONG, &["a", "b"]);
}

#[test]
fn map_by_node_deals_ranks_round_robin_across_hosts() {
    let dir = TempDir::new("hl-mapnode");
    let done = run(
        local(
            &dir,
            &[
                "-H",
                "a:2,b:2",
                "-n",
                "4",
                "--map-by",
                "node",
                "--tag-output",
                "sh",
                "-c",
                "echo local $PSY_LOCAL_RANK node $PSY_NODE_RANK",
            ],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for line in [
        "[a][0] local 0 node 0",
        "[b][1] local 0 node 1",
        "[a][2] local 1 node 0",
        "[b][3] local 1 node 1",
    ] {
        assert!(done.stdout.contains(line), "{line:?} in:\n{}", done.stdout);
    }
}

const SEVEN_HOSTS: &str = "a:1,b:1,c:1,d:1,e:1,f:1,g:1";

/// psyrun on [`SEVEN_HOSTS`] (local agents) at `--tree-width 2`, then `args`.
fn tree(dir: &TempDir, args: &[&str]) -> std::process::Command {
    let mut cmd = local(dir, &["--tree-width", "2", "-H", SEVEN_HOSTS]);
    cmd.args(args);
    cmd
}

#[test]
fn a_tree_launch_relays_the_job_output_and_exit_codes_of_every_level() {
    // Width 2 over 7 hosts: a and b are reached from psyrun; a reaches c and d, b reaches f and
    // g, and c reaches e (three levels).
    let dir = TempDir::new("hl-tree");
    let check = run(tree(&dir, &["--check"]), &dir);
    assert_eq!(check.code(), Some(0), "{}", check.stderr);
    for (host, via) in [("c", "a"), ("d", "a"), ("e", "c"), ("f", "b"), ("g", "b")] {
        let line = format!("{host}: ok (local through {via},");
        assert!(
            check.stderr.contains(&line),
            "{line:?} in:\n{}",
            check.stderr
        );
    }
    let done = run(
        tree(&dir, &["-n", "7", "--tag-output", psyne_check()]),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for (rank, host) in ["a", "b", "c", "d", "e", "f", "g"].iter().enumerate() {
        let line = format!("[{host}][{rank}] rank {rank}/7: every collective");
        assert!(done.stdout.contains(&line), "{line:?} in:\n{}", done.stdout);
    }
    let dry = run(tree(&dir, &["-n", "7", "--dry-run", "true"]), &dir);
    assert_eq!(dry.code(), Some(0), "{}", dry.stderr);
    let said = format!("{}{}", dry.stdout, dry.stderr);
    for (host, via) in [("c", "a"), ("e", "c"), ("g", "b")] {
        let line = format!("host {host}: slots 1; from {via}'s agent: local child");
        assert!(said.contains(&line), "{line:?} in:\n{said}");
    }
    // Rank 4 runs on e, two relays away: its exit code is psyrun's, and it is named.
    let failed = run(
        tree(
            &dir,
            &[
                "-n",
                "7",
                "sh",
                "-c",
                "[ $PSY_RANK = 4 ] && exit 3; sleep 30",
            ],
        ),
        &dir,
    );
    assert_eq!(failed.code(), Some(3), "{}", failed.stderr);
    assert!(failed.stderr.contains("rank 4 on e"), "{}", failed.stderr);
}

/// A rank stopped by SIGSTOP on one "host" while every other rank ends: its agent reports the
/// stop, and psyrun kills it (through the agent) after `--grace` and ends with 137, instead of
/// waiting for it forever.
#[test]
fn a_rank_left_stopped_on_a_host_when_the_others_end_is_killed() {
    let dir = TempDir::new("hl-stopped");
    let script = r#"[ "$PSY_RANK" != 2 ] || kill -STOP $$; exit 0"#;
    let done = run(
        local(
            &dir,
            &[
                "-H", "a:2,b:1", "-n", "3", "--grace", "1", "sh", "-c", script,
            ],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(137), "{}", done.stderr);
    assert!(
        done.stderr
            .contains("rank 2 on b (pid ")
            && done.stderr.contains(
                "is stopped (SIGSTOP) and every other rank has ended: nothing in the job can resume it"
            ),
        "{}",
        done.stderr
    );
}
