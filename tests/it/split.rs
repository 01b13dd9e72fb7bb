//! `Group::split`: subgroups with their own connections, ordered by key, running collectives
//! concurrently with each other and with the parent; ranks that join none.

use crate::common;

use common::Wiring;
use psyne::Communicator;
use psyne::{ReduceOp, Result};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

#[test]
fn rows_and_columns_of_a_grid_reduce_concurrently_with_the_parent() {
    // 6 ranks as a 2 × 3 grid: rank = 3 * row + col.
    for wiring in [Wiring::Shm, Wiring::Tcp, Wiring::Mixed] {
        let results = common::with_wiring(6, wiring, T, |g| -> Result<(Vec<f64>, usize, usize)> {
            let (row, col) = (g.rank() / 3, g.rank() % 3);
            let rows = g
                .split(Some(row as u32), col as i64)?
                .expect("every rank is in a row");
            let cols = g
                .split(Some(col as u32), row as i64)?
                .expect("every rank is in a column");
            assert_eq!((rows.size(), rows.rank()), (3, col));
            assert_eq!((cols.size(), cols.rank()), (2, row));
            let v = (g.rank() + 1) as f64;
            // Row, column and parent collectives at the same time, on three threads.
            let (row_sum, col_sum) = std::thread::scope(|s| {
                let r = s.spawn(|| {
                    let mut b = vec![v; 10_000];
                    for _ in 0..20 {
                        b.fill(v);
                        rows.all_reduce(&mut b, ReduceOp::Sum)?;
                    }
                    Ok::<_, psyne::Error>(b[0])
                });
                let c = s.spawn(|| {
                    let mut b = vec![v; 333];
                    for _ in 0..20 {
                        b.fill(v);
                        cols.all_reduce(&mut b, ReduceOp::Sum)?;
                    }
                    Ok::<_, psyne::Error>(b[332])
                });
                let mut p = vec![v; 1000];
                for _ in 0..20 {
                    p.fill(v);
                    g.all_reduce(&mut p, ReduceOp::Sum)?;
                }
                assert!(p.iter().all(|&x| x == 21.0), "parent sum");
                Ok::<_, psyne::Error>((r.join().expect("row")?, c.join().expect("col")?))
            })?;
            Ok((vec![row_sum, col_sum], row, col))
        });
        for (rank, r) in results.into_iter().enumerate() {
            let (sums, row, col) = r.unwrap_or_else(|e| panic!("{wiring:?} rank {rank}: {e}"));
            // Row r holds ranks 3r+1..3r+3 (values), column c holds c+1 and c+4.
            let want_row = (0..3).map(|c| (3 * row + c + 1) as f64).sum::<f64>();
            let want_col = (col + 1 + col + 4) as f64;
            assert_eq!(sums, vec![want_row, want_col], "{wiring:?} rank {rank}");
        }
    }
}

#[test]
fn keys_order_the_subgroup_and_no_color_joins_nothing() {
    let results = common::with_wiring(
        5,
        Wiring::Shm,
        T,
        |g| -> Result<Option<(usize, usize, Vec<i64>)>> {
            // Ranks 0, 2, 4 join color 7 with keys that reverse them; 1 and 3 join nothing.
            let color = (g.rank() % 2 == 0).then_some(7);
            let sub = g.split(color, -(g.rank() as i64))?;
            let Some(sub) = sub else { return Ok(None) };
            let order = sub.all_gather(&[g.rank() as i64])?;
            // The parent still works after the split, on every rank.
            Ok(Some((sub.rank(), sub.size(), order)))
        },
    );
    for (rank, r) in results.into_iter().enumerate() {
        let got = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        if rank % 2 == 1 {
            assert!(got.is_none(), "rank {rank} joined a subgroup");
        } else {
            let (sub_rank, size, order) = got.expect("an even rank is in the subgroup");
            assert_eq!(size, 3);
            assert_eq!(sub_rank, (4 - rank) / 2, "rank {rank}");
            assert_eq!(order, vec![4, 2, 0]);
        }
    }
}

#[test]
fn a_group_formed_from_a_borrowed_store_says_how_to_split() {
    let g = psyne::Group::alone();
    let Err(e) = g.split(Some(0), 0) else {
        panic!("alone() keeps no store, yet split succeeded");
    };
    assert!(e.to_string().contains("shared_store"), "{e}");
}
