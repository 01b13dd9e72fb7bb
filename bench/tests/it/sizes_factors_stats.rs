//! Size parsing and its errors, default iterations, bus factors, statistics.

use psybench::factors::{algos_to_run, bus_factor};
use psybench::model::{Backend, BenchColl, Cadence};
use psybench::sizes::{self, default_iters, element_count, parse_sizes, SizeSpec};
use psybench::stats::{self, median, spread, RowKey};
use psyne::{Algo, DType, ReduceOp};

#[test]
fn ranges_and_lists() {
    let v = parse_sizes("8:256M", 2.0).unwrap();
    assert_eq!(v.len(), 26);
    assert_eq!(v[0], 8);
    assert_eq!(*v.last().unwrap(), 256 << 20);
    assert_eq!(parse_sizes("1k:4k", 2.0).unwrap(), vec![1024, 2048, 4096]);
    assert_eq!(parse_sizes("8:1K", 4.0).unwrap(), vec![8, 32, 128, 512]);
    assert_eq!(
        parse_sizes("1M,8,1K,8", 2.0).unwrap(),
        vec![8, 1024, 1 << 20]
    );
    assert_eq!(parse_sizes("64K", 2.0).unwrap(), vec![65536]);
    assert_eq!(parse_sizes("0,1,8", 2.0).unwrap(), vec![0, 1, 8]);
    // A fractional factor still advances and stays ascending.
    let v = parse_sizes("1:100", 1.5).unwrap();
    assert!(v.windows(2).all(|w| w[0] < w[1]), "{v:?}");
    assert!(*v.last().unwrap() <= 100);
}

fn error_of(spec: &str, factor: f64) -> String {
    parse_sizes(spec, factor).unwrap_err().to_string()
}

#[test]
fn errors_name_the_problem_and_the_fix() {
    let e = error_of("8:", 2.0);
    assert!(
        e.contains("both ends") && e.contains("--sizes 8:256M"),
        "{e}"
    );
    let e = error_of("1X", 2.0);
    assert!(
        e.contains("unknown size suffix `X`") && e.contains("K, M or G"),
        "{e}"
    );
    let e = error_of("64M:8", 2.0);
    assert!(
        e.contains("backwards") && e.contains("--sizes 8:64M"),
        "{e}"
    );
    let e = error_of("8:1K", 0.0);
    assert!(
        e.contains("greater than 1") && e.contains("--factor 2"),
        "{e}"
    );
    let e = error_of("8:1K", 1.0);
    assert!(e.contains("greater than 1"), "{e}");
    let e = error_of("0:1K", 2.0);
    assert!(e.contains("cannot start at 0"), "{e}");
    let e = error_of("8,,16", 2.0);
    assert!(e.contains("empty entry"), "{e}");
    let e = error_of("K", 2.0);
    assert!(e.contains("must start with a number"), "{e}");
    let e = error_of("99999999999999999999", 2.0);
    assert!(e.contains("too large"), "{e}");
    let e = error_of("1:2:3", 2.0);
    assert!(e.contains("--factor"), "{e}");
    assert_eq!(
        sizes::parse_spec(" 8 : 1K ").unwrap(),
        SizeSpec::Range { min: 8, max: 1024 }
    );
}

#[test]
fn rounding_to_elements() {
    assert_eq!(sizes::round_up_to_elements(7, 4), 8);
    assert_eq!(sizes::round_up_to_elements(8, 4), 8);
    assert_eq!(sizes::round_sizes(&[1, 2, 3, 4, 8], DType::F32), vec![4, 8]);
    // The total operations split evenly over ranks.
    assert_eq!(
        element_count(BenchColl::AllGather, 1000, DType::F32, 3),
        (252, 1008)
    );
    assert_eq!(
        element_count(BenchColl::AllReduce, 1000, DType::F64, 3),
        (125, 1000)
    );
    assert_eq!(
        element_count(BenchColl::Barrier, 1 << 20, DType::F32, 2),
        (0, 0)
    );
}

#[test]
fn default_iterations_scale_down() {
    assert_eq!(default_iters(8), (20, 1000));
    assert_eq!(default_iters(1 << 20), (20, 1000));
    assert_eq!(default_iters(16 << 20), (6, 64));
    assert_eq!(default_iters(256 << 20), (2, 5));
    assert_eq!(default_iters(0), (20, 1000));
    let mut prev = u64::MAX;
    for s in parse_sizes("8:1G", 2.0).unwrap() {
        let (w, i) = default_iters(s);
        assert!(i <= prev && (5..=1000).contains(&i) && (2..=20).contains(&w));
        prev = i;
    }
}

#[test]
fn format_sizes() {
    assert_eq!(sizes::format_size(0), "0");
    assert_eq!(sizes::format_size(512), "512");
    assert_eq!(sizes::format_size(3 << 20), "3M");
    assert_eq!(sizes::format_size(1 << 40), "1T");
}

