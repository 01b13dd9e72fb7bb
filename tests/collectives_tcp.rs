//! Every collective × op × type through real TCP sockets, ranks as threads, against the oracle.

mod common;

use psyne::conformance;
use std::time::Duration;

fn check_world(size: usize) {
    let results = common::with_ranks(size, Duration::from_secs(60), move |g| {
        conformance::check_all_types(&g, &conformance::default_counts(g.size()), 3)
    });
    for (rank, r) in results.into_iter().enumerate() {
        let bad = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert!(
            bad.is_empty(),
            "rank {rank}: {} wrong results, first: {}",
            bad.len(),
            bad[0]
        );
    }
}

#[test]
fn world_of_1() {
    check_world(1);
}

#[test]
fn world_of_2() {
    check_world(2);
}

#[test]
fn world_of_3() {
    check_world(3);
}

#[test]
fn world_of_4() {
    check_world(4);
}

#[test]
fn world_of_5() {
    check_world(5);
}
