//! The contract between a launcher and a rank: the environment variables psyrun sets for every
//! rank and that [`crate::init()`] reads. This module is the single place that names them.
//!
//! | variable | meaning |
//! |---|---|
//! | `PSY_RANK` | this rank, `0..PSY_WORLD_SIZE` |
//! | `PSY_WORLD_SIZE` | number of ranks in the job |
//! | `PSY_LOCAL_RANK` | this rank's index among the ranks on its host |
//! | `PSY_LOCAL_SIZE` | number of ranks on this host |
//! | `PSY_NODE_RANK` | index of this host in the job |
//! | `PSY_STORE` | `host:port` of the job's key-value store (served by psyrun) |
//! | `PSY_JOB_ID` | a job identifier, unique per launch (names keys, logs, shared memory) |
//! | `PSY_JOB_SECRET` | hex secret every connection proves knowledge of; never on a command line |
//! | `PSY_RESTART_COUNT` | which attempt of the job this is: 0 first, then 1, 2, ... after each restart (`psyrun --max-restarts`) |
//! | `PSY_MAX_RESTARTS` | how many restarts psyrun may still make in all (`--max-restarts`, default 0) |
//! | `PSY_TIMEOUT` | seconds any single wait may last before it fails (default 300) |
//! | `PSY_ALGO` | algorithm overrides, e.g. `allreduce:ring,broadcast:pipeline` (see [`crate::tuning`]) |
//! | `PSY_TUNING` | the tuning file `psybench tune` wrote (default: `~/.config/psyne/tuning`, then `/etc/psyne/tuning`, if present; `off` for none; see [`crate::tuning::rules`]) |
//! | `PSY_ADDR` | address this rank's listener advertises (default: the one that reaches the store) |
//! | `PSY_TRANSPORT` | `auto` (shared memory on one host, RDMA across where present, else TCP), `tcp`, `shm`, or `rdma` |
//! | `PSY_REDUCE_ORDER` | `fast` (default) or `canonical`: every element of a reduction is the rank-order fold `((x0 ⊕ x1) ⊕ x2) ⊕ …`, the same bits whatever the size, algorithm, tuning file or transport (see [`crate::ReduceOrder`]) |
//! | `PSY_RDMA_DEVICE`, `PSY_RDMA_PORT`, ... | the RDMA adapter and port (see `crate::transport::rdma::config`) |
//! | `PSY_SPIN_US` | microseconds a waiting rank polls and yields before it blocks (default 50; 0 blocks at once) |
//! | `PSY_SHM_RING_BYTES` | bytes of each shared-memory ring (default: by the number of ranks on the host) |
//! | `PSY_SHM_CMA`, `PSY_SHM_CMA_MIN` | whether, and from which message size, shared memory copies large messages straight between processes (`process_vm_readv`); unset: by the call's traffic (`crate::transport::shm::cma::pull_window`), where a pull costs at most 1.5 copies on this machine |
//!
//! The tunables among them (`PSY_TIMEOUT`, `PSY_SPIN_US`, `PSY_ALGO`, `PSY_TUNING`, `PSY_TRANSPORT`, `PSY_REDUCE_ORDER` and the
//! transports' own) are read once, into [`crate::Tunables`], when a group forms; a program may build
//! [`crate::Tunables`] itself instead and pass it in [`crate::GroupOptions`].
//!
//! psyrun also sets the names PyTorch's `env://` rendezvous expects (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, and torchrun's
//! `TORCHELASTIC_RESTART_COUNT` and `TORCHELASTIC_MAX_RESTARTS`) so torch programs run under psyrun
//! unchanged. With only those set (torchrun, srun wrappers), rank 0 serves the store at
//! `MASTER_ADDR:MASTER_PORT`. With nothing set, a program is a world of one.
//!
//! Other launchers are recognised by the variables they set in every process they start
//! ([`FOREIGN_LAUNCHERS`], tried in this order, after `PSY_STORE` and then PyTorch's names):
//!
//! | launcher | rank | world size |
//! |---|---|---|
//! | Open MPI's `mpirun` | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` |
//! | MPICH's and Intel MPI's `mpiexec` (Hydra), `srun --mpi=pmi2` | `PMI_RANK` | `PMI_SIZE` |
//! | MVAPICH's `mpirun_rsh` | `MV2_COMM_WORLD_RANK` | `MV2_COMM_WORLD_SIZE` |
//! | Slurm's `srun` (a job step) | `SLURM_PROCID` | `SLURM_STEP_NUM_TASKS` |
//! | a PMIx launcher (`prterun`, `srun --mpi=pmix`) | `PMIX_RANK` | none |
//!
//! A world of more than one from such a launcher is [`Launch::Foreign`]. Where the launcher
//! offers a process-management [`Service`], [`crate::init()`] forms the group through it (rank 0
//! serves the store and tells the others where, and the job secret, through the service): PMIx
//! (`PMIX_NAMESPACE` and `PMIX_RANK` set: Open MPI's `mpirun`, `prterun`, `srun --mpi=pmix`;
//! `libpmix.so.2` is loaded at run time) or PMI-1 over `PMI_FD` (MPICH's Hydra `mpiexec`, `srun
//! --mpi=pmi2`). Otherwise, or where the PMIx library cannot be loaded, psyne has no way to
//! reach the other ranks, and
//! [`crate::init()`] refuses with an error naming the launcher and the fixes (run under psyrun,
//! set PyTorch's names, or bootstrap over MPI with the `mpi` feature), instead of every rank
//! silently becoming a world of one. A world of one from it is [`Launch::Alone`]. Slurm sets `SLURM_PROCID` but not `SLURM_STEP_NUM_TASKS` in a batch script,
//! and neither in an `salloc` shell, so a single process there stays a world of one.

//!
//! This module is what a user and a launcher need of the contract: the names, what this process's
//! launch says ([`detect`]), and the settings read from it. The names themselves live in the
//! crate's bottom layer (`names`), how they are read one above (`launch`).

pub use crate::launch::{
    announced_world_size_with, detect, foreign_launch, restart_count, timeout, ForeignLaunch,
    Launch, RankEnv, Service,
};
pub use crate::names::{
    ForeignLauncher, ADDR, ALGO, DEFAULT_SPIN, DEFAULT_TIMEOUT, FOREIGN_LAUNCHERS, JOB_ID,
    JOB_SECRET, LOCAL_RANK, LOCAL_SIZE, MAX_RESTARTS, NODE_RANK, RANK, RESTART_COUNT, SPIN_US,
    STORE, TIMEOUT, TORCHELASTIC_NAMES, TORCH_NAMES, TRANSPORT, TUNING, WORLD_SIZE,
};
