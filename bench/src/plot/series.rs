//! From reports to series: one line per (backend, algorithm, transport, world size, and run
//! when the same series comes from several reports), repeated sizes reduced to their median;
//! and the size-0 latencies that cannot go on a log axis.

use std::collections::BTreeSet;

use crate::model::{Record, Report};
use crate::stats::median;

/// One line on the plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// Backend (marker shape: circles native, triangles others).
    pub backend: String,
    /// `(bytes, latency µs, busbw GB/s)`, ascending bytes, medians over repeats.
    pub points: Vec<(u64, f64, f64)>,
}

/// The strings of `it` without repeats, in order of first appearance.
pub(super) fn distinct<'a>(it: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for s in it {
        if !v.iter().any(|x| x == s) {
            v.push(s.to_string());
        }
    }
    v
}

/// Every record of `reports`, in order.
pub(super) fn records(reports: &[Report]) -> impl Iterator<Item = &Record> + Clone {
    reports.iter().flat_map(|r| r.records.iter())
}

/// Whether a row's algorithm is worth naming (`-` and empty are not).
fn shows_algo(algo: &str) -> bool {
    algo != "-" && !algo.is_empty()
}

/// Whether a point can sit on the log-log latency axes (a size and a time above 0).
pub(super) fn plottable(p: &(u64, f64, f64)) -> bool {
    p.0 > 0 && p.1 > 0.0 && p.1.is_finite()
}

/// Whether any of `series` has a point on the axes.
pub(super) fn any_plottable(series: &[Series]) -> bool {
    series.iter().any(|s| s.points.iter().any(plottable))
}

/// What tells series apart: collective, backend, algorithm, transport and world size.
type SeriesKey = (String, String, String, String, usize);

fn series_key(r: &Record) -> SeriesKey {
    (
        r.collective.clone(),
        r.backend.clone(),
        r.algo.clone(),
        r.transport.clone(),
        r.ranks,
    )
}

/// Groups the reports' records into series (see the module doc), in order of first appearance.
pub fn series(reports: &[Report]) -> Vec<Series> {
    let all: Vec<(usize, &Record)> = reports
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.records.iter().map(move |rec| (i, rec)))
        .collect();
    let varying = Varying::of(&all);
    series_keys(&all)
        .into_iter()
        .map(|(k, run)| {
            let rows: Vec<&Record> = all
                .iter()
                .filter(|(i, r)| series_key(r) == k && run.map_or(true, |x| x == *i))
                .map(|(_, r)| *r)
                .collect();
            Series {
                label: series_label(&k, run, &varying),
                backend: k.1.clone(),
                points: median_points(&rows),
            }
        })
        .collect()
}

/// The series' keys in order of first appearance, each with the number of the report it comes
/// from when the same series is in several reports (told apart by the run's number).
fn series_keys(all: &[(usize, &Record)]) -> Vec<(SeriesKey, Option<usize>)> {
    let mut owners: Vec<(SeriesKey, BTreeSet<usize>)> = Vec::new();
    for (i, r) in all {
        let k = series_key(r);
        match owners.iter_mut().find(|(x, _)| *x == k) {
            Some((_, s)) => {
                s.insert(*i);
            }
            None => owners.push((k, BTreeSet::from([*i]))),
        }
    }
    let mut keys: Vec<(SeriesKey, Option<usize>)> = Vec::new();
    for (i, r) in all {
        let k = series_key(r);
        let shared = owners.iter().any(|(x, s)| *x == k && s.len() > 1);
        let full = (k, shared.then_some(*i));
        if !keys.contains(&full) {
            keys.push(full);
        }
    }
    keys
}

/// Which parts of a series' key vary across the plot, and so go into every label.
struct Varying {
    collectives: bool,
    transports: bool,
    ranks: bool,
}

impl Varying {
    fn of(all: &[(usize, &Record)]) -> Varying {
        let colls = distinct(all.iter().map(|(_, r)| r.collective.as_str()));
        let transports = distinct(all.iter().map(|(_, r)| r.transport.as_str()));
        let world: BTreeSet<usize> = all.iter().map(|(_, r)| r.ranks).collect();
        Varying {
            collectives: colls.len() > 1,
            transports: transports.len() > 1,
            ranks: world.len() > 1,
        }
    }
}

