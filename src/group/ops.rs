//! The typed collectives: check arguments, lay the work buffer out as the schedule expects, run,
//! and copy results out. Each takes the core and an optional forced algorithm.

use super::core::{CollCall, Core};
use crate::comm::{check_all_gather, check_len, check_reduce_scatter, check_root, finish_avg};
use crate::copy::copy_slice;
use crate::dtype::Element;
use crate::error::Result;
use crate::executor::WorkView;
use crate::reduce::ReduceOp;
use crate::schedule::{chunk_span, Algo, Collective};

fn bytes<T: Element>(v: &[T]) -> usize {
    std::mem::size_of_val(v)
}

/// The call of `coll` with `algo` and `op` on `count` elements of `T`.
fn call_of<T: Element>(
    coll: Collective,
    algo: Algo,
    op: Option<ReduceOp>,
    count: usize,
) -> CollCall {
    CollCall {
        coll,
        algo,
        dtype: T::DTYPE,
        op,
        count,
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
    let call = call_of::<T>(coll, algo, op, count);
    core.run_collective(call, bytemuck::cast_slice_mut(work))
}

/// Runs without a work buffer: `input` stands for the buffer's elements from `input_at` on (only
/// read) and `out` for those from `out_at` on (where both do, `out`: [`WorkView`]). `Ok(false)`
/// (nothing done) when the plan would touch other elements, or write the input: the caller then
/// copies into a work buffer.
fn run_direct<T: Element>(
    core: &Core,
    call: (Collective, Algo, Option<ReduceOp>),
    count: usize,
    input: &[T],
    input_at: usize,
    out: &mut [T],
    out_at: usize,
) -> Result<bool> {
    run_view::<T>(core, call, count, direct_view(input, input_at, out, out_at))
}

/// `input` standing for the work buffer's elements from `input_at` on and `out` for those from
/// `out_at` on ([`WorkView::split`]).
fn direct_view<'a, T: Element>(
    input: &'a [T],
    input_at: usize,
    out: &'a mut [T],
    out_at: usize,
) -> WorkView<'a> {
    let es = std::mem::size_of::<T>();
    WorkView::split(
        bytemuck::cast_slice(input),
        input_at * es,
        bytemuck::cast_slice_mut(out),
        out_at * es,
    )
}

/// Runs `call` on `view` (`Ok(false)`, nothing done, where it does not fit).
fn run_view<T: Element>(
    core: &Core,
    call: (Collective, Algo, Option<ReduceOp>),
    count: usize,
    view: WorkView<'_>,
) -> Result<bool> {
    let (coll, algo, op) = call;
    if algo == Algo::Flat {
        return Ok(false); // the node board lays out its own slots; small calls copy little
    }
    core.run_collective_on(call_of::<T>(coll, algo, op, count), view)
}

pub(crate) fn check_op<T: Element>(op: ReduceOp) -> Result<()> {
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
    finish_avg(op, core.size, buf);
    Ok(())
}

