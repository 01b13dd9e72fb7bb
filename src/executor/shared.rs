//! Buffers in shared memory ([`crate::Group::alloc_shared`]) and the all-reduce that works on
//! them in place, with no copy through any transport.
//!
//! Every rank of a group on one host allocates together: each creates a segment holding an
//! [`Arrival`] line and its buffer, then maps every other rank's. An all-reduce is then two
//! arrivals and one pass over memory: after the first arrival (every rank's input is ready), rank
//! `r` reduces chunk `r` of all buffers into its own, block by block, and writes each finished
//! block straight into every other rank's buffer; after the second arrival every buffer holds the
//! whole result. Chunk `r` of a buffer is only ever touched by rank `r` (and its owner before and
//! after the call), so no two ranks write the same bytes and none reads bytes being written.
//!
//! A rank that gives up waiting at an arrival withdraws the late peer's arrival first
//! ([`Arrival::withdraw`]), so the late peer fails too instead of going on with the call: late
//! at the first arrival, it touches no buffer; late at the second, it may already have written
//! its chunk of the result into the others' buffers, which a failed call leaves undefined.
//!
//! Where memory cannot be shared (the group spans hosts, `PSY_TRANSPORT=tcp`, a segment cannot be
//! created), every rank gets an ordinary private buffer instead and the all-reduce goes through
//! the transports; [`SharedBuf::is_shared`] tells which.

use super::stray;
use super::{Call, Engine, Links};
use crate::copy::copy_slice;
use crate::dtype::Element;
use crate::error::{Error, ErrorKind, Result};
use crate::reduce::{reduce_slice, ReduceOp};
use crate::schedule::chunk_span;
use crate::transport::shm::arrival::{Arrival, Waited};
use crate::transport::shm::board::Board;
use crate::transport::shm::segment::{self, Segment};
use crate::transport::shm::withdraw::{Withdraw, Withdrawal};
use std::marker::PhantomData;
use std::time::Instant;

/// Bytes before the data in each rank's segment: its arrival line, padded to a page.
const DATA_AT: usize = 4096;

/// Below this many bytes per rank, [`crate::Group::all_reduce_shared`] runs the ordinary
/// all-reduce instead: its fixed cost (two arrivals every rank must see) exceeds the copies saved.
/// Chosen with `psybench allreduce --shared-buffers` on 2 and 8 ranks (2 cores,
/// `results/archive/shm-psyne-vs-openmpi`) when the shared path cost about 7 µs at any size up to 8 KiB
/// and the node board under 1 µs. The shared path has since lost a per-call `sysconf` and takes
/// about 1.1 µs at 16 KiB (`results/engine-before-after`): the threshold is due to be measured
/// again.
pub const MIN_SHARED_BYTES: usize = 16 << 10;

/// Elements reduced and copied out per block: small enough to stay in cache between the two.
const BLOCK_BYTES: usize = 64 << 10;

/// What every rank's segment name is made of.
pub(crate) struct SharedScope {
    /// Whether every rank of the group is on this host and may share memory.
    pub(crate) allowed: bool,
    /// The job id (segment names carry it).
    pub(crate) job_id: String,
    /// The group's prefix (segment names carry it).
    pub(crate) prefix: String,
    /// Allocations made so far: every rank allocates in the same order, so the same number.
    pub(crate) next: std::sync::atomic::AtomicU64,
}

impl SharedScope {
    /// A scope where nothing is shared.
    pub(crate) fn private() -> SharedScope {
        SharedScope {
            allowed: false,
            job_id: String::new(),
            prefix: String::new(),
            next: Default::default(),
        }
    }

    /// The segment of `rank` for allocation `id`.
    pub(crate) fn name(&self, id: u64, rank: usize) -> String {
        segment::name_for(
            &self.job_id,
            &format!("{}/shared{id}", self.prefix),
            rank,
            rank,
        )
    }
}

