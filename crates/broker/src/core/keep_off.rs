//! The one account inside a cell: a CPU one of the cell's processes holds
//! exclusively through `require` is kept off by the cell's *other*
//! processes too (a cpuset is per cell, so the plan alone cannot).
//!
//! Every thread of a process of such a cell that holds none of those CPUs
//! and may run on one of them loses them from its affinity (keeping the
//! rest of its own mask, so a thread the program pinned elsewhere is not
//! touched; one left with nothing gets the grant minus the held CPUs).
//! Children inherit it. The holders' threads are left alone: their
//! `require` blocks set their own. Processes narrowed this way are
//! remembered per cell and get the whole grant back when they become
//! holders or the cell holds nothing any more.
//!
//! Where a cpuset confines the cell (the cgroup backends), "the grant" in
//! a mask means every CPU, the cpuset doing the rest: the kernel (Linux
//! 6.2 and later) keeps the mask a thread was given through every later
//! cpuset change, so a thread given the grant of the moment would never
//! grow with its cell. A thread that follows the cell (its mask covers
//! the grant) is narrowed to every CPU but the held ones for the same
//! reason.
//!
//! The cells concerned are checked on every reconcile and every tick (a
//! process may join a cell, and on kernels before 6.2 a cpuset rewrite
//! resets the affinities of its tasks): only cells holding CPUs, or that
//! held some at the last look, cost anything.

use super::Engine;
use allot_spec::CellId;
use allot_topo::CpuSet;
use std::collections::{BTreeMap, BTreeSet};

impl Engine {
    /// Keeps the cells' non-holding processes off the CPUs held in them
    /// (see the module notes).
    pub(crate) fn keep_off_held(&mut self) {
        let held = self.account.held().clone();
        let cells: BTreeSet<u64> = held.keys().copied().chain(self.kept_off.cells()).collect();
        if cells.is_empty() {
            return;
        }
        let holders: BTreeMap<usize, BTreeSet<u32>> = self.account.ledger().exclusive_cpus();
        let mut kept_off = BTreeMap::new();
        for cell in cells {
            let mut narrowed = self.kept_off.take_narrowed(cell);
            let Some(grant) = self.plan.cells.get(&CellId(cell)).map(|g| g.cpus) else {
                continue; // ended: its processes left with it
            };
            let mine = held.get(&cell).copied().unwrap_or_default();
            let holding: BTreeSet<u32> = mine
                .iter()
                .filter_map(|c| holders.get(&c))
                .flatten()
                .copied()
                .collect();
            // What "the whole grant" is in a mask (module notes).
            let whole = if self.kernel.cpuset_confines() {
                CpuSet::first_n(allot_topo::MAX_CPUS)
            } else {
                grant
            };
            for pid in self.kernel.pids(cell) {
                if mine.is_empty() || holding.contains(&pid) {
                    if narrowed.remove(&pid) {
                        self.widen(pid, &whole);
                    }
                } else if self.narrow(pid, &mine, &grant, &whole) {
                    narrowed.insert(pid);
                }
            }
            if !mine.is_empty() {
                kept_off.insert(cell, mine);
                self.kept_off.keep(cell, narrowed);
            }
        }
        self.kept_off.set_cpus(kept_off);
    }

    /// Takes `held` out of the affinity of every thread of `pid` that has
    /// any of it: a thread that follows the cell (its mask covers `grant`)
    /// gets `whole` minus `held`, one the program narrowed keeps the rest
    /// of its own mask (or gets `whole` minus `held` if nothing is left).
    /// Returns whether this narrowed any (a process narrowed before stays
    /// in its cell's set either way).
    fn narrow(&self, pid: u32, held: &CpuSet, grant: &CpuSet, whole: &CpuSet) -> bool {
        let mut any = false;
        for tid in self.os.threads(pid).unwrap_or_default() {
            let Ok(mask) = self.os.affinity(tid) else {
                continue; // exited meanwhile
            };
            if !mask.intersects(held) {
                continue;
            }
            let mut to = mask.difference(held);
            if to.is_empty() || grant.is_subset(&mask) {
                to = whole.difference(held);
            }
            if !to.is_empty() && self.os.set_affinity(tid, &to).is_ok() {
                any = true;
            }
        }
        any
    }

    /// Every thread of `pid` back on the whole grant (`whole`).
    fn widen(&self, pid: u32, whole: &CpuSet) {
        for tid in self.os.threads(pid).unwrap_or_default() {
            // A thread that exited meanwhile is not an error.
            let _ = self.os.set_affinity(tid, whole);
        }
    }
}
