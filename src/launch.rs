//! Reading the launch contract ([`crate::contract`]): how this process was launched (psyrun,
//! PyTorch's names, another launcher, or alone) and the per-process settings every layer reads
//! (`PSY_TIMEOUT`, `PSY_SPIN_US`, `PSY_RESTART_COUNT`). Above [`crate::names`] and
//! [`crate::error`] only.

use crate::error::{Error, ErrorKind, Result};
use crate::names::*;
use std::time::Duration;

/// Everything a launcher tells one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnv {
    /// This rank.
    pub rank: usize,
    /// Ranks in the job.
    pub world_size: usize,
    /// Index among the ranks on this host.
    pub local_rank: usize,
    /// Ranks on this host.
    pub local_size: usize,
    /// Index of this host.
    pub node_rank: usize,
    /// `host:port` of the store.
    pub store: String,
    /// The job identifier.
    pub job_id: String,
    /// The job secret, hex.
    pub secret: String,
    /// `MASTER_ADDR` for torch programs.
    pub master_addr: String,
    /// `MASTER_PORT` for torch programs (a port psyne itself does not use).
    pub master_port: u16,
    /// Which attempt of the job this is (0: the first; see `psyrun --max-restarts`).
    pub restart_count: usize,
    /// The most restarts the launcher makes.
    pub max_restarts: usize,
}

impl RankEnv {
    /// The variables to set in the rank's environment, `PSY_*` and PyTorch's.
    pub fn to_vars(&self) -> Vec<(&'static str, String)> {
        vec![
            (RANK, self.rank.to_string()),
            (WORLD_SIZE, self.world_size.to_string()),
            (LOCAL_RANK, self.local_rank.to_string()),
            (LOCAL_SIZE, self.local_size.to_string()),
            (NODE_RANK, self.node_rank.to_string()),
            (STORE, self.store.clone()),
            (JOB_ID, self.job_id.clone()),
            (JOB_SECRET, self.secret.clone()),
            (TORCH_NAMES[0], self.rank.to_string()),
            (TORCH_NAMES[1], self.world_size.to_string()),
            (TORCH_NAMES[2], self.local_rank.to_string()),
            (TORCH_NAMES[3], self.local_size.to_string()),
            (TORCH_NAMES[4], self.master_addr.clone()),
            (TORCH_NAMES[5], self.master_port.to_string()),
            (RESTART_COUNT, self.restart_count.to_string()),
            (MAX_RESTARTS, self.max_restarts.to_string()),
            (TORCHELASTIC_NAMES[0], self.restart_count.to_string()),
            (TORCHELASTIC_NAMES[1], self.max_restarts.to_string()),
        ]
    }
}

/// How this process was launched, as read from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// Under psyrun: the store is at `PSY_STORE`.
    Psyrun(RankEnv),
    /// Under torchrun or another launcher that sets PyTorch's names: rank 0 serves the store at
    /// `MASTER_ADDR:MASTER_PORT`.
    Torch {
        /// `RANK`
        rank: usize,
        /// `WORLD_SIZE`
        world_size: usize,
        /// `MASTER_ADDR:MASTER_PORT`
        master: String,
        /// `PSY_JOB_SECRET` if set; otherwise a key derived from the master address and
        /// `TORCHELASTIC_RUN_ID`, which keeps strangers out only by obscurity.
        secret: Option<String>,
    },
    /// Started by another launcher ([`FOREIGN_LAUNCHERS`]) as one of more than one process: psyne
    /// cannot reach the others from what it sets. [`crate::init()`] refuses it with
    /// [`ForeignLaunch::error`]; with the `mpi` feature, an MPI launcher's world can be formed over
    /// MPI instead ([`ForeignLaunch::mpi`]).
    Foreign(ForeignLaunch),
    /// Nothing set (or a launcher's world of one): a world of one.
    Alone,
}

/// What a [`ForeignLauncher`] said about this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignLaunch {
    /// The launcher.
    pub launcher: ForeignLauncher,
    /// This process's rank, if the launcher said it.
    pub rank: Option<usize>,
    /// The number of processes, if the launcher said it.
    pub world_size: Option<usize>,
    /// True when `MPI_Init` can form this world: the launcher, or any other launcher whose
    /// variables are set too (`srun --mpi=pmix`), is an MPI one.
    pub mpi: bool,
    /// The launcher's process-management service, if it offers one psyne speaks:
    /// [`crate::init()`] then forms the group through it.
    pub service: Option<Service>,
}

