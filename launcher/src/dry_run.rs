//! `--dry-run`: what a job would do, printed instead of doing it. One formatter lays out every
//! job, on this machine or on several hosts: a [`Listing`] (a summary line, notes about the job,
//! then one block per rank with its fields) rendered by [`Listing::render`].
//! [`describe_local`] and [`describe_hosts`] only fill it in.
//!
//! The secret is never shown; values chosen only at launch (ports, the job id) are placeholders,
//! and `-x VAR` values taken from psyrun's environment are shown by name only (they may be
//! secrets too).

use crate::args::{EnvVar, Launch};
use crate::hosts::HostList;
use crate::job::{self, JobInfo};
use crate::plan::{JobPlan, RankPlan};
use crate::quote::{command_line, shell_quote};
use crate::remote::{preflight, PreflightSettings};
use psyne::contract::{self as c, RankEnv};
use std::ffi::{OsStr, OsString};
use std::io::Write;

/// A dry run's listing, before it is laid out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// What runs where, e.g. `4 ranks on 2 hosts`.
    pub summary: String,
    /// Lines about the whole job, after the summary.
    pub notes: Vec<String>,
    /// One block per rank, in rank order.
    pub ranks: Vec<RankBlock>,
}

/// One rank's part of a [`Listing`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankBlock {
    /// Its heading, e.g. `rank 3 on b (local rank 1 of 2, node 1)`.
    pub heading: String,
    /// Its fields (`cwd`, `binding`, `command`, `env`, `-x`), in order.
    pub fields: Vec<(&'static str, String)>,
}

impl Listing {
    /// The listing as psyrun prints it: `psyrun: dry run: SUMMARY; nothing was started`, the
    /// notes, then each rank's heading and its fields indented, the values in one column.
    pub fn render(&self) -> String {
        let mut out = format!("psyrun: dry run: {}; nothing was started\n", self.summary);
        for note in &self.notes {
            out.push_str(note);
            out.push('\n');
        }
        for rank in &self.ranks {
            out.push_str(&rank.heading);
            out.push('\n');
            for (name, value) in &rank.fields {
                out.push_str(&format!("  {:<9}{value}\n", format!("{name}:")));
            }
        }
        out
    }
}

/// Writes a rendered listing to stdout. A closed stdout loses the listing; there is nowhere else
/// to put it.
pub fn print(listing: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(listing.as_bytes());
    let _ = out.flush();
}

