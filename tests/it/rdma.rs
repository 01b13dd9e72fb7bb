//! The RDMA transport from a user's side. On a machine without an RDMA device (this project's CI):
//! `auto` falls back to TCP between hosts and collectives still match the oracle, and
//! `PSY_TRANSPORT=rdma` fails on every rank with the reason and the fix, quickly, without a panic
//! or a hang. On a machine with an active port: the full collective matrix over RDMA.

use crate::common;

use common::Wiring;
use psyne::conformance;
use psyne::internal::{availability, Availability};
use psyne::Communicator;
use psyne::RdmaConfig;
use psyne::ReduceOp;
use std::time::{Duration, Instant};

/// The groups' deadline in the fallback test; a rank that waited for a peer would take all of it.
const DEADLINE: Duration = Duration::from_secs(60);

fn here() -> Availability {
    availability(&RdmaConfig::from_env().expect("PSY_RDMA_* variables are well-formed"))
}

fn check_matrix(size: usize, wiring: Wiring) {
    let results = common::with_wiring(size, wiring, Duration::from_secs(120), move |g| {
        let transports = g.transports();
        (
            transports,
            conformance::check_all_types(&g, &conformance::default_counts(g.size()), 5),
        )
    });
    for (rank, (transports, r)) in results.into_iter().enumerate() {
        let bad = r.unwrap_or_else(|e| panic!("{wiring:?} rank {rank} ({transports}): {e}"));
        assert!(
            bad.is_empty(),
            "{wiring:?} rank {rank} ({transports}): {} wrong results, first: {}",
            bad.len(),
            bad[0]
        );
    }
}

#[test]
fn auto_between_hosts_uses_rdma_where_present_and_tcp_where_absent() {
    let present = here().is_present();
    let results = common::with_wiring(4, Wiring::AutoHosts, Duration::from_secs(60), |g| {
        let mut v = vec![g.rank() as f32 + 1.0; 1000];
        g.all_reduce(&mut v, ReduceOp::Sum)
            .map(|()| (g.transports(), v[999]))
    });
    for (rank, r) in results.into_iter().enumerate() {
        let (transports, last) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(last, 10.0, "rank {rank}");
        let across = if present { "rdma" } else { "tcp" };
        assert!(
            transports.contains(across) && transports.contains("shm"),
            "rank {rank}: {transports} (RDMA {})",
            here()
        );
    }
}

#[test]
fn forcing_rdma_without_a_device_fails_on_every_rank_with_the_reason() {
    let Availability::Absent { reason, fix } = here() else {
        eprintln!(
            "skipped: this machine has RDMA ({}); the absent path cannot be shown here",
            here()
        );
        return;
    };
    let started = Instant::now();
    let results = common::try_with_wiring(3, Wiring::Rdma, DEADLINE, |g| {
        g.map(|g| g.transports()).map_err(|e| e.to_string())
    });
    let took = started.elapsed();
    for (rank, r) in results.into_iter().enumerate() {
        let e = r.expect_err("forming a group over absent RDMA must fail");
        for part in [
            reason.as_str(),
            fix.as_str(),
            "PSY_TRANSPORT=rdma",
            "PSY_TRANSPORT=auto",
        ] {
            assert!(e.contains(part), "rank {rank}: {part:?} missing from: {e}");
        }
        assert!(e.contains(&format!("rank {rank}")), "rank {rank}: {e}");
    }
    // Far below the deadline: no rank waited for a peer that would never come.
    assert!(took < DEADLINE / 3, "took {took:?}");
}

#[test]
fn the_collective_matrix_over_rdma() {
    if let Availability::Absent { reason, fix } = here() {
        eprintln!("skipped: no RDMA here ({reason}; {fix}); run with `--features rdma` on a machine with an active InfiniBand or RoCE port (PSY_RDMA_DEVICE / PSY_RDMA_PORT pick one)");
        return;
    }
    for size in [2, 3, 5] {
        check_matrix(size, Wiring::Rdma);
    }
    check_matrix(4, Wiring::AutoHosts);
}
