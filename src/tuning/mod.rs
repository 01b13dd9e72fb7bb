//! Which algorithm runs a collective. In order of precedence: the per-call choice
//! ([`crate::Group::with_algo`]); `PSY_ALGO` (for example
//! `PSY_ALGO=allreduce:ring,broadcast:pipeline`); the tuning file `psybench tune` measured on
//! this machine ([`rules`], `PSY_TUNING`); and the built-in choice by message size and layout
//! ([`Thresholds`]).

pub mod rules;

use crate::error::{Error, Result};
use crate::schedule::{Algo, Collective, HierAlgos, Hosts};
/// The largest part a rank of a group of `size` ranks publishes on its node board, with or
/// without data areas (a board has them unless its ranks share cores or `/dev/shm` had no room).
pub use crate::transport::shm::board::largest_part_for as board_largest_part;
use crate::transport::shm::board::{slot_data_for, SLOT_DATA};
pub use rules::{Rules, Scope};
use std::mem::discriminant;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most bytes per rank a collective may have to run on the node board ([`Algo::Flat`]):
/// the largest part of a board with data areas on the smallest groups (1 MiB on 2 ranks);
/// larger groups' boards hold less ([`board_largest_part`]).
pub const FLAT_MAX_BYTES: usize = 1 << 20;

/// The most bytes a 2-rank broadcast runs on a board with data areas: at 256 KiB it took 0.65 of
/// the time of the pipeline over the rings, at 512 KiB-1 MiB 0.98-1.20 (`results/board-pair-parts/`).
const PAIR_BROADCAST_MAX: usize = 256 << 10;
/// The most bytes a rank with which a 2-rank all-gather runs on a board with data areas: at 128 KiB a rank it
/// took 0.85 of the time of the ring, at 256-512 KiB 0.96-1.06 (`results/board-pair-parts/`).
const PAIR_ALLGATHER_MAX: usize = 128 << 10;
/// The most bytes a 2-rank reduce-scatter runs on a board with data areas: 16 KiB took 0.81-0.83
/// of the ring's time over 16 jobs (1.04 in a shorter run), 8 KiB 0.80, 32 KiB 0.90-1.09
/// (`results/board-large-parts/`); 64-128 KiB 1.30-1.52, and 1.07-1.26 publishing only the
/// peer's chunk (`results/board-pair-parts/`).
const PAIR_REDUCE_SCATTER_MAX: usize = 16 << 10;

/// The most bytes per rank with which `coll` runs on the node board of a group of `size` ranks
/// by default, on a board whose largest part is `largest_part` bytes (the board's `largest_part`),
/// as measured on 2 ranks. With slots alone (`results/board-slots/`): all-reduce and broadcast
/// one slot's data (16 KiB for 2 ranks, 8 KiB for 3–4, 4 KiB beyond: no rank reads more than
/// 32 KiB of its peers' parts); all-gather, gather and reduce half a slot, at least 4 KiB (at
/// 16 KiB the schedules over the rings were as fast or faster); reduce-scatter, scatter and
/// all-to-all 4 KiB: each rank there publishes its whole buffer of which every peer reads a
/// chunk, more than the schedules over the rings send. On 2 ranks whose parts rotate through
/// data areas (`results/board-large-parts/`: 0.43–0.81 of the rings' time at 24–128 KiB;
/// `results/board-pair-parts/`), all-reduce runs on the board up to the largest part (1 MiB),
/// broadcast up to [`PAIR_BROADCAST_MAX`], all-gather up to [`PAIR_ALLGATHER_MAX`] a rank and
/// reduce-scatter up to [`PAIR_REDUCE_SCATTER_MAX`], none beyond the largest part; larger groups
/// keep the slots' limits (their reads grow with the group, and this host has no cores to
/// measure them).
pub fn flat_max_bytes(coll: Collective, size: usize, largest_part: usize) -> usize {
    let slot = slot_data_for(size);
    let pair = size == 2 && largest_part > slot;
    match coll {
        Collective::AllReduce | Collective::Barrier if pair => largest_part,
        Collective::Broadcast { .. } if pair => PAIR_BROADCAST_MAX.min(largest_part),
        Collective::AllReduce | Collective::Broadcast { .. } | Collective::Barrier => slot,
        Collective::AllGather if pair => PAIR_ALLGATHER_MAX.min(largest_part),
        Collective::ReduceScatter if pair => PAIR_REDUCE_SCATTER_MAX.min(largest_part),
        Collective::AllGather | Collective::Gather { .. } | Collective::Reduce { .. } => {
            (slot / 2).max(SLOT_DATA)
        }
        Collective::ReduceScatter | Collective::Scatter { .. } | Collective::AllToAll => SLOT_DATA,
    }
}

