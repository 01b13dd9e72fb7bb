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
//! | [`discover`] | which hosts a job runs on (`-H`, hostfiles, Slurm) and how to reach them |
//! | [`program`] | finding the program (PATH, then beside psyrun) |
//! | [`placement`] | which rank goes on which host (pure) |
//! | [`hosts`] | host lists from `-H`, hostfiles and Slurm, and placing ranks on them (pure) |
//! | [`binding`] | which CPUs each rank gets: a pure plan from the hwloc topology |
//! | [`job`] | the job id, secret, store and master addresses, each rank's environment |
//! | [`plan`] | a job on this machine, planned: programs found, `-x` values read, ranks placed and bound |
//! | [`local`] | running a planned job on this machine: store, MPI services, ranks, supervision, tear-down |
//! | [`pmi`] | serving MPI programs: PMI-1/PMI-2 and PMIx per host, which one by the program's MPI (`--mpi`) |
//! | [`dry_run`] | the one `--dry-run` formatter, for jobs here and on several hosts |
//! | [`spawn`] | starting a rank (a `vfork`-style clone, bound, in its own process group known to the watchdog before it runs) and watching its output and end; signalling groups |
//! | [`output`] | forwarding each rank's stdout and stderr line by line, never interleaved |
//! | [`termination`] | how a rank ended (exit code, signal), and signal names |
//! | [`supervise`] | waiting for ranks, signals and deadlines; stopping the job (SIGTERM, grace, SIGKILL) |
//! | [`restart`] | `--max-restarts`: running a failed job again, each attempt a new generation |
//! | [`remote`] | jobs on several hosts: SSH, the agent, its protocol, the preflight |
//! | [`quote`] | shell quoting of programs, arguments and values |
//! | [`exit`] | the exit-code table |
//! | [`error`] | failures of psyrun itself |
//!
//! A launch runs in two steps: [`prepare`] turns the [`Launch`] into a [`JobPlan`](plan::JobPlan) (programs
//! found, `-x` values read, working directories checked, ranks placed and bindings planned;
//! nothing started), then [`run_plan`] starts and supervises it. `--dry-run` prints the plan
//! ([`JobPlan::describe`](plan::JobPlan::describe)) instead of running it. A job on several hosts goes from
//! [`host_list`] to [`remote::launch::run`].
//!
//! The public API is what psyrun's users call: [`cli_main`] (the binary), [`run`] and
//! [`launch`] with [`Options`] and [`Launch`] (psybench), their results ([`Outcome`],
//! [`Error`]), [`textfile`] (psybench reads its files with it) and [`pmi`] (the MPI services,
//! tested on their own). Every other module is internal: `cargo doc --document-private-items`
//! shows them. No module imports another that imports it back, directly or through others:
//! shared constants live in leaves ([`remote::constants`], [`termination`]), and [`output`] is
//! configured by a plan ([`output::LookPlan`]), never by the command line's structs.

mod args;
mod binding;
mod discover;
mod dry_run;
mod error;
mod exit;
mod hosts;
mod job;
mod local;
mod losses;
mod output;
mod placement;
mod plan;
pub mod pmi;
mod program;
mod quote;
mod remote;
mod restart;
mod spawn;
mod supervise;
mod termination;
pub mod textfile;
mod watchdog;

pub use args::{Launch, Options};
pub use error::Error;
pub use supervise::{Cause, Outcome, RankReport};
pub use termination::Termination;

use discover::host_list;
use local::run_plan;
use plan::prepare;

use output::Console;
use remote::PreflightSettings;
use std::ffi::{OsStr, OsString};
use std::sync::Arc;

/// Parses `args` (as from `std::env::args_os()`), runs the job (or, with `--dry-run`, prints
/// it), reports problems on stderr prefixed `psyrun: `, and returns the exit code (see [`exit`]).
pub fn cli_main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.get(1).map(OsString::as_os_str) == Some(OsStr::new(remote::constants::AGENT_FLAG)) {
        return remote::agent::main();
    }
    let launch = match Launch::parse_from(args) {
        Ok(launch) => launch,
        Err(e) => {
            e.print();
            return e.exit_code();
        }
    };
    match host_list(&launch) {
        Ok(Some((hosts, settings))) => run_on_hosts(&launch, &hosts, &settings),
        Ok(None) => run_here(&launch),
        Err(e) => report(&e),
    }
}

/// Prints `e` as psyrun's error and returns its exit code.
fn report(e: &Error) -> u8 {
    eprintln!("psyrun: {e}");
    e.exit_code()
}

/// `--dry-run` or a run of a job on this machine alone; returns the exit code.
fn run_here(launch: &Launch) -> u8 {
    if launch.remote.check {
        eprintln!("psyrun: --check needs hosts (-H, --hostfile or a Slurm allocation)");
        return exit::USAGE;
    }
    let result = prepare(launch).and_then(|plan| {
        if launch.dry_run {
            dry_run::print(&plan.describe(launch));
            return Ok(None);
        }
        let console = stdio_console()?;
        restart::run(launch, &console, |attempt| {
            run_plan(attempt, &plan, console.clone())
        })
        .map(Some)
    });
    match result {
        Ok(Some(outcome)) => outcome.exit_code(),
        Ok(None) => exit::SUCCESS,
        Err(e) => report(&e),
    }
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
    remote::raise_open_files_limit();
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
        let (listing, placed) = dry_run::describe_hosts(launch, hosts, settings);
        dry_run::print(&listing);
        if !placed {
            eprintln!("psyrun: the ranks do not fit on these hosts (see \"placement fails\" above); nothing would start");
            return exit::USAGE;
        }
        return exit::SUCCESS;
    }
    if let Err(e) = remote::launch::check_fit(launch, hosts) {
        return report(&e);
    }
    let mut failures = restart::HostFailures::new(hosts.clone());
    let outcome = restart::run(launch, &console, |attempt| {
        let outcome = remote::launch::run(attempt, failures.hosts(), settings, console.clone())?;
        if launch.exclude_failed_hosts {
            if let Some(said) = failures.record(&outcome, launch.world_size()) {
                console.message(&said);
            }
        }
        Ok(outcome)
    });
    match outcome {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => report(&e),
    }
}

/// psyrun's own stdout and stderr as a console for the ranks' output.
fn stdio_console() -> Result<Arc<Console>, Error> {
    Console::stdio()
        .map(Arc::new)
        .map_err(|e| Error::io("duplicating psyrun's stdout and stderr", e))
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
    run_plan(launch, &plan, stdio_console()?)
}
