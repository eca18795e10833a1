//! Reading, every tick, what each cell achieved and how loaded the machine
//! is; `crate::series` keeps the series and reads windows of them. Once a
//! second each cell's [`Tracker`](allot_plan::tracking::Tracker) evaluates
//! the last second (Tessellation's adaptive loop): its hint is what the
//! `goals` policy plans with.
//!
//! Per cell: the CPUs it held, its CPU time (from the backend, already
//! read for demand), its report pages' counters (memory reads), and, for a
//! cell with a goal, every [`RUN_DELAY_EVERY`] the time its members'
//! threads waited for a CPU (`/proc`, bounded per cell) and, where the
//! machine has hardware counters, the cycles and instructions they
//! retired (a counter group per thread, at most [`COUNTED_THREADS`] per
//! cell and `COUNTED_GROUPS` in all, so the descriptors the broker keeps
//! are bounded whatever the cells do). Per machine: `/proc/stat` and
//! `/proc/pressure/cpu`, and the CPU time all cells used.

use super::{Cell, Engine};
use crate::series::{RATE_SPAN, Sample};
use allot_plan::GlobalPolicy;
use allot_plan::tracking::{Observation, PerfHint};
use std::time::{Duration, Instant};

/// Run delay is read this often, and only for cells with a goal (it
/// costs a file per thread).
pub const RUN_DELAY_EVERY: Duration = Duration::from_millis(500);

/// Threads read per member process, and member processes read per cell.
pub const RUN_DELAY_THREADS: usize = 64;
const RUN_DELAY_MEMBERS: usize = 16;

/// Threads of one cell with a counter group: instructions per cycle over
/// a sample of a cell's threads is what is wanted, not every cycle.
pub const COUNTED_THREADS: usize = 16;

impl Engine {
    /// Adds this tick's sample to cell `id`'s series: `usage` is its CPU
    /// time so far (`None`: not measurable), `held` the CPUs it held (for
    /// a cell on the stacked pool, its share of it).
    pub(super) fn observe(&mut self, id: u64, now: Instant, usage: Option<u64>, held: f64) {
        let Some(c) = self.cells.get_mut(&id) else {
            return;
        };
        let read_delay = c.spec.goal.is_some()
            && c.perf
                .last_run_delay()
                .is_none_or(|t| now.duration_since(t) >= RUN_DELAY_EVERY);
        let mut reports = allot_proto::Reports::default();
        let mut pages = c.pages.len() as u64;
        for p in &c.pages {
            if let Some(r) = p.reports() {
                reports = reports.plus(&r.snapshot());
            }
            pages = pages
                .rotate_left(17)
                .wrapping_add(p.page() as *const allot_proto::GrantPage as u64);
        }
        let run_delay_ns = if read_delay {
            c.members()
                .iter()
                .take(RUN_DELAY_MEMBERS)
                .filter_map(|m| self.os.run_delay_ns(m.pid, RUN_DELAY_THREADS))
                .reduce(u64::saturating_add)
        } else {
            None
        };
        // Counted with run delay, on the members' threads.
        let hw = if read_delay && self.measure.counting() {
            let tids: Vec<u32> = c
                .members()
                .iter()
                .take(RUN_DELAY_MEMBERS)
                .flat_map(|m| self.os.threads(m.pid).unwrap_or_default())
                .take(COUNTED_THREADS)
                .collect();
            Some(self.measure.count(&mut c.hw, &tids, COUNTED_THREADS))
        } else {
            if !c.spec.goal.is_some() && c.hw.open() > 0 {
                // The goal was dropped: so are its counters.
                c.hw = Default::default();
            }
            None
        };
        // The cells' CPU time, counted by increments so that cells coming
        // and going do not make the sum jump.
        self.measure
            .cell_used(c.perf.last().and_then(|s| s.usage_ns), usage);
        c.perf.record(Sample {
            at: now,
            cpus: held,
            usage_ns: usage,
            run_delay_ns,
            hw,
            reports: reports.into(),
            pages,
        });
    }

