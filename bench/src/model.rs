//! The plain data every part of psybench shares: what to sweep ([`Sweep`]), one measured row
//! ([`Record`]), a run's metadata ([`RunMeta`]) and a whole report ([`Report`]). One record type
//! feeds every output format.

use psyne::{Algo, DType, ReduceOp};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A benchmarked operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum BenchColl {
    /// all-reduce
    AllReduce,
    /// broadcast
    Broadcast,
    /// reduce
    Reduce,
    /// all-gather
    AllGather,
    /// reduce-scatter
    ReduceScatter,
    /// all-to-all
    AllToAll,
    /// gather
    Gather,
    /// scatter
    Scatter,
    /// barrier
    Barrier,
    /// a ring shift: every rank sends to the next and receives from the previous (nccl-tests sendrecv)
    SendRecv,
}

impl BenchColl {
    /// Every operation, in the order `all` runs them.
    pub const ALL: [BenchColl; 10] = [
        BenchColl::AllReduce,
        BenchColl::Broadcast,
        BenchColl::Reduce,
        BenchColl::AllGather,
        BenchColl::ReduceScatter,
        BenchColl::AllToAll,
        BenchColl::Gather,
        BenchColl::Scatter,
        BenchColl::Barrier,
        BenchColl::SendRecv,
    ];

    /// The subcommand name (`allreduce`, `sendrecv`, ...).
    pub fn name(self) -> &'static str {
        match self {
            BenchColl::AllReduce => "allreduce",
            BenchColl::Broadcast => "broadcast",
            BenchColl::Reduce => "reduce",
            BenchColl::AllGather => "allgather",
            BenchColl::ReduceScatter => "reducescatter",
            BenchColl::AllToAll => "alltoall",
            BenchColl::Gather => "gather",
            BenchColl::Scatter => "scatter",
            BenchColl::Barrier => "barrier",
            BenchColl::SendRecv => "sendrecv",
        }
    }

    /// Parses a subcommand name.
    pub fn parse(name: &str) -> Option<BenchColl> {
        BenchColl::ALL.into_iter().find(|c| c.name() == name)
    }

    /// True for the operations that take a reduction op.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            BenchColl::AllReduce | BenchColl::Reduce | BenchColl::ReduceScatter
        )
    }
}

/// Which implementation of the collectives runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// psyne's own engine.
    Native,
    /// MPI through the `mpi` crate (feature `mpi`, run under `mpirun`).
    Mpi,
}

impl Backend {
    /// `native` or `mpi`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::Mpi => "mpi",
        }
    }
}

/// How timed iterations follow each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cadence {
    /// Back to back, one clock around all of them (what nccl-tests does).
    Stream,
    /// A barrier before each, each timed alone (what a step of a training loop sees).
    Isolated,
    /// Each call timed alone, then a barrier that is not timed (what the OSU micro-benchmarks
    /// do); a row's time is the mean over ranks, as OSU reports it, not the slowest rank's.
    Osu,
}

/// Everything one sweep needs, after flags and a config file are merged and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The operations, in order.
    pub collectives: Vec<BenchColl>,
    /// Message sizes in bytes (as nccl-tests defines "size" per collective), ascending.
    pub sizes: Vec<u64>,
    /// Element type.
    pub dtype: DType,
    /// Reduction op for the reducing collectives.
    pub op: ReduceOp,
    /// Root for the rooted collectives.
    pub root: usize,
    /// Algorithms to run: `None` is automatic choice.
    pub algos: Vec<Option<Algo>>,
    /// Transport name (`tcp`, `auto`).
    pub transport: String,
    /// Reduction orders of the native backend's reducing operations, alternated per size and
    /// round; empty: the group's own (`PSY_REDUCE_ORDER`).
    pub reduce_orders: Vec<psyne::ReduceOrder>,
    /// Timed iterations per size; `None` scales with size.
    pub iters: Option<u64>,
    /// Untimed warm-up iterations per size; `None` scales with size.
    pub warmup: Option<u64>,
    /// Times every size is measured, the backends alternating their order each round.
    pub rounds: u64,
    /// Operate in place where the collective has an in-place form.
    pub in_place: bool,
    /// All-reduce buffers from `Group::alloc_shared` with `all_reduce_shared` (native only).
    pub shared_buffers: bool,
    /// Back to back or barrier-separated.
    pub cadence: Cadence,
    /// Check every element of the result against the oracle.
    pub check: bool,
    /// Backends, interleaved per size when several.
    pub backends: Vec<Backend>,
    /// Rewrite this CSV after every size.
    pub csv: Option<PathBuf>,
    /// Rewrite this JSON after every size.
    pub json: Option<PathBuf>,
    /// Draw this PNG at the end.
    pub plot: Option<PathBuf>,
    /// Reference bandwidth in GB/s for "% of peak".
    pub peak_gbps: Option<f64>,
}

