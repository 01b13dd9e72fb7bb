//! Pipelined broadcast: a chain `root -> root + 1 -> ... -> root - 1` in one step. Every rank but
//! the root receives the whole buffer from its predecessor and forwards it to its successor while
//! it arrives, so a large buffer streams through the chain instead of hopping whole.

use super::{copy, forward, send, step, wrap, Step};

/// Broadcast of `count` elements from `root`.
pub(super) fn broadcast(rank: usize, size: usize, count: usize, root: usize) -> Vec<Step> {
    let position = wrap(rank, -(root as isize), size);
    let successor = (position + 1 < size).then(|| wrap(rank, 1, size));
    let predecessor = wrap(rank, -1, size);
    let only = if position == 0 {
        step(
            successor.map(|s| send(s, 0..count)).into_iter().collect(),
            vec![],
        )
    } else {
        step(
            successor
                .map(|s| forward(s, 0..count))
                .into_iter()
                .collect(),
            vec![copy(predecessor, 0..count)],
        )
    };
    vec![only]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_from_root_two_of_four() {
        let root = broadcast(2, 4, 8, 2);
        assert_eq!(root[0].sends[0].peer, 3);
        assert!(!root[0].sends[0].forward);
        let middle = broadcast(0, 4, 8, 2);
        assert_eq!(middle[0].recvs[0].peer, 3);
        assert_eq!(middle[0].sends[0].peer, 1);
        assert!(middle[0].sends[0].forward);
        let last = broadcast(1, 4, 8, 2);
        assert!(last[0].sends.is_empty());
        assert_eq!(last[0].recvs[0].peer, 0);
    }
}
