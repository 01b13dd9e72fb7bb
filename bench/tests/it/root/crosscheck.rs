//! The plain C MPI benchmark that cross-checks psybench's MPI backend (`bench/c/mpi_coll_bench.c`,
//! driven by `scripts/bench/mpi-crosscheck.sh`): it builds without warnings, runs every collective
//! in both cadences under `mpirun`, gets right results, and sizes and iterates exactly as psybench
//! does; and the summary script's medians and ±15% verdict.
#![cfg(feature = "mpi")]

use psybench::model::{BenchColl, Record, Report};
use psybench::sizes::{default_iters, element_count};
use psyne::DType;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use crate::common;

const COLLECTIVES: [(&str, BenchColl); 4] = [
    ("allreduce", BenchColl::AllReduce),
    ("broadcast", BenchColl::Broadcast),
    ("allgather", BenchColl::AllGather),
    ("reducescatter", BenchColl::ReduceScatter),
];

/// One `mpirun` at a time from this file: two cores.
static MPI: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `cmd` in its own process group; if it outlives `limit`, the group (by the child's pid) gets
/// SIGTERM, then SIGKILL after a grace period, and the test fails with what it printed.
fn run(mut cmd: Command, limit: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    if let Ok(out) = rx.recv_timeout(limit) {
        return out.unwrap();
    }
    let signal_group = |sig| {
        // SAFETY: kill(2) with the negated pid of the child this function spawned in its own
        // process group (not yet reaped: the waiting thread has not returned) signals only it.
        unsafe { libc::kill(-pid, sig) };
    };
    signal_group(libc::SIGTERM);
    let out = match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(out) => out,
        Err(_) => {
            signal_group(libc::SIGKILL);
            rx.recv().unwrap()
        }
    }
    .unwrap();
    panic!("{cmd:?} timed out after {limit:?}\n{}", text(&out));
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The C benchmark, compiled once per test run with warnings as errors, into cargo's temporary
/// directory for integration tests (`target/tmp`): built under a name of its own, then renamed
/// into place, so a concurrent test run keeps the binary it started.
fn c_bench() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let bin = dir.join("mpi_coll_bench");
        let fresh = dir.join(format!("mpi_coll_bench.{}", std::process::id()));
        let mut cmd = Command::new("mpicc");
        cmd.args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&fresh)
            .arg(repo().join("bench/c/mpi_coll_bench.c"));
        let out = run(cmd, Duration::from_secs(120));
        assert!(
            out.status.success(),
            "mpicc failed (scripts/setup.sh installs it):\n{}",
            text(&out)
        );
        std::fs::rename(&fresh, &bin).unwrap();
        bin
    })
}

fn mpirun(n: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--mca",
        "op",
        "^avx",
    ])
    .args(["-n", &n.to_string()])
    .arg(c_bench());
    c
}

/// One parsed output line.
#[derive(Debug)]
struct Row {
    collective: String,
    cadence: String,
    ranks: usize,
    bytes: u64,
    count: u64,
    iters: u64,
    warmup: u64,
    in_place: bool,
    avg: f64,
    max: f64,
    min: f64,
    wrong: u64,
}

const HEADER: &str = "collective,cadence,ranks,bytes,count,iters,warmup,in_place,time_us_avg,\
                      time_us_max,time_us_min,wrong";

fn parse(stdout: &str) -> Vec<Row> {
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some(HEADER), "{stdout}");
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 12, "{l}");
            Row {
                collective: f[0].into(),
                cadence: f[1].into(),
                ranks: f[2].parse().unwrap(),
                bytes: f[3].parse().unwrap(),
                count: f[4].parse().unwrap(),
                iters: f[5].parse().unwrap(),
                warmup: f[6].parse().unwrap(),
                in_place: f[7].parse().unwrap(),
                avg: f[8].parse().unwrap(),
                max: f[9].parse().unwrap(),
                min: f[10].parse().unwrap(),
                wrong: f[11].parse().unwrap(),
            }
        })
        .collect()
}

/// Runs the C benchmark on `n` ranks and returns its rows after the common assertions: exit 0,
/// one row per size with psybench's bytes and count, positive times with min ≤ avg ≤ max, no
/// wrong element.
fn bench_rows(n: usize, coll: (&str, BenchColl), args: &[&str], sizes: &[u64]) -> Vec<Row> {
    let _one = MPI.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = mpirun(n);
    cmd.arg(coll.0).args(args);
    let out = run(cmd, Duration::from_secs(180));
    assert!(
        out.status.success(),
        "{:?} {args:?}: {}",
        coll.0,
        text(&out)
    );
    let rows = parse(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rows.len(), sizes.len(), "{}", text(&out));
    for (row, &asked) in rows.iter().zip(sizes) {
        let (count, bytes) = element_count(coll.1, asked, DType::F32, n);
        assert_eq!(row.collective, coll.0);
        assert_eq!(row.ranks, n);
        assert_eq!((row.count, row.bytes), (count, bytes), "{row:?}");
        assert!(
            row.min > 0.0 && row.min <= row.avg && row.avg <= row.max,
            "{row:?}"
        );
        assert_eq!(row.wrong, 0, "{row:?}");
    }
    rows
}