/// One measured size of one operation on one backend with one algorithm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Operation name (`allreduce`, ...).
    pub collective: String,
    /// `native` or `mpi`.
    pub backend: String,
    /// Algorithm that ran (for auto: the one chosen, e.g. `ring`), or `-` where not applicable.
    pub algo: String,
    /// Transport (`tcp`, or what MPI was told to use).
    pub transport: String,
    /// Element type name.
    pub dtype: String,
    /// Reduction op name, or `-`.
    pub op: String,
    /// Root rank, for rooted operations.
    pub root: Option<usize>,
    /// World size.
    pub ranks: usize,
    /// Size in bytes, as nccl-tests defines it for this operation.
    pub bytes: u64,
    /// Elements.
    pub count: u64,
    /// Timed iterations.
    pub iters: u64,
    /// Warm-up iterations.
    pub warmup: u64,
    /// In place or not.
    pub in_place: bool,
    /// `stream` or `isolated`.
    pub cadence: String,
    /// Time per operation in microseconds, fastest rank.
    pub time_us_min: f64,
    /// Time per operation in microseconds, mean over ranks.
    pub time_us_avg: f64,
    /// Time per operation in microseconds, slowest rank (what a user waits for).
    pub time_us_max: f64,
    /// Which time over ranks the row reports and its bandwidths use: `max` (the slowest rank, as
    /// nccl-tests; cadences stream and isolated) or `avg` (the mean over ranks, as the OSU
    /// micro-benchmarks; cadence osu). Reports written before the field existed mean `max`.
    #[serde(default = "max_over_ranks")]
    pub time_over_ranks: String,
    /// bytes / the reported time ([`Record::time_us`]), in GB/s (1e9 B/s).
    pub algbw_gbps: f64,
    /// algbw × the collective's bus factor (nccl-tests), in GB/s.
    pub busbw_gbps: f64,
    /// Elements that differed from the oracle (None: not checked).
    pub wrong: Option<u64>,
}

fn max_over_ranks() -> String {
    "max".to_string()
}

impl Record {
    /// The time per operation this row reports, in microseconds: the slowest rank's, or the
    /// mean over ranks when [`Record::time_over_ranks`] says `avg`.
    pub fn time_us(&self) -> f64 {
        if self.time_over_ranks == "avg" {
            self.time_us_avg
        } else {
            self.time_us_max
        }
    }
}

/// What a run was, for the reader of its numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The command line.
    pub command: String,
    /// `git describe --always --dirty` of the source, if known.
    pub git_revision: Option<String>,
    /// Host name of every rank (deduplicated, in rank order).
    pub hosts: Vec<String>,
    /// Cores on rank 0's host.
    pub cores: usize,
    /// CPU model of rank 0's host.
    pub cpu_model: String,
    /// World size.
    pub world_size: usize,
    /// Transport asked for.
    pub transport: String,
    /// Algorithms asked for (`auto` or names).
    pub algos: Vec<String>,
    /// Backends that ran.
    pub backends: Vec<String>,
    /// psyne's version.
    pub psyne_version: String,
    /// Start of the run, RFC 3339 UTC.
    pub date: String,
    /// Load average (1 min) of rank 0's host at the start: how busy the machine was.
    pub load_average: Option<f64>,
    /// Reference bandwidth in GB/s, if given or measured.
    pub peak_gbps: Option<f64>,
    /// The psyne tuning file the automatic choices came from (`PSY_TUNING`), if any; reports
    /// written before the field existed had none.
    #[serde(default)]
    pub tuning_file: Option<String>,
    /// How many ranks could run on any core of their host (not bound to fewer by their
    /// launcher), when known: such ranks' small-message times vary from run to run.
    #[serde(default)]
    pub unbound_ranks: Option<usize>,
}

/// A latency-bandwidth fit of one curve: time ≈ alpha + bytes / beta.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// Operation name.
    pub collective: String,
    /// Backend name.
    pub backend: String,
    /// Algorithm name.
    pub algo: String,
    /// Latency in microseconds.
    pub alpha_us: f64,
    /// Bandwidth in GB/s (of the bytes as nccl-tests counts them).
    pub beta_gbps: f64,
    /// Best busbw of the curve as a percentage of the run's peak, if one is known.
    pub busbw_pct_of_peak: Option<f64>,
}

/// A whole run: metadata, every row, and the fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// What the run was.
    pub meta: RunMeta,
    /// Every measured row, in the order measured.
    pub records: Vec<Record>,
    /// One fit per (operation, backend, algorithm) curve.
    pub fits: Vec<Fit>,
}
