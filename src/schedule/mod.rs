//! Schedules: pure functions from (collective, algorithm, rank, world size, count) to the steps a
//! rank takes. No I/O, no clocks. Hierarchical schedules ([`build_hier`]) also take which ranks
//! share a host ([`Hosts`]). The executor runs them over real links; `simulate` (feature
//! `testing`) runs all ranks of one in memory, which is how they are tested against the
//! sequential oracle.
//!
//! # The model
//!
//! Every rank owns one *work buffer* of [`Schedule::buf_len`] elements laid out as
//! [`Collective::layout`] says. A schedule is a list of [`Step`]s run in order; a step ends when all
//! of its sends and receives have completed.
//!
//! - Messages between an ordered pair of ranks are matched in order: the k-th [`Send`] from `a` to
//!   `b` in the whole schedule is the k-th [`Recv`] from `a` at `b`. Their spans have equal lengths
//!   (their offsets may differ).
//! - A plain send carries the values its span had at the *start* of the step. A `forward` send
//!   carries the values written by this step's `Copy` receive(s) that cover its span (so a rank can
//!   pass data on while it is still arriving: pipelined broadcast); such a span lies inside the
//!   union of the step's `Copy` receive spans.
//! - A `Copy` receive overwrites its span; a `Reduce` receive sets `dst = op(dst, incoming)`.
//!   Within one step, receive spans are pairwise disjoint, and `Copy` receive spans do not overlap
//!   plain send spans (a `Reduce` span may overlap a plain send span: the executor sends the old
//!   values first).
//! - No rank sends to or receives from itself; local copies are done by the caller.
//! - Every transfer is made even when its span is empty, so ranks that disagree about the count
//!   still exchange headers and find out.
//! - A schedule ends with a step of empty *confirmations* where a rank would otherwise not know
//!   that a peer it sent to made the same call ([`build`] adds it; see the `confirm` module).

mod algo;
mod algorithms;
mod chunks;
mod confirm;
pub mod cost;
mod hier;
mod hosts;
#[cfg(any(test, feature = "testing"))]
pub mod simulate;

pub use algo::{Algo, Collective, Layout};
pub use chunks::chunk_span;
pub use hier::{build_hier, HierAlgos};
pub use hosts::Hosts;

use std::ops::Range;

/// A range of element indices in the work buffer.
pub type Span = Range<usize>;

/// What a receive does with the incoming elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvMode {
    /// Overwrite the span.
    Copy,
    /// Combine into the span with the collective's reduction op.
    Reduce,
}

/// Send the elements of `span` to rank `peer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    /// The destination rank.
    pub peer: usize,
    /// Which elements of the work buffer.
    pub span: Span,
    /// Send the values this step's `Copy` receives write, as they arrive.
    pub forward: bool,
}

/// Receive a message from rank `peer` into `span`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recv {
    /// The source rank.
    pub peer: usize,
    /// Which elements of the work buffer.
    pub span: Span,
    /// Overwrite or reduce.
    pub mode: RecvMode,
}

impl Send {
    /// A plain send of `span` to `peer` (the values at the start of the step).
    pub fn plain(peer: usize, span: Span) -> Send {
        Send {
            peer,
            span,
            forward: false,
        }
    }

    /// A send of `span` to `peer` that passes on what this step's `Copy` receives write.
    pub fn forward(peer: usize, span: Span) -> Send {
        Send {
            peer,
            span,
            forward: true,
        }
    }
}

impl Recv {
    /// A receive from `peer` that overwrites `span`.
    pub fn copy(peer: usize, span: Span) -> Recv {
        Recv {
            peer,
            span,
            mode: RecvMode::Copy,
        }
    }

    /// A receive from `peer` that reduces into `span`.
    pub fn reduce(peer: usize, span: Span) -> Recv {
        Recv {
            peer,
            span,
            mode: RecvMode::Reduce,
        }
    }
}

/// One round: its sends and receives run concurrently.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// Messages this rank sends in the round.
    pub sends: Vec<Send>,
    /// Messages this rank receives in the round.
    pub recvs: Vec<Recv>,
}

/// Everything one rank does for one collective call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Length of the work buffer, in elements.
    pub buf_len: usize,
    /// The rounds, in order.
    pub steps: Vec<Step>,
}

