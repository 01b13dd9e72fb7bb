//! A sweep: every requested operation × size × backend × algorithm, measured on every rank;
//! rank 0 prints each row as it is measured and rewrites the CSV and JSON after every size.

use crate::backend::{on_backend, AnyComm, BenchComm};
use crate::export;
use crate::factors;
use crate::fit;
use crate::measure::{measure, Case, Measurement};
use crate::model::{Backend, BenchColl, Report, Sweep};
use crate::sizes;
use crate::stats::{self, RowKey};
use crate::table::{self, Progress};
use psyne::{Algo, Communicator, Error, ErrorKind, Result};

/// Host names of every rank, in rank order (gathered as fixed 64-byte fields).
pub fn hosts<C: Communicator>(comm: &C) -> Result<Vec<String>> {
    const FIELD: usize = 64;
    let mut mine = [0u8; FIELD];
    let name = psyne::hostname();
    let n = name.len().min(FIELD);
    mine[..n].copy_from_slice(&name.as_bytes()[..n]);
    let mut all = vec![0u8; FIELD * comm.size()];
    comm.all_gather_into(&mine, &mut all)?;
    Ok(all
        .chunks(FIELD)
        .map(|c| {
            let end = c.iter().position(|b| *b == 0).unwrap_or(FIELD);
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect())
}

/// This rank, the job's size, every rank's host and [`unbound_ranks`] (every rank calls this).
pub fn job_view<C: Communicator>(comm: &C) -> Result<JobView> {
    Ok((comm.rank(), comm.size(), hosts(comm)?, unbound_ranks(comm)?))
}

/// What [`job_view`] returns: rank, size, hosts, unbound ranks.
pub type JobView = (usize, usize, Vec<String>, Option<usize>);

/// How many ranks of `comm` may run on any core of their host (every rank calls this); `None`
/// if some rank could not tell.
pub fn unbound_ranks<C: Communicator>(comm: &C) -> Result<Option<usize>> {
    // Per rank: 1 unbound, 0 bound, and a second count of ranks that could not tell.
    let mine = match crate::meta::runs_on_every_core() {
        Some(true) => [1u64, 0],
        Some(false) => [0, 0],
        None => [0, 1],
    };
    let mut total = mine;
    comm.all_reduce(&mut total, psyne::ReduceOp::Sum)?;
    Ok((total[1] == 0).then_some(total[0] as usize))
}

/// The note a table starts with when `unbound` of `size` ranks may run on any core.
pub fn unbound_note(unbound: Option<usize>, size: usize) -> Option<String> {
    match unbound {
        Some(n) if n > 0 => Some(format!(
            "# {n} of {size} ranks may run on any core (not bound): small-message times vary from \
             run to run; psyrun and mpirun bind by default when every rank has a core"
        )),
        _ => None,
    }
}

/// What transport a backend's rows say they used.
fn transport_of<C: BenchComm>(comm: &C) -> String {
    match comm.kind() {
        // The group chose per peer (PSY_TRANSPORT): report what it uses.
        Backend::Native => comm.native().map(|g| g.transports()).unwrap_or_default(),
        Backend::Mpi => match std::env::var("OMPI_MCA_btl") {
            Ok(btl) => format!("mpi(btl {btl})"),
            Err(_) => "mpi".into(),
        },
    }
}

/// The backends in the order one size measures them: `rounds` times over, the first backend
/// first in odd rounds and last in even ones, so neither always runs right after the other.
fn round_order(comms: &[AnyComm], rounds: u64) -> Vec<&AnyComm> {
    (0..rounds.max(1))
        .flat_map(|round| {
            let mut order: Vec<&AnyComm> = comms.iter().collect();
            if round % 2 == 1 {
                order.reverse();
            }
            order
        })
        .collect()
}

/// The outcome of a sweep on rank 0 (other ranks get the same `wrong`).
pub struct SweepOutcome {
    /// Everything measured (complete on rank 0 only).
    pub report: Report,
    /// Wrong elements over the whole sweep.
    pub wrong: u64,
}

/// Runs `sweep` over `comms` (one per backend, interleaved per size). Every rank calls this.
pub fn run_sweep(comms: &[AnyComm], sweep: &Sweep) -> Result<SweepOutcome> {
    let first = comms
        .first()
        .ok_or_else(|| Error::config("no backend to run; use --backend native or mpi"))?;
    let (rank, size, hosts, unbound) = on_backend!(first, c => job_view(c))?;
    let local = hosts.iter().filter(|h| **h == hosts[rank]).count();
    let largest = sweep.sizes.iter().copied().max().unwrap_or(0);
    crate::memory::check_fits(largest, size, local, sweep.check)?;
    let mut run = SweepRun {
        comms,
        sweep,
        rank,
        size,
        report: empty_report(comms, sweep, rank, size, &hosts, unbound),
        corrupt: std::env::var("PSYBENCH_TEST_CORRUPT").is_ok_and(|v| v == "1"),
        progress: Progress::new(step_count(sweep), rank),
        wrong: 0,
    };
    if rank == 0 {
        if let Some(note) = unbound_note(unbound, size) {
            run.progress.println(&note);
        }
        if let Some(file) = &run.report.meta.tuning_file {
            run.progress.println(&format!(
                "# automatic choices from the tuning file {file} (PSY_TUNING=off: the built-in ones)"
            ));
        }
        run.progress.println(&table::header(sweep.cadence));
    }
    for &coll in &sweep.collectives {
        for bytes in sizes_of(coll, sweep) {
            run.measure_size(coll, bytes)?;
        }
    }
    run.progress.finish();
    if rank == 0 {
        summarise(&run.report, sweep, run.wrong)?;
    }
    Ok(SweepOutcome {
        report: run.report,
        wrong: run.wrong,
    })
}

/// The report before anything is measured: the run's metadata as rank `rank` of `size` sees it, no
/// records.
fn empty_report(
    comms: &[AnyComm],
    sweep: &Sweep,
    rank: usize,
    size: usize,
    hosts: &[String],
    unbound: Option<usize>,
) -> Report {
    let mut meta = crate::meta::collect(sweep, size, hosts, rank);
    meta.unbound_ranks = unbound;
    meta.backends = comms.iter().map(|c| c.kind().name().to_string()).collect();
    meta.peak_gbps = sweep.peak_gbps;
    meta.tuning_file = comms
        .iter()
        .find_map(|c| c.native())
        .and_then(|g| g.tuning().file.as_ref())
        .map(|f| f.path.display().to_string());
    Report {
        meta,
        records: Vec::new(),
        fits: Vec::new(),
    }
}

/// The sizes `coll` is measured at: barrier once, at size 0; the others at the sweep's sizes.
fn sizes_of(coll: BenchColl, sweep: &Sweep) -> Vec<u64> {
    if coll == BenchColl::Barrier {
        vec![0]
    } else {
        sweep.sizes.clone()
    }
}

/// How many sizes the whole sweep measures (the progress bar's length).
fn step_count(sweep: &Sweep) -> u64 {
    let steps: usize = sweep
        .collectives
        .iter()
        .map(|c| sizes_of(*c, sweep).len())
        .sum();
    steps as u64
}

/// A sweep under way on one rank: what it runs on, and what it has gathered so far.
struct SweepRun<'a> {
    comms: &'a [AnyComm],
    sweep: &'a Sweep,
    rank: usize,
    size: usize,
    /// The rows measured so far (rank 0 only).
    report: Report,
    /// Test-only: spoil a result to prove the check notices (`PSYBENCH_TEST_CORRUPT=1`).
    corrupt: bool,
    progress: Progress,
    /// Wrong elements so far.
    wrong: u64,
}

impl SweepRun<'_> {
    /// Measures `coll` at `bytes` on every backend and algorithm, then (rank 0) rewrites the
    /// CSV and JSON.
    fn measure_size(&mut self, coll: BenchColl, bytes: u64) -> Result<()> {
        let sweep = self.sweep;
        let (count, actual) = sizes::element_count(coll, bytes, sweep.dtype, self.size);
        self.progress
            .set_message(&format!("{} {}", coll.name(), sizes::format_size(actual)));
        let per_round = self.comms.len().max(1);
        for (i, comm) in round_order(self.comms, sweep.rounds)
            .into_iter()
            .enumerate()
        {
            for order in orders_of(comm, sweep, i / per_round) {
                for algo in algos_of(comm, coll, sweep) {
                    let case = Case {
                        corrupt: self.corrupt,
                        order,
                        ..Case::of_sweep(sweep, coll, (count, actual), algo)
                    };
                    on_backend!(comm, c => self.measure_row(c, &case, actual))?;
                }
            }
        }
        if self.rank == 0 {
            self.report.fits = fit::fit_report(&self.report.records, sweep.peak_gbps);
            export::rewrite(sweep.csv.as_deref(), sweep.json.as_deref(), &self.report)
                .map_err(|e| Error::new(ErrorKind::Io, format!("writing results: {e}")))?;
        }
        self.progress.inc(1);
        Ok(())
    }

    /// Measures one `case` on `comm` (`actual` bytes, for the error message); rank 0 prints
    /// the row and keeps it.
    fn measure_row<C: BenchComm>(&mut self, comm: &C, case: &Case, actual: u64) -> Result<()> {
        let m = measure(comm, case).map_err(|e| {
            Error::new(
                e.kind(),
                format!(
                    "{} {} on {}: {e}",
                    case.coll.name(),
                    sizes::format_size(actual),
                    comm.kind().name()
                ),
            )
        })?;
        self.wrong += m.wrong.unwrap_or(0);
        let key = row_key(comm, case, &m, self.sweep, self.size);
        let record = stats::record(&key, &m.times_us);
        if self.rank == 0 {
            self.progress.println(&table::row(&record));
            self.report.records.push(record);
        }
        Ok(())
    }
}

