//! A machine's processors as binding needs them: each processing unit (a hardware thread, what
//! Linux calls a CPU) with its core, NUMA node and package (socket). Built from hwloc
//! ([`super::hwloc`]) on a real machine, or synthetically in tests.

use std::fmt;

/// One processing unit (hardware thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pu {
    /// The operating system's CPU number (what `sched_setaffinity` and `Cpus_allowed_list` use).
    pub cpu: usize,
    /// Logical index of its core (0.. in topology order).
    pub core: usize,
    /// Logical index of its NUMA node.
    pub numa: usize,
    /// Logical index of its package (socket).
    pub package: usize,
}

/// One core: its index, the CPUs of its hardware threads, and where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Core {
    /// Position in [`Topology::cores`] (0.. in topology order).
    pub index: usize,
    /// The core's number as its processing units give it (hwloc's logical index), kept when
    /// the topology is [restricted](Topology::restrict); reports show it.
    pub id: usize,
    /// The OS CPU numbers of its processing units, ascending.
    pub cpus: Vec<usize>,
    /// Logical index of its NUMA node (that of its first processing unit).
    pub numa: usize,
    /// Logical index of its package.
    pub package: usize,
}

/// The processing units of one machine that psyrun may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    cores: Vec<Core>,
}

/// Why a topology description is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// No processing unit at all.
    #[error("the topology has no processing unit")]
    Empty,
    /// The same CPU number twice.
    #[error("CPU {0} appears twice in the topology")]
    DuplicateCpu(usize),
}

impl Topology {
    /// A topology from its processing units, in any order. Cores are ordered by their logical
    /// index; a core's NUMA node and package are those of its first processing unit.
    pub fn new(mut pus: Vec<Pu>) -> Result<Topology, TopologyError> {
        if pus.is_empty() {
            return Err(TopologyError::Empty);
        }
        pus.sort_by_key(|p| p.cpu);
        if let Some(w) = pus.windows(2).find(|w| w[0].cpu == w[1].cpu) {
            return Err(TopologyError::DuplicateCpu(w[0].cpu));
        }
        let mut order: Vec<usize> = pus.iter().map(|p| p.core).collect();
        order.sort_unstable();
        order.dedup();
        let cores = order
            .into_iter()
            .enumerate()
            .map(|(index, core)| {
                let mine: Vec<&Pu> = pus.iter().filter(|p| p.core == core).collect();
                // `mine` is not empty: `core` was taken from a processing unit.
                let first = mine.first().map_or((0, 0), |p| (p.numa, p.package));
                Core {
                    index,
                    id: core,
                    cpus: mine.iter().map(|p| p.cpu).collect(),
                    numa: first.0,
                    package: first.1,
                }
            })
            .collect();
        Ok(Topology { cores })
    }

    /// A regular machine: `packages` sockets, each with `numa_per_package` NUMA nodes of
    /// `cores_per_numa` cores, each core with `pus_per_core` hardware threads. CPU numbers go
    /// core by core when `smt_interleaved` is false (core 0 = CPUs 0,1), and as Linux usually
    /// numbers x86 machines when it is true (core 0 = CPUs 0 and `cores`).
    #[cfg(test)]
    pub fn synthetic(
        packages: usize,
        numa_per_package: usize,
        cores_per_numa: usize,
        pus_per_core: usize,
        smt_interleaved: bool,
    ) -> Topology {
        let cores = packages * numa_per_package * cores_per_numa;
        let mut pus = Vec::new();
        for core in 0..cores {
            let numa = core / cores_per_numa.max(1);
            let package = numa / numa_per_package.max(1);
            for t in 0..pus_per_core {
                let cpu = if smt_interleaved {
                    t * cores + core
                } else {
                    core * pus_per_core + t
                };
                pus.push(Pu {
                    cpu,
                    core,
                    numa,
                    package,
                });
            }
        }
        Topology::new(pus).unwrap_or(Topology { cores: Vec::new() })
    }

    /// The same machine with only the CPUs in `allowed` (psyrun's own affinity, say): cores
    /// left without a CPU go; the others keep their [`Core::id`].
    pub fn restrict(&self, allowed: &CpuSet) -> Result<Topology, TopologyError> {
        let pus = self
            .cores
            .iter()
            .flat_map(|c| {
                c.cpus.iter().map(move |&cpu| Pu {
                    cpu,
                    core: c.id,
                    numa: c.numa,
                    package: c.package,
                })
            })
            .filter(|p| allowed.cpus().binary_search(&p.cpu).is_ok())
            .collect();
        Topology::new(pus)
    }

