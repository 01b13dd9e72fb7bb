//! A sweep: every requested operation × size × backend × algorithm, measured on every rank;
//! rank 0 prints each row as it is measured and rewrites the CSV and JSON after every size.

use crate::backend::AnyComm;
use crate::export;
use crate::factors;
use crate::fit;
use crate::measure::{measure, Case};
use crate::model::{Backend, BenchColl, Report, Sweep};
use crate::sizes;
use crate::stats::{self, RowKey};
use crate::table::{self, Progress};
use psyne::{Communicator, Error, ErrorKind, Result};

/// Host names of every rank, in rank order (gathered as fixed 64-byte fields).
pub fn hosts(comm: &AnyComm) -> Result<Vec<String>> {
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

/// What transport a backend's rows say they used.
fn transport_of(comm: &AnyComm) -> String {
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
    let (rank, size) = (first.rank(), first.size());
    let hosts = hosts(first)?;
    let mut meta = crate::meta::collect(sweep, size, &hosts);
    meta.backends = comms.iter().map(|c| c.kind().name().to_string()).collect();
    meta.peak_gbps = sweep.peak_gbps;
    let mut report = Report {
        meta,
        records: Vec::new(),
        fits: Vec::new(),
    };
    let corrupt = std::env::var("PSYBENCH_TEST_CORRUPT").is_ok_and(|v| v == "1");

    let steps: usize = sweep
        .collectives
        .iter()
        .map(|c| {
            if *c == BenchColl::Barrier {
                1
            } else {
                sweep.sizes.len()
            }
        })
        .sum();
    let progress = Progress::new(steps as u64, rank);
    if rank == 0 {
        progress.println(&table::header(sweep.cadence));
    }
    let mut wrong = 0;
    for &coll in &sweep.collectives {
        let sizes: Vec<u64> = if coll == BenchColl::Barrier {
            vec![0]
        } else {
            sweep.sizes.clone()
        };
        for bytes in sizes {
            let (count, actual) = sizes::element_count(coll, bytes, sweep.dtype, size);
            let (dw, di) = sizes::default_iters(actual);
            let (warmup, iters) = (sweep.warmup.unwrap_or(dw), sweep.iters.unwrap_or(di));
            progress.set_message(&format!("{} {}", coll.name(), sizes::format_size(actual)));
            for comm in round_order(comms, sweep.rounds) {
                let algos = match comm.kind() {
                    Backend::Native => factors::algos_to_run(coll, &sweep.algos),
                    Backend::Mpi => vec![None],
                };
                for algo in algos {
                    let case = Case {
                        coll,
                        count,
                        dtype: sweep.dtype,
                        op: sweep.op,
                        root: sweep.root,
                        algo,
                        warmup,
                        iters,
                        cadence: sweep.cadence,
                        check: sweep.check,
                        corrupt,
                        shared: sweep.shared_buffers,
                    };
                    let m = measure(comm, &case).map_err(|e| {
                        Error::new(
                            e.kind(),
                            format!(
                                "{} {} on {}: {e}",
                                coll.name(),
                                sizes::format_size(actual),
                                comm.kind().name()
                            ),
                        )
                    })?;
                    wrong += m.wrong.unwrap_or(0);
                    let key = RowKey {
                        collective: coll,
                        backend: comm.kind(),
                        algo: m.algo.clone(),
                        transport: transport_of(comm),
                        dtype: sweep.dtype,
                        op: sweep.op,
                        root: sweep.root,
                        ranks: size,
                        bytes: m.bytes,
                        count: m.count,
                        iters,
                        warmup,
                        // psyne's all-reduce, reduce and broadcast work in place, its other operations out of place.
                        in_place: sweep.in_place
                            || matches!(
                                coll,
                                BenchColl::AllReduce | BenchColl::Reduce | BenchColl::Broadcast
                            ),
                        cadence: sweep.cadence,
                        wrong: m.wrong,
                    };
                    let record = stats::record(&key, &m.times_us);
                    if rank == 0 {
                        progress.println(&table::row(&record));
                        report.records.push(record);
                    }
                }
            }
            if rank == 0 {
                report.fits = fit::fit_report(&report.records, sweep.peak_gbps);
                export::rewrite(sweep.csv.as_deref(), sweep.json.as_deref(), &report)
                    .map_err(|e| Error::new(ErrorKind::Io, format!("writing results: {e}")))?;
            }
            progress.inc(1);
        }
    }
    progress.finish();
    if rank == 0 {
        if !report.fits.is_empty() {
            println!("\n{}", table::fits_table(&report.fits));
        }
        if let Some(png) = &sweep.plot {
            crate::plot::draw(std::slice::from_ref(&report), png).map_err(|e| {
                Error::new(ErrorKind::Io, format!("drawing {}: {e}", png.display()))
            })?;
            println!("# plot: {}", png.display());
        }
        if wrong > 0 {
            println!("# {wrong} wrong elements: the results above marked with #wrong > 0 differ from the oracle");
        }
    }
    Ok(SweepOutcome { report, wrong })
}
