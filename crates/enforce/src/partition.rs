//! cgroup v2 cpuset partitions: the kernel itself keeps an exclusive
//! cell's CPUs apart — no load balancing across them, no unbound work on
//! them, no process outside the cell there — when the cell's cgroup is an
//! *isolated partition* (`cpuset.cpus.partition` = `isolated`).
//!
//! allot's root directory is never a partition root itself (that would
//! take every usable CPU from the rest of the machine). What the kernel
//! accepts below it depends on its version, so there are two schemes
//! ([`Scheme`]), both only where allot's root is a child of the
//! hierarchy's root (under a systemd-delegated subtree the ancestors are
//! systemd's, and the broker's interrupt and workqueue mover,
//! `crate::isolate`, is all there is):
//!
//! - **Remote** (kernel 6.7 and later, which has `cpuset.cpus.exclusive`):
//!   the cell stays at `<root>/cell-N` and is a *remote* partition; its
//!   CPUs must be listed in `cpuset.cpus.exclusive` of every ancestor
//!   below the hierarchy's root, which is only the root, allot's own.
//!   Order (undone in reverse): the root's `cpuset.cpus.exclusive`
//!   becomes the union of every partitioned cell's CPUs, then the cell's
//!   `cpuset.cpus.exclusive` its CPUs, then its partition file
//!   `isolated`.
//! - **Local** (kernels with partitions but before 6.7, such as Debian
//!   12's 6.1): a partition's parent must itself be a partition root,
//!   which allot's root is not. The hierarchy's root always is, so an
//!   exclusive cell is made *beside* allot's root, at
//!   `<mount>/<root name>.cell-N` ([`apart_dir`]; the broker says so at
//!   creation, `Enforcer::create_exclusive`). A partition's CPUs must be
//!   exclusive among its siblings, so allot's root gives them up first.
//!   Order (undone in reverse): the root's `cpuset.cpus` becomes the
//!   CPUs allot manages less every partition's, then the cell's
//!   `cpuset.cpus` its CPUs, then its partition file `isolated`. The
//!   machine's other cgroups are never written; a sibling of theirs that
//!   claims the same CPUs makes the kernel refuse, and the refusal is
//!   reported.
//!
//! The kernel answers in the partition file: `isolated` when it took the
//! partition, `isolated invalid (why)` when not; then everything is undone
//! and the reason returned. Nothing is left half-done.

use crate::cgroupfs::CgroupFs;
use allot_topo::CpuSet;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// Why a kernel that refuses the word `isolated` makes no partition.
const NO_ISOLATED: &str = "this kernel has no isolated partitions (before 6.1)";

/// How this kernel lets allot make partitions (see the module's doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scheme {
    /// Kernel 6.7 and later: a cell below allot's root, listed in the
    /// root's `cpuset.cpus.exclusive`.
    #[default]
    Remote,
    /// Before 6.7: a cell beside allot's root, below the hierarchy's
    /// root, with allot's root giving up its CPUs.
    Local,
}

/// Where exclusive cell `cell` lives under the local scheme: beside
/// allot's `root`, named after it (`/sys/fs/cgroup/allot.cell-7`).
pub fn apart_dir(root: &Path, cell: u64) -> PathBuf {
    let name = root
        .file_name()
        .map_or_else(|| "allot".into(), |n| n.to_string_lossy().into_owned());
    root.with_file_name(format!("{name}.cell-{cell}"))
}

/// The cell a directory named `dir_name` beside allot's `root` stands for
/// under the local scheme ([`apart_dir`]), if it is one.
pub fn apart_id(root: &Path, dir_name: &str) -> Option<u64> {
    let name = root.file_name()?.to_string_lossy();
    crate::cell_id(dir_name.strip_prefix(name.as_ref())?.strip_prefix('.')?)
}

/// How partitions can be made under `root` (allot's directory), or why
/// they cannot: no cpuset controller there, a kernel without partitions,
/// or a root whose parent is not the hierarchy's root. `root` need not
/// exist yet (`allot daemon --check-config`): the kernel's files are then
/// read from its parent, or (the parent being the hierarchy's root, which
/// has no `cpuset.cpus`) from a sibling with the cpuset controller.
pub fn scheme(fs: &dyn CgroupFs, root: &Path) -> Result<Scheme, String> {
    let parent = root
        .parent()
        .ok_or_else(|| format!("{} has no parent", root.display()))?;
    let has = |dir: &Path, file: &str| fs.exists(&dir.join(file));
    let probe = if fs.exists(root) {
        root.to_path_buf()
    } else if has(parent, "cpuset.cpus") {
        parent.to_path_buf()
    } else {
        fs.children(parent)
            .unwrap_or_default()
            .iter()
            .map(|c| parent.join(c))
            .find(|d| has(d, "cpuset.cpus"))
            .ok_or_else(|| {
                format!(
                    "no cgroup below {} has the cpuset controller",
                    parent.display()
                )
            })?
    };
    if !has(&probe, "cpuset.cpus") {
        return Err(format!("{} has no cpuset controller", probe.display()));
    }
    if !has(&probe, "cpuset.cpus.partition") {
        return Err("this kernel has no cpuset partitions (no cpuset.cpus.partition)".into());
    }
    // The hierarchy's root has no cpuset.cpus of its own.
    if has(parent, "cpuset.cpus") {
        return Err(format!(
            "{} is not the hierarchy's root: a partition below it would need {}",
            parent.display(),
            if has(&probe, "cpuset.cpus.exclusive") {
                "CPUs listed in cgroups allot does not own"
            } else {
                "every cgroup above it to be a partition root (a kernel before 6.7)"
            }
        ));
    }
    Ok(if has(&probe, "cpuset.cpus.exclusive") {
        Scheme::Remote
    } else {
        Scheme::Local
    })
}

