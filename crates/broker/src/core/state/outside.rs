//! Work outside the cells as the broker keeps it between ticks
//! (`core/outside.rs` is the engine's side and has the protocol and its
//! invariants): each group's readings and the CPUs outside work holds
//! there, the weights last wanted, the weight together as written.

use allot_plan::outside::{COUNTS_FROM, Contention, Reading, seed};
use allot_plan::weight::{Weighing, Weights};
use allot_spec::CellId;
use allot_topo::CpuSet;
use std::collections::BTreeMap;
use std::time::Instant;

/// Which group of CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Key {
    /// A whole-CPU cell's grant (less the time region).
    Cell(u64),
    /// The stacked pool.
    Pool,
}

/// What is known of one group.
#[derive(Debug, Clone, Default)]
pub(crate) struct Group {
    /// Its CPUs when last read.
    cpus: CpuSet,
    /// Whether its cells are all best effort (their teams may shrink).
    shrinks: bool,
    contention: Contention,
    /// Its cells' threads' waiting so far (ns), as last read.
    waited_ns: Option<u64>,
    /// The last reading.
    last: Reading,
}

impl Group {
    /// The CPUs outside work holds of the group's that its team could
    /// leave it (all but one).
    pub(crate) fn taken(&self) -> u32 {
        self.contention.taken(self.cpus.len() as u32)
    }

    /// The CPUs its team leaves to outside work now: none where a
    /// guaranteed cell runs.
    pub(crate) fn leaves(&self) -> u32 {
        if self.shrinks { self.taken() } else { 0 }
    }

    /// The last reading.
    pub(crate) fn last(&self) -> Reading {
        self.last
    }
}

/// Work outside the cells, as the broker keeps it between ticks.
#[derive(Debug, Default)]
pub(crate) struct Outside {
    /// How the cells weigh against it (the `weigh` setting).
    weighing: Weighing,
    /// The weights the kernel was last asked for.
    weights: Weights,
    /// The directory's weight as last written.
    together: Option<u32>,
    /// A weight the kernel refused (not tried again until it changes).
    together_refused: Option<u32>,
    /// The backend said the directory's weight is not allot's.
    together_not_ours: bool,
    /// The machine's per-CPU busy time at the last tick.
    busy: Option<(Instant, Vec<u64>)>,
    /// Each cell's CPU time at the last tick.
    used: BTreeMap<u64, u64>,
    /// Every group read at the last tick.
    groups: BTreeMap<Key, Group>,
}

impl Outside {
    /// Nothing read yet; cells weighed `weighing`.
    pub(crate) fn new(weighing: Weighing) -> Outside {
        Outside {
            weighing,
            ..Default::default()
        }
    }

    /// The group cell `id` runs in, given its grant.
    pub(crate) fn group_of(&self, id: u64, stacked: bool) -> Option<&Group> {
        self.groups
            .get(&if stacked { Key::Pool } else { Key::Cell(id) })
    }
}

impl Outside {
    /// How the cells weigh against outside work.
    pub(crate) fn weighing(&self) -> Weighing {
        self.weighing
    }

    /// The weights the kernel was last asked for.
    pub(crate) fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The weights wanted now, in place of the last (returned).
    pub(in crate::core) fn replace_weights(&mut self, weights: Weights) -> Weights {
        std::mem::replace(&mut self.weights, weights)
    }

    /// Cell `id`'s weight was refused by the kernel: tried at the next
    /// plan.
    pub(in crate::core) fn weight_refused(&mut self, id: CellId) {
        self.weights.cells.remove(&id);
    }

    /// The cells' weight together as the kernel has it (`None`: not
    /// allot's to set, or never written).
    pub(in crate::core) fn together(&self) -> Option<u32> {
        (!self.together_not_ours).then_some(self.together).flatten()
    }

    /// The weight together to write now, if it changed, is allot's, and
    /// was not refused as it is.
    pub(in crate::core) fn together_due(&self) -> Option<u32> {
        let w = self.weights.together;
        let skip =
            self.together_not_ours || self.together == Some(w) || self.together_refused == Some(w);
        (!skip).then_some(w)
    }

    /// What became of writing `w` together: written (`Some(true)`), not
    /// allot's (`Some(false)`), refused (`None`).
    pub(in crate::core) fn together_written(&mut self, w: u32, outcome: Option<bool>) {
        match outcome {
            Some(true) => {
                self.together = Some(w);
                self.together_refused = None;
            }
            Some(false) => self.together_not_ours = true,
            None => self.together_refused = Some(w),
        }
    }

