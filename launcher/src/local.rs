//! Running a planned job ([`crate::plan::JobPlan`]) on this machine: serve the job's store,
//! start every rank with its environment and its output forwarded, supervise the ranks, and
//! tear down (kill what is left in their process groups, drain their output, remove the shared
//! memory they left). A [`Watchdog`] kills the ranks' process groups if psyrun dies first.

use crate::args::{Launch, OnFailure};
use crate::error::Error;
use crate::job::{self, JobInfo};
use crate::losses::{self, LossReports};
use crate::output::{self, Console, LookPlan, RankFiles, Stream, OUTPUT_DRAIN};
use crate::plan::{JobPlan, RankPlan};
use crate::pmi::serve::{HostServing, SilenceCheck};
use crate::pmi::simple::leftovers;
use crate::pmi::{self, Alone as OneHost, Exchange, HostRanks, Interface, JobMap, RankAccess};
use crate::spawn::{self, OutputSink, RankCommand, RankState, Watched};
use crate::supervise::{Cause, Event, Outcome, ProcessGroups, SignalWatch, Supervisor};
use crate::watchdog::Watchdog;
use psyne::contract::RankEnv;
use psyne::internal::StoreServer;
use psyne::Secret;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs a prepared job (see [`crate::prepare`]) on this machine, supervises it and returns how
/// it ended. Sets up the store and the secret, prints the bindings if asked, starts each rank
/// with its environment, forwards output to `console` (as `launch` says: tags, timestamps,
/// shown ranks, files), and stops the job as [`crate::supervise`] describes. It stays in this
/// function until the ranks are gone. Returns an error if a rank could not be started, after
/// stopping the ones that were.
pub fn run_plan(launch: &Launch, plan: &JobPlan, console: Arc<Console>) -> Result<Outcome, Error> {
    let began = std::time::SystemTime::now();
    let mut files = output::open_output_files(launch.output_dir.as_deref(), plan.ranks.len())?;
    let (store, info) = serve_job(launch, &console)?;
    if launch.binding.report {
        for line in plan.binding_report() {
            console.message(&line);
        }
    }
    let watchdog = Watchdog::start(plan.ranks.len())
        .map_err(|e| Error::io("starting psyrun's watchdog process", e))?;
    let (events_tx, events_rx) = mpsc::channel();
    let serving = serve_mpi(launch, plan, &info, &events_tx)?;
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
    if launch.on_failure == OnFailure::Continue {
        supervisor = supervisor.going_on_after_failures();
    }
    let mut _declarations = None;
    if let Ok(secret) = Secret::from_hex(&info.secret_hex) {
        let reports = LossReports::new(&info.store, secret.clone(), &info.job_id);
        supervisor = supervisor.with_losses(reports.into_lost_by());
        let watch =
            losses::watch_declarations(&info.store, secret, &info.job_id, events_tx.clone())
                .map_err(|e| Error::io("starting the thread that watches for failed ranks", e))?;
        _declarations = Some(watch);
    }
    let starter = Starter {
        launch,
        looks: launch.look_plan(),
        plan,
        console: &console,
        events: events_tx,
        drained: drained_tx,
    };
    let started = starter.start_all(&info, &mut files, &mut supervisor, &watchdog, serving);
    if started.error.is_some() {
        started.say_stopping(&console);
        supervisor.stop(Cause::LaunchFailed);
    }
    let outcome = supervisor.run();
    tear_down(
        &started,
        &drained_rx,
        &console,
        (signals, store, watchdog),
        (&info.job_id, began),
    );
    match started.error {
        Some(e) => Err(e),
        None => Ok(outcome),
    }
}

/// Generates the job's secret and id, serves its store on loopback and picks the torch master
/// port: what every rank is told. Each attempt of a restarted job gets its own.
fn serve_job(launch: &Launch, console: &Arc<Console>) -> Result<(StoreServer, JobInfo), Error> {
    let secret = Secret::generate()?;
    let store = job::serve_store(job::LOCAL_ADDR, &secret, launch.world_size(), console)?;
    let master_port = job::free_port(job::LOCAL_ADDR, &[store.addr().port()])
        .map_err(|e| Error::io("finding a free port for MASTER_PORT", e))?;
    let info = JobInfo {
        job_id: job::new_job_id()?,
        secret_hex: secret.to_hex(),
        store: store.addr().to_string(),
        master_addr: job::LOCAL_ADDR.to_string(),
        master_port,
        restart_count: launch.restart_count,
        max_restarts: launch.max_restarts,
    };
    Ok((store, info))
}

