//! Softmax over a vector split across the ranks: `softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m)`
//! with `m` the global maximum (subtracting it keeps `exp` from overflowing). Two all-reduces do
//! it: the maximum of the ranks' local maxima, then the sum of their local sums of `exp(x_j - m)`.
//! Each rank ends with the softmax of its own slice; no rank ever holds the whole vector.
//!
//! Every rank can regenerate the whole input from the seed, so each checks every element of its
//! slice against a sequential softmax of the whole vector (relative tolerance 1e-12: only the
//! order of the additions differs), and that all outputs sum to 1 (same tolerance). Rank 0 prints
//! the summary; the exit status is 0 when every rank agrees, 1 on a wrong result, 2 on an error.
//!
//! ```text
//! cargo build --release --workspace --bins --examples
//! target/release/psyrun -n 4 target/release/examples/softmax [COUNT] [SEED]
//! ```

mod common;

use common::{agree, arg, even_split, exit_code, finish, ranks, uniform, verdict};
use psyne::Communicator;
use psyne::ReduceOp;
use std::error::Error;
use std::process::ExitCode;

/// The largest relative difference accepted between an output and the sequential softmax.
const TOLERANCE: f64 = 1e-12;

fn main() -> ExitCode {
    exit_code("softmax", run())
}

fn run() -> Result<bool, Box<dyn Error>> {
    let count = arg(1, "COUNT", 10_001)?;
    let seed = arg(2, "SEED", 42)?;
    if count == 0 {
        return Err("COUNT must be at least 1".into());
    }
    let group = psyne::init()?;
    let (rank, size) = (group.rank(), group.size());
    let range = even_split(count, rank, size);
    let x: Vec<f64> = range.clone().map(|i| input(seed, i)).collect();

    // 1. The global maximum (a rank with an empty slice contributes -inf, which never wins).
    let mut max = [x.iter().copied().fold(f64::NEG_INFINITY, f64::max)];
    group.all_reduce(&mut max, ReduceOp::Max)?;
    let [max] = max;
    // 2. The global sum of exp(x - max).
    let mut exps: Vec<f64> = x.iter().map(|v| (v - max).exp()).collect();
    let mut sum = [exps.iter().sum::<f64>()];
    group.all_reduce(&mut sum, ReduceOp::Sum)?;
    let [sum] = sum;
    // 3. This rank's slice of the softmax.
    for e in &mut exps {
        *e /= sum;
    }
    let softmax = exps;
    let mut total = [softmax.iter().sum::<f64>()];
    group.all_reduce(&mut total, ReduceOp::Sum)?;
    let [total] = total;

    // The same computed sequentially over the whole input.
    let all: Vec<f64> = (0..count).map(|i| input(seed, i)).collect();
    let want_max = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let want_sum: f64 = all.iter().map(|v| (v - want_max).exp()).sum();
    let mut worst = 0.0f64;
    let mut first_bad = None;
    for (got, i) in softmax.iter().zip(range) {
        let want = (all[i] - want_max).exp() / want_sum;
        let err = (got - want).abs() / want.abs();
        worst = worst.max(err);
        if (err > TOLERANCE || err.is_nan()) && first_bad.is_none() {
            first_bad = Some((i, *got, want));
        }
    }
    let total_err = (total - 1.0).abs();
    let ok = max == want_max && first_bad.is_none() && total_err <= TOLERANCE;
    if !ok {
        eprintln!(
            "softmax: rank {rank}: MISMATCH: global max {max} (expected {want_max}), outputs sum to {total} (expected 1 within {TOLERANCE:e}), first wrong element: {}",
            match first_bad {
                Some((i, got, want)) => format!("index {i}: got {got:e}, expected {want:e}"),
                None => "none".into(),
            }
        );
    }
    let mut worst_all = [worst];
    group.all_reduce(&mut worst_all, ReduceOp::Max)?;
    let all_ok = agree(&group, ok)?;
    if rank == 0 {
        println!(
            "softmax of {count} values (seed {seed}) over {}: global max {max:.6}, sum of exp {sum:.6}, outputs sum to {total:.12}, max relative error {:.1e} (tolerance {TOLERANCE:e}): {}",
            ranks(size),
            worst_all[0],
            verdict(all_ok)
        );
    }
    finish(&group, all_ok)
}

/// Element `i` of the global input, in `[-10, 10)`: a function of the seed and the index only,
/// so any rank can compute any element.
fn input(seed: u64, i: usize) -> f64 {
    uniform(seed, i) * 20.0 - 10.0
}
