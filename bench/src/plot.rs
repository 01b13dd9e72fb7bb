//! One PNG per run (or several runs): latency and bus bandwidth against message size.
//!
//! Two panels side by side, both log-log: latency in µs (slowest rank) and busbw in GB/s
//! (1e9 B/s), against size on a log2 axis labelled in binary units (8, 1K, 1M). One series per
//! (collective when several, backend, algorithm, transport, and run when the same series comes
//! from several reports), repeated sizes reduced to their median; a legend names each (parts that
//! all series share, like a single transport, go to the title). Points of size 0 (and barrier,
//! which has no size) cannot sit on a log axis and are left out. The title names the
//! operations, world size, machine and host. Text is drawn with DejaVu Sans shipped in
//! `bench/assets/` (licence beside it), so no system font is needed.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};

use crate::model::{Record, Report};
use crate::sizes::format_size;
use crate::stats::median;

/// DejaVu Sans (Bitstream Vera licence, see `bench/assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// The family name the font is registered under.
const FAMILY: &str = "sans-serif";

/// Width of the picture in pixels.
pub const WIDTH: u32 = 1600;
/// Height of the picture in pixels.
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

fn distinct<'a>(it: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for s in it {
        if !v.iter().any(|x| x == s) {
            v.push(s.to_string());
        }
    }
    v
}

/// Groups the reports' records into series (see the module doc), in order of first appearance.
pub fn series(reports: &[Report]) -> Vec<Series> {
    let all: Vec<(usize, &Record)> = reports
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.records.iter().map(move |rec| (i, rec)))
        .collect();
    let colls = distinct(all.iter().map(|(_, r)| r.collective.as_str()));
    let transports = distinct(all.iter().map(|(_, r)| r.transport.as_str()));
    let world: BTreeSet<usize> = all.iter().map(|(_, r)| r.ranks).collect();
    type Key = (String, String, String, String, usize);
    let base = |r: &Record| -> Key {
        (
            r.collective.clone(),
            r.backend.clone(),
            r.algo.clone(),
            r.transport.clone(),
            r.ranks,
        )
    };
    // The same series in several reports is told apart by the run's number.
    let mut owners: Vec<(Key, BTreeSet<usize>)> = Vec::new();
    for (i, r) in &all {
        let k = base(r);
        match owners.iter_mut().find(|(x, _)| *x == k) {
            Some((_, s)) => {
                s.insert(*i);
            }
            None => owners.push((k, BTreeSet::from([*i]))),
        }
    }
    let mut keys: Vec<(Key, Option<usize>)> = Vec::new();
    for (i, r) in &all {
        let k = base(r);
        let shared = owners.iter().any(|(x, s)| *x == k && s.len() > 1);
        let full = (k, shared.then_some(*i));
        if !keys.contains(&full) {
            keys.push(full);
        }
    }
    keys.into_iter()
        .map(|(k, run)| {
            let (coll, backend, algo, transport, ranks) = &k;
            let mut parts: Vec<String> = Vec::new();
            if colls.len() > 1 {
                parts.push(coll.clone());
            }
            parts.push(backend.clone());
            if algo != "-" && !algo.is_empty() {
                parts.push(algo.clone());
            }
            if transports.len() > 1 {
                parts.push(transport.clone());
            }
            if world.len() > 1 {
                parts.push(format!("{ranks} ranks"));
            }
            if let Some(i) = run {
                parts.push(format!("run {}", i + 1));
            }
            let rows: Vec<&Record> = all
                .iter()
                .filter(|(i, r)| base(r) == k && run.map_or(true, |x| x == *i))
                .map(|(_, r)| *r)
                .collect();
            let sizes: BTreeSet<u64> = rows.iter().map(|r| r.bytes).collect();
            let points = sizes
                .into_iter()
                .map(|b| {
                    let at: Vec<&&Record> = rows.iter().filter(|r| r.bytes == b).collect();
                    let t: Vec<f64> = at.iter().map(|r| r.time_us_max).collect();
                    let bw: Vec<f64> = at.iter().map(|r| r.busbw_gbps).collect();
                    (b, median(&t).unwrap_or(0.0), median(&bw).unwrap_or(0.0))
                })
                .collect();
            Series {
                label: parts.join(" · "),
                backend: backend.clone(),
                points,
            }
        })
        .collect()
}

