//! A mismatch reaches every rank of a pair whatever its role in a collective, including a rank
//! whose part of the call is only to send (a broadcast or scatter root, a reduce or gather leaf):
//! it waits for the confirmation at the end of its schedule and gets the receiver's `Mismatch`
//! instead of `Ok`. A `send` does not wait for its receiver: the mismatch reaches the sender at its
//! next call. Ranks are threads over real TCP and real shared memory.

use crate::common;

use common::Wiring;
use psyne::Communicator;
use psyne::{ErrorKind, Group, ReduceOp};
use std::time::Duration;

/// Long enough never to expire on a loaded machine when a mismatch is noticed; a call that waits
/// for it instead fails the test by its kind (`Timeout`).
const T: Duration = Duration::from_secs(10);

/// A call in which rank `me` of two sends to the other rank (and may also receive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    BroadcastRoot,
    ScatterRoot,
    ReduceLeaf,
    GatherLeaf,
    AllReduce,
    AllGather,
}

const CALLS: [Call; 6] = [
    Call::BroadcastRoot,
    Call::ScatterRoot,
    Call::ReduceLeaf,
    Call::GatherLeaf,
    Call::AllReduce,
    Call::AllGather,
];

/// Runs `call` on `g` as rank `me` of two, with `count` elements.
fn run(g: &Group, call: Call, count: usize) -> psyne::Result<()> {
    let (me, other) = (g.rank(), 1 - g.rank());
    let mut buf = vec![1.0f32; count];
    match call {
        Call::BroadcastRoot => g.broadcast(&mut buf, me),
        Call::ScatterRoot => g.scatter(&buf, count, me).map(drop),
        Call::ReduceLeaf => g.reduce(&mut buf, ReduceOp::Sum, other),
        Call::GatherLeaf => g.gather(&buf[..count / 2], count, other).map(drop),
        Call::AllReduce => g.all_reduce(&mut buf, ReduceOp::Sum),
        Call::AllGather => g.all_gather(&buf[..count / 2]).map(drop),
    }
}

/// Every rank failed with a `Mismatch`; `what` says which case this is.
fn all_mismatch(results: &[psyne::Result<()>], what: &str) {
    for (rank, result) in results.iter().enumerate() {
        let e = result
            .as_ref()
            .err()
            .unwrap_or_else(|| panic!("{what}: rank {rank} returned Ok"));
        assert_eq!(e.kind(), ErrorKind::Mismatch, "{what}: rank {rank}: {e}");
    }
}

fn both_fail_with_a_mismatch(wiring: Wiring, calls: [Call; 2], counts: [usize; 2]) {
    let results = common::with_wiring(2, wiring, T, move |g| {
        let r = g.rank();
        run(&g, calls[r], counts[r])
    });
    let what = format!(
        "{wiring:?}: rank 0 {:?} ({}) and rank 1 {:?} ({})",
        calls[0], counts[0], calls[1], counts[1]
    );
    all_mismatch(&results, &what);
}

#[test]
fn every_pair_of_different_sending_calls_fails_both_ranks() {
    // Small calls over shared memory run on the node board, larger ones over the links with
    // confirmations; over TCP every size runs over the links.
    for (wiring, count) in [(Wiring::Tcp, 8), (Wiring::Shm, 8), (Wiring::Shm, 16384)] {
        for (i, &a) in CALLS.iter().enumerate() {
            for &b in &CALLS[i..] {
                // The same call as the peer's but from the other side (both broadcast roots,
                // both reduce leaves, ...) is a mismatch too; the same all-reduce is not.
                if a == b && matches!(a, Call::AllReduce | Call::AllGather) {
                    continue;
                }
                both_fail_with_a_mismatch(wiring, [a, b], [count, count]);
            }
        }
    }
}

#[test]
fn a_two_rank_all_reduce_of_different_counts_in_pieces_fails_both_ranks() {
    // Two ranks' large all-reduce runs in pieces whose number grows with the count (the ring of
    // two, `pair_all_reduce`): 1 and 4 Mi elements take 5 and 17 steps; the first meets.
    for wiring in [Wiring::Tcp, Wiring::Shm] {
        both_fail_with_a_mismatch(wiring, [Call::AllReduce; 2], [1 << 20, 1 << 22]);
    }
}

#[test]
fn a_root_that_sends_a_different_count_learns_it() {
    // The case: the receiver notices; the root used to return Ok.
    for wiring in [Wiring::Tcp, Wiring::Shm] {
        for call in [Call::BroadcastRoot, Call::ScatterRoot] {
            let results = common::with_wiring(2, wiring, T, move |g| {
                let mut buf = vec![1.0f32; 8 + 8 * g.rank()];
                match (call, g.rank()) {
                    (Call::BroadcastRoot, _) => g.broadcast(&mut buf, 0),
                    (_, 0) => g.scatter(&buf, 8, 0).map(drop),
                    _ => g.scatter(&buf, 16, 0).map(drop),
                }
            });
            for (rank, r) in results.iter().enumerate() {
                let e = r
                    .as_ref()
                    .err()
                    .unwrap_or_else(|| panic!("{wiring:?} rank {rank} returned Ok"));
                assert_eq!(e.kind(), ErrorKind::Mismatch, "{call:?} rank {rank}: {e}");
            }
        }
    }
}

