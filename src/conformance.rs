//! Checks a live [`Group`] against the sequential [`crate::oracle`]: every collective × reduce op
//! × element type, element by element.
//!
//! Inputs are a deterministic function of (rank, index, seed), so every rank can compute every
//! other rank's input and the expected result without communicating. They are small integers
//! (sums within ±4 per rank, products of ±1 and 2, min/max within ±50), so every partial result
//! is exactly representable in every type, bf16 included: the order in which an algorithm
//! combines values cannot change the answer, and results must match the oracle *exactly*.

use crate::comm::Communicator;
use crate::dtype::{DType, Element};
use crate::error::Result;
use crate::group::Group;
use crate::oracle;
use crate::reduce::ReduceOp;
use crate::schedule::chunk_span;
use half::{bf16, f16};

pub mod canonical;

/// Rank `rank`'s input element `index` for a collective reducing with `op` (`None`: no reduction).
pub fn input_value<T: Element>(rank: usize, index: usize, seed: u64, op: Option<ReduceOp>) -> T {
    let (r, i, s) = (rank as i64, index as i64, seed as i64);
    let v = match op {
        Some(ReduceOp::Sum | ReduceOp::Avg) => (r * 7 + i * 3 + s).rem_euclid(9) - 4,
        Some(ReduceOp::Prod) => [1, 1, 2, 1, -1, 1, 1][(r * 5 + i + s).rem_euclid(7) as usize],
        Some(ReduceOp::Min | ReduceOp::Max) => (r * 131 + i * 17 + s * 7).rem_euclid(101) - 50,
        Some(ReduceOp::BAnd | ReduceOp::BOr | ReduceOp::BXor) => {
            (r * 37 + i * 11 + s).rem_euclid(128)
        }
        None => (r * 31 + i * 7 + s).rem_euclid(251),
    };
    T::from_i64(v)
}

/// Rank `rank`'s input of `len` elements.
pub fn input<T: Element>(rank: usize, len: usize, seed: u64, op: Option<ReduceOp>) -> Vec<T> {
    (0..len).map(|i| input_value(rank, i, seed, op)).collect()
}

/// Every rank's input, for the oracle.
fn inputs<T: Element>(
    size: usize,
    len: impl Fn(usize) -> usize,
    seed: u64,
    op: Option<ReduceOp>,
) -> Vec<Vec<T>> {
    (0..size).map(|r| input(r, len(r), seed, op)).collect()
}

/// A result that differs from the oracle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// What was called, with its arguments.
    pub case: String,
    /// The first differing index (or the length, if lengths differ).
    pub index: usize,
    /// What the group returned there.
    pub got: String,
    /// What the oracle says.
    pub expected: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: first difference at index {}: got {}, expected {}",
            self.case, self.index, self.got, self.expected
        )
    }
}

fn compare<T: Element>(
    case: impl FnOnce() -> String,
    got: &[T],
    expected: &[T],
    out: &mut Vec<Mismatch>,
) {
    if got.len() != expected.len() {
        out.push(Mismatch {
            case: case(),
            index: got.len().min(expected.len()),
            got: format!("length {}", got.len()),
            expected: format!("length {}", expected.len()),
        });
        return;
    }
    if let Some(i) = (0..got.len()).find(|&i| got[i] != expected[i]) {
        out.push(Mismatch {
            case: case(),
            index: i,
            got: format!("{:?}", got[i]),
            expected: format!("{:?}", expected[i]),
        });
    }
}

/// One count of a [`check_type`] run on one rank: what every check needs to call a collective
/// and to name the case it reports.
struct Round<'a, C> {
    group: &'a C,
    rank: usize,
    size: usize,
    /// The element count.
    n: usize,
    /// The root of the rooted collectives.
    root: usize,
    seed: u64,
}

