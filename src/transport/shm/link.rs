//! One pair of rings in a shared segment as a non-blocking [`Link`].

use super::cma::{self, offsets, PullPolicy, PullSlot, SideInfo};
use super::crossing::{Crossing, Wishes};
use super::ring::Ring;
use super::segment::Segment;
use crate::transport::{tcp, Link, Traffic, TransportKind};
use std::io::{self, IoSlice};
use std::net::{Shutdown, TcpStream};
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long one futex wait lasts at most before the peer's liveness is checked again.
const LIVENESS_CHECK: Duration = Duration::from_millis(5);

/// The most bytes an exchange's writes (all-reduce, all-gather, reduce-scatter, all-to-all) let
/// stand unread in the ring; one-way calls and sends may fill all of it. On the 2-core AMD VM
/// rings of 2 MiB made 2-rank broadcasts of 16 and 64 MiB take 0.55-0.66 of the time they took
/// through 1 MiB (the reader, further behind, likely copies lines the writer's 1 MiB L2 has
/// passed on to the shared L3 already). Exchanges that wrote as far ahead as their ring allowed
/// were slower instead: all-reduce of 16 MiB 1.15-1.38x through 4 MiB rings, and through 2 MiB
/// rings without this window 1.00-1.15x the time they take with it (`results/ring-reader-lag/`).
pub const EXCHANGE_WINDOW: usize = 1 << 20;

/// How far ahead of its reader a call of `traffic` writes ([`Ring::set_window`]).
fn write_window(traffic: Traffic) -> usize {
    match traffic {
        Traffic::Exchange | Traffic::ReducingExchange => EXCHANGE_WINDOW,
        Traffic::OneWay | Traffic::ReducingOneWay | Traffic::Eager { .. } => usize::MAX,
    }
}

/// A shared-memory link to a peer on the same host.
pub struct ShmLink {
    tx: Ring,
    rx: Ring,
    /// The pull descriptor of the sending direction ([`super::cma`]).
    tx_slot: NonNull<PullSlot>,
    /// The pull descriptor of the receiving direction.
    rx_slot: NonNull<PullSlot>,
    /// The peer's facts (its process id, whether it can pull from this process).
    peer: NonNull<SideInfo>,
    /// This side's requests to the peer for one-way calls ([`super::crossing`]).
    own_wishes: NonNull<Wishes>,
    /// The peer's requests to this side.
    peer_wishes: NonNull<Wishes>,
    /// Which slices go by pull descriptor ([`cma::pull_window`]).
    pulls: PullPolicy,
    /// Whether this host runs more ranks than it has cores ([`cma::pull_window`]).
    crowded: bool,
    /// The slice lengths (`min..=max`) sent by pull descriptor, when the peer can pull, for the
    /// traffic of the current call; `None`: none.
    pull_window: Option<(usize, usize)>,
    /// For a point-to-point send, its number on the pair: what the ring has not carried of it is
    /// pulled once the peer is blocked receiving it ([`cma::rendezvous_window`]).
    eager_seq: Option<u64>,
    /// Bytes of that message written into the ring while its receiver could still pull the
    /// rest ([`Route::RingUpTo`]).
    eager_inline: usize,
    /// How this call's ring writes store their bytes ([`super::crossing`]).
    crossing: Crossing,
    /// Whether this side published a message it awaits (so only then is there one to clear).
    awaiting: bool,
    /// Whether the peer said it can pull from this process (cached once true).
    peer_pulls: bool,
    /// Whether this side said it can pull from the peer: only then can descriptors arrive, so
    /// only then do reads and waits look at the receiving slot.
    accepts_pulls: bool,
    /// The peer's process id, once known.
    peer_pid: i32,
    /// The descriptor this side posted and the peer has not fully pulled yet.
    outstanding: Option<Outstanding>,
    /// The last descriptor fully pulled from the peer.
    rx_done: u64,
    /// The descriptor being pulled now, and how many of its bytes have been pulled.
    rx_current: (u64, u64),
    /// The authenticated TCP connection to the same peer: no data flows on it after the upgrade;
    /// its end of stream tells that the peer's process is gone (or gave up the group).
    liveness: TcpStream,
    // Declared last: the mapping must outlive the rings and slots that point into it (fields
    // drop in order).
    _segment: Segment,
}

/// A posted descriptor: where its bytes start in this process, how many, how many reported sent.
struct Outstanding {
    addr: u64,
    len: u64,
    reported: u64,
}

