//! The MPI backend (cargo feature `mpi`): the same collectives as [`crate::Group`], through the
//! system's MPI (Open MPI or MPICH, via the `mpi` crate), behind the same [`Communicator`] trait, so
//! benchmarks and checks can run both in one job and compare results and speed.
//!
//! ```no_run
//! use psyne::{Communicator, ReduceOp};
//!
//! let comm = psyne::mpi::init()?; // under `mpirun -n 4 prog`
//! let mut v = vec![1.0f32; 1024];
//! comm.all_reduce(&mut v, ReduceOp::Sum)?;
//! assert_eq!(v[0], comm.size() as f32);
//! // psyne's own engine in the same job, bootstrapped over MPI:
//! let group = psyne::mpi::native_group(&comm, std::time::Duration::from_secs(60))?;
//! group.all_reduce(&mut v, ReduceOp::Avg)?;
//! drop(group); // before `comm`, which finalizes MPI
//! # Ok::<(), psyne::Error>(())
//! ```
//!
//! Semantics are those of [`crate::Group`]: "chunk `i`" of a count is
//! [`crate::schedule::chunk_span`]`(count, size, i)`.
//!
//! ## What each call costs besides MPI
//!
//! Every collective hands the caller's buffers to MPI as they are: no allocation, copy or
//! conversion around the MPI call, so a benchmark of this backend measures MPI as its users call
//! it (a C program calling the same MPI function on the same buffers; `bench/c/` holds one, and
//! `scripts/bench/mpi-crosscheck.sh` compares the two).
//!
//! | psyne call | MPI call |
//! |---|---|
//! | `all_reduce` (in place) | `MPI_Allreduce(MPI_IN_PLACE, buf, ...)` |
//! | `reduce` (in place at the root) | root: `MPI_Reduce(MPI_IN_PLACE, buf, ...)`; others: `MPI_Reduce(buf, NULL, ...)` |
//! | `broadcast` | `MPI_Bcast(buf, ...)` |
//! | `all_gather_into(local, out)` | `MPI_Allgather(local, out)`; chunks that differ by one: `MPI_Allgatherv` |
//! | `reduce_scatter_into(input, out)` | `MPI_Reduce_scatter_block(input, out)`; chunks that differ: `MPI_Reduce_scatter` with psyne's chunk lengths as the counts |
//! | `scatter_into`, `gather_into` | `MPI_Scatter`, `MPI_Gather`; uneven: `MPI_Scatterv`, `MPI_Gatherv` |
//! | `all_to_all_into` | `MPI_Alltoall`; uneven: `MPI_Alltoallv` |
//! | `barrier`, `send`, `recv` | `MPI_Barrier`, `MPI_Send`, `MPI_Recv` |
//!
//! All-gather and reduce-scatter run out of place because psyne's calls are out of place (and so
//! are the OSU micro-benchmarks' and nccl-tests' defaults); `MPI_IN_PLACE` there would need the
//! local chunk copied into the output first. The uneven forms build their counts and
//! displacements (one `int` per rank each) per call, as an MPI program with uneven chunks does;
//! psybench sizes are whole multiples of the ranks, so it never takes them. `ReduceOp::Avg`
//! divides after the sum, one pass over the result, as an MPI user would. `MPI_IN_PLACE` comes
//! from the system's `mpi.h` (build.rs compiles `src/mpi/in_place.c`), since its value is the MPI
//! library's choice.
//!
//! Differences from the native backend:
//! - MPI has no half-precision types: f16 and bf16 travel as 16-bit integers for data movement,
//!   and reductions on them are refused with [`crate::ErrorKind::InvalidArgument`].
//! - Arguments are checked locally (lengths, roots, ops) before any data moves, but ranks that
//!   disagree (different counts or collectives) are not detected: MPI aborts the job
//!   (`MPI_ERR_TRUNCATE`) or waits. MPI's default error handler aborts on communication errors,
//!   so calls return errors only for arguments, never for lost peers.
//! - Integer overflow follows the MPI library. Open MPI 4.1's `op/avx` component *saturates*
//!   8- and 16-bit integer sums of longer buffers on AVX-512 machines (`200u8 + 100u8 = 255`;
//!   open-mpi/ompi#8045) where psyne wraps (`44`); run with `OMPI_MCA_op=^avx` (or
//!   `mpirun --mca op ^avx`) for results that agree with psyne's.
//! - A collective of zero elements in total returns at once without calling MPI (every rank
//!   passes the same total, so every rank skips it alike; Open MPI refuses some such calls).
//! - Every call blocks the calling thread; there are no deadlines. The `_async` forms
//!   ([`Communicator::all_reduce_async`], ...) have no background engine to run on: each runs
//!   at once, in the call that issues it, and returns a finished [`crate::Work`].
//! - [`init`] initializes MPI with `MPI_THREAD_FUNNELED` ([`init_with`] chooses): [`MpiComm`] is
//!   neither `Send` nor `Sync`, so only the thread that initialized it uses it. Other threads (a
//!   native group's) may exist.

