//! # psyrun
//!
//! Starts N ranks of a program on this machine, gives each the environment of the psyne launch
//! contract ([`psyne::contract`]) plus any `-x` variables, binds them to cores, serves the job's
//! key-value store, forwards the ranks' output line by line, and tears the whole job down when
//! one rank fails, psyrun gets a signal, or the job runs too long. `psyrun -n 4 train --epochs 3`;
//! several programs in one world: `psyrun -n 1 ./server : -n 4 ./worker`.
//!
//! The binary is a thin shell over [`cli_main`]; the work is split by purpose:
//!
//! | module | purpose |
//! |---|---|
//! | [`args`] | the command line, parsed into a checked [`Launch`] before anything is done |
//! | [`program`] | finding the program (PATH, then beside psyrun) |
//! | [`placement`] | which rank goes on which host (pure) |
//! | [`hosts`] | host lists from `-H`, hostfiles and Slurm, and placing ranks on them (pure) |
//! | [`binding`] | which CPUs each rank gets: a pure plan from the hwloc topology |
//! | [`job`] | the job id, secret, store and master addresses, each rank's environment |
//! | [`spawn`] | starting a rank (bound, in its own process group, with a parent-death signal); signalling groups |
//! | [`output`] | forwarding each rank's stdout and stderr line by line, never interleaved |
//! | [`supervise`] | waiting for ranks, signals and deadlines; stopping the job (SIGTERM, grace, SIGKILL) |
//! | [`remote`] | jobs on several hosts: SSH, the agent, its protocol, the preflight |
//! | [`exit`] | the exit-code table |
//! | [`error`] | failures of psyrun itself |
//!
//! A launch runs in two steps: [`prepare`] turns the [`Launch`] into a [`JobPlan`] (programs
//! found, `-x` values read, working directories checked, ranks placed and bindings planned;
//! nothing started), then [`run_plan`] starts and supervises it. `--dry-run` prints the plan
//! ([`JobPlan::describe`]) instead of running it.

pub mod args;
pub mod binding;
pub mod error;
pub mod exit;
pub mod hosts;
pub mod job;
pub mod output;
pub mod placement;
pub mod program;
pub mod remote;
pub mod spawn;
pub mod supervise;

pub use args::{Launch, Options};
pub use error::Error;
pub use supervise::{Cause, Outcome, RankReport, Termination};

use args::EnvVar;
use binding::RankBinding;
use output::{Console, Sink, Stream};
use placement::{HostSlots, Placement};
use psyne::auth::Secret;
use psyne::bootstrap::StoreServer;
use remote::LauncherKind;
use remote::PreflightSettings;
use spawn::RankCommand;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use supervise::{Event, ProcessGroups, SignalWatch, Supervisor};

/// How long psyrun waits, once every rank has ended, for the ranks' output pipes to close (a
/// process that left its rank's process group may still hold them open).
pub const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Stack size of psyrun's helper threads (they only copy bytes or wait for a process).
const HELPER_STACK: usize = 256 * 1024;

/// Parses `args` (as from `std::env::args_os()`), runs the job (or, with `--dry-run`, prints
/// it), reports problems on stderr prefixed `psyrun: `, and returns the exit code (see [`exit`]).
pub fn cli_main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.get(1).map(OsString::as_os_str) == Some(OsStr::new(remote::agent::AGENT_FLAG)) {
        return remote::agent::main();
    }
    let launch = match Launch::parse_from(args) {
        Ok(launch) => launch,
        Err(e) => {
            e.print();
            return e.exit_code();
        }
    };
    let hosts = match host_list(&launch) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("psyrun: {e}");
            return e.exit_code();
        }
    };
    if let Some((hosts, settings)) = hosts {
        return run_on_hosts(&launch, &hosts, &settings);
    }
    if launch.remote.check {
        eprintln!("psyrun: --check needs hosts (-H, --hostfile or a Slurm allocation)");
        return exit::USAGE;
    }
    let result = prepare(&launch).and_then(|plan| {
        if launch.dry_run {
            let mut out = std::io::stdout().lock();
            // A closed stdout loses the listing; there is nowhere else to put it.
            let _ = out.write_all(plan.describe(&launch).as_bytes());
            let _ = out.flush();
            return Ok(None);
        }
        let console =
            Console::stdio().map_err(|e| Error::io("duplicating psyrun's stdout and stderr", e))?;
        run_plan(&launch, &plan, Arc::new(console)).map(Some)
    });
    match result {
        Ok(Some(outcome)) => outcome.exit_code(),
        Ok(None) => exit::SUCCESS,
        Err(e) => {
            eprintln!("psyrun: {e}");
            e.exit_code()
        }
    }
}

