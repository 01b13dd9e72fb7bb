//! How ranks find each other: a key-value [`Store`] every rank can reach. Each rank publishes the
//! address it listens on and reads everyone else's.
//!
//! Implementations: [`MemoryStore`] (in one process: tests, threads as ranks), [`TcpStore`] (a
//! client of a [`StoreServer`], which psyrun serves and which rank 0 serves under torchrun).

mod memory;
mod tcp;

pub use memory::MemoryStore;
pub use tcp::{StoreServer, TcpStore};

use crate::error::Result;
use std::time::Instant;

/// A key-value store shared by the ranks of a job. Values are immutable once set in practice;
/// `set` overwrites.
pub trait Store: Send + Sync {
    /// Sets `key` to `value`.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The value of `key`, waiting until some rank sets it or `deadline` passes.
    fn get(&self, key: &str, deadline: Instant) -> Result<Vec<u8>>;
    /// Adds `delta` to the integer at `key` (missing counts as 0) and returns the new value.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        (**self).set(key, value)
    }
    fn get(&self, key: &str, deadline: Instant) -> Result<Vec<u8>> {
        (**self).get(key, deadline)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        (**self).add(key, delta)
    }
}
