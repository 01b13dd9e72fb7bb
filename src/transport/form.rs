//! Forming a group's links: the [`super::table`]'s entries choose a transport for each pair
//! and the pairs connect ([`super::pairs`]), now or when a call first needs them. Above both.

use super::pairs::{Arrived, Connector, PairSetup};
use super::table::{choose, upgrade, Formation, Pair, Transport, Wiring, TABLE};
use super::tcp::Exchanged;
use super::{Link, PeerInfo, TransportKind};
use crate::error::Result;

/// The links of a formed group and where each peer lives, with the transport that carries it.
pub struct Wired {
    /// The link to each peer, by rank (`None` for this rank, and for pairs not connected yet).
    pub links: Vec<Option<Box<dyn Link>>>,
    /// Every rank's [`PeerInfo`], `transport` set from its link, or to the transport chosen for
    /// a pair not connected yet.
    pub peers: Vec<PeerInfo>,
    /// What connects the group's other pairs when they are first needed.
    pub connector: Connector,
}

/// Chooses, for each peer, the first transport of [`TABLE`] that can connect the pair, and
/// connects the pairs that connect now: every pair, or (lazily) those whose transport cannot
/// connect later. Every rank of the group calls this.
pub fn connect_links(wiring: &Wiring<'_>, exchanged: Exchanged) -> Result<Wired> {
    let Exchanged {
        listener,
        mut peers,
    } = exchanged;
    let f = Formation {
        store: wiring.store,
        rank: wiring.rank,
        peers: &peers,
        prefix: wiring.prefix,
        job_id: wiring.job_id,
        deadline: wiring.deadline,
        tunables: wiring.tunables,
    };
    let mut table: Vec<Box<dyn Transport>> = TABLE.iter().map(|entry| entry()).collect();
    for transport in &mut table {
        transport.prepare(&f)?;
    }
    let chosen = choose(&mut table, &f)?;
    let setup = PairSetup {
        rank: wiring.rank,
        peers: peers.clone(),
        prefix: wiring.prefix.to_string(),
        job_id: wiring.job_id.to_string(),
        tunables: wiring.tunables.clone(),
        chosen: chosen.clone(),
        later: table.iter().map(|t| t.connects_later()).collect(),
        timeout: wiring.timeout,
    };
    // `PSY_CONNECT`: which pairs wait until a call first needs them.
    let lazy = wiring.tunables.connect.lazy_for(f.size());
    let now: Vec<usize> = (0..f.size())
        .filter(|&p| p != f.rank && !(lazy && setup.connects_later(p)))
        .collect();
    let connector = Connector::start(listener, setup, wiring.secret.clone())?;
    let mut links: Vec<Option<Box<dyn Link>>> = (0..f.size()).map(|_| None).collect();
    let mut streams: Vec<Pair> = Vec::new();
    for (peer, arrived) in connector.connect(&now, wiring.deadline, &|_| None)? {
        match arrived {
            Arrived::Link(link) => links[peer] = Some(link),
            Arrived::Stream(stream) => streams.push((peer, stream)),
            Arrived::Failed(e) => return Err(e),
        }
    }
    streams.sort_by_key(|(peer, _)| *peer);
    for (peer, link) in upgrade(&mut table, &f, streams, &chosen)? {
        links[peer] = Some(link);
    }
    for (peer, info) in peers.iter_mut().enumerate() {
        info.transport = match (&links[peer], chosen[peer]) {
            (Some(link), _) => link.transport(),
            (None, Some(i)) => table[i].kind(),
            (None, None) => TransportKind::Local,
        };
    }
    Ok(Wired {
        links,
        peers,
        connector,
    })
}
