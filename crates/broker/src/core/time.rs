//! Time cells in the state machine: what the kernel enforces for them
//! (the largest weight, and either windows — a time-triggered cell's
//! budgets, a time-fraction cell's slices — or, on a backend without a
//! gate, a CFS bandwidth cap), and keeping the window driver
//! (`crate::windows`) in step with each cell's contract. See
//! docs/architecture.md, "Time contracts".

use super::Engine;
use crate::log::{debug, warn};
use allot_enforce::Applied;
use allot_proto::Window;
use allot_spec::CellSpec;

impl Engine {
    /// What the kernel should enforce for cell `id` on `cpus`: its weight
    /// (`outside`), or for a time cell the largest weight and either its
    /// windows (a time-triggered cell whose gate the window driver holds:
    /// the freezer caps it) or the CPU-time cap that keeps it to its
    /// contract ([`allot_plan::time::bandwidth`]).
    pub(super) fn applied(&self, id: u64, cpus: allot_topo::CpuSet) -> Applied {
        let spec = &self.cells[&id].spec;
        if self.windows.holds(id) {
            return Applied {
                cpus,
                weight: self.kernel.max_weight(),
                bandwidth: None,
            };
        }
        match allot_plan::time::bandwidth(&spec.time, spec.time_cpus()) {
            Some((quota_us, period_us)) => Applied {
                cpus,
                weight: self.kernel.max_weight(),
                bandwidth: Some(allot_enforce::Bandwidth {
                    quota_us,
                    period_us,
                }),
            },
            None => Applied {
                cpus,
                weight: self.weight_of(id, spec),
                bandwidth: None,
            },
        }
    }

    /// Starts, moves or stops driving cell `id`'s windows so that they
    /// match `spec` (a time-triggered contract whose budget leaves part of
    /// the period, or a time-fraction contract's slices,
    /// [`allot_plan::time::Periodic::of`], on a backend with a gate) at
    /// `phase_us` after the epoch (the plan's; none for a cell not
    /// placed). Returns whether the cell's window changed (its page must
    /// show the new one).
    pub(super) fn sync_windows(&mut self, id: u64, spec: &CellSpec, phase_us: Option<u32>) -> bool {
        let want = phase_us
            .and_then(|phase| allot_plan::time::Periodic::of(&spec.time, phase))
            .filter(|w| w.budget_us < w.period_us)
            .map(|w| Window {
                origin_ns: self.windows.origin_ns(w.phase_us),
                period_us: w.period_us,
                budget_us: w.budget_us,
            });
        let have = self.windows.window(id);
        if want == have {
            return false;
        }
        let mut changed = self.windows.remove(id);
        if let Some(window) = want {
            match self.kernel.gate(id) {
                Ok(Some(gate)) => {
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
}
