//! Ordinary MPI programs (built with Open MPI, MPICH 4, MPICH 5 and Intel MPI) under each MPI's
//! own launcher, which proves the fixtures, and under psyrun, which serves them PMIx, PMI-1 or
//! PMI-2 (`--mpi auto|pmix|pmi1|pmi2|none`).
//!
//! Programs: launcher/tests/mpi_programs/ring.c (its header lists its modes and output), Intel
//! MPI's benchmarks (`IMB-MPI1`) and mpi4py. scripts/setup.sh installs every MPI; an absent one
//! fails the test that needs it, saying so (see tests/it/common/mpi.rs).
//!
//! The `own_launcher_*` tests and the parser's need only the MPIs; the `psyrun_*` tests need psyrun
//! to serve MPI programs. Every psyrun call has `--timeout`, and the test's own wait is derived
//! from it ([`WAIT`]). One MPI job runs at a time ([`one_job`]): they oversubscribe 2 cores, and
//! several MPI libraries busy-poll.

use crate::common;

use common::mpi::{self, Flavour, ImbRow};
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// psyrun's `--timeout` for every job here, in seconds: ring with 8 oversubscribed ranks takes a
/// few seconds; this is for a slow, shared machine.
const TIMEOUT_SECS: u64 = 60;
/// How long a test waits for psyrun to exit: its timeout, its grace period (default 5 s) after
/// the SIGTERM that follows, and a margin.
const WAIT: Duration = Duration::from_secs(TIMEOUT_SECS + 5 + 15);

/// One MPI job at a time on this machine ([`common::MpiLock`]).
fn one_job() -> common::MpiLock {
    common::MpiLock::take()
}

/// The MPI libraries' shared-memory files in /dev/shm.
fn mpi_segments() -> Vec<String> {
    let prefixes = ["mpich_", "Intel_MPI_", "vader_segment", "psm2", "ucx_"];
    std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| prefixes.iter().any(|p| n.starts_with(p)))
        .collect()
}

/// A job under an MPI's own launcher, one at a time ([`one_job`]): the shared-memory files its
/// ranks leave (Hydra leaves MPICH's when a rank is killed or aborts) are removed on drop. psyrun's
/// jobs are not cleaned after: psyrun removes them itself, and `psyrun_*` tests check it.
struct OwnJob {
    _one: common::MpiLock,
    before: Vec<String>,
}

fn own_job() -> OwnJob {
    let one = one_job();
    OwnJob {
        _one: one,
        before: mpi_segments(),
    }
}

impl Drop for OwnJob {
    fn drop(&mut self) {
        for name in mpi_segments() {
            if !self.before.contains(&name) {
                let _ = std::fs::remove_file(Path::new("/dev/shm").join(name));
            }
        }
    }
}

fn ring(flavour: Flavour) -> PathBuf {
    mpi::build(flavour, &mpi::program_source("ring.c"))
}

/// The lines every rank of a good ring run prints, sorted.
fn ring_ok_lines(n: usize) -> Vec<String> {
    let mut want: Vec<String> = (0..n)
        .map(|r| format!("ring ok rank {r} of {n} (node-local peers {n})"))
        .collect();
    want.sort();
    want
}

/// The `ring ...` lines of `stdout`, sorted (ranks print in any order).
fn ring_lines(stdout: &str) -> Vec<String> {
    let mut got: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("ring "))
        .map(str::to_string)
        .collect();
    got.sort();
    got
}

fn show(done: &Done) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        done.status, done.stdout, done.stderr
    )
}

/// psyrun with `--timeout`, `-n n`, `--mpi` if given, and `env` (plus what the flavour's ranks
/// need) forwarded to every rank with `-x`; the program is the caller's to add.
fn psyrun_mpi(
    dir: &TempDir,
    flavour: Flavour,
    n: usize,
    iface: Option<&str>,
    env: &[(String, String)],
) -> Command {
    psyrun_mpi_within(dir, flavour, n, iface, env, TIMEOUT_SECS)
}

