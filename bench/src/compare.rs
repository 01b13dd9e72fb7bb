//! `psybench compare A B`: per operation and size, B's time and busbw as ratios of A's.
//!
//! Rows match on (collective, bytes, cadence), on the algorithm too when both sides name one (an
//! algorithm of `-` matches any), and on the backend when both sides hold the same backends (two
//! runs of the same kind; `native.json` against `mpi.json` ignores it). Repeated rows of one key (interleaved repeats) are reduced to
//! their median first. With one report holding two backends, A is `native` (or the first
//! backend seen) and B the other.

use comfy_table::{presets, CellAlignment, Table};

use crate::model::{Record, Report};
use crate::sizes::format_size;
use crate::stats::median;

/// One side of a comparison: a label and its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    /// What the side is (file name, backend).
    pub label: String,
    /// Its records.
    pub records: Vec<Record>,
}

/// One matched size.
#[derive(Debug, Clone, PartialEq)]
pub struct RatioRow {
    /// Operation name.
    pub collective: String,
    /// Size in bytes.
    pub bytes: u64,
    /// A's algorithm.
    pub algo_a: String,
    /// B's algorithm.
    pub algo_b: String,
    /// A's reported time in µs ([`Record::time_us`]: the slowest rank's, or for the osu
    /// cadence the mean over ranks), median over repeats.
    pub time_a_us: f64,
    /// B's reported time in µs.
    pub time_b_us: f64,
    /// A's busbw in GB/s.
    pub busbw_a: f64,
    /// B's busbw in GB/s.
    pub busbw_b: f64,
}

impl RatioRow {
    /// B's time ÷ A's time (above 1: B is slower); 0 when A's time is 0.
    pub fn time_ratio(&self) -> f64 {
        if self.time_a_us > 0.0 {
            self.time_b_us / self.time_a_us
        } else {
            0.0
        }
    }

    /// B's busbw ÷ A's busbw (above 1: B moves data faster); 0 when A's is 0.
    pub fn busbw_ratio(&self) -> f64 {
        if self.busbw_a > 0.0 {
            self.busbw_b / self.busbw_a
        } else {
            0.0
        }
    }
}

/// The result of comparing two sides.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// A's label.
    pub a: String,
    /// B's label.
    pub b: String,
    /// Matched rows in A's order.
    pub rows: Vec<RatioRow>,
    /// A's keys with no partner in B.
    pub unmatched_a: usize,
    /// B's keys with no partner in A.
    pub unmatched_b: usize,
}

/// Why two reports cannot be compared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// One report alone that does not hold two backends.
    #[error("{0} holds one backend only ({1}); give two reports (psybench compare A B) or a run with --backend native,mpi")]
    OneBackend(String, String),
    /// Nothing matched.
    #[error("no row of {0} matches a row of {1} by operation, size and cadence; were they run with the same --sizes, collectives and --cadence?")]
    NothingMatched(String, String),
}

/// Splits one report into its first two backends (`native` first when present).
pub fn split_backends(label: &str, report: &Report) -> Result<(Side, Side), CompareError> {
    let mut names: Vec<&str> = Vec::new();
    for r in &report.records {
        if !names.contains(&r.backend.as_str()) {
            names.push(&r.backend);
        }
    }
    if let Some(i) = names.iter().position(|n| *n == "native") {
        let n = names.remove(i);
        names.insert(0, n);
    }
    if names.len() < 2 {
        return Err(CompareError::OneBackend(
            label.to_string(),
            names.first().copied().unwrap_or("none").to_string(),
        ));
    }
    let side = |name: &str| Side {
        label: name.to_string(),
        records: report
            .records
            .iter()
            .filter(|r| r.backend == name)
            .cloned()
            .collect(),
    };
    Ok((side(names[0]), side(names[1])))
}

/// (collective, bytes, algo, backend, cadence)
type Key = (String, u64, String, String, String);

fn key(r: &Record) -> Key {
    (
        r.collective.clone(),
        r.bytes,
        r.algo.clone(),
        r.backend.clone(),
        r.cadence.clone(),
    )
}

/// Rows of one side grouped by (collective, bytes, algo, backend, cadence), medians of time and
/// busbw.
fn grouped(records: &[Record]) -> Vec<(Key, f64, f64)> {
    let mut keys: Vec<Key> = Vec::new();
    for r in records {
        let k = key(r);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|k| {
            let rows: Vec<&Record> = records.iter().filter(|r| key(r) == k).collect();
            let t: Vec<f64> = rows.iter().map(|r| r.time_us()).collect();
            let b: Vec<f64> = rows.iter().map(|r| r.busbw_gbps).collect();
            (k, median(&t).unwrap_or(0.0), median(&b).unwrap_or(0.0))
        })
        .collect()
}

fn algo_known(a: &str) -> bool {
    !a.is_empty() && a != "-"
}

