//! Connecting the pairs of a group: all of them when it forms (eagerly), or each when a call
//! first needs it (lazily, `PSY_CONNECT`), as NCCL's runtime connection and Gloo's lazy pairs do.
//!
//! Three rules make it safe at any scale:
//!
//! 1. **The higher rank of a pair dials, the lower one accepts.** A pair has one connection, and
//!    no two ranks race to make it.
//! 2. **The accepting side is served by a thread of its own** (`psyne-accept`, one per group). It
//!    proves the dialer's secret (concurrently for every connection, [`crate::handshakes`]) and
//!    completes the pair's transport (for shared memory: creates and offers the segment), without
//!    the rank's main thread. So a dial never waits for its peer to reach any point of its
//!    program, and no chain can form of ranks each waiting for the next to connect (the ring
//!    that connected one pair after another, 742 s at 644 ranks in a published case).
//! 3. **The lower rank waits for its higher peers' links to arrive.** Every pair a collective
//!    uses is used by both its ranks in the same call, so the higher one dials then.
//!
//! A pair whose transport needs the group's store to connect (RDMA exchanges its endpoints
//! there) is connected when the group forms; the group does not keep the store.

use super::table::{self, Formation, Transport, TABLE};
use super::tcp;
use super::{send_and_close, Link, PeerInfo, TransportTunables};
use crate::auth::Secret;
use crate::error::{Error, ErrorKind, Result};
use crate::handshakes::{Handshakes, Log, WINDOW};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// `PSY_CONNECT`: when a group connects its pairs.
pub const CONNECT: &str = "PSY_CONNECT";

/// Groups of more ranks than this connect lazily under [`ConnectPolicy::Auto`].
pub const LAZY_ABOVE: usize = 16;

/// When a group connects its pairs (`PSY_CONNECT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectPolicy {
    /// Every pair when the group forms, so the first call of each kind costs no connection.
    Eager,
    /// Each pair when a call first needs it: a group connects only what its calls use.
    Lazy,
    /// Eager up to 16 ranks, lazy above (the default).
    Auto,
}

impl ConnectPolicy {
    /// Parses `PSY_CONNECT`: `eager`, `lazy` or `auto` (the default, also for an empty value).
    pub fn parse(text: Option<&str>) -> crate::Result<ConnectPolicy> {
        match text.map(|t| t.trim().to_ascii_lowercase()).as_deref() {
            None | Some("" | "auto") => Ok(ConnectPolicy::Auto),
            Some("eager") => Ok(ConnectPolicy::Eager),
            Some("lazy") => Ok(ConnectPolicy::Lazy),
            Some(other) => Err(Error::config(format!(
                "{CONNECT}={other:?} is not a connection policy; use eager, lazy or auto"
            ))),
        }
    }

    /// Whether a group of `size` ranks connects lazily.
    pub fn lazy_for(self, size: usize) -> bool {
        match self {
            ConnectPolicy::Eager => false,
            ConnectPolicy::Lazy => true,
            ConnectPolicy::Auto => size > LAZY_ABOVE,
        }
    }
}

/// What either side of a pair needs to turn its proven stream into the pair's link, owned, so
/// that the accept thread holds it too.
pub(crate) struct PairSetup {
    pub(crate) rank: usize,
    /// Every rank's whereabouts.
    pub(crate) peers: Vec<PeerInfo>,
    pub(crate) prefix: String,
    pub(crate) job_id: String,
    pub(crate) tunables: TransportTunables,
    /// For each peer, the index in [`TABLE`] of the transport chosen for the pair.
    pub(crate) chosen: Vec<Option<usize>>,
    /// For each entry of [`TABLE`], whether its pairs may connect after the group formed.
    pub(crate) later: Vec<bool>,
    /// How long one pair may take to connect.
    pub(crate) timeout: Duration,
}

impl PairSetup {
    /// Whether the pair with `peer` may connect after the group formed.
    pub(crate) fn connects_later(&self, peer: usize) -> bool {
        self.chosen[peer].is_some_and(|i| self.later[i])
    }

    /// Turns the proven stream to `peer` into the pair's link, with the transport chosen for it
    /// (TCP if that one cannot after all and the policy allows). Both ends call this at once.
    fn link(&self, peer: usize, stream: TcpStream, deadline: Instant) -> Result<Box<dyn Link>> {
        let f = Formation {
            store: &table::NoStore,
            rank: self.rank,
            peers: &self.peers,
            prefix: &self.prefix,
            job_id: &self.job_id,
            deadline,
            tunables: &self.tunables,
        };
        let mut entries: Vec<Box<dyn Transport>> = TABLE.iter().map(|entry| entry()).collect();
        let mut links = table::upgrade(&mut entries, &f, vec![(peer, stream)], &self.chosen)?;
        match links.pop() {
            Some((_, link)) => Ok(link),
            None => Err(Error::new(
                ErrorKind::Bootstrap,
                format!("rank {}: no transport took rank {peer}", self.rank),
            )),
        }
    }
}

