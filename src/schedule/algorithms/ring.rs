//! Ring algorithms: every step sends one chunk to `rank + 1` and receives one from `rank - 1`.
//!
//! With `p` ranks the buffer is split into `p` chunks by [`chunk_span`]; each step moves at most
//! `ceil(count / p)` elements per rank, so the ring is bandwidth-optimal.

use super::{chunk_span, copy, reduce, send, step, wrap, Step};

/// All-reduce: a reduce-scatter (`p - 1` steps) that leaves the full reduction of chunk
/// `rank + 1` on `rank`, then an all-gather (`p - 1` steps) that passes the finished chunks round.
/// Each element is reduced on one rank only and then copied, so all ranks agree bit for bit.
///
/// Two ranks run [`pair_all_reduce`] instead, in the pieces [`PairPieces::for_count`] picks.
pub(super) fn all_reduce(rank: usize, size: usize, count: usize) -> Vec<Step> {
    if size == 2 {
        return pair_all_reduce(rank, count, PairPieces::for_count(count));
    }
    let mut steps = reduce_scatter_phase(rank, size, count, 0);
    steps.extend(all_gather_phase(rank, size, count, 1));
    steps
}

/// How [`pair_all_reduce`] cuts its halves and orders each step's two pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PairPieces {
    /// The most elements of one piece.
    elements: usize,
    /// Whether a step sends the piece reduced in the step before (and copies in the peer's)
    /// before it sends and reduces its new piece, rather than after.
    reduced_first: bool,
}

/// The pieces of a [`pair_all_reduce`] of up to [`LARGE_PAIR`] elements: 512 KiB of `f32`,
/// each step reducing its new piece first. Measured on the 2-core AMD VM (2 ranks, 1-64 MiB,
/// pieces of 8-512 KiB of `f32` tried, `results/pair-pieces/`): pieces of 256-512 KiB took
/// 0.69-0.80 of the time of whole halves from 4 MiB up; at 1 MiB (one piece of 512 KiB a half)
/// smaller pieces were slower; at 2-8 MiB sending the reduced piece first took 1.02-1.10 of the
/// time (`results/pair-pieces/large/`).
const PAIR_PIECE: PairPieces = PairPieces {
    elements: 128 << 10,
    reduced_first: false,
};

/// Above this many elements (8 MiB of `f32`) the two ranks' buffers no longer stay in the
/// caches between the steps of a [`pair_all_reduce`], and it runs in [`LARGE_PAIR_PIECE`]s.
const LARGE_PAIR: usize = 2 << 20;

/// The pieces of a [`pair_all_reduce`] of more than [`LARGE_PAIR`] elements: 128 KiB of `f32`,
/// each step sending the piece it reduced in the step before first, while that piece is still in
/// the cache (as the copy floor of `scripts/probes/floors/staged2.c` sends each reduced slice
/// back at once). Measured on the 2-core AMD VM against [`PAIR_PIECE`] (2 ranks, alternated,
/// `results/pair-pieces/large/`): 10, 12, 16, 32 and 64 MiB in 0.97, 0.92, 0.84, 0.92 and 0.94
/// of the time.
const LARGE_PAIR_PIECE: PairPieces = PairPieces {
    elements: 32 << 10,
    reduced_first: true,
};

impl PairPieces {
    /// The pieces of a pair all-reduce of `count` elements.
    fn for_count(count: usize) -> PairPieces {
        if count > LARGE_PAIR {
            LARGE_PAIR_PIECE
        } else {
            PAIR_PIECE
        }
    }
}

/// All-reduce of 2 ranks, each half of the buffer in pieces of at most `pieces.elements`
/// elements, so that a reduced piece goes back to the peer while it is in the cache: step `c`
/// sends piece `c` of the half the peer keeps and reduces piece `c` of the half this rank keeps
/// into its buffer, and sends piece `c - 1` of that (reduced in the step before) and copies in
/// piece `c - 1` of the other half (as the peer reduced it), in the order `pieces.reduced_first`
/// says (both ranks alike, so each link's messages keep their order). With one piece a half it is
/// the ring's two steps. Each element is reduced on one rank only (rank 0 keeps the second half,
/// as in the ring).
///
/// The number of steps grows with `count`, against the rule that a schedule's structure does
/// not depend on it: ranks that disagree about the count still meet in step 0, where each
/// receives from the other and checks its header.
fn pair_all_reduce(rank: usize, count: usize, pieces: PairPieces) -> Vec<Step> {
    let peer = 1 - rank;
    let (keep, give) = (chunk_span(count, 2, peer), chunk_span(count, 2, rank));
    let per_half = keep
        .len()
        .max(give.len())
        .div_ceil(pieces.elements.max(1))
        .max(1);
    let piece = |half: &std::ops::Range<usize>, c: usize| {
        let p = chunk_span(half.len(), per_half, c);
        half.start + p.start..half.start + p.end
    };
    (0..=per_half)
        .map(|c| {
            let mut parts = Vec::new();
            if c < per_half {
                parts.push((send(peer, piece(&give, c)), reduce(peer, piece(&keep, c))));
            }
            if c > 0 {
                let back = (
                    send(peer, piece(&keep, c - 1)),
                    copy(peer, piece(&give, c - 1)),
                );
                if pieces.reduced_first {
                    parts.insert(0, back);
                } else {
                    parts.push(back);
                }
            }
            let (sends, recvs) = parts.into_iter().unzip();
            step(sends, recvs)
        })
        .collect()
}

/// All-gather: rank `r` starts with chunk `r` and ends with all of them.
pub(super) fn all_gather(rank: usize, size: usize, count: usize) -> Vec<Step> {
    all_gather_phase(rank, size, count, 0)
}

