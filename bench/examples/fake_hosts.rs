//! Flat against hierarchical collectives over fake hosts, in one process: the ranks are threads,
//! each host a different host key, so ranks of one "host" talk over shared memory and the others
//! over loopback TCP. A stand-in for a multi-host measurement on one machine, used to set the
//! automatic rule of `psyne::tuning::Tuning::prefers_hier`; on real hosts measure with psybench
//! (`psyrun -H a:2,b:2,... psybench allreduce --algo ring,hier`).
//!
//! ```text
//! cargo run --release -p psybench --example fake_hosts -- 2,2,2,2 allreduce
//! cargo run --release -p psybench --example fake_hosts -- r2:6 broadcast
//! ```
//!
//! The first argument is the layout: comma-separated ranks per host (hosts of consecutive ranks),
//! or `rH:N` for N ranks dealt round robin over H hosts. The second is `allreduce`, `broadcast`
//! or `allgather`. Sizes run from 1 KiB to 16 MiB (the whole buffer), each timed six times,
//! flat and hierarchical alternating; the medians of the slowest rank are printed.

use psyne::tuning::{Scope, Tuning};
use psyne::Communicator;
use psyne::TransportPolicy;
use psyne::{Algo, Collective, Group, GroupOptions, ReduceOp, Result};
use psyne::{MemoryStore, Store};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to measure.
struct Plan {
    /// The host of each rank.
    hosts: Vec<usize>,
    coll: Collective,
}

fn parse(args: &[String]) -> std::result::Result<Plan, String> {
    let usage = "usage: fake_hosts <2,2,2,2 | rH:N> <allreduce|broadcast|allgather>";
    let layout = args.first().ok_or(usage)?;
    let bad = |_| format!("bad layout `{layout}`; {usage}");
    let hosts = match layout.strip_prefix('r') {
        Some(spec) => {
            let (h, n) = spec.split_once(':').ok_or(usage)?;
            let (h, n): (usize, usize) = (h.parse().map_err(bad)?, n.parse().map_err(bad)?);
            (0..n).map(|r| r % h.max(1)).collect()
        }
        None => {
            let counts: Vec<usize> = layout
                .split(',')
                .map(str::parse)
                .collect::<std::result::Result<_, _>>()
                .map_err(bad)?;
            counts
                .iter()
                .enumerate()
                .flat_map(|(h, &n)| std::iter::repeat(h).take(n))
                .collect()
        }
    };
    let coll = match args.get(1).map(String::as_str) {
        Some("allreduce") | None => Collective::AllReduce,
        Some("broadcast") => Collective::Broadcast { root: 0 },
        Some("allgather") => Collective::AllGather,
        Some(other) => return Err(format!("unknown collective `{other}`; {usage}")),
    };
    Ok(Plan { hosts, coll })
}

/// Seconds per call of `coll` on `view` over a buffer of `n` f32, the slowest rank's.
fn time(g: &Group, view: &Group, coll: Collective, n: usize, iters: usize) -> Result<f64> {
    let mut buf = vec![1.0f32; n];
    g.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        match coll {
            Collective::AllReduce => view.all_reduce(&mut buf, ReduceOp::Sum)?,
            Collective::Broadcast { root } => view.broadcast(&mut buf, root)?,
            _ => {
                view.all_gather(&buf[..n / g.size()])?;
            }
        }
    }
    let mut dt = [t.elapsed().as_secs_f64() / iters as f64];
    g.all_reduce(&mut dt, ReduceOp::Max)?;
    Ok(dt[0])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rank_main(g: &Group, coll: Collective) -> Result<()> {
    let hier = g.with_algo(Algo::Hier);
    let mut bytes = 1usize << 10;
    while bytes <= 16 << 20 {
        let n = bytes / 4;
        let iters = ((64 << 20) / bytes).clamp(3, 200);
        let per_rank = match coll {
            Collective::AllGather => bytes / g.size(),
            _ => bytes,
        };
        let flat_algo = Tuning::default().by_size(coll, per_rank, g.size(), Scope::Net);
        let flat = g.with_algo(flat_algo);
        let (mut f, mut h) = (Vec::new(), Vec::new());
        for rep in 0..6 {
            if rep % 2 == 0 {
                f.push(time(g, &flat, coll, n, iters)?);
                h.push(time(g, &hier, coll, n, iters)?);
            } else {
                h.push(time(g, &hier, coll, n, iters)?);
                f.push(time(g, &flat, coll, n, iters)?);
            }
        }
        if g.rank() == 0 {
            let (f, h) = (median(f), median(h));
            println!(
                "{} {bytes:>9} B  flat ({flat_algo}) {:>10.1} us  hier {:>10.1} us  hier/flat {:.2}",
                coll.name(),
                f * 1e6,
                h * 1e6,
                h / f
            );
        }
        bytes *= 4;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plan = match parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let size = plan.hosts.len();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let threads: Vec<_> = (0..size)
        .map(|rank| {
            let store = store.clone();
            let host = plan.hosts[rank];
            let coll = plan.coll;
            std::thread::spawn(move || -> Result<()> {
                let mut o = GroupOptions::local(rank, size, "fake-hosts");
                o.tunables.transport.policy = TransportPolicy::Shm;
                o.host_key = format!("fake-host-{host}");
                o.tunables.timeout = Duration::from_secs(120);
                let g = Group::builder(o).shared_store(store).build()?;
                rank_main(&g, coll)
            })
        })
        .collect();
    let mut code = ExitCode::SUCCESS;
    for (rank, t) in threads.into_iter().enumerate() {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("rank {rank}: {e}");
                code = ExitCode::FAILURE;
            }
            Err(_) => {
                eprintln!("rank {rank} panicked");
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}
