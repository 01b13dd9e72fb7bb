//! Which host each rank of a group is on: the topology hierarchical schedules are built over.
//!
//! Pure data, computed the same way on every rank from facts every rank has (the host keys all
//! ranks published when the group formed), so every rank derives the same hosts, leaders and
//! local orders without communicating.

/// The ranks of a group partitioned into hosts. Hosts are numbered in order of their lowest rank;
/// each host's members are in increasing rank order, and its first member is its *leader*.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    /// The host index of each rank.
    host: Vec<usize>,
    /// The ranks of each host, increasing.
    members: Vec<Vec<usize>>,
}

impl Hosts {
    /// Hosts from one key per rank (rank `r` is on the host of `keys[r]`): equal keys, same host.
    pub fn from_keys<K: PartialEq>(keys: &[K]) -> Hosts {
        let mut firsts: Vec<&K> = Vec::new();
        let mut host = Vec::with_capacity(keys.len());
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (rank, key) in keys.iter().enumerate() {
            let h = match firsts.iter().position(|k| *k == key) {
                Some(h) => h,
                None => {
                    firsts.push(key);
                    members.push(Vec::new());
                    firsts.len() - 1
                }
            };
            host.push(h);
            members[h].push(rank);
        }
        Hosts { host, members }
    }

    /// Consecutive blocks of ranks: the first `counts[0]` ranks on host 0, the next `counts[1]` on
    /// host 1, and so on (hosts of 0 ranks are skipped).
    pub fn blocks(counts: &[usize]) -> Hosts {
        let keys: Vec<usize> = counts
            .iter()
            .enumerate()
            .flat_map(|(h, &n)| std::iter::repeat(h).take(n))
            .collect();
        Hosts::from_keys(&keys)
    }

    /// All `size` ranks on one host.
    pub fn single(size: usize) -> Hosts {
        Hosts::blocks(&[size])
    }

    /// Ranks in the group.
    pub fn size(&self) -> usize {
        self.host.len()
    }

    /// Number of hosts.
    pub fn count(&self) -> usize {
        self.members.len()
    }

    /// The host of `rank`.
    pub fn host_of(&self, rank: usize) -> usize {
        self.host[rank]
    }

    /// The ranks of host `h`, increasing.
    pub fn members(&self, h: usize) -> &[usize] {
        &self.members[h]
    }

    /// The largest number of ranks on one host.
    pub fn max_local(&self) -> usize {
        self.members.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// True when a hierarchical schedule differs from a flat one: at least two hosts and at least
    /// one with two ranks or more.
    pub fn is_hierarchical(&self) -> bool {
        self.count() >= 2 && self.max_local() >= 2
    }

    /// True when every host's ranks are one consecutive run (hosts filled in blocks, as launchers
    /// place them by default).
    pub fn contiguous(&self) -> bool {
        self.members
            .iter()
            .all(|m| m.windows(2).all(|w| w[1] == w[0] + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::Hosts;

    #[test]
    fn hosts_are_numbered_by_lowest_rank_and_members_sorted() {
        let h = Hosts::from_keys(&["b", "a", "b", "c", "a"]);
        assert_eq!(h.count(), 3);
        assert_eq!(h.members(0), &[0, 2]);
        assert_eq!(h.members(1), &[1, 4]);
        assert_eq!(h.members(2), &[3]);
        assert_eq!(h.host_of(4), 1);
        assert!(h.is_hierarchical());
        assert!(!h.contiguous());
    }

    #[test]
    fn blocks_single_and_degenerate_layouts() {
        let h = Hosts::blocks(&[3, 0, 1, 2]);
        assert_eq!(h.count(), 3);
        assert_eq!(h.members(2), &[4, 5]);
        assert!(h.contiguous() && h.is_hierarchical());
        assert!(!Hosts::single(5).is_hierarchical());
        assert!(!Hosts::blocks(&[1, 1, 1]).is_hierarchical());
        assert_eq!(Hosts::single(0).count(), 0);
    }
}
