//! The seam between the link's protocol ([`super::link`]) and an adapter: what the protocol posts
//! and what completes. The verbs implementation drives a real queue pair; the in-tree fake
//! (`rdma::fake`, tests only) moves the same bytes between two in-process ends, so the
//! protocol (credits, ring wrap-around, end of stream) is tested without hardware.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// A finished work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// A send-side work request finished (`wr_id` as posted).
    Sent {
        /// As posted.
        wr_id: u64,
    },
    /// A message arrived by send into receive slot `slot`: `len` bytes (0: end of stream).
    Received {
        /// The receive slot.
        slot: usize,
        /// Bytes in it.
        len: usize,
    },
    /// An RDMA write with immediate of `len` bytes landed in the ring; receive slot `slot`
    /// carried its notice and holds no data.
    Written {
        /// The receive slot that was consumed.
        slot: usize,
        /// Bytes written into the ring.
        len: usize,
    },
    /// A work request failed: the connection is broken.
    Failed {
        /// As posted.
        wr_id: u64,
        /// The adapter's status, readable.
        what: String,
    },
}

/// Sizes of one link's buffers, the same on both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Bytes of the receive ring (a power of two); the send staging area mirrors the peer's.
    pub ring: usize,
    /// Receive slots kept posted (and send slots).
    pub depth: usize,
    /// Bytes of each slot: the largest message sent by send/receive.
    pub eager: usize,
    /// Largest single RDMA write.
    pub max_chunk: usize,
    /// Data work requests in flight at most (the send queue holds these plus credit writes and
    /// the end-of-stream message).
    pub sq_data: usize,
    /// Credit words buffers, so that a credit write never overwrites one still in flight.
    pub credit_slots: usize,
}

/// A connected queue pair and its registered buffers: a receive ring the peer writes into, a
/// staging area mirroring the peer's ring, `depth` receive and send slots, the credit words the
/// peer writes and `credit_slots` buffers of credit words for the peer.
pub trait Fabric: Send {
    /// A registration of user memory (dropping it deregisters).
    type Region: Send;

    /// Copies `data` into the staging area at `offset`.
    fn fill_staging(&mut self, offset: usize, data: &[u8]);
    /// Copies `data` into send slot `slot` at `offset`.
    fn fill_send_slot(&mut self, slot: usize, offset: usize, data: &[u8]);
    /// Copies from the receive ring at `offset` into `out`.
    fn read_ring(&self, offset: usize, out: &mut [u8]);
    /// Copies from receive slot `slot` at `offset` into `out`.
    fn read_recv_slot(&self, slot: usize, offset: usize, out: &mut [u8]);
    /// The credit words the peer last wrote: `[ring bytes consumed, receives reposted]`.
    fn credit_in(&self) -> [u64; 2];
    /// Sets credit buffer `slot` to `words`, to be written to the peer by [`Fabric::post_credit`].
    fn set_credit_out(&mut self, slot: usize, words: [u64; 2]);

    /// Sends `len` bytes of send slot `slot` into the peer's next receive slot.
    fn post_send(&mut self, wr_id: u64, slot: usize, len: usize) -> io::Result<()>;
    /// RDMA-writes `len` staging bytes at `offset` to the same offset of the peer's ring, with the
    /// length as immediate data (consuming one of the peer's receives).
    fn post_write(&mut self, wr_id: u64, offset: usize, len: usize) -> io::Result<()>;
    /// As [`Fabric::post_write`], from user memory at `addr` registered as `region`.
    fn post_write_from(
        &mut self,
        wr_id: u64,
        region: &Self::Region,
        addr: usize,
        offset: usize,
        len: usize,
    ) -> io::Result<()>;
    /// RDMA-writes credit buffer `slot` to the peer's credit words (no receive consumed).
    fn post_credit(&mut self, wr_id: u64, slot: usize) -> io::Result<()>;
    /// Posts receive slot `slot` again.
    fn post_recv(&mut self, slot: usize) -> io::Result<()>;
    /// Registers `[start, start + len)` of this process's memory for sending from.
    fn register(&mut self, start: usize, len: usize) -> io::Result<Self::Region>;

    /// Appends the completions that finished since the last call.
    fn poll(&mut self, out: &mut Vec<Completion>) -> io::Result<()>;
    /// Asks for a wake-up at the next completion; call before the last poll ahead of
    /// [`Fabric::wait`], so a completion in between is not missed.
    fn arm(&mut self);
    /// Blocks until a completion may have arrived, `also` is readable, or `timeout` passes.
    /// Spurious returns are allowed.
    fn wait(&mut self, also: Option<RawFd>, timeout: Duration);
}
