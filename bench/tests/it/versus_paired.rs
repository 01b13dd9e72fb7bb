//! `scripts/report/versus_paired.py` (the report of `scripts/bench/versus-paired.sh`) on a small
//! fixture: it pairs the k-th psyne record of a size with the k-th MPI record of it, whatever
//! order a round measured them in, takes MPI ÷ psyne per pair, names the MPI with the lowest
//! median ratio per cell, holds the C benchmark against psybench's measurement of the same MPI,
//! and lists a job that failed.

use psybench::model::{BenchColl, Record, Report};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// An osu-cadence all-reduce record of `bytes` whose mean over ranks is `us`.
fn record(backend: &str, bytes: u64, us: f64) -> Record {
    let mut r = common::record(BenchColl::AllReduce, backend, "-", 2, bytes, 1.0, 1.0);
    r.cadence = "osu".into();
    r.time_over_ranks = "avg".into();
    r.time_us_avg = us;
    // The slowest rank's time is not the one osu cadence reports: the report must not read it.
    r.time_us_max = us * 100.0;
    r
}

/// One paired job of 8 B and 1 KiB: rounds alternate which backend goes first, as psybench's do.
fn paired_json(rounds: &[(f64, f64)], kib_ratio: f64) -> String {
    let mut records = Vec::new();
    for bytes in [8, 1024] {
        for (i, &(psyne, mpi)) in rounds.iter().enumerate() {
            let mpi = if bytes == 8 { mpi } else { psyne * kib_ratio };
            let pair = [record("native", bytes, psyne), record("mpi", bytes, mpi)];
            if i % 2 == 0 {
                records.extend(pair);
            } else {
                records.extend(pair.into_iter().rev());
            }
        }
    }
    serde_json::to_string(&Report {
        meta: common::meta(2),
        records,
        fits: Vec::new(),
    })
    .unwrap()
}

fn c_csv(us_8: f64) -> String {
    "collective,cadence,ranks,bytes,count,iters,warmup,in_place,time_us_avg,time_us_max,time_us_min,wrong\n"
        .to_string()
        + &format!("allreduce,osu,2,8,2,1000,20,true,{us_8},{us_8},{us_8},0\n")
        + "allreduce,osu,2,1024,256,1000,20,true,9.0,9.0,9.0,0\n"
}

#[test]
fn pairs_ratios_best_mpi_cross_check_and_failures() {
    let dir = common::temp_dir("versus-paired");
    let raw = dir.join("raw");
    std::fs::create_dir_all(&raw).unwrap();
    // Open MPI: at 8 B slower in two pairs of three (ratios 2, 1.5, 0.5: median 1.5); at 1 KiB
    // 3x psyne's time. MPICH 5: 8 B ratios 0.8 in all three pairs; 1 KiB 1.2x.
    let files = [
        (
            "openmpi",
            paired_json(&[(1.0, 2.0), (2.0, 3.0), (4.0, 2.0)], 3.0),
            2.0,
        ),
        (
            "mpich5",
            paired_json(&[(1.0, 0.8), (2.0, 1.6), (4.0, 3.2)], 1.2),
            3.2,
        ),
    ];
    let mut runs = String::from("job,collective,mpi,kind,rc,file,command\n");
    for (mpi, json, c_us) in &files {
        std::fs::write(raw.join(format!("j1-allreduce-{mpi}.json")), json).unwrap();
        std::fs::write(raw.join(format!("j1-allreduce-{mpi}.txt")), "").unwrap();
        std::fs::write(raw.join(format!("j1-allreduce-{mpi}.csv")), c_csv(*c_us)).unwrap();
        runs += &format!("1,allreduce,{mpi},paired,0,j1-allreduce-{mpi}.txt,\"x\"\n");
        runs += &format!("1,allreduce,{mpi},c-bench,0,j1-allreduce-{mpi}.csv,\"x\"\n");
    }
    runs += "1,allreduce,impi,paired,124,j1-allreduce-impi.txt,\"x\"\n";
    std::fs::write(raw.join("runs.csv"), runs).unwrap();

    let out = Command::new("python3")
        .arg(repo().join("scripts/report/versus_paired.py"))
        .arg(&dir)
        .args(["--revision", "abc1234", "--command", "versus-paired.sh"])
        .args([
            "--transport",
            "tcp",
            "--settings",
            "psybench `--transport tcp`",
        ])
        .output()
        .unwrap();
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The best MPI per cell: MPICH at 8 B (0.80, faster in every pair), MPICH at 1 KiB (1.20).
    assert!(
        readme.contains("| all-reduce | **0.80** (MPICH 5, 100%) | 1.20 (MPICH 5, 0%) |"),
        "{readme}"
    );
    // Open MPI's cells: medians of each side and of the ratios, the middle half, the wins, and
    // the C benchmark's 2.0 µs against psybench's median and fastest 2.0 µs of Open MPI.
    assert!(
        readme.contains("| all-reduce | 8 B | 3 | 2 | 2 | 1.50 (1.00–1.75) | 33% | 1.00 / 1.00 |"),
        "{readme}"
    );
    // MPICH's 8 B: the C benchmark's 3.2 µs against psybench's median 1.6 and fastest 0.8 µs.
    assert!(
        readme
            .contains("| all-reduce | 8 B | 3 | 2 | 1.6 | 0.80 (0.80–0.80) | 100% | 2.00 / 4.00 |"),
        "{readme}"
    );
    assert!(
        readme.contains("- job 1 allreduce impi paired: exit 124"),
        "{readme}"
    );
    // The transport in the title, and each program's settings as the runner passed them.
    assert!(readme.contains("2 ranks over loopback TCP"), "{readme}");
    assert!(
        readme.contains(
            "as its users ask for it (`scripts/bench/every-mpi.sh`): psybench `--transport tcp`."
        ),
        "{readme}"
    );
}
