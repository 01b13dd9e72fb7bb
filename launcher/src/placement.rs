//! Where ranks go: a pure function from hosts (each with a number of slots) and a rank count to
//! each rank's host, local rank, local size and node rank. A local job is one host with `n` slots.
//!
//! Ranks fill hosts in order, each host up to its slots (mpirun's `--map-by slot`): with hosts
//! `a:2,b:2` and 3 ranks, a gets ranks 0 and 1, b gets rank 2. Hosts that get no rank get no node
//! rank either: node ranks count only the hosts in use.

/// A host and how many ranks it may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSlots {
    /// The host's name (`localhost` for a local job).
    pub name: String,
    /// The most ranks it may run.
    pub slots: usize,
}

impl HostSlots {
    /// This machine with `slots` slots.
    pub fn local(slots: usize) -> HostSlots {
        HostSlots {
            name: "localhost".into(),
            slots,
        }
    }
}

/// Where one rank runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The rank, `0..n`.
    pub rank: usize,
    /// Index of its host in the list given to [`place`].
    pub host: usize,
    /// Its index among the ranks on its host.
    pub local_rank: usize,
    /// How many ranks its host runs.
    pub local_size: usize,
    /// Index of its host among the hosts that run ranks.
    pub node_rank: usize,
}

/// Why ranks cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// Zero ranks were asked for.
    #[error("a job needs at least one rank")]
    NoRanks,
    /// The hosts have fewer slots than ranks.
    #[error("{ranks} ranks do not fit in the {slots} slots of {hosts} host(s); add hosts or slots, or lower -n")]
    NotEnoughSlots {
        /// Ranks asked for.
        ranks: usize,
        /// Slots available in total.
        slots: usize,
        /// Hosts given.
        hosts: usize,
    },
}

/// Places `n` ranks on `hosts`, filling each host's slots in order. The result is indexed by
/// rank.
pub fn place(hosts: &[HostSlots], n: usize) -> Result<Vec<Placement>, PlacementError> {
    if n == 0 {
        return Err(PlacementError::NoRanks);
    }
    let slots = hosts
        .iter()
        .fold(0usize, |acc, h| acc.saturating_add(h.slots));
    if slots < n {
        return Err(PlacementError::NotEnoughSlots {
            ranks: n,
            slots,
            hosts: hosts.len(),
        });
    }
    let mut out = Vec::with_capacity(n);
    let mut node_rank = 0;
    for (host, h) in hosts.iter().enumerate() {
        let left = n - out.len();
        let here = h.slots.min(left);
        if here == 0 {
            continue;
        }
        let first = out.len();
        out.extend((0..here).map(|local_rank| Placement {
            rank: first + local_rank,
            host,
            local_rank,
            local_size: here,
            node_rank,
        }));
        node_rank += 1;
        if out.len() == n {
            break;
        }
    }
    Ok(out)
}