/// Matches the rows of `a` and `b` (see the module doc).
pub fn compare_sides(a: &Side, b: &Side) -> Result<Comparison, CompareError> {
    let ga = grouped(&a.records);
    let gb = grouped(&b.records);
    let backends = |g: &[(Key, f64, f64)]| {
        let mut v: Vec<String> = g.iter().map(|(k, _, _)| k.3.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let same_backends = backends(&ga) == backends(&gb);
    let mut used_b = vec![false; gb.len()];
    let mut rows = Vec::new();
    let mut unmatched_a = 0;
    for (ka, ta, ba) in &ga {
        let mut found = false;
        for (j, (kb, tb, bb)) in gb.iter().enumerate() {
            let algo_ok = !algo_known(&ka.2) || !algo_known(&kb.2) || ka.2 == kb.2;
            let backend_ok = !same_backends || ka.3 == kb.3;
            if ka.0 == kb.0 && ka.1 == kb.1 && ka.4 == kb.4 && algo_ok && backend_ok {
                used_b[j] = true;
                found = true;
                rows.push(RatioRow {
                    collective: ka.0.clone(),
                    bytes: ka.1,
                    algo_a: ka.2.clone(),
                    algo_b: kb.2.clone(),
                    time_a_us: *ta,
                    time_b_us: *tb,
                    busbw_a: *ba,
                    busbw_b: *bb,
                });
            }
        }
        if !found {
            unmatched_a += 1;
        }
    }
    if rows.is_empty() {
        return Err(CompareError::NothingMatched(
            a.label.clone(),
            b.label.clone(),
        ));
    }
    Ok(Comparison {
        a: a.label.clone(),
        b: b.label.clone(),
        rows,
        unmatched_a,
        unmatched_b: used_b.iter().filter(|u| !**u).count(),
    })
}

/// Compares two reports, or the two backends of one when `b` is `None`. Labels name the sides
/// (file names); when two files hold one backend each and the backends differ, the backend is
/// added to the label.
pub fn compare(a: (&str, &Report), b: Option<(&str, &Report)>) -> Result<Comparison, CompareError> {
    let (sa, sb) = match b {
        None => split_backends(a.0, a.1)?,
        Some(b) => (side_of(a.0, a.1), side_of(b.0, b.1)),
    };
    compare_sides(&sa, &sb)
}

fn side_of(label: &str, r: &Report) -> Side {
    let mut backends: Vec<&str> = Vec::new();
    for rec in &r.records {
        if !backends.contains(&rec.backend.as_str()) {
            backends.push(&rec.backend);
        }
    }
    let label = if backends.len() == 1 {
        format!("{label} ({})", backends[0])
    } else {
        label.to_string()
    };
    Side {
        label,
        records: r.records.clone(),
    }
}

/// Who is faster by how much: `B 1.83×`, `A 1.20×`, or `same` within 2 %.
pub fn faster(row: &RatioRow, a: &str, b: &str) -> String {
    let r = row.time_ratio();
    if r <= 0.0 || !r.is_finite() {
        return "-".into();
    }
    if (r - 1.0).abs() < 0.02 {
        "same".into()
    } else if r < 1.0 {
        format!("{b} {:.2}×", 1.0 / r)
    } else {
        format!("{a} {r:.2}×")
    }
}

/// The comparison as a table, with a legend line above and unmatched counts below.
pub fn render(c: &Comparison) -> String {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED);
    let show_algo = c
        .rows
        .iter()
        .any(|r| algo_known(&r.algo_a) || algo_known(&r.algo_b));
    let mut head = vec!["collective".to_string(), "size".to_string()];
    if show_algo {
        head.push("algo A / B".into());
    }
    head.extend([
        "A time (µs)".to_string(),
        "B time (µs)".to_string(),
        "time B÷A".to_string(),
        "A busbw (GB/s)".to_string(),
        "B busbw (GB/s)".to_string(),
        "busbw B÷A".to_string(),
        "faster".to_string(),
    ]);
    t.set_header(head);
    for r in &c.rows {
        let mut row = vec![r.collective.clone(), format_size(r.bytes)];
        if show_algo {
            row.push(format!("{} / {}", r.algo_a, r.algo_b));
        }
        row.extend([
            format!("{:.2}", r.time_a_us),
            format!("{:.2}", r.time_b_us),
            format!("{:.2}", r.time_ratio()),
            format!("{:.2}", r.busbw_a),
            format!("{:.2}", r.busbw_b),
            if r.busbw_a > 0.0 {
                format!("{:.2}", r.busbw_ratio())
            } else {
                "-".into()
            },
            faster(r, "A", "B"),
        ]);
        t.add_row(row);
    }
    let first_num = if show_algo { 3 } else { 2 };
    for i in 1..t.column_count() {
        if i == 1 || i >= first_num {
            if let Some(col) = t.column_mut(i) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
    }
    let mut out = format!(
        "A = {}\nB = {}\ntime B÷A above 1: B is slower; busbw B÷A above 1: B moves data faster \
         (medians over repeats; GB/s = 1e9 B/s)\n{t}",
        c.a, c.b
    );
    if c.unmatched_a + c.unmatched_b > 0 {
        out.push_str(&format!(
            "\nunmatched: {} size(s) of A, {} of B (different sizes, collectives or cadences)",
            c.unmatched_a, c.unmatched_b
        ));
    }
    out
}
