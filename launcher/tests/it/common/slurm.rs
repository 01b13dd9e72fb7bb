//! What the Slurm tests (`slurm.rs`: one host; `slurm_nodes.rs`: three nodes) share: whether
//! they can run, client commands of a test cluster, the processes its jobs leave, and taking
//! it down.

use super::{command_name, gone, on_path, Job, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `scripts/cluster/slurm.sh`, which starts and stops the test clusters.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster/slurm.sh")
}

/// Why a Slurm test cannot run here, if it cannot: not root, or one of `tools` missing
/// (`install` says what installs them).
pub fn unavailable(tools: &[&str], install: &str) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the test Slurm cluster runs its daemons as root (CI runs as root)".into());
    }
    tools
        .iter()
        .find(|tool| !on_path(tool))
        .map(|tool| format!("{tool} is not installed (scripts/setup.sh installs {install})"))
}

/// Sets up `c` as a client command of the cluster whose configuration is `conf`: no Slurm
/// variable of an allocation the test itself runs in, `SLURM_CONF`, `D` set to `dir` (for the
/// rank scripts) and `dir` as working directory, output captured.
pub fn client(mut c: Command, conf: &Path, dir: &TempDir) -> Command {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SLURM_") {
            c.env_remove(&k);
        }
    }
    c.env("SLURM_CONF", conf)
        .env("D", dir.path())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Processes other than the cluster's daemons that carry its `SLURM_CONF` (salloc, srun,
/// psyrun, its agents and their ranks, step daemons all inherit it), as `PID COMM`.
pub fn leftovers(conf: &Path) -> Vec<String> {
    let want = format!("SLURM_CONF={}", conf.display());
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.filter_map(Result::ok) {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid as u32 == std::process::id() || gone(pid) {
            continue;
        }
        let comm = command_name(pid);
        if matches!(
            comm.as_str(),
            "slurmctld" | "slurmscriptd" | "slurmd" | "munged"
        ) {
            continue;
        }
        let env = std::fs::read(p.path().join("environ")).unwrap_or_default();
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            found.push(format!("{pid} {comm}"));
        }
    }
    found
}

/// Takes the cluster in `dir` down (`slurm.sh down`, at most `limit_secs`): for `Drop`.
pub fn down(dir: &Path, limit_secs: u32) {
    let _ = Command::new("timeout")
        .arg(limit_secs.to_string())
        .arg(script())
        .arg("down")
        .arg(dir)
        .output();
}

/// Runs `sbatch` (a client command of the cluster, with its options already given) with `--wait`,
/// the job's output in `dir/job.out`, and the batch script `job`; asserts it succeeded (within
/// `limit`) and returns what the job wrote.
pub fn sbatch_wait(mut sbatch: Command, job: &Path, dir: &TempDir, limit: Duration) -> String {
    let out = dir.path().join("job.out");
    sbatch
        .arg("--wait")
        .arg(format!("--output={}", out.display()))
        .arg(job);
    let done = Job::start(sbatch, dir).wait(limit);
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(
        done.code(),
        Some(0),
        "{}\n{}\n{text}",
        done.stdout,
        done.stderr
    );
    text
}
