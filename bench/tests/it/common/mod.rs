//! Synthetic reports shared by the tests.
#![allow(dead_code)]

use psybench::factors::bus_factor;
use psybench::model::{BenchColl, Record, Report, RunMeta};
use std::path::PathBuf;

/// A fresh, empty directory for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("psybench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A record of `coll` on `ranks` ranks whose time is alpha + bytes / beta.
pub fn record(
    coll: BenchColl,
    backend: &str,
    algo: &str,
    ranks: usize,
    bytes: u64,
    alpha_us: f64,
    beta_gbps: f64,
) -> Record {
    let t = alpha_us + bytes as f64 / (beta_gbps * 1e3);
    let algbw = bytes as f64 / (t * 1e3);
    Record {
        collective: coll.name().into(),
        backend: backend.into(),
        algo: algo.into(),
        transport: "tcp".into(),
        dtype: "f32".into(),
        op: if coll.reduces() {
            "sum".into()
        } else {
            "-".into()
        },
        root: None,
        ranks,
        bytes,
        count: bytes / 4,
        iters: 20,
        warmup: 2,
        in_place: false,
        cadence: "stream".into(),
        time_us_min: t * 0.9,
        time_us_avg: t * 0.95,
        time_us_max: t,
        time_over_ranks: "max".into(),
        algbw_gbps: algbw,
        busbw_gbps: algbw * bus_factor(coll, ranks),
        wrong: Some(0),
    }
}

/// Run metadata for tests.
pub fn meta(world: usize) -> RunMeta {
    RunMeta {
        command: "psybench -n 2 allreduce --sizes 8:256M --backend native,mpi".into(),
        git_revision: Some("abc1234-dirty".into()),
        hosts: vec!["node-a".into()],
        cores: 2,
        cpu_model: "AMD EPYC 7B13 64-Core Processor".into(),
        world_size: world,
        transport: "tcp".into(),
        algos: vec!["ring".into(), "rd".into()],
        backends: vec!["native".into(), "mpi".into()],
        psyne_version: "0.1.0".into(),
        date: "2025-11-21T06:50:00Z".into(),
        load_average: Some(0.42),
        peak_gbps: Some(12.0),
        tuning_file: None,
        unbound_ranks: None,
    }
}

/// An all-reduce sweep 8..256M on 2 ranks: native ring, native recursive doubling, and MPI.
pub fn allreduce_report() -> Report {
    let mut records = Vec::new();
    let mut b = 8u64;
    while b <= 256 << 20 {
        records.push(record(
            BenchColl::AllReduce,
            "native",
            "ring",
            2,
            b,
            40.0,
            4.0,
        ));
        records.push(record(
            BenchColl::AllReduce,
            "native",
            "recursive_doubling",
            2,
            b,
            25.0,
            2.5,
        ));
        records.push(record(BenchColl::AllReduce, "mpi", "-", 2, b, 8.0, 6.0));
        b *= 2;
    }
    let fits = psybench::fit::fit_report(&records, Some(12.0));
    Report {
        meta: meta(2),
        records,
        fits,
    }
}