/// What the accept thread made of a higher peer's connection.
pub(crate) enum Arrived {
    /// The pair's link.
    Link(Box<dyn Link>),
    /// The proven stream, for a transport that connects only while the group forms.
    Stream(TcpStream),
    /// Connecting the pair failed.
    Failed(Error),
}

/// Where the accept thread leaves what arrived, for the rank's main thread.
struct Arrivals {
    queue: Mutex<Vec<(usize, Arrived)>>,
    changed: Condvar,
    /// How many wait in `queue`: a look without the lock.
    queued: AtomicUsize,
    /// Set when the group is dropped: the accept thread ends.
    stop: AtomicBool,
    /// Connections refused for not proving the secret.
    refused: AtomicUsize,
    /// After the group was given up: what to tell a peer whose link arrives later.
    notice: Mutex<Option<Vec<u8>>>,
}

impl Arrivals {
    fn lock(&self) -> MutexGuard<'_, Vec<(usize, Arrived)>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A group's means to connect more of its pairs: its listener's accept thread, and every
/// peer's address to dial.
pub struct Connector {
    setup: Arc<PairSetup>,
    secret: Secret,
    arrivals: Arc<Arrivals>,
}

impl Connector {
    /// Starts serving `listener`: higher peers' connections that prove `secret` become links
    /// (or streams, for pairs that connect only while the group forms).
    pub(crate) fn start(
        listener: TcpListener,
        setup: PairSetup,
        secret: Secret,
    ) -> Result<Connector> {
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("configuring the listener", e))?;
        let setup = Arc::new(setup);
        let arrivals = Arc::new(Arrivals {
            queue: Mutex::new(Vec::new()),
            changed: Condvar::new(),
            queued: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            refused: AtomicUsize::new(0),
            notice: Mutex::new(None),
        });
        let serving = Serving {
            setup: setup.clone(),
            arrivals: arrivals.clone(),
            handshakes: Handshakes::new(
                secret.clone(),
                format!("rank {}", setup.rank),
                Arc::new(|line: &str| crate::report::warn(line)) as Log,
            ),
            seen: vec![false; setup.peers.len()],
        };
        std::thread::Builder::new()
            .name("psyne-accept".into())
            .spawn(move || serving.run(listener))
            .map_err(|e| Error::io("starting the accept thread", e))?;
        Ok(Connector {
            setup,
            secret,
            arrivals,
        })
    }

    /// This rank.
    pub(crate) fn rank(&self) -> usize {
        self.setup.rank
    }

    /// Connects this rank to each peer of `want` (none connected yet): dials the lower ones,
    /// nearest first, and waits until `deadline` for the higher ones to arrive, asking `watch`
    /// about each of those in turn (every 100 ms at most) whether it is visibly elsewhere (in
    /// another call, or dead): its error ends the wait. Returns what every pair became,
    /// including pairs outside `want` that arrived meanwhile.
    pub(crate) fn connect(
        &self,
        want: &[usize],
        deadline: Instant,
        watch: &dyn Fn(usize) -> Option<Error>,
    ) -> Result<Vec<(usize, Arrived)>> {
        let rank = self.rank();
        let mut got: Vec<(usize, Arrived)> = Vec::new();
        let mut lower: Vec<usize> = want.iter().copied().filter(|&p| p < rank).collect();
        lower.sort_unstable_by(|a, b| b.cmp(a));
        for peer in lower {
            got.push((peer, self.dial(peer, deadline)?));
        }
        let mut higher: Vec<usize> = want.iter().copied().filter(|&p| p > rank).collect();
        loop {
            for (peer, arrived) in self.take(!higher.is_empty(), deadline) {
                if let Arrived::Failed(e) = arrived {
                    return Err(e);
                }
                higher.retain(|&p| p != peer);
                got.push((peer, arrived));
            }
            if higher.is_empty() {
                return Ok(got);
            }
            if let Some(e) = higher.iter().find_map(|&peer| watch(peer)) {
                return Err(e);
            }
            if Instant::now() >= deadline {
                return Err(self.never_connected(&higher));
            }
        }
    }

    /// Dials the lower rank `peer` and connects the pair (its stream alone, if its transport
    /// connects only while the group forms).
    fn dial(&self, peer: usize, deadline: Instant) -> Result<Arrived> {
        let setup = &*self.setup;
        let info = &setup.peers[peer];
        let stream = tcp::dial(setup.rank, &self.secret, peer, info, deadline)?;
        if setup.connects_later(peer) {
            Ok(Arrived::Link(setup.link(peer, stream, deadline)?))
        } else {
            Ok(Arrived::Stream(stream))
        }
    }

    /// Whether links have arrived that [`Connector::take`] would return.
    pub(crate) fn has_arrivals(&self) -> bool {
        self.arrivals.queued.load(Ordering::Acquire) > 0
    }

