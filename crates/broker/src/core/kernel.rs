//! The engine's one door to the machine. [`Kernel`] owns the backend
//! ([`allot_enforce::Enforcer`]: cgroups v1 or v2, affinity, or the dry
//! run), and every write the engine makes to the machine is one of its
//! methods below, so a reader finds each effect on the machine, and the
//! order such effects keep, in this file. The decisions stay where they
//! are made (the engine's side of each subsystem); what they may write,
//! and when, is said here.
//!
//! # Order
//!
//! - A cell's groups exist ([`Kernel::create`], or [`Kernel::make_ahead`]
//!   between turns) before any process joins them ([`Kernel::attach`], or
//!   the process itself through [`Kernel::join_files`]), and its CPUs are
//!   written ([`Kernel::confine`]) before the newcomer is answered and
//!   runs.
//! - A new plan's CPU sets are written in the passes [`CpuPasses::of`]
//!   lists (pure): first every cell whose set changes shrinks to what it
//!   keeps, then the cells the plan leaves with none are paused, then
//!   each grows, and the emptied are resumed. So a CPU another cell gains
//!   has already left every cell that keeps some of its CPUs, and a
//!   paused cell stops before another grows into its CPUs. (A cell that
//!   keeps none of its CPUs but gets others is written once, in the
//!   growth: a cpuset cannot be empty.) Cells whose set stayed but whose
//!   weight moved come after the growth, the weight of the cells together
//!   last (`reconcile.rs`, `Engine::enforce`).
//! - A cell's groups go ([`Kernel::remove`]) only once its last process
//!   ended; the broker's own directories ([`Kernel::cleanup`]) only at its
//!   exit with no cell left.
//!
//! Freezing and thawing are not calls here: [`Kernel::gate`] hands out a
//! gate (an open freezer file) that the pause, message and time-cell
//! states and the window driver's thread hold and write, because the
//! window driver opens and closes windows on a thread of its own, at
//! real-time priority, without the engine.
//!
//! Reads (usage, pids, memory use, pressure, what the backend can do)
//! come after the writes, apart.

use crate::timeline::timed;
use allot_enforce::{Applied, BackendKind, Enforcer, Gate, IoWeights, Partitioning, Result};
use allot_spec::MemoryUse;
use allot_topo::CpuSet;
use std::path::Path;
use std::time::Duration;

/// The backend, behind the engine's one door to it.
#[derive(Debug)]
pub(crate) struct Kernel {
    backend: Box<dyn Enforcer>,
}

impl Kernel {
    pub(super) fn new(backend: Box<dyn Enforcer>) -> Kernel {
        Kernel { backend }
    }

    // ---- writes -------------------------------------------------------

    /// Makes cell `cell`'s groups (or takes those made ahead for it); an
    /// `exclusive` cell's where the kernel can make it a partition.
    pub(super) fn create(&mut self, cell: u64, exclusive: bool) -> Result<()> {
        if exclusive {
            self.backend.create_exclusive(cell)
        } else {
            self.backend.create(cell)
        }
    }

    /// Makes the groups of the id handed out next, off a registration's
    /// path; whether they are ready.
    pub(super) fn make_ahead(&mut self, cell: u64) -> Result<bool> {
        self.backend.make_ahead(cell)
    }

    /// Moves process `pid` into cell `cell` (by pid: on cgroups the
    /// kernel's global lock, after a quiet spell an RCU grace period), and
    /// how long that took.
    pub(super) fn attach(&mut self, cell: u64, pid: u32) -> (Result<()>, Duration) {
        timed(|| self.backend.attach(cell, pid))
    }

    /// Confines cell `cell` to what `applied` says (its CPUs, with the
    /// weight and caps its contract adds), and how long that took.
    pub(super) fn confine(&mut self, cell: u64, applied: &Applied) -> (Result<()>, Duration) {
        timed(|| self.backend.apply(cell, applied))
    }

    /// The weight of every cell together against what runs beside them;
    /// `Ok(false)`: not allot's to set here.
    pub(super) fn set_together_weight(&mut self, weight: u32) -> Result<bool> {
        self.backend.set_together_weight(weight)
    }

    /// Cell `cell`'s weight on each block device; `Ok(false)`: no I/O
    /// control.
    pub(super) fn set_io_weights(&mut self, cell: u64, weights: &IoWeights) -> Result<bool> {
        self.backend.set_io_weights(cell, weights)
    }

    /// Makes cell `cell` a partition of `cpus`, or (`None`) an ordinary
    /// cell again.
    pub(super) fn set_partition(
        &mut self,
        cell: u64,
        cpus: Option<CpuSet>,
    ) -> Result<Partitioning> {
        self.backend.set_partition(cell, cpus)
    }

    /// Cell `cell`'s memory guarantee and limit; `Ok(false)`: no memory
    /// control.
    pub(super) fn set_memory(&mut self, cell: u64, m: &allot_spec::Memory) -> Result<bool> {
        self.backend.set_memory(cell, m)
    }

    /// Puts the cgroup `dir` (a launcher's: Slurm's step, a service's)
    /// under cell `cell`'s CPUs; `Ok(false)`: this backend cannot.
    pub(super) fn include_group(&mut self, cell: u64, dir: &Path) -> Result<bool> {
        self.backend.include_group(cell, dir)
    }

    /// Tears cell `cell`'s groups down (its last process ended).
    pub(super) fn remove(&mut self, cell: u64) -> Result<()> {
        self.backend.remove(cell)
    }

