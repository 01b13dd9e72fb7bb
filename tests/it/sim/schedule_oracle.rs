//! Every schedule, run by the in-memory simulator, against the sequential oracle: every collective
//! and algorithm, world sizes 1 to 17, counts 0, 1, p - 1, p + 1 and 1001, roots 0, p/2 and p - 1,
//! and the reduction ops on inputs that make mistakes visible. Also: the simulator rejects broken
//! schedules, and the algorithms keep their promised step counts and message sizes.

use super::values::value;
use proptest::prelude::*;
use psyne::oracle;
use psyne::schedule::simulate::{check, run_collective, run_schedules, simulate, SimError};
use psyne::schedule::{self, Algo, Collective, Recv, RecvMode, Schedule, Send, Span, Step};
use psyne::{Element, ReduceOp};

const MAX_SIZE: usize = 17;

fn counts(size: usize) -> Vec<usize> {
    dedup(vec![0, 1, size - 1, size + 1, 1001])
}

fn roots(size: usize) -> Vec<usize> {
    dedup(vec![0, size / 2, size - 1])
}

fn dedup(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v.dedup();
    v
}

/// Every collective of a world of `size`, rooted ones once per root in [`roots`].
fn all_collectives(size: usize) -> Vec<Collective> {
    let mut colls = vec![
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Barrier,
    ];
    for root in roots(size) {
        colls.extend([
            Collective::Broadcast { root },
            Collective::Reduce { root },
            Collective::Scatter { root },
            Collective::Gather { root },
        ]);
    }
    colls
}

/// For f32: small integers (|v| <= 8, or 1, 2, -1 for `Prod`), so that every partial sum and
/// product over 17 ranks is exact and any reduction order gives the oracle's bits.
fn small_value(rank: usize, index: usize, op: ReduceOp) -> i64 {
    if op == ReduceOp::Prod {
        value(rank, index, op)
    } else {
        ((rank * 5 + index * 3 + rank * index) % 17) as i64 - 8
    }
}

/// What each rank passes: its layout's input span, filled by `f(rank, index)`.
fn inputs<T: Element>(
    coll: Collective,
    size: usize,
    count: usize,
    f: impl Fn(usize, usize) -> i64,
) -> Vec<Vec<T>> {
    (0..size)
        .map(|r| {
            coll.layout(r, size, count)
                .input
                .map(|i| T::from_i64(f(r, i)))
                .collect()
        })
        .collect()
}

/// What each rank should get back, from the oracle.
fn expected<T: Element>(coll: Collective, op: ReduceOp, inputs: &[Vec<T>]) -> Vec<Vec<T>> {
    let size = inputs.len();
    let only_root = |root: usize, v: Vec<T>| {
        (0..size)
            .map(|r| if r == root { v.clone() } else { Vec::new() })
            .collect()
    };
    match coll {
        Collective::AllReduce => vec![oracle::all_reduce(inputs, op); size],
        Collective::Broadcast { root } => vec![oracle::broadcast(inputs, root); size],
        Collective::Reduce { root } => only_root(root, oracle::reduce(inputs, op)),
        Collective::AllGather => vec![oracle::all_gather(inputs); size],
        Collective::ReduceScatter => oracle::reduce_scatter(inputs, op),
        Collective::Scatter { root } => oracle::scatter(&inputs[root], size),
        Collective::Gather { root } => only_root(root, oracle::gather(inputs)),
        Collective::AllToAll => oracle::all_to_all(inputs),
        Collective::Barrier => vec![Vec::new(); size],
    }
}

