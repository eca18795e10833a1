//! cgroup v2 cpuset partitions: the kernel itself keeps an exclusive
//! cell's CPUs apart — no load balancing across them, no unbound work on
//! them — when the cell's cgroup is an *isolated partition*
//! (`cpuset.cpus.partition` = `isolated`).
//!
//! allot's root directory is not a partition root (that would take every
//! usable CPU from the rest of the machine), so a cell is a *remote*
//! partition (kernel 6.7 and later): its CPUs must be listed in
//! `cpuset.cpus.exclusive` of every ancestor below the hierarchy's root.
//! allot writes only its own: the root's and the cell's. So partitions are
//! made only where allot's root is a child of the hierarchy's root; under
//! a systemd-delegated subtree the ancestors are systemd's, and the
//! broker's interrupt and workqueue mover (`crate::isolate`) is all there
//! is.
//!
//! Order (undone in reverse): the root's `cpuset.cpus.exclusive` becomes
//! the union of every partitioned cell's CPUs, then the cell's
//! `cpuset.cpus.exclusive` its CPUs, then its partition file `isolated`.
//! The kernel answers in the partition file: `isolated` when it took the
//! partition, `isolated invalid (why)` when not; then everything is undone
//! and the reason returned. Nothing is left half-done.

use crate::cgroupfs::CgroupFs;
use allot_topo::CpuSet;
use std::collections::BTreeMap;
use std::path::Path;

/// What the kernel's partition file says, as a result: `Ok` for a valid
/// isolated partition, else why not.
pub fn read_state(text: &str) -> Result<(), String> {
    let t = text.trim();
    match t {
        "isolated" => Ok(()),
        _ => Err(match t.strip_prefix("isolated invalid") {
            Some(why) => why
                .trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .to_string(),
            None => format!("the partition is {t:?}, not isolated"),
        }),
    }
}

/// The cells made partitions, and their CPUs.
#[derive(Debug, Default)]
pub struct Partitions {
    cells: BTreeMap<u64, CpuSet>,
}

impl Partitions {
    /// Why partitions cannot be made under `root` (allot's directory),
    /// if they cannot: a kernel without `cpuset.cpus.exclusive` (before
    /// 6.7), or a root whose parent is not the hierarchy's root.
    pub fn unsupported(fs: &dyn CgroupFs, root: &Path) -> Option<String> {
        if !fs.exists(&root.join("cpuset.cpus.exclusive")) {
            return Some(format!(
                "{} has no cpuset.cpus.exclusive (a kernel before 6.7)",
                root.display()
            ));
        }
        let parent = root.parent()?;
        if fs.exists(&parent.join("cpuset.cpus.exclusive")) {
            return Some(format!(
                "{} is not the hierarchy's root: a partition below it would need CPUs listed \
                 in cgroups allot does not own",
                parent.display()
            ));
        }
        None
    }

    /// Whether cell `cell` is a partition now.
    pub fn holds(&self, cell: u64) -> bool {
        self.cells.contains_key(&cell)
    }

    fn union(&self) -> CpuSet {
        self.cells
            .values()
            .fold(CpuSet::default(), |acc, c| acc.union(c))
    }

    /// Makes cell directory `dir` (of cell `cell`, under `root`) an
    /// isolated partition over `cpus`; on refusal undoes every step and
    /// says why.
    pub fn make(
        &mut self,
        fs: &dyn CgroupFs,
        root: &Path,
        cell: u64,
        dir: &Path,
        cpus: CpuSet,
    ) -> Result<(), String> {
        if self.cells.get(&cell) == Some(&cpus) {
            return Ok(());
        }
        if self.holds(cell) {
            self.unmake(fs, root, cell, dir);
        }
        self.cells.insert(cell, cpus);
        let steps = || -> Result<(), String> {
            let write = |file: &Path, text: &str| {
                fs.write(file, text)
                    .map_err(|e| format!("write {text:?} to {}: {e}", file.display()))
            };
            write(
                &root.join("cpuset.cpus.exclusive"),
                &self.union().to_string(),
            )?;
            write(&dir.join("cpuset.cpus.exclusive"), &cpus.to_string())?;
            write(&dir.join("cpuset.cpus.partition"), "isolated")?;
            let state = fs
                .read(&dir.join("cpuset.cpus.partition"))
                .map_err(|e| format!("read the partition back: {e}"))?;
            read_state(&state)
        };
        let result = steps();
        if result.is_err() {
            self.unmake(fs, root, cell, dir);
        }
        result
    }