/// A buffer of `T` that every rank of a group on one host can read and write: made by
/// [`crate::Group::alloc_shared`], all-reduced in place by [`crate::Group::all_reduce_shared`].
/// Otherwise an ordinary slice (it dereferences to `[T]`).
pub struct SharedBuf<T: Element> {
    inner: Inner<T>,
}

enum Inner<T: Element> {
    Private(Vec<T>),
    Mapped(Mapped<T>),
}

/// The shared form: this rank's segment and every peer's.
pub(crate) struct Mapped<T: Element> {
    rank: usize,
    len: usize,
    /// Every rank's segment, this rank's included, by rank.
    segments: Vec<Segment>,
    /// The last arrival epoch.
    epoch: u32,
    _type: PhantomData<T>,
}

impl<T: Element> SharedBuf<T> {
    pub(crate) fn private(len: usize) -> SharedBuf<T> {
        SharedBuf {
            inner: Inner::Private(vec![T::zeroed(); len]),
        }
    }

    pub(crate) fn mapped(rank: usize, len: usize, segments: Vec<Segment>) -> SharedBuf<T> {
        SharedBuf {
            inner: Inner::Mapped(Mapped {
                rank,
                len,
                segments,
                epoch: 0,
                _type: PhantomData,
            }),
        }
    }

    /// Whether the buffer lives in memory the group's ranks share (all-reduces on it are then
    /// zero-copy); false where the group cannot share memory.
    pub fn is_shared(&self) -> bool {
        matches!(self.inner, Inner::Mapped(_))
    }

    pub(crate) fn mapped_mut(&mut self) -> Option<&mut Mapped<T>> {
        match &mut self.inner {
            Inner::Mapped(m) => Some(m),
            Inner::Private(_) => None,
        }
    }
}

/// Bytes of the segment holding `len` elements of `T` after the arrival page.
pub(crate) fn segment_len<T: Element>(len: usize) -> Option<usize> {
    len.checked_mul(std::mem::size_of::<T>())?
        .checked_add(DATA_AT)?
        .checked_next_multiple_of(4096)
}

/// The arrival line at the start of a segment.
pub(crate) fn arrival(seg: &Segment) -> &Arrival {
    // SAFETY: every shared-buffer segment is at least `DATA_AT` bytes (`segment_len`), page
    // aligned, and zero-filled at creation; `Arrival` is 64 bytes of atomics, valid for any bytes;
    // the borrow keeps the mapping alive.
    unsafe { &*seg.as_ptr().cast::<Arrival>() }
}

impl<T: Element> std::ops::Deref for SharedBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.inner {
            Inner::Private(v) => v,
            Inner::Mapped(m) => m.own(),
        }
    }
}

impl<T: Element> std::ops::DerefMut for SharedBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.inner {
            Inner::Private(v) => v,
            Inner::Mapped(m) => m.own_mut(),
        }
    }
}

impl<T: Element> Mapped<T> {
    /// A view of `len` elements of `T` per rank over `segments` (every rank's, by rank),
    /// whose last arrival was `epoch`; the segments back if one has no room for `len` elements
    /// after its arrival page.
    pub(crate) fn over(
        rank: usize,
        len: usize,
        segments: Vec<Segment>,
        epoch: u32,
    ) -> std::result::Result<Mapped<T>, Vec<Segment>> {
        let need = segment_len::<T>(len);
        if !segments.iter().all(|s| need.is_some_and(|n| s.len() >= n)) {
            return Err(segments);
        }
        Ok(Mapped {
            rank,
            len,
            segments,
            epoch,
            _type: PhantomData,
        })
    }

    /// The segments and the last arrival's epoch, for a later [`Mapped::over`].
    pub(crate) fn into_parts(self) -> (Vec<Segment>, u32) {
        (self.segments, self.epoch)
    }

    /// This rank's buffer.
    pub(crate) fn own(&self) -> &[T] {
        self.slice(self.rank)
    }

