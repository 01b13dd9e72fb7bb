//! Bytes between two ranks. One folder per transport, each with the same shape: a way to listen,
//! a way to connect, and a [`Link`] the executor drives without blocking.
//!
//! Only TCP exists so far ([`tcp`]); shared memory and RDMA will sit beside it and be preferred per
//! peer when both ends can use them.

pub mod tcp;

use std::io;
use std::os::fd::RawFd;

/// A connected, authenticated, ordered byte stream to one peer rank, in non-blocking mode.
pub trait Link: Send {
    /// Writes some of `bufs` (in order, as one stream); `WouldBlock` when nothing fits now.
    fn write_some(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize>;
    /// Reads into `buf`; `Ok(0)` is end of stream, `WouldBlock` means nothing has arrived yet.
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// A descriptor that polls readable/writable when [`Link::read_some`]/[`Link::write_some`]
    /// can make progress.
    fn poll_fd(&self) -> RawFd;
    /// Stops sending (the peer reads end of stream after what was already sent).
    fn close_write(&mut self);
    /// The transport's name, for messages (`tcp`).
    fn transport(&self) -> &'static str;
}

/// Where a peer rank lives, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's host name.
    pub host: String,
    /// The address its listener advertised.
    pub addr: String,
}

impl std::fmt::Display for PeerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "host {} at {}", self.host, self.addr)
    }
}
