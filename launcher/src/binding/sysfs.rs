//! Reading this machine's [`Topology`] from the kernel's own description
//! (`/sys/devices/system`), where hwloc's library is not installed.
//!
//! Without a topology psyrun could not bind, and unbound ranks are what made small calls swing
//! from job to job: on the 2-core VM without libhwloc, 3–4 of 8 jobs ran their first size 30–50
//! times slower, both ranks on one core taking turns (`results/board-inline/`). Open MPI binds by
//! default everywhere because it carries its own hwloc; psyrun loads the system's and, without
//! it, reads the same facts Linux gives hwloc: the online CPUs, each one's core and package, and
//! each NUMA node's CPUs. Cores, packages and NUMA nodes are numbered in the order of their first
//! CPU, as hwloc's logical indices usually are; caches and anything else hwloc knows are not
//! needed to bind.

use super::topology::{CpuSet, Pu, Topology};
use std::collections::BTreeMap;
use std::path::Path;

/// Where Linux describes the CPUs and NUMA nodes.
pub const SYSTEM: &str = "/sys/devices/system";

/// This machine's topology as `/sys/devices/system` gives it, or why it could not be read.
pub fn load() -> Result<Topology, String> {
    load_from(Path::new(SYSTEM))
}

/// The topology described under `system` (`/sys/devices/system`, or a copy of its files): the
/// online CPUs (`cpu/online`), each one's package and core (`cpu/cpuN/topology/
/// physical_package_id` and `core_id`) and the NUMA nodes' CPUs (`node/nodeM/cpulist`). A CPU
/// without a core id is a core of its own; without a package or a NUMA node, it is in the first.
pub fn load_from(system: &Path) -> Result<Topology, String> {
    let read = |rel: &str| std::fs::read_to_string(system.join(rel)).ok();
    let online = read("cpu/online").ok_or("cannot read cpu/online")?;
    let cpus = CpuSet::parse_list(online.trim())
        .ok_or_else(|| format!("cpu/online is not a CPU list: {:?}", online.trim()))?;
    let id = |cpu: usize, what: &str| -> Option<i64> {
        read(&format!("cpu/cpu{cpu}/topology/{what}"))?
            .trim()
            .parse()
            .ok()
    };
    // Each CPU with its package and core, as the kernel numbers them; a CPU without a core id
    // gets a negative one of its own.
    let ids: Vec<(usize, i64, i64)> = cpus
        .cpus()
        .iter()
        .map(|&cpu| {
            let package = id(cpu, "physical_package_id").unwrap_or(0);
            let core = id(cpu, "core_id").unwrap_or(-1 - cpu as i64);
            (cpu, package, core)
        })
        .collect();
    let packages = in_order_of_first_cpu(ids.iter().map(|&(cpu, p, _)| (p, cpu)));
    let cores = in_order_of_first_cpu(ids.iter().map(|&(cpu, p, c)| ((p, c), cpu)));
    let nodes = numa_nodes(system);
    let pus = ids
        .iter()
        .map(|&(cpu, package, core)| Pu {
            cpu,
            core: cores[&(package, core)],
            numa: nodes
                .iter()
                .position(|n| n.cpus().contains(&cpu))
                .unwrap_or(0),
            package: packages[&package],
        })
        .collect();
    Topology::new(pus).map_err(|e| e.to_string())
}

/// Logical indices for the keys of `(key, cpu)` pairs: 0.. in the order of each key's lowest CPU.
fn in_order_of_first_cpu<K: Ord + Copy>(
    pairs: impl Iterator<Item = (K, usize)>,
) -> BTreeMap<K, usize> {
    let mut first: BTreeMap<K, usize> = BTreeMap::new();
    for (key, cpu) in pairs {
        let lowest = first.entry(key).or_insert(cpu);
        *lowest = (*lowest).min(cpu);
    }
    let mut keys: Vec<(usize, K)> = first.iter().map(|(&k, &cpu)| (cpu, k)).collect();
    keys.sort_unstable();
    keys.into_iter()
        .enumerate()
        .map(|(index, (_, key))| (key, index))
        .collect()
}

