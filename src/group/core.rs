//! The state shared by every handle of a group: its links, its sequence numbers, the order in
//! which calls run, and the one place where a collective's bytes are handed to the executor.

use crate::bootstrap::StoreServer;
use crate::copy::copy_slice;
use crate::dtype::{DType, Element};
use crate::error::{Error, ErrorKind, Result};
use crate::executor::flat::{BoardCollective, BoardCrossing};
use crate::executor::shared::{Mapped, SharedAllReduce, SharedScope};
use crate::executor::staging::Staging;
use crate::executor::{
    abort_links, fail, Call, Engine, Links, OpDesc, OpKind, StepMemory, Steps, WorkView,
};
use crate::options::Tunables;
use crate::reduce::{ReduceOp, Reducer};
use crate::schedule::{self, Algo, Collective, HierAlgos, Hosts, Schedule};
use crate::transport::shm::board::Board;
use crate::transport::shm::crossing::{Chooser, Crossing, CrossingPolicy};
use crate::transport::{TransportPolicy, TransportTunables};
use crate::tuning::{Shape, Tuning};
use crate::wait::{Interrupt, InterruptCheck, WaitPolicy};
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Calls run in the order they were issued: each takes a ticket and waits for its turn. Calls
/// in flight (issued and not finished, blocking or not) all come from one thread: a call from
/// another is refused ([`super::owner::Claim`], which hands out the tickets).
///
/// The common case (no other call in flight) costs two atomic operations and no system call:
/// the lock and condition variable are touched only when a call must wait for an earlier one.
#[derive(Default)]
pub(crate) struct Gate {
    claim: super::owner::Claim,
    /// Tickets served (compared with tickets in their low [`super::owner::TICKET_BITS`] bits).
    serving: AtomicU64,
    waiters: AtomicUsize,
    lock: Mutex<()>,
    turn: Condvar,
}

impl Gate {
    /// A ticket for call `what` from this thread, unless another thread has calls in flight.
    pub(crate) fn take(&self, what: &str) -> Result<u64> {
        self.claim.take(what, &self.serving)
    }

    /// Whether `ticket` is being served.
    fn serves(&self, ticket: u64) -> bool {
        self.serving.load(Ordering::SeqCst) & super::owner::TICKETS == ticket
    }

    pub(crate) fn wait_turn(&self, ticket: u64) {
        if self.serves(ticket) {
            return;
        }
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.waiters.fetch_add(1, Ordering::SeqCst);
        // Re-checked under the lock: `done` bumps `serving` before it looks at `waiters`, and
        // notifies under the lock, so a wake-up cannot fall between this check and the wait.
        while !self.serves(ticket) {
            guard = self.turn.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    pub(crate) fn done(&self) {
        self.serving.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.turn.notify_all();
        }
    }
}

/// Marks the ticket served when dropped, even if the call panicked.
pub(crate) struct Turn<'a>(pub(crate) &'a Gate);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// Schedules already built, so that a training loop calling the same collective at the same size
/// again does not rebuild (and reallocate) its plan every time.
#[derive(Default)]
struct Plans {
    cache: std::collections::HashMap<PlanKey, std::sync::Arc<Schedule>, BuildHasherDefault<Fnv>>,
}

/// A plan's collective, algorithm, count, and (hierarchical plans) the algorithms of its phases.
type PlanKey = (Collective, Algo, usize, Option<HierAlgos>);

/// FNV-1a: the plan cache's keys are a few small integers, for which SipHash's protection
/// against crafted keys is not needed and costs more than the lookup it serves.
#[derive(Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

impl Plans {
    /// More distinct (collective, algorithm, count) plans than this and the cache starts over.
    const MAX: usize = 256;

