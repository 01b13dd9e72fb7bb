//! psybench end to end: real ranks (spawned with -n through psyrun's library, or by mpirun),
//! real sockets, every row checked against the oracle.

use psybench::export::read_report;
use psybench::model::BenchColl;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A temporary directory removed on drop, even when the test fails.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("psybench-e2e-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn join(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cmd` to completion, killing it (by pid) if it outlives `limit`.
fn run(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "timed out after {limit:?}; stdout:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn psybench() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_psybench"));
    c.env("PSY_TIMEOUT", "60");
    c
}

fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A PNG's width and height from its IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert!(
        bytes.len() > 10_000 && bytes.len() < 5_000_000,
        "odd PNG size {}",
        bytes.len()
    );
    (w, h)
}

#[test]
fn three_ranks_sweep_every_collective_with_zero_wrong_and_write_every_format() {
    let d = Dir::new("all");
    let (csv, json, png) = (d.join("r.csv"), d.join("r.json"), d.join("r.png"));
    let mut cmd = psybench();
    cmd.args([
        "-n", "3", "all", "--sizes", "1:64K", "--iters", "20", "--warmup", "2",
    ])
    .arg("--csv")
    .arg(&csv)
    .arg("--json")
    .arg(&json)
    .arg("--plot")
    .arg(&png);
    let out = run(cmd, Duration::from_secs(240));
    assert!(out.status.success(), "{}", text(&out));
    let report = read_report(&json).unwrap();
    assert_eq!(report.meta.world_size, 3);
    for coll in BenchColl::ALL {
        let rows: Vec<_> = report
            .records
            .iter()
            .filter(|r| r.collective == coll.name())
            .collect();
        assert!(!rows.is_empty(), "no rows for {}", coll.name());
        for r in rows {
            assert_eq!(r.wrong, Some(0), "{r:?}");
            assert!(
                r.time_us_min > 0.0
                    && r.time_us_min <= r.time_us_avg
                    && r.time_us_avg <= r.time_us_max,
                "{r:?}"
            );
        }
    }
    // 1 byte rounds up to one f32; 64K is the last size.
    let sizes: Vec<u64> = report
        .records
        .iter()
        .filter(|r| r.collective == "allreduce")
        .map(|r| r.bytes)
        .collect();
    assert_eq!(sizes.first(), Some(&4));
    assert_eq!(sizes.last(), Some(&65536));
    let from_csv = read_report(&csv).unwrap();
    assert_eq!(from_csv.records.len(), report.records.len());
    let (w, h) = png_size(&png);
    assert!(w >= 800 && h >= 400, "{w}x{h}");
}

#[test]
fn a_broken_result_makes_psybench_exit_non_zero() {
    let mut cmd = psybench();
    cmd.args(["-n", "2", "allreduce", "--sizes", "1K,4K", "--iters", "5"])
        .env("PSYBENCH_TEST_CORRUPT", "1");
    let out = run(cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("wrong elements"),
        "{}",
        text(&out)
    );
}

#[test]
fn shared_buffers_all_reduce_zero_copy_across_processes_and_check_out() {
    // Three processes on one host: the buffers live in shared memory (rows say `shared`) and
    // every element of every size is checked against the oracle, for a sum and an average.
    for op in ["sum", "avg"] {
        let d = Dir::new(&format!("shared-{op}"));
        let json = d.join("r.json");
        let mut cmd = psybench();
        cmd.args([
            "-n",
            "3",
            "allreduce",
            "--sizes",
            "0,8,4K,24K,1M,3M",
            "--iters",
            "5",
        ])
        .args(["--op", op, "--dtype", "f64", "--shared-buffers", "--json"])
        .arg(&json);
        let out = run(cmd, Duration::from_secs(120));
        assert!(out.status.success(), "{}", text(&out));
        let report = read_report(&json).unwrap();
        assert_eq!(report.records.len(), 6, "{}", text(&out));
        for r in &report.records {
            // Below psyne::MIN_SHARED_BYTES the ordinary all-reduce runs.
            let shared = r.bytes >= psyne::MIN_SHARED_BYTES as u64;
            assert_eq!(r.algo == "shared", shared, "{r:?}");
            assert_eq!(r.wrong, Some(0), "{r:?}");
        }
    }
}

