//! Meeting the other ranks through a launcher's process-management service (PMIx, or PMI-1's
//! simple wire protocol): rank 0 serves the job's store and publishes how to reach it; the
//! others read that after one fence and connect. From the store on, the group forms as under
//! psyrun (links, shared memory, revoke, agree, shrink).
//!
//! 1. rank 0 starts the store (the same [`StoreServer`] psyrun serves, on an ephemeral port),
//!    makes a fresh job secret, and publishes one [`StoreRecord`] under [`RECORD_KEY`]: the
//!    store's port, the addresses it may be reached at, and the secret;
//! 2. every rank enters one fence of the whole job (under `PSY_TIMEOUT`);
//! 3. every rank reads rank 0's record and connects to the store, proving the secret.
//!
//! The secret travels only through the launcher's service, which serves a job's data only to
//! the processes it started (PMIx authenticates each client's connection; PMI-1 talks over a
//! socket each process inherits); it is never on a command line or in the environment. The
//! store's addresses: `PSY_ADDR` if set; `127.0.0.1` when the service says every rank is on rank
//! 0's node (and then the store listens on loopback only); else every up, non-loopback IPv4
//! address of rank 0's host, tried in order (loopback last, where the service cannot say).

mod addresses;

use crate::auth::Secret;
use crate::bootstrap::{StoreServer, TcpStore};
use crate::error::{Error, ErrorKind, Result};
use std::time::{Duration, Instant};

/// The key rank 0's record is published under.
pub const RECORD_KEY: &str = "psyne.store";

/// What a launcher's service does for the meeting.
pub trait Exchange {
    /// Publishes `value` under `key` for every process of the job (rank 0 only calls it), by
    /// `deadline`; the next fence makes it visible.
    fn publish(&self, key: &str, value: &str, deadline: Instant) -> Result<()>;
    /// Waits until every process of the job has entered the same fence, or `deadline` passes;
    /// what was published before it is visible to all after it.
    fn fence(&self, deadline: Instant) -> Result<()>;
    /// The value rank 0 published under `key`.
    fn read_rank0(&self, key: &str, deadline: Instant) -> Result<String>;
}

/// Where this rank is, as far as the meeting needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seat {
    /// This process's rank.
    pub rank: usize,
    /// Whether every rank runs on rank 0's node: `None` when the service cannot say.
    pub all_here: Option<bool>,
}

/// What rank 0 puts under [`RECORD_KEY`]: how to reach the job's store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreRecord {
    /// The store's port.
    pub port: u16,
    /// Addresses to try, in order.
    pub hosts: Vec<String>,
    /// The job secret, hex.
    pub secret: String,
}

const RECORD_VERSION: &str = "psyne-store-1";

impl StoreRecord {
    /// `psyne-store-1/PORT/HOST,HOST/SECRET`: no spaces or `=`, which PMI-1 values may not hold.
    pub fn encode(&self) -> String {
        format!(
            "{RECORD_VERSION}/{}/{}/{}",
            self.port,
            self.hosts.join(","),
            self.secret
        )
    }

    /// Parses [`StoreRecord::encode`]'s form.
    pub fn decode(text: &str) -> Result<StoreRecord> {
        let bad = || {
            Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "rank 0's PMIx record {RECORD_KEY} is not one this psyne reads (is every rank \
                     the same psyne version?)"
                ),
            )
        };
        let mut parts = text.split('/');
        if parts.next() != Some(RECORD_VERSION) {
            return Err(bad());
        }
        let port = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let hosts: Vec<String> = parts
            .next()
            .ok_or_else(bad)?
            .split(',')
            .filter(|h| !h.is_empty())
            .map(String::from)
            .collect();
        let secret = parts.next().ok_or_else(bad)?.to_string();
        if hosts.is_empty() || secret.is_empty() || parts.next().is_some() {
            return Err(bad());
        }
        Ok(StoreRecord {
            port,
            hosts,
            secret,
        })
    }
}

