//! Serving MPI programs: the process-management interfaces MPI libraries speak to their launcher,
//! so that an Open MPI, MPICH or Intel MPI program started by psyrun forms one world of N ranks
//! instead of N worlds of one.
//!
//! | interface | spoken by | how a rank reaches it | module |
//! |---|---|---|---|
//! | PMI-1 ("simple", text lines) | MPICH, Intel MPI (default) | an inherited socket, `PMI_FD` | [`simple`] |
//! | PMI-2 (length-prefixed) | MPICH with `MPIR_CVAR_PMI_VERSION=2`, Intel MPI with `I_MPI_PMI=pmi2` | the same socket | [`simple`] |
//! | PMIx | Open MPI | `libpmix`'s server, loaded at run time | [`pmix`] |
//!
//! Each host runs one [`HostService`] for its own ranks (psyrun on one host, the agent on each of
//! several). What must be job-wide, the key-value space behind a PMI barrier or a PMIx fence, goes
//! through an [`Exchange`]: an all-gather of one blob per host, trivial on one host
//! ([`Alone`]) and through the job's store across hosts.
//!
//! A service tells the launcher what its ranks do through a [`Reporter`]: that a rank spoke to it
//! (so a rank that exits without ever doing so can be named: it ran as a world of one), that it
//! finalized, that it called abort (the job ends with that code, naming the rank).

pub mod pmix;
pub mod simple;

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

/// Which interface the ranks of a job are served (`--mpi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Interface {
    /// PMI-1 and PMI-2 on one inherited socket (`PMI_FD`).
    Simple,
    /// PMIx, through `libpmix.so.2`'s server.
    Pmix,
}

/// `--mpi`: which interface psyrun serves a job's MPI programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MpiChoice {
    /// By each program's MPI library, read from its ELF dependencies: PMIx for Open MPI,
    /// PMI-1/2 for MPICH and Intel MPI and for programs with no MPI library, both for an mpi4py
    /// program whose MPI is only known when it runs.
    #[default]
    Auto,
    /// PMIx (Open MPI).
    Pmix,
    /// PMI-1 on `PMI_FD` (PMI-2 on the same socket if the library asks).
    Pmi1,
    /// PMI-2 on `PMI_FD` (PMI-1 on the same socket if the library asks).
    Pmi2,
    /// Nothing: MPI programs run as worlds of one.
    None,
}

impl Interface {
    /// A short name (store keys, messages).
    pub fn tag(self) -> &'static str {
        match self {
            Interface::Simple => "pmi",
            Interface::Pmix => "pmix",
        }
    }
}

impl MpiChoice {
    /// Its number on the agents' wire.
    pub fn code(self) -> u8 {
        match self {
            MpiChoice::Auto => 0,
            MpiChoice::Pmix => 1,
            MpiChoice::Pmi1 => 2,
            MpiChoice::Pmi2 => 3,
            MpiChoice::None => 4,
        }
    }

    /// The choice numbered `code` (an unknown number: auto).
    pub fn from_code(code: u8) -> MpiChoice {
        match code {
            1 => MpiChoice::Pmix,
            2 => MpiChoice::Pmi1,
            3 => MpiChoice::Pmi2,
            4 => MpiChoice::None,
            _ => MpiChoice::Auto,
        }
    }
}

/// Where each rank of the job runs: what `PMI_process_mapping`, `PMIX_NODE_MAP`,
/// `PMIX_PROC_MAP` and the local ranks and sizes are made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobMap {
    /// The job's id: the PMI kvsname and the PMIx namespace are made from it.
    pub job_id: String,
    /// Ranks in the job.
    pub world_size: usize,
    /// Every host of the job, in node order (a host's index is its node id).
    pub hosts: Vec<HostRanks>,
    /// The program (application) number of each rank, `0..` in the order of psyrun's `:`
    /// separated programs (MPI's `MPI_APPNUM`, `PMIX_APPNUM`).
    pub appnum: Vec<usize>,
    /// A directory the job may use for its files (`PMIX_TMPDIR`, `PMIX_NSDIR`).
    pub tmpdir: PathBuf,
}

/// One host of a job and its ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRanks {
    /// The host's name as the ranks see it (`PMIX_HOSTNAME`, `PMIX_NODE_MAP`).
    pub name: String,
    /// Its ranks in local-rank order: `ranks[i]` has local rank `i`.
    pub ranks: Vec<usize>,
}