mod layout;
mod native;
mod raw;

/// The world size the launcher announced, read through a getter: the contract's
/// [`crate::contract::announced_world_size_with`], under the name this module has always had.
pub use crate::launch::announced_world_size_with as launcher_world_size_with;
pub use native::native_group;

use crate::comm::{
    check_all_gather, check_len, check_reduce_scatter, check_root, finish_avg, Communicator,
};
use crate::dtype::{with_dtype, DType, Element};
use crate::error::{Error, ErrorKind, Result};
use crate::group::Work;
use crate::reduce::ReduceOp;
use crate::schedule::chunk_span;
use ::mpi::collective::SystemOperation;
use ::mpi::datatype::{Equivalence, Partition, PartitionMut};
use ::mpi::environment::Universe;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::{Communicator as _, CommunicatorCollectives, Destination, Root, Source};
/// MPI's thread-support levels, for [`init_with`].
pub use ::mpi::Threading;

/// The tag of [`Communicator::send`] and [`Communicator::recv`] messages.
const P2P_TAG: ::mpi::Tag = 0;

/// MPI's world communicator. Owns the MPI environment: creating it initializes MPI (see
/// [`init`]) and dropping it finalizes MPI, after which MPI cannot be used again in this process.
pub struct MpiComm {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    threading: Threading,
    // Last: dropped after everything else, it calls MPI_Finalize.
    _universe: Universe,
}

impl std::fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("threading", &self.threading)
            .finish()
    }
}

/// Initializes MPI with `MPI_THREAD_FUNNELED` (see [`init_with`]): the level a program needs
/// when other threads exist beside the one that calls MPI, as a native [`crate::Group`]'s do.
pub fn init() -> Result<MpiComm> {
    init_with(Threading::Funneled)
}

/// Initializes MPI asking for `threading` and returns its world. Fails if MPI is already
/// initialized (or was finalized) in this process, and if the launcher's environment says the job
/// has more ranks than MPI reports: that is a binary built against one MPI started by another
/// MPI's `mpirun`, where every process silently becomes a world of one.
///
/// The level has a price: an 8-byte all-reduce between two ranks on shared memory took Open MPI
/// 4.1 0.70 µs at `Funneled` against 0.50 µs at `Single` (`results/mpi-settings/`, a 2-core VM).
/// A program that only calls MPI from one thread and runs no other threads, as an MPI benchmark
/// does, asks for `Threading::Single`, which is what `MPI_Init` gives.
pub fn init_with(threading: Threading) -> Result<MpiComm> {
    if ::mpi::is_finalized() {
        return Err(Error::new(
            ErrorKind::Bootstrap,
            "MPI was already finalized in this process (an MpiComm was dropped) and cannot be \
             initialized again; keep one MpiComm for the life of the program",
        ));
    }
    let (universe, threading) = ::mpi::initialize_with_threading(threading).ok_or_else(|| {
        Error::new(
            ErrorKind::Bootstrap,
            "MPI is already initialized in this process; psyne::mpi::init must be the only \
                 initialization, and there can be only one MpiComm",
        )
    })?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let (rank, size) = match (usize::try_from(rank), usize::try_from(size)) {
        (Ok(r), Ok(s)) if r < s => (r, s),
        _ => {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!("MPI reported rank {rank} of {size}"),
            ))
        }
    };
    layout::check_world(&|name| std::env::var(name).ok(), rank, size)?;
    Ok(MpiComm {
        world,
        rank,
        size,
        threading,
        _universe: universe,
    })
}

