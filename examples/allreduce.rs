//! All-reduce across the ranks of a job: each rank contributes a vector filled with `rank + 1`,
//! and every rank checks that it got the sum `1 + 2 + ... + size` and the mean in every element.
//!
//! ```text
//! target/release/psyrun -n 4 target/release/examples/allreduce [ELEMENTS]
//! ```

use psyne::Communicator;
use psyne::ReduceOp;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            // One write of the whole line: ranks sharing a pipe (under mpirun) do not interleave.
            let line = format!("allreduce: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            ExitCode::from(1)
        }
    }
}

fn run() -> psyne::Result<bool> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|_| psyne::Error::invalid(format!("`{a}` is not a number of elements")))?,
        None => 1 << 20,
    };
    let group = psyne::init()?;
    let (rank, size) = (group.rank(), group.size());

    let mut sum = vec![(rank + 1) as f32; n];
    let start = Instant::now();
    group.all_reduce(&mut sum, ReduceOp::Sum)?;
    let took = start.elapsed();
    let mut mean = vec![(rank + 1) as f64; n];
    group.all_reduce(&mut mean, ReduceOp::Avg)?;

    let want_sum = (size * (size + 1) / 2) as f32;
    let want_mean = (size + 1) as f64 / 2.0;
    let ok = sum.iter().all(|&x| x == want_sum) && mean.iter().all(|&x| x == want_mean);
    println!(
        "rank {rank}/{size} on {}: all_reduce(sum) of {n} f32 = {} (expected {want_sum}), mean = {} (expected {want_mean}), {:.2} ms, algorithm {}: {}",
        psyne::hostname(),
        sum.first().copied().unwrap_or(want_sum),
        mean.first().copied().unwrap_or(want_mean),
        took.as_secs_f64() * 1e3,
        group.algorithm_for(psyne::Collective::AllReduce, n * 4)?,
        if ok { "OK" } else { "WRONG" }
    );
    Ok(ok)
}