/// Message-size boundaries, in bytes of one rank's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// All-reduce up to this size uses recursive doubling (fewest rounds) over shared memory on
    /// more than two ranks.
    pub allreduce_recursive_doubling_max: usize,
    /// The same on two ranks over shared memory; on two ranks over the network recursive
    /// doubling runs at every size ([`Tuning::by_size`]).
    pub pair_allreduce_recursive_doubling_max: usize,
    /// The same over the network ([`Scope::Net`]) on more than two ranks.
    pub net_allreduce_recursive_doubling_max: usize,
    /// All-reduce up to this size (and above the previous) uses Rabenseifner; larger uses ring.
    pub allreduce_rabenseifner_max: usize,
    /// Broadcast up to this size uses a binomial tree; larger uses the pipelined chain.
    pub broadcast_binomial_max: usize,
    /// Scatter and gather up to this total size use a binomial tree; larger go direct (linear).
    pub scatter_gather_binomial_max: usize,
    /// All-reduce of at least this size goes hierarchical on groups spanning hosts
    /// ([`Tuning::prefers_hier`]); `usize::MAX` (the default) means never.
    pub allreduce_hier_min: usize,
    /// All-gather of at most this size (one rank's chunk) goes hierarchical on groups whose hosts
    /// hold consecutive ranks; 0 (the default) means never.
    pub allgather_hier_max: usize,
}

/// The defaults: first guesses from the usual alpha-beta reasoning, to be replaced by measurement.
pub const DEFAULT_THRESHOLDS: Thresholds = Thresholds {
    allreduce_recursive_doubling_max: 8 << 10,
    // Measured on 2 ranks (results/tcp-allreduce-algos/, 7 rounds alternated): recursive
    // doubling 0.89-0.98 of Rabenseifner's time at 20-64 KiB, 0.98-1.09 at 96-256 KiB.
    pair_allreduce_recursive_doubling_max: 64 << 10,
    // Over loopback TCP on 4 ranks of 2 cores (results/tcp-allreduce-algos/) recursive doubling
    // took 0.45-0.65 of Rabenseifner's time up to 32 KiB, 0.85 at 128 KiB and 0.81 at 512 KiB,
    // with alpha inflated by the sharing of cores. The alpha-beta crossover,
    // n < log p * alpha / (beta * (log p - 2 (p-1)/p)), falls from 4 alpha/beta on 4 ranks to
    // 1.5 alpha/beta on 64: 128 KiB is about 4 alpha/beta for loopback TCP's alpha of 8 us
    // and beta of 0.29 ns per byte (the 2-rank sweep's 8 B and 8 MiB).
    net_allreduce_recursive_doubling_max: 128 << 10,
    allreduce_rabenseifner_max: 512 << 10,
    broadcast_binomial_max: 64 << 10,
    scatter_gather_binomial_max: 64 << 10,
    // Measured on the SSH test cluster (results/hier-cluster/): hier slower there for every
    // all-reduce, and for all-gather on consecutive ranks; see Tuning::prefers_hier.
    allreduce_hier_min: usize::MAX,
    allgather_hier_max: 0,
};

/// A tuning file as loaded: where it came from, and its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuningFile {
    /// The file's path.
    pub path: PathBuf,
    /// Its rules.
    pub rules: Rules,
}

/// The algorithm policy of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    overrides: Vec<(Collective, Algo)>,
    /// The size boundaries used when neither an override nor the tuning file decides.
    pub thresholds: Thresholds,
    /// The tuning file, if one was loaded.
    pub file: Option<Arc<TuningFile>>,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            overrides: Vec::new(),
            thresholds: DEFAULT_THRESHOLDS,
            file: None,
        }
    }
}

/// `PSY_TUNING` values that mean "no tuning file".
const NO_FILE: [&str; 3] = ["off", "none", ""];

