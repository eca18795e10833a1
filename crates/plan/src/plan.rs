//! The plan: every cell's grant, and the checker for the plan invariants.
//!
//! Invariants (see `docs/design.md`; [`Plan::check`] verifies all of them and
//! the property tests run it on random cell sets over every fixture):
//!
//! 1. Every grant lies inside the usable CPUs minus the reserve.
//! 2. Whole-CPU grants are pairwise disjoint and disjoint from the stacked
//!    pool, so exclusive grants never overlap anything.
//! 3. The CPUs handed out (whole-CPU grants plus the pool) never exceed the
//!    capacity.
//! 4. Every guaranteed cell is entitled to at least its minimum, and an
//!    exclusive cell's grant contains its whole entitlement.
//! 5. Every cell has at least one CPU and a thread count of at least one,
//!    except a best-effort cell while the guarantees' entitlements (and
//!    the time region) cover every CPU: it holds none and is paused
//!    ([`crate::PlanConfig::pause_best_effort`]); no grant exceeds the
//!    cell's maximum.
//! 6. Lent CPUs are part of the grant and outside the cell's entitlement.
//! 7. Time: every time cell holds exactly the CPUs its contract covers,
//!    inside the time region, and the promises on every CPU fit its limit
//!    with the windows of its time-triggered cells apart (at their phases)
//!    and never a triggered beside a fraction cell ([`crate::time`]). The region is disjoint from the
//!    reserve, the stacked pool and every space cell's entitlement; a space
//!    cell reaches into it only when it is not exclusive (as lent CPUs, or
//!    beside the pool for stacked cells). Invariants 2 and 3 count the
//!    region once, as a whole.
//! 8. The one account: every CPU a cell's processes hold exclusively
//!    through `require` ([`Grant::held`]) lies in that cell's entitlement
//!    and in what it keeps (never lent to another cell), so no other cell
//!    runs on it. CPUs held so by processes outside every cell are given
//!    to a cell of their own that is never published (the broker's
//!    `OUTSIDE` cell), which keeps every other cell off them.

use crate::time;
use allot_spec::{CellId, CellSpec};
use allot_topo::{CpuSet, Machine};
use serde::Serialize;
use std::collections::BTreeMap;

/// What one cell holds: the planner's *allotment*, in CPU sets. What a
/// program reads of it is its grant (`allot_proto::Grant`, a count of
/// threads and the CPUs, with a generation), made from this by the broker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Allotment {
    /// CPUs the cell may run on now.
    pub cpus: CpuSet,
    /// The part of `cpus` lent to it: beyond its entitlement, taken back as
    /// soon as its owner (or a newcomer's guarantee) needs it.
    pub lent: CpuSet,
    /// The CPUs the cell is entitled to (empty for stacked cells). Part of it
    /// may be lent to others while the cell cannot use it.
    pub entitled: CpuSet,
    /// Recommended number of worker threads.
    pub threads: u32,
    /// The cell shares the stacked pool with other cells.
    pub stacked: bool,
    /// For a stacked cell, where its threads start among the pool's CPUs:
    /// the threads of the stacked cells before it, so that cells pinning
    /// `threads` workers from this position on (wrapping around) spread
    /// over the pool instead of all taking its first CPUs. 0 otherwise.
    pub home: u32,
    /// Real-valued fair share, in CPUs.
    pub share: f64,
    /// CPUs the cell's processes hold exclusively through `require`, as
    /// the planner was told ([`crate::CellInput::held`]): invariant 8.
    pub held: CpuSet,
}

