//! Global mean and variance, then normalisation: each rank standardises its slice of a vector
//! split across the ranks, `z_i = (x_i - mean) / sqrt(variance)`, with the mean and the
//! (population) variance of the whole vector. Two passes, as a numerically careful program would:
//! an all-reduce (sum) of `[sum, count]` gives the mean, then an all-reduce (sum) of the local sums
//! of squared deviations from it gives the variance. Each rank ends with its normalised slice.
//!
//! Every rank can regenerate the whole input from the seed, so each checks the mean and variance
//! (relative tolerance 1e-12) and every element of its slice (absolute tolerance 1e-12; the `z`
//! are of order 1) against a sequential computation, and that the normalised vector has mean 0
//! and variance 1 (absolute tolerance 1e-12). Rank 0 prints the summary; the exit status is 0
//! when every rank agrees, 1 on a wrong result, 2 on an error.
//!
//! ```text
//! cargo build --release --workspace --bins --examples
//! target/release/psyrun -n 4 target/release/examples/normalize [COUNT] [SEED]
//! ```

mod common;

use common::{agree, arg, even_split, exit_code, finish, ranks, uniform, verdict};
use psyne::Communicator;
use psyne::ReduceOp;
use std::error::Error;
use std::process::ExitCode;

/// The largest difference accepted from the sequential computation (relative for the mean and
/// variance, absolute for the normalised values, whose scale is 1).
const TOLERANCE: f64 = 1e-12;

fn main() -> ExitCode {
    exit_code("normalize", run())
}

fn run() -> Result<bool, Box<dyn Error>> {
    let count = arg(1, "COUNT", 100_001)?;
    let seed = arg(2, "SEED", 42)?;
    if count < 2 {
        return Err("COUNT must be at least 2 (one value has no spread to normalise)".into());
    }
    let group = psyne::init()?;
    let (rank, size) = (group.rank(), group.size());
    let range = even_split(count, rank, size);
    let x: Vec<f64> = range.clone().map(|i| input(seed, i)).collect();

    // 1. The global mean.
    let mut totals = [x.iter().sum::<f64>(), x.len() as f64];
    group.all_reduce(&mut totals, ReduceOp::Sum)?;
    let [sum, n] = totals;
    let mean = sum / n;
    // 2. The global variance, from the squared deviations from that mean.
    let mut ssd = [x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>()];
    group.all_reduce(&mut ssd, ReduceOp::Sum)?;
    let variance = ssd[0] / n;
    // 3. This rank's slice, normalised.
    let sd = variance.sqrt();
    let z: Vec<f64> = x.iter().map(|v| (v - mean) / sd).collect();
    // The normalised vector's own mean and variance (should be 0 and 1).
    let mut moments = [z.iter().sum::<f64>(), z.iter().map(|v| v * v).sum::<f64>()];
    group.all_reduce(&mut moments, ReduceOp::Sum)?;
    let (z_mean, z_var) = (moments[0] / n, moments[1] / n - (moments[0] / n).powi(2));

    // The same computed sequentially over the whole input.
    let all: Vec<f64> = (0..count).map(|i| input(seed, i)).collect();
    let want_mean = all.iter().sum::<f64>() / count as f64;
    let want_var = all.iter().map(|v| (v - want_mean).powi(2)).sum::<f64>() / count as f64;
    let want_sd = want_var.sqrt();
    let mut worst = 0.0f64;
    let mut first_bad = None;
    for (got, i) in z.iter().zip(range) {
        let want = (all[i] - want_mean) / want_sd;
        let err = (got - want).abs();
        worst = worst.max(err);
        if (err > TOLERANCE || err.is_nan()) && first_bad.is_none() {
            first_bad = Some((i, *got, want));
        }
    }
    let mean_err = (mean - want_mean).abs() / want_mean.abs();
    let var_err = (variance - want_var).abs() / want_var;
    let ok = n == count as f64
        && mean_err <= TOLERANCE
        && var_err <= TOLERANCE
        && first_bad.is_none()
        && z_mean.abs() <= TOLERANCE
        && (z_var - 1.0).abs() <= TOLERANCE;
    if !ok {
        eprintln!(
            "normalize: rank {rank}: MISMATCH: mean {mean} (expected {want_mean}), variance {variance} (expected {want_var}), normalised mean {z_mean:e} and variance {z_var} (expected 0 and 1), first wrong element: {}",
            match first_bad {
                Some((i, got, want)) => format!("index {i}: got {got}, expected {want}"),
                None => "none".into(),
            }
        );
    }
    let mut worst_all = [worst];
    group.all_reduce(&mut worst_all, ReduceOp::Max)?;
    let all_ok = agree(&group, ok)?;
    if rank == 0 {
        println!(
            "normalize {count} values (seed {seed}) over {}: mean {mean:.9}, variance {variance:.9} (sequential {want_mean:.9}, {want_var:.9}); normalised: mean {z_mean:.1e}, variance {z_var:.12}, max |error| {:.1e} (tolerance {TOLERANCE:e}): {}",
            ranks(size),
            worst_all[0],
            verdict(all_ok)
        );
    }
    finish(&group, all_ok)
}

/// Element `i` of the global input, in `[10, 30)`: a function of the seed and the index only, so
/// any rank can compute any element.
fn input(seed: u64, i: usize) -> f64 {
    10.0 + uniform(seed, i) * 20.0
}
