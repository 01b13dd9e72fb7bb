//! The agent: `psyrun --agent`, which psyrun starts on every host of a multi-host job (over SSH,
//! or as a local child) and talks to over the agent's stdin and stdout ([`super::protocol`]).
//!
//! It says hello (version, host name, cores, a free port), receives its host's part of the job,
//! checks it (programs found, directories present, bindings planned on this host with hwloc)
//! and says ready or why not, and on Start spawns its ranks exactly as a local psyrun does
//! ([`crate::spawn`]: own process group, bound before exec, SIGKILL when the agent dies, and a
//! [`crate::watchdog`] that kills their process groups if the agent is killed). It
//! streams their output back line by line stamped with the time it was read here, reports
//! their pids and how they end, and signals them when psyrun asks.
//!
//! The agent never outlives its link: end of file on stdin, a broken stdout, a garbled message,
//! or no word from psyrun for the heartbeat timeout makes it stop its ranks itself (SIGTERM,
//! the job's grace period, SIGKILL), remove the job's shared memory on this host, and exit. So a
//! launcher that is killed, or a host whose network goes away, leaves no orphans behind.

use super::agent_mpi::AgentMpi;
use super::agent_out::Out;
use super::constants::HEARTBEAT;
use super::protocol::{
    path_from, BindingSpec, FrameReader, FromAgent, JobSpec, ToAgent, ALL_RANKS,
};
use super::relay::{ReachOrder, Relay};
use crate::binding::{self, BindTo, BindingRequest, MapBy};
use crate::error::Error;
use crate::output::{for_each_piece, Stream, OUTPUT_DRAIN};
use crate::pmi::serve::SilenceCheck;
use crate::spawn::{self, helper_thread, OutputSink, RankCommand, RankState};
use crate::supervise::KILL_WAIT;
use crate::termination::Termination;
use crate::watchdog::Watchdog;
use crate::{exit, program};
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// Silence after which a link counts as lost, unless the job says otherwise.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a relaying agent that finished waits for the hosts below it, beyond their output
/// drain, before it says Done itself.
const RELAY_FINISH: Duration = Duration::from_secs(5);

/// What the agent's main loop reacts to.
enum Input {
    Msg(ToAgent),
    Lost(String),
    Exited { rank: u32, ended: Termination },
    Drained,
}

struct Rank {
    rank: u32,
    pid: u32,
    ended: bool,
}

/// Runs the agent until its job is finished or its link is lost; returns its exit code.
pub fn main() -> u8 {
    let stdout = match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => File::from(fd),
        Err(e) => {
            eprintln!("psyrun agent: cannot use stdout: {e}");
            return exit::LAUNCH_FAILED;
        }
    };
    let out = Arc::new(Out::new(stdout));
    let hello = FromAgent::Hello {
        version: env!("CARGO_PKG_VERSION").to_string(),
        hostname: crate::job::hostname(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        free_port: crate::job::free_port(std::net::Ipv4Addr::UNSPECIFIED.into(), &[]).unwrap_or(0),
    };
    if !out.send(&hello) {
        return exit::LAUNCH_FAILED;
    }
    let (tx, rx) = mpsc::channel();
    let timeout_ms = Arc::new(AtomicU64::new(DEFAULT_HEARTBEAT_TIMEOUT.as_millis() as u64));
    let relay = Arc::new(OnceLock::new());
    let started = helper_thread("psyrun-agent-in", {
        let (tx, timeout_ms, relay, out) =
            (tx.clone(), timeout_ms.clone(), relay.clone(), out.clone());
        move || read_stdin(&tx, &timeout_ms, &relay, &out)
    })
    .and_then(|_| {
        helper_thread("psyrun-agent-ping", {
            let out = out.clone();
            move || {
                while out.send(&FromAgent::Ping) {
                    std::thread::sleep(HEARTBEAT);
                }
            }
        })
    });
    if let Err(e) = started {
        eprintln!("psyrun agent: cannot start its threads: {e}");
        return exit::LAUNCH_FAILED;
    }
    let mut agent = Agent {
        out,
        tx,
        rx,
        timeout_ms,
        job: None,
        commands: Vec::new(),
        ranks: Vec::new(),
        streams: 0,
        watchdog: None,
        relay,
        mpi: None,
    };
    agent.run()
}

