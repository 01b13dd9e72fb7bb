//! The fold that lets power-of-two algorithms run on any world size.
//!
//! With `pow` the largest power of two `<= p` and `rem = p - pow`, the first `2 * rem` ranks pair
//! up: each even one sends its whole buffer to its odd neighbour, which reduces it in, and sits out
//! until the survivor copies the result back. The `pow` survivors get virtual ranks `0..pow`.

use super::{copy, reduce, send, step, Step};

/// How a world of `size` ranks folds onto a power of two.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fold {
    /// The largest power of two `<= size`: the number of survivors.
    pub pow: usize,
    /// `size - pow`: the number of ranks folded away.
    rem: usize,
}

impl Fold {
    /// The fold of a world of `size >= 1` ranks.
    pub fn new(size: usize) -> Fold {
        let pow = if size == 0 { 1 } else { 1 << size.ilog2() };
        Fold {
            pow,
            rem: size.saturating_sub(pow),
        }
    }

    /// The virtual rank of a survivor, `None` for a rank that is folded away.
    pub fn virtual_rank(self, rank: usize) -> Option<usize> {
        if rank >= 2 * self.rem {
            Some(rank - self.rem)
        } else if rank % 2 == 1 {
            Some(rank / 2)
        } else {
            None
        }
    }

    /// The real rank of survivor `v`.
    pub fn real(self, v: usize) -> usize {
        if v < self.rem {
            2 * v + 1
        } else {
            v + self.rem
        }
    }

    /// The step that folds `rank`'s whole buffer of `count` elements in, if it takes part.
    pub fn fold_in(self, rank: usize, count: usize) -> Option<Step> {
        if rank >= 2 * self.rem {
            None
        } else if rank % 2 == 0 {
            Some(step(vec![send(rank + 1, 0..count)], vec![]))
        } else {
            Some(step(vec![], vec![reduce(rank - 1, 0..count)]))
        }
    }

    /// The step that copies the result back to a folded rank, if `rank` takes part.
    pub fn fold_out(self, rank: usize, count: usize) -> Option<Step> {
        if rank >= 2 * self.rem {
            None
        } else if rank % 2 == 0 {
            Some(step(vec![], vec![copy(rank + 1, 0..count)]))
        } else {
            Some(step(vec![send(rank - 1, 0..count)], vec![]))
        }
    }

    /// A whole schedule: fold in, `middle(v)` for survivors, fold out.
    pub fn wrap(
        self,
        rank: usize,
        count: usize,
        middle: impl FnOnce(usize) -> Vec<Step>,
    ) -> Vec<Step> {
        let mut steps: Vec<Step> = self.fold_in(rank, count).into_iter().collect();
        if let Some(v) = self.virtual_rank(rank) {
            steps.extend(middle(v));
        }
        steps.extend(self.fold_out(rank, count));
        steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_and_real_ranks_are_inverse() {
        for size in 1..40 {
            let f = Fold::new(size);
            assert!(f.pow <= size && 2 * f.pow > size);
            let survivors: Vec<_> = (0..size).filter_map(|r| f.virtual_rank(r)).collect();
            assert_eq!(survivors, (0..f.pow).collect::<Vec<_>>());
            for r in 0..size {
                if let Some(v) = f.virtual_rank(r) {
                    assert_eq!(f.real(v), r);
                }
            }
        }
    }
}
