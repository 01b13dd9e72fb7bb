//! The messages between psyrun and its agents, and their byte format (pure).
//!
//! Each message is one frame: a little-endian `u32` length, then that many bytes: a one-byte
//! kind and the fields. Integers are little-endian, byte strings are a `u32` length and the
//! bytes (program names, arguments and environment values are bytes, not text, so nothing is
//! lost on the way), lists are a `u32` count and the items. A frame longer than [`MAX_FRAME`](frame::MAX_FRAME),
//! an unknown kind, or fields that do not fill the frame exactly are errors, never a panic.
//!
//! Every message and struct is declared once, in the table at the end of this file: its tag,
//! its fields in wire order, and each field's codec with the words a decoding error uses.
//! Encode and decode are both generated from that table (the `record!` and `tagged!` macros of `codec`);
//! frames are cut from the stream by [`FrameReader`].
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

mod codec;
mod frame;
#[cfg(test)]
mod tests;

use crate::termination::Termination;
use codec::{message, record, tagged, Bool, Bytes, Either, Int, List, Opt, Pair, Rec, Str, Stream};
pub use frame::FrameReader;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

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
        ended: Termination,
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

/// `path` as wire bytes.
pub fn path_bytes(path: &Path) -> Vec<u8> {
    path.as_os_str().as_bytes().to_vec()
}

/// Wire bytes as a path (the inverse of [`path_bytes`]).
pub fn path_from(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsString::from_vec(bytes.to_vec()))
}

// The message table: every message and struct on the wire, its tag and its fields in wire
// order, each with its codec and the words a decoding error uses. Encode and decode are both
// made from these lines (see `codec`).

tagged!(ToAgent, "the message kind", |k| format!("unknown message kind {k} for an agent"), {
    1 => Job(job: Rec),
    2 => Start {},
    3 => Signal { rank: Int("the rank"), signal: Int("the signal") },
    4 => Finish {},
    5 => Ping {},
    6 => Reach {
        width: Int("the tree width"),
        heartbeat_timeout_ms: Int("the heartbeat timeout"),
        remote_psyrun: Bytes("the remote psyrun"),
        hosts: List("the hosts below", 40, Rec),
    },
    7 => Relay { host: Int("the host"), body: Bytes("the relayed message") },
});

tagged!(FromAgent, "the message kind", |k| format!("unknown message kind {k} from an agent"), {
    1 => Hello {
        version: Str("the version"),
        hostname: Str("the host name"),
        cores: Int("the core count"),
        free_port: Int("the free port"),
    },
    2 => Ready { bindings: List("the bindings", 4, Str("a binding")) },
    3 => Refused { message: Str("the reason"), code: Int("the exit code") },
    4 => Started { rank: Int("the rank"), pid: Int("the pid") },
    5 => Failed { rank: Int("the rank"), message: Str("the reason"), code: Int("the exit code") },
    6 => Output {
        rank: Int("the rank"),
        stream: Stream("the stream"),
        time_us: Int("the time"),
        more: Bool::lax("whether the line goes on"),
        bytes: Bytes("the output"),
    },
    7 => Exited { rank: Int("the rank"), ended: Rec },
    8 => Done {},
    9 => Ping {},
    10 => Reached {
        host: Int("the host"),
        outcome: Either("whether it was reached", Rec, Str("why not")),
    },
    11 => Relayed { host: Int("the host"), body: Bytes("the relayed message") },
    12 => Said { host: Int("the host"), line: Str("the line") },
    13 => Closed {
        host: Int("the host"),
        why: Str("why"),
        status: Opt("whether a status follows", Int("the status")),
    },
    14 => Paused { rank: Int("the rank"), signal: Opt("whether it is stopped", Int("the signal")) },
    15 => Aborted { rank: Int("the rank"), code: Int("the code"), message: Str("the message") },
});

message!(ToAgent, "psyrun");
message!(FromAgent, "agent");

tagged!(Termination, "how it ended", |k| format!("unknown ending {k}"), {
    0 => Exited(code: Int("the exit code")),
    1 => Signaled(signal: Int("the signal")),
    2 => Unknown(why: Str("the reason")),
});

record!(JobSpec {
    job_id: Str("the job id"),
    grace_ms: Int("the grace period"),
    heartbeat_timeout_ms: Int("the heartbeat timeout"),
    cwd: Bytes("the working directory"),
    binding: Rec,
    ranks: List("the ranks", 21, Rec),
    mpi: Rec,
});

record!(BindingSpec {
    bind_to: Int("--bind-to"),
    map_by: Int("--map-by"),
    cpus_per_rank: Int("--cpus-per-rank"),
    oversubscribe: Bool::strict("--oversubscribe"),
});

record!(RankSpec {
    rank: Int("a rank"),
    local_rank: Int("a local rank"),
    program: Bytes("a program"),
    args: List("the arguments", 4, Bytes("an argument")),
    env: List(
        "the environment",
        8,
        Pair(Bytes("a variable name"), Bytes("a variable value"))
    ),
    wdir: Opt("the --wdir flag", Bytes("--wdir")),
});

record!(MpiSpec {
    choice: Int("--mpi"),
    node: Int("the node"),
    timeout_ms: Int("the MPI service timeout"),
    hosts: List(
        "the hosts",
        8,
        Pair(Str("a host name"), List("a host's ranks", 4, Int("a rank")))
    ),
    appnum: List("the program numbers", 4, Int("a program number")),
});

record!(RelayHost {
    host: Int("a host's index"),
    name: Str("a host's name"),
    local: Bool::strict("whether the host is local"),
    address: Str("a host's address"),
    user: Str("a login"),
    port: Int("a port"),
    identities: List("the key files", 4, Bytes("a key file")),
    connect_timeout_ms: Int("a connect timeout"),
    policy: Int("a host key policy"),
    known_hosts: Bytes("a known_hosts file"),
});

record!(RelayRoute {
    via: Str("the route"),
    peer: Opt("whether an address follows", Str("the address")),
});
