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
fn distinct<'a>(it: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for s in it {
        if !v.iter().any(|x| x == s) {
            v.push(s.to_string());
        }
    }
    v
}

/// Every record of `reports`, in order.
fn records(reports: &[Report]) -> impl Iterator<Item = &Record> + Clone {
    reports.iter().flat_map(|r| r.records.iter())
}

/// Whether a row's algorithm is worth naming (`-` and empty are not).
fn shows_algo(algo: &str) -> bool {
    algo != "-" && !algo.is_empty()
}

/// Whether a point can sit on the log-log latency axes (a size and a time above 0).
fn plottable(p: &(u64, f64, f64)) -> bool {
    p.0 > 0 && p.1 > 0.0 && p.1.is_finite()
}

/// Whether any of `series` has a point on the axes.
fn any_plottable(series: &[Series]) -> bool {
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

/// The two title lines: what ran, and on what.
pub fn title(reports: &[Report]) -> (String, String) {
    (what_ran(reports), where_it_ran(reports))
}

/// The first title line: the operations (counted when more than three), backends, world sizes
/// and the transport when there is one.
fn what_ran(reports: &[Report]) -> String {
    let colls = distinct(records(reports).map(|r| r.collective.as_str()));
    let backends = distinct(records(reports).map(|r| r.backend.as_str()));
    let ranks = ranks_part(reports);
    let transport = transport_part(reports);
    // More than three operations are counted, not listed: their rows name them.
    if colls.len() > 3 {
        format!(
            "psybench · {} collectives · {}{ranks}{transport}",
            colls.len(),
            backends.join(" vs ")
        )
    } else {
        format!(
            "psybench: {} · {}{ranks}{transport}",
            colls.join(", "),
            backends.join(" vs ")
        )
    }
}

/// ` · N ranks` (several world sizes joined by `/`; nothing when none is known).
fn ranks_part(reports: &[Report]) -> String {
    let world: BTreeSet<usize> = reports
        .iter()
        .map(|r| r.meta.world_size)
        .chain(records(reports).map(|r| r.ranks))
        .filter(|n| *n > 0)
        .collect();
    let world: Vec<String> = world.iter().map(|n| n.to_string()).collect();
    match world.len() {
        0 => String::new(),
        1 if world[0] == "1" => " · 1 rank".to_string(),
        _ => format!(" · {} ranks", world.join("/")),
    }
}

/// ` · over T` when every row names the same transport `T`, else nothing.
fn transport_part(reports: &[Report]) -> String {
    let transports = distinct(
        records(reports)
            .map(|x| x.transport.as_str())
            .filter(|t| !t.is_empty()),
    );
    if transports.len() == 1 {
        format!(" · over {}", transports[0])
    } else {
        String::new()
    }
}

/// The second title line: CPU models and cores, hosts (the first four), dates.
fn where_it_ran(reports: &[Report]) -> String {
    let parts: Vec<String> = [cpu_part(reports), hosts_part(reports), dates_part(reports)]
        .into_iter()
        .flatten()
        .collect();
    parts.join(" · ")
}

/// The known CPU models, with the most cores any report saw.
fn cpu_part(reports: &[Report]) -> Option<String> {
    let cpus = distinct(
        reports
            .iter()
            .map(|r| r.meta.cpu_model.as_str())
            .filter(|c| !c.is_empty() && *c != "unknown"),
    );
    if cpus.is_empty() {
        return None;
    }
    let cores = reports.iter().map(|r| r.meta.cores).max().unwrap_or(0);
    let c = if cores > 0 {
        format!(" ({cores} cores)")
    } else {
        String::new()
    };
    Some(format!("{}{c}", cpus.join(" / ")))
}

/// `host a, b, c, d +N`.
fn hosts_part(reports: &[Report]) -> Option<String> {
    let hosts = distinct(
        reports
            .iter()
            .flat_map(|r| r.meta.hosts.iter().map(String::as_str)),
    );
    if hosts.is_empty() {
        return None;
    }
    let shown: Vec<&str> = hosts.iter().take(4).map(String::as_str).collect();
    let more = hosts.len().saturating_sub(4);
    let more = if more > 0 {
        format!(" +{more}")
    } else {
        String::new()
    };
    Some(format!("host {}{more}", shown.join(", ")))
}

/// The days the reports were made on (`YYYY-MM-DD`, comma-separated).
fn dates_part(reports: &[Report]) -> Option<String> {
    let dates = distinct(
        reports
            .iter()
            .map(|r| r.meta.date.get(..10).unwrap_or(""))
            .filter(|d| !d.is_empty()),
    );
    (!dates.is_empty()).then(|| dates.join(", "))
}

/// Series colours: Tableau 10 (the first series look as they always did), then ten more hues
/// that stay apart from those; past twenty, hues spaced by the golden angle (see [`color`]).
const PALETTE: [RGBColor; 20] = [
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
    RGBColor(20, 30, 120),
    RGBColor(120, 0, 40),
    RGBColor(0, 90, 50),
    RGBColor(230, 170, 0),
    RGBColor(25, 25, 25),
    RGBColor(200, 0, 200),
    RGBColor(0, 128, 128),
    RGBColor(250, 140, 120),
    RGBColor(75, 0, 130),
    RGBColor(110, 200, 90),
];

/// The `i`-th series colour: distinct for every `i` (the palette, then generated hues).
fn color(i: usize) -> RGBColor {
    if let Some(c) = PALETTE.get(i) {
        return *c;
    }
    let hue = ((i - PALETTE.len()) as f64 * 137.508 + 20.0) % 360.0 / 360.0;
    let light = if i % 2 == 0 { 0.38 } else { 0.5 };
    let (r, g, b) = HSLColor(hue, 0.75, light).rgb();
    RGBColor(r, g, b)
}

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

/// A series' plottable points as `(log2 bytes, log10 value)`.
fn log_points(s: &Series, value: fn(&(u64, f64, f64)) -> f64) -> Vec<(f64, f64)> {
    s.points
        .iter()
        .filter(|p| p.0 > 0 && value(p) > 0.0 && value(p).is_finite())
        .map(|p| ((p.0 as f64).log2(), value(p).log10()))
        .collect()
}

fn axis_of(series: &[Series], value: fn(&(u64, f64, f64)) -> f64) -> Option<Axis> {
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|s| log_points(s, value)).collect();
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

/// The values the drawn lines take over `[lo, hi]` on the x axis: the points inside, and where
/// segments cross its edges (lines are straight in log-log).
fn values_over(lines: &[Vec<(f64, f64)>], lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    for pts in lines {
        out.extend(pts.iter().filter(|p| p.0 >= lo && p.0 <= hi).map(|p| p.1));
        for w in pts.windows(2) {
            let ((xa, ya), (xb, yb)) = (w[0], w[1]);
            for edge in [lo, hi] {
                if xa < edge && edge < xb {
                    out.push(ya + (yb - ya) * (edge - xa) / (xb - xa));
                }
            }
        }
    }
    out
}

/// The pixel size of `text` in the shipped font at `px` (a rough guess if it cannot be measured).
fn text_size(text: &str, px: u32) -> (f64, f64) {
    match (FAMILY, px).into_font().box_size(text) {
        Ok((w, h)) => (f64::from(w), f64::from(h)),
        Err(_) => (
            text.chars().count() as f64 * f64::from(px) * 0.6,
            f64::from(px),
        ),
    }
}

/// The pixel size of a legend box listing `labels` (as plotters lays it out: text, a 30 px
/// sample, `margin` all round).
fn legend_size(labels: &[String], px: u32, margin: u32) -> (f64, f64) {
    let font: TextStyle = (FAMILY, px).into_font().into();
    let mut t = MultiLineText::<(i32, i32), &str>::new((0, 0), font);
    for l in labels {
        t.push_line(l.as_str());
    }
    let (w, h) = t.estimate_dimension().map_or_else(
        |_| {
            let widest = labels
                .iter()
                .map(|l| text_size(l, px).0)
                .fold(0.0, f64::max);
            (widest, labels.len() as f64 * f64::from(px) * 1.25)
        },
        |(w, h)| (f64::from(w), f64::from(h)),
    );
    let m = f64::from(margin);
    (w + 30.0 + 2.0 * m, h + 2.0 * m)
}

/// `text` in at most `max_w` pixels: the font shrunk down to `min_px`, then the text cut with
/// an ellipsis.
fn fit_text(text: &str, px: u32, min_px: u32, max_w: f64) -> (String, u32) {
    let mut size = px;
    while size > min_px && text_size(text, size).0 > max_w {
        size -= 1;
    }
    if text_size(text, size).0 <= max_w {
        return (text.to_string(), size);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut n = chars.len();
    while n > 1 {
        n -= 1;
        let cut: String = chars[..n].iter().collect::<String>().trim_end().to_string() + "…";
        if text_size(&cut, size).0 <= max_w {
            return (cut, size);
        }
    }
    ("…".into(), size)
}

fn err_to<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> PlotError + '_ {
    move |e| PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Sizes of one panel's parts, in pixels.
#[derive(Debug, Clone, Copy)]
struct Metrics {
    /// The caption's font (unused when the panel has no caption).
    caption: u32,
    /// Tick labels.
    label: u32,
    /// Axis descriptions.
    desc: u32,
    /// Legend text.
    legend: u32,
    /// Space between the legend's border and its text.
    legend_margin: u32,
    margin: u32,
    margin_right: u32,
    /// Below the plot: tick labels, and the x description if any.
    x_area: u32,
    /// Left of the plot: tick labels and the y description.
    y_area: u32,
}

/// One pair of large panels (a single collective).
const FULL: Metrics = Metrics {
    caption: 24,
    label: 17,
    desc: 19,
    legend: 17,
    legend_margin: 12,
    margin: 12,
    margin_right: 45,
    x_area: 60,
    y_area: 85,
};

/// A row of the small multiples (one per collective).
const SMALL: Metrics = Metrics {
    caption: 20,
    label: 15,
    desc: 16,
    legend: 15,
    legend_margin: 7,
    margin: 8,
    margin_right: 36,
    x_area: 30,
    y_area: 80,
};

/// What one panel shows.
struct PanelSpec<'s> {
    caption: Option<&'static str>,
    x_desc: Option<&'static str>,
    y_desc: &'static str,
    /// The plotted value of a point.
    value: fn(&(u64, f64, f64)) -> f64,
    /// A horizontal reference line (GB/s).
    peak: Option<f64>,
    /// Shown instead of a chart when nothing is plottable.
    empty_note: &'static str,
    /// Where the legend goes (a corner the curves usually leave empty).
    legend: SeriesLabelPosition,
    /// A line written in the lower right corner (latency of size-0 rows such as barrier).
    note: Option<String>,
    /// One colour per series.
    colors: &'s [RGBColor],
    m: Metrics,
}

/// Widens `ax.y` just enough that the legend's corner holds no part of a line (the legend box
/// plus a small gap, in a plotting area of `plot` pixels over the x range `xr`).
fn legend_room(
    ax: &mut Axis,
    lines: &[Vec<(f64, f64)>],
    xr: (f64, f64),
    plot: (f64, f64),
    legend: (f64, f64),
    pos: &SeriesLabelPosition,
) {
    if plot.0 <= 0.0 || plot.1 <= 0.0 {
        return;
    }
    // plotters puts the box 5 px in from the corner; keep 6 px more between box and lines.
    let fw = ((legend.0 + 11.0) / plot.0).min(1.0);
    let fh = ((legend.1 + 11.0) / plot.1).min(0.75);
    let span = xr.1 - xr.0;
    let (y0, y1) = ax.y;
    match pos {
        SeriesLabelPosition::UpperLeft => {
            let ys = values_over(lines, xr.0, xr.0 + fw * span);
            if let Some(top) = ys.into_iter().reduce(f64::max) {
                ax.y.1 = y1.max((top - fh * y0) / (1.0 - fh));
            }
        }
        SeriesLabelPosition::LowerRight => {
            let ys = values_over(lines, xr.1 - fw * span, xr.1);
            if let Some(bottom) = ys.into_iter().reduce(f64::min) {
                ax.y.0 = y0.min((bottom - fh * y1) / (1.0 - fh));
            }
        }
        _ => {}
    }
}

/// A panel's chart: log2 sizes across, log10 values up.
type Chart<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<Ticks, Ticks>>;

/// Draws one panel of `series` into `area` as `spec` says (errors name `path`).
fn panel(
    area: &Panel<'_>,
    path: &Path,
    series: &[Series],
    spec: &PanelSpec<'_>,
) -> Result<(), PlotError> {
    let e = err_to(path);
    let Some(mut ax) = axis_of(series, spec.value) else {
        return draw_empty_note(area, path, spec);
    };
    let peak = spec.peak.filter(|p| *p > 0.0 && p.is_finite());
    if let Some(p) = peak {
        let d = p.log10();
        ax.y.0 = ax.y.0.min(d - 0.12);
        ax.y.1 = ax.y.1.max(d + 0.2);
    }
    let m = spec.m;
    let mut inner = area.margin(m.margin, m.margin, m.margin, m.margin_right);
    if let Some(caption) = spec.caption {
        inner = inner.titled(caption, (FAMILY, m.caption)).map_err(&e)?;
    }
    let xr = (f64::from(ax.x.0) - 0.3, f64::from(ax.x.1) + 0.3);
    let lines: Vec<Vec<(f64, f64)>> = series.iter().map(|s| log_points(s, spec.value)).collect();
    clear_legend_corner(&mut ax, &inner, series, &lines, peak, xr, spec);
    let mut chart = chart_with_mesh(&inner, path, &ax, xr, spec)?;
    if let Some(p) = peak {
        draw_peak_line(&mut chart, path, xr, p)?;
    }
    for (i, (s, pts)) in series.iter().zip(&lines).enumerate() {
        if pts.is_empty() {
            continue;
        }
        let color = spec.colors.get(i).copied().unwrap_or_else(|| color(i));
        draw_series_line(&mut chart, path, s, pts, color)?;
    }
    if let Some(note) = &spec.note {
        draw_corner_note(&chart, path, &ax, note, m)?;
    }
    chart
        .configure_series_labels()
        .position(spec.legend.clone())
        .margin(m.legend_margin)
        .label_font((FAMILY, m.legend))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(&e)?;
    Ok(())
}

/// A panel with nothing plottable: its `empty_note` instead of a chart.
fn draw_empty_note(area: &Panel<'_>, path: &Path, spec: &PanelSpec<'_>) -> Result<(), PlotError> {
    let dy = if spec.caption.is_some() { 80 } else { 40 };
    area.draw(&Text::new(
        spec.empty_note.to_string(),
        (spec.m.y_area as i32, dy),
        (FAMILY, spec.m.desc + 3).into_font().color(&BLACK.mix(0.7)),
    ))
    .map_err(err_to(path))
}

/// The legend text of the peak line.
fn peak_label(p: f64) -> String {
    format!("peak {p:.1} GB/s")
}

/// Widens `ax` so that the legend (the peak line first, then one line per drawn series) covers
/// no line: see [`legend_room`].
fn clear_legend_corner(
    ax: &mut Axis,
    inner: &Panel<'_>,
    series: &[Series],
    lines: &[Vec<(f64, f64)>],
    peak: Option<f64>,
    xr: (f64, f64),
    spec: &PanelSpec<'_>,
) {
    let m = spec.m;
    let mut labels: Vec<String> = Vec::new();
    let mut blockers = lines.to_vec();
    if let Some(p) = peak {
        labels.push(peak_label(p));
        blockers.push(vec![(xr.0, p.log10()), (xr.1, p.log10())]);
    }
    labels.extend(
        series
            .iter()
            .zip(lines)
            .filter(|(_, l)| !l.is_empty())
            .map(|(s, _)| s.label.clone()),
    );
    let (w, h) = inner.dim_in_pixel();
    let plot = (
        f64::from(w) - f64::from(m.y_area),
        f64::from(h) - f64::from(m.x_area),
    );
    let legend = legend_size(&labels, m.legend, m.legend_margin);
    legend_room(ax, &blockers, xr, plot, legend, &spec.legend);
}

/// The chart over `ax` (x range `xr`) in `inner`, its grid, ticks and axis descriptions drawn.
fn chart_with_mesh<'a, 'b>(
    inner: &'a Panel<'b>,
    path: &Path,
    ax: &Axis,
    xr: (f64, f64),
    spec: &PanelSpec<'_>,
) -> Result<Chart<'a, 'b>, PlotError> {
    let e = err_to(path);
    let m = spec.m;
    let (yb, yl) = log10_ticks(ax.y.0, ax.y.1);
    let xt = Ticks {
        range: xr.0..xr.1,
        bold: log2_ticks(ax.x.0, ax.x.1),
        light: Vec::new(),
    };
    let yt = Ticks {
        range: ax.y.0..ax.y.1,
        bold: yb,
        light: yl,
    };
    let mut chart = ChartBuilder::on(inner)
        .x_label_area_size(m.x_area)
        .y_label_area_size(m.y_area)
        .build_cartesian_2d(xt, yt)
        .map_err(&e)?;
    let mut mesh = chart.configure_mesh();
    if let Some(d) = spec.x_desc {
        mesh.x_desc(d);
    }
    mesh.y_desc(spec.y_desc)
        .x_label_formatter(&|x| size_label(*x))
        .y_label_formatter(&|y| value_label(*y))
        .label_style((FAMILY, m.label))
        .axis_desc_style((FAMILY, m.desc))
        .bold_line_style(BLACK.mix(0.22))
        .light_line_style(BLACK.mix(0.07))
        .draw()
        .map_err(&e)?;
    Ok(chart)
}

/// The horizontal peak line at `p` GB/s across `xr`, with its legend entry.
fn draw_peak_line<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    path: &Path,
    xr: (f64, f64),
    p: f64,
) -> Result<(), PlotError> {
    let y = p.log10();
    let grey = RGBColor(90, 90, 90);
    chart
        .draw_series(LineSeries::new(
            [(xr.0, y), (xr.1, y)],
            grey.stroke_width(2),
        ))
        .map_err(err_to(path))?
        .label(peak_label(p))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], grey.stroke_width(2)));
    Ok(())
}

