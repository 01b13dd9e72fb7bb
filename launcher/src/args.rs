//! The command line: parsed by clap into [`Cli`] (and [`AppCli`] for each further program of an
//! MPMD line), then checked into the plain [`Launch`] that the rest of psyrun acts on. Nothing is
//! looked up, bound or started here (`-x VAR` is read from the environment later, when the job
//! is prepared).
//!
//! MPMD: `psyrun -n 1 ./server : -n 4 ./worker ARGS` runs one world of 5 ranks, rank 0 the
//! server and ranks 1-4 the workers. The line is split on every standalone `:` before clap sees
//! it; the first part takes every flag, each later part only `-n`, `-x` and `--wdir` (which add
//! to, or override, the first part's for that program). A program that needs a lone `:` as an
//! argument cannot get it through psyrun (as with mpirun).

use crate::binding::{BindTo, BindingRequest, MapBy};
use crate::exit;
use crate::output::LookPlan;
use clap::Parser;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

/// The default `--grace`: seconds between SIGTERM and SIGKILL when psyrun stops ranks.
#[cfg(test)]
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// The separator of MPMD programs on the command line.
pub const APP_SEPARATOR: &str = ":";

/// More help, after the flags: MPMD, then the exit codes.
const AFTER_HELP: &str = "\
Several programs in one job (MPMD): separate them with a lone ':'. Each part has
its own -n, and may have its own -x and --wdir; the ranks of all parts form one
world, numbered in order:
  psyrun -n 1 ./server : -n 4 ./worker --threads 2     (rank 0 server, 1-4 workers)
";

