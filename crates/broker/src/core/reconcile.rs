//! Re-planning: the pipeline every entry point of the core runs before it
//! returns (see the module notes of `core`): plan from the cells (and
//! what `require` holds in them, `account`), fit best-effort teams to
//! what work outside the cells leaves them and weigh the cells
//! (`outside`), make the windows follow the plan's phases, shrink every
//! changed cell to what it keeps and then grow it, give every other cell
//! whose weight moved its new weight, publish every changed page, journal
//! the changed CPU sets.

use super::kernel::{CpuChange, CpuPasses};
use super::{Engine, account};
use crate::journal::Record;
use crate::log::{debug, warn};
use crate::names::shown;
use crate::timeline::timed;
use allot_plan::weight::Weights;
use allot_plan::{Allotment, CellInput, Plan};
use allot_proto::FLAG_STACKED;
use allot_spec::CellId;

impl Engine {
    pub(super) fn page_grant(&self, id: u64, generation: u64, g: &Allotment) -> allot_proto::Grant {
        allot_proto::Grant {
            cell: id,
            generation,
            instance: self.instance,
            threads: g.threads,
            flags: if g.stacked { FLAG_STACKED } else { 0 },
            home: g.home,
            entitled: g.entitled.len() as u32,
            share_milli: (g.share * 1000.0).round() as u32,
            window: self.windows.window(id).unwrap_or_default(),
            cpus: g.cpus,
            lent: g.lent,
        }
    }

    /// Re-plans and makes the kernel and the pages follow. Returns whether
    /// any grant changed.
    pub(super) fn reconcile(&mut self) -> bool {
        let inputs = self.plan_inputs();
        let mut next = self
            .planner
            .plan_loaded(&inputs, &self.plan, self.unmanaged_cpus());
        debug_assert_eq!(
            next.check(
                self.machine,
                &inputs.iter().map(|c| (c.id, c.spec)).collect::<Vec<_>>()
            ),
            Ok(())
        );
        // Teams leave outside work the CPUs it holds; then every cell is
        // weighed, by its team or its share of the pool (`outside`).
        let specs: std::collections::BTreeMap<CellId, allot_spec::CellSpec> =
            inputs.iter().map(|c| (c.id, c.spec)).collect();
        self.fit_teams(&mut next, &specs);
        let weights = self.weigh(&next, &specs);
        // Windows follow the plan's phases before any CPU set is applied:
        // a driven cell gets no CFS cap (`applied`).
        let rewindowed: Vec<u64> = inputs
            .iter()
            .filter(|c| self.sync_windows(c.id.0, &c.spec, next.phases.get(&c.id).copied()))
            .map(|c| c.id.0)
            .collect();
        self.enforce(&next, &rewindowed, weights);
        let (mut recs, any) = self.publish(&next, &rewindowed);
        let reserve_moved = next.reserve != self.plan.reserve;
        if next.pool != self.plan.pool || reserve_moved {
            recs.push(Record::Shared {
                pool: next.pool,
                reserve: next.reserve,
            });
        }
        self.journal(&recs);
        self.plan = next;
        self.follow_isolation();
        if reserve_moved {
            self.keep_reserve();
        }
        self.keep_off_held();
        if any {
            // Processes waiting for their cell's grant try again.
            self.account.grants_changed();
        }
        any
    }

    /// What the planner is given: every planned cell (an idle
    /// message-triggered cell holds nothing; an active one is a
    /// best-effort cell, `message`), with what `require` holds in it, and
    /// the processes outside every cell that hold CPUs.
    fn plan_inputs(&self) -> Vec<CellInput> {
        self.cells
            .iter()
            .filter(|(id, _)| self.planned(**id))
            .map(|(&id, c)| CellInput {
                id: CellId(id),
                spec: if c.spec.is_message() {
                    c.spec.as_active_message()
                } else {
                    c.spec
                },
                demand: c.est.demand(),
                perf: self.hint_of(c),
                held: self.account.held().get(&id).copied().unwrap_or_default(),
            })
            .chain((!self.account.outside().is_empty()).then(|| CellInput {
                id: account::OUTSIDE,
                spec: account::Account::outside_spec(self.account.outside().len()),
                demand: None,
                perf: Default::default(),
                held: self.account.outside(),
            }))
            .collect()
    }

