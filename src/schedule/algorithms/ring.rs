//! Ring algorithms: every step sends one chunk to `rank + 1` and receives one from `rank - 1`.
//!
//! With `p` ranks the buffer is split into `p` chunks by [`chunk_span`]; each step moves at most
//! `ceil(count / p)` elements per rank, so the ring is bandwidth-optimal.

use super::{chunk_span, copy, reduce, send, step, wrap, Step};

/// All-reduce: a reduce-scatter (`p - 1` steps) that leaves the full reduction of chunk
/// `rank + 1` on `rank`, then an all-gather (`p - 1` steps) that passes the finished chunks round.
/// Each element is reduced on one rank only and then copied, so all ranks agree bit for bit.
///
/// Two ranks run [`pair_all_reduce`] instead, in pieces of [`PAIR_PIECE`] elements.
pub(super) fn all_reduce(rank: usize, size: usize, count: usize) -> Vec<Step> {
    if size == 2 {
        return pair_all_reduce(rank, count, PAIR_PIECE);
    }
    let mut steps = reduce_scatter_phase(rank, size, count, 0);
    steps.extend(all_gather_phase(rank, size, count, 1));
    steps
}

/// The most elements of one piece of [`pair_all_reduce`]: 512 KiB of `f32`. Measured on the
/// 2-core AMD VM (2 ranks, 1-64 MiB, pieces of 8-512 KiB of `f32` tried, `results/pair-pieces/`):
/// pieces of 256-512 KiB took 0.69-0.80 of the time of whole halves from 4 MiB up; at 1 MiB
/// (one piece of 512 KiB a half) smaller pieces were slower.
const PAIR_PIECE: usize = 128 << 10;

/// All-reduce of 2 ranks, each half of the buffer in pieces of at most `piece` elements, so that
/// a reduced piece goes back to the peer while it is in the cache: step `c` sends piece `c` of
/// the half the peer keeps and reduces piece `c` of the half this rank keeps into its buffer,
/// and sends piece `c - 1` of that (reduced in the step before) and copies in piece `c - 1` of the
/// other half (as the peer reduced it). With one piece a half it is the ring's two steps. Each
/// element is reduced on one rank only (rank 0 keeps the second half, as in the ring).
///
/// The number of steps grows with `count`, against the rule that a schedule's structure does
/// not depend on it: ranks that disagree about the count still meet in step 0, where each
/// receives from the other and checks its header.
fn pair_all_reduce(rank: usize, count: usize, piece: usize) -> Vec<Step> {
    let peer = 1 - rank;
    let (keep, give) = (chunk_span(count, 2, peer), chunk_span(count, 2, rank));
    let pieces = keep.len().max(give.len()).div_ceil(piece.max(1)).max(1);
    let piece = |half: &std::ops::Range<usize>, c: usize| {
        let p = chunk_span(half.len(), pieces, c);
        half.start + p.start..half.start + p.end
    };
    (0..=pieces)
        .map(|c| {
            let (mut sends, mut recvs) = (Vec::new(), Vec::new());
            if c < pieces {
                sends.push(send(peer, piece(&give, c)));
                recvs.push(reduce(peer, piece(&keep, c)));
            }
            if c > 0 {
                sends.push(send(peer, piece(&keep, c - 1)));
                recvs.push(copy(peer, piece(&give, c - 1)));
            }
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
            for piece in 1..6 {
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
                    .unwrap_or_else(|e| panic!("count {count}, piece {piece}: {e}"));
                let want: Vec<i64> = (0..count).map(|i| inputs[0][i] + inputs[1][i]).collect();
                assert_eq!(
                    out,
                    vec![want.clone(), want],
                    "count {count}, piece {piece}"
                );
            }
        }
    }

    #[test]
    fn a_pair_all_reduce_of_one_piece_a_half_is_the_rings_two_steps() {
        for rank in 0..2 {
            let whole = pair_all_reduce(rank, 100, 50);
            let mut ring = reduce_scatter_phase(rank, 2, 100, 0);
            ring.extend(all_gather_phase(rank, 2, 100, 1));
            assert_eq!(whole, ring);
            assert_eq!(pair_all_reduce(rank, 100, 10).len(), 6);
        }
    }

    #[test]
    fn reduce_scatter_ends_on_own_chunk() {
        let steps = reduce_scatter(2, 5, 10);
        assert_eq!(steps.last().map(|s| s.recvs[0].span.clone()), Some(4..6));
    }
}
