//! psyrun inside a real Slurm allocation: a one-host cluster (`scripts/cluster/slurm.sh`: munged,
//! slurmctld and slurmd on loopback, everything under a temporary directory) is started for each
//! test and always stopped again. psyrun is run inside `salloc` and from an `sbatch` script with
//! no `-H`: it takes the hosts from the allocation and reaches each host's agent through srun.
//!
//! Programs started by Slurm without psyrun: an `srun` step of two tasks makes an example fail
//! naming srun and the fix (psyne cannot reach the other task), while a single process run
//! directly in an `salloc` shell, an `sbatch` script or a one-task step is a world of one; and
//! `srun --mpi=pmix` and `srun --mpi=pmi2` steps form one group through Slurm's PMIx or PMI
//! server.
//!
//! These tests need root and the Debian packages slurmctld, slurmd, munge and slurm-client
//! (`scripts/setup.sh`); without them they say why and pass. The one about `--launcher slurm`
//! outside an allocation needs neither.

use crate::common;

use common::{
    eventually, gone, psyrun, run, slurm, wait_for_pids_sh, Done, Job, TempDir, RECORD_PID,
};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// One cluster at a time: they share the ports (with the three-node clusters of `slurm_nodes` too,
/// in the same test binary: [`common::ClusterLock`], taken after this).
static CLUSTER: Mutex<()> = Mutex::new(());

/// The longest one Slurm command of a test may take (an allocation on an idle one-host cluster
/// is granted in well under a second; the rest is psyrun's job).
const SLURM_DEADLINE: Duration = Duration::from_secs(90);

fn psyne_check() -> &'static str {
    env!("CARGO_BIN_EXE_psyne-check")
}

/// Why the Slurm tests cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    slurm::unavailable(
        &["slurmctld", "slurmd", "munged", "salloc", "sbatch", "srun"],
        "slurmctld slurmd munge slurm-client",
    )
}

/// A running one-host cluster; stopped (every daemon it started) and removed on drop.
struct Cluster {
    dir: PathBuf,
    _serial: std::sync::MutexGuard<'static, ()>,
    _machine: common::ClusterLock,
}

