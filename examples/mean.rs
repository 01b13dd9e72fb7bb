//! Distributed mean: a vector of `COUNT` values is split across the ranks (the library's even
//! split, so `COUNT` need not divide by the number of ranks); each rank sums its slice, and one
//! all-reduce of `[sum, count]` gives every rank the global sum and count, hence the mean.
//!
//! Every rank can regenerate the whole input from the seed, so each checks the mean against a
//! sequential one (relative tolerance 1e-12: only the order of the additions differs) and the
//! count exactly. Rank 0 prints the summary; the exit status is 0 when every rank agrees, 1 on a
//! wrong result, 2 on an error.
//!
//! ```text
//! cargo build --release --workspace --bins --examples
//! target/release/psyrun -n 4 target/release/examples/mean [COUNT] [SEED]
//! ```

mod common;

use common::{agree, arg, even_split, exit_code, finish, ranks, uniform, verdict};
use psyne::Communicator;
use psyne::ReduceOp;
use std::error::Error;
use std::process::ExitCode;

/// The largest relative difference accepted between the distributed and the sequential mean.
const TOLERANCE: f64 = 1e-12;

fn main() -> ExitCode {
    exit_code("mean", run())
}

fn run() -> Result<bool, Box<dyn Error>> {
    let count = arg(1, "COUNT", 100_001)?;
    let seed = arg(2, "SEED", 42)?;
    if count == 0 {
        return Err("COUNT must be at least 1 (the mean of nothing is undefined)".into());
    }
    let group = psyne::init()?;
    let (rank, size) = (group.rank(), group.size());

    // This rank's slice, and its partial sum and count.
    let mine: Vec<f64> = even_split(count, rank, size)
        .map(|i| input(seed, i))
        .collect();
    let mut totals = [mine.iter().sum::<f64>(), mine.len() as f64];
    group.all_reduce(&mut totals, ReduceOp::Sum)?;
    let [sum, n] = totals;
    let mean = sum / n;

    // The same computed sequentially over the whole input.
    let want = (0..count).map(|i| input(seed, i)).sum::<f64>() / count as f64;
    let diff = (mean - want).abs() / want.abs().max(1.0);
    let ok = n == count as f64 && diff <= TOLERANCE;
    if !ok {
        eprintln!(
            "mean: rank {rank}: MISMATCH: got mean {mean} of {n} values, expected {want} of {count} (relative difference {diff:e}, tolerance {TOLERANCE:e})"
        );
    }
    let all_ok = agree(&group, ok)?;
    if rank == 0 {
        println!(
            "mean of {count} values (seed {seed}) over {}: {mean:.12} (sequential {want:.12}, relative difference {diff:.1e}, tolerance {TOLERANCE:e}): {}",
            ranks(size),
            verdict(all_ok)
        );
    }
    finish(&group, all_ok)
}

/// Element `i` of the global input, in `[0, 100)`: a function of the seed and the index only, so
/// any rank can compute any element.
fn input(seed: u64, i: usize) -> f64 {
    uniform(seed, i) * 100.0
}
