//! Drawing a [`Chart`] with plotters, on any of its backends.
//!
//! Everything here maps the [`Frame`] and the series to plotters elements;
//! what is visible and where the axes go was decided in `frame`. Text uses
//! DejaVu Sans, embedded and registered with plotters under the family name
//! `sans-serif` (so an SVG names a family every viewer has).
//!
//! Drawing order: mesh and axes, bars, reference lines, error bars, lines,
//! markers, legend; later items draw over earlier ones.

use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::frame::{Frame, XKind, visible_points};
use crate::{Chart, PALETTE, Series};

/// The font family every text element asks for.
const FAMILY: &str = "sans-serif";

/// Registers the embedded font once; `false` if it could not be loaded.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        plotters::style::register_font(FAMILY, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    })
}

/// Sizes in pixels, scaled with the image.
struct Metrics {
    title: u32,
    text: u32,
    margin: u32,
    x_area: u32,
    y_area: u32,
    stroke: u32,
    marker: u32,
}

impl Metrics {
    fn for_size(w: u32, h: u32) -> Metrics {
        // 1.0 at the default 800×500; text stays legible on small charts.
        let unit = (f64::from(w.min(h * 8 / 5)) / 800.0).clamp(0.25, 6.0);
        let px = |v: f64| (v * unit).round().max(1.0) as u32;
        Metrics {
            title: px(20.0).max(8),
            text: px(14.0).max(7),
            margin: px(12.0),
            x_area: px(46.0),
            y_area: px(64.0),
            stroke: px(2.0),
            marker: px(4.0).max(2),
        }
    }
}

fn color(i: usize) -> RGBColor {
    let [r, g, b] = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// Axes and text: near-black, so no element but a series uses a palette colour.
const INK: RGBColor = RGBColor(34, 34, 34);
const GRID: RGBColor = RGBColor(225, 225, 225);
const REFERENCE: RGBColor = RGBColor(110, 110, 110);

type Drawn = Result<(), String>;

/// Draws `chart` onto `root` (already sized; filled white here).
pub fn draw<DB: DrawingBackend>(chart: &Chart, root: &DrawingArea<DB, Shift>) -> Drawn {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    if !font_ready() {
        return Err("the embedded font could not be loaded".into());
    }
    let frame = Frame::of(chart);
    let (x0, x1) = frame.x;
    let (y0, y1) = frame.y;
    let (x, y) = (RangedCoordf64::from(x0..x1), y0..y1);
    match &frame.kind {
        XKind::Categories(labels) => {
            let keys = (0..labels.len()).map(|i| i as f64).collect();
            let name = |v: &f64| {
                let i = v.round();
                let known = (v - i).abs() < 1e-6 && i >= 0.0;
                known
                    .then(|| labels.get(i as usize).cloned())
                    .flatten()
                    .unwrap_or_default()
            };
            draw_on(chart, &frame, root, Ticked { axis: x, keys }, y, &name)
        }
        XKind::Linear => {
            let fmt = |v: &f64| number(v, decimals(x0, x1));
            draw_on(chart, &frame, root, x, y, &fmt)
        }
        XKind::Log(keys) => {
            let axis = LogCoord::<f64>::from((x0..x1).log_scale());
            let keys = keys.clone();
            draw_on(chart, &frame, root, Ticked { axis, keys }, y, &|v| {
                number(v, (-v.log10().floor()).clamp(0.0, 6.0) as usize)
            })
        }
    }
}

/// An axis labelled at chosen values instead of plotters' own choice.
struct Ticked<R> {
    axis: R,
    keys: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.axis.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.keys.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.axis.range()
    }
}

/// Most labels plotters puts on a numeric axis.
const LABELS: usize = 8;

/// Decimals that tell apart the labels plotters puts on `lo..hi`: the most
/// any of them needs, so all are written alike.
fn decimals(lo: f64, hi: f64) -> usize {
    RangedCoordf64::from(lo..hi)
        .key_points(LABELS)
        .iter()
        .map(|v| {
            (0..6)
                .find(|d| {
                    let x = v * 10f64.powi(*d as i32);
                    (x - x.round()).abs() < 1e-6
                })
                .unwrap_or(6)
        })
        .max()
        .unwrap_or(0)
}

/// A tick label with `decimals` digits after the point; scientific
/// notation for very large or very small magnitudes.
fn number(v: &f64, decimals: usize) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e7).contains(&a) {
        format!("{v:.1e}")
    } else {
        format!("{v:.decimals$}")
    }
}

