//! The collectives, their buffer layouts, the algorithms, and which algorithm implements what.

use super::{chunk_span, Schedule, Span};
use crate::error::{Error, Result};

/// A collective operation, with its root where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank ends with the reduction of all ranks' buffers.
    AllReduce,
    /// The root's buffer is copied to every rank.
    Broadcast {
        /// The rank whose buffer is sent.
        root: usize,
    },
    /// The root ends with the reduction of all ranks' buffers.
    Reduce {
        /// The rank that receives the result.
        root: usize,
    },
    /// Each rank contributes its chunk of `count`; every rank ends with all of them.
    AllGather,
    /// Each rank ends with its chunk of the reduction of all ranks' buffers.
    ReduceScatter,
    /// The root's buffer is split into chunks; rank `i` gets chunk `i`.
    Scatter {
        /// The rank whose buffer is split.
        root: usize,
    },
    /// Each rank contributes its chunk; the root ends with all of them.
    Gather {
        /// The rank that receives the chunks.
        root: usize,
    },
    /// Chunk `j` of rank `i`'s buffer goes to rank `j`, as block `i` of its output.
    AllToAll,
    /// No rank leaves until every rank has entered.
    Barrier,
}

/// Where a rank's input and output live in its work buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Length of the work buffer, in elements.
    pub buf_len: usize,
    /// Where the caller puts this rank's input (empty when it has none).
    pub input: Span,
    /// Where the caller finds this rank's result afterwards (empty when it has none).
    pub output: Span,
}

impl Collective {
    /// A short name used in messages and on the wire (`all_reduce`, `broadcast`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::Broadcast { .. } => "broadcast",
            Collective::Reduce { .. } => "reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Scatter { .. } => "scatter",
            Collective::Gather { .. } => "gather",
            Collective::AllToAll => "all_to_all",
            Collective::Barrier => "barrier",
        }
    }

    /// The root, for rooted collectives.
    pub fn root(self) -> Option<usize> {
        match self {
            Collective::Broadcast { root }
            | Collective::Reduce { root }
            | Collective::Scatter { root }
            | Collective::Gather { root } => Some(root),
            _ => None,
        }
    }

    /// True when the collective combines values with a reduction op.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::Reduce { .. } | Collective::ReduceScatter
        )
    }

    /// The work-buffer layout of `rank` of `size` for `count` elements.
    ///
    /// `count` is the length of every rank's buffer for all-reduce, broadcast and reduce; the
    /// total length (the sum of all chunks, split by [`chunk_span`]) for all-gather,
    /// reduce-scatter, scatter and gather; and each rank's input length for all-to-all, whose
    /// output on rank `r` is `size` blocks of `chunk_span(count, size, r).len()` elements placed
    /// after the input. Barrier has no buffer.
    pub fn layout(self, rank: usize, size: usize, count: usize) -> Layout {
        let all = 0..count;
        let none = 0..0;
        let mine = chunk_span(count, size, rank);
        let (buf_len, input, output) = match self {
            Collective::AllReduce => (count, all.clone(), all),
            Collective::Broadcast { root } => {
                (count, if rank == root { all.clone() } else { none }, all)
            }
            Collective::Reduce { root } => {
                (count, all.clone(), if rank == root { all } else { none })
            }
            Collective::AllGather => (count, mine, all),
            Collective::ReduceScatter => (count, all, mine),
            Collective::Scatter { root } => (count, if rank == root { all } else { none }, mine),
            Collective::Gather { root } => (count, mine, if rank == root { all } else { none }),
            Collective::AllToAll => {
                let block = mine.len();
                (count + size * block, all, count..count + size * block)
            }
            Collective::Barrier => (0, none.clone(), none),
        };
        Layout {
            buf_len,
            input,
            output,
        }
    }
}

impl std::fmt::Display for Collective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.root() {
            Some(root) => write!(f, "{}(root {root})", self.name()),
            None => f.write_str(self.name()),
        }
    }
}

/// An algorithm, selectable by name (`PSY_ALGO=allreduce:ring`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Algo {
    /// Ring: all-reduce as reduce-scatter then all-gather (bandwidth-optimal); ring all-gather and
    /// reduce-scatter.
    Ring = 1,
    /// Recursive doubling: log2(p) full-buffer exchanges (latency-optimal for small messages).
    RecursiveDoubling,
    /// Rabenseifner: reduce-scatter by recursive halving, then all-gather by recursive doubling.
    Rabenseifner,
    /// Binomial tree: broadcast, reduce, scatter, gather; all-reduce as reduce then broadcast.
    Binomial,
    /// A chain from the root, forwarding data while it arrives (pipelined broadcast).
    Pipeline,
    /// Pairwise exchange: step k sends to rank+k and receives from rank-k.
    Pairwise,
    /// Every rank talks to every rank it exchanges with directly, in one step: the root of a
    /// scatter or gather to each other rank, each rank of an all-to-all to every peer.
    Linear,
    /// Dissemination barrier: log2(p) rounds of empty messages.
    Dissemination,
    /// Any small collective of a group that lives on one host: every rank writes its part to its
    /// slot of a shared node board and takes (or reduces) what it needs from everyone's slots
    /// itself (no schedule; see `executor::flat`). Chosen automatically; it implements no
    /// schedule.
    Flat,
    /// Hierarchical (host-aware) all-reduce, broadcast and all-gather for groups spread over
    /// several hosts with several ranks on some: the ranks of each host combine their data over
    /// shared memory, one leader per host runs a flat algorithm across hosts, and each leader
    /// hands the result back to its host (see [`crate::schedule::build_hier`]). A group on one
    /// host, or with one rank per host, runs the flat algorithm instead.
    Hier,
    /// The two-level all-reduce (see [`crate::schedule::build_domains`]): a ring reduce-scatter
    /// among the ranks of each host, a ring all-reduce of each chunk among the ranks at the same
    /// place on every host (all at once), a ring all-gather inside each host; every rank carries
    /// cross-host traffic. Designed for the cache domains of a many-core host
    /// (`docs/many-cores.md`); until psyne knows those, its levels are the group's hosts. Hosts
    /// of unequal sizes run the flat ring instead. Only when asked for (`PSY_ALGO`, a tuning
    /// file, `with_algo`).
    TwoLevel,
}

