//! Hierarchical all-reduce, broadcast and all-gather on live groups spread over fake hosts
//! (shared memory inside each, TCP between): every collective × op × type against the oracle with
//! the hierarchical algorithms forced, uneven and interleaved hosts, large counts, the automatic
//! rule, single-host and one-rank-per-host groups (flat), subgroups running concurrently with the
//! parent, and mismatched calls failing every rank.

use crate::common;

use common::Wiring;
use psyne::tuning::Tuning;
use psyne::Communicator;
use psyne::{conformance, oracle, Algo, Collective, ErrorKind, Group, ReduceOp, Result};
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// `PSY_ALGO` forcing every hierarchical collective.
fn hier_everywhere() -> Tuning {
    Tuning::parse("allreduce:hier,broadcast:hier,allgather:hier").expect("a valid PSY_ALGO")
}

/// Runs the whole conformance check (every collective, op and type, blocking and not) with the
/// hierarchical algorithms forced.
fn check_world(size: usize, wiring: Wiring) {
    check_world_with(size, wiring, hier_everywhere());
}

/// The conformance check with `tuning`'s algorithms forced.
fn check_world_with(size: usize, wiring: Wiring, tuning: Tuning) {
    let results = common::with_tuning(size, wiring, T, tuning, |g| {
        conformance::check_all_types(&g, &conformance::default_counts(g.size()), 5)
    });
    for (rank, r) in results.into_iter().enumerate() {
        let bad = r.unwrap_or_else(|e| panic!("{wiring:?} size {size} rank {rank}: {e}"));
        assert!(
            bad.is_empty(),
            "{wiring:?} size {size} rank {rank}: {} wrong results, first: {}",
            bad.len(),
            bad[0]
        );
    }
}

#[test]
fn two_hosts_of_1_to_9_ranks_match_the_oracle() {
    for size in 1..=9 {
        check_world(size, Wiring::Mixed);
    }
}

/// The two-level all-reduce (`two_level`, levels = hosts here): regular layouts, interleaved
/// hosts, one host and one rank per host run it; hosts of unequal sizes fall back to the ring.
#[test]
fn the_two_level_all_reduce_matches_the_oracle_on_fake_hosts() {
    let two_level = || Tuning::parse("allreduce:two_level").expect("a valid PSY_ALGO");
    for wiring in [
        Wiring::Hosts(&[2, 2]),
        Wiring::Hosts(&[3, 3]),
        Wiring::Hosts(&[2, 2, 2]),
        Wiring::HostOf(&[0, 1, 0, 1]),
        Wiring::Shm,
        Wiring::Hosts(&[1, 1, 1]),
        Wiring::Hosts(&[3, 1, 2]),
    ] {
        let size = match wiring {
            Wiring::Hosts(h) => h.iter().sum(),
            Wiring::HostOf(h) => h.len(),
            _ => 4,
        };
        check_world_with(size, wiring, two_level());
    }
    let algos = common::with_tuning(4, Wiring::Hosts(&[2, 2]), T, two_level(), |g| {
        g.algorithm_for(Collective::AllReduce, 1 << 20)
    });
    for a in algos {
        assert_eq!(a.expect("an algorithm"), Algo::TwoLevel);
    }
}

#[test]
fn uneven_and_interleaved_hosts_match_the_oracle() {
    check_world(6, Wiring::Hosts(&[3, 1, 2]));
    check_world(5, Wiring::Hosts(&[1, 4]));
    check_world(7, Wiring::HostOf(&[0, 1, 0, 2, 1, 0, 2]));
}

#[test]
fn single_host_and_one_rank_per_host_run_flat_and_match_the_oracle() {
    check_world(4, Wiring::Shm);
    check_world(3, Wiring::Hosts(&[1, 1, 1]));
    let algos = common::with_wiring(3, Wiring::Shm, T, |g| {
        let h = g.with_algo(Algo::Hier);
        (
            h.algorithm_for(Collective::AllReduce, 64).unwrap(),
            h.algorithm_for(Collective::AllReduce, 64 << 20).unwrap(),
            h.algorithm_for(Collective::Broadcast { root: 0 }, 64 << 20)
                .unwrap(),
        )
    });
    // One host: the node board for small all-reduces, the flat algorithms by size otherwise.
    assert_eq!(algos[0], (Algo::Flat, Algo::Ring, Algo::Pipeline));
}

