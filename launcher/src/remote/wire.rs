//! The messages between psyrun and its agents, and their byte format (pure).
//!
//! Each message is one frame: a little-endian `u32` length, then that many bytes: a one-byte
//! kind and the fields. Integers are little-endian, byte strings are a `u32` length and the
//! bytes (program names, arguments and environment values are bytes, not text, so nothing is
//! lost on the way), lists are a `u32` count and the items. A frame longer than [`MAX_FRAME`],
//! an unknown kind, or fields that do not fill the frame exactly are errors, never a panic.
//!
//! The conversation (psyrun → agent ↓, agent → psyrun ↑):
//!
//! ```text
//! ↑ Hello        as soon as the agent runs: its version, host name, cores, a free port
//! ↓ Job          this host's ranks: programs, arguments, full environments, binding request
//! ↑ Ready        programs found, directories checked, bindings planned (or ↑ Refused: why)
//! ↓ Start        every host is ready: start the ranks
//! ↑ Started/Failed, Output, Paused, Exited   per rank, as they happen (Paused: stopped by a
//!                signal, or resumed)
//! ↓ Signal       deliver a signal to one rank's process group (or all)
//! ↓ Finish       the job is over: kill what is left, remove shared memory, say Done
//! ↑ Done         every output stream is drained; the agent exits
//! ↕ Ping         at least every HEARTBEAT; silence for the heartbeat timeout means the link is lost
//! ```
//!
//! A tree launch ([`super::tree`]) adds relaying: an agent told to ↓ Reach hosts below it
//! connects to them as psyrun would, says ↑ Reached per host (the route, or why not), and from
//! then on passes ↓ Relay frames down and wraps everything those hosts say in ↑ Relayed (their
//! stderr lines in ↑ Said, the end of their link in ↑ Closed), tagged with each host's index in
//! the job's host list, so psyrun talks to every host as if directly.
//!
//! The job's secret travels inside Job (a rank's environment) over the encrypted channel,
//! never on a command line.

use std::fmt;

/// The largest frame accepted (a piece of a rank's output is at most [`crate::output::PIECE`]).
pub const MAX_FRAME: usize = 16 << 20;

/// What an agent is told to do with the ranks it starts, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// The job id (names its shared-memory segments, which the agent removes at the end).
    pub job_id: String,
    /// Time between SIGTERM and SIGKILL when the agent stops ranks on its own (link lost).
    pub grace_ms: u64,
    /// Silence from psyrun longer than this means the link is lost.
    pub heartbeat_timeout_ms: u64,
    /// psyrun's working directory, used for ranks without `--wdir` when it exists on the host.
    pub cwd: Vec<u8>,
    /// The binding request, in [`crate::binding::BindingRequest`] terms.
    pub binding: BindingSpec,
    /// This host's ranks, in rank order.
    pub ranks: Vec<RankSpec>,
    /// What MPI programs are served, and the job as their services describe it.
    pub mpi: MpiSpec,
}

/// `--mpi` and the whole job's layout, for the agent's MPI services ([`crate::pmi`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MpiSpec {
    /// `--mpi`: 0 auto, 1 pmix, 2 pmi1, 3 pmi2, 4 none.
    pub choice: u8,
    /// This host's index in `hosts` (its node id).
    pub node: u32,
    /// How long a service waits for a barrier, in milliseconds.
    pub timeout_ms: u64,
    /// Every host of the job, in node order: its name and its ranks in local-rank order.
    pub hosts: Vec<(String, Vec<u32>)>,
    /// The program number of every rank of the job.
    pub appnum: Vec<u32>,
}

/// The binding flags, as plain numbers (0 = not given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BindingSpec {
    /// `--bind-to`: 0 default, 1 core, 2 numa, 3 socket, 4 none.
    pub bind_to: u8,
    /// `--map-by`: 0 default, 1 core, 2 numa, 3 socket, 4 node.
    pub map_by: u8,
    /// `--cpus-per-rank`, 0 if not given.
    pub cpus_per_rank: u32,
    /// `--oversubscribe`.
    pub oversubscribe: bool,
}

/// One rank to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankSpec {
    /// Its rank in the world.
    pub rank: u32,
    /// Its index among this host's ranks.
    pub local_rank: u32,
    /// The program as the user gave it (found on the agent's host).
    pub program: Vec<u8>,
    /// Its arguments.
    pub args: Vec<Vec<u8>>,
    /// Variables to set, in order: `-x` ones, then the launch contract's.
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// `--wdir`, if given.
    pub wdir: Option<Vec<u8>>,
}

