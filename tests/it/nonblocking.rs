//! The non-blocking form of every collective against the sequential oracle, element by element,
//! with several calls in flight at once (they complete in the order they were issued).

use crate::common;

use psyne::Communicator;
use psyne::{oracle, ReduceOp};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// Rank `r`'s input of `n` elements.
fn input(r: usize, n: usize) -> Vec<i64> {
    (0..n as i64).map(|i| i * 7 + r as i64 * 100 - 3).collect()
}

#[test]
fn every_async_collective_matches_the_oracle() {
    let size = 3;
    let n = 10; // not a multiple of the group size: uneven chunks
    let inputs: Vec<Vec<i64>> = (0..size).map(|r| input(r, n)).collect();
    let oracle_inputs = inputs.clone();
    let results = common::with_ranks(size, T, move |g| {
        let r = g.rank();
        let mine = input(r, n);
        let chunk = mine[..3].to_vec(); // all_gather: every rank gives the same length
                                        // Issued back to back, waited for afterwards.
        let all_reduce = g.all_reduce_async(mine.clone(), ReduceOp::Sum);
        let broadcast = g.broadcast_async(mine.clone(), 1);
        let reduce = g.reduce_async(mine.clone(), ReduceOp::Max, 2);
        let all_gather = g.all_gather_async(chunk.clone());
        let reduce_scatter = g.reduce_scatter_async(mine.clone(), ReduceOp::Sum);
        let scatter = g.scatter_async(mine.clone(), n, 0);
        let gather = g.gather_async(mine[psyne::schedule::chunk_span(n, size, r)].to_vec(), n, 1);
        let all_to_all = g.all_to_all_async(mine.clone());
        let barrier = g.barrier_async();
        let (to, from) = ((r + 1) % size, (r + size - 1) % size);
        let sent = g.send_async(mine.clone(), to);
        let received = g.recv_async(vec![0i64; n], from);
        Ok::<_, psyne::Error>((
            all_reduce.wait()?,
            broadcast.wait()?,
            reduce.wait()?,
            all_gather.wait()?,
            reduce_scatter.wait()?,
            scatter.wait()?,
            gather.wait()?,
            all_to_all.wait()?,
            barrier.wait()?,
            sent.wait()?,
            received.wait()?,
        ))
    });
    let inputs = oracle_inputs;
    let chunks: Vec<Vec<i64>> = (0..size).map(|r| inputs[r][..3].to_vec()).collect();
    for (r, result) in results.into_iter().enumerate() {
        let (ar, bc, red, ag, rs, sc, ga, a2a, (), sent, recv) =
            result.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert_eq!(
            ar,
            oracle::all_reduce(&inputs, ReduceOp::Sum),
            "all_reduce on rank {r}"
        );
        assert_eq!(bc, oracle::broadcast(&inputs, 1), "broadcast on rank {r}");
        if r == 2 {
            assert_eq!(
                red,
                oracle::reduce(&inputs, ReduceOp::Max),
                "reduce on the root"
            );
        } else {
            assert_eq!(red, inputs[r], "reduce leaves rank {r}'s buffer");
        }
        assert_eq!(ag, oracle::all_gather(&chunks), "all_gather on rank {r}");
        assert_eq!(
            rs,
            oracle::reduce_scatter(&inputs, ReduceOp::Sum)[r],
            "reduce_scatter on rank {r}"
        );
        assert_eq!(
            sc,
            oracle::scatter(&inputs[0], size)[r],
            "scatter on rank {r}"
        );
        if r == 1 {
            let pieces: Vec<Vec<i64>> = (0..size)
                .map(|j| inputs[j][psyne::schedule::chunk_span(10, size, j)].to_vec())
                .collect();
            assert_eq!(ga, oracle::gather(&pieces), "gather on the root");
        } else {
            assert!(ga.is_empty(), "gather gives non-roots nothing");
        }
        assert_eq!(
            a2a,
            oracle::all_to_all(&inputs)[r],
            "all_to_all on rank {r}"
        );
        assert_eq!(sent, inputs[r], "send gives the buffer back unchanged");
        assert_eq!(recv, inputs[(r + size - 1) % size], "recv on rank {r}");
    }
}