/// The hosts of a multi-host job and how to reach them, or `None` for a job on this machine
/// alone: from `-H` and `--hostfile` (merged), else from a Slurm allocation. One `localhost`
/// host (with `--launcher auto`) is this machine: checked against its slots, then run locally.
///
/// Inside an allocation (`salloc`, an `sbatch` script; checked with Slurm 22.05.8) the hosts come
/// from `SLURM_JOB_NODELIST` with `SLURM_TASKS_PER_NODE` slots each, and the agents are started
/// through srun. `--launcher slurm` outside an allocation is a usage error, with or without `-H`:
/// srun there would queue for a new allocation per host.
pub fn host_list(launch: &Launch) -> Result<Option<(hosts::HostList, PreflightSettings)>, Error> {
    let r = &launch.remote;
    let usage = |e: hosts::HostsError| Error::Usage(e.to_string());
    let mut list = hosts::HostList::new();
    for spec in &r.hosts {
        for h in hosts::parse_host_spec(spec).map_err(usage)?.iter() {
            list.add(h.clone()).map_err(usage)?;
        }
    }
    if let Some(file) = &r.hostfile {
        for h in hosts::read_hostfile(file).map_err(usage)?.iter() {
            list.add(h.clone()).map_err(usage)?;
        }
    }
    let mut launcher = r.launcher;
    // srun outside an allocation would make one (and wait in the queue for it) per host.
    if launcher == LauncherKind::Slurm
        && !list.is_empty()
        && std::env::var_os("SLURM_JOB_ID").is_none()
        && std::env::var_os("SLURM_JOBID").is_none()
    {
        return Err(Error::Usage(
            "--launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID is unset); run \
             psyrun inside salloc or sbatch, or use --launcher ssh"
                .into(),
        ));
    }
    if list.is_empty() && matches!(launcher, LauncherKind::Auto | LauncherKind::Slurm) {
        match hosts::from_slurm_env(&|k| std::env::var(k).ok()).map_err(usage)? {
            Some(slurm) => {
                list = slurm;
                launcher = LauncherKind::Slurm;
            }
            None if launcher == LauncherKind::Slurm => {
                return Err(Error::Usage(
                    "--launcher slurm: not inside a Slurm allocation (SLURM_JOB_NODELIST is \
                     unset); run psyrun inside salloc or sbatch, or name hosts with -H"
                        .into(),
                ))
            }
            None => {}
        }
    }
    if list.is_empty() {
        return Ok(None);
    }
    if launcher == LauncherKind::Auto
        && list.len() == 1
        && list
            .iter()
            .all(|h| remote::preflight::is_local_name(&h.name))
        && !r.check
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        hosts::place(
            &list,
            launch.world_size(),
            |_| cores,
            launch.binding.oversubscribe,
        )
        .map_err(usage)?;
        return Ok(None);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let config_path = r
        .ssh_config
        .clone()
        .unwrap_or_else(|| home.join(".ssh").join("config"));
    if let Some(given) = &r.ssh_config {
        if !given.is_file() {
            return Err(Error::Usage(format!(
                "--ssh-config {}: no such file",
                given.display()
            )));
        }
    }
    let config = remote::ssh_config::SshConfig::read(&config_path)
        .map_err(|e| Error::Usage(format!("SSH configuration {e}")))?;
    let remote_psyrun = match &r.remote_psyrun {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| Error::io("finding psyrun's own path (give --remote-psyrun)", e))?,
    };
    let local_user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                "root".into()
            } else {
                "nobody".into()
            }
        });
    Ok(Some((
        list,
        PreflightSettings {
            launcher,
            ssh: remote::ssh::SshSettings {
                key: r.ssh_key.clone(),
                config,
                home,
                connect_timeout: r.connect_timeout,
                local_user,
            },
            remote_psyrun,
            heartbeat_timeout: r.heartbeat_timeout,
        },
    )))
}

