//! PMIx for Open MPI programs: a PMIx server hosted in psyrun (and, on several hosts, in each
//! host's agent), made with `libpmix.so.2`'s server API loaded at run time.
//!
//! | file | what |
//! |---|---|
//! | [`ffi`] | the server functions and types (the client's are psyne's) |
//! | [`info`] | the job's keys as plain data, then as libpmix's `pmix_info_t` arrays |
//! | [`upcalls`] | the server module: connected, finalized, abort, fence, direct modex |
//! | [`fence`] | a fence across hosts through the job's [`Exchange`] |
//! | [`env`] | a rank's environment |
//!
//! # Lifecycle
//!
//! [`PmixService::start`] loads libpmix, starts the server with its rendezvous files in a
//! private directory inside the job's tmpdir and registers the job's namespace (named by the
//! job id). Then, for each of this host's ranks and before that rank starts,
//! [`HostService::rank_access`] registers the client (psyrun's uid and gid) and returns its
//! environment. Dropping the service deregisters the namespace, finalizes the server and
//! removes its directory. libpmix hosts one server per process: a second `start` while one
//! runs is refused.
//!
//! # What a rank gets
//!
//! `PMIx_server_setup_fork`'s variables (`PMIX_NAMESPACE`, `PMIX_RANK`, `PMIX_SERVER_URI*`,
//! `PMIX_SECURITY_MODE`, ...: how the rank's libpmix reaches this server) and three Open MPI
//! settings ([`env::OMPI_ENV`]). Open MPI 4.1 (Debian 12: 4.1.4, libpmix 4.2.2) decides in its
//! `schizo` framework who launched it before it looks at PMIx: `schizo_ompi`/`schizo_orte`
//! declare a process without mpirun's daemon URI a singleton and push `OMPI_MCA_ess=singleton`
//! (its own world of one, even with a PMIx server there), unless `schizo_slurm`, `schizo_flux`
//! (`FLUX_JOB_ID`) or `schizo_jsm` recognise their launcher and push `OMPI_MCA_ess=pmi`. Setting
//! `OMPI_MCA_ess=pmi` ourselves has the same effect without pretending to be Flux or Slurm (whose
//! variables other programs read, and which would make `mca_pmix_flux` load Flux's libpmi):
//! Open MPI's `ess/pmi` then takes its rank, size and peers from this server. As `schizo_flux`
//! does for a direct launch, `OMPI_MCA_hwloc_base_binding_policy=none` and
//! `OMPI_MCA_orte_externally_bound=1` keep Open MPI from rebinding ranks psyrun placed.
//! Open MPI 5 (PRRTE's `schizo` gone from the application side) needs only the PMIx variables.
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

pub mod env;
pub mod fence;
pub mod ffi;
pub mod info;
pub mod upcalls;

use super::{Exchange, HostService, JobMap, RankAccess, Reporter};
use ffi::{Proc, ServerApi, ServerModule};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use upcalls::Shared;

/// The PMIx server of one host of a job; stopped on drop.
pub struct PmixService {
    api: ServerApi,
    map: Arc<JobMap>,
    node: usize,
    nspace: String,
    dir: PathBuf,
    shared: Arc<Shared>,
    reporter: Option<JoinHandle<()>>,
    /// Kept for the server's life (libpmix copies it, but keeping it costs nothing).
    _module: Box<ServerModule>,
    initialized: bool,
    registered: bool,
}

