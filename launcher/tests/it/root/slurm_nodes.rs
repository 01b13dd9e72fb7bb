//! psyrun inside a real Slurm allocation that spans three nodes:
//! `scripts/cluster/slurm.sh up-nodes 3` starts munged and slurmctld in the root namespace and one
//! slurmd in each of the network namespaces psyh1..psyh3 of `scripts/cluster/cluster.sh` (each with
//! its own host name and address on the bridge psybr0). Each test brings up its own cluster and
//! always takes it down again (its daemons by their pid files, the namespaces through cluster.sh).
//!
//! Client commands (`salloc`, `sbatch`, `srun`, `scancel`) run in the root namespace through
//! `slurm.sh run`, which gives them an /etc/hosts naming the nodes; psyrun inside `salloc` then
//! reaches every node's agent through srun, psyrun in an `sbatch` script does the same from the
//! first node. Checked: every collective right with ranks on all three nodes and the PSY_*
//! contract there; a rank SIGKILLed on one node, a node's slurmd SIGKILLed, and `scancel`, each
//! end the job with nothing left on any node (no process of the job, no shared-memory segment).
//! And `srun --mpi=pmix -N3 -n6 psyne-check` straight under Slurm's PMIx (see
//! [`srun_mpi_pmix_forms_a_group_across_nodes`] for what it requires and when).
//!
//! The node names, bridge and subnet are those of the SSH test cluster, so these tests take the
//! same machine-wide lock ([`common::ClusterLock`]) as `root/multihost.rs`. They need root and the
//! Debian packages slurmctld, slurmd, munge, slurm-client, openssh-server, iproute2 and
//! util-linux (`scripts/setup.sh`); without them they say why and pass.

use crate::common;

use common::{eventually_or_not, job_ids, segments_of, slurm, Done, Job, TempDir};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One cluster at a time in this process (the machine-wide lock covers other processes).
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// The nodes of every test's cluster; two ranks (and two CPUs) on each.
const NODES: usize = 3;

/// The ranks of a job: two per node.
const RANKS: usize = 2 * NODES;

/// The longest one Slurm command of a test may take.
const SLURM_DEADLINE: Duration = Duration::from_secs(120);

/// How long after a job ends its processes (ranks, agents, srun, step daemons) may take to go.
const WIND_DOWN: Duration = Duration::from_secs(45);

fn psyne_check() -> &'static str {
    env!("CARGO_BIN_EXE_psyne-check")
}

/// The node rank `rank` of a [`RANKS`]-rank job runs on (Slurm's block distribution, psyrun's
/// placement: two per node, in order).
fn node_of(rank: usize) -> String {
    format!("psyh{}", rank / 2 + 1)
}

/// Why these tests cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    let tools = [
        "slurmctld",
        "slurmd",
        "munged",
        "salloc",
        "sbatch",
        "srun",
        "scancel",
        "ip",
        "unshare",
        "nsenter",
    ];
    let install = "slurmctld slurmd munge slurm-client iproute2 util-linux";
    if let Some(why) = slurm::unavailable(&tools, install) {
        return Some(why);
    }
    if !common::on_path("sshd") && !std::path::Path::new("/usr/sbin/sshd").exists() {
        return Some(
            "sshd is not installed (scripts/cluster/cluster.sh starts one per host; \
             scripts/setup.sh installs openssh-server)"
                .into(),
        );
    }
    None
}

/// A running cluster of [`NODES`] nodes; down (every daemon it started, its namespaces) on drop.
struct Nodes {
    dir: PathBuf,
    _one: MutexGuard<'static, ()>,
    _machine: common::ClusterLock,
}