/// `--check`, `--dry-run` or a run on several hosts; returns the exit code.
fn run_on_hosts(launch: &Launch, hosts: &hosts::HostList, settings: &PreflightSettings) -> u8 {
    let console = match Console::stdio() {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("psyrun: duplicating psyrun's stdout and stderr: {e}");
            return exit::LAUNCH_FAILED;
        }
    };
    raise_open_files_limit();
    if launch.remote.check {
        let pre = remote::preflight::reach_all(hosts, settings);
        let ok = remote::preflight::report(hosts, &pre, &console);
        return if ok {
            exit::SUCCESS
        } else {
            exit::LAUNCH_FAILED
        };
    }
    if launch.dry_run {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(remote::describe(launch, hosts, settings).as_bytes());
        let _ = out.flush();
        return exit::SUCCESS;
    }
    match remote::launch::run(launch, hosts, settings, console) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("psyrun: {e}");
            e.exit_code()
        }
    }
}

/// Raises psyrun's soft limit on open files to the hard limit: each host's link holds a socket
/// and a wake-up pair, so the usual soft limit of 1024 would stop a launch at about 300 hosts.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `lim`, which is valid and writable.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 && lim.rlim_cur < lim.rlim_max
    {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads one valid rlimit; raising the soft limit up to the hard one is
        // always permitted. Failure leaves the old limit, which is only a smaller ceiling.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}

/// Runs a local single-program job described by `options` (the library's entry point; psybench
/// uses it): as [`launch`] with every other setting at its default.
pub fn run(options: &Options) -> Result<Outcome, Error> {
    launch(&Launch::from(options.clone()))
}

/// Prepares and runs `launch` on this machine, forwarding output to psyrun's stdout and stderr.
/// Nothing is started if the job cannot be prepared (see [`prepare`]).
pub fn launch(launch: &Launch) -> Result<Outcome, Error> {
    let plan = prepare(launch)?;
    let console =
        Console::stdio().map_err(|e| Error::io("duplicating psyrun's stdout and stderr", e))?;
    run_plan(launch, &plan, Arc::new(console))
}

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

/// Prepares `launch` without starting anything: finds every program, reads each `-x VAR` from
/// psyrun's environment (an unset one is an error naming it), checks every `--wdir`, places the
/// ranks on this machine and plans their bindings (reading the topology with hwloc unless
/// `--bind-to none`).
pub fn prepare(launch: &Launch) -> Result<JobPlan, Error> {
    let world = launch.world_size();
    let cwd = std::env::current_dir().ok();
    struct Resolved {
        program: PathBuf,
        env: Vec<(OsString, OsString)>,
        wdir: Option<PathBuf>,
    }
    let mut resolved = Vec::with_capacity(launch.apps.len());
    for app in &launch.apps {
        let env = x_values(&app.env)?;
        if let Some(dir) = &app.wdir {
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Error::Usage(format!(
                        "--wdir {}: not a directory",
                        dir.display()
                    )))
                }
                Err(e) => {
                    return Err(Error::Usage(format!(
                        "--wdir {}: {e}; give an existing directory",
                        dir.display()
                    )))
                }
            }
        }
        let mut program = program::resolve_here(&app.program)?;
        // A relative path means relative to where psyrun was started, also with --wdir.
        if app.wdir.is_some() && program.is_relative() {
            if let Some(cwd) = &cwd {
                program = cwd.join(program);
            }
        }
        resolved.push(Resolved {
            program,
            env,
            wdir: app.wdir.clone(),
        });
    }
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
    })
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

    /// The `--dry-run` listing: for each rank its host, working directory, binding, command
    /// line (shell-quoted) and environment. The secret is shown as `<secret>`, values chosen
    /// only at launch (store port, job id) as placeholders, and `-x VAR` values taken from
    /// psyrun's environment by name only (they may be secrets too).
    pub fn describe(&self, launch: &Launch) -> String {
        use psyne::contract as c;
        let cwd = std::env::current_dir().map_or_else(
            |_| "(psyrun's working directory)".into(),
            |d| d.display().to_string(),
        );
        let n = self.ranks.len();
        let programs = launch.apps.len();
        let mut out = format!(
            "psyrun: dry run: {n} rank{} of {programs} program{} on {}; nothing was started\n",
            if n == 1 { "" } else { "s" },
            if programs == 1 { "" } else { "s" },
            self.host
        );
        if let Some(note) = &self.binding_note {
            out.push_str(&format!("binding: {note}\n"));
        }
        if let Some(dir) = &launch.output_dir {
            out.push_str(&format!(
                "output files: {}/rank.N.stdout and rank.N.stderr\n",
                dir.display()
            ));
        }
        let info = job::JobInfo {
            job_id: "<job-id>".into(),
            secret_hex: "<secret>".into(),
            store: format!("{}:<port>", job::LOCAL_ADDR),
            master_addr: job::LOCAL_ADDR.to_string(),
            master_port: 0,
        };
        let placements: Vec<Placement> = self.ranks.iter().map(|r| r.placement).collect();
        let envs = job::rank_envs(&placements, &info);
        for (r, env) in self.ranks.iter().zip(&envs) {
            let app = &launch.apps[r.app];
            out.push_str(&format!("rank {} on {}\n", r.placement.rank, self.host));
            let wdir = r
                .wdir
                .as_ref()
                .map_or_else(|| cwd.clone(), |d| d.display().to_string());
            out.push_str(&format!("  cwd:     {wdir}\n"));
            out.push_str(&format!("  binding: cpus {}\n", self.cpus_of(r)));
            let command: Vec<String> = std::iter::once(r.program.as_os_str())
                .chain(r.args.iter().map(OsString::as_os_str))
                .map(shell_quote)
                .collect();
            out.push_str(&format!("  command: {}\n", command.join(" ")));
            let vars: Vec<String> = env
                .to_vars()
                .into_iter()
                .map(|(k, v)| match k {
                    // Chosen at launch, or secret: shown as placeholders.
                    c::JOB_SECRET => format!("{k}=<secret>"),
                    c::STORE => format!("{k}={}:<port>", job::LOCAL_ADDR),
                    c::JOB_ID => format!("{k}=<job-id>"),
                    "MASTER_PORT" => format!("{k}=<port>"),
                    _ => format!("{k}={}", shell_quote(OsStr::new(&v))),
                })
                .collect();
            out.push_str(&format!("  env:     {}\n", vars.join(" ")));
            if !app.env.is_empty() {
                let mut shown: Vec<String> = Vec::new();
                for (name, value) in &r.env {
                    let forwarded = app.env.iter().rev().find(|v| OsStr::new(v.name()) == name);
                    shown.push(match forwarded {
                        Some(EnvVar::Forward(_)) => {
                            format!("{}=<from psyrun's environment>", name.to_string_lossy())
                        }
                        _ => format!("{}={}", name.to_string_lossy(), shell_quote(value)),
                    });
                }
                out.push_str(&format!("  -x:      {}\n", shown.join(" ")));
            }
        }
        out
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

/// `text` as a POSIX shell word: unchanged when it needs no quoting, in single quotes when it is
/// printable text, else as `$'...'` with escapes (so newlines and non-UTF-8 bytes show exactly).
pub fn shell_quote(text: &OsStr) -> String {
    let bytes = text.as_bytes();
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b);
    if !bytes.is_empty() && bytes.iter().all(|&b| plain(b)) {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.chars().any(char::is_control) => format!("'{}'", s.replace('\'', r"'\''")),
        _ => {
            let mut out = String::from("$'");
            for &b in bytes {
                match b {
                    b'\n' => out.push_str(r"\n"),
                    b'\t' => out.push_str(r"\t"),
                    b'\r' => out.push_str(r"\r"),
                    b'\\' => out.push_str(r"\\"),
                    b'\'' => out.push_str(r"\'"),
                    0x20..=0x7e => out.push(b as char),
                    _ => out.push_str(&format!(r"\x{b:02x}")),
                }
            }
            out.push('\'');
            out
        }
    }
}

