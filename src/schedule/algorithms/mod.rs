//! One file per algorithm family; [`build`] picks the right one.
//!
//! Every algorithm returns the steps of one rank. The *structure* of a schedule (its steps, peers,
//! modes and message counts) depends only on the collective, the rank and the world size, never on
//! `count`: ranks that disagree about the count still exchange the same messages and find out
//! from the headers. One exception: the all-reduce of two ranks runs in pieces whose number grows
//! with the count (`ring::pair_all_reduce`); its first step is the same for every count, so two
//! ranks that disagree meet there. With one rank there is nothing to exchange, so every schedule
//! is empty.

mod binomial;
mod dissemination;
mod domains;
mod fold;
mod hier;
mod linear;
mod pairwise;
mod pipeline;
mod rabenseifner;
mod recursive_doubling;
mod ring;

use super::{chunk_span, Algo, Collective, HierAlgos, Hosts, Recv, Schedule, Send, Span, Step};

/// The schedule of `rank` (of `size`) for `coll` over `count` elements with `algo`.
///
/// The caller has checked that `algo` is in [`Algo::for_collective`]`(coll)` and that the root
/// and rank are in range; an algorithm that does not implement `coll` falls back to the default
/// (the first one listed) rather than panicking.
pub(crate) fn build(
    coll: Collective,
    algo: Algo,
    rank: usize,
    size: usize,
    count: usize,
) -> Schedule {
    debug_assert!(Algo::for_collective(coll).contains(&algo));
    debug_assert!(rank < size);
    let buf_len = coll.layout(rank, size, count).buf_len;
    let steps = if size <= 1 {
        Vec::new()
    } else {
        steps(coll, algo, rank, size, count)
    };
    Schedule { buf_len, steps }
}

/// The hierarchical schedule of `rank` on `hosts` (checked by the caller, as for [`build`]).
pub(crate) fn build_hier(
    coll: Collective,
    hosts: &Hosts,
    rank: usize,
    count: usize,
    algos: HierAlgos,
) -> Schedule {
    let size = hosts.size();
    debug_assert!(rank < size);
    let buf_len = coll.layout(rank, size, count).buf_len;
    let steps = if size <= 1 {
        Vec::new()
    } else {
        hier::steps(coll, hosts, rank, count, algos)
    };
    Schedule { buf_len, steps }
}

/// The two-level all-reduce of `rank` on `domains` (regular; checked by the caller).
pub(crate) fn build_domains(domains: &Hosts, rank: usize, count: usize) -> Schedule {
    let size = domains.size();
    let buf_len = Collective::AllReduce.layout(rank, size, count).buf_len;
    let steps = if size <= 1 {
        Vec::new()
    } else {
        domains::all_reduce(domains, rank, count)
    };
    Schedule { buf_len, steps }
}

pub(crate) use domains::regular as regular_domains;

fn steps(coll: Collective, algo: Algo, rank: usize, size: usize, count: usize) -> Vec<Step> {
    if algo == Algo::TwoLevel && coll == Collective::AllReduce {
        // Without hosts: one level of all ranks, a ring reduce-scatter and all-gather.
        return domains::all_reduce(&Hosts::single(size), rank, count);
    }
    if algo == Algo::Hier {
        // Without hosts: all ranks on one, which still reduces to a leader and broadcasts back.
        let hosts = Hosts::single(size);
        return hier::steps(coll, &hosts, rank, count, HierAlgos::default_for(coll));
    }
    match coll {
        Collective::AllReduce => match algo {
            Algo::RecursiveDoubling => recursive_doubling::all_reduce(rank, size, count),
            Algo::Rabenseifner => rabenseifner::all_reduce(rank, size, count),
            Algo::Binomial => binomial::all_reduce(rank, size, count),
            _ => ring::all_reduce(rank, size, count),
        },
        Collective::Broadcast { root } => match algo {
            Algo::Pipeline => pipeline::broadcast(rank, size, count, root),
            _ => binomial::broadcast(rank, size, count, root),
        },
        Collective::Reduce { root } => binomial::reduce(rank, size, count, root),
        Collective::AllGather => ring::all_gather(rank, size, count),
        Collective::ReduceScatter => ring::reduce_scatter(rank, size, count),
        Collective::Scatter { root } => match algo {
            Algo::Linear => linear::scatter(rank, size, count, root),
            _ => binomial::scatter(rank, size, count, root),
        },
        Collective::Gather { root } => match algo {
            Algo::Linear => linear::gather(rank, size, count, root),
            _ => binomial::gather(rank, size, count, root),
        },
        Collective::AllToAll => match algo {
            Algo::Linear => linear::all_to_all(rank, size, count),
            _ => pairwise::all_to_all(rank, size, count),
        },
        Collective::Barrier => dissemination::barrier(rank, size),
    }
}

/// A plain send of `span` to `peer`.
fn send(peer: usize, span: Span) -> Send {
    Send::plain(peer, span)
}

/// A send of `span` to `peer` that passes on what this step's `Copy` receives write.
fn forward(peer: usize, span: Span) -> Send {
    Send::forward(peer, span)
}

/// A receive from `peer` that overwrites `span`.
fn copy(peer: usize, span: Span) -> Recv {
    Recv::copy(peer, span)
}

/// A receive from `peer` that reduces into `span`.
fn reduce(peer: usize, span: Span) -> Recv {
    Recv::reduce(peer, span)
}

/// A step of these sends and receives.
fn step(sends: Vec<Send>, recvs: Vec<Recv>) -> Step {
    Step { sends, recvs }
}

/// The elements of chunks `lo..hi` (`lo < hi <= parts`) of `count` split into `parts`.
fn chunks(count: usize, parts: usize, lo: usize, hi: usize) -> Span {
    debug_assert!(lo < hi && hi <= parts);
    chunk_span(count, parts, lo).start..chunk_span(count, parts, hi - 1).end
}

/// `(rank + offset) mod size` for a possibly negative offset.
fn wrap(rank: usize, offset: isize, size: usize) -> usize {
    // World sizes and ranks are far below isize::MAX.
    let size = size as isize;
    (rank as isize + offset).rem_euclid(size) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_join_adjacent_chunk_spans() {
        assert_eq!(chunks(10, 4, 0, 4), 0..10);
        assert_eq!(chunks(10, 4, 1, 3), 3..8);
        assert_eq!(chunks(2, 4, 2, 4), 2..2);
    }

    #[test]
    fn wrap_handles_negative_offsets() {
        assert_eq!(wrap(0, -1, 5), 4);
        assert_eq!(wrap(4, 1, 5), 0);
        assert_eq!(wrap(2, -7, 5), 0);
    }

    #[test]
    fn one_rank_has_nothing_to_do() {
        for coll in [
            Collective::AllReduce,
            Collective::Broadcast { root: 0 },
            Collective::Reduce { root: 0 },
            Collective::AllGather,
            Collective::ReduceScatter,
            Collective::Scatter { root: 0 },
            Collective::Gather { root: 0 },
            Collective::AllToAll,
            Collective::Barrier,
        ] {
            for &algo in Algo::for_collective(coll) {
                let s = build(coll, algo, 0, 1, 7);
                assert!(s.steps.is_empty(), "{coll} {algo}");
                assert_eq!(s.buf_len, coll.layout(0, 1, 7).buf_len);
            }
        }
    }
}