/// How a rank ended, as an agent reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Exit code.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
    /// Unknown; the text says why.
    Unknown(String),
}

impl From<crate::supervise::Termination> for Ended {
    fn from(t: crate::supervise::Termination) -> Ended {
        use crate::supervise::Termination as T;
        match t {
            T::Exited(c) => Ended::Exited(c),
            T::Signaled(s) => Ended::Signaled(s),
            T::Unknown(w) => Ended::Unknown(w),
        }
    }
}

impl From<Ended> for crate::supervise::Termination {
    fn from(e: Ended) -> crate::supervise::Termination {
        use crate::supervise::Termination as T;
        match e {
            Ended::Exited(c) => T::Exited(c),
            Ended::Signaled(s) => T::Signaled(s),
            Ended::Unknown(w) => T::Unknown(w),
        }
    }
}

/// psyrun → agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToAgent {
    /// This host's part of the job.
    Job(JobSpec),
    /// Start the ranks of the job.
    Start,
    /// Send `signal` to rank `rank`'s process group; `rank == ALL_RANKS` means every rank.
    Signal {
        /// The rank, or [`ALL_RANKS`].
        rank: u32,
        /// The signal number.
        signal: i32,
    },
    /// The job is over: kill what is left, clean up, reply [`FromAgent::Done`].
    Finish,
    /// I am alive.
    Ping,
    /// Reach these hosts and relay for them (a tree launch): the first `width` directly, the
    /// rest through them ([`super::tree::split`]).
    Reach {
        /// At most this many hosts are reached directly by any one agent.
        width: u32,
        /// Silence after which a link to a host below counts as lost.
        heartbeat_timeout_ms: u64,
        /// The psyrun to run on the hosts below.
        remote_psyrun: Vec<u8>,
        /// Every host below this agent.
        hosts: Vec<RelayHost>,
    },
    /// Pass one message (an encoded [`ToAgent`] body) to host `host`, which is below this agent.
    Relay {
        /// The host's index in the job's host list.
        host: u32,
        /// The message's frame body.
        body: Vec<u8>,
    },
}

/// How an agent reaches a host below it in a tree launch: what psyrun worked out from its
/// command line and SSH configuration ([`super::ssh::SshTarget`]), so the agent needs none of
/// it, only the key files at the same paths (a shared home directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayHost {
    /// Its index in the job's host list.
    pub host: u32,
    /// Its name as given (for messages).
    pub name: String,
    /// Start its agent as a local child (`--launcher local`) instead of over SSH.
    pub local: bool,
    /// What to connect to.
    pub address: String,
    /// The login.
    pub user: String,
    /// The SSH port.
    pub port: u16,
    /// Private key files to try, in order.
    pub identities: Vec<Vec<u8>>,
    /// The connect timeout.
    pub connect_timeout_ms: u64,
    /// Host key policy: 0 strict, 1 accept-new, 2 off.
    pub policy: u8,
    /// The `known_hosts` file.
    pub known_hosts: Vec<u8>,
}

/// How a relaying agent reached a host below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayRoute {
    /// In words (`ssh root@10.0.0.5:22`, `local`).
    pub via: String,
    /// The host's address as the relay reached it, if over the network.
    pub peer: Option<String>,
}

/// [`ToAgent::Signal`] to every rank of the host.
pub const ALL_RANKS: u32 = u32::MAX;