/// Every rank's result of a large hierarchical all-reduce, broadcast and all-gather, checked
/// against the oracle.
fn large(g: Group, n: usize) -> Result<()> {
    let (rank, size) = (g.rank(), g.size());
    let h = g.with_algo(Algo::Hier);
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg] {
        let all: Vec<Vec<f32>> = (0..size)
            .map(|r| conformance::input(r, n, 9, Some(op)))
            .collect();
        let mut buf = all[rank].clone();
        h.all_reduce(&mut buf, op)?;
        assert!(buf == oracle::all_reduce(&all, op), "all_reduce {op}");
    }
    let plain: Vec<Vec<u16>> = (0..size)
        .map(|r| conformance::input(r, n, 9, None))
        .collect();
    let root = size - 1;
    let mut buf = if rank == root {
        plain[root].clone()
    } else {
        vec![0; n]
    };
    h.broadcast(&mut buf, root)?;
    assert!(buf == plain[root], "broadcast");
    let got = h.all_gather(&plain[rank][..n / 3])?;
    let thirds: Vec<Vec<u16>> = plain.iter().map(|p| p[..n / 3].to_vec()).collect();
    assert!(got == oracle::all_gather(&thirds), "all_gather");
    Ok(())
}

#[test]
fn large_odd_counts_match_the_oracle() {
    for (size, wiring) in [
        (4, Wiring::Mixed),
        (5, Wiring::Hosts(&[2, 1, 2])),
        (6, Wiring::HostOf(&[0, 1, 0, 1, 2, 2])),
    ] {
        let results = common::with_wiring(size, wiring, T, |g| large(g, (1 << 20) + 3));
        for (rank, r) in results.into_iter().enumerate() {
            r.unwrap_or_else(|e| panic!("{wiring:?} rank {rank}: {e}"));
        }
    }
}

#[test]
fn the_automatic_rule_picks_hier_where_it_was_measured_faster() {
    let at = |wiring: Wiring, size: usize, tuning: Tuning, coll: Collective, bytes: usize| {
        common::with_tuning(size, wiring, T, tuning, move |g| {
            g.algorithm_for(coll, bytes).unwrap()
        })
    };
    let (ar, ag, bc) = (
        Collective::AllReduce,
        Collective::AllGather,
        Collective::Broadcast { root: 0 },
    );
    let hier = |algos: Vec<Algo>| algos.iter().all(|&a| a == Algo::Hier);
    let flat = |algos: Vec<Algo>| algos.iter().all(|&a| a != Algo::Hier);
    let d = Tuning::default;
    // The defaults: all-gather on interleaved hosts; nothing else.
    let dealt = Wiring::HostOf(&[0, 1, 0, 1]);
    assert!(hier(at(dealt, 4, d(), ag, 8)));
    assert!(hier(at(dealt, 4, d(), ag, 4 << 20)));
    assert!(flat(at(dealt, 4, d(), ar, 1 << 20)));
    assert!(flat(at(dealt, 4, d(), bc, 1 << 20)));
    assert!(flat(at(Wiring::Mixed, 4, d(), ag, 1024)));
    assert!(flat(at(Wiring::Hosts(&[3, 1, 2]), 6, d(), ar, 64 << 20)));
    // Thresholds tuned for a cluster switch all-reduce by size, on every rank alike.
    let mut tuned = Tuning::default();
    tuned.thresholds.allreduce_hier_min = 64 << 10;
    assert!(hier(at(Wiring::Mixed, 4, tuned.clone(), ar, 64 << 10)));
    assert!(hier(at(
        Wiring::Hosts(&[3, 1, 2]),
        6,
        tuned.clone(),
        ar,
        64 << 10
    )));
    assert!(flat(at(
        Wiring::Mixed,
        4,
        tuned.clone(),
        ar,
        (64 << 10) - 4
    )));
    // One host, one rank per host, or no shared memory: nothing to gain, even when tuned.
    for (wiring, size) in [
        (Wiring::Shm, 4),
        (Wiring::Tcp, 4),
        (Wiring::Hosts(&[1, 1, 1]), 3),
    ] {
        assert!(
            at(wiring, size, tuned.clone(), ar, 64 << 20)
                .iter()
                .all(|&a| a == Algo::Ring),
            "{wiring:?}"
        );
    }
    // PSY_ALGO forcing a flat algorithm wins over the rule.
    let mut forced = Tuning::parse("allgather:ring").unwrap();
    forced.thresholds = tuned.thresholds;
    assert!(at(dealt, 4, forced, ag, 8).iter().all(|&a| a == Algo::Ring));
}