/// Runs one case and compares every element of every rank's output with the oracle.
fn check_case<T: Element>(
    coll: Collective,
    algo: Algo,
    size: usize,
    count: usize,
    op: ReduceOp,
    f: impl Fn(usize, usize) -> i64,
) {
    let inputs = inputs::<T>(coll, size, count, f);
    let case = format!(
        "{coll} {algo} size {size} count {count} op {op} {}",
        T::DTYPE
    );
    let got =
        run_collective(coll, algo, count, op, &inputs).unwrap_or_else(|e| panic!("{case}: {e}"));
    let want = expected(coll, op, &inputs);
    for (rank, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), w.len(), "{case}: rank {rank} output length");
        if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
            panic!(
                "{case}: rank {rank} element {i}: got {:?}, want {:?}",
                g[i], w[i]
            );
        }
    }
}

/// Every algorithm of every collective `pick` selects, over the whole size/count/root matrix.
fn matrix<T: Element>(
    pick: impl Fn(Collective) -> bool,
    ops: &[ReduceOp],
    f: impl Fn(usize, usize, ReduceOp) -> i64 + Copy,
) {
    for size in 1..=MAX_SIZE {
        for coll in all_collectives(size).into_iter().filter(|&c| pick(c)) {
            for &algo in Algo::for_collective(coll) {
                for count in counts(size) {
                    let ops = if coll.reduces() { ops } else { &ops[..1] };
                    for &op in ops {
                        check_case::<T>(coll, algo, size, count, op, |r, i| f(r, i, op));
                    }
                }
            }
        }
    }
}

const INT_OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Prod, ReduceOp::Avg];

#[test]
fn all_reduce_i64_matches_oracle() {
    matrix::<i64>(|c| c == Collective::AllReduce, &INT_OPS, value);
}

#[test]
fn all_reduce_f32_matches_oracle() {
    // Small-integer inputs: every partial result is exact in f32 (see `small_value`).
    matrix::<f32>(|c| c == Collective::AllReduce, &INT_OPS, small_value);
}

#[test]
fn reduce_and_reduce_scatter_match_oracle() {
    let pick = |c: Collective| matches!(c, Collective::Reduce { .. } | Collective::ReduceScatter);
    matrix::<i64>(pick, &INT_OPS, value);
    // Small-integer inputs: every partial result is exact in f32.
    matrix::<f32>(pick, &[ReduceOp::Sum, ReduceOp::Avg], small_value);
}

#[test]
fn data_movement_matches_oracle() {
    let pick = |c: Collective| !c.reduces();
    matrix::<i64>(pick, &[ReduceOp::Sum], value);
    matrix::<f32>(pick, &[ReduceOp::Sum], small_value);
    matrix::<u8>(pick, &[ReduceOp::Sum], value);
}

#[test]
fn every_rank_gets_bitwise_identical_float_sums() {
    // Values with long mantissas: the sum depends on the order of additions, yet every rank
    // must end with the same bits (each element reduced once, or symmetrically).
    for size in 1..=MAX_SIZE {
        for &algo in Algo::for_collective(Collective::AllReduce) {
            let count = 2 * size + 3;
            let inputs: Vec<Vec<f32>> = (0..size)
                .map(|r| {
                    (0..count)
                        .map(|i| 1.0 / (1 + r * 31 + i * 7) as f32)
                        .collect()
                })
                .collect();
            let out =
                run_collective(Collective::AllReduce, algo, count, ReduceOp::Sum, &inputs).unwrap();
            for rank in 1..size {
                let same = out[rank]
                    .iter()
                    .zip(&out[0])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{algo} size {size}: rank {rank} differs from rank 0");
            }
        }
    }
}

