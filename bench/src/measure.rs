//! Measuring one case: one operation at one size on one backend with one algorithm. Every rank
//! runs this; the per-rank times and the count of wrong elements are gathered to every rank.

use crate::backend::BenchComm;
use crate::buffer::Buffer;
use crate::factors::to_collective;
use crate::model::{BenchColl, Cadence};
use psyne::schedule::chunk_span;
use psyne::{conformance, oracle, Algo, DType, Element, Error, ReduceOp, Result, SharedBuf};
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The operation.
    pub coll: BenchColl,
    /// Elements, for the size as nccl-tests defines it for the operation
    /// ([`crate::sizes::element_count`]).
    pub count: u64,
    /// Element type.
    pub dtype: DType,
    /// Reduction op (reducing operations only).
    pub op: ReduceOp,
    /// Root rank (rooted operations only).
    pub root: usize,
    /// Forced algorithm (native backend only); `None` is automatic.
    pub algo: Option<Algo>,
    /// Reduction order (native backend only); `None` is the group's.
    pub order: Option<psyne::ReduceOrder>,
    /// Untimed iterations first.
    pub warmup: u64,
    /// Timed iterations.
    pub iters: u64,
    /// Back to back or barrier-separated.
    pub cadence: Cadence,
    /// Check the result of one run against the oracle.
    pub check: bool,
    /// Test-only: spoil one element of rank 0's result before the check, to prove the check can
    /// fail (set by `PSYBENCH_TEST_CORRUPT=1`).
    pub corrupt: bool,
    /// All-reduce on buffers from `Group::alloc_shared` with `Group::all_reduce_shared` (native
    /// backend, all-reduce only; other cases ignore it).
    pub shared: bool,
}

impl Case {
    /// `coll` of `count` elements (`actual` bytes, psybench's size) with `algo`, as `sweep` asks:
    /// its type, op, root, cadence, check and buffers, and its iterations or the defaults for
    /// the size.
    pub fn of_sweep(
        sweep: &crate::model::Sweep,
        coll: BenchColl,
        (count, actual): (u64, u64),
        algo: Option<Algo>,
    ) -> Case {
        let (warmup, iters) = crate::sizes::default_iters(actual);
        Case {
            coll,
            count,
            dtype: sweep.dtype,
            op: sweep.op,
            root: sweep.root,
            algo,
            order: None,
            warmup: sweep.warmup.unwrap_or(warmup),
            iters: sweep.iters.unwrap_or(iters),
            cadence: sweep.cadence,
            check: sweep.check,
            corrupt: false,
            shared: sweep.shared_buffers,
        }
    }
}

/// What one case measured, the same on every rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Elements per the operation's size.
    pub count: u64,
    /// Bytes actually moved per the operation's size (`count` × element size).
    pub bytes: u64,
    /// The algorithm that ran (`-` for MPI, whose choice is its own).
    pub algo: String,
    /// Each rank's time per operation in microseconds, in rank order.
    pub times_us: Vec<f64>,
    /// Wrong elements summed over ranks, if checked.
    pub wrong: Option<u64>,
}

