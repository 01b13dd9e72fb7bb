//! Series colours, distinct for any number of series.

use plotters::prelude::*;

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
pub(super) fn color(i: usize) -> RGBColor {
    if let Some(c) = PALETTE.get(i) {
        return *c;
    }
    let hue = ((i - PALETTE.len()) as f64 * 137.508 + 20.0) % 360.0 / 360.0;
    let light = if i % 2 == 0 { 0.38 } else { 0.5 };
    let (r, g, b) = HSLColor(hue, 0.75, light).rgb();
    RGBColor(r, g, b)
}
