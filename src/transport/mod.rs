//! Bytes between two ranks. One folder per transport, each with the same shape: a way to connect
//! a pair of ranks and a [`Link`] the executor drives without blocking.
//!
//! # The transport table
//!
//! Transports are chosen per peer, as data, in the spirit of NCCL's `ncclTransports` table
//! (`src/transport.cc`, `selectTransport`). Forming a group ([`form::connect_links`]) is:
//!
//! 1. **Exchange addresses.** Every rank listens, publishes where it is (address, host, host key,
//!    whether it allows shared memory) and reads everyone's in one request
//!    ([`tcp::exchange_addresses`]). Every rank now knows every peer's [`PeerInfo`].
//! 2. **For each peer, the first transport in the table that can connect.** The table
//!    ([`table::TABLE`]) lists the transports in preference order; each implements
//!    [`table::Transport`], whose `can_connect` both ends of a pair answer alike from facts both
//!    see:
//!
//!    | transport | connects a pair when |
//!    |---|---|
//!    | [`shm`] | both are on one host (equal [`host_key`]) and both allow shared memory |
//!    | [`rdma`] | both offer RDMA (an active port, feature `rdma`), and they are on different hosts or one side forces it (`PSY_TRANSPORT=rdma`) |
//!    | [`tcp`] | always (the last entry: every pair has its bootstrap stream) |
//!
//!    A transport may first take a collective step every rank takes (`prepare`: RDMA publishes
//!    whether it offers itself).
//! 3. **Links.** A pair's bootstrap stream is a TCP connection the higher rank dials,
//!    authenticated with the job secret; the transport that won the pair upgrades it into its
//!    [`Link`] (shared memory exchanges a segment offer, RDMA queue-pair endpoints). A pair a
//!    transport cannot upgrade after all (say `/dev/shm` is full, under `auto`) stays on TCP.
//!    Shared memory and RDMA keep the stream beside their link to notice a peer that dies. Pairs
//!    connect when the group forms, or when a call first needs them ([`pairs`],
//!    `PSY_CONNECT`).
//!
//! Adding a transport is one module implementing [`table::Transport`] and one entry in
//! [`table::TABLE`].
//!
//! What the transports read from the environment is read once per group, into
//! [`TransportTunables`], and passed down; nothing here reads the environment per link or on a
//! hot path. [`TransportPolicy`] (`PSY_TRANSPORT`) narrows which transports may be used.

pub mod form;
mod host;
pub mod pairs;
pub mod rdma;
pub mod shm;
pub mod table;
pub mod tcp;

pub use host::{host_key, hostname};

use crate::error::Result;
use rdma::RdmaConfig;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