/// The two title lines: what ran, and on what.
pub fn title(reports: &[Report]) -> (String, String) {
    let recs = reports.iter().flat_map(|r| r.records.iter());
    let colls = distinct(recs.clone().map(|r| r.collective.as_str()));
    let backends = distinct(recs.clone().map(|r| r.backend.as_str()));
    let world: BTreeSet<usize> = reports
        .iter()
        .map(|r| r.meta.world_size)
        .chain(recs.map(|r| r.ranks))
        .filter(|n| *n > 0)
        .collect();
    let world: Vec<String> = world.iter().map(|n| n.to_string()).collect();
    let ranks = match world.len() {
        0 => String::new(),
        1 if world[0] == "1" => " · 1 rank".to_string(),
        _ => format!(" · {} ranks", world.join("/")),
    };
    let transports = distinct(
        reports
            .iter()
            .flat_map(|r| r.records.iter().map(|x| x.transport.as_str()))
            .filter(|t| !t.is_empty()),
    );
    let transport = if transports.len() == 1 {
        format!(" · over {}", transports[0])
    } else {
        String::new()
    };
    let line1 = format!(
        "psybench: {} · {}{ranks}{transport}",
        colls.join(", "),
        backends.join(" vs ")
    );
    let cpus = distinct(
        reports
            .iter()
            .map(|r| r.meta.cpu_model.as_str())
            .filter(|c| !c.is_empty() && *c != "unknown"),
    );
    let hosts = distinct(
        reports
            .iter()
            .flat_map(|r| r.meta.hosts.iter().map(String::as_str)),
    );
    let mut parts: Vec<String> = Vec::new();
    if !cpus.is_empty() {
        let cores = reports.iter().map(|r| r.meta.cores).max().unwrap_or(0);
        let c = if cores > 0 {
            format!(" ({cores} cores)")
        } else {
            String::new()
        };
        parts.push(format!("{}{c}", cpus.join(" / ")));
    }
    if !hosts.is_empty() {
        let shown: Vec<&str> = hosts.iter().take(4).map(String::as_str).collect();
        let more = hosts.len().saturating_sub(4);
        let more = if more > 0 {
            format!(" +{more}")
        } else {
            String::new()
        };
        parts.push(format!("host {}{more}", shown.join(", ")));
    }
    let dates = distinct(
        reports
            .iter()
            .map(|r| r.meta.date.get(..10).unwrap_or(""))
            .filter(|d| !d.is_empty()),
    );
    if !dates.is_empty() {
        parts.push(dates.join(", "));
    }
    (line1, parts.join(" · "))
}

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Ticks of a log10 axis over `[lo, hi]` (log10 values): bold at decades (every other when
/// there are many; also at 2× and 5× when fewer than three decades show), light at 2..9 × each.
fn log10_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let (d0, d1) = (lo.floor() as i32, hi.ceil() as i32);
    let inside = |x: f64| x >= lo - 1e-9 && x <= hi + 1e-9;
    let decades: Vec<i32> = (d0..=d1).filter(|d| inside(f64::from(*d))).collect();
    let step = if decades.len() > 8 { 2 } else { 1 };
    let few = decades.len() < 3;
    let (mut bold, mut light) = (Vec::new(), Vec::new());
    for d in d0..=d1 {
        for m in 1..10 {
            let x = f64::from(d) + f64::from(m).log10();
            if !inside(x) {
                continue;
            }
            let is_bold = if m == 1 {
                (d - d0) % step == 0 || few
            } else {
                few && (m == 2 || m == 5)
            };
            if is_bold {
                bold.push(x);
            } else {
                light.push(x);
            }
        }
    }
    (bold, light)
}

/// A tick value given as its log10, as a short number: `0.002`, `1`, `500`, `1000`, `1e5`,
/// `2e-4`.
fn value_label(log10: f64) -> String {
    let v = 10f64.powf(log10);
    let e = (log10 + 1e-9).floor() as i32;
    let m = (v / 10f64.powi(e)).round();
    if !(-3..=3).contains(&e) {
        format!("{m}e{e}")
    } else if e >= 0 {
        format!("{v:.0}")
    } else {
        format!("{:.*}", (-e) as usize, m * 10f64.powi(e))
    }
}

/// Size ticks (log2 values) between `lo` and `hi`, at most about 12.
fn log2_ticks(lo: i32, hi: i32) -> Vec<f64> {
    let span = (hi - lo).max(1);
    let step = ((span + 11) / 12).max(1);
    (lo..=hi)
        .filter(|k| (k - lo) % step == 0)
        .map(f64::from)
        .collect()
}

fn size_label(log2: f64) -> String {
    let k = log2.round();
    if k < 0.0 {
        return "0".into();
    }
    format_size(2f64.powf(k) as u64)
}

/// A linear axis over already log-transformed values with fixed ticks: labels and bold grid lines
/// at `bold`, light grid lines at `light`.
struct Ticks {
    range: Range<f64>,
    bold: Vec<f64>,
    light: Vec<f64>,
}

