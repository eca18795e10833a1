//! Rebuilding the state after a start: from the journal, then from what
//! the backend still holds.
//!
//! 1. Every journaled cell whose processes still run (same pid *and* start
//!    time, or processes its cgroup still holds) is adopted: enforcement
//!    re-attached without writing anything, grant, generation and demand
//!    restored, a new page published with the old grant. The others are
//!    released.
//! 2. Every cell the backend holds that the journal does not know (a
//!    journal that was lost, damaged or could not be written) is
//!    *recovered* if processes are in it: a best-effort cell named
//!    `recovered-N` owned by its first process's user, with no rejoin
//!    secret; the first member that rejoins it sets one. An empty one is
//!    removed.
//! 3. The next id is above every id the journal or the backend has seen,
//!    so a new cell never lands in an old cell's cgroup.
//!
//! The planner is a fixpoint on its own output (`plans_are_stable`), so
//! re-planning the restored state moves no CPU of an adopted cell.

use super::{Cell, Effect, Engine};
use crate::demand::Estimator;
use crate::journal::{GrantRec, Journal, MemberRec, Record, SpecRec};
use crate::log::{info, warn};
use crate::names::shown;
use allot_plan::{Allotment, Plan};
use allot_proto::PageMap;
use allot_spec::{CellId, CellSpec};
use allot_topo::CpuSet;
use std::collections::BTreeMap;

impl Engine {
    pub(super) fn restore(&mut self, journal: Option<&Journal>) -> Vec<Effect> {
        let state = journal.map(|j| j.state().clone()).unwrap_or_default();
        self.cells.ids_above(state.next_id.saturating_sub(1));
        let mut effects = Vec::new();
        let mut grants = BTreeMap::new();
        for (&id, rec) in &state.cells {
            let mut live: Vec<MemberRec> = rec
                .members
                .iter()
                .copied()
                .filter(|m| self.os.alive(m.pid) && self.os.start_time(m.pid) == Some(m.start))
                .collect();
            let adopted = self
                .kernel
                .adopt(id, &live.iter().map(|m| m.pid).collect::<Vec<_>>());
            // Its launchers' cgroups first: their processes keep it alive.
            let groups = if adopted.is_ok() {
                self.restore_groups(id, &rec.groups)
            } else {
                Vec::new()
            };
            if live.is_empty() {
                // Processes that joined through the cgroup (children) keep it alive.
                live = self.live_backend_members(id, 0);
            }
            if live.is_empty() {
                info!(
                    "cell {id} ({}) ended while the broker was down; releasing it",
                    shown(&rec.name)
                );
                self.remove_backend(id);
                self.journal(&[Record::End { id }]);
                continue;
            }
            if let Err(e) = &adopted {
                warn!(
                    "cell {id} ({}): could not re-attach enforcement: {e}",
                    shown(&rec.name)
                );
            }
            let generation = rec.grant.as_ref().map_or(0, |g| g.generation);
            let mut grant = rec.grant.as_ref().map(GrantRec::grant);
            if let Some(g) = &grant {
                grants.insert(CellId(id), g.clone());
            }
            // What the kernel confines it to now is the truth the next
            // plan starts from: a broker killed between a cpuset write and
            // its journal line left the kernel ahead of the journal, and a
            // plan that believed the journal would skip the write (the
            // grant "unchanged") or grow another cell into CPUs this one
            // still holds.
            if let (Some(g), Ok(Some(now))) = (grant.as_mut(), &adopted)
                && g.cpus != *now
            {
                info!(
                    "cell {id}: the kernel confines it to CPUs {now}, the journal says {}; \
                     planning from the kernel's",
                    g.cpus
                );
                g.cpus = *now;
                g.lent = g.lent.intersection(now);
            }
            let est = Estimator::restored(rec.grant.as_ref().and_then(|g| g.demand));
            let mut cell = Cell::new(
                rec.name.clone(),
                rec.uid,
                rec.spec.spec(),
                rec.token,
                adopted_timeline(),
            );
            cell.generation = generation;
            cell.published = grant;
            cell.est = est;
            cell.groups = groups;
            effects.extend(self.install(id, cell, live));
            // Paused when the last broker stopped (its journaled grant had
            // no CPU): it stays frozen, for the first plan to resume or
            // keep paused; any other cell runs again now (a broker killed
            // mid-window left it frozen).
            // A cell with no journaled grant (a newcomer, paused or not,
            // whose broker died before its first grant's line) is kept
            // frozen too: thawed, a paused one would run where its
            // cpuset says, which an exclusive cell may hold.
            let was_paused = rec.grant.as_ref().is_none_or(|g| g.cpus.is_empty());
            let on = adopted.as_ref().ok().copied().flatten().unwrap_or_default();
            self.after_adopting(id, was_paused, on);
        }
        effects.extend(self.recover_unjournaled(&state.cells));
        self.journal(&[Record::NextId {
            next: self.cells.next_id(),
        }]);
        let time = self
            .cells
            .iter()
            .filter(|(_, c)| c.spec.time.is_time())
            .filter_map(|(id, _)| grants.get(&CellId(*id)))
            .fold(CpuSet::new(), |acc, g| acc.union(&g.entitled));
        self.plan = Plan {
            capacity: self.planner.capacity(),
            reserve: state.reserve,
            pool: state.pool,
            time,
            time_limit: self.planner.time_limit(),
            contracts: self
                .cells
                .iter()
                .filter(|(_, c)| c.spec.time.is_time())
                .map(|(id, c)| (CellId(*id), c.spec.time))
                .collect(),
            // Not journaled: kept cells get the earliest phase on their CPUs.
            phases: Default::default(),
            cells: grants,
        };
        self.reconcile();
        effects
    }

