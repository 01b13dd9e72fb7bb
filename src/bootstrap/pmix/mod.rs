//! Forming a job where a PMIx server started this process: Open MPI's `mpirun`, PRRTE's
//! `prterun`, `srun --mpi=pmix`. They set `PMIX_NAMESPACE`, `PMIX_RANK` and `PMIX_SERVER_URI*`
//! in every process; psyne then loads `libpmix.so.2` ([`ffi`]), learns its rank and the job's
//! size from the server, and meets the other ranks in one PMIx fence:
//!
//! 1. rank 0 starts the job's store (the same [`StoreServer`] psyrun serves, on an ephemeral
//!    port), makes a fresh job secret, and puts one record under [`RECORD_KEY`]: the store's
//!    port, the addresses it may be reached at, and the secret;
//! 2. every rank commits and enters one fence over the whole namespace (with
//!    `PMIX_COLLECT_DATA`, under `PSY_TIMEOUT`);
//! 3. every rank reads rank 0's record, connects to the store proving the secret, and from
//!    there forms its group as under psyrun (links, shared memory, revoke, agree, shrink);
//! 4. PMIx is finalized: psyne needs it only to start.
//!
//! The secret travels only through the PMIx server, which hands a job's data only to the
//! processes it started (PMIx authenticates each client's connection); it is never on a command
//! line or in the environment. The store's addresses: `PSY_ADDR` if set; `127.0.0.1` when every
//! rank is on rank 0's node (`PMIX_LOCAL_SIZE` equals the job size), and then the store listens
//! on loopback only; else every up, non-loopback IPv4 address of rank 0's host, tried in order.
//!
//! Where the library is missing, [`Client::connect`] says so and how to install it, and the
//! launch is refused as before (psyne cannot reach the other ranks).

mod addresses;
pub mod ffi;

use crate::auth::Secret;
use crate::bootstrap::{StoreServer, TcpStore};
use crate::error::{Error, ErrorKind, Result};
use ffi::{Api, Data, Info, Proc, Value};
use std::ffi::{c_int, CStr, CString};
use std::time::{Duration, Instant};

/// The key rank 0's record is put under.
pub const RECORD_KEY: &str = "psyne.store";

/// `PMIX_JOB_SIZE`: the number of processes in the job.
const JOB_SIZE: &str = "pmix.job.size";
/// `PMIX_LOCAL_SIZE`: the job's processes on this node.
const LOCAL_SIZE: &str = "pmix.local.size";
/// `PMIX_LOCAL_RANK`: this process's index among them.
const LOCAL_RANK: &str = "pmix.lrank";
/// `PMIX_NODEID`: this node's index in the job.
const NODE_ID: &str = "pmix.nodeid";
/// `PMIX_COLLECT_DATA`
const COLLECT_DATA: &str = "pmix.collect";
/// `PMIX_TIMEOUT` (seconds)
const TIMEOUT: &str = "pmix.timeout";

/// A connection to this process's PMIx server; finalized on drop.
pub struct Client {
    api: Api,
    me: Proc,
}

/// Where this process sits in the job, as the PMIx server tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// This process's rank.
    pub rank: usize,
    /// The number of processes in the job.
    pub size: usize,
    /// Its index among the job's processes on its node.
    pub local_rank: usize,
    /// The job's processes on its node.
    pub local_size: usize,
    /// Its node's index in the job.
    pub node: usize,
    /// The job's PMIx namespace.
    pub namespace: String,
}