/// agent → psyrun.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromAgent {
    /// The agent runs.
    Hello {
        /// psyrun's version on that host.
        version: String,
        /// The host's name (`gethostname`).
        hostname: String,
        /// Cores (hardware threads) psyrun may use there.
        cores: u32,
        /// A TCP port free on that host right now (`MASTER_PORT` if rank 0 runs there).
        free_port: u16,
    },
    /// The job can start here; the binding of each rank, as `--report-bindings` prints it.
    Ready {
        /// One line per rank (`rank R: cpus LIST (bound to ...)`), then the binding note.
        bindings: Vec<String>,
    },
    /// The job cannot start here.
    Refused {
        /// Why, and what to do.
        message: String,
        /// The exit code psyrun should use (as if it had failed locally).
        code: u8,
    },
    /// A rank runs.
    Started {
        /// The rank.
        rank: u32,
        /// Its process id on the host.
        pid: u32,
    },
    /// A rank could not be started.
    Failed {
        /// The rank.
        rank: u32,
        /// Why.
        message: String,
        /// The exit code psyrun should use.
        code: u8,
    },
    /// One line of a rank's output, or one piece of a long line (see
    /// [`crate::output::for_each_piece`]).
    Output {
        /// The rank.
        rank: u32,
        /// 0 stdout, 1 stderr.
        stream: u8,
        /// When the agent read it, microseconds since the Unix epoch.
        time_us: u64,
        /// The line goes on in the next Output of this rank and stream (this piece does not
        /// end it).
        more: bool,
        /// The bytes, newline included if it had one.
        bytes: Vec<u8>,
    },
    /// A rank was stopped by a signal (SIGSTOP, ...), or resumed by SIGCONT.
    Paused {
        /// The rank.
        rank: u32,
        /// The signal that stopped it; `None`: it was resumed.
        signal: Option<i32>,
    },
    /// A rank called abort through its MPI service (`MPI_Abort`).
    Aborted {
        /// The rank.
        rank: u32,
        /// The exit code it asked for.
        code: i32,
        /// Its message.
        message: String,
    },
    /// A rank ended.
    Exited {
        /// The rank.
        rank: u32,
        /// How.
        ended: Ended,
    },
    /// Everything is drained; the agent exits.
    Done,
    /// I am alive.
    Ping,
    /// A host below this agent was reached (its agent's Hello follows, relayed), or why not.
    Reached {
        /// The host's index in the job's host list.
        host: u32,
        /// The route, or why it could not be reached.
        outcome: Result<RelayRoute, String>,
    },
    /// One message (an encoded [`FromAgent`] body) from host `host`, below this agent.
    Relayed {
        /// The host's index.
        host: u32,
        /// The message's frame body.
        body: Vec<u8>,
    },
    /// A line host `host`'s agent (or its sshd) wrote on its stderr.
    Said {
        /// The host's index.
        host: u32,
        /// The line.
        line: String,
    },
    /// The link to host `host` (below this agent) is gone.
    Closed {
        /// The host's index.
        host: u32,
        /// Why, in words.
        why: String,
        /// Its agent's exit status, if known.
        status: Option<i32>,
    },
}

/// A frame that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad message from the other side: {}", self.0)
    }
}

impl std::error::Error for WireError {}

/// Builds the body of a frame.
#[derive(Default)]
struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        // Lengths are bounded by MAX_FRAME when decoding; encoding longer would be refused there.
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(v);
        self
    }
    fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    fn count(&mut self, n: usize) -> &mut Self {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX))
    }
    /// An optional field: 0, or 1 and the value as `put` writes it.
    fn option<T>(&mut self, v: Option<T>, put: impl FnOnce(&mut Self, T)) -> &mut Self {
        match v {
            Some(v) => put(self.u8(1), v),
            None => {
                self.u8(0);
            }
        }
        self
    }
}

/// Reads the body of a frame.
struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError(format!("frame ends inside {what}")));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }
    fn u8(&mut self, what: &str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn i32(&mut self, what: &str) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn bytes(&mut self, what: &str) -> Result<Vec<u8>, WireError> {
        let n = self.u32(what)? as usize;
        Ok(self.take(n, what)?.to_vec())
    }
    fn string(&mut self, what: &str) -> Result<String, WireError> {
        String::from_utf8(self.bytes(what)?).map_err(|_| WireError(format!("{what} is not UTF-8")))
    }
    fn bool(&mut self, what: &str) -> Result<bool, WireError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(WireError(format!("{what}: {b} is not a boolean"))),
        }
    }
    /// An optional field written by [`Enc::option`]: whether it follows, then the value.
    fn option<T>(
        &mut self,
        what: &str,
        read: impl FnOnce(&mut Self) -> Result<T, WireError>,
    ) -> Result<Option<T>, WireError> {
        if self.bool(what)? {
            read(self).map(Some)
        } else {
            Ok(None)
        }
    }
    /// A list count, checked against what is left so a lying count cannot make us allocate.
    fn count(&mut self, what: &str, min_item: usize) -> Result<usize, WireError> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_item.max(1)) > self.0.len() {
            return Err(WireError(format!(
                "{what}: {n} items do not fit in the frame"
            )));
        }
        Ok(n)
    }
    fn end(&self, kind: &str) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError(format!(
                "{} stray byte(s) after a {kind} message",
                self.0.len()
            )))
        }
    }
}

/// Prepends the length to a body.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(body);
    out
}