/// [`psyrun_mpi`] with `--timeout timeout` (seconds).
fn psyrun_mpi_within(
    dir: &TempDir,
    flavour: Flavour,
    n: usize,
    iface: Option<&str>,
    env: &[(String, String)],
    timeout: u64,
) -> Command {
    let mut cmd = psyrun(dir);
    cmd.args(["--timeout", &timeout.to_string(), "-n", &n.to_string()]);
    if let Some(iface) = iface {
        cmd.args(["--mpi", iface]);
    }
    for (k, v) in flavour.rank_env().iter().chain(env) {
        cmd.arg("-x").arg(format!("{k}={v}"));
        cmd.env(k, v);
    }
    cmd
}

/// Runs `cmd` (a flavour's own launcher) to completion, at most [`WAIT`].
fn run_own(cmd: Command, dir: &TempDir) -> Done {
    run_launcher(cmd, dir, WAIT)
}

// ---------------------------------------------------------------------------------------------
// The fixtures under each MPI's own launcher.

fn own_launcher_ring(flavour: Flavour) {
    let prog = ring(flavour);
    let _one = own_job();
    for n in [1, 2, 4] {
        let dir = TempDir::new(&format!("own-ring-{}-{n}", flavour.name()));
        let mut cmd = flavour.launcher(n);
        cmd.arg(&prog);
        let done = run_own(cmd, &dir);
        let ctx = format!("{} -n {n}: {}", flavour.name(), show(&done));
        assert_eq!(done.code(), Some(0), "{ctx}");
        assert_eq!(ring_lines(&done.stdout), ring_ok_lines(n), "{ctx}");
    }
}

/// `ring abort 1 7` and `ring exit 2 5`: every own launcher here exits with the code given to
/// MPI_Abort, and with a rank's nonzero exit code (Open MPI 4.1.4, MPICH 4.0.2 and 5.0.2, Intel
/// MPI 2021.18.1 all do), the behaviour psyrun's tests below ask of psyrun.
fn own_launcher_abort(flavour: Flavour) {
    let prog = ring(flavour);
    let _one = own_job();
    for (n, args, code) in [(3, ["abort", "1", "7"], 7), (4, ["exit", "2", "5"], 5)] {
        let dir = TempDir::new(&format!("own-{}-{}", args[0], flavour.name()));
        let mut cmd = flavour.launcher(n);
        cmd.arg(&prog).args(args);
        let done = run_own(cmd, &dir);
        let ctx = format!("{} ring {args:?}: {}", flavour.name(), show(&done));
        // Hydra may kill the other ranks before it forwarded their `ring ok` lines: only the
        // exit is asserted here.
        assert_eq!(done.code(), Some(code), "{ctx}");
    }
}

/// A PMI-2 client run by the flavour's own launcher (Hydra serves PMI-1 and PMI-2 on one socket):
/// what `interface_env` asks for is something the library really does.
fn own_launcher_every_interface(flavour: Flavour) {
    let prog = ring(flavour);
    let _one = own_job();
    for &iface in flavour.interfaces() {
        let dir = TempDir::new(&format!("own-iface-{}-{}", flavour.name(), iface.flag()));
        let mut cmd = flavour.launcher(2);
        cmd.envs(flavour.interface_env(iface)).arg(&prog);
        let done = run_own(cmd, &dir);
        let ctx = format!("{} {}: {}", flavour.name(), iface.flag(), show(&done));
        assert_eq!(done.code(), Some(0), "{ctx}");
        assert_eq!(ring_lines(&done.stdout), ring_ok_lines(2), "{ctx}");
    }
}

fn own_launcher_mpi4py(flavour: Flavour) {
    let (python, env) = flavour.python();
    let _one = own_job();
    let dir = TempDir::new(&format!("own-mpi4py-{}", flavour.name()));
    let mut cmd = flavour.launcher(2);
    cmd.envs(env)
        .arg(&python)
        .args(["-m", "mpi4py.bench", "helloworld"]);
    let done = run_own(cmd, &dir);
    let ctx = format!("{}: {}", flavour.name(), show(&done));
    assert_eq!(done.code(), Some(0), "{ctx}");
    assert_hello(&done.stdout, 2, &ctx);
}

/// `python -m mpi4py.bench helloworld` printed one greeting per rank of a world of `n`.
fn assert_hello(stdout: &str, n: usize, ctx: &str) {
    let mut got: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("Hello, World!"))
        .collect();
    got.sort();
    assert_eq!(got.len(), n, "{ctx}");
    for (r, line) in got.iter().enumerate() {
        assert!(
            line.starts_with(&format!("Hello, World! I am process {r} of {n} on ")),
            "{ctx}"
        );
    }
}

