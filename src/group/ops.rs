//! The typed collectives: check arguments, lay the work buffer out as the schedule expects, run,
//! and copy results out. Each takes the core and an optional forced algorithm.

use super::core::{CollCall, Core};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::schedule::{chunk_span, Algo, Collective};

fn bytes<T: Element>(v: &[T]) -> usize {
    std::mem::size_of_val(v)
}

fn check_root(core: &Core, what: &str, root: usize) -> Result<()> {
    if root >= core.size {
        return Err(Error::invalid(format!(
            "{what}: root {root} is out of range; the group has ranks 0..{}",
            core.size
        )));
    }
    Ok(())
}

fn finish_avg<T: Element>(core: &Core, op: ReduceOp, out: &mut [T]) {
    if op == ReduceOp::Avg {
        for x in out {
            *x = x.div_count(core.size);
        }
    }
}

fn run<T: Element>(
    core: &Core,
    coll: Collective,
    algo: Algo,
    op: Option<ReduceOp>,
    count: usize,
    work: &mut [T],
) -> Result<()> {
    let call = CollCall {
        coll,
        algo,
        dtype: T::DTYPE,
        op,
        count,
    };
    core.run_collective(call, bytemuck::cast_slice_mut(work))
}

fn check_op<T: Element>(op: ReduceOp) -> Result<()> {
    op.check(T::DTYPE)
}

pub(crate) fn all_reduce<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    buf: &mut [T],
    op: ReduceOp,
) -> Result<()> {
    check_op::<T>(op)?;
    let coll = Collective::AllReduce;
    let algo = core.algo_for(coll, algo, bytes(buf))?;
    run(core, coll, algo, Some(op), buf.len(), buf)?;
    finish_avg(core, op, buf);
    Ok(())
}

pub(crate) fn broadcast<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    buf: &mut [T],
    root: usize,
) -> Result<()> {
    check_root(core, "broadcast", root)?;
    let coll = Collective::Broadcast { root };
    let algo = core.algo_for(coll, algo, bytes(buf))?;
    run(core, coll, algo, None, buf.len(), buf)
}

pub(crate) fn reduce<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    buf: &mut [T],
    op: ReduceOp,
    root: usize,
) -> Result<()> {
    check_op::<T>(op)?;
    check_root(core, "reduce", root)?;
    let coll = Collective::Reduce { root };
    let algo = core.algo_for(coll, algo, bytes(buf))?;
    if core.rank == root {
        run(core, coll, algo, Some(op), buf.len(), buf)?;
        finish_avg(core, op, buf);
        Ok(())
    } else {
        // Non-roots keep their buffer: the schedule reduces partial results into a copy.
        core.with_work(buf.len(), |work| {
            work.copy_from_slice(buf);
            run(core, coll, algo, Some(op), buf.len(), work)
        })
    }
}

pub(crate) fn all_gather_into<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    local: &[T],
    out: &mut [T],
) -> Result<()> {
    let mine = chunk_span(out.len(), core.size, core.rank);
    if local.len() != mine.len() {
        return Err(Error::invalid(format!(
            "all_gather_into: rank {} passed {} elements but an output of {} elements over {} ranks gives it {} (chunks split as evenly as possible, the first ones larger)",
            core.rank, local.len(), out.len(), core.size, mine.len()
        )));
    }
    let coll = Collective::AllGather;
    // The largest chunk's bytes, the same on every rank (which must choose the same algorithm).
    let largest = chunk_span(out.len(), core.size, 0).len() * std::mem::size_of::<T>();
    let algo = core.algo_for(coll, algo, largest)?;
    out[mine].copy_from_slice(local);
    let n = out.len();
    run(core, coll, algo, None, n, out)
}

