//! Running a job on several hosts through their agents, in named phases, each a function here:
//!
//! 1. `preflight`: reach every host (in parallel); any host out of reach fails the launch;
//! 2. `place`: place the ranks on the hosts, by their slots or the cores their agents reported;
//! 3. `hand_out`: give each host its part of the job and wait until every one has checked it;
//! 4. `start`: start the ranks everywhere and collect their pids;
//! 5. `supervise`: one supervisor for the whole job, stopping ranks through the agents, while
//!    the links' events (output, exits, lost hosts) are routed to it;
//! 6. `tear_down`: every agent kills what is left, drains the output, removes shared memory
//!    and confirms.
//!
//! [`run`] is that sequence; nothing starts anywhere unless every host is reachable and ready.

use super::lines::{Frame, Outputs};
use super::link::{AgentLink, HostEvent, LinkEvent};
use super::preflight::{Preflight, PreflightSettings, Reached};
use super::protocol::{FromAgent, JobSpec, MpiSpec, RankSpec, ToAgent};
use crate::args::Launch;
use crate::error::Error;
use crate::hosts::{self, HostList};
use crate::job::{self, JobInfo};
use crate::losses::LossReports;
use crate::output::{open_output_files, Console, Look, OUTPUT_DRAIN};
use crate::placement::Placement;
use crate::supervise::{Cause, Event, Outcome, SignalWatch, Stopper, Supervisor};
use psyne::contract::RankEnv;
use psyne::internal::StoreServer;
use psyne::Secret;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long every host has to check its part of the job and to start its ranks.
pub const READY_WAIT: Duration = Duration::from_secs(30);

/// Every host's binding report (its Ready), in host order; `None` for a host without ranks.
type BindingReports = Vec<Option<Vec<String>>>;

/// A program's `-x` variables with their values, as wire bytes.
type WireEnv = Vec<(Vec<u8>, Vec<u8>)>;

/// Runs `launch` on `hosts`; see the module docs.
pub fn run(
    launch: &Launch,
    hosts: &HostList,
    settings: &PreflightSettings,
    console: Arc<Console>,
) -> Result<Outcome, Error> {
    let t0 = Instant::now();
    let app_envs = wire_x_values(launch)?;
    let (mut job, events) = preflight(launch, hosts, settings, console)?;
    let placements = job.place(hosts)?;
    let (store, contract) = job.serve_store()?;
    let early = job.hand_out(settings, &placements, &app_envs, &contract, &events)?;
    let running = job.start(&events, early, t0)?;
    let losses = loss_reports(&store, &contract);
    let _declarations = watch_declarations(&store, &contract, &running)?;
    let supervised = job.supervise(events, running, losses)?;
    job.tear_down(&supervised.done, supervised.signals, store);
    match supervised.launch_error {
        Some(e) => Err(e),
        None => Ok(supervised.outcome),
    }
}

/// Checks, before any host is contacted, that the ranks fit on `hosts` when every host gives its
/// slot count (a host without one takes its core count, known only once reached: then the check
/// waits for the preflight). The error is the one placing them later would give.
pub fn check_fit(launch: &Launch, hosts: &HostList) -> Result<(), Error> {
    if hosts.iter().any(|h| h.slots.is_none()) {
        return Ok(());
    }
    place_ranks(launch, hosts, |_| 0)
        .map(drop)
        .map_err(|e| Error::Usage(e.to_string()))
}

/// Places `launch`'s ranks on `hosts` as its flags say (`--oversubscribe`, `--map-by node`), a
/// host without a slot count taking `cores(host)`: the one placement of a multi-host job, its
/// dry run and its early check.
pub fn place_ranks(
    launch: &Launch,
    hosts: &HostList,
    cores: impl Fn(&hosts::Host) -> usize,
) -> Result<Vec<Placement>, hosts::HostsError> {
    hosts::place_by(
        hosts,
        launch.world_size(),
        cores,
        launch.binding.oversubscribe,
        launch.binding.map_by == Some(crate::binding::MapBy::Node),
    )
}