/// One series' line through `pts` with its markers (circles native, triangles the others) and
/// legend entry.
fn draw_series_line<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    path: &Path,
    s: &Series,
    pts: &[(f64, f64)],
    color: RGBColor,
) -> Result<(), PlotError> {
    let e = err_to(path);
    let triangle = s.backend != "native";
    chart
        .draw_series(LineSeries::new(pts.to_vec(), color.stroke_width(2)))
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
    Ok(())
}

/// `note` in the lower right corner of the plotting area.
fn draw_corner_note(
    chart: &Chart<'_, '_>,
    path: &Path,
    ax: &Axis,
    note: &str,
    m: Metrics,
) -> Result<(), PlotError> {
    let style = (FAMILY, m.label)
        .into_font()
        .color(&BLACK.mix(0.75))
        .pos(Pos::new(HPos::Right, VPos::Bottom));
    let at = (f64::from(ax.x.1) + 0.2, ax.y.0 + 0.03 * (ax.y.1 - ax.y.0));
    chart
        .plotting_area()
        .draw(&Text::new(note.to_string(), at, style))
        .map_err(err_to(path))
}

/// Medians of the size-0 latencies among `rows`, one `backend[ · algo][ · transport] t µs` part
/// per series (`algo`/`transport` only when `detail`), in order of first appearance.
fn size_zero_parts(rows: &[&Record], detail: bool) -> Vec<String> {
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
fn only(reports: &[Report], coll: &str) -> Vec<Report> {
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

/// One row of the small multiples: a collective, its series (labels without the collective)
/// and what cannot go on the size axis.
struct Row {
    name: String,
    /// Facets that vary across the whole plot but not within this row (ranks, transport).
    facets: Vec<String>,
    series: Vec<Series>,
    /// Size-0 latencies (`native · dissemination 5.8 µs`).
    size_zero: Vec<String>,
}

impl Row {
    fn plottable(&self) -> bool {
        any_plottable(&self.series)
    }
}

fn rows(reports: &[Report]) -> Vec<Row> {
    let recs: Vec<&Record> = records(reports).collect();
    let all_ranks: BTreeSet<usize> = recs.iter().map(|r| r.ranks).collect();
    let all_transports = distinct(recs.iter().map(|r| r.transport.as_str()));
    distinct(recs.iter().map(|r| r.collective.as_str()))
        .into_iter()
        .map(|name| {
            let mine: Vec<&Record> = recs
                .iter()
                .copied()
                .filter(|r| r.collective == name)
                .collect();
            let ranks: BTreeSet<usize> = mine.iter().map(|r| r.ranks).collect();
            let transports = distinct(mine.iter().map(|r| r.transport.as_str()));
            let mut facets = Vec::new();
            if all_ranks.len() > 1 && ranks.len() == 1 {
                let n = ranks.iter().next().copied().unwrap_or(0);
                facets.push(format!("{n} ranks"));
            }
            if all_transports.len() > 1 && transports.len() == 1 {
                facets.push(format!("over {}", transports[0]));
            }
            let zero: Vec<&Record> = mine
                .iter()
                .copied()
                .filter(|r| r.bytes == 0 && r.time_us() > 0.0)
                .collect();
            Row {
                series: series(&only(reports, &name)),
                size_zero: size_zero_parts(&zero, true),
                name,
                facets,
            }
        })
        .collect()
}

/// Colours for the rows' series: when the whole plot has at most ten distinct labels, one
/// colour per label everywhere (`native · ring` looks the same in every row); otherwise each
/// row takes the palette from its start, so the colours within a panel are as far apart as
/// they can be. Never two alike within a row.
fn row_colors(rows: &[Row]) -> Vec<Vec<RGBColor>> {
    let labels = distinct(
        rows.iter()
            .flat_map(|r| r.series.iter().map(|s| s.label.as_str())),
    );
    let global = labels.len() <= 10;
    rows.iter()
        .map(|r| {
            let mut used: Vec<usize> = Vec::new();
            r.series
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let mut k = if global {
                        labels.iter().position(|l| *l == s.label).unwrap_or(i)
                    } else {
                        i
                    };
                    while used.contains(&k) {
                        k += 1;
                    }
                    used.push(k);
                    color(k)
                })
                .collect()
        })
        .collect()
}

