//! Every collective × op × type against the oracle, ranks as threads, over real TCP, over real
//! shared memory, and over a mix of both (two fake hosts).

use crate::common;

use common::Wiring;
use psyne::conformance;
use psyne::tuning::Tuning;
use psyne::Communicator;
use std::time::Duration;

fn check_world(size: usize, wiring: Wiring) {
    check_world_tuned(size, wiring, Tuning::default());
}

fn check_world_tuned(size: usize, wiring: Wiring, tuning: Tuning) {
    let results = common::with_tuning(size, wiring, Duration::from_secs(60), tuning, move |g| {
        conformance::check_all_types(&g, &conformance::default_counts(g.size()), 3)
    });
    for (rank, r) in results.into_iter().enumerate() {
        let bad = r.unwrap_or_else(|e| panic!("{wiring:?} rank {rank}: {e}"));
        assert!(
            bad.is_empty(),
            "{wiring:?} rank {rank}: {} wrong results, first: {}",
            bad.len(),
            bad[0]
        );
    }
}

#[test]
fn tcp_worlds_1_to_5() {
    for size in 1..=5 {
        check_world(size, Wiring::Tcp);
    }
}

#[test]
fn shm_worlds_2_to_5() {
    for size in 2..=5 {
        check_world(size, Wiring::Shm);
    }
}

#[test]
fn small_calls_on_one_host_run_on_the_node_board() {
    use psyne::{Algo, Collective};
    let colls = [
        Collective::AllReduce,
        Collective::Broadcast { root: 1 },
        Collective::Reduce { root: 2 },
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Scatter { root: 0 },
        Collective::Gather { root: 1 },
        Collective::AllToAll,
        Collective::Barrier,
    ];
    // Three ranks' slots hold 8 KiB each, which all-reduce and broadcast use whole, the others
    // 4 KiB of (`psyne::tuning::flat_max_bytes`), with or without data areas.
    let board = psyne::tuning::board_largest_part(3, true);
    assert_eq!(psyne::tuning::flat_max_bytes(colls[0], 3, board), 8 << 10);
    for wiring in [Wiring::Shm, Wiring::Tcp] {
        let algos = common::with_wiring(3, wiring, Duration::from_secs(60), move |g| {
            colls.map(|c| {
                let slot = psyne::tuning::flat_max_bytes(c, 3, board);
                (
                    g.algorithm_for(c, 64).unwrap(),
                    g.algorithm_for(c, slot).unwrap(),
                    g.algorithm_for(c, slot + 4).unwrap(),
                )
            })
        });
        for (c, (small, full, large)) in colls.iter().zip(&algos[0]) {
            let slot = psyne::tuning::flat_max_bytes(*c, 3, board);
            let on_board = wiring == Wiring::Shm;
            assert_eq!(*small == Algo::Flat, on_board, "{wiring:?} {c}");
            if *c != Collective::Barrier {
                assert_eq!(*full == Algo::Flat, on_board, "{wiring:?} {c} at {slot}");
            }
            assert_ne!(*large, Algo::Flat, "{wiring:?} {c} past {slot}");
        }
    }
}

#[test]
fn mixed_worlds_of_4_and_5() {
    for size in [4, 5] {
        check_world(size, Wiring::Mixed);
    }
}

/// The rooted calls, reduce-scatter and all-to-all off the node board, with each of their
/// algorithms: where a rank only sends from the caller's input and receives into its output
/// (leaves, linear roots, both all-to-alls, the ring of 2), it runs without a work buffer; the ranks that
/// pass data on (binomial trees and rings of 5) work in one. Both against the oracle, and a
/// non-root's reduce input unchanged.
#[test]
fn rooted_calls_reduce_scatter_and_all_to_all_with_each_algorithm_over_the_links() {
    for (algo, all_to_all) in [("binomial", "pairwise"), ("linear", "linear")] {
        let policy = format!(
            "scatter:{algo},gather:{algo},reduce:binomial,reducescatter:ring,alltoall:{all_to_all}"
        );
        let tuning = Tuning::parse(&policy).expect("a valid PSY_ALGO");
        for (size, wiring) in [(2, Wiring::Shm), (5, Wiring::Shm), (5, Wiring::Tcp)] {
            check_world_tuned(size, wiring, tuning.clone());
        }
    }
}