/// A reader of what failed ranks report losing, through psyrun's own connection to the store
/// (on loopback when the store listens on every address).
fn loss_reports(store: &StoreServer, contract: &Contract) -> Option<LossReports> {
    let mut addr = store.addr();
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        });
    }
    let secret = Secret::from_hex(&contract.secret_hex).ok()?;
    Some(LossReports::new(
        &addr.to_string(),
        secret,
        &contract.job_id,
    ))
}

/// Watches the store for ranks the others counted failed while they run, for the supervisor
/// (which ends them through their agents).
fn watch_declarations(
    store: &StoreServer,
    contract: &Contract,
    running: &Running,
) -> Result<Option<crate::losses::DeclarationWatch>, Error> {
    let (Some(reports), Ok(secret)) = (
        loss_reports(store, contract),
        Secret::from_hex(&contract.secret_hex),
    ) else {
        return Ok(None);
    };
    crate::losses::watch_declarations(
        reports.store(),
        secret,
        &contract.job_id,
        running.router.supervisor.clone(),
    )
    .map(Some)
    .map_err(|e| Error::io("starting the thread that watches for failed ranks", e))
}

/// Every program's `-x` values, read before any host is contacted.
fn wire_x_values(launch: &Launch) -> Result<Vec<WireEnv>, Error> {
    launch
        .apps
        .iter()
        .map(|app| {
            crate::plan::x_values(&app.env).map(|vars| {
                vars.into_iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                    .collect()
            })
        })
        .collect()
}

/// A multi-host job between its phases: the hosts, all reached, and where its ranks run.
struct RemoteJob<'a> {
    launch: &'a Launch,
    console: Arc<Console>,
    /// Every host's name, in host order, for messages.
    names: Vec<String>,
    /// Every host, in host order.
    reached: Vec<Reached>,
    /// A sender on the links' event channel, which keeps it open until the tear-down.
    sender: Sender<HostEvent>,
    /// The host of every rank (set by [`RemoteJob::place`]).
    host_of: Vec<usize>,
    /// The hosts that run at least one rank, in host order (set by [`RemoteJob::place`]).
    used: Vec<usize>,
}

/// Preflight: reaches every host in parallel ([`super::preflight::reach_all`]). A host that
/// cannot be reached fails the launch, naming every such host, before anything is placed or
/// started. Returns the job and the channel on which the links report.
fn preflight<'a>(
    launch: &'a Launch,
    hosts: &HostList,
    settings: &PreflightSettings,
    console: Arc<Console>,
) -> Result<(RemoteJob<'a>, Receiver<HostEvent>), Error> {
    let pre = super::preflight::reach_all(hosts, settings);
    let failed: Vec<String> = hosts
        .iter()
        .zip(&pre.hosts)
        .filter_map(|(h, r)| r.as_ref().err().map(|why| format!("{}: {why}", h.name)))
        .collect();
    if !failed.is_empty() {
        return Err(Error::Remote {
            message: format!(
                "cannot reach {} of {} host(s); nothing was started:\n  {}",
                failed.len(),
                hosts.len(),
                failed.join("\n  ")
            ),
            code: crate::exit::LAUNCH_FAILED,
        });
    }
    let Preflight {
        hosts: reached,
        events,
        sender,
    } = pre;
    let job = RemoteJob {
        launch,
        console,
        names: hosts.iter().map(|h| h.name.clone()).collect(),
        reached: reached.into_iter().flatten().collect(),
        sender,
        host_of: Vec::new(),
        used: Vec::new(),
    };
    Ok((job, events))
}

/// What every rank of the job is told besides its place.
struct Contract {
    job_id: String,
    secret_hex: String,
    store_port: u16,
    master_addr: String,
    master_port: u16,
}

/// Where the ranks stand once every host was told to start them.
struct Running {
    router: Router,
    /// Where the supervisor's events arrive (exits, lost hosts, signals).
    events: Receiver<Event>,
    /// psyrun's signal handlers, kept until the tear-down.
    signals: SignalWatch,
}

/// How the job ended, and what the tear-down needs.
struct Supervised {
    outcome: Outcome,
    /// Why the ranks could not all be started, if they could not.
    launch_error: Option<Error>,
    /// Where the router says that a host is done (or its link closed).
    done: Receiver<usize>,
    signals: SignalWatch,
}

