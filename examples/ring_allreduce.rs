//! A ring all-reduce written by hand with `send` and `recv`, checked against the library's
//! `all_reduce` on the same input. Each rank's vector is cut into one chunk per rank; in
//! `size - 1` reduce-scatter steps each rank sends one chunk to the next rank and adds the chunk
//! it receives from the previous one into its own, after which rank `r` holds the complete sum of
//! chunk `r + 1`; in `size - 1` all-gather steps the complete chunks travel once around the ring.
//! Each rank sends `2 (size - 1) / size` of the vector in all, whatever the number of ranks: the
//! reason rings serve large all-reduces.
//!
//! `send` and `recv` block, so a ring in which every rank sends first would deadlock once a chunk
//! outgrows what the transport buffers: even ranks send first and odd ranks receive first.
//!
//! The values are 64-bit integers (sums are exact whatever the order), and the result is
//! compared element by element, exactly, with the library's all-reduce of the same input and
//! with a sequential sum of every rank's input (any rank can regenerate any rank's input from
//! the seed). Rank 0 prints the summary; the exit status is 0 when every rank agrees, 1 on a
//! wrong result, 2 on an error.
//!
//! ```text
//! cargo build --release --workspace --bins --examples
//! target/release/psyrun -n 4 target/release/examples/ring_allreduce [COUNT] [SEED]
//! ```

mod common;

use common::{agree, arg, even_split, exit_code, finish, ranks, small_int, verdict};
use psyne::Communicator;
use psyne::{Group, ReduceOp};
use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    exit_code("ring_allreduce", run())
}

fn run() -> Result<bool, Box<dyn Error>> {
    let count = arg(1, "COUNT", 100_003)?;
    let seed = arg(2, "SEED", 42)?;
    let group = psyne::init()?;
    let (rank, size) = (group.rank(), group.size());
    let mine: Vec<i64> = (0..count).map(|i| input(seed, rank, i)).collect();

    let mut by_hand = mine.clone();
    group.barrier()?; // so that each timing starts together on every rank
    let start = Instant::now();
    ring_all_reduce(&group, &mut by_hand)?;
    let hand_time = start.elapsed();

    let mut library = mine;
    group.barrier()?;
    let start = Instant::now();
    group.all_reduce(&mut library, ReduceOp::Sum)?;
    let library_time = start.elapsed();

    // Element by element, against the library and against a sequential sum.
    let mut wrong = 0usize;
    for (i, (&got, &lib)) in by_hand.iter().zip(&library).enumerate() {
        let want: i64 = (0..size).map(|r| input(seed, r, i)).sum();
        if got != lib || got != want {
            if wrong == 0 {
                eprintln!(
                    "ring_allreduce: rank {rank}: MISMATCH at element {i} (chunk {}): by hand {got}, library {lib}, sequential {want}",
                    (0..size).find(|&c| even_split(count, c, size).contains(&i)).unwrap_or(0)
                );
            }
            wrong += 1;
        }
    }
    if wrong > 0 {
        eprintln!("ring_allreduce: rank {rank}: {wrong} of {count} elements differ");
    }
    let all_ok = agree(&group, wrong == 0)?;
    if rank == 0 {
        let (short, long) = (count / size, count.div_ceil(size));
        println!(
            "ring all-reduce by hand of {count} i64 (seed {seed}) over {}: {} steps, chunks of {}; equals the library's all_reduce and the sequential sum element by element: {}",
            ranks(size),
            2 * (size - 1),
            if short == long { format!("{short}") } else { format!("{short}-{long}") },
            verdict(all_ok)
        );
        println!(
            "  time on rank 0: by hand {:.3} ms, library ({}) {:.3} ms",
            hand_time.as_secs_f64() * 1e3,
            group.algorithm_for(psyne::Collective::AllReduce, count * 8)?,
            library_time.as_secs_f64() * 1e3
        );
    }
    finish(&group, all_ok)
}

/// Sums `buf` element-wise over the ranks of `group`, in place, by a ring of sends and receives.
fn ring_all_reduce(group: &Group, buf: &mut [i64]) -> psyne::Result<()> {
    let (rank, size, count) = (group.rank(), group.size(), buf.len());
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let mut incoming = vec![0i64; count.div_ceil(size)];
    // Reduce-scatter: at step s rank r sends chunk r - s and adds into chunk r - s - 1 (mod size).
    for step in 0..size - 1 {
        let out = even_split(count, (rank + size - step) % size, size);
        let into = even_split(count, (rank + 2 * size - step - 1) % size, size);
        let received = &mut incoming[..into.len()];
        exchange(group, &buf[out], next, received, prev)?;
        for (d, s) in buf[into].iter_mut().zip(received.iter()) {
            *d = d.wrapping_add(*s);
        }
    }
    // All-gather: rank r now holds the complete chunk r + 1; at step s it sends chunk r + 1 - s
    // and receives the complete chunk r - s, overwriting its partial sum.
    for step in 0..size - 1 {
        let out = even_split(count, (rank + 1 + size - step) % size, size);
        let into = even_split(count, (rank + size - step) % size, size);
        let received = &mut incoming[..into.len()];
        exchange(group, &buf[out], next, received, prev)?;
        buf[into].copy_from_slice(received);
    }
    Ok(())
}

/// Sends `out` to `next` and receives `into` from `prev`; even ranks send first, odd ranks
/// receive first, so the blocking calls never all wait for each other around the ring.
fn exchange(
    group: &Group,
    out: &[i64],
    next: usize,
    into: &mut [i64],
    prev: usize,
) -> psyne::Result<()> {
    if group.rank() % 2 == 0 {
        group.send(out, next)?;
        group.recv(into, prev)
    } else {
        group.recv(into, prev)?;
        group.send(out, next)
    }
}

/// Element `i` of rank `rank`'s input, a whole number in `[-1000, 1000]`: a function of the seed,
/// the rank and the index only, so any rank can compute any rank's input.
fn input(seed: u64, rank: usize, i: usize) -> i64 {
    small_int(seed, rank, i)
}
