//! Per-operation facts: what "size" means, the nccl-tests bus-bandwidth factor, the psyne
//! collective behind each benchmarked operation, and which algorithms implement it.
//!
//! Size and factors follow nccl-tests `doc/PERFORMANCE.md`, so busbw is comparable number for
//! number: busbw = algbw × factor, algbw = size / time.

use psyne::{Algo, Collective};

use crate::model::BenchColl;

/// The bus-bandwidth factor of `coll` on `ranks` ranks (nccl-tests):
///
/// | operation | factor |
/// |---|---|
/// | allreduce | 2(n-1)/n |
/// | allgather, reducescatter, alltoall, gather, scatter | (n-1)/n |
/// | broadcast, reduce, sendrecv | 1 |
/// | barrier | 0 (moves no data) |
///
/// With no ranks the factor is 0.
pub fn bus_factor(coll: BenchColl, ranks: usize) -> f64 {
    if ranks == 0 {
        return 0.0;
    }
    let n = ranks as f64;
    match coll {
        BenchColl::AllReduce => 2.0 * (n - 1.0) / n,
        BenchColl::AllGather
        | BenchColl::ReduceScatter
        | BenchColl::AllToAll
        | BenchColl::Gather
        | BenchColl::Scatter => (n - 1.0) / n,
        BenchColl::Broadcast | BenchColl::Reduce | BenchColl::SendRecv => 1.0,
        BenchColl::Barrier => 0.0,
    }
}

/// What the size of `coll` counts, in words (for headers and docs).
pub fn size_meaning(coll: BenchColl) -> &'static str {
    match coll {
        BenchColl::AllReduce | BenchColl::Broadcast | BenchColl::Reduce => "each rank's buffer",
        BenchColl::AllGather | BenchColl::Gather => "the gathered total (all ranks' chunks)",
        BenchColl::ReduceScatter | BenchColl::Scatter => "the total before scattering",
        BenchColl::AllToAll => "each rank's send buffer (all its chunks)",
        BenchColl::SendRecv => "the message",
        BenchColl::Barrier => "nothing (no data moves)",
    }
}

/// True for the operations with a root (`--root` applies).
pub fn rooted(coll: BenchColl) -> bool {
    matches!(
        coll,
        BenchColl::Broadcast | BenchColl::Reduce | BenchColl::Gather | BenchColl::Scatter
    )
}

/// The psyne collective that `coll` benchmarks, with `root` where it has one; `None` for
/// send/recv, which is point to point.
pub fn to_collective(coll: BenchColl, root: usize) -> Option<Collective> {
    Some(match coll {
        BenchColl::AllReduce => Collective::AllReduce,
        BenchColl::Broadcast => Collective::Broadcast { root },
        BenchColl::Reduce => Collective::Reduce { root },
        BenchColl::AllGather => Collective::AllGather,
        BenchColl::ReduceScatter => Collective::ReduceScatter,
        BenchColl::AllToAll => Collective::AllToAll,
        BenchColl::Gather => Collective::Gather { root },
        BenchColl::Scatter => Collective::Scatter { root },
        BenchColl::Barrier => Collective::Barrier,
        BenchColl::SendRecv => return None,
    })
}

/// The algorithms that implement `coll` (empty for send/recv).
pub fn algos_for(coll: BenchColl) -> &'static [Algo] {
    match to_collective(coll, 0) {
        Some(c) => Algo::for_collective(c),
        None => &[],
    }
}

/// True when `algo` can run `coll`; automatic choice (`None`) always can.
pub fn algo_applies(coll: BenchColl, algo: Option<Algo>) -> bool {
    match algo {
        None => true,
        Some(a) => algos_for(coll).contains(&a),
    }
}

/// The algorithms of a sweep that run for `coll`: those of `requested` that implement it, or
/// automatic choice alone when none does (so `all --algo ring` still measures broadcast, with
/// psyne's own choice). Send/recv always runs once, with `None`.
pub fn algos_to_run(coll: BenchColl, requested: &[Option<Algo>]) -> Vec<Option<Algo>> {
    let mut out: Vec<Option<Algo>> = requested
        .iter()
        .copied()
        .filter(|a| algo_applies(coll, *a))
        .collect();
    out.dedup();
    if out.is_empty() || coll == BenchColl::SendRecv {
        out = vec![None];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_runs_allreduce_not_broadcast() {
        let req = [Some(Algo::Ring)];
        assert_eq!(
            algos_to_run(BenchColl::AllReduce, &req),
            vec![Some(Algo::Ring)]
        );
        assert_eq!(algos_to_run(BenchColl::Broadcast, &req), vec![None]);
        assert_eq!(algos_to_run(BenchColl::SendRecv, &req), vec![None]);
    }
}
