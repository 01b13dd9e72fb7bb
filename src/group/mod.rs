//! [`Group`]: the ranks of a job and the collectives they call together.

mod build;
mod canonical;
mod core;
mod ft;
pub(crate) mod losses;
mod nonblocking;
mod ops;
mod owner;
mod split;
pub(crate) mod work;

pub use crate::executor::shared::{SharedBuf, MIN_SHARED_BYTES};
pub use build::{GroupBuilder, GroupOptions};
pub use canonical::CanonicalPath;
pub use canonical::GATHER_MAX as CANONICAL_GATHER_MAX;
pub use work::Work;

use crate::comm::Communicator;
use crate::dtype::Element;
use crate::error::Result;
use crate::reduce::{ReduceOp, ReduceOrder};
use crate::schedule::Algo;
use std::sync::Arc;
use std::time::Duration;

use self::core::{Core, Turn};
use crate::executor::shared;

/// The ranks of a job, connected to each other. Every collective must be called by every rank of
/// the group, in the same order, with matching arguments; a rank that does otherwise gets an
/// error, as do the others.
///
/// Clones (and [`Group::with_algo`] views) share one group. Its calls, blocking or not, run one at
/// a time in the order they were issued, and the calls in flight all come from one thread: a call
/// from another thread meanwhile, or from a process forked after the group was made, fails with
/// [`crate::ErrorKind::Usage`] (see `owner`'s module docs) before anything is sent.
#[derive(Clone)]
pub struct Group {
    core: Arc<Core>,
    worker: Arc<work::Worker>,
    algo: Option<Algo>,
    /// The reduction order of this view's calls ([`Group::with_reduce_order`]); `None`: the
    /// group's (`PSY_REDUCE_ORDER`, [`crate::Tunables::reduce_order`]).
    order: Option<ReduceOrder>,
    /// The store and options the group was formed with, for [`Group::split`].
    splitter: Option<Arc<split::Splitter>>,
}

impl Group {
    /// The host name of `rank`, as it reported it.
    pub fn host_of(&self, rank: usize) -> Option<String> {
        self.core.host_of(rank)
    }

    /// The transports this rank's links use: `rdma`, `shm`, `tcp`, or a mix such as `shm+tcp`
    /// (`self` alone).
    pub fn transports(&self) -> String {
        self.core.transports()
    }

    /// The peers this rank has a link to so far: every peer once the group formed, unless its
    /// pairs connect lazily (`PSY_CONNECT`), then those its calls have used.
    pub fn connected_peers(&self) -> Vec<usize> {
        self.core.connected_peers()
    }

    /// Fails with [`crate::ErrorKind::Usage`] if this process is not the one that created the
    /// group (a child forked after it was made), as every call on the group then does: what a
    /// wrapper that queues calls for later checks before it queues one.
    pub fn check_process(&self) -> Result<()> {
        self.core.birth.check("a call on this group")
    }

    /// The deadline of every wait.
    pub fn timeout(&self) -> Duration {
        self.core.timeout
    }

    /// The algorithm policy: `PSY_ALGO`'s overrides, the tuning file in use (`PSY_TUNING`) and
    /// the built-in thresholds.
    pub fn tuning(&self) -> &crate::Tuning {
        &self.core.tuning
    }

    /// Which section of a tuning file applies to this group: `shm` when every rank is on this
    /// host over shared memory, else `net` (see [`crate::tuning::rules`]).
    pub fn tuning_scope(&self) -> crate::tuning::Scope {
        self.core.shape.scope()
    }

    /// The algorithm `coll` would use for `bytes` per rank, after [`Group::with_algo`],
    /// `PSY_ALGO` and the tuning file.
    pub fn algorithm_for(&self, coll: crate::Collective, bytes: usize) -> Result<Algo> {
        self.core.algo_for(coll, self.algo, bytes)
    }

    /// A view of this group whose calls use `algo` (an error for collectives it does not
    /// implement). Every rank must make the same choice. [`Algo::Hier`] on a group that lives on
    /// one host, or has one rank per host, runs the automatic flat algorithm
    /// ([`Group::algorithm_for`] names it).
    pub fn with_algo(&self, algo: Algo) -> Group {
        Group {
            algo: Some(algo),
            ..self.clone()
        }
    }

    /// A view of this group whose reducing calls (all-reduce, reduce, reduce-scatter, and the
    /// all-reduce of shared buffers) combine the ranks' values in `order`
    /// ([`ReduceOrder::Canonical`]: the rank-order fold, the same bits whatever the size,
    /// algorithm, tuning file or transport). Every rank must make the same choice: ranks that
    /// differ may run different collectives, which fails as any mismatch does.
    pub fn with_reduce_order(&self, order: ReduceOrder) -> Group {
        Group {
            order: Some(order),
            ..self.clone()
        }
    }