    /// This rank's buffer, to write.
    pub(crate) fn own_mut(&mut self) -> &mut [T] {
        self.slice_mut(self.rank)
    }

    fn data(&self, rank: usize) -> *mut T {
        // SAFETY: every segment is at least `segment_len::<T>(len)` bytes (checked when it was
        // opened, or by `Mapped::over`), so
        // the data starts `DATA_AT` bytes in, inside the mapping, page aligned (aligned for `T`).
        unsafe { self.segments[rank].as_ptr().add(DATA_AT).cast::<T>() }
    }

    fn slice(&self, rank: usize) -> &[T] {
        // SAFETY: `len` elements of `T` fit after `DATA_AT` (segment_len), the memory is
        // initialised (zero-filled, and `T: Pod` accepts any bytes) and mapped while `self` lives.
        // Other ranks write this buffer only inside `all_reduce_shared`, which holds `&mut self`
        // on every rank, so no write by them overlaps this shared borrow.
        unsafe { std::slice::from_raw_parts(self.data(rank), self.len) }
    }

    fn slice_mut(&mut self, rank: usize) -> &mut [T] {
        // SAFETY: as in `slice`; `&mut self` makes this the only borrow in this process, and other
        // ranks touch this memory only inside a collective call this rank is also in.
        unsafe { std::slice::from_raw_parts_mut(self.data(rank), self.len) }
    }

    /// The number of elements of every rank's buffer.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first rank whose process has ended, by the pids on the ranks' arrival lines.
    fn first_gone(&self) -> Option<usize> {
        crate::wait::first_ended(self.segments.iter().map(|seg| arrival(seg).pid()))
    }

    /// This rank's error when a peer that gave up waiting for it withdrew its arrival.
    fn too_late(&self, call: &Call, links: &Links, w: Withdrawal) -> Error {
        let site = call.site(links.rank, &links.peers);
        site.withdrawn(self.rank, w, self.first_gone())
    }

    /// Arrives at the next epoch with `(kind, count)` and waits for every peer to arrive; then
    /// checks they called the same thing.
    /// A peer that sends this rank a message meanwhile is in another call: its message says
    /// which.
    fn meet(
        &mut self,
        kind: u32,
        call: &Call,
        links: &mut Links,
        next_flat: Option<(&Board, u64)>,
        deadline: Instant,
    ) -> Result<()> {
        let epoch = self.epoch.wrapping_add(1);
        // A peer that gave up waiting for this rank has withdrawn its arrival: too late to join.
        arrival(&self.segments[self.rank])
            .arrive(epoch, kind, self.len as u64)
            .map_err(|w| self.too_late(call, links, w))?;
        // A peer in a call over the links shows its message there, once its link is adopted.
        links.adopt_arrived()?;
        for (peer, seg) in self.segments.iter().enumerate() {
            if peer == self.rank {
                continue;
            }
            let line = arrival(seg);
            let waits = (call.wait.poll, call.wait.spin);
            let on_board = |(board, k): (&Board, u64)| board.slot(peer, (k % 2) as usize).ready(k);
            // The interrupt check is asked where the line's wait blocks, as the peer checks are.
            let mut interrupted = None;
            let elsewhere = || {
                interrupted = call.interrupt.poll();
                interrupted.is_some()
                    || stray::pending(links, peer)
                    || next_flat.is_some_and(on_board)
            };
            let mut waited = line.wait_for(epoch, waits, deadline, elsewhere);
            let site = call.site(links.rank, &links.peers);
            if let Waited::Gone | Waited::TimedOut | Waited::Elsewhere = waited {
                // Giving up: first withdraw the peer's arrival, so that it cannot go on with
                // this call either (one call, one outcome); if it arrived first, it made it.
                let code = match waited {
                    Waited::Gone => ErrorKind::PeerLost,
                    Waited::TimedOut => ErrorKind::Timeout,
                    _ if interrupted.is_some() => ErrorKind::Aborted,
                    _ => ErrorKind::Mismatch,
                };
                let me = Withdrawal {
                    by: self.rank,
                    code: crate::executor::kind_code(code),
                };
                if line.withdraw(epoch, me) == Withdraw::Joined {
                    waited = Waited::Arrived;
                }
            }
            return Err(match waited {
                Waited::Elsewhere if interrupted.is_some() => site.interrupted(
                    peer,
                    "arrive at the shared buffers",
                    interrupted.as_deref().unwrap_or_default(),
                ),
                Waited::Arrived if line.call(epoch) == (kind, self.len as u64) => continue,
                Waited::Withdrawn(w) => site.withdrawn(peer, w, self.first_gone()),
                Waited::Arrived => site.mismatch(
                    peer,
                    "a different call on its shared buffer of this allocation",
                ),
                Waited::Gone => site.lost(
                    peer,
                    format_args!(
                        "(process {}) exited before arriving at the shared buffers; check its output",
                        line.pid()
                    ),
                ),
                Waited::TimedOut => site.timeout(peer, "arrive at the shared buffers"),
                Waited::Elsewhere if stray::pending(links, peer) => {
                    stray::stray_error(links, peer, call)
                }
                Waited::Elsewhere => {
                    site.mismatch(peer, "an all-reduce on the node board (not on shared buffers)")
                }
            });
        }
        self.epoch = epoch;
        Ok(())
    }

