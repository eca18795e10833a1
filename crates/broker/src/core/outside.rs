//! Work outside every cell — processes allot does not manage: a browser,
//! an editor, other users' jobs, daemons — and the cells beside it: what
//! it takes of each cell's CPUs, the teams that leave it those CPUs
//! (`allot_plan::outside`), and the cells' weight against it
//! (`allot_plan::weight`).
//!
//! Every tick ([`Engine::observe_outside`]), from the machine's per-CPU
//! busy time (`/proc/stat`) and each cell's CPU time (its backend's
//! counter), each *group* of CPUs that cells run on alone — a whole-CPU
//! cell's grant, the stacked pool — is read: the CPU time spent there
//! outside the cells, and, where that is four tenths of a CPU or more
//! (enough to count a CPU, `allot_plan::outside::COUNTS_FROM`), the time
//! the group's threads waited to run (`/proc/PID/task/*/schedstat`, at
//! most [`WAIT_THREADS`] threads of [`WAIT_PROCESSES`] of each cell's
//! processes, of [`WAIT_CELLS`] cells: read only where outside work is
//! seen, so a machine without any pays nothing for it; a process that
//! joins brings its past waiting into one reading, which alone changes
//! nothing). A group's
//! `Contention` turns the readings into the CPUs outside work holds
//! there, with hysteresis; a change re-plans.
//!
//! Every re-plan (`reconcile`), [`Engine::fit_teams`] lowers the teams of
//! best-effort cells by what outside work holds of their CPUs, and
//! [`Engine::weigh`] gives every cell and the cells together their
//! weights, which `reconcile` makes the kernel follow.
//!
//! Invariants: a group's readings are always of its CPUs as they are: a
//! group whose CPUs change starts from what outside work held of its new
//! CPUs in the groups read before (`seed`), never from readings of other
//! CPUs; the time region's CPUs belong to no group (time cells promised
//! them, and every space cell may run there); only best-effort teams
//! shrink; the directory's weight is written only while the backend says
//! it is allot's (once it says it is not, it is never tried again), and
//! only when it changes.

use super::Engine;
use super::kernel::Kernel;
use super::state::outside::Key;
use crate::log::warn;
use allot_enforce::os::Os;
use allot_plan::Plan;
use allot_plan::weight::{self, Weighed, Weights};
use allot_spec::{CellId, CellSpec};
use allot_topo::CpuSet;
use std::collections::BTreeMap;
use std::time::Instant;

// The planner's weights reach the backends as they are: both must count
// an ordinary thread alike (the one unit, defined where each layer needs
// it, since the planner and the backends never see each other).
const _: () = assert!(weight::THREAD == allot_enforce::THREAD);

/// Cells of a group whose threads' waiting is read (the pool's first
/// ones; the sum is scaled to all of them).
pub const WAIT_CELLS: usize = 16;
/// Processes read per cell.
pub const WAIT_PROCESSES: usize = 16;
/// Threads read per process.
pub const WAIT_THREADS: usize = 64;

impl Engine {
    /// Reads this tick's work outside the cells on each group of CPUs
    /// (`per_cpu`: the machine's busy time per CPU, ns; `usage`: each
    /// cell's CPU time, ns, `None` where unmeasurable). Returns whether
    /// what some best-effort team leaves to outside work changed (the
    /// caller re-plans).
    pub(super) fn observe_outside(
        &mut self,
        now: Instant,
        per_cpu: &[u64],
        usage: &BTreeMap<u64, Option<u64>>,
    ) -> bool {
        let alone = self.alone();
        let (kernel, os) = (&mut self.kernel, &self.os);
        self.outside.observe(now, per_cpu, usage, alone, |ids| {
            waited_ns(kernel, &**os, ids)
        })
    }

    /// The groups of CPUs that cells run on alone now: each whole-CPU
    /// cell's grant and the stacked pool, less the time region; with the
    /// cells on each, and whether they are all best effort.
    fn alone(&self) -> BTreeMap<Key, (CpuSet, Vec<u64>, bool)> {
        let region = self.plan.time;
        let mut out: BTreeMap<Key, (CpuSet, Vec<u64>, bool)> = BTreeMap::new();
        for (&id, c) in self.cells.iter() {
            // (A cell not planned, as a message-triggered cell asleep,
            // runs nowhere; a paused one holds no CPU.)
            let Some(g) = c.published.as_ref() else {
                continue;
            };
            let time = c.spec.time.is_time() && !c.spec.is_message();
            if time || g.cpus.is_empty() || !self.plan.cells.contains_key(&CellId(id)) {
                continue;
            }
            let key = if g.stacked { Key::Pool } else { Key::Cell(id) };
            let e = out
                .entry(key)
                .or_insert((g.cpus.difference(&region), Vec::new(), true));
            e.1.push(id);
            e.2 &= !c.spec.is_guaranteed();
        }
        out
    }

