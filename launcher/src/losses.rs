//! Which rank the failed ranks lost. A psyne rank whose collective fails because a peer is gone,
//! disconnected or silent records that peer in the job's store (`psyne::internal::lost_key`)
//! before its program sees the error; the supervisor reads those records when ranks fail, so it
//! names the rank the others lost (hung, stopped, cut off, or failing later) rather than the
//! first rank that exited because of it.

use psyne::internal::lost_key;
use psyne::{Secret, Store, TcpStore};
use std::time::{Duration, Instant};

/// How long psyrun waits to connect to its own store to read the records.
const CONNECT: Duration = Duration::from_secs(2);

/// A reader of one job's loss records, connecting to its store on first use.
pub struct LossReports {
    store: String,
    secret: Secret,
    job_id: String,
    client: Option<TcpStore>,
}

impl LossReports {
    /// Reads the records of `job_id` from the store at `store` (`host:port`).
    pub fn new(store: &str, secret: Secret, job_id: &str) -> LossReports {
        LossReports {
            store: store.to_string(),
            secret,
            job_id: job_id.to_string(),
            client: None,
        }
    }

    /// The rank `rank` reported losing, if it recorded one (never waits for a record).
    pub fn lost_by(&mut self, rank: usize) -> Option<usize> {
        if self.client.is_none() {
            let deadline = Instant::now() + CONNECT;
            self.client = TcpStore::connect(&self.store, &self.secret, deadline).ok();
        }
        let key = lost_key(&self.job_id, rank);
        let value = self.client.as_ref()?.get(&key, Instant::now()).ok()?;
        std::str::from_utf8(&value).ok()?.trim().parse().ok()
    }

    /// This reader as the supervisor takes it.
    pub fn into_lost_by<'c>(mut self) -> crate::supervise::LostBy<'c> {
        Box::new(move |rank| self.lost_by(rank))
    }
}
