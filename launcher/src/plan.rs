//! A job on this machine, planned: every program found, every `-x` value read, every `--wdir`
//! checked, the ranks placed and their bindings planned, and nothing started. [`prepare`] turns
//! a checked [`Launch`] into a [`JobPlan`]; [`crate::local`] runs it, [`crate::dry_run`]
//! prints it.

use crate::args::{EnvVar, Launch};
use crate::binding::{self, RankBinding};
use crate::error::Error;
use crate::placement::{self, HostSlots, Placement};
use crate::pmi::serve::{self, Served};
use crate::{job, program};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One rank of a prepared job: where and how it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankPlan {
    /// Its place: rank, host, local rank.
    pub placement: Placement,
    /// Index of its program in [`Launch::apps`].
    pub app: usize,
    /// The program, found.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its `-x` variables with their values, in order (later ones of a name win).
    pub env: Vec<(OsString, OsString)>,
    /// Its working directory if `--wdir` was given (else psyrun's).
    pub wdir: Option<PathBuf>,
    /// Its CPUs, if bound.
    pub binding: Option<RankBinding>,
}

/// A job ready to start: every rank's plan, in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    /// The name of the host the ranks run on (this machine).
    pub host: String,
    /// The ranks.
    pub ranks: Vec<RankPlan>,
    /// Why the default binding left the ranks unbound, if it did.
    pub binding_note: Option<String>,
    /// What each program (by index in [`Launch::apps`]) is served for MPI (`--mpi`).
    pub served: Vec<Served>,
}

/// The `-x` variables of one program with their values, in order, a later one of a name
/// replacing an earlier one; `-x VAR` reads psyrun's environment (unset: a usage error naming
/// it and the fix).
pub fn x_values(vars: &[EnvVar]) -> Result<Vec<(OsString, OsString)>, Error> {
    let mut env: Vec<(OsString, OsString)> = Vec::with_capacity(vars.len());
    for var in vars {
        let value = match var {
            EnvVar::Set(_, v) => v.clone(),
            EnvVar::Forward(name) => std::env::var_os(name).ok_or_else(|| {
                Error::Usage(format!(
                    "-x {name}: {name} is not set in psyrun's environment; set it, or give \
                     its value with -x {name}=VALUE"
                ))
            })?,
        };
        let name = OsString::from(var.name());
        env.retain(|(k, _)| *k != name);
        env.push((name, value));
    }
    Ok(env)
}

/// One program of the job, ready to run here.
struct ResolvedApp {
    program: PathBuf,
    env: Vec<(OsString, OsString)>,
    wdir: Option<PathBuf>,
}

/// Prepares `launch` without starting anything: finds every program, reads each `-x VAR` from
/// psyrun's environment (an unset one is an error naming it), checks every `--wdir`, places the
/// ranks on this machine and plans their bindings (reading the topology with hwloc unless
/// `--bind-to none`).
pub fn prepare(launch: &Launch) -> Result<JobPlan, Error> {
    let world = launch.world_size();
    check_process_limit(world)?;
    let cwd = std::env::current_dir().ok();
    let resolved = launch
        .apps
        .iter()
        .map(|app| resolve_app(app, cwd.as_deref()))
        .collect::<Result<Vec<_>, Error>>()?;
    let served = launch
        .apps
        .iter()
        .zip(&resolved)
        .map(|(app, r)| serve::choose(launch.mpi, &r.program, &app.args).map_err(Error::Usage))
        .collect::<Result<Vec<_>, Error>>()?;
    let placements = placement::place(&[HostSlots::local(world)], world)?;
    let host = job::hostname();
    let binding =
        binding::plan_here(placements.len(), &launch.binding).map_err(|source| Error::Binding {
            host: host.clone(),
            source,
        })?;
    let apps = launch.app_of_ranks();
    let ranks = placements
        .iter()
        .zip(apps)
        .map(|(p, app)| {
            let r = &resolved[app];
            RankPlan {
                placement: *p,
                app,
                program: r.program.clone(),
                args: launch.apps[app].args.clone(),
                env: r.env.clone(),
                wdir: r.wdir.clone(),
                binding: binding.ranks.get(p.local_rank).cloned().flatten(),
            }
        })
        .collect();
    Ok(JobPlan {
        host,
        ranks,
        binding_note: binding.note,
        served,
    })
}