fn draw_on<DB, X>(
    chart: &Chart,
    frame: &Frame,
    root: &DrawingArea<DB, Shift>,
    x_spec: X,
    y_spec: std::ops::Range<f64>,
    x_label: &dyn Fn(&f64) -> String,
) -> Drawn
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let m = Metrics::for_size(chart.width, chart.height);
    let text = (FAMILY, m.text).into_font().color(&INK);
    let mut builder = ChartBuilder::on(root);
    builder
        .margin(m.margin)
        .x_label_area_size(m.x_area)
        .y_label_area_size(m.y_area);
    if !chart.title.is_empty() {
        builder.caption(&chart.title, (FAMILY, m.title).into_font().color(&INK));
    }
    let mut ctx = builder
        .build_cartesian_2d(x_spec, y_spec)
        .map_err(|e| err(&e))?;
    let y_digits = decimals(frame.y.0, frame.y.1);
    let y_label = |v: &f64| number(v, y_digits);
    let mut mesh = ctx.configure_mesh();
    mesh.light_line_style(TRANSPARENT)
        .bold_line_style(GRID)
        .axis_style(INK)
        .label_style(text.clone())
        .axis_desc_style(text.clone())
        .x_label_formatter(x_label)
        .y_label_formatter(&y_label)
        .x_labels(LABELS)
        .y_labels(LABELS);
    if matches!(frame.kind, XKind::Categories(_)) {
        mesh.disable_x_mesh();
    }
    if !chart.x_label.is_empty() {
        mesh.x_desc(&chart.x_label);
    }
    if !chart.y_label.is_empty() {
        mesh.y_desc(&chart.y_label);
    }
    mesh.draw().map_err(|e| err(&e))?;

    // Bars, grouped side by side in each slot.
    let bar_count = chart
        .series
        .iter()
        .filter(|s| matches!(s, Series::Bars { .. }))
        .count();
    let width = 0.8 / bar_count.max(1) as f64;
    let mut bar_index = 0;
    for (i, s) in chart.series.iter().enumerate() {
        let Series::Bars { name, values } = s else {
            continue;
        };
        let c = color(i);
        let left = -0.4 + width * bar_index as f64;
        bar_index += 1;
        let bars = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(slot, v)| {
                let x = slot as f64 + left;
                let (base, top) = (frame.clamp_y(0.0), frame.clamp_y(*v));
                Rectangle::new([(x, base), (x + width * 0.92, top)], c.filled())
            });
        let drawn = ctx.draw_series(bars).map_err(|e| err(&e))?;
        if !name.is_empty() {
            drawn
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        }
    }

    // Reference lines, labelled at their right end.
    for (y, label) in &chart.hlines {
        if !(y.is_finite() && *y >= frame.y.0 && *y <= frame.y.1) {
            continue;
        }
        let ends = vec![(frame.x.0, *y), (frame.x.1, *y)];
        let dash = m.stroke * 4;
        ctx.draw_series(DashedLineSeries::new(
            ends,
            dash,
            dash,
            REFERENCE.stroke_width(1),
        ))
        .map_err(|e| err(&e))?;
        let style = text
            .clone()
            .color(&REFERENCE)
            .pos(Pos::new(HPos::Right, VPos::Bottom));
        ctx.draw_series(std::iter::once(Text::new(
            label.clone(),
            (frame.x.1, *y),
            style,
        )))
        .map_err(|e| err(&e))?;
    }

    // Lines: error bars, then the clipped polyline, then markers on top.
    for (i, s) in chart.series.iter().enumerate() {
        let Series::Line {
            name,
            points,
            err: bars,
        } = s
        else {
            continue;
        };
        let c = color(i);
        let line = c.stroke_width(m.stroke);
        if let Some(bars) = bars {
            let cap = m.marker * 3;
            let errs = points.iter().zip(bars).filter_map(|(&(x, y), &(lo, hi))| {
                let ok = [x, y, lo, hi].iter().all(|v| v.is_finite());
                let x_in = x >= frame.x.0 && x <= frame.x.1;
                let (lo, hi) = (frame.clamp_y(lo.min(hi)), frame.clamp_y(lo.max(hi)));
                (ok && x_in && lo < hi)
                    .then(|| ErrorBar::new_vertical(x, lo, frame.clamp_y(y), hi, line, cap))
            });
            ctx.draw_series(errs).map_err(|e| err(&e))?;
        }
        let shown = visible_points(points, frame.log_x());
        let segments = shown
            .windows(2)
            .filter_map(|w| frame.clip(w[0], w[1]))
            .map(|(a, b)| PathElement::new(vec![a, b], line));
        let drawn = ctx.draw_series(segments).map_err(|e| err(&e))?;
        if !name.is_empty() {
            drawn.label(name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
            });
        }
        let marks = shown
            .iter()
            .filter(|p| frame.contains(**p))
            .map(|p| Circle::new(*p, m.marker, c.filled()));
        ctx.draw_series(marks).map_err(|e| err(&e))?;
    }

    if chart.series.iter().any(|s| !s.name().is_empty()) {
        ctx.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(text)
            .background_style(WHITE.mix(0.85))
            .border_style(REFERENCE)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}
