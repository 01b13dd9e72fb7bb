//! The RDMA transport: InfiniBand or RoCE through rdma-core's verbs (the `sideway` crate, which
//! loads libibverbs at run time), behind the cargo feature `rdma`.
//!
//! One reliable-connected queue pair per pair of ranks. Ranks publish in the bootstrap store
//! whether they offer RDMA ([`endpoint::Offer`]), then per pair how to reach their queue pair and
//! memory ([`endpoint::EndpointInfo`]); each side walks its queue pair through
//! reset → init → ready to receive → ready to send ([`qp_state`]) and says so over the pair's TCP
//! connection, which then stays open only to notice a peer that dies. Messages up to 8 KiB go by
//! send/receive into posted slots; longer ones by RDMA write with immediate into the peer's ring,
//! in chunks ([`chunk`]), with credit returned by RDMA write ([`flow`]). Waiting spins in the
//! executor, then blocks on the completion channel ([`link`]).
//!
//! Where the feature is off, libibverbs is missing, or there is no active port, the transport
//! is absent ([`probe::availability`]): `auto` selection keeps TCP, and `PSY_TRANSPORT=rdma` is
//! an error that names the reason and the fix.
//!
//! In the transport table ([`crate::transport::table`]) RDMA comes after shared memory and before
//! TCP; [`select`] is its entry (the offer each rank publishes, the per-pair decision, the
//! connection of the pairs it won). Its knobs ([`config`]) come from
//! [`crate::transport::TransportTunables::rdma`], read once per group.

// Without the `rdma` feature the link that uses most of this is not built; the pure parts
// (endpoints, chunking, flow control, the registration cache) stay compiled so their tests run.
#![cfg_attr(not(feature = "rdma"), allow(dead_code))]

pub mod chunk;
pub mod config;
pub mod endpoint;
pub mod fabric;
#[cfg(test)]
mod fake;
pub mod flow;
pub mod link;
pub mod probe;
pub mod qp_state;
pub mod reg_cache;
pub mod select;
pub mod status;
#[cfg(feature = "rdma")]
pub mod verbs;

pub use config::RdmaConfig;
pub use probe::{availability, Availability};
pub(crate) use select::entry;