/// Runs `case` on the backend `comm` and gathers the result on every rank.
pub fn measure<C: BenchComm>(comm: &C, case: &Case) -> Result<Measurement> {
    let size = comm.size();
    if case.root >= size && to_collective(case.coll, 0).and_then(|c| c.root()).is_some() {
        return Err(Error::invalid(format!(
            "--root {} is out of range: the job has ranks 0..{size}",
            case.root
        )));
    }
    if case.coll == BenchColl::SendRecv && size < 2 {
        return Err(Error::invalid("sendrecv needs at least 2 ranks (-n 2)"));
    }
    if case.coll.reduces() {
        case.op.check(case.dtype)?;
    }
    // A forced algorithm applies to the native backend only.
    // A forced algorithm applies to the measured operation only; barriers and the gathering of
    // results use the group as it is.
    let forced = comm.view(case.algo, case.order);
    let (sync, comm) = (comm, forced.as_ref().unwrap_or(comm));
    let es = case.dtype.size() as u64;
    let count = if case.coll == BenchColl::Barrier {
        0
    } else {
        case.count
    };
    let algo = match (comm.native(), to_collective(case.coll, case.root)) {
        (Some(_), _) if shares(comm, case) && count * es >= psyne::MIN_SHARED_BYTES as u64 => {
            "shared".to_string()
        }
        (Some(g), Some(c)) => g
            .algorithm_for(c, per_rank_bytes(case.coll, count, es, size))?
            .name()
            .to_string(),
        (Some(_), None) => "direct".to_string(),
        (None, _) => "-".to_string(),
    };
    let algo = order_label(comm, case, algo, per_rank_bytes(case.coll, count, es, size))?;
    let (mine, wrong) = match case.dtype {
        DType::F32 => time_typed::<f32, _>(sync, comm, case, count as usize)?,
        DType::F64 => time_typed::<f64, _>(sync, comm, case, count as usize)?,
        DType::I8 => time_typed::<i8, _>(sync, comm, case, count as usize)?,
        DType::I16 => time_typed::<i16, _>(sync, comm, case, count as usize)?,
        DType::I32 => time_typed::<i32, _>(sync, comm, case, count as usize)?,
        DType::I64 => time_typed::<i64, _>(sync, comm, case, count as usize)?,
        DType::U8 => time_typed::<u8, _>(sync, comm, case, count as usize)?,
        DType::U16 => time_typed::<u16, _>(sync, comm, case, count as usize)?,
        DType::U32 => time_typed::<u32, _>(sync, comm, case, count as usize)?,
        DType::U64 => time_typed::<u64, _>(sync, comm, case, count as usize)?,
        DType::F16 => time_typed::<psyne::f16, _>(sync, comm, case, count as usize)?,
        DType::BF16 => time_typed::<psyne::bf16, _>(sync, comm, case, count as usize)?,
    };
    let mut times_us = vec![0.0f64; size];
    sync.all_gather_into(&[mine], &mut times_us)?;
    let wrong = match wrong {
        Some(w) => {
            let mut total = [w];
            sync.all_reduce(&mut total, ReduceOp::Sum)?;
            Some(total[0])
        }
        None => None,
    };
    Ok(Measurement {
        count,
        bytes: count * es,
        algo,
        times_us,
        wrong,
    })
}

/// `algo` labelled with the reduction order of a native reducing `case` in canonical order:
/// `canonical-PATH` where the call runs one of canonical order's own paths
/// ([`psyne::CanonicalPath::name`]),
/// `canonical:ALGO` where the algorithm it names folds in rank order anyway (2 ranks, the node
/// board, integers); unchanged in fast order, so the rows of the two orders never merge.
fn order_label<C: BenchComm>(comm: &C, case: &Case, algo: String, bytes: usize) -> Result<String> {
    let (Some(g), Some(c)) = (comm.native(), to_collective(case.coll, case.root)) else {
        return Ok(algo);
    };
    if !c.reduces() || g.reduce_order() != psyne::ReduceOrder::Canonical || algo == "shared" {
        return Ok(algo);
    }
    Ok(match g.canonical_path(c, case.dtype, case.op, bytes)? {
        Some(path) => format!("canonical-{}", path.name()),
        None => format!("canonical:{algo}"),
    })
}

/// Whether `case` runs on shared buffers.
fn shares<C: BenchComm>(comm: &C, case: &Case) -> bool {
    case.shared && case.coll == BenchColl::AllReduce && comm.native().is_some()
}

/// The bytes psyne's algorithm choice looks at for `c` of `count` elements of `es` bytes
/// (psybench's size) on `size` ranks: the largest chunk for all-gather, the whole buffer (the
/// root's) for everything else, gather included (as `src/group/ops.rs` passes them).
pub fn per_rank_bytes(c: BenchColl, count: u64, es: u64, size: usize) -> usize {
    let elements = match c {
        BenchColl::AllGather => chunk_span(count as usize, size, 0).len(),
        _ => count as usize,
    };
    elements * es as usize
}

/// The buffers of one rank for one operation.
struct Bufs<T: Element> {
    input: Buffer<T>,
    out: Buffer<T>,
    /// With `--shared-buffers`: the all-reduce buffer in shared memory (`input` is then unused).
    shared: Option<SharedBuf<T>>,
}