impl ToAgent {
    /// The message as one frame.
    pub fn encode(&self) -> Vec<u8> {
        frame(&self.body())
    }

    /// The message's frame body (what a relayed message carries).
    pub fn body(&self) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            ToAgent::Job(job) => {
                e.u8(1).str(&job.job_id).u64(job.grace_ms);
                e.u64(job.heartbeat_timeout_ms).bytes(&job.cwd);
                let b = job.binding;
                e.u8(b.bind_to).u8(b.map_by).u32(b.cpus_per_rank);
                e.u8(u8::from(b.oversubscribe));
                e.count(job.ranks.len());
                for r in &job.ranks {
                    e.u32(r.rank).u32(r.local_rank).bytes(&r.program);
                    e.count(r.args.len());
                    for a in &r.args {
                        e.bytes(a);
                    }
                    e.count(r.env.len());
                    for (k, v) in &r.env {
                        e.bytes(k).bytes(v);
                    }
                    e.option(r.wdir.as_deref(), |e, d| {
                        e.bytes(d);
                    });
                }
                let m = &job.mpi;
                e.u8(m.choice)
                    .u32(m.node)
                    .u64(m.timeout_ms)
                    .count(m.hosts.len());
                for (name, ranks) in &m.hosts {
                    e.str(name).count(ranks.len());
                    for &r in ranks {
                        e.u32(r);
                    }
                }
                e.count(m.appnum.len());
                for &a in &m.appnum {
                    e.u32(a);
                }
            }
            ToAgent::Start => {
                e.u8(2);
            }
            ToAgent::Signal { rank, signal } => {
                e.u8(3).u32(*rank).i32(*signal);
            }
            ToAgent::Finish => {
                e.u8(4);
            }
            ToAgent::Ping => {
                e.u8(5);
            }
            ToAgent::Reach {
                width,
                heartbeat_timeout_ms,
                remote_psyrun,
                hosts,
            } => {
                e.u8(6).u32(*width).u64(*heartbeat_timeout_ms);
                e.bytes(remote_psyrun).count(hosts.len());
                for h in hosts {
                    e.u32(h.host).str(&h.name).u8(u8::from(h.local));
                    e.str(&h.address).str(&h.user).u16(h.port);
                    e.count(h.identities.len());
                    for i in &h.identities {
                        e.bytes(i);
                    }
                    e.u64(h.connect_timeout_ms)
                        .u8(h.policy)
                        .bytes(&h.known_hosts);
                }
            }
            ToAgent::Relay { host, body } => {
                e.u8(7).u32(*host).bytes(body);
            }
        }
        e.0
    }

    /// Decodes one frame body (without its length).
    pub fn decode(body: &[u8]) -> Result<ToAgent, WireError> {
        let mut d = Dec(body);
        let msg = match d.u8("the message kind")? {
            1 => {
                let job_id = d.string("the job id")?;
                let grace_ms = d.u64("the grace period")?;
                let heartbeat_timeout_ms = d.u64("the heartbeat timeout")?;
                let cwd = d.bytes("the working directory")?;
                let binding = BindingSpec {
                    bind_to: d.u8("--bind-to")?,
                    map_by: d.u8("--map-by")?,
                    cpus_per_rank: d.u32("--cpus-per-rank")?,
                    oversubscribe: d.bool("--oversubscribe")?,
                };
                let n = d.count("the ranks", 21)?;
                let mut ranks = Vec::with_capacity(n);
                for _ in 0..n {
                    let rank = d.u32("a rank")?;
                    let local_rank = d.u32("a local rank")?;
                    let program = d.bytes("a program")?;
                    let nargs = d.count("the arguments", 4)?;
                    let args = (0..nargs)
                        .map(|_| d.bytes("an argument"))
                        .collect::<Result<_, _>>()?;
                    let nenv = d.count("the environment", 8)?;
                    let env = (0..nenv)
                        .map(|_| Ok((d.bytes("a variable name")?, d.bytes("a variable value")?)))
                        .collect::<Result<_, WireError>>()?;
                    let wdir = d.option("the --wdir flag", |d| d.bytes("--wdir"))?;
                    ranks.push(RankSpec {
                        rank,
                        local_rank,
                        program,
                        args,
                        env,
                        wdir,
                    });
                }
                let mpi = decode_mpi(&mut d)?;
                ToAgent::Job(JobSpec {
                    job_id,
                    grace_ms,
                    heartbeat_timeout_ms,
                    cwd,
                    binding,
                    ranks,
                    mpi,
                })
            }
            2 => ToAgent::Start,
            3 => ToAgent::Signal {
                rank: d.u32("the rank")?,
                signal: d.i32("the signal")?,
            },
            4 => ToAgent::Finish,
            5 => ToAgent::Ping,
            6 => {
                let width = d.u32("the tree width")?;
                let heartbeat_timeout_ms = d.u64("the heartbeat timeout")?;
                let remote_psyrun = d.bytes("the remote psyrun")?;
                let n = d.count("the hosts below", 40)?;
                let hosts = (0..n)
                    .map(|_| decode_relay_host(&mut d))
                    .collect::<Result<_, _>>()?;
                ToAgent::Reach {
                    width,
                    heartbeat_timeout_ms,
                    remote_psyrun,
                    hosts,
                }
            }
            7 => ToAgent::Relay {
                host: d.u32("the host")?,
                body: d.bytes("the relayed message")?,
            },
            k => return Err(WireError(format!("unknown message kind {k} for an agent"))),
        };
        d.end("psyrun")?;
        Ok(msg)
    }
}

