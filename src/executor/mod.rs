//! Runs a [`Schedule`] over [`Link`]s: every step's sends and receives proceed at the same time
//! in one non-blocking loop, so a ring step with a buffer far larger than the socket buffers
//! cannot deadlock; received data is reduced (or forwarded) piece by piece as it arrives.
//!
//! Waiting spins briefly (yielding the core, so oversubscribed ranks still progress) and then
//! blocks in `poll(2)` until a link is ready or the deadline passes.

mod abort;
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

/// Runs jobs; keeps scratch memory between them.
pub struct Executor {
    memory: step::StepMemory,
    spin: Duration,
}

impl Executor {
    /// An executor that spins for `spin` before blocking on an idle link.
    pub fn new(spin: Duration) -> Self {
        Executor {
            memory: step::StepMemory::default(),
            spin,
        }
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
                    spin: self.spin,
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