/// What the user typed, as clap parses it (the first program and every flag). Use
/// [`Launch::parse_from`] rather than this directly.
#[derive(Debug, Parser)]
#[command(
    name = "psyrun",
    version,
    about = "Start N ranks of a program on this machine or across hosts (SSH, Slurm), wire them up, forward their output, and stop them all when one fails",
    after_help = format!("{AFTER_HELP}\n{}", exit::HELP),
    override_usage = "psyrun -n N [-H HOSTS | --hostfile FILE] [OPTIONS] PROGRAM [ARGS]... [: -n N [-x VAR[=VALUE]]... [--wdir DIR] PROGRAM [ARGS]...]...\n       psyrun --check -H HOSTS"
)]
pub struct Cli {
    /// Number of ranks to start (at least 1).
    #[arg(short = 'n', long = "np", value_name = "N", value_parser = parse_ranks,
        required_unless_present = "check")]
    pub ranks: Option<usize>,

    /// Hosts to run on, with their slots: `a:4,b:4`, `alice@a:2`, `[fe80::1]:2`; a host without
    /// `:N` takes as many ranks as it has cores. Repeatable. Ranks fill hosts in order.
    #[arg(short = 'H', long = "host", value_name = "HOSTS", action = clap::ArgAction::Append)]
    pub hosts: Vec<String>,

    /// Read hosts from FILE: Open MPI's `node01 slots=8` (`max_slots=`, `port=`, `user@node`,
    /// `#` comments) or MPICH's `node01:8`.
    #[arg(long, visible_alias = "machinefile", value_name = "FILE")]
    pub hostfile: Option<PathBuf>,

    /// How the agents on other hosts are started: ssh, local (every host's agent on this
    /// machine; a test of the multi-host path), slurm (srun, inside an allocation), or auto
    /// (slurm when the hosts come from a Slurm allocation, a local child for localhost, else ssh).
    #[arg(long, value_name = "HOW", value_enum, default_value = "auto")]
    pub launcher: crate::remote::LauncherKind,

    /// Private key for SSH, tried before the configuration's IdentityFile and the default keys
    /// (~/.ssh/id_ed25519, id_ecdsa, id_rsa); an SSH agent (SSH_AUTH_SOCK) is tried last.
    #[arg(long, value_name = "FILE")]
    pub ssh_key: Option<PathBuf>,

    /// SSH client configuration to honour (HostName, User, Port, IdentityFile, ConnectTimeout,
    /// StrictHostKeyChecking, UserKnownHostsFile). Default: ~/.ssh/config.
    #[arg(long, value_name = "FILE")]
    pub ssh_config: Option<PathBuf>,

    /// Give up on a host that does not accept the connection within SECS seconds (default: the
    /// SSH configuration's ConnectTimeout, else 10).
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub connect_timeout: Option<Duration>,

    /// The psyrun executable on the other hosts. Default: this psyrun's own path.
    #[arg(long, value_name = "PATH")]
    pub remote_psyrun: Option<PathBuf>,

    /// A host silent for SECS seconds is lost (psyrun and its agents say something every
    /// second): the job stops, naming it.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_timeout)]
    pub heartbeat_timeout: Duration,

    /// Reach at most K hosts from here; with more hosts, those K start the agents of the rest and
    /// relay for them, K each, level by level (a tree launch, like Slurm's TreeWidth). Default
    /// 32: flat up to 32 hosts, two levels up to 1,056. Over SSH the agents log in onward with
    /// the keys and known_hosts psyrun would use, at the same paths. Not used under Slurm (srun
    /// fans out itself).
    #[arg(long, value_name = "K", default_value_t = crate::remote::constants::DEFAULT_WIDTH,
        value_parser = parse_tree_width)]
    pub tree_width: usize,

    /// Only check the hosts: connect to each (in parallel), start psyrun's agent there, print a
    /// verdict per host, start no rank. Exit 0 if all answered, else 125.
    #[arg(long)]
    pub check: bool,

    /// Set VAR in every rank: `-x VAR=VALUE` to that value (byte for byte: spaces, quotes,
    /// newlines and `=` are kept), `-x VAR` to its value in psyrun's environment (an error if
    /// it is unset). Repeatable.
    #[arg(short = 'x', long = "env", value_name = "VAR[=VALUE]", action = clap::ArgAction::Append,
        value_parser = clap::value_parser!(OsString))]
    pub env: Vec<OsString>,

    /// Run the ranks in DIR (it must exist). Default: psyrun's own working directory.
    #[arg(long, value_name = "DIR")]
    pub wdir: Option<PathBuf>,

    /// Prefix every output line with `[HOST][RANK] `.
    #[arg(long)]
    pub tag_output: bool,

    /// Prefix every output line with the UTC time psyrun read it, to the microsecond
    /// (`2026-11-21T10:00:00.123456Z `); before the tag with --tag-output.
    #[arg(long)]
    pub timestamp_output: bool,

    /// Show the output of these ranks only, e.g. `0,3-5` (the others' is discarded, but still
    /// written to --output-dir).
    #[arg(long = "ranks", value_name = "LIST", value_parser = RankList::parse)]
    pub show_ranks: Option<RankList>,

    /// Also write each rank's output to DIR/rank.N.stdout and DIR/rank.N.stderr (DIR is created).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Seconds a rank gets to exit after SIGTERM before SIGKILL (fractions allowed; 0 kills at once).
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_grace,
        allow_negative_numbers = true)]
    pub grace: Duration,

    /// Stop the job if it runs longer than SECS seconds (exit 124).
    #[arg(long, value_name = "SECS", value_parser = parse_timeout,
        allow_negative_numbers = true)]
    pub timeout: Option<Duration>,

    /// When a rank fails, stop the job and start it again, up to N times (as torchrun's
    /// --max-restarts). Each attempt gets a new job id, secret and store, and its ranks
    /// PSY_RESTART_COUNT (and TORCHELASTIC_RESTART_COUNT) = 0, 1, ...; the exit code is the last
    /// attempt's. A signal to psyrun or --timeout (which counts across attempts) ends it all.
    #[arg(long, value_name = "N", default_value = "0")]
    pub max_restarts: usize,

    /// What a rank's failure does to the others: stop them (the default), or continue: the
    /// failure is named and the others go on (a psyne program can shrink its group and finish
    /// without the lost rank); the exit code is then the last ranks'.
    #[arg(long, value_name = "WHAT", value_enum, default_value = "stop")]
    pub on_failure: OnFailure,

    /// The process-management interface MPI programs are served (as `srun --mpi`): pmix (Open
    /// MPI), pmi1 or pmi2 (MPICH, Intel MPI: one socket serves both, the library picks), none,
    /// or auto: read from each program's libraries (libmpi.so.40: PMIx; libmpi.so.12: PMI-1/2;
    /// neither: PMI-1/2, which nothing else reads; mpi4py: by MPI4PY_LIBMPI or its module, else
    /// both). psyne programs use psyrun's PSY_* variables either way.
    #[arg(long, value_name = "WHAT", value_enum, default_value = "auto")]
    pub mpi: crate::pmi::MpiChoice,

    /// With --max-restarts across hosts: leave a host out of the next attempts once it has
    /// failed in two (a rank there failed or was lost, or the host was), if the other hosts'
    /// slots (-H a:N or a hostfile's slots=N) still hold every rank.
    #[arg(long)]
    pub exclude_failed_hosts: bool,

    /// Bind each rank to its own cores, to the NUMA node(s) or socket(s) of its cores, or not at
    /// all. Default: to cores when the host has enough for every rank, else none. Binding reads
    /// the machine's topology with hwloc (libhwloc15), or without it from /sys; `none` reads
    /// nothing.
    #[arg(long, value_name = "WHAT", value_enum)]
    pub bind_to: Option<BindTo>,

    /// How ranks are given cores: in order (core; node is the same on one host), or
    /// round-robin across NUMA nodes or sockets. Default: core.
    #[arg(long, value_name = "WHAT", value_enum)]
    pub map_by: Option<MapBy>,

    /// Cores for each rank (at least 1; default 1). Ranks are bound to whole cores.
    #[arg(long, value_name = "N", value_parser = parse_cpus_per_rank)]
    pub cpus_per_rank: Option<usize>,

    /// Print each rank's host, rank and CPU list on stderr before starting it (`psyrun: ...`).
    #[arg(long)]
    pub report_bindings: bool,

    /// Allow binding more ranks (times --cpus-per-rank) than there are cores: cores are then
    /// reused round-robin.
    #[arg(long)]
    pub oversubscribe: bool,

    /// Print what would run where (each rank's host, working directory, binding, command and
    /// environment; the job secret as `<secret>`), start nothing, and exit 0.
    #[arg(long)]
    pub dry_run: bool,

    /// The program (a bare name is looked up in PATH, then beside psyrun) and its arguments.
    /// Everything from PROGRAM on goes to the program, flags included, up to a lone `:`.
    #[arg(
        value_name = "PROGRAM",
        required_unless_present = "check",
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<OsString>,
}

