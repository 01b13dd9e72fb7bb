//! Choosing RDMA per peer and connecting those links through the bootstrap store.
//!
//! Every rank of a group publishes an [`Offer`] (`force`, `allow`, or `none` with the reason);
//! a pair uses RDMA when both offer it and either forces it or they are on different hosts (on
//! the same host, shared memory wins). Both ends decide from the same two entries, so they
//! always agree. A rank that forces RDMA and cannot have it fails, naming the rank and reason.

use super::config::RdmaConfig;
use super::endpoint::Offer;
use super::probe::{availability, Availability};
use crate::bootstrap::Store;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{Link, PeerInfo, TransportPolicy};
use std::net::TcpStream;
use std::time::Instant;

/// What [`connect_rdma_links`] needs to know.
#[derive(Debug, Clone)]
pub struct RdmaOptions<'a> {
    /// `PSY_TRANSPORT`.
    pub policy: TransportPolicy,
    /// The group's key prefix in the store.
    pub prefix: &'a str,
    /// When to give up.
    pub deadline: Instant,
}

/// What a pair of ranks uses, decided from both offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// RDMA.
    Rdma,
    /// Not RDMA (TCP, or shared memory where that applies).
    Other,
    /// One side forces RDMA and the other cannot: the reason.
    Fail(String),
}

/// The pair's choice from this side's offer, the peer's, and whether they are on one host.
pub fn decide(mine: &Offer, theirs: &Offer, same_host: bool) -> Decision {
    match (mine, theirs) {
        (Offer::Force, Offer::Refuse(why)) => Decision::Fail(why.clone()),
        (Offer::Refuse(why), Offer::Force) => Decision::Fail(why.clone()),
        (Offer::Refuse(_), _) | (_, Offer::Refuse(_)) => Decision::Other,
        (Offer::Force, _) | (_, Offer::Force) => Decision::Rdma,
        (Offer::Allow, Offer::Allow) if same_host => Decision::Other,
        (Offer::Allow, Offer::Allow) => Decision::Rdma,
    }
}

/// The error for `PSY_TRANSPORT=rdma` where RDMA is absent.
pub fn forced_error(rank: usize, host: &str, reason: &str, fix: &str) -> Error {
    Error::new(
        ErrorKind::Config,
        format!("PSY_TRANSPORT=rdma, but rank {rank} ({host}) cannot use RDMA: {reason}. Fix: {fix}; or set PSY_TRANSPORT=auto to use TCP where RDMA is absent"),
    )
}

fn offer_key(prefix: &str, rank: usize) -> String {
    format!("{prefix}/rdma/offer/{rank}")
}

/// This rank's offer, and the configuration to use if it offers RDMA.
fn my_offer(policy: TransportPolicy) -> Result<(Offer, Option<RdmaConfig>, Availability)> {
    let refuse = |why: &str| {
        let a = Availability::absent(why, "");
        Ok((Offer::Refuse(why.to_string()), None, a))
    };
    match policy {
        TransportPolicy::Tcp => refuse("PSY_TRANSPORT=tcp on this rank"),
        TransportPolicy::Shm => refuse("PSY_TRANSPORT=shm on this rank"),
        TransportPolicy::Auto | TransportPolicy::Rdma => {
            let config = match RdmaConfig::from_env() {
                Ok(c) => c,
                Err(e) if policy == TransportPolicy::Rdma => return Err(e),
                Err(e) => return refuse(&format!("{e}")),
            };
            let found = availability(&config);
            match (&found, policy) {
                (Availability::Absent { reason, .. }, _) => {
                    Ok((Offer::Refuse(reason.clone()), None, found))
                }
                (_, TransportPolicy::Rdma) => Ok((Offer::Force, Some(config), found)),
                _ => Ok((Offer::Allow, Some(config), found)),
            }
        }
    }
}