/// Starts the MPI services the job's programs are served ([`crate::pmi`]) on this one host:
/// their key-value space is the job's. An abort a rank asks for becomes an [`Event::Aborted`].
fn serve_mpi(
    launch: &Launch,
    plan: &JobPlan,
    info: &JobInfo,
    events: &Sender<Event>,
) -> Result<Option<HostServing>, Error> {
    let needed: Vec<Interface> = plan
        .served
        .iter()
        .flat_map(|s| s.interfaces.iter().copied())
        .collect();
    if needed.is_empty() {
        return Ok(None);
    }
    let map = Arc::new(JobMap {
        job_id: info.job_id.clone(),
        world_size: plan.ranks.len(),
        hosts: vec![HostRanks {
            name: plan.host.clone(),
            ranks: (0..plan.ranks.len()).collect(),
        }],
        appnum: plan.ranks.iter().map(|r| r.app).collect(),
        tmpdir: std::env::temp_dir(),
    });
    let events = Mutex::new(events.clone());
    let report = pmi::on_abort(move |rank, code, message| {
        let events = events.lock().unwrap_or_else(|p| p.into_inner());
        let _ = events.send(Event::Aborted {
            rank,
            code,
            message,
        });
    });
    let one_host = |_| -> Arc<dyn Exchange> { Arc::new(OneHost) };
    let timeout = service_timeout(launch);
    HostServing::start(&map, 0, &needed, &one_host, report, timeout)
        .map(Some)
        .map_err(|e| Error::Remote {
            message: format!("serving the job's MPI programs: {e}"),
            code: crate::exit::LAUNCH_FAILED,
        })
}

/// How long an MPI service waits for a barrier: the job's `PSY_TIMEOUT` (as psyne's own waits),
/// within `--timeout`.
pub fn service_timeout(launch: &Launch) -> Duration {
    let own = psyne::contract::timeout().unwrap_or(psyne::contract::DEFAULT_TIMEOUT);
    launch.timeout.map_or(own, |t| t.min(own))
}

/// What starting the ranks left behind.
#[derive(Default)]
struct Started {
    /// The pids of the ranks running, in rank order.
    pids: Vec<u32>,
    /// How many output streams are being forwarded.
    streams: usize,
    /// Why the start stopped early, if it did.
    error: Option<Error>,
    /// The MPI services of the job, stopped when it ends.
    serving: Option<HostServing>,
}

impl Started {
    /// Says that the ranks already running are being stopped because the next could not start.
    fn say_stopping(&self, console: &Console) {
        let n = self.pids.len();
        if n > 0 {
            let plural = if n == 1 { "" } else { "s" };
            console.message(&format!(
                "rank {n} could not be started; stopping the {n} rank{plural} already running",
            ));
        }
    }
}

/// Starts the ranks of one job; consumed by [`Starter::start_all`], which drops its senders so
/// that the channels end with the ranks' threads.
struct Starter<'a> {
    launch: &'a Launch,
    /// How the ranks' lines look on the console.
    looks: LookPlan,
    plan: &'a JobPlan,
    console: &'a Arc<Console>,
    /// Where each rank's end goes (the supervisor).
    events: Sender<Event>,
    /// Where each forwarder says its stream ended (the rank).
    drained: Sender<usize>,
}

