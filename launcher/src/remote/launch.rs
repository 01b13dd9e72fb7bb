//! Running a job on several hosts through their agents: place the ranks, hand each host its
//! part, start them only when every host is ready, forward output, supervise, tear down.

use super::link::{HostEvent, LinkEvent};
use super::preflight::{self, Preflight, PreflightSettings, Reached};
use super::wire::{Ended, FromAgent, JobSpec, RankSpec, ToAgent};
use crate::args::Launch;
use crate::hosts::{self, HostList};
use crate::output::{emit, Console, Sink, Stream};
use crate::placement::Placement;
use crate::supervise::{Cause, Event, Outcome, SignalWatch, Stopper, Supervisor, Termination};
use crate::{job, Error, RankFiles, OUTPUT_DRAIN};
use psyne::auth::Secret;
use psyne::bootstrap::StoreServer;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How long every host has to check its part of the job and to start its ranks.
pub const READY_WAIT: Duration = Duration::from_secs(30);

/// Runs `launch` on `hosts`; see the module docs.
pub fn run(
    launch: &Launch,
    hosts: &HostList,
    settings: &PreflightSettings,
    console: Arc<Console>,
) -> Result<Outcome, Error> {
    let t0 = Instant::now();
    let world = launch.world_size();
    // Every program's `-x` values, read before any host is contacted.
    let app_envs = launch
        .apps
        .iter()
        .map(|app| {
            crate::x_values(&app.env).map(|vars| {
                vars.into_iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                    .collect::<Vec<_>>()
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let pre = preflight::reach_all(hosts, settings);
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
    let reached: Vec<Reached> = reached.into_iter().flatten().collect();
    let placements = hosts::place_by(
        hosts,
        world,
        |h| {
            hosts
                .iter()
                .position(|x| x.name == h.name)
                .map_or(1, |i| reached[i].cores)
        },
        launch.binding.oversubscribe,
        launch.binding.map_by == Some(crate::binding::MapBy::Node),
    )
    .map_err(|e| Error::Usage(e.to_string()))?;
    let host_of: Vec<usize> = placements.iter().map(|p| p.host).collect();
    let names: Vec<String> = hosts.iter().map(|h| h.name.clone()).collect();

    // The store listens on every address; each host is told the address psyrun has on its link.
    let secret = Secret::generate()?;
    let any_v6 = reached
        .iter()
        .any(|r| matches!(r.local, Some(IpAddr::V6(_))));
    let bind: IpAddr = if reached.iter().all(|r| r.local.is_none()) {
        job::LOCAL_ADDR
    } else if any_v6 {
        Ipv6Addr::UNSPECIFIED.into()
    } else {
        Ipv4Addr::UNSPECIFIED.into()
    };
    let store_console = console.clone();
    let store = StoreServer::bind_logging(
        SocketAddr::new(bind, 0),
        secret.clone(),
        Arc::new(move |line: &str| store_console.message(line.trim_start_matches("psyne store: "))),
    )?;
    let port = store.addr().port();
    let job_id = job::new_job_id()?;
    let rank0_host = &reached[host_of[0]];
    let master_addr = rank0_host.peer.unwrap_or(job::LOCAL_ADDR).to_string();
    let master_port = rank0_host.free_port;
    let env_of = |p: &Placement| {
        let r = &reached[p.host];
        let store_ip = r.local.unwrap_or(job::LOCAL_ADDR);
        let info = job::JobInfo {
            job_id: job_id.clone(),
            secret_hex: secret.to_hex(),
            store: SocketAddr::new(store_ip, port).to_string(),
            master_addr: master_addr.clone(),
            master_port,
        };
        job::rank_env(p, world, &info)
    };
    let apps = launch.app_of_ranks();
    let cwd = std::env::current_dir().unwrap_or_default();
    let mut specs: Vec<Vec<RankSpec>> = vec![Vec::new(); hosts.len()];
    for (p, &app_index) in placements.iter().zip(&apps) {
        let app = &launch.apps[app_index];
        let mut env = app_envs[app_index].clone();
        env.extend(
            env_of(p)
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
    let used: Vec<usize> = (0..hosts.len()).filter(|&h| !specs[h].is_empty()).collect();
    for (h, spec) in specs.into_iter().enumerate() {
        if spec.is_empty() {
            continue;
        }
        reached[h].link.send(ToAgent::Job(JobSpec {
            job_id: job_id.clone(),
            grace_ms: launch.grace.as_millis() as u64,
            heartbeat_timeout_ms: settings.heartbeat_timeout.as_millis() as u64,
            cwd: cwd.as_os_str().as_bytes().to_vec(),
            binding: super::agent::binding_spec(&launch.binding),
            ranks: spec,
        }));
    }

    // Every used host must be ready before any rank starts anywhere.
    let mut ready: Vec<Option<Vec<String>>> = vec![None; hosts.len()];
    let mut refusals = Vec::new();
    let deadline = Instant::now() + READY_WAIT;
    let mut early = Vec::new();
    let mut answered = vec![false; hosts.len()];
    while used.iter().any(|&h| !answered[h]) {
        let Ok(e) = events.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            for &h in used.iter().filter(|&&h| !answered[h]) {
                refusals.push((
                    h,
                    format!(
                        "{}: did not confirm its part of the job within {READY_WAIT:?}",
                        names[h]
                    ),
                    crate::exit::LAUNCH_FAILED,
                ));
            }
            break;
        };
        match e.event {
            LinkEvent::Frame(FromAgent::Ready { bindings }) => {
                ready[e.host] = Some(bindings);
                answered[e.host] = true;
            }
            LinkEvent::Frame(FromAgent::Refused { message, code }) => {
                refusals.push((e.host, format!("{}: {message}", names[e.host]), code));
                answered[e.host] = true;
            }
            LinkEvent::Closed { why, .. } => {
                refusals.push((
                    e.host,
                    format!(
                        "{}: the link closed before the job started: {why}",
                        names[e.host]
                    ),
                    crate::exit::LAUNCH_FAILED,
                ));
                answered[e.host] = true;
            }
            LinkEvent::Diagnostic(line) => console.message(&format!("{}: {line}", names[e.host])),
            _ => early.push(e),
        }
    }
    if !refusals.is_empty() {
        // In host order, so the first host's reason (and exit code) leads.
        refusals.sort_by_key(|r| r.0);
        let code = refusals[0].2;
        let lines: Vec<String> = refusals.into_iter().map(|r| r.1).collect();
        return Err(Error::Remote {
            message: format!("{}\n(nothing was started on any host)", lines.join("\n")),
            code,
        });
    }
    if launch.binding.report {
        for &h in &used {
            for line in ready[h].iter().flatten() {
                console.message(&format!("{} {line}", names[h]));
            }
        }
    }

    let mut files = crate::open_output_files(launch.output_dir.as_deref(), world)?;
    let mut outputs = Outputs {
        console: console.clone(),
        prefix: (0..world)
            .map(|r| {
                if launch.tag_output {
                    format!("[{}][{r}] ", names[host_of[r]])
                } else {
                    String::new()
                }
            })
            .collect(),
        show: (0..world)
            .map(|r| launch.show_ranks.as_ref().map_or(true, |s| s.contains(r)))
            .collect(),
        timestamp: launch.timestamp_output,
        files: std::mem::take(&mut files),
        scratch: Vec::new(),
    };
    let launched_at = t0.elapsed();
    for &h in &used {
        reached[h].link.send(ToAgent::Start);
    }
    let (sup_tx, sup_rx) = mpsc::channel();
    let signals = SignalWatch::start(sup_tx.clone())
        .map_err(|e| Error::io("installing psyrun's signal handlers", e))?;
    // Collect every pid; output and early exits that arrive meanwhile are handled in order.
    let mut pids: Vec<Option<u32>> = vec![None; world];
    let mut launch_error = None;
    let deadline = Instant::now() + READY_WAIT;
    for e in early {
        route(
            e,
            &mut outputs,
            &sup_tx,
            &names,
            &mut pids,
            &mut launch_error,
        );
    }
    while pids.iter().any(Option::is_none) && launch_error.is_none() {
        match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(e) => route(
                e,
                &mut outputs,
                &sup_tx,
                &names,
                &mut pids,
                &mut launch_error,
            ),
            Err(_) => {
                launch_error = Some(Error::Remote {
                    message: format!("the ranks were not all running within {READY_WAIT:?}"),
                    code: crate::exit::LAUNCH_FAILED,
                });
            }
        }
    }
    if std::env::var_os("PSYRUN_REPORT_LAUNCH").is_some() {
        console.message(&format!(
            "launch: {} host(s) ready after {:.1} ms, all {world} ranks running after {:.1} ms",
            used.len(),
            launched_at.as_secs_f64() * 1e3,
            t0.elapsed().as_secs_f64() * 1e3
        ));
    }
    let stopper = AgentStopper {
        links: reached.iter().map(|r| r.link.clone()).collect(),
        host_of: host_of.clone(),
    };
    let mut supervisor = Supervisor::new(&console, stopper, launch.grace, launch.timeout, sup_rx);
    for (rank, pid) in pids.iter().enumerate() {
        if let Some(pid) = pid {
            supervisor.add_rank_on(rank, *pid, Some(names[host_of[rank]].clone()));
        }
    }
    if launch_error.is_some() {
        supervisor.stop(Cause::LaunchFailed);
    }
    // From here a thread routes the links' events while the supervisor waits.
    let (done_tx, done_rx) = mpsc::channel::<usize>();
    let router_names = names.clone();
    let router_tx = sup_tx.clone();
    drop(sup_tx);
    let router = std::thread::Builder::new()
        .name("psyrun-router".into())
        .stack_size(512 * 1024)
        .spawn(move || {
            let mut pids = pids;
            let mut err = None;
            while let Ok(e) = events.recv() {
                if let LinkEvent::Frame(FromAgent::Done) = e.event {
                    let _ = done_tx.send(e.host);
                    continue;
                }
                if let LinkEvent::Closed { .. } = e.event {
                    let _ = done_tx.send(e.host);
                }
                route(
                    e,
                    &mut outputs,
                    &router_tx,
                    &router_names,
                    &mut pids,
                    &mut err,
                );
            }
        })
        .map_err(|e| Error::io("starting the thread that forwards the hosts' output", e))?;
    let outcome = supervisor.run();
    // Tear down: each agent kills what is left, drains the output, removes shared memory.
    for &h in &used {
        reached[h].link.send(ToAgent::Finish);
    }
    let deadline = Instant::now() + OUTPUT_DRAIN + Duration::from_secs(5);
    let mut finished = vec![false; hosts.len()];
    while used.iter().any(|&h| !finished[h]) {
        match done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(h) => finished[h] = true,
            Err(_) => {
                let stuck: Vec<&str> = used
                    .iter()
                    .filter(|&&h| !finished[h])
                    .map(|&h| names[h].as_str())
                    .collect();
                console.message(&format!(
                    "no end-of-job confirmation from {} (their agents stop their ranks when the \
                     link closes); not waiting",
                    stuck.join(", ")
                ));
                break;
            }
        }
    }
    drop(reached);
    drop(sender);
    drop(signals);
    drop(store);
    // The router ends once every link has closed; do not wait on a link that hangs.
    drop(router);
    match launch_error {
        Some(e) => Err(e),
        None => Ok(outcome),
    }
}

/// Per-rank output destinations on psyrun's side.
struct Outputs {
    console: Arc<Console>,
    prefix: Vec<String>,
    show: Vec<bool>,
    timestamp: bool,
    files: Vec<RankFiles>,
    scratch: Vec<u8>,
}

impl Outputs {
    fn line(&mut self, rank: usize, stream: u8, time_us: u64, bytes: &[u8]) {
        let (Some(prefix), Some(&show), Some(files)) = (
            self.prefix.get(rank),
            self.show.get(rank),
            self.files.get_mut(rank),
        ) else {
            return;
        };
        let s = usize::from(stream.min(1));
        let mut sink = Sink {
            console: &self.console,
            stream: if s == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            },
            prefix: prefix.clone(),
            timestamp: self.timestamp,
            show,
            file: files[s].take(),
        };
        let time = SystemTime::UNIX_EPOCH + Duration::from_micros(time_us);
        emit(bytes, time, &mut self.scratch, &mut sink);
        files[s] = sink.file.take();
    }
}

/// Handles one event from a link once ranks may be running.
fn route(
    e: HostEvent,
    outputs: &mut Outputs,
    sup: &Sender<Event>,
    names: &[String],
    pids: &mut [Option<u32>],
    launch_error: &mut Option<Error>,
) {
    let host = &names[e.host];
    match e.event {
        LinkEvent::Frame(FromAgent::Output {
            rank,
            stream,
            time_us,
            bytes,
        }) => outputs.line(rank as usize, stream, time_us, &bytes),
        LinkEvent::Frame(FromAgent::Started { rank, pid }) => {
            if let Some(slot) = pids.get_mut(rank as usize) {
                *slot = Some(pid);
            }
        }
        LinkEvent::Frame(FromAgent::Failed {
            rank,
            message,
            code,
        }) => {
            if launch_error.is_none() {
                *launch_error = Some(Error::Remote {
                    message: format!("on {host}: {message}"),
                    code,
                });
            }
            let _ = rank;
        }
        LinkEvent::Frame(FromAgent::Exited { rank, ended }) => {
            let termination = match ended {
                Ended::Exited(c) => Termination::Exited(c),
                Ended::Signaled(s) => Termination::Signaled(s),
                Ended::Unknown(w) => Termination::Unknown(w),
            };
            let _ = sup.send(Event::Exited {
                rank: rank as usize,
                termination,
            });
        }
        LinkEvent::Closed { why, .. } => {
            let _ = sup.send(Event::HostLost {
                host: host.clone(),
                why,
            });
            if launch_error.is_none() && pids.iter().any(Option::is_none) {
                *launch_error = Some(Error::Remote {
                    message: format!("lost the link to {host} while starting the ranks"),
                    code: crate::exit::LAUNCH_FAILED,
                });
            }
        }
        LinkEvent::Diagnostic(line) => outputs.console.message(&format!("{host}: {line}")),
        LinkEvent::Frame(_) => {}
    }
}

/// Delivers the supervisor's signals through the agents.
struct AgentStopper {
    links: Vec<super::link::AgentLink>,
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
