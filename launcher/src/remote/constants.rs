//! Constants the remote side shares: psyrun's command line, the agent, the links and the tree
//! all read them here (a leaf: it uses nothing of the crate).

use std::time::Duration;

/// How often each side says it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long an agent just started over SSH may take to say its first word when that is longer
/// than the heartbeat timeout: its silence until then is the host starting a program (under
/// load, seconds), not a lost link. The preflight's own deadline for the hello still applies.
pub const FIRST_WORD: Duration = Duration::from_secs(30);

/// The hidden flag that makes psyrun an agent.
pub const AGENT_FLAG: &str = "--agent";

/// The width when `--tree-width` is not given: up to this many hosts psyrun reaches every host
/// itself (a flat launch, as before trees existed).
pub const DEFAULT_WIDTH: usize = 32;

/// The smallest width that makes a tree (1 would make a chain).
pub const MIN_WIDTH: usize = 2;

/// Variables slurmstepd sets for the agent's task that describe that one-task step, not the job:
/// the agent runs its ranks without them. With them every rank says `SLURM_PROCID=0` of
/// `SLURM_NTASKS=1`, and an Open MPI program (psyne's `mpi` feature) sees `SLURM_STEP_ID`,
/// takes itself for a rank started by srun, and aborts in `MPI_Init` ("OMPI was not built with
/// SLURM's PMI support"): seen with Open MPI 4.1.4 under Slurm 22.05.8.
pub const SLURM_STEP_VARS: &[&str] = &[
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_GTIDS",
    "SLURM_TASK_PID",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_LAUNCHER_PORT",
    "SLURM_STEP_RESV_PORTS",
    "SLURM_STEP_GPUS",
    "SLURM_SRUN_COMM_HOST",
    "SLURM_SRUN_COMM_PORT",
    "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_DISTRIBUTION",
    "SLURM_PRIO_PROCESS",
    "SLURM_UMASK",
    "SLURM_CPU_BIND",
    "SLURM_CPU_BIND_LIST",
    "SLURM_CPU_BIND_TYPE",
    "SLURM_CPU_BIND_VERBOSE",
    "SLURM_MPI_TYPE",
];
