//! The "simple" PMI wire protocols, PMI-1 and PMI-2, served to MPICH and Intel MPI ranks the
//! way MPICH's Hydra proxy serves them: each rank inherits one end of a socket pair as `PMI_FD`
//! (with `PMI_RANK`, `PMI_SIZE`, `PMI_JOBID`, `MPI_LOCALNRANKS`, `MPI_LOCALRANKID`,
//! `PMI_HOSTNAME`: what Hydra's proxy sets, `PMI_JOBID` for Slurm's PMI-2 client) and speaks
//! to the host's [`SimpleService`] over it.
//!
//! A connection starts in PMI-1 text lines; a PMI-2 client (MPICH with
//! `MPIR_CVAR_PMI_VERSION=2`, Intel MPI with `I_MPI_PMI=pmi2`) sends `cmd=init pmi_version=2`,
//! is answered in PMI-1, and then sends length-prefixed PMI-2 messages ([`wire`] has both
//! formats; each reply uses its request's):
//!
//! | PMI-1 request | PMI-2 request | reply |
//! |---|---|---|
//! | `cmd=init pmi_version=1 pmi_subversion=1` | (the same line, `pmi_version=2`) | `cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1` (or `2`, `0`) |
//! | | `cmd=fullinit;pmirank=R;` | `cmd=fullinit-response;rc=0;rank=R;size=N;appnum=A;...` |
//! | `cmd=get_maxes` | | `cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024` |
//! | `cmd=get_appnum`, `cmd=get_universe_size` | | `cmd=appnum rc=0 appnum=A`, `cmd=universe_size rc=0 size=N` |
//! | `cmd=get_my_kvsname` | `cmd=job-getid;` | `kvsname=` / `jobid=` the job id |
//! | `cmd=put kvsname=J key=K value=V` | `cmd=kvs-put;key=K;value=V;` | `rc=0` |
//! | `cmd=barrier_in` | `cmd=kvs-fence;` | `cmd=barrier_out rc=0` / `cmd=kvs-fence-response;rc=0;` once every rank of the job is in |
//! | `cmd=get kvsname=J key=K` | `cmd=kvs-get;key=K;` | `value=V` (PMI-1 `rc=-1` if absent; PMI-2 `found=FALSE`) |
//! | `cmd=get key=PMI_process_mapping` | `cmd=info-getjobattr;key=PMI_process_mapping;` | `(vector,(0,NODES,PPN))` ([`mapping`]) |
//! | | `cmd=info-putnodeattr;key=K;value=V;`, `cmd=info-getnodeattr;key=K;wait=TRUE;` | host-local attributes; `wait` answers when a rank of the host puts K |
//! | `cmd=finalize` | `cmd=finalize;` | `cmd=finalize_ack rc=0` / `cmd=finalize-response;rc=0;` |
//! | `cmd=abort exitcode=C message=M` | `cmd=abort;exitcode=C;message=M;` | none: [`Report::Abort`](crate::pmi::Report::Abort) |
//!
//! Anything else is answered with `rc=-1` and a message, never silence (a rank waits for every
//! reply). PMI-1.2 group barriers are not offered (the reply says version 1.1, so MPICH does not
//! ask), nor spawn and name publishing.
//!
//! One thread per host polls every rank's socket (`server.rs`); reads are bounded (a message
//! over 16 KiB, or bytes that are neither format, close that rank's connection, with the reason
//! kept in [`SimpleService::problems`]). The key-value space is job-wide: a barrier hands this
//! host's new pairs to the job's [`Exchange`] on a thread of its own (`barrier.rs`).
//!
//! What the MPI libraries ask (seen with [`SimpleService::start_traced`], `tests/pmi_simple.rs`):
//! MPICH 4.0.2, MPICH 5.0.2 and Intel MPI 2021.19 in PMI-1 send `init`, `get_maxes`,
//! `get_appnum`, `get_my_kvsname`, `get` (`PMI_process_mapping`; MPICH 5 also
//! `PMI_hwloc_xmlfile` and `PMI_mpi_memory_alloc_kinds`, optional, answered not found), `put`,
//! `barrier_in`, `finalize`, `abort`. Intel MPI in PMI-2 (through Slurm's `libpmi2.so.0`, named by
//! `I_MPI_PMI_LIBRARY`) sends `init pmi_version=2`, `fullinit`, `job-getid`, `info-getjobattr`,
//! `info-putnodeattr`, `info-getnodeattr` with `wait=TRUE`, `kvs-fence`, `finalize`, `abort`.
//!
//! What the launcher must do for its ranks:
//! - call [`HostService::rank_access`] before starting the rank, keep [`RankAccess::inherit`] open
//!   in the rank under the same descriptor number (`PMI_FD` names it), clearing close-on-exec in
//!   the child only (other ranks started meanwhile must not inherit it), and close its own copy
//!   once the rank has started: the service learns that a rank died from its socket closing;
//! - give every job, and every restart of one, its own [`JobMap::job_id`] (the kvsname: MPICH
//!   names shared memory after it);
//! - when every rank of the host has ended, remove [`SimpleService::shm_segments`] and
//!   [`leftovers::mpich_shm_files`] (left by ranks killed early);
//! - end the job when a rank ends without [`Report::Finalized`](crate::pmi::Report::Finalized)
//!   (nor `Abort`): the service fails a barrier such a rank can no longer join and hangs up on
//!   the ranks waiting in it, which ends MPICH 4.0.2 ranks, but MPICH 5 and Intel MPI ranks may
//!   by then be waiting for it in shared memory, where no PMI reply reaches them;
//! - make its [`Reporter`] return promptly (it runs on the service's thread).