#[test]
fn subgroups_run_hierarchical_collectives_concurrently_with_the_parent() {
    // 8 ranks on 2 hosts; the even and the odd ranks each form a subgroup of 2 hosts × 2.
    let results = common::with_wiring(8, Wiring::Mixed, T, |g| -> Result<(f64, f64)> {
        let half = g
            .split(Some((g.rank() % 2) as u32), g.rank() as i64)?
            .expect("every rank joins");
        let v = (g.rank() + 1) as f64;
        std::thread::scope(|s| {
            let sub = s.spawn(|| {
                let h = half.with_algo(Algo::Hier);
                let mut b = vec![0.0; 30_001];
                for _ in 0..10 {
                    b.fill(v);
                    h.all_reduce(&mut b, ReduceOp::Sum)?;
                    let mut c = vec![v; 7];
                    h.broadcast(&mut c, 3)?;
                    // The subgroup's rank 3 is rank 6 (value 7) or rank 7 (value 8).
                    let root_value = (7 + g.rank() % 2) as f64;
                    assert!(c.iter().all(|&x| x == root_value), "subgroup broadcast");
                }
                Ok::<_, psyne::Error>(b[30_000])
            });
            let h = g.with_algo(Algo::Hier);
            let mut p = vec![0.0; 10_007];
            for _ in 0..10 {
                p.fill(v);
                let w = h.all_reduce_async(p.clone(), ReduceOp::Sum);
                h.all_reduce(&mut p, ReduceOp::Sum)?;
                assert!(w.wait()? == p, "async and blocking results differ");
            }
            Ok((sub.join().expect("subgroup thread")?, p[10_006]))
        })
    });
    for (rank, r) in results.into_iter().enumerate() {
        let (sub, parent) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        // Odd ranks hold 2, 4, 6, 8; even ones 1, 3, 5, 7.
        let want_sub = if rank % 2 == 1 { 20.0 } else { 16.0 };
        assert_eq!((sub, parent), (want_sub, 36.0), "rank {rank}");
    }
}

#[test]
fn a_different_count_fails_every_rank_with_a_mismatch() {
    // The odd rank on each side: a non-leader, a leader, the lone rank of a host.
    for (size, wiring, odd) in [
        (4, Wiring::Mixed, 3),
        (4, Wiring::Mixed, 2),
        (5, Wiring::Hosts(&[2, 1, 2]), 2),
    ] {
        let results = common::with_wiring(size, wiring, Duration::from_secs(20), move |g| {
            let n = if g.rank() == odd { 10 } else { 20 };
            let mut buf = vec![1.0f32; n];
            g.with_algo(Algo::Hier).all_reduce(&mut buf, ReduceOp::Sum)
        });
        for (rank, r) in results.iter().enumerate() {
            let e = r.as_ref().expect_err("a mismatched all_reduce must fail");
            assert!(
                matches!(e.kind(), ErrorKind::Mismatch | ErrorKind::PeerLost),
                "{wiring:?} odd {odd}: rank {rank}: {e}"
            );
        }
        assert!(
            results
                .iter()
                .any(|r| r.as_ref().unwrap_err().message().contains("count 10")),
            "{wiring:?} odd {odd}: some error should name the odd count"
        );
    }
}

#[test]
fn different_hierarchical_collectives_fail_every_rank() {
    let results = common::with_wiring(4, Wiring::Mixed, Duration::from_secs(20), |g| {
        let h = g.with_algo(Algo::Hier);
        let mut buf = vec![1u32; 8];
        if g.rank() == 1 {
            // A non-leader: it sends its chunk to its leader first, which expects a reduction.
            h.all_gather(&buf[..2]).map(|_| ())
        } else {
            h.all_reduce(&mut buf, ReduceOp::Sum)
        }
    });
    for (rank, r) in results.iter().enumerate() {
        let e = r.as_ref().expect_err("a mismatched call must fail");
        assert!(
            matches!(e.kind(), ErrorKind::Mismatch | ErrorKind::PeerLost),
            "rank {rank}: {e}"
        );
    }
    assert!(results.iter().any(|r| {
        let m = r.as_ref().unwrap_err().message();
        m.contains("all_gather") && m.contains("all_reduce")
    }));
}
