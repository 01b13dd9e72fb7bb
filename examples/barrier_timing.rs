//! A barrier-timed measurement: how long an all-reduce takes, the way benchmarks measure it.
//! Before every timed call all ranks meet at a barrier, so each starts the clock together and no
//! rank's time includes waiting for a latecomer from earlier work; each rank keeps the median of
//! its iterations (robust to a noisy machine), and a reduce (max) to rank 0 gives the slowest
//! rank's median, which is what the job as a whole waits for (a reduce (min) gives the fastest,
//! for contrast). A last barrier keeps any rank from leaving while others still measure.
//!
//! Sizes 8 B, 1 KiB, 64 KiB and 1 MiB of f32, ITERS timed iterations each (default 20) after 3
//! untimed warm-up ones. Every result is checked element by element against the sequential sum
//! (the inputs are small whole numbers, so the sums are exact). Rank 0 prints a small table and
//! the verdict; the exit status is 0 when every result on every rank was right, 1 if not, 2 on
//! an error.
//!
//! ```text
//! cargo build --release --workspace --bins --examples
//! target/release/psyrun -n 4 target/release/examples/barrier_timing [ITERS]
//! ```

mod common;

use common::{agree, checked_arg, exit_code, finish, ranks, verdict};
use psyne::Communicator;
use psyne::{Collective, ReduceOp};
use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

/// Bytes per rank of each measured all-reduce.
const SIZES: [usize; 4] = [8, 1 << 10, 64 << 10, 1 << 20];
/// Untimed iterations before the timed ones.
const WARMUP: usize = 3;

fn main() -> ExitCode {
    exit_code("barrier_timing", run())
}

fn run() -> Result<bool, Box<dyn Error>> {
    let iters: usize = checked_arg(1, "ITERS", "a positive integer", |_| true)?.unwrap_or(20);
    if iters == 0 {
        return Err("ITERS must be at least 1".into());
    }
    let group = psyne::init()?;
    let (rank, size) = (group.rank(), group.size());

    let mut medians = Vec::with_capacity(SIZES.len());
    let mut wrong = 0usize;
    for bytes in SIZES {
        let count = bytes / 4;
        let want: Vec<f32> = (0..count)
            .map(|i| (0..size).map(|r| input(r, i)).sum())
            .collect();
        let mut buf = vec![0f32; count];
        let mut times = Vec::with_capacity(iters);
        for it in 0..WARMUP + iters {
            for (i, x) in buf.iter_mut().enumerate() {
                *x = input(rank, i);
            }
            group.barrier()?;
            let start = Instant::now();
            group.all_reduce(&mut buf, ReduceOp::Sum)?;
            let took = start.elapsed().as_secs_f64() * 1e6;
            if it >= WARMUP {
                times.push(took);
            }
            if let Some(i) = (0..count).find(|&i| buf[i] != want[i]) {
                if wrong == 0 {
                    eprintln!(
                        "barrier_timing: rank {rank}: MISMATCH in the all_reduce of {bytes} B, iteration {it}, element {i}: got {}, expected {}",
                        buf[i], want[i]
                    );
                }
                wrong += 1;
            }
        }
        medians.push(median_us(&mut times));
    }
    group.barrier()?;

    // The slowest and the fastest rank's median, per size, on rank 0.
    let mut slowest = medians.clone();
    group.reduce(&mut slowest, ReduceOp::Max, 0)?;
    let mut fastest = medians;
    group.reduce(&mut fastest, ReduceOp::Min, 0)?;
    let all_ok = agree(&group, wrong == 0)?;
    if rank == 0 {
        println!(
            "barrier-timed all_reduce(sum) of f32 over {}, median of {iters} iterations ({WARMUP} warm-up) per rank:",
            ranks(size)
        );
        println!(
            "{:>9}  {:<20}  {:>15}  {:>15}",
            "bytes", "algorithm", "slowest rank µs", "fastest rank µs"
        );
        for (k, bytes) in SIZES.iter().enumerate() {
            println!(
                "{bytes:>9}  {:<20}  {:>15.1}  {:>15.1}",
                group
                    .algorithm_for(Collective::AllReduce, *bytes)?
                    .to_string(),
                slowest[k],
                fastest[k]
            );
        }
        println!(
            "barrier_timing: {} sizes x {} all_reduces over {}, every result checked element by element: {}",
            SIZES.len(),
            WARMUP + iters,
            ranks(size),
            verdict(all_ok)
        );
    }
    finish(&group, all_ok)
}

/// Element `i` of rank `rank`'s input: a small whole number, so every sum is exact in f32.
fn input(rank: usize, i: usize) -> f32 {
    ((rank * 7 + i) % 13) as f32
}

/// The median of `times` (sorted in place), in microseconds.
fn median_us(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2.0
    }
}