const LATENCY_CAPTION: &str = "Latency (slowest rank)";
const BUSBW_CAPTION: &str = "Bus bandwidth (nccl-tests busbw)";
const X_DESC: &str = "message size (bytes, log scale; K = 1024)";

/// Height of the title block of the small multiples (two title lines, column headings).
const MULTI_HEAD: u32 = 116;
/// Height of one collective's row: heading strip and the two panels.
const ROW: u32 = 330;
/// Height of a row's heading strip.
const ROW_HEAD: u32 = 32;
/// What the last row adds for the x axis description.
const LAST_ROW_EXTRA: u32 = 28;
/// Height of a row with nothing on the size axis (barrier): its heading strip and one line.
const TEXT_ROW: u32 = 44;
/// Space under the last row.
const FOOT: u32 = 10;

/// The height of the picture for `rows` drawn as small multiples.
fn multi_height(rows: &[Row]) -> u32 {
    let charts = rows.iter().filter(|r| r.plottable()).count() as u32;
    let texts = rows.len() as u32 - charts;
    MULTI_HEAD + charts * ROW + LAST_ROW_EXTRA + texts * TEXT_ROW + FOOT
}

fn draw_title(head: &Panel<'_>, path: &Path, reports: &[Report]) -> Result<(), PlotError> {
    let e = err_to(path);
    let room = f64::from(WIDTH) - 48.0;
    let (l1, l2) = title(reports);
    let (l1, s1) = fit_text(&l1, 30, 22, room);
    let (l2, s2) = fit_text(&l2, 19, 15, room);
    head.draw(&Text::new(l1, (24, 12), (FAMILY, s1).into_font()))
        .map_err(&e)?;
    head.draw(&Text::new(
        l2,
        (24, 48),
        (FAMILY, s2).into_font().color(&BLACK.mix(0.7)),
    ))
    .map_err(&e)?;
    Ok(())
}

