//! The names at the bottom of the crate: the environment variables of the launch contract
//! (`PSY_*` and PyTorch's, see [`crate::contract`] for what each means) and the other launchers
//! psyne recognises by the variables they set. A leaf: it imports nothing of the crate, and
//! every layer above may name it.

use std::time::Duration;

/// `PSY_RANK`
pub const RANK: &str = "PSY_RANK";
/// `PSY_WORLD_SIZE`
pub const WORLD_SIZE: &str = "PSY_WORLD_SIZE";
/// `PSY_LOCAL_RANK`
pub const LOCAL_RANK: &str = "PSY_LOCAL_RANK";
/// `PSY_LOCAL_SIZE`
pub const LOCAL_SIZE: &str = "PSY_LOCAL_SIZE";
/// `PSY_NODE_RANK`
pub const NODE_RANK: &str = "PSY_NODE_RANK";
/// `PSY_STORE`
pub const STORE: &str = "PSY_STORE";
/// `PSY_JOB_ID`
pub const JOB_ID: &str = "PSY_JOB_ID";
/// `PSY_JOB_SECRET`
pub const JOB_SECRET: &str = "PSY_JOB_SECRET";
/// `PSY_TIMEOUT`
pub const TIMEOUT: &str = "PSY_TIMEOUT";
/// `PSY_ALGO`
pub const ALGO: &str = "PSY_ALGO";
/// `PSY_TUNING`
pub const TUNING: &str = "PSY_TUNING";
/// `PSY_ADDR`
pub const ADDR: &str = "PSY_ADDR";
/// `PSY_TRANSPORT`
pub const TRANSPORT: &str = "PSY_TRANSPORT";
/// `PSY_REDUCE_ORDER`
pub const REDUCE_ORDER: &str = "PSY_REDUCE_ORDER";
/// PyTorch's names, in the order rank, world size, local rank, local world size, master address,
/// master port.
pub const TORCH_NAMES: [&str; 6] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
];

/// `PSY_RESTART_COUNT`
pub const RESTART_COUNT: &str = "PSY_RESTART_COUNT";
/// `PSY_MAX_RESTARTS`
pub const MAX_RESTARTS: &str = "PSY_MAX_RESTARTS";
/// torchrun's names for the restart count and the most restarts, which psyrun also sets.
pub const TORCHELASTIC_NAMES: [&str; 2] =
    ["TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"];

/// The default deadline of every wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// `PSY_SPIN_US`
pub const SPIN_US: &str = "PSY_SPIN_US";

/// How long a waiting rank polls and yields before it blocks, when `PSY_SPIN_US` is unset.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// process it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForeignLauncher {
    /// Who it is, as its users know it (`Open MPI's mpirun`).
    pub name: &'static str,
    /// The variable that holds this process's rank.
    pub rank_var: &'static str,
    /// The variable that holds the number of processes started, if the launcher sets one.
    pub size_var: Option<&'static str>,
    /// True when `MPI_Init` in a process it started joins the whole world (an MPI launcher, or
    /// the PMI/PMIx an MPI library asks); false for a plain resource-manager launch.
    pub mpi: bool,
    /// Where to run psyrun instead, for the error's psyrun route (empty: in its place).
    pub psyrun_where: &'static str,
    /// How to start the job so that MPI can form its world, for the error's MPI route.
    pub mpi_how: &'static str,
}

/// Open MPI's `mpirun`.
pub const OPEN_MPI: ForeignLauncher = ForeignLauncher {
    name: "Open MPI's mpirun",
    rank_var: "OMPI_COMM_WORLD_RANK",
    size_var: Some("OMPI_COMM_WORLD_SIZE"),
    mpi: true,
    psyrun_where: "",
    mpi_how: "under the same mpirun",
};

/// A launcher that sets up PMI: MPICH's and Intel MPI's `mpiexec` (Hydra), `srun --mpi=pmi2`.
pub const PMI: ForeignLauncher = ForeignLauncher {
    name: "a PMI launcher (MPICH's or Intel MPI's mpiexec, or srun --mpi=pmi2)",
    rank_var: "PMI_RANK",
    size_var: Some("PMI_SIZE"),
    mpi: true,
    psyrun_where: "",
    mpi_how: "under the same launcher, with psyne built against that MPI",
};

/// MVAPICH's `mpirun_rsh`.
pub const MVAPICH: ForeignLauncher = ForeignLauncher {
    name: "MVAPICH's mpirun_rsh",
    rank_var: "MV2_COMM_WORLD_RANK",
    size_var: Some("MV2_COMM_WORLD_SIZE"),
    mpi: true,
    psyrun_where: "",
    mpi_how: "under the same launcher, with psyne built against MVAPICH",
};

/// A Slurm job step started by `srun` (not the batch script of `sbatch`, nor an `salloc` shell,
/// neither of which sets `SLURM_STEP_NUM_TASKS`).
pub const SLURM: ForeignLauncher = ForeignLauncher {
    name: "Slurm's srun",
    rank_var: "SLURM_PROCID",
    size_var: Some("SLURM_STEP_NUM_TASKS"),
    mpi: false,
    psyrun_where: " from the batch script or the salloc shell, not through srun",
    mpi_how: "with `srun --mpi=pmix`",
};

/// A PMIx launcher (`prterun`, `srun --mpi=pmix`); it announces no world size in the environment.
pub const PMIX: ForeignLauncher = ForeignLauncher {
    name: "a PMIx launcher (prterun, or srun --mpi=pmix)",
    rank_var: "PMIX_RANK",
    size_var: None,
    mpi: true,
    psyrun_where: "",
    mpi_how: "under the same launcher",
};

/// `PMIX_NAMESPACE`: set with `PMIX_RANK` by every PMIx server in the processes it starts.
pub const PMIX_NAMESPACE: &str = "PMIX_NAMESPACE";

/// `PMI_FD`: the socket a PMI-1 server hands each process it starts.
pub const PMI_FD: &str = "PMI_FD";

/// The other launchers psyne recognises, in the order they are tried: MPI launchers before
/// Slurm (an `mpirun` or `mpiexec` inside an allocation starts its ranks through `srun`, and
/// they inherit that step's variables), and PMIx, which says no world size, last.
pub const FOREIGN_LAUNCHERS: [ForeignLauncher; 5] = [OPEN_MPI, PMI, MVAPICH, SLURM, PMIX];