/// The broker's whole decision.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Plan {
    /// CPUs available to cells (usable minus reserve).
    pub capacity: u32,
    /// CPUs kept for processes outside any cell.
    pub reserve: CpuSet,
    /// CPUs shared by the stacked cells (including borrowed ones).
    pub pool: CpuSet,
    /// The time region: CPUs carrying a time cell's promise.
    pub time: CpuSet,
    /// Most time promised on one CPU, in parts per million.
    pub time_limit: u32,
    /// The contract each time cell was placed for: a cell whose contract
    /// changed is placed afresh instead of keeping its CPUs, so that it
    /// never crowds out a cell whose contract did not.
    pub contracts: BTreeMap<CellId, allot_spec::TimeContract>,
    /// Each time-triggered cell's phase: its windows open `phase` µs after
    /// the broker's epoch, then every period ([`crate::time::phase`]).
    pub phases: BTreeMap<CellId, u32>,
    /// Grants by cell.
    pub cells: BTreeMap<CellId, Allotment>,
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// Invariant 1: a grant reaches outside the usable CPUs minus the reserve.
    #[error("cell {0}: grant {1} leaves the usable CPUs minus the reserve")]
    OutOfBounds(CellId, CpuSet),
    /// Invariant 2: two cells' whole-CPU grants share CPUs.
    #[error("cells {0} and {1} overlap on {2}")]
    Overlap(CellId, CellId, CpuSet),
    /// Invariant 2 (pool).
    #[error("cell {0} overlaps the stacked pool on {1}")]
    PoolOverlap(CellId, CpuSet),
    /// Invariant 3: more CPUs are handed out than the capacity.
    #[error("{used} CPUs handed out but capacity is {capacity}")]
    OverCapacity {
        /// CPUs of the whole-CPU grants, the pool and the time region, counted once.
        used: usize,
        /// The plan's capacity: usable CPUs minus the reserve.
        capacity: u32,
    },
    /// Invariant 4: a guaranteed cell is entitled to fewer CPUs than its minimum.
    #[error("cell {0} is entitled to {1} CPUs, below its guarantee of {2}")]
    BelowMinimum(CellId, usize, u32),
    /// Invariant 4 (exclusive).
    #[error("exclusive cell {0} lends part of its entitlement")]
    ExclusiveLends(CellId),
    /// Invariant 5: a cell holds no CPU or no thread, and is not a paused best-effort cell.
    #[error("cell {0} has no CPU or no thread")]
    Empty(CellId),
    /// Invariant 5 (max).
    #[error("cell {0} holds {1} CPUs, above its maximum {2}")]
    AboveMaximum(CellId, usize, u32),
    /// Invariant 6: lent CPUs are outside the grant or inside the entitlement.
    #[error("cell {0}: lent CPUs {1} are not a subset of the grant minus the entitlement")]
    BadLent(CellId, CpuSet),
    /// A cell of the input has no grant.
    #[error("cell {0} has no grant")]
    Missing(CellId),
    /// Invariant 7: time cells are misplaced or overload a CPU; the text says how.
    #[error("time: {0}")]
    Time(String),
    /// Invariant 8: CPUs a cell's processes hold through `require` are not kept in
    /// its entitlement.
    #[error("cell {0}: CPUs {1} held through require are not entitled and kept")]
    NotHeld(CellId, CpuSet),
}

