//! The seed examples under Open MPI's `mpirun` rather than psyrun: started as two and as three
//! processes, an example finds mpirun's PMIx server, learns the world from it and forms one
//! group; without the PMIx library it fails in every process with an error that names mpirun
//! and the fix, instead of running as two worlds of one.
//!
//! In the root tier because they need an installed MPI and take its machine-wide lock
//! ([`common::MpiLock`]): the root tier runs a thread per test, so waiting there for the MPI
//! jobs of other tests holds up nothing, where in the process tier it held one of its two test
//! threads for most of the suite.

use crate::common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The longest one example run may take (generous: unoptimised builds on a shared 2-core machine).
const LIMIT: Duration = Duration::from_secs(120);

/// An example started by Open MPI's mpirun as two and as three processes: psyne finds mpirun's
/// PMIx server, learns the world from it and forms one group (not a world of one per process).
#[test]
fn under_mpirun_the_example_forms_one_group_through_pmix() {
    if !on_path("mpirun") {
        eprintln!("skipped: mpirun is not installed (scripts/setup.sh installs Open MPI)");
        return;
    }
    let allreduce = example("allreduce");
    for n in [2, 3] {
        let _mpi = MpiLock::take();
        let dir = TempDir::new("example-mpirun");
        let done = run_launcher(mpirun_example(n, &allreduce, &[]), &dir, LIMIT);
        let context = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
        assert_eq!(done.code(), Some(0), "{context}");
        for rank in 0..n {
            let line = format!("rank {rank}/{n} on ");
            let ok = done
                .stdout
                .lines()
                .any(|l| l.starts_with(&line) && l.ends_with(": OK"));
            assert!(ok, "{line:?}...: OK in:\n{context}");
        }
    }
}

/// Where the PMIx library is missing (here: `PSY_PMIX_LIB` names one that does not exist), an
/// example under mpirun fails in every process naming mpirun, the missing library and the
/// fixes, instead of running as two worlds of one.
#[test]
fn under_mpirun_without_pmix_the_example_fails_naming_mpirun_and_the_fix() {
    if !on_path("mpirun") {
        eprintln!("skipped: mpirun is not installed (scripts/setup.sh installs Open MPI)");
        return;
    }
    let _mpi = MpiLock::take();
    let dir = TempDir::new("example-mpirun-nopmix");
    let allreduce = example("allreduce");
    let cmd = mpirun_example(
        2,
        &allreduce,
        &[("PSY_PMIX_LIB", "libpsyne-test-no-pmix.so")],
    );
    let done = run_launcher(cmd, &dir, LIMIT);
    let context = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
    assert_ne!(done.code(), Some(0), "{context}");
    assert!(!done.stdout.contains(": OK"), "{context}");
    for rank in 0..2 {
        let who = format!(
            "allreduce: this process was started by Open MPI's mpirun as rank {rank} of 2 \
             (OMPI_COMM_WORLD_RANK={rank}, OMPI_COMM_WORLD_SIZE=2)"
        );
        assert!(done.stderr.contains(&who), "{who:?} in:\n{context}");
    }
    for fix in [
        format!("`psyrun -n 2 {}`", allreduce.display()),
        "MASTER_ADDR and MASTER_PORT".into(),
        "build with the `mpi` feature".into(),
        "the PMIx library could not be loaded (libpsyne-test-no-pmix.so".into(),
        "apt-get install libpmix2".into(),
    ] {
        assert!(done.stderr.contains(&fix), "{fix:?} in:\n{context}");
    }
}

/// `mpirun -n N EXAMPLE 8` with `env`, as this machine needs it (root, more ranks than cores).
fn mpirun_example(n: usize, example: &Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = common::mpirun(n, env);
    cmd.arg(example)
        .arg("8")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}