impl Starter<'_> {
    /// Starts every rank in order, each watched by `supervisor` and its process group by
    /// `watchdog`, until one cannot start.
    fn start_all(
        self,
        info: &JobInfo,
        files: &mut [RankFiles],
        supervisor: &mut Supervisor<'_, ProcessGroups>,
        watchdog: &Watchdog,
        mut serving: Option<HostServing>,
    ) -> Started {
        let envs = job::rank_envs(&self.plan.placements(), info);
        let mut started = Started::default();
        let fault = fault_after_spawn(self.launch.restart_count);
        let watchdog = watchdog.fd();
        for ((env, files), rank_plan) in envs.iter().zip(files.iter_mut()).zip(&self.plan.ranks) {
            let mut command = rank_command(rank_plan, env);
            let served = self.plan.served_of(rank_plan);
            let access = match serving.as_mut().map(|s| s.access(env.rank, served)) {
                Some(Ok(access)) => access,
                Some(Err(e)) => {
                    started.error = Some(Error::Remote {
                        message: format!("preparing rank {} for its MPI service: {e}", env.rank),
                        code: crate::exit::LAUNCH_FAILED,
                    });
                    break;
                }
                None => RankAccess::default(),
            };
            command
                .env
                .extend(access.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            command.inherit = access.inherit.as_ref().map(AsRawFd::as_raw_fd);
            let silence = serving.as_ref().and_then(|s| {
                s.silence_check(env.rank, served, &rank_plan.program, self.plan.ranks.len())
            });
            let result = self.start_rank(env.rank, &command, files, watchdog, silence);
            drop(access);
            match result {
                Ok(Watched { pid, forwarders }) => {
                    if fault == Some(env.rank) {
                        die_now();
                    }
                    // The rank told the watchdog its group itself, before its program ran.
                    supervisor.add_rank(env.rank, pid);
                    started.pids.push(pid);
                    started.streams += forwarders;
                }
                Err(e) => {
                    started.error = Some(e);
                    break;
                }
            }
        }
        started.serving = serving;
        started
    }

    /// Starts one rank with its output forwarded to the console (and its files) and its end
    /// reported to the supervisor.
    fn start_rank(
        &self,
        rank: usize,
        command: &RankCommand,
        files: &mut RankFiles,
        watchdog: Option<RawFd>,
        silence: Option<SilenceCheck>,
    ) -> Result<Watched, Error> {
        let look = self.looks.look(&self.plan.host, rank);
        let sinks = |stream: Stream| -> OutputSink {
            let (console, look, drained) =
                (self.console.clone(), look.clone(), self.drained.clone());
            let file = files[stream as usize].take();
            Box::new(move |reader| {
                output::forward(reader, look.sink(&console, stream, file));
                let _ = drained.send(rank);
            })
        };
        let (events, console) = (self.events.clone(), self.console.clone());
        let on_state = move |state| {
            if let (RankState::Ended(_), Some(check)) = (&state, &silence) {
                if let Some(said) = check.complaint() {
                    console.message(&said);
                }
            }
            let _ = events.send(match state {
                RankState::Stopped(signal) => Event::Stopped { rank, signal },
                RankState::Continued => Event::Continued { rank },
                RankState::Ended(termination) => Event::Exited { rank, termination },
            });
        };
        spawn::spawn_watched(rank, command, watchdog, "psyrun", sinks, on_state)
    }
}

/// The test hook [`FAULT_AFTER_SPAWN`] names, for attempt `restart_count`: the rank after
/// whose start psyrun kills itself, if any.
fn fault_after_spawn(restart_count: usize) -> Option<usize> {
    let value = std::env::var(FAULT_AFTER_SPAWN).ok()?;
    let (attempt, rank) = value.split_once(':')?;
    (attempt.parse::<usize>().ok()? == restart_count)
        .then(|| rank.parse().ok())
        .flatten()
}

/// A test hook: `PSYRUN_TEST_SIGKILL_AFTER_SPAWN=ATTEMPT:RANK` makes psyrun SIGKILL itself the
/// moment the start of rank RANK of attempt ATTEMPT (`PSY_RESTART_COUNT`) returns, before it
/// records the rank anywhere: the instant in which psyrun's death once left that rank running
/// (`launcher/tests/it/supervision.rs`).
pub const FAULT_AFTER_SPAWN: &str = "PSYRUN_TEST_SIGKILL_AFTER_SPAWN";

/// Ends psyrun at once, as `kill -9` would (the test hook above).
fn die_now() -> ! {
    // SAFETY: raising a signal on this process has no memory-safety preconditions.
    unsafe { libc::raise(libc::SIGKILL) };
    std::process::abort()
}

/// How to start one rank: its program and arguments, its `-x` variables then the launch
/// contract's, its directory and CPUs.
fn rank_command(rank_plan: &RankPlan, env: &RankEnv) -> RankCommand {
    RankCommand {
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
        inherit: None,
    }
}

/// After the supervisor is done: kills whatever the ranks left in their process groups (so that
/// nothing outlives the job and the output pipes close) and disarms the watchdog, drains the
/// output, stops watching signals and serving the store, and removes the shared memory the job
/// left (psyne's segments, those its MPI libraries announced or name by the job id, and MPI
/// segments made since the job `began` that nothing uses any more:
/// [`leftovers::orphans_since`]).
fn tear_down(
    started: &Started,
    drained: &Receiver<usize>,
    console: &Console,
    serving: (SignalWatch, StoreServer, Watchdog),
    (job_id, began): (&str, std::time::SystemTime),
) {
    for &pid in &started.pids {
        let _ = spawn::signal_group(pid, libc::SIGKILL);
    }
    let (signals, store, watchdog) = serving;
    watchdog.disarm();
    drain(drained, started.streams, console);
    drop((signals, store));
    let by_mpi = started
        .serving
        .as_ref()
        .map_or(0, HostServing::remove_leftovers)
        + leftovers::orphans_since(began)
            .iter()
            .filter(|f| std::fs::remove_file(f).is_ok())
            .count();
    if let Ok(n) = job::remove_leftover_segments(job_id).map(|n| n + by_mpi) {
        if n > 0 {
            console.message(&format!(
                "removed {n} shared-memory segment(s) the job left in /dev/shm"
            ));
        }
    }
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