fn latency_spec<'s>(note: Option<String>, colors: &'s [RGBColor], m: Metrics) -> PanelSpec<'s> {
    PanelSpec {
        caption: Some(LATENCY_CAPTION),
        x_desc: Some(X_DESC),
        y_desc: "time per operation (µs, log scale)",
        value: |p| p.1,
        peak: None,
        empty_note: "no latency measured",
        legend: SeriesLabelPosition::UpperLeft,
        note,
        colors,
        m,
    }
}

fn busbw_spec<'s>(peak: Option<f64>, colors: &'s [RGBColor], m: Metrics) -> PanelSpec<'s> {
    PanelSpec {
        caption: Some(BUSBW_CAPTION),
        x_desc: Some(X_DESC),
        y_desc: "busbw (GB/s = 1e9 B/s, log scale)",
        value: |p| p.2,
        peak,
        empty_note: "no bandwidth: this operation moves no data",
        legend: SeriesLabelPosition::LowerRight,
        note: None,
        colors,
        m,
    }
}

/// Today's layout for one collective: title, then latency and busbw side by side.
fn draw_single(
    root: &Panel<'_>,
    path: &Path,
    reports: &[Report],
    series: &[Series],
) -> Result<(), PlotError> {
    let (head, body) = root.split_vertically(78);
    draw_title(&head, path, reports)?;
    let panels = body.split_evenly((1, 2));
    let peak = reports.iter().find_map(|r| r.meta.peak_gbps);
    let colors: Vec<RGBColor> = (0..series.len()).map(color).collect();
    let latency = latency_spec(size_zero_note(reports), &colors, FULL);
    let mut busbw = busbw_spec(peak, &colors, FULL);
    busbw.empty_note = "no bandwidth: barrier moves no data";
    panel(&panels[0], path, series, &latency)?;
    panel(&panels[1], path, series, &busbw)?;
    Ok(())
}

