//! Drawing a laid-out chart.
//!
//! Order, back to front: grid, bars, reference lines, error bars, series
//! lines, markers (all clipped to the plot area), then the frame, ticks and
//! tick labels, reference-line labels, the legend, and the title and axis
//! labels. The legend goes in whichever inside corner of the plot area covers
//! the fewest already-drawn data pixels.

use crate::canvas::{Canvas, Color, Marker, Rect};
use crate::font::{ADVANCE, text_width};
use crate::layout::{Layout, Style, Tick, XAxis};
use crate::{Chart, PALETTE, Series};

const BACKGROUND: Color = [255, 255, 255];
const GRID: Color = [232, 232, 232];
const FRAME: Color = [70, 70, 70];
const TEXT: Color = [20, 20, 20];
const REFERENCE: Color = [100, 100, 100];
const LEGEND_EDGE: Color = [170, 170, 170];

/// Marker shapes, cycled per series alongside the palette.
const MARKERS: [Marker; 4] = [
    Marker::Circle,
    Marker::Square,
    Marker::Diamond,
    Marker::Triangle,
];

/// Share of a category slot taken by its group of bars.
const BAR_GROUP: f64 = 0.8;

/// Draws `chart` onto a new canvas of its size.
pub fn render(chart: &Chart) -> Canvas {
    let l = Layout::new(chart);
    let mut c = Canvas::new(chart.width, chart.height, BACKGROUND);
    grid(&mut c, &l);
    c.set_clip(Some(l.area));
    bars(&mut c, &l, chart);
    hlines(&mut c, &l, chart);
    lines(&mut c, &l, chart);
    c.set_clip(None);
    frame_and_ticks(&mut c, &l);
    hline_labels(&mut c, &l, chart);
    legend(&mut c, &l, chart);
    titles(&mut c, &l, chart);
    c
}

fn color(i: usize) -> Color {
    PALETTE[i % PALETTE.len()]
}

/// Rounds a pixel coordinate, pulling far-off values (even ±∞) to near `r`
/// so later arithmetic cannot overflow; clipping removes them anyway.
fn pix(v: f64, lo: i64, hi: i64) -> i64 {
    (v.round() as i64).clamp(lo - 64, hi + 64)
}

fn grid(c: &mut Canvas, l: &Layout) {
    let a = l.area;
    for t in &l.y_ticks {
        let y = pix(l.py(t.at), a.y0, a.y1);
        c.fill(Rect::at(a.x0, y, a.width(), 1), GRID);
    }
    if !matches!(l.x, XAxis::Categories(_)) {
        for t in &l.x_ticks {
            let x = pix(l.px(t.at), a.x0, a.x1);
            c.fill(Rect::at(x, a.y0, 1, a.height()), GRID);
        }
    }
}

fn bars(c: &mut Canvas, l: &Layout, chart: &Chart) {
    let XAxis::Categories(names) = &l.x else {
        return;
    };
    let groups: Vec<(usize, &[f64])> = chart
        .series
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Series::Bars { values, .. } => Some((i, values.as_slice())),
            Series::Line { .. } => None,
        })
        .collect();
    let slot = l.slot(names.len());
    let bar_w = slot * BAR_GROUP / groups.len().max(1) as f64;
    let base = l.py(0f64.clamp(l.y.lo, l.y.hi));
    let a = l.area;
    for (j, (series, values)) in groups.iter().enumerate() {
        for (i, v) in values.iter().enumerate() {
            if !v.is_finite() {
                continue;
            }
            let left = a.x0 as f64 + i as f64 * slot + slot * (1.0 - BAR_GROUP) / 2.0;
            let x0 = pix(left + j as f64 * bar_w, a.x0, a.x1);
            let x1 = pix(left + (j + 1) as f64 * bar_w, a.x0, a.x1);
            let gap = i64::from(x1 - x0 >= 6);
            let (y0, y1) = (pix(base, a.y0, a.y1), pix(l.py(*v), a.y0, a.y1));
            let r = Rect {
                x0,
                y0: y0.min(y1),
                x1: x1 - gap,
                y1: y0.max(y1) + 1,
            };
            c.fill(r, color(*series));
        }
    }
}