/// Runs every collective on `group` (any [`Communicator`]) for element type `T` at each of
/// `counts`, comparing with the oracle; returns the differences (empty when all is right).
/// Communication errors are returned as errors. `reductions: false` skips the reducing
/// collectives (for backends that cannot reduce a type, like MPI with f16).
pub fn check_type<T: Element, C: Communicator>(
    group: &C,
    counts: &[usize],
    seed: u64,
    reductions: bool,
) -> Result<Vec<Mismatch>> {
    let (rank, size) = (group.rank(), group.size());
    let mut bad = Vec::new();
    let ops: Vec<ReduceOp> = ReduceOp::ALL
        .into_iter()
        .filter(|op| op.check(T::DTYPE).is_ok())
        .collect();
    for (ci, &n) in counts.iter().enumerate() {
        let round = Round {
            group,
            rank,
            size,
            n,
            root: (ci + seed as usize) % size,
            seed,
        };
        for &op in ops.iter().filter(|_| reductions) {
            check_reductions::<T, C>(&round, op, &mut bad)?;
        }
        check_data_movement::<T, C>(&round, &mut bad)?;
        group.barrier()?;
    }
    Ok(bad)
}

/// All-reduce, reduce and reduce-scatter with `op`, in that order.
fn check_reductions<T: Element, C: Communicator>(
    round: &Round<'_, C>,
    op: ReduceOp,
    bad: &mut Vec<Mismatch>,
) -> Result<()> {
    let Round {
        group,
        rank,
        size,
        n,
        root,
        seed,
    } = *round;
    let dt = T::DTYPE;
    let all = inputs::<T>(size, |_| n, seed, Some(op));
    let want = oracle::all_reduce(&all, op);
    let mut buf = all[rank].clone();
    group.all_reduce(&mut buf, op)?;
    compare(
        || format!("all_reduce({dt}, {op}, count {n}) on rank {rank}"),
        &buf,
        &want,
        bad,
    );

    let mut buf = all[rank].clone();
    group.reduce(&mut buf, op, root)?;
    let expect = if rank == root {
        oracle::reduce(&all, op)
    } else {
        all[rank].clone()
    };
    compare(
        || format!("reduce({dt}, {op}, count {n}, root {root}) on rank {rank}"),
        &buf,
        &expect,
        bad,
    );

    let mut got = vec![T::zeroed(); chunk_span(n, size, rank).len()];
    group.reduce_scatter_into(&all[rank], &mut got, op)?;
    let want = oracle::reduce_scatter(&all, op);
    compare(
        || format!("reduce_scatter({dt}, {op}, count {n}) on rank {rank}"),
        &got,
        &want[rank],
        bad,
    );
    Ok(())
}

/// The collectives that move data without reducing it, in the order every rank calls them:
/// broadcast, both all-gathers, scatter, gather, all-to-all, then send/recv round a ring.
fn check_data_movement<T: Element, C: Communicator>(
    round: &Round<'_, C>,
    bad: &mut Vec<Mismatch>,
) -> Result<()> {
    let (size, n, seed) = (round.size, round.n, round.seed);
    let plain = inputs::<T>(size, |_| n, seed, None);
    let chunks = inputs::<T>(size, |r| chunk_span(n, size, r).len(), seed, None);
    check_broadcast(round, &plain, bad)?;
    check_all_gathers(round, &plain, &chunks, bad)?;
    check_scatter_gather(round, &plain, &chunks, bad)?;
    check_all_to_all(round, &plain, bad)?;
    if size > 1 {
        check_send_recv(round, &plain, bad)?;
    }
    Ok(())
}

/// Broadcast of the root's `plain` input.
fn check_broadcast<T: Element, C: Communicator>(
    round: &Round<'_, C>,
    plain: &[Vec<T>],
    bad: &mut Vec<Mismatch>,
) -> Result<()> {
    let (group, rank, n, root) = (round.group, round.rank, round.n, round.root);
    let dt = T::DTYPE;
    let mut buf = if rank == root {
        plain[root].clone()
    } else {
        vec![T::zeroed(); n]
    };
    group.broadcast(&mut buf, root)?;
    compare(
        || format!("broadcast({dt}, count {n}, root {root}) on rank {rank}"),
        &buf,
        &oracle::broadcast(plain, root),
        bad,
    );
    Ok(())
}

