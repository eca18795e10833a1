//! The machine-wide measurement state (`core/measure.rs` is the engine's
//! side: what is read each tick, and when the trackers evaluate).

use crate::series::{Load, LoadSample};
use allot_enforce::counters::{Count, Events, PerfCounters, ThreadCounts};
use allot_enforce::os::SystemCpu;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the trackers evaluate (their window is a second long).
pub(in crate::core) const EVALUATE_EVERY: Duration = Duration::from_secs(1);

/// Counter groups open in all (two descriptors each).
pub(in crate::core) const COUNTED_GROUPS: usize = 512;

/// The machine-wide measurement state the core keeps between ticks; the
/// per-cell series live in each cell (`Cell::perf`, `tracker`, `hw`).
///
/// Invariants: `cells_used_ns` only grows, by the increments of cells
/// measured at two consecutive ticks, so cells coming and going never make
/// it jump; a tick at which some cell could not be measured records the
/// machine's load without the cells' part (`cells_unmeasured`); the
/// groups counted in `pmu.open` never exceed [`COUNTED_GROUPS`].
#[derive(Debug)]
pub(crate) struct Measure {
    /// The machine's load, tick by tick.
    load: Load,
    /// CPU time the cells used, counted by increments.
    cells_used_ns: u64,
    /// Some cell's CPU time could not be read this tick.
    cells_unmeasured: bool,
    /// When the trackers last evaluated.
    last_evaluation: Option<Instant>,
    /// The hardware counters the goal cells are read with.
    pmu: Pmu,
}

impl Measure {
    /// Nothing measured yet; goal cells counted with `counters`.
    pub(in crate::core) fn new(counters: Arc<dyn PerfCounters>) -> Measure {
        Measure {
            load: Load::default(),
            cells_used_ns: 0,
            cells_unmeasured: false,
            last_evaluation: None,
            pmu: Pmu::new(counters),
        }
    }

    /// The machine's load, tick by tick.
    pub(crate) fn load(&self) -> &Load {
        &self.load
    }

    /// Reads hardware counters through `counters` from now on.
    pub(in crate::core) fn set_counters(&mut self, counters: Arc<dyn PerfCounters>) {
        self.pmu = Pmu::new(counters);
    }

    /// Why cycles and instructions are not counted (`None`: they are).
    pub(crate) fn counters_unavailable(&self) -> Option<&str> {
        self.pmu.unavailable.as_deref()
    }
}

/// The hardware counters, and whether this machine has them.
#[derive(Debug)]
struct Pmu {
    counters: Arc<dyn PerfCounters>,
    /// Why cycles and instructions are not counted (`None`: they are).
    unavailable: Option<String>,
    /// Groups open over all cells (recounted every tick).
    open: usize,
}

impl Pmu {
    /// Checks once whether `counters` count cycles and instructions.
    fn new(counters: Arc<dyn PerfCounters>) -> Pmu {
        let unavailable = counters.check(Events::CyclesInstructions).err();
        Pmu {
            counters,
            unavailable,
            open: 0,
        }
    }
}

impl Measure {
    /// Whether cycles and instructions are counted on this machine.
    pub(in crate::core) fn counting(&self) -> bool {
        self.pmu.unavailable.is_none()
    }

    /// Follows a goal cell's threads `tids` with its counter groups `hw`
    /// (at most `per_cell`, and [`COUNTED_GROUPS`] over all cells);
    /// returns what they counted.
    pub(in crate::core) fn count(
        &mut self,
        hw: &mut ThreadCounts,
        tids: &[u32],
        per_cell: usize,
    ) -> Count {
        let before = hw.open();
        let room = COUNTED_GROUPS.saturating_sub(self.pmu.open) + before;
        let total = hw.refresh(
            &*self.pmu.counters,
            Events::CyclesInstructions,
            tids,
            room.min(per_cell),
        );
        self.pmu.open = (self.pmu.open + hw.open()).saturating_sub(before);
        total
    }

    /// A cell's CPU time went from `before` to `now` (`None`: not read):
    /// its increment is counted, or the tick is marked unmeasured.
    pub(in crate::core) fn cell_used(&mut self, before: Option<u64>, now: Option<u64>) {
        match (before, now) {
            (Some(before), Some(now)) => {
                self.cells_used_ns = self
                    .cells_used_ns
                    .saturating_add(now.saturating_sub(before));
            }
            (_, None) => self.cells_unmeasured = true,
            (None, Some(_)) => {}
        }
    }

    /// Whether the trackers evaluate at `now` ([`EVALUATE_EVERY`] after
    /// the last time); if so, `now` is the last time.
    pub(in crate::core) fn evaluation_due(&mut self, now: Instant) -> bool {
        if self
            .last_evaluation
            .is_some_and(|t| now.duration_since(t) < EVALUATE_EVERY)
        {
            return false;
        }
        self.last_evaluation = Some(now);
        true
    }

    /// Records the machine's sample of this tick, after every cell's, with
    /// `open` counter groups over all cells now.
    pub(in crate::core) fn record_machine(&mut self, now: Instant, system: SystemCpu, open: usize) {
        self.pmu.open = open;
        let cells_ns = (!std::mem::take(&mut self.cells_unmeasured)).then_some(self.cells_used_ns);
        self.load.record(LoadSample {
            at: now,
            system,
            cells_ns,
        });
    }
}
