//! Binding ranks to CPUs: which CPUs each rank of a host may run on.
//!
//! Planning is pure: [`plan`] maps a [`Topology`] (read from hwloc by [`hwloc::load`], from the
//! kernel's `/sys/devices/system` by [`sysfs::load`] where hwloc's library is not installed, or
//! built synthetically in tests), the number of ranks on the host and the user's [`BindingRequest`] to
//! one [`CpuSet`] per rank (or none). The rank applies its set itself, in the forked child before
//! exec (see [`crate::spawn`]), so nothing of the program ever runs unbound.
//!
//! Two steps, as in Open MPI:
//!
//! 1. **Map**: give each rank `--cpus-per-rank` cores (default 1). `--map-by core` (and `node`,
//!    which on one host is the same) hands out cores in order: rank 0 cores 0.., rank 1 the next
//!    ones. `--map-by socket` and `--map-by numa` deal ranks round-robin across sockets or NUMA
//!    nodes, each rank's cores inside one of them.
//! 2. **Bind**: widen each rank's cores to the object asked for: `--bind-to core` keeps exactly
//!    those cores (all their hardware threads), `numa` and `socket` the whole NUMA nodes or
//!    sockets that contain them, `none` does not bind.
//!
//! More cores asked for than the host has is an error that names `--oversubscribe` (cores are then
//! reused round-robin) and `--bind-to none`. Without `--bind-to`, psyrun binds to cores when the
//! host has at least as many cores as its ranks need, and otherwise does not bind (and says so
//! with `--report-bindings`); an explicit `--cpus-per-rank` that does not fit is an error.

pub mod hwloc;
pub mod sysfs;
pub mod topology;

pub use topology::{Core, CpuSet, Topology};

/// What `--bind-to` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BindTo {
    /// Each rank to its own cores.
    Core,
    /// Each rank to the NUMA node(s) of its cores.
    Numa,
    /// Each rank to the socket(s) of its cores.
    Socket,
    /// No binding: ranks run wherever the kernel puts them.
    None,
}

impl BindTo {
    /// The word as typed.
    pub fn name(self) -> &'static str {
        match self {
            BindTo::Core => "core",
            BindTo::Numa => "numa",
            BindTo::Socket => "socket",
            BindTo::None => "none",
        }
    }
}

/// What `--map-by` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MapBy {
    /// Cores in order.
    Core,
    /// Round-robin across NUMA nodes.
    Numa,
    /// Round-robin across sockets.
    Socket,
    /// Round-robin across hosts; within one host, cores in order.
    Node,
}

impl MapBy {
    /// The word as typed.
    pub fn name(self) -> &'static str {
        match self {
            MapBy::Core => "core",
            MapBy::Numa => "numa",
            MapBy::Socket => "socket",
            MapBy::Node => "node",
        }
    }
}

/// The binding flags of the command line; `None` means the flag was not given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BindingRequest {
    /// `--bind-to`.
    pub bind_to: Option<BindTo>,
    /// `--map-by`.
    pub map_by: Option<MapBy>,
    /// `--cpus-per-rank` (cores per rank, at least 1).
    pub cpus_per_rank: Option<usize>,
    /// `--report-bindings`.
    pub report: bool,
    /// `--oversubscribe`: more cores asked for than there are is allowed; cores are reused.
    pub oversubscribe: bool,
}

impl BindingRequest {
    /// Whether binding was asked for explicitly (so it must happen or fail), rather than left
    /// to the default.
    pub fn explicit(&self) -> bool {
        match self.bind_to {
            Some(BindTo::None) => false,
            Some(_) => true,
            None => self.map_by.is_some() || self.cpus_per_rank.is_some(),
        }
    }

    /// Whether the topology is needed at all (`--bind-to none` does without it).
    pub fn needs_topology(&self) -> bool {
        self.bind_to != Some(BindTo::None)
    }
}

/// One rank's binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankBinding {
    /// The CPUs it may run on.
    pub cpus: CpuSet,
    /// What they are, for reports: `core 3`, `cores 0-1`, `numa 0`, `socket 1`.
    pub what: String,
}