impl Algo {
    /// Every algorithm, in tag order.
    pub const ALL: [Algo; 11] = [
        Algo::Ring,
        Algo::RecursiveDoubling,
        Algo::Rabenseifner,
        Algo::Binomial,
        Algo::Pipeline,
        Algo::Pairwise,
        Algo::Linear,
        Algo::Dissemination,
        Algo::Flat,
        Algo::Hier,
        Algo::TwoLevel,
    ];

    /// The name used in `PSY_ALGO` and messages.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::RecursiveDoubling => "recursive_doubling",
            Algo::Rabenseifner => "rabenseifner",
            Algo::Binomial => "binomial",
            Algo::Pipeline => "pipeline",
            Algo::Pairwise => "pairwise",
            Algo::Linear => "linear",
            Algo::Dissemination => "dissemination",
            Algo::Flat => "flat",
            Algo::Hier => "hier",
            Algo::TwoLevel => "two_level",
        }
    }

    /// Parses a name (also `rd` for recursive doubling, `tree` for binomial and `hierarchical`
    /// for hier).
    pub fn parse(name: &str) -> Option<Algo> {
        match name {
            "rd" => Some(Algo::RecursiveDoubling),
            "tree" => Some(Algo::Binomial),
            "recursive_halving" | "rhd" => Some(Algo::Rabenseifner),
            "hierarchical" => Some(Algo::Hier),
            _ => Algo::ALL.into_iter().find(|a| a.name() == name),
        }
    }

    /// The algorithm with wire tag `tag`, if any.
    pub fn from_tag(tag: u8) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| *a as u8 == tag)
    }

    /// Refuses an algorithm that does not implement `coll`, naming those that do: the one error
    /// for that, whether the choice came from `PSY_ALGO`, [`crate::Group::with_algo`] or a plan.
    pub fn check_implements(self, coll: Collective) -> Result<()> {
        if Algo::for_collective(coll).contains(&self) {
            return Ok(());
        }
        let names: Vec<_> = Algo::for_collective(coll)
            .iter()
            .map(|a| a.name())
            .collect();
        Err(Error::invalid(format!(
            "algorithm `{self}` does not implement {}; choose one of: {}",
            coll.name(),
            names.join(", ")
        )))
    }

    /// The algorithms that implement `coll`, the first being a safe default.
    pub fn for_collective(coll: Collective) -> &'static [Algo] {
        use Algo::*;
        match coll {
            Collective::AllReduce => &[
                Ring,
                RecursiveDoubling,
                Rabenseifner,
                Binomial,
                Hier,
                TwoLevel,
            ],
            Collective::Broadcast { .. } => &[Binomial, Pipeline, Hier],
            Collective::Reduce { .. } => &[Binomial],
            Collective::AllGather => &[Ring, Hier],
            Collective::ReduceScatter => &[Ring],
            Collective::Scatter { .. } => &[Binomial, Linear],
            Collective::Gather { .. } => &[Binomial, Linear],
            // Every peer at once first, as Gloo, NCCL and MPICH's scattered all-to-all do: 8 ranks
            // on 2 cores took 0.50-0.91 of pairwise's time from 8 KiB to 16 MiB
            // (`results/alltoall-linear/`); on 2 ranks the two are the same single exchange.
            Collective::AllToAll => &[Linear, Pairwise],
            Collective::Barrier => &[Dissemination],
        }
    }
}

impl std::fmt::Display for Algo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Refuses a rank or root outside a world of `size`.
pub(super) fn check_ranks(coll: Collective, rank: usize, size: usize) -> Result<()> {
    if size == 0 || rank >= size {
        return Err(Error::invalid(format!(
            "rank {rank} is outside a world of {size}"
        )));
    }
    match coll.root() {
        Some(root) if root >= size => Err(Error::invalid(format!(
            "{} root {root} is out of range: the group has ranks 0..{size}",
            coll.name()
        ))),
        _ => Ok(()),
    }
}

pub(super) fn build(
    coll: Collective,
    algo: Algo,
    rank: usize,
    size: usize,
    count: usize,
) -> Result<Schedule> {
    check_ranks(coll, rank, size)?;
    algo.check_implements(coll)?;
    Ok(super::algorithms::build(coll, algo, rank, size, count))
}
