//! The transport table: per peer, the first transport that can connect the pair carries its link
//! (in the spirit of NCCL's `ncclTransports` and `selectTransport`).
//!
//! Forming a group's links ([`super::form::connect_links`]) after the addresses are exchanged
//! ([`crate::transport::tcp::exchange_addresses`]):
//!
//! 1. every entry of [`TABLE`] takes its collective first step ([`Transport::prepare`]), which
//!    every rank takes whatever it later chooses (RDMA publishes its offer);
//! 2. for each peer, the first entry whose [`Transport::can_connect`] says yes wins the pair;
//! 3. pairs are connected ([`crate::transport::pairs`]): each pair's bootstrap stream, dialed by
//!    its higher rank, is upgraded by the entry that won it ([`Transport::connect`]); a pair it
//!    could not upgrade after all falls to the last entry, TCP, which takes any authenticated
//!    stream. Pairs of entries that connect only while the group forms
//!    ([`Transport::connects_later`] is false: RDMA) are upgraded then, all together; the others
//!    then too, or when a call first needs them (`PSY_CONNECT`).
//!
//! Both ends of a pair reach the same choice, because `can_connect` decides only from facts both
//! see (the addresses, host keys and policies every rank published, and the offers of step 1),
//! and every rank runs the entries' steps in the same order, so a rank waiting in one entry's
//! exchange waits only for peers that will reach it.

use crate::auth::Secret;
use crate::bootstrap::Store;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{rdma, shm, tcp};
use crate::transport::{Link, PeerInfo, TransportKind, TransportPolicy, TransportTunables};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The transports in preference order. Each entry makes the transport's state for one group
/// being formed. The last entry must connect every pair (it takes the pairs the others could not
/// upgrade).
pub const TABLE: [fn() -> Box<dyn Transport>; 3] = [shm::entry, rdma::entry, tcp::entry];

/// A peer rank and the authenticated bootstrap stream to it (blocking mode).
pub type Pair = (usize, TcpStream);

/// One transport, as the table sees it while a group forms.
pub trait Transport {
    /// Which transport this is.
    fn kind(&self) -> TransportKind;

    /// A first step every rank of the group takes before any pair is chosen (publishing what
    /// peers' [`Transport::can_connect`] will read). Nothing by default.
    fn prepare(&mut self, f: &Formation<'_>) -> Result<()> {
        let _ = f;
        Ok(())
    }

    /// Whether this transport connects this rank and `peer` (never this rank itself). Both ends
    /// of the pair must answer alike; an error where the policy demands this transport and the
    /// pair cannot have it.
    fn can_connect(&mut self, f: &Formation<'_>, peer: usize) -> Result<bool>;

    /// Whether this transport's pairs may connect after the group formed, when the group's
    /// store is gone (true by default).
    fn connects_later(&self) -> bool {
        true
    }

    /// Upgrades the bootstrap streams of the pairs this transport won (in rank order) into its
    /// links, all together (a transport may need an exchange among them). Pairs it could not
    /// upgrade, where the policy allows a fallback, come back in [`Connected::kept`], their
    /// streams untouched by any half-done exchange: both ends keep them alike.
    fn connect(&mut self, f: &Formation<'_>, pairs: Vec<Pair>) -> Result<Connected>;
}

/// What [`Transport::connect`] made.
#[derive(Default)]
pub struct Connected {
    /// The links, by peer rank.
    pub links: Vec<(usize, Box<dyn Link>)>,
    /// The pairs left to TCP.
    pub kept: Vec<Pair>,
}

/// What a group being formed tells its transports.
pub struct Wiring<'a> {
    /// The group's store (for exchanges among ranks).
    pub store: &'a dyn Store,
    /// This rank.
    pub rank: usize,
    /// The group's key prefix in the store (unique per group instance).
    pub prefix: &'a str,
    /// The job id (part of every shared-memory segment name).
    pub job_id: &'a str,
    /// When to give up.
    pub deadline: Instant,
    /// What the transports read from the environment, read once.
    pub tunables: &'a TransportTunables,
    /// The job secret every connection proves.
    pub secret: &'a Secret,
    /// How long a pair may take to connect later.
    pub timeout: Duration,
}

/// What every transport sees: the [`Wiring`] and where every rank lives.
pub struct Formation<'a> {
    /// The group's store.
    pub store: &'a dyn Store,
    /// This rank.
    pub rank: usize,
    /// Every rank's [`PeerInfo`], this rank's included.
    pub peers: &'a [PeerInfo],
    /// The group's key prefix in the store.
    pub prefix: &'a str,
    /// The job id.
    pub job_id: &'a str,
    /// When to give up.
    pub deadline: Instant,
    /// The tunables.
    pub tunables: &'a TransportTunables,
}

