//! `psybench tune`: measures every algorithm of every collective at every size on the group it
//! runs in, picks the fastest per size, and writes the result as a section of a psyne tuning
//! file ([`psyne::tuning::rules`]), which every later job on this machine loads.
//!
//! The default choice (the built-in thresholds; a tuning file already in place is ignored while
//! tuning) is kept unless another algorithm beats it by more than `--margin` in the median of
//! the rounds, so noise does not turn into rules. Each size measures the candidates in turn,
//! their order reversed every other round.

use crate::backend::AnyComm;
use crate::export;
use crate::factors::{self, to_collective};
use crate::measure::{measure, per_rank_bytes, Case};
use crate::model::{BenchColl, Report, Sweep};
use crate::runner::{self, row_key};
use crate::sizes;
use crate::stats;
use psyne::tuning::rules::{Rule, Section};
use psyne::tuning::{Rules, Scope, FLAT_MAX_BYTES};
use psyne::{Algo, Collective, Communicator, Error, ErrorKind, Group, Result};
use std::path::{Path, PathBuf};

/// What `psybench tune` was asked for, beyond the sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneOptions {
    /// The tuning file to write (its other sections are kept); `None`: the default location.
    pub output: Option<PathBuf>,
    /// How much faster (a fraction: 0.05 is 5%) another algorithm must be to replace the
    /// default.
    pub margin: f64,
}

/// One size of one collective, measured: the default's choice and every candidate's median.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Bytes per rank, as the algorithm choice sees them.
    pub per_rank: u64,
    /// The size as psybench reports it.
    pub bytes: u64,
    /// The default choice, and its median time in microseconds.
    pub default: (Algo, f64),
    /// Every forced algorithm's median time.
    pub forced: Vec<(Algo, f64)>,
}

impl Point {
    /// The algorithm to use at this size, with its time: the fastest, if it beats the default
    /// by more than `margin`; else the default.
    pub fn choice(&self, margin: f64) -> (Algo, f64) {
        let best = self
            .forced
            .iter()
            .copied()
            .filter(|(_, t)| t.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            Some((algo, t)) if t < self.default.1 * (1.0 - margin) => (algo, t),
            _ => self.default,
        }
    }
}

/// The rules for `coll` from its measured `points` (ascending sizes). At each size the choice
/// is the tuned algorithm where it differs from the default, else `default` (the built-in
/// choice, which then also decides the sizes between two such points). Consecutive sizes with
/// the same choice make one line; between two sizes whose choices differ the boundary is their
/// geometric mean, so each measured choice also covers its neighbourhood. The last line covers
/// every larger size (`max`); a `flat` line never goes beyond the largest part a board takes
/// (`psyne::tuning::FLAT_MAX_BYTES`).
pub fn rules_for(coll: Collective, points: &[Point], margin: f64) -> Vec<Rule> {
    let choices: Vec<Option<Algo>> = points
        .iter()
        .map(|p| Some(p.choice(margin).0).filter(|a| *a != p.default.0))
        .collect();
    let mut rules: Vec<Rule> = Vec::new();
    for (i, (p, &algo)) in points.iter().zip(&choices).enumerate() {
        let up_to = match (points.get(i + 1), choices.get(i + 1)) {
            (Some(next), Some(&next_algo)) if next_algo != algo => {
                ((p.per_rank as f64 * next.per_rank as f64).sqrt() as u64).max(p.per_rank)
            }
            (Some(_), _) => continue,
            (None, _) => u64::MAX,
        };
        let up_to = if algo == Some(Algo::Flat) {
            up_to.min(FLAT_MAX_BYTES as u64)
        } else {
            up_to
        };
        rules.push(Rule { coll, up_to, algo });
    }
    rules
}

