//! psyne-check in real Open MPI jobs: the default native backend forming its group through
//! mpirun's PMIx server (over shared memory and TCP), the MPI backend and the native group over
//! MPI (`--backend mpi|native-over-mpi`), every rank checking every collective against the
//! oracle; and the refusals a rank must give when the PMIx library is missing or the MPI world
//! is not the one the launcher announced.
//!
//! Needs Open MPI's `mpirun` (scripts/setup.sh installs it). Run with
//! `cargo test -p psyrun --features mpi --test it -- root::mpi::`.
//!
//! Open MPI settings used, each because this machine needs it:
//! - `--allow-run-as-root`: the tests may run as root (the container's user).
//! - `--oversubscribe`: more ranks than the 2 cores.
//! - `OMPI_MCA_op=^avx`: Open MPI 4.1's AVX reduction component saturates 8- and 16-bit integer
//!   sums on CPUs with AVX-512 (200u8 + 100u8 = 255, not 44; open-mpi/ompi#8045), while psyne
//!   (and Open MPI's own scalar path, for short buffers) wraps. Without it the u8/u16 sums at
//!   count 1001 differ from the oracle.

#![cfg(feature = "mpi")]

use crate::common;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest one mpirun may take (a few seconds are normal; the machine is shared and noisy).
const DEADLINE: Duration = Duration::from_secs(120);

/// One MPI job at a time: they share 2 cores, and a run that times out must not be blamed on a
/// neighbour.
static ONE_JOB: Mutex<()> = Mutex::new(());

fn check_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_psyne-check"))
}

/// What a finished process left.
struct Done {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn capture(r: Option<impl Read + Send + 'static>) -> Arc<Mutex<Vec<u8>>> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    if let Some(mut r) = r {
        let b = buf.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 1 << 14];
            while let Ok(n) = r.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
    }
    buf
}

fn text(buf: &Arc<Mutex<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&buf.lock().unwrap()).into_owned()
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill takes plain integers and has no memory-safety preconditions; the pids are our
    // own unreaped child or the children it had a moment ago.
    unsafe { libc::kill(pid, sig) };
}

