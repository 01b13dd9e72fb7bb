//! Pairwise-exchange all-to-all: in step `k = 1..p`, rank `r` sends its input chunk for rank
//! `r + k` and receives the block from rank `r - k`. The caller copies the rank's own block.

use super::{chunk_span, copy, send, step, wrap, Step};

/// All-to-all of `count` input elements per rank, laid out as [`Collective::layout`] says: the
/// input at `0..count`, then `size` output blocks of this rank's chunk length.
///
/// [`Collective::layout`]: crate::schedule::Collective::layout
pub(super) fn all_to_all(rank: usize, size: usize, count: usize) -> Vec<Step> {
    let block = chunk_span(count, size, rank).len();
    (1..size as isize)
        .map(|k| {
            let to = wrap(rank, k, size);
            let from = wrap(rank, -k, size);
            let out = chunk_span(count, size, to);
            let inc = count + from * block..count + (from + 1) * block;
            step(vec![send(to, out)], vec![copy(from, inc)])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_one_of_three_ranks() {
        // count 7 over 3: chunks 0..3, 3..5, 5..7; rank 1's blocks are 2 long at 7..13.
        let s = all_to_all(1, 3, 7);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].sends[0].peer, s[0].sends[0].span.clone()), (2, 5..7));
        assert_eq!((s[0].recvs[0].peer, s[0].recvs[0].span.clone()), (0, 7..9));
    }
}