/// The reduction orders to run on `comm` in round `round`: the sweep's, the first one first in
/// even rounds and last in odd ones (as [`round_order`] alternates backends); the group's own
/// (`None`) on MPI and when the sweep names none.
fn orders_of(comm: &AnyComm, sweep: &Sweep, round: usize) -> Vec<Option<psyne::ReduceOrder>> {
    if comm.kind() != Backend::Native || sweep.reduce_orders.is_empty() {
        return vec![None];
    }
    let mut orders: Vec<_> = sweep.reduce_orders.iter().copied().map(Some).collect();
    if round % 2 == 1 {
        orders.reverse();
    }
    orders
}

/// The algorithms to run `coll` with on `comm`: the requested ones on the native backend; MPI
/// makes its own choice.
fn algos_of(comm: &AnyComm, coll: BenchColl, sweep: &Sweep) -> Vec<Option<Algo>> {
    match comm.kind() {
        Backend::Native => factors::algos_to_run(coll, &sweep.algos),
        Backend::Mpi => vec![None],
    }
}

/// Everything a row records about measurement `m` of `case` on `comm` except its times.
pub fn row_key<C: BenchComm>(
    comm: &C,
    case: &Case,
    m: &Measurement,
    sweep: &Sweep,
    ranks: usize,
) -> RowKey {
    let coll = case.coll;
    RowKey {
        collective: coll,
        backend: comm.kind(),
        algo: m.algo.clone(),
        transport: transport_of(comm),
        dtype: sweep.dtype,
        op: sweep.op,
        root: sweep.root,
        ranks,
        bytes: m.bytes,
        count: m.count,
        iters: case.iters,
        warmup: case.warmup,
        // psyne's all-reduce, reduce and broadcast work in place, its other operations out of place.
        in_place: sweep.in_place
            || matches!(
                coll,
                BenchColl::AllReduce | BenchColl::Reduce | BenchColl::Broadcast
            ),
        cadence: sweep.cadence,
        wrong: m.wrong,
    }
}