/// Runs `cmd` to completion, at most `limit`. Past it: SIGTERM (mpirun then ends its ranks),
/// a grace period, then SIGKILL to it and to the ranks it had; and the test fails.
fn run(mut cmd: Command, limit: Duration) -> Done {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child: Child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => panic!(
            "starting {:?}: {e}; is Open MPI installed (scripts/setup.sh)?",
            cmd.get_program()
        ),
    };
    let (out, err) = (capture(child.stdout.take()), capture(child.stderr.take()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for mpirun") {
            break s;
        }
        if start.elapsed() > limit {
            let ranks = common::children(child.id() as i32);
            signal(child.id() as i32, libc::SIGTERM);
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(10) {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            for r in ranks {
                signal(r, libc::SIGKILL);
            }
            panic!(
                "{:?} did not finish within {limit:?}; killed.\n--- stdout\n{}\n--- stderr\n{}",
                cmd.get_program(),
                text(&out),
                text(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The pipes close when the last rank exits; give the readers a moment to drain them.
    let drained = Instant::now();
    while Arc::strong_count(&out) + Arc::strong_count(&err) > 2
        && drained.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    Done {
        code: status.code(),
        stdout: text(&out),
        stderr: text(&err),
    }
}

/// `mpirun -n N psyne-check ARGS` with the settings this machine needs (see the module docs).
fn mpirun(n: usize, args: &[&str]) -> Done {
    mpirun_with(n, args, &[])
}

/// [`mpirun`] with `env` set for mpirun and so for every rank.
fn mpirun_with(n: usize, args: &[&str], env: &[(&str, &str)]) -> Done {
    let _one = (
        ONE_JOB.lock().unwrap_or_else(|e| e.into_inner()),
        common::MpiLock::take(),
    );
    let mut cmd = common::mpirun(n, env);
    cmd.arg(check_bin()).args(args).env("OMPI_MCA_op", "^avx");
    run(cmd, DEADLINE)
}

/// psyne-check alone, without a launcher: MPI makes it a world of one.
fn alone(args: &[&str], env: &[(&str, &str)]) -> Done {
    let _one = (
        ONE_JOB.lock().unwrap_or_else(|e| e.into_inner()),
        common::MpiLock::take(),
    );
    let mut cmd = Command::new(check_bin());
    cmd.args(args)
        .env("OMPI_MCA_op", "^avx")
        .env("PSY_TIMEOUT", "60")
        .envs(common::LOCAL_NET)
        .envs(env.iter().copied());
    run(cmd, DEADLINE)
}

/// Every one of `n` ranks printed its world size and that it matches the oracle on `backend`.
fn assert_all_ranks_pass(done: &Done, n: usize, backend: &str) {
    assert_eq!(done.code, Some(0), "{done}");
    for rank in 0..n {
        let world = format!("rank {rank}/{n}: world of {n}, as OMPI_COMM_WORLD_SIZE said");
        assert!(
            done.stdout.contains(&world),
            "missing `{world}` in:\n{done}"
        );
        let ok = format!("rank {rank}/{n}: every collective x op x type matches the oracle");
        let line = done
            .stdout
            .lines()
            .find(|l| l.starts_with(&ok))
            .unwrap_or_else(|| panic!("missing `{ok}` in:\n{done}"));
        assert!(line.ends_with(backend), "{line}");
    }
    assert!(!done.stdout.contains("WRONG"), "{done}");
}

fn assert_halves_refused(done: &Done, n: usize) {
    for rank in 0..n {
        let refused = format!("rank {rank}/{n}: mpi refuses f16/bf16 reductions");
        assert!(
            done.stdout.contains(&refused),
            "missing `{refused}` in:\n{done}"
        );
    }
}

#[test]
fn mpi_backend_matches_the_oracle_in_3_processes() {
    let done = mpirun(3, &["--backend", "mpi"]);
    assert_all_ranks_pass(&done, 3, "on mpi (f16/bf16 without reductions)");
    assert_halves_refused(&done, 3);
}

#[test]
fn mpi_backend_matches_the_oracle_in_2_and_4_processes() {
    let done = mpirun(2, &["--backend", "mpi", "--counts", "0,1,3,64,1001"]);
    assert_all_ranks_pass(&done, 2, "on mpi (f16/bf16 without reductions)");
    assert_halves_refused(&done, 2);
    let done = mpirun(
        4,
        &["--backend", "mpi", "--counts", "0,3,5,9,777", "--seed", "7"],
    );
    assert_all_ranks_pass(&done, 4, "on mpi (f16/bf16 without reductions)");
    assert_halves_refused(&done, 4);
}

#[test]
fn native_group_bootstrapped_over_mpi_matches_the_oracle_in_3_processes() {
    let done = mpirun(3, &["--backend", "native-over-mpi"]);
    assert_all_ranks_pass(&done, 3, "on native-over-mpi");
}

#[test]
fn native_group_bootstrapped_over_mpi_matches_the_oracle_in_2_and_4_processes() {
    let done = mpirun(
        2,
        &["--backend", "native-over-mpi", "--counts", "0,1,3,1001"],
    );
    assert_all_ranks_pass(&done, 2, "on native-over-mpi");
    let done = mpirun(
        4,
        &["--backend", "native-over-mpi", "--counts", "0,3,5,777"],
    );
    assert_all_ranks_pass(&done, 4, "on native-over-mpi");
}

#[test]
fn the_default_native_backend_under_mpirun_forms_its_group_through_pmix_over_shm_and_tcp() {
    // Not a world of one per process, and not over MPI: mpirun's PMIx server tells psyne::init
    // the rank, the size and where rank 0's store is.
    for (n, transport) in [(2, "shm"), (4, "shm"), (2, "tcp"), (4, "tcp")] {
        let done = mpirun_with(
            n,
            &["--counts", "0,1,1001"],
            &[("PSY_TRANSPORT", transport)],
        );
        assert_all_ranks_pass(&done, n, ")");
        for rank in 0..n {
            let links = format!("rank {rank}/{n}: links over {transport}\n");
            assert!(
                done.stdout.contains(&links),
                "{transport}: {links:?} in:\n{done}"
            );
        }
    }
}

#[test]
fn without_the_pmix_library_mpirun_falls_back_to_forming_the_group_over_mpi() {
    // PSY_PMIX_LIB names a library that does not exist: as on a host without libpmix2.
    let done = mpirun_with(
        2,
        &["--counts", "0,1,1001"],
        &[("PSY_PMIX_LIB", "libpsyne-test-no-pmix.so")],
    );
    assert_eq!(done.code, Some(2), "{done}");
    for needle in [
        "started by Open MPI's mpirun as rank",
        "the PMIx library could not be loaded (libpsyne-test-no-pmix.so",
        "apt-get install libpmix2",
    ] {
        assert!(done.stderr.contains(needle), "{needle:?} in:\n{done}");
    }
    // The MPI route named in the error still works.
    let done = mpirun_with(
        2,
        &["--backend", "native-over-mpi", "--counts", "0,1,1001"],
        &[("PSY_PMIX_LIB", "libpsyne-test-no-pmix.so")],
    );
    assert_all_ranks_pass(&done, 2, "on native-over-mpi");
}

#[test]
fn alone_mpi_is_a_world_of_one_and_every_backend_still_checks_out() {
    for backend in ["mpi", "native-over-mpi"] {
        let done = alone(&["--backend", backend], &[]);
        assert_eq!(done.code, Some(0), "{backend}: {done}");
        assert!(
            done.stdout
                .contains("rank 0/1: world of 1 (no launcher size"),
            "{done}"
        );
        assert!(
            done.stdout
                .contains("rank 0/1: every collective x op x type matches the oracle"),
            "{done}"
        );
    }
}

#[test]
fn a_world_of_one_under_a_launcher_that_said_more_is_refused() {
    // What a binary built against one MPI does under another MPI's launcher: a world of one each.
    let done = alone(&["--backend", "mpi"], &[("PMI_SIZE", "3")]);
    assert_eq!(done.code, Some(2), "{done}");
    assert!(
        done.stderr
            .contains("MPI reports a world of 1 but PMI_SIZE=3")
            && done
                .stderr
                .contains("built against a different MPI than the mpirun that started it"),
        "{done}"
    );
    // Under psyrun, which starts no MPI job.
    let done = alone(
        &["--backend", "native-over-mpi"],
        &[("PSY_WORLD_SIZE", "2")],
    );
    assert_eq!(done.code, Some(2), "{done}");
    assert!(
        done.stderr.contains("psyrun does not start MPI jobs"),
        "{done}"
    );
}

#[test]
fn fault_injection_is_only_for_the_native_backend() {
    let done = alone(&["--backend", "mpi", "--fault", "exit3:0"], &[]);
    assert_eq!(done.code, Some(2), "{done}");
    assert!(
        done.stderr
            .contains("--fault works only with --backend native"),
        "{done}"
    );
}
