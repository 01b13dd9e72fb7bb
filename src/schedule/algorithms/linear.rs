//! Linear scatter and gather: the root exchanges each rank's chunk with it directly, all in one
//! step.

use super::{chunk_span, copy, send, step, wrap, Step};

/// Scatter of `count` elements from `root`: one send per other rank, in ring order from the root.
pub(super) fn scatter(rank: usize, size: usize, count: usize, root: usize) -> Vec<Step> {
    if rank == root {
        let sends = others(root, size)
            .map(|peer| send(peer, chunk_span(count, size, peer)))
            .collect();
        vec![step(sends, vec![])]
    } else {
        vec![step(
            vec![],
            vec![copy(root, chunk_span(count, size, rank))],
        )]
    }
}

/// Gather of `count` elements to `root`: one receive per other rank, in ring order from the root.
pub(super) fn gather(rank: usize, size: usize, count: usize, root: usize) -> Vec<Step> {
    if rank == root {
        let recvs = others(root, size)
            .map(|peer| copy(peer, chunk_span(count, size, peer)))
            .collect();
        vec![step(vec![], recvs)]
    } else {
        vec![step(
            vec![send(root, chunk_span(count, size, rank))],
            vec![],
        )]
    }
}

/// Every rank but `root`, starting after it.
fn others(root: usize, size: usize) -> impl Iterator<Item = usize> {
    (1..size as isize).map(move |k| wrap(root, k, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_talks_to_everyone_else() {
        let s = scatter(1, 3, 6, 1);
        let peers: Vec<_> = s[0]
            .sends
            .iter()
            .map(|m| (m.peer, m.span.clone()))
            .collect();
        assert_eq!(peers, vec![(2, 4..6), (0, 0..2)]);
        let g = gather(2, 3, 6, 1);
        assert_eq!(g[0].sends[0].span, 4..6);
    }
}
