//! `psyne-check`: runs every collective × reduce op × element type on the job it is launched in
//! and compares each result element by element with the sequential oracle.
//!
//! ```text
//! psyrun -n 4 psyne-check [--counts 0,1,3,5,1001] [--seed N]
//! mpirun -n 4 psyne-check --backend mpi              # built with --features mpi
//! mpirun -n 4 psyne-check --backend native-over-mpi  # psyne's engine, bootstrapped over MPI
//! ```
//!
//! `--backend native` (the default) checks psyne's own engine in the job psyrun (or torchrun, or
//! nothing) started; under an MPI launcher (`mpirun -n 4 psyne-check`) it is `native-over-mpi`
//! when built with the `mpi` feature, and an error saying how to run it otherwise. `--backend
//! mpi` checks the MPI backend (`psyne::mpi::MpiComm`) the same way, except that it cannot reduce
//! f16/bf16: it checks that those reductions are refused with a clear error instead. `--backend native-over-mpi` forms a native group over MPI
//! (`psyne::mpi::native_group`) and checks everything. Every backend first checks that the world
//! has the size the launcher announced.
//!
//! `--shrink-trial SEED [--second-failure] [--stop-victim]` (under `psyrun --on-failure
//! continue`) kills one rank, or two, or stops one (SIGSTOP), at a random point and checks that the survivors' shrunk group gets every
//! collective right (see `shrink.rs`); `--revoke-trial` has rank 0 revoke the group while the
//! others wait in a collective, which must fail with `Revoked`, then all shrink it;
//! `--split-revoke-trial` checks that revoking a group revokes its subgroups.
//!
//! `--reduce-order canonical` (or `PSY_REDUCE_ORDER=canonical`) checks the group in canonical
//! reduce order: also all-reduce, reduce and reduce-scatter of f32, f64, f16 and bf16 with sum,
//! prod and avg on inputs that round, bit for bit against the rank-order oracle
//! (`psyne::conformance::canonical`).
//!
//! Exit status: 0 all results right, 1 a wrong result, 2 a communication error or bad usage.
//!
//! `--fault KIND:RANK` is a test hook that makes rank RANK misbehave, for the launcher's failure
//! tests: `exit3` (exits with code 3 after the group forms), `sigkill` (kills itself), `count`
//! (calls all_reduce with a different count than the others), `stranger` (first tries the job's
//! store with a wrong secret, which must be refused without harming the job), `hang` (sleeps),
//! `sigkill-during` (kills itself while every rank is in a series of 64 MiB all-reduces). In these
//! modes each rank first prints `rank R: job JOB_ID`. `--fault-attempts N` plays the fault only
//! in the first N attempts of a job psyrun restarts (`PSY_RESTART_COUNT` below N); a later
//! attempt prints `rank R: attempt A: first collective at T` (T: microseconds since the Unix
//! epoch) after one all-reduce, then checks every collective. A rank killing itself prints
//! `rank R: killing itself at T` first: the two times give how long a restart takes.

mod shrink;

use psyne::conformance::{self, Mismatch};
use psyne::{Communicator, ReduceOp, ReduceOrder};
use std::process::ExitCode;

/// Which implementation of the collectives to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Native,
    Mpi,
    NativeOverMpi,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::Mpi => "mpi",
            Backend::NativeOverMpi => "native-over-mpi",
        }
    }

    fn parse(name: &str) -> Result<Backend, String> {
        match name {
            "native" => Ok(Backend::Native),
            "mpi" => Ok(Backend::Mpi),
            "native-over-mpi" => Ok(Backend::NativeOverMpi),
            other => Err(format!(
                "--backend {other}: choose native, mpi or native-over-mpi"
            )),
        }
    }
}

