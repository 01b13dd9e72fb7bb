//! The state shared by every handle of a group: its links, its sequence numbers, the order in
//! which calls run, and the one place where a collective's bytes are handed to the executor.

use crate::bootstrap::StoreServer;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::executor::flat::{self, FlatJob};
use crate::executor::{abort_links, Executor, Job, Links, OpDesc, OpKind, WaitPolicy};
use crate::reduce::{ReduceOp, Reducer};
use crate::schedule::{self, Algo, Collective, HierAlgos, Hosts, Schedule};
use crate::transport::shm::board::Board;
use crate::tuning::Tuning;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Calls run in the order they were issued: each takes a ticket and waits for its turn.
///
/// The common case (no other call in flight) costs two atomic operations and no system call:
/// the lock and condition variable are touched only when a call must wait for an earlier one.
#[derive(Default)]
pub(crate) struct Gate {
    next: AtomicU64,
    serving: AtomicU64,
    waiters: AtomicUsize,
    lock: Mutex<()>,
    turn: Condvar,
}

impl Gate {
    pub(crate) fn take(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    pub(crate) fn wait_turn(&self, ticket: u64) {
        if self.serving.load(Ordering::SeqCst) == ticket {
            return;
        }
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.waiters.fetch_add(1, Ordering::SeqCst);
        // Re-checked under the lock: `done` bumps `serving` before it looks at `waiters`, and
        // notifies under the lock, so a wake-up cannot fall between this check and the wait.
        while self.serving.load(Ordering::SeqCst) != ticket {
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

    /// The schedule of `rank` for `coll` with `algo`; `hier` (with `hosts`) for [`Algo::Hier`].
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

pub(crate) struct Comm {
    plans: Plans,
    /// The node board, when every rank of the group is on this host.
    board: Option<Board>,
    /// Flat operations run so far (the board's double-buffering counter).
    flat_seq: u64,
    pub(crate) links: Links,
    executor: Executor,
    seq: u64,
    p2p_sent: Vec<u64>,
    p2p_received: Vec<u64>,
    poisoned: Option<Error>,
}

/// Everything a group is, behind its handles.
pub(crate) struct Core {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) timeout: Duration,
    pub(crate) tuning: Tuning,
    pub(crate) gate: Gate,
    has_board: bool,
    /// Which ranks share a host (by host key), for hierarchical collectives.
    hosts: Hosts,
    /// Whether every rank allows shared memory, so ranks sharing a host talk over it.
    shm_inside: bool,
    comm: Mutex<Comm>,
    _store_server: Option<StoreServer>,
}

impl Core {
    pub(crate) fn new(
        links: Links,
        board: Option<Board>,
        timeout: Duration,
        tuning: Tuning,
        store_server: Option<StoreServer>,
    ) -> Core {
        let size = links.links.len();
        let me = &links.peers[links.rank];
        let local_ranks = links
            .peers
            .iter()
            .filter(|p| p.host_key == me.host_key)
            .count();
        let wait = WaitPolicy::new(spin_time(), local_ranks);
        let keys: Vec<&str> = links.peers.iter().map(|p| p.host_key.as_str()).collect();
        let hosts = Hosts::from_keys(&keys);
        let shm_inside = links.peers.iter().all(|p| p.shm_ok);
        Core {
            rank: links.rank,
            size,
            timeout,
            tuning,
            gate: Gate::default(),
            has_board: board.is_some(),
            hosts,
            shm_inside,
            comm: Mutex::new(Comm {
                plans: Plans::default(),
                board,
                flat_seq: 0,
                links,
                executor: Executor::new(wait),
                seq: 0,
                p2p_sent: vec![0; size],
                p2p_received: vec![0; size],
                poisoned: None,
            }),
            _store_server: store_server,
        }
    }

    /// The transports of this rank's links, deduplicated and sorted (`shm`, `tcp`, `shm+tcp`;
    /// `self` for a world of one).
    pub(crate) fn transports(&self) -> String {
        let Ok(comm) = self.lock() else {
            return "?".into();
        };
        let mut names: Vec<&str> = comm
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
            .links
            .peers
            .get(rank)
            .map(|p| p.host.clone())
    }

    fn lock(&self) -> Result<MutexGuard<'_, Comm>> {
        self.comm.lock().map_err(|_| {
            Error::new(
                ErrorKind::Aborted,
                "a call on this group panicked; the group can no longer be used",
            )
        })
    }

    /// The algorithm for `coll` with a per-call choice `forced` (else `PSY_ALGO`'s, else the
    /// automatic one), checked to implement it. [`Algo::Hier`] on a group where it would equal
    /// the flat schedule (one host, or one rank per host) becomes the automatic flat choice.
    pub(crate) fn algo_for(
        &self,
        coll: Collective,
        forced: Option<Algo>,
        bytes: usize,
    ) -> Result<Algo> {
        let algo = match forced.or_else(|| self.tuning.forced(coll)) {
            Some(a) if Algo::for_collective(coll).contains(&a) => a,
            Some(a) => {
                let ok: Vec<_> = Algo::for_collective(coll)
                    .iter()
                    .map(|a| a.name())
                    .collect();
                return Err(Error::invalid(format!(
                    "algorithm `{a}` does not implement {}; choose one of: {}",
                    coll.name(),
                    ok.join(", ")
                )));
            }
            None if self
                .tuning
                .prefers_hier(coll, bytes, &self.hosts, self.shm_inside) =>
            {
                Algo::Hier
            }
            None => return Ok(self.flat_algo(coll, bytes)),
        };
        if algo == Algo::Hier && !self.hosts.is_hierarchical() {
            return Ok(self.flat_algo(coll, bytes));
        }
        Ok(algo)
    }

    /// The automatic choice among the flat algorithms: the node board for a small all-reduce on
    /// one host, else by size.
    fn flat_algo(&self, coll: Collective, bytes: usize) -> Algo {
        if coll == Collective::AllReduce && self.has_board && flat::fits(bytes) {
            Algo::Flat
        } else {
            self.tuning.by_size(coll, bytes, self.size)
        }
    }

    /// The algorithms of the phases of a hierarchical `coll` whose whole buffer is `bytes`.
    fn hier_algos(&self, coll: Collective, bytes: usize) -> HierAlgos {
        let leaders = self.tuning.by_size(coll, bytes, self.hosts.count());
        let local = self.tuning.by_size(
            Collective::Broadcast { root: 0 },
            bytes,
            self.hosts.max_local(),
        );
        HierAlgos {
            leaders: match coll {
                Collective::AllGather => Algo::Ring,
                _ => leaders,
            },
            local,
        }
    }

    /// Runs `coll` on a work buffer laid out as [`Collective::layout`] says.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_collective(
        &self,
        coll: Collective,
        algo: Algo,
        dtype: DType,
        op: Option<ReduceOp>,
        count: usize,
        work: &mut [u8],
    ) -> Result<()> {
        let mut comm = self.lock()?;
        comm.seq += 1;
        let hier = (algo == Algo::Hier).then(|| self.hier_algos(coll, count * dtype.size()));
        let schedule = match algo {
            Algo::Flat => None,
            _ => Some(
                comm.plans
                    .get(coll, algo, self.rank, &self.hosts, count, hier)?,
            ),
        };
        let desc = OpDesc {
            kind: OpKind::Collective(coll),
            algo: Some(algo),
            dtype,
            op,
            count: count as u64,
            seq: comm.seq,
        };
        self.execute(&mut comm, desc, schedule.as_deref(), work)
    }

    /// Sends (`to_peer` true) or receives `work` to or from `peer`.
    pub(crate) fn run_p2p(
        &self,
        peer: usize,
        sending: bool,
        dtype: DType,
        work: &mut [u8],
    ) -> Result<()> {
        let what = if sending { "send to" } else { "receive from" };
        crate::comm::check_peer(self.rank, self.size, peer, what)?;
        let mut comm = self.lock()?;
        let counter = if sending {
            &mut comm.p2p_sent[peer]
        } else {
            &mut comm.p2p_received[peer]
        };
        *counter += 1;
        let seq = *counter;
        let count = work.len() / dtype.size();
        let mut step = schedule::Step::default();
        if sending {
            step.sends.push(schedule::Send::plain(peer, 0..count));
        } else {
            step.recvs.push(schedule::Recv::copy(peer, 0..count));
        }
        let schedule = Schedule {
            buf_len: count,
            steps: vec![step],
        };
        let desc = OpDesc {
            kind: OpKind::PointToPoint,
            algo: None,
            dtype,
            op: None,
            count: count as u64,
            seq,
        };
        self.execute(&mut comm, desc, Some(&schedule), work)
    }

    /// Runs `schedule` over the links, or (`None`) a flat all-reduce on the node board; a failure
    /// aborts the links and poisons the group.
    fn execute(
        &self,
        comm: &mut Comm,
        desc: OpDesc,
        schedule: Option<&Schedule>,
        work: &mut [u8],
    ) -> Result<()> {
        if let Some(first) = &comm.poisoned {
            return Err(Error::new(
                ErrorKind::Aborted,
                format!("{} refused: this group failed earlier and can no longer be used (create a new one): {first}", desc.label()),
            ));
        }
        let reducer = desc.op.map(|op| Reducer::new(desc.dtype, op)).transpose()?;
        let Comm {
            links,
            executor,
            board,
            flat_seq,
            ..
        } = comm;
        let out = match (schedule, board.as_ref(), reducer) {
            (Some(schedule), _, _) => executor.run(
                links,
                Job {
                    desc,
                    schedule,
                    buf: work,
                    elem_size: desc.dtype.size(),
                    reducer,
                    deadline: Instant::now() + self.timeout,
                },
            ),
            (None, Some(board), Some(reducer)) => {
                *flat_seq += 1;
                flat::all_reduce(
                    board,
                    links,
                    FlatJob {
                        desc,
                        k: *flat_seq,
                        buf: work,
                        reducer,
                        timeout: self.timeout,
                        wait: executor.wait_policy(),
                    },
                )
            }
            (None, _, _) => Err(Error::new(
                ErrorKind::Io,
                "internal error: a flat collective without a node board or reduction",
            )),
        };
        if let Err(e) = out {
            abort_links(links, &e, self.timeout);
            comm.poisoned = Some(e.clone());
            return Err(e);
        }
        Ok(())
    }
}

/// How long a rank polls before blocking on an idle link: `PSY_SPIN_US` microseconds (default
/// 50; 0 blocks almost at once).
pub(crate) fn spin_time() -> Duration {
    let us = std::env::var("PSY_SPIN_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(50);
    Duration::from_micros(us)
}
