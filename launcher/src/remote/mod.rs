//! Jobs on several hosts: `psyrun -H a:2,b:2 -n 4 prog`, `--hostfile`, a Slurm allocation.
//!
//! psyrun reaches every host once ([`preflight`]): over SSH ([`ssh`], honouring
//! `~/.ssh/config` through [`ssh_config`]), as a local child for this machine, or through `srun`
//! inside a Slurm allocation. On each host it runs itself as an agent ([`agent`]), which says
//! hello; the job is placed only when every host has answered, and started only when every host
//! has checked its part ([`launch`]). The agent spawns and binds its ranks there, streams their
//! output back, and reports how they end; psyrun's one [`crate::supervise::Supervisor`] decides
//! for the whole job and stops ranks through the agents. Everything between psyrun and an agent
//! is in [`wire`]; each link ([`link`]) watches a heartbeat in both directions, so a lost host
//! fails the job (naming it) and a lost launcher makes every agent stop its ranks.

pub mod agent;
pub mod launch;
pub mod link;
pub mod preflight;
pub mod ssh;
pub mod ssh_config;
pub mod wire;

pub use preflight::{LauncherKind, PreflightSettings};

use crate::args::{EnvVar, Launch};
use crate::hosts::HostList;

/// The `--dry-run` listing of a multi-host job: how each host is reached, then each rank's
/// host, program, arguments, working directory and `-x` variables. Nothing is connected to, so a
/// host without a slot count is assumed to have as many cores as this machine (said so).
pub fn describe(launch: &Launch, hosts: &HostList, settings: &PreflightSettings) -> String {
    let world = launch.world_size();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = format!(
        "psyrun: dry run: {world} rank{} on {} host{}; nothing was started\n",
        if world == 1 { "" } else { "s" },
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" }
    );
    for h in hosts.iter() {
        let slots = h.slots.map_or_else(
            || format!("its cores (assumed {cores}, like this machine, until connected)"),
            |s| s.to_string(),
        );
        out.push_str(&format!(
            "host {}: slots {slots}; {}\n",
            h.name,
            preflight::describe_route(h, settings)
        ));
    }
    let placements = match crate::hosts::place_by(
        hosts,
        world,
        |_| cores,
        launch.binding.oversubscribe,
        launch.binding.map_by == Some(crate::binding::MapBy::Node),
    ) {
        Ok(p) => p,
        Err(e) => {
            out.push_str(&format!("placement fails: {e}\n"));
            return out;
        }
    };
    let apps = launch.app_of_ranks();
    for (p, &a) in placements.iter().zip(&apps) {
        let app = &launch.apps[a];
        let host = hosts.hosts().get(p.host).map_or("?", |h| h.name.as_str());
        let command: Vec<String> = std::iter::once(app.program.as_os_str())
            .chain(app.args.iter().map(|x| x.as_os_str()))
            .map(crate::shell_quote)
            .collect();
        out.push_str(&format!(
            "rank {} on {host} (local rank {} of {}, node {})\n  command: {}\n",
            p.rank,
            p.local_rank,
            p.local_size,
            p.node_rank,
            command.join(" ")
        ));
        if let Some(d) = &app.wdir {
            out.push_str(&format!("  cwd:     {}\n", d.display()));
        }
        if !app.env.is_empty() {
            let shown: Vec<String> = app
                .env
                .iter()
                .map(|v| match v {
                    EnvVar::Forward(n) => format!("{n}=<from psyrun's environment>"),
                    EnvVar::Set(n, val) => format!("{n}={}", crate::shell_quote(val)),
                })
                .collect();
            out.push_str(&format!("  -x:      {}\n", shown.join(" ")));
        }
    }
    out
}
