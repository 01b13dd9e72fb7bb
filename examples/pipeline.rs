//! A pipeline of stages passing batches with `send` and `recv`: rank 0 produces batches, each
//! rank applies its stages to a batch and sends the result to the next rank, and the last rank
//! checks every batch, exactly, against the sequential composition of all the stages applied to
//! what rank 0 produced (it regenerates that from the seed). While rank 1 works on batch `b`, rank
//! 0 is already producing batch `b + 1`: the stages overlap.
//!
//! The stages (STAGES, default 4 or the number of ranks if larger) are shared out contiguously,
//! as evenly as possible; on 1 rank every stage runs locally, and a rank given no stage (more
//! ranks than STAGES) just forwards. The stage functions do not commute, so a batch that skipped
//! a stage or took them out of order is caught. Rank 0 prints the summary; the exit status is 0
//! when every batch came out right, 1 on a wrong batch, 2 on an error (a bad argument included).
//!
//! ```text
//! cargo build --release --workspace --bins --examples
//! target/release/psyrun -n 4 target/release/examples/pipeline [BATCHES] [STAGES] [LEN]
//! ```

mod common;

use common::{checked_arg, even_split, exit_code, finish, ranks, small_int, verdict};
use psyne::Communicator;
use psyne::ReduceOp;
use std::error::Error;
use std::process::ExitCode;

fn main() -> ExitCode {
    exit_code("pipeline", run())
}

fn run() -> Result<bool, Box<dyn Error>> {
    let batches = arg(1, "BATCHES")?.unwrap_or(16);
    let stages = arg(2, "STAGES")?;
    let len = arg(3, "LEN")?.unwrap_or(1000);
    let seed = 42;
    let group = psyne::init()?;
    let (rank, size) = (group.rank(), group.size());
    let stages = stages.unwrap_or(size.max(4));
    let last = size - 1;
    let mine = even_split(stages, rank, size);

    let mut checked = 0u64;
    let mut wrong = 0u64;
    let mut batch = vec![0i64; len];
    for b in 0..batches {
        if rank == 0 {
            for (i, x) in batch.iter_mut().enumerate() {
                *x = input(seed, b, i);
            }
        } else {
            group.recv(&mut batch, rank - 1)?;
        }
        for k in mine.clone() {
            apply(k, &mut batch);
        }
        if rank == last {
            let mut want: Vec<i64> = (0..len).map(|i| input(seed, b, i)).collect();
            for k in 0..stages {
                apply(k, &mut want);
            }
            checked += 1;
            if let Some(i) = (0..len).find(|&i| batch[i] != want[i]) {
                eprintln!(
                    "pipeline: rank {rank}: MISMATCH in batch {b} at element {i}: got {}, expected {}",
                    batch[i], want[i]
                );
                wrong += 1;
            }
        } else {
            group.send(&batch, rank + 1)?;
        }
    }

    // Only the last rank knows how it went: every rank learns it (and rank 0 reports it).
    let mut outcome = [checked, wrong];
    group.all_reduce(&mut outcome, ReduceOp::Sum)?;
    let [checked, wrong] = outcome;
    let all_ok = checked == batches as u64 && wrong == 0;
    if rank == 0 {
        let per_rank: Vec<String> = (0..size)
            .map(|r| even_split(stages, r, size).len().to_string())
            .collect();
        println!(
            "pipeline of {stages} stages over {} (stages per rank: {}): {batches} batches of {len} i64 from rank 0, {checked} checked on rank {last} against the sequential composition, {wrong} wrong: {}",
            ranks(size),
            per_rank.join(","),
            verdict(all_ok)
        );
    }
    finish(&group, all_ok)
}

/// Stage `k`: a mix and an affine map, different for every stage (so no two stages commute).
fn apply(k: usize, batch: &mut [i64]) {
    let (shift, mul, add) = (k % 5 + 1, 2 * k as i64 + 3, k as i64 + 1);
    for x in batch {
        *x = (*x ^ (*x >> shift)).wrapping_mul(mul).wrapping_add(add);
    }
}

/// Element `i` of batch `batch`, a whole number in `[-1000, 1000]`: a function of the seed, the
/// batch and the index only, so the last rank can regenerate what rank 0 produced.
fn input(seed: u64, batch: usize, i: usize) -> i64 {
    small_int(seed, batch, i)
}

/// Positional argument `pos` as a positive number, or `None` when absent.
fn arg(pos: usize, name: &str) -> Result<Option<usize>, String> {
    checked_arg(pos, name, "a positive integer", |&n| n > 0)
        .map_err(|e| format!("{e} (usage: pipeline [BATCHES] [STAGES] [LEN])"))
}
