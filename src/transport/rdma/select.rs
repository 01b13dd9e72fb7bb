//! The RDMA entry of the transport table: choosing RDMA per peer and connecting those links
//! through the bootstrap store.
//!
//! Every rank of a group publishes an [`Offer`] (`force`, `allow`, or `none` with the reason)
//! when the table prepares ([`Transport::prepare`]); a pair uses RDMA when both offer it and
//! either forces it or they are on different hosts (on the same host, shared memory wins). Both
//! ends decide from the same two entries, so they always agree. A rank that forces RDMA and
//! cannot have it fails, naming the rank and reason.

use super::config::RdmaConfig;
use super::endpoint::Offer;
use super::probe::{availability, Availability};
use crate::error::{Error, ErrorKind, Result};
use crate::transport::table::{Connected, Formation, Pair, Transport};
use crate::transport::{TransportKind, TransportPolicy};

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
fn my_offer(
    policy: TransportPolicy,
    config: &Result<RdmaConfig>,
) -> Result<(Offer, Option<RdmaConfig>, Availability)> {
    let refuse = |why: &str| {
        let a = Availability::absent(why, "");
        Ok((Offer::Refuse(why.to_string()), None, a))
    };
    match policy {
        TransportPolicy::Tcp => refuse("PSY_TRANSPORT=tcp on this rank"),
        TransportPolicy::Shm => refuse("PSY_TRANSPORT=shm on this rank"),
        TransportPolicy::Auto | TransportPolicy::Rdma => {
            let config = match config {
                Ok(c) => c.clone(),
                Err(e) if policy == TransportPolicy::Rdma => return Err(e.clone()),
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

/// Whether shared memory takes the pair with `peer` under `auto` (then RDMA never looks at it).
fn by_shm(f: &Formation<'_>, peer: usize) -> bool {
    let shm_ok = |p: &crate::transport::PeerInfo| f.policy() == TransportPolicy::Auto && p.shm_ok;
    f.same_host(peer) && shm_ok(f.me()) && f.peers[peer].shm_ok
}

/// The RDMA entry of [`crate::transport::table::TABLE`].
pub(crate) fn entry() -> Box<dyn Transport> {
    Box::new(Rdma {
        offer: Offer::Refuse("not prepared".into()),
        config: None,
    })
}

/// RDMA, for one group being formed: this rank's published offer, and the configuration to use
/// where it offers RDMA.
struct Rdma {
    offer: Offer,
    config: Option<RdmaConfig>,
}

impl Transport for Rdma {
    fn kind(&self) -> TransportKind {
        TransportKind::Rdma
    }

    /// RDMA pairs exchange their endpoints through the group's store, which is gone once the
    /// group formed: they connect while it forms.
    fn connects_later(&self) -> bool {
        false
    }

    /// Publishes this rank's offer (probing the device only where some peer may use it).
    fn prepare(&mut self, f: &Formation<'_>) -> Result<()> {
        if f.size() <= 1 {
            return Ok(());
        }
        // Where every peer shares memory with this rank, no peer reads this rank's offer: skip
        // the device probe.
        let (offer, config, found) = if (0..f.size()).all(|j| j == f.rank || by_shm(f, j)) {
            let why = "every peer shares memory with this rank";
            let a = Availability::absent(why, "");
            (Offer::Refuse(why.into()), None, a)
        } else {
            my_offer(f.policy(), &f.tunables.rdma)?
        };
        f.store.set(&offer_key(f.prefix, f.rank), &offer.encode())?;
        if let (TransportPolicy::Rdma, Availability::Absent { reason, fix }) = (f.policy(), &found)
        {
            return Err(forced_error(f.rank, &f.me().host, reason, fix));
        }
        (self.offer, self.config) = (offer, config);
        Ok(())
    }

    fn can_connect(&mut self, f: &Formation<'_>, j: usize) -> Result<bool> {
        if self.config.is_none() || by_shm(f, j) {
            return Ok(false);
        }
        let rank = f.rank;
        let raw = f
            .store
            .get(&offer_key(f.prefix, j), f.deadline)
            .map_err(|e| {
                e.context(format!(
                    "rank {rank}: waiting for rank {j} to say whether it offers RDMA"
                ))
            })?;
        let theirs = Offer::decode(&raw)
            .map_err(|e| Error::new(ErrorKind::Bootstrap, format!("rank {j}: {e}")))?;
        match decide(&self.offer, &theirs, f.same_host(j)) {
            Decision::Rdma => Ok(true),
            Decision::Other => Ok(false),
            Decision::Fail(why) => Err(Error::new(
                ErrorKind::Config,
                format!("rank {rank}: RDMA is forced (PSY_TRANSPORT=rdma on one side) between rank {rank} and rank {j} ({}), but one cannot use it: {why}; set PSY_TRANSPORT=auto on every rank to fall back to TCP", f.peers[j].host),
            )),
        }
    }

    /// Connects a queue pair to each peer won; their TCP connections stay beside the links, for
    /// liveness.
    fn connect(&mut self, f: &Formation<'_>, pairs: Vec<Pair>) -> Result<Connected> {
        match &self.config {
            Some(config) => connect_pairs(f, config, pairs),
            None => Err(Error::new(
                ErrorKind::Bootstrap,
                format!("rank {}: RDMA won a pair it did not offer", f.rank),
            )),
        }
    }
}

#[cfg(feature = "rdma")]
fn connect_pairs(f: &Formation<'_>, config: &RdmaConfig, pairs: Vec<Pair>) -> Result<Connected> {
    super::verbs::connect_pairs(f, config, pairs)
}

#[cfg(not(feature = "rdma"))]
fn connect_pairs(f: &Formation<'_>, _: &RdmaConfig, _: Vec<Pair>) -> Result<Connected> {
    // Without the feature no rank offers RDMA, so no pair can choose it.
    Err(Error::new(
        ErrorKind::Bootstrap,
        format!("rank {}: {}", f.rank, super::status::FEATURE_OFF),
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
