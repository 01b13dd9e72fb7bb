//! Reaching every host of a job before anything starts: one connection per host, all in
//! parallel, each bounded by the connect timeout, each ending in the agent's hello or a reason.
//! `psyrun --check` prints the verdicts; a launch goes on only if every host answered.

use super::constants::{AGENT_FLAG, SLURM_STEP_VARS};
use super::link::{spawn_child, AgentLink, HostEvent, LinkEvent, Route};
use super::protocol::{FromAgent, RelayRoute, ToAgent};
use super::ssh::{self, SshSettings};
use super::tree;
use crate::hosts::{Host, HostList};
use crate::quote::{command_line, shell_quote};
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

/// How the agents are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LauncherKind {
    /// SSH for other hosts, a local child for this one (`localhost`, `127.0.0.1`, `::1`); Slurm
    /// (srun) inside an allocation when the hosts come from it.
    Auto,
    /// SSH to every host, this one included.
    Ssh,
    /// Every host's agent runs on this machine (a test of the multi-host path without SSH).
    Local,
    /// `srun` starts each host's agent (inside a Slurm allocation).
    Slurm,
}

/// What a preflight needs besides the hosts.
#[derive(Debug, Clone)]
pub struct PreflightSettings {
    /// How agents are started.
    pub launcher: LauncherKind,
    /// SSH settings.
    pub ssh: SshSettings,
    /// The psyrun to run on the hosts (`--remote-psyrun`, default this one's path).
    pub remote_psyrun: PathBuf,
    /// Silence after which a link counts as lost.
    pub heartbeat_timeout: Duration,
    /// `--tree-width`: at most this many hosts are reached from any one node ([`tree`]).
    pub tree_width: usize,
}

impl PreflightSettings {
    /// The tree's width: flat under Slurm, which fans out itself.
    pub fn width(&self) -> usize {
        if self.launcher == LauncherKind::Slurm {
            usize::MAX
        } else {
            self.tree_width
        }
    }
}

/// A host that answered.
#[derive(Debug)]
pub struct Reached {
    /// Its link.
    pub link: AgentLink,
    /// Its agent's version.
    pub version: String,
    /// Its own host name.
    pub hostname: String,
    /// Its cores.
    pub cores: usize,
    /// A port free there.
    pub free_port: u16,
    /// Its address as psyrun reached it (`None` for a local agent: loopback).
    pub peer: Option<IpAddr>,
    /// psyrun's address on that link: where ranks on that host find the store.
    pub local: Option<IpAddr>,
    /// How it was reached: `ssh root@10.0.0.1:22`, `local`, `srun`.
    pub via: String,
    /// Time from the start of the preflight to its hello.
    pub took: Duration,
}

/// The verdict on every host, in host order, and the channel their links report on.
pub struct Preflight {
    /// One entry per host: reached, or why not.
    pub hosts: Vec<Result<Reached, String>>,
    /// Where every link's events arrive.
    pub events: Receiver<HostEvent>,
    /// A sender on that channel (kept so it stays open).
    pub sender: Sender<HostEvent>,
}