impl Nodes {
    /// Starts a cluster, or says why the test is skipped.
    fn up(tag: &str) -> Option<Nodes> {
        if let Some(why) = unavailable() {
            eprintln!("skipped: {why}");
            return None;
        }
        let one = ONE_CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
        let machine = common::ClusterLock::take();
        let dir = std::env::temp_dir().join(format!("psyne-slurmn-{tag}-{}", std::process::id()));
        // Made before the cluster starts, so that a failing start is torn down too.
        let nodes = Nodes {
            dir,
            _one: one,
            _machine: machine,
        };
        let n = NODES.to_string();
        common::run_script(
            "cluster/slurm.sh",
            [OsStr::new("up-nodes"), n.as_ref(), nodes.dir.as_os_str()],
        );
        Some(nodes)
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// A Slurm client command of this cluster (`salloc`, `sbatch`, ...) run through `slurm.sh
    /// run` (so the node names resolve), with `D` set to `dir` and `dir` as working directory.
    fn command(&self, program: &str, dir: &TempDir) -> Command {
        let mut c = Command::new(slurm::script());
        c.arg("run").arg(&self.dir).arg(program);
        slurm::client(c, &self.conf(), dir)
    }

    /// Processes other than the cluster's daemons that carry this cluster's `SLURM_CONF`:
    /// salloc, srun, psyrun, its agents and their ranks, and the step daemons, on every node
    /// (the namespaces share the process table).
    fn leftovers(&self) -> Vec<String> {
        slurm::leftovers(&self.conf())
    }

    /// Waits (at most [`WIND_DOWN`]) until no process of the cluster's jobs is left on any node;
    /// fails naming the survivors.
    fn assert_nothing_left(&self) {
        let none = eventually_or_not(WIND_DOWN, || self.leftovers().is_empty());
        assert!(
            none,
            "left running {WIND_DOWN:?} after the job: {:?}",
            self.leftovers()
        );
    }

    /// [`Nodes::assert_nothing_left`], and no shared-memory segment of psyne job `job` either.
    fn assert_nothing_left_of(&self, job: &str) {
        self.assert_nothing_left();
        let left = segments_of(job);
        assert!(left.is_empty(), "segments left in /dev/shm: {left:?}");
    }

    /// SIGKILLs node `node`'s slurmd (by its pid file, after checking the process is slurmd).
    fn kill_slurmd(&self, node: &str) {
        let file = self.dir.join(format!("slurmd-{node}.pid"));
        let pid: i32 = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
            .trim()
            .parse()
            .expect("a pid in the slurmd pid file");
        assert_eq!(
            common::command_name(pid),
            "slurmd",
            "pid {pid} of {} is not slurmd",
            file.display()
        );
        // SAFETY: kill takes plain integers; the pid is our own test node's slurmd (its pid file,
        // checked a moment ago to name a live slurmd).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        slurm::down(&self.dir, 120);
    }
}

/// Runs a Slurm client command to completion (at most [`SLURM_DEADLINE`]).
fn finish(cmd: Command, dir: &TempDir) -> Done {
    Job::start(cmd, dir).wait(SLURM_DEADLINE)
}

/// `salloc -N3 -n6 psyrun -n 6 ARGS...`.
fn salloc_psyrun(nodes: &Nodes, dir: &TempDir, args: &[&str]) -> Command {
    salloc_running(nodes, dir, &[], args)
}

/// What salloc's command prints last in [`salloc_psyrun_saying_its_code`]: psyrun's exit code.
const EXITED: &str = "psyrun exited with ";

/// `salloc -N3 -n6 sh -c 'psyrun -n 6 ARGS...; echo "psyrun exited with $?" >&2'`: for jobs
/// whose allocation is taken away under them, so that psyrun's end and code are seen even when
/// salloc does not end ([`wait_revoked`]).
fn salloc_psyrun_saying_its_code(nodes: &Nodes, dir: &TempDir, args: &[&str]) -> Command {
    let say = format!("\"$@\"; echo \"{EXITED}$?\" >&2");
    salloc_running(nodes, dir, &["sh", "-c", &say, "sh"], args)
}

/// `salloc -N3 -n6 BEFORE... psyrun -n 6 ARGS...`.
fn salloc_running(nodes: &Nodes, dir: &TempDir, before: &[&str], args: &[&str]) -> Command {
    let mut cmd = nodes.command("salloc", dir);
    cmd.args(["-N", &NODES.to_string(), "-n", &RANKS.to_string()])
        .args(before)
        .arg(common::psyrun_path())
        .args(["-n", &RANKS.to_string()])
        .args(args);
    cmd
}

/// A job whose allocation was taken away under it: psyrun's exit code and what salloc printed.
struct Revoked {
    psyrun_code: i32,
    done: Done,
}

/// Waits for psyrun, started by [`salloc_psyrun_saying_its_code`], to end (at most `limit`),
/// then for salloc (at most [`WIND_DOWN`]).
///
/// Slurm's salloc (22.05.8 here; the code is the same up to 26.05) can spin at full CPU forever,
/// deaf to SIGTERM, when its command exits just as it handles the revocation of its allocation:
/// the handler's `waitpid(command, WNOHANG)` reaps the command, and the main thread's loop around
/// `waitpid(command)` then retries on ECHILD for good. CI met it once after this file's scancel;
/// `salloc sh -c 'scancel $SLURM_JOB_ID'` did it in 1 of 26 tries here. A salloc left so,
/// without its command, is SIGKILLed and said so: psyrun's end, its code and what it printed are
/// what the tests check, and they are all seen before.
fn wait_revoked(job: Job, limit: Duration) -> Revoked {
    let ended = eventually_or_not(limit, || job.stderr.text().contains(EXITED));
    assert!(
        ended,
        "psyrun did not exit within {limit:?}; stderr so far:\n{}",
        job.stderr.text()
    );
    let pid = job.pid();
    let done = match job.wait_or_not(WIND_DOWN) {
        Ok(done) => done,
        Err(job) => {
            end_salloc_without_its_command(pid, &job.stderr.text());
            job.wait(WIND_DOWN)
        }
    };
    let psyrun_code = done
        .stderr
        .split(EXITED)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exit code after {EXITED:?} in:\n{}", done.stderr));
    Revoked { psyrun_code, done }
}

/// SIGKILLs the salloc at or below `pid` (`slurm.sh run` execs it) that is still running although
/// its command has ended (the Slurm bug of [`wait_revoked`]); fails if it still has its command.
fn end_salloc_without_its_command(pid: i32, stderr: &str) {
    let salloc = std::iter::once(pid)
        .chain(common::descendants(pid))
        .find(|&p| common::command_name(p) == "salloc")
        .unwrap_or_else(|| panic!("no salloc at or below pid {pid}, still running:\n{stderr}"));
    let running: Vec<i32> = common::children(salloc)
        .into_iter()
        .filter(|&p| !common::gone(p))
        .collect();
    assert!(
        running.is_empty(),
        "salloc still runs {running:?} {WIND_DOWN:?} after psyrun exited:\n{stderr}"
    );
    eprintln!(
        "salloc (pid {salloc}) still runs {WIND_DOWN:?} after its command ended: Slurm's \
         salloc that reaped its command while handling the revocation; SIGKILLing it"
    );
    // SAFETY: kill takes plain integers; the pid is a live salloc this test started (below its
    // own child, which has not been reaped).
    unsafe { libc::kill(salloc, libc::SIGKILL) };
}

/// Each rank, tagged with its node, said every collective matched the oracle.
fn assert_every_rank_checked_out(text: &str) {
    for rank in 0..RANKS {
        let line = format!(
            "[{}][{rank}] rank {rank}/{RANKS}: every collective x op x type matches the oracle",
            node_of(rank)
        );
        assert!(text.contains(&line), "missing {line:?} in:\n{text}");
    }
}

/// A rank body that prints its side of psyrun's contract and where it runs.
const CONTRACT: &str = "echo \"contract r=$PSY_RANK host=$(hostname) lr=$PSY_LOCAL_RANK \
                        ls=$PSY_LOCAL_SIZE node=$PSY_NODE_RANK w=$PSY_WORLD_SIZE \
                        store=$PSY_STORE master=$MASTER_ADDR\"";

/// Each rank printed the contract of a [`RANKS`]-rank job with two ranks per node, on its node,
/// the store at `store_ip` and the torch master at `master`.
fn assert_contract(text: &str, store_ip: &str, master: &str) {
    for rank in 0..RANKS {
        let prefix = format!(
            "contract r={rank} host={} lr={} ls=2 node={} w={RANKS} store={store_ip}:",
            node_of(rank),
            rank % 2,
            rank / 2
        );
        let line = text
            .lines()
            .find(|l| l.contains(&prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{text}"));
        assert!(
            line.ends_with(&format!(" master={master}")),
            "rank {rank}: MASTER_ADDR should be {master}: {line}"
        );
    }
}

#[test]
fn psyrun_in_salloc_runs_every_collective_with_ranks_on_three_nodes() {
    let Some(nodes) = Nodes::up("salloc") else {
        return;
    };
    let dir = TempDir::new("slurmn-salloc");
    // Every node reachable through srun, each its own host.
    let done = finish(salloc_psyrun(&nodes, &dir, &["--check"]), &dir);
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    for n in 1..=NODES {
        let line = format!("psyrun: psyh{n}: ok (srun on psyh{n}, psyrun ");
        assert!(done.stderr.contains(&line), "{line:?} in:\n{}", done.stderr);
    }
    // The contract on every node: psyrun (in the root namespace) serves the store on the
    // bridge's address; the torch master is rank 0's node.
    let done = finish(
        salloc_psyrun(&nodes, &dir, &["--tag-output", "sh", "-c", CONTRACT]),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    assert_contract(&done.stdout, "10.213.0.1", "10.213.0.11");
    // Every collective, across the nodes (TCP) and within each (shared memory).
    let t0 = Instant::now();
    let done = finish(
        salloc_psyrun(&nodes, &dir, &["--tag-output", psyne_check()]),
        &dir,
    );
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    assert_every_rank_checked_out(&done.stdout);
    eprintln!("salloc -N3 psyrun -n 6 psyne-check: {:?}", t0.elapsed());
    nodes.assert_nothing_left();
}

#[test]
fn psyrun_in_an_sbatch_script_runs_every_collective_from_the_first_node() {
    let Some(nodes) = Nodes::up("sbatch") else {
        return;
    };
    let dir = TempDir::new("slurmn-sbatch");
    let psyrun = common::psyrun_path();
    let job = dir.script(
        "job.sh",
        &format!(
            "#!/bin/sh\necho \"script on $(hostname)\"\n{psyrun} -n {RANKS} --tag-output sh -c \
             '{}' || exit\nexec {psyrun} -n {RANKS} --tag-output {}\n",
            CONTRACT.replace('\'', r"'\''"),
            psyne_check(),
            psyrun = psyrun.display()
        ),
        0o755,
    );
    let mut cmd = nodes.command("sbatch", &dir);
    cmd.args(["-N", &NODES.to_string(), "-n", &RANKS.to_string()]);
    let text = slurm::sbatch_wait(cmd, &job, &dir, SLURM_DEADLINE);
    assert!(text.starts_with("script on psyh1\n"), "{text}");
    // psyrun runs on psyh1: its own ranks too must be told its address on the bridge, not
    // 127.0.0.1, or the ranks of the other nodes would be sent to themselves.
    assert_contract(&text, "10.213.0.11", "10.213.0.11");
    assert_every_rank_checked_out(&text);
    nodes.assert_nothing_left();
}

#[test]
fn a_rank_killed_on_one_node_fails_the_job_naming_it_and_leaves_nothing_anywhere() {
    let Some(nodes) = Nodes::up("rankkill") else {
        return;
    };
    let dir = TempDir::new("slurmn-rankkill");
    // Rank 3 (on psyh2) SIGKILLs itself while every rank is in a series of large all-reduces,
    // its neighbour on psyh2 over shared memory and the others over TCP.
    let timeout = Duration::from_secs(20);
    let cmd = salloc_psyrun(
        &nodes,
        &dir,
        &[
            "-x",
            &format!("PSY_TIMEOUT={}", timeout.as_secs()),
            psyne_check(),
            "--fault",
            "sigkill-during:3",
        ],
    );
    let done = finish(cmd, &dir);
    let ctx = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
    assert_eq!(done.code(), Some(137), "{ctx}");
    assert!(
        done.stderr.contains("rank 3 on psyh2") && done.stderr.contains("SIGKILL"),
        "{ctx}"
    );
    // Within the ranks' PSY_TIMEOUT, and the start of an allocation on three nodes twice over.
    assert!(done.elapsed < 3 * timeout, "took {:?}", done.elapsed);
    let jobs = job_ids(&done.stdout);
    assert_eq!(jobs.len(), 1, "one job id from the ranks: {ctx}");
    nodes.assert_nothing_left_of(&jobs[0]);
}

/// Starts `salloc -N3 -n6 psyrun -n 6 psyne-check --fault hang:5`: every rank forms the group
/// and says its job, then rank 5 sleeps and the others wait for it in an all-reduce. Returns the
/// job once every rank said its job, and that job id.
fn hanging_job(nodes: &Nodes, dir: &TempDir) -> (Job, String) {
    let cmd = salloc_psyrun_saying_its_code(
        nodes,
        dir,
        &["-x", "PSY_TIMEOUT=600", psyne_check(), "--fault", "hang:5"],
    );
    let job = Job::start(cmd, dir);
    let all_said = eventually_or_not(SLURM_DEADLINE, || {
        job_ids(&job.stdout.text()).len() == 1
            && job.stdout.text().matches(": job ").count() == RANKS
    });
    assert!(
        all_said,
        "the ranks did not all start:\nstdout:\n{}\nstderr:\n{}",
        job.stdout.text(),
        job.stderr.text()
    );
    let id = job_ids(&job.stdout.text()).remove(0);
    (job, id)
}

#[test]
fn a_nodes_slurmd_killed_during_a_job_ends_it_within_a_bound_and_leaves_nothing() {
    let Some(nodes) = Nodes::up("slurmdkill") else {
        return;
    };
    let dir = TempDir::new("slurmn-slurmdkill");
    let (job, id) = hanging_job(&nodes, &dir);
    let t0 = Instant::now();
    nodes.kill_slurmd("psyh2");
    // slurmctld notices the silent node (SlurmdTimeout=10 in slurm.sh; it pings at intervals),
    // sets it DOWN and ends the job; the agent on psyh2, whose step daemon lives on, hears
    // nothing from psyrun for its heartbeat timeout and stops its ranks.
    let Revoked { psyrun_code, done } = wait_revoked(job, Duration::from_secs(150));
    let took = t0.elapsed();
    let ctx = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
    assert_ne!(psyrun_code, 0, "{ctx}");
    assert!(
        done.stderr.contains("psyh2"),
        "the failure names psyh2: {ctx}"
    );
    assert!(
        took < Duration::from_secs(90),
        "the job took {took:?} to end: {ctx}"
    );
    eprintln!("slurmd of psyh2 killed: the job ended {took:?} later");
    nodes.assert_nothing_left_of(&id);
}

#[test]
fn scancel_of_the_job_leaves_nothing_anywhere() {
    let Some(nodes) = Nodes::up("scancel") else {
        return;
    };
    let dir = TempDir::new("slurmn-scancel");
    let (job, id) = hanging_job(&nodes, &dir);
    let stderr = job.stderr.text();
    let slurm_job = stderr
        .split("Granted job allocation ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("salloc's job id in:\n{stderr}"))
        .to_string();
    let t0 = Instant::now();
    let mut cancel = nodes.command("scancel", &dir);
    cancel.arg(&slurm_job);
    let cancelled = finish(cancel, &dir);
    assert_eq!(cancelled.code(), Some(0), "{}", cancelled.stderr);
    let Revoked { psyrun_code, done } = wait_revoked(job, Duration::from_secs(60));
    let ctx = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
    assert_ne!(psyrun_code, 0, "{ctx}");
    assert!(
        done.stderr
            .contains(&format!("allocation {slurm_job} has been revoked")),
        "{ctx}"
    );
    eprintln!("scancel: the job ended {:?} later", t0.elapsed());
    nodes.assert_nothing_left_of(&id);
}

/// `srun --mpi=pmix -N3 -n6 psyne-check --backend native`: no psyrun, each rank started by the
/// step daemons of three nodes with only Slurm's PMIx server to find the others.
/// The psyne group must form directly through `psyne::init()`'s PMIx bootstrap (not over MPI: a
/// line ending `on native-over-mpi` fails), link across the nodes, and get every collective
/// right; nothing is left afterwards. The PMIx environment is checked on every node first.
#[test]
fn srun_mpi_pmix_forms_a_group_across_nodes() {
    let Some(nodes) = Nodes::up("pmix") else {
        return;
    };
    let dir = TempDir::new("slurmn-pmix");
    // Slurm's PMIx server on every node: each task sees its rank, namespace and server.
    let mut cmd = nodes.command("srun", &dir);
    cmd.args(["--mpi=pmix", "-N3", "-n3", "sh", "-c"]).arg(
        "echo \"pmix $(hostname) rank=$PMIX_RANK ns=${PMIX_NAMESPACE:+set} \
         uri=${PMIX_SERVER_URI41:+set}\"",
    );
    let done = finish(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    for rank in 0..NODES {
        let line = format!("pmix psyh{} rank={rank} ns=set uri=set", rank + 1);
        assert!(
            done.stdout.lines().any(|l| l == line),
            "{line:?} in:\n{}",
            done.stdout
        );
    }
    // psyne-check under srun --mpi=pmix, each rank saying where it runs first.
    let mut cmd = nodes.command("srun", &dir);
    cmd.args([
        "--mpi=pmix",
        "-N",
        &NODES.to_string(),
        "-n",
        &RANKS.to_string(),
    ])
    .args(["sh", "-c"])
    .arg(format!(
        "echo \"task $SLURM_PROCID on $(hostname)\"; exec {} --backend native",
        psyne_check()
    ))
    .env("PSY_TIMEOUT", "30");
    let done = finish(cmd, &dir);
    let ctx = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
    for rank in 0..RANKS {
        let line = format!("task {rank} on {}", node_of(rank));
        assert!(done.stdout.lines().any(|l| l == line), "{line:?}: {ctx}");
    }
    let right = |rank: usize| {
        let line = format!("rank {rank}/{RANKS}: every collective x op x type matches the oracle");
        done.stdout
            .lines()
            .find(|l| l.starts_with(&line))
            .map(str::to_owned)
    };
    assert_eq!(done.code(), Some(0), "{ctx}");
    for rank in 0..RANKS {
        let line = right(rank).unwrap_or_else(|| panic!("rank {rank} not right: {ctx}"));
        assert!(
            !line.ends_with("on native-over-mpi"),
            "rank {rank} formed its group over MPI, not through psyne::init()'s PMIx bootstrap: \
             {ctx}"
        );
        // Two ranks per node: shared memory with the neighbour, TCP to the other nodes.
        let links = format!("rank {rank}/{RANKS}: links over shm+tcp");
        assert!(done.stdout.lines().any(|l| l == links), "{links:?}: {ctx}");
    }
    nodes.assert_nothing_left();
}

/// `salloc -N3 -n6 psyrun -n 6 ./ring`, the ring built with Open MPI and with MPICH: psyrun's
/// agents, started on each node through srun, serve the ranks PMIx or PMI-1 and the job is one
/// MPI world of 6 across the three nodes; nothing is left anywhere.
#[test]
fn psyrun_in_salloc_runs_mpi_programs_across_nodes() {
    let Some(nodes) = Nodes::up("mpi") else {
        return;
    };
    let dir = TempDir::new("slurmn-mpi");
    let _mpi = common::MpiLock::take();
    for flavour in [common::mpi::Flavour::OpenMpi, common::mpi::Flavour::Mpich4] {
        let ring = common::mpi::build(flavour, &common::mpi::program_source("ring.c"));
        let ring = ring.to_string_lossy();
        let done = finish(
            salloc_psyrun(&nodes, &dir, &["--tag-output", "--timeout", "100", &ring]),
            &dir,
        );
        let ctx = format!("{flavour:?}: {}\n{}", done.stdout, done.stderr);
        assert_eq!(done.code(), Some(0), "{ctx}");
        for rank in 0..RANKS {
            let line = format!(
                "[{}][{rank}] ring ok rank {rank} of {RANKS} (node-local peers 2)",
                node_of(rank)
            );
            assert!(done.stdout.contains(&line), "missing {line:?}: {ctx}");
        }
    }
    nodes.assert_nothing_left();
}
