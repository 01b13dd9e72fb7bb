//! Forming a [`Group`]: its options ([`GroupOptions`]) and the one builder ([`GroupBuilder`])
//! every way of forming one goes through (`psyne::init`, the MPI bootstrap, [`Group::split`],
//! [`Group::shrink`], programs with a store of their own).

use super::core::Core;
use super::{ft, split, work, Group};
use crate::auth::Secret;
use crate::bootstrap::{Store, StoreServer};
use crate::error::{Error, Result};
use crate::executor::shared::SharedScope;
use crate::executor::Links;
use crate::options::Tunables;
use crate::transport::form::{connect_links, Wired};
use crate::transport::shm::board::{self, Board};
use crate::transport::table::Wiring;
use crate::transport::tcp::{exchange_addresses, AddressOptions};
use crate::transport::{host_key, hostname, PeerInfo, TransportKind, TransportPolicy};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// How to form a group from a store.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// This rank, `0..size`.
    pub rank: usize,
    /// Ranks in the group.
    pub size: usize,
    /// Prefix of the group's keys in the store; unique per group formed on that store.
    pub prefix: String,
    /// The job secret every connection proves.
    pub secret: Secret,
    /// The address to listen on and advertise to the other ranks.
    pub bind_ip: IpAddr,
    /// How the group runs: the deadline of every wait (forming the group included), how long a
    /// waiting rank spins, the algorithm policy and the transports' settings
    /// ([`Tunables::from_env`] reads them from `PSY_*`).
    pub tunables: Tunables,
    /// The job id: part of every shared-memory segment name, so jobs never meet.
    pub job_id: String,
    /// This machine's identity ([`crate::transport::host_key`]); ranks with equal keys use
    /// shared memory. Tests give ranks different keys to play several hosts.
    pub host_key: String,
}

impl GroupOptions {
    /// Options for `rank` of `size` on loopback with a derived secret, the default timeout and
    /// tuning: what tests with threads as ranks need.
    pub fn local(rank: usize, size: usize, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        GroupOptions {
            rank,
            size,
            secret: Secret::derive(&prefix),
            prefix,
            bind_ip: IpAddr::from([127, 0, 0, 1]),
            tunables: Tunables::default(),
            job_id: format!("local{}", std::process::id()),
            host_key: host_key(),
        }
    }
}

/// The store a group forms through: borrowed for the forming only, or shared and kept.
enum StoreRef<'a> {
    Borrowed(&'a dyn Store),
    Shared(Arc<dyn Store>),
}

/// Forms a [`Group`]: every rank builds with the same prefix, size and secret and the same
/// store. A group formed through a [`GroupBuilder::shared_store`] keeps the store, and so can
/// [`Group::split`], [`Group::agree`] and [`Group::shrink`]; one formed through a borrowed
/// [`GroupBuilder::store`] cannot.
///
/// ```
/// use psyne::{Communicator, Group, GroupOptions, MemoryStore};
///
/// let store = MemoryStore::default();
/// let group = Group::builder(GroupOptions::local(0, 1, "doc")).store(&store).build()?;
/// assert_eq!(group.size(), 1);
/// # Ok::<(), psyne::Error>(())
/// ```
#[must_use = "a builder forms nothing until `build`"]
pub struct GroupBuilder<'a> {
    options: GroupOptions,
    store: Option<StoreRef<'a>>,
    server: Option<StoreServer>,
    deadline: Option<Instant>,
}

impl Group {
    /// A builder of the group `options` describe; give it a store, then [`GroupBuilder::build`].
    pub fn builder<'a>(options: GroupOptions) -> GroupBuilder<'a> {
        GroupBuilder {
            options,
            store: None,
            server: None,
            deadline: None,
        }
    }

    /// A world of one: every collective is a local no-op (or copy).
    pub fn alone() -> Group {
        let me = PeerInfo {
            host: hostname().into(),
            addr: None,
            host_key: host_key().into(),
            shm_ok: false,
            transport: TransportKind::Local,
        };
        let links = Links::new(0, vec![None], vec![me], None);
        assemble(
            links,
            None,
            Tunables::default(),
            None,
            SharedScope::private(),
        )
    }
}

impl<'a> GroupBuilder<'a> {
    /// Forms through `store`, borrowed only while the group forms: the group cannot
    /// [`Group::split`], [`Group::agree`] or [`Group::shrink`].
    pub fn store(mut self, store: &'a dyn Store) -> Self {
        self.store = Some(StoreRef::Borrowed(store));
        self
    }