/// Where psyne looks for a tuning file when `PSY_TUNING` is unset, in order:
/// `$XDG_CONFIG_HOME/psyne/tuning` (or `$HOME/.config/psyne/tuning`), then
/// `/etc/psyne/tuning`. `get` is the environment's lookup.
pub fn default_tuning_paths(get: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let config = get("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| get("HOME").map(|h| Path::new(&h).join(".config")));
    config
        .map(|c| c.join("psyne").join("tuning"))
        .into_iter()
        .chain([PathBuf::from("/etc/psyne/tuning")])
        .collect()
}

/// The tuning file `get`'s environment names: `PSY_TUNING=FILE` (which must exist), none for
/// `PSY_TUNING=off`, else the first of [`default_tuning_paths`] that exists. A file that exists
/// but does not parse is an error naming its line, wherever it was found.
pub fn tuning_file_with(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<TuningFile>> {
    let path = match get(crate::names::TUNING) {
        Some(v) if NO_FILE.contains(&v.trim()) => return Ok(None),
        Some(v) => PathBuf::from(v),
        None => match default_tuning_paths(get).into_iter().find(|p| p.is_file()) {
            Some(p) => p,
            None => return Ok(None),
        },
    };
    let rules = Rules::load(&path)?;
    Ok(Some(TuningFile { path, rules }))
}

impl Tuning {
    /// Parses a `PSY_ALGO` value: comma-separated `collective:algorithm` pairs. Collective names
    /// may contain underscores (`all_reduce` = `allreduce`); `bcast` means broadcast.
    pub fn parse(spec: &str) -> Result<Tuning> {
        let mut t = Tuning::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (c, a) = item.split_once(':').ok_or_else(|| {
                Error::config(format!(
                    "PSY_ALGO entry `{item}` is not `collective:algorithm`, e.g. allreduce:ring"
                ))
            })?;
            let coll = rules::parse_coll(c).ok_or_else(|| {
                let all: Vec<_> = rules::NAMES.iter().map(|(n, _)| *n).collect();
                Error::config(format!(
                    "PSY_ALGO names an unknown collective `{c}`; known: {}",
                    all.join(", ")
                ))
            })?;
            let cname = rules::coll_name(coll);
            let algo = Algo::parse(a.trim())
                .filter(|a| Algo::for_collective(coll).contains(a))
                .ok_or_else(|| {
                    let ok: Vec<_> = Algo::for_collective(coll)
                        .iter()
                        .map(|a| a.name())
                        .collect();
                    Error::config(format!(
                        "PSY_ALGO: `{a}` is not an algorithm for {cname}; choose one of: {}",
                        ok.join(", ")
                    ))
                })?;
            t.overrides
                .retain(|(k, _)| discriminant(k) != discriminant(&coll));
            t.overrides.push((coll, algo));
        }
        Ok(t)
    }

    /// The policy `get`'s environment sets: `PSY_ALGO`'s overrides and the tuning file
    /// ([`tuning_file_with`]).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Tuning> {
        let mut t = match get(crate::names::ALGO) {
            Some(spec) => Tuning::parse(&spec)?,
            None => Tuning::default(),
        };
        t.file = tuning_file_with(get)?.map(Arc::new);
        Ok(t)
    }

    /// [`Tuning::from_lookup`] on this process's environment.
    pub fn from_env() -> Result<Tuning> {
        Tuning::from_lookup(&|name| std::env::var(name).ok())
    }

    /// The algorithm forced for `coll`, if any.
    pub fn forced(&self, coll: Collective) -> Option<Algo> {
        self.overrides
            .iter()
            .find(|(k, _)| discriminant(k) == discriminant(&coll))
            .map(|(_, a)| *a)
    }

    /// The algorithm for `coll` when one rank's buffer is `bytes` long in a group of `size`: the
    /// forced one, else [`Tuning::by_size`] in `scope`.
    pub fn choose(&self, coll: Collective, bytes: usize, size: usize, scope: Scope) -> Algo {
        self.forced(coll)
            .unwrap_or_else(|| self.by_size(coll, bytes, size, scope))
    }

    /// Whether a group spread over `hosts` should run `coll` of `bytes` per rank hierarchically
    /// ([`Algo::Hier`]) when nothing is forced.
    ///
    /// Only when there is a hierarchy to use: at least two hosts, at least two ranks on some host
    /// ([`Hosts::is_hierarchical`]), and shared memory inside hosts (`shm_inside`: no rank has
    /// `PSY_TRANSPORT=tcp`). Then, by default, only where it was measured faster across real SSH
    /// hosts (`results/hier-cluster/`: 4 hosts × 2 ranks, network namespaces of one 2-core
    /// machine, so TCP between hosts ran at memory speed):
    ///
    /// - all-gather on hosts holding interleaved ranks (not [`Hosts::contiguous`], e.g. psyrun's
    ///   `--map-by node`), every size: the flat ring then crosses a host at every step; hier
    ///   took 0.55-0.98 of the flat time from 32 B to 16 MiB.
    /// - all-gather on hosts of consecutive ranks up to [`Thresholds::allgather_hier_max`]
    ///   (default 0: never; measured 0.98-1.77 of the flat time).
    /// - all-reduce from [`Thresholds::allreduce_hier_min`] (default never: 1.0-1.9 of the best
    ///   flat time at every size, consecutive or interleaved; flat recursive doubling,
    ///   Rabenseifner and ring keep every rank busy, while hier's three stages run one after the
    ///   other and leave non-leaders idle).
    /// - broadcast never (1.3-1.7 of the flat pipeline from 32 KiB up).
    ///
    /// Where the network is much slower than shared memory (real clusters), sending each host's
    /// data across once should pay for large all-reduces; set the two thresholds from a psybench
    /// run there (`psybench allreduce --algo ring,hier`).
    pub fn prefers_hier(
        &self,
        coll: Collective,
        bytes: usize,
        hosts: &Hosts,
        shm_inside: bool,
    ) -> bool {
        if !shm_inside || !hosts.is_hierarchical() {
            return false;
        }
        let t = &self.thresholds;
        let interleaved = !hosts.contiguous();
        match coll {
            Collective::AllReduce => bytes >= t.allreduce_hier_min,
            Collective::AllGather => {
                interleaved || (t.allgather_hier_max > 0 && bytes <= t.allgather_hier_max)
            }
            _ => false,
        }
    }

    /// The flat algorithm for `coll` of `bytes` per rank in a group of `size` whose ranks talk
    /// over `scope`, by size alone (overrides ignored): what runs when nothing is forced, and
    /// what the phases of a hierarchical collective run.
    ///
    /// Over the network, all-reduce on two ranks is recursive doubling at every size: one
    /// exchange of the whole buffer where Rabenseifner and ring make two of half, the same bytes
    /// in half the messages (over loopback TCP 0.5-0.6 of Rabenseifner's time at 8 B-32 KiB,
    /// 0.8 at 128-512 KiB, 0.8-1.05 from 2 to 32 MiB: results/tcp-allreduce-algos/). Over
    /// shared memory a message costs less and the reduction more: recursive doubling reduces
    /// the whole buffer on both ranks, the others half on each, which pays only up to 64 KiB
    /// (at 2 MiB it takes 1.6 of Rabenseifner's time).
    pub fn by_size(&self, coll: Collective, bytes: usize, size: usize, scope: Scope) -> Algo {
        let t = &self.thresholds;
        let recursive_doubling_max = match scope {
            Scope::Shm if size <= 2 => t.pair_allreduce_recursive_doubling_max,
            Scope::Shm => t.allreduce_recursive_doubling_max,
            Scope::Net if size <= 2 => usize::MAX,
            Scope::Net => t.net_allreduce_recursive_doubling_max,
        };
        match coll {
            Collective::AllReduce if bytes <= recursive_doubling_max => Algo::RecursiveDoubling,
            Collective::AllReduce if bytes <= t.allreduce_rabenseifner_max => Algo::Rabenseifner,
            Collective::AllReduce => Algo::Ring,
            Collective::Broadcast { .. } if bytes <= t.broadcast_binomial_max => Algo::Binomial,
            Collective::Broadcast { .. } => Algo::Pipeline,
            Collective::Scatter { .. } | Collective::Gather { .. }
                if bytes <= t.scatter_gather_binomial_max =>
            {
                Algo::Binomial
            }
            Collective::Scatter { .. } | Collective::Gather { .. } => Algo::Linear,
            other => Algo::for_collective(other)[0],
        }
    }
}