/// `--on-failure`: what a rank's failure does to the rest of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnFailure {
    /// Stop every other rank (SIGTERM, `--grace`, SIGKILL) and exit with the failure's code.
    #[default]
    Stop,
    /// Name the failure and let the others go on; the job ends when every rank has.
    Continue,
}

/// Where a job's hosts come from and how psyrun reaches them (all empty for a local job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteArgs {
    /// `-H` values, as typed.
    pub hosts: Vec<String>,
    /// `--hostfile`.
    pub hostfile: Option<PathBuf>,
    /// `--launcher`.
    pub launcher: crate::remote::LauncherKind,
    /// `--ssh-key`.
    pub ssh_key: Option<PathBuf>,
    /// `--ssh-config`.
    pub ssh_config: Option<PathBuf>,
    /// `--connect-timeout`.
    pub connect_timeout: Option<Duration>,
    /// `--remote-psyrun`.
    pub remote_psyrun: Option<PathBuf>,
    /// `--heartbeat-timeout`.
    pub heartbeat_timeout: Duration,
    /// `--tree-width`.
    pub tree_width: usize,
    /// `--check`: only the preflight.
    pub check: bool,
}

impl Default for RemoteArgs {
    fn default() -> Self {
        RemoteArgs {
            hosts: Vec::new(),
            hostfile: None,
            launcher: crate::remote::LauncherKind::Auto,
            ssh_key: None,
            ssh_config: None,
            connect_timeout: None,
            remote_psyrun: None,
            heartbeat_timeout: Duration::from_secs(10),
            tree_width: crate::remote::constants::DEFAULT_WIDTH,
            check: false,
        }
    }
}

/// One further program of an MPMD line (after a `:`), as clap parses it.
#[derive(Debug, Parser)]
#[command(
    name = "psyrun ... :",
    no_binary_name = true,
    disable_version_flag = true,
    override_usage = "psyrun ... : -n N [-x VAR[=VALUE]]... [--wdir DIR] PROGRAM [ARGS]..."
)]
pub struct AppCli {
    /// Number of ranks of this program (at least 1).
    #[arg(short = 'n', long = "np", value_name = "N", value_parser = parse_ranks)]
    pub ranks: usize,

    /// Set VAR in this program's ranks (as -x before the first program).
    #[arg(short = 'x', long = "env", value_name = "VAR[=VALUE]", action = clap::ArgAction::Append,
        value_parser = clap::value_parser!(OsString))]
    pub env: Vec<OsString>,

    /// Working directory of this program's ranks.
    #[arg(long, value_name = "DIR")]
    pub wdir: Option<PathBuf>,

    /// The program and its arguments, up to the next lone `:`.
    #[arg(
        value_name = "PROGRAM",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<OsString>,
}

/// A single-program job as the library's callers build it (psybench uses this). The command
/// line can say more: see [`Launch`], which this converts into with every other setting at its
/// default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Number of ranks, at least 1.
    pub ranks: usize,
    /// The program as typed (a bare name or a path); [`crate::program::resolve`] finds it.
    pub program: OsString,
    /// Arguments passed to every rank, unchanged.
    pub args: Vec<OsString>,
    /// Prefix forwarded lines with `[HOST][RANK] `.
    pub tag_output: bool,
    /// Where to also write each rank's streams, if anywhere.
    pub output_dir: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when stopping ranks.
    pub grace: Duration,
    /// Longest the job may run, if limited.
    pub timeout: Option<Duration>,
}

/// One `-x`: a variable to set in ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvVar {
    /// `-x VAR`: psyrun's own value of VAR (an error if unset).
    Forward(String),
    /// `-x VAR=VALUE`: exactly this value.
    Set(String, OsString),
}

