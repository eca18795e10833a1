//! Time cells in the state machine: what the kernel enforces for them
//! (the largest weight, and either windows or a CFS bandwidth cap), and
//! keeping the window driver (`crate::windows`) in step with each cell's
//! contract. See docs/architecture.md, "Time contracts".

use super::Core;
use crate::{debug, warn};
use allot_enforce::Applied;
use allot_plan::{CellSpec, TimeContract};
use allot_proto::Window;
use allot_proto::window::monotonic_ns;

impl Core {
    /// What the kernel should enforce for cell `id` on `cpus`: its weight,
    /// or for a time cell the largest weight and either its windows (a
    /// time-triggered cell whose gate the window driver holds: the freezer
    /// caps it) or the CPU-time cap that keeps it to its contract
    /// ([`allot_plan::time::bandwidth`]).
    pub(super) fn applied(&self, id: u64, cpus: allot_topo::CpuSet) -> Applied {
        let spec = &self.cells[&id].spec;
        if self.windows.holds(id) {
            return Applied {
                cpus,
                weight: allot_plan::MAX_WEIGHT,
                bandwidth: None,
            };
        }
        match allot_plan::time::bandwidth(&spec.time, spec.time_cpus()) {
            Some((quota_us, period_us)) => Applied {
                cpus,
                weight: allot_plan::MAX_WEIGHT,
                bandwidth: Some(allot_enforce::Bandwidth {
                    quota_us,
                    period_us,
                }),
            },
            None => Applied {
                cpus,
                weight: spec.weight,
                bandwidth: None,
            },
        }
    }

    /// Starts or stops driving cell `id`'s windows so that they match
    /// `spec` (a time-triggered contract whose budget leaves part of the
    /// period, on a backend with a gate). Returns whether the cell's
    /// window changed (its page must show the new one).
    pub(super) fn sync_windows(&mut self, id: u64, spec: &CellSpec) -> bool {
        let want = match spec.time {
            TimeContract::Triggered {
                period_us,
                budget_us,
            } if budget_us < period_us => Some((period_us, budget_us)),
            _ => None,
        };
        let have = self.windows.window(id).map(|w| (w.period_us, w.budget_us));
        if want == have {
            return false;
        }
        let mut changed = self.windows.remove(id);
        if let Some((period_us, budget_us)) = want {
            match self.enforcer.gate(id) {
                Ok(Some(gate)) => {
                    let window = Window {
                        // The next whole microsecond: windows start now.
                        origin_ns: monotonic_ns().div_ceil(1000) * 1000,
                        period_us,
                        budget_us,
                    };
                    self.windows.add(id, window, spec.time_cpus(), gate);
                    changed = true;
                }
                Ok(None) => debug!(
                    "cell {id}: the {} backend has no freezer; its budget is enforced by CFS \
                     bandwidth alone (no common window for its threads)",
                    self.backend()
                ),
                Err(e) => warn!(
                    "cell {id}: {e}; its budget is enforced by CFS bandwidth alone (no common \
                     window for its threads)"
                ),
            }
        }
        changed
    }

    /// Publishes cell `id`'s current grant again under a new generation
    /// (something the page shows besides the plan's grant changed).
    pub(super) fn republish(&mut self, id: u64) {
        let Some(g) = self.cells.get(&id).and_then(|c| c.published.clone()) else {
            return;
        };
        let generation = self.cells[&id].generation + 1;
        let pg = self.page_grant(id, generation, &g);
        let c = self.cells.get_mut(&id).expect("present above");
        c.publish(&pg);
        c.generation = generation;
    }
}