    /// The schedule of `rank` for `coll` with `algo`; `hier` (with `hosts`) for [`Algo::Hier`];
    /// [`Algo::TwoLevel`]'s levels are `hosts`.
    fn get(
        &mut self,
        coll: Collective,
        algo: Algo,
        rank: usize,
        hosts: &Hosts,
        count: usize,
        hier: Option<HierAlgos>,
    ) -> Result<std::sync::Arc<Schedule>> {
        let key = (coll, algo, count, hier);
        if let Some(s) = self.cache.get(&key) {
            return Ok(s.clone());
        }
        let built = match hier {
            Some(algos) => schedule::build_hier(coll, hosts, rank, count, algos)?,
            None if algo == Algo::TwoLevel => match schedule::build_domains(hosts, rank, count) {
                Ok(s) => s,
                // Hosts of unequal sizes (every rank sees the same hosts, so all fall back).
                Err(_) => schedule::build(coll, Algo::Ring, rank, hosts.size(), count)?,
            },
            None => schedule::build(coll, algo, rank, hosts.size(), count)?,
        };
        let s = std::sync::Arc::new(built);
        if self.cache.len() >= Self::MAX {
            self.cache.clear();
        }
        self.cache.insert(key, s.clone());
        Ok(s)
    }
}

/// What the engines run over, and whether the group may still be used.
pub(crate) struct Wire {
    pub(crate) links: Links,
    /// The first failure of any engine: every later call is refused with it.
    poisoned: Option<Error>,
}

/// The mutable state of a group, behind its lock.
pub(crate) struct Comm {
    plans: Plans,
    /// The node board, when every rank of the group is on this host.
    board: Option<Board>,
    /// Flat operations run so far (the board's double-buffering counter).
    flat_seq: u64,
    /// Scratch memory of the step engine.
    memory: StepMemory,
    /// How this rank's board parts cross to its peers: chosen apart from the rings' way, since
    /// board calls publish no wishes and weigh ways by the slowest rank.
    board_crossing: BoardCrossing,
    /// The schedule of the last send or receive, rewritten by the next (no allocation per call).
    p2p_plan: Schedule,
    seq: u64,
    pub(crate) wire: Wire,
}

/// Everything a group is, behind its handles.
pub(crate) struct Core {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) timeout: Duration,
    pub(crate) tuning: Tuning,
    pub(crate) gate: Gate,
    /// How every engine waits (computed once, when the group formed).
    wait: WaitPolicy,
    /// What algorithm selection needs to know about the group.
    pub(crate) shape: Shape,
    comm: Mutex<Comm>,
    /// The work buffer the typed collectives lay their data out in, kept between calls (see
    /// [`Core::with_work`]).
    work: Mutex<Vec<u64>>,
    /// The reduction order of calls that choose none ([`super::Group::with_reduce_order`]).
    pub(crate) reduce_order: crate::reduce::ReduceOrder,
    /// The scratch of canonical-order reductions, which call collectives that use the work
    /// buffer while they hold it ([`Core::with_scratch`]).
    scratch: Mutex<Vec<u64>>,
    /// What shared buffers of this group are named after, and whether there can be any.
    pub(crate) shared: Arc<SharedScope>,
    /// The group's own shared buffers, for canonical all-reduces of private ones
    /// ([`Core::all_reduce_staged`]).
    staging: Staging,
    _store_server: Option<StoreServer>,
    /// Where to record a peer a failed call lost (the world group under psyrun).
    losses: std::sync::OnceLock<super::losses::LossReport>,
    /// What a blocked call asks whether to give up ([`super::Group::set_interrupt_check`]).
    pub(crate) interrupt: std::sync::OnceLock<InterruptCheck>,
    /// The process the group was made in: the only one that may call it.
    pub(crate) birth: super::owner::Birth,
}

impl Drop for Core {
    fn drop(&mut self) {
        // In a forked child the store server's accept thread does not exist: its drop would
        // wake the parent's listener and join a thread that is not there. Leave it be.
        if self.birth.elsewhere() {
            if let Some(server) = self._store_server.take() {
                std::mem::forget(server);
            }
        }
    }
}

/// How the group's shared-memory ring writes are chosen: as set, where this rank has a peer on
/// its host it may reach over shared memory; elsewhere no ring is written, so nothing is timed.
fn crossing_policy(transport: &TransportTunables, local_ranks: usize) -> CrossingPolicy {
    let shm = local_ranks > 1
        && !matches!(
            transport.policy,
            TransportPolicy::Tcp | TransportPolicy::Rdma
        );
    if shm {
        transport.shm_crossing
    } else {
        CrossingPolicy::Fixed(Crossing::Cached)
    }
}