impl EnvVar {
    /// The variable's name.
    pub fn name(&self) -> &str {
        match self {
            EnvVar::Forward(n) | EnvVar::Set(n, _) => n,
        }
    }

    /// Parses one `-x` value: `VAR` or `VAR=VALUE` (split at the first `=`, the value kept byte
    /// for byte). Names are letters, digits and `_`, not starting with a digit, and not one
    /// psyrun sets itself.
    pub fn parse(text: &OsStr) -> Result<EnvVar, String> {
        let bytes = text.as_bytes();
        let (name, value) = match bytes.iter().position(|&b| b == b'=') {
            Some(i) => (&bytes[..i], Some(OsStr::from_bytes(&bytes[i + 1..]))),
            None => (bytes, None),
        };
        let shown = String::from_utf8_lossy(name);
        let valid = !name.is_empty()
            && !name[0].is_ascii_digit()
            && name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(format!(
                "-x {:?}: {shown:?} is not a variable name (letters, digits and _, not \
                 starting with a digit); write -x VAR or -x VAR=VALUE",
                text.to_string_lossy()
            ));
        }
        let name = shown.into_owned();
        if reserved(&name) {
            return Err(format!(
                "-x {name}: psyrun sets {name} for every rank itself (the launch contract); \
                 it cannot be overridden"
            ));
        }
        Ok(match value {
            Some(v) => EnvVar::Set(name, v.to_owned()),
            None => EnvVar::Forward(name),
        })
    }
}

/// Whether psyrun sets `name` itself (the launch contract's variables).
pub fn reserved(name: &str) -> bool {
    use psyne::contract as c;
    [
        c::RANK,
        c::WORLD_SIZE,
        c::LOCAL_RANK,
        c::LOCAL_SIZE,
        c::NODE_RANK,
        c::STORE,
        c::JOB_ID,
        c::JOB_SECRET,
        c::RESTART_COUNT,
        c::MAX_RESTARTS,
    ]
    .contains(&name)
        || c::TORCH_NAMES.contains(&name)
        || c::TORCHELASTIC_NAMES.contains(&name)
}

/// One program of the job and how its ranks run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// How many ranks run it (at least 1).
    pub ranks: usize,
    /// The program as typed (a bare name or a path); [`crate::program::resolve`] finds it.
    pub program: OsString,
    /// Its arguments, unchanged.
    pub args: Vec<OsString>,
    /// `-x` variables, in order (a later one of the same name wins).
    pub env: Vec<EnvVar>,
    /// `--wdir`, if given (else psyrun's working directory).
    pub wdir: Option<PathBuf>,
}

/// A set of ranks, from `--ranks 0,3-5`: sorted, without duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankList(Vec<usize>);

impl RankList {
    /// Parses `N`, `A-B` and comma-separated lists of them (`0,3-5`).
    pub fn parse(text: &str) -> Result<RankList, String> {
        let example = "e.g. --ranks 0,3-5";
        if text.trim().is_empty() {
            return Err(format!("an empty list of ranks; {example}"));
        }
        let number = |s: &str| -> Result<usize, String> {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{s:?} in {text:?} is not a rank number; {example}"))
        };
        let mut out = Vec::new();
        for item in text.split(',') {
            if item.trim().is_empty() {
                return Err(format!("an empty item in {text:?}; {example}"));
            }
            match item.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (number(a)?, number(b)?);
                    if a > b {
                        return Err(format!(
                            "{item:?} in {text:?} is a range that runs backwards; write {b}-{a}"
                        ));
                    }
                    if b - a > 1 << 24 {
                        return Err(format!("{item:?} is too long a range"));
                    }
                    out.extend(a..=b);
                }
                None => out.push(number(item)?),
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(RankList(out))
    }

    /// Whether `rank` is in the list.
    pub fn contains(&self, rank: usize) -> bool {
        self.0.binary_search(&rank).is_ok()
    }

    /// The highest rank listed.
    pub fn max(&self) -> Option<usize> {
        self.0.last().copied()
    }
}