#[test]
fn without_check_rows_say_not_checked() {
    let d = Dir::new("nocheck");
    let json = d.join("r.json");
    let mut cmd = psybench();
    cmd.args([
        "-n",
        "2",
        "broadcast",
        "--sizes",
        "8,1M",
        "--iters",
        "5",
        "--no-check",
        "--algo",
        "binomial,pipeline",
    ])
    .arg("--json")
    .arg(&json);
    let out = run(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out));
    let report = read_report(&json).unwrap();
    assert_eq!(report.records.len(), 4, "two sizes × two algorithms");
    assert!(report.records.iter().all(|r| r.wrong.is_none()));
    let algos: std::collections::BTreeSet<_> =
        report.records.iter().map(|r| r.algo.as_str()).collect();
    assert_eq!(
        algos.into_iter().collect::<Vec<_>>(),
        vec!["binomial", "pipeline"]
    );
}

#[test]
fn osu_cadence_reports_the_mean_over_ranks_and_says_so_in_every_format() {
    let d = Dir::new("osu");
    let (json, csv) = (d.join("r.json"), d.join("r.csv"));
    let mut cmd = psybench();
    cmd.args([
        "-n",
        "2",
        "allreduce",
        "--sizes",
        "8,64K",
        "--iters",
        "20",
        "--cadence",
        "osu",
        "--rounds",
        "2",
    ])
    .arg("--json")
    .arg(&json)
    .arg("--csv")
    .arg(&csv);
    let out = run(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("iterations: osu") && stdout.contains("size / avg time"),
        "{stdout}"
    );
    let report = read_report(&json).unwrap();
    // Whether each rank was bound to fewer cores than the host has is known, and said if not.
    let unbound = report
        .meta
        .unbound_ranks
        .expect("the ranks' binding is recorded");
    assert!(unbound <= 2);
    assert_eq!(
        stdout.contains("may run on any core"),
        unbound > 0,
        "{stdout}"
    );
    let sizes: Vec<u64> = report.records.iter().map(|r| r.bytes).collect();
    assert_eq!(
        sizes,
        [8, 8, 65536, 65536],
        "two rounds of each size, in size order"
    );
    for r in &report.records {
        assert_eq!(
            (r.cadence.as_str(), r.time_over_ranks.as_str()),
            ("osu", "avg")
        );
        assert_eq!(r.wrong, Some(0));
        assert!(r.time_us_min <= r.time_us_avg && r.time_us_avg <= r.time_us_max);
        assert_eq!(r.time_us(), r.time_us_avg);
        let algbw = r.bytes as f64 / (r.time_us_avg * 1e3);
        assert!(
            (r.algbw_gbps - algbw).abs() <= 1e-9 * algbw.max(1.0),
            "{r:?}"
        );
    }
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = csv_text.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for line in csv_text.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells[col("cadence")], "osu", "{line}");
        assert_eq!(cells[col("time_over_ranks")], "avg", "{line}");
    }
}

#[test]
fn bad_input_is_a_usage_error_that_names_the_problem() {
    for (args, needle) in [
        (vec!["allreduce", "--sizes", "64M:8"], "64M:8"),
        (vec!["allreduce", "--sizes", "1X"], "1X"),
        (vec!["allreduce", "--algo", "pairwise"], "pairwise"),
        (vec!["allreduce", "--dtype", "f32", "--op", "bxor"], "bxor"),
    ] {
        let mut cmd = psybench();
        cmd.args(&args);
        let out = run(cmd, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(needle), "{args:?}: {}", text(&out));
    }
}