/// `N word` or `N words`.
fn count(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// One `-x` variable as listed: `NAME=<from psyrun's environment>` for one read from psyrun's
/// environment (`value` `None`), else `NAME=VALUE`, quoted.
fn x_entry(name: &str, value: Option<&OsStr>) -> String {
    match value {
        None => format!("{name}=<from psyrun's environment>"),
        Some(v) => format!("{name}={}", shell_quote(v)),
    }
}

impl JobPlan {
    /// The `--dry-run` listing: for each rank its host, working directory, binding, command
    /// line (shell-quoted) and environment. The secret is shown as `<secret>`, values chosen
    /// only at launch (store port, job id) as placeholders, and `-x VAR` values taken from
    /// psyrun's environment by name only (they may be secrets too). See [`describe_local`].
    pub fn describe(&self, launch: &Launch) -> String {
        describe_local(self, launch)
    }
}

/// The `--dry-run` listing of a job on this machine: for each rank its host, working directory,
/// binding, command line (shell-quoted) and environment (see the module docs for what is
/// hidden).
pub fn describe_local(plan: &JobPlan, launch: &Launch) -> String {
    let cwd = std::env::current_dir().map_or_else(
        |_| "(psyrun's working directory)".into(),
        |d| d.display().to_string(),
    );
    let mut listing = Listing {
        summary: format!(
            "{} of {} on {}",
            count(plan.ranks.len(), "rank"),
            count(launch.apps.len(), "program"),
            plan.host
        ),
        ..Listing::default()
    };
    if let Some(note) = &plan.binding_note {
        listing.notes.push(format!("binding: {note}"));
    }
    if let Some(dir) = &launch.output_dir {
        listing.notes.push(format!(
            "output files: {}/rank.N.stdout and rank.N.stderr",
            dir.display()
        ));
    }
    let envs = job::rank_envs(&plan.placements(), &placeholder_job(launch));
    for (r, env) in plan.ranks.iter().zip(&envs) {
        listing
            .ranks
            .push(local_rank_block(plan, launch, r, env, &cwd));
    }
    listing.render()
}

/// The job's shared values as a dry run shows them: placeholders for what is chosen at launch.
fn placeholder_job(launch: &Launch) -> JobInfo {
    JobInfo {
        job_id: "<job-id>".into(),
        secret_hex: "<secret>".into(),
        store: format!("{}:<port>", job::LOCAL_ADDR),
        master_addr: job::LOCAL_ADDR.to_string(),
        master_port: 0,
        restart_count: launch.restart_count,
        max_restarts: launch.max_restarts,
    }
}

/// One local rank's block: `cwd`, `binding`, `command`, `env` and, if it has any, `-x`.
fn local_rank_block(
    plan: &JobPlan,
    launch: &Launch,
    r: &RankPlan,
    env: &RankEnv,
    cwd: &str,
) -> RankBlock {
    let wdir = r
        .wdir
        .as_ref()
        .map_or_else(|| cwd.to_string(), |d| d.display().to_string());
    let mut fields = vec![
        ("cwd", wdir),
        ("binding", format!("cpus {}", plan.cpus_of(r))),
        ("mpi", plan.served_of(r).describe()),
        (
            "command",
            command_line(
                r.program.as_os_str(),
                r.args.iter().map(OsString::as_os_str),
            ),
        ),
        ("env", contract_vars(env)),
    ];
    let app = &launch.apps[r.app];
    if !app.env.is_empty() {
        let shown: Vec<String> = r
            .env
            .iter()
            .map(|(name, value)| {
                let forwarded = app.env.iter().rev().find(|v| OsStr::new(v.name()) == name);
                let from_env = matches!(forwarded, Some(EnvVar::Forward(_)));
                x_entry(
                    &name.to_string_lossy(),
                    (!from_env).then_some(value.as_os_str()),
                )
            })
            .collect();
        fields.push(("-x", shown.join(" ")));
    }
    RankBlock {
        heading: format!("rank {} on {}", r.placement.rank, plan.host),
        fields,
    }
}

/// A rank's contract variables, with placeholders for the secret and what is chosen at launch.
fn contract_vars(env: &RankEnv) -> String {
    let vars: Vec<String> = env
        .to_vars()
        .into_iter()
        .map(|(k, v)| match k {
            c::JOB_SECRET => format!("{k}=<secret>"),
            c::STORE => format!("{k}={}:<port>", job::LOCAL_ADDR),
            c::JOB_ID => format!("{k}=<job-id>"),
            "MASTER_PORT" => format!("{k}=<port>"),
            _ => format!("{k}={}", shell_quote(OsStr::new(&v))),
        })
        .collect();
    vars.join(" ")
}

/// The `--dry-run` listing of a multi-host job: how each host is reached, then each rank's
/// host, program, arguments, working directory and `-x` variables. Nothing is connected to, so a
/// host without a slot count is assumed to have as many cores as this machine (said so). The
/// flag is false when the placement fails (the listing says why; psyrun then exits 2).
pub fn describe_hosts(
    launch: &Launch,
    hosts: &HostList,
    settings: &PreflightSettings,
) -> (String, bool) {
    let world = launch.world_size();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut listing = Listing {
        summary: format!("{} on {}", count(world, "rank"), count(hosts.len(), "host")),
        ..Listing::default()
    };
    let parents = crate::remote::tree::parents(hosts.len(), settings.width());
    for (h, parent) in hosts.iter().zip(parents) {
        let slots = h.slots.map_or_else(
            || format!("its cores (assumed {cores}, like this machine, until connected)"),
            |s| s.to_string(),
        );
        let by = parent
            .and_then(|p| hosts.hosts().get(p))
            .map_or_else(String::new, |p| format!("from {}'s agent: ", p.name));
        listing.notes.push(format!(
            "host {}: slots {slots}; {by}{}",
            h.name,
            preflight::describe_route(h, settings)
        ));
    }
    let placements = match crate::remote::launch::place_ranks(launch, hosts, |_| cores) {
        Ok(p) => p,
        Err(e) => {
            listing.notes.push(format!("placement fails: {e}"));
            return (listing.render(), false);
        }
    };
    for (p, &a) in placements.iter().zip(&launch.app_of_ranks()) {
        let host = hosts.hosts().get(p.host).map_or("?", |h| h.name.as_str());
        listing.ranks.push(host_rank_block(launch, a, p, host));
    }
    (listing.render(), true)
}

/// One rank's block in a multi-host listing: `command`, then `cwd` and `-x` if given.
fn host_rank_block(
    launch: &Launch,
    app: usize,
    p: &crate::placement::Placement,
    host: &str,
) -> RankBlock {
    let app = &launch.apps[app];
    let mut fields = vec![(
        "command",
        command_line(&app.program, app.args.iter().map(OsString::as_os_str)),
    )];
    if let Some(d) = &app.wdir {
        fields.push(("cwd", d.display().to_string()));
    }
    if !app.env.is_empty() {
        let shown: Vec<String> = app
            .env
            .iter()
            .map(|v| match v {
                EnvVar::Forward(n) => x_entry(n, None),
                EnvVar::Set(n, val) => x_entry(n, Some(val)),
            })
            .collect();
        fields.push(("-x", shown.join(" ")));
    }
    let mpi = match launch.mpi {
        crate::pmi::MpiChoice::None => "no MPI interface (--mpi none)".to_string(),
        choice => format!(
            "--mpi {}: the agent on {host} serves what the program there needs",
            clap::ValueEnum::to_possible_value(&choice)
                .map_or_else(String::new, |v| v.get_name().to_string())
        ),
    };
    fields.push(("mpi", mpi));
    RankBlock {
        heading: format!(
            "rank {} on {host} (local rank {} of {}, node {})",
            p.rank, p.local_rank, p.local_size, p.node_rank
        ),
        fields,
    }
}
