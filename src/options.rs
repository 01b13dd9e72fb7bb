//! A group's options: [`Tunables`], every setting that changes how a group runs but not what it
//! computes (except the reduction order, which may change the last bits of a floating-point
//! sum), gathered from the layers that own them (the waits of [`crate::launch`], the
//! algorithm policy of [`crate::tuning`], the transports' settings). Passed down whole: the
//! group's core keeps it, and the transports borrow their part.

use crate::error::Result;
use crate::launch::{spin_with, timeout_with};
use crate::names::{DEFAULT_SPIN, DEFAULT_TIMEOUT};
use std::time::Duration;

/// A group's tunables: every setting that changes how a group runs but not what it computes,
/// read once when the group forms (or set from code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunables {
    /// The deadline of every wait (`PSY_TIMEOUT`).
    pub timeout: Duration,
    /// How long a waiting rank spins before blocking (`PSY_SPIN_US`).
    pub spin: Duration,
    /// The algorithm policy (`PSY_ALGO`, `PSY_TUNING`).
    pub tuning: crate::tuning::Tuning,
    /// Which transports may be used (`PSY_TRANSPORT`) and their settings (`PSY_SHM_*`,
    /// `PSY_RDMA_*`).
    pub transport: crate::transport::TransportTunables,
    /// The order reductions combine the ranks' values in (`PSY_REDUCE_ORDER`): the one setting
    /// here that may change a result's bits (of floating-point sums and products), not its
    /// meaning.
    pub reduce_order: crate::reduce::ReduceOrder,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            timeout: DEFAULT_TIMEOUT,
            spin: DEFAULT_SPIN,
            tuning: crate::tuning::Tuning::default(),
            transport: crate::transport::TransportTunables::default(),
            reduce_order: crate::reduce::ReduceOrder::Fast,
        }
    }
}

impl Tunables {
    /// The tunables `get` (normally `std::env::var`) gives, each unset one at its default; a
    /// malformed value is a [`crate::ErrorKind::Config`] error naming the variable and an example.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Tunables> {
        Ok(Tunables {
            timeout: timeout_with(get)?,
            spin: spin_with(get)?,
            tuning: crate::tuning::Tuning::from_lookup(get)?,
            transport: crate::transport::TransportTunables::from_lookup(get)?,
            reduce_order: crate::reduce::ReduceOrder::from_lookup(get)?,
        })
    }

    /// [`Tunables::from_lookup`] on this process's environment.
    pub fn from_env() -> Result<Tunables> {
        Tunables::from_lookup(&|name| std::env::var(name).ok())
    }
}