fn hlines(c: &mut Canvas, l: &Layout, chart: &Chart) {
    let a = l.area;
    let s = l.style.text;
    for (y, _) in &chart.hlines {
        let py = l.py(*y);
        if py.is_finite() {
            let py = pix(py, a.y0, a.y1);
            c.dashed_line((a.x0, py), (a.x1 - 1, py), REFERENCE, s, 6 * s, 4 * s);
        }
    }
}

fn hline_labels(c: &mut Canvas, l: &Layout, chart: &Chart) {
    let a = l.area;
    let (s, gap) = (l.style.text, l.style.gap);
    for (y, label) in &chart.hlines {
        let py = l.py(*y);
        if label.is_empty() || !(a.y0 as f64..a.y1 as f64).contains(&py) {
            continue;
        }
        let py = py.round() as i64;
        let label = fit(label, a.width() - 2 * gap, s);
        let (tw, th) = (i64::from(text_width(&label, s)), Style::cap_h(s));
        // Right end above the line by preference, else wherever the label
        // covers the least data: left, or below the line.
        let (above, below) = (py - gap - th, py + gap + 1);
        let (right, left) = (a.x1 - gap - tw, a.x0 + gap);
        let spots: Vec<(i64, i64)> = [(right, above), (left, above), (right, below), (left, below)]
            .into_iter()
            .filter(|(_, y)| *y >= a.y0 + gap && y + th < a.y1 - gap)
            .collect();
        let Some((x, y)) = spots
            .iter()
            .copied()
            .min_by_key(|(x, y)| busy(c, Rect::at(*x, *y, tw, th).grow(1)))
        else {
            continue;
        };
        c.text(x, y, &label, s, REFERENCE);
    }
}

/// The pixel position of a point, if it can be drawn.
fn point(l: &Layout, (x, y): (f64, f64)) -> Option<(f64, f64)> {
    let p = (l.px(x), l.py(y));
    (x.is_finite() && y.is_finite() && p.0.is_finite() && p.1.is_finite()).then_some(p)
}

fn lines(c: &mut Canvas, l: &Layout, chart: &Chart) {
    let st = l.style;
    let a = l.area;
    for (i, s) in chart.series.iter().enumerate() {
        let Series::Line { points, err, .. } = s else {
            continue;
        };
        let col = color(i);
        let px: Vec<Option<(f64, f64)>> = points.iter().map(|p| point(l, *p)).collect();

        // Error bars: a vertical stroke with a cap at each end.
        let cap = st.marker as f64 + 1.0;
        for (p, (lo, hi)) in px.iter().zip(err.iter().flatten()) {
            let (Some((x, _)), true) = (p, lo.is_finite() && hi.is_finite()) else {
                continue;
            };
            let (ylo, yhi) = (l.py(*lo), l.py(*hi));
            c.segment((*x, ylo), (*x, yhi), col, st.text);
            for y in [ylo, yhi] {
                c.segment((x - cap, y), (x + cap, y), col, st.text);
            }
        }

        // The polyline joins consecutive drawable points, skipping the others.
        let drawn: Vec<(f64, f64)> = px.iter().flatten().copied().collect();
        for w in drawn.windows(2) {
            c.segment(w[0], w[1], col, st.line);
        }

        c.set_clip(Some(a.grow(st.marker + 1)));
        let inside = a.grow(1);
        for (x, y) in &drawn {
            let (x, y) = (pix(*x, a.x0, a.x1), pix(*y, a.y0, a.y1));
            if inside.contains(x, y) {
                c.marker(
                    MARKERS[i % MARKERS.len()],
                    (x, y),
                    st.marker,
                    col,
                    BACKGROUND,
                );
            }
        }
        c.set_clip(Some(a));
    }
}

