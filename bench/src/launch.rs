//! Becoming a job: `psybench -n N ...` re-executes itself as N ranks under psyrun's library;
//! inside a job (psyrun, torchrun, or mpirun) each rank connects to the backends it was asked for.

use crate::backend::AnyComm;
use crate::model::Backend;
use psyne::{Error, Result};
use std::ffi::OsString;
use std::time::Duration;

/// True when this process is already a rank of a job (psyrun, torchrun-style or mpirun).
pub fn inside_job() -> bool {
    [
        "PSY_RANK",
        "RANK",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
    ]
    .iter()
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

/// Connects to every backend in `wanted`, in that order, the native one over `transport`
/// (`auto`, `tcp`, `shm`: it becomes `PSY_TRANSPORT` unless that is already set). MPI (feature
/// `mpi`) must be started by mpirun; with it, the native group bootstraps over MPI so both run in
/// one job.
pub fn connect(wanted: &[Backend], transport: &str) -> Result<Vec<AnyComm>> {
    if transport != "auto" && std::env::var_os(psyne::contract::TRANSPORT).is_none() {
        // Set before any group (or any thread reading the environment) exists.
        std::env::set_var(psyne::contract::TRANSPORT, transport);
    }
    #[cfg(feature = "mpi")]
    if wanted.contains(&Backend::Mpi) {
        // MPI alone is initialized as a plain MPI program is (MPI_Init: one thread), which Open
        // MPI makes faster per call; beside a native group, whose threads share the process,
        // it needs MPI_THREAD_FUNNELED.
        let threading = if wanted.contains(&Backend::Native) {
            psyne::mpi::Threading::Funneled
        } else {
            psyne::mpi::Threading::Single
        };
        let mpi = psyne::mpi::init_with(threading)?;
        let mut out = Vec::new();
        let native = if wanted.contains(&Backend::Native) {
            Some(psyne::mpi::native_group(&mpi, psyne::contract::timeout()?)?)
        } else {
            None
        };
        let mut mpi = Some(mpi);
        for b in wanted {
            match b {
                Backend::Native => out.extend(native.clone().map(AnyComm::Native)),
                Backend::Mpi => out.extend(mpi.take().map(AnyComm::Mpi)),
            }
        }
        return Ok(out);
    }
    if wanted.contains(&Backend::Mpi) {
        return Err(Error::config(
            "--backend mpi needs psybench built with the MPI backend: cargo build --release -p psybench --features mpi (scripts/setup.sh installs Open MPI), then run it under mpirun",
        ));
    }
    Ok(vec![AnyComm::Native(psyne::init()?)])
}
