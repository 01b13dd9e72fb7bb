//! Reaching a host over SSH (the `ssh2` crate, libssh2): one connection per host, key or agent
//! authentication, the host key checked against `known_hosts` as `StrictHostKeyChecking` says,
//! and one channel running `psyrun --agent` whose stdin and stdout carry the job.
//!
//! After set-up one thread per host drives the connection without blocking (libssh2's
//! non-blocking mode and `poll` on the socket, woken by a socket pair when there is something to
//! send), so a host that stops answering is noticed by the heartbeat: no word from the agent for
//! the heartbeat timeout closes the link. ssh2 cannot send an SSH signal request, and without a
//! terminal sshd does not signal the command when the connection drops; the agent therefore
//! watches its stdin and heartbeat and stops its ranks itself (see [`super::agent`]).

use super::constants::{FIRST_WORD, HEARTBEAT};
use super::link::{AgentLink, HostEvent, Route, IDLE_POLL};
use super::protocol::{FrameReader, ToAgent};
use super::ssh_config::{HostKeyPolicy, SshConfig};
use crate::hosts::Host;
use crate::spawn::helper_thread;
use ssh2::{CheckResult, KnownHostFileKind, Session};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How psyrun reaches hosts over SSH: the command line's SSH flags and the client configuration.
#[derive(Debug, Clone, Default)]
pub struct SshSettings {
    /// `--ssh-key`: tried before anything else.
    pub key: Option<PathBuf>,
    /// The parsed `~/.ssh/config` (or `--ssh-config`).
    pub config: SshConfig,
    /// The home directory, for `~` and the default keys and `known_hosts`.
    pub home: PathBuf,
    /// `--connect-timeout`, overriding the configuration's `ConnectTimeout`.
    pub connect_timeout: Option<Duration>,
    /// The local user name (the default login).
    pub local_user: String,
}

/// The connect timeout when neither the command line nor the configuration gives one.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything needed to connect to one host (pure: from a [`Host`] and [`SshSettings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// The name as given (`-H`, hostfile): used in every message.
    pub name: String,
    /// What to resolve and connect to (`HostName`, else the name).
    pub address: String,
    /// The login.
    pub user: String,
    /// The port.
    pub port: u16,
    /// Private keys to try, in order.
    pub identities: Vec<PathBuf>,
    /// The connect (and handshake) timeout.
    pub connect_timeout: Duration,
    /// How to treat the host key.
    pub policy: HostKeyPolicy,
    /// The `known_hosts` file.
    pub known_hosts: PathBuf,
}

/// Works out how to reach `host`: its own user and port first (`user@host`, hostfile `port=`),
/// then the configuration, then the defaults.
pub fn target(host: &Host, settings: &SshSettings) -> SshTarget {
    let c = settings.config.lookup(&host.name, &settings.home);
    let mut identities: Vec<PathBuf> = settings.key.iter().cloned().collect();
    identities.extend(c.identity_files.iter().cloned());
    if identities.is_empty() {
        for name in ["id_ed25519", "id_ecdsa", "id_rsa"] {
            identities.push(settings.home.join(".ssh").join(name));
        }
    }
    SshTarget {
        name: host.name.clone(),
        address: c.hostname.unwrap_or_else(|| host.name.clone()),
        user: host
            .user
            .clone()
            .or(c.user)
            .unwrap_or_else(|| settings.local_user.clone()),
        port: host.port.or(c.port).unwrap_or(22),
        identities,
        connect_timeout: settings
            .connect_timeout
            .or(c.connect_timeout.map(Duration::from_secs))
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        policy: c.strict_host_key_checking.unwrap_or(HostKeyPolicy::Strict),
        known_hosts: c
            .known_hosts
            .unwrap_or_else(|| settings.home.join(".ssh").join("known_hosts")),
    }
}