    /// The cores, in logical order.
    pub fn cores(&self) -> &[Core] {
        &self.cores
    }

    /// Every CPU number, ascending.
    #[cfg(test)]
    pub fn cpus(&self) -> CpuSet {
        CpuSet::from_iter(self.cores.iter().flat_map(|c| c.cpus.iter().copied()))
    }
}

/// A set of OS CPU numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(Vec<usize>);

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> CpuSet {
        let mut v: Vec<usize> = iter.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        CpuSet(v)
    }
}

impl CpuSet {
    /// The CPU numbers, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// The set as a kernel affinity mask: bit `c` of the words is CPU `c` (the layout
    /// `sched_setaffinity(2)` takes, of any length).
    pub fn to_mask(&self) -> Vec<libc::c_ulong> {
        let bits = libc::c_ulong::BITS as usize;
        let words = self.0.last().map_or(1, |&max| max / bits + 1);
        let mut mask = vec![0 as libc::c_ulong; words];
        for &cpu in &self.0 {
            mask[cpu / bits] |= 1 << (cpu % bits);
        }
        mask
    }

    /// Parses the kernel's list format (`0-3,8,10-11`; empty for no CPU).
    pub fn parse_list(text: &str) -> Option<CpuSet> {
        let text = text.trim();
        if text.is_empty() {
            return Some(CpuSet::default());
        }
        let mut out = Vec::new();
        for item in text.split(',') {
            match item.split_once('-') {
                Some((a, b)) => {
                    let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                    if a > b {
                        return None;
                    }
                    out.extend(a..=b);
                }
                None => out.push(item.parse().ok()?),
            }
        }
        Some(out.into_iter().collect())
    }
}

/// The kernel's list format, as in `/proc/self/status`'s `Cpus_allowed_list`: `0-3,8,10-11`.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_format_like_the_kernel() {
        let s = |v: &[usize]| CpuSet::from_iter(v.iter().copied()).to_string();
        assert_eq!(s(&[]), "");
        assert_eq!(s(&[0]), "0");
        assert_eq!(s(&[0, 1]), "0-1");
        assert_eq!(s(&[3, 0, 1, 2, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(s(&[1, 3, 5]), "1,3,5");
        for text in ["", "0", "0-1", "0-3,8,10-11", "1,3,5"] {
            assert_eq!(CpuSet::parse_list(text).unwrap().to_string(), text);
        }
        assert_eq!(CpuSet::parse_list("3-1"), None);
        assert_eq!(CpuSet::parse_list("x"), None);
    }

    #[test]
    fn masks_have_one_bit_per_cpu() {
        let m = CpuSet::from_iter([0, 2, 64, 65]).to_mask();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0], 0b101);
        assert_eq!(m[1], 0b11);
        assert_eq!(CpuSet::default().to_mask(), vec![0]);
    }

    #[test]
    fn synthetic_machines_have_the_shape_asked_for() {
        let t = Topology::synthetic(2, 2, 3, 2, true);
        assert_eq!(t.cores().len(), 12);
        assert_eq!(t.cores()[0].cpus, vec![0, 12]);
        assert_eq!(t.cores()[5].cpus, vec![5, 17]);
        assert_eq!((t.cores()[5].numa, t.cores()[5].package), (1, 0));
        assert_eq!((t.cores()[6].numa, t.cores()[6].package), (2, 1));
        assert_eq!(t.cpus().to_string(), "0-23");
        let t = Topology::synthetic(1, 1, 2, 2, false);
        assert_eq!(t.cores()[1].cpus, vec![2, 3]);
    }

    #[test]
    fn restricting_drops_cores_without_cpus() {
        let t = Topology::synthetic(1, 1, 3, 2, false);
        let r = t.restrict(&CpuSet::from_iter([1, 4, 5])).unwrap();
        assert_eq!(r.cores().len(), 2);
        assert_eq!(r.cores()[0].cpus, vec![1]);
        assert_eq!(r.cores()[1].cpus, vec![4, 5]);
        assert_eq!(r.cores()[1].index, 1);
        assert_eq!((r.cores()[0].id, r.cores()[1].id), (0, 2));
        assert_eq!(
            t.restrict(&CpuSet::from_iter([9])),
            Err(TopologyError::Empty)
        );
    }

    #[test]
    fn bad_descriptions_are_refused() {
        assert_eq!(Topology::new(vec![]), Err(TopologyError::Empty));
        let pu = Pu {
            cpu: 1,
            core: 0,
            numa: 0,
            package: 0,
        };
        assert_eq!(
            Topology::new(vec![pu, pu]),
            Err(TopologyError::DuplicateCpu(1))
        );
    }
}
