//! The one account inside a cell: a CPU one of the cell's processes holds
//! exclusively through `require` is kept off by the cell's *other*
//! processes too (a cpuset is per cell, so the plan alone cannot).
//!
//! Every thread of every process of such a cell that holds none of those
//! CPUs gets the affinity *grant minus held* (its children inherit it);
//! the holders keep the whole grant (their `require` blocks set their own
//! threads). When the cell holds nothing any more, or its grant changes,
//! the affinities follow: back to the whole grant, or to the new
//! difference. A cell whose grant is nothing but held CPUs leaves its
//! other processes on the grant rather than on no CPU.
//!
//! The cells concerned are checked on every reconcile and every tick (a
//! process may join a cell, and a cgroup v1 cpuset rewrite resets the
//! affinities of its tasks): only cells holding CPUs, or that held some at
//! the last look, cost anything.

use super::Core;
use allot_plan::CellId;
use allot_topo::CpuSet;
use std::collections::{BTreeMap, BTreeSet};

impl Core {
    /// Brings the affinities of the cells' non-holding processes to their
    /// grant minus the CPUs held in them (see the module notes).
    pub(crate) fn keep_off_held(&mut self) {
        let held = self.account.held.clone();
        let cells: BTreeSet<u64> = held
            .keys()
            .chain(self.account.kept_off.keys())
            .copied()
            .collect();
        if cells.is_empty() {
            return;
        }
        let holders: BTreeMap<usize, BTreeSet<u32>> = self.ledger.exclusive_cpus();

        let mut kept_off = BTreeMap::new();
        for cell in cells {
            let Some(grant) = self.plan.cells.get(&CellId(cell)).map(|g| g.cpus) else {
                continue; // ended
            };
            let mine = held.get(&cell).copied().unwrap_or_default();
            let rest = grant.difference(&mine);
            let target = if rest.is_empty() { grant } else { rest };
            // Processes holding one of the cell's held CPUs keep the grant.
            let holding: BTreeSet<u32> = mine
                .iter()
                .filter_map(|c| holders.get(&c))
                .flatten()
                .copied()
                .collect();
            for pid in self.enforcer.pids(cell) {
                let want = if holding.contains(&pid) {
                    grant
                } else {
                    target
                };
                self.set_process_affinity(pid, &want);
            }
            if !mine.is_empty() {
                kept_off.insert(cell, mine);
            }
        }
        self.account.kept_off = kept_off;
    }

    /// Sets every thread of `pid` that is not already on `cpus`.
    fn set_process_affinity(&self, pid: u32, cpus: &CpuSet) {
        for tid in self.os.threads(pid).unwrap_or_default() {
            if self.os.affinity(tid).ok().as_ref() != Some(cpus) {
                // A thread that exited meanwhile is not an error.
                let _ = self.os.set_affinity(tid, cpus);
            }
        }
    }
}