/// Connects RDMA links to the peers that should have one, taking their TCP connections (kept for
/// liveness) out of `streams` and marking `peers[..].transport`. Returns the links by peer rank
/// (`None` where another transport applies). Every rank of the group calls this.
pub fn connect_rdma_links(
    store: &dyn Store,
    rank: usize,
    streams: &mut [Option<TcpStream>],
    peers: &mut [PeerInfo],
    opts: &RdmaOptions<'_>,
) -> Result<Vec<Option<Box<dyn Link>>>> {
    let size = streams.len();
    let mut links: Vec<Option<Box<dyn Link>>> = (0..size).map(|_| None).collect();
    if size <= 1 {
        return Ok(links);
    }
    let host = peers[rank].host.clone();
    let shm_ok = |p: &PeerInfo| opts.policy == TransportPolicy::Auto && p.shm_ok;
    let by_shm = |j: usize| {
        peers[j].host_key == peers[rank].host_key && shm_ok(&peers[rank]) && peers[j].shm_ok
    };
    // Where every peer shares memory with this rank, no peer reads this rank's offer: skip the
    // device probe.
    let (offer, config, found) = if (0..size).all(|j| j == rank || by_shm(j)) {
        let why = "every peer shares memory with this rank";
        (
            Offer::Refuse(why.into()),
            None,
            Availability::absent(why, ""),
        )
    } else {
        my_offer(opts.policy)?
    };
    store.set(&offer_key(opts.prefix, rank), &offer.encode())?;
    if let (TransportPolicy::Rdma, Availability::Absent { reason, fix }) = (opts.policy, &found) {
        return Err(forced_error(rank, &host, reason, fix));
    }
    let Some(config) = config else {
        return Ok(links);
    };
    let mut chosen = Vec::new();
    for j in (0..size).filter(|&j| j != rank && streams[j].is_some()) {
        let same_host = peers[j].host_key == peers[rank].host_key;
        if by_shm(j) {
            continue; // shared memory
        }
        let raw = store
            .get(&offer_key(opts.prefix, j), opts.deadline)
            .map_err(|e| {
                e.context(format!(
                    "rank {rank}: waiting for rank {j} to say whether it offers RDMA"
                ))
            })?;
        let theirs = Offer::decode(&raw)
            .map_err(|e| Error::new(ErrorKind::Bootstrap, format!("rank {j}: {e}")))?;
        match decide(&offer, &theirs, same_host) {
            Decision::Rdma => chosen.push(j),
            Decision::Other => {}
            Decision::Fail(why) => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!("rank {rank}: RDMA is forced (PSY_TRANSPORT=rdma on one side) between rank {rank} and rank {j} ({}), but one cannot use it: {why}; set PSY_TRANSPORT=auto on every rank to fall back to TCP", peers[j].host),
                ));
            }
        }
    }
    if chosen.is_empty() {
        return Ok(links);
    }
    connect_chosen(
        store, rank, streams, peers, opts, &config, &chosen, &mut links,
    )?;
    Ok(links)
}

#[cfg(feature = "rdma")]
#[allow(clippy::too_many_arguments)]
fn connect_chosen(
    store: &dyn Store,
    rank: usize,
    streams: &mut [Option<TcpStream>],
    peers: &mut [PeerInfo],
    opts: &RdmaOptions<'_>,
    config: &RdmaConfig,
    chosen: &[usize],
    links: &mut [Option<Box<dyn Link>>],
) -> Result<()> {
    super::verbs::connect_pairs(store, rank, streams, peers, opts, config, chosen, links)
}

#[cfg(not(feature = "rdma"))]
#[allow(clippy::too_many_arguments)]
fn connect_chosen(
    _store: &dyn Store,
    rank: usize,
    _streams: &mut [Option<TcpStream>],
    _peers: &mut [PeerInfo],
    _opts: &RdmaOptions<'_>,
    _config: &RdmaConfig,
    _chosen: &[usize],
    _links: &mut [Option<Box<dyn Link>>],
) -> Result<()> {
    // Without the feature no rank offers RDMA, so no pair can choose it.
    Err(Error::new(
        ErrorKind::Bootstrap,
        format!("rank {rank}: {}", super::probe::FEATURE_OFF),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no(why: &str) -> Offer {
        Offer::Refuse(why.into())
    }

    #[test]
    fn both_ends_decide_alike() {
        let offers = [Offer::Force, Offer::Allow, no("no device")];
        for a in &offers {
            for b in &offers {
                for same in [false, true] {
                    assert_eq!(decide(a, b, same), decide(b, a, same), "{a:?} {b:?} {same}");
                }
            }
        }
    }

    #[test]
    fn rdma_between_hosts_when_both_offer_and_forced_anywhere() {
        assert_eq!(decide(&Offer::Allow, &Offer::Allow, false), Decision::Rdma);
        assert_eq!(decide(&Offer::Allow, &Offer::Allow, true), Decision::Other);
        assert_eq!(decide(&Offer::Force, &Offer::Allow, true), Decision::Rdma);
        assert_eq!(decide(&Offer::Allow, &no("x"), false), Decision::Other);
        assert_eq!(
            decide(&Offer::Force, &no("no device"), false),
            Decision::Fail("no device".into())
        );
    }

    #[test]
    fn the_forced_error_names_rank_reason_and_fix() {
        let e = forced_error(3, "node7", "no RDMA device", "load the driver").to_string();
        for part in [
            "rank 3",
            "node7",
            "no RDMA device",
            "load the driver",
            "PSY_TRANSPORT=auto",
        ] {
            assert!(e.contains(part), "{part:?} missing from {e}");
        }
    }
}