    /// Reduces chunk `rank` of every buffer into this rank's and copies the result into all the
    /// others, block by block; between the two arrivals of [`SharedAllReduce`].
    ///
    /// `canonical`: every element is folded in rank order, `((x0 ⊕ x1) ⊕ x2) ⊕ …`, through a
    /// block of scratch ([`crate::ReduceOrder::Canonical`]); otherwise this rank's own values
    /// come first.
    fn reduce_own_chunk(&mut self, op: ReduceOp, size: usize, canonical: bool) {
        let mine = chunk_span(self.len, size, self.rank);
        let block = (BLOCK_BYTES / std::mem::size_of::<T>().max(1)).max(1);
        let mut acc = if canonical {
            vec![T::zeroed(); block.min(mine.len())]
        } else {
            Vec::new()
        };
        let mut at = mine.start;
        while at < mine.end {
            let end = (at + block).min(mine.end);
            let n = end - at;
            if canonical {
                self.fold_in_rank_order(op, size, at, &mut acc[..n]);
            }
            // SAFETY: `[at, end)` lies inside chunk `rank` of every buffer, which only this rank
            // touches between the two arrivals (see the module docs): the owner of each buffer
            // touches only its own chunk, and has handed the rest to the other ranks until the
            // second arrival. Each slice below is therefore the only live access to its bytes; this
            // rank's own chunk is borrowed mutably once, the peers' chunks one at a time.
            let own = unsafe { std::slice::from_raw_parts_mut(self.data(self.rank).add(at), n) };
            if canonical {
                copy_slice(&mut own[..], &acc[..n]);
            } else {
                for peer in (0..size).filter(|&p| p != self.rank) {
                    // SAFETY: as above; a peer's chunk `rank` is read here and nowhere else now.
                    let theirs = unsafe { std::slice::from_raw_parts(self.data(peer).add(at), n) };
                    reduce_slice(op, own, theirs);
                }
            }
            if op == ReduceOp::Avg {
                for x in own.iter_mut() {
                    *x = x.div_count(size);
                }
            }
            for peer in (0..size).filter(|&p| p != self.rank) {
                // SAFETY: as above; a peer's chunk `rank` is written here and nowhere else now,
                // and it cannot overlap `own` (another mapping).
                let theirs = unsafe { std::slice::from_raw_parts_mut(self.data(peer).add(at), n) };
                copy_slice(&mut theirs[..], own);
            }
            at = end;
        }
    }

