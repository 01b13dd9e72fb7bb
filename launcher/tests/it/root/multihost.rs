//! psyrun across hosts, over real SSH: each test brings up a cluster of network namespaces with
//! their own sshd and host name (`scripts/cluster/cluster.sh`), runs psyrun from inside the first
//! host, and tears the cluster down even when it fails. Needs root (CI runs as root); skipped,
//! saying so, otherwise. One cluster at a time (the script's bridge and subnet are fixed).

use crate::common;

use common::{eventually, gone, psyrun_path, Job, TempDir, RECORD_PID};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// `--heartbeat-timeout` of the jobs here that lose a host.
const HEARTBEAT: Duration = Duration::from_secs(3);
/// How soon a job that lost a host must have failed: a few heartbeat timeouts (noticing, the
/// agents' stop, their grace), from the job's own setting rather than a wall-clock guess.
const LOST_HOST_LIMIT: Duration = Duration::from_secs(5 * HEARTBEAT.as_secs());

static ONE_CLUSTER: Mutex<()> = Mutex::new(());

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster/cluster.sh")
}

/// A running test cluster of hosts psyh1..psyhN; down on drop.
struct Cluster {
    dir: PathBuf,
    _one: MutexGuard<'static, ()>,
    _machine: common::ClusterLock,
}