/// A connected, authenticated, ordered byte stream to one peer rank, in non-blocking mode.
pub trait Link: Send {
    /// Writes some of `bufs` (in order, as one stream); `WouldBlock` when nothing fits now.
    fn write_some(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize>;
    /// Reads into `buf`; `Ok(0)` is end of stream, `WouldBlock` means nothing has arrived yet.
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// [`Link::read_some`] for a large message that nothing reads soon: a transport that copies
    /// out of memory may write `buf` bypassing the cache. The default reads as `read_some`.
    fn read_some_streaming(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_some(buf)
    }
    /// Reads into `head` and, where each read is a system call, on into `rest` in the same call
    /// (a message's header and its first bytes: one system call instead of two). The bytes read,
    /// those past `head.len()` in `rest`; else as `read_some`. The default reads `head` only.
    fn read_some_split(&mut self, head: &mut [u8], rest: &mut [u8]) -> io::Result<usize> {
        let _ = rest;
        self.read_some(head)
    }
    /// Hands up to `max` bytes that have arrived to `f` where the transport holds them, whole
    /// `unit`s only (a power of two, at most 8, and each slice aligned to it), in order, possibly
    /// in several slices, and consumes them: for a reduction that reads a message in place
    /// instead of copying it out first. `None` where the transport cannot (then read with
    /// [`Link::read_some`]); else as `read_some`: `Ok(0)` is end of stream, `WouldBlock` means
    /// not a unit has arrived. The default cannot.
    fn read_in_place(
        &mut self,
        max: usize,
        unit: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Option<io::Result<usize>> {
        let _ = (max, unit, f);
        None
    }
    /// A descriptor that polls readable/writable when [`Link::read_some`]/[`Link::write_some`]
    /// can make progress, if the transport has one.
    fn poll_fd(&self) -> Option<RawFd>;
    /// For links without [`Link::poll_fd`]: blocks until reading (`read`) or writing (`write`)
    /// may progress, or `timeout` passes. Spurious returns are allowed; callers re-check.
    fn block(&self, read: bool, write: bool, timeout: Duration) {
        let _ = (read, write);
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
    }
    /// True if something has arrived that a read would return (data or end of stream), without
    /// blocking or consuming it.
    fn pending(&self) -> bool;
    /// Stops sending (the peer reads end of stream after what was already sent).
    fn close_write(&mut self);
    /// The transport carrying this link.
    fn transport(&self) -> TransportKind;
    /// Says what the messages this link sends next belong to, so the transport can choose how to
    /// carry them (shared memory: through its ring or by single-copy pull, [`shm::cma`]). The
    /// default ignores it.
    fn set_traffic(&mut self, traffic: Traffic) {
        let _ = traffic;
    }
    /// Says how many bytes the call whose messages this link sends next works on (its work
    /// buffer), so the transport can size what it holds per message (TCP: its send buffer,
    /// [`tcp::TcpLink`]). The default ignores it.
    fn set_call_bytes(&mut self, bytes: usize) {
        let _ = bytes;
    }
    /// Says how the messages this link sends next store their bytes where the peer reads them
    /// (shared memory: its ring written through the caches or past them, [`shm::crossing`]).
    /// The default ignores it.
    fn set_crossing(&mut self, crossing: shm::crossing::Crossing) {
        let _ = crossing;
    }
    /// Asks the peer to write its messages of one-way call `seq` to this rank as `wishes` says,
    /// one bit per class ([`shm::crossing::Wishes`]; calls numbered as
    /// [`shm::crossing::Chooser::choose`] numbers them). The default ignores it.
    fn ask_crossings(&mut self, seq: u64, wishes: u64) {
        let _ = (seq, wishes);
    }
    /// The way the peer asked for this rank's messages of one-way call `seq`, class `bit`
    /// ([`shm::crossing::Wishes::asked`]); the default: through the caches.
    fn asked_crossing(&self, seq: u64, bit: u32) -> shm::crossing::Crossing {
        let _ = (seq, bit);
        shm::crossing::Crossing::Cached
    }
    /// Says that this rank is blocked receiving point-to-point message `seq` (from 1) of the
    /// pair, of `bytes` bytes, or no longer (`None`), so a transport may hand that message over
    /// in one copy. The default ignores it.
    fn await_message(&mut self, message: Option<(u64, usize)>) {
        let _ = message;
    }
}

/// Writes `bytes` to `link` as far as it takes them by `until` (a notice such as an abort: a
/// peer that stopped reading gets what fits), then closes the link's sending side.
pub(crate) fn send_and_close(link: &mut dyn Link, bytes: &[u8], until: std::time::Instant) {
    let mut sent = 0;
    while sent < bytes.len() && std::time::Instant::now() < until {
        match link.write_some(&[io::IoSlice::new(&bytes[sent..])]) {
            Ok(n) if n > 0 => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
            _ => break,
        }
    }
    link.close_write();
}

/// The pattern of the messages a link is about to carry, for [`Link::set_traffic`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Both sides of the pair send at once and receive into place (all-to-all, all-gather; the
    /// reduce-scatter, whose 2-rank form reduces straight into its output).
    Exchange,
    /// Both sides send at once and reduce what they receive as it arrives (all-reduce).
    ReducingExchange,
    /// One side sends while the other receives into place (broadcast, scatter, gather).
    OneWay,
    /// One side sends while the other reduces what arrives (reduce).
    ReducingOneWay,
    /// A point-to-point send, number `seq` on its pair, which completes once the transport holds
    /// the message (as MPI's buffered sends): it must not wait for a receiver that is doing
    /// something else. It may wait for one already blocked receiving this very message
    /// ([`Link::await_message`]).
    Eager {
        /// The message's number among this pair's point-to-point messages (from 1).
        seq: u64,
    },
}

/// Which transport carries the link to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// This rank itself: no link (`self`).
    Local,
    /// TCP (`tcp`).
    Tcp,
    /// Shared memory (`shm`).
    Shm,
    /// RDMA (`rdma`).
    Rdma,
}

impl TransportKind {
    /// The name used in messages and by [`crate::Group::transports`]: `self`, `tcp`, `shm`,
    /// `rdma`.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Local => "self",
            TransportKind::Tcp => "tcp",
            TransportKind::Shm => "shm",
            TransportKind::Rdma => "rdma",
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a peer rank lives, for error messages and transport choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's host name (shared between the peers of one host: a group of N ranks holds
    /// every rank's entry, so each costs no allocation of its own to copy).
    pub host: Arc<str>,
    /// The address its listener advertised (`None` for a world of one, which has no listener).
    pub addr: Option<SocketAddr>,
    /// Identifies the machine (host name and boot id): equal keys can share memory.
    pub host_key: Arc<str>,
    /// Whether the peer allows shared memory (its `PSY_TRANSPORT` is not `tcp`).
    pub shm_ok: bool,
    /// The transport of the link to it ([`TransportKind::Local`] for this rank itself).
    pub transport: TransportKind,
}

