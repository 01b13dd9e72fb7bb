//! Building hierarchical schedules: a flat schedule needs only the world size, a hierarchical one
//! also needs to know which ranks share a host ([`Hosts`]) and which algorithms run its phases
//! ([`HierAlgos`]).

use super::{Algo, Collective, Hosts, Schedule};
use crate::error::{Error, Result};

/// The algorithms the phases of a hierarchical schedule use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HierAlgos {
    /// Among the host leaders: an all-reduce algorithm (ring, recursive doubling, Rabenseifner,
    /// binomial) for all-reduce, a broadcast algorithm (binomial, pipeline) for broadcast.
    /// All-gather's leaders always pass blocks round a ring.
    pub leaders: Algo,
    /// The broadcast inside each host: binomial or pipeline.
    pub local: Algo,
}

impl HierAlgos {
    /// The first (default) flat algorithms of each phase of `coll`.
    pub fn default_for(coll: Collective) -> HierAlgos {
        let leaders = match coll {
            Collective::Broadcast { .. } => Algo::Binomial,
            _ => Algo::Ring,
        };
        HierAlgos {
            leaders,
            local: Algo::Binomial,
        }
    }

    fn check(self, coll: Collective) -> Result<()> {
        let leader_coll = match coll {
            Collective::AllGather => None,
            Collective::Broadcast { .. } => Some(Collective::Broadcast { root: 0 }),
            _ => Some(Collective::AllReduce),
        };
        let flat = |c: Collective, a: Algo| {
            a != Algo::Hier && a != Algo::Flat && Algo::for_collective(c).contains(&a)
        };
        let leaders_ok = leader_coll.map_or(true, |c| flat(c, self.leaders));
        if !leaders_ok || !flat(Collective::Broadcast { root: 0 }, self.local) {
            return Err(Error::config(format!(
                "hierarchical {}: `{}` among the leaders and `{}` inside hosts are not flat algorithms of those phases",
                coll.name(),
                self.leaders,
                self.local
            )));
        }
        Ok(())
    }
}

/// The hierarchical schedule of `rank` for `coll` over `count` elements (as
/// [`Collective::layout`] defines it) on `hosts`, its phases run with `algos`. All-reduce,
/// broadcast and all-gather are hierarchical; see [`Algo::Hier`].
pub fn build_hier(
    coll: Collective,
    hosts: &Hosts,
    rank: usize,
    count: usize,
    algos: HierAlgos,
) -> Result<Schedule> {
    super::algo::check_ranks(coll, rank, hosts.size())?;
    if !Algo::for_collective(coll).contains(&Algo::Hier) {
        return Err(Error::config(format!(
            "{} has no hierarchical algorithm",
            coll.name()
        )));
    }
    algos.check(coll)?;
    Ok(super::confirmed(rank, hosts.size(), |r| {
        super::algorithms::build_hier(coll, hosts, r, count, algos)
    }))
}
