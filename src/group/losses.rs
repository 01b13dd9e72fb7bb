//! Telling the launcher which rank a failed call lost. When a collective of a group formed by
//! [`crate::init`] under psyrun fails because a peer is gone, disconnected or silent past the
//! deadline ([`crate::Error::peer`]), the rank records that peer in the job's store before the
//! error reaches the program. psyrun reads these records when ranks fail, so it names the rank
//! the others lost (a hung or killed one) rather than the first rank that exited because of it.

use crate::bootstrap::Store;
use std::sync::Arc;

/// The store key under which `rank` of job `job_id` records the rank it lost.
pub fn lost_key(job_id: &str, rank: usize) -> String {
    format!("{job_id}/lost/{rank}")
}

/// Where a group records the peers it loses.
pub(crate) struct LossReport {
    /// The job's store.
    pub(crate) store: Arc<dyn Store>,
    /// The job whose key this rank writes ([`lost_key`]).
    pub(crate) job_id: String,
}

impl LossReport {
    /// Records that `rank` lost `peer` (best effort: the report only improves psyrun's message,
    /// so a store that cannot be reached is no reason for another error).
    pub(crate) fn tell(&self, rank: usize, peer: usize) {
        let _ = self
            .store
            .set(&lost_key(&self.job_id, rank), peer.to_string().as_bytes());
    }
}
