//! Best-effort cells paused while guarantees take every CPU: best effort
//! is never refused, and never holds a CPU a guarantee needs.
//!
//! With a backend that can freeze a cell (`Enforcer::can_pause`), the
//! planner admits every best-effort cell and, while the guarantees'
//! entitlements cover every CPU, gives the best-effort ones an empty grant
//! (`allot_plan::PlanConfig::pause_best_effort`). A cgroup cannot run on
//! no CPU, so for such a cell the broker:
//!
//! 1. confines it to where it may wait while its freeze takes (a freeze
//!    is asynchronous): the CPUs it ran on (new: every CPU cells may use)
//!    less those exclusive cells hold in the next plan, or, if that leaves
//!    none, any CPU no exclusive cell holds ([`Engine::refuge`]); only
//!    where every CPU is exclusive does it stay, and then its freeze must
//!    take before the exclusive cell's processes run there (2);
//! 2. freezes it with its gate, in the shrink phase of the reconcile,
//!    before any other cell grows into its CPUs, and before any of its
//!    processes joins (a process moved into a frozen cgroup stops with
//!    it); then waits, at most [`SETTLE`], until its threads stopped: a
//!    freeze is asynchronous;
//! 3. when a later plan gives it CPUs: writes them, then thaws it.
//!
//! Its page says "no CPU" meanwhile, and `allot status` shows it paused,
//! with the reason and since when.
//!
//! Invariants:
//! - A cell is frozen by this module exactly while its planned grant is
//!   empty (and its backend gave it a gate). A freeze that left threads
//!   running is sent again on every tick until the gate reads stopped.
//! - A paused cell's cpuset overlaps an exclusive cell's only while it is
//!   frozen, or where every CPU is exclusive: a paused cell whose threads
//!   have not all stopped is moved to a [`Engine::refuge`] before any
//!   exclusive cell grows into its CPUs (`pause`, and again on every plan
//!   for the paused cells still freezing).
//! - Nothing stays frozen by a broker that is gone: the broker thaws every
//!   paused cell when it exits (`Engine::shutdown`), and the backends thaw a
//!   cell on `adopt` and `remove`. A broker that adopts a paused cell
//!   freezes it again on its first plan.
//! - A message-triggered cell left out of the plan (idle) belongs to the
//!   message module: a paused cell that goes idle is let go without being
//!   thawed.

use super::Engine;
use super::state::pause::WHY;
use crate::log::{debug, info, warn};
use allot_enforce::gate::Gate;
use allot_plan::Plan;
use std::time::{Duration, Instant};

/// How long a reconcile waits for the threads of a cell it just paused
/// to stop before other cells grow into the CPUs it leaves.
const SETTLE: Duration = Duration::from_millis(50);
/// How often the settling wait looks.
const SETTLE_POLL: Duration = Duration::from_millis(1);

impl Engine {
    /// Before any cell grows into the CPUs of plan `next` (the shrink
    /// phase): lets go of the paused cells no longer planned, freezes the
    /// cells whose grant is empty, and waits until their threads stopped,
    /// at most [`SETTLE`], so that a CPU a paused cell leaves is not given
    /// to another while its threads still run there.
    pub(super) fn pause_emptied(&mut self, next: &Plan) {
        for id in self.paused.ids() {
            if !self.cells.contains_key(&id) || !next.cells.contains_key(&allot_spec::CellId(id)) {
                self.paused.forget(id);
            }
        }
        let emptied: Vec<u64> = next
            .cells
            .iter()
            .filter(|(cid, g)| {
                // (The account's OUTSIDE cell is not one of ours.)
                g.cpus.is_empty() && self.cells.contains_key(&cid.0) && !self.paused.contains(cid.0)
            })
            .map(|(cid, _)| cid.0)
            .collect();
        // Paused cells still freezing leave the CPUs exclusive cells are
        // about to hold.
        let exclusive = self.exclusive_in(next);
        for id in self.paused.freezing_on(&exclusive) {
            let on = self.paused.on(id).unwrap_or_default();
            if let Some(to) = self.refuge(next, on) {
                self.apply_cpus(id, to, "paused, still freezing, moved to");
                self.paused.moved(id, to);
            }
        }
        let mut closed = Vec::new();
        for id in emptied {
            if self.pause(id, next) {
                closed.push(id);
            }
        }
        self.wait_stopped(&closed);
    }

    /// The CPUs exclusive cells hold in plan `next`.
    fn exclusive_in(&self, next: &Plan) -> allot_topo::CpuSet {
        next.cells
            .iter()
            .filter(|(cid, _)| self.cells.get(&cid.0).is_some_and(|c| c.spec.exclusive))
            .fold(allot_topo::CpuSet::default(), |acc, (_, g)| {
                acc.union(&g.cpus)
            })
    }