impl Cluster {
    /// Brings up `n` hosts, or returns `None` (after saying why) when not root.
    fn up(n: usize, tag: &str) -> Option<Cluster> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: the SSH test cluster needs root (CI runs as root)");
            return None;
        }
        let one = ONE_CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
        let dir = std::env::temp_dir().join(format!("psyne-mh-{tag}-{}", std::process::id()));
        let c = Cluster {
            dir,
            _one: one,
            _machine: common::ClusterLock::take(),
        };
        let n = n.to_string();
        common::run_script(
            "cluster/cluster.sh",
            [OsStr::new("up"), n.as_ref(), c.dir.as_os_str()],
        );
        Some(c)
    }

    fn ssh_config(&self) -> PathBuf {
        self.dir.join("ssh_config")
    }

    /// psyrun, run from inside psyh1 with the cluster's SSH configuration (unless `args` give
    /// another), `$D` set to `dir`.
    fn psyrun(&self, dir: &TempDir, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", "psyh1"]).arg(psyrun_path());
        if !args.contains(&"--ssh-config") {
            cmd.arg("--ssh-config").arg(self.ssh_config());
        }
        cmd.args(args)
            .env("D", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// SIGKILLs host `i`'s sshd, the listener and every session: the host drops off the job.
    fn kill_sshd(&self, i: usize) {
        for pid in self.sshd_pids(i) {
            // SAFETY: kill takes plain integers; these are the sshd processes of our own test
            // host (its pid file and the sshd children under it).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// The pids of host `i`'s sshd: the listener and every sshd below it.
    fn sshd_pids(&self, i: usize) -> Vec<i32> {
        let listener: i32 = std::fs::read_to_string(self.dir.join(format!("sshd-{i}.pid")))
            .expect("reading an sshd pid file")
            .trim()
            .parse()
            .expect("an sshd pid");
        let mut all = vec![listener];
        let mut k = 0;
        while k < all.len() {
            for c in common::children(all[k]) {
                if common::command_name(c) == "sshd" {
                    all.push(c);
                }
            }
            k += 1;
        }
        all
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("timeout")
            .arg("60")
            .arg(script())
            .arg("down")
            .arg(&self.dir)
            .output();
    }
}

fn psyne_check() -> &'static str {
    env!("CARGO_BIN_EXE_psyne-check")
}

const FOUR_HOSTS: &str = "psyh1:2,psyh2:2,psyh3:2,psyh4:2";

/// Each of the 8 ranks of a [`FOUR_HOSTS`] job, tagged with its host, said every collective
/// matched the oracle.
fn assert_every_rank_checked_out(stdout: &str) {
    for rank in 0..8 {
        let host = rank / 2 + 1;
        let line = format!("[psyh{host}][{rank}] rank {rank}/8: every collective");
        assert!(stdout.contains(&line), "missing {line:?} in:\n{stdout}");
    }
}

#[test]
fn eight_ranks_on_four_hosts_run_every_collective_right() {
    let Some(c) = Cluster::up(4, "coll") else {
        return;
    };
    let dir = TempDir::new("mh-coll");
    let done = common::run(
        c.psyrun(
            &dir,
            &["-H", FOUR_HOSTS, "-n", "8", "--tag-output", psyne_check()],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    assert_every_rank_checked_out(&done.stdout);
}

/// Seven hosts, two ranks each: at `--tree-width 2`, psyh1 and psyh2 are reached from psyrun,
/// psyh1 reaches psyh3 and psyh4, psyh2 reaches psyh6 and psyh7, and psyh3 reaches psyh5.
const SEVEN_HOSTS: &str = "psyh1:2,psyh2:2,psyh3:2,psyh4:2,psyh5:2,psyh6:2,psyh7:2";

#[test]
fn a_tree_launch_over_ssh_runs_every_collective_and_names_each_route() {
    let Some(c) = Cluster::up(7, "tree") else {
        return;
    };
    let dir = TempDir::new("mh-tree");
    let tree = ["--tree-width", "2", "-H", SEVEN_HOSTS];
    let mut args = tree.to_vec();
    args.push("--check");
    let check = common::run(c.psyrun(&dir, &args), &dir);
    assert_eq!(check.code(), Some(0), "{}", check.stderr);
    for (host, via) in [(3, 1), (4, 1), (5, 3), (6, 2), (7, 2)] {
        let line = format!(
            "psyh{host}: ok (ssh root@10.213.0.{}:22 through psyh{via},",
            10 + host
        );
        assert!(
            check.stderr.contains(&line),
            "{line:?} in:\n{}",
            check.stderr
        );
    }
    let mut args = tree.to_vec();
    args.extend(["-n", "14", "--tag-output", psyne_check()]);
    let done = common::run(c.psyrun(&dir, &args), &dir);
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    for rank in 0..14 {
        let line = format!(
            "[psyh{}][{rank}] rank {rank}/14: every collective",
            rank / 2 + 1
        );
        assert!(
            done.stdout.contains(&line),
            "missing {line:?} in:\n{}",
            done.stdout
        );
    }
}

#[test]
fn a_lost_relay_fails_the_job_naming_the_hosts_below_it_and_nothing_is_left() {
    let Some(c) = Cluster::up(7, "relay") else {
        return;
    };
    let dir = TempDir::new("mh-relay");
    let hb = HEARTBEAT.as_secs().to_string();
    let extra = ["--tree-width", "2", "--heartbeat-timeout", &hb];
    let (job, pids) = sleeping_job(&c, &dir, SEVEN_HOSTS, 14, &extra);
    let t0 = Instant::now();
    // psyh2 relays for psyh6 and psyh7.
    c.kill_sshd(2);
    let done = job.wait(Duration::from_secs(30));
    assert_eq!(done.code(), Some(125), "{}", done.stderr);
    assert!(
        done.stderr.contains("lost the link to host psyh2"),
        "{}",
        done.stderr
    );
    for below in ["psyh6", "psyh7"] {
        let line = format!("lost the link to host {below} (lost with psyh2, which relayed for it");
        assert!(done.stderr.contains(&line), "{line:?} in:\n{}", done.stderr);
    }
    assert!(t0.elapsed() < LOST_HOST_LIMIT, "{:?}", t0.elapsed());
    all_gone(
        &pids,
        Duration::from_secs(15),
        "every rank, those below psyh2 too, to end",
    );
}

#[test]
fn a_rank_killed_on_one_host_restarts_the_job_on_every_host() {
    let Some(c) = Cluster::up(4, "restart") else {
        return;
    };
    let dir = TempDir::new("mh-restart");
    let done = common::run(
        c.psyrun(
            &dir,
            &[
                "-H",
                FOUR_HOSTS,
                "-n",
                "8",
                "--max-restarts",
                "1",
                "--grace",
                "2",
                "--tag-output",
                psyne_check(),
                "--fault",
                "sigkill-during:5",
                "--fault-attempts",
                "1",
            ],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    assert!(
        done.stderr.contains("attempt 1 failed: rank 5")
            && done
                .stderr
                .contains("attempt 2 (PSY_RESTART_COUNT=1): succeeded"),
        "{}",
        done.stderr
    );
    assert_every_rank_checked_out(&done.stdout);
}

#[test]
fn with_on_failure_continue_the_ranks_of_other_hosts_shrink_past_a_lost_host() {
    let Some(c) = Cluster::up(4, "lostcont") else {
        return;
    };
    let dir = TempDir::new("mh-lostcont");
    let args = [
        "-H",
        FOUR_HOSTS,
        "-n",
        "8",
        "--on-failure",
        "continue",
        "--heartbeat-timeout",
        "3",
        "--grace",
        "1",
        "-x",
        "PSY_TIMEOUT=30",
        "--tag-output",
        psyne_check(),
        "--shrink-trial",
        "7",
        "--no-victim",
    ];
    let job = Job::start(c.psyrun(&dir, &args), &dir);
    // Each rank prints its job line as it enters its loop of calls.
    eventually(Duration::from_secs(60), "every rank in its loop", || {
        job.stdout.text().matches(": job ").count() == 8
    });
    c.kill_sshd(3);
    let done = job.wait(Duration::from_secs(90));
    let ctx = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
    assert_eq!(done.code(), Some(0), "{ctx}");
    assert!(
        done.stderr.contains("lost the link to host psyh3")
            && done
                .stderr
                .contains("go on without them (--on-failure continue)"),
        "{ctx}"
    );
    for rank in [0, 1, 2, 3, 6, 7] {
        let host = rank / 2 + 1;
        let line = format!("[psyh{host}][{rank}] rank {rank}: shrunk to 6 ranks as rank");
        assert!(done.stdout.contains(&line), "missing {line:?}: {ctx}");
    }
}

#[test]
fn a_host_that_fails_twice_is_left_out_of_the_next_attempt() {
    let Some(c) = Cluster::up(4, "exclude") else {
        return;
    };
    let dir = TempDir::new("mh-exclude");
    let hostfile = dir.script(
        "hosts",
        "psyh1 slots=2\npsyh2 slots=2\npsyh3 slots=2\npsyh4 slots=2\n",
        0o644,
    );
    let body = r#"h=$(hostname); echo "rank=$PSY_RANK host=$h attempt=$PSY_RESTART_COUNT"; [ "$h" = psyh3 ] && exit 5; exit 0"#;
    let done = common::run(
        c.psyrun(
            &dir,
            &[
                "--hostfile",
                &hostfile.display().to_string(),
                "-n",
                "6",
                "--max-restarts",
                "3",
                "--exclude-failed-hosts",
                "--grace",
                "1",
                "sh",
                "-c",
                body,
            ],
        ),
        &dir,
    );
    let ctx = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
    assert_eq!(done.code(), Some(0), "{ctx}");
    assert!(
        done.stderr
            .contains("host psyh3 failed in 2 attempts; leaving it out of the next ones"),
        "{ctx}"
    );
    assert!(
        done.stderr.contains("3 attempts, 2 restarts of at most 3:"),
        "{ctx}"
    );
    // The third attempt ran ranks 4 and 5 on psyh4 instead.
    for rank in [4, 5] {
        let line = format!("rank={rank} host=psyh4 attempt=2");
        assert!(done.stdout.contains(&line), "missing {line:?}: {ctx}");
    }
    assert!(!done.stdout.contains("host=psyh3 attempt=2"), "{ctx}");
}

#[test]
fn ranks_run_on_their_hosts_with_the_contract_and_bindings_match_proc() {
    let Some(c) = Cluster::up(2, "bind") else {
        return;
    };
    let dir = TempDir::new("mh-bind");
    let done = common::run(
        c.psyrun(
            &dir,
            &[
                "-H",
                "psyh1:2,psyh2:2",
                "-n",
                "4",
                "--bind-to",
                "core",
                "--report-bindings",
                "sh",
                "-c",
                "echo \"rank $PSY_RANK on $(hostname) local $PSY_LOCAL_RANK/$PSY_LOCAL_SIZE node \
                 $PSY_NODE_RANK world $PSY_WORLD_SIZE cpus $(grep Cpus_allowed_list \
                 /proc/self/status | cut -f2)\"",
            ],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    for rank in 0..4 {
        let (host, local) = (rank / 2 + 1, rank % 2);
        let prefix = format!(
            "rank {rank} on psyh{host} local {local}/2 node {} world 4 cpus ",
            host - 1
        );
        let line = done
            .stdout
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{}", done.stdout));
        let actual = &line[prefix.len()..];
        let report = format!("psyrun: psyh{host} rank {rank}: cpus {actual} (bound to ");
        assert!(
            done.stderr.contains(&report),
            "binding report {report:?} missing or different from /proc:\n{}",
            done.stderr
        );
    }
}

#[test]
fn awkward_values_of_x_arrive_byte_for_byte_on_other_hosts() {
    let Some(c) = Cluster::up(2, "env") else {
        return;
    };
    let dir = TempDir::new("mh-env");
    let values = [
        "two  spaces and a tab\there",
        "it's \"quoted\" $HOME `id` \\ back",
        "line one\nline two\n",
        "=starts with equals=",
        "ünïcödé ✓",
        "",
    ];
    let mut args: Vec<String> = vec![
        "-H".into(),
        "psyh1:1,psyh2:1".into(),
        "-n".into(),
        "2".into(),
    ];
    args.extend(["-x".into(), "D".into()]);
    for (i, v) in values.iter().enumerate() {
        args.push("-x".into());
        args.push(format!("V{i}={v}"));
    }
    args.extend([
        "sh".into(),
        "-c".into(),
        format!(
            "for i in $(seq 0 {}); do eval \"printf %s \\\"\\$V$i\\\"\" > \"$D/v$i.$PSY_RANK\"; done",
            values.len() - 1
        ),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = common::run(c.psyrun(&dir, &args), &dir);
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    for rank in 0..2 {
        for (i, v) in values.iter().enumerate() {
            let got = std::fs::read(dir.path().join(format!("v{i}.{rank}"))).unwrap();
            assert_eq!(got, v.as_bytes(), "V{i} on rank {rank}");
        }
    }
}

/// Starts `ranks` ranks on `hosts` that record their pids and sleep; returns the job and the
/// pids.
fn sleeping_job(
    c: &Cluster,
    dir: &TempDir,
    hosts: &str,
    ranks: usize,
    extra: &[&str],
) -> (Job, Vec<i32>) {
    let body = format!("{RECORD_PID}; exec sleep 60");
    let n = ranks.to_string();
    let mut args = vec!["-H", hosts, "-n", &n, "-x", "D", "--grace", "1"];
    args.extend_from_slice(extra);
    args.extend(["sh", "-c", &body]);
    let mut job = Job::start(c.psyrun(dir, &args), dir);
    let pids = job.wait_for_pids(ranks);
    (job, pids)
}

fn all_gone(pids: &[i32], limit: Duration, what: &str) {
    eventually(limit, what, || pids.iter().all(|&p| gone(p)));
}

#[test]
fn ctrl_c_stops_every_rank_on_every_host() {
    let Some(c) = Cluster::up(4, "int") else {
        return;
    };
    let dir = TempDir::new("mh-int");
    let (job, pids) = sleeping_job(&c, &dir, FOUR_HOSTS, 8, &[]);
    job.signal(libc::SIGINT);
    let done = job.wait(Duration::from_secs(20));
    assert_eq!(done.code(), Some(130), "{}", done.stderr);
    assert!(done.stderr.contains("received SIGINT"), "{}", done.stderr);
    all_gone(
        &pids,
        Duration::from_secs(10),
        "every rank on every host to end",
    );
}

#[test]
fn a_host_whose_sshd_dies_fails_the_job_naming_it_and_nothing_is_left() {
    let Some(c) = Cluster::up(4, "sshd") else {
        return;
    };
    let dir = TempDir::new("mh-sshd");
    let hb = HEARTBEAT.as_secs().to_string();
    let (job, pids) = sleeping_job(&c, &dir, FOUR_HOSTS, 8, &["--heartbeat-timeout", &hb]);
    let t0 = Instant::now();
    c.kill_sshd(3);
    let done = job.wait(Duration::from_secs(30));
    assert_eq!(done.code(), Some(125), "{}", done.stderr);
    assert!(
        done.stderr.contains("lost the link to host psyh3"),
        "{}",
        done.stderr
    );
    assert!(t0.elapsed() < LOST_HOST_LIMIT, "{:?}", t0.elapsed());
    all_gone(
        &pids,
        Duration::from_secs(15),
        "every rank, psyh3's too, to end",
    );
}

#[test]
fn a_host_cut_off_the_network_fails_the_job_within_the_heartbeat_and_stops_itself() {
    let Some(c) = Cluster::up(4, "cut") else {
        return;
    };
    let dir = TempDir::new("mh-cut");
    let hb = HEARTBEAT.as_secs().to_string();
    let (job, pids) = sleeping_job(&c, &dir, FOUR_HOSTS, 8, &["--heartbeat-timeout", &hb]);
    let t0 = Instant::now();
    let cut = Command::new("ip")
        .args(["link", "set", "psyv3", "down"])
        .status()
        .expect("ip link");
    assert!(cut.success());
    let done = job.wait(Duration::from_secs(30));
    let took = t0.elapsed();
    assert_eq!(done.code(), Some(125), "{}", done.stderr);
    assert!(
        done.stderr.contains("lost the link to host psyh3") && done.stderr.contains("no word"),
        "{}",
        done.stderr
    );
    assert!(took < LOST_HOST_LIMIT, "took {took:?}");
    // psyh3's ranks: their agent hears nothing for 3 s, then stops them (grace 1 s).
    all_gone(
        &pids,
        Duration::from_secs(15),
        "every rank, psyh3's too, to end",
    );
}

/// An agent that takes longer to start than the heartbeat timeout (a loaded host: here a
/// `--remote-psyrun` that waits 5 s before it runs psyrun) is not taken for a lost host: its
/// first word may take longer than the heartbeat, within the preflight's deadline.
#[test]
fn an_agent_slower_to_start_than_the_heartbeat_timeout_still_runs_the_job() {
    let Some(c) = Cluster::up(2, "slow") else {
        return;
    };
    let dir = TempDir::new("mh-slow");
    let slow = dir.script(
        "slow-psyrun",
        &format!(
            "#!/bin/sh\nsleep 5\nexec {} \"$@\"\n",
            psyrun_path().display()
        ),
        0o755,
    );
    let slow = slow.display().to_string();
    let args = [
        "-H",
        "psyh1:1,psyh2:1",
        "-n",
        "2",
        "--heartbeat-timeout",
        "2",
        "--remote-psyrun",
        &slow,
        "sh",
        "-c",
        "echo ran as rank $PSY_RANK",
    ];
    let done = common::run(c.psyrun(&dir, &args), &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for rank in 0..2 {
        let line = format!("ran as rank {rank}");
        assert!(
            done.stdout.contains(&line),
            "{line:?} not in:\n{}",
            done.stdout
        );
    }
}

fn preflight_fails(c: &Cluster, dir: &TempDir, args: &[&str], expect: &[&str]) {
    let marker = dir.path().join("started");
    let body = format!("touch {}", marker.display());
    let mut all = args.to_vec();
    all.extend(["-n", "2", "sh", "-c", &body]);
    let t0 = Instant::now();
    let done = common::run(c.psyrun(dir, &all), dir);
    assert_eq!(done.code(), Some(125), "{}", done.stderr);
    for e in expect {
        assert!(done.stderr.contains(e), "{e:?} not in:\n{}", done.stderr);
    }
    assert!(t0.elapsed() < Duration::from_secs(12), "{:?}", t0.elapsed());
    assert!(
        !marker.exists(),
        "a rank started although the preflight failed"
    );
}

#[test]
fn an_unreachable_host_a_wrong_key_and_a_missing_psyrun_fail_the_preflight() {
    let Some(c) = Cluster::up(2, "pre") else {
        return;
    };
    let dir = TempDir::new("mh-pre");
    // An address of the cluster's subnet that no host has: it routes through our bridge only.
    let route = Command::new("ip")
        .args(["route", "get", "10.213.0.99"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&route.stdout).contains("dev psybr0"),
        "10.213.0.99 must route through the test bridge"
    );
    preflight_fails(
        &c,
        &dir,
        &["-H", "psyh1:1,10.213.0.99:1", "--connect-timeout", "2"],
        &["10.213.0.99: cannot connect", "nothing was started"],
    );
    // A key the hosts do not accept.
    let wrong = dir.path().join("wrong_key");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", ""])
        .arg("-f")
        .arg(&wrong)
        .status()
        .unwrap();
    assert!(made.success());
    let config = dir.path().join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "Host psyh1\n HostName 10.213.0.11\nHost psyh2\n HostName 10.213.0.12\nHost *\n \
             User root\n IdentityFile {}\n StrictHostKeyChecking no\n",
            wrong.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    preflight_fails(
        &c,
        &dir,
        &["--ssh-config", &config, "-H", "psyh1:1,psyh2:1"],
        &[
            "psyh1: psyh1 refused to log in root@",
            "psyh2: psyh2 refused",
        ],
    );
    // No psyrun at that path on the hosts.
    preflight_fails(
        &c,
        &dir,
        &[
            "-H",
            "psyh1:1,psyh2:1",
            "--remote-psyrun",
            "/nonexistent/psyrun",
        ],
        &["psyrun was not found on the host at /nonexistent/psyrun"],
    );
    // --check prints a verdict per host.
    let done = common::run(
        c.psyrun(
            &dir,
            &[
                "--check",
                "-H",
                "psyh1,psyh2,10.213.0.99",
                "--connect-timeout",
                "2",
            ],
        ),
        &dir,
    );
    assert_eq!(done.code(), Some(125), "{}", done.stderr);
    for line in [
        "psyrun: psyh1: ok (ssh root@10.213.0.11:22",
        "host name psyh1, 2 cores",
        "psyrun: psyh2: ok",
        "psyrun: 10.213.0.99: FAILED: cannot connect",
    ] {
        assert!(
            done.stderr.contains(line),
            "{line:?} not in:\n{}",
            done.stderr
        );
    }
}

#[test]
fn host_keys_are_checked_against_known_hosts() {
    let Some(c) = Cluster::up(1, "keys") else {
        return;
    };
    let dir = TempDir::new("mh-keys");
    let known = dir.path().join("known_hosts");
    let config = dir.path().join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "Host psyh1\n HostName 10.213.0.11\n User root\n IdentityFile {}\n \
             StrictHostKeyChecking yes\n UserKnownHostsFile {}\n",
            c.dir.join("id_ed25519").display(),
            known.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let check = |expect_ok: bool, expect: &str| {
        let done = common::run(
            c.psyrun(&dir, &["--ssh-config", &config, "--check", "-H", "psyh1"]),
            &dir,
        );
        assert_eq!(
            done.code(),
            Some(if expect_ok { 0 } else { 125 }),
            "{}",
            done.stderr
        );
        assert!(
            done.stderr.contains(expect),
            "{expect:?} not in:\n{}",
            done.stderr
        );
    };
    // Unknown host, strict checking: refused, saying how to add the key.
    std::fs::write(&known, "").unwrap();
    check(false, "is not in");
    // The host's real key: accepted.
    let key = std::fs::read_to_string(c.dir.join("host_key.pub")).unwrap();
    let mut fields = key.split_whitespace();
    let (kind, blob) = (fields.next().unwrap(), fields.next().unwrap());
    std::fs::write(&known, format!("10.213.0.11 {kind} {blob}\n")).unwrap();
    check(true, "psyh1: ok");
    // Another key for that address: refused as a changed key.
    let other = dir.path().join("other_key");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", ""])
        .arg("-f")
        .arg(&other)
        .status()
        .unwrap();
    assert!(made.success());
    let other = std::fs::read_to_string(dir.path().join("other_key.pub")).unwrap();
    let mut fields = other.split_whitespace();
    let (kind, blob) = (fields.next().unwrap(), fields.next().unwrap());
    std::fs::write(&known, format!("10.213.0.11 {kind} {blob}\n")).unwrap();
    check(false, "does not match");
}

/// An `ssh-agent` we started, killed (by its pid) on drop.
struct SshAgent(std::process::Child);

impl Drop for SshAgent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_ssh_agent_and_a_hostfile_user_and_port_reach_hosts() {
    let Some(c) = Cluster::up(2, "agent") else {
        return;
    };
    let dir = TempDir::new("mh-agent");
    // A home without keys and a configuration without IdentityFile: only the agent can log in.
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let config = dir.path().join("ssh_config");
    std::fs::write(
        &config,
        "Host psyh1\n HostName 10.213.0.11\nHost psyh2\n HostName 10.213.0.12\nHost *\n \
         StrictHostKeyChecking no\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let sock = dir.path().join("agent.sock");
    let agent = SshAgent(
        Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&sock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting ssh-agent"),
    );
    eventually(Duration::from_secs(10), "the agent's socket", || {
        sock.exists()
    });
    let added = Command::new("ssh-add")
        .arg(c.dir.join("id_ed25519"))
        .env("SSH_AUTH_SOCK", &sock)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(added.success());
    let hostfile = dir.script(
        "hosts",
        "root@psyh1 slots=1\nroot@psyh2 slots=1 port=2222\n",
        0o644,
    );
    let hostfile = hostfile.display().to_string();
    let run = |with_agent: bool| {
        let mut cmd = c.psyrun(
            &dir,
            &["--ssh-config", &config, "--check", "--hostfile", &hostfile],
        );
        cmd.env("HOME", &home).env("USER", "nobody");
        if with_agent {
            cmd.env("SSH_AUTH_SOCK", &sock);
        } else {
            cmd.env_remove("SSH_AUTH_SOCK");
        }
        common::run(cmd, &dir)
    };
    let done = run(true);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for line in [
        "psyh1: ok (ssh root@10.213.0.11:22,",
        "psyh2: ok (ssh root@10.213.0.12:2222,",
    ] {
        assert!(
            done.stderr.contains(line),
            "{line:?} not in:\n{}",
            done.stderr
        );
    }
    let done = run(false);
    assert_eq!(done.code(), Some(125), "{}", done.stderr);
    assert!(done.stderr.contains("no key found"), "{}", done.stderr);
    drop(agent);
}

/// The ring program built with `flavour` (`launcher/tests/mpi_programs/ring.c`).
fn mpi_ring(flavour: common::mpi::Flavour) -> String {
    common::mpi::build(flavour, &common::mpi::program_source("ring.c"))
        .to_string_lossy()
        .into_owned()
}

/// psyrun's arguments for an MPI job of `flavour` on [`FOUR_HOSTS`]: `-x` what its ranks need,
/// then `extra`, then the program and `args`.
fn mpi_args(
    flavour: common::mpi::Flavour,
    extra: &[&str],
    prog: &str,
    args: &[&str],
) -> Vec<String> {
    let mut all: Vec<String> = ["-H", FOUR_HOSTS, "-n", "8", "--timeout", "120"]
        .iter()
        .map(ToString::to_string)
        .collect();
    for (k, v) in flavour.rank_env() {
        all.push("-x".into());
        all.push(format!("{k}={v}"));
    }
    all.extend(extra.iter().map(ToString::to_string));
    all.push(prog.to_string());
    all.extend(args.iter().map(ToString::to_string));
    all
}

/// An ordinary MPI program built with each of the four MPIs runs as one world of 8 on four
/// hosts, launched flat and as a tree: psyrun's agents serve each host's ranks PMIx or PMI-1,
/// and the key-value space is job-wide through the job's store.
#[test]
fn mpi_programs_of_every_mpi_run_as_one_world_on_four_hosts_flat_and_tree() {
    let Some(c) = Cluster::up(4, "mpi") else {
        return;
    };
    let dir = TempDir::new("mh-mpi");
    let _mpi = common::MpiLock::take();
    for flavour in common::mpi::FLAVOURS {
        let prog = mpi_ring(flavour);
        for launch in [
            &["--tag-output"][..],
            &["--tag-output", "--tree-width", "2"],
        ] {
            let args = mpi_args(flavour, launch, &prog, &[]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let done = common::run(c.psyrun(&dir, &args), &dir);
            let ctx = format!("{flavour:?} {launch:?}: {}\n{}", done.stdout, done.stderr);
            assert_eq!(done.code(), Some(0), "{ctx}");
            for rank in 0..8 {
                let line = format!(
                    "[psyh{}][{rank}] ring ok rank {rank} of 8 (node-local peers 2)",
                    rank / 2 + 1
                );
                assert!(done.stdout.contains(&line), "missing {line:?}: {ctx}");
            }
        }
    }
}

/// The pids of the processes running `exe` with `PMI_RANK` or `PMIX_RANK` in their
/// environment, by rank (every host of the test cluster shares this machine's pid namespace).
fn mpi_ranks_running(exe: &str) -> Vec<(usize, i32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let is_ring = std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|p| p == std::path::Path::new(exe));
        if !is_ring {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let rank = environ.split(|&b| b == 0).find_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let v = kv
                .strip_prefix("PMI_RANK=")
                .or_else(|| kv.strip_prefix("PMIX_RANK="))?;
            v.parse::<usize>().ok()
        });
        if let Some(rank) = rank {
            found.push((rank, pid));
        }
    }
    found
}

/// `MPI_Abort` on another host ends the job with its code, naming the rank and its host; a rank
/// SIGKILLed inside `MPI_Allreduce` on another host ends the job with 137, and no process of
/// the job is left on any host.
#[test]
fn an_mpi_abort_or_a_killed_rank_on_another_host_ends_the_job_leaving_nothing() {
    let Some(c) = Cluster::up(4, "mpi-fail") else {
        return;
    };
    let dir = TempDir::new("mh-mpi-fail");
    let _mpi = common::MpiLock::take();
    for flavour in [common::mpi::Flavour::OpenMpi, common::mpi::Flavour::Mpich4] {
        let prog = mpi_ring(flavour);
        let args = mpi_args(flavour, &[], &prog, &["abort", "5", "9"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let done = common::run(c.psyrun(&dir, &args), &dir);
        let ctx = format!("{flavour:?}: {}\n{}", done.stdout, done.stderr);
        assert_eq!(done.code(), Some(9), "{ctx}");
        assert!(
            done.stderr.contains("rank 5 on psyh3 (pid ")
                && done.stderr.contains("called MPI_Abort with code 9"),
            "{ctx}"
        );

        let args = mpi_args(flavour, &[], &prog, &["hang", "3"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let job = Job::start(c.psyrun(&dir, &args), &dir);
        let mut ranks = Vec::new();
        eventually(Duration::from_secs(60), "8 ranks looping", || {
            ranks = mpi_ranks_running(&prog);
            ranks.len() == 8 && job.stdout.text().contains("ring looping rank 3")
        });
        let victim = ranks
            .iter()
            .find(|(r, _)| *r == 3)
            .map(|(_, p)| *p)
            .unwrap();
        // SAFETY: kill takes plain integers; `victim` is rank 3 of the job this test started.
        unsafe { libc::kill(victim, libc::SIGKILL) };
        let done = job.wait(Duration::from_secs(120));
        let ctx = format!("{flavour:?} kill: {}\n{}", done.stdout, done.stderr);
        assert_eq!(done.code(), Some(137), "{ctx}");
        assert!(done.stderr.contains("rank 3 on psyh2 (pid "), "{ctx}");
        for (_, pid) in ranks {
            eventually(Duration::from_secs(30), "every rank gone", || gone(pid));
        }
        assert!(mpi_ranks_running(&prog).is_empty(), "{ctx}");
    }
}