impl Client {
    /// Loads the PMIx library and connects to the server named in the environment.
    pub fn connect() -> Result<Client> {
        let api = Api::load().map_err(not_loaded)?;
        let mut me = Proc {
            nspace: [0; 256],
            rank: 0,
        };
        // SAFETY: `me` is a valid pmix_proc_t for PMIx_Init to fill; no options are passed (a
        // null array of length 0).
        let status = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
        if status != ffi::SUCCESS {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "PMIx_Init failed: {}; is the launcher that set PMIX_SERVER_URI still \
                     running?",
                    api.describe(status)
                ),
            ));
        }
        Ok(Client { api, me })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.me.rank as usize
    }

    /// The job's namespace.
    pub fn namespace(&self) -> String {
        // SAFETY: PMIx_Init wrote a NUL-terminated namespace into the array, which the zeroed
        // initial value keeps terminated in any case (it holds one more byte than PMIx fills).
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Rank, size, local rank and size, and node, from the server.
    pub fn placement(&self, deadline: Instant) -> Result<Placement> {
        let size = self.job_number(JOB_SIZE, deadline)?;
        Ok(Placement {
            rank: self.rank(),
            size,
            local_rank: self.own_number(LOCAL_RANK, deadline)?,
            local_size: self.job_number(LOCAL_SIZE, deadline)?,
            node: self.own_number(NODE_ID, deadline)?,
            namespace: self.namespace(),
        })
    }

    /// A job-level number (`key` of the whole namespace).
    fn job_number(&self, key: &str, deadline: Instant) -> Result<usize> {
        self.number(ffi::RANK_WILDCARD, key, deadline)
    }

    /// A number about this process.
    fn own_number(&self, key: &str, deadline: Instant) -> Result<usize> {
        self.number(self.me.rank, key, deadline)
    }

    fn number(&self, rank: u32, key: &str, deadline: Instant) -> Result<usize> {
        self.get(rank, key, deadline, |v| {
            // SAFETY: each arm reads the union member PMIx's type tag says holds the value.
            let n = unsafe {
                match v.kind {
                    ffi::TYPE_UINT8 => u64::from(v.data.uint8),
                    ffi::TYPE_UINT16 => u64::from(v.data.uint16),
                    ffi::TYPE_UINT32 | ffi::TYPE_PROC_RANK => u64::from(v.data.uint32),
                    ffi::TYPE_UINT64 => v.data.uint64,
                    ffi::TYPE_SIZE => v.data.size as u64,
                    ffi::TYPE_INT | ffi::TYPE_INT32 => u64::try_from(v.data.integer).ok()?,
                    _ => return None,
                }
            };
            usize::try_from(n).ok()
        })
    }

    /// The string `key` that process `rank` put.
    pub fn string(&self, rank: usize, key: &str, deadline: Instant) -> Result<String> {
        let rank = u32::try_from(rank).map_err(|_| Error::config("a PMIx rank is 32 bits"))?;
        self.get(rank, key, deadline, |v| {
            if v.kind != ffi::TYPE_STRING {
                return None;
            }
            // SAFETY: a PMIX_STRING value holds a NUL-terminated string (or NULL, checked),
            // owned by the value until it is destructed, after this copy.
            let p = unsafe { v.data.string };
            if p.is_null() {
                return None;
            }
            // SAFETY: as above.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
    }

    /// `PMIx_Get` of `key` about process `rank`, read by `read` (`None`: not the type expected).
    fn get<T>(
        &self,
        rank: u32,
        key: &str,
        deadline: Instant,
        read: impl FnOnce(&Value) -> Option<T>,
    ) -> Result<T> {
        let proc = Proc {
            nspace: self.me.nspace,
            rank,
        };
        let ckey = c_key(key)?;
        let info = [timeout_info(deadline)?];
        let mut value: *mut Value = std::ptr::null_mut();
        // SAFETY: `proc`, `ckey` and `info` are valid for the call; PMIx writes a pointer to a
        // value it allocated into `value`, or leaves it null on failure.
        let status =
            unsafe { (self.api.get)(&proc, ckey.as_ptr(), info.as_ptr(), info.len(), &mut value) };
        if status != ffi::SUCCESS || value.is_null() {
            return Err(self.failed(&format!("PMIx_Get of {key} (rank {rank})"), status));
        }
        // SAFETY: `value` points to a valid pmix_value_t PMIx allocated for us.
        let got = read(unsafe { &*value });
        // SAFETY: PMIX_VALUE_RELEASE: destruct frees what the value owns, then the value itself
        // is freed with the C allocator PMIx allocated it with; it is not used again.
        unsafe {
            (self.api.value_destruct)(value);
            libc::free(value.cast());
        }
        got.ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("PMIx gave {key} (rank {rank}) in a form psyne does not read"),
            )
        })
    }

    /// Puts `value` under `key` for every process of the job ([`ffi::SCOPE_GLOBAL`]).
    pub fn put_string(&self, key: &str, value: &str) -> Result<()> {
        let ckey = c_key(key)?;
        let cvalue = CString::new(value)
            .map_err(|_| Error::config("a PMIx value may not contain a NUL byte"))?;
        let mut v = Value {
            kind: ffi::TYPE_STRING,
            data: Data {
                string: cvalue.as_ptr().cast_mut(),
            },
        };
        // SAFETY: `ckey` and `v` are valid for the call; PMIx copies the string (it does not
        // keep or free the pointer), and `cvalue` outlives the call.
        let status = unsafe { (self.api.put)(ffi::SCOPE_GLOBAL, ckey.as_ptr(), &mut v) };
        self.check(status, "PMIx_Put")?;
        // SAFETY: PMIx_Commit takes no arguments.
        let status = unsafe { (self.api.commit)() };
        self.check(status, "PMIx_Commit")
    }

    /// Commits (nothing, or what was put) and waits until every process of the job has entered
    /// the same fence, collecting their data, or `deadline` passes.
    pub fn fence(&self, deadline: Instant) -> Result<()> {
        // SAFETY: PMIx_Commit takes no arguments.
        let status = unsafe { (self.api.commit)() };
        self.check(status, "PMIx_Commit")?;
        let all = Proc {
            nspace: self.me.nspace,
            rank: ffi::RANK_WILDCARD,
        };
        let info = [
            Info::flag(COLLECT_DATA, true).ok_or_else(|| Error::config("PMIx key"))?,
            timeout_info(deadline)?,
        ];
        // SAFETY: one valid proc and two valid options, all alive for the call.
        let status = unsafe { (self.api.fence)(&all, 1, info.as_ptr(), info.len()) };
        self.check(
            status,
            "PMIx_Fence over the whole job (is every rank starting psyne?)",
        )
    }

    fn check(&self, status: c_int, what: &str) -> Result<()> {
        if status == ffi::SUCCESS {
            Ok(())
        } else {
            Err(self.failed(what, status))
        }
    }

    fn failed(&self, what: &str, status: c_int) -> Error {
        Error::new(
            ErrorKind::Bootstrap,
            format!("{what} failed: {}", self.api.describe(status)),
        )
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: no options (a null array of length 0). PMIx counts its initializations (an
        // MPI library in the same process may hold one), so this ends only psyne's.
        unsafe { (self.api.finalize)(std::ptr::null(), 0) };
    }
}

