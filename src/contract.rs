//! The contract between a launcher and a rank: the environment variables psyrun sets for every
//! rank and that [`crate::init`] reads. This module is the single place that names them.
//!
//! | variable | meaning |
//! |---|---|
//! | `PSY_RANK` | this rank, `0..PSY_WORLD_SIZE` |
//! | `PSY_WORLD_SIZE` | number of ranks in the job |
//! | `PSY_LOCAL_RANK` | this rank's index among the ranks on its host |
//! | `PSY_LOCAL_SIZE` | number of ranks on this host |
//! | `PSY_NODE_RANK` | index of this host in the job |
//! | `PSY_STORE` | `host:port` of the job's key-value store (served by psyrun) |
//! | `PSY_JOB_ID` | a job identifier, unique per launch (names keys, logs, shared memory) |
//! | `PSY_JOB_SECRET` | hex secret every connection proves knowledge of; never on a command line |
//! | `PSY_TIMEOUT` | seconds any single wait may last before it fails (default 300) |
//! | `PSY_ALGO` | algorithm overrides, e.g. `allreduce:ring,broadcast:pipeline` (see [`crate::tuning`]) |
//! | `PSY_ADDR` | address this rank's listener advertises (default: the one that reaches the store) |
//! | `PSY_TRANSPORT` | `auto` (shared memory on one host, RDMA across where present, else TCP), `tcp`, `shm`, or `rdma` |
//! | `PSY_RDMA_DEVICE`, `PSY_RDMA_PORT`, ... | the RDMA adapter and port (see [`crate::transport::rdma::config`]) |
//!
//! psyrun also sets the names PyTorch's `env://` rendezvous expects (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`) so torch programs run under psyrun
//! unchanged. With only those set (torchrun, srun wrappers), rank 0 serves the store at
//! `MASTER_ADDR:MASTER_PORT`. With nothing set, a program is a world of one.

use crate::error::{Error, Result};
use std::time::Duration;

/// `PSY_RANK`
pub const RANK: &str = "PSY_RANK";
/// `PSY_WORLD_SIZE`
pub const WORLD_SIZE: &str = "PSY_WORLD_SIZE";
/// `PSY_LOCAL_RANK`
pub const LOCAL_RANK: &str = "PSY_LOCAL_RANK";
/// `PSY_LOCAL_SIZE`
pub const LOCAL_SIZE: &str = "PSY_LOCAL_SIZE";
/// `PSY_NODE_RANK`
pub const NODE_RANK: &str = "PSY_NODE_RANK";
/// `PSY_STORE`
pub const STORE: &str = "PSY_STORE";
/// `PSY_JOB_ID`
pub const JOB_ID: &str = "PSY_JOB_ID";
/// `PSY_JOB_SECRET`
pub const JOB_SECRET: &str = "PSY_JOB_SECRET";
/// `PSY_TIMEOUT`
pub const TIMEOUT: &str = "PSY_TIMEOUT";
/// `PSY_ALGO`
pub const ALGO: &str = "PSY_ALGO";
/// `PSY_ADDR`
pub const ADDR: &str = "PSY_ADDR";
/// `PSY_TRANSPORT`
pub const TRANSPORT: &str = "PSY_TRANSPORT";
/// PyTorch's names, in the order rank, world size, local rank, local world size, master address,
/// master port.
pub const TORCH_NAMES: [&str; 6] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
];

/// The default deadline of every wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Everything a launcher tells one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnv {
    /// This rank.
    pub rank: usize,
    /// Ranks in the job.
    pub world_size: usize,
    /// Index among the ranks on this host.
    pub local_rank: usize,
    /// Ranks on this host.
    pub local_size: usize,
    /// Index of this host.
    pub node_rank: usize,
    /// `host:port` of the store.
    pub store: String,
    /// The job identifier.
    pub job_id: String,
    /// The job secret, hex.
    pub secret: String,
    /// `MASTER_ADDR` for torch programs.
    pub master_addr: String,
    /// `MASTER_PORT` for torch programs (a port psyne itself does not use).
    pub master_port: u16,
}

impl RankEnv {
    /// The variables to set in the rank's environment, `PSY_*` and PyTorch's.
    pub fn to_vars(&self) -> Vec<(&'static str, String)> {
        vec![
            (RANK, self.rank.to_string()),
            (WORLD_SIZE, self.world_size.to_string()),
            (LOCAL_RANK, self.local_rank.to_string()),
            (LOCAL_SIZE, self.local_size.to_string()),
            (NODE_RANK, self.node_rank.to_string()),
            (STORE, self.store.clone()),
            (JOB_ID, self.job_id.clone()),
            (JOB_SECRET, self.secret.clone()),
            (TORCH_NAMES[0], self.rank.to_string()),
            (TORCH_NAMES[1], self.world_size.to_string()),
            (TORCH_NAMES[2], self.local_rank.to_string()),
            (TORCH_NAMES[3], self.local_size.to_string()),
            (TORCH_NAMES[4], self.master_addr.clone()),
            (TORCH_NAMES[5], self.master_port.to_string()),
        ]
    }
}

/// How this process was launched, as read from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// Under psyrun: the store is at `PSY_STORE`.
    Psyrun(RankEnv),
    /// Under torchrun or another launcher that sets PyTorch's names: rank 0 serves the store at
    /// `MASTER_ADDR:MASTER_PORT`.
    Torch {
        /// `RANK`
        rank: usize,
        /// `WORLD_SIZE`
        world_size: usize,
        /// `MASTER_ADDR:MASTER_PORT`
        master: String,
        /// `PSY_JOB_SECRET` if set; otherwise a key derived from the master address and
        /// `TORCHELASTIC_RUN_ID`, which keeps strangers out only by obscurity.
        secret: Option<String>,
    },
    /// Nothing set: a world of one.
    Alone,
}