/// Without the MPI backend, a psybench started by an MPI launcher as one of two ranks says so and
/// how to run it, instead of measuring a world of one. (The environment is Open MPI's without its
/// PMIx variables; a real mpirun's processes form the group through PMIx: see
/// `mpi::native_alone_under_mpirun_forms_a_2_rank_group_through_pmix`.)
#[cfg(not(feature = "mpi"))]
#[test]
fn an_mpi_launch_without_the_mpi_backend_is_an_error_that_says_what_to_do() {
    let mut cmd = psybench();
    cmd.args(["allreduce", "--sizes", "8", "--iters", "2"])
        .env("OMPI_COMM_WORLD_RANK", "1")
        .env("OMPI_COMM_WORLD_SIZE", "2");
    let out = run(cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "started by Open MPI's mpirun as rank 1 of 2",
        "OMPI_COMM_WORLD_SIZE=2",
        "`psybench -n 2 ...`",
        "`psyrun -n 2 psybench ...`",
        "--features mpi",
    ] {
        assert!(stderr.contains(needle), "{needle:?} in:\n{}", text(&out));
    }
    assert!(out.stdout.is_empty(), "{}", text(&out));
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;

    /// `psyrun -n N` (from the same build) serving the ranks PMIx, with what [`mpirun`] sets.
    fn psyrun(n: usize) -> Command {
        let psyrun = Path::new(env!("CARGO_BIN_EXE_psybench")).with_file_name("psyrun");
        let mut c = Command::new(psyrun);
        c.args(["-n", &n.to_string(), "--timeout", "170"])
            .args(["-x", "OMPI_MCA_op=^avx"])
            .env("PSY_TIMEOUT", "60");
        c
    }

    /// A launcher's name and how it starts N ranks.
    type Launcher = (&'static str, fn(usize) -> Command);

    /// Both ways of launching an MPI job: Open MPI's own mpirun, and psyrun.
    fn launchers() -> [Launcher; 2] {
        [("mpirun", mpirun), ("psyrun", psyrun)]
    }

    fn mpirun(n: usize) -> Command {
        let mut c = Command::new("mpirun");
        c.args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &n.to_string(),
        ])
        // Open MPI 4.1's AVX reduction component saturates 8- and 16-bit integer sums
        // (open-mpi/ompi#8045); without it MPI's results are the oracle's.
        .args(["--mca", "op", "^avx"])
        .env("PSY_TIMEOUT", "60");
        c
    }

    /// Under mpirun and under psyrun alike (psyrun serving Open MPI's ranks PMIx).
    #[test]
    fn native_and_mpi_match_the_oracle_and_each_other() {
        for (name, launcher) in launchers() {
            let mut cmd = launcher(2);
            cmd.arg(env!("CARGO_BIN_EXE_psybench")).args([
                "check",
                "--backend",
                "native,mpi",
                "--sizes",
                "1,1K,5K",
            ]);
            let out = run(cmd, Duration::from_secs(180));
            assert!(out.status.success(), "{name}: {}", text(&out));
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                stdout
                    .matches("every collective matches the oracle")
                    .count(),
                24,
                "{name}: {stdout}"
            );
        }
    }

    #[test]
    fn an_interleaved_sweep_records_both_backends_at_every_size() {
        for (name, launcher) in launchers() {
            interleaved_sweep(name, launcher(2));
        }
    }

    /// `psybench allreduce --backend native,mpi` launched by `cmd` has a checked row of each
    /// backend at every size.
    fn interleaved_sweep(name: &str, mut cmd: Command) {
        let d = Dir::new(&format!("mpi-{name}"));
        let json = d.join("r.json");
        cmd.arg(env!("CARGO_BIN_EXE_psybench"))
            .args([
                "allreduce",
                "--backend",
                "native,mpi",
                "--sizes",
                "8:64K",
                "--iters",
                "20",
            ])
            .arg("--json")
            .arg(&json);
        let out = run(cmd, Duration::from_secs(180));
        assert!(out.status.success(), "{name}: {}", text(&out));
        let report = read_report(&json).unwrap();
        assert_eq!(report.meta.world_size, 2, "{name}: {}", text(&out));
        for bytes in [8u64, 1024, 65536] {
            for backend in ["native", "mpi"] {
                assert!(
                    report
                        .records
                        .iter()
                        .any(|r| r.bytes == bytes && r.backend == backend && r.wrong == Some(0)),
                    "{name}: no {backend} row at {bytes} B"
                );
            }
        }
    }

    /// `mpirun -n 2 psybench` with only the native backend: the group forms through mpirun's
    /// PMIx server, two ranks, over shared memory and over TCP as asked.
    #[test]
    fn native_alone_under_mpirun_forms_a_2_rank_group_through_pmix() {
        for transport in ["shm", "tcp"] {
            let d = Dir::new("mpi-native");
            let json = d.join("r.json");
            let mut cmd = mpirun(2);
            cmd.arg(env!("CARGO_BIN_EXE_psybench"))
                .args(["allreduce", "--sizes", "8,64K", "--iters", "20"])
                .args(["--transport", transport])
                .arg("--json")
                .arg(&json);
            let out = run(cmd, Duration::from_secs(180));
            assert!(out.status.success(), "{}", text(&out));
            let report = read_report(&json).unwrap();
            assert_eq!(report.meta.world_size, 2, "{}", text(&out));
            assert_eq!(report.records.len(), 2, "{}", text(&out));
            for r in &report.records {
                assert_eq!(
                    (r.backend.as_str(), r.ranks, r.wrong, r.transport.as_str()),
                    ("native", 2, Some(0), transport),
                    "{}",
                    text(&out)
                );
                assert!(r.busbw_gbps > 0.0, "{} B: busbw {}", r.bytes, r.busbw_gbps);
            }
        }
    }
}

