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
use crate::{info, warn};
use allot_enforce::Partitioning;
use allot_enforce::isolate::{self, Report, Saved, SysFiles};
use allot_topo::CpuSet;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The broker's isolation state.
#[derive(Debug)]
pub(crate) struct Isolation {
    /// The interrupt and workqueue mover (`isolate`).
    on: bool,
    /// Exclusive cells made kernel partitions (`partitions`).
    partitions: bool,
    files: SysFiles,
    path: PathBuf,
    saved: Saved,
    clear: CpuSet,
    /// Exclusive cells the kernel isolates as partitions, over these CPUs.
    partitioned: BTreeMap<u64, CpuSet>,
    /// Partitions tried and not made, with why (the backend, the kernel
    /// or the layout), not tried again until the cell's CPUs change.
    refused: BTreeMap<u64, (CpuSet, String)>,
    /// Whether the operator was told that this machine makes no
    /// partitions (said once, then per cell at `info`).
    told_unavailable: bool,
}

impl Isolation {
    /// Whether exclusive cells are made kernel partitions (`partitions`
    /// in the configuration, on by default whether or not the mover is).
    pub(crate) fn with_partitions(mut self, partitions: bool) -> Isolation {
        self.partitions = partitions;
        self
    }

    /// Isolation under `root` (`/` on the machine), its saved values in
    /// `state_dir`; restores what a previous run left saved.
    pub(crate) fn new(on: bool, root: PathBuf, state_dir: &std::path::Path) -> Isolation {
        let mut i = Isolation {
            on,
            partitions: on,
            files: SysFiles::new(root),
            path: isolate::saved_path(state_dir),
            saved: Saved::default(),
            clear: CpuSet::default(),
            partitioned: BTreeMap::new(),
            refused: BTreeMap::new(),
            told_unavailable: false,
        };
        match std::fs::read_to_string(&i.path) {
            Ok(text) => match serde_json::from_str::<Saved>(&text) {
                Ok(saved) => {
                    i.saved = saved;
                    info!(
                        "restoring interrupt and workqueue affinities a previous broker changed ({})",
                        i.path.display()
                    );
                    i.restore();
                }
                Err(e) => warn!(
                    "{}: unreadable ({e}); the affinities it saved are not restored",
                    i.path.display()
                ),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!("{}: {e}", i.path.display()),
        }
        i
    }

    fn log(what: &str, r: &Report) {
        for (file, why) in &r.failed {
            warn!("{what}: {file}: {why}");
        }
    }

    fn persist(&self) {
        let result = if self.saved.is_empty() {
            match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        } else {
            serde_json::to_string(&self.saved)
                .map_err(std::io::Error::other)
                .and_then(|t| {
                    let tmp = self.path.with_extension("json.tmp");
                    std::fs::write(&tmp, t)?;
                    std::fs::rename(&tmp, &self.path)
                })
        };
        if let Err(e) = result {
            warn!(
                "cannot keep the saved affinities in {}: {e} (a killed broker could not restore them)",
                self.path.display()
            );
        }
    }

    /// What became of exclusive cell `id`'s partition: `Ok` when the
    /// kernel isolates it, else why not (`None`: not asked yet; the
    /// caller asks only for exclusive cells).
    pub(crate) fn partition_of(&self, id: u64) -> Option<Result<(), String>> {
        if !self.partitions {
            return Some(Err(
                "partitions = false in the broker's configuration".to_string()
            ));
        }
        if self.partitioned.contains_key(&id) {
            return Some(Ok(()));
        }
        self.refused.get(&id).map(|(_, why)| Err(why.clone()))
    }

    /// Keeps `clear` (of a machine of CPUs `machine`) clear, if on.
    pub(crate) fn follow(&mut self, machine: &CpuSet, clear: CpuSet) {
        if !self.on || clear == self.clear {
            return;
        }
        self.clear = clear;
        if clear.is_empty() {
            self.restore();
            return;
        }
        let r = isolate::isolate(&self.files, machine, &clear, &mut self.saved);
        Self::log("isolating partition CPUs", &r);
        info!(
            "partition CPUs {clear}: {} interrupt/workqueue affinities moved off them",
            r.changed
        );
        self.persist();
    }

    /// Writes every saved value back.
    pub(crate) fn restore(&mut self) {
        if self.saved.is_empty() {
            return;
        }
        let r = isolate::restore(&self.files, &mut self.saved);
        Self::log("restoring affinities", &r);
        self.clear = CpuSet::default();
        self.persist();
    }
}

impl Engine {
    /// Whether exclusive cells are made kernel partitions
    /// (`partitions` in the configuration).
    pub(crate) fn partitions_on(&self) -> bool {
        self.isolation.partitions
    }