#[test]
fn barrier_lets_every_rank_hear_from_every_rank() {
    // Follow what each rank has (transitively) heard from, round by round: a plain send carries
    // what its sender knew at the start of the round.
    for size in 1..=MAX_SIZE {
        let schedules: Vec<Schedule> = (0..size)
            .map(|r| schedule::build(Collective::Barrier, Algo::Dissemination, r, size, 0).unwrap())
            .collect();
        let rounds = schedules[0].steps.len();
        assert_eq!(rounds, size.next_power_of_two().trailing_zeros() as usize);
        let mut heard: Vec<u32> = (0..size).map(|r| 1 << r).collect();
        for k in 0..rounds {
            let before = heard.clone();
            for (r, s) in schedules.iter().enumerate() {
                for recv in &s.steps[k].recvs {
                    heard[r] |= before[recv.peer];
                }
            }
        }
        let all = (1u32 << size) - 1;
        assert!(heard.iter().all(|&h| h == all), "size {size}: {heard:?}");
        run_collective::<u8>(
            Collective::Barrier,
            Algo::Dissemination,
            0,
            ReduceOp::Sum,
            &vec![vec![]; size],
        )
        .unwrap();
    }
}

/// A schedule's shape: steps, peers, directions, modes, forward flags; no spans.
fn shape(s: &Schedule) -> Vec<Vec<(bool, usize, bool)>> {
    s.steps
        .iter()
        .map(|st| {
            let sends = st.sends.iter().map(|m| (true, m.peer, m.forward));
            let recvs = st
                .recvs
                .iter()
                .map(|m| (false, m.peer, m.mode == RecvMode::Copy));
            sends.chain(recvs).collect()
        })
        .collect()
}

#[test]
fn shapes_do_not_depend_on_count_and_buffers_follow_the_layout() {
    // Ranks that disagree about the count must still exchange the same headers.
    for size in 1..=MAX_SIZE {
        for coll in all_collectives(size) {
            for &algo in Algo::for_collective(coll) {
                for rank in 0..size {
                    let base = schedule::build(coll, algo, rank, size, 0).unwrap();
                    for count in [1, size + 1, 1001] {
                        let s = schedule::build(coll, algo, rank, size, count).unwrap();
                        assert_eq!(
                            shape(&s),
                            shape(&base),
                            "{coll} {algo} {rank}/{size} {count}"
                        );
                        assert_eq!(s.buf_len, coll.layout(rank, size, count).buf_len);
                        check(rank, size, &s).unwrap();
                    }
                    if size == 1 {
                        assert!(base.steps.is_empty(), "{coll} {algo}");
                    }
                }
            }
        }
    }
}

#[test]
fn ring_all_reduce_is_bandwidth_optimal() {
    for size in 1..=MAX_SIZE {
        for count in (0..3 * size + 2).chain([1001]) {
            let most = count.div_ceil(size);
            for rank in 0..size {
                let s =
                    schedule::build(Collective::AllReduce, Algo::Ring, rank, size, count).unwrap();
                assert_eq!(s.steps.len(), 2 * (size - 1));
                for step in &s.steps {
                    assert_eq!(step.sends.len(), 1);
                    assert!(
                        step.sends[0].span.len() <= most,
                        "size {size} count {count}"
                    );
                }
            }
        }
    }
}

#[test]
fn recursive_doubling_and_rabenseifner_take_log_steps() {
    for size in 1..=MAX_SIZE {
        let pow = 1usize << size.ilog2();
        let rounds = pow.trailing_zeros() as usize; // floor(log2 p) = ceil(log2 p) - [p not 2^k]
        let rem = size - pow;
        for rank in 0..size {
            let folded_away = rank < 2 * rem && rank % 2 == 0;
            let fold = if rank < 2 * rem { 2 } else { 0 };
            let (rd, rab) = if folded_away {
                (2, 2)
            } else {
                (rounds + fold, 2 * rounds + fold)
            };
            let steps = |algo| {
                schedule::build(Collective::AllReduce, algo, rank, size, 100)
                    .unwrap()
                    .steps
                    .len()
            };
            assert_eq!(steps(Algo::RecursiveDoubling), rd, "rd {rank}/{size}");
            assert_eq!(steps(Algo::Rabenseifner), rab, "rabenseifner {rank}/{size}");
            // The longest rank: ceil(log2 p) exchange rounds plus one more for the fold out.
            assert!(
                rd <= size.next_power_of_two().trailing_zeros() as usize + usize::from(rem > 0)
            );
        }
    }
}