/// A launcher's process-management service, through which [`crate::init()`] meets the other ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// PMIx (`PMIX_NAMESPACE` and `PMIX_RANK` set: Open MPI's mpirun, prterun, `srun
    /// --mpi=pmix`), where its library loads.
    Pmix,
    /// PMI-1 over an inherited socket (`PMI_FD`, `PMI_RANK` and `PMI_SIZE` set: MPICH's Hydra,
    /// `srun --mpi=pmi2`).
    Pmi,
}

impl Service {
    /// What a launch's variables offer: PMIx first (a launcher that sets both speaks PMIx best).
    fn offered(get: &dyn Fn(&str) -> Option<String>) -> Option<Service> {
        if get(PMIX_NAMESPACE).is_some() && get(PMIX.rank_var).is_some() {
            Some(Service::Pmix)
        } else if get(PMI_FD).is_some() && get(PMI.rank_var).is_some() {
            Some(Service::Pmi)
        } else {
            None
        }
    }
}

impl ForeignLaunch {
    /// The variables the launcher set, as `NAME=value`, comma-separated.
    pub fn variables(&self) -> String {
        let mut seen = Vec::new();
        if let Some(rank) = self.rank {
            seen.push(format!("{}={rank}", self.launcher.rank_var));
        }
        if let (Some(name), Some(size)) = (self.launcher.size_var, self.world_size) {
            seen.push(format!("{name}={size}"));
        }
        seen.join(", ")
    }

    /// True when psyne's own group can form only over MPI (`psyne::mpi::native_group`, feature
    /// `mpi`): an MPI launcher that offers no [`Service`] psyne speaks.
    pub fn forms_only_over_mpi(&self) -> bool {
        self.mpi && self.service.is_none()
    }

    /// "rank 1 of 2", "one of 2 ranks", or "rank 3 (of at least 4)".
    fn position(&self) -> String {
        match (self.rank, self.world_size) {
            (Some(r), Some(n)) => format!("rank {r} of {n}"),
            (None, Some(n)) => format!("one of {n} ranks"),
            (Some(r), None) => format!("rank {r} (of at least {})", r + 1),
            (None, None) => "one of several ranks".into(),
        }
    }

    /// The number of ranks to name in a `psyrun -n N` hint (`N` when the launcher said none).
    pub fn ranks_hint(&self) -> String {
        self.world_size
            .map_or_else(|| "N".into(), |n| n.to_string())
    }

    /// `started by Open MPI's mpirun as rank 1 of 2 (OMPI_COMM_WORLD_RANK=1, ...)`.
    pub fn describe(&self) -> String {
        format!(
            "started by {} as {} ({})",
            self.launcher.name,
            self.position(),
            self.variables()
        )
    }

    /// The error [`crate::init()`] returns ([`ErrorKind::Bootstrap`]): who started this process,
    /// what it said, and the three ways to run it as one job; `program` is how it was started.
    pub fn error_for(&self, program: &str) -> Error {
        let n = self.ranks_hint();
        let torch = match self.launcher.size_var {
            Some(size) => format!("RANK=${} and WORLD_SIZE=${size}", self.launcher.rank_var),
            None => "RANK and WORLD_SIZE".into(),
        };
        Error::new(
            ErrorKind::Bootstrap,
            format!(
                "this process was {}, but psyne cannot reach the other ranks from what that \
                 launcher tells it (and running alone would silently make every rank a world of \
                 one). Run it under psyrun instead (`psyrun -n {n} {program}`{}); or set \
                 MASTER_ADDR and MASTER_PORT (rank 0's host and a free port) with {torch} in \
                 every rank, as torchrun does; or build with the `mpi` feature and form the group \
                 over MPI (psyne::mpi::init() then psyne::mpi::native_group) {}",
                self.describe(),
                self.launcher.psyrun_where,
                self.launcher.mpi_how
            ),
        )
    }

    /// [`ForeignLaunch::error_for`] this process, named as it was started (its `argv[0]`).
    pub fn error(&self) -> Error {
        self.error_for(&program_name())
    }
}

/// How this process was started (`argv[0]`), for hints; `PROGRAM` if unknown.
fn program_name() -> String {
    std::env::args_os()
        .next()
        .map(|a| a.to_string_lossy().into_owned())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| "PROGRAM".into())
}