/// The algorithms `coll` is measured with besides the default: every one that implements it,
/// but `hier` and `two_level` only on a group with a hierarchy (several hosts, several ranks on
/// one), where they differ from the flat algorithms.
fn candidates(coll: BenchColl, hierarchical: bool) -> Vec<Algo> {
    factors::algos_for(coll)
        .iter()
        .copied()
        .filter(|a| !matches!(a, Algo::Hier | Algo::TwoLevel) || hierarchical)
        .collect()
}

/// Whether ranks on `hosts` (one name per rank) form a hierarchy: several hosts, and several
/// ranks on at least one.
fn hierarchical(hosts: &[String]) -> bool {
    let mut distinct: Vec<&String> = hosts.iter().collect();
    distinct.sort();
    distinct.dedup();
    distinct.len() > 1 && distinct.len() < hosts.len()
}

/// Tunes on `comm` (every rank calls this); rank 0 writes the file and prints the table.
/// Returns how many result elements were wrong.
pub fn run(comm: &AnyComm, sweep: &Sweep, options: &TuneOptions) -> Result<u64> {
    let group = comm.native().ok_or_else(|| {
        Error::config("psybench tune tunes psyne's own backend; leave out --backend mpi")
    })?;
    let (rank, size, hosts, unbound) = runner::job_view(group)?;
    let scope = group.tuning_scope();
    let hier = hierarchical(&hosts);
    let mut report = Report {
        meta: crate::model::RunMeta {
            unbound_ranks: unbound,
            ..crate::meta::collect(sweep, size, &hosts, rank)
        },
        records: Vec::new(),
        fits: Vec::new(),
    };
    let mut section = Section {
        scope,
        ranks: size,
        rules: Vec::new(),
    };
    let mut table = Vec::new();
    let mut wrong = 0;
    for &coll in &sweep.collectives {
        let Some(c) = to_collective(coll, sweep.root) else {
            continue;
        };
        let mut points = Vec::new();
        for bytes in sizes_of(coll, sweep) {
            let (point, bad) = measure_point(group, sweep, coll, bytes, hier, &mut report)?;
            wrong += bad;
            if rank == 0 {
                table.push(row(coll, &point, options.margin));
            }
            points.push(point);
        }
        section.rules.extend(rules_for(c, &points, options.margin));
    }
    if rank == 0 {
        export::rewrite(sweep.csv.as_deref(), sweep.json.as_deref(), &report)
            .and_then(|_| export::finish(sweep.csv.as_deref(), sweep.json.as_deref(), &report))
            .map_err(|e| Error::new(ErrorKind::Io, format!("writing results: {e}")))?;
        let path = match &options.output {
            Some(p) => p.clone(),
            None => default_output()?,
        };
        write_section(&path, section.clone())?;
        if let Some(note) = runner::unbound_note(unbound, size) {
            println!("{note}");
        }
        if let Some(load) = report.meta.load_average {
            println!("# load average {load:.2} at the start (tune on a quiet machine)");
        }
        println!("{}", render_table(&section, &table));
        println!(
            "# wrote [{} {}] to {} (every psyne job on {} ranks or more{} reads it; PSY_TUNING=off ignores it)",
            scope.name(),
            size,
            path.display(),
            size,
            if scope == Scope::Shm { " on one host" } else { " across hosts or over TCP" }
        );
    }
    Ok(wrong)
}

/// The sizes of `coll`: barrier at 0 only.
fn sizes_of(coll: BenchColl, sweep: &Sweep) -> Vec<u64> {
    if coll == BenchColl::Barrier {
        vec![0]
    } else {
        sweep.sizes.clone()
    }
}