fn parse_var<T: std::str::FromStr>(
    name: &str,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<T>> {
    match get(name) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            Error::config(format!(
                "environment variable {name}={v:?} is not valid; unset it or give a number"
            ))
        }),
    }
}

fn require<T: std::str::FromStr>(
    name: &str,
    get: &dyn Fn(&str) -> Option<String>,
    why: &str,
) -> Result<T> {
    parse_var(name, get)?
        .ok_or_else(|| Error::config(format!("{name} is not set but {why}; a launcher sets both")))
}

/// Reads the launch environment through `get` (normally `std::env::var`).
pub fn detect_with(get: &dyn Fn(&str) -> Option<String>) -> Result<Launch> {
    if let Some(store) = get(STORE) {
        let why = "PSY_STORE is";
        let rank: usize = require(RANK, get, why)?;
        let world_size: usize = require(WORLD_SIZE, get, why)?;
        check_rank(rank, world_size)?;
        let secret = get(JOB_SECRET).ok_or_else(|| {
            Error::config("PSY_STORE is set but PSY_JOB_SECRET is not; start the job with psyrun")
        })?;
        return Ok(Launch::Psyrun(RankEnv {
            rank,
            world_size,
            local_rank: parse_var(LOCAL_RANK, get)?.unwrap_or(rank),
            local_size: parse_var(LOCAL_SIZE, get)?.unwrap_or(world_size),
            node_rank: parse_var(NODE_RANK, get)?.unwrap_or(0),
            store,
            job_id: get(JOB_ID).unwrap_or_else(|| "psyne".into()),
            secret,
            master_addr: get(TORCH_NAMES[4]).unwrap_or_default(),
            master_port: parse_var(TORCH_NAMES[5], get)?.unwrap_or(0),
        }));
    }
    let rank: Option<usize> = parse_var(TORCH_NAMES[0], get)?;
    let world_size: Option<usize> = parse_var(TORCH_NAMES[1], get)?;
    match (rank, world_size) {
        (None, None) => Ok(Launch::Alone),
        (Some(rank), Some(world_size)) => {
            check_rank(rank, world_size)?;
            if world_size == 1 {
                return Ok(Launch::Alone);
            }
            let why = "RANK and WORLD_SIZE are";
            let addr: String = require(TORCH_NAMES[4], get, why)?;
            let port: u16 = require(TORCH_NAMES[5], get, why)?;
            Ok(Launch::Torch {
                rank,
                world_size,
                master: format!("{addr}:{port}"),
                secret: get(JOB_SECRET),
            })
        }
        _ => Err(Error::config(
            "only one of RANK and WORLD_SIZE is set; set both (or neither for a world of one)",
        )),
    }
}

fn check_rank(rank: usize, world_size: usize) -> Result<()> {
    if world_size == 0 || rank >= world_size {
        return Err(Error::config(format!(
            "rank {rank} is not inside a world of {world_size}: the rank must be in 0..world size"
        )));
    }
    Ok(())
}

/// Reads the launch environment of this process.
pub fn detect() -> Result<Launch> {
    detect_with(&|name| std::env::var(name).ok())
}

/// The deadline of every wait: `PSY_TIMEOUT` seconds (fractions allowed), else [`DEFAULT_TIMEOUT`].
pub fn timeout_with(get: &dyn Fn(&str) -> Option<String>) -> Result<Duration> {
    match get(TIMEOUT) {
        None => Ok(DEFAULT_TIMEOUT),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            _ => Err(Error::config(format!(
                "{TIMEOUT}={v:?} is not a positive number of seconds; e.g. PSY_TIMEOUT=60"
            ))),
        },
    }
}

/// [`timeout_with`] on this process's environment.
pub fn timeout() -> Result<Duration> {
    timeout_with(&|name| std::env::var(name).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn nothing_set_is_a_world_of_one() {
        assert_eq!(detect_with(&env(&[])).unwrap(), Launch::Alone);
    }

    #[test]
    fn launcher_vars_round_trip() {
        let want = RankEnv {
            rank: 2,
            world_size: 4,
            local_rank: 2,
            local_size: 4,
            node_rank: 0,
            store: "127.0.0.1:5000".into(),
            job_id: "j1".into(),
            secret: "00ff".into(),
            master_addr: "127.0.0.1".into(),
            master_port: 29500,
        };
        let vars = want.to_vars();
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(detect_with(&env(&pairs)).unwrap(), Launch::Psyrun(want));
    }

    #[test]
    fn torch_names_alone_mean_rank0_serves_the_store() {
        let got = detect_with(&env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap();
        assert!(
            matches!(got, Launch::Torch { rank: 1, world_size: 2, ref master, .. } if master == "10.0.0.1:29500")
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = detect_with(&env(&[("RANK", "x"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(err.message().contains("RANK"), "{err}");
        let err = detect_with(&env(&[("RANK", "3"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(err.message().contains("rank 3"), "{err}");
        let err = timeout_with(&env(&[("PSY_TIMEOUT", "-1")])).unwrap_err();
        assert!(err.message().contains("PSY_TIMEOUT"), "{err}");
        assert_eq!(
            timeout_with(&env(&[("PSY_TIMEOUT", "1.5")])).unwrap(),
            Duration::from_millis(1500)
        );
    }
}