impl RemoteJob<'_> {
    /// Place: puts the ranks on the hosts (each host's slots, else the cores its agent reported;
    /// `--map-by node` deals them round-robin) and notes which hosts are used.
    fn place(&mut self, hosts: &HostList) -> Result<Vec<Placement>, Error> {
        let reached = &self.reached;
        let placements = place_ranks(self.launch, hosts, |h| {
            hosts
                .iter()
                .position(|x| x.name == h.name)
                .map_or(1, |i| reached[i].cores)
        })
        .map_err(|e| Error::Usage(e.to_string()))?;
        self.host_of = placements.iter().map(|p| p.host).collect();
        let mut has_ranks = vec![false; self.names.len()];
        for &h in &self.host_of {
            has_ranks[h] = true;
        }
        self.used = (0..self.names.len()).filter(|&h| has_ranks[h]).collect();
        Ok(placements)
    }

    /// Serves the job's store for every host (see [`RemoteJob::store_address`]) and fixes what
    /// every rank is told: the secret, the job id, and rank 0's host as the torch master.
    fn serve_store(&self) -> Result<(StoreServer, Contract), Error> {
        let secret = Secret::generate()?;
        let store = job::serve_store(
            self.store_address(),
            &secret,
            self.launch.world_size(),
            &self.console,
        )?;
        let rank0_host = &self.reached[self.host_of[0]];
        let contract = Contract {
            job_id: job::new_job_id()?,
            secret_hex: secret.to_hex(),
            store_port: store.addr().port(),
            master_addr: rank0_host
                .peer
                .or_else(|| self.own_address())
                .unwrap_or(job::LOCAL_ADDR)
                .to_string(),
            master_port: rank0_host.free_port,
        };
        Ok((store, contract))
    }

    /// Where the store listens: on every address (IPv6 if any link is), so that each host can
    /// be told the address psyrun has on its link; on loopback if every agent runs here.
    fn store_address(&self) -> IpAddr {
        let any_v6 = self
            .reached
            .iter()
            .any(|r| matches!(r.local, Some(IpAddr::V6(_))));
        if self.reached.iter().all(|r| r.local.is_none()) {
            job::LOCAL_ADDR
        } else if any_v6 {
            Ipv6Addr::UNSPECIFIED.into()
        } else {
            Ipv4Addr::UNSPECIFIED.into()
        }
    }

    /// psyrun's address towards the other hosts (the first that has one), if the job reaches
    /// any host over the network. Ranks on psyrun's own host (a local link, no address) are
    /// given this instead of loopback when other hosts take part: they advertise the address
    /// by which they reach the store, and 127.0.0.1 would send ranks elsewhere to themselves
    /// (psyrun in an `sbatch` script runs on the allocation's first node).
    fn own_address(&self) -> Option<IpAddr> {
        self.reached.iter().find_map(|r| r.local)
    }

    /// The environment of the rank at `p`: the store at psyrun's address on its host's link
    /// (on psyrun's own host, its address towards the others, if there are others).
    fn rank_env(&self, contract: &Contract, p: &Placement) -> RankEnv {
        let store_ip = self.reached[p.host]
            .local
            .or_else(|| self.own_address())
            .unwrap_or(job::LOCAL_ADDR);
        let info = JobInfo {
            job_id: contract.job_id.clone(),
            secret_hex: contract.secret_hex.clone(),
            store: SocketAddr::new(store_ip, contract.store_port).to_string(),
            master_addr: contract.master_addr.clone(),
            master_port: contract.master_port,
            restart_count: self.launch.restart_count,
            max_restarts: self.launch.max_restarts,
        };
        job::rank_env(p, self.launch.world_size(), &info)
    }

    /// Hand out: sends every used host its part of the job and waits until every one has
    /// checked it (programs found, directories present, bindings planned). A refusal anywhere
    /// fails the launch before any rank starts, naming every host that refused. Returns what
    /// the links said meanwhile that belongs to the start.
    fn hand_out(
        &self,
        settings: &PreflightSettings,
        placements: &[Placement],
        app_envs: &[WireEnv],
        contract: &Contract,
        events: &Receiver<HostEvent>,
    ) -> Result<Vec<HostEvent>, Error> {
        let specs = self.rank_specs(placements, app_envs, contract);
        let cwd = std::env::current_dir().unwrap_or_default();
        let mut mpi = self.mpi_spec(&specs);
        for (h, ranks) in specs.into_iter().enumerate() {
            if ranks.is_empty() {
                continue;
            }
            mpi.node = self.used.iter().position(|&u| u == h).unwrap_or(0) as u32;
            self.reached[h].link.send(ToAgent::Job(JobSpec {
                job_id: contract.job_id.clone(),
                grace_ms: self.launch.grace.as_millis() as u64,
                heartbeat_timeout_ms: settings.heartbeat_timeout.as_millis() as u64,
                cwd: cwd.as_os_str().as_bytes().to_vec(),
                binding: super::agent::binding_spec(&self.launch.binding),
                ranks,
                mpi: mpi.clone(),
            }));
        }
        let (bindings, early) = self.await_ready(events)?;
        if self.launch.binding.report {
            for &h in &self.used {
                for line in bindings[h].iter().flatten() {
                    self.console.message(&format!("{} {line}", self.names[h]));
                }
            }
        }
        Ok(early)
    }

    /// The job as the agents' MPI services describe it: every used host (by the name it gave
    /// itself) with its ranks, and each rank's program number; `node` is set per host.
    fn mpi_spec(&self, specs: &[Vec<RankSpec>]) -> MpiSpec {
        MpiSpec {
            choice: self.launch.mpi.code(),
            node: 0,
            timeout_ms: crate::local::service_timeout(self.launch).as_millis() as u64,
            hosts: self
                .used
                .iter()
                .map(|&h| {
                    let ranks = specs[h].iter().map(|r| r.rank).collect();
                    (self.reached[h].hostname.clone(), ranks)
                })
                .collect(),
            appnum: self
                .launch
                .app_of_ranks()
                .into_iter()
                .map(|a| a as u32)
                .collect(),
        }
    }

    /// Every host's ranks as the agents get them: program, arguments, the `-x` variables then
    /// the launch contract's, working directory.
    fn rank_specs(
        &self,
        placements: &[Placement],
        app_envs: &[WireEnv],
        contract: &Contract,
    ) -> Vec<Vec<RankSpec>> {
        let mut specs: Vec<Vec<RankSpec>> = vec![Vec::new(); self.names.len()];
        for (p, &app_index) in placements.iter().zip(&self.launch.app_of_ranks()) {
            let app = &self.launch.apps[app_index];
            let mut env = app_envs[app_index].clone();
            env.extend(
                self.rank_env(contract, p)
                    .to_vars()
                    .into_iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.into_bytes())),
            );
            specs[p.host].push(RankSpec {
                rank: p.rank as u32,
                local_rank: p.local_rank as u32,
                program: app.program.as_bytes().to_vec(),
                args: app.args.iter().map(|a| a.as_bytes().to_vec()).collect(),
                env,
                wdir: app.wdir.as_ref().map(|d| d.as_os_str().as_bytes().to_vec()),
            });
        }
        specs
    }

    /// Waits up to [`READY_WAIT`] until every used host has said Ready (with its binding
    /// report) or why not. Returns each host's report and the events that belong to the start;
    /// or, if any host refused, closed or stayed silent, the error naming them all.
    fn await_ready(
        &self,
        events: &Receiver<HostEvent>,
    ) -> Result<(BindingReports, Vec<HostEvent>), Error> {
        let mut ready: BindingReports = vec![None; self.names.len()];
        let mut refusals = Vec::new();
        let mut early = Vec::new();
        let mut answered = vec![false; self.names.len()];
        let deadline = Instant::now() + READY_WAIT;
        while self.used.iter().any(|&h| !answered[h]) {
            let Ok(e) = events.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                for &h in self.used.iter().filter(|&&h| !answered[h]) {
                    refusals.push(self.refusal(
                        h,
                        format!("did not confirm its part of the job within {READY_WAIT:?}"),
                    ));
                }
                break;
            };
            let host = e.host;
            match e.event {
                LinkEvent::Frame(FromAgent::Ready { bindings }) => ready[host] = Some(bindings),
                LinkEvent::Frame(FromAgent::Refused { message, code }) => {
                    refusals.push((host, format!("{}: {message}", self.names[host]), code));
                }
                LinkEvent::Closed { why, .. } => refusals.push(self.refusal(
                    host,
                    format!("the link closed before the job started: {why}"),
                )),
                LinkEvent::Diagnostic(line) => {
                    self.console
                        .message(&format!("{}: {line}", self.names[host]));
                    continue;
                }
                _ => {
                    early.push(e);
                    continue;
                }
            }
            answered[host] = true;
        }
        if refusals.is_empty() {
            Ok((ready, early))
        } else {
            Err(refused(refusals))
        }
    }

    /// Host `h` cannot run its part, for `why`: exit code [`crate::exit::LAUNCH_FAILED`].
    fn refusal(&self, h: usize, why: String) -> (usize, String, u8) {
        (
            h,
            format!("{}: {why}", self.names[h]),
            crate::exit::LAUNCH_FAILED,
        )
    }

    /// Start: tells every used host to start its ranks, then collects every rank's pid
    /// (routing output and early exits as they come, in order) until all run, one could not
    /// start, a link closes, or [`READY_WAIT`] passes. Signals are watched from here on.
    fn start(
        &self,
        events: &Receiver<HostEvent>,
        early: Vec<HostEvent>,
        t0: Instant,
    ) -> Result<Running, Error> {
        let outputs = self.outputs()?;
        let launched_at = t0.elapsed();
        for &h in &self.used {
            self.reached[h].link.send(ToAgent::Start);
        }
        let (sup_tx, sup_rx) = mpsc::channel();
        let signals = SignalWatch::start(sup_tx.clone())
            .map_err(|e| Error::io("installing psyrun's signal handlers", e))?;
        let mut router = Router {
            outputs,
            console: self.console.clone(),
            supervisor: sup_tx,
            names: self.names.clone(),
            pids: vec![None; self.launch.world_size()],
            host_of: self.host_of.clone(),
            launch_error: None,
            lost_while_starting: false,
        };
        for e in early {
            router.route(e);
        }
        let deadline = Instant::now() + READY_WAIT;
        while router.pids.iter().any(Option::is_none) && router.launch_error.is_none() {
            match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(e) => router.route(e),
                Err(_) => {
                    router.launch_error = Some(Error::Remote {
                        message: format!("the ranks were not all running within {READY_WAIT:?}"),
                        code: crate::exit::LAUNCH_FAILED,
                    });
                }
            }
        }
        self.report_launch_time(t0, launched_at);
        Ok(Running {
            router,
            events: sup_rx,
            signals,
        })
    }

    /// Where every rank's output goes on psyrun's side: the console as the command line asks,
    /// and the `--output-dir` files.
    fn outputs(&self) -> Result<Outputs, Error> {
        let world = self.launch.world_size();
        let plan = self.launch.look_plan();
        let looks: Vec<Look> = (0..world)
            .map(|r| plan.look(&self.names[self.host_of[r]], r))
            .collect();
        let files = open_output_files(self.launch.output_dir.as_deref(), world)?;
        Ok(Outputs::new(
            &self.console,
            &looks,
            files,
            self.host_of.clone(),
        ))
    }

    /// With `PSYRUN_REPORT_LAUNCH` set: how long the hosts took to be ready and the ranks to run.
    fn report_launch_time(&self, t0: Instant, launched_at: Duration) {
        if std::env::var_os("PSYRUN_REPORT_LAUNCH").is_some() {
            self.console.message(&format!(
                "launch: {} host(s) ready after {:.1} ms, all {} ranks running after {:.1} ms",
                self.used.len(),
                launched_at.as_secs_f64() * 1e3,
                self.launch.world_size(),
                t0.elapsed().as_secs_f64() * 1e3
            ));
        }
    }

    /// Supervise: one [`Supervisor`] for the whole job, which stops ranks through the agents
    /// (at once, if the start failed), while a thread routes the links' events to it (output,
    /// exits, lost hosts) and notes the hosts that are done.
    fn supervise(
        &self,
        events: Receiver<HostEvent>,
        running: Running,
        losses: Option<LossReports>,
    ) -> Result<Supervised, Error> {
        let Running {
            mut router,
            events: sup_rx,
            signals,
        } = running;
        let stopper = AgentStopper {
            links: self.reached.iter().map(|r| r.link.clone()).collect(),
            host_of: self.host_of.clone(),
        };
        let launch = self.launch;
        let mut supervisor =
            Supervisor::new(&self.console, stopper, launch.grace, launch.timeout, sup_rx);
        if let Some(losses) = losses {
            supervisor = supervisor.with_losses(losses.into_lost_by());
        }
        if launch.on_failure == crate::args::OnFailure::Continue {
            supervisor = supervisor.going_on_after_failures();
        }
        for (rank, pid) in router.pids.iter().enumerate() {
            if let Some(pid) = pid {
                supervisor.add_rank_on(rank, *pid, Some(self.names[self.host_of[rank]].clone()));
            }
        }
        // What went wrong while starting stays here; the router starts afresh.
        let launch_error = router.launch_error.take();
        if launch_error.is_some() {
            supervisor.stop(Cause::LaunchFailed);
        }
        let done = router.run_on_thread(events)?;
        Ok(Supervised {
            outcome: supervisor.run(),
            launch_error,
            done,
            signals,
        })
    }

    /// Tear down: tells every used host to finish (its agent kills what is left, drains the
    /// output and removes the job's shared memory) and waits for their confirmations, not
    /// beyond [`OUTPUT_DRAIN`] and five seconds; then closes the links and stops watching
    /// signals and serving the store. The router ends once every link has closed; a link that
    /// hangs is not waited for.
    fn tear_down(self, done: &Receiver<usize>, signals: SignalWatch, store: StoreServer) {
        // Every host, those without ranks too: a relaying agent's Done waits for the hosts
        // below it, and their links through it stay open until they are done.
        for r in &self.reached {
            r.link.send(ToAgent::Finish);
        }
        let deadline = Instant::now() + OUTPUT_DRAIN + Duration::from_secs(5);
        let mut finished = vec![false; self.names.len()];
        while self.used.iter().any(|&h| !finished[h]) {
            match done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(h) => finished[h] = true,
                Err(_) => {
                    let stuck: Vec<&str> = self
                        .used
                        .iter()
                        .filter(|&&h| !finished[h])
                        .map(|&h| self.names[h].as_str())
                        .collect();
                    self.console.message(&format!(
                        "no end-of-job confirmation from {} (their agents stop their ranks when \
                         the link closes); not waiting",
                        stuck.join(", ")
                    ));
                    break;
                }
            }
        }
        drop(self.reached);
        drop(self.sender);
        drop(signals);
        drop(store);
    }
}

