//! Axis ranges and "nice" tick values.
//!
//! Linear axes step by 1, 2, 2.5 or 5 × 10^k, chosen so that about
//! [`TARGET_TICKS`] intervals span the data. An automatic range is widened
//! outwards to whole steps, so the first and last ticks sit on the plot frame;
//! a fixed range keeps its ends and only gets the steps that fall inside it.
//! Logarithmic axes tick at powers of ten, adding 2 and 5 × 10^k when the range
//! spans only a decade or two.
//!
//! All functions here are pure and take finite inputs; the renderer filters
//! NaN and infinities out before it asks for a range.

/// Mantissas of the allowed linear steps (the last one rolls over to the next power).
const STEP_MANTISSAS: [f64; 5] = [1.0, 2.0, 2.5, 5.0, 10.0];

/// How many intervals an axis should have, roughly.
pub const TARGET_TICKS: usize = 5;

/// Slack, in steps, for treating a value as lying on a tick despite rounding.
const ON_TICK: f64 = 1e-9;

/// An axis: its drawn range and where its ticks are.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Value at the low end of the axis.
    pub lo: f64,
    /// Value at the high end of the axis.
    pub hi: f64,
    /// Tick positions in data units, ascending.
    pub ticks: Vec<f64>,
    /// Distance between linear ticks; 0 on a log axis.
    pub step: f64,
}

/// The smallest nice step (1, 2, 2.5, 5 × 10^k) that is at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    STEP_MANTISSAS
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw * (1.0 - 1e-12))
        .unwrap_or(10.0 * magnitude)
}

/// An axis covering `lo..=hi`, widened to whole nice steps.
pub fn nice_axis(lo: f64, hi: f64) -> Axis {
    let (lo, hi) = widen_if_flat(lo, hi, false);
    let step = nice_step((hi - lo) / TARGET_TICKS as f64);
    let first = (lo / step + ON_TICK).floor();
    let last = (hi / step - ON_TICK).ceil();
    let ticks = steps_between(first, last, step);
    Axis {
        lo: first * step,
        hi: last * step,
        ticks,
        step,
    }
}

/// An axis fixed at exactly `lo..=hi`, with the nice ticks that fall inside.
pub fn fixed_axis(lo: f64, hi: f64) -> Axis {
    let step = nice_step((hi - lo) / TARGET_TICKS as f64);
    let first = (lo / step - ON_TICK).ceil();
    let last = (hi / step + ON_TICK).floor();
    Axis {
        lo,
        hi,
        ticks: steps_between(first, last, step),
        step,
    }
}

/// A logarithmic axis covering `lo..=hi` (both positive), widened to whole decades.
pub fn log_axis(lo: f64, hi: f64) -> Axis {
    let (lo, hi) = if lo > 0.0 && hi >= lo {
        (lo, hi)
    } else {
        (1.0, 10.0)
    };
    let d0 = (lo.log10() + ON_TICK).floor() as i32;
    let mut d1 = (hi.log10() - ON_TICK).ceil() as i32;
    if d1 <= d0 {
        d1 = d0 + 1;
    }
    let decades = d1 - d0;
    let mantissas: &[f64] = if decades <= 2 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    // Label every decade up to eight of them, then every second, third…
    let every = (decades as usize).div_ceil(8).max(1);
    let mut ticks = Vec::new();
    for d in d0..=d1 {
        if !((d - d0) as usize).is_multiple_of(every) {
            continue;
        }
        for m in mantissas {
            if d < d1 || *m == 1.0 {
                ticks.push(m * 10f64.powi(d));
            }
        }
    }
    Axis {
        lo: 10f64.powi(d0),
        hi: 10f64.powi(d1),
        ticks,
        step: 0.0,
    }
}

/// The data range to show for values spanning `lo..=hi`.
///
/// A flat range (all values equal) is widened so it has some height;
/// `include_zero` (bar charts) stretches the range to reach 0.
pub fn data_range(lo: f64, hi: f64, include_zero: bool) -> (f64, f64) {
    let (lo, hi) = if include_zero {
        (lo.min(0.0), hi.max(0.0))
    } else {
        (lo, hi)
    };
    widen_if_flat(lo, hi, include_zero)
}

fn widen_if_flat(lo: f64, hi: f64, from_zero: bool) -> (f64, f64) {
    if hi > lo {
        return (lo, hi);
    }
    if lo == 0.0 {
        return if from_zero { (0.0, 1.0) } else { (-1.0, 1.0) };
    }
    let d = lo.abs() * 0.1;
    (lo - d, lo + d)
}

/// `first * step, (first + 1) * step, …, last * step`, computed from integers
/// so rounding does not accumulate.
fn steps_between(first: f64, last: f64, step: f64) -> Vec<f64> {
    if !(first.is_finite() && last.is_finite()) || last < first || last - first > 1000.0 {
        return Vec::new();
    }
    let n = (last - first) as usize;
    (0..=n).map(|i| (first + i as f64) * step).collect()
}

/// The label for a linear tick at `v` on an axis stepping by `step`.
///
/// Shows just enough decimals to tell neighbouring ticks apart; very large or
/// very small magnitudes use exponent notation (`2.5e-6`).
pub fn format_linear(v: f64, step: f64) -> String {
    // Rounding can leave -0.0 or 1e-17 where the zero tick is.
    let v = if v.abs() < step.abs() * 1e-6 { 0.0 } else { v };
    if v.abs() >= 1e7 || (step.abs() < 1e-4 && step != 0.0) {
        return if v == 0.0 {
            "0".to_string()
        } else {
            format_exponent(v)
        };
    }
    let mut decimals = 0;
    while decimals < 6 {
        let scaled = step * 10f64.powi(decimals);
        if (scaled - scaled.round()).abs() < 1e-6 * scaled.abs().max(1.0) {
            break;
        }
        decimals += 1;
    }
    format!("{:.*}", decimals as usize, v)
}