mod barrier;
mod commands;
mod conn;
mod kvs;
pub mod leftovers;
mod mapping;
mod round;
mod server;
mod wire;

use super::{Exchange, HostService, JobMap, RankAccess, Reporter};
pub use server::Tracer;
use server::{Control, Event, Server, Waker};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The PMI-1/PMI-2 service of one host of a job: a thread answering that host's ranks.
pub struct SimpleService {
    map: Arc<JobMap>,
    node: usize,
    control: Arc<Control>,
    waker: Waker,
    thread: Option<JoinHandle<()>>,
}

impl SimpleService {
    /// Starts serving host `node` of `map`; `timeout` bounds every wait (a barrier whose exchange
    /// does not finish in time answers an error rc, never hangs).
    pub fn start(
        map: Arc<JobMap>,
        node: usize,
        exchange: Arc<dyn Exchange>,
        report: Reporter,
        timeout: Duration,
    ) -> std::io::Result<SimpleService> {
        SimpleService::start_traced(map, node, exchange, report, timeout, None)
    }

    /// [`SimpleService::start`], also handing `trace` every message a rank sends and every
    /// reply, as text (for debugging a PMI client, and for the tests that record what each MPI
    /// library asks).
    pub fn start_traced(
        map: Arc<JobMap>,
        node: usize,
        exchange: Arc<dyn Exchange>,
        report: Reporter,
        timeout: Duration,
        trace: Option<Tracer>,
    ) -> std::io::Result<SimpleService> {
        let invalid = |text: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, text);
        if node >= map.hosts.len() {
            let hosts = map.hosts.len();
            return Err(invalid(format!(
                "PMI service for node {node} of a job on {hosts} hosts"
            )));
        }
        if mapping::process_mapping(&map).is_none() {
            return Err(invalid(format!(
                "job {}: the hosts' ranks are not 0..{} each once",
                map.job_id, map.world_size
            )));
        }
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        let (tx, rx) = std::sync::mpsc::channel();
        let waker = Waker::new(tx, wake_tx)?;
        let control = Arc::new(Control::default());
        let server = Server::new(
            map.clone(),
            node,
            exchange,
            report,
            timeout,
            control.clone(),
            waker.clone(),
            rx,
            wake_rx,
        )?
        .with_trace(trace);
        let thread = std::thread::Builder::new()
            .name(format!("pmi-simple-{node}"))
            .spawn(move || server.run())?;
        Ok(SimpleService {
            map,
            node,
            control,
            waker,
            thread: Some(thread),
        })
    }

    /// What went wrong so far, in order: connections dropped (a rank that closed `PMI_FD`
    /// before finalize, sent garbage or an oversized message) and barriers that failed.
    pub fn problems(&self) -> Vec<String> {
        self.control
            .problems
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    /// Shared-memory files this host's ranks announced to each other through PMI (MPICH's and
    /// Intel MPI's node segments). Ranks remove them once all have attached; ranks killed
    /// earlier leave them. After every rank of the host has ended, the launcher removes those
    /// still there, and [`leftovers::mpich_shm_files`] too.
    pub fn shm_segments(&self) -> Vec<std::path::PathBuf> {
        self.control
            .segments
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// The environment of `rank` (local rank `local` of this host), its socket being `fd`.
    fn env(&self, rank: usize, local: usize, fd: i32) -> Vec<(OsString, OsString)> {
        let host = &self.map.hosts[self.node];
        [
            ("PMI_FD", fd.to_string()),
            ("PMI_RANK", rank.to_string()),
            ("PMI_SIZE", self.map.world_size.to_string()),
            ("PMI_JOBID", self.map.job_id.clone()),
            ("MPI_LOCALNRANKS", host.ranks.len().to_string()),
            ("MPI_LOCALRANKID", local.to_string()),
            ("PMI_HOSTNAME", host.name.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }
}

impl HostService for SimpleService {
    /// A socket pair (both ends close-on-exec: psyrun's child clears the flag on its end, the
    /// [`RankAccess::inherit`], and keeps it under the same number, which `PMI_FD` names).
    fn rank_access(&mut self, rank: usize) -> Result<RankAccess, String> {
        let local = match self.map.locate(rank) {
            Some((node, local)) if node == self.node => local,
            Some((node, _)) => {
                return Err(format!(
                    "rank {rank} runs on node {node}, not on this PMI service's node {}",
                    self.node
                ))
            }
            None => return Err(format!("rank {rank} is not in job {}", self.map.job_id)),
        };
        // std's pair is socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC).
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| format!("a PMI socket pair for rank {rank}: {e}"))?;
        if !self.waker.send(Event::Rank(rank, ours)) {
            return Err(format!("the PMI service of node {} has stopped", self.node));
        }
        let env = self.env(rank, local, theirs.as_raw_fd());
        Ok(RankAccess {
            env,
            inherit: Some(OwnedFd::from(theirs)),
        })
    }

    fn leftovers(&self) -> Vec<std::path::PathBuf> {
        let mut files = self.shm_segments();
        files.extend(leftovers::mpich_shm_files(&self.map.job_id, self.node));
        files
    }
}

impl Drop for SimpleService {
    /// Stops the thread and closes every rank's socket. A barrier's exchange still running in
    /// [`Exchange::all_gather`] is not waited for (its own timeout ends it; its result is then
    /// dropped).
    fn drop(&mut self) {
        self.control.stop.store(true, Ordering::SeqCst);
        self.waker.wake_up();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests;