struct Args {
    counts: Option<Vec<usize>>,
    seed: u64,
    fault: Option<(String, usize)>,
    /// Play the fault only in attempts below this (`--fault-attempts`).
    fault_attempts: Option<usize>,
    /// `--shrink-trial SEED`.
    shrink_trial: Option<u64>,
    /// `--second-failure`.
    second_failure: bool,
    /// `--no-victim`.
    no_victim: bool,
    /// `--stop-victim`.
    stop_victim: bool,
    /// `--revoke-trial`.
    revoke_trial: bool,
    /// `--split-revoke-trial`.
    split_revoke_trial: bool,
    backend: Backend,
    /// `--reduce-order fast|canonical` (else `PSY_REDUCE_ORDER`'s).
    reduce_order: Option<ReduceOrder>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        counts: None,
        seed: 1,
        fault: None,
        fault_attempts: None,
        shrink_trial: None,
        second_failure: false,
        no_victim: false,
        stop_victim: false,
        revoke_trial: false,
        split_revoke_trial: false,
        backend: Backend::Native,
        reduce_order: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--counts" => {
                let v = value()?;
                let counts = v
                    .split(',')
                    .map(|c| c.trim().parse::<usize>())
                    .collect::<Result<Vec<_>, _>>();
                a.counts = Some(
                    counts
                        .map_err(|_| format!("--counts {v}: give numbers separated by commas"))?,
                );
            }
            "--seed" => {
                a.seed = value()?
                    .parse()
                    .map_err(|_| "--seed takes a number".to_string())?
            }
            "--fault" => {
                let v = value()?;
                let (kind, rank) = v.split_once(':').ok_or("--fault takes KIND:RANK")?;
                a.fault = Some((
                    kind.to_string(),
                    rank.parse()
                        .map_err(|_| "--fault KIND:RANK needs a rank number")?,
                ));
            }
            "--fault-attempts" => {
                a.fault_attempts = Some(
                    value()?
                        .parse()
                        .map_err(|_| "--fault-attempts takes a number".to_string())?,
                )
            }
            "--shrink-trial" => {
                a.shrink_trial = Some(
                    value()?
                        .parse()
                        .map_err(|_| "--shrink-trial takes a seed (a number)".to_string())?,
                )
            }
            "--second-failure" => a.second_failure = true,
            "--no-victim" => a.no_victim = true,
            "--stop-victim" => a.stop_victim = true,
            "--revoke-trial" => a.revoke_trial = true,
            "--split-revoke-trial" => a.split_revoke_trial = true,
            "--backend" => a.backend = Backend::parse(&value()?)?,
            "--reduce-order" => a.reduce_order = Some(reduce_order(&value()?)?),
            "-h" | "--help" => {
                println!("usage: psyne-check [--backend native|mpi|native-over-mpi] [--counts 0,1,1001] [--seed N] [--reduce-order fast|canonical]\nRuns every collective x op x type and compares with the sequential oracle; in canonical\nreduce order (or PSY_REDUCE_ORDER=canonical) also float sums, products and means, bit for bit.");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument `{other}`; see --help")),
        }
    }
    if a.fault.is_some() && a.backend != Backend::Native {
        return Err("--fault works only with --backend native".into());
    }
    Ok(a)
}

/// `--reduce-order`'s value.
fn reduce_order(text: &str) -> Result<ReduceOrder, String> {
    ReduceOrder::parse(text).map_err(|e| format!("--reduce-order: {e}"))
}

fn main() -> ExitCode {
    let mut args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("psyne-check: {e}");
            return ExitCode::from(2);
        }
    };
    let foreign = psyne::contract::foreign_launch();
    // Under an MPI launcher without PMIx (MPICH's Hydra) the native group can only form over
    // MPI; with PMIx (Open MPI's mpirun, srun --mpi=pmix) psyne::init forms it itself.
    if cfg!(feature = "mpi")
        && args.backend == Backend::Native
        && args.fault.is_none()
        && args.shrink_trial.is_none()
        && !args.revoke_trial
        && !args.split_revoke_trial
        && foreign
            .as_ref()
            .is_some_and(psyne::contract::ForeignLaunch::forms_only_over_mpi)
    {
        args.backend = Backend::NativeOverMpi;
    }
    match args.backend {
        Backend::Native => check_native(&args, foreign),
        Backend::Mpi | Backend::NativeOverMpi => mpi_backends::run(&args),
    }
}

