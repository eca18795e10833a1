//! Fitting a cell's performance against the CPUs it held: pure numerics
//! for [`super::Tracker`].
//!
//! - **Rate** follows Amdahl's law, `rate(n) = r1 / ((1 − p) + p/n)`: `p`
//!   the parallel fraction, `r1` the rate on one CPU. [`fit_curve`] finds
//!   the `p` on a grid that minimises the weighted squared error (with
//!   `r1` in closed form for each `p`), plus a small pull towards a prior
//!   so that observations at a single allocation, which cannot tell `p`
//!   apart, give the prior rather than an arbitrary `p`.
//! - **Latency** of a request server follows a queue: at utilisation `u`
//!   (CPU time used over CPUs held) the 99th percentile grows like
//!   `k / (1 − u)`, where `k` is the percentile of an idle server.
//!   [`latency_k`] reads `k` from each observation and keeps the median;
//!   [`cpus_for_latency`] finds the smallest `n` whose predicted
//!   percentile meets a bound, given the load (CPUs' worth of work).

use super::Curve;

/// The parallel fraction assumed when observations cannot tell.
pub const PRIOR_P: f64 = 0.9;

/// Weight of the prior against the data (relative squared error).
const PRIOR_PULL: f64 = 1e-6;

/// Grid steps over `p` in [0, 1].
const GRID: u32 = 200;

/// Golden-section steps refining `p` between grid points (each narrows
/// the interval to 0.618 of itself: 30 take 0.01 to under 1e-8).
const REFINE: u32 = 30;

/// The highest utilisation the latency model is read at: above it, the
/// server is saturated and the model's `1/(1 − u)` says nothing useful.
pub const MAX_UTIL: f64 = 0.95;

/// The curve that best explains `(cpus, rate, weight)` observations;
/// `None` without a positive rate.
///
/// `p` is searched on a grid, then refined between the grid points
/// beside the best one (golden section: the error is smooth in `p`).
/// The refinement matters near `p = 1`, where a grid step changes the
/// speed-up on many CPUs by a quarter: a grid alone would flip between
/// two neighbours as weights shift, with `r1` swinging to compensate.
pub fn fit_curve(obs: &[(f64, f64, f64)]) -> Option<Curve> {
    let obs: Vec<&(f64, f64, f64)> = obs
        .iter()
        .filter(|(n, r, w)| *n > 0.0 && r.is_finite() && *r >= 0.0 && *w > 0.0)
        .collect();
    let scale: f64 = obs.iter().map(|(_, r, w)| w * r * r).sum();
    if obs.is_empty() || scale <= 0.0 {
        return None;
    }
    // The best r1 for `p` (closed form) and the error it leaves.
    let at = |p: f64| -> (f64, Curve) {
        let speedup = |n: f64| 1.0 / ((1.0 - p) + p / n);
        let (num, den) = obs.iter().fold((0.0, 0.0), |(a, b), (n, r, w)| {
            let s = speedup(*n);
            (a + w * r * s, b + w * s * s)
        });
        let r1 = num / den;
        let err: f64 = obs
            .iter()
            .map(|(n, r, w)| w * (r - r1 * speedup(*n)).powi(2))
            .sum::<f64>()
            / scale
            + PRIOR_PULL * (p - PRIOR_P).powi(2);
        (err, Curve { p, r1 })
    };
    let step = 1.0 / f64::from(GRID);
    let mut best = at(0.0);
    for i in 1..=GRID {
        let c = at(f64::from(i) * step);
        if c.0 < best.0 {
            best = c;
        }
    }
    // Golden section over the two grid steps around the best point.
    let (mut lo, mut hi) = ((best.1.p - step).max(0.0), (best.1.p + step).min(1.0));
    const INV_PHI: f64 = 0.618_033_988_749_894_9;
    let (mut a, mut b) = (hi - INV_PHI * (hi - lo), lo + INV_PHI * (hi - lo));
    let (mut fa, mut fb) = (at(a), at(b));
    for _ in 0..REFINE {
        if fa.0 < fb.0 {
            (hi, b, fb) = (b, a, fa);
            a = hi - INV_PHI * (hi - lo);
            fa = at(a);
        } else {
            (lo, a, fa) = (a, b, fb);
            b = lo + INV_PHI * (hi - lo);
            fb = at(b);
        }
    }
    for c in [fa, fb] {
        if c.0 < best.0 {
            best = c;
        }
    }
    Some(best.1)
}