/// A failed hand-out: every host's reason, in host order (so the first host's reason, and exit
/// code, leads), and that nothing was started.
fn refused(mut refusals: Vec<(usize, String, u8)>) -> Error {
    refusals.sort_by_key(|r| r.0);
    let code = refusals.first().map_or(crate::exit::LAUNCH_FAILED, |r| r.2);
    let lines: Vec<String> = refusals.into_iter().map(|r| r.1).collect();
    Error::Remote {
        message: format!("{}\n(nothing was started on any host)", lines.join("\n")),
        code,
    }
}

/// Routes the links' events once ranks may be running: output to [`Outputs`], pids and the
/// first failure to start to the start phase, exits and lost hosts to the supervisor.
struct Router {
    outputs: Outputs,
    /// Where the hosts' diagnostics go.
    console: Arc<Console>,
    /// The supervisor's event channel.
    supervisor: Sender<Event>,
    /// Every host's name, in host order.
    names: Vec<String>,
    /// Every rank's pid, once its host has said Started.
    pids: Vec<Option<u32>>,
    /// Every rank's host, by index into `names`.
    host_of: Vec<usize>,
    /// The first reason the ranks could not all be started.
    launch_error: Option<Error>,
    /// A link closed before every rank had started (that was the launch's error).
    lost_while_starting: bool,
}