/// Generates one `#[test]` per flavour, `NAME::openmpi` and so on, calling `body(flavour)`.
macro_rules! per_flavour {
    ($name:ident, $body:path) => {
        mod $name {
            use super::*;
            #[test]
            fn openmpi() {
                $body(Flavour::OpenMpi)
            }
            #[test]
            fn mpich4() {
                $body(Flavour::Mpich4)
            }
            #[test]
            fn mpich5() {
                $body(Flavour::Mpich5)
            }
            #[test]
            fn impi() {
                $body(Flavour::IntelMpi)
            }
        }
    };
}

per_flavour!(own_launcher_runs_ring_on_1_2_4, own_launcher_ring);
per_flavour!(
    own_launcher_exits_with_the_abort_or_exit_code,
    own_launcher_abort
);
per_flavour!(
    own_launcher_serves_every_interface,
    own_launcher_every_interface
);
per_flavour!(own_launcher_runs_mpi4py_helloworld, own_launcher_mpi4py);

// ---------------------------------------------------------------------------------------------
// Intel MPI Benchmarks.

/// The benchmarks run: a few sizes (0, 4, 8 and 16 bytes), a fixed number of repetitions
/// (`-iter_policy off`: IMB otherwise lowers them by how long a size took, which differs run to
/// run) and every collective on all `n` processes (`-npmin n`; PingPong always uses 2).
fn imb_args(n: usize) -> Vec<String> {
    [
        "-msglog",
        "2:4",
        "-iter",
        "50",
        "-iter_policy",
        "off",
        "-time",
        "60",
        "-npmin",
        &n.to_string(),
        "Allreduce",
        "Bcast",
        "Alltoall",
        "PingPong",
    ]
    .map(String::from)
    .to_vec()
}

/// The rows [`imb_args`] must give on `n` processes.
fn imb_expected(n: usize) -> Vec<ImbRow> {
    let mut rows = Vec::new();
    for (benchmark, processes) in [
        ("Allreduce", n),
        ("Bcast", n),
        ("Alltoall", n),
        ("PingPong", 2),
    ] {
        for bytes in [0, 4, 8, 16] {
            rows.push(ImbRow {
                benchmark: benchmark.to_string(),
                processes,
                bytes,
                repetitions: 50,
            });
        }
    }
    rows.sort();
    rows
}

fn sorted(mut rows: Vec<ImbRow>) -> Vec<ImbRow> {
    rows.sort();
    rows
}

/// IMB-MPI1 under Intel MPI's mpiexec on `n` processes: its rows, checked against what they must be.
/// IMB-MPI1's rows under Intel MPI's mpiexec, and how long that run took.
fn imb_under_mpiexec(n: usize) -> (Vec<ImbRow>, Duration) {
    let imb = mpi::imb_mpi1();
    let _one = own_job();
    let dir = TempDir::new(&format!("imb-mpiexec-{n}"));
    let mut cmd = Flavour::IntelMpi.launcher(n);
    cmd.arg(&imb).args(imb_args(n));
    let done = run_own(cmd, &dir);
    let ctx = format!("IMB-MPI1 under mpiexec -n {n}: {}", show(&done));
    assert_eq!(done.code(), Some(0), "{ctx}");
    let rows = sorted(mpi::parse_imb(&done.stdout));
    assert_eq!(rows, imb_expected(n), "{ctx}");
    (rows, done.elapsed)
}

#[test]
fn imb_parser_reads_every_table() {
    let text = "\
# List of Benchmarks to run:
# Allreduce
# PingPong

#----------------------------------------------------------------
# Benchmarking Allreduce 
# #processes = 4 
#----------------------------------------------------------------
       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]
            0           50         0.03         0.04         0.04
            4           50         0.25         0.26         0.26

#---------------------------------------------------
# Benchmarking PingPong 
# #processes = 2 
# ( 2 additional processes waiting in MPI_Barrier)
#---------------------------------------------------
       #bytes #repetitions      t[usec]   Mbytes/sec
            0           50         0.21         0.00
      1048576           10        94.10     11143.58