    /// Makes the kernel follow `next`: every cell whose CPUs change (or
    /// whose window was set anew) is shrunk to what it keeps, a cell left
    /// with none paused, then each grown, the emptied resumed
    /// ([`CpuPasses`], the order `kernel` states); cells whose CPUs stayed
    /// but whose weight moved get the new weight.
    fn enforce(&mut self, next: &Plan, rewindowed: &[u64], weights: Weights) {
        let changes: Vec<CpuChange> = next
            .cells
            .iter()
            .filter_map(|(id, g)| {
                // (`OUTSIDE` stands for processes outside every cell:
                // nothing of it is enforced or published.)
                let c = self.cells.get(&id.0)?;
                let old = c.published.as_ref().map(|p| p.cpus);
                (rewindowed.contains(&id.0) || old != Some(g.cpus)).then_some((id.0, old, g.cpus))
            })
            .collect();
        // Every cell whose CPUs change gets its new weight with them; the
        // others whose weight moved, after the growth below.
        let moved: std::collections::BTreeSet<u64> = changes.iter().map(|c| c.0).collect();
        let before = self.outside.replace_weights(weights);
        let passes = CpuPasses::of(&changes);
        for (id, keep) in passes.shrink {
            self.apply_cpus(id, keep, "shrunk to");
        }
        // A cell left with no CPU stops before another grows into its own.
        self.pause_emptied(next);
        for (id, cpus) in passes.grow {
            self.apply_cpus(id, cpus, "");
        }
        self.resume_granted(next);
        // Cells whose CPUs stayed but whose weight moved (on a backend
        // with weights: the affinity backend's apply sets affinities
        // again). A write the kernel refused is tried at the next plan.
        let reweighed: Vec<(u64, allot_topo::CpuSet)> = next
            .cells
            .iter()
            .filter(|(id, g)| {
                self.kernel.has_weights()
                    && !g.cpus.is_empty()
                    && self.cells.contains_key(&id.0)
                    && !moved.contains(&id.0)
                    && before.cells.get(id) != self.outside.weights().cells.get(id)
            })
            .map(|(id, g)| (id.0, g.cpus))
            .collect();
        for (id, cpus) in reweighed {
            let applied = self.applied(id, cpus);
            if let (Err(e), _) = self.kernel.confine(id, &applied) {
                warn!("cell {id}: {e}");
                self.outside.weight_refused(CellId(id));
            }
        }
        self.write_together();
    }

    /// Publishes every grant of `next` that changed in any field; returns
    /// the journal records of those whose CPU sets changed, and whether
    /// any was published. The planner's stability reads only those from
    /// the previous plan, and a restart's re-plan recomputes the rest.
    /// (Each newcomer moves the share, and each departure the `home`, of
    /// every stacked cell: journaling those would cost a record per cell
    /// per change, an O(cells²) journal for cells arriving one by one.)
    fn publish(&mut self, next: &Plan, rewindowed: &[u64]) -> (Vec<Record>, bool) {
        let mut recs = Vec::new();
        let mut any = false;
        for (cid, g) in &next.cells {
            let id = cid.0;
            let Some(c) = self.cells.get(&id) else {
                continue;
            };
            if c.published.as_ref() == Some(g) && !rewindowed.contains(&id) {
                continue;
            }
            // A grant whose page would read the same (its share moved by
            // less than the page's thousandth of a CPU, as every stacked
            // cell's does when one more arrives among thousands) is taken
            // without a publish: no generation, no wake-up, no journal.
            if !rewindowed.contains(&id)
                && let Some(p) = &c.published
                && self.page_grant(id, 0, p) == self.page_grant(id, 0, g)
            {
                self.cells.get_mut(&id).expect("present above").published = Some(g.clone());
                continue;
            }
            any = true;
            let placement_changed = c.published.as_ref().is_none_or(|p| {
                (p.cpus, p.lent, p.entitled, p.stacked) != (g.cpus, g.lent, g.entitled, g.stacked)
            });
            let generation = c.generation + 1;
            let pg = self.page_grant(id, generation, g);
            let c = self.cells.get_mut(&id).expect("present above");
            let ((), took) = timed(|| c.publish(&pg));
            c.timeline.note(
                "grant",
                format!(
                    "generation {generation}: CPUs {} lent {} threads {}",
                    g.cpus, g.lent, g.threads
                ),
                Some(took),
            );
            c.generation = generation;
            c.published = Some(g.clone());
            self.counters.grant_changes += 1;
            debug!(
                "cell {id} ({}) generation {generation}: CPUs {} lent {} threads {}",
                shown(&c.name),
                g.cpus,
                g.lent,
                g.threads
            );
            if placement_changed {
                recs.push(Record::Grant {
                    id,
                    grant: crate::journal::GrantRec::of(g, generation, c.est.demand()),
                });
            }
        }
        (recs, any)
    }

    /// Makes the kernel confine cell `id` to `cpus` (with the weights and
    /// caps its contract adds), timed on its timeline.
    pub(super) fn apply_cpus(&mut self, id: u64, cpus: allot_topo::CpuSet, how: &str) {
        let applied = self.applied(id, cpus);
        let (r, took) = self.kernel.confine(id, &applied);
        if let Err(e) = &r {
            warn!("cell {id}: {e}");
        }
        if let Some(c) = self.cells.get_mut(&id) {
            let sep = if how.is_empty() { "" } else { " " };
            let failed = if r.is_err() { " (failed)" } else { "" };
            c.timeline
                .note("cpuset", format!("{how}{sep}{cpus}{failed}"), Some(took));
        }
    }

    /// The system minimum: the reserve's CPUs are left whole to processes
    /// that asked for nothing (`account`).
    pub(super) fn keep_reserve(&mut self) {
        for cpu in self.plan.reserve.iter() {
            self.account.keep_cpu(cpu);
        }
    }
}
