//! Where things go: text sizes for an image size, the axes implied by the
//! data, and the plot area left once the title, axis labels and tick labels
//! have their margins.
//!
//! The plot area is a pixel rectangle; [`Layout::px`] and [`Layout::py`] map
//! data to fractional pixel coordinates inside it (the ends of each axis map
//! to the area's first and last pixel). Values off the axis map outside the
//! area and are clipped by the drawing code.

use crate::canvas::Rect;
use crate::font::{GLYPH_H, text_width};
use crate::ticks::{self, Axis};
use crate::{Chart, Series};

/// Sizes of text and marks, all in output pixels except the font scales.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    /// Font scale of the title.
    pub title: u32,
    /// Font scale of axis labels, tick labels and the legend.
    pub text: u32,
    /// Space around the image edge.
    pub pad: i64,
    /// Space between neighbouring pieces of text and marks.
    pub gap: i64,
    /// Length of tick marks outside the frame.
    pub tick_len: i64,
    /// Width of series lines.
    pub line: u32,
    /// Radius of point markers.
    pub marker: i64,
}

impl Style {
    /// Images from this size up get double-size text.
    const LARGE: (u32, u32) = (640, 400);

    pub fn for_size(w: u32, h: u32) -> Style {
        let large = w >= Self::LARGE.0 && h >= Self::LARGE.1;
        let s = if large { 2 } else { 1 };
        Style {
            title: s + 1,
            text: s,
            pad: 6 * i64::from(s),
            gap: 3 * i64::from(s),
            tick_len: 2 + 2 * i64::from(s),
            line: 2,
            marker: 2 + i64::from(s),
        }
    }

    /// Height of one line of text at scale `s`, descenders included.
    pub fn line_h(s: u32) -> i64 {
        i64::from(GLYPH_H * s)
    }

    /// Height of capitals and digits at scale `s`.
    pub fn cap_h(s: u32) -> i64 {
        7 * i64::from(s)
    }
}

/// The horizontal axis.
#[derive(Debug, Clone)]
pub enum XAxis {
    /// Evenly spaced slots, one per label; x value `i` is the centre of slot `i`.
    Categories(Vec<String>),
    Linear(Axis),
    Log(Axis),
}

/// A tick: its position in data units and its label.
#[derive(Debug, Clone)]
pub struct Tick {
    pub at: f64,
    pub label: String,
}

/// The outcome of layout: everything the drawing code needs to place things.
#[derive(Debug, Clone)]
pub struct Layout {
    pub style: Style,
    /// The plot area inside the frame.
    pub area: Rect,
    pub x: XAxis,
    pub y: Axis,
    pub x_ticks: Vec<Tick>,
    pub y_ticks: Vec<Tick>,
}

impl Layout {
    /// Lays out `chart` at its size.
    pub fn new(chart: &Chart) -> Layout {
        let style = Style::for_size(chart.width, chart.height);
        let x = x_axis(chart);
        let y = y_axis(chart);
        let y_ticks: Vec<Tick> = y
            .ticks
            .iter()
            .map(|v| Tick {
                at: *v,
                label: ticks::format_linear(*v, y.step),
            })
            .collect();
        let x_ticks = x_ticks(&x);

        let s = style.text;
        let label_w = y_ticks
            .iter()
            .map(|t| i64::from(text_width(&t.label, s)))
            .max()
            .unwrap_or(0);
        let y_label_w = if chart.y_label.is_empty() {
            0
        } else {
            Style::line_h(s) + style.gap
        };
        let left = style.pad + y_label_w + label_w + style.gap + style.tick_len;
        let title_h = if chart.title.is_empty() {
            0
        } else {
            Style::line_h(style.title) + style.gap
        };
        // Half a label of room above the frame for the top y tick label.
        let top = style.pad + title_h + Style::cap_h(s) / 2 + style.gap;
        let x_label_h = if chart.x_label.is_empty() {
            0
        } else {
            Style::line_h(s) + style.gap
        };
        let bottom = style.tick_len + style.gap + Style::line_h(s) + x_label_h + style.pad;
        // Room for half of the last x tick label to stick out to the right.
        let last_x_label = match &x {
            XAxis::Categories(_) => 0,
            _ => x_ticks
                .last()
                .map_or(0, |t| i64::from(text_width(&t.label, s)) / 2),
        };
        let right = style.pad + last_x_label.max(style.pad);

        let (w, h) = (i64::from(chart.width), i64::from(chart.height));
        let area = Rect::at(
            left,
            top,
            (w - left - right).max(8),
            (h - top - bottom).max(8),
        );
        Layout {
            style,
            area,
            x,
            y,
            x_ticks,
            y_ticks,
        }
    }

