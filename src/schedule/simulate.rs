//! Runs every rank's schedule together in memory: the in-tree fake of the transport seam, and the
//! checker that tests hold the schedules to.
//!
//! The run is *rendezvous*, stricter than any buffered transport: the send of rank `a`'s step `i`
//! matches its receive on rank `b` only while `a` is in step `i` and `b` is in the step holding
//! that receive, so a schedule that passes here cannot depend on buffering to make progress.
//! Messages from `a` to `b` match in order; a step ends when all of its sends and receives have
//! matched. A plain send carries the sender's values at the start of its step; a `forward` send
//! becomes available once the sender's `Copy` receives that overlap its span have matched (an
//! empty one waits for all of its step's `Copy` receives), and carries what they wrote.
//!
//! Before running, every schedule is checked against the rules of the
//! [model](crate::schedule#the-model): peers in range and not the rank itself, spans inside the
//! buffer, receive spans of a step disjoint, `Copy` receives clear of plain sends, forward sends
//! covered by `Copy` receives, and every message paired with one of equal length.
//!
//! [`simulate`] works on whole work buffers; [`run_collective`] works at the level of the user's
//! inputs and outputs, so its results compare directly with [`crate::oracle`].

mod check;
mod engine;
mod error;

pub use check::check;
pub use engine::run_schedules;
pub use error::SimError;

use super::{
    build, build_domains, build_hier, chunk_span, Algo, Collective, HierAlgos, Hosts, Schedule,
};
use crate::dtype::Element;
use crate::reduce::ReduceOp;

/// The filler for work-buffer elements that are neither input nor written by the schedule, so
/// that an algorithm that fails to deliver an output shows up as a wrong value.
pub fn sentinel<T: Element>() -> T {
    T::from_i64(-123_456_789)
}

/// Builds the schedule of every rank of `size` for `coll` with `algo` over `count` elements and
/// runs them on `buffers` (one work buffer per rank, laid out as [`Collective::layout`] says),
/// returning the buffers afterwards. Reductions use [`Element::combine`] (so `Avg` sums; the
/// division is the caller's).
pub fn simulate<T: Element>(
    coll: Collective,
    algo: Algo,
    size: usize,
    count: usize,
    op: ReduceOp,
    buffers: Vec<Vec<T>>,
) -> Result<Vec<Vec<T>>, SimError> {
    if size == 0 {
        return Err(SimError::EmptyWorld);
    }
    let schedules = (0..size)
        .map(|rank| build(coll, algo, rank, size, count).map_err(SimError::Build))
        .collect::<Result<Vec<_>, _>>()?;
    run_schedules(&schedules, op, buffers)
}

/// Runs one collective the way a user sees it: `inputs[r]` is what rank `r` passes (the
/// [`Collective::layout`] input span's worth: the whole buffer, a chunk, or nothing), and the
/// result is what each rank gets back (its layout output span: the whole buffer, a chunk, or
/// nothing). The work buffers are filled with [`sentinel`] outside the inputs, the all-to-all
/// own block is copied locally as the caller must, and `Avg` results are divided by the world
/// size, so the outputs compare directly with [`crate::oracle`].
pub fn run_collective<T: Element>(
    coll: Collective,
    algo: Algo,
    count: usize,
    op: ReduceOp,
    inputs: &[Vec<T>],
) -> Result<Vec<Vec<T>>, SimError> {
    let size = inputs.len();
    run_user_level(coll, count, op, inputs, |rank| {
        build(coll, algo, rank, size, count)
    })
}

/// [`run_collective`] with the hierarchical schedules of [`build_hier`] on `hosts` (whose size
/// must be the number of inputs).
pub fn run_hier_collective<T: Element>(
    coll: Collective,
    hosts: &Hosts,
    algos: HierAlgos,
    count: usize,
    op: ReduceOp,
    inputs: &[Vec<T>],
) -> Result<Vec<Vec<T>>, SimError> {
    one_input_a_rank(hosts, inputs, "hosts")?;
    run_user_level(coll, count, op, inputs, |rank| {
        build_hier(coll, hosts, rank, count, algos)
    })
}

/// [`run_collective`] for the two-level all-reduce of [`build_domains`] on `domains` (whose
/// size must be the number of inputs).
pub fn run_domains_all_reduce<T: Element>(
    domains: &Hosts,
    count: usize,
    op: ReduceOp,
    inputs: &[Vec<T>],
) -> Result<Vec<Vec<T>>, SimError> {
    one_input_a_rank(domains, inputs, "domains")?;
    run_user_level(Collective::AllReduce, count, op, inputs, |rank| {
        build_domains(domains, rank, count)
    })
}

/// Refuses `inputs` that are not one per rank of `levels` (`what`: "hosts" or "domains").
fn one_input_a_rank<T>(levels: &Hosts, inputs: &[Vec<T>], what: &str) -> Result<(), SimError> {
    if levels.size() != inputs.len() {
        return Err(SimError::Build(crate::Error::invalid(format!(
            "{} inputs for {what} of {} ranks",
            inputs.len(),
            levels.size()
        ))));
    }
    Ok(())
}

/// Lays out `inputs` in work buffers, runs the schedules `schedule(rank)` gives, and returns each
/// rank's output span (divided for `Avg`).
fn run_user_level<T: Element>(
    coll: Collective,
    count: usize,
    op: ReduceOp,
    inputs: &[Vec<T>],
    schedule: impl Fn(usize) -> crate::Result<Schedule>,
) -> Result<Vec<Vec<T>>, SimError> {
    let size = inputs.len();
    if size == 0 {
        return Err(SimError::EmptyWorld);
    }
    let layouts: Vec<_> = (0..size).map(|r| coll.layout(r, size, count)).collect();
    let mut buffers = Vec::with_capacity(size);
    for (rank, (layout, input)) in layouts.iter().zip(inputs).enumerate() {
        if input.len() != layout.input.len() {
            return Err(SimError::BufferLen {
                rank,
                expected: layout.input.len(),
                got: input.len(),
            });
        }
        let mut buf = vec![sentinel::<T>(); layout.buf_len];
        buf[layout.input.clone()].copy_from_slice(input);
        if coll == Collective::AllToAll {
            let mine = chunk_span(count, size, rank);
            let at = count + rank * mine.len();
            buf.copy_within(mine, at);
        }
        buffers.push(buf);
    }
    let schedules = (0..size)
        .map(|rank| schedule(rank).map_err(SimError::Build))
        .collect::<Result<Vec<_>, _>>()?;
    let buffers = run_schedules(&schedules, op, buffers)?;
    let divide = coll.reduces() && op == ReduceOp::Avg;
    Ok(buffers
        .into_iter()
        .zip(&layouts)
        .map(|(buf, layout)| {
            let out = &buf[layout.output.clone()];
            if divide {
                out.iter().map(|x| x.div_count(size)).collect()
            } else {
                out.to_vec()
            }
        })
        .collect())
}