impl FromAgent {
    /// The message as one frame.
    pub fn encode(&self) -> Vec<u8> {
        frame(&self.body())
    }

    /// The message's frame body (what a relayed message carries).
    pub fn body(&self) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            FromAgent::Hello {
                version,
                hostname,
                cores,
                free_port,
            } => {
                e.u8(1)
                    .str(version)
                    .str(hostname)
                    .u32(*cores)
                    .u16(*free_port);
            }
            FromAgent::Ready { bindings } => {
                e.u8(2).count(bindings.len());
                for b in bindings {
                    e.str(b);
                }
            }
            FromAgent::Refused { message, code } => {
                e.u8(3).str(message).u8(*code);
            }
            FromAgent::Started { rank, pid } => {
                e.u8(4).u32(*rank).u32(*pid);
            }
            FromAgent::Failed {
                rank,
                message,
                code,
            } => {
                e.u8(5).u32(*rank).str(message).u8(*code);
            }
            FromAgent::Output {
                rank,
                stream,
                time_us,
                more,
                bytes,
            } => {
                e.u8(6)
                    .u32(*rank)
                    .u8(*stream)
                    .u64(*time_us)
                    .u8(u8::from(*more))
                    .bytes(bytes);
            }
            FromAgent::Exited { rank, ended } => {
                e.u8(7).u32(*rank);
                match ended {
                    Ended::Exited(c) => e.u8(0).i32(*c),
                    Ended::Signaled(s) => e.u8(1).i32(*s),
                    Ended::Unknown(why) => e.u8(2).str(why),
                };
            }
            FromAgent::Done => {
                e.u8(8);
            }
            FromAgent::Ping => {
                e.u8(9);
            }
            FromAgent::Reached { host, outcome } => {
                e.u8(10).u32(*host);
                match outcome {
                    Ok(route) => {
                        e.u8(1)
                            .str(&route.via)
                            .option(route.peer.as_deref(), |e, p| {
                                e.str(p);
                            });
                    }
                    Err(why) => {
                        e.u8(0).str(why);
                    }
                }
            }
            FromAgent::Relayed { host, body } => {
                e.u8(11).u32(*host).bytes(body);
            }
            FromAgent::Said { host, line } => {
                e.u8(12).u32(*host).str(line);
            }
            FromAgent::Closed { host, why, status } => {
                e.u8(13).u32(*host).str(why).option(*status, |e, s| {
                    e.i32(s);
                });
            }
            FromAgent::Paused { rank, signal } => {
                e.u8(14).u32(*rank).option(*signal, |e, s| {
                    e.i32(s);
                });
            }
            FromAgent::Aborted {
                rank,
                code,
                message,
            } => {
                e.u8(15).u32(*rank).i32(*code).str(message);
            }
        }
        e.0
    }

    /// Decodes one frame body (without its length).
    pub fn decode(body: &[u8]) -> Result<FromAgent, WireError> {
        let mut d = Dec(body);
        let msg = match d.u8("the message kind")? {
            1 => FromAgent::Hello {
                version: d.string("the version")?,
                hostname: d.string("the host name")?,
                cores: d.u32("the core count")?,
                free_port: d.u16("the free port")?,
            },
            2 => {
                let n = d.count("the bindings", 4)?;
                FromAgent::Ready {
                    bindings: (0..n)
                        .map(|_| d.string("a binding"))
                        .collect::<Result<_, _>>()?,
                }
            }
            3 => FromAgent::Refused {
                message: d.string("the reason")?,
                code: d.u8("the exit code")?,
            },
            4 => FromAgent::Started {
                rank: d.u32("the rank")?,
                pid: d.u32("the pid")?,
            },
            5 => FromAgent::Failed {
                rank: d.u32("the rank")?,
                message: d.string("the reason")?,
                code: d.u8("the exit code")?,
            },
            6 => FromAgent::Output {
                rank: d.u32("the rank")?,
                stream: match d.u8("the stream")? {
                    s @ (0 | 1) => s,
                    s => {
                        return Err(WireError(format!(
                            "stream {s} is neither stdout nor stderr"
                        )))
                    }
                },
                time_us: d.u64("the time")?,
                more: d.u8("whether the line goes on")? != 0,
                bytes: d.bytes("the output")?,
            },
            7 => {
                let rank = d.u32("the rank")?;
                let ended = match d.u8("how it ended")? {
                    0 => Ended::Exited(d.i32("the exit code")?),
                    1 => Ended::Signaled(d.i32("the signal")?),
                    2 => Ended::Unknown(d.string("the reason")?),
                    k => return Err(WireError(format!("unknown ending {k}"))),
                };
                FromAgent::Exited { rank, ended }
            }
            8 => FromAgent::Done,
            9 => FromAgent::Ping,
            10 => {
                let host = d.u32("the host")?;
                let outcome = if d.bool("whether it was reached")? {
                    let via = d.string("the route")?;
                    let peer =
                        d.option("whether an address follows", |d| d.string("the address"))?;
                    Ok(RelayRoute { via, peer })
                } else {
                    Err(d.string("why not")?)
                };
                FromAgent::Reached { host, outcome }
            }
            11 => FromAgent::Relayed {
                host: d.u32("the host")?,
                body: d.bytes("the relayed message")?,
            },
            12 => FromAgent::Said {
                host: d.u32("the host")?,
                line: d.string("the line")?,
            },
            13 => FromAgent::Closed {
                host: d.u32("the host")?,
                why: d.string("why")?,
                status: d.option("whether a status follows", |d| d.i32("the status"))?,
            },
            14 => FromAgent::Paused {
                rank: d.u32("the rank")?,
                signal: d.option("whether it is stopped", |d| d.i32("the signal"))?,
            },
            15 => FromAgent::Aborted {
                rank: d.u32("the rank")?,
                code: d.i32("the code")?,
                message: d.string("the message")?,
            },
            k => return Err(WireError(format!("unknown message kind {k} from an agent"))),
        };
        d.end("agent")?;
        Ok(msg)
    }
}

