//! `psyne-check`: runs every collective × reduce op × element type on the job it is launched in
//! and compares each result element by element with the sequential oracle.
//!
//! ```text
//! psyrun -n 4 psyne-check [--counts 0,1,3,5,1001] [--seed N]
//! ```
//!
//! Exit status: 0 all results right, 1 a wrong result, 2 a communication error or bad usage.
//!
//! `--fault KIND:RANK` is a test hook that makes rank RANK misbehave, for the launcher's failure
//! tests: `exit3` (exits with code 3 after the group forms), `sigkill` (kills itself), `count`
//! (calls all_reduce with a different count than the others), `stranger` (first tries the job's
//! store with a wrong secret, which must be refused without harming the job), `hang` (sleeps).

use psyne::{conformance, ReduceOp};
use std::process::ExitCode;

struct Args {
    counts: Option<Vec<usize>>,
    seed: u64,
    fault: Option<(String, usize)>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        counts: None,
        seed: 1,
        fault: None,
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
            "-h" | "--help" => {
                println!("usage: psyne-check [--counts 0,1,1001] [--seed N]\nRuns every collective x op x type and compares with the sequential oracle.");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument `{other}`; see --help")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("psyne-check: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some((kind, r)) = &args.fault {
        if kind == "stranger" && std::env::var("PSY_RANK").ok() == Some(r.to_string()) {
            stranger();
        }
    }
    let group = match psyne::init() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("psyne-check: {e}");
            return ExitCode::from(2);
        }
    };
    let (rank, size) = (group.rank(), group.size());
    if let Some((kind, r)) = &args.fault {
        if *r == rank {
            match kind.as_str() {
                "exit3" => std::process::exit(3),
                // SAFETY: raising a signal on this process has no memory-safety preconditions.
                "sigkill" => unsafe {
                    libc::raise(libc::SIGKILL);
                },
                "hang" => std::thread::sleep(std::time::Duration::from_secs(3600)),
                _ => {}
            }
        }
        let n = if kind == "count" && *r == rank {
            10
        } else {
            20
        };
        let mut buf = vec![1.0f32; n];
        return match group.all_reduce(&mut buf, ReduceOp::Sum) {
            Ok(()) => {
                println!("rank {rank}: all_reduce succeeded");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("rank {rank}: error kind {:?}: {e}", e.kind());
                ExitCode::from(2)
            }
        };
    }
    let counts = args
        .counts
        .unwrap_or_else(|| conformance::default_counts(size));
    match conformance::check_all_types(&group, &counts, args.seed) {
        Ok(bad) if bad.is_empty() => {
            println!("rank {rank}/{size}: every collective x op x type matches the oracle (counts {counts:?})");
            ExitCode::SUCCESS
        }
        Ok(bad) => {
            for m in bad.iter().take(10) {
                println!("rank {rank}: WRONG {m}");
            }
            println!("rank {rank}/{size}: {} wrong results", bad.len());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("psyne-check: rank {rank}: {e}");
            ExitCode::from(2)
        }
    }
}

/// Connects to the job's store with a wrong secret: it must be refused.
fn stranger() {
    let Ok(addr) = std::env::var("PSY_STORE") else {
        return;
    };
    let wrong = psyne::auth::Secret::derive("not the job's secret");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    match psyne::bootstrap::TcpStore::connect(&addr, &wrong, deadline) {
        Ok(_) => {
            eprintln!("psyne-check: the store ACCEPTED a wrong secret");
            std::process::exit(4);
        }
        Err(e) => println!("stranger refused as expected: {e}"),
    }
}