    /// Removes what the backend keeps for allot (the broker's exit, no
    /// cell left).
    pub(super) fn cleanup(&mut self) -> Result<()> {
        self.backend.cleanup()
    }

    // ---- handles: nothing written now ---------------------------------

    /// Takes back cell `cell` after a restart with its processes, writing
    /// nothing; the CPUs it is confined to now, where the backend can tell.
    pub(super) fn adopt(&mut self, cell: u64, members: &[u32]) -> Result<Option<CpuSet>> {
        self.backend.adopt(cell, members)
    }

    /// Files through which process `pid` moves itself into cell `cell`.
    pub(super) fn join_files(&mut self, cell: u64, pid: u32) -> Result<Vec<std::fs::File>> {
        self.backend.join_files(cell, pid)
    }

    /// A gate of cell `cell` (its freezer), for whoever pauses it.
    pub(super) fn gate(&mut self, cell: u64) -> Result<Option<Box<dyn Gate>>> {
        self.backend.gate(cell)
    }

    // ---- reads --------------------------------------------------------

    /// Which backend this is.
    pub(super) fn kind(&self) -> BackendKind {
        self.backend.kind()
    }

    /// Whether a weight alone reaches the kernel.
    pub(super) fn has_weights(&self) -> bool {
        self.backend.has_weights()
    }

    /// Whether cells' CPUs reach their threads through cpusets
    /// (`Enforcer::cpuset_confines`).
    pub(super) fn cpuset_confines(&self) -> bool {
        self.backend.cpuset_confines()
    }

    /// The largest weight a cell or the cells together can get.
    pub(super) fn max_weight(&self) -> u32 {
        self.backend.max_weight()
    }

    /// Whether the backend can pause a cell (a freezer).
    pub(super) fn can_pause(&self) -> bool {
        self.backend.can_pause()
    }

    /// The id whose groups were made ahead and not taken yet.
    pub(super) fn made_ahead(&self) -> Option<u64> {
        self.backend.made_ahead()
    }

    /// Why process `pid` may not be moved into a cell for uid `uid`.
    pub(super) fn confined_elsewhere(&self, pid: u32, uid: u32) -> Option<String> {
        self.backend.confined_elsewhere(pid, uid)
    }

    /// Cell `cell`'s processes' CPU time, ns.
    pub(super) fn usage_ns(&mut self, cell: u64) -> Option<u64> {
        self.backend.usage_ns(cell)
    }

    /// How long some runnable thread of cell `cell` waited for a CPU, µs.
    pub(super) fn cpu_pressure_us(&mut self, cell: u64) -> Option<u64> {
        self.backend.cpu_pressure_us(cell)
    }

    /// The processes in cell `cell` now.
    pub(super) fn pids(&mut self, cell: u64) -> Vec<u32> {
        self.backend.pids(cell)
    }

    /// The cells the backend holds, tracked or not.
    pub(super) fn existing(&mut self) -> Vec<u64> {
        self.backend.existing()
    }

    /// What cell `cell`'s processes use of memory now.
    pub(super) fn memory_use(&mut self, cell: u64) -> Option<MemoryUse> {
        self.backend.memory_use(cell)
    }

    /// The memory the cells may share, bytes.
    pub(super) fn memory_capacity(&mut self) -> Option<u64> {
        self.backend.memory_capacity()
    }
}

/// A cell's CPUs before and after a plan: `(cell, published, next)`.
pub(super) type CpuChange = (u64, Option<CpuSet>, CpuSet);

/// The CPU-set writes of one new plan, in the order they are made (see
/// the module's "Order"): first `shrink`, then (after pausing the cells
/// left with none) `grow`. Pure.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct CpuPasses {
    /// Cells whose set loses CPUs, each to the CPUs it keeps (a cell
    /// keeping none is paused instead, and one keeping all of them is
    /// left for the growth).
    pub shrink: Vec<(u64, CpuSet)>,
    /// Every changed cell with CPUs in the plan, to its new set (an empty
    /// set is a paused cell's).
    pub grow: Vec<(u64, CpuSet)>,
}

impl CpuPasses {
    /// The passes of `changes` (the cells whose CPUs change, or whose
    /// window was set anew), in the order given.
    pub(super) fn of(changes: &[CpuChange]) -> CpuPasses {
        let shrink = changes
            .iter()
            .filter_map(|&(id, old, new)| {
                let old = old?;
                let keep = old.intersection(&new);
                (!keep.is_empty() && keep != old).then_some((id, keep))
            })
            .collect();
        let grow = changes
            .iter()
            .filter(|(_, _, new)| !new.is_empty())
            .map(|&(id, _, new)| (id, new))
            .collect();
        CpuPasses { shrink, grow }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    #[test]
    fn a_cell_shrinks_to_what_it_keeps_before_any_grows() {
        // Cell 1 gives CPUs 2-3 to cell 2; cell 3 moves wholly (keeps
        // nothing: it is paused or simply grown); cell 4 only grows; cell
        // 5 is new; cell 6 goes to no CPU (paused).
        let p = CpuPasses::of(&[
            (1, Some(set("0-3")), set("0-1")),
            (2, Some(set("4-5")), set("2-5")),
            (3, Some(set("6")), set("7")),
            (4, Some(set("8")), set("8-9")),
            (5, None, set("10")),
            (6, Some(set("11")), CpuSet::new()),
        ]);
        assert_eq!(p.shrink, vec![(1, set("0-1"))]);
        assert_eq!(
            p.grow,
            vec![
                (1, set("0-1")),
                (2, set("2-5")),
                (3, set("7")),
                (4, set("8-9")),
                (5, set("10")),
            ]
        );
    }
}