    /// Pixel x of data value `x` (NaN where it cannot be placed, e.g. x ≤ 0 on a log axis).
    pub fn px(&self, x: f64) -> f64 {
        let a = &self.area;
        let span = (a.width() - 1) as f64;
        let frac = match &self.x {
            XAxis::Categories(names) => return a.x0 as f64 + (x + 0.5) * self.slot(names.len()),
            XAxis::Linear(ax) => (x - ax.lo) / (ax.hi - ax.lo),
            XAxis::Log(ax) if x > 0.0 => (x / ax.lo).log10() / (ax.hi / ax.lo).log10(),
            XAxis::Log(_) => f64::NAN,
        };
        a.x0 as f64 + frac * span
    }

    /// Pixel y of data value `y`.
    pub fn py(&self, y: f64) -> f64 {
        let a = &self.area;
        let frac = (y - self.y.lo) / (self.y.hi - self.y.lo);
        (a.y1 - 1) as f64 - frac * (a.height() - 1) as f64
    }

    /// Width in pixels of one category slot when there are `n` of them.
    pub fn slot(&self, n: usize) -> f64 {
        self.area.width() as f64 / n.max(1) as f64
    }
}

fn x_axis(chart: &Chart) -> XAxis {
    let has_bars = chart
        .series
        .iter()
        .any(|s| matches!(s, Series::Bars { .. }));
    if chart.categories.is_some() || has_bars {
        let names = chart.categories.clone().unwrap_or_default();
        let mut n = names.len();
        for s in &chart.series {
            match s {
                Series::Bars { values, .. } => n = n.max(values.len()),
                // A line point at index i needs slots 0..=i.
                Series::Line { points, .. } => {
                    for (x, _) in points {
                        if x.is_finite() && *x >= 0.0 && *x < 10_000.0 {
                            n = n.max(x.floor() as usize + 1);
                        }
                    }
                }
            }
        }
        let labels = (0..n.max(1))
            .map(|i| names.get(i).cloned().unwrap_or_else(|| i.to_string()))
            .collect();
        return XAxis::Categories(labels);
    }
    let xs = chart.series.iter().flat_map(|s| match s {
        Series::Line { points, .. } => points.as_slice(),
        Series::Bars { .. } => &[],
    });
    let xs = xs
        .map(|p| p.0)
        .filter(|x| x.is_finite() && (!chart.log_x || *x > 0.0));
    let (lo, hi) = min_max(xs);
    if chart.log_x {
        match (lo, hi) {
            (Some(lo), Some(hi)) => XAxis::Log(ticks::log_axis(lo, hi)),
            _ => XAxis::Log(ticks::log_axis(1.0, 10.0)),
        }
    } else {
        let (lo, hi) = ticks::data_range(lo.unwrap_or(0.0), hi.unwrap_or(1.0), false);
        XAxis::Linear(ticks::nice_axis(lo, hi))
    }
}

