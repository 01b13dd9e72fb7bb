//! `psybench model`: psyne's all-reduce schedules on a many-core host this machine is not,
//! timed by the cost model ([`psyne::schedule::cost`]); the design it serves is
//! `docs/many-cores.md`. Every machine's numbers are assumptions, stated with their source in
//! [`machine`]'s presets; none is a measurement of that machine.

use crate::sizes::format_size;
use psyne::schedule::cost::{estimate, Estimate, Machine};
use psyne::schedule::{build, build_domains, build_hier, Algo, Collective, HierAlgos, Hosts};

/// The machines `--machine` names.
pub const MACHINES: [&str; 3] = ["epyc-9654-2s", "xeon-8480-2s", "this-vm"];

/// The preset `name` (see [`MACHINES`]).
pub fn machine(name: &str) -> Option<Machine> {
    match name {
        // AMD EPYC 9654 ×2 (Genoa): 12 CCDs of 8 cores and 32 MiB L3 per socket. A step's fixed
        // cost: 0.15 µs of psyne's own (its 8-byte broadcast on this VM, which is a Genoa-class
        // EPYC) plus two cache-line hand-overs at the published core-to-core latencies (about 25
        // ns in a CCD, 110 ns across CCDs, 220 ns across sockets). A core copies at 40 GB/s in
        // cache (memcpy of 1 MiB measured here: 41.8 GB/s, results/shm-pull-cost/), reduces at
        // half that. Each CCD's link to the I/O die: 64 GB/s read, 32 GB/s write published; 40
        // assumed each way. xGMI between sockets: 128 GB/s each way assumed (of 4 × 64 peak).
        // Memory: 12 channels of DDR5-4800, 460 GB/s peak, 360 assumed (STREAM-like).
        "epyc-9654-2s" => Some(Machine {
            name: "AMD EPYC 9654 x2 (assumed parameters, see psybench's many_cores.rs)",
            sockets: 2,
            domains_per_socket: 12,
            cores_per_domain: 8,
            step_us: [0.2, 0.37, 0.6],
            core_gbps: 40.0,
            reduce_gbps: 20.0,
            domain_gbps: 40.0,
            socket_link_gbps: 128.0,
            memory_gbps: 360.0,
            l3_bytes: 32 << 20,
        }),
        // Intel Xeon Platinum 8480+ ×2 (Sapphire Rapids) in SNC4 mode: 4 domains of 14 cores
        // and 26.25 MiB of L3 per socket. The mesh links domains far more widely than AMD's
        // per-CCD links: 150 GB/s each way assumed. UPI: 4 links, about 96 GB/s each way.
        // Memory: 8 channels of DDR5-4800, 307 GB/s peak, 250 assumed. Core-to-core latency
        // about 60 ns in a domain, 90 across, 180 across sockets; a core copies at 30 GB/s.
        "xeon-8480-2s" => Some(Machine {
            name: "Intel Xeon 8480+ x2, SNC4 (assumed parameters, see psybench's many_cores.rs)",
            sockets: 2,
            domains_per_socket: 4,
            cores_per_domain: 14,
            step_us: [0.27, 0.33, 0.51],
            core_gbps: 30.0,
            reduce_gbps: 15.0,
            domain_gbps: 150.0,
            socket_link_gbps: 96.0,
            memory_gbps: 250.0,
            l3_bytes: 27_525_120,
        }),
        // This 2-core VM (an AMD EPYC), as the model sees it, to set the model beside what
        // psybench measures here (results/many-cores/): the copy rate measured (memcpy), the
        // memory's fitted to psyne's 16 MiB all-reduce (2.3-2.8 ms in normal-state jobs,
        // results/versus-every-mpi/run-3878b67/).
        "this-vm" => Some(Machine {
            name: "this 2-core VM (one domain)",
            sockets: 1,
            domains_per_socket: 1,
            cores_per_domain: 2,
            step_us: [0.2, 0.2, 0.2],
            core_gbps: 40.0,
            reduce_gbps: 20.0,
            domain_gbps: 40.0,
            socket_link_gbps: 40.0,
            memory_gbps: 30.0,
            l3_bytes: 32 << 20,
        }),
        _ => None,
    }
}