    /// Lowers the teams of `plan`'s best-effort cells (planned as
    /// `specs`) by what outside work holds of their CPUs
    /// ([`allot_plan::outside::teams`]). A cell whose CPUs are not those
    /// last read (a grant that just moved) counts what outside work held
    /// of its new CPUs where they were read ([`seed`]).
    pub(super) fn fit_teams(&self, plan: &mut Plan, specs: &BTreeMap<CellId, CellSpec>) {
        if !self.outside.holds_any() {
            return;
        }
        let taken_on = |key: Key, cpus: CpuSet| self.outside.taken_on(key, cpus);
        let taken: BTreeMap<CellId, u32> = plan
            .cells
            .iter()
            .filter(|(id, g)| !g.stacked && self.cells.contains_key(&id.0))
            .map(|(id, g)| {
                (
                    *id,
                    taken_on(Key::Cell(id.0), g.cpus.difference(&plan.time)),
                )
            })
            .collect();
        let pool = if plan.pool.is_empty() {
            0
        } else {
            taken_on(Key::Pool, plan.pool.difference(&plan.time))
        };
        allot_plan::outside::teams(plan, specs, &taken, pool);
    }

    /// The weights of `plan`'s cells (planned as `specs`) and of the
    /// cells together, in the backend's range.
    pub(super) fn weigh(&self, plan: &Plan, specs: &BTreeMap<CellId, CellSpec>) -> Weights {
        let cells: Vec<Weighed<'_>> = plan
            .cells
            .iter()
            .filter(|(id, _)| self.cells.contains_key(&id.0))
            .filter_map(|(id, grant)| {
                Some(Weighed {
                    id: *id,
                    spec: specs.get(id)?,
                    grant,
                })
            })
            .collect();
        weight::weigh(self.outside.weighing(), &cells, self.kernel.max_weight())
    }

    /// Cell `id`'s weight now: as last weighed, else (a cell not weighed
    /// yet) its spec weight, or the most for a time cell.
    pub(super) fn weight_of(&self, id: u64, spec: &CellSpec) -> u32 {
        if let Some(&w) = self.outside.weights().cells.get(&CellId(id)) {
            return w;
        }
        if spec.time.is_time() && !spec.is_message() {
            self.kernel.max_weight()
        } else {
            spec.weight.saturating_mul(weight::THREAD)
        }
    }

    /// The cells' weight together as the kernel has it (`None`: not
    /// allot's to set, or never written).
    pub(crate) fn together_weight(&self) -> Option<u32> {
        self.outside.together()
    }

    /// Writes the cells' weight together, if it changed and is allot's.
    /// A write the kernel refused is tried again when the weight changes
    /// (once per value, so a broken directory costs one warning each).
    pub(super) fn write_together(&mut self) {
        let Some(w) = self.outside.together_due() else {
            return;
        };
        let outcome = match self.kernel.set_together_weight(w) {
            Ok(ours) => Some(ours),
            Err(e) => {
                warn!("the cells' weight against work outside them: {e}");
                None
            }
        };
        self.outside.together_written(w, outcome);
    }
}

/// The time the threads of cells `ids` waited to run so far, ns: every
/// process in a cell (a shell's or make's children run the work, not only
/// its members), bounded, and the first [`WAIT_CELLS`] cells' sum scaled
/// to all.
fn waited_ns(kernel: &mut Kernel, os: &dyn Os, ids: &[u64]) -> u64 {
    let read = ids.len().min(WAIT_CELLS);
    let mut sum = 0u64;
    for &id in &ids[..read] {
        for pid in kernel.pids(id).into_iter().take(WAIT_PROCESSES) {
            if let Some(d) = os.run_delay_ns(pid, WAIT_THREADS) {
                sum = sum.saturating_add(d);
            }
        }
    }
    (sum as f64 * ids.len() as f64 / read.max(1) as f64) as u64
}
