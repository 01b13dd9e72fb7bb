//! The reducing collectives in canonical order ([`ReduceOrder::Canonical`]): every output
//! element is the rank-order fold `((x0 ⊕ x1) ⊕ x2) ⊕ … ⊕ x_{p-1}`, the bits
//! [`crate::oracle`] computes, whatever the size, algorithm, tuning file or transport.
//!
//! Where the fast path already folds in rank order, or cannot but do so, it runs as it is:
//!
//! - two ranks or fewer: every element is one `x0 ⊕ x1`, and `⊕` (an IEEE sum or product, or the
//!   f32 step of a half type, rounded once) is commutative;
//! - integer types (wrapping sums and products are associative) and min, max and the bitwise
//!   ops, which give the same bits in any order;
//! - the node board ([`Algo::Flat`]), which folds every rank's slot in rank order.
//!
//! Otherwise the call moves data with collectives that do not reduce, and folds locally:
//!
//! - **shared** (all-reduce on a group whose ranks share memory, larger than the node board's
//!   slot): each rank copies its buffer into the group's staging buffers in shared memory, each
//!   folds its chunk of every rank's in rank order straight out of them and writes
//!   the result into all of them (the pass of `Group::all_reduce_shared`), and each copies the
//!   result out ([`crate::executor::staging`]). Where the staging buffers cannot be made, the
//!   call gathers or runs the all-to-all below;
//! - **small** (every rank's whole buffer together at most [`GATHER_MAX`] bytes): all-reduce
//!   gathers every rank's buffer to every rank (one all-gather) and reduce to the root (one
//!   gather), which folds them in rank order;
//! - **large**: an all-to-all hands each rank its chunk ([`crate::schedule::chunk_span`]) of every
//!   rank's buffer, in rank order; the rank folds them; an all-gather (all-reduce) or a gather to
//!   the root (reduce) then spreads the chunks. Each rank sends and receives the bytes of a ring
//!   all-reduce: `(p-1)/p` of the buffer each way in each phase. Reduce-scatter is the
//!   all-to-all and the fold.
//!
//! A forced algorithm ([`crate::Group::with_algo`], `PSY_ALGO`) for a reducing call cannot
//! change its bits here: it serves the phase it implements (`ring` and `hier` the all-gather,
//! `binomial` and `linear` the gather), and the others run their automatic choice; the shared
//! path uses none.
//!
//! [`CanonicalPath`] names the path a call takes ([`crate::Group::canonical_path`]; psybench's
//! `canonical-NAME` rows).

use super::core::Core;
use super::ops;
use crate::comm::{check_reduce_scatter, check_root, finish_avg};
use crate::copy::copy_slice;
use crate::dtype::{DType, Element};
use crate::error::Result;
use crate::reduce::{reduce_slice, ReduceOp, ReduceOrder};
use crate::schedule::{chunk_span, Algo, Collective};

/// The most bytes of every rank's buffer together (`size * bytes`) for which canonical all-reduce
/// and reduce gather whole buffers instead of running an all-to-all then an all-gather or gather
/// (one collective instead of two).
pub const GATHER_MAX: usize = 64 << 10;

/// Elements folded per block: the block of the result stays in cache while every rank's block
/// is added to it.
const FOLD_BLOCK_BYTES: usize = 32 << 10;

/// A reducing call's choices: the forced algorithm and the order.
#[derive(Clone, Copy)]
pub(crate) struct Choice {
    pub(crate) algo: Option<Algo>,
    pub(crate) order: ReduceOrder,
}

/// How a reducing call in canonical order runs where the algorithm the fast path would take
/// does not fold in rank order (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CanonicalPath {
    /// All-reduce through the group's staging buffers in shared memory: copied in, folded in
    /// one pass, copied out.
    Shared,
    /// Every rank's whole buffer gathered (to every rank for all-reduce), then folded.
    Gather,
    /// An all-to-all of chunks, the fold, then an all-gather or a gather.
    AllToAll,
}