fn frame_and_ticks(c: &mut Canvas, l: &Layout) {
    let a = l.area;
    let st = l.style;
    let s = st.text;
    c.outline(a.grow(1), FRAME);

    for t in &l.y_ticks {
        let y = pix(l.py(t.at), a.y0, a.y1);
        c.fill(Rect::at(a.x0 - 1 - st.tick_len, y, st.tick_len, 1), FRAME);
        let w = i64::from(text_width(&t.label, s));
        let x = a.x0 - 1 - st.tick_len - st.gap - w;
        c.text(x, y - Style::cap_h(s) / 2, &t.label, s, TEXT);
    }

    let (labels, s) = x_labels(l);
    let positions: Vec<i64> = l
        .x_ticks
        .iter()
        .map(|t| pix(l.px(t.at), a.x0, a.x1))
        .collect();
    // Label every k-th tick so neighbouring labels keep a gap of two characters.
    let widest = labels.iter().map(|t| text_width(t, s)).max().unwrap_or(0);
    let spacing = positions
        .windows(2)
        .map(|w| w[1] - w[0])
        .min()
        .unwrap_or(i64::MAX)
        .max(1);
    let need = i64::from(widest + 2 * ADVANCE * s);
    let every = if matches!(l.x, XAxis::Categories(_)) || spacing >= need {
        1
    } else {
        ((need + spacing - 1) / spacing) as usize
    };
    for (k, (x, label)) in positions.iter().zip(&labels).enumerate() {
        c.fill(Rect::at(*x, a.y1 + 1, 1, st.tick_len), FRAME);
        if k % every == 0 {
            let w = i64::from(text_width(label, s));
            c.text(x - w / 2, a.y1 + 1 + st.tick_len + st.gap, label, s, TEXT);
        }
    }
}

/// X tick labels and their scale: category names shrink to the small font
/// and then get shortened if they do not fit their slots.
fn x_labels(l: &Layout) -> (Vec<String>, u32) {
    let s = l.style.text;
    let labels: Vec<String> = l.x_ticks.iter().map(|t: &Tick| t.label.clone()).collect();
    let XAxis::Categories(names) = &l.x else {
        return (labels, s);
    };
    let room = l.slot(names.len()) as i64 - l.style.gap;
    let fits = |s: u32| labels.iter().all(|t| i64::from(text_width(t, s)) <= room);
    let s = if fits(s) { s } else { 1 };
    let labels = labels.iter().map(|t| fit(t, room, s)).collect();
    (labels, s)
}

/// How many pixels of `r` already show data (anything but background and grid).
fn busy(c: &Canvas, r: Rect) -> usize {
    let (w, h) = (i64::from(c.width()), i64::from(c.height()));
    let mut n = 0;
    for y in r.y0.max(0)..r.y1.min(h) {
        for x in r.x0.max(0)..r.x1.min(w) {
            let p = c.pixel(x as u32, y as u32);
            n += usize::from(p != BACKGROUND && p != GRID);
        }
    }
    n
}

/// `text`, shortened with `..` if needed to fit `max_w` pixels at scale `s`.
fn fit(text: &str, max_w: i64, s: u32) -> String {
    if i64::from(text_width(text, s)) <= max_w {
        return text.to_string();
    }
    let per = i64::from(ADVANCE * s);
    let keep = (max_w / per - 2).max(0) as usize;
    let mut short: String = text.chars().take(keep).collect();
    short.push_str("..");
    short
}