/// Draws a row's heading strip: a light band with the collective's name (and `extra`, greyer).
fn row_heading(area: &Panel<'_>, path: &Path, row: &Row, extra: &str) -> Result<(), PlotError> {
    let e = err_to(path);
    let (w, h) = area.dim_in_pixel();
    area.draw(&Rectangle::new(
        [(0, 0), (w as i32, h as i32)],
        RGBColor(238, 241, 245).filled(),
    ))
    .map_err(&e)?;
    area.draw(&PathElement::new(
        vec![(0, 0), (w as i32, 0)],
        BLACK.mix(0.25).stroke_width(1),
    ))
    .map_err(&e)?;
    let mid = Pos::new(HPos::Left, VPos::Center);
    let y = h as i32 / 2;
    let mut name = row.name.clone();
    if !row.facets.is_empty() {
        name += &format!(" · {}", row.facets.join(" · "));
    }
    area.draw(&Text::new(
        name.clone(),
        (24, y),
        (FAMILY, 22).into_font().color(&BLACK).pos(mid),
    ))
    .map_err(&e)?;
    if !extra.is_empty() {
        let x = 24.0 + text_size(&name, 22).0 + 24.0;
        let (extra, px) = fit_text(extra, 17, 13, f64::from(w) - x - 24.0);
        area.draw(&Text::new(
            extra,
            (x as i32, y),
            (FAMILY, px).into_font().color(&BLACK.mix(0.75)).pos(mid),
        ))
        .map_err(&e)?;
    }
    Ok(())
}