/// A checked command line: everything psyrun should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The programs, in rank order (one unless MPMD); ranks are numbered across them.
    pub apps: Vec<App>,
    /// Prefix forwarded lines with `[HOST][RANK] `.
    pub tag_output: bool,
    /// Prefix forwarded lines with the time psyrun read them.
    pub timestamp_output: bool,
    /// Show only these ranks' output (`--ranks`); all if `None`.
    pub show_ranks: Option<RankList>,
    /// Where to also write each rank's streams, if anywhere.
    pub output_dir: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when stopping ranks.
    pub grace: Duration,
    /// Longest the job may run, if limited.
    pub timeout: Option<Duration>,
    /// Binding flags.
    pub binding: BindingRequest,
    /// Print the plan and start nothing.
    pub dry_run: bool,
    /// Hosts and how to reach them.
    pub remote: RemoteArgs,
    /// `--max-restarts`: how many times a failed job is started again.
    pub max_restarts: usize,
    /// `--on-failure`.
    pub on_failure: OnFailure,
    /// `--mpi`.
    pub mpi: crate::pmi::MpiChoice,
    /// `--exclude-failed-hosts`.
    pub exclude_failed_hosts: bool,
    /// Which attempt this launch is: 0 as parsed; the restart loop ([`crate::restart`]) sets
    /// 1, 2, ... on the copy it runs again. The ranks get it as `PSY_RESTART_COUNT`.
    pub restart_count: usize,
}

impl Launch {
    /// How the ranks' lines look on the console, as this command line asks.
    pub fn look_plan(&self) -> LookPlan {
        LookPlan {
            tag: self.tag_output,
            timestamp: self.timestamp_output,
            show: self.show_ranks.as_ref().map(|r| r.0.clone()),
        }
    }

    /// The number of ranks of the whole job.
    pub fn world_size(&self) -> usize {
        self.apps.iter().map(|a| a.ranks).sum()
    }

    /// For each rank, in rank order, the index of its program in [`Launch::apps`].
    pub fn app_of_ranks(&self) -> Vec<usize> {
        self.apps
            .iter()
            .enumerate()
            .flat_map(|(i, a)| std::iter::repeat(i).take(a.ranks))
            .collect()
    }

    /// Parses a full command line (the first item is the program name, as in
    /// `std::env::args_os()`).
    pub fn parse_from<I, T>(args: I) -> Result<Launch, ArgsError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut args = args.into_iter().map(Into::into);
        let argv0 = args.next().unwrap_or_else(|| OsString::from("psyrun"));
        let mut parts: Vec<Vec<OsString>> = vec![Vec::new()];
        for a in args {
            if a == APP_SEPARATOR {
                parts.push(Vec::new());
            } else if let Some(last) = parts.last_mut() {
                last.push(a);
            }
        }
        let mut parts = parts.into_iter();
        let first = parts.next().unwrap_or_default();
        let cli = Cli::try_parse_from(std::iter::once(argv0).chain(first)).map_err(ArgsError)?;
        let mut later = Vec::new();
        for (i, part) in parts.enumerate() {
            if part.is_empty() {
                return Err(ArgsError::invalid(format!(
                    "program {} after a ':' is empty; write `: -n N PROGRAM [ARGS]...` (a lone \
                     ':' separates the programs of an MPMD job)",
                    i + 2
                )));
            }
            later.push(AppCli::try_parse_from(part).map_err(ArgsError)?);
        }
        Launch::from_parts(cli, later)
    }

    fn from_parts(cli: Cli, later: Vec<AppCli>) -> Result<Launch, ArgsError> {
        let parse_env = |list: Vec<OsString>| -> Result<Vec<EnvVar>, ArgsError> {
            list.iter()
                .map(|x| EnvVar::parse(x).map_err(ArgsError::invalid))
                .collect()
        };
        let global_env = parse_env(cli.env)?;
        let mut apps = Vec::new();
        if let (Some(ranks), false) = (cli.ranks, cli.command.is_empty()) {
            apps.push(app(
                ranks,
                cli.command,
                global_env.clone(),
                cli.wdir.clone(),
            ));
        }
        if apps.is_empty() && !later.is_empty() {
            return Err(ArgsError::invalid(
                "--check takes no program; drop everything after ':'".into(),
            ));
        }
        for a in later {
            let mut env = global_env.clone();
            env.extend(parse_env(a.env)?);
            apps.push(app(
                a.ranks,
                a.command,
                env,
                a.wdir.or_else(|| cli.wdir.clone()),
            ));
        }
        let launch = Launch {
            apps,
            tag_output: cli.tag_output,
            timestamp_output: cli.timestamp_output,
            show_ranks: cli.show_ranks,
            output_dir: cli.output_dir,
            grace: cli.grace,
            timeout: cli.timeout,
            binding: BindingRequest {
                bind_to: cli.bind_to,
                map_by: cli.map_by,
                cpus_per_rank: cli.cpus_per_rank,
                report: cli.report_bindings,
                oversubscribe: cli.oversubscribe,
            },
            dry_run: cli.dry_run,
            remote: RemoteArgs {
                hosts: cli.hosts,
                hostfile: cli.hostfile,
                launcher: cli.launcher,
                ssh_key: cli.ssh_key,
                ssh_config: cli.ssh_config,
                connect_timeout: cli.connect_timeout,
                remote_psyrun: cli.remote_psyrun,
                heartbeat_timeout: cli.heartbeat_timeout,
                tree_width: cli.tree_width,
                check: cli.check,
            },
            max_restarts: cli.max_restarts,
            on_failure: cli.on_failure,
            mpi: cli.mpi,
            exclude_failed_hosts: cli.exclude_failed_hosts,
            restart_count: 0,
        };
        let world = launch.world_size();
        if let Some(max) = launch.show_ranks.as_ref().and_then(RankList::max) {
            if max >= world {
                let ranks = if world == 1 {
                    "1 rank (rank 0)".to_string()
                } else {
                    format!("{world} ranks (0-{})", world - 1)
                };
                return Err(ArgsError::invalid(format!(
                    "--ranks names rank {max}, but the job has {ranks}"
                )));
            }
        }
        Ok(launch)
    }
}