    /// Makes cell `cell` a plain member again (errors ignored: each step
    /// undoes what it can; a cell being removed takes the rest with it).
    pub fn unmake(&mut self, fs: &dyn CgroupFs, root: &Path, cell: u64, dir: &Path) {
        self.cells.remove(&cell);
        let _ = fs.write(&dir.join("cpuset.cpus.partition"), "member");
        let _ = fs.write(&dir.join("cpuset.cpus.exclusive"), "");
        let _ = fs.write(
            &root.join("cpuset.cpus.exclusive"),
            &self.union().to_string(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroupfs::{FixtureFs, FixtureLayout};

    #[test]
    fn the_kernels_answer_is_read_with_its_reason() {
        assert_eq!(read_state("isolated\n"), Ok(()));
        assert_eq!(
            read_state("isolated invalid (Cpu list in cpuset.cpus not exclusive)\n"),
            Err("Cpu list in cpuset.cpus not exclusive".into())
        );
        assert!(read_state("member").unwrap_err().contains("member"));
    }

    fn tree() -> (tempfile::TempDir, FixtureFs, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let fs = FixtureFs::new(FixtureLayout::V2);
        let mount = dir.path().join("cg");
        fs.populate(&mount).unwrap();
        // The hierarchy's root has no cpuset.cpus.exclusive.
        std::fs::remove_file(mount.join("cpuset.cpus.exclusive")).unwrap();
        let root = mount.join("allot");
        fs.mkdir(&root).unwrap();
        (dir, fs, root)
    }

    #[test]
    fn a_partition_lists_its_cpus_up_to_the_root_and_comes_undone_in_reverse() {
        let (_d, fs, root) = tree();
        assert_eq!(Partitions::unsupported(&fs, &root), None);
        let (a, b) = (root.join("cell-1"), root.join("cell-2"));
        fs.mkdir(&a).unwrap();
        fs.mkdir(&b).unwrap();
        let mut p = Partitions::default();
        let cpus = |s: &str| CpuSet::parse_list(s).unwrap();
        p.make(&fs, &root, 1, &a, cpus("2-3")).unwrap();
        p.make(&fs, &root, 2, &b, cpus("6")).unwrap();
        let read = |f: &Path| fs.read(f).unwrap();
        assert_eq!(read(&root.join("cpuset.cpus.exclusive")), "2-3,6");
        assert_eq!(read(&a.join("cpuset.cpus.exclusive")), "2-3");
        assert_eq!(read(&a.join("cpuset.cpus.partition")), "isolated");
        p.unmake(&fs, &root, 1, &a);
        assert_eq!(read(&a.join("cpuset.cpus.partition")), "member");
        assert_eq!(read(&a.join("cpuset.cpus.exclusive")), "");
        assert_eq!(read(&root.join("cpuset.cpus.exclusive")), "6");
        assert!(!p.holds(1) && p.holds(2));
    }

    #[test]
    fn a_refused_partition_leaves_nothing_behind() {
        let (_d, fs, root) = tree();
        let a = root.join("cell-1");
        fs.mkdir(&a).unwrap();
        // A kernel without partitions in this cgroup: the last step fails.
        std::fs::remove_file(a.join("cpuset.cpus.partition")).unwrap();
        let mut p = Partitions::default();
        let e = p
            .make(&fs, &root, 1, &a, CpuSet::parse_list("1").unwrap())
            .unwrap_err();
        assert!(e.contains("cpuset.cpus.partition"), "{e}");
        assert!(!p.holds(1));
        assert_eq!(fs.read(&root.join("cpuset.cpus.exclusive")).unwrap(), "");
        assert_eq!(fs.read(&a.join("cpuset.cpus.exclusive")).unwrap(), "");
    }

    #[test]
    fn below_someone_elses_cgroup_no_partition_is_tried() {
        let (_d, fs, root) = tree();
        let deeper = root.join("unit");
        fs.mkdir(&deeper).unwrap();
        let cells = deeper.join("cells");
        fs.mkdir(&cells).unwrap();
        let why = Partitions::unsupported(&fs, &cells).unwrap();
        assert!(why.contains("not the hierarchy's root"), "{why}");
        std::fs::remove_file(root.join("cpuset.cpus.exclusive")).unwrap();
        let why = Partitions::unsupported(&fs, &root).unwrap();
        assert!(why.contains("before 6.7"), "{why}");
    }
}