impl std::fmt::Display for PeerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "host {} at ", self.host)?;
        match self.addr {
            Some(addr) => write!(f, "{addr}")?,
            None => f.write_str("-")?,
        }
        write!(f, ", {}", self.transport)
    }
}

/// Which transports a rank may use (`PSY_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportPolicy {
    /// Shared memory for peers on the same host, RDMA to other hosts where both ends have an
    /// active port, TCP for the others (the default).
    Auto,
    /// TCP for every peer.
    Tcp,
    /// Shared memory for peers on the same host, and an error if it cannot be set up.
    Shm,
    /// RDMA for every peer, and an error (naming the reason and the fix) if it is absent.
    Rdma,
}

impl TransportPolicy {
    /// Parses `PSY_TRANSPORT`: `auto`, `tcp` (or `tcp://`), `shm` (or `ipc`, `ipc://`), `rdma`
    /// (or `rdma://`).
    pub fn parse(text: &str) -> crate::Result<TransportPolicy> {
        match text
            .trim()
            .trim_end_matches("://")
            .to_ascii_lowercase()
            .as_str()
        {
            "" | "auto" => Ok(TransportPolicy::Auto),
            "tcp" => Ok(TransportPolicy::Tcp),
            "shm" | "ipc" => Ok(TransportPolicy::Shm),
            "rdma" => Ok(TransportPolicy::Rdma),
            other => Err(crate::Error::config(format!(
                "PSY_TRANSPORT={other:?} is not a transport; use auto, tcp or shm (ipc://), or rdma"
            ))),
        }
    }

    /// Whether this policy lets same-host peers use shared memory.
    pub fn allows_shm(self) -> bool {
        matches!(self, TransportPolicy::Auto | TransportPolicy::Shm)
    }

    /// The policy from `PSY_TRANSPORT` (auto when unset).
    pub fn from_env() -> crate::Result<TransportPolicy> {
        match std::env::var(crate::names::TRANSPORT) {
            Ok(v) => TransportPolicy::parse(&v),
            Err(_) => Ok(TransportPolicy::Auto),
        }
    }
}

/// What the transports read from the environment, read once when a group forms and passed down
/// to them: no transport reads a variable per link or on a hot path. A plain struct: build it
/// with [`TransportTunables::from_env`], or set its fields from code ([`Default`] is what an
/// empty environment gives).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportTunables {
    /// Which transports may be used (`PSY_TRANSPORT`; default [`TransportPolicy::Auto`]).
    pub policy: TransportPolicy,
    /// Bytes of each shared-memory ring, per direction and pair (`PSY_SHM_RING_BYTES`, clamped
    /// to 4 KiB..1 GiB and rounded up to a power of two; an unreadable value is ignored).
    /// `None`: sized by how many ranks share the host (`shm::upgrade::ring_bytes_for`).
    pub shm_ring_bytes: Option<usize>,
    /// Which slices a shared-memory link sends by pull descriptor (single copy with
    /// `process_vm_readv`, `shm::cma`): by default chosen by the traffic
    /// (`shm::cma::pull_window`). From `PSY_SHM_CMA` (`1`: every slice from
    /// `PSY_SHM_CMA_MIN` bytes, default 64 KiB; `0`/`off`/`no`: none).
    pub shm_pulls: shm::cma::PullPolicy,
    /// Whether shared-memory ring writes go through the caches or past them
    /// (`PSY_SHM_STREAM_WRITES`: `auto`, the default, chooses by timing the calls, `on` or
    /// `off`; the `transport::shm::crossing` module).
    pub shm_crossing: shm::crossing::CrossingPolicy,
    /// The RDMA adapter, port and buffer sizes (`PSY_RDMA_*`, `rdma::config`), or why those
    /// variables are malformed. The error is kept, not raised: it fails group formation only
    /// where RDMA is forced (`PSY_TRANSPORT=rdma`); elsewhere it is the reason RDMA is refused.
    pub rdma: Result<RdmaConfig>,
    /// The send buffer of every TCP link (`PSY_TCP_SNDBUF`); `None`: by where the peer lives
    /// (`tcp::send_buffer_for`).
    pub tcp_send_buffer: Option<usize>,
    /// When pairs connect (`PSY_CONNECT`; default [`pairs::ConnectPolicy::Auto`]).
    pub connect: pairs::ConnectPolicy,
}

impl Default for TransportTunables {
    fn default() -> Self {
        TransportTunables {
            policy: TransportPolicy::Auto,
            shm_ring_bytes: None,
            shm_pulls: shm::cma::PullPolicy::ByTraffic,
            shm_crossing: shm::crossing::CrossingPolicy::Auto,
            rdma: Ok(RdmaConfig::default()),
            tcp_send_buffer: None,
            connect: pairs::ConnectPolicy::Auto,
        }
    }
}

