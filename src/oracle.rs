//! Sequential reference implementations of the collectives, for tests.
//!
//! Each function takes what every rank passes (`inputs[r]` is rank `r`'s input, so the world size
//! is `inputs.len()`) and returns what the ranks get back, computed in the plainest way: ranks are
//! folded in order `0, 1, ..., p - 1` with [`Element::combine`], and [`ReduceOp::Avg`] is that sum
//! divided once by `p` with [`Element::div_count`]. Chunks are [`chunk_span`]s of the total count.
//! Inputs are assumed to be well formed (equal lengths where the collective requires them).

use crate::dtype::Element;
use crate::reduce::ReduceOp;
use crate::schedule::chunk_span;

/// The reduction of every rank's buffer: what every rank holds after an all-reduce.
pub fn all_reduce<T: Element>(inputs: &[Vec<T>], op: ReduceOp) -> Vec<T> {
    let Some((first, rest)) = inputs.split_first() else {
        return Vec::new();
    };
    let mut acc = first.clone();
    for input in rest {
        for (a, b) in acc.iter_mut().zip(input) {
            *a = T::combine(op, *a, *b);
        }
    }
    if op == ReduceOp::Avg {
        for a in &mut acc {
            *a = a.div_count(inputs.len());
        }
    }
    acc
}

/// What the root holds after a reduce (the other ranks get nothing).
pub fn reduce<T: Element>(inputs: &[Vec<T>], op: ReduceOp) -> Vec<T> {
    all_reduce(inputs, op)
}

/// What every rank holds after a broadcast from `root`: the root's buffer.
pub fn broadcast<T: Element>(inputs: &[Vec<T>], root: usize) -> Vec<T> {
    inputs.get(root).cloned().unwrap_or_default()
}

/// What every rank holds after an all-gather: every rank's chunk, in rank order. `inputs[i]` is
/// rank `i`'s chunk (`chunk_span(n, p, i)` of the total `n`).
pub fn all_gather<T: Element>(inputs: &[Vec<T>]) -> Vec<T> {
    inputs.concat()
}

/// What each rank holds after a reduce-scatter: rank `i` gets chunk `i` of the reduction.
pub fn reduce_scatter<T: Element>(inputs: &[Vec<T>], op: ReduceOp) -> Vec<Vec<T>> {
    let total = all_reduce(inputs, op);
    split(&total, inputs.len())
}

/// What each rank of `size` gets from a scatter of `root_input`: rank `i` gets chunk `i`.
pub fn scatter<T: Element>(root_input: &[T], size: usize) -> Vec<Vec<T>> {
    split(root_input, size)
}

/// What the root holds after a gather: every rank's chunk, in rank order (the others get nothing).
pub fn gather<T: Element>(inputs: &[Vec<T>]) -> Vec<T> {
    inputs.concat()
}

/// What each rank holds after an all-to-all: rank `j` gets, for each `i` in order, chunk `j` of
/// `inputs[i]`.
pub fn all_to_all<T: Element>(inputs: &[Vec<T>]) -> Vec<Vec<T>> {
    let size = inputs.len();
    (0..size)
        .map(|j| {
            inputs
                .iter()
                .flat_map(|input| input[chunk_span(input.len(), size, j)].iter().copied())
                .collect()
        })
        .collect()
}

/// `values` cut into `parts` chunks.
fn split<T: Element>(values: &[T], parts: usize) -> Vec<Vec<T>> {
    (0..parts)
        .map(|i| values[chunk_span(values.len(), parts, i)].to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_cases_by_hand() {
        let inputs = vec![vec![1i32, 5, -3], vec![4, 2, 7]];
        assert_eq!(all_reduce(&inputs, ReduceOp::Sum), vec![5, 7, 4]);
        assert_eq!(all_reduce(&inputs, ReduceOp::Max), vec![4, 5, 7]);
        assert_eq!(all_reduce(&inputs, ReduceOp::Avg), vec![2, 3, 2]);
        assert_eq!(
            reduce_scatter(&inputs, ReduceOp::Sum),
            vec![vec![5, 7], vec![4]]
        );
        assert_eq!(broadcast(&inputs, 1), vec![4, 2, 7]);
        assert_eq!(
            scatter(&[1u8, 2, 3, 4, 5], 2),
            vec![vec![1, 2, 3], vec![4, 5]]
        );
        assert_eq!(all_gather(&[vec![1u8, 2], vec![3]]), vec![1, 2, 3]);
        assert_eq!(all_to_all(&inputs), vec![vec![1, 5, 4, 2], vec![-3, 7]]);
    }
}