// SAFETY: the pointers point into `_segment`'s mapping, which lives exactly as long as the link
// and moves with it; the memory they point to is only touched through atomics, and the link is
// used by one thread at a time (`&mut self` for sending and receiving), as `Ring` requires.
unsafe impl Send for ShmLink {}

impl ShmLink {
    /// A link sending on `tx` and receiving on `rx`, both inside `segment`; `lower` says whether
    /// this side is the pair's lower rank (it sends on ring A and uses the lower side info).
    /// Slices that `pulls` picks (for the traffic [`Link::set_traffic`] names, one-way until
    /// then, and whether the host is `crowded`) go by pull descriptor when the peer can pull
    /// ([`crate::transport::TransportTunables::shm_pulls`]).
    pub(crate) fn new(
        segment: Segment,
        tx: Ring,
        rx: Ring,
        liveness: TcpStream,
        lower: bool,
        pulls: PullPolicy,
        crowded: bool,
    ) -> io::Result<ShmLink> {
        liveness.set_nonblocking(true)?;
        let (tx_at, rx_at, peer_at, own_at) = if lower {
            (
                offsets::SLOT_A,
                offsets::SLOT_B,
                offsets::SIDE_HIGHER,
                offsets::SIDE_LOWER,
            )
        } else {
            (
                offsets::SLOT_B,
                offsets::SLOT_A,
                offsets::SIDE_LOWER,
                offsets::SIDE_HIGHER,
            )
        };
        let (own_wishes_at, peer_wishes_at) = if lower {
            (offsets::WISHES_LOWER, offsets::WISHES_HIGHER)
        } else {
            (offsets::WISHES_HIGHER, offsets::WISHES_LOWER)
        };
        let at = |off: usize| {
            if segment.len() < 4096 {
                return Err(io::Error::other("the segment has no header page"));
            }
            // SAFETY: `off` lies inside the first page of the mapping (checked: at least one page
            // long), so the result is in bounds and non-null.
            Ok(unsafe { NonNull::new_unchecked(segment.as_ptr().add(off)) })
        };
        let (tx_slot, rx_slot, peer) = (
            at(tx_at)?.cast::<PullSlot>(),
            at(rx_at)?.cast::<PullSlot>(),
            at(peer_at)?.cast::<SideInfo>(),
        );
        let (own_wishes, peer_wishes) = (
            at(own_wishes_at)?.cast::<Wishes>(),
            at(peer_wishes_at)?.cast::<Wishes>(),
        );
        // SAFETY: as for `peer`: a 64-byte aligned `SideInfo` of atomics in the header page,
        // read once here while `segment` is alive. This side wrote it before the link was made.
        let accepts_pulls = unsafe { at(own_at)?.cast::<SideInfo>().as_ref() }
            .can_pull
            .load(Ordering::SeqCst)
            == 1;
        let mut link = ShmLink {
            tx,
            rx,
            tx_slot,
            rx_slot,
            peer,
            own_wishes,
            peer_wishes,
            pulls,
            crowded,
            pull_window: cma::pull_window(pulls, Traffic::OneWay, crowded),
            eager_seq: None,
            eager_inline: 0,
            crossing: Crossing::Cached,
            awaiting: false,
            peer_pulls: false,
            accepts_pulls,
            peer_pid: 0,
            outstanding: None,
            rx_done: 0,
            rx_current: (0, 0),
            liveness,
            _segment: segment,
        };
        link.peer_pid = link.peer_info().pid.load(Ordering::SeqCst) as i32;
        Ok(link)
    }

    fn tx_slot(&self) -> &PullSlot {
        // SAFETY: 64-byte aligned (page offset 1024 or 2048) inside the header page, which stays
        // mapped while `self` lives; all fields are atomics, valid for any bytes (zeroed at first).
        unsafe { self.tx_slot.as_ref() }
    }

    fn rx_slot(&self) -> &PullSlot {
        // SAFETY: as for `tx_slot`.
        unsafe { self.rx_slot.as_ref() }
    }

    fn peer_info(&self) -> &SideInfo {
        // SAFETY: 64-byte aligned inside the header page, mapped while `self` lives; atomics only.
        unsafe { self.peer.as_ref() }
    }