/// The bindings of one host's ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// One entry per local rank, in local-rank order; `None` when not bound.
    pub ranks: Vec<Option<RankBinding>>,
    /// Why the default left ranks unbound, if it did (shown with `--report-bindings`).
    pub note: Option<String>,
}

impl Plan {
    /// No binding for `n` ranks, with an optional note.
    pub fn unbound(n: usize, note: Option<String>) -> Plan {
        Plan {
            ranks: vec![None; n],
            note,
        }
    }
}

/// Why ranks cannot be bound as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// More cores asked for than the host has.
    #[error("{}", too_few_cores(*.ranks, *.cpus_per_rank, *.cores))]
    TooFewCores {
        /// Ranks on the host.
        ranks: usize,
        /// Cores each rank asked for.
        cpus_per_rank: usize,
        /// Cores the host has (that psyrun may use).
        cores: usize,
    },
    /// hwloc could not be loaded or asked.
    #[error("{0}")]
    Hwloc(#[from] hwloc::HwlocError),
}

fn too_few_cores(ranks: usize, cpr: usize, cores: usize) -> String {
    let need = ranks.saturating_mul(cpr);
    let asked = if ranks == 1 {
        format!("1 rank with --cpus-per-rank {cpr} needs {need} cores")
    } else if cpr == 1 {
        format!("{ranks} ranks bound to one core each need {need} cores")
    } else {
        format!("{ranks} ranks with --cpus-per-rank {cpr} need {need} cores")
    };
    format!(
        "{asked}, but this host has only {cores}; add --oversubscribe to let ranks share cores \
         (reused round-robin), or --bind-to none to not bind, or lower -n or --cpus-per-rank"
    )
}

/// Plans the bindings of `ranks` ranks on a host with topology `topo` (see the module docs).
pub fn plan(topo: &Topology, ranks: usize, req: &BindingRequest) -> Result<Plan, BindError> {
    let cores = topo.cores().len();
    let cpr = req.cpus_per_rank.unwrap_or(1).max(1);
    let map_by = req.map_by.unwrap_or(MapBy::Core);
    let fits = ranks.saturating_mul(cpr) <= cores;
    let bind_to = match req.bind_to {
        Some(BindTo::None) => return Ok(Plan::unbound(ranks, None)),
        Some(b) => b,
        None if fits => BindTo::Core,
        None if req.cpus_per_rank.is_some() && !req.oversubscribe => {
            return Err(BindError::TooFewCores {
                ranks,
                cpus_per_rank: cpr,
                cores,
            })
        }
        None => {
            return Ok(Plan::unbound(
                ranks,
                Some(not_binding(ranks, cpr, cores, "core(s)")),
            ))
        }
    };
    if cores == 0 || (!fits && !req.oversubscribe) {
        return Err(BindError::TooFewCores {
            ranks,
            cpus_per_rank: cpr,
            cores,
        });
    }
    let mapped = map(topo, ranks, cpr, map_by)?;
    let bound = mapped
        .into_iter()
        .map(|core_ids| Some(bind(topo, &core_ids, bind_to)))
        .collect();
    Ok(Plan {
        ranks: bound,
        note: None,
    })
}

/// The CPUs this process may run on (`Cpus_allowed_list` of `/proc/self/status`), if readable.
pub fn own_cpus() -> Option<CpuSet> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    CpuSet::parse_list(list)
}

/// This host's topology as far as psyrun may use it: hwloc's, or where hwloc fails (its library
/// is not installed) the kernel's ([`sysfs`]), restricted to psyrun's own CPUs (so `taskset -c
/// 2-3 psyrun ...` binds ranks inside 2-3). Only when neither can be read is hwloc's error
/// returned, which says what to install.
pub fn local_topology() -> Result<Topology, hwloc::HwlocError> {
    let topo = hwloc::load().or_else(|e| sysfs::load().map_err(|_| e))?;
    match own_cpus() {
        Some(allowed) => Ok(topo.restrict(&allowed)?),
        None => Ok(topo),
    }
}