impl PmixService {
    /// Loads libpmix (absent: an error saying what to install), starts the server (its
    /// rendezvous files under a private directory inside `map.tmpdir`, removed on drop) and
    /// registers the job's namespace with host `node`'s ranks as local. `report` gets what the
    /// ranks do; `timeout` bounds each fence's wait for the other hosts.
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
        let hostname = host.name.clone();
        let nlocal = host.ranks.len();
        let nspace = map.job_id.clone();
        ffi::fixed_nspace(&nspace)?;
        let entries = info::job_info(&map, node)?;
        let api = ServerApi::load()?;
        let dir = private_dir(&map, node)?;
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
        if let Err(e) = upcalls::install(Arc::clone(&shared)) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        let mut service = PmixService {
            api,
            map,
            node,
            nspace,
            dir,
            shared: Arc::clone(&shared),
            reporter: None,
            _module: Box::new(upcalls::module()),
            initialized: false,
            registered: false,
        };
        service.reporter = Some(
            std::thread::Builder::new()
                .name("psyrun-pmix-reports".into())
                .spawn(move || upcalls::reporter_loop(rx, report, shared))
                .map_err(|e| format!("PMIx: cannot start the reporter thread: {e}"))?,
        );
        service.init(&hostname)?;
        service.register(nlocal, &entries)?;
        Ok(service)
    }

    /// The job's PMIx namespace.
    pub fn namespace(&self) -> &str {
        &self.nspace
    }

    /// Where the server keeps its rendezvous files (removed on drop).
    pub fn directory(&self) -> &std::path::Path {
        &self.dir
    }

    fn init(&mut self, hostname: &str) -> Result<(), String> {
        let mut options = info::InfoArray::new(&self.api, &info::server_info(&self.dir, hostname))?;
        let module: *mut ServerModule = &mut *self._module;
        // SAFETY: `module` points to a complete module of `extern "C"` upcalls that live for the
        // program; `options` is a valid array of `len()` infos that outlives the call.
        let status = unsafe { (self.api.init)(module, options.as_mut_ptr(), options.len()) };
        if status != ffi::SUCCESS {
            return Err(format!("PMIx_server_init: {}", self.api.describe(status)));
        }
        self.initialized = true;
        Ok(())
    }

    fn register(&mut self, nlocal: usize, entries: &[info::Entry]) -> Result<(), String> {
        let mut infos = info::InfoArray::new(&self.api, entries)?;
        let ns = info::cstring(&self.nspace)?;
        let nlocal = i32::try_from(nlocal).map_err(|_| "PMIx: too many local ranks".to_string())?;
        // SAFETY: the server is initialised; `ns` is a NUL-terminated namespace shorter than
        // PMIX_MAX_NSLEN (checked in start); `infos` is valid for the call; a NULL callback
        // makes the call blocking, so nothing outlives it.
        let status = unsafe {
            (self.api.register_nspace)(
                ns.as_ptr(),
                nlocal,
                infos.as_mut_ptr(),
                infos.len(),
                None,
                std::ptr::null_mut(),
            )
        };
        done(&self.api, "PMIx_server_register_nspace", status)?;
        self.registered = true;
        Ok(())
    }

    fn proc_of(&self, rank: usize) -> Result<Proc, String> {
        Ok(Proc {
            nspace: ffi::fixed_nspace(&self.nspace)?,
            rank: u32::try_from(rank).map_err(|_| format!("rank {rank} is too large for PMIx"))?,
        })
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

/// A new directory, private to this service, inside the job's tmpdir.
fn private_dir(map: &JobMap, node: usize) -> Result<PathBuf, String> {
    std::fs::create_dir_all(&map.tmpdir)
        .map_err(|e| format!("PMIx: cannot create {}: {e}", map.tmpdir.display()))?;
    let dir = map
        .tmpdir
        .join(format!("pmix-{}-{node}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("PMIx: cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

impl HostService for PmixService {
    /// Registers `rank` with the server (psyrun's uid and gid may connect as it) and returns
    /// its environment: `PMIx_server_setup_fork`'s and Open MPI's settings ([`env`]).
    fn rank_access(&mut self, rank: usize) -> Result<crate::pmi::RankAccess, String> {
        match self.map.locate(rank) {
            Some((node, _)) if node == self.node => {}
            _ => return Err(format!("PMIx: rank {rank} is not on host {}", self.node)),
        }
        let proc_ = self.proc_of(rank)?;
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // SAFETY: the server runs (started in `start`); `proc_` is a valid proc; a NULL callback
        // makes the call blocking; no server object is kept.
        let status = unsafe {
            (self.api.register_client)(
                &proc_,
                uid,
                gid,
                std::ptr::null_mut(),
                None,
                std::ptr::null_mut(),
            )
        };
        done(&self.api, "PMIx_server_register_client", status)?;
        let mut environ: *mut *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `proc_` is valid; libpmix appends to the (initially NULL) malloc'd array.
        let status = unsafe { (self.api.setup_fork)(&proc_, &mut environ) };
        // SAFETY: `environ` is NULL or libpmix's malloc'd array, taken over here.
        let mut vars = unsafe { env::take_environ(environ) };
        done(&self.api, "PMIx_server_setup_fork", status)?;
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
        if self.registered {
            if let Ok(ns) = info::cstring(&self.nspace) {
                // SAFETY: the server runs; `ns` is the registered namespace; a NULL callback
                // makes the call blocking.
                unsafe { (self.api.deregister_nspace)(ns.as_ptr(), None, std::ptr::null_mut()) };
            }
        }
        if self.initialized {
            // SAFETY: the server was initialised by this service and is finalized once; no
            // upcall runs after this returns.
            let status = unsafe { (self.api.finalize)() };
            if status != ffi::SUCCESS {
                eprintln!(
                    "psyrun: PMIx_server_finalize: {}",
                    self.api.describe(status)
                );
            }
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
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("psyrun: cannot remove {}: {e}", self.dir.display());
        }
    }
}