impl Cluster {
    /// Starts a cluster, or says why the test is skipped.
    fn up(tag: &str) -> Option<Cluster> {
        if let Some(why) = unavailable() {
            eprintln!("skipped: {why}");
            return None;
        }
        let serial = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
        let dir = std::env::temp_dir().join(format!("psyne-slurm-{tag}-{}", std::process::id()));
        let cluster = Cluster {
            dir,
            _serial: serial,
            _machine: common::ClusterLock::take(),
        };
        common::run_script(
            "cluster/slurm.sh",
            [OsStr::new("up"), cluster.dir.as_os_str()],
        );
        Some(cluster)
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// A Slurm client command of this cluster (`salloc`, `sbatch`, ...), with `D` set to `dir`
    /// for the rank scripts.
    fn command(&self, program: &str, dir: &TempDir) -> Command {
        slurm::client(Command::new(program), &self.conf(), dir)
    }

    /// Processes of this cluster's jobs still running ([`slurm::leftovers`]).
    fn leftovers(&self) -> Vec<String> {
        slurm::leftovers(&self.conf())
    }

    /// Waits (bounded) until nothing but the daemons and the step daemons winding down is left.
    fn assert_nothing_left(&self) {
        let until = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left: Vec<String> = self
                .leftovers()
                .into_iter()
                .filter(|p| !p.ends_with("slurmstepd"))
                .collect();
            assert!(
                left.is_empty() || std::time::Instant::now() < until,
                "left running after 20 s: {left:?}"
            );
            if left.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        slurm::down(&self.dir, 60);
    }
}

fn finish(cmd: Command, dir: &TempDir) -> Done {
    Job::start(cmd, dir).wait(SLURM_DEADLINE)
}

#[test]
fn psyrun_in_salloc_takes_the_allocation_and_runs_every_collective_through_srun() {
    let Some(cluster) = Cluster::up("salloc") else {
        return;
    };
    let dir = TempDir::new("slurm-salloc");
    let mut cmd = cluster.command("salloc", &dir);
    cmd.args(["-N1", "-n2"])
        .arg(common::psyrun_path())
        .args(["-n", "2", psyne_check()]);
    let done = finish(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    for rank in 0..2 {
        let line = format!("rank {rank}/2: every collective x op x type matches the oracle");
        assert!(done.stdout.contains(&line), "{line:?} in:\n{}", done.stdout);
    }
    // --check reports how the host was reached: through srun, on this machine's node.
    let mut cmd = cluster.command("salloc", &dir);
    cmd.args(["-N1", "-n2"])
        .arg(common::psyrun_path())
        .arg("--check");
    let done = finish(cmd, &dir);
    let node = String::from_utf8_lossy(
        &Command::new("hostname")
            .arg("-s")
            .output()
            .expect("hostname")
            .stdout,
    )
    .trim()
    .to_string();
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    assert!(
        done.stderr
            .contains(&format!("psyrun: {node}: ok (srun on {node}, psyrun ")),
        "{}\n{}",
        done.stdout,
        done.stderr
    );
    cluster.assert_nothing_left();
}

#[test]
fn ranks_see_psyrun_contract_and_the_job_not_the_agent_step() {
    let Some(cluster) = Cluster::up("env") else {
        return;
    };
    let dir = TempDir::new("slurm-env");
    let mut cmd = cluster.command("salloc", &dir);
    cmd.args(["-N1", "-n2"])
        .arg(common::psyrun_path())
        .args(["-n", "2", "sh", "-c"])
        .arg(
            "echo \"r=$PSY_RANK w=$PSY_WORLD_SIZE lr=$PSY_LOCAL_RANK RANK=$RANK \
             job=${SLURM_JOB_ID:+set} tasks=$SLURM_NTASKS tpn=$SLURM_TASKS_PER_NODE \
             step=${SLURM_STEP_ID-unset} procid=${SLURM_PROCID-unset} pmi=${PMI_SIZE-unset}\"",
        );
    let done = finish(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
    // PMI_SIZE is psyrun's own PMI-1 service's (every rank of a program with no MPI library
    // found gets it, and only an MPI library reads it), never the agent step's.
    for rank in 0..2 {
        let line = format!(
            "r={rank} w=2 lr={rank} RANK={rank} job=set tasks=2 tpn=2 step=unset procid=unset \
             pmi=2"
        );
        assert!(
            done.stdout.lines().any(|l| l == line),
            "{line:?} in:\n{}",
            done.stdout
        );
    }
}

#[test]
fn psyrun_in_an_sbatch_script_runs_every_collective() {
    let Some(cluster) = Cluster::up("sbatch") else {
        return;
    };
    let dir = TempDir::new("slurm-sbatch");
    let job = dir.script(
        "job.sh",
        &format!(
            "#!/bin/sh\nexec {} -n 2 {}\n",
            common::psyrun_path().display(),
            psyne_check()
        ),
        0o755,
    );
    let mut cmd = cluster.command("sbatch", &dir);
    cmd.args(["-N1", "-n2"]);
    let text = slurm::sbatch_wait(cmd, &job, &dir, SLURM_DEADLINE);
    for rank in 0..2 {
        let line = format!("rank {rank}/2: every collective x op x type matches the oracle");
        assert!(text.contains(&line), "{line:?} in:\n{text}");
    }
    cluster.assert_nothing_left();
}

/// The rank pids recorded in `dir`, waited for (bounded).
fn pids(dir: &Path, n: usize) -> Vec<i32> {
    let mut pids = Vec::new();
    eventually(common::DEADLINE, &format!("{n} rank pid files"), || {
        pids = common::rank_pids(dir);
        pids.len() >= n
    });
    pids
}

#[test]
fn a_failing_rank_code_comes_through_salloc_and_nothing_is_left_running() {
    let Some(cluster) = Cluster::up("fail") else {
        return;
    };
    let dir = TempDir::new("slurm-fail");
    let sleep = Duration::from_secs(60);
    let mut cmd = cluster.command("salloc", &dir);
    cmd.args(["-N1", "-n2"])
        .arg(common::psyrun_path())
        .args(["-n", "2", "sh", "-c"])
        .arg(format!(
            "{RECORD_PID}; {}; if [ $PSY_RANK = 1 ]; then exit 7; fi; exec sleep {}",
            wait_for_pids_sh(2),
            sleep.as_secs()
        ));
    let done = finish(cmd, &dir);
    assert_eq!(done.code(), Some(7), "{}\n{}", done.stdout, done.stderr);
    assert!(
        done.stderr.contains("rank 1 on ") && done.stderr.contains("exited with code 7"),
        "{}",
        done.stderr
    );
    // Well before the other rank's sleep would end: psyrun stopped it.
    assert!(done.elapsed < sleep / 2, "{:?}", done.elapsed);
    for pid in pids(dir.path(), 2) {
        eventually(
            Duration::from_secs(10),
            &format!("rank pid {pid} gone"),
            || gone(pid),
        );
    }
    cluster.assert_nothing_left();
}

#[test]
fn a_killed_psyrun_in_salloc_leaves_no_rank_behind() {
    let Some(cluster) = Cluster::up("kill") else {
        return;
    };
    let dir = TempDir::new("slurm-kill");
    let mut cmd = cluster.command("salloc", &dir);
    // The shell records psyrun's pid, then becomes psyrun.
    cmd.args(["-N1", "-n2", "sh", "-c"]).arg(format!(
        "echo $$ > \"$D/psyrun\"; exec {} -n 2 sh -c '{RECORD_PID}; exec sleep 60'",
        common::psyrun_path().display()
    ));
    let job = Job::start(cmd, &dir);
    let ranks = pids(dir.path(), 2);
    let psyrun_pid: i32 = std::fs::read_to_string(dir.path().join("psyrun"))
        .expect("psyrun's pid")
        .trim()
        .parse()
        .expect("a pid");
    // SAFETY: kill takes plain integers; the pid is psyrun's, which is alive (its ranks are).
    unsafe { libc::kill(psyrun_pid, libc::SIGKILL) };
    for pid in ranks {
        eventually(
            Duration::from_secs(20),
            &format!("rank pid {pid} gone"),
            || gone(pid),
        );
    }
    assert!(gone(psyrun_pid), "psyrun {psyrun_pid} survived SIGKILL");
    // salloc ends when its command does (its exit code for a killed command is Slurm's affair).
    job.wait(SLURM_DEADLINE);
    cluster.assert_nothing_left();
}

#[test]
fn launcher_slurm_outside_an_allocation_is_a_clear_error() {
    let dir = TempDir::new("slurm-none");
    for extra in [&[][..], &["-H", "node1:2"][..]] {
        let mut cmd = psyrun(&dir);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SLURM_") {
                cmd.env_remove(&k);
            }
        }
        cmd.args(["--launcher", "slurm"])
            .args(extra)
            .args(["-n", "2", "true"]);
        let done = run(cmd, &dir);
        assert_eq!(done.code(), Some(2), "{}", done.stderr);
        assert!(
            done.stderr
                .contains("--launcher slurm: not inside a Slurm allocation")
                && done.stderr.contains("run psyrun inside salloc or sbatch"),
            "{}",
            done.stderr
        );
        assert!(done.stdout.is_empty(), "{}", done.stdout);
    }
}

/// The `allreduce` example, built beside psyrun by the test command.
fn allreduce() -> PathBuf {
    common::built("examples/allreduce")
}

/// One `rank 0/1 ... OK` line: the example ran as a world of one, and was right.
fn assert_world_of_one(done: &Done, out: &str) {
    let context = format!("{out}\nstdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
    assert_eq!(done.code(), Some(0), "{context}");
    let text = format!("{}{out}", done.stdout);
    let ok: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("rank 0/1 on ") && l.ends_with(": OK"))
        .collect();
    assert_eq!(ok.len(), 1, "{context}");
}

#[test]
fn an_srun_step_of_two_tasks_is_refused_naming_srun_while_pmix_and_pmi2_steps_form_a_group() {
    let Some(cluster) = Cluster::up("srun") else {
        return;
    };
    let dir = TempDir::new("slurm-srun");
    let example = allreduce();
    let mut cmd = cluster.command("srun", &dir);
    cmd.args(["-n2"]).arg(&example).arg("8");
    let done = finish(cmd, &dir);
    let context = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
    assert_ne!(done.code(), Some(0), "{context}");
    assert!(!done.stdout.contains(": OK"), "{context}");
    for rank in 0..2 {
        let who = format!(
            "allreduce: this process was started by Slurm's srun as rank {rank} of 2 \
             (SLURM_PROCID={rank}, SLURM_STEP_NUM_TASKS=2)"
        );
        assert!(done.stderr.contains(&who), "{who:?} in:\n{context}");
    }
    for fix in [
        format!(
            "`psyrun -n 2 {}` from the batch script or the salloc shell, not through srun",
            example.display()
        ),
        "RANK=$SLURM_PROCID and WORLD_SIZE=$SLURM_STEP_NUM_TASKS".into(),
        "`srun --mpi=pmix`".into(),
    ] {
        assert!(done.stderr.contains(&fix), "{fix:?} in:\n{context}");
    }
    // A step of one task is a world of one.
    let mut cmd = cluster.command("srun", &dir);
    cmd.args(["-n1"]).arg(&example).arg("8");
    assert_world_of_one(&finish(cmd, &dir), "");
    // With srun's PMIx, or its PMI-2 plugin (which speaks PMI-1 too), the same example forms
    // one group of two (psyne::init through the service).
    for mpi in ["--mpi=pmix", "--mpi=pmi2"] {
        let mut cmd = cluster.command("srun", &dir);
        cmd.args([mpi, "-n2"]).arg(&example).arg("8");
        let done = finish(cmd, &dir);
        let context = format!("{mpi}:\nstdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
        assert_eq!(done.code(), Some(0), "{context}");
        for rank in 0..2 {
            let line = format!("rank {rank}/2 on ");
            assert!(
                done.stdout
                    .lines()
                    .any(|l| l.starts_with(&line) && l.ends_with(": OK")),
                "{line:?}...: OK in:\n{context}"
            );
        }
    }
    // And psyne-check, over each transport.
    for (mpi, transport) in [
        ("--mpi=pmix", "shm"),
        ("--mpi=pmix", "tcp"),
        ("--mpi=pmi2", "shm"),
        ("--mpi=pmi2", "tcp"),
    ] {
        let mut cmd = cluster.command("srun", &dir);
        cmd.args([mpi, "-n2", psyne_check(), "--counts", "0,5,1001"])
            .env("PSY_TRANSPORT", transport);
        let done = finish(cmd, &dir);
        assert_eq!(done.code(), Some(0), "{}\n{}", done.stdout, done.stderr);
        for rank in 0..2 {
            for line in [
                format!("rank {rank}/2: links over {transport}"),
                format!("rank {rank}/2: every collective x op x type matches the oracle"),
            ] {
                assert!(
                    done.stdout.lines().any(|l| l.starts_with(&line)),
                    "{line:?} in:\n{}\n{}",
                    done.stdout,
                    done.stderr
                );
            }
        }
    }
    cluster.assert_nothing_left();
}

#[test]
fn a_single_process_in_salloc_or_sbatch_is_a_world_of_one() {
    let Some(cluster) = Cluster::up("single") else {
        return;
    };
    let dir = TempDir::new("slurm-single");
    let example = allreduce();
    // The shell of an allocation of two tasks runs one process.
    let mut cmd = cluster.command("salloc", &dir);
    cmd.args(["-N1", "-n2"]).arg(&example).arg("8");
    assert_world_of_one(&finish(cmd, &dir), "");
    // So does a batch script (which has SLURM_PROCID=0 and SLURM_NTASKS=2, but no step).
    let job = dir.script(
        "job.sh",
        &format!("#!/bin/sh\nexec {} 8\n", example.display()),
        0o755,
    );
    let out = dir.path().join("job.out");
    let mut cmd = cluster.command("sbatch", &dir);
    cmd.args(["--wait", "-N1", "-n2"])
        .arg(format!("--output={}", out.display()))
        .arg(&job);
    let done = finish(cmd, &dir);
    assert_world_of_one(&done, &std::fs::read_to_string(&out).unwrap_or_default());
    cluster.assert_nothing_left();
}
