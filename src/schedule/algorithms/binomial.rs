//! Binomial trees over virtual ranks `v = (rank - root) mod p`: the parent of `v > 0` is `v`
//! with its lowest set bit cleared, and `v`'s subtree is the virtual ranks `v..v + lowbit(v)`
//! (clipped to `p`; the root's subtree is everything). Each transfer to or from a child is its
//! own step, the largest subtree first on the way down and the smallest first on the way up.
//!
//! Scatter and gather move a subtree's chunks. A subtree is a contiguous run of virtual ranks, so
//! its chunks are contiguous in the buffer unless the real ranks wrap past `p - 1`; then it
//! travels as two messages (decided by ranks alone, never by `count`).

use super::{chunks, copy, reduce as reduce_into, send, step, Span, Step};

/// The virtual-rank view of a binomial tree rooted at `root`.
#[derive(Debug, Clone, Copy)]
struct Tree {
    size: usize,
    root: usize,
}

impl Tree {
    fn real(self, v: usize) -> usize {
        (v + self.root) % self.size
    }

    fn virtual_rank(self, rank: usize) -> usize {
        (rank + self.size - self.root) % self.size
    }

    /// One past the largest child offset of `v`: `lowbit(v)`, or a power of two `>= p` for the
    /// root.
    fn reach(self, v: usize) -> usize {
        if v == 0 {
            self.size.next_power_of_two()
        } else {
            1 << v.trailing_zeros()
        }
    }

    /// The parent of `v > 0`.
    fn parent(self, v: usize) -> usize {
        v - (1 << v.trailing_zeros())
    }

    /// The children of `v`, nearest (smallest subtree) first.
    fn children(self, v: usize) -> impl DoubleEndedIterator<Item = usize> {
        let reach = self.reach(v);
        let size = self.size;
        (0..reach.trailing_zeros())
            .map(move |bit| v + (1 << bit))
            .filter(move |&c| c < size)
    }

    /// The virtual ranks in `v`'s subtree.
    fn subtree(self, v: usize) -> (usize, usize) {
        (v, (v + self.reach(v)).min(self.size))
    }

    /// The buffer spans of the chunks of `v`'s subtree: one, or two when its real ranks wrap.
    fn subtree_spans(self, count: usize, v: usize) -> Vec<Span> {
        let (lo, hi) = self.subtree(v);
        let (start, end) = (lo + self.root, hi + self.root);
        let p = self.size;
        if end <= p {
            vec![chunks(count, p, start, end)]
        } else if start >= p {
            vec![chunks(count, p, start - p, end - p)]
        } else {
            vec![chunks(count, p, start, p), chunks(count, p, 0, end - p)]
        }
    }
}

/// Broadcast of `count` elements from `root`.
pub(super) fn broadcast(rank: usize, size: usize, count: usize, root: usize) -> Vec<Step> {
    let tree = Tree { size, root };
    let v = tree.virtual_rank(rank);
    let mut steps = Vec::new();
    if v != 0 {
        steps.push(step(
            vec![],
            vec![copy(tree.real(tree.parent(v)), 0..count)],
        ));
    }
    for c in tree.children(v).rev() {
        steps.push(step(vec![send(tree.real(c), 0..count)], vec![]));
    }
    steps
}

/// Reduction of `count` elements to `root`.
pub(super) fn reduce(rank: usize, size: usize, count: usize, root: usize) -> Vec<Step> {
    let tree = Tree { size, root };
    let v = tree.virtual_rank(rank);
    let mut steps: Vec<Step> = tree
        .children(v)
        .map(|c| step(vec![], vec![reduce_into(tree.real(c), 0..count)]))
        .collect();
    if v != 0 {
        steps.push(step(
            vec![send(tree.real(tree.parent(v)), 0..count)],
            vec![],
        ));
    }
    steps
}

/// All-reduce as a reduction to rank 0 then a broadcast from it: each element is reduced once.
pub(super) fn all_reduce(rank: usize, size: usize, count: usize) -> Vec<Step> {
    let mut steps = reduce(rank, size, count, 0);
    steps.extend(broadcast(rank, size, count, 0));
    steps
}

/// Scatter of `count` elements from `root`: each rank receives its subtree's chunks and passes
/// each child's share on, largest subtree first.
pub(super) fn scatter(rank: usize, size: usize, count: usize, root: usize) -> Vec<Step> {
    let tree = Tree { size, root };
    let v = tree.virtual_rank(rank);
    let mut steps = Vec::new();
    if v != 0 {
        let parent = tree.real(tree.parent(v));
        let recvs = tree
            .subtree_spans(count, v)
            .into_iter()
            .map(|span| copy(parent, span))
            .collect();
        steps.push(step(vec![], recvs));
    }
    for c in tree.children(v).rev() {
        let sends = tree
            .subtree_spans(count, c)
            .into_iter()
            .map(|span| send(tree.real(c), span))
            .collect();
        steps.push(step(sends, vec![]));
    }
    steps
}

/// Gather of `count` elements to `root`: each rank collects its children's subtrees, smallest
/// first, then sends its whole subtree to its parent.
pub(super) fn gather(rank: usize, size: usize, count: usize, root: usize) -> Vec<Step> {
    let tree = Tree { size, root };
    let v = tree.virtual_rank(rank);
    let mut steps: Vec<Step> = tree
        .children(v)
        .map(|c| {
            let recvs = tree
                .subtree_spans(count, c)
                .into_iter()
                .map(|span| copy(tree.real(c), span))
                .collect();
            step(vec![], recvs)
        })
        .collect();
    if v != 0 {
        let parent = tree.real(tree.parent(v));
        let sends = tree
            .subtree_spans(count, v)
            .into_iter()
            .map(|span| send(parent, span))
            .collect();
        steps.push(step(sends, vec![]));
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_shape_on_six_ranks() {
        let t = Tree { size: 6, root: 0 };
        assert_eq!(t.children(0).collect::<Vec<_>>(), vec![1, 2, 4]);
        assert_eq!(t.children(4).collect::<Vec<_>>(), vec![5]);
        assert_eq!(t.children(2).collect::<Vec<_>>(), vec![3]);
        assert_eq!(t.parent(6 - 1), 4);
        assert_eq!(t.subtree(4), (4, 6));
    }

    #[test]
    fn wrapped_subtree_travels_as_two_messages() {
        // Root 3 of 6: virtual 2..4 are real 5 and 0, which wrap.
        let t = Tree { size: 6, root: 3 };
        assert_eq!(t.subtree_spans(6, 2), vec![5..6, 0..1]);
        // Root 3 of 5: virtual 2..4 are real 0..2, wholly past the wrap: one message.
        let t = Tree { size: 5, root: 3 };
        assert_eq!(t.subtree_spans(10, 2), vec![0..4]);
        // Root 4 of 6: virtual 1 is real 5.
        let t = Tree { size: 6, root: 4 };
        assert_eq!(t.subtree_spans(12, 1), vec![10..12]);
    }
}
