//! Variables an outer launcher set for psyrun itself, which must not reach psyrun's ranks.
//!
//! psyrun may itself run under a launcher: inside `srun`, `mpirun`, `mpiexec` or `flux run`
//! (a job step that starts psyrun, a test harness under mpirun). Such a launcher tells psyrun
//! how to reach *its* process manager: a PMI socket (`PMI_FD`), a PMIx server (`PMIX_*`), Open
//! MPI's or Slurm's identity of a step (`OMPI_COMM_WORLD_*`, `OMPI_MCA_orte_*`,
//! `SLURM_STEP_*`). Passed on, an MPI library in a rank would join the outer job (or fail to),
//! not psyrun's. So psyrun's ranks never inherit them; what psyrun serves its own ranks it sets
//! itself, and `-x` may still set any of them on purpose.
//!
//! Settings users give their MPI through the environment (`OMPI_MCA_btl`, `MPIR_CVAR_*`,
//! `I_MPI_*`, `FI_*`, `UCX_*`) are not launcher state and pass through as always.

use crate::remote::constants::SLURM_STEP_VARS;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// Names that an outer launcher sets, by exact name (besides Slurm's step variables,
/// [`SLURM_STEP_VARS`]).
const NAMES: &[&str] = &[
    "MPI_LOCALNRANKS",
    "MPI_LOCALRANKID",
    "OMPI_UNIVERSE_SIZE",
    "OMPI_FIRST_RANKS",
    "OMPI_APP_CTX_NUM_PROCS",
    "OMPI_NUM_APP_CTX",
    "OMPI_FILE_LOCATION",
    "OMPI_ARGV",
    "OMPI_COMMAND",
    "OMPI_MCA_initial_wdir",
    "OMPI_MCA_ess",
    "OMPI_MCA_pmix",
    "OMPI_MCA_orte_launch",
    "FLUX_JOB_ID",
    "FLUX_URI",
];

/// Names that an outer launcher sets, by prefix.
const PREFIXES: &[&str] = &[
    "PMI_",
    "PMIX_",
    "PMI2_",
    "OMPI_COMM_WORLD_",
    "OMPI_MCA_orte_",
    "OMPI_MCA_ess_base_",
    "OMPI_MCA_pmix_",
    "OMPI_MCA_schizo_",
    "PRTE_",
    "SLURM_STEP_",
    "HYDRA_",
    "HYDI_",
];

/// Whether `name` is a variable an outer launcher set for psyrun's own process (see the
/// module docs), which psyrun's ranks do not inherit.
pub fn outer_launcher_variable(name: &OsStr) -> bool {
    let name = name.as_bytes();
    NAMES
        .iter()
        .chain(SLURM_STEP_VARS)
        .any(|n| n.as_bytes() == name)
        || PREFIXES.iter().any(|p| name.starts_with(p.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_state_is_dropped_and_user_settings_pass() {
        for dropped in [
            "PMI_FD",
            "PMI_RANK",
            "PMIX_NAMESPACE",
            "PMIX_SERVER_URI41",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_MCA_orte_hnp_uri",
            "OMPI_MCA_ess",
            "SLURM_STEP_NUM_TASKS",
            "SLURM_PROCID",
            "MPI_LOCALRANKID",
        ] {
            assert!(outer_launcher_variable(OsStr::new(dropped)), "{dropped}");
        }
        for kept in [
            "OMPI_MCA_btl",
            "OMPI_MCA_op",
            "MPIR_CVAR_PMI_VERSION",
            "I_MPI_PMI",
            "SLURM_JOB_ID",
            "PSY_STORE",
            "PATH",
            "PMIXX",
        ] {
            assert!(!outer_launcher_variable(OsStr::new(kept)), "{kept}");
        }
    }
}