impl Ranged for Ticks {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        if span <= 0.0 {
            return (limit.0 + limit.1) / 2;
        }
        let frac = (v - self.range.start) / span;
        limit.0 + (frac * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

type Panel<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

struct Axis {
    /// log2 sizes, whole.
    x: (i32, i32),
    /// log10 values, padded.
    y: (f64, f64),
}

fn axis_of(series: &[Series], value: impl Fn(&(u64, f64, f64)) -> f64) -> Option<Axis> {
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.0 > 0 && value(p) > 0.0 && value(p).is_finite())
        .map(|p| ((p.0 as f64).log2(), value(p).log10()))
        .collect();
    if pts.is_empty() {
        return None;
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    let (mut x0, mut x1) = (x0.floor() as i32, x1.ceil() as i32);
    if x1 == x0 {
        x0 -= 1;
        x1 += 1;
    }
    let mid = (y0 + y1) / 2.0;
    let half = ((y1 - y0) / 2.0 + 0.12).max(0.4);
    let (y0, y1) = (mid - half, mid + half);
    Some(Axis {
        x: (x0, x1),
        y: (y0, y1),
    })
}

fn err_to<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> PlotError + '_ {
    move |e| PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// What one panel shows.
struct PanelSpec {
    caption: &'static str,
    y_desc: &'static str,
    /// The plotted value of a point.
    value: fn(&(u64, f64, f64)) -> f64,
    /// A horizontal reference line (GB/s).
    peak: Option<f64>,
    /// Shown instead of a chart when nothing is plottable.
    empty_note: &'static str,
    /// Where the legend goes (a corner the curves leave empty).
    legend: SeriesLabelPosition,
    /// A line written in the lower right corner (latency of size-0 rows such as barrier).
    note: Option<String>,
}

fn panel(
    area: &Panel<'_>,
    path: &Path,
    series: &[Series],
    spec: &PanelSpec,
) -> Result<(), PlotError> {
    let PanelSpec {
        caption,
        y_desc,
        value,
        peak,
        empty_note,
        ..
    } = *spec;
    let e = err_to(path);
    let Some(mut ax) = axis_of(series, value) else {
        area.draw(&Text::new(
            empty_note.to_string(),
            (60, 80),
            (FAMILY, 22).into_font().color(&BLACK.mix(0.7)),
        ))
        .map_err(&e)?;
        return Ok(());
    };
    if let Some(p) = peak.filter(|p| *p > 0.0) {
        let d = p.log10();
        ax.y.0 = ax.y.0.min(d - 0.12);
        ax.y.1 = ax.y.1.max(d + 0.2);
    }
    // Room for the legend in its corner: about 22 px a line of a ~560 px tall plotting area.
    let entries = series.len() + usize::from(peak.is_some());
    let frac = ((entries as f64 * 22.0 + 30.0) / 560.0).min(0.5);
    let room = (ax.y.1 - ax.y.0) * frac / (1.0 - frac);
    match spec.legend {
        SeriesLabelPosition::UpperLeft => ax.y.1 += room,
        SeriesLabelPosition::LowerRight => ax.y.0 -= room,
        _ => {}
    }
    let (yb, yl) = log10_ticks(ax.y.0, ax.y.1);
    let xr = Ticks {
        range: (f64::from(ax.x.0) - 0.3)..(f64::from(ax.x.1) + 0.3),
        bold: log2_ticks(ax.x.0, ax.x.1),
        light: Vec::new(),
    };
    let yr = Ticks {
        range: ax.y.0..ax.y.1,
        bold: yb,
        light: yl,
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FAMILY, 24))
        .margin(12)
        .margin_right(45)
        .x_label_area_size(60)
        .y_label_area_size(85)
        .build_cartesian_2d(xr, yr)
        .map_err(&e)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes, log scale; K = 1024)")
        .y_desc(y_desc)
        .x_label_formatter(&|x| size_label(*x))
        .y_label_formatter(&|y| value_label(*y))
        .label_style((FAMILY, 17))
        .axis_desc_style((FAMILY, 19))
        .bold_line_style(BLACK.mix(0.22))
        .light_line_style(BLACK.mix(0.07))
        .draw()
        .map_err(&e)?;
    if let Some(p) = peak.filter(|p| *p > 0.0) {
        let y = p.log10();
        let grey = RGBColor(90, 90, 90);
        chart
            .draw_series(LineSeries::new(
                [(f64::from(ax.x.0) - 0.3, y), (f64::from(ax.x.1) + 0.3, y)],
                grey.stroke_width(2),
            ))
            .map_err(&e)?
            .label(format!("peak {p:.1} GB/s"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], grey.stroke_width(2))
            });
    }
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| p.0 > 0 && value(p) > 0.0 && value(p).is_finite())
            .map(|p| ((p.0 as f64).log2(), value(p).log10()))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let triangle = s.backend != "native";
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(&e)?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                let line = PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2));
                let marker: DynElement<BitMapBackend, (i32, i32)> = if triangle {
                    TriangleMarker::new((x + 12, y), 6, color.filled()).into_dyn()
                } else {
                    Circle::new((x + 12, y), 4, color.filled()).into_dyn()
                };
                EmptyElement::at((0, 0)) + line + marker
            });
        if triangle {
            chart
                .draw_series(
                    pts.iter()
                        .map(|p| TriangleMarker::new(*p, 6, color.filled())),
                )
                .map_err(&e)?;
        } else {
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(&e)?;
        }
    }
    if let Some(note) = &spec.note {
        let style = (FAMILY, 17)
            .into_font()
            .color(&BLACK.mix(0.75))
            .pos(Pos::new(HPos::Right, VPos::Bottom));
        let at = (f64::from(ax.x.1) + 0.2, ax.y.0 + 0.03 * (ax.y.1 - ax.y.0));
        chart
            .plotting_area()
            .draw(&Text::new(note.clone(), at, style))
            .map_err(&e)?;
    }
    chart
        .configure_series_labels()
        .position(spec.legend.clone())
        .margin(12)
        .label_font((FAMILY, 17))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(&e)?;
    Ok(())
}