impl std::fmt::Debug for Preflight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preflight")
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// Whether `name` is this machine by its name alone.
pub fn is_local_name(name: &str) -> bool {
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

/// Whether `host` gets a local child agent under `kind`.
fn runs_locally(host: &Host, kind: LauncherKind) -> bool {
    match kind {
        LauncherKind::Local => true,
        LauncherKind::Auto => is_local_name(&host.name),
        LauncherKind::Ssh | LauncherKind::Slurm => false,
    }
}

/// How host `host` would be reached, in words (for `--dry-run`).
pub fn describe_route(host: &Host, s: &PreflightSettings) -> String {
    let agent = format!("{} {AGENT_FLAG}", shell_quote(s.remote_psyrun.as_os_str()));
    if runs_locally(host, s.launcher) {
        return format!("local child: {agent}");
    }
    if s.launcher == LauncherKind::Slurm {
        let words = srun_agent_command(&host.name, &s.remote_psyrun, &|k| std::env::var_os(k));
        let Some((program, args)) = words.split_first() else {
            return String::new();
        };
        return command_line(program, args.iter().map(OsString::as_os_str));
    }
    let t = ssh::target(host, &s.ssh);
    format!(
        "ssh {}@{}:{} (key {}): {}",
        t.user,
        t.address,
        t.port,
        t.identities
            .first()
            .map_or("none".into(), |p| p.display().to_string()),
        ssh::agent_command(&s.remote_psyrun)
    )
}

/// The `srun` words that start one task on `node` inside the current allocation.
///
/// Checked against Slurm 22.05.8 (a one-host cluster, `scripts/cluster/slurm.sh`, from `salloc`
/// and from an `sbatch` script; `launcher/tests/it/root/slurm.rs`):
/// - `--overlap`: the agent's step shares the allocation's CPUs, so it starts while other steps
///   (or the batch step) hold them, and the ranks it spawns can use them all.
/// - `--unbuffered`: without it slurmstepd holds the task's stdout until a newline, and the
///   agent's binary hello never arrives (the preflight times out).
/// - stdin: srun forwards its stdin to the task (all tasks by default; here the one), unbuffered,
///   so psyrun's messages and heartbeats reach the agent; EOF on it (psyrun gone) reaches the agent
///   too, which then stops its ranks.
/// - `--mpi=none`: the agent is no MPI program; whatever `MpiDefault` says, its step gets no
///   PMI/PMIx server and no `PMI_*`/`PMIX_*` variables, which its ranks would inherit.
/// - `--cpu-bind=none`: the agent is not pinned to one CPU by task/affinity (its ranks would
///   inherit the mask); psyrun binds the ranks itself.
/// - `--kill-on-bad-exit=1`, `--quiet`: accepted; `--quiet` keeps srun's own job-step messages
///   out of the agent's diagnostics.
pub fn srun_args(node: &str) -> Vec<String> {
    [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "--kill-on-bad-exit=1",
        "--unbuffered",
        "--mpi=none",
        "--cpu-bind=none",
        "--quiet",
    ]
    .iter()
    .map(ToString::to_string)
    .chain([format!("--nodelist={node}")])
    .collect()
}

/// Job-level variables that the agent's step overrides with its own one-task values: the agent
/// gets psyrun's values back (or none, if psyrun has none).
pub const SLURM_JOB_VARS: &[&str] = &["SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE"];

/// The whole command that starts the agent on `node` through srun: [`srun_args`], then
/// `/usr/bin/env` dropping [`SLURM_STEP_VARS`] and putting back psyrun's [`SLURM_JOB_VARS`]
/// (looked up with `get`), then `psyrun --agent`. The ranks' `PSY_*` and PyTorch variables
/// still come from psyrun through the agent, as on every other route.
pub fn srun_agent_command(
    node: &str,
    psyrun: &std::path::Path,
    get: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<OsString> {
    let mut words: Vec<OsString> = srun_args(node).into_iter().map(OsString::from).collect();
    words.push("/usr/bin/env".into());
    for name in SLURM_STEP_VARS {
        words.push("-u".into());
        words.push((*name).into());
    }
    for name in SLURM_JOB_VARS {
        match get(name) {
            Some(value) => {
                let mut w = OsString::from(format!("{name}="));
                w.push(value);
                words.push(w);
            }
            None => {
                words.push("-u".into());
                words.push((*name).into());
            }
        }
    }
    words.push(psyrun.as_os_str().to_owned());
    words.push(AGENT_FLAG.into());
    words
}

/// The addresses of Slurm node `node` and of this machine towards it (`None` when the node is
/// this machine: the link is loopback, like a local child's). Ranks on another node must reach
/// the store at psyrun's address on that route, not at 127.0.0.1. Checked here only for the
/// node being this machine (a one-host cluster); the route to another node is the one the kernel
/// picks for a datagram to the node's first address.
fn slurm_node_addrs(node: &str) -> Result<Option<(IpAddr, IpAddr)>, String> {
    let me = crate::job::hostname();
    let short = me.split('.').next().unwrap_or(&me);
    if node == me || node == short || is_local_name(node) {
        return Ok(None);
    }
    use std::net::ToSocketAddrs;
    let peer = (node, 0u16)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve Slurm node {node}: {e}"))?
        .map(|a| a.ip())
        .next()
        .ok_or_else(|| format!("Slurm node {node} has no address"))?;
    if peer.is_loopback() {
        return Ok(None);
    }
    let any: IpAddr = if peer.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let local = std::net::UdpSocket::bind((any, 0))
        .and_then(|u| u.connect((peer, 9)).and_then(|()| u.local_addr()))
        .map_err(|e| format!("no route from here to Slurm node {node} ({peer}): {e}"))?
        .ip();
    Ok(Some((peer, local)))
}

/// Connects to every host in parallel (beyond the tree's width, to the first level, whose agents
/// reach the rest) and waits (each level up to its connect timeout plus a few seconds for the
/// agent to start) for each agent's hello.
pub fn reach_all(hosts: &HostList, s: &PreflightSettings) -> Preflight {
    let started = Instant::now();
    let (tx, rx) = mpsc::channel::<HostEvent>();
    let all: Vec<usize> = (0..hosts.len()).collect();
    let plan = tree::split(&all, s.width());
    let (opened, limit) = open_all(hosts, s, &plan, &tx);
    // Every agent has this long after the slowest connect timeout to say hello, per level.
    let levels = u32::try_from(tree::depth(hosts.len(), s.width()).max(1)).unwrap_or(u32::MAX);
    let deadline = started + (limit + Duration::from_secs(10)) * levels;
    let mut hellos = Hellos::new(hosts, started, deadline, &plan, s.width());
    hellos.collect_links(&opened, plan.len());
    let early = hellos.await_hellos(&rx, s);
    let verdicts = hellos.verdicts(limit);
    // Anything else that arrived early goes back on the channel, in order.
    for e in early {
        let _ = tx.send(e);
    }
    Preflight {
        hosts: verdicts,
        events: rx,
        sender: tx,
    }
}

/// Starts connecting to every host of the plan's first level, one thread per host, each sending
/// its link (or why not) on the returned channel and asking the host to reach its run; also
/// returns the longest connect timeout among all the hosts.
fn open_all(
    hosts: &HostList,
    s: &PreflightSettings,
    plan: &[(usize, Vec<usize>)],
    events: &Sender<HostEvent>,
) -> (Receiver<HostOpened>, Duration) {
    let (done_tx, done_rx) = mpsc::channel::<HostOpened>();
    let timeout_of = |host: &Host| {
        if runs_locally(host, s.launcher) {
            Duration::from_secs(5)
        } else {
            ssh::target(host, &s.ssh).connect_timeout
        }
    };
    let limit = hosts.iter().map(timeout_of).max().unwrap_or_default();
    for (i, run) in plan {
        let i = *i;
        let (host, s, tx, link_tx) = (
            hosts.hosts()[i].clone(),
            s.clone(),
            events.clone(),
            done_tx.clone(),
        );
        let local = runs_locally(&host, s.launcher);
        let route = Route::new(i, &host.name, run);
        let reach = reach_order(hosts, run, &s);
        let spawned = std::thread::Builder::new()
            .name(format!("psyrun-connect-{i}"))
            .stack_size(512 * 1024)
            .spawn(move || {
                let result = open(route, &host, &s, local, tx);
                if let (Ok((link, ..)), Some(reach)) = (&result, reach) {
                    link.send(reach);
                }
                let _ = link_tx.send((i, result));
            });
        if let Err(e) = spawned {
            let _ = done_tx.send((i, Err(format!("cannot start a thread to connect: {e}"))));
        }
    }
    (done_rx, limit)
}

/// The Reach that asks a host of the first level to reach `run` (none for an empty run).
fn reach_order(hosts: &HostList, run: &[usize], s: &PreflightSettings) -> Option<ToAgent> {
    if run.is_empty() {
        return None;
    }
    let below = run
        .iter()
        .map(|&h| {
            let host = &hosts.hosts()[h];
            tree::relay_host(
                h,
                &ssh::target(host, &s.ssh),
                runs_locally(host, s.launcher),
            )
        })
        .collect();
    Some(tree::reach_message(
        s.width(),
        s.heartbeat_timeout,
        &s.remote_psyrun,
        below,
    ))
}

/// The preflight's progress, host by host: the links opened, the verdicts reached, and what
/// each agent said on its stderr before its hello.
struct Hellos {
    started: Instant,
    deadline: Instant,
    names: Vec<String>,
    /// Every host's relaying agent (`None`: reached from here).
    parents: Vec<Option<usize>>,
    /// For each host of the first level, the hosts it relays for.
    runs: Vec<Vec<usize>>,
    /// Each first-level host's link and addresses, through which the hosts below it are reached.
    tops: Vec<Option<(AgentLink, Addrs)>>,
    links: Vec<Option<Opened>>,
    results: Vec<Option<Result<Reached, String>>>,
    diagnostics: Vec<Vec<String>>,
}

impl Hellos {
    fn new(
        hosts: &HostList,
        started: Instant,
        deadline: Instant,
        plan: &[(usize, Vec<usize>)],
        width: usize,
    ) -> Hellos {
        let n = hosts.len();
        let mut runs = vec![Vec::new(); n];
        for (head, run) in plan {
            runs[*head] = run.clone();
        }
        Hellos {
            started,
            deadline,
            names: hosts.iter().map(|h| h.name.clone()).collect(),
            parents: tree::parents(n, width),
            runs,
            tops: (0..n).map(|_| None).collect(),
            links: (0..n).map(|_| None).collect(),
            results: (0..n).map(|_| None).collect(),
            diagnostics: vec![Vec::new(); n],
        }
    }

    /// Takes the link (or why it could not be opened) of each of the `count` hosts psyrun
    /// reaches itself, until all are in or the deadline passes. The hosts below one that could
    /// not be reached are not reached either.
    fn collect_links(&mut self, opened: &Receiver<HostOpened>, count: usize) {
        for _ in 0..count {
            match opened.recv_timeout(self.deadline.saturating_duration_since(Instant::now())) {
                Ok((i, Ok(link))) => {
                    self.tops[i] = Some((link.0.clone(), link.2));
                    self.links[i] = Some(link);
                }
                Ok((i, Err(why))) => {
                    for &h in &self.runs[i] {
                        self.results[h] = Some(Err(format!(
                            "not reached: {}, which was to relay for it, could not be reached",
                            self.names[i]
                        )));
                    }
                    self.results[i] = Some(Err(why));
                }
                Err(_) => break,
            }
        }
    }

    /// The first-level host through which host `h` is reached.
    fn top_of(&self, mut h: usize) -> usize {
        while let Some(p) = self.parents[h] {
            h = p;
        }
        h
    }

    /// A relaying agent reached host `i`, or could not: the link to it goes through the
    /// first-level host above it; the ranks there find the store at psyrun's address towards
    /// that host (every host must reach psyrun, as the store needs anyway).
    fn relayed(&mut self, i: usize, outcome: Result<RelayRoute, String>) {
        let route = match outcome {
            Ok(route) => route,
            Err(why) => {
                self.links[i] = None;
                self.results[i] = Some(Err(why));
                return;
            }
        };
        let Some((link, top_addrs)) = &self.tops[self.top_of(i)] else {
            return;
        };
        let peer: Option<IpAddr> = route.peer.as_deref().and_then(|p| p.parse().ok());
        let addrs = match (peer, top_addrs) {
            (Some(p), Some((_, local))) => Some((p, *local)),
            _ => None,
        };
        let parent = self.parents[i].map_or("", |p| self.names[p].as_str());
        let via = format!("{} through {parent}", route.via);
        self.links[i] = Some((link.relayed(i), via, addrs));
    }

    /// Waits for the hello of every agent whose link is open, until the deadline; returns the
    /// events that came from hosts already decided, to be handled later.
    fn await_hellos(
        &mut self,
        events: &Receiver<HostEvent>,
        s: &PreflightSettings,
    ) -> Vec<HostEvent> {
        let mut pending: usize = self.results.iter().filter(|r| r.is_none()).count();
        let mut early = Vec::new();
        while pending > 0 {
            let event = match events
                .recv_timeout(self.deadline.saturating_duration_since(Instant::now()))
            {
                Ok(e) => e,
                Err(_) => break,
            };
            let i = event.host;
            if self.results[i].is_some() {
                early.push(event);
                continue;
            }
            match (event.event, self.links[i].is_some()) {
                (LinkEvent::Frame(FromAgent::Reached { outcome, .. }), _) => {
                    self.relayed(i, outcome)
                }
                (LinkEvent::Closed { why, .. }, false) => {
                    self.results[i] = Some(Err(why));
                }
                (other, false) => early.push(HostEvent {
                    host: i,
                    event: other,
                }),
                (other, true) => self.hear(i, other, s),
            }
            if self.results[i].is_some() {
                pending -= 1;
            }
        }
        early
    }

    /// Handles what host `i`'s link said before its hello (a hello, or anything but a
    /// diagnostic, decides the host).
    fn hear(&mut self, i: usize, event: LinkEvent, s: &PreflightSettings) {
        let verdict = match event {
            LinkEvent::Frame(FromAgent::Hello {
                version,
                hostname,
                cores,
                free_port,
            }) => {
                if let Some((link, via, addrs)) = self.links[i].take() {
                    self.results[i] = Some(Ok(Reached {
                        link,
                        version,
                        hostname,
                        cores: cores.max(1) as usize,
                        free_port,
                        peer: addrs.map(|a| a.0),
                        local: addrs.map(|a| a.1),
                        via,
                        took: self.started.elapsed(),
                    }));
                }
                return;
            }
            LinkEvent::Diagnostic(line) => {
                self.diagnostics[i].push(line);
                return;
            }
            LinkEvent::Closed { why, status } => {
                ended_before_hello(&why, status, &self.diagnostics[i], s)
            }
            LinkEvent::Frame(other) => {
                format!("the agent spoke out of turn ({other:?}); is it the same psyrun version?")
            }
        };
        self.results[i] = Some(Err(verdict));
        self.links[i] = None;
    }

    /// Every host's verdict, in host order; a host still undecided did not answer in time.
    fn verdicts(self, limit: Duration) -> Vec<Result<Reached, String>> {
        let links = self.links;
        self.results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| {
                    Err(if links[i].is_some() {
                        "connected, but the agent did not say hello in time".to_string()
                    } else {
                        format!("no answer within {:?}", limit + Duration::from_secs(10))
                    })
                })
            })
            .collect()
    }
}