/// The world size the launcher announced in this process's environment, and the variable that
/// said it (one of the launchers of [`crate::contract`], e.g. `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`,
/// `SLURM_STEP_NUM_TASKS` or `PSY_WORLD_SIZE`), to check against [`Communicator::size`].
pub fn launcher_world_size() -> Option<(&'static str, usize)> {
    launcher_world_size_with(&|name| std::env::var(name).ok())
}

impl MpiComm {
    /// The rsmpi world communicator, for calls psyne does not wrap (non-blocking collectives,
    /// `MPI_Wtime`, ...).
    pub fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// The thread support MPI granted ([`init`] asks for `Funneled`).
    pub fn threading(&self) -> Threading {
        self.threading
    }

    /// The name of this processor as MPI reports it (usually the host name).
    pub fn processor_name(&self) -> String {
        match ::mpi::environment::processor_name() {
            Ok(n) if !n.trim_end_matches('\0').is_empty() => n.trim_end_matches('\0').to_string(),
            _ => crate::hostname(),
        }
    }

    /// The MPI library's own version string (`Open MPI v4.1.4, ...`).
    pub fn library_version(&self) -> String {
        match ::mpi::environment::library_version() {
            // Open MPI counts the terminating NUL into the length.
            Ok(v) => v.trim_end_matches(['\0', '\n', ' ']).to_string(),
            Err(_) => "unknown MPI".into(),
        }
    }

    fn check_root(&self, what: &str, root: usize) -> Result<::mpi::Rank> {
        check_root(self.size, what, root)?;
        layout::to_count(root, what)
    }

    fn check_peer(&self, what: &str, peer: usize) -> Result<::mpi::Rank> {
        crate::comm::check_peer(self.rank, self.size, peer, what)?;
        layout::to_count(peer, what)
    }

    /// Broadcasts `bytes` (of any length) from rank 0; every rank returns rank 0's bytes.
    fn broadcast_bytes(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mut len = [bytes.len() as u64];
        self.broadcast(&mut len, 0)?;
        let len = usize::try_from(len[0])
            .map_err(|_| Error::new(ErrorKind::Bootstrap, "broadcast length overflows"))?;
        let mut buf = if self.rank == 0 {
            bytes
        } else {
            vec![0u8; len]
        };
        self.broadcast(&mut buf, 0)?;
        Ok(buf)
    }
}

/// Reductions MPI cannot do: bitwise ops on floats (as psyne refuses them), and anything on half
/// precision, which MPI has no types for.
fn check_reduction<T: Element>(what: &str, op: ReduceOp) -> Result<()> {
    op.check(T::DTYPE)?;
    if matches!(T::DTYPE, DType::F16 | DType::BF16) {
        return Err(Error::invalid(format!(
            "{what}({}, {op}): MPI has no half-precision reduction; use the native backend \
             (psyne::Group) to reduce f16/bf16, or convert to f32 first",
            T::DTYPE
        )));
    }
    Ok(())
}

fn system_op(op: ReduceOp) -> SystemOperation {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => SystemOperation::sum(),
        ReduceOp::Prod => SystemOperation::product(),
        ReduceOp::Min => SystemOperation::min(),
        ReduceOp::Max => SystemOperation::max(),
        ReduceOp::BAnd => SystemOperation::bitwise_and(),
        ReduceOp::BOr => SystemOperation::bitwise_or(),
        ReduceOp::BXor => SystemOperation::bitwise_xor(),
    }
}

fn cast<T: Element, M: bytemuck::Pod>(s: &[T]) -> Result<&[M]> {
    bytemuck::try_cast_slice(s).map_err(|e| internal_cast::<T>(e))
}

fn cast_mut<T: Element, M: bytemuck::Pod>(s: &mut [T]) -> Result<&mut [M]> {
    bytemuck::try_cast_slice_mut(s).map_err(|e| internal_cast::<T>(e))
}

fn internal_cast<T: Element>(e: bytemuck::PodCastError) -> Error {
    Error::invalid(format!(
        "internal error: cannot view a {} buffer as its MPI type: {e:?}",
        T::DTYPE
    ))
}

/// The typed MPI calls, on the MPI type of an element.
mod typed {
    use super::*;

    /// A type MPI can carry and psyne can cast to.
    pub(super) trait Wire: Equivalence + bytemuck::Pod {}
    impl<W: Equivalence + bytemuck::Pod> Wire for W {}

