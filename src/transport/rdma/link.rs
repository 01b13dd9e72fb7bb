//! One RDMA connection as a non-blocking [`Link`]: an ordered byte stream over a reliable queue
//! pair. A write of up to [`Shape::eager`] bytes goes by send into one of the peer's posted
//! receive slots; a longer one is copied into the staging area and RDMA-written into the peer's
//! receive ring at the same offset, in chunks ([`super::chunk`]), each with its length as
//! immediate data. The reliable connection keeps both kinds in order, so the receiver serves
//! reads from its completions in the order they arrive. Credit flows back by RDMA write
//! ([`super::flow`]); end of stream is a zero-length send. The authenticated TCP connection to
//! the same peer stays open only to notice a peer that dies, as for shared memory.

use super::chunk::{self, Chunk, Limits};
use super::fabric::{Completion, Fabric, Shape};
use super::flow::{self, Credit};
use super::reg_cache::RegCache;
use crate::transport::{Link, TransportKind};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

const KIND_SHIFT: u32 = 56;
const EAGER: u64 = 1 << KIND_SHIFT;
const WRITE: u64 = 2 << KIND_SHIFT;
const CREDIT: u64 = 3 << KIND_SHIFT;
const ZERO_COPY: u64 = 4 << KIND_SHIFT;
const INDEX: u64 = (1 << KIND_SHIFT) - 1;

/// How long closing waits for its last messages to be acknowledged, and a credit write for a
/// free buffer: healthy fabrics take microseconds; a broken one fails the work request anyway.
const SETTLE: Duration = Duration::from_secs(2);

/// Received data not yet read, in arrival order.
#[derive(Debug)]
enum Segment {
    /// In receive slot `slot`; `read` of `len` bytes consumed.
    Slot {
        slot: usize,
        len: usize,
        read: usize,
    },
    /// In the ring at the consumed position.
    Ring { len: usize, read: usize },
    /// The peer closed its sending side.
    End,
}

struct Engine<F: Fabric> {
    fabric: F,
    shape: Shape,
    /// Bytes ever written into the peer's ring.
    sent: u64,
    /// The peer's receives ever consumed.
    used_receives: u64,
    /// Send slots not in flight.
    free_slots: Vec<usize>,
    /// Data work requests in flight.
    in_flight: usize,
    /// Credit writes in flight.
    credits_in_flight: usize,
    next_credit: usize,
    closed: bool,
    segments: VecDeque<Segment>,
    credit: Credit,
    /// Set when the liveness connection reached its end: the peer is gone or closed.
    peer_gone: bool,
    failed: Option<String>,
    zero_copy: Option<usize>,
    cache: RegCache<F::Region>,
    /// Registrations evicted while writes from them may be in flight; dropped when idle.
    retired: Vec<F::Region>,
    scratch: Vec<Completion>,
}

impl<F: Fabric> Engine<F> {
    fn broken(&self) -> Option<io::Error> {
        self.failed.as_ref().map(|what| {
            io::Error::new(
                io::ErrorKind::ConnectionReset,
                format!("the RDMA connection failed: {what}"),
            )
        })
    }