impl Formation<'_> {
    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.peers.len()
    }

    /// This rank's own entry.
    pub fn me(&self) -> &PeerInfo {
        &self.peers[self.rank]
    }

    /// Whether `peer` runs on this rank's machine (equal host keys).
    pub fn same_host(&self, peer: usize) -> bool {
        self.peers[peer].host_key == self.me().host_key
    }

    /// `PSY_TRANSPORT` of this rank.
    pub fn policy(&self) -> TransportPolicy {
        self.tunables.policy
    }
}

/// For each peer, the index in the table of the first transport that can connect it (`None` for
/// this rank).
pub(crate) fn choose(
    table: &mut [Box<dyn Transport>],
    f: &Formation<'_>,
) -> Result<Vec<Option<usize>>> {
    let mut chosen = vec![None; f.size()];
    for (peer, choice) in chosen.iter_mut().enumerate() {
        if peer == f.rank {
            continue;
        }
        for (i, transport) in table.iter_mut().enumerate() {
            if transport.can_connect(f, peer)? {
                *choice = Some(i);
                break;
            }
        }
        if choice.is_none() {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!("rank {}: no transport can connect rank {peer}", f.rank),
            ));
        }
    }
    Ok(chosen)
}

/// Hands each transport, in table order, the streams of the pairs it won (`pairs`, in rank
/// order); what one keeps goes to the last entry. Returns the links by peer.
pub(crate) fn upgrade(
    table: &mut [Box<dyn Transport>],
    f: &Formation<'_>,
    pairs: Vec<Pair>,
    chosen: &[Option<usize>],
) -> Result<Vec<(usize, Box<dyn Link>)>> {
    let mut won: Vec<Vec<Pair>> = table.iter().map(|_| Vec::new()).collect();
    for (peer, stream) in pairs {
        if let Some(i) = chosen[peer] {
            won[i].push((peer, stream));
        }
    }
    let mut links = Vec::new();
    let mut kept: Vec<Pair> = Vec::new();
    let last = table.len() - 1;
    for (i, (transport, mut pairs)) in table.iter_mut().zip(won).enumerate() {
        if i == last {
            pairs.append(&mut kept);
            pairs.sort_by_key(|(peer, _)| *peer);
        }
        if pairs.is_empty() {
            continue;
        }
        let done = transport.connect(f, pairs)?;
        for (peer, link) in done.links {
            debug_assert_eq!(link.transport(), transport.kind());
            links.push((peer, link));
        }
        kept.extend(done.kept);
    }
    if let Some((peer, _)) = kept.first() {
        return Err(Error::new(
            ErrorKind::Bootstrap,
            format!("rank {}: no transport took rank {peer}", f.rank),
        ));
    }
    Ok(links)
}

/// The store a pair connected after the group formed sees: the group keeps none, so transports
/// that need one say [`Transport::connects_later`] is false, and never reach this.
pub(crate) struct NoStore;

impl NoStore {
    fn gone() -> Error {
        Error::new(
            ErrorKind::Bootstrap,
            "the group's store is not kept after the group formed (a transport that needs it must connect its pairs then)",
        )
    }
}

impl Store for NoStore {
    fn set(&self, _: &str, _: &[u8]) -> Result<()> {
        Err(NoStore::gone())
    }
    fn get(&self, _: &str, _: Instant) -> Result<Vec<u8>> {
        Err(NoStore::gone())
    }
    fn add(&self, _: &str, _: i64) -> Result<i64> {
        Err(NoStore::gone())
    }
    fn set_once(&self, _: &str, _: &[u8]) -> Result<Vec<u8>> {
        Err(NoStore::gone())
    }
    fn set_ephemeral(&self, _: &str, _: &[u8], _: &[u8]) -> Result<()> {
        Err(NoStore::gone())
    }
}