    /// `s`, or if it is empty an empty slice at a real address. An empty slice's pointer is
    /// dangling, equal to its alignment: for a 1-byte type that is `(void*)1`, which is Open MPI's
    /// `MPI_IN_PLACE`, so an empty `u8` receive buffer would mean "in place" (MPI_ERR_ARG).
    fn real<'a, W: Wire>(s: &'a [W], spare: &'a [W; 1]) -> &'a [W] {
        if s.is_empty() {
            &spare[..0]
        } else {
            s
        }
    }

    /// [`real`] for a buffer MPI writes.
    fn real_mut<'a, W: Wire>(s: &'a mut [W], spare: &'a mut [W; 1]) -> &'a mut [W] {
        if s.is_empty() {
            &mut spare[..0]
        } else {
            s
        }
    }

    pub(super) fn all_reduce<W: Wire>(
        c: &SimpleCommunicator,
        buf: &mut [W],
        op: ReduceOp,
    ) -> Result<()> {
        raw::all_reduce_in_place(c, buf, system_op(op))
    }

    pub(super) fn reduce<W: Wire>(
        c: &SimpleCommunicator,
        buf: &mut [W],
        op: ReduceOp,
        root: ::mpi::Rank,
    ) -> Result<()> {
        if c.rank() == root {
            raw::reduce_in_place_at_root(c, buf, system_op(op), root)
        } else {
            c.process_at_rank(root).reduce_into(&buf[..], system_op(op));
            Ok(())
        }
    }

    pub(super) fn reduce_scatter<W: Wire>(
        c: &SimpleCommunicator,
        input: &[W],
        out: &mut [W],
        op: ReduceOp,
    ) -> Result<()> {
        let size = c.size() as usize;
        let (spare_in, mut spare_out) = ([W::zeroed()], [W::zeroed()]);
        let n = input.len();
        let input = real(input, &spare_in);
        let out = real_mut(out, &mut spare_out);
        if n % size == 0 {
            c.reduce_scatter_block_into(input, out, system_op(op));
            return Ok(());
        }
        // Uneven chunks: MPI_Reduce_scatter with psyne's chunk lengths as the counts.
        let part = layout::chunks(n, size, "reduce_scatter")?;
        raw::reduce_scatter(c, input, out, &part.counts, system_op(op))
    }

    pub(super) fn all_gather<W: Wire>(
        c: &SimpleCommunicator,
        local: &[W],
        out: &mut [W],
    ) -> Result<()> {
        let size = c.size() as usize;
        let (spare_in, mut spare_out) = ([W::zeroed()], [W::zeroed()]);
        let local = real(local, &spare_in);
        let out = real_mut(out, &mut spare_out);
        if out.len() % size == 0 {
            c.all_gather_into(local, out);
            return Ok(());
        }
        let p = layout::chunks(out.len(), size, "all_gather_into")?;
        let mut part = PartitionMut::new(out, &p.counts[..], &p.displs[..]);
        c.all_gather_varcount_into(local, &mut part);
        Ok(())
    }

    pub(super) fn scatter<W: Wire>(
        c: &SimpleCommunicator,
        input: &[W],
        out: &mut [W],
        count: usize,
        root: ::mpi::Rank,
    ) -> Result<()> {
        let size = c.size() as usize;
        let (spare_in, mut spare_out) = ([W::zeroed()], [W::zeroed()]);
        let input = real(input, &spare_in);
        let out = real_mut(out, &mut spare_out);
        let p = c.process_at_rank(root);
        match (c.rank() == root, count % size == 0) {
            (true, true) => p.scatter_into_root(input, out),
            (false, true) => p.scatter_into(out),
            (true, false) => {
                let part = layout::chunks(count, size, "scatter_into")?;
                let send = Partition::new(input, &part.counts[..], &part.displs[..]);
                p.scatter_varcount_into_root(&send, out);
            }
            (false, false) => p.scatter_varcount_into(out),
        }
        Ok(())
    }

    pub(super) fn gather<W: Wire>(
        c: &SimpleCommunicator,
        local: &[W],
        out: &mut [W],
        count: usize,
        root: ::mpi::Rank,
    ) -> Result<()> {
        let size = c.size() as usize;
        let (spare_in, mut spare_out) = ([W::zeroed()], [W::zeroed()]);
        let local = real(local, &spare_in);
        let out = real_mut(out, &mut spare_out);
        let p = c.process_at_rank(root);
        match (c.rank() == root, count % size == 0) {
            (true, true) => p.gather_into_root(local, out),
            (false, true) => p.gather_into(local),
            (true, false) => {
                let part = layout::chunks(count, size, "gather_into")?;
                let mut recv = PartitionMut::new(out, &part.counts[..], &part.displs[..]);
                p.gather_varcount_into_root(local, &mut recv);
            }
            (false, false) => p.gather_varcount_into(local),
        }
        Ok(())
    }