    /// What has arrived; if nothing has and `wait`, waits for something until `deadline` (at
    /// most 100 ms at a time: the caller loops).
    pub(crate) fn take(&self, wait: bool, deadline: Instant) -> Vec<(usize, Arrived)> {
        let mut queue = self.arrivals.lock();
        if queue.is_empty() && wait {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            queue = self
                .arrivals
                .changed
                .wait_timeout(queue, left)
                .map(|(q, _)| q)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        self.arrivals.queued.store(0, Ordering::Release);
        std::mem::take(&mut *queue)
    }

    /// The group was given up: a link that arrives from now on is sent `notice` (an abort
    /// message, so its peer learns why) and closed.
    pub(crate) fn give_up(&self, notice: Vec<u8>) {
        *self
            .arrivals
            .notice
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(notice);
    }

    /// The error of a rank whose higher peers `missing` did not connect by the deadline.
    fn never_connected(&self, missing: &[usize]) -> Error {
        let rank = self.rank();
        let refused = self.arrivals.refused.load(Ordering::Relaxed);
        let strangers = if refused > 0 {
            format!(
                "; meanwhile {refused} connection(s) that did not prove the job's secret were refused"
            )
        } else {
            String::new()
        };
        Error::new(
            ErrorKind::Timeout,
            format!("rank {rank}: ranks {missing:?} never connected (did they start? are they in the same call? raise PSY_TIMEOUT if start-up is slow){strangers}"),
        )
        .about_peer(missing[0])
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        self.arrivals.stop.store(true, Ordering::Release);
    }
}

/// The accept thread's state.
struct Serving {
    setup: Arc<PairSetup>,
    arrivals: Arc<Arrivals>,
    handshakes: Handshakes,
    /// Peers that connected already: a second connection claiming one is refused.
    seen: Vec<bool>,
}

impl Serving {
    /// Serves the listener until the group is dropped.
    fn run(mut self, listener: TcpListener) {
        while !self.arrivals.stop.load(Ordering::Acquire) {
            let step = Duration::from_millis(100);
            for proven in self
                .handshakes
                .step(&listener, step, Instant::now() + WINDOW)
            {
                let claim = usize::try_from(proven.claim).unwrap_or(usize::MAX);
                let (rank, size) = (self.setup.rank, self.seen.len());
                if claim <= rank || claim >= size || self.seen[claim] {
                    let why =
                        format!("it claims to be rank {claim}, which this rank does not expect");
                    self.handshakes.refuse(proven.from, &why);
                    continue;
                }
                self.seen[claim] = true;
                let arrived = self.complete(claim, proven.stream);
                self.deliver(claim, arrived);
            }
            self.arrivals
                .refused
                .store(self.handshakes.refused(), Ordering::Relaxed);
        }
        self.handshakes.finish();
    }

    /// Connects the pair with `peer` from this (the accepting) side.
    fn complete(&self, peer: usize, stream: TcpStream) -> Arrived {
        if !self.setup.connects_later(peer) {
            return Arrived::Stream(stream);
        }
        let deadline = Instant::now() + self.setup.timeout;
        match self.setup.link(peer, stream, deadline) {
            Ok(link) => Arrived::Link(link),
            Err(e) => Arrived::Failed(e),
        }
    }

    /// Leaves `arrived` for the main thread, or, if the group was given up, tells the peer.
    fn deliver(&self, peer: usize, arrived: Arrived) {
        let notice = self
            .arrivals
            .notice
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let arrived = match (notice, arrived) {
            (Some(notice), Arrived::Link(mut link)) => {
                let until = Instant::now() + Duration::from_secs(1);
                return send_and_close(&mut *link, &notice, until);
            }
            (_, arrived) => arrived,
        };
        let mut queue = self.arrivals.lock();
        queue.push((peer, arrived));
        self.arrivals.queued.store(queue.len(), Ordering::Release);
        self.arrivals.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_policies_parse_and_auto_is_lazy_only_for_large_groups() {
        for (text, want) in [
            (None, ConnectPolicy::Auto),
            (Some(""), ConnectPolicy::Auto),
            (Some(" Lazy "), ConnectPolicy::Lazy),
            (Some("eager"), ConnectPolicy::Eager),
        ] {
            assert_eq!(ConnectPolicy::parse(text).unwrap(), want, "{text:?}");
        }
        let e = ConnectPolicy::parse(Some("sometimes"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("PSY_CONNECT") && e.contains("lazy"), "{e}");
        assert!(!ConnectPolicy::Auto.lazy_for(LAZY_ABOVE));
        assert!(ConnectPolicy::Auto.lazy_for(LAZY_ABOVE + 1));
        assert!(ConnectPolicy::Lazy.lazy_for(2) && !ConnectPolicy::Eager.lazy_for(4096));
    }
}