/// The CPUs of each NUMA node under `system/node` (`nodeM/cpulist`), in the order of the nodes'
/// numbers; none where the kernel has no NUMA support.
fn numa_nodes(system: &Path) -> Vec<CpuSet> {
    let Ok(entries) = std::fs::read_dir(system.join("node")) else {
        return Vec::new();
    };
    let mut nodes: Vec<(usize, CpuSet)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let number = e.file_name().to_str()?.strip_prefix("node")?.parse().ok()?;
            let list = std::fs::read_to_string(e.path().join("cpulist")).ok()?;
            Some((number, CpuSet::parse_list(list.trim())?))
        })
        .collect();
    nodes.sort_by_key(|(number, _)| *number);
    nodes.into_iter().map(|(_, cpus)| cpus).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `files` (path under the root, contents) into a fresh directory.
    fn system<P: AsRef<str>, T: AsRef<str>>(name: &str, files: &[(P, T)]) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("psyrun-sysfs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (path, text) in files {
            let p = root.join(path.as_ref());
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text.as_ref()).unwrap();
        }
        root
    }

    fn summary(t: &Topology) -> Vec<(usize, Vec<usize>, usize, usize)> {
        t.cores()
            .iter()
            .map(|c| (c.index, c.cpus.clone(), c.numa, c.package))
            .collect()
    }

    #[test]
    fn two_sockets_with_two_threads_a_core_and_a_numa_node_each() {
        // Linux numbers the first threads of every core first: CPUs 0-3 and 4-7 are siblings.
        let mut files = vec![("cpu/online".to_string(), "0-7\n".to_string())];
        for cpu in 0..8 {
            let (package, core) = ((cpu % 4) / 2, [0, 5, 0, 5][cpu % 4]);
            let at = format!("cpu/cpu{cpu}/topology");
            files.push((format!("{at}/physical_package_id"), format!("{package}\n")));
            files.push((format!("{at}/core_id"), format!("{core}\n")));
        }
        for (path, text) in [
            ("node/node0/cpulist", "0-1,4-5\n"),
            ("node/node1/cpulist", "2-3,6-7\n"),
            ("node/possible", "0-1\n"),
        ] {
            files.push((path.to_string(), text.to_string()));
        }
        let root = system("two-sockets", &files);
        let t = load_from(&root).unwrap();
        assert_eq!(
            summary(&t),
            [
                (0, vec![0, 4], 0, 0),
                (1, vec![1, 5], 0, 0),
                (2, vec![2, 6], 1, 1),
                (3, vec![3, 7], 1, 1),
            ]
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn cpus_without_core_or_numa_information_are_cores_of_their_own() {
        let root = system("bare", &[("cpu/online", "0,2-3\n")]);
        let t = load_from(&root).unwrap();
        assert_eq!(
            summary(&t),
            [(0, vec![0], 0, 0), (1, vec![2], 0, 0), (2, vec![3], 0, 0)]
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_missing_or_garbled_cpu_list_says_so() {
        let root = system("garbled", &[("cpu/online", "zero to one\n")]);
        let e = load_from(&root).unwrap_err();
        assert!(e.contains("cpu/online") && e.contains("zero to one"), "{e}");
        let e = load_from(&root.join("nowhere")).unwrap_err();
        assert!(e.contains("cannot read cpu/online"), "{e}");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn this_machine_reads_as_hwloc_reads_it() {
        // Both inside this process's CPUs: hwloc leaves out those outside its affinity.
        let allowed = super::super::own_cpus().expect("/proc/self/status lists our CPUs");
        let ours = load().expect("/sys/devices/system describes this machine");
        let ours = ours.restrict(&allowed).unwrap();
        assert_eq!(ours.cpus(), allowed);
        match super::super::hwloc::load() {
            Ok(theirs) => assert_eq!(summary(&ours), summary(&theirs.restrict(&allowed).unwrap())),
            Err(e) => eprintln!("hwloc not compared ({e})"),
        }
    }
}