/// The `--output-dir` files of one rank: stdout's and stderr's.
pub(crate) type RankFiles = [Option<(File, PathBuf)>; 2];

pub(crate) fn open_output_files(dir: Option<&Path>, n: usize) -> Result<Vec<RankFiles>, Error> {
    let Some(dir) = dir else {
        return Ok((0..n).map(|_| [None, None]).collect());
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating --output-dir {}", dir.display()), e))?;
    let open = |rank: usize, stream: Stream| {
        let path = dir.join(format!("rank.{rank}.{}", stream.name()));
        File::create(&path)
            .map(|f| Some((f, path.clone())))
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))
    };
    (0..n)
        .map(|r| Ok([open(r, Stream::Stdout)?, open(r, Stream::Stderr)?]))
        .collect()
}

/// Runs a prepared job (see [`prepare`]) on this machine, supervises it and returns how it
/// ended. Sets up the store and the secret, prints the bindings if asked, starts each rank with
/// its environment, forwards output to `console` (as `launch` says: tags, timestamps, shown
/// ranks, files), and stops the job as [`supervise`] describes. The calling thread forks the
/// ranks, and their parent-death signal is tied to that thread (see [`spawn`]): it stays in this
/// function until the ranks are gone. Returns an error if a rank could not be started, after
/// stopping the ones that were.
pub fn run_plan(launch: &Launch, plan: &JobPlan, console: Arc<Console>) -> Result<Outcome, Error> {
    let mut files = open_output_files(launch.output_dir.as_deref(), plan.ranks.len())?;
    let secret = Secret::generate()?;
    // Refused connections are reported through the console, so the line never splits a rank's.
    let store_console = console.clone();
    let store = StoreServer::bind_logging(
        SocketAddr::new(job::LOCAL_ADDR, 0),
        secret.clone(),
        Arc::new(move |line: &str| store_console.message(line.trim_start_matches("psyne store: "))),
    )?;
    let master_port = job::free_port(job::LOCAL_ADDR, &[store.addr().port()])
        .map_err(|e| Error::io("finding a free port for MASTER_PORT", e))?;
    let info = job::JobInfo {
        job_id: job::new_job_id()?,
        secret_hex: secret.to_hex(),
        store: store.addr().to_string(),
        master_addr: job::LOCAL_ADDR.to_string(),
        master_port,
    };
    let placements: Vec<Placement> = plan.ranks.iter().map(|r| r.placement).collect();
    let envs = job::rank_envs(&placements, &info);
    if launch.binding.report {
        for line in plan.binding_report() {
            console.message(&line);
        }
    }

    let (events_tx, events_rx) = mpsc::channel();
    let signals = SignalWatch::start(events_tx.clone())
        .map_err(|e| Error::io("installing psyrun's signal handlers", e))?;
    let (drained_tx, drained_rx) = mpsc::channel();
    let mut supervisor = Supervisor::new(
        &console,
        ProcessGroups,
        launch.grace,
        launch.timeout,
        events_rx,
    );
    let mut pids = Vec::with_capacity(envs.len());
    let mut streams = 0;
    let mut launch_error = None;
    for ((env, files), rank_plan) in envs.into_iter().zip(files.iter_mut()).zip(&plan.ranks) {
        let rank = env.rank;
        let command = RankCommand {
            program: rank_plan.program.clone(),
            args: rank_plan.args.clone(),
            env: rank_plan
                .env
                .iter()
                .cloned()
                .chain(
                    env.to_vars()
                        .into_iter()
                        .map(|(k, v)| (OsString::from(k), OsString::from(v))),
                )
                .collect(),
            cwd: rank_plan.wdir.clone(),
            cpus: rank_plan.binding.as_ref().map(|b| b.cpus.clone()),
        };
        let look = Look {
            prefix: if launch.tag_output {
                format!("[{}][{rank}] ", plan.host)
            } else {
                String::new()
            },
            timestamp: launch.timestamp_output,
            show: launch
                .show_ranks
                .as_ref()
                .map_or(true, |s| s.contains(rank)),
        };
        let started = start_rank(
            rank,
            &command,
            files,
            look,
            &console,
            &events_tx,
            &drained_tx,
        );
        match started {
            Ok((pid, forwarded)) => {
                supervisor.add_rank(rank, pid);
                pids.push(pid);
                streams += forwarded;
            }
            Err((pid, e)) => {
                if let Some(pid) = pid {
                    // Started but not watchable: it is killed below and not waited for.
                    let _ = spawn::signal_group(pid, libc::SIGKILL);
                }
                launch_error = Some(e);
                break;
            }
        }
    }
    drop((events_tx, drained_tx));
    if launch_error.is_some() {
        if !pids.is_empty() {
            let plural = if pids.len() == 1 { "" } else { "s" };
            console.message(&format!(
                "rank {} could not be started; stopping the {} rank{plural} already running",
                pids.len(),
                pids.len(),
            ));
        }
        supervisor.stop(Cause::LaunchFailed);
    }
    let outcome = supervisor.run();

    // Whatever the ranks left in their process groups goes too, so that nothing outlives the job
    // and the output pipes close.
    for &pid in &pids {
        let _ = spawn::signal_group(pid, libc::SIGKILL);
    }
    drain(&drained_rx, streams, &console);
    drop(signals);
    drop(store);
    // Ranks unlink their shared-memory segments as soon as both ends have mapped them; a rank
    // that died in between leaves one behind, which goes now.
    let prefix = psyne::transport::shm::segment::job_prefix(&info.job_id);
    if let Ok(n) = psyne::transport::shm::segment::remove_job_segments(&prefix) {
        if n > 0 {
            console.message(&format!(
                "removed {n} shared-memory segment(s) the job left in /dev/shm"
            ));
        }
    }
    match launch_error {
        Some(e) => Err(e),
        None => Ok(outcome),
    }
}