/// The latency of rows that cannot sit on the size axis (size 0: barrier, `--sizes 0,...`), as
/// one line (`size 0 (not on the axis): barrier · native 45.0 µs`), or `None`.
pub fn size_zero_note(reports: &[Report]) -> Option<String> {
    let rows: Vec<&Record> = reports
        .iter()
        .flat_map(|r| r.records.iter())
        .filter(|r| r.bytes == 0 && r.time_us_max > 0.0)
        .collect();
    let keys = distinct(rows.iter().map(|r| r.collective.as_str()));
    let mut parts = Vec::new();
    for c in keys {
        let backends = distinct(
            rows.iter()
                .filter(|r| r.collective == c)
                .map(|r| r.backend.as_str()),
        );
        for b in backends {
            let t: Vec<f64> = rows
                .iter()
                .filter(|r| r.collective == c && r.backend == b)
                .map(|r| r.time_us_max)
                .collect();
            if let Some(m) = median(&t) {
                parts.push(format!("{c} · {b} {m:.1} µs"));
            }
        }
    }
    (!parts.is_empty()).then(|| format!("size 0 (not on the axis): {}", parts.join(", ")))
}

/// Draws `reports` into a PNG at `path` (written to a temporary file beside it, then renamed).
pub fn draw(reports: &[Report], path: &Path) -> Result<(), PlotError> {
    ensure_font()?;
    let series = series(reports);
    let plottable = |p: &(u64, f64, f64)| p.0 > 0 && p.1 > 0.0 && p.1.is_finite();
    if !series.iter().any(|s| s.points.iter().any(plottable)) {
        return Err(PlotError::Empty);
    }
    let e = err_to(path);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "psybench.png".into());
    let tmp = dir.join(format!(".{name}.tmp-{}.png", std::process::id()));
    let result = (|| {
        let root = BitMapBackend::new(&tmp, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(&e)?;
        let (head, body) = root.split_vertically(78);
        let (l1, l2) = title(reports);
        head.draw(&Text::new(l1, (24, 12), (FAMILY, 30).into_font()))
            .map_err(&e)?;
        head.draw(&Text::new(
            l2,
            (24, 48),
            (FAMILY, 19).into_font().color(&BLACK.mix(0.7)),
        ))
        .map_err(&e)?;
        let panels = body.split_evenly((1, 2));
        let peak = reports.iter().find_map(|r| r.meta.peak_gbps);
        let latency = PanelSpec {
            caption: "Latency (slowest rank)",
            y_desc: "time per operation (µs, log scale)",
            value: |p| p.1,
            peak: None,
            empty_note: "no latency measured",
            legend: SeriesLabelPosition::UpperLeft,
            note: size_zero_note(reports),
        };
        let busbw = PanelSpec {
            caption: "Bus bandwidth (nccl-tests busbw)",
            y_desc: "busbw (GB/s = 1e9 B/s, log scale)",
            value: |p| p.2,
            peak,
            empty_note: "no bandwidth: barrier moves no data",
            legend: SeriesLabelPosition::LowerRight,
            note: None,
        };
        panel(&panels[0], path, &series, &latency)?;
        panel(&panels[1], path, &series, &busbw)?;
        root.present().map_err(&e)?;
        std::fs::rename(&tmp, path).map_err(err_to(path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
