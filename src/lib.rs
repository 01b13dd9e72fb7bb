//! # psyne
//!
//! Collective communication for parallel programs: broadcast, reduce, all-reduce, scatter, gather,
//! all-gather, reduce-scatter, all-to-all, barrier and send/recv between the ranks of a job, over
//! TCP, with ring, tree and recursive-doubling algorithms chosen by message size, and hierarchical
//! ones ([`Algo::Hier`]) for groups spread over several hosts with several ranks on some.
//!
//! ```
//! use psyne::prelude::*; // the Communicator trait (the collectives), ReduceOp, ...
//! use psyne::Algo;
//!
//! let group = psyne::init()?; // reads the psyrun environment; alone it is a world of 1
//! let mut grads = vec![1.0f32; 1 << 20];
//! group.all_reduce(&mut grads, ReduceOp::Avg)?; // in place: every rank gets the mean
//! group.broadcast(&mut grads, 0)?;
//! let all = group.all_gather(&grads[..4])?; // out of place
//! assert_eq!(all.len(), 4 * group.size());
//! let h = group.all_reduce_async(grads, ReduceOp::Sum); // compute meanwhile
//! let grads = h.wait()?;
//! assert_eq!(grads[0], group.size() as f32); // the mean of ones is 1; the sum of those is size
//! group.with_algo(Algo::Ring).all_reduce(&mut vec![0u64; 8], ReduceOp::BXor)?;
//! # Ok::<(), psyne::Error>(())
//! ```
//!
//! ## Layers
//!
//! Inside, each layer names only its own and those below it (a test reads the `use` lines and
//! holds them to this order, `src/structure_tests`), bottom first:
//!
//! 1. **base**: leaves every layer may name: `names` (the `PSY_*` variables and the launchers
//!    psyne recognises; it imports nothing of the crate), `units` (sizes such as `64K`),
//!    [`error`], [`dtype`] and [`reduce`] (element types and their reductions), `auth`,
//!    `handshakes`, `wait`, `copy` (copies of call data that stay fast wherever the buffers
//!    lie), [`report`], [`textfile`], `dl`;
//! 2. **launch**: reading the launch contract (how this process was launched, `PSY_TIMEOUT`,
//!    `PSY_SPIN_US`; the public face is [`contract`]);
//! 3. **bootstrap**: how ranks find each other: a [`Store`], PMI and PMIx;
//! 4. **transport**: bytes between two ranks, chosen per peer from a table (`transport/table.rs`
//!    and its entries `shm`, `rdma`, `tcp` name each other: the one cycle allowed);
//! 5. **schedule**: pure: the steps of each algorithm ([`schedule`]; with the `testing`
//!    feature, the reference results of `oracle` and the simulator `schedule::simulate`);
//! 6. **tuning**: which algorithm ([`tuning`]);
//! 7. **options**: [`Tunables`], everything that changes how a group runs, gathered from the
//!    layers below and passed down whole;
//! 8. **executor**: every engine that runs a call (steps over links, the node board, shared
//!    buffers);
//! 9. **group**: [`Group`], formed by one builder ([`Group::builder`]), and the [`Communicator`]
//!    it implements;
//! 10. **entry**: [`init()`] (a group from whatever launched the process), `mpi`, `conformance`
//!     (feature `testing`: the suite every [`Communicator`] must pass);
//! 11. **api**: this file's re-exports, [`contract`] and `internal`.
//!
//! The README's "How a call runs" follows one call through them.

pub(crate) mod auth;
pub(crate) mod bootstrap;
mod comm;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod contract;
pub(crate) mod copy;
#[doc(hidden)]
pub mod dl;
pub mod dtype;
pub mod error;
pub(crate) mod executor;
mod group;
pub(crate) mod handshakes;
mod init;
#[doc(hidden)]
pub mod internal;
pub(crate) mod launch;
#[cfg(feature = "mpi")]
pub mod mpi;
pub(crate) mod names;
mod options;
#[cfg(any(test, feature = "testing"))]
pub mod oracle;
pub mod reduce;
pub mod report;
pub mod schedule;
pub mod textfile;
pub(crate) mod transport;
pub mod tuning;
pub(crate) mod units;
pub(crate) mod wait;

#[cfg(test)]
mod structure_tests;

pub use auth::Secret;
pub use bootstrap::{MemoryStore, Store, TcpStore};
pub use comm::Communicator;

/// What most programs use, in one import: `use psyne::prelude::*;` brings the [`Communicator`]
/// trait (whose methods are the collectives) into scope with the types its calls take.
pub mod prelude {
    pub use crate::{Communicator, Element, Group, ReduceOp, Work};
}
pub use dtype::{DType, Element};
pub use error::{Error, ErrorKind, Result};
pub use group::{
    CanonicalPath, Group, GroupBuilder, GroupOptions, SharedBuf, Work, CANONICAL_GATHER_MAX,
    MIN_SHARED_BYTES,
};
pub use half::{bf16, f16};
pub use init::init;
pub use options::Tunables;
pub use reduce::{ReduceOp, ReduceOrder};
pub use schedule::{Algo, Collective};
pub use transport::pairs::ConnectPolicy;
pub use transport::rdma::RdmaConfig;
pub use transport::shm::cma::PullPolicy;
pub use transport::shm::crossing::{Crossing, CrossingPolicy};
pub use transport::{host_key, hostname, TransportKind, TransportPolicy, TransportTunables};
pub use tuning::Tuning;
pub use wait::{InterruptCheck, INTERRUPT_CHECK_EVERY};
