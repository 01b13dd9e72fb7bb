//! The state of the barrier round in progress (a leaf: the server holds it, [`super::barrier`]
//! drives it).

use super::wire::Framing;
use std::time::{Duration, Instant};

/// A local rank waiting in the barrier.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) local: usize,
    pub(super) framing: Framing,
    pub(super) thrid: Option<String>,
}

/// The barrier round in progress.
#[derive(Debug, Default)]
pub struct Barrier {
    /// The round number (0 for the first barrier).
    pub(super) round: u64,
    pub(super) entered: Vec<Entry>,
    /// When the first rank entered this round.
    pub(super) since: Option<Instant>,
    /// Whether this round's exchange is under way.
    pub(super) exchanging: bool,
    /// Why an earlier round failed.
    pub(super) failed: Option<String>,
}

impl Barrier {
    /// When this round gives up, if a rank is waiting.
    pub fn deadline(&self, timeout: Duration) -> Option<Instant> {
        self.since.map(|s| s + timeout)
    }
}
