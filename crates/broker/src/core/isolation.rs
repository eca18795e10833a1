//! Partition CPUs kept clear of the kernel's movable work, when the
//! operator turns it on (`isolate = true`): the CPUs of exclusive cells
//! get no movable interrupts and no unbound workqueue work
//! (`allot_enforce::isolate`, the mechanism). Off by default: it changes
//! the whole machine, so tests and shared machines never see it unless
//! asked.
//!
//! Apart from that setting (`partitions = true`, the default: it changes
//! only allot's own cgroups), each exclusive cell on cgroup v2 is made a
//! cpuset partition the kernel isolates (`Enforcer::set_partition`,
//! `allot_enforce::partition`: no load balancing across its CPUs, and no
//! process outside the cell runs there), where the kernel and the layout
//! allow; the mover keeps running for every exclusive CPU when on (the
//! kernel's partitions leave interrupts where they are), and is all there
//! is where no partition could be made.
//!
//! Protocol: after every plan, the CPUs to keep clear are the union of
//! the exclusive cells' grants. When that set changes, isolation runs
//! again (saving each file's first value); when it becomes empty, every
//! saved value is written back. The saved values live in
//! `<state dir>/isolation.json` as soon as they exist, so a broker that is
//! killed leaves them for the next one, which restores them when it
//! starts (and isolates again for the exclusive cells it adopts). A clean
//! exit restores them too.

use super::Engine;
use crate::log::{info, warn};
use allot_enforce::Partitioning;
use allot_topo::CpuSet;
use std::collections::BTreeMap;

impl Engine {
    /// Whether exclusive cells are made kernel partitions
    /// (`partitions` in the configuration).
    pub(crate) fn partitions_on(&self) -> bool {
        self.isolation.partitions()
    }

    /// What became of exclusive cell `id`'s partition
    /// (`Isolation::partition_of`).
    pub(crate) fn partition_of(&self, id: u64) -> Option<Result<(), String>> {
        self.isolation.partition_of(id)
    }

    /// The exclusive cells' CPUs of the current plan kept clear (if on):
    /// partitions where the kernel makes them, the mover for all.
    pub(super) fn follow_isolation(&mut self) {
        let exclusive: BTreeMap<u64, CpuSet> = self
            .plan
            .cells
            .iter()
            .filter(|(id, _)| self.cells.get(&id.0).is_some_and(|c| c.spec.exclusive))
            .map(|(id, g)| (id.0, g.cpus))
            .collect();
        if self.isolation.partitions() {
            self.follow_partitions(&exclusive);
        }
        let clear = exclusive
            .values()
            .fold(CpuSet::default(), |acc, c| acc.union(c));
        let machine = *self.machine.usable();
        self.isolation.follow(&machine, clear);
    }

    /// Makes each exclusive cell of `want` a kernel partition over its
    /// CPUs, and those no longer exclusive plain cells again.
    fn follow_partitions(&mut self, want: &BTreeMap<u64, CpuSet>) {
        for id in self.isolation.forget_unwanted(want) {
            if self.cells.contains_key(&id) {
                let _ = self.kernel.set_partition(id, None);
            }
        }
        for (&id, &cpus) in want {
            if self.isolation.settled(id, cpus) {
                continue;
            }
            self.isolation.unpartition(id);
            let why = match self.kernel.set_partition(id, Some(cpus)) {
                Ok(Partitioning::Isolated) => {
                    info!("cell {id}: CPUs {cpus} are an isolated cpuset partition");
                    if let Some(c) = self.cells.get_mut(&id) {
                        c.timeline
                            .note("partition", format!("isolated over CPUs {cpus}"), None);
                    }
                    self.isolation.partitioned(id, cpus);
                    continue;
                }
                Ok(Partitioning::Plain) => "the backend left it a plain cell".to_string(),
                Ok(Partitioning::Unavailable(why)) => {
                    if self.isolation.first_unavailable() {
                        warn!(
                            "exclusive cell {id} is not a cpuset partition: {why}; it stays \
                             exclusive by its cpuset alone (said once here; allot status says \
                             so for every cell)"
                        );
                    }
                    why
                }
                Err(e) => {
                    warn!("cell {id}: no partition was made: {e}");
                    e.to_string()
                }
            };
            info!("cell {id}: exclusive on CPUs {cpus}, not a partition: {why}");
            if let Some(c) = self.cells.get_mut(&id) {
                c.timeline
                    .note("partition", format!("not a partition: {why}"), None);
            }
            self.isolation.refused(id, cpus, why);
        }
    }
}
