//! One panel: a latency or busbw chart of some series, with its legend kept clear of the
//! lines, an optional peak line and a corner note.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{
    axis_of, log10_ticks, log2_ticks, log_points, size_label, value_label, values_over, Axis, Ticks,
};
use super::palette::color;
use super::series::Series;
use super::text::legend_size;
use super::{err_to, PlotError, FAMILY};

pub(super) type Panel<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// Sizes of one panel's parts, in pixels.
#[derive(Debug, Clone, Copy)]
pub(super) struct Metrics {
    /// The caption's font (unused when the panel has no caption).
    pub(super) caption: u32,
    /// Tick labels.
    pub(super) label: u32,
    /// Axis descriptions.
    pub(super) desc: u32,
    /// Legend text.
    pub(super) legend: u32,
    /// Space between the legend's border and its text.
    pub(super) legend_margin: u32,
    pub(super) margin: u32,
    pub(super) margin_right: u32,
    /// Below the plot: tick labels, and the x description if any.
    pub(super) x_area: u32,
    /// Left of the plot: tick labels and the y description.
    pub(super) y_area: u32,
}

/// One pair of large panels (a single collective).
pub(super) const FULL: Metrics = Metrics {
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
pub(super) const SMALL: Metrics = Metrics {
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
pub(super) struct PanelSpec<'s> {
    pub(super) caption: Option<&'static str>,
    pub(super) x_desc: Option<&'static str>,
    pub(super) y_desc: &'static str,
    /// The plotted value of a point.
    pub(super) value: fn(&(u64, f64, f64)) -> f64,
    /// A horizontal reference line (GB/s).
    pub(super) peak: Option<f64>,
    /// Shown instead of a chart when nothing is plottable.
    pub(super) empty_note: &'static str,
    /// Where the legend goes (a corner the curves usually leave empty).
    pub(super) legend: SeriesLabelPosition,
    /// A line written in the lower right corner (latency of size-0 rows such as barrier).
    pub(super) note: Option<String>,
    /// One colour per series.
    pub(super) colors: &'s [RGBColor],
    pub(super) m: Metrics,
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
pub(super) fn panel(
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

pub(super) const LATENCY_CAPTION: &str = "Latency (slowest rank)";
pub(super) const BUSBW_CAPTION: &str = "Bus bandwidth (nccl-tests busbw)";
pub(super) const X_DESC: &str = "message size (bytes, log scale; K = 1024)";

pub(super) fn latency_spec<'s>(
    note: Option<String>,
    colors: &'s [RGBColor],
    m: Metrics,
) -> PanelSpec<'s> {
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

pub(super) fn busbw_spec<'s>(
    peak: Option<f64>,
    colors: &'s [RGBColor],
    m: Metrics,
) -> PanelSpec<'s> {
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