fn legend(c: &mut Canvas, l: &Layout, chart: &Chart) {
    let entries: Vec<(usize, &Series)> = chart
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.name().is_empty())
        .collect();
    if entries.is_empty() {
        return;
    }
    let st = l.style;
    let (s, gap) = (st.text, st.gap);
    let row_h = Style::line_h(s) + gap;
    let swatch = 14 * i64::from(s);
    let names: Vec<String> = entries
        .iter()
        .map(|(_, e)| fit(e.name(), l.area.width() / 2, s))
        .collect();
    let name_w = names
        .iter()
        .map(|n| i64::from(text_width(n, s)))
        .max()
        .unwrap_or(0);
    let w = 2 * gap + swatch + 2 * gap + name_w + 2 * gap;
    let h = 2 * gap + entries.len() as i64 * row_h;

    let a = l.area;
    let inset = 2 * gap;
    let (left, right) = (a.x0 + inset, a.x1 - inset - w);
    let (top, bottom) = (a.y0 + inset, a.y1 - inset - h);
    let corners = [(right, top), (left, top), (right, bottom), (left, bottom)];
    let (x, y) = corners
        .iter()
        .copied()
        .min_by_key(|(x, y)| busy(c, Rect::at(*x, *y, w, h)))
        .unwrap_or(corners[0]);

    let bx = Rect::at(x, y, w, h);
    c.fill(bx, BACKGROUND);
    c.outline(bx, LEGEND_EDGE);
    for (k, ((i, series), name)) in entries.iter().zip(&names).enumerate() {
        let top = y + gap + k as i64 * row_h + gap / 2;
        let mid = top + Style::cap_h(s) / 2;
        let (x0, x1) = (x + 2 * gap, x + 2 * gap + swatch);
        let col = color(*i);
        match series {
            Series::Line { .. } => {
                c.line((x0, mid), (x1, mid), col, st.line);
                let m = MARKERS[i % MARKERS.len()];
                c.marker(m, ((x0 + x1) / 2, mid), st.marker, col, BACKGROUND);
            }
            Series::Bars { .. } => {
                let side = Style::cap_h(s);
                c.fill(Rect::at(x0 + (swatch - side) / 2, top, side, side), col);
            }
        }
        c.text(x1 + 2 * gap, top, name, s, TEXT);
    }
}

fn titles(c: &mut Canvas, l: &Layout, chart: &Chart) {
    let st = l.style;
    let a = l.area;
    let (w, h) = (i64::from(chart.width), i64::from(chart.height));
    let centre = (a.x0 + a.x1) / 2;

    if !chart.title.is_empty() {
        let room = w - 2 * st.pad;
        let s = if i64::from(text_width(&chart.title, st.title)) <= room {
            st.title
        } else {
            st.text
        };
        let title = fit(&chart.title, room, s);
        let tw = i64::from(text_width(&title, s));
        let x = (centre - tw / 2).clamp(st.pad, (w - st.pad - tw).max(st.pad));
        c.text(x, st.pad, &title, s, TEXT);
    }

    let s = st.text;
    if !chart.x_label.is_empty() {
        let label = fit(&chart.x_label, w - 2 * st.pad, s);
        let tw = i64::from(text_width(&label, s));
        let x = (centre - tw / 2).clamp(st.pad, (w - st.pad - tw).max(st.pad));
        c.text(x, h - st.pad - Style::line_h(s), &label, s, TEXT);
    }
    if !chart.y_label.is_empty() {
        let label = fit(&chart.y_label, a.height(), s);
        let tw = i64::from(text_width(&label, s));
        let mid = (a.y0 + a.y1) / 2;
        c.text_up(st.pad, mid + tw / 2, &label, s, TEXT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_shortens_only_when_needed() {
        assert_eq!(fit("abc", 100, 1), "abc");
        let short = fit("a long category name", 60, 1);
        assert_eq!(short, "a long c..");
        assert!(text_width(&short, 1) <= 60);
        assert_eq!(fit("abc", 0, 2), "..");
    }

    #[test]
    fn legend_avoids_the_data() {
        // Data fills the top-right corner, where the legend would go first.
        let chart = Chart::new("", "", "").series(Series::Line {
            name: "rising".into(),
            points: (0..=20).map(|i| (f64::from(i), f64::from(i * i))).collect(),
            err: None,
        });
        let c = render(&chart);
        let l = Layout::new(&chart);
        let a = l.area;
        let quarter = |x0, y0| Rect::at(x0, y0, a.width() / 2, a.height() / 2);
        let edge = |r: Rect| {
            (r.y0..r.y1)
                .flat_map(|y| (r.x0..r.x1).map(move |x| (x, y)))
                .filter(|(x, y)| c.pixel(*x as u32, *y as u32) == LEGEND_EDGE)
                .count()
        };
        assert_eq!(edge(quarter(a.x0 + a.width() / 2, a.y0)), 0);
        assert!(edge(quarter(a.x0, a.y0)) > 0);
    }
}
