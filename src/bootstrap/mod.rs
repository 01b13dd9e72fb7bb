//! How ranks find each other: a key-value [`Store`] every rank can reach. Each rank publishes the
//! address it listens on and reads everyone else's.
//!
//! Implementations: [`MemoryStore`] (in one process: tests, threads as ranks), [`TcpStore`] (a
//! client of a [`StoreServer`], which psyrun serves and which rank 0 serves under torchrun and
//! under PMIx and PMI launchers, where [`meet`] tells the other ranks where it is).

pub(crate) mod meet;
mod memory;
pub(crate) mod pmi;
pub(crate) mod pmix;
mod range_read;
mod tcp;

pub use memory::MemoryStore;
pub use tcp::{StoreServer, TcpStore};

use crate::error::Result;
use std::ops::Range;
use std::time::Instant;

/// A key-value store shared by the ranks of a job. Values are immutable once set in practice;
/// `set` overwrites.
pub trait Store: Send + Sync {
    /// Sets `key` to `value`.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The value of `key`, waiting until some rank sets it or `deadline` passes.
    fn get(&self, key: &str, deadline: Instant) -> Result<Vec<u8>>;
    /// The values of `keys`, in order, waiting until all are set or `deadline` passes: one
    /// request to a store over the network, where `get` per key would make one each (N ranks
    /// reading every rank's address: N requests, not N²).
    fn get_many(&self, keys: &[String], deadline: Instant) -> Result<Vec<Vec<u8>>> {
        keys.iter().map(|k| self.get(k, deadline)).collect()
    }
    /// The values of the keys `{prefix}{i}` for `i` in `indices`, in order, waiting until all are
    /// set or `deadline` passes: every rank reading every rank's address. A store over the
    /// network answers it from one reply it encodes once for all ranks, and the request names
    /// only the prefix and the bounds, so N ranks cost the store O(N) work, not O(N²).
    fn get_range(
        &self,
        prefix: &str,
        indices: Range<usize>,
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>> {
        self.get_many(&range_keys(prefix, indices), deadline)
    }
    /// Adds `delta` to the integer at `key` (missing counts as 0) and returns the new value.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;
    /// Sets `key` to `value` unless it is set already, in one atomic step, and returns the value
    /// `key` holds afterwards: `value` for the first caller, the first caller's value for every
    /// later one. What ranks agree through ([`crate::Group::agree`]).
    fn set_once(&self, key: &str, value: &[u8]) -> Result<Vec<u8>>;
    /// Sets `key` to `value` for as long as this client is connected; when its connection ends
    /// (the process exited or died), the store sets `key` to `when_gone`. How ranks learn that a
    /// peer is gone without a link to it. A store without connections (in memory, or one whose
    /// protocol cannot do this) just sets `value`: a peer's death is then noticed only through
    /// the deadline.
    fn set_ephemeral(&self, key: &str, value: &[u8], when_gone: &[u8]) -> Result<()>;
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        (**self).set(key, value)
    }
    fn get(&self, key: &str, deadline: Instant) -> Result<Vec<u8>> {
        (**self).get(key, deadline)
    }
    fn get_many(&self, keys: &[String], deadline: Instant) -> Result<Vec<Vec<u8>>> {
        (**self).get_many(keys, deadline)
    }
    fn get_range(
        &self,
        prefix: &str,
        indices: Range<usize>,
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>> {
        (**self).get_range(prefix, indices, deadline)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        (**self).add(key, delta)
    }
    fn set_once(&self, key: &str, value: &[u8]) -> Result<Vec<u8>> {
        (**self).set_once(key, value)
    }
    fn set_ephemeral(&self, key: &str, value: &[u8], when_gone: &[u8]) -> Result<()> {
        (**self).set_ephemeral(key, value, when_gone)
    }
}

/// The keys of a range read: `{prefix}{i}` for each `i` of `indices`.
pub(crate) fn range_keys(prefix: &str, indices: Range<usize>) -> Vec<String> {
    indices.map(|i| format!("{prefix}{i}")).collect()
}