impl Router {
    /// The link to host `h` closed: if ranks had not all started, the first such loss is the
    /// launch's error, and a host lost after it with ranks not yet started (a host a lost relay
    /// reached, say) is named too (the supervisor names only hosts whose ranks it knows).
    fn closed_while_starting(&mut self, h: usize, why: &str) {
        let host = &self.names[h];
        let unstarted = (self.host_of.iter())
            .zip(&self.pids)
            .filter(|(&on, pid)| on == h && pid.is_none())
            .count();
        if self.launch_error.is_none()
            && !self.lost_while_starting
            && self.pids.iter().any(Option::is_none)
        {
            self.lost_while_starting = true;
            self.launch_error = Some(Error::Remote {
                message: format!("lost the link to host {host} ({why}) while starting the ranks"),
                code: crate::exit::LAUNCH_FAILED,
            });
        } else if unstarted > 0 {
            self.console.message(&format!(
                "also lost the link to host {host} ({why}) before {} started there",
                crate::supervise::count(unstarted)
            ));
        }
    }

    /// Handles one event from a link.
    fn route(&mut self, e: HostEvent) {
        let host = &self.names[e.host];
        match e.event {
            LinkEvent::Frame(FromAgent::Output {
                rank,
                stream,
                time_us,
                more,
                bytes,
            }) => self.outputs.frame(
                rank as usize,
                stream,
                Frame {
                    time_us,
                    more,
                    bytes,
                },
            ),
            LinkEvent::Frame(FromAgent::Started { rank, pid }) => {
                if let Some(slot) = self.pids.get_mut(rank as usize) {
                    *slot = Some(pid);
                }
            }
            LinkEvent::Frame(FromAgent::Failed { message, code, .. }) => {
                if self.launch_error.is_none() {
                    self.launch_error = Some(Error::Remote {
                        message: format!("on {host}: {message}"),
                        code,
                    });
                }
            }
            LinkEvent::Frame(FromAgent::Paused { rank, signal }) => {
                let rank = rank as usize;
                let _ = self.supervisor.send(match signal {
                    Some(signal) => Event::Stopped { rank, signal },
                    None => Event::Continued { rank },
                });
            }
            LinkEvent::Frame(FromAgent::Aborted {
                rank,
                code,
                message,
            }) => {
                let _ = self.supervisor.send(Event::Aborted {
                    rank: rank as usize,
                    code,
                    message,
                });
            }
            LinkEvent::Frame(FromAgent::Exited { rank, ended }) => {
                let _ = self.supervisor.send(Event::Exited {
                    rank: rank as usize,
                    termination: ended,
                });
            }
            LinkEvent::Closed { why, .. } => {
                self.outputs.host_closed(e.host);
                self.closed_while_starting(e.host, &why);
                let _ = self.supervisor.send(Event::HostLost {
                    host: self.names[e.host].clone(),
                    why,
                });
            }
            LinkEvent::Diagnostic(line) => {
                self.console.message(&format!("{host}: {line}"));
            }
            LinkEvent::Frame(_) => {}
        }
    }

