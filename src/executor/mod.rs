//! Runs one call of a group. Every way of running a collective is an [`Engine`] behind one
//! contract, called from one place (the group's core, `group/core.rs`):
//!
//! - [`Steps`]: a [`Schedule`]'s steps over the group's [`Link`]s (any transport). Every step's
//!   sends and receives proceed at the same time in one non-blocking loop, so a ring step with a
//!   buffer far larger than the socket buffers cannot deadlock; received data is reduced (or
//!   forwarded) piece by piece as it arrives.
//! - [`flat::BoardCollective`]: any collective of a small buffer on the node board of a group
//!   that lives on one host.
//! - [`shared::SharedAllReduce`]: the all-reduce of shared buffers, in place in memory every rank
//!   maps.
//!
//! An engine gets the [`Call`] (what every rank must agree on, the reduction, how to wait, how
//! long) and the group's links, which it uses for data or only to watch its peers. It waits with
//! the one [`crate::wait::Spinner`], probes peers with the one [`crate::wait::process_alive`] and
//! reports with the one set of error builders ([`fail::Site`]). When an engine fails, the core
//! aborts the links ([`abort_links`], so the other ranks learn of it at once) and poisons the
//! group: every later call, on any engine, is refused with the first error.
//!
//! The step engine works on a [`WorkView`]: the whole work buffer, or the caller's input and
//! output standing in for it when the schedule only sends from the one and receives into the
//! other (no copy in or out).
//!
//! A new fast path is a new engine: a struct holding what it runs on, and its `run`.

mod abort;
mod connect;
pub(crate) mod fail;
pub(crate) mod flat;
mod header;
pub(crate) mod shared;
pub(crate) mod staging;
mod step;
pub(crate) mod stray;
mod view;

pub(crate) use abort::abort_links;
pub(crate) use header::kind_code;
pub(crate) use header::{OpDesc, OpKind, Pair};
pub(crate) use step::{StepMemory, Steps};
pub(crate) use view::WorkView;

use crate::error::Result;
use crate::reduce::Reducer;
use crate::transport::pairs::Connector;
use crate::transport::{Link, PeerInfo};
use crate::wait::{Interrupt, WaitPolicy};
use std::time::Duration;

#[cfg(doc)]
use crate::schedule::Schedule;

/// The links of one rank to the others of its group.
pub(crate) struct Links {
    /// This rank.
    pub(crate) rank: usize,
    /// Index = peer rank; `None` for this rank itself, for a pair not connected yet, and after
    /// the links were given up.
    pub(crate) links: Vec<Option<Box<dyn Link>>>,
    /// Where each rank lives.
    pub(crate) peers: Vec<PeerInfo>,
    /// Peers whose outgoing stream stopped inside a message (set when a run fails).
    pub(crate) mid_message: Vec<bool>,
    /// Point-to-point messages exchanged with each peer so far (collectives' headers carry them).
    pub(crate) p2p: Vec<Pair>,
    /// What connects the pairs not connected yet, for a group that has them.
    pub(crate) connector: Option<Connector>,
}

impl Links {
    /// Links of `rank` with no message in progress.
    pub(crate) fn new(
        rank: usize,
        links: Vec<Option<Box<dyn Link>>>,
        peers: Vec<PeerInfo>,
        connector: Option<Connector>,
    ) -> Self {
        let mid_message = vec![false; links.len()];
        let p2p = vec![Pair::default(); links.len()];
        Links {
            rank,
            links,
            peers,
            mid_message,
            p2p,
            connector,
        }
    }
}

/// What every engine is told about the call it runs.
pub(crate) struct Call {
    /// What every rank must agree the call is (compared between ranks).
    pub(crate) desc: OpDesc,
    /// How reducing calls combine data (`None` for the others).
    pub(crate) reducer: Option<Reducer>,
    /// How to wait (the group's, computed once).
    pub(crate) wait: WaitPolicy,
    /// How long any wait may last.
    pub(crate) timeout: Duration,
    /// Whether to give the call up while it waits ([`crate::Group::set_interrupt_check`]).
    pub(crate) interrupt: Interrupt,
}

impl Call {
    /// Where this call runs, for error messages.
    pub(crate) fn site<'a>(&'a self, rank: usize, peers: &'a [PeerInfo]) -> fail::Site<'a> {
        fail::Site {
            desc: &self.desc,
            rank,
            peers,
        }
    }
}

/// One way of running a call. On error the links may be in any state: the caller aborts them.
pub(crate) trait Engine {
    /// Runs `call` to completion, using `links` for data or only to watch the peers.
    fn run(self, call: &Call, links: &mut Links) -> Result<()>;

    /// Calls `f` with every peer whose link the engine sends to or receives from (repeats
    /// allowed), so that the pair is connected before it runs. None by default.
    fn each_peer(&self, f: &mut dyn FnMut(usize)) {
        let _ = f;
    }
}