/// Measures `coll` at `bytes` with the default and with each candidate, `sweep.rounds` times;
/// every row goes into `report`.
fn measure_point(
    comm: &Group,
    sweep: &Sweep,
    coll: BenchColl,
    bytes: u64,
    hier: bool,
    report: &mut Report,
) -> Result<(Point, u64)> {
    let size = comm.size();
    let (count, actual) = sizes::element_count(coll, bytes, sweep.dtype, size);
    let mut order: Vec<Option<Algo>> = vec![None];
    order.extend(candidates(coll, hier).into_iter().map(Some));
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); order.len()];
    let mut default_algo = None;
    let mut wrong = 0;
    for round in 0..sweep.rounds.max(1) {
        let mut turn: Vec<usize> = (0..order.len()).collect();
        if round % 2 == 1 {
            turn.reverse();
        }
        for i in turn {
            let case = Case {
                shared: false,
                ..Case::of_sweep(sweep, coll, (count, actual), order[i])
            };
            let m = measure(comm, &case).map_err(|e| {
                let algo = order[i].map_or("the default".to_string(), |a| a.to_string());
                Error::new(
                    e.kind(),
                    format!(
                        "{} {} with {algo}: {e}",
                        coll.name(),
                        sizes::format_size(actual)
                    ),
                )
            })?;
            wrong += m.wrong.unwrap_or(0);
            if order[i].is_none() {
                default_algo = Algo::parse(&m.algo);
            }
            let mut record = stats::record(&row_key(comm, &case, &m, sweep, size), &m.times_us);
            times[i].push(record.time_us());
            if order[i].is_none() {
                record.algo = format!("default:{}", record.algo);
            }
            report.records.push(record);
        }
    }
    let default_algo = default_algo.ok_or_else(|| {
        Error::config(format!(
            "{}: the default algorithm has no name psyne parses",
            coll.name()
        ))
    })?;
    let per_rank = per_rank_bytes(coll, count, sweep.dtype.size() as u64, size) as u64;
    let point = Point {
        per_rank,
        bytes: actual,
        default: (default_algo, median(&times[0])),
        forced: order[1..]
            .iter()
            .zip(&times[1..])
            .map(|(a, t)| (a.unwrap_or(default_algo), median(t)))
            .collect(),
    };
    Ok((point, wrong))
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One line of the printed table: collective, size, the default and the tuned choice.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRow {
    coll: BenchColl,
    bytes: u64,
    default: (Algo, f64),
    tuned: (Algo, f64),
}

fn row(coll: BenchColl, p: &Point, margin: f64) -> TableRow {
    TableRow {
        coll,
        bytes: p.bytes,
        default: p.default,
        tuned: p.choice(margin),
    }
}

/// The table of default and tuned choices, then the section as the file holds it.
pub fn render_table(section: &Section, rows: &[TableRow]) -> String {
    let mut s = String::from(
        "| collective | size | default | µs | tuned | µs | default ÷ tuned |\n|---|---:|---|---:|---|---:|---:|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {:.2} | {}{} | {:.2} | {:.2} |\n",
            r.coll.name(),
            sizes::format_size(r.bytes),
            r.default.0,
            r.default.1,
            r.tuned.0,
            if r.tuned.0 == r.default.0 { "" } else { " *" },
            r.tuned.1,
            r.default.1 / r.tuned.1
        );
    }
    let file = Rules::new(vec![section.clone()])
        .map(|r| r.to_string())
        .unwrap_or_default();
    format!("{s}\n(* differs from the default)\n\n{file}")
}

/// Where `psybench tune` writes when no `--output` is given: the first place psyne looks.
fn default_output() -> Result<PathBuf> {
    psyne::tuning::default_tuning_paths(&|n| std::env::var(n).ok())
        .into_iter()
        .next()
        .ok_or_else(|| {
            Error::config(
                "no HOME or XDG_CONFIG_HOME to put the tuning file under; give --output FILE",
            )
        })
}

