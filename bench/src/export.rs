//! CSV and JSON outputs, rewritten whole after every size, and readers for both.
//!
//! A regular file (or a new path) is written to a temporary file in its directory and renamed
//! over it, so a reader never sees half a file and a crash mid-sweep keeps every row measured so
//! far; `-`, a FIFO or a device gets the final contents once, written through
//! ([`crate::destination`]). JSON holds the whole [`Report`] (meta, records, fits); CSV holds the records,
//! one per line, with a header of the [`Record`] field names (units are in the names:
//! `time_us_max`, `busbw_gbps`; empty cells are absent values).

use std::io;
use std::path::{Path, PathBuf};

use crate::destination::Destination;
use crate::fit::fit_report;
use crate::model::{Record, Report};

/// Why a report could not be written or read. Each message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Writing (or renaming into place) failed.
    #[error("cannot write {}: {source}; check that its directory exists and is writable", path.display())]
    Write {
        /// The destination.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Reading failed.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The JSON is not a psybench report.
    #[error("{} is not a psybench JSON report: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// The CSV is not a psybench CSV.
    #[error("{} is not a psybench CSV (header and columns as `psybench --csv` writes them): {source}", path.display())]
    Csv {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: csv::Error,
    },
}

/// Writes `bytes` as the whole contents of `path`, as [`Destination`] says: atomically for a
/// regular file or a new path (through a symlink to one), written through for `-`, a FIFO or a
/// device, which are never replaced.
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    Destination::of(path)
        .and_then(|d| d.write_whole(bytes))
        .map_err(write_error(path))
}

fn write_error(path: &Path) -> impl Fn(io::Error) -> ExportError + '_ {
    move |source| ExportError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// The CSV text of `records` (header line, then one line per record).
pub fn csv_string(records: &[Record]) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    if records.is_empty() {
        w.write_record(RECORD_COLUMNS)?;
    }
    for r in records {
        w.serialize(r)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The CSV header: the [`Record`] field names in order.
pub const RECORD_COLUMNS: [&str; 21] = [
    "collective",
    "backend",
    "algo",
    "transport",
    "dtype",
    "op",
    "root",
    "ranks",
    "bytes",
    "count",
    "iters",
    "warmup",
    "in_place",
    "cadence",
    "time_us_min",
    "time_us_avg",
    "time_us_max",
    "time_over_ranks",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
];

/// Rewrites `path` with `records` as CSV.
pub fn write_csv(path: &Path, records: &[Record]) -> Result<(), ExportError> {
    write_output(path, csv_text(path, records)?.as_bytes())
}

/// Rewrites `path` with the whole report as pretty JSON.
pub fn write_json(path: &Path, report: &Report) -> Result<(), ExportError> {
    write_output(path, json_text(path, report)?.as_bytes())
}

/// What `--csv` holds; `path` is named in the error.
fn csv_text(path: &Path, records: &[Record]) -> Result<String, ExportError> {
    csv_string(records).map_err(|source| ExportError::Csv {
        path: path.to_path_buf(),
        source,
    })
}

/// What `--json` holds; `path` is named in the error.
fn json_text(path: &Path, report: &Report) -> Result<String, ExportError> {
    let mut text = serde_json::to_string_pretty(report).map_err(|source| ExportError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    text.push('\n');
    Ok(text)
}

/// Rewrites whichever outputs are asked for and take progress (regular files, new paths); call
/// after every measured size. Streams (`-`, FIFOs, devices) wait for [`finish`].
pub fn rewrite(
    csv: Option<&Path>,
    json: Option<&Path>,
    report: &Report,
) -> Result<(), ExportError> {
    write_where(csv, json, report, true)
}

/// Writes the outputs that are streams, once the sweep is over (files already hold the final
/// contents from the last [`rewrite`]).
pub fn finish(csv: Option<&Path>, json: Option<&Path>, report: &Report) -> Result<(), ExportError> {
    write_where(csv, json, report, false)
}

/// Writes each output whose destination takes progress (`progress`) or is a stream (not).
fn write_where(
    csv: Option<&Path>,
    json: Option<&Path>,
    report: &Report,
    progress: bool,
) -> Result<(), ExportError> {
    let wanted = |path: &Path| {
        Destination::of(path)
            .map(|d| (d.takes_progress() == progress).then_some(d))
            .map_err(write_error(path))
    };
    if let Some(p) = csv {
        if let Some(d) = wanted(p)? {
            d.write_whole(csv_text(p, &report.records)?.as_bytes())
                .map_err(write_error(p))?;
        }
    }
    if let Some(p) = json {
        if let Some(d) = wanted(p)? {
            d.write_whole(json_text(p, report)?.as_bytes())
                .map_err(write_error(p))?;
        }
    }
    Ok(())
}

/// The largest report read (`compare`, `plot`): psybench writes one row per size, collective,
/// backend and round, well under 1 MiB for a full sweep; 256 MiB holds hundreds of those.
pub const REPORT_LIMIT: u64 = 256 << 20;

/// Reads a report's text (a file of text or a pipe, at most [`REPORT_LIMIT`], see
/// [`psyrun::textfile`]).
fn read_text(path: &Path) -> Result<String, ExportError> {
    psyrun::textfile::read(path, REPORT_LIMIT).map_err(|source| ExportError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses CSV text as records.
pub fn parse_csv(text: &str) -> Result<Vec<Record>, csv::Error> {
    let mut r = csv::Reader::from_reader(text.as_bytes());
    r.deserialize().collect()
}

/// Reads a CSV written by [`write_csv`].
pub fn read_csv(path: &Path) -> Result<Vec<Record>, ExportError> {
    parse_csv(&read_text(path)?).map_err(|source| ExportError::Csv {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a JSON report written by [`write_json`].
pub fn read_json(path: &Path) -> Result<Report, ExportError> {
    serde_json::from_str(&read_text(path)?).map_err(|source| ExportError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a report from JSON or CSV, told apart by content (JSON starts with `{`). From a CSV the
/// metadata is rebuilt from the records ([`crate::meta::from_records`]) and the fits recomputed.
pub fn read_report(path: &Path) -> Result<Report, ExportError> {
    let text = read_text(path)?;
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(&text).map_err(|source| ExportError::Json {
            path: path.to_path_buf(),
            source,
        });
    }
    let records = parse_csv(&text).map_err(|source| ExportError::Csv {
        path: path.to_path_buf(),
        source,
    })?;
    let meta = crate::meta::from_records(&records, &path.display().to_string());
    let fits = fit_report(&records, None);
    Ok(Report {
        meta,
        records,
        fits,
    })
}