/// What the choice of an algorithm depends on besides the call: the shape of the group.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    /// Ranks in the group.
    pub(crate) size: usize,
    /// Which ranks share a host.
    pub(crate) hosts: Hosts,
    /// The largest part a rank publishes on the group's node board (the board's
    /// `largest_part`), if it has one (every rank on this host, shared memory allowed).
    pub(crate) board_part: Option<usize>,
    /// Whether every rank allows shared memory, so ranks sharing a host talk over it.
    pub(crate) shm_inside: bool,
}

impl Shape {
    /// Which of a tuning file's scopes the group is in.
    pub(crate) fn scope(&self) -> Scope {
        if self.hosts.count() == 1 && self.shm_inside {
            Scope::Shm
        } else {
            Scope::Net
        }
    }
}

impl Tuning {
    /// The algorithm for `coll` of `bytes` per rank: the per-call choice `forced`, else
    /// `PSY_ALGO`'s, else the tuning file's, else the automatic one; checked to implement
    /// `coll`. [`Algo::Hier`] on a group where it would equal the flat schedule (one host, or one
    /// rank per host) becomes the automatic flat choice, and a file's [`Algo::Flat`] on a group
    /// without a node board (or beyond its slot) the choice by size. This is the one place an
    /// algorithm is chosen.
    pub(crate) fn select(
        &self,
        coll: Collective,
        forced: Option<Algo>,
        bytes: usize,
        shape: &Shape,
    ) -> Result<Algo> {
        let algo = match forced.or_else(|| self.forced(coll)) {
            Some(a) => {
                a.check_implements(coll)?;
                a
            }
            None => match self.file_choice(coll, bytes, shape) {
                Some(Algo::Flat) if !shape.board_part.is_some_and(|most| bytes <= most) => {
                    return Ok(self.by_size(coll, bytes, shape.size, shape.scope()))
                }
                Some(a) => a,
                None if self.prefers_hier(coll, bytes, &shape.hosts, shape.shm_inside) => {
                    Algo::Hier
                }
                None => return Ok(self.automatic_flat(coll, bytes, shape)),
            },
        };
        if algo == Algo::Hier && !shape.hosts.is_hierarchical() {
            return Ok(self.automatic_flat(coll, bytes, shape));
        }
        Ok(algo)
    }

