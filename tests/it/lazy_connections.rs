//! Pairs connected when a call first needs them (`PSY_CONNECT=lazy`): every collective against
//! the oracle over TCP, shared memory and a mix of both, with each schedule family; only the
//! pairs a call uses get connected; a mismatch found while connecting is an error, not a hang.

use crate::common;

use common::Wiring;
use psyne::tuning::Tuning;
use psyne::Communicator;
use psyne::{conformance, ConnectPolicy, ErrorKind, GroupOptions, ReduceOp};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

fn lazy(opts: &mut GroupOptions) {
    opts.tunables.transport.connect = ConnectPolicy::Lazy;
}

fn check_lazily(size: usize, wiring: Wiring, tuning: &str) {
    let policy = Tuning::parse(tuning).expect("a valid PSY_ALGO");
    // Every rank looks at its links before any rank's first call can dial it.
    let looked = common::Rendezvous::new(size);
    let results = common::try_with_options(size, wiring, T, policy, lazy, move |g| {
        let formed_with = g.as_ref().map(|g| g.connected_peers()).unwrap_or_default();
        looked.wait(T, "looking at the links after forming")?;
        let g = g?;
        assert!(formed_with.is_empty(), "a lazy group formed with links");
        conformance::check_all_types(&g, &conformance::default_counts(g.size()), 3)
    });
    for (rank, r) in results.into_iter().enumerate() {
        let bad = r.unwrap_or_else(|e| panic!("{wiring:?} {tuning:?} rank {rank}: {e}"));
        assert!(bad.is_empty(), "{wiring:?} rank {rank}: {}", bad[0]);
    }
}

#[test]
fn every_collective_matches_the_oracle_with_lazy_connections_over_tcp_shm_and_a_mix() {
    for wiring in [Wiring::Tcp, Wiring::Shm, Wiring::Mixed] {
        check_lazily(5, wiring, "");
    }
}

#[test]
fn ring_tree_doubling_pairwise_and_hierarchical_schedules_connect_lazily() {
    let trees = "broadcast:binomial,reduce:binomial,scatter:binomial,gather:binomial";
    for (wiring, tuning) in [
        (
            Wiring::Tcp,
            "allreduce:ring,allgather:ring,reducescatter:ring",
        ),
        (
            Wiring::Shm,
            "allreduce:recursive_doubling,alltoall:pairwise",
        ),
        (Wiring::Tcp, "allreduce:rabenseifner,alltoall:linear"),
        (Wiring::Shm, trees),
        (
            Wiring::Mixed,
            "allreduce:hier,broadcast:hier,allgather:hier",
        ),
    ] {
        check_lazily(6, wiring, tuning);
    }
}

#[test]
fn a_lazy_group_connects_only_the_pairs_its_calls_use() {
    let ring = Tuning::parse("allreduce:ring").expect("a valid PSY_ALGO");
    // A rank that finished a call first must not dial a peer for the next one before that peer
    // has looked at its links: every rank looks, then all meet, then the next call starts.
    let looked = common::Rendezvous::new(8);
    let peers = common::try_with_options(8, Wiring::Tcp, T, ring, lazy, move |g| {
        let formed_with = g.as_ref().map(|g| g.connected_peers()).unwrap_or_default();
        looked.wait(T, "looking at the links after forming")?;
        let g = g?;
        let mut seen = vec![formed_with];
        let mut big = vec![1.0f32; 1 << 16];
        g.all_reduce(&mut big, ReduceOp::Sum)?;
        seen.push(g.connected_peers());
        looked.wait(T, "looking at the links after the all-reduce")?;
        g.all_to_all(&vec![1.0f32; g.size()])?;
        seen.push(g.connected_peers());
        psyne::Result::Ok(seen)
    });
    for (rank, seen) in peers.into_iter().enumerate() {
        let seen = seen.unwrap_or_else(|e: psyne::Error| panic!("rank {rank}: {e}"));
        let (left, right) = ((rank + 7) % 8, (rank + 1) % 8);
        let mut ring: Vec<usize> = vec![left, right];
        ring.sort_unstable();
        assert_eq!(seen[0], Vec::<usize>::new(), "rank {rank} after forming");
        assert_eq!(seen[1], ring, "rank {rank} after a ring all-reduce");
        let others: Vec<usize> = (0..8).filter(|&p| p != rank).collect();
        assert_eq!(seen[2], others, "rank {rank} after an all-to-all");
    }
}

#[test]
fn an_eager_group_forms_with_every_pair_connected() {
    let results = common::try_with_options(
        4,
        Wiring::Shm,
        T,
        Tuning::default(),
        |o| {
            o.tunables.transport.connect = ConnectPolicy::Eager;
        },
        |g| g.map(|g| (g.rank(), g.connected_peers())),
    );
    for r in results {
        let (rank, peers) = r.expect("the group forms");
        assert_eq!(peers.len(), 3, "rank {rank}: {peers:?}");
        assert!(!peers.contains(&rank));
    }
}

#[test]
fn a_rank_waiting_for_a_peer_on_the_node_board_to_connect_hears_of_the_mismatch() {
    // Rank 2 on the board; ranks 0 and 1 in a ring. Rank 0 waits for rank 2 to dial it, which it
    // never does: rank 0 must see rank 2 on the board and fail with a mismatch.
    let errors = common::board_call_against_a_ring(2, lazy);
    let e = &errors[0];
    assert_eq!(e.kind(), ErrorKind::Mismatch, "rank 0: {e}");
    assert!(e.to_string().contains("rank 2"), "rank 0: {e}");
}

#[test]
fn a_rank_on_the_board_hears_of_a_peer_that_connected_to_it_from_another_call() {
    // The other way round: rank 0 on the board, ranks 1 and 2 in a ring that dials rank 0.
    common::board_call_against_a_ring(0, lazy);
}

#[test]
fn a_collective_not_every_rank_joins_times_out_naming_the_missing_rank() {
    // Over TCP there is no board to look at: rank 0 waits for rank 3 to dial until the deadline,
    // and says which rank never came.
    let rank_0_done = common::Gate::new();
    let results = common::try_with_options(
        4,
        Wiring::Tcp,
        Duration::from_secs(2),
        Tuning::default(),
        lazy,
        move |g| {
            let g = g?;
            if g.rank() == 3 {
                // Stays in the group, never calling, until rank 0's call has ended.
                return rank_0_done.wait(Duration::from_secs(120), "rank 0's call ending");
            }
            let r = g.all_to_all(&[1.0f32; 4]).map(drop);
            if g.rank() == 0 {
                rank_0_done.open();
            }
            r
        },
    );
    let e = results[0].as_ref().expect_err("rank 0 returned Ok");
    assert_eq!(e.kind(), ErrorKind::Timeout, "rank 0: {e}");
    assert!(
        e.to_string().contains("ranks [3] never connected"),
        "rank 0: {e}"
    );
}
