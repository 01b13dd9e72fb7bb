//! Jobs on several hosts: `psyrun -H a:2,b:2 -n 4 prog`, `--hostfile`, a Slurm allocation.
//!
//! psyrun reaches every host once ([`preflight`]): over SSH ([`ssh`], honouring
//! `~/.ssh/config` through [`ssh_config`]), as a local child for this machine, or through `srun`
//! inside a Slurm allocation; beyond `--tree-width` hosts, only the first level, whose agents
//! reach the rest and relay for them ([`tree`], [`relay`]). On each host it runs itself as an
//! agent ([`agent`]), which says
//! hello; the job is placed only when every host has answered, and started only when every host
//! has checked its part ([`launch`]). The agent spawns and binds its ranks there, streams their
//! output back (written whole on psyrun's console by [`lines`]), and reports how they end; psyrun's one [`crate::supervise::Supervisor`] decides
//! for the whole job and stops ranks through the agents. Everything between psyrun and an agent
//! is in [`protocol`]; each link ([`link`]) watches a heartbeat in both directions, so a lost host
//! fails the job (naming it) and a lost launcher makes every agent stop its ranks. The
//! constants several of these share (the agent flag, the heartbeat, tree widths, Slurm's step
//! variables) are in [`constants`]. Which hosts
//! and how to reach them is decided before, in [`crate::discover`]; a dry run is listed by
//! [`crate::dry_run`].

pub mod agent;
mod agent_mpi;
mod agent_out;
pub mod constants;
pub mod launch;
pub mod lines;
pub mod link;
pub mod preflight;
pub mod protocol;
pub mod relay;
pub mod ssh;
pub mod ssh_config;
pub mod tree;

pub use preflight::{LauncherKind, PreflightSettings};

/// Raises psyrun's soft limit on open files to the hard limit: each host's link holds a socket
/// and a wake-up pair, so the usual soft limit of 1024 would stop a launch at about 300 hosts.
pub fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `lim`, which is valid and writable.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 && lim.rlim_cur < lim.rlim_max
    {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads one valid rlimit; raising the soft limit up to the hard one is
        // always permitted. Failure leaves the old limit, which is only a smaller ceiling.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}