/// The job's store, reached through the PMIx rendezvous: rank 0 serves it.
pub struct Rendezvous {
    /// This rank's connection to the store.
    pub store: TcpStore,
    /// The store itself, on rank 0.
    pub server: Option<StoreServer>,
    /// The job secret every link proves.
    pub secret: Secret,
}

/// Meets the job's other ranks through `service` (see the module docs); every wait ends by
/// `deadline`.
pub fn rendezvous(service: &dyn Exchange, seat: Seat, deadline: Instant) -> Result<Rendezvous> {
    if seat.rank == 0 {
        let secret = Secret::generate()?;
        let (bind, hosts) = addresses::for_store(seat.all_here)?;
        let server = StoreServer::bind(format!("{bind}:0"), secret.clone())
            .map_err(|e| e.context("rank 0 serving the job's store"))?;
        let record = StoreRecord {
            port: server.addr().port(),
            hosts,
            secret: secret.to_hex(),
        };
        service.publish(RECORD_KEY, &record.encode(), deadline)?;
        service.fence(deadline)?;
        let store = connect_any(&record, &secret, deadline)?;
        Ok(Rendezvous {
            store,
            server: Some(server),
            secret,
        })
    } else {
        service.fence(deadline)?;
        let record = StoreRecord::decode(&service.read_rank0(RECORD_KEY, deadline)?)?;
        let secret = Secret::from_hex(&record.secret)?;
        let store = connect_any(&record, &secret, deadline)?;
        Ok(Rendezvous {
            store,
            server: None,
            secret,
        })
    }
}

/// The longest one address of the record is tried before the next.
const TRY_EACH: Duration = Duration::from_secs(2);

/// Connects to the first of the record's addresses that answers, trying them in turn until
/// `deadline`.
fn connect_any(record: &StoreRecord, secret: &Secret, deadline: Instant) -> Result<TcpStore> {
    let mut errors = Vec::new();
    loop {
        if record.hosts.is_empty() || Instant::now() >= deadline {
            return Err(unreachable_store(record, errors.last()));
        }
        for host in &record.hosts {
            let addr = format!("{host}:{}", record.port);
            let until = deadline.min(Instant::now() + TRY_EACH);
            match TcpStore::connect(&addr, secret, until) {
                Ok(store) => return Ok(store),
                Err(e) if e.kind() == ErrorKind::Auth => return Err(e),
                Err(e) => errors.push(e.to_string()),
            }
            if Instant::now() >= deadline {
                break;
            }
        }
    }
}

/// The error when none of the record's addresses answered (`last`: the last failure).
fn unreachable_store(record: &StoreRecord, last: Option<&String>) -> Error {
    Error::new(
        ErrorKind::Bootstrap,
        format!(
            "cannot reach the job's store at any address rank 0 published ({}): {}; on rank 0's \
             host, set PSY_ADDR to its address that the other hosts reach",
            record.hosts.join(", "),
            last.map(String::as_str).unwrap_or("no address to try")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_its_text_form_which_pmi_1_can_carry() {
        let r = StoreRecord {
            port: 40123,
            hosts: vec!["10.0.0.1".into(), "192.168.1.4".into()],
            secret: "ab12".into(),
        };
        let text = r.encode();
        assert!(!text.contains(' ') && !text.contains('='), "{text}");
        assert_eq!(StoreRecord::decode(&text).unwrap(), r);
    }

    #[test]
    fn records_of_another_form_are_refused_by_name() {
        for bad in [
            "",
            "psyne-store-2/1/a/b",
            "psyne-store-1/notaport/a/b",
            "psyne-store-1/1//b",
            "psyne-store-1/1/a",
            "psyne-store-1/1/a/b/extra",
        ] {
            let e = StoreRecord::decode(bad).unwrap_err();
            assert!(e.to_string().contains(RECORD_KEY), "{bad:?}: {e}");
        }
    }
}