/// Why an agent whose link closed before its hello failed, with what it said on stderr: exit
/// status 127 and 126 mean psyrun is missing on the host or cannot run there.
fn ended_before_hello(
    why: &str,
    status: Option<i32>,
    said: &[String],
    s: &PreflightSettings,
) -> String {
    let said = said.join("; ");
    match status {
        Some(127) => format!(
            "psyrun was not found on the host at {} ({said}); install psyrun there \
             at the same path, or give its path with --remote-psyrun",
            s.remote_psyrun.display()
        ),
        Some(126) => format!(
            "psyrun at {} cannot be executed on the host ({said})",
            s.remote_psyrun.display()
        ),
        _ if said.is_empty() => format!("the agent ended before saying hello: {why}"),
        _ => format!("the agent ended before saying hello: {why}: {said}"),
    }
}

/// A host's address as psyrun reached it and psyrun's own on that link (`None`: local).
type Addrs = Option<(IpAddr, IpAddr)>;

type Opened = (AgentLink, String, Addrs);

/// A host's index and its link, opened, or why not.
type HostOpened = (usize, Result<Opened, String>);

/// Starts the agent of `route`'s host: as a local child, through srun, or over SSH.
fn open(
    route: Route,
    host: &Host,
    s: &PreflightSettings,
    local: bool,
    events: Sender<HostEvent>,
) -> Result<Opened, String> {
    if local || s.launcher == LauncherKind::Slurm {
        let (command, via, addrs) = if local {
            let mut c = Command::new(&s.remote_psyrun);
            c.arg(AGENT_FLAG);
            (c, "local".to_string(), None)
        } else {
            let addrs = slurm_node_addrs(&host.name)?;
            let words = srun_agent_command(&host.name, &s.remote_psyrun, &|k| std::env::var_os(k));
            let Some((program, rest)) = words.split_first() else {
                return Err("no srun command".into());
            };
            let mut c = Command::new(program);
            c.args(rest);
            // srun in its own process group: a Ctrl-C at the terminal reaches psyrun alone,
            // which stops the job through the agents (srun would otherwise forward it to the
            // agent, or, at the second one, abandon the step).
            std::os::unix::process::CommandExt::process_group(&mut c, 0);
            (c, format!("srun on {}", host.name), addrs)
        };
        let link = spawn_child(route, command, events).map_err(|e| {
            format!(
                "cannot start {via} agent {}: {e}",
                s.remote_psyrun.display()
            )
        })?;
        return Ok((link, via, addrs));
    }
    let t = ssh::target(host, &s.ssh);
    let conn = ssh::connect(&t, &ssh::agent_command(&s.remote_psyrun))?;
    let addrs = (conn.peer.ip(), conn.local.ip());
    let via = format!("ssh {}@{}", t.user, conn.peer);
    let link = ssh::run_link(route, conn, events, s.heartbeat_timeout)
        .map_err(|e| format!("cannot start the link thread: {e}"))?;
    Ok((link, via, Some(addrs)))
}

