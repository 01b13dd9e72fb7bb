//! What a sweep prints: an nccl-tests style header and one line per record as it is measured,
//! summary tables (comfy-table) of fits, and a progress bar on rank 0 when stderr is a terminal.
//!
//! The live rows use fixed-width columns so each line can be printed the moment its size is
//! measured, aligned with a header printed once; comfy-table only lays out tables whose rows are
//! all known, so it is used for the summaries.

use std::io::IsTerminal;

use comfy_table::{presets, CellAlignment, Table};
use indicatif::{ProgressBar, ProgressStyle};

use crate::model::{Cadence, Fit, Record};
use crate::sizes::format_size;

/// (title, width, right-aligned) of the live columns.
const COLUMNS: [(&str, usize, bool); 13] = [
    ("size(B)", 12, true),
    ("count", 11, true),
    ("type", 5, false),
    ("op", 5, false),
    ("root", 4, true),
    ("algo", 18, false),
    ("backend", 7, false),
    ("min(µs)", 10, true),
    ("avg(µs)", 10, true),
    ("max(µs)", 10, true),
    ("algbw(GB/s)", 11, true),
    ("busbw(GB/s)", 11, true),
    ("#wrong", 6, true),
];

fn line(cells: &[String]) -> String {
    let mut out = String::new();
    for (cell, (_, width, right)) in cells.iter().zip(COLUMNS) {
        if !out.is_empty() {
            out.push_str("  ");
        }
        if right {
            out.push_str(&format!("{cell:>width$}"));
        } else {
            out.push_str(&format!("{cell:<width$}"));
        }
    }
    out.trim_end().to_string()
}

/// What a cadence means, in one line for the header.
pub fn cadence_line(cadence: Cadence) -> &'static str {
    match cadence {
        Cadence::Stream => {
            "# iterations: stream (back to back, one clock around all of them, as nccl-tests)"
        }
        Cadence::Isolated => {
            "# iterations: isolated (a barrier before each, each timed alone; the barrier is not timed)"
        }
        Cadence::Osu => {
            "# iterations: osu (each timed alone, then an untimed barrier, as the OSU micro-benchmarks; \
             algbw and busbw from the mean time over ranks, as OSU reports it)"
        }
    }
}

/// The header printed once before the rows: cadence, units, column titles. Lines start with `#`
/// so the output can be fed to tools that skip comments. No trailing newline.
pub fn header(cadence: Cadence) -> String {
    let titles: Vec<String> = COLUMNS.iter().map(|(t, _, _)| t.to_string()).collect();
    let mut cols = line(&titles);
    cols.replace_range(0..1, "#");
    [
        cadence_line(cadence).to_string(),
        format!(
            "# time: µs per operation, over ranks (min/avg/max); algbw = size / {} time; \
             busbw = algbw × bus factor (nccl-tests)",
            crate::stats::over_ranks(cadence)
        ),
        "# GB/s = 1e9 B/s; size as nccl-tests counts it; #wrong: elements differing from the \
         oracle (N/A: not checked)"
            .to_string(),
        cols,
    ]
    .join("\n")
}

fn fixed(v: f64) -> String {
    format!("{v:.2}")
}

/// One record as a line aligned with [`header`]. No trailing newline.
pub fn row(r: &Record) -> String {
    let cells = [
        r.bytes.to_string(),
        r.count.to_string(),
        r.dtype.clone(),
        r.op.clone(),
        r.root.map_or_else(|| "-".into(), |x| x.to_string()),
        r.algo.clone(),
        r.backend.clone(),
        fixed(r.time_us_min),
        fixed(r.time_us_avg),
        fixed(r.time_us_max),
        fixed(r.algbw_gbps),
        fixed(r.busbw_gbps),
        r.wrong.map_or_else(|| "N/A".into(), |w| w.to_string()),
    ];
    line(&cells)
}

fn new_table(headers: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED);
    t.set_header(headers.to_vec());
    t
}

fn right_align(t: &mut Table, from: usize) {
    let n = t.column_count();
    for i in from..n {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// The fits as a table: collective, backend, algo, α (µs), β (GB/s), best busbw % of peak.
pub fn fits_table(fits: &[Fit]) -> String {
    let mut t = new_table(&[
        "collective",
        "backend",
        "algo",
        "α latency (µs)",
        "β bandwidth (GB/s)",
        "best busbw % of peak",
    ]);
    for f in fits {
        t.add_row(vec![
            f.collective.clone(),
            f.backend.clone(),
            f.algo.clone(),
            format!("{:.2}", f.alpha_us),
            format!("{:.2}", f.beta_gbps),
            f.busbw_pct_of_peak
                .map_or_else(|| "-".into(), |p| format!("{p:.0}%")),
        ]);
    }
    right_align(&mut t, 3);
    t.to_string()
}

/// Every record as one table (for `psybench plot`/`compare` readers and end-of-run summaries):
/// collective, size, backend, algo, max time, algbw, busbw, #wrong.
pub fn records_table(records: &[Record]) -> String {
    let mut t = new_table(&[
        "collective",
        "size",
        "backend",
        "algo",
        "time (µs)",
        "algbw (GB/s)",
        "busbw (GB/s)",
        "#wrong",
    ]);
    for r in records {
        t.add_row(vec![
            r.collective.clone(),
            format_size(r.bytes),
            r.backend.clone(),
            r.algo.clone(),
            format!("{} ({})", fixed(r.time_us()), r.time_over_ranks),
            fixed(r.algbw_gbps),
            fixed(r.busbw_gbps),
            r.wrong.map_or_else(|| "N/A".into(), |w| w.to_string()),
        ]);
    }
    right_align(&mut t, 4);
    if let Some(c) = t.column_mut(1) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    t.to_string()
}

/// Whether a progress bar shows: only on rank 0 and only when stderr is a terminal.
pub fn progress_visible(rank: usize, stderr_is_terminal: bool) -> bool {
    rank == 0 && stderr_is_terminal
}

/// A progress bar over the sizes of a sweep, drawn on stderr; a no-op when hidden.
#[derive(Debug, Clone)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar over `total` steps, shown only on rank 0 with stderr a terminal.
    pub fn new(total: u64, rank: usize) -> Progress {
        if !progress_visible(rank, std::io::stderr().is_terminal()) {
            return Progress::hidden();
        }
        let bar = ProgressBar::new(total);
        let style = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        Progress { bar: Some(bar) }
    }

    /// A bar that never draws.
    pub fn hidden() -> Progress {
        Progress { bar: None }
    }

    /// True when the bar draws.
    pub fn is_visible(&self) -> bool {
        self.bar.is_some()
    }

    /// Shows what runs now (e.g. `allreduce 64M native`).
    pub fn set_message(&self, msg: &str) {
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
        }
    }

    /// Advances by `n` steps.
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    /// Prints `line` to stdout, above the bar (the bar is hidden while it prints).
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_only_rank0_on_terminal() {
        assert!(progress_visible(0, true));
        assert!(!progress_visible(0, false));
        assert!(!progress_visible(1, true));
    }
}