/// The agent's relaying role, once psyrun asks for it.
type RelaySlot = Arc<OnceLock<Arc<Relay>>>;

/// Reads frames from stdin, with the heartbeat deadline, until the link ends. Relaying is done
/// here, so messages pass down while the main loop is busy (stopping ranks, say).
fn read_stdin(tx: &Sender<Input>, timeout_ms: &AtomicU64, relay: &RelaySlot, out: &Arc<Out>) {
    let stdin = std::io::stdin();
    let fd = stdin.as_fd().as_raw_fd();
    let mut reader = FrameReader::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut input = stdin.lock();
    let mut heard = Instant::now();
    let why = loop {
        let limit = Duration::from_millis(timeout_ms.load(Ordering::Relaxed));
        let left = limit.saturating_sub(heard.elapsed());
        if left.is_zero() {
            break format!("no word from psyrun for {limit:?} (its host or the network is gone)");
        }
        if !readable(fd, left.min(HEARTBEAT)) {
            continue;
        }
        let n = match input.read(&mut buf) {
            Ok(0) => break "psyrun closed the connection".to_string(),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => break format!("reading from psyrun failed: {e}"),
        };
        heard = Instant::now();
        reader.feed(&buf[..n]);
        loop {
            match reader.next_frame() {
                Ok(Some(body)) => match ToAgent::decode(&body) {
                    Ok(ToAgent::Ping) => {}
                    Ok(ToAgent::Reach {
                        width,
                        heartbeat_timeout_ms,
                        remote_psyrun,
                        hosts,
                    }) => {
                        let order = ReachOrder {
                            width: width as usize,
                            heartbeat_timeout: Duration::from_millis(heartbeat_timeout_ms.max(1)),
                            remote_psyrun: path_from(&remote_psyrun),
                            hosts,
                        };
                        relay.get_or_init(|| Relay::start(order, out.clone()));
                    }
                    Ok(ToAgent::Relay { host, body }) => match relay.get() {
                        Some(r) => r.pass_down(host, body),
                        None => eprintln!("psyrun agent: a message to relay before any Reach"),
                    },
                    Ok(msg) => {
                        if tx.send(Input::Msg(msg)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Input::Lost(e.to_string()));
                        return;
                    }
                },
                Ok(None) => break,
                Err(e) => {
                    let _ = tx.send(Input::Lost(e.to_string()));
                    return;
                }
            }
        }
    };
    let _ = tx.send(Input::Lost(why));
}

