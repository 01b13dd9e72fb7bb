//! `psybench check`: every collective × reduce op × element type at a few sizes, on every backend
//! asked for, each result compared element by element with the sequential oracle. Two backends
//! that both match the oracle exactly match each other; any difference is reported with the
//! first differing index.

use crate::backend::{on_backend, AnyComm, BenchComm};
use crate::model::{Backend, Sweep};
use psyne::{conformance, DType, Result};

/// Runs the check on every backend in `comms`; prints a line per backend and type on rank 0 and
/// returns the number of wrong results (the same on every rank only for this rank's view: the
/// caller combines).
pub fn run_check(comms: &[AnyComm], sweep: &Sweep) -> Result<u64> {
    let mut wrong = 0u64;
    for comm in comms {
        wrong += on_backend!(comm, c => check_backend(c, sweep))?;
    }
    Ok(wrong)
}

/// Checks one backend; returns the number of wrong results on all ranks.
fn check_backend<C: BenchComm>(comm: &C, sweep: &Sweep) -> Result<u64> {
    let mut wrong = 0u64;
    let rank = comm.rank();
    // MPI has no half-precision reductions: those types are checked for data movement only.
    let no_reductions: &[DType] = match comm.kind() {
        Backend::Mpi => &[DType::F16, DType::BF16],
        Backend::Native => &[],
    };
    for dtype in DType::ALL {
        let counts: Vec<usize> = sweep
            .sizes
            .iter()
            .map(|&b| b.div_ceil(dtype.size() as u64) as usize)
            .collect();
        let bad = conformance::check_types(comm, &[dtype], no_reductions, &counts, 11)?;
        let mut all_bad = [bad.len() as u64];
        comm.all_reduce(&mut all_bad, psyne::ReduceOp::Sum)?;
        wrong += all_bad[0];
        if rank == 0 {
            let note = if no_reductions.contains(&dtype) {
                " (data movement only)"
            } else {
                ""
            };
            if bad.is_empty() && all_bad[0] == 0 {
                println!("{:>6} {:>4}: every collective matches the oracle{note}, element counts {counts:?}", comm.kind().name(), dtype.name());
            } else {
                println!(
                    "{:>6} {:>4}: {} wrong results on all ranks",
                    comm.kind().name(),
                    dtype.name(),
                    all_bad[0]
                );
            }
        }
        for m in bad.iter().take(5) {
            println!("{:>6} rank {rank}: WRONG {m}", comm.kind().name());
        }
    }
    Ok(wrong)
}
