//! Canonical reduction order (`ReduceOrder::Canonical`, `PSY_REDUCE_ORDER=canonical`): on 3, 4,
//! 5 and 8 ranks (threads), over shared memory, TCP and fake hosts (the hierarchical paths), for
//! f32, f64, f16 and bf16 with sum, prod and avg, all-reduce, reduce and reduce-scatter give
//! every rank the bits of the rank-order oracle, with the automatic choice and with every
//! algorithm that serves each collective forced, at counts either side of every switch (the node
//! board's slot, gathering whole buffers or the all-to-all) and uneven ones. Inputs round, and
//! fast order is shown to differ on them, so the checks have teeth.

use crate::common;

use common::Wiring;
use psyne::conformance::canonical::{
    check_collective, reducing_collectives, rounding_input, ORDERED_OPS,
};
use psyne::conformance::Mismatch;
use psyne::{bf16, f16, oracle, Algo, Collective, Communicator, Element, Group, ReduceOp};
use psyne::{ReduceOrder, Tunables};
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// Counts for `size` ranks: 1, uneven small ones, either side of 4 KiB of f32 and of the largest
/// f32 all-reduce the node board takes (the board, or the staging buffers in shared memory), and
/// either side of where canonical all-reduce stops gathering whole f32 buffers (TCP).
fn counts(size: usize) -> Vec<usize> {
    let edge = psyne::CANONICAL_GATHER_MAX / (4 * size);
    let board = psyne::tuning::board_largest_part(size, true);
    let slot = psyne::tuning::flat_max_bytes(psyne::Collective::AllReduce, size, board) / 4;
    let mut c = vec![
        1,
        size - 1,
        size + 1,
        1024,
        1025,
        slot,
        slot + 1,
        edge,
        edge + 1,
    ];
    c.sort_unstable();
    c.dedup();
    c
}

/// Every forced choice for `coll` (the automatic one first).
fn choices(coll: Collective) -> Vec<Option<Algo>> {
    std::iter::once(None)
        .chain(Algo::for_collective(coll).iter().copied().map(Some))
        .collect()
}

fn check_type<E: Element>(g: &Group, counts: &[usize], bad: &mut Vec<Mismatch>) {
    for (ci, &n) in counts.iter().enumerate() {
        for coll in reducing_collectives(g.size(), ci) {
            for algo in choices(coll) {
                let view = match algo {
                    Some(a) => g.with_algo(a),
                    None => g.clone(),
                };
                for op in ORDERED_OPS {
                    let seed = 7 + ci as u64;
                    check_collective::<E, Group>(&view, coll, n, op, seed, bad)
                        .unwrap_or_else(|e| panic!("{coll} {algo:?} {op} count {n}: {e}"));
                }
            }
        }
    }
}