impl CanonicalPath {
    /// The path's name, as psybench labels its rows (`canonical-NAME`).
    pub fn name(self) -> &'static str {
        match self {
            CanonicalPath::Shared => "shared",
            CanonicalPath::Gather => "gather",
            CanonicalPath::AllToAll => "alltoall",
        }
    }
}

/// The canonical path `coll` of `bytes` per rank of `dtype` with `op` takes, or `None` where
/// it runs the fast path: the order is fast, or the fast path folds in rank order anyway (see
/// the module docs). Where it says [`CanonicalPath::Shared`] but the staging buffers cannot be
/// made, the call gathers or runs the all-to-all instead.
pub(crate) fn canonical_path(
    core: &Core,
    choice: Choice,
    coll: Collective,
    dtype: DType,
    op: ReduceOp,
    bytes: usize,
) -> Result<Option<CanonicalPath>> {
    if choice.order != ReduceOrder::Canonical
        || !coll.reduces()
        || core.size <= 2
        || !dtype.is_float()
        || !matches!(op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Avg)
    {
        return Ok(None);
    }
    // The check of a forced algorithm (one that does not implement `coll` is an error) and
    // whether the node board takes the call.
    if core.algo_for(coll, choice.algo, bytes)? == Algo::Flat {
        return Ok(None);
    }
    let gathers = bytes.saturating_mul(core.size) <= GATHER_MAX;
    Ok(Some(match coll {
        Collective::AllReduce if core.may_stage(bytes) => CanonicalPath::Shared,
        Collective::AllReduce | Collective::Reduce { .. } if gathers => CanonicalPath::Gather,
        _ => CanonicalPath::AllToAll,
    }))
}

/// The forced algorithm, for a phase running `coll`, if it implements it.
fn phase(choice: Choice, coll: Collective) -> Option<Algo> {
    choice
        .algo
        .filter(|a| Algo::for_collective(coll).contains(a))
}

/// Whether every rank's `ok` is true: a collective every rank calls (an integer all-reduce,
/// which takes the fast path).
fn every_rank(core: &Core, ok: bool) -> Result<bool> {
    let mut all = [i64::from(ok)];
    ops::all_reduce(core, None, &mut all, ReduceOp::Min)?;
    Ok(all[0] == 1)
}

/// Writes to `out` the rank-order fold of `blocks`, `blocks.len() / out.len()` blocks of
/// `out.len()` elements each, block by block so the result stays in cache.
fn fold<T: Element>(op: ReduceOp, blocks: &[T], out: &mut [T]) {
    let len = out.len();
    if len == 0 {
        return;
    }
    let parts = blocks.len() / len;
    let step = (FOLD_BLOCK_BYTES / std::mem::size_of::<T>()).max(1);
    let mut at = 0;
    while at < len {
        let end = (at + step).min(len);
        let acc = &mut out[at..end];
        copy_slice(&mut acc[..], &blocks[at..end]);
        for b in 1..parts {
            reduce_slice(op, acc, &blocks[b * len + at..b * len + end]);
        }
        at = end;
    }
}

/// [`crate::Communicator::all_reduce`] in the order `choice` says.
pub(crate) fn all_reduce<T: Element>(
    core: &Core,
    choice: Choice,
    buf: &mut [T],
    op: ReduceOp,
) -> Result<()> {
    let bytes = std::mem::size_of_val(buf);
    let path = canonical_path(core, choice, Collective::AllReduce, T::DTYPE, op, bytes)?;
    let path = match path {
        None => return ops::all_reduce(core, choice.algo, buf, op),
        // Staged, averaged and done; or every rank could not stage it, and goes on below.
        Some(CanonicalPath::Shared)
            if core.all_reduce_staged(buf, op, |ok| every_rank(core, ok))? =>
        {
            return Ok(())
        }
        Some(path) => path,
    };
    let (p, n) = (core.size, buf.len());
    if path != CanonicalPath::AllToAll && bytes.saturating_mul(p) <= GATHER_MAX {
        core.with_scratch(p * n, |all: &mut [T]| {
            ops::all_gather_into(core, phase(choice, Collective::AllGather), buf, all)?;
            fold(op, all, buf);
            Ok(())
        })?;
    } else {
        let mine = chunk_span(n, p, core.rank);
        core.with_scratch(p * mine.len(), |blocks: &mut [T]| {
            ops::all_to_all_into(core, phase(choice, Collective::AllToAll), buf, blocks)?;
            fold(op, blocks, &mut buf[mine]);
            Ok(())
        })?;
        ops::all_gather_in_place(core, phase(choice, Collective::AllGather), buf)?;
    }
    finish_avg(op, p, buf);
    Ok(())
}