    /// What the tuning file, if any, gives `coll` of `bytes` per rank on a group of `shape`.
    fn file_choice(&self, coll: Collective, bytes: usize, shape: &Shape) -> Option<Algo> {
        self.file
            .as_ref()?
            .rules
            .lookup(shape.scope(), shape.size, coll, bytes)
    }

    /// The automatic choice among the flat algorithms: the node board for a small collective on
    /// one host (every rank publishes at most `bytes`, see `executor::flat`), else by size.
    fn automatic_flat(&self, coll: Collective, bytes: usize, shape: &Shape) -> Algo {
        match shape.board_part {
            Some(most) if bytes <= flat_max_bytes(coll, shape.size, most) => Algo::Flat,
            _ => self.by_size(coll, bytes, shape.size, shape.scope()),
        }
    }

    /// The algorithms of the phases of a hierarchical `coll` whose whole buffer is `bytes`.
    pub(crate) fn hier_algos(&self, coll: Collective, bytes: usize, hosts: &Hosts) -> HierAlgos {
        let leaders = self.by_size(coll, bytes, hosts.count(), Scope::Net);
        let bcast = Collective::Broadcast { root: 0 };
        let local = self.by_size(bcast, bytes, hosts.max_local(), Scope::Shm);
        HierAlgos {
            leaders: match coll {
                Collective::AllGather => Algo::Ring,
                _ => leaders,
            },
            local,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_picks_the_algorithm() {
        let t = Tuning::default();
        assert_eq!(
            t.choose(Collective::AllReduce, 8, 4, Scope::Shm),
            Algo::RecursiveDoubling
        );
        assert_eq!(
            t.choose(Collective::AllReduce, 100 << 10, 4, Scope::Shm),
            Algo::Rabenseifner
        );
        assert_eq!(
            t.choose(Collective::AllReduce, 64 << 20, 4, Scope::Shm),
            Algo::Ring
        );
        assert_eq!(
            t.choose(Collective::Broadcast { root: 2 }, 1 << 20, 4, Scope::Shm),
            Algo::Pipeline
        );
    }

    #[test]
    fn over_the_network_recursive_doubling_runs_further() {
        let t = Tuning::default();
        let ar = Collective::AllReduce;
        let (shm, net) = (Scope::Shm, Scope::Net);
        // Two ranks: one exchange of the whole buffer at every size over the network only.
        for bytes in [8, 16 << 10, 1 << 20, 64 << 20] {
            assert_eq!(
                t.by_size(ar, bytes, 2, net),
                Algo::RecursiveDoubling,
                "{bytes}"
            );
        }
        // Over shared memory up to 64 KiB.
        assert_eq!(t.by_size(ar, 64 << 10, 2, shm), Algo::RecursiveDoubling);
        assert_eq!(t.by_size(ar, (64 << 10) + 4, 2, shm), Algo::Rabenseifner);
        assert_eq!(t.by_size(ar, 64 << 20, 2, shm), Algo::Ring);
        // More ranks: up to the net threshold, then as over shared memory.
        let most = t.thresholds.net_allreduce_recursive_doubling_max;
        assert!(most > t.thresholds.allreduce_recursive_doubling_max);
        assert_eq!(t.by_size(ar, most, 4, net), Algo::RecursiveDoubling);
        assert_eq!(t.by_size(ar, most + 4, 4, net), Algo::Rabenseifner);
        assert_eq!(t.by_size(ar, most, 4, shm), Algo::Rabenseifner);
        assert_eq!(t.by_size(ar, 64 << 20, 8, net), Algo::Ring);
        // The group's shape decides the scope.
        let tcp = shape(2, Hosts::single(2), false);
        assert_eq!(
            t.select(ar, None, 2 << 20, &tcp).unwrap(),
            Algo::RecursiveDoubling
        );
        let board = shape(2, Hosts::single(2), true);
        assert_eq!(t.select(ar, None, 2 << 20, &board).unwrap(), Algo::Ring);
    }

    #[test]
    fn hierarchy_is_preferred_by_layout_and_size() {
        let t = Tuning::default();
        let blocks = Hosts::blocks(&[2, 2, 2, 2]);
        let dealt = Hosts::from_keys(&[0, 1, 0, 1]);
        let ar = Collective::AllReduce;
        let bc = Collective::Broadcast { root: 1 };
        let ag = Collective::AllGather;
        // The defaults: all-gather on interleaved hosts only.
        assert!(t.prefers_hier(ag, 8, &dealt, true));
        assert!(t.prefers_hier(ag, 64 << 20, &dealt, true));
        assert!(!t.prefers_hier(ag, 0, &blocks, true));
        assert!(!t.prefers_hier(ag, 1024, &blocks, true));
        for bytes in [8, 64 << 10, 64 << 20] {
            assert!(!t.prefers_hier(ar, bytes, &blocks, true));
            assert!(!t.prefers_hier(ar, bytes, &dealt, true));
            assert!(!t.prefers_hier(bc, bytes, &dealt, true));
        }
        // Thresholds tuned for a cluster turn it on by size.
        let mut tuned = Tuning::default();
        tuned.thresholds.allreduce_hier_min = 64 << 10;
        tuned.thresholds.allgather_hier_max = 256 << 10;
        assert!(tuned.prefers_hier(ar, 64 << 10, &blocks, true));
        assert!(!tuned.prefers_hier(ar, (64 << 10) - 1, &blocks, true));
        assert!(tuned.prefers_hier(ag, 256 << 10, &blocks, true));
        assert!(!tuned.prefers_hier(ag, (256 << 10) + 1, &blocks, true));
        assert!(!tuned.prefers_hier(bc, 64 << 20, &blocks, true));
        // No hierarchy, no shared memory, or a collective without a hierarchical form.
        assert!(!t.prefers_hier(ar, 64 << 20, &Hosts::single(8), true));
        assert!(!t.prefers_hier(ar, 64 << 20, &Hosts::blocks(&[1, 1, 1]), true));
        assert!(!t.prefers_hier(ar, 64 << 20, &blocks, false));
        assert!(!t.prefers_hier(Collective::ReduceScatter, 64 << 20, &dealt, true));
    }

    fn shape(size: usize, hosts: Hosts, shm: bool) -> Shape {
        Shape {
            size,
            board_part: (shm && hosts.count() == 1).then(|| board_largest_part(size, true)),
            hosts,
            shm_inside: shm,
        }
    }

    fn with_file(text: &str) -> Tuning {
        Tuning {
            file: Some(Arc::new(TuningFile {
                path: "t".into(),
                rules: Rules::parse(text, "t").unwrap(),
            })),
            ..Tuning::default()
        }
    }

    #[test]
    fn the_file_decides_after_overrides_and_before_the_defaults() {
        let file =
            "[shm 2]\nallreduce 1K flat\nallreduce max ring\n[net 2]\nallreduce 64 binomial\n";
        let t = with_file(file);
        let ar = Collective::AllReduce;
        let one_host = shape(4, Hosts::single(4), true);
        let tcp = shape(4, Hosts::single(4), false);
        let two_hosts = shape(4, Hosts::blocks(&[2, 2]), true);
        let pick = |t: &Tuning, bytes, s: &Shape| t.select(ar, None, bytes, s).unwrap();
        assert_eq!(pick(&t, 1024, &one_host), Algo::Flat);
        // By default 2 KiB is on the board and 8 bytes over TCP recursive doubling.
        assert_eq!(pick(&t, 2048, &one_host), Algo::Ring);
        assert_eq!(pick(&Tuning::default(), 2048, &one_host), Algo::Flat);
        assert_eq!(pick(&t, 8, &tcp), Algo::Binomial);
        assert_eq!(pick(&t, 8, &two_hosts), Algo::Binomial);
        // Beyond the net section's lines: the defaults.
        assert_eq!(pick(&t, 128, &tcp), Algo::RecursiveDoubling);
        // The per-call choice and PSY_ALGO win over the file.
        assert_eq!(
            t.select(ar, Some(Algo::Rabenseifner), 8, &one_host)
                .unwrap(),
            Algo::Rabenseifner
        );
        let mut env = Tuning::parse("allreduce:rd").unwrap();
        env.file = t.file.clone();
        assert_eq!(pick(&env, 2048, &one_host), Algo::RecursiveDoubling);
        // A file's flat on a group without a board is the choice by size.
        let flat_everywhere = with_file("[net 1]\nallreduce 4K flat\n");
        assert_eq!(pick(&flat_everywhere, 8, &tcp), Algo::RecursiveDoubling);
        // ... and beyond the largest part of the group's board too (64 KiB on 4 ranks; the
        // slot's 8 KiB on a board without data areas).
        let flat_far = with_file("[shm 2]\nallreduce 128K flat\n");
        assert_eq!(pick(&flat_far, 64 << 10, &one_host), Algo::Flat);
        assert_ne!(pick(&flat_far, (64 << 10) + 4, &one_host), Algo::Flat);
        let mut no_areas = one_host.clone();
        no_areas.board_part = Some(board_largest_part(4, false));
        assert_eq!(pick(&flat_far, 8 << 10, &no_areas), Algo::Flat);
        assert_ne!(pick(&flat_far, 16 << 10, &no_areas), Algo::Flat);
    }

    #[test]
    fn the_board_takes_calls_as_large_as_its_slots_which_shrink_as_groups_grow() {
        let t = Tuning::default();
        let (ar, ag, bc) = (
            Collective::AllReduce,
            Collective::AllGather,
            Collective::Broadcast { root: 0 },
        );
        // (ranks, data areas, KiB of all-reduce, of broadcast, of all-gather, of reduce-scatter)
        let cases = [
            (2, true, 1024, 256, 128, 16),
            (2, false, 16, 16, 8, 4),
            (3, true, 8, 8, 4, 4),
            (4, true, 8, 8, 4, 4),
            (8, true, 4, 4, 4, 4),
        ];
        for (size, areas, whole, bcast, half, chunked) in cases {
            let (whole, bcast) = (whole << 10, bcast << 10);
            let (half, chunked) = (half << 10, chunked << 10);
            let mut one_host = shape(size, Hosts::single(size), true);
            one_host.board_part = Some(board_largest_part(size, areas));
            for (coll, most) in [(ar, whole), (bc, bcast), (ag, half)] {
                let pick = |bytes| t.select(coll, None, bytes, &one_host).unwrap();
                assert_eq!(
                    pick(most),
                    Algo::Flat,
                    "{coll} on {size} ranks, {most} bytes"
                );
                assert_ne!(
                    pick(most + 4),
                    Algo::Flat,
                    "{coll} on {size} ranks, {most} + 4"
                );
            }
            // Where each rank reads a chunk of what the others publish: 4 KiB (16 KiB on 2
            // ranks with areas), unless a tuning file says otherwise (up to the largest part,
            // not beyond).
            let rs = Collective::ReduceScatter;
            let pick = |bytes| t.select(rs, None, bytes, &one_host).unwrap();
            assert_eq!(pick(chunked), Algo::Flat, "{size} ranks, {chunked}");
            assert_ne!(pick(chunked + 4), Algo::Flat, "{size} ranks, {chunked} + 4");
            let most = board_largest_part(size, areas);
            let file = with_file(&format!(
                "[shm {size}]\nreducescatter {FLAT_MAX_BYTES} flat\n"
            ));
            assert_eq!(file.select(rs, None, most, &one_host).unwrap(), Algo::Flat);
            if most < FLAT_MAX_BYTES {
                let past = file.select(rs, None, most + 4, &one_host).unwrap();
                assert_ne!(past, Algo::Flat, "{size} ranks, past {most}");
            }
        }
        let many = shape(64, Hosts::single(64), true);
        assert_eq!(
            t.select(Collective::AllReduce, None, 4096, &many).unwrap(),
            Algo::Flat
        );
        assert_ne!(
            t.select(Collective::AllReduce, None, 4100, &many).unwrap(),
            Algo::Flat
        );
        // No group's board holds more than the bound `psybench tune` caps its rules at.
        assert!((2..300).all(|n| board_largest_part(n, true) <= FLAT_MAX_BYTES));
        assert_eq!(board_largest_part(2, true), FLAT_MAX_BYTES);
    }

    #[test]
    fn the_tuning_file_is_found_named_or_turned_off() {
        let dir = std::env::temp_dir().join(format!("psyne-tuning-{}", std::process::id()));
        let config = dir.join("psyne");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("tuning"), "[shm 2]\nallreduce max ring\n").unwrap();
        let xdg = dir.to_string_lossy().into_owned();
        let lookup = |tuning: Option<&str>| {
            let xdg = xdg.clone();
            let tuning = tuning.map(str::to_string);
            move |name: &str| match name {
                "XDG_CONFIG_HOME" => Some(xdg.clone()),
                "PSY_TUNING" => tuning.clone(),
                _ => None,
            }
        };
        let found = tuning_file_with(&lookup(None)).unwrap().unwrap();
        assert_eq!(found.path, config.join("tuning"));
        assert!(tuning_file_with(&lookup(Some("off"))).unwrap().is_none());
        let named = config.join("tuning").to_string_lossy().into_owned();
        assert!(tuning_file_with(&lookup(Some(&named))).unwrap().is_some());
        let e = tuning_file_with(&lookup(Some("/nonexistent/tuning"))).unwrap_err();
        assert!(e.message().contains("/nonexistent/tuning"), "{e}");
        std::fs::write(config.join("tuning"), "[shm 2]\nallreduce max nothing\n").unwrap();
        let e = tuning_file_with(&lookup(None)).unwrap_err();
        assert!(e.message().contains("tuning:2:"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            default_tuning_paths(&|n| (n == "HOME").then(|| "/home/u".to_string())),
            [
                PathBuf::from("/home/u/.config/psyne/tuning"),
                PathBuf::from("/etc/psyne/tuning")
            ]
        );
    }

    #[test]
    fn overrides_win_and_bad_specs_name_the_fix() {
        let t = Tuning::parse("all_reduce:ring, bcast:pipeline").unwrap();
        assert_eq!(
            t.choose(Collective::AllReduce, 8, 4, Scope::Shm),
            Algo::Ring
        );
        assert_eq!(
            t.choose(Collective::Broadcast { root: 1 }, 8, 4, Scope::Net),
            Algo::Pipeline
        );
        let e = Tuning::parse("allreduce:pairwise").unwrap_err();
        assert!(e.message().contains("ring"), "{e}");
        let e = Tuning::parse("allsum:ring").unwrap_err();
        assert!(e.message().contains("allreduce"), "{e}");
        assert!(Tuning::parse("allreduce").is_err());
    }
}