/// Reads one program's `-x` values, checks its `--wdir` and finds it (a relative path relative
/// to `cwd`, where psyrun was started, also with `--wdir`).
fn resolve_app(app: &crate::args::App, cwd: Option<&Path>) -> Result<ResolvedApp, Error> {
    let env = x_values(&app.env)?;
    if let Some(dir) = &app.wdir {
        check_wdir(dir)?;
    }
    let mut program = program::resolve_here(&app.program)?;
    if app.wdir.is_some() && program.is_relative() {
        if let Some(cwd) = cwd {
            program = cwd.join(program);
        }
    }
    Ok(ResolvedApp {
        program,
        env,
        wdir: app.wdir.clone(),
    })
}

/// A `--wdir` must be an existing directory.
fn check_wdir(dir: &Path) -> Result<(), Error> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error::Usage(format!(
            "--wdir {}: not a directory",
            dir.display()
        ))),
        Err(e) => Err(Error::Usage(format!(
            "--wdir {}: {e}; give an existing directory",
            dir.display()
        ))),
    }
}

impl JobPlan {
    /// The CPUs rank `r` will run on and how, for `--report-bindings` and `--dry-run`:
    /// `0-1 (bound to cores 0-1)`, or psyrun's own CPUs `(not bound)`.
    pub fn cpus_of(&self, rank: &RankPlan) -> String {
        describe_cpus(rank.binding.as_ref())
    }

    /// What `--report-bindings` prints (each line without the `psyrun: ` prefix): the default's
    /// note, if any, then one line per rank: `HOST rank R: cpus LIST (bound to core 0)`.
    pub fn binding_report(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(note) = &self.binding_note {
            lines.push(format!("{}: {note}", self.host));
        }
        for r in &self.ranks {
            lines.push(format!(
                "{} rank {}: cpus {}",
                self.host,
                r.placement.rank,
                self.cpus_of(r)
            ));
        }
        lines
    }

    /// What rank `r`'s program is served for MPI.
    pub fn served_of(&self, r: &RankPlan) -> &Served {
        &self.served[r.app]
    }

    /// The placements of the ranks, in rank order.
    pub fn placements(&self) -> Vec<Placement> {
        self.ranks.iter().map(|r| r.placement).collect()
    }
}

/// A rank's CPUs as reports show them: `0-1 (bound to cores 0-1)`, or this process's own CPUs
/// `(not bound)`.
pub fn describe_cpus(binding: Option<&RankBinding>) -> String {
    match binding {
        Some(b) => format!("{} (bound to {})", b.cpus, b.what),
        None => {
            let own = binding::own_cpus().map_or("unknown".into(), |c| c.to_string());
            format!("{own} (not bound)")
        }
    }
}

/// Refuses a job of more ranks than this machine lets this user run processes: the kernel's
/// `pid_max` for everyone, `ulimit -u` (RLIMIT_NPROC) for this user.
fn check_process_limit(world: usize) -> Result<(), Error> {
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok());
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit for the duration of the call.
    let nproc = (unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut limit) } == 0
        && limit.rlim_cur != libc::RLIM_INFINITY)
        .then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX));
    let most = [pid_max, nproc].into_iter().flatten().min();
    match most {
        Some(most) if world > most => Err(Error::Usage(format!(
            "-n {world}: this machine lets this user run at most {most} processes (kernel.pid_max {}, ulimit -u {}); run fewer ranks here, or spread them over hosts with -H",
            pid_max.map_or("?".into(), |v| v.to_string()),
            nproc.map_or("unlimited".into(), |v| v.to_string())
        ))),
        _ => Ok(()),
    }
}