impl Core {
    pub(crate) fn new(
        links: Links,
        board: Option<Board>,
        tunables: Tunables,
        store_server: Option<StoreServer>,
        shared: SharedScope,
    ) -> Core {
        let size = links.links.len();
        let me = &links.peers[links.rank];
        let local_ranks = links
            .peers
            .iter()
            .filter(|p| p.host_key == me.host_key)
            .count();
        // The keys as shared, so that equal ones (every rank of a host shares its entry's)
        // compare by pointer.
        let crossing = crossing_policy(&tunables.transport, local_ranks);
        let keys: Vec<&Arc<str>> = links.peers.iter().map(|p| &p.host_key).collect();
        let shape = Shape {
            size,
            hosts: Hosts::from_keys(&keys),
            board_part: board.as_ref().map(|b| b.largest_part()),
            shm_inside: links.peers.iter().all(|p| p.shm_ok),
        };
        Core {
            rank: links.rank,
            size,
            timeout: tunables.timeout,
            tuning: tunables.tuning,
            gate: Gate::default(),
            wait: WaitPolicy::new(tunables.spin, local_ranks),
            shape,
            comm: Mutex::new(Comm {
                plans: Plans::default(),
                board,
                flat_seq: 0,
                memory: StepMemory::new(Chooser::new(crossing, links.rank)),
                board_crossing: BoardCrossing::new(crossing),
                p2p_plan: Schedule::default(),
                seq: 0,
                wire: Wire {
                    links,
                    poisoned: None,
                },
            }),
            work: Mutex::new(Vec::new()),
            reduce_order: tunables.reduce_order,
            scratch: Mutex::new(Vec::new()),
            shared: Arc::new(shared),
            staging: Staging::default(),
            _store_server: store_server,
            losses: std::sync::OnceLock::new(),
            interrupt: std::sync::OnceLock::new(),
            birth: super::owner::Birth::here(),
        }
    }

    /// Runs `f` on a work buffer of `len` elements, from the group's cache: allocated (zeroed)
    /// the first time a call needs that much, then reused, so a large call does not fault in
    /// fresh pages every time (a 64 MiB all-to-all spent 7× its time there). A call finds what
    /// the last one left: every collective's layout writes each element before it reads or
    /// sends it (its input copied in, the rest received), so nothing stale reaches a result. The
    /// cache keeps the largest size asked for until the group is dropped; a call made while
    /// another holds it (from another thread) uses a buffer of its own.
    pub(crate) fn with_work<T: crate::Element, R>(
        &self,
        len: usize,
        f: impl FnOnce(&mut [T]) -> Result<R>,
    ) -> Result<R> {
        with_cache(&self.work, len, f)
    }

    /// [`Core::with_work`] on a second cache, for a call that runs collectives (which use the
    /// work buffer) on its own scratch: the canonical-order reductions.
    pub(crate) fn with_scratch<T: crate::Element, R>(
        &self,
        len: usize,
        f: impl FnOnce(&mut [T]) -> Result<R>,
    ) -> Result<R> {
        with_cache(&self.scratch, len, f)
    }

    /// Revokes the group (see [`super::Group::revoke`]): unless a call failed already (which
    /// aborted the links then), tells every peer, through each link, that this rank revoked it,
    /// and refuses every later call. Waits for a call of this rank in flight on another thread
    /// to end first (calls hold the links).
    pub(crate) fn revoke(&self) -> Result<()> {
        // In a forked child, aborting the links would shut down the parent's sockets.
        self.birth.check("revoke")?;
        let mut comm = self.lock()?;
        let Comm { wire, board, .. } = &mut *comm;
        if wire.poisoned.is_none() {
            let err = Error::new(
                ErrorKind::Revoked,
                format!(
                    "rank {} revoked the group; shrink it (Group::shrink) to go on",
                    self.rank
                ),
            );
            give_up(wire, board.as_ref(), &err, self.timeout);
        }
        Ok(())
    }

    /// Records from now on the peer each failed call lost, in the job's store (see
    /// [`super::losses`]).
    pub(crate) fn report_losses_to(&self, report: super::losses::LossReport) {
        let _ = self.losses.set(report);
    }