impl<T: Element> Bufs<T> {
    fn new(input: Buffer<T>, out: Buffer<T>) -> Bufs<T> {
        Bufs {
            input,
            out,
            shared: None,
        }
    }

    /// Moves the input into a shared buffer if the case asks for one (a collective call).
    fn share<C: BenchComm>(mut self, comm: &C, case: &Case) -> Result<Bufs<T>> {
        if let (true, Some(g)) = (shares(comm, case), comm.native()) {
            let mut buf = g.alloc_shared::<T>(self.input.len())?;
            buf.copy_from_slice(&self.input);
            self.shared = Some(buf);
        }
        Ok(self)
    }

    /// The buffer an in-place operation leaves its result in.
    fn result(&mut self) -> &mut [T] {
        match &mut self.shared {
            Some(buf) => buf,
            None => &mut self.input,
        }
    }
}

/// Every rank's input (deterministic), so each rank can compute what it should get back.
fn all_inputs<T: Element>(case: &Case, size: usize, count: usize) -> Vec<Vec<T>> {
    let op = case.coll.reduces().then_some(case.op);
    (0..size)
        .map(|r| {
            let len = match case.coll {
                BenchColl::AllGather | BenchColl::Gather => chunk_span(count, size, r).len(),
                BenchColl::Barrier => 0,
                _ => count,
            };
            conformance::input::<T>(r, len, 7, op)
        })
        .collect()
}

fn prepare<T: Element>(
    case: &Case,
    rank: usize,
    size: usize,
    count: usize,
    inputs: &[Vec<T>],
) -> Result<Bufs<T>> {
    let zeros = Buffer::zeroed;
    let copy = |r: usize| Buffer::from_slice(&inputs[r]);
    let mine = chunk_span(count, size, rank).len();
    let root = case.root;
    Ok(match case.coll {
        BenchColl::AllReduce | BenchColl::Reduce | BenchColl::AllGather | BenchColl::Gather => {
            let out = match case.coll {
                BenchColl::AllGather => count,
                BenchColl::Gather if rank == root => count,
                _ => 0,
            };
            Bufs::new(copy(rank)?, zeros(out)?)
        }
        BenchColl::Broadcast => Bufs::new(
            if rank == root {
                copy(root)?
            } else {
                zeros(count)?
            },
            zeros(0)?,
        ),
        BenchColl::ReduceScatter => Bufs::new(copy(rank)?, zeros(mine)?),
        BenchColl::AllToAll => Bufs::new(copy(rank)?, zeros(size * mine)?),
        BenchColl::Scatter => Bufs::new(
            if rank == root { copy(root)? } else { zeros(0)? },
            zeros(mine)?,
        ),
        BenchColl::Barrier => Bufs::new(zeros(0)?, zeros(0)?),
        BenchColl::SendRecv => Bufs::new(copy(rank)?, zeros(count)?),
    })
}

fn run_once<T: Element, C: BenchComm>(
    comm: &C,
    case: &Case,
    b: &mut Bufs<T>,
    count: usize,
) -> Result<()> {
    let (rank, size, root) = (comm.rank(), comm.size(), case.root);
    match case.coll {
        BenchColl::AllReduce => match (&mut b.shared, comm.native()) {
            (Some(buf), Some(g)) => g.all_reduce_shared(buf, case.op),
            _ => comm.all_reduce(&mut b.input, case.op),
        },
        BenchColl::Broadcast => comm.broadcast(&mut b.input, root),
        BenchColl::Reduce => comm.reduce(&mut b.input, case.op, root),
        BenchColl::AllGather => comm.all_gather_into(&b.input, &mut b.out),
        BenchColl::ReduceScatter => comm.reduce_scatter_into(&b.input, &mut b.out, case.op),
        BenchColl::AllToAll => comm.all_to_all_into(&b.input, &mut b.out),
        BenchColl::Gather => comm.gather_into(&b.input, &mut b.out, count, root),
        BenchColl::Scatter => comm.scatter_into(&b.input, &mut b.out, count, root),
        BenchColl::Barrier => comm.barrier(),
        BenchColl::SendRecv => {
            // A ring shift: send to the next rank, receive from the previous one. Even ranks send
            // first and odd ranks receive first, so blocking calls cannot form a cycle.
            let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
            if rank % 2 == 0 {
                comm.send(&b.input, next)?;
                comm.recv(&mut b.out, prev)
            } else {
                comm.recv(&mut b.out, prev)?;
                comm.send(&b.input, next)
            }
        }
    }
}