/// `--backend native`: forms psyne's own group from the launcher's environment, checks the
/// world size, then checks every collective (or plays the `--fault` asked for).
fn check_native(args: &Args, foreign: Option<psyne::contract::ForeignLaunch>) -> ExitCode {
    if let Some((kind, r)) = &args.fault {
        if kind == "stranger" && std::env::var("PSY_RANK").ok() == Some(r.to_string()) {
            stranger();
        }
    }
    let group = match psyne::init() {
        Ok(g) => match args.reduce_order {
            Some(order) => g.with_reduce_order(order),
            None => g,
        },
        Err(e) => {
            eprintln!("psyne-check: {e}");
            if let Some(f) = foreign {
                eprintln!("{}", foreign_hint(&f));
            }
            return ExitCode::from(2);
        }
    };
    let (rank, size) = (group.rank(), group.size());
    if let Err(e) = check_world_size(rank, size, launcher_world_size()) {
        eprintln!("psyne-check: {e}");
        return ExitCode::from(2);
    }
    println!("rank {rank}/{size}: links over {}", group.transports());
    if args.revoke_trial {
        return shrink::revoke_trial(&group);
    }
    if args.split_revoke_trial {
        return shrink::split_revoke_trial(&group);
    }
    if let Some(seed) = args.shrink_trial {
        let trial = shrink::Trial {
            seed,
            victim: !args.no_victim,
            second_failure: args.second_failure,
            stop_victim: args.stop_victim,
        };
        return shrink::run(&group, &trial);
    }
    if let Some((kind, r)) = &args.fault {
        let attempt = psyne::contract::restart_count().unwrap_or(0);
        if !matches!(args.fault_attempts, Some(n) if attempt >= n) {
            return play_fault(&group, kind, *r);
        }
        if let Err(e) = first_collective(&group, attempt) {
            eprintln!("psyne-check: rank {rank}: {e}");
            return ExitCode::from(2);
        }
    }
    let counts = args
        .counts
        .clone()
        .unwrap_or_else(|| conformance::default_counts(size));
    let canonical = group.reduce_order() == ReduceOrder::Canonical;
    let suffix = if canonical {
        "; in canonical reduce order, float sum/prod/avg bit for bit"
    } else {
        ""
    };
    ExitCode::from(report(
        rank,
        size,
        suffix,
        &counts,
        native_checks(&group, &counts, args.seed, canonical),
    ))
}

/// Every collective × op × type of the native group; in canonical reduce order also the
/// reductions of floats on inputs that round, bit for bit, at `counts` and the counts either
/// side of the canonical paths' switches.
fn native_checks(
    group: &psyne::Group,
    counts: &[usize],
    seed: u64,
    canonical: bool,
) -> psyne::Result<Vec<Mismatch>> {
    let mut bad = conformance::check_all_types(group, counts, seed)?;
    if canonical {
        let mut c = conformance::canonical::canonical_counts(group.size());
        c.extend(counts.iter().copied());
        c.sort_unstable();
        c.dedup();
        bad.extend(conformance::canonical::check_canonical(group, &c, seed)?);
    }
    Ok(bad)
}

/// `--fault KIND:RANK` once the group has formed: every rank says its job; rank `faulty`
/// misbehaves as `kind` says, then every rank tries one all-reduce (or, for `sigkill-during`,
/// a series of large ones) and says how it went.
fn play_fault(group: &psyne::Group, kind: &str, faulty: usize) -> ExitCode {
    let rank = group.rank();
    println!(
        "rank {rank}: job {}",
        std::env::var("PSY_JOB_ID").unwrap_or_default()
    );
    if kind == "sigkill-during" {
        return large_all_reduces(group, faulty == rank);
    }
    if faulty == rank {
        match kind {
            "exit3" => std::process::exit(3),
            // SAFETY: raising a signal on this process has no memory-safety preconditions.
            "sigkill" => unsafe {
                libc::raise(libc::SIGKILL);
            },
            "hang" => std::thread::sleep(std::time::Duration::from_secs(3600)),
            _ => {}
        }
    }
    let n = if kind == "count" && faulty == rank {
        10
    } else {
        20
    };
    let mut buf = vec![1.0f32; n];
    match group.all_reduce(&mut buf, ReduceOp::Sum) {
        Ok(()) => {
            println!("rank {rank}: all_reduce succeeded");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("rank {rank}: error kind {:?}: {e}", e.kind());
            ExitCode::from(2)
        }
    }
}

/// Microseconds since the Unix epoch, to compare times printed by different processes.
fn unix_micros() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// A restarted attempt's first collective: one small all-reduce, then the time it finished.
fn first_collective(group: &psyne::Group, attempt: usize) -> psyne::Result<()> {
    let mut one = [1.0f32];
    group.all_reduce(&mut one, ReduceOp::Sum)?;
    println!(
        "rank {}: job {}",
        group.rank(),
        std::env::var("PSY_JOB_ID").unwrap_or_default()
    );
    println!(
        "rank {}: attempt {attempt}: first collective at {}",
        group.rank(),
        unix_micros()
    );
    Ok(())
}