#[test]
fn every_collective_and_cadence_is_right_with_psybench_sizes_and_iterations() {
    for coll in COLLECTIVES {
        for cadence in ["stream", "osu"] {
            let rows = bench_rows(
                2,
                coll,
                &["--cadence", cadence, "--sizes", "64K,8"],
                &[8, 64 << 10],
            );
            for row in &rows {
                assert_eq!(row.cadence, cadence);
                assert_eq!((row.warmup, row.iters), default_iters(row.bytes), "{row:?}");
                // psybench records all-reduce and broadcast as in place.
                assert_eq!(
                    row.in_place,
                    matches!(coll.1, BenchColl::AllReduce | BenchColl::Broadcast)
                );
            }
        }
    }
}

#[test]
fn sizes_round_up_like_psybench_and_flags_override_iterations() {
    // 3 ranks: all-gather and reduce-scatter round their count up to a multiple of the ranks.
    for coll in COLLECTIVES {
        let rows = bench_rows(
            3,
            coll,
            &["--sizes", "3,100,1K", "--iters", "7", "--cadence", "osu"],
            &[3, 100, 1024],
        );
        for row in &rows {
            // --iters alone leaves the warm-up at its default for the size, as in psybench.
            assert_eq!((row.warmup, row.iters), (default_iters(row.bytes).0, 7));
        }
    }
    let rows = bench_rows(
        2,
        COLLECTIVES[0],
        &[
            "--out-of-place",
            "--page-aligned",
            "--sizes",
            "1M",
            "--iters",
            "3",
            "--warmup",
            "0",
        ],
        &[1 << 20],
    );
    assert_eq!(
        (rows[0].warmup, rows[0].iters, rows[0].in_place),
        (0, 3, false)
    );
    // MPI_THREAD_FUNNELED instead of MPI_Init: the same rows, still checked.
    let rows = bench_rows(
        2,
        COLLECTIVES[0],
        &["--funneled", "--sizes", "8,64K"],
        &[8, 64 << 10],
    );
    assert!(rows.iter().all(|r| r.in_place));
}