/// What this rank's result buffer should hold after one run from fresh inputs, and which buffer
/// holds it (true: `out`, false: `input`).
fn expected<T: Element>(
    case: &Case,
    rank: usize,
    size: usize,
    inputs: &[Vec<T>],
) -> (Vec<T>, bool) {
    let root = case.root;
    match case.coll {
        BenchColl::AllReduce => (oracle::all_reduce(inputs, case.op), false),
        BenchColl::Broadcast => (oracle::broadcast(inputs, root), false),
        BenchColl::Reduce if rank == root => (oracle::reduce(inputs, case.op), false),
        BenchColl::Reduce => (inputs[rank].clone(), false),
        BenchColl::AllGather => (oracle::all_gather(inputs), true),
        BenchColl::ReduceScatter => (
            oracle::reduce_scatter(inputs, case.op).swap_remove(rank),
            true,
        ),
        BenchColl::AllToAll => (oracle::all_to_all(inputs).swap_remove(rank), true),
        BenchColl::Gather if rank == root => (oracle::gather(inputs), true),
        BenchColl::Gather => (Vec::new(), true),
        BenchColl::Scatter => (oracle::scatter(&inputs[root], size).swap_remove(rank), true),
        BenchColl::Barrier => (Vec::new(), true),
        BenchColl::SendRecv => (inputs[(rank + size - 1) % size].clone(), true),
    }
}

/// Warm-up, an optional checked run, then the timed runs; returns this rank's microseconds per
/// operation and its count of wrong elements.
fn time_typed<T: Element, C: BenchComm>(
    sync: &C,
    comm: &C,
    case: &Case,
    count: usize,
) -> Result<(f64, Option<u64>)> {
    let (rank, size) = (comm.rank(), comm.size());
    let inputs = all_inputs::<T>(case, size, count);
    let mut bufs = prepare(case, rank, size, count, &inputs)?.share(comm, case)?;
    for _ in 0..case.warmup {
        run_once(comm, case, &mut bufs, count)?;
    }
    let wrong = if case.check {
        let mut fresh = prepare(case, rank, size, count, &inputs)?.share(comm, case)?;
        run_once(comm, case, &mut fresh, count)?;
        let (want, in_out) = expected(case, rank, size, &inputs);
        let got = if in_out {
            &mut fresh.out[..]
        } else {
            fresh.result()
        };
        if case.corrupt && rank == 0 {
            if let Some(x) = got.first_mut() {
                *x = T::from_i64(-99);
            }
        }
        let bad = if got.len() != want.len() {
            got.len().max(want.len())
        } else {
            got.iter().zip(&want).filter(|(g, w)| g != w).count()
        };
        Some(bad as u64)
    } else {
        None
    };
    let iters = case.iters.max(1);
    let per_op = match case.cadence {
        Cadence::Stream => {
            sync.barrier()?;
            let start = Instant::now();
            for _ in 0..iters {
                run_once(comm, case, &mut bufs, count)?;
            }
            start.elapsed().as_secs_f64() / iters as f64
        }
        Cadence::Isolated => {
            let mut total = 0.0;
            for _ in 0..iters {
                sync.barrier()?;
                let start = Instant::now();
                run_once(comm, case, &mut bufs, count)?;
                total += start.elapsed().as_secs_f64();
            }
            total / iters as f64
        }
        Cadence::Osu => {
            // The OSU micro-benchmarks' loop: the call timed alone, then an untimed barrier.
            sync.barrier()?;
            let mut total = 0.0;
            for _ in 0..iters {
                let start = Instant::now();
                run_once(comm, case, &mut bufs, count)?;
                total += start.elapsed().as_secs_f64();
                sync.barrier()?;
            }
            total / iters as f64
        }
    };
    Ok((per_op * 1e6, wrong))
}