/// Plans the bindings of `ranks` ranks on this host: reads the topology (unless `--bind-to
/// none`) and calls [`plan`]. Without a topology (neither hwloc nor `/sys` could be read), an
/// explicit request fails with [`BindError::Hwloc`] (which says what to install); the default
/// does not bind, with a note.
pub fn plan_here(ranks: usize, req: &BindingRequest) -> Result<Plan, BindError> {
    // Reading the topology costs a few milliseconds of launch time (hwloc loads its plugins).
    // The default binds nothing when there are more ranks than CPUs, hence than cores: no need.
    if req.bind_to.is_none() && !req.explicit() {
        if let Some(cpus) = own_cpus().map(|c| c.cpus().len()) {
            if cpus < ranks {
                return Ok(Plan::unbound(
                    ranks,
                    Some(not_binding(ranks, 1, cpus, "CPU(s)")),
                ));
            }
        }
    }
    plan_with(ranks, req, local_topology)
}

/// The default's note when it does not bind.
fn not_binding(ranks: usize, cpr: usize, have: usize, what: &str) -> String {
    let cpus = if cpr == 1 {
        String::new()
    } else {
        format!(" x {cpr} cores")
    };
    format!(
        "not binding: {ranks} ranks{cpus} but {have} {what} here (to bind anyway, sharing \
         cores round-robin: --bind-to core --oversubscribe)"
    )
}

/// [`plan_here`] with the topology from `load` (tests pass a synthetic one or a failure).
pub fn plan_with(
    ranks: usize,
    req: &BindingRequest,
    load: impl FnOnce() -> Result<Topology, hwloc::HwlocError>,
) -> Result<Plan, BindError> {
    if !req.needs_topology() {
        return Ok(Plan::unbound(ranks, None));
    }
    match load() {
        Ok(topo) => plan(&topo, ranks, req),
        Err(e) if req.explicit() => Err(BindError::Hwloc(e)),
        Err(e) => Ok(Plan::unbound(ranks, Some(format!("not binding: {e}")))),
    }
}

