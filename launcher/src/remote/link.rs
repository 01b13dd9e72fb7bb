//! psyrun's side of the link to one agent, whatever carries it: an SSH channel ([`super::ssh`])
//! or the pipes of a child process (a local agent, or one started through `srun`).
//!
//! Every link turns what its agent says into [`HostEvent`]s on one channel shared by all hosts,
//! and takes [`ToAgent`] messages through an [`AgentLink`]. It says Ping when it has had nothing
//! to say for [`HEARTBEAT`], and reports the link closed (with why) exactly once.

use super::agent::HEARTBEAT;
use super::wire::{FrameReader, FromAgent, ToAgent};
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
}

impl AgentLink {
    /// Queues `msg`; false if the link is closed.
    pub fn send(&self, msg: ToAgent) -> bool {
        let ok = self.tx.send(msg).is_ok();
        if let Some(w) = &self.wake {
            // A full wake socket already has a wake-up pending.
            let _ = (&**w).write(&[1]);
        }
        ok
    }

    /// A link that sends through `tx` and wakes its thread through `wake`.
    pub(crate) fn new(tx: Sender<ToAgent>, wake: Option<Arc<UnixStream>>) -> AgentLink {
        AgentLink { tx, wake }
    }
}

/// Starts `command` (a `psyrun --agent`, directly or through `srun`) as a child and links to it
/// over its stdin and stdout; its stderr lines become [`LinkEvent::Diagnostic`]s.
pub fn spawn_child(
    host: usize,
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
        let events = events.clone();
        helper_thread("psyrun-link-err", move || {
            for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
                let text = String::from_utf8_lossy(&line).trim_end().to_string();
                let _ = events.send(HostEvent {
                    host,
                    event: LinkEvent::Diagnostic(text),
                });
            }
        })?;
    }
    if let Some(stdout) = stdout {
        helper_thread("psyrun-link-in", move || {
            let why = read_loop(host, stdout, &events);
            let status = child.wait().ok().and_then(|s| s.code());
            let _ = events.send(HostEvent {
                host,
                event: LinkEvent::Closed { why, status },
            });
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
fn read_loop(host: usize, mut r: impl Read, events: &Sender<HostEvent>) -> String {
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
        if let Err(why) = deliver(host, &mut frames, events) {
            return why;
        }
    }
}

/// Decodes every whole frame held by `frames` and sends it on; an error ends the link.
pub(crate) fn deliver(
    host: usize,
    frames: &mut FrameReader,
    events: &Sender<HostEvent>,
) -> Result<(), String> {
    loop {
        let body = match frames.next_frame() {
            Ok(Some(body)) => body,
            Ok(None) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        let msg = FromAgent::decode(&body).map_err(|e| e.to_string())?;
        if msg == FromAgent::Ping {
            continue;
        }
        let _ = events.send(HostEvent {
            host,
            event: LinkEvent::Frame(msg),
        });
    }
}

/// How long to wait between checks when there is nothing to do (also bounds how late a
/// heartbeat check runs).
pub(crate) const IDLE_POLL: Duration = Duration::from_millis(250);