/// Prints the verdict per host (`psyrun --check`) and returns whether all answered.
pub fn report(hosts: &HostList, pre: &Preflight, console: &crate::output::Console) -> bool {
    let mut ok = true;
    for (host, verdict) in hosts.iter().zip(&pre.hosts) {
        match verdict {
            Ok(r) => console.message(&format!(
                "{}: ok ({}, psyrun {}, host name {}, {} core{}, {:.0} ms)",
                host.name,
                r.via,
                r.version,
                r.hostname,
                r.cores,
                if r.cores == 1 { "" } else { "s" },
                r.took.as_secs_f64() * 1e3
            )),
            Err(why) => {
                ok = false;
                console.message(&format!("{}: FAILED: {why}", host.name));
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_srun_command_drops_the_step_and_restores_the_job() {
        let words = srun_agent_command("n1", std::path::Path::new("/opt/psyrun"), &|k| {
            (k == "SLURM_NTASKS").then(|| OsString::from("8"))
        });
        let words: Vec<String> = words
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        assert_eq!(words[0], "srun");
        for w in ["--overlap", "--unbuffered", "--mpi=none", "--nodelist=n1"] {
            assert!(words.iter().any(|x| x == w), "{w} in {words:?}");
        }
        let env = words.iter().position(|w| w == "/usr/bin/env").expect("env");
        assert!(words[..env]
            .iter()
            .all(|w| w.starts_with("--") || w == "srun"));
        for v in SLURM_STEP_VARS {
            assert!(words.windows(2).any(|p| p[0] == "-u" && p[1] == *v), "{v}");
        }
        assert!(words.contains(&"SLURM_NTASKS=8".to_string()));
        assert!(words
            .windows(2)
            .any(|p| p[0] == "-u" && p[1] == "SLURM_NPROCS"));
        assert_eq!(&words[words.len() - 2..], ["/opt/psyrun", AGENT_FLAG]);
    }

    #[test]
    fn this_machine_as_a_slurm_node_is_reached_over_loopback() {
        assert_eq!(slurm_node_addrs(&crate::job::hostname()), Ok(None));
        assert_eq!(slurm_node_addrs("localhost"), Ok(None));
    }
}