pub(crate) fn reduce_scatter_into<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    input: &[T],
    out: &mut [T],
    op: ReduceOp,
) -> Result<()> {
    check_op::<T>(op)?;
    let mine = chunk_span(input.len(), core.size, core.rank);
    if out.len() != mine.len() {
        return Err(Error::invalid(format!(
            "reduce_scatter_into: rank {} gets {} of the {} input elements but its output holds {}",
            core.rank,
            mine.len(),
            input.len(),
            out.len()
        )));
    }
    let coll = Collective::ReduceScatter;
    let algo = core.algo_for(coll, algo, bytes(input))?;
    core.with_work(input.len(), |work| {
        work.copy_from_slice(input);
        run(core, coll, algo, Some(op), input.len(), work)?;
        out.copy_from_slice(&work[mine]);
        Ok(())
    })?;
    finish_avg(core, op, out);
    Ok(())
}

fn check_len(what: &str, name: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(Error::invalid(format!(
            "{what}: `{name}` holds {got} elements but must hold {want} (chunks are the even split of the total count, the first ones one longer)"
        )));
    }
    Ok(())
}

pub(crate) fn scatter_into<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    input: &[T],
    out: &mut [T],
    count: usize,
    root: usize,
) -> Result<()> {
    check_root(core, "scatter", root)?;
    if core.rank == root {
        check_len("scatter on the root", "input", input.len(), count)?;
    }
    let mine = chunk_span(count, core.size, core.rank);
    check_len("scatter", "out", out.len(), mine.len())?;
    let coll = Collective::Scatter { root };
    let algo = core.algo_for(coll, algo, count * std::mem::size_of::<T>())?;
    core.with_work(count, |work| {
        if core.rank == root {
            work.copy_from_slice(input);
        }
        run(core, coll, algo, None, count, work)?;
        out.copy_from_slice(&work[mine]);
        Ok(())
    })
}

pub(crate) fn gather_into<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    local: &[T],
    out: &mut [T],
    count: usize,
    root: usize,
) -> Result<()> {
    check_root(core, "gather", root)?;
    let mine = chunk_span(count, core.size, core.rank);
    check_len("gather", "local", local.len(), mine.len())?;
    let coll = Collective::Gather { root };
    let algo = core.algo_for(coll, algo, count * std::mem::size_of::<T>())?;
    if core.rank == root {
        check_len("gather on the root", "out", out.len(), count)?;
        out[mine].copy_from_slice(local);
        run(core, coll, algo, None, count, out)
    } else {
        core.with_work(count, |work| {
            work[mine].copy_from_slice(local);
            run(core, coll, algo, None, count, work)
        })
    }
}

pub(crate) fn all_to_all_into<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    input: &[T],
    out: &mut [T],
) -> Result<()> {
    let n = input.len();
    let coll = Collective::AllToAll;
    let layout = coll.layout(core.rank, core.size, n);
    check_len("all_to_all", "out", out.len(), layout.output.len())?;
    let algo = core.algo_for(coll, algo, bytes(input))?;
    let mine = chunk_span(n, core.size, core.rank);
    let own_block = n + core.rank * mine.len();
    core.with_work(layout.buf_len, |work| {
        work[..n].copy_from_slice(input);
        work[own_block..own_block + mine.len()].copy_from_slice(&input[mine]);
        run(core, coll, algo, None, n, work)?;
        out.copy_from_slice(&work[layout.output]);
        Ok(())
    })
}

pub(crate) fn barrier(core: &Core, algo: Option<Algo>) -> Result<()> {
    let coll = Collective::Barrier;
    let algo = core.algo_for(coll, algo, 0)?;
    run::<u8>(core, coll, algo, None, 0, &mut [])
}

pub(crate) fn send<T: Element>(core: &Core, buf: &[T], dst: usize) -> Result<()> {
    // The executor takes one mutable work buffer for every operation; a send only reads it, so it
    // gets a copy (one memcpy, into the group's kept work buffer) instead of a cast that would
    // discard the shared borrow.
    core.with_work(buf.len(), |view: &mut [T]| {
        view.copy_from_slice(buf);
        core.run_p2p(dst, true, T::DTYPE, bytemuck::cast_slice_mut(view))
    })
}

pub(crate) fn recv<T: Element>(core: &Core, buf: &mut [T], src: usize) -> Result<()> {
    core.run_p2p(src, false, T::DTYPE, bytemuck::cast_slice_mut(buf))
}