    /// Takes every completion that finished, without returning credit.
    fn drain(&mut self) -> io::Result<()> {
        let mut done = std::mem::take(&mut self.scratch);
        done.clear();
        if let Err(e) = self.fabric.poll(&mut done) {
            self.failed
                .get_or_insert(format!("polling completions: {e}"));
        }
        for c in done.drain(..) {
            match c {
                Completion::Sent { wr_id } => match wr_id & !INDEX {
                    EAGER => {
                        self.free_slots.push((wr_id & INDEX) as usize);
                        self.in_flight -= 1;
                    }
                    WRITE | ZERO_COPY => self.in_flight -= 1,
                    CREDIT => self.credits_in_flight -= 1,
                    _ => {
                        self.failed
                            .get_or_insert(format!("a completion for unknown work {wr_id:#x}"));
                    }
                },
                Completion::Received { slot, len: 0 } => {
                    // Nothing follows the end; the slot is not needed again.
                    let _ = slot;
                    self.segments.push_back(Segment::End);
                }
                Completion::Received { slot, len } => {
                    self.segments
                        .push_back(Segment::Slot { slot, len, read: 0 });
                }
                Completion::Written { slot, len } => {
                    self.repost(slot);
                    self.segments.push_back(Segment::Ring { len, read: 0 });
                }
                Completion::Failed { wr_id, what } => {
                    self.failed
                        .get_or_insert(format!("{what} (work request {wr_id:#x})"));
                }
            }
        }
        self.scratch = done;
        if self.in_flight == 0 {
            self.retired.clear();
        }
        match self.broken() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn repost(&mut self, slot: usize) {
        match self.fabric.post_recv(slot) {
            Ok(()) => self.credit.reposted += 1,
            Err(e) => {
                self.failed.get_or_insert(format!("posting a receive: {e}"));
            }
        }
    }

    /// Takes completions and returns credit when due.
    fn progress(&mut self) -> io::Result<()> {
        self.drain()?;
        if self.credit.due(self.shape.ring, self.shape.depth) {
            self.return_credit()?;
        }
        Ok(())
    }

    fn return_credit(&mut self) -> io::Result<()> {
        let until = Instant::now() + SETTLE;
        while self.credits_in_flight >= self.shape.credit_slots {
            self.drain()?;
            if Instant::now() > until {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "RDMA credit writes stopped completing (is the peer's adapter reachable?)",
                ));
            }
            std::hint::spin_loop();
        }
        let slot = self.next_credit % self.shape.credit_slots;
        self.next_credit += 1;
        let words = self.credit.report();
        self.fabric.set_credit_out(slot, words);
        self.fabric.post_credit(CREDIT | slot as u64, slot)?;
        self.credits_in_flight += 1;
        Ok(())
    }

    fn receives_left(&self) -> usize {
        flow::receives_left(
            self.shape.depth,
            self.used_receives,
            self.fabric.credit_in()[1],
        )
    }

    fn queue_room(&self) -> usize {
        self.shape.sq_data.saturating_sub(self.in_flight)
    }

    fn write(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.progress()?;
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "writing to an RDMA link after closing it",
            ));
        }
        if self.peer_gone {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the peer closed its side of the RDMA link (it exited or gave up the group)",
            ));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        let limit = self.receives_left().min(self.queue_room());
        if limit == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if total <= self.shape.eager {
            if let Some(slot) = self.free_slots.pop() {
                let mut at = 0;
                for b in bufs {
                    self.fabric.fill_send_slot(slot, at, b);
                    at += b.len();
                }
                if let Err(e) = self.fabric.post_send(EAGER | slot as u64, slot, total) {
                    self.free_slots.push(slot);
                    return Err(e);
                }
                self.used_receives += 1;
                self.in_flight += 1;
                return Ok(total);
            }
        }
        if let (Some(min), Some(first)) = (self.zero_copy, bufs.iter().find(|b| !b.is_empty())) {
            if first.len() >= min {
                return self.write_zero_copy(first, limit);
            }
        }
        let lim = Limits {
            ring: self.shape.ring,
            max_chunk: self.shape.max_chunk,
            max_wrs: limit,
        };
        let chunks = chunk::plan(self.sent, self.fabric.credit_in()[0], total, lim);
        if chunks.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut skip = 0;
        for c in &chunks {
            gather(bufs, skip, c.len, |at, piece| {
                self.fabric.fill_staging(c.offset + at, piece)
            });
            skip += c.len;
        }
        self.post_chunks(&chunks, |f, wr, c| f.post_write(wr, c.offset, c.len))?;
        Ok(skip)
    }

    fn post_chunks(
        &mut self,
        chunks: &[Chunk],
        mut post: impl FnMut(&mut F, u64, &Chunk) -> io::Result<()>,
    ) -> io::Result<()> {
        for c in chunks {
            post(&mut self.fabric, WRITE, c)?;
            self.sent += c.len as u64;
            self.used_receives += 1;
            self.in_flight += 1;
        }
        Ok(())
    }

    /// Writes the start of `data` straight from user memory, and waits until the adapter has
    /// read it (the caller may reuse the buffer once this returns).
    fn write_zero_copy(&mut self, data: &[u8], limit: usize) -> io::Result<usize> {
        let lim = Limits {
            ring: self.shape.ring,
            max_chunk: self.shape.max_chunk,
            max_wrs: limit,
        };
        let chunks = chunk::plan(self.sent, self.fabric.credit_in()[0], data.len(), lim);
        let n = chunk::total(&chunks);
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let addr = data.as_ptr() as usize;
        let fabric = &mut self.fabric;
        let (region, gone) = self
            .cache
            .get_or_register(addr, n, |start, len| fabric.register(start, len))?;
        let mut skip = 0;
        for c in &chunks {
            self.fabric
                .post_write_from(ZERO_COPY, region, addr + skip, c.offset, c.len)?;
            skip += c.len;
        }
        self.retired.extend(gone);
        let posted = chunks.len();
        self.sent += n as u64;
        self.used_receives += posted as u64;
        self.in_flight += posted;
        let until = Instant::now() + SETTLE;
        while self.in_flight > 0 {
            self.drain()?;
            if Instant::now() > until {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "RDMA writes from user memory stopped completing",
                ));
            }
            if self.in_flight > 0 {
                self.fabric.wait(None, Duration::from_micros(100));
            }
        }
        Ok(n)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.progress()?;
        let mut got = 0;
        while got < buf.len() {
            let Some(front) = self.segments.front_mut() else {
                break;
            };
            match front {
                Segment::End => break,
                Segment::Slot { slot, len, read } => {
                    let n = (*len - *read).min(buf.len() - got);
                    self.fabric
                        .read_recv_slot(*slot, *read, &mut buf[got..got + n]);
                    *read += n;
                    got += n;
                    if *read == *len {
                        let slot = *slot;
                        self.segments.pop_front();
                        self.repost(slot);
                    }
                }
                Segment::Ring { len, read } => {
                    let n = (*len - *read).min(buf.len() - got);
                    let at = (self.credit.consumed % self.shape.ring as u64) as usize;
                    self.fabric.read_ring(at, &mut buf[got..got + n]);
                    *read += n;
                    got += n;
                    self.credit.consumed += n as u64;
                    if *read == *len {
                        self.segments.pop_front();
                    }
                }
            }
        }
        if self.credit.due(self.shape.ring, self.shape.depth) {
            self.return_credit()?;
        }
        if got > 0 || buf.is_empty() {
            return Ok(got);
        }
        if matches!(self.segments.front(), Some(Segment::End)) || self.peer_gone {
            // The peer is gone: what it sent before has been read; report the end.
            return Ok(0);
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let until = Instant::now() + SETTLE;
        // The end-of-stream message needs a send slot and one of the peer's receives.
        while self.failed.is_none() && !self.peer_gone && Instant::now() < until {
            if self.receives_left() > 0 {
                if let Some(slot) = self.free_slots.pop() {
                    if self.fabric.post_send(EAGER | slot as u64, slot, 0).is_ok() {
                        self.used_receives += 1;
                        self.in_flight += 1;
                    }
                    break;
                }
            }
            if self.progress().is_err() {
                break;
            }
            self.fabric.wait(None, Duration::from_micros(100));
        }
        // Everything posted lands before the liveness connection says we closed.
        while self.in_flight > 0 && self.failed.is_none() && Instant::now() < until {
            if self.drain().is_err() {
                break;
            }
            if self.in_flight > 0 {
                self.fabric.wait(None, Duration::from_micros(100));
            }
        }
    }

    /// Whether a write is waiting for the peer to return credit (which raises no completion).
    fn starved(&self) -> bool {
        self.receives_left() == 0
            || chunk::free_bytes(self.sent, self.fabric.credit_in()[0], self.shape.ring) == 0
    }
}

