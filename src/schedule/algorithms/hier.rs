//! Hierarchical (host-aware) schedules: the ranks of each host work among themselves, over shared
//! memory, and only one rank per host (its *leader*) talks across hosts.
//!
//! - All-reduce: a binomial reduction to each host's leader, an all-reduce among the leaders
//!   (any flat all-reduce algorithm), a broadcast from each leader to its host.
//! - Broadcast: the root leads its host; a broadcast among the leaders, then inside each host.
//! - All-gather: each host's leader collects its ranks' chunks, the leaders pass host blocks
//!   round a ring, and each leader broadcasts the whole buffer to its host.
//!
//! The phases are flat schedules built over a host's ranks (or the leaders) and renamed to the
//! group's ranks, so they inherit the flat schedules' proofs. Like every schedule, the structure
//! depends on the ranks (here: the hosts) and never on `count`.

use super::{copy, send, step, steps as flat_steps, Step};
use crate::schedule::{chunk_span, Algo, Collective, HierAlgos, Hosts, Span};

/// The steps of `rank` for `coll` (all-reduce, broadcast or all-gather; others run flat with
/// their default algorithm) over `count` elements on `hosts`.
pub(super) fn steps(
    coll: Collective,
    hosts: &Hosts,
    rank: usize,
    count: usize,
    algos: HierAlgos,
) -> Vec<Step> {
    match coll {
        Collective::AllReduce => all_reduce(hosts, rank, count, algos),
        Collective::Broadcast { root } => broadcast(hosts, rank, count, root, algos),
        Collective::AllGather => all_gather(hosts, rank, count, algos),
        other => {
            let algo = Algo::for_collective(other)[0];
            flat_steps(other, algo, rank, hosts.size(), count)
        }
    }
}

/// The flat schedule of `coll` with `algo` among `ranks` (group ranks, in the order of their
/// positions), as seen by the member at position `at`, with peers renamed to group ranks.
pub(super) fn among(
    coll: Collective,
    algo: Algo,
    ranks: &[usize],
    at: usize,
    count: usize,
) -> Vec<Step> {
    if ranks.len() <= 1 {
        return Vec::new();
    }
    let mut steps = flat_steps(coll, algo, at, ranks.len(), count);
    for s in &mut steps {
        for m in &mut s.sends {
            m.peer = ranks[m.peer];
        }
        for m in &mut s.recvs {
            m.peer = ranks[m.peer];
        }
    }
    steps
}

/// This rank's host's members and its position among them.
pub(super) fn local(hosts: &Hosts, rank: usize) -> (usize, &[usize], usize) {
    let h = hosts.host_of(rank);
    let members = hosts.members(h);
    let at = members.iter().position(|&r| r == rank).unwrap_or(0);
    (h, members, at)
}

/// The broadcast of the whole buffer from a host's first rank to the others (`members`, this
/// rank at position `at`).
fn from_leader(members: &[usize], at: usize, count: usize, algos: HierAlgos) -> Vec<Step> {
    let coll = Collective::Broadcast { root: 0 };
    among(coll, algos.local, members, at, count)
}

/// Each host's first rank.
fn first_ranks(hosts: &Hosts) -> Vec<usize> {
    (0..hosts.count()).map(|h| hosts.members(h)[0]).collect()
}

fn all_reduce(hosts: &Hosts, rank: usize, count: usize, algos: HierAlgos) -> Vec<Step> {
    let (h, members, at) = local(hosts, rank);
    let mut steps = among(
        Collective::Reduce { root: 0 },
        Algo::Binomial,
        members,
        at,
        count,
    );
    if at == 0 {
        let leaders = first_ranks(hosts);
        steps.extend(among(
            Collective::AllReduce,
            algos.leaders,
            &leaders,
            h,
            count,
        ));
    }
    steps.extend(from_leader(members, at, count, algos));
    steps
}