impl TransportTunables {
    /// Reads every variable through `get` (the environment in production, a map in tests).
    /// Only a malformed `PSY_TRANSPORT`, `PSY_CONNECT` or `PSY_SHM_STREAM_WRITES` is an error
    /// here.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<TransportTunables> {
        let policy = match get(crate::names::TRANSPORT) {
            Some(v) => TransportPolicy::parse(&v)?,
            None => TransportPolicy::Auto,
        };
        Ok(TransportTunables {
            policy,
            shm_ring_bytes: shm::upgrade::parse_ring_bytes(
                get(shm::upgrade::RING_BYTES).as_deref(),
            ),
            shm_pulls: shm::cma::PullPolicy::parse(
                get(shm::cma::CMA).as_deref(),
                get(shm::cma::CMA_MIN).as_deref(),
            ),
            shm_crossing: shm::crossing::CrossingPolicy::parse(
                get(shm::crossing::STREAM_WRITES).as_deref(),
            )
            .map_err(crate::error::Error::config)?,
            rdma: RdmaConfig::from_lookup(&get),
            tcp_send_buffer: tcp::parse_send_buffer(get(tcp::SEND_BUFFER_VAR).as_deref()),
            connect: pairs::ConnectPolicy::parse(get(pairs::CONNECT).as_deref())?,
        })
    }

    /// Reads every variable from the environment.
    pub fn from_env() -> Result<TransportTunables> {
        TransportTunables::from_lookup(|name| std::env::var(name).ok())
    }
}

/// For tests: a lookup of variables in `pairs`, as `from_lookup` constructors take.
#[cfg(test)]
pub(crate) fn lookup_in<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
    |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses() {
        for (text, want) in [
            ("", TransportPolicy::Auto),
            ("auto", TransportPolicy::Auto),
            ("tcp://", TransportPolicy::Tcp),
            ("ipc://", TransportPolicy::Shm),
            ("shm", TransportPolicy::Shm),
            ("rdma", TransportPolicy::Rdma),
            (" RDMA:// ", TransportPolicy::Rdma),
        ] {
            assert_eq!(TransportPolicy::parse(text).unwrap(), want, "{text:?}");
        }
        let e = TransportPolicy::parse("infiniband")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rdma"), "{e}");
        assert!(!TransportPolicy::Rdma.allows_shm() && !TransportPolicy::Tcp.allows_shm());
    }

    fn tunables(pairs: &[(&str, &str)]) -> Result<TransportTunables> {
        TransportTunables::from_lookup(lookup_in(pairs))
    }

    #[test]
    fn an_empty_environment_gives_the_default_tunables() {
        assert_eq!(tunables(&[]).unwrap(), TransportTunables::default());
    }

    #[test]
    fn tunables_keep_the_old_parsing() {
        let t = tunables(&[
            ("PSY_TRANSPORT", "ipc://"),
            ("PSY_SHM_RING_BYTES", "5000"),
            ("PSY_SHM_CMA", "1"),
            ("PSY_RDMA_PORT", "0"),
        ])
        .unwrap();
        assert_eq!(t.policy, TransportPolicy::Shm);
        assert_eq!(t.shm_ring_bytes, Some(8192));
        let every = |min| shm::cma::PullPolicy::Every { min };
        assert_eq!(t.shm_pulls, every(shm::cma::DEFAULT_MIN_PULL));
        let e = t.rdma.unwrap_err().to_string();
        assert!(e.contains("PSY_RDMA_PORT"), "{e}");
        let t = tunables(&[("PSY_SHM_RING_BYTES", "lots"), ("PSY_SHM_CMA_MIN", "0")]).unwrap();
        assert_eq!((t.shm_ring_bytes, t.shm_pulls), (None, every(1)));
        let t = tunables(&[("PSY_SHM_CMA", "off"), ("PSY_SHM_CMA_MIN", "4096")]).unwrap();
        assert_eq!(t.shm_pulls, shm::cma::PullPolicy::Off);
        let t = tunables(&[("PSY_SHM_CMA_MIN", "many")]).unwrap();
        assert_eq!(t.shm_pulls, shm::cma::PullPolicy::ByTraffic);
        assert!(tunables(&[("PSY_TRANSPORT", "carrier-pigeon")]).is_err());
    }

    #[test]
    fn transport_kinds_print_the_names_messages_use() {
        let names: Vec<String> = [
            TransportKind::Local,
            TransportKind::Tcp,
            TransportKind::Shm,
            TransportKind::Rdma,
        ]
        .iter()
        .map(|k| k.to_string())
        .collect();
        assert_eq!(names, ["self", "tcp", "shm", "rdma"]);
    }
}