/// Calls `put(offset in the piece sequence, bytes)` for bytes `[skip, skip + len)` of `bufs`.
fn gather(
    bufs: &[IoSlice<'_>],
    mut skip: usize,
    mut len: usize,
    mut put: impl FnMut(usize, &[u8]),
) {
    let mut at = 0;
    for b in bufs {
        if len == 0 {
            break;
        }
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        let n = (b.len() - skip).min(len);
        put(at, &b[skip..skip + n]);
        at += n;
        len -= n;
        skip = 0;
    }
}

/// An RDMA connection to one peer.
pub struct RdmaLink<F: Fabric> {
    engine: RefCell<Engine<F>>,
    liveness: Option<TcpStream>,
}

impl<F: Fabric> RdmaLink<F> {
    /// A link over a connected `fabric` whose buffers have `shape`, with every receive slot
    /// already posted. `liveness` is the authenticated TCP connection to the same peer (kept to
    /// notice its end); `zero_copy`: send slices at least this long from user memory.
    pub fn new(
        fabric: F,
        shape: Shape,
        liveness: Option<TcpStream>,
        zero_copy: Option<usize>,
    ) -> io::Result<RdmaLink<F>> {
        if let Some(s) = &liveness {
            s.set_nonblocking(true)?;
        }
        Ok(RdmaLink {
            engine: RefCell::new(Engine {
                fabric,
                shape,
                sent: 0,
                used_receives: 0,
                free_slots: (0..shape.depth).rev().collect(),
                in_flight: 0,
                credits_in_flight: 0,
                next_credit: 0,
                closed: false,
                segments: VecDeque::new(),
                credit: Credit::default(),
                peer_gone: false,
                failed: None,
                zero_copy,
                cache: RegCache::new(64, 1 << 30),
                retired: Vec::new(),
                scratch: Vec::new(),
            }),
            liveness,
        })
    }

    /// Looks (without blocking) whether the liveness connection ended; if so, takes what already
    /// arrived and marks the peer gone.
    fn probe_peer(&self, e: &mut Engine<F>) {
        let Some(s) = &self.liveness else { return };
        if e.peer_gone {
            return;
        }
        if crate::transport::tcp::peer_closed(s) {
            // The peer finished its sends before closing: they have landed; take them first.
            let _ = e.drain();
            e.peer_gone = true;
        }
    }
}

impl<F: Fabric> Link for RdmaLink<F> {
    fn write_some(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let e = self.engine.get_mut();
        e.write(bufs)
    }

    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut e = self.engine.borrow_mut();
        match e.read(buf) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                self.probe_peer(&mut e);
                e.read(buf)
            }
            other => other,
        }
    }

    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    fn block(&self, read: bool, write: bool, timeout: Duration) {
        let mut e = self.engine.borrow_mut();
        e.fabric.arm();
        if e.progress().is_err() || (read && !e.segments.is_empty()) {
            return;
        }
        if write && !e.starved() && e.queue_room() > 0 {
            return; // a write can go now
        }
        // Returned credit raises no completion: while a write waits for it, look again soon.
        let t = if write && e.starved() {
            timeout.min(Duration::from_micros(200))
        } else {
            timeout
        };
        let fd = self.liveness.as_ref().map(|s| s.as_raw_fd());
        e.fabric.wait(fd, t);
        self.probe_peer(&mut e);
    }

    fn pending(&self) -> bool {
        let mut e = self.engine.borrow_mut();
        let broken = e.progress().is_err();
        self.probe_peer(&mut e);
        broken || !e.segments.is_empty() || e.peer_gone
    }

    fn close_write(&mut self) {
        self.engine.get_mut().close();
        if let Some(s) = &self.liveness {
            let _ = s.shutdown(Shutdown::Write);
        }
    }

    fn transport(&self) -> TransportKind {
        TransportKind::Rdma
    }
}

#[cfg(test)]
mod tests;
