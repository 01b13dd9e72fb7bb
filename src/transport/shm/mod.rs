//! The shared-memory transport, for ranks on the same host: one segment per pair of ranks holding
//! two single-producer single-consumer byte rings (one per direction), waited on with futexes.
//!
//! A pair is first connected over TCP (authenticated with the job secret); the lower rank then
//! creates the segment (`O_EXCL`, mode 0600, a name carrying the job id), writes a random nonce
//! into it and sends the segment's name and nonce over the TCP link; the higher rank opens it
//! (refusing one it does not own or that others could read), checks the nonce, answers, and the
//! creator unlinks the name at once: from then on a crash leaves nothing in /dev/shm. The TCP
//! connection stays open beside the rings only to notice a peer that dies. Large slices skip the
//! rings: the receiver copies them straight out of the sender's memory ([`cma`]).
//!
//! In the transport table ([`crate::transport::table`]) shared memory comes first: it connects a
//! pair when both ranks have the same host key ([`crate::transport::host_key`]) and both allow it
//! (`PSY_TRANSPORT` is not `tcp` or `rdma`); [`upgrade`] moves those pairs off TCP. Ring size and
//! single-copy transfers come from [`crate::transport::TransportTunables`]; whether a call's ring
//! writes go through the caches or through memory is chosen call by call ([`crossing`]).

pub mod arrival;
pub mod board;
pub mod cma;
pub mod crossing;
pub mod futex;
mod link;
mod pull_cost;
pub mod ring;
pub mod segment;
pub(crate) mod stream_copy;
pub mod upgrade;
pub mod withdraw;

pub(crate) use upgrade::entry;
