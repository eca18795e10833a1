//! The chart's frame: what the axes span and which data is visible.
//!
//! Pure functions of a [`Chart`]; the drawing (in `draw`) only maps what
//! they return to pixels. Invariants the drawing relies on:
//!
//! - both ranges are finite with `lo < hi` (on a log axis also `lo > 0`);
//! - every coordinate handed to the drawing lies inside the frame (segments
//!   are clipped, bars and error bars clamped, markers outside left out), so
//!   no value, however wild, reaches the pixel mapping;
//! - magnitudes beyond [`HUGE`] count as [`HUGE`], so spans never overflow.

use crate::{Chart, Series};

/// Largest magnitude used as is; bigger finite values are clamped to it.
pub const HUGE: f64 = 1e300;

/// Most category slots an axis shows (more would not be legible anyway).
pub const MAX_SLOTS: usize = 1000;

/// What the x axis shows.
#[derive(Debug, Clone, PartialEq)]
pub enum XKind {
    /// One slot per category: slot `i` is centred on `x = i`, labelled
    /// `labels[i]`.
    Categories(Vec<String>),
    /// A numeric axis.
    Linear,
    /// A base-10 logarithmic axis; `ticks` are where its labels go.
    Log(Vec<f64>),
}

/// The axes' kinds and spans.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub kind: XKind,
    pub x: (f64, f64),
    pub y: (f64, f64),
}

fn tame(v: f64) -> f64 {
    v.clamp(-HUGE, HUGE)
}

/// Finite `(x, y)` pairs of a line that can be placed on the axis.
pub fn visible_points(points: &[(f64, f64)], log_x: bool) -> Vec<(f64, f64)> {
    points
        .iter()
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_x || *x > 0.0))
        .map(|&(x, y)| (tame(x), tame(y)))
        .collect()
}

impl Frame {
    /// The frame that shows all of `chart`'s data.
    pub fn of(chart: &Chart) -> Frame {
        let has_bars = chart
            .series
            .iter()
            .any(|s| matches!(s, Series::Bars { .. }));
        let categorical = has_bars || chart.categories.is_some();
        let log_x = chart.log_x && !categorical;
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        let mut slots = chart.categories.as_ref().map_or(0, Vec::len);
        for s in &chart.series {
            match s {
                Series::Line { points, err, .. } => {
                    for (i, &(x, y)) in points.iter().enumerate() {
                        if !(x.is_finite() && y.is_finite()) || (log_x && x <= 0.0) {
                            continue;
                        }
                        xs.push(tame(x));
                        ys.push(tame(y));
                        if let Some(&(lo, hi)) = err.as_ref().and_then(|e| e.get(i)) {
                            ys.extend([lo, hi].into_iter().filter(|v| v.is_finite()).map(tame));
                        }
                    }
                }
                Series::Bars { values, .. } => {
                    slots = slots.max(values.len());
                    ys.extend(values.iter().filter(|v| v.is_finite()).map(|v| tame(*v)));
                }
            }
        }
        ys.extend(
            chart
                .hlines
                .iter()
                .map(|(y, _)| *y)
                .filter(|y| y.is_finite())
                .map(tame),
        );

        let (kind, x) = if categorical {
            // Line points on a categorical axis are slot indices; they add
            // slots only when no names or bars say how many there are.
            let top = xs.iter().copied().fold(-1.0_f64, f64::max);
            let from_lines = if slots == 0 && top >= 0.0 {
                (top.min(MAX_SLOTS as f64 - 1.0).floor() as usize) + 1
            } else {
                0
            };
            let n = slots.max(from_lines).clamp(1, MAX_SLOTS);
            let names = chart.categories.clone().unwrap_or_default();
            let labels = (0..n)
                .map(|i| names.get(i).cloned().unwrap_or_else(|| i.to_string()))
                .collect();
            (XKind::Categories(labels), (-0.5, n as f64 - 0.5))
        } else if log_x {
            let (lo, hi) = span(&xs).unwrap_or((1.0, 10.0));
            let (lo, hi) = if lo == hi {
                (lo / 2.0, hi * 2.0)
            } else {
                (lo / 1.15, hi * 1.15)
            };
            (XKind::Log(log_ticks(lo, hi)), (lo, hi))
        } else {
            let (lo, hi) = span(&xs).unwrap_or((0.0, 1.0));
            (XKind::Linear, pad(lo, hi, 0.03))
        };

        let y = match chart.y_range {
            Some((lo, hi)) if tame(lo) < tame(hi) => (tame(lo), tame(hi)),
            Some((lo, hi)) => pad(tame(lo), tame(hi), 0.0),
            None => {
                if has_bars {
                    ys.push(0.0);
                }
                let (lo, hi) = span(&ys).unwrap_or((0.0, 1.0));
                let (plo, phi) = pad(lo, hi, 0.05);
                // Bars grow from 0: keep 0 on the edge rather than below it.
                let plo = if has_bars && lo >= 0.0 { 0.0 } else { plo };
                (plo, phi)
            }
        };
        Frame { kind, x, y }
    }

