//! Subgroups: the ranks as a grid of `ROWS` rows (the last one may be short), split into one
//! group per row and one per column with `Group::split`. Each rank holds a vector; the row groups
//! and the column groups all-reduce theirs at the same time, on two threads, while the whole world
//! all-reduces too: three independent collectives in flight on every rank.
//!
//! Every rank can regenerate every rank's input from the seed, so each checks its row sum, column
//! sum and world sum element by element (whole numbers: exact). Rank 0 prints the summary.
//!
//! ```text
//! cargo build --release --workspace --bins --examples
//! target/release/psyrun -n 6 target/release/examples/grid [ROWS] [LEN] [SEED]
//! ```

mod common;

use common::{agree, arg, exit_code, finish, ranks, small_int, verdict};
use psyne::Communicator;
use psyne::ReduceOp;
use std::error::Error;
use std::process::ExitCode;

fn main() -> ExitCode {
    exit_code("grid", run())
}

/// Rank `rank`'s vector.
fn input(seed: u64, rank: usize, len: usize) -> Vec<i64> {
    (0..len).map(|i| small_int(seed, rank, i)).collect()
}

/// The element-wise sum of the inputs of `members`.
fn sum_of(seed: u64, members: impl Iterator<Item = usize>, len: usize) -> Vec<i64> {
    let mut total = vec![0i64; len];
    for r in members {
        for (t, x) in total.iter_mut().zip(input(seed, r, len)) {
            *t += x;
        }
    }
    total
}

fn run() -> Result<bool, Box<dyn Error>> {
    let rows: usize = arg(1, "ROWS", 2)?;
    let len: usize = arg(2, "LEN", 10_000)?;
    let seed: u64 = arg(3, "SEED", 42)?;
    if rows == 0 {
        return Err("ROWS must be at least 1".into());
    }
    let group = psyne::init()?;
    let (rank, size) = (group.rank(), group.size());
    let cols = size.div_ceil(rows);
    let (row, col) = (rank / cols, rank % cols);
    let row_group = group
        .split(Some(row as u32), col as i64)?
        .ok_or("every rank is in a row")?;
    let col_group = group
        .split(Some(col as u32), row as i64)?
        .ok_or("every rank is in a column")?;

    let mine = input(seed, rank, len);
    let (by_row, by_col, world) = std::thread::scope(|s| {
        let r = s.spawn(|| {
            let mut v = mine.clone();
            row_group.all_reduce(&mut v, ReduceOp::Sum).map(|_| v)
        });
        let c = s.spawn(|| {
            let mut v = mine.clone();
            col_group.all_reduce(&mut v, ReduceOp::Sum).map(|_| v)
        });
        let mut w = mine.clone();
        let w = group.all_reduce(&mut w, ReduceOp::Sum).map(|_| w);
        (r.join(), c.join(), w)
    });
    let by_row = by_row.map_err(|_| "the row thread panicked")??;
    let by_col = by_col.map_err(|_| "the column thread panicked")??;
    let world = world?;

    let row_members = (0..size).filter(|r| r / cols == row);
    let col_members = (0..size).filter(|r| r % cols == col);
    let ok = by_row == sum_of(seed, row_members, len)
        && by_col == sum_of(seed, col_members, len)
        && world == sum_of(seed, 0..size, len);
    if !ok {
        eprintln!(
            "grid: rank {rank} (row {row}, column {col}): a sum differs from the sequential one"
        );
    }
    let all_ok = agree(&group, ok)?;
    if rank == 0 {
        println!(
            "grid of {} as {rows} row(s) x {cols} column(s): row, column and world all-reduces of {len} i64 ran concurrently and match the sequential sums: {}",
            ranks(size),
            verdict(all_ok)
        );
    }
    finish(&group, all_ok)
}