/// The cells made partitions, and their CPUs.
#[derive(Debug, Default)]
pub struct Partitions {
    cells: BTreeMap<u64, CpuSet>,
    scheme: Scheme,
    /// The kernel refused the word `isolated` (5.2 to 6.0).
    no_isolated: bool,
    /// The CPUs allot manages (the root's `cpuset.cpus` with no
    /// partition, under the local scheme).
    usable: CpuSet,
}

impl Partitions {
    /// Partitions made by `scheme`, allot managing CPUs `usable`.
    pub fn new(scheme: Scheme, usable: CpuSet) -> Partitions {
        Partitions {
            cells: BTreeMap::new(),
            scheme,
            no_isolated: false,
            usable,
        }
    }

    /// Whether the kernel refused to make any partition `isolated` (it
    /// has partitions, but not that kind: before 6.1).
    pub fn lacks_isolated(&self) -> bool {
        self.no_isolated
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

    /// The root's share of the partitions' CPUs, as the scheme writes it:
    /// their union in its `cpuset.cpus.exclusive` (remote), or what is
    /// left of the managed CPUs in its `cpuset.cpus` (local).
    fn root_step(&self, fs: &dyn CgroupFs, root: &Path) -> Result<(), String> {
        let write = |file: &Path, text: &str| {
            fs.write(file, text)
                .map_err(|e| format!("write {text:?} to {}: {e}", file.display()))
        };
        match self.scheme {
            Scheme::Remote => write(
                &root.join("cpuset.cpus.exclusive"),
                &self.union().to_string(),
            ),
            Scheme::Local => {
                let left = self.usable.difference(&self.union());
                if left.is_empty() {
                    return Err(format!(
                        "it would leave allot's other cells no CPU (it manages {})",
                        self.usable
                    ));
                }
                write(&root.join("cpuset.cpus"), &left.to_string())
            }
        }
    }

    /// Makes cell directory `dir` (of cell `cell`, under `root`, or
    /// beside it under the local scheme) an isolated partition over
    /// `cpus`; on refusal undoes every step and says why.
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
            self.root_step(fs, root)?;
            let own = match self.scheme {
                Scheme::Remote => "cpuset.cpus.exclusive",
                Scheme::Local => "cpuset.cpus",
            };
            write(&dir.join(own), &cpus.to_string())?;
            let file = dir.join("cpuset.cpus.partition");
            if let Err(e) = fs.write(&file, "isolated") {
                if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) {
                    return Err(NO_ISOLATED.to_string());
                }
                return Err(format!("write \"isolated\" to {}: {e}", file.display()));
            }
            let state = fs
                .read(&dir.join("cpuset.cpus.partition"))
                .map_err(|e| format!("read the partition back: {e}"))?;
            read_state(&state)
        };
        let result = steps();
        if let Err(why) = &result {
            self.no_isolated |= why == NO_ISOLATED;
            self.unmake(fs, root, cell, dir);
        }
        result
    }

    /// Makes cell `cell` a plain member again (errors ignored: each step
    /// undoes what it can; a cell being removed takes the rest with it).
    /// Under the local scheme the cell keeps its `cpuset.cpus` (its
    /// grant) and allot's root takes its CPUs back.
    pub fn unmake(&mut self, fs: &dyn CgroupFs, root: &Path, cell: u64, dir: &Path) {
        self.cells.remove(&cell);
        let _ = fs.write(&dir.join("cpuset.cpus.partition"), "member");
        if self.scheme == Scheme::Remote {
            let _ = fs.write(&dir.join("cpuset.cpus.exclusive"), "");
        }
        let _ = self.root_step(fs, root);
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
        // The hierarchy's root has no cpuset.cpus, .exclusive or .partition
        // of its own.
        for f in [
            "cpuset.cpus",
            "cpuset.cpus.exclusive",
            "cpuset.cpus.partition",
        ] {
            std::fs::remove_file(mount.join(f)).unwrap();
        }
        let root = mount.join("allot");
        fs.mkdir(&root).unwrap();
        (dir, fs, root)
    }

    #[test]
    fn a_partition_lists_its_cpus_up_to_the_root_and_comes_undone_in_reverse() {
        let (_d, fs, root) = tree();
        assert_eq!(scheme(&fs, &root), Ok(Scheme::Remote));
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
    fn the_scheme_follows_the_kernel_and_below_someone_elses_cgroup_there_is_none() {
        let (_d, fs, root) = tree();
        let deeper = root.join("unit");
        fs.mkdir(&deeper).unwrap();
        let cells = deeper.join("cells");
        fs.mkdir(&cells).unwrap();
        let why = scheme(&fs, &cells).unwrap_err();
        assert!(why.contains("not the hierarchy's root"), "{why}");
        // A kernel before 6.7: partitions, no cpuset.cpus.exclusive.
        for d in [&root, &deeper, &cells] {
            std::fs::remove_file(d.join("cpuset.cpus.exclusive")).unwrap();
        }
        assert_eq!(scheme(&fs, &root), Ok(Scheme::Local));
        let why = scheme(&fs, &cells).unwrap_err();
        assert!(
            why.contains("partition root (a kernel before 6.7)"),
            "{why}"
        );
        std::fs::remove_file(root.join("cpuset.cpus.partition")).unwrap();
        let why = scheme(&fs, &root).unwrap_err();
        assert!(why.contains("no cpuset partitions"), "{why}");
    }

    #[test]
    fn before_allots_directory_exists_a_sibling_tells_what_the_kernel_has() {
        let (_d, fs, root) = tree();
        let mount = root.parent().unwrap().to_path_buf();
        let not_yet = mount.join("allot-new");
        // allot/ (a sibling with the cpuset controller) has the files.
        assert_eq!(scheme(&fs, &not_yet), Ok(Scheme::Remote));
        std::fs::remove_file(root.join("cpuset.cpus.exclusive")).unwrap();
        assert_eq!(scheme(&fs, &not_yet), Ok(Scheme::Local));
        // No cgroup with the cpuset controller at all.
        for f in ["cpuset.cpus", "cpuset.cpus.partition"] {
            std::fs::remove_file(root.join(f)).unwrap();
        }
        let why = scheme(&fs, &not_yet).unwrap_err();
        assert!(why.contains("cpuset controller"), "{why}");
    }

    #[test]
    fn apart_directories_are_named_after_the_root_and_read_back() {
        let root = Path::new("/sys/fs/cgroup/allot-bench-7");
        let dir = apart_dir(root, 12);
        assert_eq!(dir, Path::new("/sys/fs/cgroup/allot-bench-7.cell-12"));
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert_eq!(apart_id(root, name), Some(12));
        assert_eq!(apart_id(root, "allot-bench-7"), None);
        assert_eq!(apart_id(root, "allot-bench-77.cell-1"), None);
        assert_eq!(apart_id(root, "system.slice"), None);
    }

    /// Before 6.7: the cell beside allot's root is a partition over its
    /// CPUs once the root has given them up; the last CPU of the root is
    /// never given; undoing hands the CPUs back.
    #[test]
    fn a_local_partition_takes_its_cpus_from_allots_root_and_gives_them_back() {
        let (_d, fs, root) = tree();
        let (a, b, c) = (
            apart_dir(&root, 1),
            apart_dir(&root, 2),
            apart_dir(&root, 3),
        );
        for d in [&a, &b, &c] {
            fs.mkdir(d).unwrap();
        }
        let cpus = |s: &str| CpuSet::parse_list(s).unwrap();
        let read = |f: &Path| fs.read(f).unwrap();
        let mut p = Partitions::new(Scheme::Local, cpus("0-3"));
        p.make(&fs, &root, 1, &a, cpus("2-3")).unwrap();
        assert_eq!(read(&root.join("cpuset.cpus")), "0-1");
        assert_eq!(read(&a.join("cpuset.cpus")), "2-3");
        assert_eq!(read(&a.join("cpuset.cpus.partition")), "isolated");
        assert_eq!(read(&a.join("cpuset.cpus.exclusive")), "", "not written");
        p.make(&fs, &root, 2, &b, cpus("1")).unwrap();
        assert_eq!(read(&root.join("cpuset.cpus")), "0");
        fs.write(&c.join("cpuset.cpus.partition"), "isolated")
            .unwrap();
        let why = p.make(&fs, &root, 3, &c, cpus("0")).unwrap_err();
        assert!(why.contains("no CPU"), "{why}");
        assert!(!p.holds(3));
        assert_eq!(read(&root.join("cpuset.cpus")), "0");
        assert_eq!(read(&c.join("cpuset.cpus.partition")), "member");
        p.unmake(&fs, &root, 1, &a);
        assert_eq!(read(&a.join("cpuset.cpus.partition")), "member");
        assert_eq!(read(&root.join("cpuset.cpus")), "0,2-3");
        p.unmake(&fs, &root, 2, &b);
        assert_eq!(read(&root.join("cpuset.cpus")), "0-3");
    }
}
