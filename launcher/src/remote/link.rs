//! psyrun's side of the link to one agent, whatever carries it: an SSH channel ([`super::ssh`])
//! or the pipes of a child process (a local agent, or one started through `srun`).
//!
//! Every link turns what its agent says into [`HostEvent`]s on one channel shared by all hosts,
//! and takes [`ToAgent`] messages through an [`AgentLink`]. It says Ping when it has had nothing
//! to say for [`HEARTBEAT`], and reports the link closed (with why) exactly once.

use super::constants::HEARTBEAT;
use super::protocol::{FrameReader, FromAgent, ToAgent};
use crate::spawn::helper_thread;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

/// Something one host's link reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// A message from the agent.
    Frame(FromAgent),
    /// A line the agent (or sshd, or the shell) wrote on its stderr.
    Diagnostic(String),
    /// The link is gone; nothing more comes from this host.
    Closed {
        /// Why, in words.
        why: String,
        /// The agent's exit status, if known (127: psyrun not found on the host).
        status: Option<i32>,
    },
}

/// A [`LinkEvent`] and the index of its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEvent {
    /// Index of the host in the job's host list.
    pub host: usize,
    /// What happened.
    pub event: LinkEvent,
}

/// Sends messages to one agent.
#[derive(Debug, Clone)]
pub struct AgentLink {
    tx: Sender<ToAgent>,
    /// Wakes a link thread that waits on a socket rather than on the channel.
    wake: Option<Arc<UnixStream>>,
    /// The host this link reaches through a relaying agent (a tree launch): messages go to the
    /// relay wrapped as [`ToAgent::Relay`] for it.
    relayed_to: Option<u32>,
}

impl AgentLink {
    /// Queues `msg`; false if the link is closed.
    pub fn send(&self, msg: ToAgent) -> bool {
        let msg = match self.relayed_to {
            Some(host) => ToAgent::Relay {
                host,
                body: msg.body(),
            },
            None => msg,
        };
        let ok = self.tx.send(msg).is_ok();
        if let Some(w) = &self.wake {
            // A full wake socket already has a wake-up pending.
            let _ = (&**w).write(&[1]);
        }
        ok
    }

    /// A link that sends through `tx` and wakes its thread through `wake`.
    pub(crate) fn new(tx: Sender<ToAgent>, wake: Option<Arc<UnixStream>>) -> AgentLink {
        AgentLink {
            tx,
            wake,
            relayed_to: None,
        }
    }

    /// A link to host `host`, which the agent at the other end of this one relays for.
    pub fn relayed(&self, host: usize) -> AgentLink {
        AgentLink {
            relayed_to: Some(u32::try_from(host).unwrap_or(u32::MAX)),
            ..self.clone()
        }
    }
}

/// Which host a link reaches, and the hosts its agent relays for in a tree launch: what it says
/// for them is reported as theirs, and when the link ends, the ones still open end with it.
#[derive(Debug, Clone)]
pub struct Route {
    /// The host at the other end.
    pub host: usize,
    /// Its name, for the hosts lost with it.
    pub name: String,
    /// The hosts its agent relays for, and whether each one's link is still open.
    below: Vec<(usize, bool)>,
}

impl Route {
    /// A link to `host` (named `name`) whose agent relays for `below`.
    pub fn new(host: usize, name: &str, below: &[usize]) -> Route {
        Route {
            host,
            name: name.to_string(),
            below: below.iter().map(|&h| (h, true)).collect(),
        }
    }

    /// Which host a message that names `host` is for: that host if this link relays for it.
    fn relays_for(&self, host: u32) -> Result<usize, String> {
        self.below
            .iter()
            .map(|&(h, _)| h)
            .find(|&h| h as u64 == u64::from(host))
            .ok_or_else(|| format!("the agent spoke for host #{host}, which it does not relay for"))
    }

    /// Reports `event` as host `host`'s.
    fn report(host: usize, event: LinkEvent, events: &Sender<HostEvent>) {
        let _ = events.send(HostEvent { host, event });
    }

    /// Decodes every whole frame held by `frames` and sends it on, as its host's: the agent's
    /// own, or a relayed host's. An error ends the link.
    pub(crate) fn deliver(
        &mut self,
        frames: &mut FrameReader,
        events: &Sender<HostEvent>,
    ) -> Result<(), String> {
        while let Some(body) = frames.next_frame().map_err(|e| e.to_string())? {
            let msg = FromAgent::decode(&body).map_err(|e| e.to_string())?;
            self.deliver_one(msg, events)?;
        }
        Ok(())
    }

