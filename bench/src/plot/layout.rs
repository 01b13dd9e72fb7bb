//! The picture's layout: one collective as two large panels, several as small multiples (a
//! row per collective), under a title.

use std::collections::BTreeSet;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::palette::color;
use super::panel::{
    busbw_spec, latency_spec, panel, Panel, BUSBW_CAPTION, FULL, LATENCY_CAPTION, SMALL, X_DESC,
};
use super::series::{
    any_plottable, distinct, only, records, series, size_zero_note, size_zero_parts, Series,
};
use super::text::{fit_text, text_size};
use super::title::title;
use super::{err_to, PlotError, FAMILY, WIDTH};
use crate::model::{Record, Report};

/// One row of the small multiples: a collective, its series (labels without the collective)
/// and what cannot go on the size axis.
pub(super) struct Row {
    name: String,
    /// Facets that vary across the whole plot but not within this row (ranks, transport).
    facets: Vec<String>,
    series: Vec<Series>,
    /// Size-0 latencies (`native · dissemination 5.8 µs`).
    size_zero: Vec<String>,
}

impl Row {
    pub(super) fn plottable(&self) -> bool {
        any_plottable(&self.series)
    }
}

pub(super) fn rows(reports: &[Report]) -> Vec<Row> {
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
pub(super) fn multi_height(rows: &[Row]) -> u32 {
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

/// Today's layout for one collective: title, then latency and busbw side by side.
pub(super) fn draw_single(
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
pub(super) fn draw_multi(
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