# All processes entering MPI_Finalize
";
    let row = |b: &str, p, bytes, repetitions| ImbRow {
        benchmark: b.into(),
        processes: p,
        bytes,
        repetitions,
    };
    assert_eq!(
        mpi::parse_imb(text),
        vec![
            row("Allreduce", 4, 0, 50),
            row("Allreduce", 4, 4, 50),
            row("PingPong", 2, 0, 50),
            row("PingPong", 2, 1048576, 10),
        ]
    );
    assert!(mpi::parse_imb("no tables here\n").is_empty());
}

#[test]
#[should_panic(expected = "no #repetitions")]
fn imb_parser_refuses_a_table_line_it_cannot_read() {
    mpi::parse_imb("# Benchmarking Bcast\n# #processes = 2\n #bytes #repetitions\n 8 many\n");
}

#[test]
fn imb_under_mpiexec_on_2_and_4_processes() {
    imb_under_mpiexec(2);
    imb_under_mpiexec(4);
}

// ---------------------------------------------------------------------------------------------
// Under psyrun: these need psyrun to serve MPI programs (`--mpi`).

/// `psyrun -n N ./ring` (interface detected from ring's ELF dependencies): one world of N.
fn psyrun_ring(flavour: Flavour) {
    let prog = ring(flavour);
    let _one = one_job();
    for n in [1, 2, 4, 8] {
        let dir = TempDir::new(&format!("psyrun-ring-{}-{n}", flavour.name()));
        let mut cmd = psyrun_mpi(&dir, flavour, n, None, &[]);
        cmd.arg(&prog);
        let done = Job::start(cmd, &dir).wait(WAIT);
        let ctx = format!("psyrun -n {n} ring ({}): {}", flavour.name(), show(&done));
        assert_eq!(done.code(), Some(0), "{ctx}");
        assert_eq!(ring_lines(&done.stdout), ring_ok_lines(n), "{ctx}");
    }
}

/// `psyrun --mpi IFACE` for every interface the flavour speaks, `--mpi auto` spelled out, and
/// `--mpi none`, under which each rank is a world of one (what MPI does with no PMI server).
fn psyrun_forced_interface(flavour: Flavour) {
    let prog = ring(flavour);
    let _one = one_job();
    let n = 3;
    let mut cases: Vec<(&str, Vec<(String, String)>)> = vec![("auto", Vec::new())];
    for &iface in flavour.interfaces() {
        cases.push((iface.flag(), flavour.interface_env(iface)));
    }
    for (iface, env) in cases {
        let dir = TempDir::new(&format!("psyrun-iface-{}-{iface}", flavour.name()));
        let mut cmd = psyrun_mpi(&dir, flavour, n, Some(iface), &env);
        cmd.arg(&prog);
        let done = Job::start(cmd, &dir).wait(WAIT);
        let ctx = format!("psyrun --mpi {iface} ({}): {}", flavour.name(), show(&done));
        assert_eq!(done.code(), Some(0), "{ctx}");
        assert_eq!(ring_lines(&done.stdout), ring_ok_lines(n), "{ctx}");
    }
    let dir = TempDir::new(&format!("psyrun-iface-{}-none", flavour.name()));
    let mut cmd = psyrun_mpi(&dir, flavour, n, Some("none"), &[]);
    cmd.arg(&prog);
    let done = Job::start(cmd, &dir).wait(WAIT);
    let ctx = format!("psyrun --mpi none ({}): {}", flavour.name(), show(&done));
    assert_eq!(done.code(), Some(0), "{ctx}");
    assert_eq!(
        ring_lines(&done.stdout),
        vec!["ring ok rank 0 of 1 (node-local peers 1)"; n],
        "{ctx}"
    );
}