    /// The peers this rank has a link to (not counting links that arrived since its last call).
    pub(crate) fn connected_peers(&self) -> Vec<usize> {
        let Ok(comm) = self.lock() else {
            return Vec::new();
        };
        let links = &comm.wire.links;
        (0..links.links.len())
            .filter(|&p| links.links[p].is_some())
            .collect()
    }

    /// The transports of this rank's links, deduplicated and sorted (`shm`, `tcp`, `shm+tcp`;
    /// `self` for a world of one).
    pub(crate) fn transports(&self) -> String {
        let Ok(comm) = self.lock() else {
            return "?".into();
        };
        let mut names: Vec<&str> = comm
            .wire
            .links
            .peers
            .iter()
            .enumerate()
            .filter(|(r, _)| *r != self.rank)
            .map(|(_, p)| p.transport.name())
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            "self".into()
        } else {
            names.join("+")
        }
    }

    pub(crate) fn host_of(&self, rank: usize) -> Option<String> {
        self.lock()
            .ok()?
            .wire
            .links
            .peers
            .get(rank)
            .map(|p| p.host.to_string())
    }

    fn lock(&self) -> Result<MutexGuard<'_, Comm>> {
        self.comm.lock().map_err(|_| {
            Error::new(
                ErrorKind::Aborted,
                "a call on this group panicked; the group can no longer be used",
            )
        })
    }

    /// The algorithm for `coll` of `bytes` per rank, with a per-call choice `forced`
    /// ([`Tuning::select`]).
    pub(crate) fn algo_for(
        &self,
        coll: Collective,
        forced: Option<Algo>,
        bytes: usize,
    ) -> Result<Algo> {
        self.tuning.select(coll, forced, bytes, &self.shape)
    }

    /// Runs `coll` with `algo` on a work buffer laid out as [`Collective::layout`] says: the
    /// node board carries the flat all-reduce, scheduled steps over the links everything else.
    pub(crate) fn run_collective(&self, call: CollCall, work: &mut [u8]) -> Result<()> {
        let ran = self.run_collective_on(call, WorkView::whole(work))?;
        debug_assert!(ran, "a whole buffer fits every plan");
        Ok(())
    }

    /// Runs `call` on `view` (the caller's own slices standing in for the work buffer) if its
    /// plan fits the view ([`WorkView::fits`]); `Ok(false)`, with nothing sent and nothing
    /// changed, if it does not: the caller then lays out a whole work buffer.
    pub(crate) fn run_collective_on(&self, call: CollCall, mut view: WorkView<'_>) -> Result<bool> {
        let CollCall {
            coll,
            algo,
            dtype,
            op,
            count,
        } = call;
        let mut comm = self.lock()?;
        let Comm {
            plans,
            board,
            flat_seq,
            memory,
            board_crossing,
            wire,
            seq,
            ..
        } = &mut *comm;
        let desc = |seq: &mut u64| {
            *seq += 1;
            OpDesc {
                kind: OpKind::Collective(coll),
                algo: Some(algo),
                dtype,
                op,
                count: count as u64,
                seq: *seq,
            }
        };
        match (algo, board.as_ref()) {
            (Algo::Flat, Some(board)) => {
                let Some((buf, mirror, mirror_at)) = view.as_whole_and_mirror() else {
                    return Ok(false);
                };
                *flat_seq += 1;
                let engine = BoardCollective {
                    board,
                    k: *flat_seq,
                    buf,
                    mirror,
                    mirror_at,
                    crossing: board_crossing,
                };
                self.execute(wire, Some((board, *flat_seq + 1)), desc(seq), engine)
                    .map(|()| true)
            }
            _ => {
                let hier = (algo == Algo::Hier).then(|| {
                    self.tuning
                        .hier_algos(coll, count * dtype.size(), &self.shape.hosts)
                });
                let schedule = plans.get(coll, algo, self.rank, &self.shape.hosts, count, hier)?;
                if !view.fits(&schedule, dtype.size()) {
                    return Ok(false);
                }
                view.prepare(&schedule, dtype.size());
                let engine = Steps {
                    schedule: &schedule,
                    buf: view,
                    memory,
                };
                self.execute(wire, next_on(board, *flat_seq), desc(seq), engine)
                    .map(|()| true)
            }
        }
    }

    /// Sends (`sending`) or receives `count` elements of `dtype` to or from `peer`: the view's
    /// bytes from 0 on, which must be readable (sending) or writable (receiving).
    pub(crate) fn run_p2p(
        &self,
        peer: usize,
        sending: bool,
        dtype: DType,
        count: usize,
        work: WorkView<'_>,
    ) -> Result<()> {
        let what = if sending { "send to" } else { "receive from" };
        crate::comm::check_peer(self.rank, self.size, peer, what)?;
        let mut comm = self.lock()?;
        let pair = comm
            .wire
            .links
            .p2p
            .get_mut(peer)
            .ok_or_else(|| Error::invalid(format!("no rank {peer} in this group")))?;
        let counter = if sending {
            &mut pair.sent
        } else {
            &mut pair.received
        };
        *counter += 1;
        let seq = *counter;
        let desc = OpDesc {
            kind: OpKind::PointToPoint,
            algo: None,
            dtype,
            op: None,
            count: count as u64,
            seq,
        };
        let Comm {
            memory,
            wire,
            board,
            flat_seq,
            p2p_plan,
            ..
        } = &mut *comm;
        p2p_plan.set_point_to_point(peer, sending, count);
        let engine = Steps {
            schedule: p2p_plan,
            buf: work,
            memory,
        };
        self.execute(wire, next_on(board, *flat_seq), desc, engine)
    }

    /// The in-place all-reduce of shared buffers ([`SharedAllReduce`]); `op` is checked for `T`.
    /// `canonical`: fold in rank order ([`crate::ReduceOrder::Canonical`]).
    pub(crate) fn run_shared<T: Element>(
        &self,
        mapped: &mut Mapped<T>,
        op: ReduceOp,
        canonical: bool,
    ) -> Result<()> {
        let mut comm = self.lock()?;
        comm.seq += 1;
        let desc = OpDesc {
            kind: OpKind::Collective(Collective::AllReduce),
            algo: None,
            dtype: T::DTYPE,
            op: Some(op),
            count: mapped.len() as u64,
            seq: comm.seq,
        };
        let Comm {
            wire,
            board,
            flat_seq,
            ..
        } = &mut *comm;
        // A peer whose slot holds the next flat all-reduce is in that call, not in this one.
        let next_flat = next_on(board, *flat_seq);
        let engine = SharedAllReduce {
            mapped,
            op,
            next_flat,
            canonical,
        };
        self.execute(wire, next_flat, desc, engine)
    }

    /// Whether an all-reduce of `bytes` per rank may run through the group's staging buffers
    /// ([`Core::all_reduce_staged`]): the group shares memory, and no rank failed to make them
    /// for a call this large before.
    pub(crate) fn may_stage(&self, bytes: usize) -> bool {
        self.staging.may_take(&self.shared, bytes)
    }

    /// The all-reduce of `buf` in rank order through the group's staging buffers in shared
    /// memory ([`Staging`]): copied in, all-reduced there ([`Core::run_shared`], canonical),
    /// copied out. False (and `buf` untouched) where the group cannot stage a call this large;
    /// every rank then gets false. Runs within the call's turn; `every_rank` (a collective that
    /// returns whether every rank's flag was true) runs when the buffers must be made.
    pub(crate) fn all_reduce_staged<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        every_rank: impl FnMut(bool) -> Result<bool>,
    ) -> Result<bool> {
        let staged = self.staging.with_buffers(
            &self.shared,
            self.rank,
            self.size,
            buf.len(),
            every_rank,
            |mapped: &mut Mapped<T>| {
                copy_slice(&mut mapped.own_mut()[..], buf);
                self.run_shared(mapped, op, true)?;
                copy_slice(&mut buf[..], mapped.own());
                Ok(())
            },
        )?;
        Ok(staged.is_some())
    }

    /// The refusal of a call on a poisoned group, if it is.
    fn refuse_if_poisoned(&self, wire: &Wire, desc: &OpDesc) -> Option<Error> {
        wire.poisoned
            .as_ref()
            .map(|first| fail::refused(&desc.label(), first))
    }

    /// Runs one call on `engine`: the one place every engine is called from. A poisoned group
    /// refuses; the pairs the engine uses are connected first; a failure aborts the links (so the
    /// other ranks learn of it) and poisons the group. `board`: the group's node board and the
    /// number its next operation would have ([`next_on`]).
    fn execute(
        &self,
        wire: &mut Wire,
        board: Option<(&Board, u64)>,
        desc: OpDesc,
        engine: impl Engine,
    ) -> Result<()> {
        if let Some(refusal) = self.refuse_if_poisoned(wire, &desc) {
            return Err(refusal);
        }
        let reducer = desc.op.map(|op| Reducer::new(desc.dtype, op)).transpose()?;
        let call = Call {
            desc,
            reducer,
            wait: self.wait,
            timeout: self.timeout,
            interrupt: Interrupt::new(self.interrupt.get().cloned()),
        };
        let out = wire
            .links
            .connect_for(&engine, &call, board)
            .and_then(|()| engine.run(&call, &mut wire.links));
        if let Err(e) = &out {
            if let (Some(peer), Some(report)) = (e.peer(), self.losses.get()) {
                report.tell(self.rank, peer);
            }
            give_up(wire, board.map(|(b, _)| b), e, self.timeout);
        }
        out
    }
}