/// Puts `section` into the tuning file at `path`, keeping its other sections (a regular file
/// that does not parse is left alone and named; a FIFO or `-` gets the new section alone).
fn write_section(path: &Path, section: Section) -> Result<()> {
    let mut rules = if path.is_file() {
        Rules::load(path).map_err(|e| {
            Error::config(format!(
                "{e}; not overwriting it: fix or remove it, or give another --output"
            ))
        })?
    } else {
        Rules::default()
    };
    rules.replace(section)?;
    let text = format!(
        "# psyne tuning file, written by `psybench tune` on {} ({}); see `psyne::tuning::rules`\n{}",
        psyne::hostname(),
        crate::meta::now_rfc3339(),
        rules
    );
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {} for the tuning file", dir.display()), e))?;
    }
    export::write_output(path, text.as_bytes())
        .map_err(|e| Error::new(ErrorKind::Io, format!("the tuning file: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(per_rank: u64, default: (Algo, f64), forced: &[(Algo, f64)]) -> Point {
        Point {
            per_rank,
            bytes: per_rank,
            default,
            forced: forced.to_vec(),
        }
    }

    #[test]
    fn the_default_stays_unless_beaten_by_the_margin() {
        use Algo::*;
        let p = point(8, (Flat, 1.0), &[(Ring, 0.96), (RecursiveDoubling, 2.0)]);
        assert_eq!(p.choice(0.05), (Flat, 1.0));
        assert_eq!(p.choice(0.0), (Ring, 0.96));
        let p = point(8, (Ring, 1.0), &[(Ring, 1.0), (Rabenseifner, f64::NAN)]);
        assert_eq!(p.choice(0.05), (Ring, 1.0));
    }

    #[test]
    fn tuned_choices_cover_their_neighbourhood_and_agreement_keeps_the_default() {
        use Algo::*;
        let ar = Collective::AllReduce;
        let lines = |points: &[Point]| -> Vec<(u64, Option<Algo>)> {
            rules_for(ar, points, 0.05)
                .iter()
                .map(|r| (r.up_to, r.algo))
                .collect()
        };
        // Agreeing with the default at both ends: the built-in choice decides in between.
        let agree = [
            point(8, (Flat, 1.0), &[(RecursiveDoubling, 2.0)]),
            point(65536, (Rabenseifner, 9.0), &[(Ring, 9.2)]),
        ];
        assert_eq!(lines(&agree), [(u64::MAX, None)]);
        // Ring wins from 16 KiB: its line starts at the geometric mean of 1 KiB and 16 KiB.
        let points = [
            point(1024, (Flat, 1.0), &[(RecursiveDoubling, 2.0)]),
            point(16384, (RecursiveDoubling, 5.0), &[(Ring, 4.0)]),
            point(65536, (Rabenseifner, 9.0), &[(Ring, 7.0)]),
        ];
        assert_eq!(lines(&points), [(4096, None), (u64::MAX, Some(Ring))]);
        // The board, where it is not the default, never covers more than its largest part
        // (the boundary between these two sizes would be 2 MiB).
        let points = [
            point(65536, (RecursiveDoubling, 2.0), &[(Flat, 1.0)]),
            point(64 << 20, (Rabenseifner, 9.0), &[(Ring, 9.0)]),
        ];
        let slot = psyne::tuning::FLAT_MAX_BYTES as u64;
        assert_eq!(lines(&points), [(slot, Some(Flat)), (u64::MAX, None)]);
        // What tune writes, psyne reads back.
        let section = Section {
            scope: Scope::Shm,
            ranks: 2,
            rules: rules_for(ar, &points, 0.05),
        };
        let text = Rules::new(vec![section]).unwrap().to_string();
        let back = Rules::parse(&text, "t").unwrap();
        assert_eq!(back.lookup(Scope::Shm, 2, ar, 100), Some(Flat));
        assert_eq!(back.lookup(Scope::Shm, 2, ar, slot as usize + 1), None);
    }

    #[test]
    fn a_hierarchy_needs_several_hosts_and_a_shared_one() {
        let h =
            |names: &[&str]| hierarchical(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(!h(&["a", "a"]));
        assert!(!h(&["a", "b"]));
        assert!(h(&["a", "a", "b"]));
    }

    #[test]
    fn medians_of_odd_and_even_rounds() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