impl Schedule {
    /// One message of `count` elements to (`sending`) or from `peer`: a send or a receive.
    pub fn point_to_point(peer: usize, sending: bool, count: usize) -> Schedule {
        let mut schedule = Schedule::default();
        schedule.set_point_to_point(peer, sending, count);
        schedule
    }

    /// Makes this schedule [`Schedule::point_to_point`]'s, reusing its memory (so a group that
    /// keeps one allocates nothing per send or receive).
    pub fn set_point_to_point(&mut self, peer: usize, sending: bool, count: usize) {
        self.buf_len = count;
        self.steps.truncate(1);
        if self.steps.is_empty() {
            self.steps.push(Step::default());
        }
        let step = &mut self.steps[0];
        step.sends.clear();
        step.recvs.clear();
        if sending {
            step.sends.push(Send::plain(peer, 0..count));
        } else {
            step.recvs.push(Recv::copy(peer, 0..count));
        }
    }
}

/// The schedule of `rank` (of `size`) for `coll` over `count` elements with `algo`.
///
/// `count` means what [`Collective::layout`] says for each collective. Fails with a message naming
/// the algorithms that do apply when `algo` does not implement `coll`.
pub fn build(
    coll: Collective,
    algo: Algo,
    rank: usize,
    size: usize,
    count: usize,
) -> crate::Result<Schedule> {
    algo::build(coll, algo, rank, size, count)?;
    if coll.root().is_none() {
        // Data flows every way in an unrooted collective, so the analysis would add nothing
        // (`tests/it/sim/schedule_oracle.rs` checks that against [`build_analysed`]) and it costs every
        // rank O(size²) work: a minute per call at 1,024 ranks in a debug build.
        return Ok(algorithms::build(coll, algo, rank, size, count));
    }
    build_analysed(coll, algo, rank, size, count)
}

/// [`build`], always running the confirmation analysis (the `confirm` module), even where `build` knows
/// it adds nothing (unrooted collectives): what shows that it does add nothing.
pub fn build_analysed(
    coll: Collective,
    algo: Algo,
    rank: usize,
    size: usize,
    count: usize,
) -> crate::Result<Schedule> {
    algo::build(coll, algo, rank, size, count)?;
    Ok(confirmed(rank, size, |r| {
        algorithms::build(coll, algo, r, size, count)
    }))
}

/// The two-level all-reduce of `rank` over `count` elements for many ranks on one host, grouped
/// by cache domain (`domains`: which ranks share an L3 slice; every domain the same size): a
/// reduce-scatter inside each domain, an all-reduce of each chunk across domains, an
/// all-gather inside each domain (see `docs/many-cores.md`). The executor runs it for
/// [`Algo::TwoLevel`] with the group's hosts as domains; the cost model ([`cost`]) times it.
pub fn build_domains(domains: &Hosts, rank: usize, count: usize) -> crate::Result<Schedule> {
    algo::check_ranks(Collective::AllReduce, rank, domains.size())?;
    if !algorithms::regular_domains(domains) {
        return Err(crate::Error::config(
            "the two-level all-reduce needs every cache domain to hold the same number of ranks",
        ));
    }
    Ok(algorithms::build_domains(domains, rank, count))
}

/// `rank`'s schedule, ending with the confirmations its call needs ([`confirm`]): `build_one`
/// gives each rank's schedule, so that this rank can tell what its peers will learn.
fn confirmed(rank: usize, size: usize, build_one: impl Fn(usize) -> Schedule) -> Schedule {
    confirm::confirmed(rank, (0..size).map(build_one).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_point_to_point_schedule_is_the_fresh_one() {
        let mut kept = build(Collective::AllReduce, Algo::Ring, 0, 3, 9).expect("a ring");
        for (peer, sending, count) in [(1, true, 5), (2, false, 7), (1, true, 0)] {
            kept.set_point_to_point(peer, sending, count);
            assert_eq!(kept, Schedule::point_to_point(peer, sending, count));
        }
        assert_eq!(
            Schedule::point_to_point(2, false, 3).steps[0].recvs[0].span,
            0..3
        );
    }
}