#[test]
fn a_wrong_result_is_counted_and_fails_the_run() {
    for coll in COLLECTIVES {
        let _one = MPI.lock().unwrap_or_else(|e| e.into_inner());
        let mut cmd = mpirun(2);
        cmd.arg(coll.0)
            .args(["--sizes", "8,1K", "--iters", "2"])
            .env("MPI_COLL_BENCH_TEST_CORRUPT", "1");
        let out = run(cmd, Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let rows = parse(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(rows.iter().map(|r| r.wrong).collect::<Vec<_>>(), [1, 1]);
    }
}

#[test]
fn bad_arguments_are_usage_errors_that_name_the_problem() {
    for (args, needle) in [
        (&["allreduce", "--cadence", "isolated"][..], "isolated"),
        (&["allreduce", "--sizes", "1Q"], "1Q"),
        (&["alltoall"], "alltoall"),
        (&["broadcast", "--out-of-place"], "--out-of-place"),
        (&["allreduce", "--iters", "0"], "--iters"),
    ] {
        let _one = MPI.lock().unwrap_or_else(|e| e.into_inner());
        let mut cmd = mpirun(2);
        cmd.args(args);
        let out = run(cmd, Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {}",
            text(&out)
        );
    }
}

// ---- scripts/report/crosscheck-summary.py on a small fixture ----

/// One program's rows of one round: (bytes, time_us_avg, time_us_max).
type Rows = Vec<(u64, f64, f64)>;

fn c_csv(rows: &[(u64, f64, f64)], iters: u64) -> String {
    let mut s = format!("{HEADER}\n");
    for &(bytes, avg, max) in rows {
        s += &format!(
            "allreduce,stream,2,{bytes},{},{iters},20,true,{avg},{max},{avg},0\n",
            bytes / 4
        );
    }
    s
}

fn psybench_json(rows: &[(u64, f64, f64)], iters: u64) -> String {
    let records: Vec<Record> = rows
        .iter()
        .map(|&(bytes, avg, max)| {
            let mut r = common::record(BenchColl::AllReduce, "mpi", "-", 2, bytes, 1.0, 1.0);
            r.iters = iters;
            r.warmup = 20;
            r.in_place = true;
            r.time_us_avg = avg;
            r.time_us_max = max;
            r.time_us_min = avg;
            r
        })
        .collect();
    serde_json::to_string(&Report {
        meta: common::meta(2),
        records,
        fits: Vec::new(),
    })
    .unwrap()
}

/// Writes `rounds` of (C rows, psybench rows) as mpi-crosscheck.sh lays them out, runs the
/// summary, and returns its exit code, its stdout and agreement.csv.
fn summarise(tag: &str, rounds: &[(Rows, Rows)], psybench_iters: u64) -> (i32, String, String) {
    let dir = common::temp_dir(&format!("crosscheck-{tag}"));
    std::fs::create_dir_all(dir.join("raw")).unwrap();
    let mut runs = String::from("round,transport,collective,cadence,program,rc,path\n");
    for (i, (c, p)) in rounds.iter().enumerate() {
        let r = i + 1;
        std::fs::write(dir.join(format!("raw/r{r}-c.csv")), c_csv(c, 1000)).unwrap();
        std::fs::write(
            dir.join(format!("raw/r{r}-p.json")),
            psybench_json(p, psybench_iters),
        )
        .unwrap();
        runs += &format!("{r},shm,allreduce,stream,c,0,raw/r{r}-c.csv\n");
        runs += &format!("{r},shm,allreduce,stream,psybench,0,raw/r{r}-p.json\n");
    }
    std::fs::write(dir.join("raw/runs.csv"), runs).unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("scripts/report/crosscheck-summary.py"))
        .arg(&dir);
    let out = run(cmd, Duration::from_secs(60));
    let agreement = std::fs::read_to_string(dir.join("agreement.csv")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        agreement,
    )
}

#[test]
fn summary_takes_medians_and_judges_each_cell_within_15_percent() {
    // Per size, each round's (avg, max) for C, then for psybench. 8 B: C max median 11,
    // psybench's 12.5 (an outlier round ignored): 1.14, in; avg 10 vs 10: in. 64 KiB: max 100 vs
    // 120: out. 1 MiB: exactly 1.15: in. 16 MiB: 150 vs 190, out, but C's own rounds spread by
    // (200 - 100) / 150: outside within its noise.
    type Three = [(f64, f64); 3];
    let table: [(u64, Three, Three); 4] = [
        (
            8,
            [(9.0, 10.0), (10.0, 12.0), (11.0, 11.0)],
            [(11.5, 12.0), (9.0, 12.5), (10.0, 100.0)],
        ),
        (
            65536,
            [(90.0, 100.0); 3],
            [(90.0, 120.0), (90.0, 121.0), (90.0, 119.0)],
        ),
        (1 << 20, [(100.0, 200.0); 3], [(100.0, 230.0); 3]),
        (
            16 << 20,
            [(100.0, 100.0), (200.0, 200.0), (150.0, 150.0)],
            [(100.0, 100.0), (200.0, 200.0), (190.0, 190.0)],
        ),
    ];
    let rounds: Vec<(Rows, Rows)> = (0..3)
        .map(|r| {
            let pick = |f: fn(&(u64, Three, Three)) -> &Three| {
                table.iter().map(|t| (t.0, f(t)[r].0, f(t)[r].1)).collect()
            };
            (pick(|t| &t.1), pick(|t| &t.2))
        })
        .collect();
    let (code, stdout, csv) = summarise("mixed", &rounds, 1000);
    assert_eq!(code, 1, "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("verdict: 2 of 4 cells within ±15%")
            && last.ends_with("cells outside but within their noise: 1"),
        "{stdout}"
    );
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let find = |bytes: &str, stat: &str| {
        rows.iter()
            .find(|r| r[3] == bytes && r[4] == stat)
            .unwrap_or_else(|| panic!("no {bytes} {stat} row in\n{csv}"))
            .clone()
    };
    // collective, transport, cadence, bytes, stat, c, psybench, ratio, within, ...
    assert_eq!(
        find("8", "max")[5..9],
        ["11.000", "12.500", "1.1364", "yes"]
    );
    assert_eq!(
        find("8", "avg")[5..9],
        ["10.000", "10.000", "1.0000", "yes"]
    );
    assert_eq!(
        find("65536", "max")[5..9],
        ["100.000", "120.000", "1.2000", "no"]
    );
    assert_eq!(find("1048576", "max")[7..9], ["1.1500", "yes"]);
    assert_eq!(
        find("16777216", "max")[5..9],
        ["150.000", "190.000", "1.2667", "no"]
    );
    assert!(stdout.contains("| no (within noise) |"), "{stdout}");

    // Two rounds (an even count: the mean of the middle two), everything within: exit 0.
    let rounds = vec![
        (vec![(8, 10.0, 10.0)], vec![(8, 10.0, 10.0)]),
        (vec![(8, 12.0, 12.0)], vec![(8, 12.0, 13.0)]),
    ];
    let (code, stdout, csv) = summarise("even", &rounds, 1000);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("verdict: 1 of 1 cells within ±15%"),
        "{stdout}"
    );
    assert!(csv.contains(",max,11.000,11.500,"), "{csv}");

    // The same times, but the programs ran different iteration counts: not like with like.
    let (code, stdout, _) = summarise("iters", &rounds, 500);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("disagree on iters"), "{stdout}");
}