/// Reduce-scatter: rank `r` ends with the full reduction of chunk `r`.
pub(super) fn reduce_scatter(rank: usize, size: usize, count: usize) -> Vec<Step> {
    reduce_scatter_phase(rank, size, count, 1)
}

/// `p - 1` steps: step `s` sends chunk `rank - s - shift` and reduces into chunk
/// `rank - s - shift - 1`, so `rank` ends owning the reduction of chunk `rank + 1 - shift`.
fn reduce_scatter_phase(rank: usize, size: usize, count: usize, shift: isize) -> Vec<Step> {
    let (next, prev) = (wrap(rank, 1, size), wrap(rank, -1, size));
    (0..size as isize - 1)
        .map(|s| {
            let out = chunk_span(count, size, wrap(rank, -s - shift, size));
            let inc = chunk_span(count, size, wrap(rank, -s - shift - 1, size));
            step(vec![send(next, out)], vec![reduce(prev, inc)])
        })
        .collect()
}

/// `p - 1` steps for a rank that starts with chunk `rank + own`: step `s` sends chunk
/// `rank + own - s` and copies in chunk `rank + own - s - 1`.
fn all_gather_phase(rank: usize, size: usize, count: usize, own: isize) -> Vec<Step> {
    let (next, prev) = (wrap(rank, 1, size), wrap(rank, -1, size));
    (0..size as isize - 1)
        .map(|s| {
            let out = chunk_span(count, size, wrap(rank, own - s, size));
            let inc = chunk_span(count, size, wrap(rank, own - s - 1, size));
            step(vec![send(next, out)], vec![copy(prev, inc)])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_reduce_talks_only_to_ring_neighbours() {
        for size in 2..9 {
            for rank in 0..size {
                let steps = all_reduce(rank, size, 100);
                assert_eq!(steps.len(), 2 * (size - 1));
                for s in &steps {
                    assert_eq!(s.sends.len(), 1);
                    assert_eq!(s.recvs.len(), 1);
                    assert_eq!(s.sends[0].peer, (rank + 1) % size);
                    assert_eq!(s.recvs[0].peer, (rank + size - 1) % size);
                }
            }
        }
    }

    #[test]
    fn a_pair_all_reduce_in_pieces_sums_every_element_on_both_ranks() {
        use crate::reduce::ReduceOp;
        use crate::schedule::{simulate::run_schedules, Schedule};
        for count in 0..40 {
            for (elements, reduced_first) in (1..6).flat_map(|e| [(e, false), (e, true)]) {
                let piece = PairPieces {
                    elements,
                    reduced_first,
                };
                let schedules: Vec<Schedule> = (0..2)
                    .map(|rank| Schedule {
                        buf_len: count,
                        steps: pair_all_reduce(rank, count, piece),
                    })
                    .collect();
                let inputs: Vec<Vec<i64>> = (0..2)
                    .map(|r| (0..count as i64).map(|i| i * 10 + r + 1).collect())
                    .collect();
                let out = run_schedules(&schedules, ReduceOp::Sum, inputs.clone())
                    .unwrap_or_else(|e| panic!("count {count}, {piece:?}: {e}"));
                let want: Vec<i64> = (0..count).map(|i| inputs[0][i] + inputs[1][i]).collect();
                assert_eq!(out, vec![want.clone(), want], "count {count}, {piece:?}");
            }
        }
    }

    #[test]
    fn a_pair_all_reduce_of_one_piece_a_half_is_the_rings_two_steps() {
        for rank in 0..2 {
            for reduced_first in [false, true] {
                let pieces = |elements| PairPieces {
                    elements,
                    reduced_first,
                };
                let whole = pair_all_reduce(rank, 100, pieces(50));
                let mut ring = reduce_scatter_phase(rank, 2, 100, 0);
                ring.extend(all_gather_phase(rank, 2, 100, 1));
                assert_eq!(whole, ring);
                assert_eq!(pair_all_reduce(rank, 100, pieces(10)).len(), 6);
            }
        }
    }

    #[test]
    fn a_large_pair_all_reduce_sends_each_reduced_piece_back_first_in_smaller_pieces() {
        let count = LARGE_PAIR + 2;
        assert_eq!(PairPieces::for_count(LARGE_PAIR), PAIR_PIECE);
        assert_eq!(PairPieces::for_count(count), LARGE_PAIR_PIECE);
        for rank in 0..2 {
            let steps = all_reduce(rank, 2, count);
            let half = count / 2;
            assert_eq!(steps.len(), half.div_ceil(LARGE_PAIR_PIECE.elements) + 1);
            // Step 1 first sends back piece 0 of the kept half, reduced in step 0, and copies in
            // the peer's piece 0 of the other; then sends and reduces piece 1.
            let (kept, given) = (chunk_span(count, 2, 1 - rank), chunk_span(count, 2, rank));
            let first = &steps[1];
            assert_eq!(first.sends[0].span.start, kept.start);
            assert_eq!(first.recvs[0].span.start, given.start);
            assert!(first.sends[1].span.start > given.start);
            assert!(first
                .sends
                .iter()
                .all(|s| s.span.len() <= LARGE_PAIR_PIECE.elements));
            // Up to LARGE_PAIR the reduce comes first.
            let small = all_reduce(rank, 2, LARGE_PAIR);
            assert_eq!(
                small[1].sends[0].span.start,
                chunk_span(LARGE_PAIR, 2, rank).start + PAIR_PIECE.elements
            );
        }
    }

    #[test]
    fn reduce_scatter_ends_on_own_chunk() {
        let steps = reduce_scatter(2, 5, 10);
        assert_eq!(steps.last().map(|s| s.recvs[0].span.clone()), Some(4..6));
    }
}