/// A series' legend text: `[collective · ]backend[ · algo][ · transport][ · N ranks][ · run R]`.
fn series_label(key: &SeriesKey, run: Option<usize>, varying: &Varying) -> String {
    let (coll, backend, algo, transport, ranks) = key;
    let mut parts: Vec<String> = Vec::new();
    if varying.collectives {
        parts.push(coll.clone());
    }
    parts.push(backend.clone());
    if shows_algo(algo) {
        parts.push(algo.clone());
    }
    if varying.transports {
        parts.push(transport.clone());
    }
    if varying.ranks {
        parts.push(format!("{ranks} ranks"));
    }
    if let Some(i) = run {
        parts.push(format!("run {}", i + 1));
    }
    parts.join(" · ")
}

/// One point per size of `rows`: the medians of its latencies and bus bandwidths.
fn median_points(rows: &[&Record]) -> Vec<(u64, f64, f64)> {
    let sizes: BTreeSet<u64> = rows.iter().map(|r| r.bytes).collect();
    sizes
        .into_iter()
        .map(|b| {
            let at: Vec<&&Record> = rows.iter().filter(|r| r.bytes == b).collect();
            let t: Vec<f64> = at.iter().map(|r| r.time_us()).collect();
            let bw: Vec<f64> = at.iter().map(|r| r.busbw_gbps).collect();
            (b, median(&t).unwrap_or(0.0), median(&bw).unwrap_or(0.0))
        })
        .collect()
}

/// Medians of the size-0 latencies among `rows`, one `backend[ · algo][ · transport] t µs` part
/// per series (`algo`/`transport` only when `detail`), in order of first appearance.
pub(super) fn size_zero_parts(rows: &[&Record], detail: bool) -> Vec<String> {
    let key = |r: &Record| -> String {
        let mut k = r.backend.clone();
        if detail {
            if shows_algo(&r.algo) {
                k += &format!(" · {}", r.algo);
            }
            let transports = distinct(rows.iter().map(|r| r.transport.as_str()));
            if transports.len() > 1 {
                k += &format!(" · {}", r.transport);
            }
        }
        k
    };
    let all_keys: Vec<String> = rows.iter().map(|r| key(r)).collect();
    distinct(all_keys.iter().map(String::as_str))
        .into_iter()
        .filter_map(|k| {
            let t: Vec<f64> = rows
                .iter()
                .filter(|r| key(r) == k)
                .map(|r| r.time_us())
                .collect();
            median(&t).map(|m| format!("{k} {m:.1} µs"))
        })
        .collect()
}

/// The latency of rows that cannot sit on the size axis (size 0: barrier, `--sizes 0,...`), as
/// one line (`size 0 (not on the axis): barrier · native 45.0 µs`), or `None`.
pub fn size_zero_note(reports: &[Report]) -> Option<String> {
    let rows: Vec<&Record> = records(reports)
        .filter(|r| r.bytes == 0 && r.time_us() > 0.0)
        .collect();
    let keys = distinct(rows.iter().map(|r| r.collective.as_str()));
    let mut parts = Vec::new();
    for c in keys {
        let mine: Vec<&Record> = rows.iter().copied().filter(|r| r.collective == c).collect();
        parts.extend(
            size_zero_parts(&mine, false)
                .into_iter()
                .map(|p| format!("{c} · {p}")),
        );
    }
    (!parts.is_empty()).then(|| format!("size 0 (not on the axis): {}", parts.join(", ")))
}

/// The reports cut down to the records of one collective (same number of reports, so series
/// from several runs keep their run numbers).
pub(super) fn only(reports: &[Report], coll: &str) -> Vec<Report> {
    reports
        .iter()
        .map(|r| Report {
            meta: r.meta.clone(),
            records: r
                .records
                .iter()
                .filter(|x| x.collective == coll)
                .cloned()
                .collect(),
            fits: Vec::new(),
        })
        .collect()
}