fn broadcast(hosts: &Hosts, rank: usize, count: usize, root: usize, algos: HierAlgos) -> Vec<Step> {
    let (h, members, at) = local(hosts, rank);
    let root_host = hosts.host_of(root);
    let mut leaders = first_ranks(hosts);
    leaders[root_host] = root;
    let mut steps = Vec::new();
    if rank == leaders[h] {
        steps = among(
            Collective::Broadcast { root: root_host },
            algos.leaders,
            &leaders,
            h,
            count,
        );
    }
    let local_root = members.iter().position(|&r| r == leaders[h]).unwrap_or(0);
    steps.extend(among(
        Collective::Broadcast { root: local_root },
        algos.local,
        members,
        at,
        count,
    ));
    steps
}

/// The buffer spans of host `h`'s chunks of an all-gather: one per run of consecutive ranks.
fn host_block(hosts: &Hosts, h: usize, count: usize) -> Vec<Span> {
    let p = hosts.size();
    let mut spans: Vec<Span> = Vec::new();
    let mut prev: Option<usize> = None;
    for &r in hosts.members(h) {
        let c = chunk_span(count, p, r);
        match (prev, spans.last_mut()) {
            (Some(q), Some(last)) if q + 1 == r => last.end = c.end,
            _ => spans.push(c),
        }
        prev = Some(r);
    }
    spans
}

fn all_gather(hosts: &Hosts, rank: usize, count: usize, algos: HierAlgos) -> Vec<Step> {
    let (h, members, at) = local(hosts, rank);
    let p = hosts.size();
    let mut steps = Vec::new();
    // Each host's chunks to its leader.
    if members.len() > 1 {
        steps.push(if at == 0 {
            let recvs = members[1..]
                .iter()
                .map(|&m| copy(m, chunk_span(count, p, m)))
                .collect();
            step(vec![], recvs)
        } else {
            step(vec![send(members[0], chunk_span(count, p, rank))], vec![])
        });
    }
    // Host blocks round the ring of leaders: in step s, leader h passes on the block of host
    // h - s and receives that of host h - s - 1.
    let n = hosts.count();
    if at == 0 && n > 1 {
        let leaders = first_ranks(hosts);
        let (next, prev) = (leaders[(h + 1) % n], leaders[(h + n - 1) % n]);
        for s in 0..n - 1 {
            let out = (h + n - s) % n;
            let inn = (h + 2 * n - s - 1) % n;
            let sends = host_block(hosts, out, count)
                .into_iter()
                .map(|span| send(next, span))
                .collect();
            let recvs = host_block(hosts, inn, count)
                .into_iter()
                .map(|span| copy(prev, span))
                .collect();
            steps.push(step(sends, recvs));
        }
    }
    steps.extend(from_leader(members, at, count, algos));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_blocks_merge_runs_of_consecutive_ranks() {
        let hosts = Hosts::from_keys(&[0, 0, 1, 0, 1]);
        assert_eq!(host_block(&hosts, 0, 10), vec![0..4, 6..8]);
        assert_eq!(host_block(&hosts, 1, 10), vec![4..6, 8..10]);
    }

    #[test]
    fn only_leaders_cross_hosts() {
        let hosts = Hosts::blocks(&[3, 2, 4]);
        let algos = HierAlgos {
            leaders: Algo::Ring,
            local: Algo::Binomial,
        };
        for coll in [
            Collective::AllReduce,
            Collective::AllGather,
            Collective::Broadcast { root: 4 },
        ] {
            for rank in 0..hosts.size() {
                let leader = match coll {
                    Collective::Broadcast { root } => [0, root, 5][hosts.host_of(rank)],
                    _ => hosts.members(hosts.host_of(rank))[0],
                };
                for s in steps(coll, &hosts, rank, 9, algos) {
                    let peers = s.sends.iter().map(|m| m.peer);
                    for peer in peers.chain(s.recvs.iter().map(|m| m.peer)) {
                        let crossing = hosts.host_of(peer) != hosts.host_of(rank);
                        assert!(
                            !crossing || rank == leader,
                            "{coll}: rank {rank} talks to {peer} on another host"
                        );
                    }
                }
            }
        }
    }
}