/// Places `n` ranks on `hosts` round-robin (`--map-by node`): rank 0 on the first host, rank 1
/// on the second, and so on, skipping hosts whose slots are full. Local and node ranks are as in
/// [`place`] (node ranks count hosts in list order).
pub fn place_round_robin(hosts: &[HostSlots], n: usize) -> Result<Vec<Placement>, PlacementError> {
    // Same checks, and the same answer when everything fits on the first host's turn.
    place(hosts, n)?;
    let mut counts = vec![0usize; hosts.len()];
    let mut host_of = Vec::with_capacity(n);
    while host_of.len() < n {
        for (h, host) in hosts.iter().enumerate() {
            if host_of.len() < n && counts[h] < host.slots {
                counts[h] += 1;
                host_of.push(h);
            }
        }
    }
    let mut node_of = vec![0usize; hosts.len()];
    let mut next = 0;
    for (h, &c) in counts.iter().enumerate() {
        if c > 0 {
            node_of[h] = next;
            next += 1;
        }
    }
    let mut seen = vec![0usize; hosts.len()];
    Ok(host_of
        .iter()
        .enumerate()
        .map(|(rank, &host)| {
            let local_rank = seen[host];
            seen[host] += 1;
            Placement {
                rank,
                host,
                local_rank,
                local_size: counts[host],
                node_rank: node_of[host],
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_deals_ranks_across_hosts_skipping_full_ones() {
        let hs = [
            HostSlots {
                name: "a".into(),
                slots: 1,
            },
            HostSlots {
                name: "b".into(),
                slots: 3,
            },
            HostSlots {
                name: "c".into(),
                slots: 0,
            },
        ];
        let p = place_round_robin(&hs, 4).unwrap();
        let hosts: Vec<usize> = p.iter().map(|x| x.host).collect();
        assert_eq!(hosts, vec![0, 1, 1, 1]);
        assert_eq!(
            p[1],
            Placement {
                rank: 1,
                host: 1,
                local_rank: 0,
                local_size: 3,
                node_rank: 1
            }
        );
        let two = [
            HostSlots {
                name: "a".into(),
                slots: 2,
            },
            HostSlots {
                name: "b".into(),
                slots: 2,
            },
        ];
        let p = place_round_robin(&two, 3).unwrap();
        let shape: Vec<(usize, usize, usize)> = p
            .iter()
            .map(|x| (x.host, x.local_rank, x.local_size))
            .collect();
        assert_eq!(shape, vec![(0, 0, 2), (1, 0, 1), (0, 1, 2)]);
        assert!(place_round_robin(&two, 5).is_err());
    }

    fn hosts(spec: &[usize]) -> Vec<HostSlots> {
        spec.iter()
            .enumerate()
            .map(|(i, &slots)| HostSlots {
                name: format!("h{i}"),
                slots,
            })
            .collect()
    }

    #[test]
    fn local_job_is_one_node() {
        let p = place(&[HostSlots::local(4)], 4).unwrap();
        for (r, pl) in p.iter().enumerate() {
            assert_eq!(
                *pl,
                Placement {
                    rank: r,
                    host: 0,
                    local_rank: r,
                    local_size: 4,
                    node_rank: 0
                }
            );
        }
    }

    #[test]
    fn hosts_fill_in_order_and_unused_hosts_get_no_node_rank() {
        let p = place(&hosts(&[2, 0, 3, 5]), 4).unwrap();
        let got: Vec<_> = p
            .iter()
            .map(|p| (p.rank, p.host, p.local_rank, p.local_size, p.node_rank))
            .collect();
        assert_eq!(
            got,
            [
                (0, 0, 0, 2, 0),
                (1, 0, 1, 2, 0),
                (2, 2, 0, 2, 1),
                (3, 2, 1, 2, 1)
            ]
        );
    }

    #[test]
    fn every_shape_is_consistent() {
        for spec in [&[1usize][..], &[3, 1, 4], &[0, 2, 2, 0, 7], &[5; 5]] {
            let total: usize = spec.iter().sum();
            for n in 1..=total {
                let p = place(&hosts(spec), n).unwrap();
                assert_eq!(p.len(), n);
                for (r, pl) in p.iter().enumerate() {
                    assert_eq!(pl.rank, r);
                    assert!(pl.local_rank < pl.local_size);
                    assert!(pl.local_size <= spec[pl.host]);
                    let same: Vec<_> = p.iter().filter(|q| q.host == pl.host).collect();
                    assert_eq!(same.len(), pl.local_size);
                    assert!(same.iter().all(|q| q.node_rank == pl.node_rank));
                }
                // Node ranks are 0.. without gaps, increasing with the rank.
                assert_eq!(p[0].node_rank, 0);
                assert!(p.windows(2).all(|w| w[1].node_rank - w[0].node_rank <= 1));
            }
            assert!(matches!(
                place(&hosts(spec), total + 1),
                Err(PlacementError::NotEnoughSlots { .. })
            ));
        }
    }

    #[test]
    fn errors_say_what_to_change() {
        assert_eq!(place(&hosts(&[4]), 0), Err(PlacementError::NoRanks));
        let e = place(&hosts(&[1, 1]), 3).unwrap_err();
        assert!(
            e.to_string().contains("3 ranks do not fit in the 2 slots"),
            "{e}"
        );
        assert!(place(&[], 1).is_err());
    }
}