/// The idle-server percentile `k` (µs) read from one observation: its
/// p99 at utilisation `used / held`.
pub fn latency_k(p99_us: f64, used: f64, held: f64) -> Option<f64> {
    if !(held > 0.0 && used >= 0.0 && p99_us > 0.0) {
        return None;
    }
    let u = (used / held).min(MAX_UTIL);
    Some(p99_us * (1.0 - u))
}

/// The smallest whole number of CPUs, at least 1 and at most `max`, at
/// which a server with idle percentile `k` and `load` CPUs' worth of work
/// keeps its p99 at or under `bound` (all µs); `None` when no allocation
/// up to `max` does (`k` alone exceeds the bound, or the load needs more).
pub fn cpus_for_latency(k: f64, load: f64, bound: f64, max: u32) -> Option<u32> {
    if k >= bound || max == 0 {
        return None;
    }
    // k / (1 − load/n) ≤ bound  ⇔  n ≥ load / (1 − k/bound); and the
    // server must not run above MAX_UTIL.
    let need = (load / (1.0 - k / bound)).max(load / MAX_UTIL);
    let n = (need - 1e-9).ceil().max(1.0);
    (n <= f64::from(max)).then_some(n as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amdahl(p: f64, r1: f64, n: f64) -> f64 {
        r1 / ((1.0 - p) + p / n)
    }

    #[test]
    fn a_curve_is_recovered_from_two_allocations() {
        for p in [0.0, 0.5, 0.8, 0.95, 1.0] {
            let obs: Vec<(f64, f64, f64)> = [1.0, 2.0, 4.0, 4.0]
                .iter()
                .map(|&n| (n, amdahl(p, 100.0, n), 1.0))
                .collect();
            let c = fit_curve(&obs).unwrap();
            assert!((c.p - p).abs() <= 0.006, "p {p}: {c:?}");
            assert!((c.r1 - 100.0).abs() < 1.5, "p {p}: {c:?}");
        }
    }

    #[test]
    fn a_curve_between_grid_points_is_found_and_stays_put_as_weights_shift() {
        // p = 0.9925 lies between the grid's 0.99 and 0.995, where a grid
        // step changes the speed-up on 75 CPUs by a quarter.
        let (p, r1) = (0.9925, 100.0);
        for w10 in [1.0, 5.0, 20.0] {
            let obs: Vec<(f64, f64, f64)> = [(1.0, 3.0), (2.0, 1.0), (10.0, w10), (75.0, 2.0)]
                .iter()
                .map(|&(n, w)| (n, amdahl(p, r1, n), w))
                .collect();
            let c = fit_curve(&obs).unwrap();
            assert!((c.p - p).abs() < 1e-4, "weight {w10} at 10 CPUs: {c:?}");
            assert!((c.r1 - r1).abs() < 0.5, "weight {w10} at 10 CPUs: {c:?}");
        }
    }

    #[test]
    fn one_allocation_gives_the_prior_and_the_observed_rate() {
        let c = fit_curve(&[(4.0, 300.0, 1.0), (4.0, 310.0, 1.0)]).unwrap();
        assert!((c.p - PRIOR_P).abs() < 1e-9, "{c:?}");
        assert!((c.rate(4.0) - 305.0).abs() < 1.0, "{c:?}");
        assert_eq!(fit_curve(&[]), None);
        assert_eq!(fit_curve(&[(2.0, 0.0, 1.0)]), None, "no work seen");
    }

    #[test]
    fn the_latency_model_sizes_a_server() {
        // An idle server answers in 1 ms at p99; 1.5 CPUs of work.
        let k = latency_k(4_000.0, 1.5, 2.0).unwrap(); // u = 0.75 → 4 ms
        assert!((k - 1_000.0).abs() < 1e-9);
        // A 2 ms bound: n ≥ 1.5 / (1 − 0.5) = 3.
        assert_eq!(cpus_for_latency(k, 1.5, 2_000.0, 16), Some(3));
        // A 5 ms bound: n ≥ 1.5 / 0.8 = 1.875 → 2.
        assert_eq!(cpus_for_latency(k, 1.5, 5_000.0, 16), Some(2));
        // Under the idle percentile: never; beyond the maximum: never.
        assert_eq!(cpus_for_latency(k, 1.5, 900.0, 16), None);
        assert_eq!(cpus_for_latency(k, 1.5, 2_000.0, 2), None);
        // A nearly idle server still needs one CPU.
        assert_eq!(cpus_for_latency(k, 0.01, 2_000.0, 16), Some(1));
        // Saturated readings are read at MAX_UTIL.
        assert!((latency_k(10_000.0, 2.0, 2.0).unwrap() - 500.0).abs() < 1e-6);
    }
}