    /// The order this view's reducing calls combine the ranks' values in:
    /// [`Group::with_reduce_order`]'s, else the group's (`PSY_REDUCE_ORDER`).
    pub fn reduce_order(&self) -> ReduceOrder {
        self.order.unwrap_or(self.core.reduce_order)
    }

    /// How `coll` of `bytes` per rank (as [`Group::algorithm_for`] counts them) of `dtype` with
    /// `op` runs in this view's reduction order where that is not with the algorithm
    /// [`Group::algorithm_for`] names (module `group::canonical`): `None` in fast order, and where
    /// that algorithm gives the rank-order bits anyway (2 ranks, integers, min/max/bitwise ops,
    /// the node board).
    pub fn canonical_path(
        &self,
        coll: crate::Collective,
        dtype: crate::DType,
        op: ReduceOp,
        bytes: usize,
    ) -> Result<Option<CanonicalPath>> {
        canonical::canonical_path(&self.core, self.choice(), coll, dtype, op, bytes)
    }

    /// The forced algorithm and the order of a reducing call.
    fn choice(&self) -> canonical::Choice {
        canonical::Choice {
            algo: self.algo,
            order: self.reduce_order(),
        }
    }

    /// Gives this group (and every view of it, [`Group::with_algo`]; not its subgroups) a
    /// check that its calls ask while they are blocked waiting for their peers: once a call has
    /// been blocked for [`crate::INTERRUPT_CHECK_EVERY`], and again after each such interval
    /// (a call that never blocks that long never asks). When the check returns a reason, the
    /// call fails with [`crate::ErrorKind::Aborted`] naming it; as after any failure, the peers
    /// are told at once and the group refuses every later call. How a binding makes a blocked
    /// call give way to Ctrl-C: Python's bindings check for a pending signal.
    ///
    /// The check runs on the thread that runs the call, while the call holds the group: it must
    /// not call into this group. A group has one check: `false` (and `check` unused) if it has
    /// one already.
    pub fn set_interrupt_check(&self, check: crate::InterruptCheck) -> bool {
        self.core.interrupt.set(check).is_ok()
    }

    /// Splits the group into subgroups, as `MPI_Comm_split` does: ranks calling with the same
    /// `color` form one subgroup, ordered by `key` (then by rank in this group); a rank calling
    /// with `None` joins none and gets `None`. Every rank of this group calls it. Subgroups have
    /// their own connections, so their collectives run independently of, and concurrently with,
    /// this group's and each other's (rows and columns of a grid, for example).
    pub fn split(&self, color: Option<u32>, key: i64) -> Result<Option<Group>> {
        let Some(splitter) = &self.splitter else {
            return Err(crate::Error::invalid(
                "split: this group was formed without keeping its store (GroupBuilder::store); form it with psyne::init() or GroupBuilder::shared_store",
            ));
        };
        let mine = [color.map_or(-1, i64::from), key];
        let all = self.all_gather(&mine)?;
        let pairs: Vec<(i64, i64)> = all.chunks_exact(2).map(|c| (c[0], c[1])).collect();
        splitter.form(self.rank(), &pairs)
    }

    /// Records the peers failed calls lose in the job's store, for psyrun ([`losses`]).
    pub(crate) fn report_losses_to(&self, report: losses::LossReport) {
        self.core.report_losses_to(report);
    }

    /// Runs `f` in this call's turn, if this process may call the group ([`owner`]). `what`
    /// names the call in errors. A call made by a submitted job on the worker thread runs in
    /// that job's turn ([`Communicator::submit`]).
    fn sequenced<R>(&self, what: &str, f: impl FnOnce(&Core) -> Result<R>) -> Result<R> {
        if work::in_job_of(&self.core) {
            return f(&self.core);
        }
        self.core.birth.check(what)?;
        let ticket = self.core.gate.take(what)?;
        self.core.gate.wait_turn(ticket);
        let _turn = Turn(&self.core.gate);
        f(&self.core)
    }