impl JobMap {
    /// The node (index into [`JobMap::hosts`]) and local rank of `rank`, if it is in the job.
    pub fn locate(&self, rank: usize) -> Option<(usize, usize)> {
        self.hosts.iter().enumerate().find_map(|(node, h)| {
            h.ranks
                .iter()
                .position(|&r| r == rank)
                .map(|local| (node, local))
        })
    }
}

/// The job-wide step behind a PMI barrier and a PMIx fence: every host contributes one blob (its
/// ranks' puts since the last round, or libpmix's collected data) and gets every host's back.
pub trait Exchange: Send + Sync {
    /// Contributes `blob` as host `node`'s part of round `round` (rounds count from 0, one per
    /// barrier or fence, the same on every host) and blocks until every host's part is there;
    /// returns them in node order. An error (a message naming the hosts missing) after the job's
    /// timeout, or when the job is ending.
    fn all_gather(&self, node: usize, round: u64, blob: Vec<u8>) -> Result<Vec<Vec<u8>>, String>;
}

/// The [`Exchange`] of a job on one host: its blob is everyone's.
#[derive(Debug, Default, Clone, Copy)]
pub struct Alone;

impl Exchange for Alone {
    fn all_gather(&self, _node: usize, _round: u64, blob: Vec<u8>) -> Result<Vec<Vec<u8>>, String> {
        Ok(vec![blob])
    }
}

/// What a service reports about one of its ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The rank spoke to the service for the first time (its MPI library initialised).
    Spoke {
        /// The rank.
        rank: usize,
    },
    /// The rank finalized (`MPI_Finalize`).
    Finalized {
        /// The rank.
        rank: usize,
    },
    /// The rank called abort (`MPI_Abort`): the job ends with `code`.
    Abort {
        /// The rank.
        rank: usize,
        /// The exit code it asked for.
        code: i32,
        /// Its message, if it gave one.
        message: String,
    },
}

/// Where a service sends its [`Report`]s; called from the service's threads.
pub type Reporter = Arc<dyn Fn(Report) + Send + Sync>;

/// A [`Reporter`] that hands each abort (rank, code, message) to `abort` and drops the other
/// reports (a [`serve::HostServing`] records who spoke itself).
pub fn on_abort(abort: impl Fn(usize, i32, String) + Send + Sync + 'static) -> Reporter {
    Arc::new(move |r| {
        if let Report::Abort {
            rank,
            code,
            message,
        } = r
        {
            abort(rank, code, message);
        }
    })
}

/// What one rank needs to reach its host's service, handed to it when it starts.
#[derive(Debug, Default)]
pub struct RankAccess {
    /// Variables to set in the rank (for example `PMI_FD`, `PMI_RANK`, `PMI_SIZE`, or what
    /// `PMIx_server_setup_fork` gives).
    pub env: Vec<(OsString, OsString)>,
    /// A descriptor the rank inherits under the same number (`PMI_FD` names it); psyrun closes its
    /// own copy once the rank has started.
    pub inherit: Option<OwnedFd>,
}

/// The service of one host: started before its ranks, asked for each rank's [`RankAccess`] just
/// before that rank starts, stopped (dropped) when the job ends.
pub trait HostService: Send {
    /// Prepares rank `rank` (one of this host's) to be started and says how it reaches the
    /// service. An error names what failed; the launch then stops before the rank starts.
    fn rank_access(&mut self, rank: usize) -> Result<RankAccess, String>;

    /// Files the job's MPI libraries may have left on this host (shared-memory segments of
    /// ranks killed before they removed them), for the launcher to remove once every rank of
    /// the host has ended.
    fn leftovers(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

mod detect;
mod elf;
pub(crate) mod exchange;
pub(crate) mod outer;
pub(crate) mod serve;

/// Starts the service of `interface` for host `node` of `map`.
fn start_service(
    interface: Interface,
    map: Arc<JobMap>,
    node: usize,
    exchange: Arc<dyn Exchange>,
    report: Reporter,
    timeout: std::time::Duration,
) -> Result<Box<dyn HostService>, String> {
    match interface {
        Interface::Simple => simple::SimpleService::start(map, node, exchange, report, timeout)
            .map(|s| Box::new(s) as Box<dyn HostService>)
            .map_err(|e| format!("starting the PMI-1/PMI-2 service: {e}")),
        Interface::Pmix => pmix::PmixService::start(map, node, exchange, report, timeout)
            .map(|s| Box::new(s) as Box<dyn HostService>),
    }
}