/// An authenticated connection with the agent's command running.
pub struct Connected {
    session: Session,
    channel: ssh2::Channel,
    tcp: TcpStream,
    /// The host's address.
    pub peer: SocketAddr,
    /// psyrun's address on the connection: where the host can reach psyrun.
    pub local: SocketAddr,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected")
            .field("peer", &self.peer)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// Connects to `t`, checks its key, logs in and runs `command`. The error says what failed and
/// what to try.
pub fn connect(t: &SshTarget, command: &str) -> Result<Connected, String> {
    let deadline = Instant::now() + t.connect_timeout;
    let addrs: Vec<SocketAddr> = (t.address.as_str(), t.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}; check the name", t.address))?
        .collect();
    let mut last = None;
    let mut tcp = None;
    for addr in &addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(addr, left) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = Some(format!("{addr}: {e}")),
        }
    }
    let tcp = tcp.ok_or_else(|| {
        format!(
            "cannot connect to {}:{} within {:?} ({}); is the host up, reachable from here, \
             and running sshd on that port?",
            t.address,
            t.port,
            t.connect_timeout,
            last.unwrap_or_else(|| "no address".into())
        )
    })?;
    let _ = tcp.set_nodelay(true);
    let peer = tcp
        .peer_addr()
        .map_err(|e| format!("connection lost: {e}"))?;
    let local = tcp
        .local_addr()
        .map_err(|e| format!("connection lost: {e}"))?;
    let mut session = Session::new().map_err(|e| format!("libssh2: {e}"))?;
    let clone = tcp
        .try_clone()
        .map_err(|e| format!("duplicating the socket: {e}"))?;
    session.set_tcp_stream(clone);
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(500));
    session.set_timeout(u32::try_from(left.as_millis()).unwrap_or(u32::MAX));
    session
        .handshake()
        .map_err(|e| format!("SSH handshake with {peer} failed: {e}"))?;
    check_host_key(&session, t)?;
    authenticate(&session, t)?;
    let mut channel = session
        .channel_session()
        .map_err(|e| format!("opening a channel: {e}"))?;
    channel
        .exec(command)
        .map_err(|e| format!("running the agent ({command}): {e}"))?;
    session.set_timeout(0);
    Ok(Connected {
        session,
        channel,
        tcp,
        peer,
        local,
    })
}

fn check_host_key(session: &Session, t: &SshTarget) -> Result<(), String> {
    if t.policy == HostKeyPolicy::Off {
        return Ok(());
    }
    let (key, _) = session
        .host_key()
        .ok_or_else(|| format!("{} sent no host key", t.name))?;
    let mut known = session
        .known_hosts()
        .map_err(|e| format!("libssh2 known hosts: {e}"))?;
    // A missing file is the same as an empty one.
    let _ = known.read_file(&t.known_hosts, KnownHostFileKind::OpenSSH);
    match known.check_port(&t.address, t.port, key) {
        CheckResult::Match => Ok(()),
        CheckResult::Mismatch => Err(format!(
            "the host key of {} ({}) does not match the one in {}: the host was reinstalled, \
             or someone is in the middle; if you trust it, remove the old key with \
             `ssh-keygen -R {}`",
            t.name,
            t.address,
            t.known_hosts.display(),
            t.address
        )),
        CheckResult::NotFound | CheckResult::Failure => {
            if t.policy == HostKeyPolicy::AcceptNew {
                Ok(())
            } else {
                Err(format!(
                    "{} ({}) is not in {}; connect once with `ssh {}` to add its key, or set \
                     `StrictHostKeyChecking accept-new` for it in the SSH configuration",
                    t.name,
                    t.address,
                    t.known_hosts.display(),
                    t.name
                ))
            }
        }
    }
}