/// Runs `f` on `len` elements of the buffer kept in `cache` (see [`Core::with_work`]).
fn with_cache<T: crate::Element, R>(
    cache: &Mutex<Vec<u64>>,
    len: usize,
    f: impl FnOnce(&mut [T]) -> Result<R>,
) -> Result<R> {
    let mut kept = std::mem::take(&mut *cache.lock().unwrap_or_else(|p| p.into_inner()));
    let words = (len * std::mem::size_of::<T>()).div_ceil(8);
    if kept.len() < words {
        kept.resize(words, 0);
    }
    // Whole words hold whole elements of any type (1, 2, 4 or 8 bytes, aligned to at most 8).
    let all: &mut [T] = bytemuck::cast_slice_mut(&mut kept[..words]);
    let result = f(&mut all[..len]);
    let mut slot = cache.lock().unwrap_or_else(|p| p.into_inner());
    if slot.len() < kept.len() {
        *slot = kept;
    }
    result
}

/// The group's node board, if it has one, with the number the operation after `flat_seq` would
/// have on it: a peer whose slot holds that one is in a call on the board.
fn next_on(board: &Option<Board>, flat_seq: u64) -> Option<(&Board, u64)> {
    board.as_ref().map(|b| (b, flat_seq + 1))
}

/// After a failure (`err`) or a revoke: tells the peers over the links and on the node board
/// that this rank gives up the group, and refuses every later call with `err`.
fn give_up(wire: &mut Wire, board: Option<&Board>, err: &Error, timeout: Duration) {
    if let Some(board) = board {
        board.mark_aborted(crate::executor::kind_code(err.kind()), err.peer());
    }
    abort_links(&mut wire.links, err, timeout);
    wire.poisoned = Some(err.clone());
}