fn app(ranks: usize, command: Vec<OsString>, env: Vec<EnvVar>, wdir: Option<PathBuf>) -> App {
    let mut command = command.into_iter();
    // clap guarantees at least one value (`required`, `num_args = 1..`).
    let program = command.next().unwrap_or_default();
    App {
        ranks,
        program,
        args: command.collect(),
        env,
        wdir,
    }
}

impl From<Options> for Launch {
    fn from(o: Options) -> Launch {
        Launch {
            apps: vec![App {
                ranks: o.ranks,
                program: o.program,
                args: o.args,
                env: Vec::new(),
                wdir: None,
            }],
            tag_output: o.tag_output,
            timestamp_output: false,
            show_ranks: None,
            output_dir: o.output_dir,
            grace: o.grace,
            timeout: o.timeout,
            binding: BindingRequest::default(),
            dry_run: false,
            remote: RemoteArgs::default(),
            max_restarts: 0,
            on_failure: OnFailure::Stop,
            mpi: crate::pmi::MpiChoice::Auto,
            exclude_failed_hosts: false,
            restart_count: 0,
        }
    }
}

/// Why the command line was not accepted, or a request for help or the version.
/// [`ArgsError::print`] prints it the way clap does; [`ArgsError::exit_code`] is 0 for help and
/// version.
#[derive(Debug)]
pub struct ArgsError(clap::Error);

impl ArgsError {
    /// A usage error with this message.
    fn invalid(message: String) -> ArgsError {
        ArgsError(clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!("{message}\n"),
        ))
    }

    /// 0 for `--help` and `--version`, [`exit::USAGE`] for every real error.
    pub fn exit_code(&self) -> u8 {
        if self.0.use_stderr() {
            exit::USAGE
        } else {
            exit::SUCCESS
        }
    }

    /// Prints the message (help and version on stdout, errors on stderr) as clap formats it.
    pub fn print(&self) {
        // Printing can only fail if the stream is closed; there is nowhere else to report it.
        let _ = self.0.print();
    }
}

impl std::fmt::Display for ArgsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ArgsError {}

/// The most ranks one job may have: far beyond any machine psyrun has run on, and small enough
/// that planning them (a few hundred bytes a rank) cannot exhaust memory.
pub const MAX_RANKS: usize = 1 << 20;

fn parse_ranks(text: &str) -> Result<usize, String> {
    match text.trim().parse::<u128>() {
        Ok(0) => Err("the number of ranks must be at least 1 (e.g. -n 4)".into()),
        Ok(n) if n > MAX_RANKS as u128 => Err(format!(
            "{n} ranks is more than psyrun's limit of {MAX_RANKS} per job"
        )),
        Ok(n) => Ok(n as usize),
        Err(_) => Err(format!("{text:?} is not a number of ranks (e.g. -n 4)")),
    }
}

fn parse_cpus_per_rank(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("--cpus-per-rank must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "{text:?} is not a number of cores (e.g. --cpus-per-rank 2)"
        )),
    }
}