fn parse_var<T: std::str::FromStr>(
    name: &str,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<T>> {
    match get(name) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            Error::config(format!(
                "environment variable {name}={v:?} is not valid; unset it or give a number"
            ))
        }),
    }
}

fn require<T: std::str::FromStr>(
    name: &str,
    get: &dyn Fn(&str) -> Option<String>,
    why: &str,
) -> Result<T> {
    parse_var(name, get)?
        .ok_or_else(|| Error::config(format!("{name} is not set but {why}; a launcher sets both")))
}

/// Reads the launch environment through `get` (normally `std::env::var`).
pub fn detect_with(get: &dyn Fn(&str) -> Option<String>) -> Result<Launch> {
    if let Some(store) = get(STORE) {
        let why = "PSY_STORE is";
        let rank: usize = require(RANK, get, why)?;
        let world_size: usize = require(WORLD_SIZE, get, why)?;
        check_rank(rank, world_size)?;
        let secret = get(JOB_SECRET).ok_or_else(|| {
            Error::config("PSY_STORE is set but PSY_JOB_SECRET is not; start the job with psyrun")
        })?;
        return Ok(Launch::Psyrun(RankEnv {
            rank,
            world_size,
            local_rank: parse_var(LOCAL_RANK, get)?.unwrap_or(rank),
            local_size: parse_var(LOCAL_SIZE, get)?.unwrap_or(world_size),
            node_rank: parse_var(NODE_RANK, get)?.unwrap_or(0),
            store,
            job_id: get(JOB_ID).unwrap_or_else(|| "psyne".into()),
            secret,
            master_addr: get(TORCH_NAMES[4]).unwrap_or_default(),
            master_port: parse_var(TORCH_NAMES[5], get)?.unwrap_or(0),
            restart_count: parse_var(RESTART_COUNT, get)?.unwrap_or(0),
            max_restarts: parse_var(MAX_RESTARTS, get)?.unwrap_or(0),
        }));
    }
    let rank: Option<usize> = parse_var(TORCH_NAMES[0], get)?;
    let world_size: Option<usize> = parse_var(TORCH_NAMES[1], get)?;
    match (rank, world_size) {
        (None, None) => foreign_with(get),
        (Some(rank), Some(world_size)) => {
            check_rank(rank, world_size)?;
            if world_size == 1 {
                return Ok(Launch::Alone);
            }
            let why = "RANK and WORLD_SIZE are";
            let addr: String = require(TORCH_NAMES[4], get, why)?;
            let port: u16 = require(TORCH_NAMES[5], get, why)?;
            Ok(Launch::Torch {
                rank,
                world_size,
                master: format!("{addr}:{port}"),
                secret: get(JOB_SECRET),
            })
        }
        _ => Err(Error::config(
            "only one of RANK and WORLD_SIZE is set; set both (or neither for a world of one)",
        )),
    }
}

/// The first of [`FOREIGN_LAUNCHERS`] whose variables are set: [`Launch::Foreign`] for a world of
/// more than one (a rank above 0 when no size is said), [`Launch::Alone`] otherwise.
fn foreign_with(get: &dyn Fn(&str) -> Option<String>) -> Result<Launch> {
    let present = |l: &ForeignLauncher| {
        get(l.rank_var).is_some() || l.size_var.is_some_and(|v| get(v).is_some())
    };
    let Some(launcher) = FOREIGN_LAUNCHERS.into_iter().find(present) else {
        return Ok(Launch::Alone);
    };
    let rank: Option<usize> = parse_var(launcher.rank_var, get)?;
    let world_size: Option<usize> = match launcher.size_var {
        Some(name) => parse_var(name, get)?,
        None => None,
    };
    let found = ForeignLaunch {
        launcher,
        rank,
        world_size,
        mpi: FOREIGN_LAUNCHERS.iter().any(|l| l.mpi && present(l)),
        service: Service::offered(get),
    };
    let alone = match (rank, world_size) {
        (Some(r), Some(n)) if r >= n => {
            return Err(Error::config(format!(
                "{}: the rank is not inside the world; was the environment edited?",
                found.describe()
            )))
        }
        (_, Some(0)) => {
            return Err(Error::config(format!(
                "{}: a world of no ranks; was the environment edited?",
                found.describe()
            )))
        }
        (_, Some(n)) => n == 1,
        // PMIx tells the size only when asked: its rank 0 may still have company.
        (_, None) if found.service.is_some() => false,
        (r, None) => r.unwrap_or(0) == 0,
    };
    Ok(if alone {
        Launch::Alone
    } else {
        Launch::Foreign(found)
    })
}