/// The error for a PMIx library that would not load (`why`: the loader's words).
fn not_loaded(why: String) -> Error {
    Error::new(
        ErrorKind::Bootstrap,
        format!(
            "the PMIx library could not be loaded ({why}); {}",
            ffi::INSTALL_HINT
        ),
    )
}

fn c_key(key: &str) -> Result<CString> {
    CString::new(key).map_err(|_| Error::config("a PMIx key may not contain a NUL byte"))
}

/// `PMIX_TIMEOUT` for the time left until `deadline`, in whole seconds (at least 1).
fn timeout_info(deadline: Instant) -> Result<Info> {
    let left = deadline.saturating_duration_since(Instant::now());
    let secs = c_int::try_from(left.as_secs() + 1).unwrap_or(c_int::MAX);
    Info::int(TIMEOUT, secs).ok_or_else(|| Error::config("PMIx key"))
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
    /// `psyne-store-1 PORT HOST,HOST SECRET`.
    pub fn encode(&self) -> String {
        format!(
            "{RECORD_VERSION} {} {} {}",
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
        let mut parts = text.split(' ');
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

/// Meets the job's other ranks through PMIx (see the module docs); every wait ends by
/// `deadline`.
pub fn rendezvous(client: &Client, placement: &Placement, deadline: Instant) -> Result<Rendezvous> {
    if placement.rank == 0 {
        let secret = Secret::generate()?;
        let all_here = placement.local_size == placement.size;
        let (bind, hosts) = addresses::for_store(all_here)?;
        let server = StoreServer::bind(format!("{bind}:0"), secret.clone())
            .map_err(|e| e.context("rank 0 serving the job's store"))?;
        let record = StoreRecord {
            port: server.addr().port(),
            hosts,
            secret: secret.to_hex(),
        };
        client.put_string(RECORD_KEY, &record.encode())?;
        client.fence(deadline)?;
        let store = connect_any(&record, &secret, deadline)?;
        Ok(Rendezvous {
            store,
            server: Some(server),
            secret,
        })
    } else {
        client.fence(deadline)?;
        let record = StoreRecord::decode(&client.string(0, RECORD_KEY, deadline)?)?;
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
    fn a_record_survives_its_text_form() {
        let r = StoreRecord {
            port: 40123,
            hosts: vec!["10.0.0.1".into(), "192.168.1.4".into()],
            secret: "ab12".into(),
        };
        assert_eq!(StoreRecord::decode(&r.encode()).unwrap(), r);
    }

    #[test]
    fn records_of_another_form_are_refused_by_name() {
        for bad in [
            "",
            "psyne-store-2 1 a b",
            "psyne-store-1 notaport a b",
            "psyne-store-1 1  b",
            "psyne-store-1 1 a",
            "psyne-store-1 1 a b extra",
        ] {
            let e = StoreRecord::decode(bad).unwrap_err();
            assert!(e.to_string().contains(RECORD_KEY), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_missing_library_is_reported_with_what_to_install() {
        let e = Api::load_from(&["libpsyne-no-such-pmix.so".into()])
            .map(|_| ())
            .map_err(not_loaded)
            .expect_err("no such library");
        assert_eq!(e.kind(), ErrorKind::Bootstrap);
        assert!(e.to_string().contains("libpmix2"), "{e}");
        assert!(e.to_string().contains("libpsyne-no-such-pmix.so"), "{e}");
    }
}