    pub(super) fn all_to_all<W: Wire>(
        c: &SimpleCommunicator,
        input: &[W],
        out: &mut [W],
    ) -> Result<()> {
        let size = c.size() as usize;
        let (spare_in, mut spare_out) = ([W::zeroed()], [W::zeroed()]);
        let n = input.len();
        let input = real(input, &spare_in);
        let out = real_mut(out, &mut spare_out);
        if n % size == 0 {
            c.all_to_all_into(input, out);
            return Ok(());
        }
        let (send, recv) = layout::all_to_all(n, size, c.rank() as usize)?;
        let send = Partition::new(input, &send.counts[..], &send.displs[..]);
        let mut recv = PartitionMut::new(out, &recv.counts[..], &recv.displs[..]);
        c.all_to_all_varcount_into(&send, &mut recv);
        Ok(())
    }

    pub(super) fn broadcast<W: Wire>(c: &SimpleCommunicator, buf: &mut [W], root: ::mpi::Rank) {
        let mut spare = [W::zeroed()];
        c.process_at_rank(root)
            .broadcast_into(real_mut(buf, &mut spare));
    }

    pub(super) fn send<W: Wire>(c: &SimpleCommunicator, buf: &[W], dst: ::mpi::Rank) {
        let spare = [W::zeroed()];
        c.process_at_rank(dst)
            .send_with_tag(real(buf, &spare), P2P_TAG);
    }

    pub(super) fn recv<W: Wire>(c: &SimpleCommunicator, buf: &mut [W], src: ::mpi::Rank) -> usize {
        let mut spare = [W::zeroed()];
        let buf = real_mut(buf, &mut spare);
        let status = c.process_at_rank(src).receive_into_with_tag(buf, P2P_TAG);
        usize::try_from(status.count(W::equivalent_datatype())).unwrap_or(usize::MAX)
    }
}