    /// Writes to `acc` the rank-order fold of elements `at..at + acc.len()` of every buffer.
    fn fold_in_rank_order(&self, op: ReduceOp, size: usize, at: usize, acc: &mut [T]) {
        let n = acc.len();
        // SAFETY: as in `reduce_own_chunk`: these elements lie in chunk `rank` of every buffer,
        // which only this rank touches now; they are only read here, and `acc` is private.
        let of = |r: usize| unsafe { std::slice::from_raw_parts(self.data(r).add(at), n) };
        copy_slice(&mut acc[..], of(0));
        for r in 1..size {
            reduce_slice(op, acc, of(r));
        }
    }
}

/// An engine: the in-place all-reduce over every rank's shared buffer. Two arrivals (every
/// rank's input is ready; every rank's chunk is written back) around one pass over memory.
pub(crate) struct SharedAllReduce<'a, T: Element> {
    /// This rank's view of the buffers.
    pub(crate) mapped: &'a mut Mapped<T>,
    /// The reduction (`Core::execute` checks it for `T` before the engine runs).
    pub(crate) op: ReduceOp,
    /// The group's node board and the number the next flat all-reduce would have: a peer that
    /// published that one is in another call.
    pub(crate) next_flat: Option<(&'a Board, u64)>,
    /// Fold every element in rank order ([`crate::ReduceOrder::Canonical`]).
    pub(crate) canonical: bool,
}

impl<T: Element> Engine for SharedAllReduce<'_, T> {
    fn run(self, call: &Call, links: &mut Links) -> Result<()> {
        let SharedAllReduce {
            mapped,
            op,
            next_flat,
            canonical,
        } = self;
        let size = links.peers.len();
        let deadline = Instant::now() + call.timeout;
        let kind = 1 << 16 | u32::from(T::DTYPE as u8) << 8 | u32::from(op as u8);
        mapped.meet(kind, call, links, next_flat, deadline)?;
        mapped.reduce_own_chunk(op, size, canonical);
        mapped.meet(kind, call, links, next_flat, deadline)
    }
}

/// Allocation, run by every rank: create this rank's segment, let every rank create its own
/// (`sync` is a collective that every rank calls and that returns the minimum of their flags),
/// open the others, and unlink this rank's name once everyone has mapped it.
pub(crate) fn allocate<T: Element>(
    scope: &SharedScope,
    rank: usize,
    size: usize,
    len: usize,
    mut sync: impl FnMut(bool) -> Result<bool>,
) -> Result<Option<Vec<Segment>>> {
    let id = scope.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let bytes = segment_len::<T>(len)
        .ok_or_else(|| Error::invalid(format!("alloc_shared: {len} elements is too many")))?;
    let own_name = scope.name(id, rank);
    let own = match Segment::create(&own_name, bytes) {
        Ok(seg) => {
            arrival(&seg).claim();
            Some(seg)
        }
        Err(e) => {
            crate::report::warn(format_args!(
                "rank {rank}: cannot create a shared buffer ({e}); using private memory"
            ));
            None
        }
    };
    // Past this point the name must go again whatever happens.
    struct Unlink(Option<String>);
    impl Drop for Unlink {
        fn drop(&mut self) {
            if let Some(name) = self.0.take() {
                let _ = segment::unlink(&name);
            }
        }
    }
    let _unlink = Unlink(own.as_ref().map(|_| own_name));
    if !sync(own.is_some())? {
        return Ok(None);
    }
    let mut segments = Vec::with_capacity(size);
    let mut own = own;
    let mut opened = true;
    for peer in 0..size {
        if peer == rank {
            segments.extend(own.take());
            continue;
        }
        match Segment::open(&scope.name(id, peer), bytes) {
            Ok(seg) => segments.push(seg),
            Err(e) => {
                crate::report::warn(format_args!("rank {rank}: cannot map rank {peer}'s shared buffer ({e}); using private memory"));
                opened = false;
                break;
            }
        }
    }
    if !sync(opened)? {
        return Ok(None);
    }
    Ok(Some(segments))
}