/// The whole matrix on `size` ranks wired as `wiring`; panics with the first differences.
fn matrix(size: usize, wiring: Wiring) {
    let results = common::with_wiring(size, wiring, T, move |g| {
        let g = g.with_reduce_order(ReduceOrder::Canonical);
        let c = counts(size);
        let mut bad = Vec::new();
        check_type::<f32>(&g, &c, &mut bad);
        check_type::<f64>(&g, &c, &mut bad);
        check_type::<f16>(&g, &c, &mut bad);
        check_type::<bf16>(&g, &c, &mut bad);
        bad
    });
    let bad: Vec<String> = results.iter().flatten().map(|m| m.to_string()).collect();
    assert!(
        bad.is_empty(),
        "{size} ranks over {wiring:?}: {} differences, first: {:#?}",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
}

#[test]
fn three_ranks_over_shm_and_tcp_match_the_oracle_bit_for_bit() {
    matrix(3, Wiring::Shm);
    matrix(3, Wiring::Tcp);
}

#[test]
fn four_ranks_over_shm_and_tcp_match_the_oracle_bit_for_bit() {
    matrix(4, Wiring::Shm);
    matrix(4, Wiring::Tcp);
}

#[test]
fn five_ranks_over_shm_tcp_and_two_hosts_match_the_oracle_bit_for_bit() {
    matrix(5, Wiring::Shm);
    matrix(5, Wiring::Tcp);
    matrix(5, Wiring::Hosts(&[2, 3]));
}

#[test]
fn eight_ranks_over_shm_tcp_and_two_hosts_match_the_oracle_bit_for_bit() {
    matrix(8, Wiring::Shm);
    matrix(8, Wiring::Tcp);
    matrix(8, Wiring::Mixed);
}

/// One large, uneven count per collective (the all-to-all and all-gather in several windows of
/// the step engine), f32 and bf16 sum, 4 ranks over shared memory and 3 over TCP.
#[test]
fn large_uneven_counts_match_the_oracle_bit_for_bit() {
    for (size, wiring) in [(4, Wiring::Shm), (3, Wiring::Tcp)] {
        let results = common::with_wiring(size, wiring, T, move |g| {
            let g = g.with_reduce_order(ReduceOrder::Canonical);
            let mut bad = Vec::new();
            for coll in reducing_collectives(size, 1) {
                let n = 300_007;
                check_collective::<f32, Group>(&g, coll, n, ReduceOp::Sum, 3, &mut bad)
                    .expect("f32");
                check_collective::<bf16, Group>(&g, coll, n, ReduceOp::Avg, 4, &mut bad)
                    .expect("bf16");
            }
            bad
        });
        let bad: Vec<String> = results.iter().flatten().map(|m| m.to_string()).collect();
        assert!(bad.is_empty(), "{size} ranks {wiring:?}: {bad:#?}");
    }
}

/// The Done-when's largest size, 16 M elements (and one) of f32 on 3 ranks: about 1 GiB of memory
/// and 12 s in a debug build, so run by hand
/// (`cargo test -p psyne --test it -- canonical::sixteen --ignored`).
#[test]
#[ignore]
fn sixteen_million_elements_match_the_oracle_bit_for_bit() {
    let results = common::with_wiring(3, Wiring::Shm, T, move |g| {
        let g = g.with_reduce_order(ReduceOrder::Canonical);
        let mut bad = Vec::new();
        for coll in reducing_collectives(3, 2) {
            check_collective::<f32, Group>(&g, coll, (16 << 20) + 1, ReduceOp::Sum, 5, &mut bad)
                .expect("f32");
        }
        bad
    });
    let bad: Vec<String> = results.iter().flatten().map(|m| m.to_string()).collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The inputs are order-sensitive: fast order's ring all-reduce on 4 ranks gives other bits
/// than the rank-order oracle somewhere, which canonical order then corrects.
#[test]
fn fast_order_differs_on_these_inputs_and_canonical_does_not() {
    let n = 4001;
    let results = common::with_wiring(4, Wiring::Tcp, T, move |g| {
        let input: Vec<f32> = rounding_input(g.rank(), n, 11, ReduceOp::Sum);
        let mut fast = input.clone();
        g.with_algo(Algo::Ring)
            .all_reduce(&mut fast, ReduceOp::Sum)
            .expect("fast");
        let mut canon = input;
        g.with_algo(Algo::Ring)
            .with_reduce_order(ReduceOrder::Canonical)
            .all_reduce(&mut canon, ReduceOp::Sum)
            .expect("canonical");
        (fast, canon)
    });
    let all: Vec<Vec<f32>> = (0..4)
        .map(|r| rounding_input(r, n, 11, ReduceOp::Sum))
        .collect();
    let want = oracle::all_reduce(&all, ReduceOp::Sum);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (rank, (fast, canon)) in results.iter().enumerate() {
        assert_ne!(
            bits(fast),
            bits(&want),
            "rank {rank}: fast order had no rounding to show"
        );
        assert_eq!(bits(canon), bits(&want), "rank {rank}");
    }
}

/// `PSY_REDUCE_ORDER` reaches a group's options; a view's choice overrides the group's.
#[test]
fn the_order_comes_from_the_environment_and_views_override_it() {
    let get = |name: &str| (name == "PSY_REDUCE_ORDER").then(|| "canonical".to_string());
    let t = Tunables::from_lookup(&get).expect("canonical parses");
    assert_eq!(t.reduce_order, ReduceOrder::Canonical);
    let bad = |name: &str| (name == "PSY_REDUCE_ORDER").then(|| "exact".to_string());
    let err = Tunables::from_lookup(&bad).expect_err("exact is not an order");
    assert!(err.message().contains("canonical"), "{err}");
    let g = Group::alone();
    assert_eq!(g.reduce_order(), ReduceOrder::Fast);
    let c = g.with_reduce_order(ReduceOrder::Canonical);
    assert_eq!(c.reduce_order(), ReduceOrder::Canonical);
    assert_eq!(
        c.with_algo(Algo::Ring).reduce_order(),
        ReduceOrder::Canonical
    );
}

/// The all-reduce of shared buffers folds in rank order too (4 ranks, every chunk's owner
/// different from rank 0), at a size above `MIN_SHARED_BYTES` and over several of its blocks.
#[test]
fn shared_buffers_fold_in_rank_order() {
    let n = 3 * (psyne::MIN_SHARED_BYTES / 4) * 7 + 5;
    let results = common::with_wiring(4, Wiring::Shm, T, move |g| {
        let g = g.with_reduce_order(ReduceOrder::Canonical);
        let mut buf = g.alloc_shared::<f32>(n).expect("alloc_shared");
        assert!(buf.is_shared(), "threads on one host share memory");
        let mut bad = Vec::new();
        for op in ORDERED_OPS {
            let input: Vec<f32> = rounding_input(g.rank(), n, 21, op);
            buf.copy_from_slice(&input);
            g.all_reduce_shared(&mut buf, op)
                .expect("all_reduce_shared");
            let all: Vec<Vec<f32>> = (0..4).map(|r| rounding_input(r, n, 21, op)).collect();
            let want = oracle::all_reduce(&all, op);
            if let Some(i) = (0..n).find(|&i| buf[i].to_bits() != want[i].to_bits()) {
                bad.push(format!("{op} element {i}: {} vs {}", buf[i], want[i]));
            }
        }
        bad
    });
    let bad: Vec<&String> = results.iter().flatten().collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Which canonical path an f32 sum all-reduce takes on 4 ranks: past the node board's slot, the
/// group's staging buffers in shared memory over shm (and they grow, and serve fewer elements
/// again, call after call); gathering and the all-to-all over TCP. Every result is the oracle's.
#[test]
fn large_all_reduces_run_through_shared_staging_over_shm_and_an_all_to_all_over_tcp() {
    use psyne::{CanonicalPath, DType};
    for (wiring, small, large) in [
        (Wiring::Shm, CanonicalPath::Shared, CanonicalPath::Shared),
        (Wiring::Tcp, CanonicalPath::Gather, CanonicalPath::AllToAll),
    ] {
        let results = common::with_wiring(4, wiring, T, move |g| {
            let g = g.with_reduce_order(ReduceOrder::Canonical);
            let path = |bytes| {
                g.canonical_path(Collective::AllReduce, DType::F32, ReduceOp::Sum, bytes)
                    .expect("path")
            };
            // Four ranks' slots hold 8 KiB.
            assert_eq!(path(12 << 10), Some(small), "{wiring:?} at 12 KiB");
            assert_eq!(path(1 << 20), Some(large), "{wiring:?} at 1 MiB");
            let mut bad = Vec::new();
            for n in [1025, 300_007, 1 << 18, 70_001, 2048] {
                check_collective::<f32, Group>(
                    &g,
                    Collective::AllReduce,
                    n,
                    ReduceOp::Sum,
                    9,
                    &mut bad,
                )
                .expect("f32");
            }
            bad
        });
        let bad: Vec<String> = results.iter().flatten().map(|m| m.to_string()).collect();
        assert!(bad.is_empty(), "{wiring:?}: {bad:#?}");
    }
}