/// Rank 0's last words: the fits table, the plot, and how many elements were wrong.
fn summarise(report: &Report, sweep: &Sweep, wrong: u64) -> Result<()> {
    export::finish(sweep.csv.as_deref(), sweep.json.as_deref(), report)
        .map_err(|e| Error::new(ErrorKind::Io, format!("writing results: {e}")))?;
    if !report.fits.is_empty() {
        println!("\n{}", table::fits_table(&report.fits));
    }
    if let Some(png) = &sweep.plot {
        crate::plot::draw(std::slice::from_ref(report), png)
            .map_err(|e| Error::new(ErrorKind::Io, format!("drawing {}: {e}", png.display())))?;
        println!("# plot: {}", png.display());
    }
    if wrong > 0 {
        println!("# {wrong} wrong elements: the results above marked with #wrong > 0 differ from the oracle");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbound_ranks_get_a_note_and_bound_or_unknown_ones_none() {
        let note = unbound_note(Some(2), 4).unwrap();
        assert!(note.contains("2 of 4 ranks may run on any core"), "{note}");
        assert!(note.contains("psyrun and mpirun bind by default"), "{note}");
        assert_eq!(unbound_note(Some(0), 4), None);
        assert_eq!(unbound_note(None, 4), None);
        assert!(crate::meta::runs_on_every_core().is_some());
    }
}
