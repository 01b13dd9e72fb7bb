//! Telling the launcher which rank a failed call lost. When a collective of a group formed by
//! [`crate::init()`] under psyrun fails because a peer is gone, disconnected or silent past the
//! deadline ([`crate::Error::peer`]), the rank records that peer in the job's store before the
//! error reaches the program. psyrun reads these records when ranks fail, so it names the rank
//! the others lost (a hung or killed one) rather than the first rank that exited because of it.
//!
//! And which ranks the others counted failed while they still run: when an agreement
//! ([`crate::Group::agree`], [`crate::Group::shrink`]) decides that a rank that did not vote
//! before the deadline is failed, one survivor *declares* it in the job's store
//! ([`declared_key`]); psyrun waits for these declarations and ends the rank (SIGKILL to its
//! process group: a stopped process cannot act on anything gentler), so a rank that is stopped
//! or hung is not left behind once the others went on without it.

use crate::bootstrap::Store;
use std::sync::Arc;

/// The store key under which `rank` of job `job_id` records the rank it lost.
pub fn lost_key(job_id: &str, rank: usize) -> String {
    format!("{job_id}/lost/{rank}")
}

/// The store key of job `job_id`'s `n`th declaration (from 1) of a rank the others counted
/// failed: its value is [`declaration`]'s. psyrun reads them in order.
pub fn declared_key(job_id: &str, n: u64) -> String {
    format!("{job_id}/declared/{n}")
}

/// The store key counting job `job_id`'s declarations: a declarer takes the next number with
/// [`crate::Store::add`], then sets [`declared_key`] of it.
pub fn declared_count_key(job_id: &str) -> String {
    format!("{job_id}/declared")
}

/// A declaration's value: the rank's number in the job (`PSY_RANK`), a space, and why.
pub fn declaration(job_rank: usize, why: &str) -> Vec<u8> {
    format!("{job_rank} {why}").into_bytes()
}

/// The rank and the reason of a declaration's value ([`declaration`]); `None` if malformed.
pub fn parse_declaration(value: &[u8]) -> Option<(usize, String)> {
    let text = std::str::from_utf8(value).ok()?;
    let (rank, why) = text.split_once(' ').unwrap_or((text, ""));
    Some((rank.parse().ok()?, why.to_string()))
}

/// Declares in the job's `store` that the rank `job_rank` of job `job_id` was counted failed
/// for `why`, unless another survivor did already (the first to claim it declares it, so
/// psyrun hears of it once). `me` names the declarer.
pub(crate) fn declare(
    store: &dyn Store,
    job_id: &str,
    job_rank: usize,
    me: &str,
    why: &str,
) -> crate::Result<()> {
    let claim = store.set_once(&format!("{job_id}/declared-rank/{job_rank}"), me.as_bytes())?;
    if claim != me.as_bytes() {
        return Ok(());
    }
    let n = store.add(&declared_count_key(job_id), 1)?;
    let n = u64::try_from(n).unwrap_or(0);
    store.set(&declared_key(job_id, n), &declaration(job_rank, why))
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
