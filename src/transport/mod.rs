//! Bytes between two ranks. One folder per transport, each with the same shape: a way to listen,
//! a way to connect, and a [`Link`] the executor drives without blocking.
//!
//! TCP ([`tcp`]) connects every pair; pairs on the same host then move to shared memory
//! ([`shm`]) unless `PSY_TRANSPORT=tcp`; pairs on different hosts move to RDMA ([`rdma`]) when
//! both ends have an active port (feature `rdma`), and stay on TCP when either lacks one.

pub mod rdma;
pub mod shm;
pub mod tcp;

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// A connected, authenticated, ordered byte stream to one peer rank, in non-blocking mode.
pub trait Link: Send {
    /// Writes some of `bufs` (in order, as one stream); `WouldBlock` when nothing fits now.
    fn write_some(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize>;
    /// Reads into `buf`; `Ok(0)` is end of stream, `WouldBlock` means nothing has arrived yet.
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize>;
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
    /// The transport's name, for messages (`tcp`).
    fn transport(&self) -> &'static str;
}

/// Where a peer rank lives, for error messages and transport choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's host name.
    pub host: String,
    /// The address its listener advertised.
    pub addr: String,
    /// Identifies the machine (host name and boot id): equal keys can share memory.
    pub host_key: String,
    /// Whether the peer allows shared memory (its `PSY_TRANSPORT` is not `tcp`).
    pub shm_ok: bool,
    /// The transport of the link to it (`tcp`, `shm`, `rdma`, or `self`).
    pub transport: &'static str,
}

impl std::fmt::Display for PeerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "host {} at {}, {}", self.host, self.addr, self.transport)
    }
}

/// Which transports a rank may use (`PSY_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportPolicy {
    /// Shared memory for peers on the same host, TCP for the others (the default).
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
        match std::env::var(crate::contract::TRANSPORT) {
            Ok(v) => TransportPolicy::parse(&v),
            Err(_) => Ok(TransportPolicy::Auto),
        }
    }
}

/// This machine's identity for shared memory: host name and kernel boot id.
pub fn host_key() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("{}/{}", crate::hostname(), boot.trim())
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
}
