//! Rabenseifner all-reduce: after a [`Fold`], a reduce-scatter by recursive halving over `pow`
//! chunks (survivor `v` ends owning the reduction of chunk `v`), then an all-gather by recursive
//! doubling, then the fold out. Each element is reduced on one rank and copied to the others.

use super::fold::Fold;
use super::{chunks, copy, reduce, send, step, Step};

/// The steps of `rank` of `size` for an all-reduce of `count` elements.
pub(super) fn all_reduce(rank: usize, size: usize, count: usize) -> Vec<Step> {
    let fold = Fold::new(size);
    fold.wrap(rank, count, |v| {
        let pow = fold.pow;
        let mut steps = Vec::new();
        // Recursive halving: the range of chunks still in play halves each step.
        let (mut lo, mut hi) = (0, pow);
        let mut mask = pow / 2;
        while mask > 0 {
            let partner = fold.real(v ^ mask);
            let mid = lo + mask;
            let (keep, give) = if v & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            steps.push(step(
                vec![send(partner, chunks(count, pow, give.0, give.1))],
                vec![reduce(partner, chunks(count, pow, keep.0, keep.1))],
            ));
            (lo, hi) = keep;
            mask /= 2;
        }
        debug_assert_eq!((lo, hi), (v, v + 1));
        // Recursive doubling: the range of finished chunks doubles each step.
        let mut mask = 1;
        while mask < pow {
            let partner = fold.real(v ^ mask);
            let theirs = lo ^ mask;
            steps.push(step(
                vec![send(partner, chunks(count, pow, lo, hi))],
                vec![copy(partner, chunks(count, pow, theirs, theirs + mask))],
            ));
            lo = lo.min(theirs);
            hi = lo + 2 * mask;
            mask <<= 1;
        }
        steps
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halving_then_doubling_on_eight_ranks() {
        let steps = all_reduce(5, 8, 16);
        assert_eq!(steps.len(), 6);
        // First halving step: rank 5 has bit 4 set, keeps the upper half.
        assert_eq!(steps[0].recvs[0].span, 8..16);
        assert_eq!(steps[0].sends[0].span, 0..8);
        // After halving it owns chunk 5 and sends it first.
        assert_eq!(steps[3].sends[0].span, 10..12);
        assert_eq!(steps[5].recvs[0].span, 0..8);
    }
}
