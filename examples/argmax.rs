//! Global argmax, and the rank that holds it: each rank finds the maximum of its slice; an
//! all-reduce (max) gives the global maximum; each rank then offers the lowest global index where
//! it holds that value (or none), and an all-reduce (min) over `[index, rank]` picks the lowest
//! index and its holder, so ties go to the lowest global index. A third all-reduce (sum) counts
//! the ties and the ranks holding them. The values are whole numbers below 2000, so with the default count the maximum
//! occurs several times, on several ranks.
//!
//! Every rank can regenerate the whole input from the seed, so each checks the value, the index
//! (exactly) and the holder against a sequential scan. Rank 0 prints the summary; the exit status
//! is 0 when every rank agrees, 1 on a wrong result, 2 on an error.
//!
//! ```text
//! cargo build --release --workspace --bins --examples
//! target/release/psyrun -n 4 target/release/examples/argmax [COUNT] [SEED]
//! ```

mod common;

use common::{agree, arg, even_split, exit_code, finish, random_bits, ranks, verdict};
use psyne::Communicator;
use psyne::ReduceOp;
use std::error::Error;
use std::process::ExitCode;

/// "No index" and "no rank" in the min-reductions.
const NONE: u64 = u64::MAX;

fn main() -> ExitCode {
    exit_code("argmax", run())
}

fn run() -> Result<bool, Box<dyn Error>> {
    let count = arg(1, "COUNT", 10_001)?;
    let seed = arg(2, "SEED", 42)?;
    if count == 0 {
        return Err("COUNT must be at least 1 (nothing has no argmax)".into());
    }
    let group = psyne::init()?;
    let (rank, size) = (group.rank(), group.size());
    let range = even_split(count, rank, size);
    let x: Vec<f64> = range.clone().map(|i| input(seed, i)).collect();

    // 1. The global maximum (an empty slice contributes -inf, which never wins).
    let mut max = [x.iter().copied().fold(f64::NEG_INFINITY, f64::max)];
    group.all_reduce(&mut max, ReduceOp::Max)?;
    let [max] = max;
    // 2. The lowest global index holding it, and the lowest rank among the holders: as the slices
    //    are in rank order, that rank is the one holding the lowest index.
    let local = x.iter().position(|&v| v == max);
    let mut best = match local {
        Some(j) => [(range.start + j) as u64, rank as u64],
        None => [NONE, NONE],
    };
    group.all_reduce(&mut best, ReduceOp::Min)?;
    let [index, holder] = best;
    // 3. How many elements tie for the maximum, and on how many ranks.
    let mine = x.iter().filter(|&&v| v == max).count() as u64;
    let mut ties = [mine, u64::from(mine > 0)];
    group.all_reduce(&mut ties, ReduceOp::Sum)?;
    let [ties, tie_ranks] = ties;

    // The same by a sequential scan of the whole input (the first maximum wins).
    let all: Vec<f64> = (0..count).map(|i| input(seed, i)).collect();
    let mut want_index = 0;
    for (i, &v) in all.iter().enumerate() {
        if v > all[want_index] {
            want_index = i;
        }
    }
    let want_max = all[want_index];
    let want_holder = (0..size)
        .find(|&r| even_split(count, r, size).contains(&want_index))
        .expect("every index is in some rank's slice");
    let want_ties = all.iter().filter(|&&v| v == want_max).count() as u64;
    let ok = max == want_max
        && index == want_index as u64
        && holder == want_holder as u64
        && ties == want_ties;
    if !ok {
        eprintln!(
            "argmax: rank {rank}: MISMATCH: got max {max} at index {index} on rank {holder} ({ties} ties), expected {want_max} at index {want_index} on rank {want_holder} ({want_ties} ties)"
        );
    }
    let all_ok = agree(&group, ok)?;
    if rank == 0 {
        let local_index = index as usize - even_split(count, holder as usize, size).start;
        println!(
            "argmax of {count} values (seed {seed}) over {}: max {max} at global index {index}, held by rank {holder} (its local index {local_index}); {ties} values on {} tie, the lowest index wins; sequential: {want_max} at index {want_index}: {}",
            ranks(size),
            ranks(tie_ranks as usize),
            verdict(all_ok)
        );
    }
    finish(&group, all_ok)
}

/// Element `i` of the global input, a whole number in `[0, 2000)` so that ties are common: a
/// function of the seed and the index only, so any rank can compute any element.
fn input(seed: u64, i: usize) -> f64 {
    (random_bits(seed, i as u64) % 2000) as f64
}