    /// Whether the x axis is logarithmic.
    pub fn log_x(&self) -> bool {
        matches!(self.kind, XKind::Log(_))
    }

    /// Clamps `y` into the frame.
    pub fn clamp_y(&self, y: f64) -> f64 {
        y.clamp(self.y.0, self.y.1)
    }

    /// Whether `(x, y)` lies inside the frame.
    pub fn contains(&self, (x, y): (f64, f64)) -> bool {
        x >= self.x.0 && x <= self.x.1 && y >= self.y.0 && y <= self.y.1
    }

    /// The part of segment `a`–`b` inside the frame, or `None`. On a log
    /// axis the segment is straight in log space, as it is drawn.
    pub fn clip(&self, a: (f64, f64), b: (f64, f64)) -> Option<((f64, f64), (f64, f64))> {
        type Map = fn(f64) -> f64;
        let (to, from): (Map, Map) = if self.log_x() {
            (f64::log10, |v| 10f64.powf(v))
        } else {
            (|v| v, |v| v)
        };
        let rect = (to(self.x.0), to(self.x.1), self.y.0, self.y.1);
        let (p, q) = clip_segment((to(a.0), a.1), (to(b.0), b.1), rect)?;
        Some(((from(p.0), p.1), (from(q.0), q.1)))
    }
}

/// Smallest and largest of `vs`, or `None` when empty.
fn span(vs: &[f64]) -> Option<(f64, f64)> {
    let lo = vs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo <= hi).then_some((lo, hi))
}

/// Widens `lo..hi` by `frac` of its span on each side; an empty span is
/// widened around its value.
fn pad(lo: f64, hi: f64, frac: f64) -> (f64, f64) {
    if lo == hi {
        let d = (lo.abs() * 0.1).max(1.0);
        return (lo - d, hi + d);
    }
    // Halves first: hi - lo can overflow even when both are tame.
    let d = (hi / 2.0 - lo / 2.0) * 2.0 * frac;
    (lo - d, hi + d)
}

/// Label positions for a log axis over `lo..hi`: powers of ten, with the
/// 2× and 5× steps between them when the axis spans under three decades.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let steps: &[f64] = if b - a < 3 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    (a..=b)
        .flat_map(|e| steps.iter().map(move |m| m * 10f64.powi(e)))
        .filter(|v| *v >= lo && *v <= hi)
        .collect()
}

/// Liang–Barsky: the part of `a`–`b` inside `(x0, x1, y0, y1)`.
pub fn clip_segment(
    a: (f64, f64),
    b: (f64, f64),
    (x0, x1, y0, y1): (f64, f64, f64, f64),
) -> Option<((f64, f64), (f64, f64))> {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    // Each end: its parameter on the segment, and the edge that set it (the
    // coordinate is then put exactly on that edge: with huge ends, a + t·d
    // cancels catastrophically).
    let mut start = (0.0_f64, None);
    let mut end = (1.0_f64, None);
    for (p, q, edge) in [
        (-dx, a.0 - x0, Edge::X(x0)),
        (dx, x1 - a.0, Edge::X(x1)),
        (-dy, a.1 - y0, Edge::Y(y0)),
        (dy, y1 - a.1, Edge::Y(y1)),
    ] {
        if p == 0.0 {
            if q < 0.0 {
                return None;
            }
        } else {
            let r = q / p;
            if p < 0.0 && r > start.0 {
                start = (r, Some(edge));
            } else if p > 0.0 && r < end.0 {
                end = (r, Some(edge));
            }
        }
    }
    if start.0 > end.0 || !start.0.is_finite() || !end.0.is_finite() {
        return None;
    }
    let at = |(t, edge): (f64, Option<Edge>)| match edge {
        None if t == 0.0 => a,
        None => b,
        Some(Edge::X(x)) => (x, a.1 + t * dy),
        Some(Edge::Y(y)) => (a.0 + t * dx, y),
    };
    Some((at(start), at(end)))
}

