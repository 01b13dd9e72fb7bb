//! `PMI_process_mapping`: which node each rank runs on, in the form MPICH parses
//! (`MPL_rankmap_str_to_array`, formerly `MPIR_NODEMAP_parse_mapping`).
//!
//! `(vector,(S,N,P),...)`: each triple gives the next `N * P` ranks in rank order, `P` to each
//! of the nodes `S..S+N`. Blocked placement on equal hosts is one triple, `(vector,(0,4,2))`
//! for 8 ranks on 4 hosts. When the triples repeat with the same period from node 0 on (a
//! round-robin placement), only the first period is written: MPICH starts over from the first
//! triple once the list ends, as Hydra's `(vector,(0,2,1))` for 4 ranks round robin relies on.

use crate::pmi::JobMap;

/// One `(start, nodes, per_node)` triple.
type Block = (usize, usize, usize);

/// The mapping of `map`, or `None` if the map is inconsistent (a rank on no host, on two, or
/// outside `0..world_size`).
pub fn process_mapping(map: &JobMap) -> Option<String> {
    let mut node_of = vec![None; map.world_size];
    for (node, host) in map.hosts.iter().enumerate() {
        for &rank in &host.ranks {
            let slot = node_of.get_mut(rank)?;
            if slot.replace(node).is_some() {
                return None; // A rank on two hosts, or twice on one.
            }
        }
    }
    let nodes: Vec<usize> = node_of.into_iter().collect::<Option<_>>()?;
    let blocks = shortest_period(&blocks(&nodes));
    let body: Vec<String> = blocks
        .iter()
        .map(|(s, n, p)| format!("({s},{n},{p})"))
        .collect();
    Some(format!("(vector,{})", body.join(",")))
}

/// Run-length triples of `nodes` (the node of each rank, in rank order).
fn blocks(nodes: &[usize]) -> Vec<Block> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &node in nodes {
        match runs.last_mut() {
            Some((n, len)) if *n == node => *len += 1,
            _ => runs.push((node, 1)),
        }
    }
    let mut out: Vec<Block> = Vec::new();
    for (node, len) in runs {
        match out.last_mut() {
            Some((s, n, p)) if *p == len && *s + *n == node => *n += 1,
            _ => out.push((node, 1, len)),
        }
    }
    out
}

/// The first period of `blocks` if they are whole repeats of it and it starts at node 0.
fn shortest_period(blocks: &[Block]) -> Vec<Block> {
    let starts_at_zero = blocks.first().is_some_and(|b| b.0 == 0);
    for period in 1..blocks.len() {
        if starts_at_zero
            && blocks.len() % period == 0
            && blocks.chunks(period).all(|c| c == &blocks[..period])
        {
            return blocks[..period].to_vec();
        }
    }
    blocks.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmi::HostRanks;

    fn map(hosts: &[&[usize]]) -> JobMap {
        JobMap {
            job_id: "j".into(),
            world_size: hosts.iter().map(|h| h.len()).sum(),
            hosts: hosts
                .iter()
                .enumerate()
                .map(|(i, r)| HostRanks {
                    name: format!("h{i}"),
                    ranks: r.to_vec(),
                })
                .collect(),
            appnum: Vec::new(),
            tmpdir: "/tmp".into(),
        }
    }

    /// What MPICH's parser makes of a mapping, with its wrap-around (test oracle).
    fn expand(mapping: &str, size: usize) -> Vec<usize> {
        let inner = mapping
            .strip_prefix("(vector,")
            .and_then(|s| s.strip_suffix(')'))
            .unwrap();
        let triples: Vec<Block> = inner
            .split("),(")
            .map(|t| {
                let v: Vec<usize> = t
                    .trim_matches(['(', ')'])
                    .split(',')
                    .map(|n| n.parse().unwrap())
                    .collect();
                (v[0], v[1], v[2])
            })
            .collect();
        let mut out = Vec::new();
        'outer: loop {
            for &(s, n, p) in &triples {
                for i in 0..n {
                    for _ in 0..p {
                        out.push(s + i);
                        if out.len() == size {
                            break 'outer;
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn equal_blocks_are_one_triple() {
        assert_eq!(
            process_mapping(&map(&[&[0, 1], &[2, 3]])).unwrap(),
            "(vector,(0,2,2))"
        );
        assert_eq!(process_mapping(&map(&[&[0]])).unwrap(), "(vector,(0,1,1))");
        assert_eq!(
            process_mapping(&map(&[&[0, 1, 2, 3]])).unwrap(),
            "(vector,(0,1,4))"
        );
    }

    #[test]
    fn uneven_and_round_robin_placements() {
        let cases: &[&[&[usize]]] = &[
            &[&[0, 1, 2], &[3, 4, 5], &[6]],
            &[&[0, 2], &[1, 3]],
            &[&[0, 3], &[1, 4], &[2]],
            &[&[0], &[1, 2, 3], &[4, 5]],
            &[&[3, 0], &[1, 2]],
        ];
        for hosts in cases {
            let m = map(hosts);
            let s = process_mapping(&m).unwrap();
            let want: Vec<usize> = (0..m.world_size).map(|r| m.locate(r).unwrap().0).collect();
            assert_eq!(expand(&s, m.world_size), want, "{s}");
        }
        assert_eq!(
            process_mapping(&map(&[&[0, 2], &[1, 3]])).unwrap(),
            "(vector,(0,2,1))"
        );
        assert_eq!(
            process_mapping(&map(&[&[0, 1, 2], &[3, 4, 5], &[6]])).unwrap(),
            "(vector,(0,2,3),(2,1,1))"
        );
    }

    #[test]
    fn a_rank_without_host_is_refused() {
        let mut m = map(&[&[0, 1]]);
        m.world_size = 3;
        assert_eq!(process_mapping(&m), None);
        assert_eq!(process_mapping(&map(&[&[0, 1], &[1]])), None);
        let mut m = map(&[&[0, 5]]);
        m.world_size = 2;
        assert_eq!(process_mapping(&m), None);
    }
}
