//! Becoming a job: `psybench -n N ...` re-executes itself as N ranks under psyrun's library;
//! inside a job (psyrun, torchrun, or mpirun) each rank connects to the backends it was asked for.

use crate::backend::AnyComm;
use crate::model::Backend;
use psyne::{Error, Result};
use std::ffi::OsString;
use std::time::Duration;

/// True when this process is already a rank of a job: psyrun's or PyTorch's rank is set, or an
/// MPI launcher's ([`psyne::contract::FOREIGN_LAUNCHERS`]; not Slurm's, whose `SLURM_PROCID` is
/// also set in a batch script, where `-n` must still spawn).
pub fn inside_job() -> bool {
    let mpi = psyne::contract::FOREIGN_LAUNCHERS
        .into_iter()
        .filter(|l| l.mpi)
        .map(|l| l.rank_var);
    [psyne::contract::RANK, psyne::contract::TORCH_NAMES[0]]
        .into_iter()
        .chain(mpi)
        .any(|v| std::env::var_os(v).is_some())
}

/// Starts `ranks` copies of this executable with `args` (the command line without `-n`) under
/// psyrun's supervisor and returns the job's exit code.
pub fn spawn_ranks(ranks: usize, args: Vec<String>) -> Result<u8> {
    let program = std::env::current_exe()
        .map_err(|e| Error::io("finding the psybench executable to start as ranks", e))?;
    let options = psyrun::Options {
        ranks,
        program: program.into_os_string(),
        args: args.into_iter().map(OsString::from).collect(),
        tag_output: false,
        output_dir: None,
        grace: Duration::from_secs(5),
        timeout: None,
    };
    match psyrun::run(&options) {
        Ok(outcome) => Ok(outcome.exit_code()),
        Err(e) => Err(Error::new(
            psyne::ErrorKind::Bootstrap,
            format!("starting {ranks} ranks: {e}"),
        )),
    }
}

/// The backends of a run, in the order asked for. Dereferences to them. When MPI was
/// initialized (to run the MPI backend, or to form the native group under an MPI launcher), the
/// native groups are dropped first and MPI last, since dropping the MPI communicator finalizes
/// MPI.
pub struct Backends {
    comms: Vec<AnyComm>,
    /// MPI's environment when no [`AnyComm::Mpi`] holds it: it bootstrapped the native group.
    #[cfg(feature = "mpi")]
    _mpi: Option<psyne::mpi::MpiComm>,
}

impl std::ops::Deref for Backends {
    type Target = [AnyComm];
    fn deref(&self) -> &[AnyComm] {
        &self.comms
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        // Native groups before the MPI communicator (in `comms` or in `_mpi`), whatever the order
        // they were asked for in.
        self.comms.retain(|c| c.native().is_none());
    }
}

impl Backends {
    fn new(comms: Vec<AnyComm>) -> Backends {
        Backends {
            comms,
            #[cfg(feature = "mpi")]
            _mpi: None,
        }
    }
}

/// Connects to every backend in `wanted`, in that order, the native one over `transport`
/// (`auto`, `tcp`, `shm`: it becomes `PSY_TRANSPORT` unless that is already set).
///
/// MPI (feature `mpi`) must be started by an MPI launcher; with it, the native group bootstraps
/// over MPI so both run in one job. The native backend alone under a PMIx launcher (`mpirun -n 2
/// psybench ...`, `srun --mpi=pmix`) forms its group through PMIx ([`psyne::init`]); under an
/// MPI launcher without PMIx it bootstraps over MPI when psybench has the `mpi` feature, and
/// without it that is an error saying how to run psybench instead.
pub fn connect(wanted: &[Backend], transport: &str) -> Result<Backends> {
    if transport != "auto" && std::env::var_os(psyne::contract::TRANSPORT).is_none() {
        // Set before any group (or any thread reading the environment) exists.
        std::env::set_var(psyne::contract::TRANSPORT, transport);
    }
    let foreign = psyne::contract::foreign_launch();
    #[cfg(feature = "mpi")]
    if wanted.contains(&Backend::Mpi)
        || foreign
            .as_ref()
            .is_some_and(psyne::contract::ForeignLaunch::forms_only_over_mpi)
    {
        return connect_over_mpi(wanted);
    }
    if wanted.contains(&Backend::Mpi) {
        return Err(Error::config(
            "--backend mpi needs psybench built with the MPI backend: cargo build --release -p psybench --features mpi (scripts/setup.sh installs Open MPI), then run it under mpirun",
        ));
    }
    if let Some(f) = foreign.filter(|f| f.service.is_none()) {
        return Err(foreign_error(&f));
    }
    Ok(Backends::new(vec![AnyComm::Native(psyne::init()?)]))
}

/// psyne's error for a launch it cannot join, with what to do for psybench.
fn foreign_error(f: &psyne::contract::ForeignLaunch) -> Error {
    let e = f.error();
    let n = f.ranks_hint();
    let build = if cfg!(feature = "mpi") {
        format!(
            "or start it {}: this psybench has the MPI backend and then forms its group over MPI",
            f.launcher.mpi_how
        )
    } else {
        "or build psybench with the MPI backend (cargo build --release -p psybench --features \
         mpi) and run it under mpirun as now"
            .to_string()
    };
    Error::new(
        e.kind(),
        format!(
            "{e}.\nFor psybench: `psybench -n {n} ...` starts the ranks itself, or `psyrun -n {n} \
             psybench ...`{}; {build}",
            f.launcher.psyrun_where
        ),
    )
}

/// The backends of `wanted` in an MPI job: MPI initialized once, the native group (if wanted)
/// bootstrapped over it.
#[cfg(feature = "mpi")]
fn connect_over_mpi(wanted: &[Backend]) -> Result<Backends> {
    // MPI is initialized as a plain MPI program is (MPI_Init: one thread), which Open MPI makes
    // faster per call (0.50 against 0.70 µs at 8 B, results/mpi-settings/), also beside a native
    // group: psybench makes only blocking calls, and a group starts its one thread at its first
    // non-blocking call (src/group/work.rs), so the process stays single-threaded.
    let mpi = psyne::mpi::init_with(psyne::mpi::Threading::Single)?;
    let native = if wanted.contains(&Backend::Native) {
        Some(psyne::mpi::native_group(&mpi, psyne::contract::timeout()?)?)
    } else {
        None
    };
    let mut mpi = Some(mpi);
    let mut comms = Vec::new();
    for b in wanted {
        match b {
            Backend::Native => comms.extend(native.clone().map(AnyComm::Native)),
            Backend::Mpi => comms.extend(mpi.take().map(AnyComm::Mpi)),
        }
    }
    drop(native);
    Ok(Backends { comms, _mpi: mpi })
}
