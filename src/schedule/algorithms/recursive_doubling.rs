//! Recursive doubling all-reduce: `log2(pow)` full-buffer exchanges between the survivors of a
//! [`Fold`], plus one step to fold in and one to fold out when the world is not a power of two.
//!
//! In each exchange both partners send their whole buffer (a plain send: the values at the start
//! of the step) and reduce the partner's into it. Both compute `op(mine, theirs)` over the same
//! two operands, so with commutative ops every rank ends with bitwise-identical values.

use super::fold::Fold;
use super::{reduce, send, step, Step};

/// The steps of `rank` of `size` for an all-reduce of `count` elements.
pub(super) fn all_reduce(rank: usize, size: usize, count: usize) -> Vec<Step> {
    let fold = Fold::new(size);
    fold.wrap(rank, count, |v| {
        let mut steps = Vec::new();
        let mut mask = 1;
        while mask < fold.pow {
            let partner = fold.real(v ^ mask);
            steps.push(step(
                vec![send(partner, 0..count)],
                vec![reduce(partner, 0..count)],
            ));
            mask <<= 1;
        }
        steps
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_of_two_needs_no_fold() {
        for rank in 0..8 {
            assert_eq!(all_reduce(rank, 8, 5).len(), 3);
        }
    }

    #[test]
    fn folded_ranks_take_two_steps() {
        // size 6: pow 4, rem 2: ranks 0 and 2 fold into 1 and 3.
        assert_eq!(all_reduce(0, 6, 5).len(), 2);
        assert_eq!(all_reduce(1, 6, 5).len(), 4);
        assert_eq!(all_reduce(5, 6, 5).len(), 2);
    }
}