fn y_axis(chart: &Chart) -> Axis {
    if let Some((lo, hi)) = chart.y_range {
        return ticks::fixed_axis(lo, hi);
    }
    let mut ys = Vec::new();
    let mut bars = false;
    for s in &chart.series {
        match s {
            Series::Line { points, err, .. } => {
                ys.extend(points.iter().map(|p| p.1));
                for (lo, hi) in err.iter().flatten() {
                    ys.extend([*lo, *hi]);
                }
            }
            Series::Bars { values, .. } => {
                bars = true;
                ys.extend(values);
            }
        }
    }
    ys.extend(chart.hlines.iter().map(|h| h.0));
    let (lo, hi) = min_max(ys.into_iter().filter(|y| y.is_finite()));
    let (lo, hi) = match (lo, hi) {
        (Some(lo), Some(hi)) => ticks::data_range(lo, hi, bars),
        _ => (0.0, 1.0),
    };
    ticks::nice_axis(lo, hi)
}

fn x_ticks(x: &XAxis) -> Vec<Tick> {
    match x {
        XAxis::Categories(names) => names
            .iter()
            .enumerate()
            .map(|(i, n)| Tick {
                at: i as f64,
                label: n.clone(),
            })
            .collect(),
        XAxis::Linear(ax) => ax
            .ticks
            .iter()
            .map(|v| Tick {
                at: *v,
                label: ticks::format_linear(*v, ax.step),
            })
            .collect(),
        XAxis::Log(ax) => ax
            .ticks
            .iter()
            .map(|v| Tick {
                at: *v,
                label: ticks::format_log(*v),
            })
            .collect(),
    }
}

fn min_max(values: impl Iterator<Item = f64>) -> (Option<f64>, Option<f64>) {
    values.fold((None, None), |(lo, hi), v| {
        (
            Some(lo.map_or(v, |l: f64| l.min(v))),
            Some(hi.map_or(v, |h: f64| h.max(v))),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_ends_map_to_the_area_edges() {
        let chart = Chart::new("t", "x", "y").series(Series::Line {
            name: "a".into(),
            points: vec![(0.0, 0.0), (3.7, 10.0)],
            err: None,
        });
        let l = Layout::new(&chart);
        let a = l.area;
        assert!(a.x0 > 0 && a.y0 > 0 && a.x1 < 800 && a.y1 < 500);
        let XAxis::Linear(x) = &l.x else {
            panic!("expected a linear x axis, got {:?}", l.x)
        };
        assert_eq!((x.lo, x.hi), (0.0, 4.0));
        assert_eq!(l.px(0.0), a.x0 as f64);
        assert_eq!(l.px(4.0), (a.x1 - 1) as f64);
        assert_eq!(l.py(l.y.lo), (a.y1 - 1) as f64);
        assert_eq!(l.py(l.y.hi), a.y0 as f64);
    }

    #[test]
    fn bars_make_categories_and_include_zero() {
        let chart = Chart::new("t", "", "").series(Series::Bars {
            name: "b".into(),
            values: vec![5.0, 7.0, 6.0],
        });
        let l = Layout::new(&chart);
        let XAxis::Categories(names) = &l.x else {
            panic!("expected categories, got {:?}", l.x)
        };
        assert_eq!(names, &["0", "1", "2"]);
        assert_eq!(l.y.lo, 0.0);
        // Category i sits at the centre of slot i.
        let slot = l.slot(3);
        assert_eq!(l.px(1.0), l.area.x0 as f64 + 1.5 * slot);
    }

    #[test]
    fn named_categories_grow_to_fit_the_data() {
        let chart = Chart::new("t", "", "")
            .categories(vec!["one".into()])
            .series(Series::Line {
                name: "a".into(),
                points: vec![(0.0, 1.0), (2.0, 1.0)],
                err: None,
            });
        let XAxis::Categories(names) = Layout::new(&chart).x else {
            panic!("expected categories")
        };
        assert_eq!(names, ["one", "1", "2"]);
    }

    #[test]
    fn small_images_use_small_text() {
        assert_eq!(Style::for_size(800, 500).text, 2);
        assert_eq!(Style::for_size(480, 300).text, 1);
        let l = Layout::new(&Chart::new("title", "x", "y").size(64, 64));
        assert!(l.area.width() >= 8 && l.area.height() >= 8);
    }
}