#[test]
fn outputs_to_a_fifo_and_to_stdout_are_written_through_not_replaced() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::FileTypeExt;
    let d = Dir::new("fifo");
    let (fifo, png_fifo) = (d.join("r.json"), d.join("r.png"));
    for p in [&fifo, &png_fifo] {
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }
    let readers: Vec<_> = [fifo.clone(), png_fifo.clone()]
        .into_iter()
        .map(|p| std::thread::spawn(move || std::fs::read(p).unwrap()))
        .collect();
    let mut cmd = psybench();
    cmd.args(["-n", "2", "allreduce", "--sizes", "8:64", "--iters", "5"])
        .args(["--csv", "-", "--json"])
        .arg(&fifo)
        .arg("--plot")
        .arg(&png_fifo);
    let out = run(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out));
    // Checked before joining the readers: a FIFO replaced by a file would leave them blocked.
    for p in [&fifo, &png_fifo] {
        assert!(
            std::fs::symlink_metadata(p).unwrap().file_type().is_fifo(),
            "{} was replaced",
            p.display()
        );
    }
    let got: Vec<Vec<u8>> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    let report: psybench::model::Report =
        serde_json::from_slice(&got[0]).expect("the FIFO's reader got one whole JSON report");
    assert_eq!(report.records.len(), 4, "8, 16, 32 and 64 bytes");
    assert!(
        got[1].starts_with(b"\x89PNG"),
        "the plot went through its FIFO"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches("collective,backend,algo").count(),
        1,
        "`--csv -` prints the CSV once, at the end:\n{stdout}"
    );
}

#[test]
fn sizes_beyond_this_hosts_memory_are_refused_before_anything_is_allocated() {
    for sizes in ["1T", "64G", "18446744073709551615"] {
        let mut cmd = psybench();
        cmd.args(["-n", "2", "allreduce", "--sizes", sizes]);
        let started = std::time::Instant::now();
        let limit = Duration::from_secs(60);
        let out = run(cmd, limit);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "--sizes {sizes}: {all}");
        assert!(all.contains("MemAvailable"), "--sizes {sizes}: {all}");
        // Refused once, by psybench itself, before it starts any rank.
        assert_eq!(
            all.matches("MemAvailable").count(),
            1,
            "--sizes {sizes}: {all}"
        );
        assert!(
            !all.contains("rank 1"),
            "--sizes {sizes}: a rank started: {all}"
        );
        assert!(!all.contains("panicked"), "{all}");
        // Well within the run's limit: nothing was allocated or touched first.
        assert!(started.elapsed() < limit / 2, "--sizes {sizes}");
    }
}

/// The algorithm each row of a JSON report ran, by size.
fn algos_by_size(path: &Path) -> Vec<(u64, String)> {
    read_report(path)
        .unwrap()
        .records
        .iter()
        .map(|r| (r.bytes, r.algo.clone()))
        .collect()
}

#[test]
fn tune_writes_a_file_psyne_reads_and_keeps_the_files_other_sections() {
    let dir = Dir::new("tune");
    let file = dir.join("tuning");
    std::fs::write(
        &file,
        "# tuned elsewhere\n[net 4]\nbroadcast max binomial\n",
    )
    .unwrap();
    let mut cmd = psybench();
    cmd.args([
        "-n",
        "2",
        "tune",
        "allreduce",
        "barrier",
        "--sizes",
        "8,64K",
    ])
    .args(["--iters", "5", "--warmup", "1", "--rounds", "2", "--json"])
    .arg(dir.join("tune.json"))
    .arg("--output")
    .arg(&file);
    let out = run(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("| collective | size | default |"),
        "{}",
        text(&out)
    );
    assert!(stdout.contains("[shm 2]"), "{}", text(&out));
    let rules = psyne::tuning::Rules::load(&file).unwrap();
    let shm = rules.section_for(psyne::tuning::Scope::Shm, 2).unwrap();
    let lines: Vec<_> = shm.rules.iter().map(|r| (r.coll, r.up_to)).collect();
    // All-reduce ends with a line for every larger size; barrier has one size, 0.
    assert!(
        lines.contains(&(psyne::Collective::AllReduce, u64::MAX)),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|(c, _)| *c == psyne::Collective::Barrier),
        "{lines:?}"
    );
    assert!(
        rules.section_for(psyne::tuning::Scope::Net, 4).is_some(),
        "the net section went"
    );
    // Every candidate ran at every size, each round, all checked: the default's rows say so.
    let report = read_report(&dir.join("tune.json")).unwrap();
    assert!(report.records.iter().all(|r| r.wrong == Some(0)));
    let defaults = report
        .records
        .iter()
        .filter(|r| r.algo.starts_with("default:"));
    assert_eq!(
        defaults.count(),
        2 * 3,
        "2 rounds of all-reduce at 2 sizes and barrier"
    );
    assert!(report
        .records
        .iter()
        .any(|r| r.algo == "rabenseifner" && r.bytes == 8));
}