    /// Routes every event from `events` on a thread of its own until every link has closed;
    /// returns the channel on which it names each host that said Done or whose link closed.
    fn run_on_thread(mut self, events: Receiver<HostEvent>) -> Result<Receiver<usize>, Error> {
        let (done_tx, done_rx) = mpsc::channel::<usize>();
        std::thread::Builder::new()
            .name("psyrun-router".into())
            .stack_size(512 * 1024)
            .spawn(move || {
                while let Ok(e) = events.recv() {
                    if let LinkEvent::Frame(FromAgent::Done) = e.event {
                        let _ = done_tx.send(e.host);
                        continue;
                    }
                    if let LinkEvent::Closed { .. } = e.event {
                        let _ = done_tx.send(e.host);
                    }
                    self.route(e);
                }
                self.outputs.flush();
            })
            .map_err(|e| Error::io("starting the thread that forwards the hosts' output", e))?;
        Ok(done_rx)
    }
}

/// Delivers the supervisor's signals through the agents.
struct AgentStopper {
    links: Vec<AgentLink>,
    host_of: Vec<usize>,
}

impl Stopper for AgentStopper {
    fn signal(&mut self, rank: usize, _pid: u32, signal: i32) -> std::io::Result<()> {
        if let Some(link) = self.host_of.get(rank).and_then(|&h| self.links.get(h)) {
            // A closed link's ranks are being stopped by their agent already.
            link.send(ToAgent::Signal {
                rank: rank as u32,
                signal,
            });
        }
        Ok(())
    }
}
