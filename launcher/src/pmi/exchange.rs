//! The [`Exchange`] of a job on several hosts: through the job's store, which psyrun serves and
//! every host reaches (its ranks do). Host `node` sets `psyrun.TAG/ROUND/NODE` (TAG: the interface) to its blob and
//! reads every host's key of the round, waiting until each is there or the deadline passes.
//! The connection is made at the first round and kept.

use super::Exchange;
use psyne::{Secret, Store, TcpStore};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The store-backed exchange of one host.
pub struct StoreExchange {
    tag: &'static str,
    store: String,
    secret: Secret,
    hosts: usize,
    timeout: Duration,
    client: Mutex<Option<TcpStore>>,
}

impl StoreExchange {
    /// An exchange among `hosts` hosts through the store at `store` (`host:port`), proving
    /// `secret`; each round waits at most `timeout`. `tag` keeps the rounds of one service (an
    /// interface) apart from another's.
    pub fn new(
        tag: &'static str,
        store: String,
        secret: Secret,
        hosts: usize,
        timeout: Duration,
    ) -> StoreExchange {
        StoreExchange {
            tag,
            store,
            secret,
            hosts,
            timeout,
            client: Mutex::new(None),
        }
    }
}

/// The key of host `node`'s part of round `round` of the service `tag`.
fn key(tag: &str, round: u64, node: usize) -> String {
    format!("psyrun.{tag}/{round}/{node}")
}

impl Exchange for StoreExchange {
    fn all_gather(&self, node: usize, round: u64, blob: Vec<u8>) -> Result<Vec<Vec<u8>>, String> {
        let deadline = Instant::now() + self.timeout;
        let mut client = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if client.is_none() {
            let c = TcpStore::connect(&self.store, &self.secret, deadline)
                .map_err(|e| format!("reaching the job's store at {}: {e}", self.store))?;
            *client = Some(c);
        }
        let store = client
            .as_ref()
            .ok_or_else(|| "no connection to the job's store".to_string())?;
        store
            .set(&key(self.tag, round, node), &blob)
            .map_err(|e| format!("giving this host's part of round {round}: {e}"))?;
        let keys: Vec<String> = (0..self.hosts).map(|n| key(self.tag, round, n)).collect();
        store.get_many(&keys, deadline).map_err(|e| {
            format!(
                "waiting {:?} for every host's part of round {round}: {e}",
                self.timeout
            )
        })
    }
}