    /// What became of exclusive cell `id`'s partition
    /// ([`Isolation::partition_of`]).
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
        if self.isolation.partitions {
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
        let iso = &mut self.isolation;
        let gone: Vec<u64> = iso
            .partitioned
            .keys()
            .filter(|id| !want.contains_key(id))
            .copied()
            .collect();
        for id in gone {
            iso.partitioned.remove(&id);
            if self.cells.contains_key(&id) {
                let _ = self.enforcer.set_partition(id, None);
            }
        }
        iso.refused
            .retain(|id, (cpus, _)| want.get(id) == Some(cpus));
        for (&id, &cpus) in want {
            if iso.partitioned.get(&id) == Some(&cpus) || iso.refused.contains_key(&id) {
                continue;
            }
            iso.partitioned.remove(&id);
            let why = match self.enforcer.set_partition(id, Some(cpus)) {
                Ok(Partitioning::Isolated) => {
                    info!("cell {id}: CPUs {cpus} are an isolated cpuset partition");
                    if let Some(c) = self.cells.get_mut(&id) {
                        c.timeline
                            .note("partition", format!("isolated over CPUs {cpus}"), None);
                    }
                    iso.partitioned.insert(id, cpus);
                    continue;
                }
                Ok(Partitioning::Plain) => "the backend left it a plain cell".to_string(),
                Ok(Partitioning::Unavailable(why)) => {
                    if !iso.told_unavailable {
                        iso.told_unavailable = true;
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
            iso.refused.insert(id, (cpus, why));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_broker_s_saved_values_are_restored_by_the_next() {
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let irq = root.path().join("proc/irq/5");
        std::fs::create_dir_all(&irq).unwrap();
        std::fs::write(irq.join("smp_affinity_list"), "0-3").unwrap();
        let all = CpuSet::parse_list("0-3").unwrap();
        let mut i = Isolation::new(true, root.path().into(), state.path());
        i.follow(&all, CpuSet::parse_list("3").unwrap());
        let read = || std::fs::read_to_string(irq.join("smp_affinity_list")).unwrap();
        assert_eq!(read(), "0-2");
        assert!(isolate::saved_path(state.path()).exists());
        // Killed: no restore. The next broker restores at start.
        drop(i);
        let i = Isolation::new(true, root.path().into(), state.path());
        assert_eq!(read(), "0-3");
        assert!(!isolate::saved_path(state.path()).exists());
        drop(i);
        // Off: nothing is touched.
        let mut off = Isolation::new(false, root.path().into(), state.path());
        off.follow(&all, CpuSet::parse_list("3").unwrap());
        assert_eq!(read(), "0-3");
        // On, then no partition left: restored.
        let mut on = Isolation::new(true, root.path().into(), state.path());
        on.follow(&all, CpuSet::parse_list("2-3").unwrap());
        assert_eq!(read(), "0-1");
        on.follow(&all, CpuSet::default());
        assert_eq!(read(), "0-3");
        assert!(!isolate::saved_path(state.path()).exists());
    }
}