/// All-gather of `n` elements per rank, then of `n` elements in total (`chunks`).
fn check_all_gathers<T: Element, C: Communicator>(
    round: &Round<'_, C>,
    plain: &[Vec<T>],
    chunks: &[Vec<T>],
    bad: &mut Vec<Mismatch>,
) -> Result<()> {
    let (group, rank, size, n) = (round.group, round.rank, round.size, round.n);
    let dt = T::DTYPE;
    let mut got = vec![T::zeroed(); n * size];
    group.all_gather_into(&plain[rank], &mut got)?;
    compare(
        || format!("all_gather({dt}, {n} per rank) on rank {rank}"),
        &got,
        &oracle::all_gather(plain),
        bad,
    );

    let mut out = vec![T::zeroed(); n];
    group.all_gather_into(&chunks[rank], &mut out)?;
    compare(
        || format!("all_gather_into({dt}, total {n}) on rank {rank}"),
        &out,
        &oracle::all_gather(chunks),
        bad,
    );
    Ok(())
}

/// Scatter of the root's `plain` input, then gather of `chunks` at the root.
fn check_scatter_gather<T: Element, C: Communicator>(
    round: &Round<'_, C>,
    plain: &[Vec<T>],
    chunks: &[Vec<T>],
    bad: &mut Vec<Mismatch>,
) -> Result<()> {
    let (group, rank, size, n, root) = (round.group, round.rank, round.size, round.n, round.root);
    let dt = T::DTYPE;
    let mut got = vec![T::zeroed(); chunks[rank].len()];
    group.scatter_into(
        if rank == root { &plain[root] } else { &[] },
        &mut got,
        n,
        root,
    )?;
    compare(
        || format!("scatter({dt}, count {n}, root {root}) on rank {rank}"),
        &got,
        &oracle::scatter(&plain[root], size)[rank],
        bad,
    );

    let mut got = vec![T::zeroed(); if rank == root { n } else { 0 }];
    group.gather_into(&chunks[rank], &mut got, n, root)?;
    let want = if rank == root {
        oracle::gather(chunks)
    } else {
        Vec::new()
    };
    compare(
        || format!("gather({dt}, total {n}, root {root}) on rank {rank}"),
        &got,
        &want,
        bad,
    );
    Ok(())
}

/// All-to-all of `plain`, `n` elements per rank.
fn check_all_to_all<T: Element, C: Communicator>(
    round: &Round<'_, C>,
    plain: &[Vec<T>],
    bad: &mut Vec<Mismatch>,
) -> Result<()> {
    let (group, rank, size, n) = (round.group, round.rank, round.size, round.n);
    let dt = T::DTYPE;
    let chunk = chunk_span(n, size, rank).len();
    let mut got = vec![T::zeroed(); size * chunk];
    group.all_to_all_into(&plain[rank], &mut got)?;
    compare(
        || format!("all_to_all({dt}, {n} per rank) on rank {rank}"),
        &got,
        &oracle::all_to_all(plain)[rank],
        bad,
    );
    Ok(())
}

/// Each rank sends its `plain` input to the next rank round a ring and receives the previous
/// one's (even ranks send first, so two ranks never both wait to receive).
fn check_send_recv<T: Element, C: Communicator>(
    round: &Round<'_, C>,
    plain: &[Vec<T>],
    bad: &mut Vec<Mismatch>,
) -> Result<()> {
    let (group, rank, size, n) = (round.group, round.rank, round.size, round.n);
    let dt = T::DTYPE;
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    let mut got = vec![T::zeroed(); n];
    if rank % 2 == 0 {
        group.send(&plain[rank], next)?;
        group.recv(&mut got, prev)?;
    } else {
        group.recv(&mut got, prev)?;
        group.send(&plain[rank], next)?;
    }
    compare(
        || format!("send/recv({dt}, count {n}) from rank {prev} to rank {rank}"),
        &got,
        &plain[prev],
        bad,
    );
    Ok(())
}

