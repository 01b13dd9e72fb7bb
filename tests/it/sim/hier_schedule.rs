//! Hierarchical schedules, run by the in-memory simulator on many host layouts (every way of
//! cutting 1 to 7 ranks into consecutive hosts, uneven and interleaved layouts up to 9 ranks),
//! against the sequential oracle: all-reduce with every op and every leader/local algorithm,
//! broadcast from every root, all-gather; counts 0, 1, odd and large. Also: only leaders cross
//! hosts, and each host sends the buffer across the network once per phase.

use super::values::value;
use psyne::oracle;
use psyne::schedule::simulate::run_hier_collective;
use psyne::schedule::{build_hier, Algo, Collective, HierAlgos, Hosts};
use psyne::{Element, ReduceOp};

/// Every composition of `n` into positive parts: every layout of `n` ranks on consecutive hosts.
fn compositions(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    (1..=n)
        .flat_map(|first| {
            compositions(n - first).into_iter().map(move |mut rest| {
                rest.insert(0, first);
                rest
            })
        })
        .collect()
}

/// The layouts tested: all block layouts up to 7 ranks, and for every size up to 9 a few uneven
/// and interleaved ones.
fn layouts() -> Vec<Hosts> {
    let mut all: Vec<Hosts> = (1..=7)
        .flat_map(compositions)
        .map(|c| Hosts::blocks(&c))
        .collect();
    for size in 1..=9usize {
        all.push(Hosts::blocks(&[size / 2, size - size / 2]));
        all.push(Hosts::blocks(&[
            size.div_ceil(3),
            1,
            size.saturating_sub(size.div_ceil(3) + 1),
        ]));
        let round_robin: Vec<usize> = (0..size).map(|r| r % 2).collect();
        all.push(Hosts::from_keys(&round_robin));
        let uneven: Vec<usize> = (0..size).map(|r| [0, 1, 0, 2, 1, 0, 2, 2, 1][r]).collect();
        all.push(Hosts::from_keys(&uneven));
    }
    all.retain(|h| h.size() > 0);
    all
}

fn counts(size: usize) -> Vec<usize> {
    let mut c = vec![0, 1, size + 2, 2 * size + 1, 517];
    c.dedup();
    c
}

fn inputs<T: Element>(coll: Collective, size: usize, count: usize, op: ReduceOp) -> Vec<Vec<T>> {
    (0..size)
        .map(|r| {
            coll.layout(r, size, count)
                .input
                .map(|i| T::from_i64(value(r, i, op)))
                .collect()
        })
        .collect()
}

fn check<T: Element>(
    coll: Collective,
    hosts: &Hosts,
    algos: HierAlgos,
    count: usize,
    op: ReduceOp,
) {
    let size = hosts.size();
    let inputs = inputs::<T>(coll, size, count, op);
    let case = format!("{coll} on {hosts:?} with {algos:?}, count {count}, op {op}");
    let got = run_hier_collective(coll, hosts, algos, count, op, &inputs)
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    let want = match coll {
        Collective::AllReduce => oracle::all_reduce(&inputs, op),
        Collective::Broadcast { root } => oracle::broadcast(&inputs, root),
        Collective::AllGather => oracle::all_gather(&inputs),
        other => panic!("{other} is not hierarchical"),
    };
    for (rank, g) in got.iter().enumerate() {
        assert_eq!(g.len(), want.len(), "{case}: rank {rank} output length");
        if let Some(i) = (0..g.len()).find(|&i| g[i] != want[i]) {
            panic!(
                "{case}: rank {rank} element {i}: got {:?}, want {:?}",
                g[i], want[i]
            );
        }
    }
}

const LOCAL: [Algo; 2] = [Algo::Binomial, Algo::Pipeline];

