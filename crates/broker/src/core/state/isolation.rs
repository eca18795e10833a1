//! Isolation's state (`core/isolation.rs` is the engine's side and has
//! the protocol): the mover's saved values, and which exclusive cells are
//! kernel partitions or were refused one.

use crate::log::{info, warn};
use allot_enforce::isolate::{self, Report, Saved, SysFiles};
use allot_topo::CpuSet;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The broker's isolation state.
#[derive(Debug)]
pub(in crate::core) struct Isolation {
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

impl Isolation {
    /// Whether exclusive cells are made kernel partitions.
    pub(in crate::core) fn partitions(&self) -> bool {
        self.partitions
    }

    /// Forgets the partitions of cells not in `want` (no longer
    /// exclusive, or ended), and the refusals of cells whose CPUs
    /// changed; returns the cells whose partition was forgotten.
    pub(in crate::core) fn forget_unwanted(&mut self, want: &BTreeMap<u64, CpuSet>) -> Vec<u64> {
        let gone: Vec<u64> = self
            .partitioned
            .keys()
            .filter(|id| !want.contains_key(id))
            .copied()
            .collect();
        for id in &gone {
            self.partitioned.remove(id);
        }
        self.refused
            .retain(|id, (cpus, _)| want.get(id) == Some(cpus));
        gone
    }

    /// Whether cell `id`'s partition over `cpus` was made, or refused,
    /// already (nothing to try).
    pub(in crate::core) fn settled(&self, id: u64, cpus: CpuSet) -> bool {
        self.partitioned.get(&id) == Some(&cpus) || self.refused.contains_key(&id)
    }

    /// Cell `id`'s partition is being made anew (its CPUs changed).
    pub(in crate::core) fn unpartition(&mut self, id: u64) {
        self.partitioned.remove(&id);
    }

    /// Cell `id` is a kernel partition over `cpus`.
    pub(in crate::core) fn partitioned(&mut self, id: u64, cpus: CpuSet) {
        self.partitioned.insert(id, cpus);
    }

    /// Cell `id`'s partition over `cpus` was not made, for `why`.
    pub(in crate::core) fn refused(&mut self, id: u64, cpus: CpuSet, why: String) {
        self.refused.insert(id, (cpus, why));
    }

    /// Whether the machine's lack of partitions is to be told now (once).
    pub(in crate::core) fn first_unavailable(&mut self) -> bool {
        !std::mem::replace(&mut self.told_unavailable, true)
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