/// Prints the outcome of a check on this rank and returns the exit status it calls for.
fn report(
    rank: usize,
    size: usize,
    suffix: &str,
    counts: &[usize],
    outcome: psyne::Result<Vec<Mismatch>>,
) -> u8 {
    match outcome {
        Ok(bad) if bad.is_empty() => {
            println!("rank {rank}/{size}: every collective x op x type matches the oracle (counts {counts:?}){suffix}");
            0
        }
        Ok(bad) => {
            for m in bad.iter().take(10) {
                println!("rank {rank}: WRONG {m}");
            }
            println!("rank {rank}/{size}: {} wrong results", bad.len());
            if suffix.contains("mpi") && bad.iter().any(|m| saturated_sum(&m.case)) {
                println!(
                    "rank {rank}: hint: Open MPI 4.1's op/avx component saturates 8- and 16-bit \
                     integer sums instead of wrapping (open-mpi/ompi#8045); run with \
                     `mpirun --mca op ^avx` or OMPI_MCA_op=^avx"
                );
            }
            1
        }
        Err(e) => {
            eprintln!("psyne-check: rank {rank}: {e}");
            2
        }
    }
}

/// True for a wrong 8- or 16-bit integer sum or mean: what Open MPI's op/avx gets wrong.
fn saturated_sum(case: &str) -> bool {
    ["u8", "i8", "u16", "i16"].iter().any(|t| {
        ["sum", "avg"]
            .iter()
            .any(|op| case.contains(&format!("({t}, {op},")))
    })
}

/// What to do for psyne-check when another launcher started it as one of several ranks.
fn foreign_hint(f: &psyne::contract::ForeignLaunch) -> String {
    let n = f.ranks_hint();
    let mpi = if cfg!(feature = "mpi") {
        format!(
            "or start it {} (this psyne-check then checks the native group formed over MPI)",
            f.launcher.mpi_how
        )
    } else {
        "or build it with the MPI backend (cargo build -p psyrun --features mpi) and run it \
         under mpirun as now (it then checks the native group formed over MPI)"
            .into()
    };
    format!(
        "psyne-check: for psyne-check: `psyrun -n {n} psyne-check`{}; {mpi}",
        f.launcher.psyrun_where
    )
}

/// The world size the launcher announced: psyrun's, torchrun's, or another launcher's
/// ([`psyne::contract::announced_world_size_with`]).
fn launcher_world_size() -> Option<(&'static str, usize)> {
    let get = |name: &str| std::env::var(name).ok();
    [psyne::contract::WORLD_SIZE, psyne::contract::TORCH_NAMES[1]]
        .into_iter()
        .find_map(|name| Some((name, get(name)?.trim().parse().ok()?)))
        .or_else(|| psyne::contract::announced_world_size_with(&get))
}