/// One [`RelayHost`] of a Reach message.
fn decode_mpi(d: &mut Dec<'_>) -> Result<MpiSpec, WireError> {
    let choice = d.u8("--mpi")?;
    let node = d.u32("the node")?;
    let timeout_ms = d.u64("the MPI service timeout")?;
    let n = d.count("the hosts", 8)?;
    let mut hosts = Vec::with_capacity(n);
    for _ in 0..n {
        let name = d.string("a host name")?;
        let k = d.count("a host's ranks", 4)?;
        let ranks = (0..k).map(|_| d.u32("a rank")).collect::<Result<_, _>>()?;
        hosts.push((name, ranks));
    }
    let n = d.count("the program numbers", 4)?;
    let appnum = (0..n)
        .map(|_| d.u32("a program number"))
        .collect::<Result<_, _>>()?;
    Ok(MpiSpec {
        choice,
        node,
        timeout_ms,
        hosts,
        appnum,
    })
}

fn decode_relay_host(d: &mut Dec<'_>) -> Result<RelayHost, WireError> {
    let host = d.u32("a host's index")?;
    let name = d.string("a host's name")?;
    let local = d.bool("whether the host is local")?;
    let address = d.string("a host's address")?;
    let user = d.string("a login")?;
    let port = d.u16("a port")?;
    let n = d.count("the key files", 4)?;
    let identities = (0..n)
        .map(|_| d.bytes("a key file"))
        .collect::<Result<_, _>>()?;
    Ok(RelayHost {
        host,
        name,
        local,
        address,
        user,
        port,
        identities,
        connect_timeout_ms: d.u64("a connect timeout")?,
        policy: d.u8("a host key policy")?,
        known_hosts: d.bytes("a known_hosts file")?,
    })
}

