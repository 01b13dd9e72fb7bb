//! Log-log axes: their ranges from the data, tick positions and labels.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};

use super::series::Series;
use crate::sizes::format_size;

/// Ticks of a log10 axis over `[lo, hi]` (log10 values): bold at decades (every other when
/// there are many; also at 2× and 5× when fewer than three decades show), light at 2..9 × each.
pub(super) fn log10_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
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
pub(super) fn value_label(log10: f64) -> String {
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
pub(super) fn log2_ticks(lo: i32, hi: i32) -> Vec<f64> {
    let span = (hi - lo).max(1);
    let step = ((span + 11) / 12).max(1);
    (lo..=hi)
        .filter(|k| (k - lo) % step == 0)
        .map(f64::from)
        .collect()
}

pub(super) fn size_label(log2: f64) -> String {
    let k = log2.round();
    if k < 0.0 {
        return "0".into();
    }
    format_size(2f64.powf(k) as u64)
}

/// A linear axis over already log-transformed values with fixed ticks: labels and bold grid lines
/// at `bold`, light grid lines at `light`.
pub(super) struct Ticks {
    pub(super) range: Range<f64>,
    pub(super) bold: Vec<f64>,
    pub(super) light: Vec<f64>,
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

pub(super) struct Axis {
    /// log2 sizes, whole.
    pub(super) x: (i32, i32),
    /// log10 values, padded.
    pub(super) y: (f64, f64),
}

/// A series' plottable points as `(log2 bytes, log10 value)`.
pub(super) fn log_points(s: &Series, value: fn(&(u64, f64, f64)) -> f64) -> Vec<(f64, f64)> {
    s.points
        .iter()
        .filter(|p| p.0 > 0 && value(p) > 0.0 && value(p).is_finite())
        .map(|p| ((p.0 as f64).log2(), value(p).log10()))
        .collect()
}

pub(super) fn axis_of(series: &[Series], value: fn(&(u64, f64, f64)) -> f64) -> Option<Axis> {
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
pub(super) fn values_over(lines: &[Vec<(f64, f64)>], lo: f64, hi: f64) -> Vec<f64> {
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