#[test]
fn bus_factors_are_nccl_tests() {
    let n = 4;
    assert_eq!(bus_factor(BenchColl::AllReduce, n), 1.5);
    for c in [
        BenchColl::AllGather,
        BenchColl::ReduceScatter,
        BenchColl::AllToAll,
        BenchColl::Gather,
        BenchColl::Scatter,
    ] {
        assert_eq!(bus_factor(c, n), 0.75, "{c:?}");
    }
    for c in [BenchColl::Broadcast, BenchColl::Reduce, BenchColl::SendRecv] {
        assert_eq!(bus_factor(c, n), 1.0, "{c:?}");
    }
    assert_eq!(bus_factor(BenchColl::Barrier, n), 0.0);
    assert_eq!(bus_factor(BenchColl::AllReduce, 2), 1.0);
    assert_eq!(bus_factor(BenchColl::AllReduce, 1), 0.0);
    assert_eq!(bus_factor(BenchColl::AllReduce, 0), 0.0);
}

#[test]
fn algorithms_per_collective() {
    let req = [Some(Algo::Ring), Some(Algo::Pipeline)];
    assert_eq!(
        algos_to_run(BenchColl::AllReduce, &req),
        vec![Some(Algo::Ring)]
    );
    assert_eq!(
        algos_to_run(BenchColl::Broadcast, &req),
        vec![Some(Algo::Pipeline)]
    );
    assert_eq!(algos_to_run(BenchColl::Gather, &req), vec![None]);
    assert_eq!(algos_to_run(BenchColl::AllReduce, &[None]), vec![None]);
}

#[test]
fn statistics() {
    let s = spread(&[3.0, 1.0, 2.0]).unwrap();
    assert_eq!((s.min, s.mean, s.max), (1.0, 2.0, 3.0));
    assert!(spread(&[]).is_none());
    assert!(spread(&[1.0, f64::NAN]).is_none());
    assert_eq!(median(&[5.0]), Some(5.0));
    assert_eq!(median(&[1.0, 9.0, 2.0, 8.0]), Some(5.0));
}

fn key(coll: BenchColl, ranks: usize, bytes: u64) -> RowKey {
    RowKey {
        collective: coll,
        backend: Backend::Native,
        algo: "ring".into(),
        transport: "tcp".into(),
        dtype: DType::F32,
        op: ReduceOp::Sum,
        root: 1,
        ranks,
        bytes,
        count: bytes / 4,
        iters: 10,
        warmup: 2,
        in_place: false,
        cadence: Cadence::Isolated,
        wrong: Some(0),
    }
}

#[test]
fn records_from_per_rank_times() {
    // 4 MB in 1000 µs on the slowest rank = 4 GB/s; allreduce on 4 ranks × 1.5.
    let r = stats::record(
        &key(BenchColl::AllReduce, 4, 4_000_000),
        &[800.0, 1000.0, 900.0, 900.0],
    );
    assert_eq!(r.time_us_min, 800.0);
    assert_eq!(r.time_us_avg, 900.0);
    assert_eq!(r.time_us_max, 1000.0);
    assert!((r.algbw_gbps - 4.0).abs() < 1e-12);
    assert!((r.busbw_gbps - 6.0).abs() < 1e-12);
    assert_eq!(r.op, "sum");
    assert_eq!(r.root, None);
    assert_eq!(r.cadence, "isolated");
    assert_eq!(r.collective, "allreduce");
    // Rooted, not reducing.
    let r = stats::record(&key(BenchColl::Broadcast, 2, 1_000), &[1.0, 1.0]);
    assert_eq!((r.op.as_str(), r.root), ("-", Some(1)));
    assert!((r.busbw_gbps - 1.0).abs() < 1e-12);
    // Barrier: no bandwidth, finite numbers.
    let r = stats::record(&key(BenchColl::Barrier, 2, 0), &[5.0, 6.0]);
    assert_eq!((r.algbw_gbps, r.busbw_gbps), (0.0, 0.0));
    // No times: zeros, never infinities.
    let r = stats::record(&key(BenchColl::AllReduce, 2, 8), &[]);
    assert_eq!((r.time_us_max, r.algbw_gbps), (0.0, 0.0));
}

#[test]
fn stream_and_isolated_report_the_slowest_rank_osu_the_mean() {
    let times = [800.0, 1000.0, 900.0, 900.0];
    for (cadence, over, time) in [
        (Cadence::Stream, "max", 1000.0),
        (Cadence::Isolated, "max", 1000.0),
        (Cadence::Osu, "avg", 900.0),
    ] {
        let mut k = key(BenchColl::AllReduce, 4, 4_000_000);
        k.cadence = cadence;
        let r = stats::record(&k, &times);
        assert_eq!(r.cadence, stats::cadence_name(cadence));
        assert_eq!(r.time_over_ranks, over, "{cadence:?}");
        assert_eq!(r.time_us(), time, "{cadence:?}");
        // Bandwidths follow the reported time: 4 MB / time, × 1.5 for 4-rank all-reduce.
        assert!((r.algbw_gbps - 4_000.0 / time).abs() < 1e-12, "{cadence:?}");
        assert!((r.busbw_gbps - 6_000.0 / time).abs() < 1e-12, "{cadence:?}");
        assert_eq!(stats::parse_cadence(&r.cadence), Some(cadence));
    }
}
