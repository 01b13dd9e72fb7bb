//! Dissemination barrier: in round `k` every rank sends an empty message to `rank + 2^k` and
//! receives one from `rank - 2^k`; after `ceil(log2 p)` rounds each rank has heard, directly or
//! not, from every other rank since it entered.

use super::{copy, send, step, wrap, Step};

/// The rounds of `rank` of `size`.
pub(super) fn barrier(rank: usize, size: usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut distance = 1;
    while distance < size {
        let d = distance as isize;
        steps.push(step(
            vec![send(wrap(rank, d, size), 0..0)],
            vec![copy(wrap(rank, -d, size), 0..0)],
        ));
        distance *= 2;
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_ceil_log2() {
        assert_eq!(barrier(0, 2).len(), 1);
        assert_eq!(barrier(3, 5).len(), 3);
        assert_eq!(barrier(3, 8).len(), 3);
        assert_eq!(barrier(0, 9).len(), 4);
    }
}