/// The label for a tick at `v` on a log axis: plain for 0.001..1e6, else `1e9`.
pub fn format_log(v: f64) -> String {
    if (1e-3..1e6).contains(&v) {
        let s = format!("{v:.3}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    } else {
        format_exponent(v)
    }
}

/// `v` in exponent notation with at most three significant digits.
fn format_exponent(v: f64) -> String {
    let s = format!("{v:.2e}");
    match s.split_once('e') {
        Some((m, e)) => {
            let m = if m.contains('.') {
                m.trim_end_matches('0').trim_end_matches('.')
            } else {
                m
            };
            format!("{m}e{e}")
        }
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn steps_are_nice() {
        assert_eq!(nice_step(0.74), 1.0);
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(1.1), 2.0);
        assert_eq!(nice_step(2.2), 2.5);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert!((nice_step(0.0031) - 0.005).abs() < 1e-15);
        assert_eq!(nice_step(120.0), 200.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
        assert_eq!(nice_step(0.0), 1.0);
    }

    #[test]
    fn zero_to_3_7_ticks_by_one_up_to_four() {
        let a = nice_axis(0.0, 3.7);
        assert!(close(&a.ticks, &[0.0, 1.0, 2.0, 3.0, 4.0]), "{a:?}");
        assert_eq!((a.lo, a.hi, a.step), (0.0, 4.0, 1.0));
    }

    #[test]
    fn auto_axis_widens_to_steps_and_ends_on_ticks() {
        let a = nice_axis(0.83, 1.57);
        assert_eq!(a.step, 0.2);
        assert!(close(&a.ticks, &[0.8, 1.0, 1.2, 1.4, 1.6]), "{a:?}");
        assert!((a.lo - 0.8).abs() < 1e-12 && (a.hi - 1.6).abs() < 1e-12);

        let a = nice_axis(-3.0, 12.0);
        assert_eq!(a.step, 5.0);
        assert!(close(&a.ticks, &[-5.0, 0.0, 5.0, 10.0, 15.0]), "{a:?}");

        // A value already on a tick does not add another step.
        let a = nice_axis(0.3, 0.7);
        assert!(
            (a.lo - 0.3).abs() < 1e-12 && (a.hi - 0.7).abs() < 1e-12,
            "{a:?}"
        );
    }

    #[test]
    fn quarter_steps_appear() {
        let a = nice_axis(0.0, 11.0);
        assert_eq!(a.step, 2.5);
        assert!(close(&a.ticks, &[0.0, 2.5, 5.0, 7.5, 10.0, 12.5]), "{a:?}");
        let labels: Vec<_> = a.ticks.iter().map(|v| format_linear(*v, a.step)).collect();
        assert_eq!(labels, ["0.0", "2.5", "5.0", "7.5", "10.0", "12.5"]);
    }

    #[test]
    fn fixed_axis_keeps_its_ends() {
        let a = fixed_axis(0.5, 1.75);
        assert_eq!((a.lo, a.hi), (0.5, 1.75));
        assert!((a.step - 0.25).abs() < 1e-15);
        assert!(close(&a.ticks, &[0.5, 0.75, 1.0, 1.25, 1.5, 1.75]), "{a:?}");
    }

    #[test]
    fn flat_and_zero_ranges_get_height() {
        let (lo, hi) = data_range(3.0, 3.0, false);
        assert!((lo - 2.7).abs() < 1e-12 && (hi - 3.3).abs() < 1e-12);
        assert_eq!(data_range(0.0, 0.0, false), (-1.0, 1.0));
        assert_eq!(data_range(0.0, 0.0, true), (0.0, 1.0));
        assert_eq!(data_range(2.0, 5.0, true), (0.0, 5.0));
        assert_eq!(data_range(-2.0, -1.0, true), (-2.0, 0.0));
        let a = nice_axis(5.0, 5.0);
        assert!(a.lo < 5.0 && a.hi > 5.0 && a.ticks.len() >= 2);
    }

    #[test]
    fn log_axis_ticks_decades() {
        let a = log_axis(3.0, 4500.0);
        assert_eq!((a.lo, a.hi), (1.0, 10000.0));
        assert!(
            close(&a.ticks, &[1.0, 10.0, 100.0, 1000.0, 10000.0]),
            "{a:?}"
        );
        let a = log_axis(2.0, 40.0);
        assert!(
            close(&a.ticks, &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]),
            "{a:?}"
        );
        let a = log_axis(1e-9, 1e9);
        assert!(a.ticks.len() <= 10, "{a:?}");
    }

    #[test]
    fn labels_are_short_and_exact() {
        assert_eq!(format_linear(0.30000000000000004, 0.1), "0.3");
        assert_eq!(format_linear(-1e-17, 0.1), "0.0");
        assert_eq!(format_linear(0.0, 1.0), "0");
        assert_eq!(format_linear(4.0, 1.0), "4");
        assert_eq!(format_linear(1500.0, 500.0), "1500");
        assert_eq!(format_linear(2.5e-6, 5e-7), "2.5e-6");
        assert_eq!(format_linear(2e7, 1e7), "2e7");
        assert_eq!(format_log(1000.0), "1000");
        assert_eq!(format_log(0.01), "0.01");
        assert_eq!(format_log(1e9), "1e9");
    }
}