/// Two ranks over shared memory each send to the other before either receives: a `send`
/// completes once the transport holds the message (as MPI's buffered sends), so this finishes
/// whatever the pull policy, for messages that single-copy pulls would otherwise take (64 KiB to
/// 960 KB, less than a ring holds).
#[test]
fn sends_to_each_other_before_receiving_complete_under_every_pull_policy() {
    fn every(o: &mut psyne::GroupOptions) {
        o.tunables.transport.shm_pulls = psyne::PullPolicy::Every { min: 1 };
    }
    fn by_traffic(o: &mut psyne::GroupOptions) {
        o.tunables.transport.shm_pulls = psyne::PullPolicy::ByTraffic;
    }
    for tweak in [every as fn(&mut psyne::GroupOptions), by_traffic] {
        let results = common::try_with_options(
            2,
            common::Wiring::Shm,
            Duration::from_secs(20),
            psyne::Tuning::default(),
            tweak,
            |g| {
                let g = g?;
                let peer = 1 - g.rank();
                let mut got = Vec::new();
                for n in [70_001usize, 120_000] {
                    let mine = input(g.rank(), n);
                    g.send(&mine, peer)?;
                    let mut theirs = vec![0i64; n];
                    g.recv(&mut theirs, peer)?;
                    got.push(theirs);
                }
                Ok::<_, psyne::Error>(got)
            },
        );
        for (r, result) in results.into_iter().enumerate() {
            let got = result.unwrap_or_else(|e| panic!("rank {r}: {e}"));
            for (theirs, n) in got.iter().zip([70_001usize, 120_000]) {
                assert!(*theirs == input(1 - r, n), "rank {r}: {n} elements differ");
            }
        }
    }
}

/// Over shared memory a send whose receiver is already blocked receiving it is handed over in one
/// copy (the receiver pulls it); any other send still completes once the ring holds it. Rank 1
/// says it is about to receive message 1 before rank 0 sends it; then rank 0 sends message 2
/// while rank 1 does not receive (it waits for rank 0 to say the send completed: a send that
/// waited for a receiver would never say so), then message 3, and receives one larger than the
/// ring, while rank 1 receives message 2, sends its large one and only then receives message 3.
#[test]
fn a_send_to_a_waiting_receiver_arrives_whole_and_other_sends_stay_buffered() {
    let (a, b, d) = (100_000usize, 70_001usize, 300_000usize);
    // Rank 1 is receiving message 1; then: rank 0's send of message 2 completed.
    let (receiving, sent) = (common::Gate::new(), common::Gate::new());
    let limit = Duration::from_secs(30);
    let results = common::with_wiring(2, common::Wiring::Shm, limit, move |g| {
        if g.rank() == 0 {
            receiving.wait(limit, "rank 1 receiving message 1")?;
            g.send(&input(0, a), 1)?;
            g.send(&input(0, b), 1)?;
            sent.open();
            g.send(&input(2, b), 1)?;
            let mut theirs = vec![0i64; d];
            g.recv(&mut theirs, 1)?;
            Ok::<_, psyne::Error>(vec![theirs])
        } else {
            let mut got = vec![vec![0i64; a], vec![0i64; b], vec![0i64; b]];
            receiving.open();
            g.recv(&mut got[0], 0)?;
            sent.wait(limit, "rank 0's send of message 2 completing")?;
            g.recv(&mut got[1], 0)?;
            g.send(&input(1, d), 0)?;
            g.recv(&mut got[2], 0)?;
            Ok(got)
        }
    });
    let got: Vec<_> = results
        .into_iter()
        .enumerate()
        .map(|(r, x)| x.unwrap_or_else(|e| panic!("rank {r}: {e}")))
        .collect();
    assert!(
        got[0][0] == input(1, d),
        "rank 0: the large message differs"
    );
    let want = [input(0, a), input(0, b), input(2, b)];
    for (i, (g, w)) in got[1].iter().zip(&want).enumerate() {
        assert!(g == w, "rank 1: message {} differs", i + 1);
    }
}

/// Over TCP both ranks send each other large messages at once (the kernel holds each send until
/// the other rank receives), around and well past 1 MiB, and every element arrives.
#[test]
fn large_messages_sent_both_ways_at_once_over_tcp_arrive_whole() {
    let sizes = [
        (1usize << 20) / 8 - 10,
        (1 << 20) / 8 + 3,
        (5 << 20) / 8 + 1,
    ];
    let results = common::with_wiring(2, common::Wiring::Tcp, Duration::from_secs(30), move |g| {
        let peer = 1 - g.rank();
        let mut got = Vec::new();
        for n in sizes {
            let sending = g.send_async(input(g.rank(), n), peer);
            let mut theirs = vec![0i64; n];
            g.recv(&mut theirs, peer)?;
            sending.wait()?;
            got.push(theirs);
        }
        Ok::<_, psyne::Error>(got)
    });
    for (r, result) in results.into_iter().enumerate() {
        let got = result.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        for (theirs, n) in got.iter().zip(sizes) {
            assert!(*theirs == input(1 - r, n), "rank {r}: {n} elements differ");
        }
    }
}
