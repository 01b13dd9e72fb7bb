//! Ring algorithms: every step sends one chunk to `rank + 1` and receives one from `rank - 1`.
//!
//! With `p` ranks the buffer is split into `p` chunks by [`chunk_span`]; each step moves at most
//! `ceil(count / p)` elements per rank, so the ring is bandwidth-optimal.

use super::{chunk_span, copy, reduce, send, step, wrap, Step};

/// All-reduce: a reduce-scatter (`p - 1` steps) that leaves the full reduction of chunk
/// `rank + 1` on `rank`, then an all-gather (`p - 1` steps) that passes the finished chunks round.
/// Each element is reduced on one rank only and then copied, so all ranks agree bit for bit.
pub(super) fn all_reduce(rank: usize, size: usize, count: usize) -> Vec<Step> {
    let mut steps = reduce_scatter_phase(rank, size, count, 0);
    steps.extend(all_gather_phase(rank, size, count, 1));
    steps
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
    fn reduce_scatter_ends_on_own_chunk() {
        let steps = reduce_scatter(2, 5, 10);
        assert_eq!(steps.last().map(|s| s.recvs[0].span.clone()), Some(4..6));
    }
}