    /// Where a paused cell confined to `on` may wait while its freeze
    /// takes, if not there: `on` less the CPUs exclusive cells hold in
    /// `next` (and the reserve's), or, if that leaves none, every CPU
    /// cells may use less those. `None`: it may stay (nothing of `on` is
    /// exclusive or reserved), or every CPU cells may use is exclusive
    /// (then only its freeze keeps it off).
    pub(super) fn refuge(&self, next: &Plan, on: allot_topo::CpuSet) -> Option<allot_topo::CpuSet> {
        // (Unknown, as for a cell adopted whose cpuset could not be read:
        // it may be anywhere.)
        let on = if on.is_empty() {
            *self.machine.usable()
        } else {
            on
        };
        let keep_off = self.exclusive_in(next).union(&next.reserve);
        if !on.intersects(&keep_off) {
            return None;
        }
        let kept = on.difference(&keep_off);
        if !kept.is_empty() {
            return Some(kept);
        }
        let anywhere = self.machine.usable().difference(&keep_off);
        (!anywhere.is_empty()).then_some(anywhere)
    }

    /// After the CPU sets of plan `next` were written: thaws the paused
    /// cells that got CPUs.
    pub(super) fn resume_granted(&mut self, next: &Plan) {
        let granted: Vec<u64> = self
            .paused
            .ids()
            .into_iter()
            .filter(|id| {
                next.cells
                    .get(&allot_spec::CellId(*id))
                    .is_some_and(|g| !g.cpus.is_empty())
            })
            .collect();
        for id in granted {
            self.resume(id);
        }
    }

    /// Waits until every thread of the just-paused cells `ids` stopped,
    /// sending the freeze again to stragglers, for at most [`SETTLE`].
    fn wait_stopped(&mut self, ids: &[u64]) {
        let start = Instant::now();
        let mut waiting: Vec<u64> = ids.to_vec();
        let mut round = 0u32;
        loop {
            waiting.retain(|&id| self.paused.running(id));
            if waiting.is_empty() {
                return;
            }
            if start.elapsed() >= SETTLE {
                debug!(
                    "cells {waiting:?}: paused, some threads not stopped after {SETTLE:?}; \
                     the freeze is sent again on every tick"
                );
                return;
            }
            round += 1;
            if round.is_multiple_of(5) {
                for &id in &waiting {
                    self.paused.resend(id);
                }
            }
            std::thread::sleep(SETTLE_POLL);
        }
    }

    /// Freezes cell `id`; returns whether its gate was closed.
    fn pause(&mut self, id: u64, next: &Plan) -> bool {
        let ran_on = self.cells[&id]
            .published
            .as_ref()
            .map(|p| p.cpus)
            .filter(|c| !c.is_empty());
        // A cgroup needs CPUs before a process joins: new, any will do;
        // none an exclusive cell is about to hold, where there are others.
        let anywhere = self.machine.usable().difference(&next.reserve);
        let mut on = ran_on.unwrap_or(anywhere);
        if let Some(to) = self.refuge(next, on) {
            on = to;
        }
        if ran_on != Some(on) {
            self.apply_cpus(id, on, "paused on");
        }
        let gate = match self.kernel.gate(id) {
            Ok(Some(g)) => g,
            Ok(None) => {
                warn!("cell {id}: no CPU is left for it, and its backend cannot pause it");
                return false;
            }
            Err(e) => {
                warn!("cell {id}: cannot pause it: {e}");
                return false;
            }
        };
        if !self.paused.pause(id, gate, on) {
            return false;
        }
        info!("cell {id}: paused: {WHY}");
        if let Some(c) = self.cells.get_mut(&id) {
            c.timeline.note("paused", WHY, None);
        }
        true
    }

    fn resume(&mut self, id: u64) {
        let Some((held, resent)) = self.paused.resume(id) else {
            return;
        };
        debug!("cell {id}: resumed after {held:?} (the freeze was sent again {resent} times)");
        if let Some(c) = self.cells.get_mut(&id) {
            c.timeline.note(
                "resumed",
                format!("after {:.1} s", held.as_secs_f64()),
                None,
            );
        }
    }

    /// Sends the freeze again to the paused cells some of whose threads
    /// still run: a freeze is asynchronous and does not always stop every
    /// thread (a sleeper that wakes as it arrives may run on while the
    /// cgroup reads "freezing", see `allot_enforce::gate`). Called on
    /// every tick, so a straggler runs at most one tick on CPUs that
    /// other cells hold.
    pub(super) fn refreeze_stragglers(&mut self) {
        for id in self.paused.resend_to_running() {
            debug!("cell {id}: paused, but some threads still run; it was frozen again");
        }
    }

    /// Thaws every paused cell (broker exit: they run on the CPUs they
    /// were last given until a broker adopts them).
    pub(super) fn thaw_paused(&mut self) {
        self.paused.thaw_all();
    }

    /// Since when cell `id` is paused, if it is.
    pub(crate) fn paused_since(&self, id: u64) -> Option<Instant> {
        self.paused.since(id)
    }

    /// Cell `id`, paused, has a new gate (a group was just included): it is
    /// closed at once and kept in place of the old one.
    pub(super) fn repause(&mut self, id: u64) {
        if !self.paused.contains(id) {
            return;
        }
        match self.kernel.gate(id) {
            Ok(Some(g)) => self.paused.replace_gate(id, g),
            Ok(None) => {}
            Err(e) => warn!("cell {id}: cannot pause its new group: {e}"),
        }
    }

    /// Cell `id`, adopted after a restart, was paused by the broker before
    /// (frozen on `on`): it stays paused, through `gate`.
    pub(super) fn adopt_paused(&mut self, id: u64, gate: Box<dyn Gate>, on: allot_topo::CpuSet) {
        self.paused.adopt(id, gate, on);
    }
}
