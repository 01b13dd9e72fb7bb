//! Runs a [`Schedule`] over [`Link`]s: every step's sends and receives proceed at the same time
//! in one non-blocking loop, so a ring step with a buffer far larger than the socket buffers
//! cannot deadlock; received data is reduced (or forwarded) piece by piece as it arrives.
//!
//! Waiting spins briefly (yielding the core, so oversubscribed ranks still progress) and then
//! blocks in `poll(2)` until a link is ready or the deadline passes.

mod abort;
pub mod flat;
mod header;
mod step;

pub use abort::abort_links;
pub use header::{OpDesc, OpKind};

use crate::error::Result;
use crate::reduce::Reducer;
use crate::schedule::Schedule;
use crate::transport::{Link, PeerInfo};
use std::time::{Duration, Instant};

/// The links of one rank to the others of its group.
pub struct Links {
    /// This rank.
    pub rank: usize,
    /// Index = peer rank; `None` for this rank itself (and after the links were given up).
    pub links: Vec<Option<Box<dyn Link>>>,
    /// Where each rank lives.
    pub peers: Vec<PeerInfo>,
    /// Peers whose outgoing stream stopped inside a message (set when a run fails).
    pub mid_message: Vec<bool>,
}

impl Links {
    /// Links of `rank` with no message in progress.
    pub fn new(rank: usize, links: Vec<Option<Box<dyn Link>>>, peers: Vec<PeerInfo>) -> Self {
        let mid_message = vec![false; links.len()];
        Links {
            rank,
            links,
            peers,
            mid_message,
        }
    }
}

/// One operation to run.
pub struct Job<'a> {
    /// What every message will say the operation is.
    pub desc: OpDesc,
    /// This rank's steps.
    pub schedule: &'a Schedule,
    /// The work buffer, `schedule.buf_len` elements of `elem_size` bytes, aligned for its type.
    pub buf: &'a mut [u8],
    /// Bytes per element.
    pub elem_size: usize,
    /// How `Reduce` receives combine (required when the schedule has any).
    pub reducer: Option<Reducer>,
    /// When to give up waiting.
    pub deadline: Instant,
}

/// How a rank waits for an idle link: poll without system calls for `poll`, then keep polling
/// but yield the core between looks until `spin` has passed, then block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Pure polling (no system call): worth it when every rank has a core of its own.
    pub poll: Duration,
    /// Total time before blocking, polling phase included.
    pub spin: Duration,
}

impl WaitPolicy {
    /// `spin` (`PSY_SPIN_US`), with a few µs of pure polling unless the ranks on this host
    /// (`local_ranks`) outnumber its cores, when polling would only keep a peer off its core.
    pub fn new(spin: Duration, local_ranks: usize) -> WaitPolicy {
        // The host's online CPUs, not this process's affinity mask: a launcher that binds each
        // rank to one core (mpirun does by default) does not make the host oversubscribed.
        // SAFETY: sysconf has no memory-safety preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        let cores = if online > 0 { online as usize } else { 1 };
        let poll = if local_ranks > cores {
            Duration::ZERO
        } else {
            Duration::from_micros(3)
        };
        WaitPolicy {
            poll: poll.min(spin),
            spin,
        }
    }
}

/// Runs jobs; keeps scratch memory between them.
pub struct Executor {
    memory: step::StepMemory,
    wait: WaitPolicy,
}

impl Executor {
    /// An executor that waits as `wait` says.
    pub fn new(wait: WaitPolicy) -> Self {
        Executor {
            memory: step::StepMemory::default(),
            wait,
        }
    }

    /// How this executor waits.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.wait
    }

    /// Runs every step of `job` over `links`. On error, the links are in an unknown state: the
    /// caller should [`abort_links`] them.
    pub fn run(&mut self, links: &mut Links, job: Job<'_>) -> Result<()> {
        let Job {
            desc,
            schedule,
            buf,
            elem_size,
            reducer,
            deadline,
        } = job;
        for step in &schedule.steps {
            step::run_step(
                &step::StepCtx {
                    links_rank: links.rank,
                    peers: &links.peers,
                    desc: &desc,
                    elem_size,
                    reducer,
                    deadline,
                    wait: self.wait,
                },
                &mut links.links,
                &mut links.mid_message,
                step,
                buf,
                &mut self.memory,
            )?;
        }
        Ok(())
    }
}