/// The launcher other than psyrun and torchrun that started this process as one of several, if
/// one did ([`Launch::Foreign`] of [`detect`]); tools use it to add their own hints to
/// [`ForeignLaunch::error`] or to form their group over MPI instead.
pub fn foreign_launch() -> Option<ForeignLaunch> {
    match detect() {
        Ok(Launch::Foreign(f)) => Some(f),
        _ => None,
    }
}

/// The world size the environment announces and the variable that says it: the MPI launchers'
/// ([`FOREIGN_LAUNCHERS`] with `mpi`), then psyrun's `PSY_WORLD_SIZE`, then the others' (Slurm's
/// step): the innermost launcher first. Unset or unparsable variables are skipped. Used to
/// check the world MPI reports against the one that was launched.
pub fn announced_world_size_with(
    get: &dyn Fn(&str) -> Option<String>,
) -> Option<(&'static str, usize)> {
    let sizes = |mpi: bool| {
        FOREIGN_LAUNCHERS
            .into_iter()
            .filter(move |l| l.mpi == mpi)
            .filter_map(|l| l.size_var)
    };
    sizes(true)
        .chain([WORLD_SIZE])
        .chain(sizes(false))
        .find_map(|name| Some((name, get(name)?.trim().parse().ok()?)))
}

fn check_rank(rank: usize, world_size: usize) -> Result<()> {
    if world_size == 0 || rank >= world_size {
        return Err(Error::config(format!(
            "rank {rank} is not inside a world of {world_size}: the rank must be in 0..world size"
        )));
    }
    Ok(())
}

/// Reads the launch environment of this process.
pub fn detect() -> Result<Launch> {
    detect_with(&|name| std::env::var(name).ok())
}

/// The deadline of every wait: `PSY_TIMEOUT` seconds (fractions allowed), else [`DEFAULT_TIMEOUT`].
pub fn timeout_with(get: &dyn Fn(&str) -> Option<String>) -> Result<Duration> {
    match get(TIMEOUT) {
        None => Ok(DEFAULT_TIMEOUT),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            _ => Err(Error::config(format!(
                "{TIMEOUT}={v:?} is not a positive number of seconds; e.g. PSY_TIMEOUT=60"
            ))),
        },
    }
}

/// `timeout_with` on this process's environment.
pub fn timeout() -> Result<Duration> {
    timeout_with(&|name| std::env::var(name).ok())
}

/// Which attempt of the job this process belongs to: `PSY_RESTART_COUNT` (psyrun), else
/// `TORCHELASTIC_RESTART_COUNT` (torchrun), else 0. A program that checkpoints reads it to know
/// whether it is starting over after a failure.
pub fn restart_count_with(get: &dyn Fn(&str) -> Option<String>) -> Result<usize> {
    match parse_var(RESTART_COUNT, get)? {
        Some(n) => Ok(n),
        None => Ok(parse_var(TORCHELASTIC_NAMES[0], get)?.unwrap_or(0)),
    }
}

/// `restart_count_with` on this process's environment.
pub fn restart_count() -> Result<usize> {
    restart_count_with(&|name| std::env::var(name).ok())
}