    /// Cells the backend holds that the journal does not know (step 2).
    fn recover_unjournaled(
        &mut self,
        journaled: &BTreeMap<u64, crate::journal::CellRec>,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        for id in self.kernel.existing() {
            self.cells.ids_above(id);
            if journaled.contains_key(&id) {
                continue;
            }
            let live = self.live_backend_members(id, 0);
            let Some(first) = live.first() else {
                info!("cell {id}: an empty cell the journal does not know; removing it");
                self.remove_backend(id);
                continue;
            };
            let uid = self.os.uid(first.pid).unwrap_or(0);
            let name = format!("recovered-{id}");
            let now = match self
                .kernel
                .adopt(id, &live.iter().map(|m| m.pid).collect::<Vec<_>>())
            {
                Ok(cpus) => cpus,
                Err(e) => {
                    warn!("cell {id}: could not re-attach enforcement: {e}");
                    None
                }
            };
            warn!(
                "cell {id}: the journal does not know it but {} process(es) of uid {uid} are in it \
                 (the journal was lost or could not be written); recovered as best-effort cell {name}",
                live.len()
            );
            self.after_adopting(id, false, now.unwrap_or_default());
            let spec = CellSpec::default();
            self.journal(&[Record::Cell {
                id,
                name: name.clone(),
                uid,
                spec: SpecRec::of(&spec),
                token: 0,
            }]);
            for &member in &live {
                self.journal(&[Record::Member { id, member }]);
            }
            // What it runs on now, so that re-planning shrinks it before
            // anyone grows into its CPUs.
            let published = now.map(|cpus| Allotment {
                cpus,
                lent: Default::default(),
                entitled: cpus,
                threads: cpus.len() as u32,
                stacked: false,
                home: 0,
                share: cpus.len() as f64,
                held: Default::default(),
            });
            let mut cell = Cell::new(name, uid, spec, 0, adopted_timeline());
            cell.published = published;
            effects.extend(self.install(id, cell, live));
        }
        effects
    }

    /// Adds a restored cell: a fresh page with its grant, its members
    /// watched.
    fn install(&mut self, id: u64, mut cell: Cell, members: Vec<MemberRec>) -> Vec<Effect> {
        // Windows restart at the next reconcile, on this broker's epoch:
        // a time-triggered cell's phase shifts once across a restart.
        match PageMap::create(id, self.instance) {
            Ok(p) => cell.pages.push(p),
            Err(e) => warn!("cell {id}: cannot create its grant page: {e}"),
        }
        if let Some(g) = &cell.published {
            let pg = self.page_grant(id, cell.generation, g);
            cell.publish(&pg);
        }
        info!(
            "adopted cell {id} ({}) with CPUs {}",
            shown(&cell.name),
            cell.published
                .as_ref()
                .map(|g| g.cpus.to_string())
                .unwrap_or_default()
        );
        self.cells
            .insert(id, cell, members)
            .into_iter()
            .map(Effect::Watch)
            .collect()
    }
}

/// The timeline of a cell a restarted broker took over: it starts there.
fn adopted_timeline() -> crate::timeline::Timeline {
    let mut t = crate::timeline::Timeline::start();
    t.note("adopted", "taken over by a restarted broker", None);
    t
}

impl Engine {
    /// Thaws adopted cell `id` (`Enforcer::adopt` leaves the freezer as
    /// it was), or keeps it frozen and paused (confined to `on`) when it
    /// `was_paused`, so that
    /// a cell paused off an exclusive cell's CPUs never runs there between
    /// the adoption and the first plan.
    fn after_adopting(&mut self, id: u64, was_paused: bool, on: allot_topo::CpuSet) {
        let gate = match self.kernel.gate(id) {
            Ok(Some(g)) => g,
            Ok(None) => return,
            Err(e) => {
                warn!("cell {id}: cannot reach its freezer after the restart: {e}");
                return;
            }
        };
        if was_paused {
            self.adopt_paused(id, gate, on);
        } else {
            let mut gate = gate;
            if let Err(e) = gate.open() {
                warn!("cell {id}: cannot thaw it after the restart: {e}");
            }
        }
    }
}