/// The all-reduce algorithms the model compares, by the names the table prints.
const ALGOS: [&str; 5] = [
    "ring",
    "recursive_doubling",
    "rabenseifner",
    "hier",
    "two_level",
];

/// Every rank's schedule of `algo` (one of [`ALGOS`]) for `count` f32 on `domains`.
fn schedules(
    algo: &str,
    domains: &Hosts,
    count: usize,
) -> psyne::Result<Vec<psyne::schedule::Schedule>> {
    let p = domains.size();
    (0..p)
        .map(|r| match algo {
            "ring" => build(Collective::AllReduce, Algo::Ring, r, p, count),
            "recursive_doubling" => {
                build(Collective::AllReduce, Algo::RecursiveDoubling, r, p, count)
            }
            "rabenseifner" => build(Collective::AllReduce, Algo::Rabenseifner, r, p, count),
            "hier" => build_hier(
                Collective::AllReduce,
                domains,
                r,
                count,
                HierAlgos {
                    leaders: Algo::Ring,
                    local: Algo::Pipeline,
                },
            ),
            _ => build_domains(domains, r, count),
        })
        .collect()
}

/// The ranks' cache domains on `machine` when `ranks` fill its cores in order.
fn domains_of(machine: &Machine, ranks: usize) -> Hosts {
    let keys: Vec<usize> = (0..ranks).map(|r| machine.domain_of(r)).collect();
    Hosts::from_keys(&keys)
}

/// Prints the model's all-reduce times on `machine` for `ranks` at `sizes` (bytes of f32), one
/// row per size: each algorithm's µs, and the bound and rounds of the fastest. Returns the rows as
/// CSV text (`size,algorithm,us,rounds,latency_us,crossing_bytes,bound`).
pub fn run(machine: &Machine, ranks: usize, sizes: &[u64]) -> psyne::Result<String> {
    if ranks < 2 || ranks > machine.cores() {
        return Err(psyne::Error::config(format!(
            "--ranks {ranks}: the model runs 2 to {} ranks on {} (one per core)",
            machine.cores(),
            machine.name
        )));
    }
    let domains = domains_of(machine, ranks);
    println!(
        "# {}: {ranks} ranks, {} domain(s)",
        machine.name,
        domains.count()
    );
    println!("# all-reduce of f32, modelled µs (psyne::schedule::cost); '-' where the algorithm does not apply");
    print!("{:>10}", "size");
    for a in ALGOS {
        print!(" {a:>18}");
    }
    println!("  fastest (bound, rounds)");
    let mut csv = String::from("size,algorithm,us,rounds,latency_us,crossing_bytes,bound\n");
    for &bytes in sizes {
        let count = (bytes / 4).max(1) as usize;
        print!("{:>10}", format_size(bytes));
        let mut best: Option<(&str, Estimate)> = None;
        for a in ALGOS {
            let est = schedules(a, &domains, count)
                .ok()
                .and_then(|s| estimate(&s, machine, 4));
            match &est {
                Some(e) => {
                    print!(" {:>18.1}", e.total_us);
                    csv.push_str(&format!(
                        "{bytes},{a},{:.3},{},{:.3},{},{}\n",
                        e.total_us, e.rounds, e.latency_us, e.crossing_bytes, e.bound
                    ));
                    if !matches!(&best, Some((_, b)) if b.total_us <= e.total_us) {
                        best = Some((a, e.clone()));
                    }
                }
                None => print!(" {:>18}", "-"),
            }
        }
        match best {
            Some((a, e)) => println!("  {a} ({}, {})", e.bound, e.rounds),
            None => println!(),
        }
    }
    Ok(csv)
}