/// Small multiples: one row per collective (latency and busbw side by side, each panel fitted
/// to that collective's data), a line for those with nothing on the size axis (barrier).
fn draw_multi(
    root: &Panel<'_>,
    path: &Path,
    reports: &[Report],
    rows: &[Row],
) -> Result<(), PlotError> {
    let e = err_to(path);
    let (head, mut rest) = root.split_vertically(MULTI_HEAD);
    draw_title(&head, path, reports)?;
    let half = WIDTH as i32 / 2;
    let centre = Pos::new(HPos::Center, VPos::Top);
    for (i, (c, d)) in [
        (LATENCY_CAPTION, "µs, log scale"),
        (BUSBW_CAPTION, "GB/s = 1e9 B/s, log scale"),
    ]
    .into_iter()
    .enumerate()
    {
        let x = half * i as i32 + half / 2 + 20;
        head.draw(&Text::new(
            format!("{c} · {d}"),
            (x, 82),
            (FAMILY, 21).into_font().color(&BLACK).pos(centre),
        ))
        .map_err(&e)?;
    }
    let peak = reports.iter().find_map(|r| r.meta.peak_gbps);
    let colors = row_colors(rows);
    let last = rows.iter().rposition(Row::plottable);
    for (i, (row, colors)) in rows.iter().zip(&colors).enumerate() {
        if !row.plottable() {
            let (strip, below) = rest.split_vertically(TEXT_ROW);
            rest = below;
            let text = if row.size_zero.is_empty() {
                "nothing measured".to_string()
            } else {
                format!(
                    "no message size, no bandwidth · latency (slowest rank): {}",
                    row.size_zero.join(", ")
                )
            };
            row_heading(&strip, path, row, &text)?;
            continue;
        }
        let is_last = Some(i) == last;
        let height = ROW + if is_last { LAST_ROW_EXTRA } else { 0 };
        let (area, below) = rest.split_vertically(height);
        rest = below;
        let (strip, body) = area.split_vertically(ROW_HEAD);
        row_heading(&strip, path, row, "")?;
        let mut m = SMALL;
        if is_last {
            m.x_area += LAST_ROW_EXTRA;
        }
        let note = (!row.size_zero.is_empty())
            .then(|| format!("size 0 (not on the axis): {}", row.size_zero.join(", ")));
        let mut latency = latency_spec(note, colors, m);
        let mut busbw = busbw_spec(peak, colors, m);
        for s in [&mut latency, &mut busbw] {
            s.caption = None;
            s.x_desc = is_last.then_some(X_DESC);
        }
        latency.y_desc = "latency (µs)";
        busbw.y_desc = "busbw (GB/s)";
        let panels = body.split_evenly((1, 2));
        panel(&panels[0], path, &row.series, &latency)?;
        panel(&panels[1], path, &row.series, &busbw)?;
    }
    Ok(())
}

/// Draws `reports` into a PNG at `path` (written to a temporary file beside it, then renamed).
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
    let rows = rows(reports);
    let multi = rows.iter().filter(|r| r.plottable()).count() > 1;
    let height = if multi { multi_height(&rows) } else { HEIGHT };
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
        let root = BitMapBackend::new(&tmp, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(&e)?;
        if multi {
            draw_multi(&root, path, reports, &rows)?;
        } else {
            draw_single(&root, path, reports, &series)?;
        }
        root.present().map_err(&e)?;
        std::fs::rename(&tmp, path).map_err(err_to(path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