/// [`crate::Communicator::reduce`] in the order `choice` says.
pub(crate) fn reduce<T: Element>(
    core: &Core,
    choice: Choice,
    buf: &mut [T],
    op: ReduceOp,
    root: usize,
) -> Result<()> {
    check_root(core.size, "reduce", root)?;
    let coll = Collective::Reduce { root };
    let bytes = std::mem::size_of_val(buf);
    let Some(path) = canonical_path(core, choice, coll, T::DTYPE, op, bytes)? else {
        return ops::reduce(core, choice.algo, buf, op, root);
    };
    let (p, n, is_root) = (core.size, buf.len(), core.rank == root);
    let gather = phase(choice, Collective::Gather { root });
    if path == CanonicalPath::Gather {
        core.with_scratch(if is_root { p * n } else { 0 }, |all: &mut [T]| {
            ops::gather_into(core, gather, buf, all, p * n, root)?;
            if is_root {
                fold(op, all, buf);
            }
            Ok(())
        })?;
    } else {
        let c = chunk_span(n, p, core.rank).len();
        core.with_scratch(p * c + c, |scratch: &mut [T]| {
            let (blocks, mine) = scratch.split_at_mut(p * c);
            ops::all_to_all_into(core, phase(choice, Collective::AllToAll), buf, blocks)?;
            fold(op, blocks, mine);
            let out: &mut [T] = if is_root { buf } else { &mut [] };
            ops::gather_into(core, gather, mine, out, n, root)
        })?;
    }
    if is_root {
        finish_avg(op, p, buf);
    }
    Ok(())
}

/// [`crate::Communicator::reduce_scatter_into`] in the order `choice` says.
pub(crate) fn reduce_scatter_into<T: Element>(
    core: &Core,
    choice: Choice,
    input: &[T],
    out: &mut [T],
    op: ReduceOp,
) -> Result<()> {
    let coll = Collective::ReduceScatter;
    let bytes = std::mem::size_of_val(input);
    if canonical_path(core, choice, coll, T::DTYPE, op, bytes)?.is_none() {
        return ops::reduce_scatter_into(core, choice.algo, input, out, op);
    }
    ops::check_op::<T>(op)?;
    check_reduce_scatter(core.rank, core.size, input.len(), out.len())?;
    core.with_scratch(core.size * out.len(), |blocks: &mut [T]| {
        ops::all_to_all_into(core, phase(choice, Collective::AllToAll), input, blocks)?;
        fold(op, blocks, out);
        Ok(())
    })?;
    finish_avg(op, core.size, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_is_the_rank_order_fold_across_block_edges() {
        // Three parts of a length that is not a multiple of the fold block.
        let len = FOLD_BLOCK_BYTES / 4 + 7;
        let blocks: Vec<f32> = (0..3 * len)
            .map(|i| ((i * 7919) % 1000) as f32 * 1.1e-3 + 1e4 * ((i / len) % 2) as f32)
            .collect();
        let mut out = vec![0f32; len];
        fold(ReduceOp::Sum, &blocks, &mut out);
        for (i, got) in out.iter().enumerate() {
            let want = (blocks[i] + blocks[len + i]) + blocks[2 * len + i];
            assert_eq!(got.to_bits(), want.to_bits(), "element {i}");
        }
    }
}