    /// Once a second, lets every cell's tracker evaluate the last second
    /// (and the latency span); returns whether a hint the goals policy
    /// plans with changed (the caller re-plans).
    pub(super) fn evaluate(&mut self, now: Instant) -> bool {
        if !self.measure.evaluation_due(now) {
            return false;
        }
        let capacity = self.planner.capacity();
        let goals = self.planner.config().policy == GlobalPolicy::Goals;
        let available = available_share(
            self.measure
                .load()
                .over(RATE_SPAN)
                .and_then(|w| w.unmanaged),
            (capacity + self.planner.config().reserve) as usize,
        );
        let mut changed = false;
        for c in self.cells.values_mut() {
            if c.spec.time.is_time() {
                continue;
            }
            let Some(w) = c.perf.over(RATE_SPAN) else {
                continue;
            };
            let lat = c.perf.latency_stretch(RATE_SPAN).unwrap_or(w);
            let before = c.tracker.hint();
            let after = c.tracker.observe(
                Observation {
                    cpus: w.cpus * available,
                    rate: w.rate_per_s,
                    p99_us: lat.p99_us,
                    latencies: lat.latencies,
                    cpu_used: w.cpu_used,
                    waiting: w.waiting,
                },
                c.spec.max_within(capacity),
            );
            changed |= goals && after != before;
        }
        changed
    }

    /// What the planner should know of cell `c`'s performance: its
    /// tracker's hint under the goals policy, nothing under the others (a
    /// probe must not move a cell that a fair division placed).
    pub(super) fn hint_of(&self, c: &Cell) -> PerfHint {
        if self.planner.config().policy == GlobalPolicy::Goals {
            c.tracker.hint()
        } else {
            PerfHint::default()
        }
    }

    /// CPUs' worth used outside every cell over the last second, rounded
    /// down (the goals policy does not count on them).
    pub(super) fn unmanaged_cpus(&self) -> u32 {
        self.measure
            .load()
            .over(RATE_SPAN)
            .and_then(|w| w.unmanaged)
            .map_or(0, |u| u.floor() as u32)
    }

    /// Adds this tick's sample to the machine's series (after every
    /// cell's [`Engine::observe`]); returns the machine's busy time per
    /// CPU (kept out of the series: only the outside reading, which
    /// keeps its own last one, needs it).
    pub(super) fn observe_machine(&mut self, now: Instant) -> Option<Vec<u64>> {
        let open = self.cells.values().map(|c| c.hw.open()).sum();
        let mut system = self.os.system_cpu()?;
        let per_cpu = std::mem::take(&mut system.per_cpu_busy_ns);
        self.measure.record_machine(now, system, open);
        Some(per_cpu)
    }
}

/// The share of a cell's CPUs left to it while processes outside every
/// cell use `unmanaged` CPUs' worth of a machine of `cpus` CPUs. They are
/// not confined (unless the operator reserves CPUs for them), so the
/// kernel spreads them over every CPU, the cells' too: a server holding
/// one CPU of two beside one unmanaged hog gets about half of it. Its
/// tracker must see the half, or a queue that grows because the CPU is
/// shared reads as a slow server (and its goal as one no allocation
/// meets). At least a tenth is assumed left.
fn available_share(unmanaged: Option<f64>, cpus: usize) -> f64 {
    let lost = unmanaged.unwrap_or(0.0).max(0.0) / cpus.max(1) as f64;
    (1.0 - lost).clamp(0.1, 1.0)
}

#[cfg(test)]
mod available_tests {
    use super::available_share;

    #[test]
    fn unmanaged_work_takes_its_share_of_every_cpu() {
        assert_eq!(available_share(None, 2), 1.0);
        assert_eq!(available_share(Some(0.0), 2), 1.0);
        assert!((available_share(Some(1.0), 2) - 0.5).abs() < 1e-9);
        assert!((available_share(Some(0.5), 4) - 0.875).abs() < 1e-9);
        // Never less than a tenth, even when the readings overshoot.
        assert_eq!(available_share(Some(9.0), 2), 0.1);
        assert_eq!(available_share(Some(-0.2), 2), 1.0);
    }
}
