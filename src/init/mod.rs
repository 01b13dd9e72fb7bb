//! [`init`]: a group from whatever launched this process (see [`crate::contract`]).

use crate::auth::Secret;
use crate::bootstrap::{StoreServer, TcpStore};
use crate::error::{Error, Result};
use crate::group::{Group, GroupOptions};
use crate::launch::{self, Launch};
use crate::names;
use crate::options::Tunables;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Instant;

mod roll_call;
mod service;

/// Joins the job this process belongs to: under psyrun through `PSY_STORE`; under torchrun or any
/// launcher that sets `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`, with rank 0 serving
/// the store at the master address (where every process first checks in, so that two with the
/// same `RANK`, or with different `WORLD_SIZE`s, fail the whole job with an error naming them:
/// see `roll_call.rs`); under a PMIx server (Open MPI's `mpirun`, `srun
/// --mpi=pmix`), through PMIx, with rank 0 serving the store; alone, as a world of one.
///
/// Started by another launcher (MPICH's `mpiexec`, a plain `srun`: see [`crate::contract`]) as
/// one of several processes, or by a PMIx one where the PMIx library cannot be loaded, it fails
/// with [`crate::ErrorKind::Bootstrap`], naming the launcher, the variables it set and the ways
/// to run the program as one job, rather than making every process a world of one. A world of
/// one from such a launcher is fine.
pub fn init() -> Result<Group> {
    let tunables = Tunables::from_env()?;
    let deadline = Instant::now() + tunables.timeout;
    match launch::detect()? {
        Launch::Alone => Ok(Group::alone()),
        Launch::Foreign(launch) => service::form(&launch, &tunables, deadline),
        Launch::Psyrun(env) => {
            let secret = Secret::from_hex(&env.secret)?;
            let store = Arc::new(TcpStore::connect(&env.store, &secret, deadline)?);
            let member = Membership {
                rank: env.rank,
                size: env.world_size,
                prefix: format!("{}/world", env.job_id),
                job_id: env.job_id.clone(),
            };
            let options = member.options(secret, advertised_ip(&store)?, &tunables);
            let job_id = env.job_id.clone();
            let group = Group::builder(options)
                .shared_store(store.clone())
                .build()?;
            group.report_losses_to(crate::group::losses::LossReport { store, job_id });
            Ok(group)
        }
        Launch::Torch {
            rank,
            world_size,
            master,
            secret,
        } => {
            let run_id = std::env::var("TORCHELASTIC_RUN_ID").unwrap_or_default();
            let secret = match secret {
                Some(hex) => Secret::from_hex(&hex)?,
                None => Secret::derive(&format!("psyne:{master}:{run_id}")),
            };
            let master = store_address(&master)?;
            let server = if rank == 0 {
                Some(serve_master(&master, secret.clone())?)
            } else {
                None
            };
            let store = Arc::new(TcpStore::connect(&master, &secret, deadline)?);
            // Nothing but each process's environment says who it is: check in first.
            roll_call::check_in(&*store, rank, world_size, deadline)?;
            let member = Membership {
                rank,
                size: world_size,
                prefix: "torch/world".into(),
                job_id: format!("torch{run_id}"),
            };
            let options = member.options(secret, advertised_ip(&store)?, &tunables);
            let group = Group::builder(options)
                .shared_store(store.clone())
                .serving(server)
                .build()?;
            roll_call::verdict_since(&*store, rank)?;
            Ok(group)
        }
    }
}

/// Where a rank sits in the job it joins, and the names of that job's keys and shared memory.
struct Membership {
    rank: usize,
    size: usize,
    /// The store keys' prefix.
    prefix: String,
    /// Names the job's shared memory.
    job_id: String,
}

impl Membership {
    /// The options of the group this rank forms: its seat, the job secret, the address its
    /// listener advertises, and the tunables read from the environment.
    fn options(self, secret: Secret, bind_ip: IpAddr, tunables: &Tunables) -> GroupOptions {
        GroupOptions {
            rank: self.rank,
            size: self.size,
            prefix: self.prefix,
            secret,
            bind_ip,
            tunables: tunables.clone(),
            job_id: self.job_id,
            host_key: crate::transport::host_key(),
        }
    }
}

/// Under torchrun the agent's own store already listens on `MASTER_PORT`; psyne then uses the
/// next port.
fn store_address(master: &str) -> Result<String> {
    if std::env::var("TORCHELASTIC_USE_AGENT_STORE")
        .map(|v| v.eq_ignore_ascii_case("true"))
        .unwrap_or(false)
    {
        let (host, port) = master
            .rsplit_once(':')
            .ok_or_else(|| Error::config("MASTER_ADDR:MASTER_PORT is malformed"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| Error::config("MASTER_PORT is not a port number"))?;
        return Ok(format!("{host}:{}", port.wrapping_add(1)));
    }
    Ok(master.to_string())
}

/// Rank 0's store: on the master address if it is one of this host's, else on every interface.
fn serve_master(master: &str, secret: Secret) -> Result<StoreServer> {
    match StoreServer::bind(master, secret.clone()) {
        Ok(s) => Ok(s),
        Err(_) => {
            let port = master.rsplit_once(':').map(|(_, p)| p).unwrap_or("0");
            StoreServer::bind(format!("0.0.0.0:{port}"), secret).map_err(|e| {
                e.context("rank 0 serves the store at MASTER_ADDR:MASTER_PORT; is the port free?")
            })
        }
    }
}

/// `PSY_ADDR` if set, else the local address of the connection to the store (the interface that
/// reaches the other hosts).
pub(crate) fn advertised_ip(store: &TcpStore) -> Result<IpAddr> {
    if let Ok(addr) = std::env::var(names::ADDR) {
        return (addr.as_str(), 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip())
            .ok_or_else(|| {
                Error::config(format!("PSY_ADDR={addr:?} is not an address of this host"))
            });
    }
    Ok(store.local_addr()?.ip())
}