    /// Whether the peer may be sent pull descriptors.
    fn peer_pulls(&mut self) -> bool {
        if !self.peer_pulls {
            self.peer_pulls = self.peer_info().can_pull.load(Ordering::SeqCst) == 1;
        }
        self.peer_pulls
    }

    /// Reports progress of the outstanding descriptor: bytes newly pulled, or `WouldBlock`.
    fn outstanding_progress(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let pulled = self.tx_slot().pulled();
        let Some(o) = self.outstanding.as_mut() else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        let next = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map(|b| b.as_ptr() as u64);
        if next != Some(o.addr + o.reported) {
            return Err(io::Error::other(
                "internal error: a send did not continue where the shared-memory link left off",
            ));
        }
        let pulled = pulled.min(o.len);
        if pulled <= o.reported {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = pulled - o.reported;
        o.reported = pulled;
        if pulled == o.len {
            self.outstanding = None;
        }
        Ok(n as usize)
    }

    /// Pulls bytes of the peer's pending descriptor into `buf`, if the ring is drained up to it.
    fn pull_pending(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let (seq, at, addr, len) = self.rx_slot().pending(self.rx_done)?;
        if self.rx.consumed() != at {
            return None; // inline bytes before it first
        }
        if self.rx_current.0 != seq {
            self.rx_current = (seq, 0);
        }
        let done = self.rx_current.1;
        let want = (len.saturating_sub(done) as usize).min(buf.len());
        let n = match cma::pull(self.peer_pid, addr.wrapping_add(done), &mut buf[..want]) {
            Ok(0) if want > 0 => {
                return Some(Err(io::Error::other(
                    "reading the peer's memory returned nothing (its buffer is gone)",
                )))
            }
            Ok(n) => n as u64,
            Err(e) => {
                return Some(Err(io::Error::new(
                    e.kind(),
                    format!(
                        "reading the peer's memory (process {}) failed: {e}; PSY_SHM_CMA=0 turns single-copy transfers off",
                        self.peer_pid
                    ),
                )))
            }
        };
        let total = done + n;
        self.rx_current.1 = total;
        self.rx_slot().set_pulled(total);
        self.rx.wake_writer();
        if total >= len {
            self.rx_done = seq;
        }
        Some(Ok(n as usize))
    }

    /// How this write goes ([`Route`]): a slice inside the traffic's window
    /// ([`cma::pull_window`]) by pull descriptor; a point-to-point message by descriptor if the
    /// peer is blocked receiving it, else into the ring a growing slice at a time while the peer
    /// could still pull the rest; everything else through the ring.
    fn route(&mut self, bufs: &[IoSlice<'_>]) -> Route {
        let (min, max, seq) = match (self.pull_window, self.eager_seq) {
            (Some((min, max)), _) => (min, max, None),
            (None, Some(seq)) => match self.rendezvous_bounds() {
                Some((min, max)) => (min, max, Some(seq)),
                None => return Route::Ring,
            },
            (None, None) => return Route::Ring, // no scan on the hot path
        };
        let Some(i) = bufs.iter().position(|b| !b.is_empty() && b.len() >= min) else {
            return Route::Ring;
        };
        // Under a maximum only a whole message is pulled: its slice comes right after its header.
        // A slice with nothing before it continues a message that the ring has carried part of;
        // pulling the rest would leave the sender idle. Not so for a rendezvous: a receiver that
        // began waiting after the send had started pulls the rest of it (back-to-back ping-pong
        // sends usually start before the peer's receive says it waits: 1 MiB round trips took
        // 146 µs, against 97 µs when both receives were waiting first).
        let whole = bufs[..i].iter().any(|b| !b.is_empty());
        let fits = bufs[i].len() <= max && (whole || seq.is_some() || max == usize::MAX);
        if !fits || !self.peer_pulls() {
            return Route::Ring;
        }
        match seq {
            Some(seq) if seq != self.tx_slot().awaited() => {
                Route::RingUpTo(self.eager_inline.max(RENDEZVOUS_PROBE))
            }
            _ => Route::Pull(i),
        }
    }

    /// The lengths of a point-to-point payload that may be pulled: [`cma::rendezvous_window`]'s
    /// for a whole message; for the rest of one the ring has begun to carry (whose whole length
    /// the receiver checked before it said it waits), anything from [`RENDEZVOUS_PROBE`].
    fn rendezvous_bounds(&self) -> Option<(usize, usize)> {
        let (min, max) = cma::rendezvous_window(self.pulls, self.crowded)?;
        Some(match self.eager_inline {
            0 => (min, max),
            _ => (min.min(RENDEZVOUS_PROBE), max),
        })
    }

    /// Reads into `buf`: a pending pull first, else out of the receiving ring with `read`.
    fn read_from(
        &mut self,
        buf: &mut [u8],
        read: fn(&Ring, &mut [u8]) -> usize,
    ) -> io::Result<usize> {
        if self.accepts_pulls && !buf.is_empty() {
            if let Some(pulled) = self.pull_pending(buf) {
                return pulled;
            }
        }
        match read(&self.rx, buf) {
            0 if buf.is_empty() => Ok(0),
            // Closed: whatever was written before the close has been read (a second look
            // closes the race between the last write and the close flag).
            0 if self.rx.is_closed() => Ok(read(&self.rx, buf)),
            0 => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    /// Looks (without blocking) whether the peer's end of the TCP connection has closed; if so,
    /// marks the receiving ring closed, so reads drain what is there and then see the end, and
    /// writes fail.
    fn probe_peer(&self) {
        if tcp::peer_closed(&self.liveness) {
            // The peer can no longer write: closing its ring on our side is what it would do.
            self.rx.close();
        }
    }
}

/// How one write of a [`ShmLink`] goes ([`ShmLink::route`]).
enum Route {
    /// Slice `i` by pull descriptor, once the slices before it are in the ring.
    Pull(usize),
    /// At most this many bytes into the ring: a point-to-point message its receiver could pull
    /// but does not wait for yet.
    RingUpTo(usize),
    /// Everything through the ring.
    Ring,
}

/// How many bytes of a point-to-point message that its receiver could pull, but does not wait
/// for yet, go into the ring by the first write; each later write may double what the ring
/// holds of it ([`Route::RingUpTo`]). A receiver arriving soon after the
/// sender pulls nearly all of the message, and a sender whose receiver is busy elsewhere makes
/// few writes. 2-rank ping-pong round trips, first slice 64 / 16 / 4 KiB: 7.3 / 9.1 / 6.9 µs at
/// 64 KiB, 26.9 / 22.2 / 19.9 µs at 256 KiB, 117.5 / 105.1 / 102.4 µs at 1 MiB.
const RENDEZVOUS_PROBE: usize = 4 << 10;

/// The first `limit` bytes of `bufs`.
fn truncated<'b>(bufs: &'b [IoSlice<'_>], limit: usize) -> Vec<IoSlice<'b>> {
    let mut left = limit;
    let mut out = Vec::with_capacity(bufs.len());
    for b in bufs {
        let n = b.len().min(left);
        out.push(IoSlice::new(&b[..n]));
        left -= n;
    }
    out
}

impl Link for ShmLink {
    fn write_some(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // Bytes the peer pulled before it closed were delivered: report them first (a peer that
        // pulls the last bytes of a job and exits must not fail the sender's last send).
        if self.outstanding.is_some() {
            match self.outstanding_progress(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.rx.is_closed() => {}
                progress => return progress,
            }
        }
        if self.rx.is_closed() {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the peer closed its side of the shared-memory link (it exited or gave up the group)",
            ));
        }
        // Slices before the first large one go through the ring; the large one by descriptor once
        // they are all in.
        let route = self.route(bufs);
        let big = match route {
            Route::Pull(i) => Some(i),
            _ => None,
        };
        let inline = &bufs[..big.unwrap_or(bufs.len())];
        let want: usize = inline.iter().map(|b| b.len()).sum();
        let written = match route {
            Route::RingUpTo(limit) => {
                let n = self.tx.write(&truncated(inline, limit));
                self.eager_inline += n;
                n
            }
            _ if want > 0 && self.crossing == Crossing::Streamed => self.tx.write_streaming(inline),
            _ if want > 0 => self.tx.write(inline),
            _ => 0,
        };
        if let Some(i) = big.filter(|_| written == want) {
            let b = &bufs[i];
            let (addr, len) = (b.as_ptr() as u64, b.len() as u64);
            self.tx_slot().post(self.tx.written(), addr, len);
            self.tx.wake_reader();
            self.outstanding = Some(Outstanding {
                addr,
                len,
                reported: 0,
            });
        }
        match written {
            0 if bufs.iter().all(|b| b.is_empty()) => Ok(0),
            0 => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_from(buf, Ring::read)
    }

    fn read_some_streaming(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_from(buf, Ring::read_streaming)
    }

    /// In place from the ring, where no message can come by pull (whose bytes are not in it).
    fn read_in_place(
        &mut self,
        max: usize,
        unit: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Option<io::Result<usize>> {
        if self.accepts_pulls || max == 0 {
            return None;
        }
        Some(match self.rx.read_in_place(max, unit, &mut *f)? {
            // Closed: whatever was written before the close has been read (a second look
            // closes the race between the last write and the close flag).
            0 if self.rx.is_closed() => Ok(self.rx.read_in_place(max, unit, f)?),
            0 => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        })
    }

    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    fn block(&self, read: bool, write: bool, timeout: Duration) {
        let t = timeout.min(LIVENESS_CHECK);
        let t = if read && write { t / 2 } else { t };
        // With both, take turns briefly: either may unblock the step.
        if read {
            let done = self.rx_done;
            self.rx
                .wait_readable_or(t, || self.accepts_pulls && self.rx_slot().has_pending(done));
        }
        if write {
            match &self.outstanding {
                Some(o) => {
                    let reported = o.reported;
                    self.tx
                        .wait_writer_event(t, || self.tx_slot().pulled() != reported);
                }
                None => self.tx.wait_writable(t),
            }
        }
        self.probe_peer();
    }

    fn pending(&self) -> bool {
        self.probe_peer();
        self.rx.readable() > 0
            || self.rx.is_closed()
            || (self.accepts_pulls && self.rx_slot().has_pending(self.rx_done))
    }

    fn close_write(&mut self) {
        self.tx.close();
        let _ = self.liveness.shutdown(Shutdown::Write);
    }

    fn set_traffic(&mut self, traffic: Traffic) {
        self.pull_window = cma::pull_window(self.pulls, traffic, self.crowded);
        self.tx.set_window(write_window(traffic));
        self.eager_inline = 0;
        self.eager_seq = match traffic {
            Traffic::Eager { seq } => Some(seq),
            _ => None,
        };
    }

    fn set_crossing(&mut self, crossing: Crossing) {
        self.crossing = crossing;
    }

    fn ask_crossings(&mut self, seq: u64, wishes: u64) {
        // SAFETY: a 64-byte aligned `Wishes` of atomics in the header page (offsets checked at
        // compile time in `cma`), mapped while `self` lives; zeroed (no wishes) at creation.
        unsafe { self.own_wishes.as_ref() }.publish(seq, wishes);
    }

    fn asked_crossing(&self, seq: u64, bit: u32) -> Crossing {
        // SAFETY: as in `ask_crossings`, the peer's line.
        unsafe { self.peer_wishes.as_ref() }.asked(seq, bit)
    }

    fn await_message(&mut self, message: Option<(u64, usize)>) {
        // Only a message the peer could pull is worth a store into the shared line: small
        // receives keep their path as it was.
        let window =
            cma::rendezvous_window(self.pulls, self.crowded).filter(|_| self.accepts_pulls);
        match (message, window) {
            (Some((seq, bytes)), Some((min, max))) if (min..=max).contains(&bytes) => {
                self.rx_slot().set_awaited(seq);
                self.awaiting = true;
            }
            (None, _) if self.awaiting => {
                self.rx_slot().set_awaited(0);
                self.awaiting = false;
            }
            _ => {}
        }
    }

    fn transport(&self) -> TransportKind {
        TransportKind::Shm
    }
}

#[cfg(all(test, not(miri)))] // shared memory, sockets and process_vm_readv are beyond Miri
mod tests {
    use super::*;
    use crate::transport::shm::segment;
    use std::net::TcpListener;
    use std::time::Instant;

    const RING: usize = 64 << 10;
    const PAGE: usize = 4096;

    /// Two links over one segment in this process (two mappings, as two processes would have),
    /// with pulling allowed in both directions when `pull` is set.
    fn pair(tag: &str, pull: bool) -> (ShmLink, ShmLink) {
        pair_with_ring(tag, pull, RING)
    }

    /// [`pair`] with rings of `cap` bytes.
    fn pair_with_ring(tag: &str, pull: bool, cap: usize) -> (ShmLink, ShmLink) {
        let ring = Ring::bytes_needed(cap).next_multiple_of(PAGE);
        let (a_at, b_at, len) = (PAGE, PAGE + ring, PAGE + 2 * ring);
        let name = segment::name_for(&format!("linktest{}", std::process::id()), tag, 0, 1);
        let lower_seg = Segment::create(&name, len).expect("creating a segment");
        let higher_seg = Segment::open(&name, len).expect("opening it again");
        segment::unlink(&name).expect("unlinking it");
        // SAFETY: both rings lie inside the fresh, page-aligned mapping, which nobody uses yet.
        let (a, b) = unsafe {
            (
                Ring::init(lower_seg.as_ptr().add(a_at), cap),
                Ring::init(lower_seg.as_ptr().add(b_at), cap),
            )
        };
        // SAFETY: the same rings through the second mapping, initialised just above.
        let (a2, b2) = unsafe {
            (
                Ring::attach(higher_seg.as_ptr().add(a_at), cap).expect("ring A"),
                Ring::attach(higher_seg.as_ptr().add(b_at), cap).expect("ring B"),
            )
        };
        static PROBE: u64 = cma::PROBE_WORD;
        for off in [offsets::SIDE_LOWER, offsets::SIDE_HIGHER] {
            // SAFETY: a 64-byte aligned offset inside the header page of a live mapping.
            let info = unsafe { &*lower_seg.as_ptr().add(off).cast::<SideInfo>() };
            info.pid
                .store(u64::from(std::process::id()), Ordering::SeqCst);
            info.probe_addr
                .store(std::ptr::addr_of!(PROBE) as u64, Ordering::SeqCst);
            info.can_pull.store(u32::from(pull), Ordering::SeqCst);
        }
        let listener = TcpListener::bind("127.0.0.1:0").expect("listening");
        let c = TcpStream::connect(listener.local_addr().expect("address")).expect("connecting");
        let (s, _) = listener.accept().expect("accepting");
        // As `PSY_SHM_CMA=1` would.
        let pulls = PullPolicy::Every {
            min: cma::DEFAULT_MIN_PULL,
        };
        let lower = ShmLink::new(lower_seg, a, b, c, true, pulls, false).expect("lower link");
        let higher = ShmLink::new(higher_seg, b2, a2, s, false, pulls, false).expect("higher link");
        (lower, higher)
    }

    /// Sends `msgs` (each a small header then a payload) from `tx` and receives them on `rx` in
    /// another thread, both sides driven without blocking as the executor does; returns what
    /// arrived.
    fn exchange(tx: ShmLink, rx: ShmLink, msgs: Vec<(Vec<u8>, Vec<u8>)>) -> (ShmLink, Vec<u8>) {
        exchange_after(tx, rx, 0, msgs)
    }

    /// [`exchange`], where the ring already holds `in_ring` bytes the receiver reads first.
    fn exchange_after(
        mut tx: ShmLink,
        rx: ShmLink,
        in_ring: usize,
        msgs: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> (ShmLink, Vec<u8>) {
        let total = in_ring + msgs.iter().map(|(h, p)| h.len() + p.len()).sum::<usize>();
        let reader = std::thread::spawn(move || {
            let mut rx = rx;
            let mut got = vec![0u8; total];
            let mut n = 0;
            let deadline = Instant::now() + Duration::from_secs(30);
            while n < total {
                assert!(
                    Instant::now() < deadline,
                    "receiving timed out at {n} of {total}"
                );
                // Odd read sizes, so reads straddle the header, the descriptor and the next message.
                let want = (total - n).min(100_003);
                match rx.read_some(&mut got[n..n + want]) {
                    Ok(0) => panic!("end of stream after {n} bytes"),
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        rx.block(true, false, Duration::from_millis(5))
                    }
                    Err(e) => panic!("receiving: {e}"),
                }
            }
            got
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        for (h, p) in &msgs {
            let (mut hd, mut pd) = (0, 0);
            while hd < h.len() || pd < p.len() {
                assert!(Instant::now() < deadline, "sending timed out");
                let bufs = [IoSlice::new(&h[hd..]), IoSlice::new(&p[pd..])];
                match tx.write_some(&bufs) {
                    Ok(k) => {
                        let in_h = k.min(h.len() - hd);
                        hd += in_h;
                        pd += k - in_h;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        tx.block(false, true, Duration::from_millis(5))
                    }
                    Err(e) => panic!("sending: {e}"),
                }
            }
        }
        (tx, reader.join().expect("the reader panicked"))
    }

    /// [`exchange`], checking that the receiver got every message whole and in order.
    fn exchange_checked(tx: ShmLink, rx: ShmLink, msgs: Vec<(Vec<u8>, Vec<u8>)>) -> ShmLink {
        let expected: Vec<u8> = msgs
            .iter()
            .flat_map(|(h, p)| [h.clone(), p.clone()].concat())
            .collect();
        let (tx, got) = exchange(tx, rx, msgs);
        assert!(
            got == expected,
            "the received stream differs from the sent one"
        );
        tx
    }

    fn messages() -> Vec<(Vec<u8>, Vec<u8>)> {
        [3 << 20, 10, 200_000, 0, 70_001, 1 << 20]
            .iter()
            .enumerate()
            .map(|(m, &len)| {
                let header = vec![m as u8 + 100; 40];
                let payload = (0..len).map(|i| ((i * 7 + m) % 251) as u8).collect();
                (header, payload)
            })
            .collect()
    }

    #[test]
    fn large_payloads_are_pulled_and_only_headers_cross_the_ring() {
        let (lower, higher) = pair("pull", true);
        let msgs = messages();
        let lower = exchange_checked(lower, higher, msgs.clone());
        // Payloads of 64 KiB and more were pulled: only the headers and the 10-byte payload went
        // through the ring.
        let inline: usize = msgs
            .iter()
            .map(|(h, p)| {
                h.len()
                    + if p.len() < cma::DEFAULT_MIN_PULL {
                        p.len()
                    } else {
                        0
                    }
            })
            .sum();
        assert_eq!(lower.tx.written(), inline as u64);
        assert_eq!(
            lower.tx_slot().pending(0).map(|d| d.0),
            Some(4),
            "four descriptors"
        );
    }

    #[test]
    fn under_a_maximum_only_whole_messages_are_pulled_never_the_rest_of_one() {
        let (mut lower, higher) = pair("window", true);
        lower.pulls = PullPolicy::ByTraffic;
        lower.set_traffic(Traffic::OneWay); // pulls 64 KiB to 1 MiB
        let msgs: Vec<(Vec<u8>, Vec<u8>)> = messages()
            .into_iter()
            .filter(|(_, p)| p.len() == 3 << 20 || p.len() == 200_000)
            .collect();
        let lower = exchange_checked(lower, higher, msgs);
        // The 3 MiB payload crossed the ring whole, though its last part was under 1 MiB once the
        // ring had carried the rest; the 200,000-byte one was pulled.
        assert_eq!(lower.tx.written(), (40 + (3 << 20) + 40) as u64);
        assert_eq!(
            lower.tx_slot().pending(0).map(|d| d.0),
            Some(1),
            "one descriptor"
        );
    }

    #[test]
    fn a_point_to_point_message_is_pulled_only_when_its_receiver_awaits_it() {
        let (mut lower, higher) = pair("rendezvous", true);
        lower.pulls = PullPolicy::ByTraffic;
        let payload = |len: usize| (0..len).map(|i| (i % 253) as u8).collect::<Vec<u8>>();
        // Message 1: the receiver is not waiting yet, so the send completes into the ring.
        lower.set_traffic(Traffic::Eager { seq: 1 });
        let lower = exchange_checked(lower, higher, vec![(vec![1; 40], payload(200_000))]);
        assert_eq!(lower.tx.written(), 40 + 200_000);
        assert!(lower.tx_slot().pending(0).is_none(), "no descriptor");

        // Message 2: the receiver is blocked receiving it (and says so), so it is pulled. A
        // receive too small to be pulled publishes nothing.
        let (mut lower, mut higher) = pair("rendezvous2", true);
        lower.pulls = PullPolicy::ByTraffic;
        higher.await_message(Some((2, 100)));
        assert_eq!(lower.tx_slot().awaited(), 0);
        higher.await_message(Some((2, 200_000)));
        lower.set_traffic(Traffic::Eager { seq: 2 });
        let lower = exchange_checked(lower, higher, vec![(vec![2; 40], payload(200_000))]);
        assert_eq!(lower.tx.written(), 40, "only the header crossed the ring");
        assert_eq!(lower.tx_slot().pending(0).map(|d| d.0), Some(1));

        // The receiver awaits an earlier message than the one sent, or none any more: the ring.
        for awaited in [Some((2, 200_000)), None] {
            let (mut lower, mut higher) = pair("rendezvous3", true);
            lower.pulls = PullPolicy::ByTraffic;
            higher.await_message(Some((3, 200_000)));
            higher.await_message(awaited);
            lower.set_traffic(Traffic::Eager { seq: 3 });
            let lower = exchange_checked(lower, higher, vec![(vec![3; 40], payload(200_000))]);
            assert_eq!(lower.tx.written(), 40 + 200_000, "awaited {awaited:?}");
        }
    }

    #[test]
    fn a_receiver_that_starts_waiting_in_the_middle_of_a_message_pulls_the_rest() {
        let (mut lower, mut higher) = pair("rendezvous-late", true);
        lower.pulls = PullPolicy::ByTraffic;
        lower.set_traffic(Traffic::Eager { seq: 4 });
        let header = vec![4u8; 40];
        let payload: Vec<u8> = (0..200_000).map(|i| (i % 251) as u8).collect();
        // Nobody waits yet: the header and the start of the payload go into the ring, filling it.
        let slices = [IoSlice::new(&header), IoSlice::new(&payload)];
        let first = lower.write_some(&slices).expect("writing into the ring");
        assert!((41..=RING).contains(&first), "{first} bytes written");
        // Now the receiver blocks receiving message 4: the rest goes by descriptor.
        higher.await_message(Some((4, payload.len())));
        let rest = payload[first - 40..].to_vec();
        let (lower, got) = exchange_after(lower, higher, first, vec![(vec![], rest)]);
        assert!(
            got == [header, payload].concat(),
            "the message arrived changed"
        );
        assert_eq!(
            lower.tx.written(),
            first as u64,
            "nothing more crossed the ring"
        );
        assert_eq!(lower.tx_slot().pending(0).map(|d| d.0), Some(1));
    }

    #[test]
    fn without_permission_to_pull_everything_crosses_the_ring() {
        let (lower, higher) = pair("nopull", false);
        let msgs = messages();
        let total: usize = msgs.iter().map(|(h, p)| h.len() + p.len()).sum();
        let lower = exchange_checked(lower, higher, msgs);
        assert_eq!(lower.tx.written(), total as u64);
        assert!(lower.tx_slot().pending(0).is_none());
    }

    #[test]
    fn exchanges_write_at_most_their_window_ahead_and_one_way_calls_the_whole_ring() {
        let ring = 2 * EXCHANGE_WINDOW;
        let (mut lower, mut higher) = pair_with_ring("window", false, ring);
        let sent: Vec<u8> = (0..ring + 100).map(|i| (i % 251) as u8).collect();
        let mut at = 0;
        for traffic in [Traffic::Exchange, Traffic::ReducingExchange] {
            lower.set_traffic(traffic);
            at += lower.write_some(&[IoSlice::new(&sent[at..])]).unwrap_or(0);
            assert_eq!(at, EXCHANGE_WINDOW, "{traffic:?} ran past its window");
        }
        lower.set_traffic(Traffic::OneWay);
        at += lower
            .write_some(&[IoSlice::new(&sent[at..])])
            .expect("one-way write");
        assert_eq!(at, ring, "a one-way call fills the ring");
        let mut got = vec![0u8; ring];
        let mut read = 0;
        while read < ring {
            read += higher.read_some(&mut got[read..]).expect("reading");
        }
        assert_eq!(got, sent[..ring]);
    }

    #[test]
    fn each_side_reads_the_ways_its_peer_asked_for_and_only_those() {
        let (mut lower, mut higher) = pair("wishes", false);
        for link in [&lower, &higher] {
            assert_eq!(
                link.asked_crossing(4, 6),
                Crossing::Cached,
                "none asked yet"
            );
        }
        higher.ask_crossings(5, 1 << 6 | 1 << 40);
        assert_eq!(lower.asked_crossing(5, 6), Crossing::Streamed);
        assert_eq!(lower.asked_crossing(5, 40), Crossing::Streamed);
        assert_eq!(lower.asked_crossing(5, 7), Crossing::Cached);
        assert_eq!(lower.asked_crossing(4, 6), Crossing::Cached, "another call");
        assert_eq!(higher.asked_crossing(5, 6), Crossing::Cached, "not its own");
        lower.ask_crossings(6, 1);
        assert_eq!(higher.asked_crossing(6, 0), Crossing::Streamed);
        assert_eq!(lower.asked_crossing(5, 6), Crossing::Streamed, "kept");
    }
}