pub(crate) fn broadcast<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    buf: &mut [T],
    root: usize,
) -> Result<()> {
    check_root(core.size, "broadcast", root)?;
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
    check_root(core.size, "reduce", root)?;
    let coll = Collective::Reduce { root };
    let algo = core.algo_for(coll, algo, bytes(buf))?;
    if core.rank == root {
        run(core, coll, algo, Some(op), buf.len(), buf)?;
        finish_avg(op, core.size, buf);
        Ok(())
    } else {
        // Non-roots keep their buffer: a leaf of the tree only sends it; a rank that reduces
        // partial results does so into a copy.
        let call = (coll, algo, Some(op));
        if run_direct(core, call, buf.len(), buf, 0, &mut [], 0)? {
            return Ok(());
        }
        core.with_work(buf.len(), |work| {
            copy_slice(&mut work[..], buf);
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
    let mine = check_all_gather(core.rank, core.size, local.len(), out.len())?;
    let coll = Collective::AllGather;
    // The largest chunk's bytes, the same on every rank (which must choose the same algorithm).
    let largest = chunk_span(out.len(), core.size, 0).len() * std::mem::size_of::<T>();
    let algo = core.algo_for(coll, algo, largest)?;
    let es = std::mem::size_of::<T>();
    let at = mine.start * es;
    let call = call_of::<T>(coll, algo, None, out.len());
    // This rank's chunk is sent from `local` and copied into `out` as it is: see `with_mirror`.
    let view =
        WorkView::whole(bytemuck::cast_slice_mut(out)).with_mirror(bytemuck::cast_slice(local), at);
    let ran = core.run_collective_on(call, view)?;
    debug_assert!(ran, "a whole buffer fits every plan");
    Ok(())
}

/// The all-gather of `buf`, whose chunk `rank` ([`chunk_span`]) already holds this rank's part:
/// [`all_gather_into`] without the copy of the part.
pub(crate) fn all_gather_in_place<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    buf: &mut [T],
) -> Result<()> {
    let coll = Collective::AllGather;
    let largest = chunk_span(buf.len(), core.size, 0).len() * std::mem::size_of::<T>();
    let algo = core.algo_for(coll, algo, largest)?;
    run(core, coll, algo, None, buf.len(), buf)
}

pub(crate) fn reduce_scatter_into<T: Element>(
    core: &Core,
    algo: Option<Algo>,
    input: &[T],
    out: &mut [T],
    op: ReduceOp,
) -> Result<()> {
    check_op::<T>(op)?;
    let mine = check_reduce_scatter(core.rank, core.size, input.len(), out.len())?;
    let coll = Collective::ReduceScatter;
    let algo = core.algo_for(coll, algo, bytes(input))?;
    // Where this rank only reduces into its own chunk (the ring of 2), it does so in `out`,
    // reading its own values from `input` as it goes (`WorkView::seeded_from_input`).
    let call = (coll, algo, Some(op));
    let view = direct_view(input, 0, out, mine.start).seeded_from_input();
    if run_view::<T>(core, call, input.len(), view)? {
        finish_avg(op, core.size, out);
        return Ok(());
    }
    core.with_work(input.len(), |work| {
        copy_slice(&mut work[..], input);
        run(core, coll, algo, Some(op), input.len(), work)?;
        copy_slice(&mut out[..], &work[mine]);
        Ok(())
    })?;
    finish_avg(op, core.size, out);
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
    check_root(core.size, "scatter", root)?;
    if core.rank == root {
        check_len("scatter on the root", "input", input.len(), count)?;
    }
    let mine = chunk_span(count, core.size, core.rank);
    check_len("scatter", "out", out.len(), mine.len())?;
    let coll = Collective::Scatter { root };
    let algo = core.algo_for(coll, algo, count * std::mem::size_of::<T>())?;
    // The root sends straight from `input`, a leaf receives straight into `out`; a rank that
    // passes chunks on (binomial) works in a whole buffer.
    let is_root = core.rank == root;
    if is_root {
        copy_slice(&mut out[..], &input[mine.clone()]);
    }
    let direct = if is_root {
        run_direct(core, (coll, algo, None), count, input, 0, &mut [], 0)?
    } else {
        run_direct(core, (coll, algo, None), count, &[], 0, out, mine.start)?
    };
    if direct {
        return Ok(());
    }
    core.with_work(count, |work| {
        if core.rank == root {
            copy_slice(&mut work[..], input);
        }
        run(core, coll, algo, None, count, work)?;
        copy_slice(&mut out[..], &work[mine]);
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
    check_root(core.size, "gather", root)?;
    let mine = chunk_span(count, core.size, core.rank);
    check_len("gather", "local", local.len(), mine.len())?;
    let coll = Collective::Gather { root };
    let algo = core.algo_for(coll, algo, count * std::mem::size_of::<T>())?;
    if core.rank == root {
        check_len("gather on the root", "out", out.len(), count)?;
        copy_slice(&mut out[mine], local);
        run(core, coll, algo, None, count, out)
    } else {
        let call = (coll, algo, None);
        if run_direct(core, call, count, local, mine.start, &mut [], count)? {
            return Ok(());
        }
        core.with_work(count, |work| {
            copy_slice(&mut work[mine], local);
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
    let own = own_block - n..own_block - n + mine.len();
    copy_slice(&mut out[own], &input[mine.clone()]);
    if run_direct(core, (coll, algo, None), n, input, 0, out, n)? {
        return Ok(());
    }
    core.with_work(layout.buf_len, |work| {
        copy_slice(&mut work[..n], input);
        copy_slice(&mut work[own_block..own_block + mine.len()], &input[mine]);
        run(core, coll, algo, None, n, work)?;
        copy_slice(&mut out[..], &work[layout.output]);
        Ok(())
    })
}

pub(crate) fn barrier(core: &Core, algo: Option<Algo>) -> Result<()> {
    let coll = Collective::Barrier;
    let algo = core.algo_for(coll, algo, 0)?;
    run::<u8>(core, coll, algo, None, 0, &mut [])
}

pub(crate) fn send<T: Element>(core: &Core, buf: &[T], dst: usize) -> Result<()> {
    let view = WorkView::split(bytemuck::cast_slice(buf), 0, &mut [], 0);
    core.run_p2p(dst, true, T::DTYPE, buf.len(), view)
}

pub(crate) fn recv<T: Element>(core: &Core, buf: &mut [T], src: usize) -> Result<()> {
    let count = buf.len();
    core.run_p2p(
        src,
        false,
        T::DTYPE,
        count,
        WorkView::whole(bytemuck::cast_slice_mut(buf)),
    )
}