#[test]
fn all_reduce_matches_the_oracle_on_every_layout() {
    let leaders = [
        Algo::Ring,
        Algo::RecursiveDoubling,
        Algo::Rabenseifner,
        Algo::Binomial,
    ];
    for hosts in layouts() {
        for count in counts(hosts.size()) {
            for (i, &leaders) in leaders.iter().enumerate() {
                let algos = HierAlgos {
                    leaders,
                    local: LOCAL[i % 2],
                };
                for op in ReduceOp::ALL {
                    check::<i64>(Collective::AllReduce, &hosts, algos, count, op);
                }
                check::<f32>(Collective::AllReduce, &hosts, algos, count, ReduceOp::Avg);
            }
        }
    }
}

#[test]
fn broadcast_matches_the_oracle_from_every_root() {
    for hosts in layouts() {
        for count in counts(hosts.size()) {
            for root in 0..hosts.size() {
                for (leaders, local) in [
                    (Algo::Binomial, Algo::Pipeline),
                    (Algo::Pipeline, Algo::Binomial),
                ] {
                    let algos = HierAlgos { leaders, local };
                    let coll = Collective::Broadcast { root };
                    check::<u8>(coll, &hosts, algos, count, ReduceOp::Sum);
                }
            }
        }
    }
}

#[test]
fn all_gather_matches_the_oracle_on_every_layout() {
    for hosts in layouts() {
        for count in counts(hosts.size()) {
            for local in LOCAL {
                let algos = HierAlgos {
                    leaders: Algo::Ring,
                    local,
                };
                check::<i64>(Collective::AllGather, &hosts, algos, count, ReduceOp::Sum);
            }
        }
    }
}

/// Elements each host sends to other hosts, per rank of `hosts`, for one schedule each.
fn crossing_elements(coll: Collective, hosts: &Hosts, algos: HierAlgos, count: usize) -> usize {
    (0..hosts.size())
        .map(|rank| {
            let s = build_hier(coll, hosts, rank, count, algos).unwrap();
            s.steps
                .iter()
                .flat_map(|st| &st.sends)
                .filter(|m| hosts.host_of(m.peer) != hosts.host_of(rank))
                .map(|m| m.span.len())
                .sum::<usize>()
        })
        .sum()
}

#[test]
fn hosts_exchange_what_the_leaders_algorithm_needs_and_no_more() {
    // 4 hosts of 2: a ring all-reduce among the 4 leaders sends 2 * 3/4 of the buffer per host.
    let hosts = Hosts::blocks(&[2, 2, 2, 2]);
    let algos = HierAlgos {
        leaders: Algo::Ring,
        local: Algo::Binomial,
    };
    let n = 800;
    assert_eq!(
        crossing_elements(Collective::AllReduce, &hosts, algos, n),
        4 * 2 * n * 3 / 4
    );
    // All-gather: each host's block reaches the 3 other leaders once.
    assert_eq!(
        crossing_elements(Collective::AllGather, &hosts, algos, n),
        3 * n
    );
    // Broadcast down a chain of leaders: the buffer crosses 3 host boundaries.
    let chain = HierAlgos {
        leaders: Algo::Pipeline,
        local: Algo::Binomial,
    };
    assert_eq!(
        crossing_elements(Collective::Broadcast { root: 5 }, &hosts, chain, n),
        3 * n
    );
}

#[test]
fn algorithms_that_do_not_fit_a_phase_are_refused() {
    let hosts = Hosts::blocks(&[2, 2]);
    let bad = HierAlgos {
        leaders: Algo::Pipeline,
        local: Algo::Binomial,
    };
    let e = build_hier(Collective::AllReduce, &hosts, 0, 4, bad).unwrap_err();
    assert!(e.to_string().contains("pipeline"), "{e}");
    let nested = HierAlgos {
        leaders: Algo::Hier,
        local: Algo::Binomial,
    };
    assert!(build_hier(Collective::AllReduce, &hosts, 0, 4, nested).is_err());
    let e = build_hier(Collective::Reduce { root: 0 }, &hosts, 0, 4, bad).unwrap_err();
    assert!(e.to_string().contains("hierarchical"), "{e}");
    assert!(build_hier(Collective::Broadcast { root: 4 }, &hosts, 0, 4, bad).is_err());
}
