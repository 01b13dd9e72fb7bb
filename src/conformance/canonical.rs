//! Checks of canonical reduction order ([`crate::ReduceOrder::Canonical`]): all-reduce, reduce
//! and reduce-scatter of f32, f64, f16 and bf16 with sum, prod and avg, compared *bit for bit*
//! with the rank-order [`crate::oracle`], on inputs that round (so that another order of
//! combining them would, in general, give other bits).

use super::Mismatch;
use crate::comm::Communicator;
use crate::dtype::Element;
use crate::error::Result;
use crate::oracle;
use crate::reduce::ReduceOp;
use crate::schedule::{chunk_span, Collective};
use half::{bf16, f16};

/// The ops whose result depends on the order of combining floats.
pub const ORDERED_OPS: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Avg];

/// SplitMix64: a well-mixed 64-bit function of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Rank `rank`'s input element `index` for a canonical-order check with `op`: a quotient that
/// rounds in every float type, of magnitudes from about 0.001 to 7000 (sums of 8 ranks stay
/// inside f16's range), or for prod within [0.75, 1.25) (products of hundreds of ranks do).
pub fn rounding_value<T: Element>(rank: usize, index: usize, seed: u64, op: ReduceOp) -> T {
    let h = mix(seed ^ (rank as u64).rotate_left(40) ^ (index as u64).wrapping_mul(0x2545_F491));
    if op == ReduceOp::Prod {
        return T::from_i64(750 + (h % 500) as i64).div_count(1000);
    }
    let m = ((h >> 8) % 40001) as i64 - 20000;
    let by = [3, 7, 11, 1000, 13, 9999][((h >> 40) % 6) as usize];
    T::from_i64(m).div_count(by)
}

/// Rank `rank`'s input of `len` elements for a canonical-order check with `op`.
pub fn rounding_input<T: Element>(rank: usize, len: usize, seed: u64, op: ReduceOp) -> Vec<T> {
    (0..len)
        .map(|i| rounding_value(rank, i, seed, op))
        .collect()
}

/// Records the first element of `got` whose bits differ from `expected`'s.
fn compare_bits<T: Element>(
    case: impl FnOnce() -> String,
    got: &[T],
    expected: &[T],
    out: &mut Vec<Mismatch>,
) {
    let same = |i: usize| bytemuck::bytes_of(&got[i]) == bytemuck::bytes_of(&expected[i]);
    let first = if got.len() == expected.len() {
        (0..got.len()).find(|&i| !same(i))
    } else {
        Some(got.len().min(expected.len()))
    };
    if let Some(index) = first {
        let show = |v: &[T]| match v.get(index) {
            Some(x) => format!("{x:?} (bits {:02x?})", bytemuck::bytes_of(x)),
            None => format!("length {}", v.len()),
        };
        out.push(Mismatch {
            case: case(),
            index,
            got: show(got),
            expected: show(expected),
        });
    }
}

/// Every rank's input of `n` elements for `op`.
fn rounding_inputs<T: Element>(size: usize, n: usize, seed: u64, op: ReduceOp) -> Vec<Vec<T>> {
    (0..size).map(|r| rounding_input(r, n, seed, op)).collect()
}

/// One reducing collective (`coll`: all-reduce, reduce with its root, or reduce-scatter) of `n`
/// elements of `T` with `op` on `group`, compared bit for bit with the rank-order oracle; the
/// difference, if any, is pushed on `bad`.
pub fn check_collective<T: Element, C: Communicator>(
    group: &C,
    coll: Collective,
    n: usize,
    op: ReduceOp,
    seed: u64,
    bad: &mut Vec<Mismatch>,
) -> Result<()> {
    let (rank, size) = (group.rank(), group.size());
    let all = rounding_inputs::<T>(size, n, seed, op);
    let want = oracle::all_reduce(&all, op);
    let dt = T::DTYPE;
    let case = || format!("canonical {coll}({dt}, {op}, count {n}) on rank {rank}");
    match coll {
        Collective::AllReduce => {
            let mut buf = all[rank].clone();
            group.all_reduce(&mut buf, op)?;
            compare_bits(case, &buf, &want, bad);
        }
        Collective::Reduce { root } => {
            let mut buf = all[rank].clone();
            group.reduce(&mut buf, op, root)?;
            let expect = if rank == root { &want } else { &all[rank] };
            compare_bits(case, &buf, expect, bad);
        }
        _ => {
            let mine = chunk_span(n, size, rank);
            let mut got = vec![T::zeroed(); mine.len()];
            group.reduce_scatter_into(&all[rank], &mut got, op)?;
            compare_bits(case, &got, &want[mine], bad);
        }
    }
    Ok(())
}

/// The reducing collectives a canonical check runs for a count, the root of reduce chosen by
/// `round`.
pub fn reducing_collectives(size: usize, round: usize) -> [Collective; 3] {
    [
        Collective::AllReduce,
        Collective::Reduce {
            root: round % size.max(1),
        },
        Collective::ReduceScatter,
    ]
}

/// The canonical-order checks of `T` on `group` (which must reduce in canonical order) at each
/// of `counts`, for sum, prod and avg; returns the differences from the rank-order oracle.
pub fn check_canonical_type<T: Element, C: Communicator>(
    group: &C,
    counts: &[usize],
    seed: u64,
) -> Result<Vec<Mismatch>> {
    let mut bad = Vec::new();
    for (ci, &n) in counts.iter().enumerate() {
        let seed = seed.wrapping_add(ci as u64);
        for coll in reducing_collectives(group.size(), ci + seed as usize) {
            for op in ORDERED_OPS {
                check_collective::<T, C>(group, coll, n, op, seed, &mut bad)?;
            }
        }
    }
    Ok(bad)
}

/// [`check_canonical_type`] for f32, f64, f16 and bf16.
pub fn check_canonical<C: Communicator>(
    group: &C,
    counts: &[usize],
    seed: u64,
) -> Result<Vec<Mismatch>> {
    let mut bad = check_canonical_type::<f32, C>(group, counts, seed)?;
    bad.extend(check_canonical_type::<f64, C>(group, counts, seed)?);
    bad.extend(check_canonical_type::<f16, C>(group, counts, seed)?);
    bad.extend(check_canonical_type::<bf16, C>(group, counts, seed)?);
    Ok(bad)
}

/// The counts a canonical check uses for a group of `size`: 1, `size ± 1`, an odd count, the
/// counts either side of the largest f32 all-reduce the node board takes (on it, or the staging
/// buffers in shared memory), and either side of where all-reduce and reduce change from
/// gathering whole f32 buffers to the all-to-all ([`crate::group::CANONICAL_GATHER_MAX`]).
pub fn canonical_counts(size: usize) -> Vec<usize> {
    let edge = crate::group::CANONICAL_GATHER_MAX / (4 * size.max(1));
    let board = crate::tuning::board_largest_part(size, true);
    let slot =
        crate::tuning::flat_max_bytes(crate::schedule::Collective::AllReduce, size, board) / 4;
    let mut c = vec![1, size.saturating_sub(1), size + 1, 1001];
    c.extend([slot, slot + 1, edge, edge + 1]);
    c.sort_unstable();
    c.dedup();
    c
}
