//! The two-level all-reduce for many ranks on one host (`schedule::build_domains`), run by the
//! in-memory simulator on every regular layout of up to 5 domains of up to 5 ranks (in blocks
//! and interleaved), against the sequential oracle with every reduction op; counts 0, 1, odd and
//! large. Also: ranks agree bit for bit on floats, and uneven domains are refused.

use super::values::value;
use psyne::oracle;
use psyne::schedule::simulate::run_domains_all_reduce;
use psyne::schedule::{build_domains, Hosts};
use psyne::ReduceOp;

/// `d` domains of `m` ranks: in blocks (as psyrun binds ranks to cores) and round robin.
fn layouts() -> Vec<Hosts> {
    let mut all = Vec::new();
    for d in 1..=5usize {
        for m in 1..=5usize {
            all.push(Hosts::blocks(&vec![m; d]));
            let round_robin: Vec<usize> = (0..d * m).map(|r| r % d).collect();
            all.push(Hosts::from_keys(&round_robin));
        }
    }
    all
}

#[test]
fn all_reduce_matches_the_oracle_on_every_regular_layout_and_op() {
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];
    for domains in layouts() {
        let size = domains.size();
        for count in [0, 1, size + 2, 2 * size + 1, 517] {
            for op in ops {
                let inputs: Vec<Vec<i64>> = (0..size)
                    .map(|r| (0..count).map(|i| value(r, i, op)).collect())
                    .collect();
                let case = format!("{domains:?}, count {count}, op {op}");
                let got = run_domains_all_reduce(&domains, count, op, &inputs)
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                let want = oracle::all_reduce(&inputs, op);
                for (rank, g) in got.iter().enumerate() {
                    assert_eq!(g, &want, "{case}: rank {rank}");
                }
            }
        }
    }
}

#[test]
fn every_rank_gets_the_same_float_bits() {
    let domains = Hosts::blocks(&[4, 4, 4]);
    let inputs: Vec<Vec<f32>> = (0..12)
        .map(|r| {
            (0..101)
                .map(|i| 1.0 / (1.0 + (r * 31 + i) as f32))
                .collect()
        })
        .collect();
    let got = run_domains_all_reduce(&domains, 101, ReduceOp::Sum, &inputs).expect("runs");
    for g in &got[1..] {
        let same = g
            .iter()
            .zip(&got[0])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "ranks disagree");
    }
    let want = oracle::all_reduce(&inputs, ReduceOp::Sum);
    for (a, b) in got[0].iter().zip(&want) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
    }
}

#[test]
fn uneven_domains_are_refused_with_the_reason() {
    let err = build_domains(&Hosts::blocks(&[3, 2]), 0, 10).expect_err("uneven");
    assert!(err.to_string().contains("same number of ranks"), "{err}");
}
