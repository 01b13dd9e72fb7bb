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
//! Inside, layers depend only on those before them: `bootstrap` (how ranks find each other: a
//! [`Store`]), `transport` (bytes between two ranks, chosen per peer from a table), [`schedule`]
//! (pure: the steps of each algorithm), [`tuning`] (which algorithm), `executor` (the engines that
//! run a call), and [`Group`] (the typed API). The README's "How a call runs" follows one call
//! through them.

pub(crate) mod auth;
pub(crate) mod bootstrap;
mod comm;
pub mod conformance;
pub mod contract;
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
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod oracle;
pub mod reduce;
pub mod report;
pub mod schedule;
pub mod textfile;
pub(crate) mod transport;
pub mod tuning;
pub(crate) mod wait;

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
pub use group::{Group, GroupOptions, SharedBuf, Work, MIN_SHARED_BYTES};
pub use half::{bf16, f16};
pub use init::init;
pub use reduce::ReduceOp;
pub use schedule::{Algo, Collective};
pub use transport::pairs::ConnectPolicy;
pub use transport::rdma::RdmaConfig;
pub use transport::shm::cma::PullPolicy;
pub use transport::{host_key, hostname, TransportKind, TransportPolicy, TransportTunables};
pub use tuning::Tuning;
pub use wait::{InterruptCheck, INTERRUPT_CHECK_EVERY};
