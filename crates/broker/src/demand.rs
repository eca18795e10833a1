//! Demand estimation: how many CPUs a cell can use now.
//!
//! Estimation is split from decision: this module only recommends a demand
//! from what it observes; the planner decides what to lend. Inputs per
//! monitor tick: CPU time the cell used, the size of its grant, and the
//! latest report from its runtime (if any). Output: `None` ("could use more
//! than it has: give it its entitlement and more if it can be lent") or
//! `Some(n)` CPUs.
//!
//! Rules, with the tunables named below:
//!
//! 1. A report with `wanted > 0` younger than [`REPORT_TTL`] wins: the
//!    runtime knows its queue.
//! 2. A cell younger than [`WARMUP_TICKS`] ticks, or whose usage cannot be
//!    measured, is `None`.
//! 3. Busy CPUs ≥ [`SATURATED`] × grant size → `None` (it uses everything it
//!    has and might use more). Growth is immediate.
//! 4. Otherwise the candidate is `ceil(busy / TARGET_UTIL)`, at least 1.
//!    A lower demand is adopted only after [`LOWER_AFTER`] consecutive ticks
//!    below the current one (hysteresis: no flapping between phases).

use std::time::{Duration, Instant};

/// Fraction of its grant a cell must keep busy to count as saturated.
pub const SATURATED: f64 = 0.85;
/// Utilisation a non-saturated cell is sized for.
pub const TARGET_UTIL: f64 = 0.75;
/// Consecutive low ticks before demand is lowered.
pub const LOWER_AFTER: u32 = 3;
/// Ticks after creation during which demand is `None`.
pub const WARMUP_TICKS: u32 = 3;
/// How long a runtime's report stays authoritative.
pub const REPORT_TTL: Duration = Duration::from_secs(1);

/// Per-cell estimator state.
#[derive(Debug, Clone, Default)]
pub struct Estimator {
    ticks: u32,
    last_usage: Option<(Instant, u64)>,
    low_ticks: u32,
    demand: Option<u32>,
    busy: f64,
    report: Option<(Instant, u32)>,
}

impl Estimator {
    /// A new cell's estimator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Restores a journaled demand (after a broker restart), skipping warm-up.
    pub fn restored(demand: Option<u32>) -> Self {
        Estimator {
            ticks: WARMUP_TICKS,
            demand,
            ..Self::default()
        }
    }

    /// Records a runtime report of `wanted` CPUs (0: none stated).
    pub fn report(&mut self, now: Instant, wanted: u32) {
        if wanted > 0 {
            self.report = Some((now, wanted));
        }
    }

    /// Adopts a runtime's stated demand at once, between ticks.
    pub fn set_reported(&mut self, wanted: u32) {
        self.demand = Some(wanted.max(1));
        self.low_ticks = 0;
    }

    /// Busy CPUs measured over the last tick.
    pub fn busy(&self) -> f64 {
        self.busy
    }

    /// The current estimate.
    pub fn demand(&self) -> Option<u32> {
        self.demand
    }

    /// Feeds one tick: cumulative CPU time `usage_ns` (if measurable) and
    /// the grant size. Returns the new estimate.
    pub fn tick(&mut self, now: Instant, usage_ns: Option<u64>, granted: u32) -> Option<u32> {
        self.ticks = self.ticks.saturating_add(1);
        if let Some(u) = usage_ns {
            if let Some((t0, u0)) = self.last_usage {
                let dt = now.saturating_duration_since(t0).as_nanos() as f64;
                if dt > 0.0 {
                    self.busy = u.saturating_sub(u0) as f64 / dt;
                }
            }
            self.last_usage = Some((now, u));
        }
        if let Some((at, wanted)) = self.report {
            if now.saturating_duration_since(at) < REPORT_TTL {
                self.demand = Some(wanted);
                self.low_ticks = 0;
                return self.demand;
            }
            self.report = None;
        }
        if self.ticks <= WARMUP_TICKS || usage_ns.is_none() {
            self.demand = None;
            return None;
        }
        let candidate = if self.busy >= SATURATED * granted.max(1) as f64 {
            None
        } else {
            Some(((self.busy / TARGET_UTIL).ceil() as u32).max(1))
        };
        let lower = match (candidate, self.demand) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(c), Some(d)) => c < d,
        };
        if lower {
            self.low_ticks += 1;
            if self.low_ticks >= LOWER_AFTER {
                self.demand = candidate;
                self.low_ticks = 0;
            }
        } else {
            self.low_ticks = 0;
            self.demand = candidate;
        }
        self.demand
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);

    /// Feeds `n` ticks at `busy` CPUs with grant `granted`.
    fn run(
        e: &mut Estimator,
        t: &mut Instant,
        usage: &mut u64,
        busy: f64,
        granted: u32,
        n: u32,
    ) -> Option<u32> {
        let mut d = e.demand();
        for _ in 0..n {
            *t += TICK;
            *usage += (busy * TICK.as_nanos() as f64) as u64;
            d = e.tick(*t, Some(*usage), granted);
        }
        d
    }

    #[test]
    fn saturated_cells_want_more_and_idle_ones_shrink_slowly() {
        let (mut e, mut t, mut u) = (Estimator::new(), Instant::now(), 0u64);
        assert_eq!(
            run(&mut e, &mut t, &mut u, 2.0, 2, 5),
            None,
            "busy on both CPUs: wants more"
        );
        // Drops to one busy CPU: not immediately…
        assert_eq!(run(&mut e, &mut t, &mut u, 0.5, 2, 2), None);
        // …but after LOWER_AFTER ticks.
        assert_eq!(run(&mut e, &mut t, &mut u, 0.5, 2, 1), Some(1));
        // Saturating the one CPU it kept: back to None at once.
        assert_eq!(run(&mut e, &mut t, &mut u, 1.0, 1, 1), None);
    }

    #[test]
    fn warmup_and_unmeasurable_usage_mean_unknown() {
        let mut e = Estimator::new();
        let t = Instant::now();
        assert_eq!(e.tick(t, Some(0), 2), None);
        assert_eq!(e.tick(t + TICK * 10, None, 2), None);
    }

    #[test]
    fn reports_override_measurement_until_they_expire() {
        let (mut e, mut t, mut u) = (Estimator::new(), Instant::now(), 0u64);
        run(&mut e, &mut t, &mut u, 2.0, 2, 5);
        e.report(t, 3);
        assert_eq!(run(&mut e, &mut t, &mut u, 2.0, 2, 1), Some(3));
        assert_eq!(
            run(&mut e, &mut t, &mut u, 2.0, 2, 12),
            None,
            "expired report: back to measurement"
        );
    }
}