#[test]
fn a_tuning_file_changes_the_automatic_choice_and_a_bad_one_is_named() {
    let dir = Dir::new("tuning-file");
    let file = dir.join("tuning");
    std::fs::write(&file, "[shm 2]\nallreduce max ring\n").unwrap();
    let sweep = |tuning: Option<&Path>, xdg: &Path, json: &str| {
        let mut cmd = psybench();
        cmd.args([
            "-n",
            "2",
            "allreduce",
            "--sizes",
            "8,256K",
            "--iters",
            "5",
            "--json",
        ])
        .arg(dir.join(json))
        .env("XDG_CONFIG_HOME", xdg)
        .env_remove("PSY_TUNING");
        if let Some(t) = tuning {
            cmd.env("PSY_TUNING", t);
        }
        run(cmd, Duration::from_secs(60))
    };
    let empty = dir.join("empty-config");
    let out = sweep(Some(&file), &empty, "tuned.json");
    assert!(out.status.success(), "{}", text(&out));
    let ring = vec![(8, "ring".to_string()), (262144, "ring".to_string())];
    assert_eq!(algos_by_size(&dir.join("tuned.json")), ring);
    let meta = read_report(&dir.join("tuned.json")).unwrap().meta;
    assert_eq!(meta.tuning_file.as_deref(), file.to_str());
    assert!(String::from_utf8_lossy(&out.stdout).contains("from the tuning file"));
    let out = sweep(Some(Path::new("off")), &empty, "default.json");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        algos_by_size(&dir.join("default.json")),
        [(8, "flat".to_string()), (262144, "flat".to_string())]
    );
    assert_eq!(
        read_report(&dir.join("default.json"))
            .unwrap()
            .meta
            .tuning_file,
        None
    );
    // Found where psyne looks when PSY_TUNING is unset.
    std::fs::create_dir_all(dir.join("config/psyne")).unwrap();
    std::fs::copy(&file, dir.join("config/psyne/tuning")).unwrap();
    let out = sweep(None, &dir.join("config"), "found.json");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(algos_by_size(&dir.join("found.json")), ring);
    // A file that does not parse fails the job, naming its line.
    std::fs::write(&file, "[shm 2]\nallreduce max pairwise\n").unwrap();
    let out = sweep(Some(&file), &empty, "bad.json");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("tuning:2:"), "{}", text(&out));
}

/// `psybench model` prints a row per size, writes every algorithm's estimate as CSV, and refuses
/// more ranks than the machine has cores with exit 2.
#[test]
fn model_prints_and_writes_every_algorithm_per_size() {
    let dir = Dir::new("model");
    let csv = dir.join("m.csv");
    let out = psybench()
        .args([
            "model",
            "--machine",
            "epyc-9654-2s",
            "--ranks",
            "32",
            "--sizes",
            "64K,1M",
        ])
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("32 ranks, 4 domain(s)"), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.trim_start().starts_with("64K")),
        "{stdout}"
    );
    let rows = std::fs::read_to_string(&csv).unwrap();
    for algo in [
        "ring",
        "recursive_doubling",
        "rabenseifner",
        "hier",
        "two_level",
    ] {
        assert_eq!(
            rows.lines()
                .filter(|l| l.split(',').nth(1) == Some(algo))
                .count(),
            2,
            "{algo} in\n{rows}"
        );
    }
    let out = psybench()
        .args(["model", "--machine", "this-vm", "--ranks", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("2 to 2 ranks"),
        "{}",
        text(&out)
    );
}