/// Prints the world size and fails if it is not the one the launcher announced.
fn check_world_size(
    rank: usize,
    size: usize,
    said: Option<(&'static str, usize)>,
) -> Result<(), String> {
    match said {
        Some((name, n)) if n != size => Err(format!(
            "rank {rank}: the world has {size} ranks but the launcher said {name}={n}"
        )),
        Some((name, _)) => {
            println!("rank {rank}/{size}: world of {size}, as {name} said");
            Ok(())
        }
        None => {
            println!("rank {rank}/{size}: world of {size} (no launcher size in the environment)");
            Ok(())
        }
    }
}

#[cfg(not(feature = "mpi"))]
mod mpi_backends {
    use super::*;

    pub fn run(args: &Args) -> ExitCode {
        eprintln!(
            "psyne-check: --backend {} needs MPI, and this psyne-check was built without it; \
             rebuild with `cargo build -p psyrun --features mpi` (needs an MPI -dev package: \
             scripts/setup.sh installs Open MPI)",
            args.backend.name()
        );
        ExitCode::from(2)
    }
}

#[cfg(feature = "mpi")]
mod mpi_backends {
    use super::*;
    use psyne::mpi::MpiComm;
    use psyne::{bf16, f16, DType, ErrorKind};

    pub fn run(args: &Args) -> ExitCode {
        let comm = match psyne::mpi::init() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("psyne-check: {e}");
                return ExitCode::from(2);
            }
        };
        let (rank, size) = (comm.rank(), comm.size());
        if rank == 0 {
            println!("rank 0/{size}: {}", comm.library_version());
        }
        if let Err(e) = check_world_size(rank, size, psyne::mpi::launcher_world_size()) {
            eprintln!("psyne-check: {e}");
            return ExitCode::from(2);
        }
        let counts = args
            .counts
            .clone()
            .unwrap_or_else(|| conformance::default_counts(size));
        let code = match args.backend {
            Backend::Mpi => check_mpi(&comm, &counts, args.seed),
            _ => check_native_over_mpi(&comm, &counts, args.seed),
        };
        // Every rank is done before any finalizes (MPI_Finalize is collective anyway).
        comm.barrier().ok();
        drop(comm);
        ExitCode::from(code)
    }

    fn check_mpi(comm: &MpiComm, counts: &[usize], seed: u64) -> u8 {
        let (rank, size) = (comm.rank(), comm.size());
        let half = [DType::F16, DType::BF16];
        let outcome = conformance::check_types(comm, &DType::ALL, &half, counts, seed);
        let mut code = report(
            rank,
            size,
            &format!(" on {} (f16/bf16 without reductions)", Backend::Mpi.name()),
            counts,
            outcome,
        );
        let refused = half_refusals(comm);
        if refused.is_empty() {
            println!(
                "rank {rank}/{size}: mpi refuses f16/bf16 reductions and bitwise ops on floats \
                 with a clear error"
            );
        } else {
            for r in &refused {
                println!("rank {rank}: WRONG {r}");
            }
            code = code.max(1);
        }
        code
    }

    /// The reductions MPI cannot do must fail with InvalidArgument, before any data moves (so
    /// every rank fails alike and nothing hangs). Returns what was wrong.
    fn half_refusals(comm: &MpiComm) -> Vec<String> {
        let n = 2 * comm.size() + 1;
        let mine = psyne::schedule::chunk_span(n, comm.size(), comm.rank()).len();
        let mut wrong = Vec::new();
        let mut expect = |what: &str, r: psyne::Result<()>, needle: &str| match r {
            Err(e) if e.kind() == ErrorKind::InvalidArgument && e.message().contains(needle) => {}
            Err(e) => wrong.push(format!("{what}: refused with an unclear error: {e}")),
            Ok(()) => wrong.push(format!("{what}: accepted, but MPI cannot do it")),
        };
        let half = "MPI has no half-precision reduction";
        let mut h = vec![f16::ONE; n];
        expect(
            "all_reduce(f16, sum)",
            comm.all_reduce(&mut h, ReduceOp::Sum),
            half,
        );
        expect(
            "reduce(f16, max)",
            comm.reduce(&mut h, ReduceOp::Max, 0),
            half,
        );
        let b = vec![bf16::ONE; n];
        let mut out = vec![bf16::ZERO; mine];
        expect(
            "reduce_scatter(bf16, avg)",
            comm.reduce_scatter_into(&b, &mut out, ReduceOp::Avg),
            half,
        );
        let mut f = vec![1.0f32; n];
        expect(
            "all_reduce(f32, bxor)",
            comm.all_reduce(&mut f, ReduceOp::BXor),
            "integer types",
        );
        wrong
    }

    fn check_native_over_mpi(comm: &MpiComm, counts: &[usize], seed: u64) -> u8 {
        let (rank, size) = (comm.rank(), comm.size());
        let timeout = match psyne::contract::timeout() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("psyne-check: {e}");
                return 2;
            }
        };
        let group = match psyne::mpi::native_group(comm, timeout) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("psyne-check: rank {rank}: {e}");
                return 2;
            }
        };
        if (group.rank(), group.size()) != (rank, size) {
            eprintln!(
                "psyne-check: MPI rank {rank}/{size} became native rank {}/{}",
                group.rank(),
                group.size()
            );
            return 2;
        }
        let outcome = conformance::check_all_types(&group, counts, seed);
        report(
            rank,
            size,
            &format!(" on {}", Backend::NativeOverMpi.name()),
            counts,
            outcome,
        )
    }
}

/// Twenty 64 MiB all-reduces; with `die`, this rank kills itself with SIGKILL 50 ms into them.
fn large_all_reduces(group: &psyne::Group, die: bool) -> ExitCode {
    let rank = group.rank();
    if die {
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            println!("rank {rank}: killing itself at {}", unix_micros());
            // SAFETY: raising a signal on this process has no memory-safety preconditions.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        });
    }
    let mut buf = vec![1.0f32; 16 << 20];
    for _ in 0..20 {
        if let Err(e) = group.all_reduce(&mut buf, ReduceOp::Sum) {
            println!("rank {rank}: error kind {:?}: {e}", e.kind());
            return ExitCode::from(2);
        }
    }
    println!("rank {rank}: all_reduce succeeded");
    ExitCode::SUCCESS
}

/// Connects to the job's store with a wrong secret: it must be refused.
fn stranger() {
    let Ok(addr) = std::env::var("PSY_STORE") else {
        return;
    };
    let wrong = psyne::Secret::derive("not the job's secret");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    match psyne::TcpStore::connect(&addr, &wrong, deadline) {
        Ok(_) => {
            eprintln!("psyne-check: the store ACCEPTED a wrong secret");
            std::process::exit(4);
        }
        Err(e) => println!("stranger refused as expected: {e}"),
    }
}