/// psyrun's stderr names `rank` (e.g. `rank 1 (pid 123) ...` or `rank 1 called MPI_Abort`).
fn names_rank(stderr: &str, rank: usize) -> bool {
    let needle = format!("rank {rank}");
    stderr.match_indices(&needle).any(|(i, _)| {
        // Not "rank 10" when looking for "rank 1".
        !stderr[i + needle.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

/// `ring abort 1 7`: psyrun exits 7, the code rank 1 gave MPI_Abort, and names rank 1.
fn psyrun_abort(flavour: Flavour) {
    let prog = ring(flavour);
    let _one = one_job();
    let dir = TempDir::new(&format!("psyrun-abort-{}", flavour.name()));
    let mut cmd = psyrun_mpi(&dir, flavour, 3, None, &[]);
    cmd.arg(&prog).args(["abort", "1", "7"]);
    let done = Job::start(cmd, &dir).wait(WAIT);
    let ctx = format!(
        "psyrun ring abort 1 7 ({}): {}",
        flavour.name(),
        show(&done)
    );
    assert_eq!(done.code(), Some(7), "{ctx}");
    assert!(names_rank(&done.stderr, 1), "{ctx}");
    assert_eq!(ring_lines(&done.stdout), ring_ok_lines(3), "{ctx}");
}

/// `ring exit 2 5`: rank 2 exits 5 after MPI_Finalize; psyrun exits 5 naming rank 2.
fn psyrun_exit(flavour: Flavour) {
    let prog = ring(flavour);
    let _one = one_job();
    let dir = TempDir::new(&format!("psyrun-exit-{}", flavour.name()));
    let mut cmd = psyrun_mpi(&dir, flavour, 4, None, &[]);
    cmd.arg(&prog).args(["exit", "2", "5"]);
    let done = Job::start(cmd, &dir).wait(WAIT);
    let ctx = format!("psyrun ring exit 2 5 ({}): {}", flavour.name(), show(&done));
    assert_eq!(done.code(), Some(5), "{ctx}");
    assert!(names_rank(&done.stderr, 2), "{ctx}");
    assert_eq!(ring_lines(&done.stdout), ring_ok_lines(4), "{ctx}");
}

/// Whether process `pid` runs `exe` as MPI rank `rank` (by psyrun's, PMI's or PMIx's variable).
fn is_rank(pid: i32, exe: &Path, rank: usize) -> bool {
    let runs_exe = std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe);
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let vars = ["PSY_RANK", "PMI_RANK", "PMIX_RANK"].map(|v| format!("{v}={rank}"));
    runs_exe
        && env
            .split(|&b| b == 0)
            .any(|var| vars.iter().any(|v| var == v.as_bytes()))
}

/// SIGKILLs, on drop, every process still tagged with this test's tag (each checked for the tag
/// a moment before): a failing test leaves nothing running.
struct KillTagged(String);

impl Drop for KillTagged {
    fn drop(&mut self) {
        for pid in tagged(&self.0) {
            // SAFETY: kill takes plain integers; the pid carried this test's unique tag.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Runs `cmd` (a launcher starting `ring hang 1` on 3 ranks, `PSYRUN_TEST_TAG=tag` in every
/// rank's environment), waits for `ring looping rank 1`, SIGKILLs rank 1, waits (at most `limit`)
/// for the launcher to end, and checks that no process of the job is left.
fn sigkill_rank_1(cmd: Command, dir: &TempDir, exe: &Path, tag: &str, limit: Duration) -> Done {
    let _cleanup = KillTagged(tag.to_string());
    let mut job = Job::start(cmd, dir);
    let mut exited = None;
    eventually(limit, "rank 1 to print `ring looping`", || {
        exited = job.child.try_wait().expect("waiting for the launcher");
        exited.is_some() || job.stdout.text().contains("ring looping rank 1")
    });
    assert!(
        exited.is_none(),
        "the launcher ended ({exited:?}) before rank 1 looped:\n{}\n{}",
        job.stdout.text(),
        job.stderr.text()
    );
    let mut victim = None;
    eventually(DEADLINE, "rank 1's process", || {
        victim = tagged(tag).into_iter().find(|&p| is_rank(p, exe, 1));
        victim.is_some()
    });
    let victim = victim.expect("found above");
    // SAFETY: kill takes plain integers; the pid was checked a moment ago to be this test's rank
    // 1 (tagged, running ring), which cannot be reaped before its launcher sees it die.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let done = job.wait(limit);
    let all_gone = eventually_or_not(DEADLINE, || tagged(tag).is_empty());
    assert!(
        all_gone,
        "left running {DEADLINE:?} after the launcher exited: {:?}\n{}",
        tagged(tag),
        show(&done)
    );
    done
}

/// The own launchers end the job when rank 1 is SIGKILLed inside MPI_Allreduce, with a nonzero
/// code, and leave nothing behind: proves `ring hang` and [`sigkill_rank_1`].
fn own_launcher_sigkill(flavour: Flavour) {
    let prog = ring(flavour);
    let exe = std::fs::canonicalize(&prog).expect("the ring program's path");
    let _one = own_job();
    let dir = TempDir::new(&format!("own-sigkill-{}", flavour.name()));
    let tag = format!("mpi-own-sigkill-{}-{}", flavour.name(), std::process::id());
    let mut cmd = flavour.launcher(3);
    cmd.env("PSYRUN_TEST_TAG", &tag)
        .arg(&prog)
        .args(["hang", "1"]);
    let done = sigkill_rank_1(cmd, &dir, &exe, &tag, WAIT);
    assert!(
        !done.status.success(),
        "{} after rank 1 was SIGKILLed: {}",
        flavour.name(),
        show(&done)
    );
}

per_flavour!(
    own_launcher_ends_the_job_when_a_rank_is_sigkilled,
    own_launcher_sigkill
);

/// `ring hang 1` under psyrun: rank 1, SIGKILLed once it printed `ring looping`, ends the job:
/// psyrun exits 137, names rank 1, and no process of the job is left.
fn psyrun_sigkill(flavour: Flavour) {
    let prog = ring(flavour);
    let exe = std::fs::canonicalize(&prog).expect("the ring program's path");
    let _one = one_job();
    let before = mpi_segments();
    let dir = TempDir::new(&format!("psyrun-sigkill-{}", flavour.name()));
    let tag = format!("mpi-sigkill-{}-{}", flavour.name(), std::process::id());
    let env = [("PSYRUN_TEST_TAG".to_string(), tag.clone())];
    let mut cmd = psyrun_mpi(&dir, flavour, 3, None, &env);
    cmd.arg(&prog).args(["hang", "1"]);
    let done = sigkill_rank_1(cmd, &dir, &exe, &tag, WAIT);
    let ctx = format!("psyrun ring hang 1 ({}): {}", flavour.name(), show(&done));
    assert_eq!(done.code(), Some(137), "{ctx}");
    assert!(names_rank(&done.stderr, 1), "{ctx}");
    let left: Vec<String> = mpi_segments()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(left.is_empty(), "psyrun left {left:?} in /dev/shm: {ctx}");
}

/// `python -m mpi4py.bench helloworld` under psyrun. Python's ELF dependencies do not show MPI
/// (mpi4py dlopens it), so the interface is named.
fn psyrun_mpi4py(flavour: Flavour) {
    let (python, env) = flavour.python();
    let _one = one_job();
    // `--mpi auto` at 2 ranks: psyrun finds mpi4py's MPI (MPI4PY_LIBMPI, or the library its
    // module needs) or serves every interface; forced at 4.
    let forced = flavour.interfaces()[0].flag();
    for (n, iface) in [(2, None), (4, Some(forced))] {
        let dir = TempDir::new(&format!("psyrun-mpi4py-{}-{n}", flavour.name()));
        let mut cmd = psyrun_mpi(&dir, flavour, n, iface, &env);
        cmd.arg(&python).args(["-m", "mpi4py.bench", "helloworld"]);
        let done = Job::start(cmd, &dir).wait(WAIT);
        let ctx = format!(
            "psyrun -n {n} --mpi {iface:?} mpi4py helloworld ({}): {}",
            flavour.name(),
            show(&done)
        );
        assert_eq!(done.code(), Some(0), "{ctx}");
        assert_hello(&done.stdout, n, &ctx);
    }
}

per_flavour!(psyrun_runs_ring_on_1_2_4_8, psyrun_ring);
per_flavour!(psyrun_serves_each_forced_interface, psyrun_forced_interface);
per_flavour!(psyrun_exits_with_the_mpi_abort_code, psyrun_abort);
per_flavour!(psyrun_exits_with_a_ranks_exit_code, psyrun_exit);
per_flavour!(psyrun_ends_the_job_when_a_rank_is_sigkilled, psyrun_sigkill);
per_flavour!(psyrun_runs_mpi4py_helloworld, psyrun_mpi4py);

/// IMB-MPI1 under `psyrun -n N` gives the rows it gives under Intel MPI's mpiexec.
/// The same run under psyrun is given four times what it took under mpiexec (at least the usual
/// `--timeout`): IMB's length is the machine's, not a constant.
fn psyrun_imb(n: usize) {
    let (baseline, took) = imb_under_mpiexec(n);
    let timeout = TIMEOUT_SECS.max(4 * took.as_secs() + 1);
    let imb = mpi::imb_mpi1();
    let _one = one_job();
    let dir = TempDir::new(&format!("imb-psyrun-{n}"));
    let mut cmd = psyrun_mpi_within(&dir, Flavour::IntelMpi, n, None, &[], timeout);
    cmd.arg(&imb).args(imb_args(n));
    let done = Job::start(cmd, &dir).wait(WAIT + Duration::from_secs(timeout - TIMEOUT_SECS));
    let ctx = format!("IMB-MPI1 under psyrun -n {n}: {}", show(&done));
    assert_eq!(done.code(), Some(0), "{ctx}");
    assert_eq!(sorted(mpi::parse_imb(&done.stdout)), baseline, "{ctx}");
}

#[test]
fn psyrun_imb_on_2_processes_matches_mpiexec() {
    psyrun_imb(2);
}

#[test]
fn psyrun_imb_on_4_processes_matches_mpiexec() {
    psyrun_imb(4);
}

// ---------------------------------------------------------------------------------------------
// What psyrun cannot serve is refused before any rank starts, and --dry-run says what it serves.

/// An Open MPI program asked to be served PMI-1 is a usage error (exit 2) naming `--mpi pmix`;
/// one whose PMIx library cannot be loaded (`PSY_PMIX_LIB` names one that does not exist, as on
/// a host without libpmix2) fails with 125 saying what to install. Neither starts a rank: no
/// `ring` line, no N worlds of one.
#[test]
fn an_mpi_program_psyrun_cannot_serve_is_refused_before_any_rank_starts() {
    let prog = ring(Flavour::OpenMpi);
    let _one = one_job();
    let dir = TempDir::new("psyrun-refuse-pmi1");
    let mut cmd = psyrun_mpi(&dir, Flavour::OpenMpi, 2, Some("pmi1"), &[]);
    cmd.arg(&prog);
    let done = Job::start(cmd, &dir).wait(WAIT);
    let ctx = format!("--mpi pmi1 for Open MPI: {}", show(&done));
    assert_eq!(done.code(), Some(2), "{ctx}");
    assert!(
        done.stderr.contains("Open MPI program") && done.stderr.contains("--mpi pmix"),
        "{ctx}"
    );
    assert!(ring_lines(&done.stdout).is_empty(), "{ctx}");

    let dir = TempDir::new("psyrun-refuse-nolib");
    let mut cmd = psyrun_mpi(&dir, Flavour::OpenMpi, 2, None, &[]);
    cmd.env("PSY_PMIX_LIB", "libpsyne-test-no-pmix.so")
        .arg(&prog);
    let done = Job::start(cmd, &dir).wait(WAIT);
    let ctx = format!("no libpmix: {}", show(&done));
    assert_eq!(done.code(), Some(125), "{ctx}");
    assert!(done.stderr.contains("libpmix2"), "{ctx}");
    assert!(ring_lines(&done.stdout).is_empty(), "{ctx}");
}

/// `--dry-run` of a job of an Open MPI program and an MPICH one (MPMD) says, for each rank,
/// which interface it would get and why.
#[test]
fn dry_run_says_what_each_rank_is_served() {
    let (ompi, mpich) = (ring(Flavour::OpenMpi), ring(Flavour::Mpich4));
    let dir = TempDir::new("psyrun-dry-mpi");
    let mut cmd = psyrun(&dir);
    cmd.args(["--dry-run", "-n", "1"])
        .arg(&ompi)
        .args([":", "-n", "1"])
        .arg(&mpich)
        .args([":", "-n", "1", "true"]);
    let done = run(cmd, &dir);
    let ctx = show(&done);
    assert_eq!(done.code(), Some(0), "{ctx}");
    // Each rank's `mpi:` field, in rank order (the listing aligns the values).
    let served: Vec<&str> = done
        .stdout
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("mpi:"))
        .map(str::trim)
        .collect();
    assert_eq!(
        served,
        [
            "PMIx (Open MPI: libmpi.so.40)",
            "PMI-1/PMI-2 on PMI_FD (MPICH or Intel MPI: libmpich.so.12)",
            "PMI-1/PMI-2 on PMI_FD (no MPI library found in the program)",
        ],
        "{ctx}"
    );
}

/// mpi4py's own test suite (the subset `scripts/ci/mpi4py-suite.sh` runs: every module that passes
/// under the MPI's own launcher) passes under `psyrun -n 2`, `--mpi auto`, with each MPI.
fn psyrun_mpi4py_suite(flavour: Flavour) {
    let _one = one_job();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ci/mpi4py-suite.sh");
    let dir = TempDir::new(&format!("psyrun-mpi4py-suite-{}", flavour.name()));
    let mut cmd = Command::new(script);
    cmd.arg(flavour.name())
        .arg(psyrun_path())
        .args(["--timeout", "300", "-n", "2"])
        .env("MPI4PY_SUITE_TIMEOUT", "300")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let done = run_launcher(cmd, &dir, Duration::from_secs(330));
    let ctx = format!(
        "mpi4py suite under psyrun ({}): {}",
        flavour.name(),
        show(&done)
    );
    assert_eq!(done.code(), Some(0), "{ctx}");
    let summary = done
        .stdout
        .lines()
        .chain(done.stderr.lines())
        .find(|l| l.starts_with("mpi4py-suite "))
        .unwrap_or_else(|| panic!("no summary line: {ctx}"));
    assert!(
        summary.contains(" 0 failed") && summary.ends_with("; OK"),
        "{ctx}"
    );
}

#[test]
fn mpi4py_suite_passes_under_psyrun_with_open_mpi() {
    psyrun_mpi4py_suite(Flavour::OpenMpi);
}

#[test]
fn mpi4py_suite_passes_under_psyrun_with_mpich() {
    psyrun_mpi4py_suite(Flavour::Mpich4);
}

#[test]
fn mpi4py_suite_passes_under_psyrun_with_mpich_5_and_intel_mpi() {
    psyrun_mpi4py_suite(Flavour::Mpich5);
    psyrun_mpi4py_suite(Flavour::IntelMpi);
}

/// `--max-restarts 1`: in the first attempt rank 1 fails before `MPI_Init` (a wrapper exits 3
/// when `PSY_RESTART_COUNT` is 0); psyrun stops the others, stuck in `MPI_Init`, and starts the
/// job again, whose MPI world of 3 forms with a new job id (for Open MPI: a new namespace on
/// the PMIx server psyrun keeps across attempts), and leaves nothing of either attempt in
/// /dev/shm. The wrapper is a shell script, so the interface is forced.
fn psyrun_restart(flavour: Flavour, iface: &str) {
    let prog = ring(flavour);
    let _one = one_job();
    let before = mpi_segments();
    let dir = TempDir::new(&format!("psyrun-restart-{}", flavour.name()));
    let wrapper = dir.script(
        "first-attempt-fails.sh",
        &format!(
            "#!/bin/sh\nif [ \"$PSY_RESTART_COUNT\" = 0 ] && [ \"$PSY_RANK\" = 1 ]; then exit 3; fi\n\
             exec {} \"$@\"\n",
            prog.display()
        ),
        0o755,
    );
    let mut cmd = psyrun_mpi(&dir, flavour, 3, Some(iface), &[]);
    cmd.args(["--max-restarts", "1"]).arg(&wrapper);
    let done = Job::start(cmd, &dir).wait(WAIT);
    let ctx = format!("restart ({}): {}", flavour.name(), show(&done));
    assert_eq!(done.code(), Some(0), "{ctx}");
    assert!(done.stderr.contains("rank 1 (pid "), "{ctx}");
    assert_eq!(ring_lines(&done.stdout), ring_ok_lines(3), "{ctx}");
    // The first attempt's ranks die inside MPI_Init, where MPICH makes its node segment.
    let left: Vec<String> = mpi_segments()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(left.is_empty(), "psyrun left {left:?} in /dev/shm: {ctx}");
}

#[test]
fn a_failed_mpi_job_restarts_and_forms_its_world_again() {
    psyrun_restart(Flavour::OpenMpi, "pmix");
    psyrun_restart(Flavour::Mpich4, "pmi1");
}