#[test]
fn a_linear_scatter_root_hears_from_every_receiver() {
    // Four ranks; rank 3 believes rank 1 is the root. The root, which only sends, must not return
    // Ok; rank 3 waits for rank 1, which took its part of the real root's scatter and left.
    for wiring in [Wiring::Tcp, Wiring::Shm] {
        let results = common::with_wiring(4, wiring, T, move |g| {
            let root = if g.rank() == 3 { 1 } else { 0 };
            let buf = vec![1u32; 16];
            g.with_algo(psyne::Algo::Linear)
                .scatter(&buf, 16, root)
                .map(drop)
        });
        for rank in [0, 3] {
            let e = results[rank].as_ref().expect_err("must fail");
            assert_ne!(e.kind(), ErrorKind::Timeout, "{wiring:?} rank {rank}: {e}");
        }
    }
}

#[test]
fn on_the_node_board_every_rank_learns_of_a_mismatch_anywhere() {
    // Four ranks on one host; rank 3 alone names another root. Each rank reads every rank's slot
    // of a small call, so all four fail, also the leaves that took their data from ranks that
    // agreed with them (over the links those may return Ok; see the README).
    for call in ["broadcast", "reduce", "scatter", "gather"] {
        let results = common::with_wiring(4, Wiring::Shm, T, move |g| {
            let root = if g.rank() == 3 { 1 } else { 0 };
            let mut buf = vec![1.0f32; 16];
            assert_eq!(
                g.algorithm_for(psyne::Collective::Broadcast { root }, 64)?,
                psyne::Algo::Flat
            );
            match call {
                "broadcast" => g.broadcast(&mut buf, root),
                "reduce" => g.reduce(&mut buf, ReduceOp::Sum, root),
                "scatter" => g.scatter(&buf, 16, root).map(drop),
                _ => g.gather(&buf[..4], 16, root).map(drop),
            }
        });
        all_mismatch(&results, call);
    }
}

#[test]
fn a_send_into_another_call_fails_the_receiver_and_the_senders_next_call() {
    for wiring in [Wiring::Tcp, Wiring::Shm] {
        let results = common::with_wiring(2, wiring, T, move |g| {
            let mut buf = vec![1.0f32; 8];
            if g.rank() == 0 {
                // A send completes once the transport has the message, as MPI's buffered sends.
                g.send(&buf, 1)?;
                g.all_reduce(&mut buf, ReduceOp::Sum)
            } else {
                g.all_reduce(&mut buf, ReduceOp::Sum)
            }
        });
        all_mismatch(&results, &format!("{wiring:?}"));
    }
}

#[test]
fn a_shared_buffer_all_reduce_against_another_call_is_a_mismatch() {
    // Against a flat all-reduce on the node board (small) and a ring collective (large): both
    // ranks get a Mismatch, not a Timeout.
    for count in [8, 1 << 16] {
        let results = common::with_wiring(2, Wiring::Shm, T, move |g| {
            let mut shared = g.alloc_shared::<f32>(1 << 12)?;
            let mut buf = vec![1.0f32; count];
            if g.rank() == 0 {
                g.all_reduce_shared(&mut shared, ReduceOp::Sum)
            } else {
                g.all_reduce(&mut buf, ReduceOp::Sum)
            }
        });
        all_mismatch(&results, &format!("count {count}"));
    }
}

#[test]
fn a_board_call_against_a_call_over_the_links_fails_every_rank_without_a_timeout() {
    // Rank 0 makes a small all-reduce (the node board), the others a ring over the links. Rank 0
    // hears rank 2's ring message while it waits on the board; ranks 1 and 2 must hear of it
    // too, not time out.
    common::board_call_against_a_ring(0, |_| {});
}

#[test]
fn a_board_wait_finds_a_message_from_a_rank_far_from_the_one_it_waits_for() {
    // More ranks than a blocked board wait looks at in one turn (the peer it waits for and 8
    // others, in turns). Rank 0 waits on the board for rank 1, which does not come until rank 0's
    // call has ended, while rank 13 sends rank 0 a message: rank 0 must find it on a later turn
    // and fail with a mismatch naming rank 13 (the only other way its call can end is its
    // timeout, which the assertions below refuse).
    let rank_0_done = common::Gate::new();
    let results = common::with_wiring(14, Wiring::Shm, T, move |g| match g.rank() {
        1 => rank_0_done.wait(2 * T, "rank 0's call ending"),
        13 => {
            g.send(&[1.0f32; 16], 0)?;
            // Stays in the group (its links open) while rank 0 looks for its message.
            rank_0_done.wait(2 * T, "rank 0's call ending")
        }
        rank => {
            let r = g.all_reduce(&mut [1.0f32; 16], ReduceOp::Sum);
            if rank == 0 {
                rank_0_done.open();
            }
            r
        }
    });
    let e = results[0].as_ref().expect_err("rank 0 returned Ok");
    assert_ne!(e.kind(), ErrorKind::Timeout, "rank 0: {e}");
    assert!(e.to_string().contains("rank 13"), "rank 0: {e}");
}

#[test]
fn on_a_large_board_ranks_waiting_for_a_rank_in_another_call_hear_that_the_group_was_given_up() {
    // Ranks 0-12 make a small all-reduce (the node board), rank 13 an all-gather over the ring,
    // whose first message goes to rank 0. Rank 0 finds it and gives up the group. Ranks 1-12 wait
    // for rank 13's slot; rank 0's slot is ready, so its abort message over the links looks like
    // the next call's: they learn of it from the board, not by timing out.
    let results = common::with_wiring(14, Wiring::Shm, T, move |g| {
        if g.rank() < 13 {
            g.all_reduce(&mut [1.0f32; 16], ReduceOp::Sum)
        } else {
            g.all_gather(&vec![1.0f32; 4096]).map(drop)
        }
    });
    for (rank, r) in results.iter().enumerate().take(13) {
        let e = r
            .as_ref()
            .err()
            .unwrap_or_else(|| panic!("rank {rank} returned Ok"));
        assert_ne!(e.kind(), ErrorKind::Timeout, "rank {rank}: {e}");
    }
}
