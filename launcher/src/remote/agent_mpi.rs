//! The agent's MPI services ([`crate::pmi`]) for its host's ranks: what each program is served,
//! decided here where the programs are, and one service per interface whose job-wide rounds go
//! through the job's store ([`StoreExchange`]). Aborts go to psyrun as [`FromAgent::Aborted`].

use super::agent_out::Out;
use super::protocol::{FromAgent, JobSpec};
use crate::error::Error;
use crate::pmi::exchange::StoreExchange;
use crate::pmi::serve::{self, HostServing, Served, SilenceCheck};
use crate::pmi::{self, Exchange, HostRanks, Interface, JobMap, MpiChoice, RankAccess};
use crate::spawn::RankCommand;
use psyne::Secret;
use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

/// The MPI side of an agent's job.
pub(crate) struct AgentMpi {
    serving: Option<HostServing>,
    /// What each of this host's ranks is served, in the order of its commands.
    served: Vec<Served>,
    world: usize,
}

impl AgentMpi {
    /// Decides what each rank of `job` (whose commands are `commands`) is served and starts the
    /// services needed; a usage error if a program cannot be served as `--mpi` asks.
    pub(crate) fn prepare(
        job: &JobSpec,
        commands: &[RankCommand],
        out: &Arc<Out>,
    ) -> Result<AgentMpi, Error> {
        let choice = MpiChoice::from_code(job.mpi.choice);
        let mut served: Vec<Served> = Vec::with_capacity(commands.len());
        let mut decided: Vec<(&RankCommand, Served)> = Vec::new();
        for c in commands {
            let known = decided
                .iter()
                .find(|(d, _)| d.program == c.program && d.args == c.args);
            let s = match known {
                Some((_, s)) => s.clone(),
                None => {
                    let s = serve::choose(choice, &c.program, &c.args).map_err(Error::Usage)?;
                    decided.push((c, s.clone()));
                    s
                }
            };
            served.push(s);
        }
        let world = job.mpi.hosts.iter().map(|(_, r)| r.len()).sum();
        let needed: Vec<Interface> = served
            .iter()
            .flat_map(|s| s.interfaces.iter().copied())
            .collect();
        let serving = if needed.is_empty() {
            None
        } else {
            Some(start(job, commands, &needed, out)?)
        };
        Ok(AgentMpi {
            serving,
            served,
            world,
        })
    }

    /// Removes what the ranks' MPI libraries left on this host (once they have all ended).
    pub(crate) fn remove_leftovers(&self) {
        if let Some(serving) = &self.serving {
            serving.remove_leftovers();
        }
    }

    /// The variables and descriptor the `i`th rank (rank `rank`) gets from its services.
    pub(crate) fn access(&mut self, i: usize, rank: u32) -> Result<RankAccess, Error> {
        let (Some(serving), Some(served)) = (self.serving.as_mut(), self.served.get(i)) else {
            return Ok(RankAccess::default());
        };
        serving
            .access(rank as usize, served)
            .map_err(|e| Error::Remote {
                message: format!("preparing rank {rank} for its MPI service: {e}"),
                code: crate::exit::LAUNCH_FAILED,
            })
    }

    /// For the `i`th rank (rank `rank`, running `program`): a check, run when it ends, that
    /// says whether it never spoke to its service ([`HostServing::silence_check`]).
    pub(crate) fn silence_check(
        &self,
        i: usize,
        rank: u32,
        program: &std::path::Path,
    ) -> Option<SilenceCheck> {
        let served = self.served.get(i)?;
        self.serving
            .as_ref()?
            .silence_check(rank as usize, served, program, self.world)
    }
}

/// Starts this host's services for `needed`, their rounds through the job's store.
fn start(
    job: &JobSpec,
    commands: &[RankCommand],
    needed: &[Interface],
    out: &Arc<Out>,
) -> Result<HostServing, Error> {
    let var = |name: &str| {
        commands
            .first()
            .and_then(|c| c.env.iter().rev().find(|(k, _)| k == OsStr::new(name)))
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    let store = var(psyne::contract::STORE).unwrap_or_default();
    let secret = var(psyne::contract::JOB_SECRET)
        .and_then(|hex| Secret::from_hex(&hex).ok())
        .ok_or_else(|| Error::Usage("the job's secret did not reach this host".into()))?;
    let timeout = Duration::from_millis(job.mpi.timeout_ms.max(1));
    let map = Arc::new(JobMap {
        job_id: job.job_id.clone(),
        world_size: job.mpi.hosts.iter().map(|(_, r)| r.len()).sum(),
        hosts: job
            .mpi
            .hosts
            .iter()
            .map(|(name, ranks)| HostRanks {
                name: name.clone(),
                ranks: ranks.iter().map(|&r| r as usize).collect(),
            })
            .collect(),
        appnum: job.mpi.appnum.iter().map(|&a| a as usize).collect(),
        tmpdir: std::env::temp_dir(),
    });
    let hosts = map.hosts.len();
    let exchange = |interface: Interface| -> Arc<dyn Exchange> {
        Arc::new(StoreExchange::new(
            interface.tag(),
            store.clone(),
            secret.clone(),
            hosts,
            timeout,
        ))
    };
    let out = out.clone();
    let report = pmi::on_abort(move |rank, code, message| {
        out.send(&FromAgent::Aborted {
            rank: rank as u32,
            code,
            message,
        });
    });
    let node = job.mpi.node as usize;
    HostServing::start(&map, node, needed, &exchange, report, timeout).map_err(|e| Error::Remote {
        message: format!("serving the job's MPI programs: {e}"),
        code: crate::exit::LAUNCH_FAILED,
    })
}