    /// A buffer of `len` elements in memory every rank of this host can map, for
    /// [`Group::all_reduce_shared`]: zero-copy all-reduces where the whole group is on one host
    /// (see [`SharedBuf::is_shared`]), an ordinary buffer elsewhere. Zero-filled. Every rank calls
    /// it, in the same order, with the same length and type (a [`crate::ErrorKind::Mismatch`]
    /// otherwise).
    pub fn alloc_shared<T: Element>(&self, len: usize) -> Result<SharedBuf<T>> {
        let n = i64::try_from(len).map_err(|_| {
            crate::Error::invalid(format!("alloc_shared: {len} elements is too many"))
        })?;
        let tag = i64::from(T::DTYPE as u8);
        // One call settles what all ranks asked for and whether all may share memory, so every
        // rank takes the same path.
        let mut facts = [n, -n, tag, -tag, i64::from(self.core.shared.allowed)];
        self.all_reduce(&mut facts, ReduceOp::Min)?;
        if facts[0] != -facts[1] || facts[2] != -facts[3] {
            return Err(crate::Error::new(
                crate::ErrorKind::Mismatch,
                format!(
                    "alloc_shared: the ranks asked for different buffers ({} to {} elements, or different element types); every rank must make the same call",
                    facts[0], -facts[1]
                ),
            ));
        }
        if facts[4] == 0 {
            return Ok(SharedBuf::private(len));
        }
        let segments =
            shared::allocate::<T>(&self.core.shared, self.rank(), self.size(), len, |ok| {
                let mut all = [i64::from(ok)];
                self.all_reduce(&mut all, ReduceOp::Min)?;
                Ok(all[0] == 1)
            })?;
        Ok(match segments {
            Some(segments) => SharedBuf::mapped(self.rank(), len, segments),
            None => SharedBuf::private(len),
        })
    }

    /// [`Group::all_reduce`] of buffers from [`Group::alloc_shared`]: where they are shared (and
    /// at least 16 KiB: below that the ordinary all-reduce is faster), each rank reduces its chunk
    /// of every rank's buffer straight out of shared memory and writes the result into all of
    /// them, with no copy through any transport. Every rank calls it with its
    /// buffer of the same allocation.
    pub fn all_reduce_shared<T: Element>(
        &self,
        buf: &mut SharedBuf<T>,
        op: ReduceOp,
    ) -> Result<()> {
        if !buf.is_shared() || std::mem::size_of_val(&buf[..]) < shared::MIN_SHARED_BYTES {
            return self.all_reduce(buf, op);
        }
        self.sequenced("all_reduce_shared", |core| match buf.mapped_mut() {
            // Two ranks' sums are one commutative step: the usual pass is already canonical.
            Some(m) => core.run_shared(
                m,
                op,
                self.reduce_order() == ReduceOrder::Canonical && self.size() > 2,
            ),
            None => Err(crate::Error::invalid("a shared buffer lost its mapping")),
        })
    }
}

/// The collectives of the native engine: each runs in its turn on the group's typed operations;
/// the out-of-place and `_async` forms are the trait's.
impl Communicator for Group {
    fn backend(&self) -> &'static str {
        "native"
    }

    fn rank(&self) -> usize {
        self.core.rank
    }

    fn size(&self) -> usize {
        self.core.size
    }

    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let choice = self.choice();
        self.sequenced("all_reduce", |c| canonical::all_reduce(c, choice, buf, op))
    }

    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        self.sequenced("broadcast", |c| ops::broadcast(c, self.algo, buf, root))
    }

    fn reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: usize) -> Result<()> {
        let choice = self.choice();
        self.sequenced("reduce", |c| canonical::reduce(c, choice, buf, op, root))
    }

    fn all_gather_into<T: Element>(&self, local: &[T], out: &mut [T]) -> Result<()> {
        self.sequenced("all_gather_into", |c| {
            ops::all_gather_into(c, self.algo, local, out)
        })
    }

    fn reduce_scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        self.sequenced("reduce_scatter_into", |c| {
            canonical::reduce_scatter_into(c, self.choice(), input, out, op)
        })
    }

    fn scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()> {
        self.sequenced("scatter_into", |c| {
            ops::scatter_into(c, self.algo, input, out, count, root)
        })
    }

    fn gather_into<T: Element>(
        &self,
        local: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()> {
        self.sequenced("gather_into", |c| {
            ops::gather_into(c, self.algo, local, out, count, root)
        })
    }

    fn all_to_all_into<T: Element>(&self, input: &[T], out: &mut [T]) -> Result<()> {
        self.sequenced("all_to_all_into", |c| {
            ops::all_to_all_into(c, self.algo, input, out)
        })
    }

    fn barrier(&self) -> Result<()> {
        self.sequenced("barrier", |c| ops::barrier(c, self.algo))
    }

    fn send<T: Element>(&self, buf: &[T], dst: usize) -> Result<()> {
        self.sequenced("send", |c| ops::send(c, buf, dst))
    }

    fn recv<T: Element>(&self, buf: &mut [T], src: usize) -> Result<()> {
        self.sequenced("recv", |c| ops::recv(c, buf, src))
    }

    /// Runs `f` on the group's worker thread, in the order calls were issued (see
    /// [`Group::submit_borrowed`] for calls on the caller's memory).
    fn submit<R, F>(&self, what: &str, f: F) -> Work<R>
    where
        R: Send + 'static,
        F: FnOnce(&Self) -> Result<R> + Send + 'static,
    {
        self.spawn(what, f)
    }
}
