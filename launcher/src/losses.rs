//! Which rank the failed ranks lost. A psyne rank whose collective fails because a peer is gone,
//! disconnected or silent records that peer in the job's store (`psyne::internal::lost_key`)
//! before its program sees the error; the supervisor reads those records when ranks fail, so it
//! names the rank the others lost (hung, stopped, cut off, or failing later) rather than the
//! first rank that exited because of it.
//!
//! And which ranks the survivors counted failed while they still run (silent past
//! `PSY_TIMEOUT`: stopped, hung): an agreement declares them in the store
//! (`psyne::internal::declared_key`), and [`watch_declarations`] hands each declaration to the
//! supervisor as an [`Event::Declared`], which ends the rank.

use crate::supervise::Event;
use psyne::internal::{declared_count_key, declared_key, lost_key, parse_declaration};
use psyne::{ErrorKind, Secret, Store, TcpStore};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
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

    /// The store's address (`host:port`).
    pub fn store(&self) -> &str {
        &self.store
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

/// How long the declaration watcher waits for the next declaration before it checks whether it
/// should stop, and how long a claimed declaration number may stay unset (its declarer died
/// between taking the number and writing it) before the watcher skips it.
pub const DECLARATION_WAIT: Duration = Duration::from_secs(1);

/// Stops the thread of [`watch_declarations`] when dropped.
#[derive(Debug)]
pub struct DeclarationWatch {
    stop: Arc<AtomicBool>,
}

impl Drop for DeclarationWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Watches job `job_id`'s store at `store` for declarations of ranks the survivors counted
/// failed, on a thread of its own, and sends each to `events` as [`Event::Declared`], in order.
/// The thread ends when the returned handle is dropped (within [`DECLARATION_WAIT`]), the store
/// goes away, or `events` is closed.
pub fn watch_declarations(
    store: &str,
    secret: Secret,
    job_id: &str,
    events: Sender<Event>,
) -> std::io::Result<DeclarationWatch> {
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = Declarations {
        store: store.to_string(),
        secret,
        job_id: job_id.to_string(),
        events,
        stop: stop.clone(),
    };
    crate::spawn::helper_thread("psyrun-declared", move || watcher.run())?;
    Ok(DeclarationWatch { stop })
}

/// The declaration watcher's state (see [`watch_declarations`]).
struct Declarations {
    store: String,
    secret: Secret,
    job_id: String,
    events: Sender<Event>,
    stop: Arc<AtomicBool>,
}

impl Declarations {
    fn run(self) {
        let deadline = Instant::now() + CONNECT;
        let Ok(client) = TcpStore::connect(&self.store, &self.secret, deadline) else {
            return;
        };
        let mut next = 1u64;
        let mut unset_since: Option<Instant> = None;
        while !self.stop.load(Ordering::SeqCst) {
            let key = declared_key(&self.job_id, next);
            match client.get(&key, Instant::now() + DECLARATION_WAIT) {
                Ok(value) => {
                    if let Some((rank, why)) = parse_declaration(&value) {
                        if self.events.send(Event::Declared { rank, why }).is_err() {
                            return;
                        }
                    }
                    next += 1;
                    unset_since = None;
                }
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    if self.skip_unset(&client, next, &mut unset_since) {
                        next += 1;
                        unset_since = None;
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// Whether to skip declaration `n`, which is not set: a later one was claimed, and `n` has
    /// stayed unset for [`DECLARATION_WAIT`] since that was first seen (its declarer died).
    fn skip_unset(&self, client: &TcpStore, n: u64, unset_since: &mut Option<Instant>) -> bool {
        let claimed = client
            .add(&declared_count_key(&self.job_id), 0)
            .ok()
            .and_then(|c| u64::try_from(c).ok())
            .unwrap_or(0);
        if claimed <= n {
            return false;
        }
        let since = *unset_since.get_or_insert_with(Instant::now);
        since.elapsed() >= DECLARATION_WAIT
    }
}
