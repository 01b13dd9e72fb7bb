//! The TCP transport: one connection per pair of ranks, `TCP_NODELAY`, large socket buffers, and
//! the [`crate::auth`] handshake before anything else is read.
//!
//! Wiring a full mesh: every rank listens and publishes `ip:port` in the store; rank `i` connects
//! to every rank below it and accepts from every rank above it.

mod link;
mod mesh;

pub use link::TcpLink;
pub use mesh::{connect_mesh, MeshOptions};