impl Communicator for MpiComm {
    fn backend(&self) -> &'static str {
        "mpi"
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        check_reduction::<T>("all_reduce", op)?;
        layout::to_count(buf.len(), "all_reduce")?;
        if buf.is_empty() {
            return Ok(());
        }
        with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::all_reduce::<W>(&self.world, cast_mut::<T, W>(buf)?, op)?;
        });
        finish_avg(op, self.size, buf);
        Ok(())
    }

    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        let root = self.check_root("broadcast", root)?;
        layout::to_count(buf.len(), "broadcast")?;
        if buf.is_empty() {
            return Ok(());
        }
        with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::broadcast::<W>(&self.world, cast_mut::<T, W>(buf)?, root);
        });
        Ok(())
    }

    fn reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: usize) -> Result<()> {
        check_reduction::<T>("reduce", op)?;
        let root_rank = self.check_root("reduce", root)?;
        layout::to_count(buf.len(), "reduce")?;
        if buf.is_empty() {
            return Ok(());
        }
        with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::reduce::<W>(&self.world, cast_mut::<T, W>(buf)?, op, root_rank)?;
        });
        if self.rank == root {
            finish_avg(op, self.size, buf);
        }
        Ok(())
    }

    fn all_gather_into<T: Element>(&self, local: &[T], out: &mut [T]) -> Result<()> {
        check_all_gather(self.rank, self.size, local.len(), out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::all_gather::<W>(&self.world, cast::<T, W>(local)?, cast_mut::<T, W>(out)?)
        })
    }

    fn reduce_scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        check_reduction::<T>("reduce_scatter", op)?;
        check_reduce_scatter(self.rank, self.size, input.len(), out.len())?;
        layout::to_count(input.len(), "reduce_scatter")?;
        if input.is_empty() {
            return Ok(());
        }
        with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::reduce_scatter::<W>(
                &self.world,
                cast::<T, W>(input)?,
                cast_mut::<T, W>(out)?,
                op,
            )?;
        });
        finish_avg(op, self.size, out);
        Ok(())
    }

    fn scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()> {
        let root_rank = self.check_root("scatter", root)?;
        if self.rank == root {
            check_len("scatter on the root", "input", input.len(), count)?;
        }
        let mine = chunk_span(count, self.size, self.rank);
        check_len("scatter", "out", out.len(), mine.len())?;
        if count == 0 {
            return Ok(());
        }
        with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::scatter::<W>(
                &self.world,
                cast::<T, W>(input)?,
                cast_mut::<T, W>(out)?,
                count,
                root_rank,
            )
        })
    }

    fn gather_into<T: Element>(
        &self,
        local: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()> {
        let root_rank = self.check_root("gather", root)?;
        let mine = chunk_span(count, self.size, self.rank);
        check_len("gather", "local", local.len(), mine.len())?;
        if self.rank == root {
            check_len("gather on the root", "out", out.len(), count)?;
        }
        if count == 0 {
            return Ok(());
        }
        with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::gather::<W>(
                &self.world,
                cast::<T, W>(local)?,
                cast_mut::<T, W>(out)?,
                count,
                root_rank,
            )
        })
    }

    fn all_to_all_into<T: Element>(&self, input: &[T], out: &mut [T]) -> Result<()> {
        let mine = chunk_span(input.len(), self.size, self.rank);
        check_len("all_to_all", "out", out.len(), self.size * mine.len())?;
        if input.is_empty() {
            return Ok(());
        }
        with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::all_to_all::<W>(&self.world, cast::<T, W>(input)?, cast_mut::<T, W>(out)?)
        })
    }

    fn barrier(&self) -> Result<()> {
        self.world.barrier();
        Ok(())
    }

    fn send<T: Element>(&self, buf: &[T], dst: usize) -> Result<()> {
        let dst = self.check_peer("send to", dst)?;
        layout::to_count(buf.len(), "send")?;
        with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::send::<W>(&self.world, cast::<T, W>(buf)?, dst);
        });
        Ok(())
    }

    /// Runs `f` at once, on this thread: this backend has no background engine, so its `_async`
    /// forms return a finished [`Work`].
    fn submit<R, F>(&self, _what: &str, f: F) -> Work<R>
    where
        R: Send + 'static,
        F: FnOnce(&Self) -> Result<R> + Send + 'static,
    {
        Work::ready(f(self))
    }

    fn recv<T: Element>(&self, buf: &mut [T], src: usize) -> Result<()> {
        let src_rank = self.check_peer("receive from", src)?;
        layout::to_count(buf.len(), "recv")?;
        let got = with_dtype!(T::DTYPE, W, u16, u16 => {
            typed::recv::<W>(&self.world, cast_mut::<T, W>(buf)?, src_rank)
        });
        if got != buf.len() {
            return Err(Error::new(
                ErrorKind::Mismatch,
                format!(
                    "recv: rank {src} sent {got} {} elements but rank {} expected {}; send and \
                     recv must use buffers of the same length",
                    T::DTYPE,
                    self.rank,
                    buf.len()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn half_reductions_and_bitwise_floats_are_refused_before_any_call() {
        let e = check_reduction::<f16>("all_reduce", ReduceOp::Sum).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(
            e.message().contains("MPI has no half-precision reduction")
                && e.message().contains("native backend"),
            "{e}"
        );
        assert!(check_reduction::<bf16>("reduce", ReduceOp::Max).is_err());
        let e = check_reduction::<f32>("all_reduce", ReduceOp::BXor).unwrap_err();
        assert_eq!(e, ReduceOp::BXor.check(DType::F32).unwrap_err());
        check_reduction::<u8>("all_reduce", ReduceOp::BXor).unwrap();
        check_reduction::<f64>("all_reduce", ReduceOp::Avg).unwrap();
    }

    #[test]
    fn halves_travel_as_u16_bit_for_bit() {
        let v = [f16::from_f32(1.5), f16::NAN, f16::NEG_INFINITY];
        let w: &[u16] = cast::<f16, u16>(&v).unwrap();
        assert_eq!(w, v.map(|x| x.to_bits()));
        let mut b = [bf16::from_f32(-2.0)];
        cast_mut::<bf16, u16>(&mut b).unwrap()[0] = bf16::from_f32(3.0).to_bits();
        assert_eq!(b[0], bf16::from_f32(3.0));
    }
}
