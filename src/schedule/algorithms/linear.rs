//! Linear scatter, gather and all-to-all: a rank exchanges each peer's chunk with it directly, all
//! in one step.

use super::{chunk_span, copy, pairwise, send, step, wrap, Step};

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

/// All-to-all of `count` input elements per rank: [`pairwise::all_to_all`]'s steps merged into
/// one, so a rank moves whichever peer's block is ready instead of waiting for the peers in
/// turn. The k-th send goes to `rank + k` and the k-th receive comes from `rank - k`, so the
/// ranks start on different peers.
pub(super) fn all_to_all(rank: usize, size: usize, count: usize) -> Vec<Step> {
    let rounds = pairwise::all_to_all(rank, size, count);
    if rounds.is_empty() {
        return rounds;
    }
    let mut one = Step::default();
    for round in rounds {
        one.sends.extend(round.sends);
        one.recvs.extend(round.recvs);
    }
    vec![one]
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

    #[test]
    fn all_to_all_is_one_step_with_every_peer() {
        // count 7 over 3: chunks 0..3, 3..5, 5..7; rank 1's blocks are 2 long at 7..13.
        let s = all_to_all(1, 3, 7);
        assert_eq!(s.len(), 1);
        let sends: Vec<_> = s[0]
            .sends
            .iter()
            .map(|m| (m.peer, m.span.clone()))
            .collect();
        let recvs: Vec<_> = s[0]
            .recvs
            .iter()
            .map(|m| (m.peer, m.span.clone()))
            .collect();
        assert_eq!(sends, vec![(2, 5..7), (0, 0..3)]);
        assert_eq!(recvs, vec![(0, 7..9), (2, 11..13)]);
        assert!(all_to_all(0, 1, 7).is_empty());
    }
}