    /// Whether outside work holds a CPU in any group read.
    pub(in crate::core) fn holds_any(&self) -> bool {
        self.groups.values().any(|g| g.contention.held() > 0)
    }

    /// The CPUs outside work takes of `cpus` as group `key`'s team would
    /// leave them: as read, or (CPUs not those read) what it held of them
    /// where they were read (`seed`).
    pub(in crate::core) fn taken_on(&self, key: Key, cpus: CpuSet) -> u32 {
        let held = match self.groups.get(&key) {
            Some(g) if g.cpus == cpus => g.contention.held(),
            _ => seed(
                &cpus,
                self.groups.values().map(|g| (&g.cpus, g.contention.held())),
            ),
        };
        Contention::seeded(held).taken(cpus.len() as u32)
    }

    /// Reads this tick at `now`: the machine's per-CPU busy time
    /// `per_cpu`, each cell's CPU time `usage` (`None`: unmeasurable), the
    /// groups cells run on alone (`alone`: CPUs, cells, whether all best
    /// effort) and, where outside work is seen, `waited_ns(cells)`: the
    /// time their threads waited so far. Returns whether what some
    /// best-effort team leaves to outside work changed.
    pub(in crate::core) fn observe(
        &mut self,
        now: Instant,
        per_cpu: &[u64],
        usage: &BTreeMap<u64, Option<u64>>,
        alone: BTreeMap<Key, (CpuSet, Vec<u64>, bool)>,
        mut waited_ns: impl FnMut(&[u64]) -> u64,
    ) -> bool {
        let last_busy = self.busy.replace((now, per_cpu.to_vec()));
        let last_used = std::mem::take(&mut self.used);
        self.used = usage
            .iter()
            .filter_map(|(&id, u)| Some((id, (*u)?)))
            .collect();
        let Some((then, before)) = last_busy else {
            return false;
        };
        let dt_ns = now.duration_since(then).as_nanos() as f64;
        if dt_ns <= 0.0 {
            return false;
        }
        // CPUs' worth: of busy time on `cpus`, and of CPU time used by
        // cells `ids` (`None`: some cell's is unknown), since the last tick.
        let busy_on = |cpus: &CpuSet| -> f64 {
            cpus.iter()
                .map(|c| {
                    let now = per_cpu.get(c).copied().unwrap_or(0);
                    let then = before.get(c).copied().unwrap_or(now);
                    now.saturating_sub(then) as f64
                })
                .sum::<f64>()
                / dt_ns
        };
        let used_by = |ids: &[u64]| -> Option<f64> {
            ids.iter()
                .map(|id| {
                    let now = (*usage.get(id)?)?;
                    let then = *last_used.get(id)?;
                    Some(now.saturating_sub(then) as f64 / dt_ns)
                })
                .sum()
        };
        let old = std::mem::take(&mut self.groups);
        let mut groups: BTreeMap<Key, Group> = BTreeMap::new();
        let mut changed = false;
        for (key, (cpus, ids, shrinks)) in alone {
            let was = old.get(&key).map_or(0, Group::leaves);
            // A group whose CPUs changed starts from what outside work
            // held of them where they were read before, and takes no
            // reading this tick: the time since the last one was spent
            // on the old CPUs, by other cells too.
            let mut g = match old.get(&key) {
                Some(g) if g.cpus == cpus => g.clone(),
                _ => {
                    let g = Group {
                        contention: Contention::seeded(seed(
                            &cpus,
                            old.values().map(|g| (&g.cpus, g.contention.held())),
                        )),
                        cpus,
                        shrinks,
                        ..Default::default()
                    };
                    changed |= g.leaves() != was;
                    groups.insert(key, g);
                    continue;
                }
            };
            g.shrinks = shrinks;
            if let Some(used) = used_by(&ids) {
                let outside = (busy_on(&g.cpus) - used).max(0.0);
                // The waiting matters only where outside work could hold
                // a CPU and the team could shrink for it.
                let waited = (shrinks && outside >= COUNTS_FROM).then(|| waited_ns(&ids));
                let waiting = waited
                    .zip(g.waited_ns)
                    .map(|(now, then)| now.saturating_sub(then) as f64 / dt_ns);
                g.waited_ns = waited;
                let r = Reading { outside, waiting };
                g.contention.observe(r, g.cpus.len() as u32);
                g.last = r;
            } else {
                g.waited_ns = None;
            }
            changed |= g.leaves() != was;
            groups.insert(key, g);
        }
        // A team that left CPUs to outside work in a group now gone has
        // other CPUs, or is gone.
        changed |= old
            .iter()
            .any(|(k, g)| !groups.contains_key(k) && g.leaves() > 0);
        self.groups = groups;
        changed
    }
}