/// Reductions of messages far longer than the receive window (512 KiB of scratch per receive,
/// reused round and round), with every all-reduce algorithm: recursive doubling sends the very
/// bytes it reduces into, so its reduction must wait for its send while the window is full.
/// Element sizes 1, 2 and 8 against the oracle, over shared memory and TCP.
#[test]
fn reductions_longer_than_the_receive_window_with_every_algorithm() {
    use psyne::DType;
    for algo in ["ring", "recursive_doubling", "rabenseifner", "binomial"] {
        let tuning = Tuning::parse(&format!("allreduce:{algo}")).expect("a valid PSY_ALGO");
        for (size, wiring) in [(2, Wiring::Shm), (3, Wiring::Tcp)] {
            let results = common::with_tuning(
                size,
                wiring,
                Duration::from_secs(120),
                tuning.clone(),
                |g| {
                    let dtypes = [DType::F64, DType::F16, DType::U8];
                    conformance::check_types(&g, &dtypes, &[], &[300_001], 5)
                },
            );
            for (rank, r) in results.into_iter().enumerate() {
                let bad = r.unwrap_or_else(|e| panic!("{algo} {wiring:?} rank {rank}: {e}"));
                assert!(bad.is_empty(), "{algo} {wiring:?} rank {rank}: {}", bad[0]);
            }
        }
    }
}

/// Checks `dtypes` at `counts` `rounds` times (seeds 0..rounds) on 2 and 3 ranks over shared
/// memory, `crossing` setting how the ring writes store (`name` says which, in failures).
fn check_crossing(
    name: &str,
    crossing: fn(&mut psyne::GroupOptions),
    dtypes: &'static [psyne::DType],
    counts: &'static [usize],
    rounds: u64,
) {
    for size in [2, 3] {
        let results = common::try_with_options(
            size,
            Wiring::Shm,
            Duration::from_secs(120),
            Tuning::default(),
            crossing,
            move |g| {
                let g = g?;
                let mut bad = Vec::new();
                for seed in 0..rounds {
                    bad.extend(conformance::check_types(&g, dtypes, &[], counts, seed)?);
                }
                Ok::<_, psyne::Error>(bad)
            },
        );
        for (rank, r) in results.into_iter().enumerate() {
            let bad = r.unwrap_or_else(|e| panic!("{name}, {size} ranks, rank {rank}: {e}"));
            assert!(
                bad.is_empty(),
                "{name}, {size} ranks, rank {rank}: {}",
                bad[0]
            );
        }
    }
}

/// Every collective with every ring write past the cache (`PSY_SHM_STREAM_WRITES=on`): lengths
/// that start and end inside a cache line (odd counts of 1- and 4-byte elements), messages
/// longer than the ring, and calls of 16 KiB, which 2 ranks run on the node board with their
/// parts written past the cache too, against the oracle.
#[test]
fn every_collective_with_ring_writes_past_the_cache() {
    use psyne::{Crossing, CrossingPolicy, DType};
    fn streamed(o: &mut psyne::GroupOptions) {
        o.tunables.transport.shm_crossing = CrossingPolicy::Fixed(Crossing::Streamed);
    }
    let name = "streamed";
    check_crossing(
        name,
        streamed,
        &[DType::F32, DType::U8],
        &[1, 1001, 4096, 16_384, 40_001],
        1,
    );
    check_crossing(name, streamed, &[DType::F64], &[300_001], 1);
}

/// With the way chosen by timing (the default), an exchange (all-reduce, all-gather,
/// reduce-scatter, all-to-all) of a size runs some calls the other way (trials: rank 0 its 17th
/// and 18th, rank 1 its 20th and 21st, rank 2 its 23rd and 24th), and so does a one-way call
/// (broadcast, scatter, gather, reduce) whose reader asks its writer to in its trials: 26 rounds
/// of every collective at 80 KiB take each of them through every rank's trial and back, every
/// result against the oracle.
#[test]
fn calls_stay_right_while_the_chooser_tries_the_other_crossing() {
    fn auto(o: &mut psyne::GroupOptions) {
        o.tunables.transport.shm_crossing = psyne::CrossingPolicy::Auto;
    }
    check_crossing("auto", auto, &[psyne::DType::F32], &[20_001], 26);
}

/// The node board's exchanges of 16 KiB on 2 ranks choose their way by timing too, every rank
/// trying the other way at the same calls (the 17th and 18th of a kind, then after 32, 64, …):
/// 40 rounds of every collective, every result against the oracle.
#[test]
fn board_calls_stay_right_while_the_ranks_try_the_other_crossing() {
    fn auto(o: &mut psyne::GroupOptions) {
        o.tunables.transport.shm_crossing = psyne::CrossingPolicy::Auto;
    }
    check_crossing("board auto", auto, &[psyne::DType::F32], &[4096], 40);
}
