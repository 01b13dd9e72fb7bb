//! A job's identity and what every rank is told: the job id, the secret, where the store and the
//! torch master are, and, from a [`Placement`], each rank's [`RankEnv`] (the contract of
//! [`psyne::contract`]).

use crate::output::Console;
use crate::placement::Placement;
use psyne::contract::RankEnv;
use psyne::internal::StoreServer;
use psyne::Secret;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Arc;

/// The loopback address a local job's store and torch master use.
pub const LOCAL_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// What is the same for every rank of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// Unique per launch (`psy-<pid>-<8 hex>`).
    pub job_id: String,
    /// The secret in hex, as `PSY_JOB_SECRET` carries it.
    pub secret_hex: String,
    /// `host:port` of the store.
    pub store: String,
    /// `MASTER_ADDR`.
    pub master_addr: String,
    /// `MASTER_PORT`: a free port, not the store's.
    pub master_port: u16,
    /// Which attempt of the job this is (`PSY_RESTART_COUNT`).
    pub restart_count: usize,
    /// `--max-restarts` (`PSY_MAX_RESTARTS`).
    pub max_restarts: usize,
}

/// A fresh job id: `psy-<psyrun's pid>-<8 random hex digits>`.
pub fn new_job_id() -> psyne::Result<String> {
    let random = Secret::generate()?.to_hex();
    Ok(format!(
        "psy-{}-{}",
        std::process::id(),
        random.get(..8).unwrap_or(&random)
    ))
}

/// A port on `ip` that nothing listens on right now and that is not in `avoid`: bound, read and
/// released. Another process may take it before the rank that is told about it binds it; that is
/// the same race torchrun's default `MASTER_PORT` choice has.
pub fn free_port(ip: IpAddr, avoid: &[u16]) -> std::io::Result<u16> {
    // The kernel does not hand out a port that is still bound, so one retry is plenty; a few
    // guard against a port in `avoid` that is no longer bound.
    let mut last = 0;
    for _ in 0..8 {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))?;
        last = listener.local_addr()?.port();
        if !avoid.contains(&last) {
            return Ok(last);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("the kernel keeps handing out port {last}, which is taken"),
    ))
}

/// This machine's host name (`gethostname`), or `localhost` if it has none.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable and its length is passed, so gethostname writes within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if rc != 0 || end == 0 {
        return "localhost".into();
    }
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Starts the job's store on `ip` (any free port), proving connections with `secret` and
/// serving at most [`store_clients`]`(world_size)` clients at once. Refused connections are
/// reported through `console`, so the line never splits a rank's.
pub fn serve_store(
    ip: IpAddr,
    secret: &Secret,
    world_size: usize,
    console: &Arc<Console>,
) -> psyne::Result<StoreServer> {
    let console = console.clone();
    let store = StoreServer::bind_logging(
        SocketAddr::new(ip, 0),
        secret.clone(),
        Arc::new(move |line: &str| console.message(line.trim_start_matches("psyne store: "))),
    )?;
    store.limit_clients(store_clients(world_size));
    Ok(store)
}

/// How many clients a job's store serves at once: one per rank (a rank connects once; a
/// program that makes a second group connects again), psyrun's own, and room for the tools of
/// a job, but not without bound.
pub fn store_clients(world_size: usize) -> usize {
    2 * world_size + 64
}

/// Removes the shared-memory segments job `job_id` left on this host; returns how many. Ranks
/// unlink their segments as soon as both ends have mapped them; a rank that died in between
/// leaves one behind.
pub fn remove_leftover_segments(job_id: &str) -> std::io::Result<usize> {
    let prefix = psyne::internal::job_prefix(job_id);
    psyne::internal::remove_job_segments(&prefix)
}

/// The environment of every rank: one [`RankEnv`] per placement, in rank order.
pub fn rank_envs(placements: &[Placement], job: &JobInfo) -> Vec<RankEnv> {
    placements
        .iter()
        .map(|p| rank_env(p, placements.len(), job))
        .collect()
}

/// The environment of the rank at `p` in a world of `world_size` ranks.
pub fn rank_env(p: &Placement, world_size: usize, job: &JobInfo) -> RankEnv {
    RankEnv {
        rank: p.rank,
        world_size,
        local_rank: p.local_rank,
        local_size: p.local_size,
        node_rank: p.node_rank,
        store: job.store.clone(),
        job_id: job.job_id.clone(),
        secret: job.secret_hex.clone(),
        master_addr: job.master_addr.clone(),
        master_port: job.master_port,
        restart_count: job.restart_count,
        max_restarts: job.max_restarts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{place, HostSlots};

    #[test]
    fn every_rank_gets_the_contract() {
        let job = JobInfo {
            job_id: "psy-1-abcdef01".into(),
            secret_hex: "00ff".into(),
            store: "127.0.0.1:4000".into(),
            master_addr: "127.0.0.1".into(),
            master_port: 4001,
            restart_count: 2,
            max_restarts: 3,
        };
        let envs = rank_envs(&place(&[HostSlots::local(3)], 3).unwrap(), &job);
        assert_eq!(envs.len(), 3);
        for (r, e) in envs.iter().enumerate() {
            assert_eq!(
                (
                    e.rank,
                    e.world_size,
                    e.local_rank,
                    e.local_size,
                    e.node_rank
                ),
                (r, 3, r, 3, 0)
            );
            assert_eq!(e.store, job.store);
            assert_eq!(e.secret, job.secret_hex);
            assert_eq!(e.master_port, 4001);
            let vars = e.to_vars();
            let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
            assert_eq!(get("RANK"), get("PSY_RANK"));
            assert_eq!(get("LOCAL_WORLD_SIZE"), get("PSY_LOCAL_SIZE"));
            assert_eq!(get("PSY_RESTART_COUNT").as_deref(), Some("2"));
            assert_eq!(get("TORCHELASTIC_RESTART_COUNT").as_deref(), Some("2"));
            assert_eq!(get("TORCHELASTIC_MAX_RESTARTS").as_deref(), Some("3"));
        }
    }

    #[test]
    fn job_ids_are_unique_and_ports_avoid_what_they_are_told() {
        let a = new_job_id().unwrap();
        let b = new_job_id().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("psy-{}-", std::process::id())));
        assert_eq!(a.rsplit('-').next().map(str::len), Some(8));
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        assert_ne!(free_port(LOCAL_ADDR, &[port]).unwrap(), port);
    }
}
