//! Measuring and fitting text in the shipped font.

use plotters::prelude::*;

use super::FAMILY;

/// The pixel size of `text` in the shipped font at `px` (a rough guess if it cannot be measured).
pub(super) fn text_size(text: &str, px: u32) -> (f64, f64) {
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
pub(super) fn legend_size(labels: &[String], px: u32, margin: u32) -> (f64, f64) {
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
pub(super) fn fit_text(text: &str, px: u32, min_px: u32, max_w: f64) -> (String, u32) {
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
