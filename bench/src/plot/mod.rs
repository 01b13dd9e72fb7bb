//! One PNG per run (or several runs): latency and bus bandwidth against message size.
//!
//! Latency in µs (slowest rank) and busbw in GB/s (1e9 B/s), both log-log, against size on a
//! log2 axis labelled in binary units (8, 1K, 1M). One series per (backend, algorithm,
//! transport, and run when the same series comes from several reports), repeated sizes reduced
//! to their median; a legend names each (parts that all series share, like a single transport,
//! go to the title). Colours never repeat within a panel; markers tell backends apart (circles
//! native, triangles the others).
//!
//! One collective: two large panels side by side. Several: small multiples, one row per
//! collective headed by its name, its latency and busbw panels each fitted to that collective's
//! data, with a legend of its own series (the picture grows by a row's height per collective).
//! Points of size 0 (and barrier, which has no size) cannot sit on a log axis: their latency is
//! written as a note, or as a one-line row for a collective that has nothing else. The peak
//! line (`peak_gbps`) goes on every busbw panel. The title names the operations (or counts
//! them), world size, machine and host, shrunk or cut to fit. Text is drawn with DejaVu Sans
//! shipped in `bench/assets/` (licence beside it), so no system font is needed.

mod axes;
mod layout;
mod palette;
mod panel;
mod series;
mod text;
mod title;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::destination::{with_temp_beside, Destination};
use crate::model::Report;

use layout::{draw_multi, draw_single, multi_height, rows};
use series::any_plottable;

pub use series::{series, size_zero_note, Series};
pub use title::title;

/// DejaVu Sans (Bitstream Vera licence, see `bench/assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// The family name the font is registered under.
pub(super) const FAMILY: &str = "sans-serif";

/// Width of the picture in pixels.
pub const WIDTH: u32 = 1600;
/// Height of the picture in pixels for one collective (small multiples grow by a row per collective).
pub const HEIGHT: u32 = 760;

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No record has a positive size and time.
    #[error(
        "nothing to plot: the reports have no row with a size above 0 and a measured time \
         (barrier has no size axis: its latency is in the table, CSV and JSON)"
    )]
    Empty,
    /// The shipped font could not be loaded.
    #[error("the built-in font could not be registered")]
    Font,
    /// Drawing or writing the PNG failed.
    #[error("cannot draw {}: {message}; check that its directory exists and is writable", path.display())]
    Draw {
        /// The destination.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

/// Registers the shipped font once per process (plotters' `ab_glyph` text needs it).
pub fn ensure_font() -> Result<(), PlotError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

pub(super) fn err_to<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> PlotError + '_ {
    move |e| PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Draws `reports` into a PNG at `path`: a regular file (or new path) is written to a temporary
/// file beside it, then renamed over it; `-`, a FIFO or a device gets the picture written through
/// ([`Destination`]).
///
/// One collective with something on the size axis: a latency and a busbw panel side by side,
/// [`WIDTH`] × [`HEIGHT`]. Several: small multiples, a row of both panels per collective (the
/// picture grows by about 330 px a row), a one-line row for those without a size (barrier).
pub fn draw(reports: &[Report], path: &Path) -> Result<(), PlotError> {
    ensure_font()?;
    let series = series(reports);
    if !any_plottable(&series) {
        return Err(PlotError::Empty);
    }
    match Destination::of(path).map_err(err_to(path))? {
        Destination::Replace(file) => with_temp_beside(&file, "psybench.png", ".png", |tmp| {
            render(reports, &series, tmp, path)?;
            std::fs::rename(tmp, &file).map_err(err_to(path))
        }),
        stream => {
            let tmp =
                std::env::temp_dir().join(format!(".psybench-plot-{}.png", std::process::id()));
            let drawn = render(reports, &series, &tmp, path)
                .and_then(|()| std::fs::read(&tmp).map_err(err_to(path)));
            let _ = std::fs::remove_file(&tmp);
            stream.write_whole(&drawn?).map_err(err_to(path))
        }
    }
}

/// Renders the picture into the file `into`; `path` (the destination) is named in errors.
fn render(
    reports: &[Report],
    series: &[Series],
    into: &Path,
    path: &Path,
) -> Result<(), PlotError> {
    let rows = rows(reports);
    let multi = rows.iter().filter(|r| r.plottable()).count() > 1;
    let height = if multi { multi_height(&rows) } else { HEIGHT };
    let e = err_to(path);
    let root = BitMapBackend::new(into, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    if multi {
        draw_multi(&root, path, reports, &rows)?;
    } else {
        draw_single(&root, path, reports, series)?;
    }
    root.present().map_err(&e)
}