impl Plan {
    /// Checks every invariant against the machine and the cells' specs.
    // A violation carries the offending CPU sets by value so tests can match
    // on them; the checker is off every hot path, so its size costs nothing.
    #[allow(clippy::result_large_err)]
    pub fn check(&self, machine: &Machine, specs: &[(CellId, CellSpec)]) -> Result<(), Violation> {
        let space = machine.usable().difference(&self.reserve);
        self.check_time(specs)?;
        let region = self.time;
        // CPUs no guarantee holds: while there are none, best-effort cells
        // may hold nothing (invariant 5).
        let unguaranteed = specs
            .iter()
            .filter(|(_, spec)| spec.is_guaranteed())
            .filter_map(|(id, _)| self.cells.get(id))
            .fold(space.difference(&region), |left, g| {
                left.difference(&g.entitled)
            });
        let mut whole: Vec<(CellId, CpuSet)> = Vec::new(); // non-stacked grants so far
        for (id, spec) in specs {
            let g = self.cells.get(id).ok_or(Violation::Missing(*id))?;
            if spec.time.is_time() {
                continue; // check_time
            }
            if g.entitled.intersects(&region) {
                return Err(Violation::Time(format!(
                    "space cell {id} is entitled to time-region CPUs {}",
                    g.entitled.intersection(&region)
                )));
            }
            if g.cpus.intersects(&region) && spec.exclusive {
                return Err(Violation::Time(format!(
                    "exclusive cell {id} runs on time-region CPUs {}",
                    g.cpus.intersection(&region)
                )));
            }
            if !g.cpus.is_subset(&space) {
                return Err(Violation::OutOfBounds(*id, g.cpus));
            }
            if g.cpus.is_empty() && !spec.is_guaranteed() && unguaranteed.is_empty() {
                // Paused: a best-effort cell while guarantees take every
                // CPU (`PlanConfig::pause_best_effort`).
                continue;
            }
            if g.cpus.is_empty() || g.threads == 0 {
                return Err(Violation::Empty(*id));
            }
            let max = spec.max_within(self.capacity).max(spec.guaranteed()) as usize;
            if g.cpus.len() > max && !g.stacked {
                return Err(Violation::AboveMaximum(*id, g.cpus.len(), max as u32));
            }
            if spec.is_guaranteed() && g.entitled.len() < spec.guaranteed() as usize {
                return Err(Violation::BelowMinimum(
                    *id,
                    g.entitled.len(),
                    spec.guaranteed(),
                ));
            }
            if spec.exclusive && !g.entitled.is_subset(&g.cpus) {
                return Err(Violation::ExclusiveLends(*id));
            }
            if !g.lent.is_subset(&g.cpus) || g.lent.intersects(&g.entitled) {
                return Err(Violation::BadLent(*id, g.lent));
            }
            let kept = g.entitled.intersection(&g.cpus).difference(&g.lent);
            if !g.held.is_subset(&kept) {
                return Err(Violation::NotHeld(*id, g.held.difference(&kept)));
            }
            if g.stacked {
                if !g.cpus.is_subset(&self.pool.union(&region)) {
                    return Err(Violation::OutOfBounds(*id, g.cpus));
                }
            } else {
                if !g.cpus.intersection(&region).is_subset(&g.lent) {
                    return Err(Violation::Time(format!(
                        "cell {id} runs on time-region CPUs {} not marked lent",
                        g.cpus.intersection(&region)
                    )));
                }
                let g_cpus = g.cpus.difference(&region);
                let g_lent = g.lent.difference(&region);
                if g_cpus.intersects(&self.pool) {
                    return Err(Violation::PoolOverlap(*id, g_cpus.intersection(&self.pool)));
                }
                // Outside the time region: grants are pairwise disjoint,
                // entitlements are pairwise disjoint, and a grant reaches
                // into another cell's entitlement only through CPUs marked
                // lent.
                for (other, o_cpus) in &whole {
                    let o = &self.cells[other];
                    let o_lent = o.lent.difference(&region);
                    let clash = g_cpus
                        .intersection(o_cpus)
                        .union(&g.entitled.intersection(&o.entitled))
                        .union(&g_cpus.intersection(&o.entitled).difference(&g_lent))
                        .union(&o_cpus.intersection(&g.entitled).difference(&o_lent));
                    if !clash.is_empty() {
                        return Err(Violation::Overlap(*other, *id, clash));
                    }
                }
                whole.push((*id, g_cpus));
            }
        }
        let used = whole
            .iter()
            .map(|(_, cpus)| *cpus)
            .fold(self.pool.union(&region), |acc, s| acc.union(&s))
            .len();
        if used > self.capacity as usize {
            return Err(Violation::OverCapacity {
                used,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    /// The CPUs time cell `id` holds in this plan if it was placed for
    /// `contract` (empty otherwise: a new cell, or one whose contract
    /// changed, is placed afresh).
    pub fn placed_for(&self, id: CellId, contract: &allot_spec::TimeContract) -> CpuSet {
        match (self.contracts.get(&id), self.cells.get(&id)) {
            (Some(t), Some(g)) if t == contract => g.entitled,
            _ => CpuSet::new(),
        }
    }

    /// The phase cell `id` was placed at for `contract` (none if its
    /// contract changed, or it is not time-triggered).
    pub fn phase_for(&self, id: CellId, contract: &allot_spec::TimeContract) -> Option<u32> {
        match self.contracts.get(&id) {
            Some(t) if t == contract => self.phases.get(&id).copied(),
            _ => None,
        }
    }

    /// Invariant 7 for the time cells of `specs`.
    #[allow(clippy::result_large_err)]
    fn check_time(&self, specs: &[(CellId, CellSpec)]) -> Result<(), Violation> {
        let region = self.time;
        if region.intersects(&self.reserve) || region.intersects(&self.pool) {
            return Err(Violation::Time(format!(
                "the time region {region} meets the reserve or the stacked pool"
            )));
        }
        let mut cells = Vec::new();
        let mut sets = BTreeMap::new();
        for (id, spec) in specs.iter().filter(|(_, s)| s.time.is_time()) {
            let g = self.cells.get(id).ok_or(Violation::Missing(*id))?;
            if g.cpus != g.entitled || !g.lent.is_empty() || !g.cpus.is_subset(&region) {
                return Err(Violation::Time(format!(
                    "time cell {id}: grant {} (entitled {}, lent {}) is not its own CPUs inside \
                     the region {region}",
                    g.cpus, g.entitled, g.lent
                )));
            }
            cells.push((*id, spec.time, spec.min));
            sets.insert(*id, g.entitled);
        }
        let load = time::check_load(&cells, &sets, &self.phases, self.time_limit)
            .map_err(Violation::Time)?;
        if load.keys().any(|cpu| !region.contains(*cpu)) {
            return Err(Violation::Time("a promise lies outside the region".into()));
        }
        Ok(())
    }

    /// The grants of `ids` in this plan, in the same order (`None` for a
    /// cell it has none for). Ascending ids, as the broker passes its
    /// cells, are found in one walk over the plan instead of one search
    /// each: with 10 000 cells the searches cost more than the rest of a
    /// plan's policy step.
    pub(crate) fn grants_of(
        &self,
        ids: impl IntoIterator<Item = CellId>,
    ) -> Vec<Option<&Allotment>> {
        let ids: Vec<CellId> = ids.into_iter().collect();
        if !ids.windows(2).all(|w| w[0] < w[1]) {
            return ids.iter().map(|id| self.cells.get(id)).collect();
        }
        let mut walk = self.cells.iter().peekable();
        ids.iter()
            .map(|id| {
                while walk.next_if(|(k, _)| *k < id).is_some() {}
                walk.next_if(|(k, _)| *k == id).map(|(_, g)| g)
            })
            .collect()
    }

    /// What `next` changes for the cells of `self` (older) that it keeps.
    pub fn changes_to(&self, next: &Plan) -> Changes {
        let mut out = Changes::default();
        for (id, old) in &self.cells {
            let Some(new) = next.cells.get(id) else {
                continue;
            };
            if old.cpus != new.cpus {
                let keep = old.cpus.intersection(&new.cpus);
                out.cpus += 1;
                let shrunk_first = !keep.is_empty() && keep != old.cpus && keep != new.cpus;
                out.cpuset_writes += if shrunk_first { 2 } else { 1 };
            }
            out.threads += usize::from(old.threads != new.threads);
            out.grants += usize::from(old != new);
        }
        out
    }

    /// How many CPUs changed hands between `self` (older) and `next`:
    /// the sum over cells of CPUs removed from their grants.
    pub fn moves_to(&self, next: &Plan) -> usize {
        next.cells
            .iter()
            .map(|(id, g)| match self.cells.get(id) {
                Some(old) => old.cpus.difference(&g.cpus).len(),
                None => 0,
            })
            .sum()
    }
}

/// What a plan changes for the cells of the plan before it, counted as
/// the broker acts on it (`allot-broker`, `core/reconcile.rs`): a cell
/// whose CPU set changed has its cgroup's cpuset rewritten, and a cell
/// whose grant changed in any field has its grant page republished.
/// Cells that arrive or leave are not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Changes {
    /// Cells whose CPU set changed.
    pub cpus: usize,
    /// The cpuset writes for them: two for a cell that keeps some of its
    /// CPUs, loses others and gains others (shrunk to those it keeps
    /// first, so that grants never overlap, then grown), one otherwise (a
    /// cgroup backend skips rewriting the set it holds).
    pub cpuset_writes: usize,
    /// Cells whose advised thread count changed.
    pub threads: usize,
    /// Cells whose grant changed in any field (share and `home`
    /// included): the grant pages republished.
    pub grants: usize,
}

/// The grants of the cells `ids`, given in the same order, as a plan's
/// map. Building a map of 10 000 grants afresh costs more than the rest
/// of a plan (and its intermediate list is megabytes that the allocator
/// maps and unmaps each time), so when the ids ascend and few cells came
/// or went since `prev`, as after any event but the first, `prev`'s map
/// is copied, the cells that came and went are inserted and removed, and
/// every grant is written in its place. (Many insertions, as into an
/// empty map, cost more than building afresh.)
pub(crate) fn keyed(
    prev: &BTreeMap<CellId, Allotment>,
    ids: impl Iterator<Item = CellId> + Clone,
    grants: impl Iterator<Item = (CellId, Allotment)>,
) -> BTreeMap<CellId, Allotment> {
    let ascending = ids.clone().zip(ids.clone().skip(1)).all(|(a, b)| a < b);
    if !ascending {
        return grants.collect();
    }
    // The cells that came and went, in one walk over both ascending lists.
    let (mut came, mut went) = (Vec::new(), Vec::new());
    let mut old = prev.keys().copied().peekable();
    for id in ids {
        while let Some(gone) = old.next_if(|o| *o < id) {
            went.push(gone);
        }
        if old.next_if_eq(&id).is_none() {
            came.push(id);
        }
    }
    went.extend(old);
    if came.len() + went.len() > prev.len() / 4 {
        return grants.collect();
    }
    let mut map = prev.clone();
    for id in &went {
        map.remove(id);
    }
    for id in came {
        map.insert(id, Allotment::none());
    }
    for ((at, slot), (id, g)) in map.iter_mut().zip(grants) {
        debug_assert_eq!(*at, id);
        *slot = g;
    }
    map
}

impl Allotment {
    /// Nothing: a placeholder, overwritten before it is seen.
    fn none() -> Allotment {
        Allotment {
            cpus: CpuSet::new(),
            lent: CpuSet::new(),
            entitled: CpuSet::new(),
            threads: 0,
            stacked: false,
            home: 0,
            share: 0.0,
            held: CpuSet::new(),
        }
    }

    /// A grant on `cpus` (a cpulist) with a team of `threads`, on the
    /// stacked pool or entitled to them, with fair share `share` (tests).
    #[cfg(test)]
    pub(crate) fn of(cpus: &str, threads: u32, stacked: bool, share: f64) -> Allotment {
        let cpus = CpuSet::parse_list(cpus).expect("a cpulist");
        Allotment {
            cpus,
            entitled: if stacked { CpuSet::new() } else { cpus },
            threads,
            stacked,
            share,
            ..Allotment::none()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CellInput, PlanConfig, Planner};

    fn setup() -> (Machine, Vec<(CellId, CellSpec)>, Plan) {
        let m = Machine::uniform(4);
        let specs = vec![
            (
                CellId(1),
                CellSpec {
                    min: 1,
                    exclusive: true,
                    ..Default::default()
                },
            ),
            (CellId(2), CellSpec::default()),
        ];
        let cells: Vec<CellInput> = specs
            .iter()
            .map(|&(id, spec)| CellInput {
                id,
                spec,
                demand: None,
                perf: Default::default(),
                held: Default::default(),
            })
            .collect();
        let plan = Planner::new(&m, PlanConfig::default()).plan(&cells, &Plan::default());
        (m, specs, plan)
    }

    #[test]
    fn checker_accepts_a_real_plan() {
        let (m, specs, plan) = setup();
        assert_eq!(plan.check(&m, &specs), Ok(()));
    }

    #[test]
    fn changes_count_what_the_broker_rewrites() {
        let (_, _, mut plan) = setup();
        let set = |s: &str| CpuSet::parse_list(s).unwrap();
        let g = plan.cells.get_mut(&CellId(1)).unwrap();
        (g.cpus, g.threads) = (set("2-3"), 2);
        plan.cells.get_mut(&CellId(2)).unwrap().cpus = set("0-1");
        let mut next = plan.clone();
        next.cells.get_mut(&CellId(2)).unwrap().share += 1.0;
        assert_eq!(
            plan.changes_to(&next),
            Changes {
                grants: 1,
                ..Changes::default()
            },
            "a share moves the page only"
        );
        // Cell 1 shrinks (one write); cell 2 keeps 1, drops 0 and gains 2
        // (shrunk to 1 first, then grown: two writes).
        let g = next.cells.get_mut(&CellId(1)).unwrap();
        (g.cpus, g.threads) = (set("3"), 1);
        next.cells.get_mut(&CellId(2)).unwrap().cpus = set("1-2");
        next.cells.insert(CellId(3), next.cells[&CellId(1)].clone());
        assert_eq!(
            plan.changes_to(&next),
            Changes {
                cpus: 2,
                cpuset_writes: 3,
                threads: 1,
                grants: 2,
            }
        );
    }

    #[test]
    fn checker_catches_each_violation() {
        let (m, specs, plan) = setup();
        let id1 = CellId(1);
        let id2 = CellId(2);
        let cpu_of_1 = plan.cells[&id1].cpus.first().unwrap();

        let mut p = plan.clone();
        p.cells.get_mut(&id2).unwrap().cpus.insert(cpu_of_1);
        assert!(
            matches!(p.check(&m, &specs), Err(Violation::Overlap(..))),
            "{:?}",
            p.check(&m, &specs)
        );

        let mut p = plan.clone();
        p.cells.get_mut(&id1).unwrap().entitled = CpuSet::new();
        assert!(matches!(
            p.check(&m, &specs),
            Err(Violation::BelowMinimum(..))
        ));

        let mut p = plan.clone();
        p.cells.get_mut(&id2).unwrap().cpus = CpuSet::new();
        assert!(matches!(p.check(&m, &specs), Err(Violation::Empty(_))));

        let mut p = plan.clone();
        p.cells.get_mut(&id2).unwrap().cpus.insert(9);
        assert!(matches!(
            p.check(&m, &specs),
            Err(Violation::OutOfBounds(..))
        ));

        let mut p = plan.clone();
        let g = p.cells.get_mut(&id1).unwrap();
        g.lent = g.entitled;
        assert!(matches!(p.check(&m, &specs), Err(Violation::BadLent(..))));

        let mut p = plan.clone();
        let other = p.cells[&id2].cpus.first().unwrap();
        p.cells.get_mut(&id1).unwrap().entitled.insert(other);
        assert!(matches!(
            p.check(&m, &specs),
            Err(Violation::ExclusiveLends(_))
        ));

        let mut p = plan.clone();
        p.capacity = 1;
        assert!(matches!(
            p.check(&m, &specs),
            Err(Violation::OverCapacity { .. }) | Err(Violation::AboveMaximum(..))
        ));

        let mut p = plan.clone();
        let g = p.cells.get_mut(&id2).unwrap();
        g.held = g.lent.union(&[cpu_of_1].into_iter().collect());
        assert!(matches!(p.check(&m, &specs), Err(Violation::NotHeld(..))));

        let mut p = plan;
        p.cells.remove(&id2);
        assert_eq!(p.check(&m, &specs), Err(Violation::Missing(id2)));
    }
}