/// How long a waiting rank spins before blocking: `PSY_SPIN_US` microseconds, else
/// [`DEFAULT_SPIN`].
pub fn spin_with(get: &dyn Fn(&str) -> Option<String>) -> Result<Duration> {
    match get(SPIN_US) {
        None => Ok(DEFAULT_SPIN),
        Some(v) => v.trim().parse::<u64>().map(Duration::from_micros).map_err(|_| {
            Error::config(format!(
                "{SPIN_US}={v:?} is not a whole number of microseconds; e.g. PSY_SPIN_US=50 (0 blocks at once)"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn nothing_set_is_a_world_of_one() {
        assert_eq!(detect_with(&env(&[])).unwrap(), Launch::Alone);
    }

    #[test]
    fn launcher_vars_round_trip() {
        let want = RankEnv {
            rank: 2,
            world_size: 4,
            local_rank: 2,
            local_size: 4,
            node_rank: 0,
            store: "127.0.0.1:5000".into(),
            job_id: "j1".into(),
            secret: "00ff".into(),
            master_addr: "127.0.0.1".into(),
            master_port: 29500,
            restart_count: 1,
            max_restarts: 3,
        };
        let vars = want.to_vars();
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(detect_with(&env(&pairs)).unwrap(), Launch::Psyrun(want));
    }

    #[test]
    fn the_restart_count_comes_from_psyrun_or_torchrun() {
        assert_eq!(restart_count_with(&env(&[])).unwrap(), 0);
        let torch = [("TORCHELASTIC_RESTART_COUNT", "2")];
        assert_eq!(restart_count_with(&env(&torch)).unwrap(), 2);
        let both = [
            ("TORCHELASTIC_RESTART_COUNT", "2"),
            ("PSY_RESTART_COUNT", "1"),
        ];
        assert_eq!(restart_count_with(&env(&both)).unwrap(), 1, "psyrun's wins");
        let bad = [("PSY_RESTART_COUNT", "x")];
        let e = restart_count_with(&env(&bad)).unwrap_err().to_string();
        assert!(e.contains("PSY_RESTART_COUNT"), "{e}");
    }

    #[test]
    fn torch_names_alone_mean_rank0_serves_the_store() {
        let got = detect_with(&env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap();
        assert!(
            matches!(got, Launch::Torch { rank: 1, world_size: 2, ref master, .. } if master == "10.0.0.1:29500")
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = detect_with(&env(&[("RANK", "x"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(err.message().contains("RANK"), "{err}");
        let err = detect_with(&env(&[("RANK", "3"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(err.message().contains("rank 3"), "{err}");
        let err = timeout_with(&env(&[("PSY_TIMEOUT", "-1")])).unwrap_err();
        assert!(err.message().contains("PSY_TIMEOUT"), "{err}");
        assert_eq!(
            timeout_with(&env(&[("PSY_TIMEOUT", "1.5")])).unwrap(),
            Duration::from_millis(1500)
        );
    }

    /// The launch `pairs` describe, which must be a foreign one.
    fn foreign(pairs: &[(&str, &str)]) -> ForeignLaunch {
        match detect_with(&env(pairs)).unwrap() {
            Launch::Foreign(f) => f,
            other => panic!("{pairs:?}: expected a foreign launch, got {other:?}"),
        }
    }

    #[test]
    fn every_foreign_launcher_with_more_than_one_rank_is_recognised() {
        type Case<'a> = (
            &'a [(&'a str, &'a str)],
            ForeignLauncher,
            Option<usize>,
            Option<usize>,
            bool,
        );
        let cases: [Case; 5] = [
            // What Open MPI 4.1's mpirun -n 2 sets (checked on Debian 12).
            (
                &[
                    ("OMPI_COMM_WORLD_RANK", "1"),
                    ("OMPI_COMM_WORLD_SIZE", "2"),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                    ("PMIX_RANK", "1"),
                    ("PMIX_NAMESPACE", "513802241"),
                ],
                OPEN_MPI,
                Some(1),
                Some(2),
                true,
            ),
            // MPICH's and Intel MPI's Hydra.
            (
                &[("PMI_RANK", "2"), ("PMI_SIZE", "4"), ("PMI_FD", "7")],
                PMI,
                Some(2),
                Some(4),
                true,
            ),
            (
                &[("MV2_COMM_WORLD_RANK", "0"), ("MV2_COMM_WORLD_SIZE", "3")],
                MVAPICH,
                Some(0),
                Some(3),
                true,
            ),
            // An srun step of 2 tasks (Slurm 22.05, default --mpi=none).
            (
                &[
                    ("SLURM_JOB_ID", "1"),
                    ("SLURM_PROCID", "1"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_STEP_ID", "0"),
                    ("SLURM_STEP_NUM_TASKS", "2"),
                ],
                SLURM,
                Some(1),
                Some(2),
                false,
            ),
            // A PMIx launcher says only the rank.
            (
                &[("PMIX_RANK", "3"), ("PMIX_NAMESPACE", "prterun-vm-1@1")],
                PMIX,
                Some(3),
                None,
                true,
            ),
        ];
        for (pairs, launcher, rank, world_size, mpi) in cases {
            let f = foreign(pairs);
            let service = if pairs.iter().any(|(k, _)| *k == PMIX_NAMESPACE) {
                Some(Service::Pmix)
            } else if pairs.iter().any(|(k, _)| *k == PMI_FD) {
                Some(Service::Pmi)
            } else {
                None
            };
            assert_eq!(
                f,
                ForeignLaunch {
                    launcher,
                    rank,
                    world_size,
                    mpi,
                    service,
                },
                "{pairs:?}"
            );
            let e = f.error_for("./prog");
            assert_eq!(e.kind(), ErrorKind::Bootstrap);
            let m = e.message();
            assert!(m.contains(launcher.name), "{m}");
            assert!(m.contains(launcher.rank_var), "{m}");
            let n = world_size.map_or("N".to_string(), |n| n.to_string());
            assert!(m.contains(&format!("`psyrun -n {n} ./prog`")), "{m}");
            assert!(m.contains("MASTER_ADDR and MASTER_PORT"), "{m}");
            assert!(m.contains("psyne::mpi::native_group"), "{m}");
        }
    }

    #[test]
    fn rank_0_of_a_pmix_launch_without_a_size_is_not_taken_for_a_world_of_one() {
        let f = foreign(&[("PMIX_RANK", "0"), ("PMIX_NAMESPACE", "ns")]);
        assert_eq!(f.service, Some(Service::Pmix));
        // Without the namespace it is not a PMIx server's process: alone, as before.
        assert_eq!(
            detect_with(&env(&[("PMIX_RANK", "0")])).unwrap(),
            Launch::Alone
        );
    }

    #[test]
    fn the_error_names_the_launcher_the_variables_and_the_fixes() {
        let f = foreign(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]);
        let m = f.error_for("target/release/examples/allreduce").to_string();
        assert!(
            m.starts_with(
                "this process was started by Open MPI's mpirun as rank 1 of 2 \
                 (OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=2), but psyne cannot reach"
            ),
            "{m}"
        );
        assert!(
            m.contains("`psyrun -n 2 target/release/examples/allreduce`"),
            "{m}"
        );
        assert!(
            m.contains("RANK=$OMPI_COMM_WORLD_RANK and WORLD_SIZE=$OMPI_COMM_WORLD_SIZE"),
            "{m}"
        );
        let f = foreign(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "2")]);
        let m = f.error_for("./prog").to_string();
        assert!(m.contains("Slurm's srun as rank 0 of 2"), "{m}");
        assert!(
            m.contains("(`psyrun -n 2 ./prog` from the batch script or the salloc shell, not"),
            "{m}"
        );
        assert!(m.contains("srun --mpi=pmix"), "{m}");
        let f = foreign(&[("PMIX_RANK", "1")]);
        assert!(
            f.describe()
                .contains("as rank 1 (of at least 2) (PMIX_RANK=1)"),
            "{}",
            f.describe()
        );
    }

    #[test]
    fn a_world_of_one_from_any_launcher_is_alone() {
        let alone: [&[(&str, &str)]; 8] = [
            &[
                ("OMPI_COMM_WORLD_RANK", "0"),
                ("OMPI_COMM_WORLD_SIZE", "1"),
                ("PMIX_RANK", "0"),
            ],
            &[("PMI_RANK", "0"), ("PMI_SIZE", "1")],
            &[("MV2_COMM_WORLD_RANK", "0"), ("MV2_COMM_WORLD_SIZE", "1")],
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_STEP_NUM_TASKS", "1"),
                ("SLURM_NTASKS", "1"),
            ],
            &[("PMIX_RANK", "0")],
            // `sbatch -n2` runs the batch script once, as task 0 of no step (Slurm 22.05).
            &[
                ("SLURM_JOB_ID", "6"),
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_NPROCS", "2"),
                ("SLURM_LOCALID", "0"),
            ],
            // The shell of `salloc -n2`: the job's variables, no task's.
            &[
                ("SLURM_JOB_ID", "3"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_NPROCS", "2"),
            ],
            // `srun -n1` inside `salloc -n2`: the step's own count.
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "1"),
                ("SLURM_STEP_NUM_TASKS", "1"),
                ("SLURM_JOB_CPUS_PER_NODE", "2"),
            ],
        ];
        for pairs in alone {
            assert_eq!(
                detect_with(&env(pairs)).unwrap(),
                Launch::Alone,
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn mpi_launchers_win_over_the_slurm_step_they_run_in() {
        // mpirun (or mpiexec) inside an allocation starts its daemons with srun, one task per
        // node; the ranks inherit that step's variables.
        let f = foreign(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "1"),
        ]);
        assert_eq!(
            (f.launcher, f.rank, f.world_size),
            (OPEN_MPI, Some(3), Some(4))
        );
        // srun --mpi=pmi2 and --mpi=pmix: MPI can form the world.
        let f = foreign(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
        ]);
        assert_eq!((f.launcher, f.mpi), (PMI, true));
        let f = foreign(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("PMIX_RANK", "1"),
        ]);
        assert_eq!((f.launcher, f.mpi), (SLURM, true));
    }

    #[test]
    fn psyrun_then_torch_names_come_before_any_other_launcher() {
        let mpirun = [("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")];
        let srun = [("SLURM_PROCID", "1"), ("SLURM_STEP_NUM_TASKS", "2")];
        let psyrun = [
            ("PSY_STORE", "127.0.0.1:5000"),
            ("PSY_RANK", "0"),
            ("PSY_WORLD_SIZE", "3"),
            ("PSY_JOB_SECRET", "00ff"),
        ];
        let torch = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ];
        for other in [&mpirun[..], &srun[..]] {
            let both: Vec<_> = psyrun.iter().chain(other).copied().collect();
            assert!(
                matches!(detect_with(&env(&both)).unwrap(), Launch::Psyrun(e) if e.world_size == 3),
                "{both:?}"
            );
            let both: Vec<_> = torch.iter().chain(other).copied().collect();
            assert!(
                matches!(
                    detect_with(&env(&both)).unwrap(),
                    Launch::Torch { world_size: 2, .. }
                ),
                "{both:?}"
            );
            // A torch world of one stays one, as before.
            let both: Vec<_> = [("RANK", "0"), ("WORLD_SIZE", "1")]
                .iter()
                .chain(other)
                .copied()
                .collect();
            assert_eq!(detect_with(&env(&both)).unwrap(), Launch::Alone, "{both:?}");
        }
    }

    #[test]
    fn malformed_launcher_values_name_the_variable() {
        let e = detect_with(&env(&[
            ("OMPI_COMM_WORLD_SIZE", "two"),
            ("OMPI_COMM_WORLD_RANK", "0"),
        ]))
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.message().contains("OMPI_COMM_WORLD_SIZE=\"two\""), "{e}");
        let e = detect_with(&env(&[
            ("SLURM_PROCID", "-1"),
            ("SLURM_STEP_NUM_TASKS", "2"),
        ]))
        .unwrap_err();
        assert!(e.message().contains("SLURM_PROCID"), "{e}");
        let e = detect_with(&env(&[("PMI_RANK", "4"), ("PMI_SIZE", "4")])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.message().contains("PMI_RANK=4, PMI_SIZE=4"), "{e}");
        let e = detect_with(&env(&[("MV2_COMM_WORLD_SIZE", "0")])).unwrap_err();
        assert!(e.message().contains("MV2_COMM_WORLD_SIZE=0"), "{e}");
        // A size without a rank is still a world of that size.
        let f = foreign(&[("PMI_SIZE", " 3 ")]);
        assert_eq!((f.rank, f.world_size), (None, Some(3)));
        assert!(
            f.describe().contains("as one of 3 ranks (PMI_SIZE=3)"),
            "{}",
            f.describe()
        );
    }

    #[test]
    fn the_announced_world_size_is_the_innermost_launchers() {
        let said = |pairs: &[(&str, &str)]| announced_world_size_with(&env(pairs));
        assert_eq!(said(&[]), None);
        assert_eq!(said(&[("PMI_SIZE", " 6 ")]), Some(("PMI_SIZE", 6)));
        assert_eq!(said(&[("PMI_SIZE", "x")]), None);
        assert_eq!(
            said(&[("OMPI_COMM_WORLD_SIZE", "4"), ("PMI_SIZE", "8")]),
            Some(("OMPI_COMM_WORLD_SIZE", 4))
        );
        assert_eq!(
            said(&[("PSY_WORLD_SIZE", "2"), ("SLURM_STEP_NUM_TASKS", "1")]),
            Some(("PSY_WORLD_SIZE", 2))
        );
        assert_eq!(
            said(&[("MV2_COMM_WORLD_SIZE", "3"), ("PSY_WORLD_SIZE", "2")]),
            Some(("MV2_COMM_WORLD_SIZE", 3))
        );
        assert_eq!(
            said(&[("SLURM_STEP_NUM_TASKS", "5"), ("SLURM_NTASKS", "9")]),
            Some(("SLURM_STEP_NUM_TASKS", 5))
        );
    }
}
