//! Host-list discovery: which hosts a job runs on and how psyrun reaches them, decided before
//! anything is connected to. The hosts come from `-H` and `--hostfile` (merged), else from a
//! Slurm allocation; none means a job on this machine alone. The SSH side (keys, the client
//! configuration, the login, the psyrun to run there) is gathered here into the
//! [`PreflightSettings`] that [`crate::remote::preflight`] uses.

use crate::args::{Launch, RemoteArgs};
use crate::error::Error;
use crate::hosts::{self, HostList, HostsError};
use crate::remote::preflight::is_local_name;
use crate::remote::ssh::SshSettings;
use crate::remote::ssh_config::SshConfig;
use crate::remote::{LauncherKind, PreflightSettings};
use std::path::PathBuf;

/// The hosts of a multi-host job and how to reach them, or `None` for a job on this machine
/// alone: from `-H` and `--hostfile` (merged), else from a Slurm allocation. One `localhost`
/// host (with `--launcher auto`) is this machine: checked against its slots, then run locally.
///
/// Inside an allocation (`salloc`, an `sbatch` script; checked with Slurm 22.05.8) the hosts come
/// from `SLURM_JOB_NODELIST` with `SLURM_TASKS_PER_NODE` slots each, and the agents are started
/// through srun. `--launcher slurm` outside an allocation is a usage error, with or without `-H`:
/// srun there would queue for a new allocation per host.
pub fn host_list(launch: &Launch) -> Result<Option<(HostList, PreflightSettings)>, Error> {
    let r = &launch.remote;
    let named = named_hosts(r)?;
    refuse_srun_outside_allocation(r.launcher, &named)?;
    let (list, launcher) = hosts_or_allocation(named, r.launcher)?;
    if list.is_empty() {
        return Ok(None);
    }
    if launcher == LauncherKind::Auto && is_this_machine_alone(&list) && !r.check {
        check_fits_here(launch, &list)?;
        return Ok(None);
    }
    Ok(Some((list, preflight_settings(r, launcher)?)))
}

/// A host-list problem as the usage error it is.
fn usage(e: HostsError) -> Error {
    Error::Usage(e.to_string())
}

/// The hosts named by `-H` and `--hostfile`, merged in that order.
fn named_hosts(r: &RemoteArgs) -> Result<HostList, Error> {
    let mut list = HostList::new();
    for spec in &r.hosts {
        for h in hosts::spec::parse_host_spec(spec).map_err(usage)?.iter() {
            list.add(h.clone()).map_err(usage)?;
        }
    }
    if let Some(file) = &r.hostfile {
        for h in hosts::hostfile::read_hostfile(file).map_err(usage)?.iter() {
            list.add(h.clone()).map_err(usage)?;
        }
    }
    Ok(list)
}

/// `--launcher slurm` with named hosts but outside an allocation: srun there would make one
/// allocation (and wait in the queue for it) per host.
fn refuse_srun_outside_allocation(launcher: LauncherKind, named: &HostList) -> Result<(), Error> {
    if launcher == LauncherKind::Slurm
        && !named.is_empty()
        && std::env::var_os("SLURM_JOB_ID").is_none()
        && std::env::var_os("SLURM_JOBID").is_none()
    {
        return Err(Error::Usage(
            "--launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID is unset); run \
             psyrun inside salloc or sbatch, or use --launcher ssh"
                .into(),
        ));
    }
    Ok(())
}

/// The named hosts, or else (with `--launcher auto` or `slurm`) the hosts of the Slurm
/// allocation psyrun runs in, which are then reached through srun; with the launcher to use.
fn hosts_or_allocation(
    named: HostList,
    launcher: LauncherKind,
) -> Result<(HostList, LauncherKind), Error> {
    if !named.is_empty() || !matches!(launcher, LauncherKind::Auto | LauncherKind::Slurm) {
        return Ok((named, launcher));
    }
    match hosts::slurm::from_slurm_env(&|k| std::env::var(k).ok()).map_err(usage)? {
        Some(slurm) => Ok((slurm, LauncherKind::Slurm)),
        None if launcher == LauncherKind::Slurm => Err(Error::Usage(
            "--launcher slurm: not inside a Slurm allocation (SLURM_JOB_NODELIST is \
             unset); run psyrun inside salloc or sbatch, or name hosts with -H"
                .into(),
        )),
        None => Ok((named, launcher)),
    }
}

/// Whether the list is one host that is this machine by its name (`localhost`, `127.0.0.1`).
fn is_this_machine_alone(list: &HostList) -> bool {
    list.len() == 1 && list.iter().all(|h| is_local_name(&h.name))
}

/// Checks that the job fits the slots given for this machine (its cores where none are given).
fn check_fits_here(launch: &Launch, list: &HostList) -> Result<(), Error> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    hosts::place(
        list,
        launch.world_size(),
        |_| cores,
        launch.binding.oversubscribe,
    )
    .map_err(usage)?;
    Ok(())
}

/// How the hosts are reached: the launcher, the SSH settings, the psyrun to run there and the
/// heartbeat timeout.
fn preflight_settings(r: &RemoteArgs, launcher: LauncherKind) -> Result<PreflightSettings, Error> {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let config = ssh_config(r, &home)?;
    let remote_psyrun = match &r.remote_psyrun {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| Error::io("finding psyrun's own path (give --remote-psyrun)", e))?,
    };
    Ok(PreflightSettings {
        launcher,
        ssh: SshSettings {
            key: r.ssh_key.clone(),
            config,
            home,
            connect_timeout: r.connect_timeout,
            local_user: local_user(),
        },
        remote_psyrun,
        heartbeat_timeout: r.heartbeat_timeout,
        tree_width: r.tree_width,
    })
}

/// The SSH client configuration: `--ssh-config` (which must exist), else `~/.ssh/config`, read
/// as [`SshConfig::read`] says.
fn ssh_config(r: &RemoteArgs, home: &std::path::Path) -> Result<SshConfig, Error> {
    let config_path = r
        .ssh_config
        .clone()
        .unwrap_or_else(|| home.join(".ssh").join("config"));
    if let Some(given) = &r.ssh_config {
        // What it is, if not a file of text, is said by the read.
        if !given.exists() {
            return Err(Error::Usage(format!(
                "--ssh-config {}: no such file",
                given.display()
            )));
        }
    }
    SshConfig::read(&config_path).map_err(|e| Error::Usage(format!("SSH configuration {e}")))
}

/// The local user name, the default login: `USER`, else `LOGNAME`, else by the effective uid
/// (`root`, or `nobody`).
fn local_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                "root".into()
            } else {
                "nobody".into()
            }
        })
}