/// The non-blocking forms of any [`Communicator`], against the oracle: several calls in flight at
/// once, interleaved with a blocking one, each result checked.
pub fn check_async<C: Communicator>(
    group: &C,
    counts: &[usize],
    seed: u64,
) -> Result<Vec<Mismatch>> {
    let (rank, size) = (group.rank(), group.size());
    let mut bad = Vec::new();
    for &n in counts {
        let sums = inputs::<f32>(size, |_| n, seed, Some(ReduceOp::Sum));
        let maxes = inputs::<i32>(size, |_| n, seed, Some(ReduceOp::Max));
        let plain = inputs::<u16>(size, |_| n, seed, None);
        let a = group.all_reduce_async(sums[rank].clone(), ReduceOp::Sum);
        let b = group.all_reduce_async(maxes[rank].clone(), ReduceOp::Max);
        let mut c = plain[rank].clone();
        group.broadcast(&mut c, size - 1)?;
        let d = group.all_gather_async(plain[rank].clone());
        compare(
            || format!("all_reduce_async(f32, sum, count {n})"),
            &a.wait()?,
            &oracle::all_reduce(&sums, ReduceOp::Sum),
            &mut bad,
        );
        compare(
            || format!("all_reduce_async(i32, max, count {n})"),
            &b.wait()?,
            &oracle::all_reduce(&maxes, ReduceOp::Max),
            &mut bad,
        );
        compare(
            || format!("broadcast between async calls (u16, count {n})"),
            &c,
            &plain[size - 1],
            &mut bad,
        );
        compare(
            || format!("all_gather_async(u16, count {n})"),
            &d.wait()?,
            &oracle::all_gather(&plain),
            &mut bad,
        );
    }
    Ok(bad)
}

/// [`check_type`] for each of `dtypes`; reductions are skipped for the types in `no_reductions`.
pub fn check_types<C: Communicator>(
    group: &C,
    dtypes: &[DType],
    no_reductions: &[DType],
    counts: &[usize],
    seed: u64,
) -> Result<Vec<Mismatch>> {
    let mut bad = Vec::new();
    for &dt in dtypes {
        let r = !no_reductions.contains(&dt);
        bad.extend(match dt {
            DType::F32 => check_type::<f32, C>(group, counts, seed, r)?,
            DType::F64 => check_type::<f64, C>(group, counts, seed, r)?,
            DType::I8 => check_type::<i8, C>(group, counts, seed, r)?,
            DType::I16 => check_type::<i16, C>(group, counts, seed, r)?,
            DType::I32 => check_type::<i32, C>(group, counts, seed, r)?,
            DType::I64 => check_type::<i64, C>(group, counts, seed, r)?,
            DType::U8 => check_type::<u8, C>(group, counts, seed, r)?,
            DType::U16 => check_type::<u16, C>(group, counts, seed, r)?,
            DType::U32 => check_type::<u32, C>(group, counts, seed, r)?,
            DType::U64 => check_type::<u64, C>(group, counts, seed, r)?,
            DType::F16 => check_type::<f16, C>(group, counts, seed, r)?,
            DType::BF16 => check_type::<bf16, C>(group, counts, seed, r)?,
        });
    }
    Ok(bad)
}

/// Every collective × op × type of the native group, and its non-blocking forms.
pub fn check_all_types(group: &Group, counts: &[usize], seed: u64) -> Result<Vec<Mismatch>> {
    let mut bad = check_types(group, &DType::ALL, &[], counts, seed)?;
    bad.extend(check_async(group, counts, seed)?);
    Ok(bad)
}

/// The counts a check uses for a group of `size`: 0, 1, size - 1, size + 1 and a large odd count.
pub fn default_counts(size: usize) -> Vec<usize> {
    let mut c = vec![0, 1, size.saturating_sub(1), size + 1, 1001];
    c.dedup();
    c
}