#[test]
fn pipeline_broadcast_is_one_forwarding_step_with_confirmations() {
    for size in 2..=MAX_SIZE {
        for root in roots(size) {
            for rank in 0..size {
                let s = schedule::build(
                    Collective::Broadcast { root },
                    Algo::Pipeline,
                    rank,
                    size,
                    64,
                )
                .unwrap();
                // One forwarding step, with the confirmations in it: each rank but the root sends
                // an empty message back as it receives, each but the last waits for one.
                assert_eq!(s.steps.len(), 1);
                let forwards = s.steps[0].sends.iter().filter(|m| m.forward).count();
                let last = (root + size - 1) % size;
                let want = usize::from(rank != root && rank != last);
                assert_eq!(forwards, want, "rank {rank} root {root} size {size}");
                let step = &s.steps[0];
                let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
                let from: Vec<_> = step
                    .recvs
                    .iter()
                    .filter(|m| m.span.is_empty())
                    .map(|m| m.peer)
                    .collect();
                let to: Vec<_> = step
                    .sends
                    .iter()
                    .filter(|m| m.span.is_empty())
                    .map(|m| m.peer)
                    .collect();
                let want_from = if rank == last { vec![] } else { vec![next] };
                let want_to = if rank == root { vec![] } else { vec![prev] };
                assert_eq!((from, to), (want_from, want_to), "rank {rank} root {root}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn all_reduce_random_cases(
        size in 1..=MAX_SIZE,
        count in 0usize..400,
        algo in 0usize..4,
        op in 0usize..4,
        seed in any::<u64>(),
    ) {
        let algo = Algo::for_collective(Collective::AllReduce)[algo];
        let op = INT_OPS[op];
        let f = |r: usize, i: usize| {
            let h = (seed ^ (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .wrapping_add((i as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9));
            let h = (h ^ (h >> 31)).wrapping_mul(0x94D0_49BB_1331_11EB);
            if op == ReduceOp::Prod { [1, 2, -1][(h % 3) as usize] } else { (h % 2001) as i64 - 1000 }
        };
        check_case::<i64>(Collective::AllReduce, algo, size, count, op, f);
    }
}

// ---- The checker can fail -------------------------------------------------------------------

fn send(peer: usize, span: Span) -> Send {
    Send::plain(peer, span)
}

fn forward(peer: usize, span: Span) -> Send {
    Send::forward(peer, span)
}

fn recv(peer: usize, span: Span, mode: RecvMode) -> Recv {
    Recv { peer, span, mode }
}

fn step(sends: Vec<Send>, recvs: Vec<Recv>) -> Step {
    Step { sends, recvs }
}

fn run(schedules: Vec<Vec<Step>>, buf_len: usize) -> Result<Vec<Vec<i32>>, SimError> {
    let schedules: Vec<Schedule> = schedules
        .into_iter()
        .map(|steps| Schedule { buf_len, steps })
        .collect();
    let buffers = vec![vec![1; buf_len]; schedules.len()];
    run_schedules(&schedules, ReduceOp::Sum, buffers)
}

#[test]
fn simulator_reports_a_deadlock() {
    // A three-rank cycle of receive-then-send: each waits for its predecessor.
    let rank = |r: usize| {
        vec![
            step(vec![], vec![recv((r + 2) % 3, 0..2, RecvMode::Copy)]),
            step(vec![send((r + 1) % 3, 0..2)], vec![]),
        ]
    };
    let err = run((0..3).map(rank).collect(), 2).unwrap_err();
    assert!(matches!(err, SimError::Deadlock { .. }), "{err}");
}

#[test]
fn simulator_is_stricter_than_buffering() {
    // With buffered sends this completes (rank 0 posts both sends at once); at rendezvous rank 0's
    // first send waits for rank 1, which waits for rank 2, which waits for rank 0's second send.
    let err = run(
        vec![
            vec![
                step(vec![send(1, 0..1)], vec![]),
                step(vec![send(2, 0..1)], vec![]),
            ],
            vec![
                step(vec![], vec![recv(2, 0..1, RecvMode::Copy)]),
                step(vec![], vec![recv(0, 0..1, RecvMode::Copy)]),
            ],
            vec![
                step(vec![], vec![recv(0, 0..1, RecvMode::Copy)]),
                step(vec![send(1, 0..1)], vec![]),
            ],
        ],
        1,
    )
    .unwrap_err();
    assert!(err.to_string().contains("deadlock"), "{err}");
}

#[test]
fn simulator_reports_a_length_mismatch() {
    let err = run(
        vec![
            vec![step(vec![send(1, 0..3)], vec![])],
            vec![step(vec![], vec![recv(0, 0..2, RecvMode::Copy)])],
        ],
        4,
    )
    .unwrap_err();
    assert!(
        matches!(err, SimError::LengthMismatch { from: 0, to: 1, .. }),
        "{err}"
    );
}

#[test]
fn simulator_reports_overlapping_receives() {
    let err = run(
        vec![
            vec![step(
                vec![],
                vec![
                    recv(1, 0..3, RecvMode::Reduce),
                    recv(2, 2..4, RecvMode::Copy),
                ],
            )],
            vec![step(vec![send(0, 0..3)], vec![])],
            vec![step(vec![send(0, 0..2)], vec![])],
        ],
        4,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            SimError::OverlappingRecvs {
                rank: 0,
                step: 0,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn simulator_reports_unmatched_messages() {
    let err = run(
        vec![
            vec![step(vec![send(1, 0..1), send(1, 1..2)], vec![])],
            vec![step(vec![], vec![recv(0, 0..1, RecvMode::Copy)])],
        ],
        2,
    )
    .unwrap_err();
    assert_eq!(
        err,
        SimError::Unmatched {
            from: 0,
            to: 1,
            sends: 2,
            recvs: 1
        }
    );
}

#[test]
fn simulator_reports_bad_peers_and_spans() {
    let err = run(vec![vec![step(vec![send(0, 0..1)], vec![])], vec![]], 1).unwrap_err();
    assert!(
        matches!(err, SimError::SelfMessage { rank: 0, .. }),
        "{err}"
    );
    let err = run(vec![vec![step(vec![send(5, 0..1)], vec![])], vec![]], 1).unwrap_err();
    assert!(
        matches!(err, SimError::PeerOutOfRange { peer: 5, .. }),
        "{err}"
    );
    let err = run(
        vec![
            vec![step(vec![send(1, 2..5)], vec![])],
            vec![step(vec![], vec![recv(0, 0..3, RecvMode::Copy)])],
        ],
        4,
    )
    .unwrap_err();
    assert!(
        matches!(err, SimError::SpanOutOfBounds { rank: 0, .. }),
        "{err}"
    );
}

#[test]
fn simulator_reports_copy_over_plain_send_and_uncovered_forward() {
    let err = run(
        vec![
            vec![step(
                vec![send(1, 0..2)],
                vec![recv(1, 1..3, RecvMode::Copy)],
            )],
            vec![step(
                vec![send(0, 0..2)],
                vec![recv(0, 0..2, RecvMode::Copy)],
            )],
        ],
        3,
    )
    .unwrap_err();
    assert!(
        matches!(err, SimError::CopyOverlapsSend { rank: 0, .. }),
        "{err}"
    );
    let err = run(
        vec![
            vec![step(vec![send(1, 0..2)], vec![])],
            vec![step(
                vec![forward(2, 0..3)],
                vec![recv(0, 0..2, RecvMode::Copy)],
            )],
            vec![step(vec![], vec![recv(1, 0..3, RecvMode::Copy)])],
        ],
        3,
    )
    .unwrap_err();
    assert!(
        matches!(err, SimError::ForwardNotCovered { rank: 1, .. }),
        "{err}"
    );
}

#[test]
fn oracle_comparison_catches_a_wrong_schedule() {
    // Ring all-reduce with one Reduce turned into a Copy runs cleanly but loses a contribution.
    let (size, count) = (4, 8);
    let mut schedules: Vec<Schedule> = (0..size)
        .map(|r| schedule::build(Collective::AllReduce, Algo::Ring, r, size, count).unwrap())
        .collect();
    schedules[2].steps[1].recvs[0].mode = RecvMode::Copy;
    let buffers: Vec<Vec<i64>> = (0..size)
        .map(|r| (0..count).map(|i| value(r, i, ReduceOp::Sum)).collect())
        .collect();
    let want = oracle::all_reduce(&buffers, ReduceOp::Sum);
    let got = run_schedules(&schedules, ReduceOp::Sum, buffers).unwrap();
    assert!(got.iter().any(|g| g != &want));
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let err = simulate::<i32>(
        Collective::AllGather,
        Algo::Binomial,
        3,
        3,
        ReduceOp::Sum,
        vec![vec![0; 3]; 3],
    )
    .unwrap_err();
    assert!(matches!(err, SimError::Build(_)), "{err}");
    assert!(err.to_string().contains("ring"), "{err}");
    let err = run_collective::<i32>(
        Collective::AllReduce,
        Algo::Ring,
        4,
        ReduceOp::Sum,
        &[vec![0; 4], vec![0; 3]],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SimError::BufferLen {
            rank: 1,
            expected: 4,
            got: 3
        }
    );
    let err = simulate::<i32>(
        Collective::AllReduce,
        Algo::Ring,
        2,
        4,
        ReduceOp::Sum,
        vec![vec![0; 4]],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SimError::WorldSize {
            expected: 2,
            got: 1
        }
    );
    let err = run_collective::<i32>(
        Collective::Broadcast { root: 3 },
        Algo::Binomial,
        1,
        ReduceOp::Sum,
        &[vec![], vec![]],
    )
    .unwrap_err();
    assert!(matches!(err, SimError::Build(_)), "{err}");
}

/// Whether `schedule` has an empty message (with counts that give every chunk elements, only a
/// confirmation is empty).
fn has_confirmations(schedule: &Schedule) -> bool {
    schedule.steps.iter().any(|step| {
        let sends = step.sends.iter().map(|m| &m.span);
        let mut spans = sends.chain(step.recvs.iter().map(|m| &m.span));
        spans.any(|s| s.is_empty())
    })
}

#[test]
fn only_rooted_collectives_carry_confirmations() {
    // Data flows every way in the unrooted collectives, so each rank already knows its peers made
    // its call; in a rooted one every rank that sent without hearing back waits for an empty
    // message.
    for size in 2..=MAX_SIZE {
        for coll in all_collectives(size) {
            for &algo in Algo::for_collective(coll) {
                let count = 1000 * size;
                let with: Vec<bool> = (0..size)
                    .map(|r| {
                        // The analysis itself, not `build`, which skips it where this test
                        // shows it adds nothing.
                        let s = schedule::build_analysed(coll, algo, r, size, count).unwrap();
                        assert_eq!(
                            s,
                            schedule::build(coll, algo, r, size, count).unwrap(),
                            "{coll} {algo} size {size} rank {r}: build differs from the analysis"
                        );
                        if coll == Collective::Barrier {
                            // All its messages are empty: one send and one receive a round.
                            return s.steps.iter().any(|st| st.sends.len() + st.recvs.len() > 2);
                        }
                        has_confirmations(&s)
                    })
                    .collect();
                if coll.root().is_some() {
                    assert!(with.iter().any(|&e| e), "{coll} {algo} size {size}: none");
                } else {
                    assert!(
                        with.iter().all(|&e| !e),
                        "{coll} {algo} size {size}: {with:?}"
                    );
                }
            }
        }
    }
}
