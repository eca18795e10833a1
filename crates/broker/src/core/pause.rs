//! Best-effort cells paused while guarantees take every CPU: best effort
//! is never refused, and never holds a CPU a guarantee needs.
//!
//! With a backend that can freeze a cell (`Enforcer::can_pause`), the
//! planner admits every best-effort cell and, while the guarantees'
//! entitlements cover every CPU, gives the best-effort ones an empty grant
//! (`allot_plan::PlanConfig::pause_best_effort`). A cgroup cannot run on
//! no CPU, so for such a cell the broker:
//!
//! 1. writes no CPU set: it keeps the CPUs it ran on, or, new, every CPU
//!    cells may use (nothing of it runs there, see 2);
//! 2. freezes it with its gate, before any of its processes joins (a
//!    process moved into a frozen cgroup stops with it);
//! 3. when a later plan gives it CPUs: writes them, then thaws it.
//!
//! Its page says "no CPU" meanwhile, and `allot status` shows it paused,
//! with the reason and since when.
//!
//! Invariants:
//! - A cell is frozen by this module exactly while its planned grant is
//!   empty (and its backend gave it a gate).
//! - Nothing stays frozen by a broker that is gone: the broker thaws every
//!   paused cell when it exits (`Engine::shutdown`), and the backends thaw a
//!   cell on `adopt` and `remove`. A broker that adopts a paused cell
//!   freezes it again on its first plan.
//! - A message-triggered cell left out of the plan (idle) belongs to the
//!   message module: a paused cell that goes idle is let go without being
//!   thawed.

use super::Engine;
use crate::{debug, info, warn};
use allot_enforce::gate::Gate;
use allot_plan::Plan;
use std::time::Instant;

/// Why a paused cell is paused, as the status says it.
pub const WHY: &str = "every CPU is guaranteed to other cells; it runs again when one frees";

/// A paused cell.
#[derive(Debug)]
pub(crate) struct Paused {
    gate: Box<dyn Gate>,
    pub(crate) since: Instant,
}

impl Engine {
    /// After the CPU sets of plan `next` were written (a paused cell's
    /// were not): freezes the cells whose grant is empty, thaws those that
    /// got CPUs, and lets go of those no longer planned.
    pub(super) fn follow_pauses(&mut self, next: &Plan) {
        let gone: Vec<u64> = self
            .paused
            .keys()
            .filter(|id| {
                !self.cells.contains_key(id) || !next.cells.contains_key(&allot_plan::CellId(**id))
            })
            .copied()
            .collect();
        for id in gone {
            self.paused.remove(&id);
        }
        for (cid, g) in &next.cells {
            let id = cid.0;
            if !self.cells.contains_key(&id) {
                continue; // (the account's OUTSIDE cell)
            }
            match (g.cpus.is_empty(), self.paused.contains_key(&id)) {
                (true, false) => self.pause(id, next),
                (false, true) => self.resume(id),
                _ => {}
            }
        }
    }

    fn pause(&mut self, id: u64, next: &Plan) {
        let never_applied = self.cells[&id]
            .published
            .as_ref()
            .is_none_or(|p| p.cpus.is_empty());
        if never_applied {
            // A cgroup needs CPUs before a process joins: any will do.
            let anywhere = self.machine.usable().difference(&next.reserve);
            self.apply_cpus(id, anywhere, "paused on");
        }
        let gate = match self.enforcer.gate(id) {
            Ok(Some(g)) => g,
            Ok(None) => {
                warn!("cell {id}: no CPU is left for it, and its backend cannot pause it");
                return;
            }
            Err(e) => {
                warn!("cell {id}: cannot pause it: {e}");
                return;
            }
        };
        let mut paused = Paused {
            gate,
            since: Instant::now(),
        };
        if let Err(e) = paused.gate.close() {
            warn!("cell {id}: cannot pause it: {e}");
            return;
        }
        info!("cell {id}: paused: {WHY}");
        if let Some(c) = self.cells.get_mut(&id) {
            c.timeline.note("paused", WHY, None);
        }
        self.paused.insert(id, paused);
    }

    fn resume(&mut self, id: u64) {
        let Some(mut p) = self.paused.remove(&id) else {
            return;
        };
        if let Err(e) = p.gate.open() {
            warn!("cell {id}: cannot resume it: {e}");
        }
        let held = p.since.elapsed();
        debug!("cell {id}: resumed after {held:?}");
        if let Some(c) = self.cells.get_mut(&id) {
            c.timeline.note(
                "resumed",
                format!("after {:.1} s", held.as_secs_f64()),
                None,
            );
        }
    }

    /// Thaws every paused cell (broker exit: they run on the CPUs they
    /// were last given until a broker adopts them).
    pub(super) fn thaw_paused(&mut self) {
        for (id, mut p) in std::mem::take(&mut self.paused) {
            if let Err(e) = p.gate.open() {
                warn!("cell {id}: cannot thaw it: {e}");
            }
        }
    }

    /// Since when cell `id` is paused, if it is.
    pub(crate) fn paused_since(&self, id: u64) -> Option<Instant> {
        self.paused.get(&id).map(|p| p.since)
    }
}