fn authenticate(session: &Session, t: &SshTarget) -> Result<(), String> {
    let mut tried = Vec::new();
    for key in &t.identities {
        if !key.is_file() {
            continue;
        }
        match session.userauth_pubkey_file(&t.user, None, key, None) {
            Ok(()) if session.authenticated() => return Ok(()),
            Ok(()) => tried.push(format!("{} (not accepted)", key.display())),
            Err(e) => tried.push(format!("{} ({})", key.display(), e.message())),
        }
    }
    if std::env::var_os("SSH_AUTH_SOCK").is_some() {
        match session.userauth_agent(&t.user) {
            Ok(()) if session.authenticated() => return Ok(()),
            Ok(()) => tried.push("the SSH agent (not accepted)".into()),
            Err(e) => tried.push(format!("the SSH agent ({})", e.message())),
        }
    }
    let tried = if tried.is_empty() {
        format!(
            "no key found (looked for {})",
            t.identities
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!("tried {}", tried.join(", "))
    };
    Err(format!(
        "{} refused to log in {}@ ({tried}); give the right key with --ssh-key or \
         IdentityFile, and check the host's authorized_keys",
        t.name, t.user
    ))
}

/// The shell command that starts the agent: `exec 'PATH' --agent`.
pub fn agent_command(remote_psyrun: &Path) -> String {
    format!(
        "exec {} {}",
        crate::quote::shell_quote(remote_psyrun.as_os_str()),
        super::constants::AGENT_FLAG
    )
}

/// Drives `conn` on its own thread: frames to `events` as host `host`, messages from the
/// returned link to the agent, a Ping after each quiet [`HEARTBEAT`], and the link closed after
/// `silence` without a byte from the agent (before its first byte, after the longer of `silence`
/// and [`FIRST_WORD`]).
pub fn run_link(
    route: Route,
    conn: Connected,
    events: Sender<HostEvent>,
    silence: Duration,
) -> std::io::Result<AgentLink> {
    let (wake_rx, wake_tx) = UnixStream::pair()?;
    wake_rx.set_nonblocking(true)?;
    wake_tx.set_nonblocking(true)?;
    let (tx, rx) = mpsc::channel::<ToAgent>();
    let name = format!("psyrun-ssh-{}", route.host);
    let driver = Driver {
        route,
        conn,
        rx,
        wake: wake_rx,
        events,
        silence,
        frames: FrameReader::new(),
        diag: Vec::new(),
        pending: Vec::new(),
        buf: vec![0u8; 64 * 1024],
        heard: Instant::now(),
        heard_any: false,
        said: Instant::now(),
        closing: false,
    };
    helper_thread(name, move || driver.run())?;
    Ok(AgentLink::new(tx, Some(Arc::new(wake_tx))))
}

fn would_block(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::WouldBlock
}

/// Why a link ended, and the agent's exit status if known.
type LinkEnd = (String, Option<i32>);

/// One SSH link's loop and its state: what is queued to send, what was read but is not yet a
/// whole frame or line, and when the agent was last heard and last spoken to.
struct Driver {
    route: Route,
    conn: Connected,
    /// Messages for the agent.
    rx: mpsc::Receiver<ToAgent>,
    /// Readable when a message was queued.
    wake: UnixStream,
    /// Where the link's events go.
    events: Sender<HostEvent>,
    silence: Duration,
    frames: FrameReader,
    diag: Vec<u8>,
    pending: Vec<u8>,
    buf: Vec<u8>,
    heard: Instant,
    /// Whether the agent has said anything yet (until then it may be starting).
    heard_any: bool,
    said: Instant,
    closing: bool,
}

impl Driver {
    /// The link's loop, then its end reported as [`LinkEvent::Closed`](super::link::LinkEvent::Closed): why it ended and the
    /// agent's exit status if known.
    fn run(mut self) {
        self.conn.session.set_blocking(false);
        let (why, status) = loop {
            if let Err(end) = self.round() {
                break end;
            }
        };
        self.route.close(why, status, &self.events);
    }

    /// One round: send what is queued, read what arrived, check for the end, then wait for
    /// the socket, a message to send, or the next heartbeat.
    fn round(&mut self) -> Result<(), LinkEnd> {
        self.queue_outgoing();
        self.send_pending()?;
        if self.closing && self.pending.is_empty() {
            // psyrun is done with this host: end the agent's stdin and the connection.
            let _ = self.conn.channel.send_eof();
            return Err(("psyrun closed the link".into(), None));
        }
        self.read_frames()?;
        self.read_diagnostics();
        if self.conn.channel.eof() {
            return Err(self.agent_ended());
        }
        let silence = self.silence_allowed();
        if self.heard.elapsed() >= silence {
            return Err((
                format!("no word from the agent for {silence:?} (the host or the network is down)"),
                None,
            ));
        }
        self.wait();
        Ok(())
    }

    /// How long the agent may be silent now: the heartbeat timeout, or while it has not said
    /// its first word (a program starting on a loaded host) at least [`FIRST_WORD`].
    fn silence_allowed(&self) -> Duration {
        if self.heard_any {
            self.silence
        } else {
            self.silence.max(FIRST_WORD)
        }
    }

    /// Moves every queued message into the send buffer (a Ping if there was nothing to say for
    /// a heartbeat); notes when psyrun has closed the link.
    fn queue_outgoing(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(msg) => self.pending.extend_from_slice(&msg.encode()),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.closing = true;
                    break;
                }
            }
        }
        if self.pending.is_empty() && !self.closing && self.said.elapsed() >= HEARTBEAT {
            self.pending.extend_from_slice(&ToAgent::Ping.encode());
        }
    }

    /// Writes as much of the send buffer as the channel takes.
    fn send_pending(&mut self) -> Result<(), LinkEnd> {
        while !self.pending.is_empty() {
            match self.conn.channel.write(&self.pending) {
                Ok(0) => break,
                Ok(n) => {
                    self.pending.drain(..n);
                    self.said = Instant::now();
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err((format!("sending to the agent failed: {e}"), None)),
            }
        }
        Ok(())
    }

    /// Reads the agent's stdout and delivers every whole frame.
    fn read_frames(&mut self) -> Result<(), LinkEnd> {
        loop {
            match self.conn.channel.read(&mut self.buf) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    self.heard = Instant::now();
                    self.heard_any = true;
                    self.frames.feed(&self.buf[..n]);
                    self.route
                        .deliver(&mut self.frames, &self.events)
                        .map_err(|why| (why, None))?;
                }
                Err(e) if would_block(&e) => return Ok(()),
                Err(e) => return Err((format!("reading from the agent failed: {e}"), None)),
            }
        }
    }

    /// Reads the agent's stderr and reports every whole line as a diagnostic.
    fn read_diagnostics(&mut self) {
        while let Ok(n) = self.conn.channel.stderr().read(&mut self.buf) {
            if n == 0 {
                break;
            }
            self.heard = Instant::now();
            self.heard_any = true;
            self.diag.extend_from_slice(&self.buf[..n]);
            while let Some(i) = self.diag.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.diag.drain(..=i).collect();
                self.diagnostic(&line);
            }
        }
    }

    /// Reports one line of the agent's stderr.
    fn diagnostic(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line).trim_end().to_string();
        self.route.diagnostic(text, &self.events);
    }

    /// The agent's output ended: reports what is left of its stderr, then why and how it ended.
    fn agent_ended(&mut self) -> LinkEnd {
        if !self.diag.is_empty() {
            let rest = std::mem::take(&mut self.diag);
            self.diagnostic(&rest);
        }
        let status = exit_status(&mut self.conn);
        let why = if self.frames.is_mid_frame() {
            "the agent's output ended inside a message".to_string()
        } else {
            "the agent exited".to_string()
        };
        (why, status)
    }

    /// Waits for the socket (readable, or writable when there is something to send or libssh2
    /// wants to), a wake-up (a message to send), or the next heartbeat.
    fn wait(&self) {
        let mut fds = [
            libc::pollfd {
                fd: self.conn.tcp.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let dirs = self.conn.session.block_directions();
        if !self.pending.is_empty()
            || matches!(
                dirs,
                ssh2::BlockDirections::Outbound | ssh2::BlockDirections::Both
            )
        {
            fds[0].events |= libc::POLLOUT;
        }
        let wait = HEARTBEAT
            .saturating_sub(self.said.elapsed())
            .min(IDLE_POLL)
            .max(Duration::from_millis(1));
        // SAFETY: `fds` is an array of two valid pollfds that lives across the call.
        unsafe {
            libc::poll(fds.as_mut_ptr(), 2, wait.as_millis() as libc::c_int);
        }
        if fds[1].revents != 0 {
            let mut sink = [0u8; 64];
            while matches!((&self.wake).read(&mut sink), Ok(n) if n > 0) {}
        }
    }
}

/// The agent's exit status after end of file (waits up to two seconds for the channel to close).
fn exit_status(conn: &mut Connected) -> Option<i32> {
    conn.session.set_blocking(true);
    conn.session.set_timeout(2000);
    let _ = conn.channel.close();
    conn.channel.wait_close().ok()?;
    conn.channel.exit_status().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_take_the_host_first_then_the_config_then_defaults() {
        let config = SshConfig::parse(
            "cfg",
            "Host h*\n  HostName 10.1.1.1\n  User cfguser\n  Port 2222\n  IdentityFile ~/k\n  \
             StrictHostKeyChecking no\n",
        )
        .unwrap();
        let settings = SshSettings {
            key: Some("/keys/cli".into()),
            config,
            home: "/home/me".into(),
            connect_timeout: None,
            local_user: "me".into(),
        };
        let mut host = Host::new("h1");
        let t = target(&host, &settings);
        assert_eq!(t.address, "10.1.1.1");
        assert_eq!((t.user.as_str(), t.port), ("cfguser", 2222));
        assert_eq!(
            t.identities,
            vec![PathBuf::from("/keys/cli"), PathBuf::from("/home/me/k")]
        );
        assert_eq!(t.policy, HostKeyPolicy::Off);
        host.user = Some("alice".into());
        host.port = Some(22);
        let t = target(&host, &settings);
        assert_eq!((t.user.as_str(), t.port), ("alice", 22));
        let t = target(&Host::new("other"), &SshSettings::default());
        assert_eq!(t.address, "other");
        assert_eq!(t.port, 22);
        assert_eq!(t.policy, HostKeyPolicy::Strict);
        assert_eq!(t.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert!(t.identities[0].ends_with(".ssh/id_ed25519"));
    }

    #[test]
    fn the_agent_command_quotes_the_path() {
        assert_eq!(
            agent_command(Path::new("/opt/psy run/psyrun")),
            "exec '/opt/psy run/psyrun' --agent"
        );
    }

    #[test]
    fn an_unreachable_port_fails_within_the_timeout_and_names_the_cause() {
        // A port on loopback that nothing listens on: refused at once.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut host = Host::new("127.0.0.1");
        host.port = Some(port);
        let settings = SshSettings {
            connect_timeout: Some(Duration::from_secs(2)),
            ..SshSettings::default()
        };
        let t0 = Instant::now();
        let e = connect(&target(&host, &settings), "true").unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(3));
        assert!(e.contains("cannot connect to 127.0.0.1"), "{e}");
        assert!(e.contains("running sshd"), "{e}");
    }
}