fn parse_seconds(text: &str, zero_ok: bool) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds (e.g. 2.5)"))?;
    if !secs.is_finite() || secs < 0.0 || (!zero_ok && secs == 0.0) || secs > 1e9 {
        let least = if zero_ok { "0 or more" } else { "more than 0" };
        return Err(format!("{text:?} seconds is out of range: give {least}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_grace(text: &str) -> Result<Duration, String> {
    parse_seconds(text, true)
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    parse_seconds(text, false)
}

/// `--tree-width`: a whole number of hosts, at least 2.
fn parse_tree_width(text: &str) -> Result<usize, String> {
    let min = crate::remote::constants::MIN_WIDTH;
    match text.parse::<usize>() {
        Ok(k) if k >= min => Ok(k),
        _ => Err(format!(
            "{text:?} is not a tree width: give a number of hosts, at least {min} (a large one, \
             such as 100000, makes the launch flat)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    fn parse(line: &str) -> Result<Launch, ArgsError> {
        Launch::parse_from(std::iter::once("psyrun").chain(line.split_whitespace()))
    }

    #[test]
    fn the_tree_width_is_a_number_of_at_least_two() {
        let l = parse("-n 2 true").unwrap();
        assert_eq!(l.remote.tree_width, crate::remote::constants::DEFAULT_WIDTH);
        let l = parse("--tree-width 4 -n 2 true").unwrap();
        assert_eq!(l.remote.tree_width, 4);
        for bad in ["1", "0", "x"] {
            let e = err(&format!("--tree-width {bad} -n 2 true"));
            assert!(e.contains("tree width"), "{e}");
        }
    }

    fn err(line: &str) -> String {
        let e = parse(line).expect_err(line);
        assert_eq!(e.exit_code(), exit::USAGE, "{line}: {e}");
        e.to_string()
    }

    fn strs(v: &[OsString]) -> Vec<&str> {
        v.iter().map(|a| a.to_str().unwrap()).collect()
    }

    #[test]
    fn defaults() {
        let o = parse("-n 4 train").unwrap();
        assert_eq!(
            o,
            Launch::from(Options {
                ranks: 4,
                program: "train".into(),
                args: vec![],
                tag_output: false,
                output_dir: None,
                grace: DEFAULT_GRACE,
                timeout: None,
            })
        );
        assert_eq!(o.binding, BindingRequest::default());
        assert!(!o.dry_run && !o.timestamp_output && o.show_ranks.is_none());
    }

    #[test]
    fn everything_after_the_program_belongs_to_it() {
        let o = parse("-n 2 --tag-output prog --flag x -n 7 --tag-output --help").unwrap();
        assert_eq!(o.apps[0].ranks, 2);
        assert!(o.tag_output);
        assert_eq!(o.apps[0].program, "prog");
        assert_eq!(
            strs(&o.apps[0].args),
            ["--flag", "x", "-n", "7", "--tag-output", "--help"]
        );
        let o = parse("-n 1 -- -weird-name a").unwrap();
        assert_eq!(o.apps[0].program, "-weird-name");
        assert_eq!(o.apps[0].args, vec![OsString::from("a")]);
    }

    #[test]
    fn all_flags() {
        let o = parse(
            "--np 3 --output-dir out --grace 0.5 --timeout 10 --timestamp-output --ranks 0,2 \
             --bind-to numa --map-by socket --cpus-per-rank 2 --report-bindings --oversubscribe \
             --dry-run --wdir /tmp -x A -x B=1 ./p",
        )
        .unwrap();
        assert_eq!(o.world_size(), 3);
        assert_eq!(o.output_dir, Some(PathBuf::from("out")));
        assert_eq!(o.grace, Duration::from_millis(500));
        assert_eq!(o.timeout, Some(Duration::from_secs(10)));
        assert!(o.timestamp_output && o.dry_run);
        let shown = o.show_ranks.as_ref().unwrap();
        assert!(shown.contains(0) && !shown.contains(1) && shown.contains(2));
        assert_eq!(
            o.binding,
            BindingRequest {
                bind_to: Some(BindTo::Numa),
                map_by: Some(MapBy::Socket),
                cpus_per_rank: Some(2),
                report: true,
                oversubscribe: true,
            }
        );
        assert_eq!(o.apps[0].wdir, Some(PathBuf::from("/tmp")));
        assert_eq!(
            o.apps[0].env,
            [
                EnvVar::Forward("A".into()),
                EnvVar::Set("B".into(), "1".into())
            ]
        );
        assert_eq!(parse("-n 1 --grace 0 p").unwrap().grace, Duration::ZERO);
    }

    #[test]
    fn env_values_are_kept_byte_for_byte() {
        let weird = OsString::from_vec(b"V=a b 'q' \"d\"\n=x\xff".to_vec());
        let o = Launch::parse_from([
            OsString::from("psyrun"),
            "-n".into(),
            "1".into(),
            "-x".into(),
            weird,
            "-x".into(),
            "EMPTY=".into(),
            "p".into(),
        ])
        .unwrap();
        assert_eq!(
            o.apps[0].env,
            [
                EnvVar::Set(
                    "V".into(),
                    OsString::from_vec(b"a b 'q' \"d\"\n=x\xff".to_vec())
                ),
                EnvVar::Set("EMPTY".into(), "".into()),
            ]
        );
        assert!(err("-n 1 -x =v p").contains("not a variable name"));
        assert!(err("-n 1 -x 1A p").contains("not a variable name"));
        assert!(err("-n 1 -x A-B=1 p").contains("not a variable name"));
        assert!(err("-n 1 -x PSY_RANK=3 p").contains("psyrun sets PSY_RANK"));
        assert!(err("-n 1 -x MASTER_PORT p").contains("psyrun sets MASTER_PORT"));
        // psyne's own settings are the user's to forward.
        assert!(parse("-n 1 -x PSY_TRANSPORT=tcp -x PSY_TIMEOUT p").is_ok());
    }

    #[test]
    fn mpmd_splits_on_a_lone_colon() {
        let o = parse("-n 1 -x A=1 --wdir /w --tag-output ./server --port 1 : -n 4 -x B=2 ./worker a:b : --np 2 --wdir /v w2").unwrap();
        assert_eq!(o.world_size(), 7);
        assert_eq!(o.apps.len(), 3);
        assert_eq!(
            (o.apps[0].ranks, o.apps[1].ranks, o.apps[2].ranks),
            (1, 4, 2)
        );
        assert_eq!(o.apps[0].program, "./server");
        assert_eq!(strs(&o.apps[0].args), ["--port", "1"]);
        assert_eq!(o.apps[1].program, "./worker");
        assert_eq!(strs(&o.apps[1].args), ["a:b"]);
        assert_eq!(
            o.apps[1].env,
            [
                EnvVar::Set("A".into(), "1".into()),
                EnvVar::Set("B".into(), "2".into())
            ]
        );
        assert_eq!(o.apps[1].wdir, Some(PathBuf::from("/w")));
        assert_eq!(o.apps[2].wdir, Some(PathBuf::from("/v")));
        assert!(o.tag_output);
        assert!(err("-n 1 a :").contains("empty"));
        assert!(err("-n 1 a : : -n 1 b").contains("empty"));
        assert!(err("-n 1 a : b").contains("-n"));
        assert!(err("-n 1 a : -n 1 --tag-output b").contains("--tag-output"));
        assert!(err("-n 1 a : -n 0 b").contains("at least 1"));
    }

    #[test]
    fn rank_lists() {
        let l = RankList::parse("0,3-5,4,9").unwrap();
        assert_eq!(l.0, [0, 3, 4, 5, 9]);
        assert_eq!(l.max(), Some(9));
        assert_eq!(RankList::parse(" 2 ").unwrap().0, [2]);
        assert!(RankList::parse("").unwrap_err().contains("empty"));
        assert!(RankList::parse("0,,1").unwrap_err().contains("empty item"));
        assert!(RankList::parse("5-3")
            .unwrap_err()
            .contains("backwards; write 3-5"));
        assert!(RankList::parse("x")
            .unwrap_err()
            .contains("not a rank number"));
        assert!(RankList::parse("-1")
            .unwrap_err()
            .contains("not a rank number"));
        assert!(RankList::parse("1-")
            .unwrap_err()
            .contains("not a rank number"));
        let e = err("-n 3 --ranks 0,3 p");
        assert!(
            e.contains("--ranks names rank 3, but the job has 3 ranks (0-2)"),
            "{e}"
        );
        assert!(err("-n 3 --ranks 1-x p").contains("--ranks"));
        assert!(parse("-n 2 --ranks 1 a : -n 2 b --ranks 9").is_ok());
        assert!(parse("-n 2 --ranks 3 a : -n 2 b").is_ok());
    }

    #[test]
    fn bad_lines_are_usage_errors_that_name_the_problem() {
        assert!(err("-n 0 prog").contains("at least 1"));
        assert!(err("-n x prog").contains("not a number"));
        assert!(err("-n 2").contains("PROGRAM"));
        assert!(err("prog").contains("-n"));
        assert!(err("--bogus -n 2 prog").contains("--bogus"));
        assert!(err("-n 2 --timeout 0 prog").contains("out of range"));
        assert!(err("-n 2 --timeout -1 prog").contains("out of range"));
        assert!(err("-n 2 --grace -1 prog").contains("--grace"));
        assert!(err("-n 2 --grace nan prog").contains("out of range"));
        assert!(err("-n 2 --bind-to thread prog").contains("core"));
        assert!(err("-n 2 --map-by slot prog").contains("socket"));
        assert!(err("-n 2 --cpus-per-rank 0 prog").contains("at least 1"));
    }

    #[test]
    fn help_and_version_exit_zero_and_help_has_the_exit_codes() {
        let e = parse("--help").unwrap_err();
        assert_eq!(e.exit_code(), 0);
        let help = e.to_string();
        for want in [
            "Exit codes:",
            "--tag-output",
            "--timestamp-output",
            "--ranks",
            "-x, --env",
            "--wdir",
            "--bind-to",
            "--map-by",
            "--cpus-per-rank",
            "--report-bindings",
            "--oversubscribe",
            "--dry-run",
            "MPMD",
        ] {
            assert!(help.contains(want), "--help lacks {want}");
        }
        assert_eq!(parse("--version").unwrap_err().exit_code(), 0);
    }
}