/// Splits a byte stream into frame bodies: feed it what was read, take whole frames out.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> FrameReader {
        FrameReader::default()
    }

    /// Adds bytes read from the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame body, `Ok(None)` if more bytes are needed, or an error for a frame
    /// longer than [`MAX_FRAME`] (the stream cannot be trusted after that).
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        let have = &self.buf[self.start..];
        let Some(len) = have.get(..4) else {
            return Ok(None);
        };
        let mut word = [0u8; 4];
        word.copy_from_slice(len);
        let n = u32::from_le_bytes(word) as usize;
        if n > MAX_FRAME {
            return Err(WireError(format!(
                "a frame of {n} bytes (at most {MAX_FRAME}); is something else writing to the \
                 agent's stdout?"
            )));
        }
        if have.len() < 4 + n {
            return Ok(None);
        }
        let body = have[4..4 + n].to_vec();
        self.start += 4 + n;
        if self.start > 1 << 20 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(Some(body))
    }

    /// Whether bytes of an unfinished frame are held.
    pub fn is_mid_frame(&self) -> bool {
        self.start < self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..12)
    }

    fn rank_spec() -> impl Strategy<Value = RankSpec> {
        (
            any::<u32>(),
            any::<u32>(),
            bytes(),
            proptest::collection::vec(bytes(), 0..3),
            proptest::collection::vec((bytes(), bytes()), 0..3),
            proptest::option::of(bytes()),
        )
            .prop_map(|(rank, local_rank, program, args, env, wdir)| RankSpec {
                rank,
                local_rank,
                program,
                args,
                env,
                wdir,
            })
    }

    fn to_agent() -> impl Strategy<Value = ToAgent> {
        prop_oneof![
            (
                ".{0,8}",
                any::<u64>(),
                any::<u64>(),
                bytes(),
                (any::<u8>(), any::<u8>(), any::<u32>(), any::<bool>()),
                proptest::collection::vec(rank_spec(), 0..3)
            )
                .prop_map(|(job_id, grace_ms, hb, cwd, (a, b, c, d), ranks)| {
                    ToAgent::Job(JobSpec {
                        job_id,
                        grace_ms,
                        heartbeat_timeout_ms: hb,
                        cwd,
                        binding: BindingSpec {
                            bind_to: a,
                            map_by: b,
                            cpus_per_rank: c,
                            oversubscribe: d,
                        },
                        ranks,
                        mpi: MpiSpec {
                            choice: a,
                            node: c,
                            timeout_ms: hb,
                            hosts: vec![("h".into(), vec![c, 1])],
                            appnum: vec![0, c],
                        },
                    })
                }),
            Just(ToAgent::Start),
            (any::<u32>(), any::<i32>())
                .prop_map(|(rank, signal)| ToAgent::Signal { rank, signal }),
            Just(ToAgent::Finish),
            Just(ToAgent::Ping),
            (
                any::<u32>(),
                any::<u64>(),
                bytes(),
                proptest::collection::vec(relay_host(), 0..3)
            )
                .prop_map(|(width, hb, remote_psyrun, hosts)| ToAgent::Reach {
                    width,
                    heartbeat_timeout_ms: hb,
                    remote_psyrun,
                    hosts,
                }),
            (any::<u32>(), bytes()).prop_map(|(host, body)| ToAgent::Relay { host, body }),
        ]
    }

    fn relay_host() -> impl Strategy<Value = RelayHost> {
        (
            (any::<u32>(), ".{0,8}", any::<bool>(), ".{0,8}", ".{0,8}"),
            (any::<u16>(), proptest::collection::vec(bytes(), 0..3)),
            (any::<u64>(), any::<u8>(), bytes()),
        )
            .prop_map(
                |((host, name, local, address, user), (port, identities), (ms, policy, kh))| {
                    RelayHost {
                        host,
                        name,
                        local,
                        address,
                        user,
                        port,
                        identities,
                        connect_timeout_ms: ms,
                        policy,
                        known_hosts: kh,
                    }
                },
            )
    }

    fn from_agent() -> impl Strategy<Value = FromAgent> {
        prop_oneof![
            (".{0,8}", ".{0,8}", any::<u32>(), any::<u16>()).prop_map(
                |(version, hostname, cores, free_port)| FromAgent::Hello {
                    version,
                    hostname,
                    cores,
                    free_port
                }
            ),
            proptest::collection::vec(".{0,8}", 0..3)
                .prop_map(|bindings| FromAgent::Ready { bindings }),
            (".{0,8}", any::<u8>())
                .prop_map(|(message, code)| FromAgent::Refused { message, code }),
            (any::<u32>(), any::<u32>()).prop_map(|(rank, pid)| FromAgent::Started { rank, pid }),
            (any::<u32>(), ".{0,8}", any::<u8>()).prop_map(|(rank, message, code)| {
                FromAgent::Failed {
                    rank,
                    message,
                    code,
                }
            }),
            (any::<u32>(), 0u8..2, any::<u64>(), any::<bool>(), bytes()).prop_map(
                |(rank, stream, time_us, more, bytes)| FromAgent::Output {
                    rank,
                    stream,
                    time_us,
                    more,
                    bytes
                }
            ),
            (any::<u32>(), any::<i32>(), 0u8..3, ".{0,8}").prop_map(|(rank, v, k, why)| {
                FromAgent::Exited {
                    rank,
                    ended: match k {
                        0 => Ended::Exited(v),
                        1 => Ended::Signaled(v),
                        _ => Ended::Unknown(why),
                    },
                }
            }),
            Just(FromAgent::Done),
            Just(FromAgent::Ping),
            (
                any::<u32>(),
                any::<bool>(),
                ".{0,8}",
                proptest::option::of(".{0,8}")
            )
                .prop_map(|(host, ok, via, peer)| FromAgent::Reached {
                    host,
                    outcome: if ok {
                        Ok(RelayRoute { via, peer })
                    } else {
                        Err(via)
                    },
                }),
            (any::<u32>(), bytes()).prop_map(|(host, body)| FromAgent::Relayed { host, body }),
            (any::<u32>(), ".{0,8}").prop_map(|(host, line)| FromAgent::Said { host, line }),
            (any::<u32>(), ".{0,8}", proptest::option::of(any::<i32>()))
                .prop_map(|(host, why, status)| FromAgent::Closed { host, why, status }),
            (any::<u32>(), proptest::option::of(any::<i32>()))
                .prop_map(|(rank, signal)| FromAgent::Paused { rank, signal }),
            (any::<u32>(), any::<i32>(), ".{0,8}").prop_map(|(rank, code, message)| {
                FromAgent::Aborted {
                    rank,
                    code,
                    message,
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn messages_to_agents_survive_the_trip(msg in to_agent(), split in 0usize..64) {
            let frame = msg.encode();
            let mut r = FrameReader::new();
            let cut = split.min(frame.len());
            r.feed(&frame[..cut]);
            if cut < frame.len() {
                prop_assert_eq!(r.next_frame().unwrap(), None);
            }
            r.feed(&frame[cut..]);
            let body = r.next_frame().unwrap().unwrap();
            prop_assert_eq!(ToAgent::decode(&body).unwrap(), msg);
            prop_assert!(!r.is_mid_frame());
        }

        #[test]
        fn messages_from_agents_survive_the_trip(msgs in proptest::collection::vec(from_agent(), 1..5)) {
            let mut r = FrameReader::new();
            for m in &msgs {
                r.feed(&m.encode());
            }
            for m in &msgs {
                let body = r.next_frame().unwrap().unwrap();
                prop_assert_eq!(&FromAgent::decode(&body).unwrap(), m);
            }
            prop_assert_eq!(r.next_frame().unwrap(), None);
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ToAgent::decode(&body);
            let _ = FromAgent::decode(&body);
        }

        #[test]
        fn a_cut_frame_is_an_error(msg in to_agent()) {
            let frame = msg.encode();
            let body = &frame[4..];
            for cut in 0..body.len() {
                prop_assert!(ToAgent::decode(&body[..cut]).is_err());
            }
        }
    }

    #[test]
    fn stray_bytes_and_huge_frames_are_refused() {
        let mut body = ToAgent::Ping.encode()[4..].to_vec();
        body.push(0);
        assert!(ToAgent::decode(&body).unwrap_err().0.contains("stray"));
        let mut r = FrameReader::new();
        r.feed(&(MAX_FRAME as u32 + 1).to_le_bytes());
        assert!(r.next_frame().unwrap_err().0.contains("agent's stdout"));
        // A list count larger than the frame is refused before allocating.
        let mut e = Enc::default();
        e.u8(2).u32(u32::MAX);
        assert!(FromAgent::decode(&e.0)
            .unwrap_err()
            .0
            .contains("do not fit"));
    }
}