    /// Forms through `store` and keeps it, with this rank's key that says it is alive, to form
    /// subgroups and agree later.
    pub fn shared_store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(StoreRef::Shared(store));
        self
    }

    /// The group keeps `server` (the store it serves to the others) alive as long as it lives.
    pub(crate) fn serving(mut self, server: Option<StoreServer>) -> Self {
        self.server = server;
        self
    }

    /// Forms by `deadline` instead of the options' timeout from now (the group's calls keep the
    /// timeout): how [`Group::shrink`] gives a new group a shorter time to form.
    pub(crate) fn until(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Connects to the other ranks through the store and forms the group.
    pub fn build(self) -> Result<Group> {
        let GroupBuilder {
            options,
            store,
            server,
            deadline,
        } = self;
        let deadline = deadline.unwrap_or_else(|| Instant::now() + options.tunables.timeout);
        match store {
            None => Err(Error::invalid(
                "GroupBuilder::build: no store to form the group through; give one with \
                 .store(&store) or .shared_store(store)",
            )),
            Some(StoreRef::Borrowed(store)) => form(store, options, server, deadline),
            Some(StoreRef::Shared(store)) => {
                let template = options.clone();
                let mut group = form(&*store, options, server, deadline)?;
                ft::register(&*store, &template)?;
                group.splitter = Some(Arc::new(split::Splitter::new(store, template)));
                Ok(group)
            }
        }
    }
}

/// Exchanges addresses through `store`, connects every pair and assembles the group.
fn form(
    store: &dyn Store,
    options: GroupOptions,
    server: Option<StoreServer>,
    deadline: Instant,
) -> Result<Group> {
    let (rank, size) = (options.rank, options.size);
    if size == 0 || rank >= size {
        return Err(Error::invalid(format!(
            "rank {rank} is not inside a group of {size}"
        )));
    }
    // Exchange addresses, then, for each peer, the first transport in the table that can
    // connect the pair; pairs connect now or when first needed (`PSY_CONNECT`).
    let exchanged = exchange_addresses(store, &address_options(&options, deadline))?;
    let wiring = Wiring {
        store,
        rank,
        prefix: &options.prefix,
        job_id: &options.job_id,
        deadline,
        tunables: &options.tunables.transport,
        secret: &options.secret,
        timeout: options.tunables.timeout,
    };
    let Wired {
        links,
        peers,
        connector,
    } = connect_links(&wiring, exchanged)?;
    let all_local = all_share_memory(&peers, rank, options.tunables.transport.policy);
    let board = node_board(store, &options, all_local, deadline)?;
    let GroupOptions {
        tunables,
        job_id,
        prefix,
        ..
    } = options;
    let shared = SharedScope {
        allowed: all_local,
        job_id,
        prefix,
        next: Default::default(),
    };
    let links = Links::new(rank, links, peers, Some(connector));
    Ok(assemble(links, board, tunables, server, shared))
}

fn assemble(
    links: Links,
    board: Option<Board>,
    tunables: Tunables,
    server: Option<StoreServer>,
    shared: SharedScope,
) -> Group {
    Group {
        core: Arc::new(Core::new(links, board, tunables, server, shared)),
        worker: Arc::<work::Worker>::default(),
        algo: None,
        order: None,
        splitter: None,
    }
}

/// What exchanging addresses needs from a group's options.
fn address_options(options: &GroupOptions, deadline: Instant) -> AddressOptions<'_> {
    AddressOptions {
        rank: options.rank,
        size: options.size,
        prefix: &options.prefix,
        bind_ip: options.bind_ip,
        host: hostname(),
        host_key: options.host_key.clone(),
        shm_ok: options.tunables.transport.policy.allows_shm(),
        deadline,
    }
}

/// Whether every rank of the group is on this rank's host and allows shared memory (then the
/// group may use a node board and shared buffers). Every rank decides from the same facts (host
/// keys and policies all ranks published), so all or none do.
fn all_share_memory(peers: &[PeerInfo], rank: usize, policy: TransportPolicy) -> bool {
    peers
        .iter()
        .all(|p| p.host_key == peers[rank].host_key && p.shm_ok)
        && policy.allows_shm()
        && peers.len() > 1
}

/// The node board of a group whose ranks all share memory (and are few enough for one).
fn node_board(
    store: &dyn Store,
    options: &GroupOptions,
    all_local: bool,
    deadline: Instant,
) -> Result<Option<Board>> {
    if !all_local || options.size > board::MAX_RANKS {
        return Ok(None);
    }
    let (prefix, job_id) = (&options.prefix, &options.job_id);
    Board::setup(store, prefix, job_id, options.rank, options.size, deadline).map(Some)
}
