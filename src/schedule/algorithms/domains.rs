//! The two-level all-reduce for many ranks on one host, its ranks grouped by the cache domain
//! they run in (an L3 slice: an AMD CCD, an Intel sub-NUMA cluster; [`Hosts`] groups them here
//! as it groups ranks by host elsewhere). Designed in `docs/many-cores.md`.
//!
//! With `d` domains of `m` ranks each:
//!
//! 1. a ring reduce-scatter inside each domain (`m - 1` steps): member `i` ends with its
//!    domain's sum of chunk `i` of `m`;
//! 2. a ring all-reduce of chunk `i` among the `d` members `i` of every domain (`2 (d - 1)` steps,
//!    all `m` such rings at once): chunk `i` is then the sum over the whole host;
//! 3. a ring all-gather inside each domain (`m - 1` steps).
//!
//! Every byte crosses a domain boundary in phase 2 only, carried by all `m` cores of a domain in
//! parallel, and the whole call takes `2 (m - 1) + 2 (d - 1)` steps instead of the flat ring's
//! `2 (m d - 1)`. Each element is reduced once per phase in a fixed order, so all ranks agree bit
//! for bit. The phases are flat ring schedules renamed to group ranks (and, in phase 2, moved to
//! the chunk's place in the buffer), so they inherit the flat schedules' proofs.

use super::hier::{among, local};
use super::Step;
use crate::schedule::{chunk_span, Algo, Collective, Hosts};

/// Whether every domain of `domains` has the same number of ranks (what phase 2 pairs on).
pub(crate) fn regular(domains: &Hosts) -> bool {
    let m = domains.members(0).len();
    (0..domains.count()).all(|d| domains.members(d).len() == m)
}

/// The steps of `rank` for an all-reduce of `count` elements on `domains` (regular: see
/// [`regular`]).
pub(super) fn all_reduce(domains: &Hosts, rank: usize, count: usize) -> Vec<Step> {
    let (d, members, at) = local(domains, rank);
    let mine = chunk_span(count, members.len(), at);
    let peers: Vec<usize> = (0..domains.count())
        .map(|e| domains.members(e)[at])
        .collect();
    let mut steps = among(Collective::ReduceScatter, Algo::Ring, members, at, count);
    let mut across = among(Collective::AllReduce, Algo::Ring, &peers, d, mine.len());
    for s in &mut across {
        for m in &mut s.sends {
            m.span = m.span.start + mine.start..m.span.end + mine.start;
        }
        for m in &mut s.recvs {
            m.span = m.span.start + mine.start..m.span.end + mine.start;
        }
    }
    steps.extend(across);
    steps.extend(among(Collective::AllGather, Algo::Ring, members, at, count));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_phase_two_crosses_domains_and_the_steps_add_up() {
        let domains = Hosts::blocks(&[4, 4, 4]);
        for rank in 0..12 {
            let steps = all_reduce(&domains, rank, 1200);
            assert_eq!(steps.len(), 2 * 3 + 2 * 2, "rank {rank}");
            for (i, s) in steps.iter().enumerate() {
                let crossing = s
                    .sends
                    .iter()
                    .map(|m| m.peer)
                    .chain(s.recvs.iter().map(|m| m.peer))
                    .any(|p| domains.host_of(p) != domains.host_of(rank));
                assert_eq!(crossing, (3..7).contains(&i), "rank {rank} step {i}");
            }
        }
    }

    #[test]
    fn uneven_domains_are_not_regular() {
        assert!(regular(&Hosts::blocks(&[2, 2])));
        assert!(!regular(&Hosts::blocks(&[3, 2])));
    }
}
