//! [`native_group`]: psyne's own engine in an MPI job, bootstrapped over MPI, so that one job can
//! run (and compare) both backends.

use super::{layout, MpiComm};
use crate::auth::Secret;
use crate::bootstrap::{StoreServer, TcpStore};
use crate::comm::Communicator;
use crate::error::{Error, ErrorKind, Result};
use crate::group::{Group, GroupOptions};
use crate::reduce::ReduceOp;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Forms a native [`Group`] of the same ranks as `comm` (rank `i` of the group is MPI rank `i`).
/// Every rank of `comm` must call it.
///
/// Rank 0 serves the group's store (on 127.0.0.1 when every rank runs on its host, else on every
/// interface, advertising `PSY_ADDR` if set or else the address its host name resolves to) with
/// a fresh secret, and broadcasts where it is and the secret over MPI; every rank then connects
/// to it and forms the group as under psyrun. The group listens on the interface that reaches
/// the store (or `PSY_ADDR`), uses `PSY_ALGO` for its algorithm policy, and `timeout` as the
/// deadline of forming it and of every later wait. The store lives as long as the group.
///
/// Drop the group before `comm`: dropping `comm` finalizes MPI, and the ranks should be done
/// with the group by then.
pub fn native_group(comm: &MpiComm, timeout: Duration) -> Result<Group> {
    let (rank, size) = (comm.rank(), comm.size());
    // Where rank 0 is, and whether everyone is on that host.
    let name = comm.processor_name();
    let first = comm.broadcast_bytes(name.clone().into_bytes())?;
    let mut same = [u8::from(first == name.as_bytes())];
    comm.all_reduce(&mut same, ReduceOp::Min)?;
    let one_host = same[0] == 1;

    let mut server = None;
    let message = comm.broadcast_bytes(if rank == 0 {
        let started = Secret::generate().and_then(|secret| {
            let (s, addr) = serve(&name, one_host, secret.clone())?;
            Ok((s, addr, secret.to_hex()))
        });
        match started {
            Ok((s, addr, hex)) => {
                server = Some(s);
                layout::store_message(Ok((&addr, &hex)))
            }
            Err(e) => layout::store_message(Err(e.message())),
        }
        .into_bytes()
    } else {
        Vec::new()
    })?;
    let message = String::from_utf8(message).map_err(|_| {
        Error::new(
            ErrorKind::Bootstrap,
            "native_group: rank 0's store message is not UTF-8",
        )
    })?;
    let (addr, secret) = layout::parse_store_message(&message)?;
    let secret = Secret::from_hex(&secret)?;
    // After the exchange over MPI: a rank that fails from here on makes the others time out
    // instead of waiting in an MPI call forever.
    let tunables = crate::options::Tunables::from_env()?;

    let store = TcpStore::connect(&addr, &secret, Instant::now() + timeout)
        .map_err(|e| e.context(format!("native_group: rank {rank} of {size}")))?;
    let bind_ip = crate::init::advertised_ip(&store)?;
    let options = GroupOptions {
        rank,
        size,
        prefix: "mpi/world".into(),
        secret,
        bind_ip,
        tunables: crate::options::Tunables {
            timeout,
            ..tunables
        },
        job_id: format!(
            "mpi{}",
            std::env::var("OMPI_MCA_ess_base_jobid").unwrap_or_default()
        ),
        host_key: crate::transport::host_key(),
    };
    Group::builder(options)
        .store(&store)
        .serving(server)
        .build()
}

/// Rank 0's store: its server and the address the others connect to.
fn serve(host: &str, one_host: bool, secret: Secret) -> Result<(StoreServer, String)> {
    if one_host {
        let server = StoreServer::bind("127.0.0.1:0", secret)?;
        let addr = server.addr().to_string();
        return Ok((server, addr));
    }
    let server = StoreServer::bind("0.0.0.0:0", secret)?;
    let port = server.addr().port();
    let advertised = match std::env::var(crate::names::ADDR) {
        Ok(ip) => match ip.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port).to_string(),
            Err(_) => format!("{ip}:{port}"),
        },
        Err(_) => resolve(host, port).unwrap_or_else(|| format!("{host}:{port}")),
    };
    Ok((server, advertised))
}

/// The first address `host` resolves to that another host could use (not loopback), IPv4 first.
fn resolve(host: &str, port: u16) -> Option<String> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .ok()?
        .filter(|a| !a.ip().is_loopback() && !a.ip().is_unspecified())
        .collect();
    addrs
        .iter()
        .find(|a| matches!(a.ip(), IpAddr::V4(_)))
        .or_else(|| addrs.first())
        .map(|a| a.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_serves_on_loopback() {
        let (server, addr) = serve("anything", true, Secret::derive("t")).unwrap();
        assert_eq!(addr, server.addr().to_string());
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    }

    #[test]
    fn many_hosts_serve_on_every_interface_and_advertise_a_reachable_name() {
        // `localhost` resolves only to loopback, which no other host could use: the name itself
        // is advertised, for the other hosts to resolve.
        let secret = Secret::derive("t");
        let (server, addr) = serve("localhost", false, secret.clone()).unwrap();
        assert!(server.addr().ip().is_unspecified(), "{}", server.addr());
        assert_eq!(addr, format!("localhost:{}", server.addr().port()));
        let deadline = Instant::now() + Duration::from_secs(5);
        TcpStore::connect(&addr, &secret, deadline).unwrap();
        assert_eq!(resolve("localhost", 1), None);
        assert_eq!(resolve("192.0.2.7", 9).as_deref(), Some("192.0.2.7:9"));
    }
}