/// Each rank's cores (logical indices), `cpr` per rank, reused round-robin when they run out.
fn map(
    topo: &Topology,
    ranks: usize,
    cpr: usize,
    map_by: MapBy,
) -> Result<Vec<Vec<usize>>, BindError> {
    let n = topo.cores().len();
    let in_order = |r: usize| -> Vec<usize> {
        let mut v: Vec<usize> = (0..cpr).map(|i| (r * cpr + i) % n).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let key: fn(&Core) -> usize = match map_by {
        MapBy::Core | MapBy::Node => return Ok((0..ranks).map(in_order).collect()),
        MapBy::Numa => |c| c.numa,
        MapBy::Socket => |c| c.package,
    };
    // The objects' cores, in order of the objects' first cores.
    let mut objects: Vec<(usize, Vec<usize>)> = Vec::new();
    for c in topo.cores() {
        match objects.iter_mut().find(|(k, _)| *k == key(c)) {
            Some((_, v)) => v.push(c.index),
            None => objects.push((key(c), vec![c.index])),
        }
    }
    // Chunks of `cpr` cores inside one object, dealt round-robin across the objects: the first
    // chunk of every object, then the second of every object that has one, and so on. The cores
    // left over in each object (fewer than `cpr`) are chunked last, in order, across objects, so
    // that every rank gets its own cores whenever the host has enough.
    let mut leftover = Vec::new();
    let chunks_of: Vec<Vec<Vec<usize>>> = objects
        .iter()
        .map(|(_, v)| {
            let exact = v.chunks_exact(cpr);
            leftover.extend_from_slice(exact.remainder());
            exact.map(<[usize]>::to_vec).collect()
        })
        .collect();
    let most = chunks_of.iter().map(Vec::len).max().unwrap_or(0);
    let mut chunks = Vec::new();
    for k in 0..most {
        for object in &chunks_of {
            if let Some(chunk) = object.get(k) {
                chunks.push(chunk.clone());
            }
        }
    }
    chunks.extend(leftover.chunks_exact(cpr).map(<[usize]>::to_vec));
    if chunks.is_empty() {
        return Ok((0..ranks).map(in_order).collect());
    }
    Ok((0..ranks)
        .map(|r| chunks[r % chunks.len()].clone())
        .collect())
}

/// The CPUs of `cores` widened to `bind_to`'s objects, and their description.
fn bind(topo: &Topology, cores: &[usize], bind_to: BindTo) -> RankBinding {
    let all = topo.cores();
    let picked: Vec<&Core> = cores.iter().filter_map(|&i| all.get(i)).collect();
    let (key, word): (fn(&Core) -> usize, &str) = match bind_to {
        BindTo::Core | BindTo::None => (|c| c.id, "core"),
        BindTo::Numa => (|c| c.numa, "numa"),
        BindTo::Socket => (|c| c.package, "socket"),
    };
    let objects: CpuSet = picked.iter().map(|c| key(c)).collect();
    let cpus = all
        .iter()
        .filter(|c| objects.cpus().contains(&key(c)))
        .flat_map(|c| c.cpus.iter().copied())
        .collect();
    let plural = if objects.cpus().len() == 1 {
        ""
    } else if bind_to == BindTo::Numa {
        " nodes"
    } else {
        "s"
    };
    RankBinding {
        cpus,
        what: format!("{word}{plural} {objects}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(bind_to: Option<BindTo>, map_by: Option<MapBy>, cpr: Option<usize>) -> BindingRequest {
        BindingRequest {
            bind_to,
            map_by,
            cpus_per_rank: cpr,
            report: false,
            oversubscribe: false,
        }
    }

    fn cpus(p: &Plan) -> Vec<String> {
        p.ranks
            .iter()
            .map(|b| b.as_ref().map_or("-".into(), |b| b.cpus.to_string()))
            .collect()
    }

    fn whats(p: &Plan) -> Vec<String> {
        p.ranks
            .iter()
            .map(|b| b.as_ref().map_or("-".into(), |b| b.what.clone()))
            .collect()
    }

    #[test]
    fn two_cores_two_ranks_get_one_core_each_by_default() {
        let t = Topology::synthetic(1, 1, 2, 1, false);
        let p = plan(&t, 2, &req(None, None, None)).unwrap();
        assert_eq!(cpus(&p), ["0", "1"]);
        assert_eq!(whats(&p), ["core 0", "core 1"]);
        assert_eq!(p.note, None);
        let p = plan(&t, 2, &req(Some(BindTo::Core), None, None)).unwrap();
        assert_eq!(cpus(&p), ["0", "1"]);
    }

    #[test]
    fn the_default_does_not_bind_more_ranks_than_cores_and_says_so() {
        let t = Topology::synthetic(1, 1, 2, 1, false);
        let p = plan(&t, 4, &req(None, None, None)).unwrap();
        assert_eq!(cpus(&p), ["-"; 4]);
        let note = p.note.unwrap();
        assert!(
            note.contains("not binding: 4 ranks but 2 core(s)"),
            "{note}"
        );
        assert!(note.contains("--oversubscribe"), "{note}");
        // --oversubscribe alone does not make the default bind.
        let mut r = req(None, None, None);
        r.oversubscribe = true;
        assert!(plan(&t, 4, &r).unwrap().note.is_some());
    }

    #[test]
    fn cpus_per_rank_takes_whole_cores_with_their_threads() {
        let t = Topology::synthetic(1, 1, 4, 2, true);
        let p = plan(&t, 2, &req(None, None, Some(2))).unwrap();
        assert_eq!(cpus(&p), ["0-1,4-5", "2-3,6-7"]);
        assert_eq!(whats(&p), ["cores 0-1", "cores 2-3"]);
        let t = Topology::synthetic(1, 1, 2, 1, false);
        let p = plan(&t, 1, &req(None, None, Some(2))).unwrap();
        assert_eq!(cpus(&p), ["0-1"]);
    }

    #[test]
    fn asking_for_more_cores_than_there_are_names_the_fixes() {
        let t = Topology::synthetic(1, 1, 2, 1, false);
        for r in [
            req(None, None, Some(3)),
            req(Some(BindTo::Core), None, Some(3)),
            req(Some(BindTo::Socket), None, Some(3)),
        ] {
            let e = plan(&t, 1, &r).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("--cpus-per-rank 3 needs 3 cores"), "{msg}");
            assert!(msg.contains("only 2"), "{msg}");
            assert!(
                msg.contains("--oversubscribe") && msg.contains("--bind-to none"),
                "{msg}"
            );
        }
        let e = plan(&t, 3, &req(Some(BindTo::Core), None, None)).unwrap_err();
        assert!(
            e.to_string()
                .contains("3 ranks bound to one core each need 3 cores"),
            "{e}"
        );
        assert_eq!(
            plan(&t, 3, &req(Some(BindTo::None), None, Some(7))).unwrap(),
            Plan::unbound(3, None)
        );
    }

    #[test]
    fn oversubscribing_reuses_cores_round_robin() {
        let t = Topology::synthetic(1, 1, 2, 1, false);
        let mut r = req(Some(BindTo::Core), None, None);
        r.oversubscribe = true;
        let p = plan(&t, 5, &r).unwrap();
        assert_eq!(cpus(&p), ["0", "1", "0", "1", "0"]);
        r.cpus_per_rank = Some(3);
        let p = plan(&t, 2, &r).unwrap();
        assert_eq!(cpus(&p), ["0-1", "0-1"]);
        let t = Topology::synthetic(1, 1, 3, 1, false);
        r.cpus_per_rank = Some(2);
        let p = plan(&t, 3, &r).unwrap();
        assert_eq!(cpus(&p), ["0-1", "0,2", "1-2"]);
    }

    #[test]
    fn map_by_socket_deals_ranks_round_robin_across_sockets() {
        // 2 sockets x 4 cores, cores 0-3 on socket 0.
        let t = Topology::synthetic(2, 1, 4, 1, false);
        let p = plan(&t, 4, &req(None, Some(MapBy::Socket), None)).unwrap();
        assert_eq!(cpus(&p), ["0", "4", "1", "5"]);
        let p = plan(
            &t,
            4,
            &req(Some(BindTo::Core), Some(MapBy::Socket), Some(2)),
        )
        .unwrap();
        assert_eq!(cpus(&p), ["0-1", "4-5", "2-3", "6-7"]);
        // Bound to the socket: the whole socket.
        let p = plan(&t, 3, &req(Some(BindTo::Socket), Some(MapBy::Socket), None)).unwrap();
        assert_eq!(cpus(&p), ["0-3", "4-7", "0-3"]);
        assert_eq!(whats(&p), ["socket 0", "socket 1", "socket 0"]);
        // Mapped by core, bound to socket: the first 4 ranks share socket 0.
        let p = plan(&t, 5, &req(Some(BindTo::Socket), None, None)).unwrap();
        assert_eq!(cpus(&p), ["0-3", "0-3", "0-3", "0-3", "4-7"]);
        // A rank wider than a socket spans sockets; leftover cores are shared out last.
        let p = plan(&t, 1, &req(None, Some(MapBy::Socket), Some(5))).unwrap();
        assert_eq!(cpus(&p), ["0-4"]);
        let t = Topology::synthetic(2, 1, 3, 1, false);
        let p = plan(&t, 3, &req(None, Some(MapBy::Socket), Some(2))).unwrap();
        assert_eq!(cpus(&p), ["0-1", "3-4", "2,5"]);
    }

    #[test]
    fn numa_nodes_inside_sockets() {
        // 1 socket, 2 NUMA nodes of 2 cores, 2 threads per core numbered core by core.
        let t = Topology::synthetic(1, 2, 2, 2, false);
        let p = plan(&t, 2, &req(Some(BindTo::Numa), Some(MapBy::Numa), None)).unwrap();
        assert_eq!(cpus(&p), ["0-3", "4-7"]);
        assert_eq!(whats(&p), ["numa 0", "numa 1"]);
        let p = plan(&t, 1, &req(Some(BindTo::Numa), None, Some(4))).unwrap();
        assert_eq!(whats(&p), ["numa nodes 0-1"]);
        assert_eq!(cpus(&p), ["0-7"]);
        let p = plan(&t, 4, &req(None, Some(MapBy::Numa), None)).unwrap();
        assert_eq!(whats(&p), ["core 0", "core 2", "core 1", "core 3"]);
    }

    #[test]
    fn every_rank_gets_distinct_cores_whenever_they_fit() {
        for (s, n, c, t) in [(1, 1, 2, 1), (2, 2, 3, 2), (2, 1, 8, 1), (4, 2, 2, 4)] {
            let topo = Topology::synthetic(s, n, c, t, true);
            let cores = topo.cores().len();
            for cpr in 1..=3 {
                for map_by in [MapBy::Core, MapBy::Node, MapBy::Numa, MapBy::Socket] {
                    for ranks in 1..=cores / cpr {
                        let p = plan(
                            &topo,
                            ranks,
                            &req(Some(BindTo::Core), Some(map_by), Some(cpr)),
                        )
                        .unwrap();
                        let mut seen = std::collections::BTreeSet::new();
                        for b in p.ranks.iter().map(|b| b.as_ref().unwrap()) {
                            assert_eq!(b.cpus.cpus().len(), cpr * t, "{map_by:?} {b:?}");
                            for &cpu in b.cpus.cpus() {
                                assert!(
                                    seen.insert(cpu),
                                    "cpu {cpu} given twice: {map_by:?} {ranks} {cpr}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn without_a_topology_only_explicit_requests_fail() {
        let missing = || Err(hwloc::HwlocError::Missing("no libhwloc.so.15".into()));
        let e = plan_with(2, &req(Some(BindTo::Core), None, None), missing).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("apt-get install libhwloc15"), "{msg}");
        assert!(msg.contains("--bind-to none"), "{msg}");
        assert!(plan_with(2, &req(None, None, Some(1)), missing).is_err());
        let p = plan_with(2, &req(None, None, None), missing).unwrap();
        assert_eq!(cpus(&p), ["-", "-"]);
        assert!(p.note.unwrap().contains("hwloc"));
        let p = plan_with(
            2,
            &req(Some(BindTo::None), None, None),
            || -> Result<Topology, _> { panic!("--bind-to none must not read the topology") },
        )
        .unwrap();
        assert_eq!(p, Plan::unbound(2, None));
    }

    #[test]
    fn a_restricted_machine_binds_inside_its_cpus_and_names_the_real_cores() {
        let t = Topology::synthetic(1, 1, 4, 1, false)
            .restrict(&CpuSet::from_iter([2, 3]))
            .unwrap();
        let p = plan(&t, 2, &req(None, None, None)).unwrap();
        assert_eq!(cpus(&p), ["2", "3"]);
        assert_eq!(whats(&p), ["core 2", "core 3"]);
    }

    #[test]
    fn an_empty_topology_never_divides_by_zero() {
        let t = Topology::synthetic(0, 1, 1, 1, false);
        let mut r = req(Some(BindTo::Core), None, None);
        r.oversubscribe = true;
        assert!(plan(&t, 1, &r).is_err());
        assert!(plan(&t, 1, &req(None, None, None)).unwrap().note.is_some());
    }

    #[test]
    fn explicitness() {
        assert!(!req(None, None, None).explicit());
        assert!(req(None, None, Some(1)).explicit());
        assert!(req(None, Some(MapBy::Core), None).explicit());
        assert!(req(Some(BindTo::Core), None, None).explicit());
        assert!(!req(Some(BindTo::None), None, Some(2)).explicit());
        assert!(!req(Some(BindTo::None), None, None).needs_topology());
    }
}