/// One collective call as the core runs it.
pub(crate) struct CollCall {
    pub(crate) coll: Collective,
    pub(crate) algo: Algo,
    pub(crate) dtype: DType,
    pub(crate) op: Option<ReduceOp>,
    /// The count as [`Collective::layout`] defines it.
    pub(crate) count: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_groups_with_a_shared_memory_peer_time_their_ring_writes() {
        let auto = CrossingPolicy::Auto;
        let cached = CrossingPolicy::Fixed(Crossing::Cached);
        let with = |policy| TransportTunables {
            policy,
            ..TransportTunables::default()
        };
        assert_eq!(crossing_policy(&with(TransportPolicy::Auto), 2), auto);
        assert_eq!(crossing_policy(&with(TransportPolicy::Shm), 4), auto);
        assert_eq!(crossing_policy(&with(TransportPolicy::Auto), 1), cached);
        assert_eq!(crossing_policy(&with(TransportPolicy::Tcp), 2), cached);
        assert_eq!(crossing_policy(&with(TransportPolicy::Rdma), 2), cached);
        let mut on = with(TransportPolicy::Auto);
        on.shm_crossing = CrossingPolicy::Fixed(Crossing::Streamed);
        assert_eq!(crossing_policy(&on, 2), on.shm_crossing);
    }
}