#[derive(Clone, Copy)]
enum Edge {
    X(f64),
    Y(f64),
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIT: (f64, f64, f64, f64) = (0.0, 1.0, 0.0, 1.0);

    #[test]
    fn clip_keeps_inside_cuts_crossing_drops_outside() {
        let inside = ((0.2, 0.2), (0.8, 0.5));
        assert_eq!(clip_segment(inside.0, inside.1, UNIT), Some(inside));
        assert_eq!(
            clip_segment((-1.0, 0.5), (2.0, 0.5), UNIT),
            Some(((0.0, 0.5), (1.0, 0.5)))
        );
        assert_eq!(clip_segment((2.0, 2.0), (3.0, 3.0), UNIT), None);
        assert_eq!(clip_segment((-1.0, 2.0), (2.0, 2.0), UNIT), None);
        // Huge but finite ends still clip to a short visible piece.
        let (p, q) = clip_segment((0.5, -HUGE), (0.5, HUGE), UNIT).unwrap();
        assert_eq!((p, q), ((0.5, 0.0), (0.5, 1.0)));
    }

    #[test]
    fn log_ticks_are_inside_and_dense_only_on_short_axes() {
        assert_eq!(
            log_ticks(1.0, 100.0),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(log_ticks(50.0, 2e5), vec![100.0, 1e3, 1e4, 1e5]);
        assert!(log_ticks(3.0, 4.0).is_empty());
    }

    #[test]
    fn frame_covers_data_hlines_and_error_bars() {
        let chart = Chart::new("", "", "")
            .hline(10.0, "ref")
            .series(Series::Line {
                name: "a".into(),
                points: vec![(1.0, 2.0), (3.0, 4.0), (f64::NAN, 100.0)],
                err: Some(vec![(-5.0, 2.5)]),
            });
        let f = Frame::of(&chart);
        assert_eq!(f.kind, XKind::Linear);
        assert!(f.x.0 < 1.0 && f.x.1 > 3.0 && f.x.1 < 4.0);
        assert!(f.y.0 < -5.0 && f.y.1 > 10.0 && f.y.1 < 100.0);
    }

    #[test]
    fn bars_make_categories_and_start_at_zero() {
        let chart = Chart::new("", "", "")
            .categories(vec!["a".into()])
            .series(Series::Bars {
                name: "b".into(),
                values: vec![3.0, 5.0, f64::INFINITY],
            });
        let f = Frame::of(&chart);
        assert_eq!(
            f.kind,
            XKind::Categories(vec!["a".into(), "1".into(), "2".into()])
        );
        assert_eq!(f.x, (-0.5, 2.5));
        assert_eq!(f.y.0, 0.0);
        assert!(f.y.1 > 5.0);
    }

    #[test]
    fn degenerate_and_wild_data_give_a_usable_frame() {
        let cases = [
            Chart::new("", "", ""),
            Chart::new("", "", "").log_x(),
            Chart::new("", "", "").series(Series::Line {
                name: String::new(),
                points: vec![(1.0, 1.0)],
                err: None,
            }),
            Chart::new("", "", "").log_x().series(Series::Line {
                name: String::new(),
                points: vec![(-1.0, 1.0), (0.0, 1e308), (5.0, -1e308)],
                err: None,
            }),
            Chart::new("", "", "").series(Series::Line {
                name: String::new(),
                points: vec![(-f64::MAX, -f64::MAX), (f64::MAX, f64::MAX)],
                err: None,
            }),
        ];
        for chart in &cases {
            let f = Frame::of(chart);
            for (lo, hi) in [f.x, f.y] {
                assert!(lo.is_finite() && hi.is_finite() && lo < hi, "{f:?}");
            }
            if f.log_x() {
                assert!(f.x.0 > 0.0);
            }
        }
    }
}