    fn deliver_one(&mut self, msg: FromAgent, events: &Sender<HostEvent>) -> Result<(), String> {
        let (host, event) = match msg {
            FromAgent::Ping => return Ok(()),
            FromAgent::Relayed { host, body } => {
                let inner = FromAgent::decode(&body).map_err(|e| e.to_string())?;
                if inner == FromAgent::Ping {
                    return Ok(());
                }
                (self.relays_for(host)?, LinkEvent::Frame(inner))
            }
            FromAgent::Said { host, line } => (self.relays_for(host)?, LinkEvent::Diagnostic(line)),
            FromAgent::Closed { host, why, status } => {
                let h = self.relays_for(host)?;
                if let Some(entry) = self.below.iter_mut().find(|e| e.0 == h) {
                    entry.1 = false;
                }
                (h, LinkEvent::Closed { why, status })
            }
            reached @ FromAgent::Reached { host, .. } => {
                (self.relays_for(host)?, LinkEvent::Frame(reached))
            }
            own => (self.host, LinkEvent::Frame(own)),
        };
        Route::report(host, event, events);
        Ok(())
    }

    /// The link ended for `why`: reports it closed, and every host it relayed for that was still
    /// open as lost with it. The host's own end comes first, so a failure is blamed on it rather
    /// than on a host below.
    pub(crate) fn close(&mut self, why: String, status: Option<i32>, events: &Sender<HostEvent>) {
        let lost_with = format!("lost with {}, which relayed for it ({why})", self.name);
        Route::report(self.host, LinkEvent::Closed { why, status }, events);
        for (h, open) in &mut self.below {
            if std::mem::take(open) {
                let why = lost_with.clone();
                Route::report(*h, LinkEvent::Closed { why, status: None }, events);
            }
        }
    }

    /// Reports a line of the agent's stderr.
    pub(crate) fn diagnostic(&self, line: String, events: &Sender<HostEvent>) {
        Route::report(self.host, LinkEvent::Diagnostic(line), events);
    }
}

/// Starts `command` (a `psyrun --agent`, directly or through `srun`) as a child and links to it
/// over its stdin and stdout; its stderr lines become [`LinkEvent::Diagnostic`]s.
pub fn spawn_child(
    mut route: Route,
    mut command: Command,
    events: Sender<HostEvent>,
) -> std::io::Result<AgentLink> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (tx, rx) = mpsc::channel::<ToAgent>();
    if let Some(mut stdin) = stdin {
        helper_thread("psyrun-link-out", move || write_loop(&rx, &mut stdin))?;
    }
    if let Some(stderr) = stderr {
        let (events, route) = (events.clone(), route.clone());
        helper_thread("psyrun-link-err", move || {
            for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
                let text = String::from_utf8_lossy(&line).trim_end().to_string();
                route.diagnostic(text, &events);
            }
        })?;
    }
    if let Some(stdout) = stdout {
        helper_thread("psyrun-link-in", move || {
            let why = read_loop(&mut route, stdout, &events);
            let status = child.wait().ok().and_then(|s| s.code());
            route.close(why, status, &events);
        })?;
    }
    Ok(AgentLink::new(tx, None))
}

/// Writes queued messages (and a Ping after each quiet [`HEARTBEAT`]) until the link closes.
fn write_loop(rx: &Receiver<ToAgent>, w: &mut impl Write) {
    loop {
        let msg = match rx.recv_timeout(HEARTBEAT) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => ToAgent::Ping,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if w.write_all(&msg.encode()).and_then(|()| w.flush()).is_err() {
            return;
        }
    }
}

/// Reads frames until end of file or an error; returns why it stopped.
fn read_loop(route: &mut Route, mut r: impl Read, events: &Sender<HostEvent>) -> String {
    let mut frames = FrameReader::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => {
                return if frames.is_mid_frame() {
                    "the agent's output ended inside a message".into()
                } else {
                    "the agent exited".into()
                }
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return format!("reading from the agent failed: {e}"),
        };
        frames.feed(&buf[..n]);
        if let Err(why) = route.deliver(&mut frames, events) {
            return why;
        }
    }
}

/// How long to wait between checks when there is nothing to do (also bounds how late a
/// heartbeat check runs).
pub(crate) const IDLE_POLL: Duration = Duration::from_millis(250);