/// How one rank's lines look on the console.
struct Look {
    /// `[host][rank] ` or empty.
    prefix: String,
    /// Stamp lines with the time they were read.
    timestamp: bool,
    /// Show them at all.
    show: bool,
}

/// Starts one rank, its two output forwarders and its waiter. Returns its pid and the number of
/// forwarders started, or the error with the pid if the process was started.
fn start_rank(
    rank: usize,
    command: &RankCommand,
    files: &mut RankFiles,
    look: Look,
    console: &Arc<Console>,
    events: &Sender<Event>,
    drained: &Sender<usize>,
) -> Result<(u32, usize), (Option<u32>, Error)> {
    let mut child = spawn::spawn(command).map_err(|source| {
        (
            None,
            Error::Spawn {
                rank,
                program: command.program.clone(),
                source,
            },
        )
    })?;
    let pid = child.id();
    let thread_error = |what: &str, e: std::io::Error| {
        (
            Some(pid),
            Error::io(format!("starting the thread that {what} rank {rank}"), e),
        )
    };
    let readers: [(Option<Box<dyn std::io::Read + Send>>, Stream); 2] = [
        (
            child
                .stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn std::io::Read + Send>),
            Stream::Stdout,
        ),
        (
            child
                .stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn std::io::Read + Send>),
            Stream::Stderr,
        ),
    ];
    let mut forwarded = 0;
    for ((reader, stream), file) in readers.into_iter().zip(files.iter_mut()) {
        let Some(reader) = reader else { continue };
        let (console, prefix, file, drained) = (
            console.clone(),
            look.prefix.clone(),
            file.take(),
            drained.clone(),
        );
        let (timestamp, show) = (look.timestamp, look.show);
        std::thread::Builder::new()
            .name(format!("psyrun-{rank}-{}", stream.name()))
            .stack_size(HELPER_STACK)
            .spawn(move || {
                output::forward(
                    reader,
                    Sink {
                        console: &console,
                        stream,
                        prefix,
                        timestamp,
                        show,
                        file,
                    },
                );
                let _ = drained.send(rank);
            })
            .map_err(|e| thread_error("forwards the output of", e))?;
        forwarded += 1;
    }
    let events = events.clone();
    std::thread::Builder::new()
        .name(format!("psyrun-wait-{rank}"))
        .stack_size(HELPER_STACK)
        .spawn(move || {
            let termination = match child.wait() {
                Ok(status) => Termination::from_status(status),
                Err(e) => Termination::Unknown(format!("waiting for it failed: {e}")),
            };
            let _ = events.send(Event::Exited { rank, termination });
        })
        .map_err(|e| thread_error("waits for", e))?;
    Ok((pid, forwarded))
}

/// Waits up to [`OUTPUT_DRAIN`] for `streams` forwarders to reach end of file.
fn drain(done: &Receiver<usize>, streams: usize, console: &Console) {
    let deadline = Instant::now() + OUTPUT_DRAIN;
    let mut open = streams;
    while open > 0 {
        match done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(_) => open -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                console.message(&format!(
                    "{open} output stream(s) still open {OUTPUT_DRAIN:?} after the ranks ended \
                     (a process that left its rank's process group holds them); not waiting"
                ));
                return;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}