/// Waits up to `limit` for `fd` to be readable (or closed).
pub(crate) fn readable(fd: i32, limit: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(limit.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfd` is one valid pollfd that lives across the call; nfds is 1.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    rc > 0
}

struct Agent {
    out: Arc<Out>,
    tx: Sender<Input>,
    rx: Receiver<Input>,
    timeout_ms: Arc<AtomicU64>,
    job: Option<JobSpec>,
    commands: Vec<RankCommand>,
    ranks: Vec<Rank>,
    streams: usize,
    /// Kills the ranks' process groups if the agent dies first (started with the ranks).
    watchdog: Option<Watchdog>,
    /// The hosts this agent relays for (a tree launch), once psyrun asked.
    relay: RelaySlot,
    /// The MPI services of this host's ranks, once the job is prepared.
    mpi: Option<AgentMpi>,
}

impl Agent {
    fn run(&mut self) -> u8 {
        loop {
            let input = match self.rx.recv() {
                Ok(i) => i,
                Err(_) => return self.lost("its input thread ended"),
            };
            match input {
                Input::Msg(ToAgent::Job(job)) => {
                    self.timeout_ms
                        .store(job.heartbeat_timeout_ms.max(1), Ordering::Relaxed);
                    let reply = match self.prepare(&job) {
                        Ok(bindings) => FromAgent::Ready { bindings },
                        Err(e) => FromAgent::Refused {
                            message: e.to_string(),
                            code: e.exit_code(),
                        },
                    };
                    self.job = Some(job);
                    self.out.send(&reply);
                }
                Input::Msg(ToAgent::Start) => self.start(),
                Input::Msg(ToAgent::Signal { rank, signal }) => {
                    for r in &self.ranks {
                        if !r.ended && (rank == ALL_RANKS || rank == r.rank) {
                            let _ = spawn::signal_group(r.pid, signal);
                        }
                    }
                }
                Input::Msg(ToAgent::Finish) => return self.finish(),
                Input::Msg(ToAgent::Ping | ToAgent::Reach { .. } | ToAgent::Relay { .. }) => {}
                Input::Exited { rank, ended } => self.on_exit(rank, ended),
                Input::Drained => self.streams = self.streams.saturating_sub(1),
                Input::Lost(why) => return self.lost(&why),
            }
        }
    }

    /// Checks the job and builds each rank's command; returns the binding report lines.
    fn prepare(&mut self, job: &JobSpec) -> Result<Vec<String>, Error> {
        let cwd = path_from(&job.cwd);
        let cwd = if cwd.is_dir() {
            cwd
        } else {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|h| h.is_dir())
                .unwrap_or_else(|| PathBuf::from("/"))
        };
        std::env::set_current_dir(&cwd)
            .map_err(|e| Error::io(format!("entering {}", cwd.display()), e))?;
        let request = binding_request(job.binding);
        let host = crate::job::hostname();
        let plan = binding::plan_here(job.ranks.len(), &request)
            .map_err(|source| Error::Binding { host, source })?;
        let mut commands = Vec::with_capacity(job.ranks.len());
        let mut lines = Vec::with_capacity(job.ranks.len() + 1);
        for (spec, bound) in job.ranks.iter().zip(&plan.ranks) {
            let wdir = spec.wdir.as_ref().map(|d| path_from(d));
            if let Some(dir) = &wdir {
                if !dir.is_dir() {
                    return Err(Error::Usage(format!(
                        "--wdir {}: no such directory on this host; create it or give one that \
                         exists on every host",
                        dir.display()
                    )));
                }
            }
            let mut program = program::resolve_here(std::ffi::OsStr::from_bytes(&spec.program))?;
            if wdir.is_some() && program.is_relative() {
                program = cwd.join(program);
            }
            lines.push(format!(
                "rank {}: cpus {}",
                spec.rank,
                crate::plan::describe_cpus(bound.as_ref())
            ));
            commands.push(RankCommand {
                program,
                args: spec
                    .args
                    .iter()
                    .map(|a| OsString::from_vec(a.clone()))
                    .collect(),
                env: spec
                    .env
                    .iter()
                    .map(|(k, v)| (OsString::from_vec(k.clone()), OsString::from_vec(v.clone())))
                    .collect(),
                cwd: wdir,
                cpus: bound.as_ref().map(|b| b.cpus.clone()),
                inherit: None,
            });
        }
        if let Some(note) = plan.note {
            lines.push(note);
        }
        self.mpi = Some(AgentMpi::prepare(job, &commands, &self.out)?);
        self.commands = commands;
        Ok(lines)
    }

    /// Starts the watchdog, then every prepared rank; the first that cannot start is reported
    /// and ends the start.
    fn start(&mut self) {
        let Some(job) = &self.job else { return };
        let specs: Vec<u32> = job.ranks.iter().map(|r| r.rank).collect();
        match Watchdog::start(specs.len()) {
            Ok(w) => self.watchdog = Some(w),
            // The ranks then outlive an agent that is killed (SIGKILL) instead of stopping them.
            Err(e) => eprintln!("psyrun agent: cannot start its watchdog process: {e}"),
        }
        for (i, (command, rank)) in std::mem::take(&mut self.commands)
            .into_iter()
            .zip(specs)
            .enumerate()
        {
            match self.start_served(i, rank, command) {
                Ok(pid) => {
                    // The rank told the watchdog its group itself, before its program ran.
                    self.ranks.push(Rank {
                        rank,
                        pid,
                        ended: false,
                    });
                    self.out.send(&FromAgent::Started { rank, pid });
                }
                Err(e) => {
                    self.out.send(&FromAgent::Failed {
                        rank,
                        message: e.to_string(),
                        code: e.exit_code(),
                    });
                    return;
                }
            }
        }
    }

    /// Starts the `i`th rank with what its MPI service gives it (variables, a descriptor that
    /// this agent's copy of is closed once the rank has it).
    fn start_served(
        &mut self,
        i: usize,
        rank: u32,
        mut command: RankCommand,
    ) -> Result<u32, Error> {
        let (access, silence) = match self.mpi.as_mut() {
            Some(mpi) => (
                mpi.access(i, rank)?,
                mpi.silence_check(i, rank, &command.program),
            ),
            None => Default::default(),
        };
        command.env.extend(access.env.iter().cloned());
        command.inherit = access.inherit.as_ref().map(AsRawFd::as_raw_fd);
        let started = self.start_one(rank, &command, silence);
        drop(access);
        started
    }

    /// Starts one rank ([`spawn::spawn_watched`]): its output goes to psyrun as frames, a line
    /// or a piece of a long line each, stamped with the time they were read; its end into the
    /// agent's main loop.
    fn start_one(
        &mut self,
        rank: u32,
        command: &RankCommand,
        silence: Option<SilenceCheck>,
    ) -> Result<u32, Error> {
        let sinks = |stream: Stream| -> OutputSink {
            let (out, tx) = (self.out.clone(), self.tx.clone());
            Box::new(move |reader| {
                for_each_piece(reader, |piece| {
                    out.send(&FromAgent::Output {
                        rank,
                        stream: stream as u8,
                        time_us: now_us(),
                        more: !piece.last,
                        bytes: piece.bytes.to_vec(),
                    });
                });
                let _ = tx.send(Input::Drained);
            })
        };
        let (tx, out) = (self.tx.clone(), self.out.clone());
        let watchdog = self.watchdog.as_ref().and_then(Watchdog::fd);
        let watched = spawn::spawn_watched(
            rank as usize,
            command,
            watchdog,
            "psyrun-agent",
            sinks,
            move |state| {
                // psyrun hears of stops too, to end a rank left stopped once the others ended.
                let signal = match state {
                    RankState::Stopped(signal) => Some(signal),
                    RankState::Continued => None,
                    RankState::Ended(termination) => {
                        // The agent's stderr reaches psyrun's console, naming this host.
                        if let Some(said) = silence.as_ref().and_then(SilenceCheck::complaint) {
                            eprintln!("{said}");
                        }
                        let _ = tx.send(Input::Exited {
                            rank,
                            ended: termination,
                        });
                        return;
                    }
                };
                // A link that is gone is the agent's main loop's business.
                let _ = out.send(&FromAgent::Paused { rank, signal });
            },
        )?;
        self.streams += watched.forwarders;
        Ok(watched.pid)
    }

    /// The job is over: kill whatever is left in the ranks' groups, let the output drain,
    /// remove shared memory, say Done.
    fn finish(&mut self) -> u8 {
        for r in &self.ranks {
            let _ = spawn::signal_group(r.pid, libc::SIGKILL);
        }
        self.disarm();
        self.pump_until(KILL_WAIT, Agent::all_ended);
        self.pump_until(OUTPUT_DRAIN, |a| a.streams == 0);
        self.clean_shm();
        if let Some(relay) = self.relay.get() {
            // The hosts below finish on psyrun's word too; this link carries their Done.
            relay.wait_closed(OUTPUT_DRAIN + RELAY_FINISH);
        }
        self.out.send(&FromAgent::Done);
        exit::SUCCESS
    }

    /// The link is gone: stop the ranks on our own (SIGTERM, grace, SIGKILL) and exit.
    fn lost(&mut self, why: &str) -> u8 {
        if let Some(relay) = self.relay.get() {
            relay.close_all();
        }
        let running = self.ranks.iter().filter(|r| !r.ended).count();
        if running > 0 {
            eprintln!(
                "psyrun agent on {}: {why}; stopping {running} rank(s)",
                crate::job::hostname()
            );
        }
        let grace = Duration::from_millis(self.job.as_ref().map_or(0, |j| j.grace_ms));
        for r in self.ranks.iter().filter(|r| !r.ended) {
            let _ = spawn::signal_group(r.pid, libc::SIGTERM);
            let _ = spawn::signal_group(r.pid, libc::SIGCONT);
        }
        self.pump_until(grace, Agent::all_ended);
        for r in &self.ranks {
            let _ = spawn::signal_group(r.pid, libc::SIGKILL);
        }
        self.disarm();
        self.pump_until(KILL_WAIT, Agent::all_ended);
        self.clean_shm();
        if running > 0 {
            exit::LAUNCH_FAILED
        } else {
            exit::SUCCESS
        }
    }

    /// Rank `rank` ended: noted, and reported to psyrun.
    fn on_exit(&mut self, rank: u32, ended: Termination) {
        if let Some(r) = self.ranks.iter_mut().find(|r| r.rank == rank) {
            r.ended = true;
        }
        self.out.send(&FromAgent::Exited { rank, ended });
    }

    /// The agent killed the ranks' groups itself: its watchdog has nothing left to do.
    fn disarm(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.disarm();
        }
    }

    fn all_ended(&self) -> bool {
        self.ranks.iter().all(|r| r.ended)
    }

    /// Handles ends and drains (messages are ignored now) until `done` holds or `limit` passes.
    fn pump_until(&mut self, limit: Duration, done: impl Fn(&Agent) -> bool) {
        let deadline = Instant::now() + limit;
        while !done(self) && Instant::now() < deadline {
            self.pump(deadline);
        }
    }

    /// Handles ends and drains until `deadline` or one input (messages are ignored now).
    fn pump(&mut self, deadline: Instant) {
        match self
            .rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(Input::Exited { rank, ended }) => self.on_exit(rank, ended),
            Ok(Input::Drained) => self.streams = self.streams.saturating_sub(1),
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(10)),
        }
    }

    fn clean_shm(&self) {
        if let Some(job) = &self.job {
            let _ = crate::job::remove_leftover_segments(&job.job_id);
        }
        if let Some(mpi) = &self.mpi {
            mpi.remove_leftovers();
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The wire form of a binding request (see [`BindingSpec`]).
pub fn binding_spec(req: &BindingRequest) -> BindingSpec {
    BindingSpec {
        bind_to: match req.bind_to {
            None => 0,
            Some(BindTo::Core) => 1,
            Some(BindTo::Numa) => 2,
            Some(BindTo::Socket) => 3,
            Some(BindTo::None) => 4,
        },
        map_by: match req.map_by {
            None => 0,
            Some(MapBy::Core) => 1,
            Some(MapBy::Numa) => 2,
            Some(MapBy::Socket) => 3,
            Some(MapBy::Node) => 4,
        },
        cpus_per_rank: req
            .cpus_per_rank
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        oversubscribe: req.oversubscribe,
    }
}

/// The binding request a [`BindingSpec`] stands for (unknown numbers mean "not given").
pub fn binding_request(spec: BindingSpec) -> BindingRequest {
    BindingRequest {
        bind_to: match spec.bind_to {
            1 => Some(BindTo::Core),
            2 => Some(BindTo::Numa),
            3 => Some(BindTo::Socket),
            4 => Some(BindTo::None),
            _ => None,
        },
        map_by: match spec.map_by {
            1 => Some(MapBy::Core),
            2 => Some(MapBy::Numa),
            3 => Some(MapBy::Socket),
            4 => Some(MapBy::Node),
            _ => None,
        },
        cpus_per_rank: (spec.cpus_per_rank > 0).then_some(spec.cpus_per_rank as usize),
        report: false,
        oversubscribe: spec.oversubscribe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_requests_survive_the_wire() {
        for bind_to in [
            None,
            Some(BindTo::Core),
            Some(BindTo::Numa),
            Some(BindTo::Socket),
            Some(BindTo::None),
        ] {
            for map_by in [
                None,
                Some(MapBy::Core),
                Some(MapBy::Node),
                Some(MapBy::Socket),
            ] {
                for cpus_per_rank in [None, Some(2)] {
                    let req = BindingRequest {
                        bind_to,
                        map_by,
                        cpus_per_rank,
                        report: false,
                        oversubscribe: cpus_per_rank.is_some(),
                    };
                    assert_eq!(binding_request(binding_spec(&req)), req);
                }
            }
        }
    }
}
