//! Launcher groups: cgroup v2 directories that a launcher made for its own
//! processes and that a cell confines as well as its own directory.
//!
//! Slurm's `task/cgroup` and `proctrack/cgroup` plugins on cgroup v2 keep
//! every task of a job step in cgroups of Slurm's
//! (`…/job_J/step_S/user/task_T`), track the step by them and remove them
//! when it ends. Moving those tasks into allot's cells would take them
//! out of Slurm's sight; writing the step's own `cpuset.cpus` would fight
//! Slurm over one file. So a cell *includes* the step's `user` group
//! instead: the backend writes the cell's CPUs (and weight) to that
//! group's `cpuset.cpus` (and `cpu.weight`), one level below what Slurm
//! writes, so the kernel keeps both (a task runs on the intersection of
//! its ancestors' CPUs), and never moves a process in or out of it.
//!
//! Invariants:
//!
//! 1. A launcher group is an existing directory of the same cgroup v2
//!    hierarchy as allot's root, given as a clean absolute path (no `.`
//!    or `..`), that is neither allot's root nor inside it nor one of its
//!    ancestors (writing an ancestor's CPUs would confine allot's own
//!    cells), and whose parent enables the cpuset controller for it
//!    ([`check`], a pure function of the path and what the tree holds).
//! 2. The backend writes a group's files only while the cell holds it:
//!    when the cell's grant changes, and once when it is included (the
//!    grant of the moment). A group that has vanished (the launcher
//!    removed it at the end of its step) is dropped without error.
//! 3. When the cell ends, each group still there gets the launcher's CPUs
//!    back ([`restore`]: what its `cpuset.cpus` held when the cell included
//!    it; where that was empty, an empty list again, so that the kernel
//!    gives it its parent's CPUs) and is thawed, and keeps its directory and
//!    processes: it is the launcher's to remove.
//! 4. The processes of a cell are those of its own directory and of every
//!    group it includes, with their descendants ([`procs_below`]); its
//!    gate (pausing, time windows) freezes and thaws them all
//!    ([`crate::gate::Gates`]), so a gate taken before a group was
//!    included must be taken again.

use crate::cgroupfs::{CgroupFs, ControlFile};
use std::io;
use std::path::{Component, Path, PathBuf};

/// A launcher group a cell holds, with its CPU and weight files open.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) dir: PathBuf,
    pub(crate) cpus: Box<dyn ControlFile>,
    pub(crate) weight: Option<Box<dyn ControlFile>>,
    /// Its `cpuset.cpus` before the cell wrote it (the launcher's).
    original: String,
}

impl Group {
    /// Opens `dir`'s files (after [`check`]).
    pub(crate) fn open(fs: &dyn CgroupFs, dir: &Path) -> io::Result<Group> {
        let original = fs.read(&dir.join("cpuset.cpus"))?.trim().to_string();
        Ok(Group {
            dir: dir.to_path_buf(),
            cpus: fs.open(&dir.join("cpuset.cpus"))?,
            // The cpu controller may not be enabled for it: CPUs alone then.
            weight: fs.open(&dir.join("cpu.weight")).ok(),
            original,
        })
    }
}

/// Gives `g` its launcher's CPUs back (invariant 3). Some kernels refuse an empty list for a group with processes (ENOSPC,
/// as cgroup v1 does; Debian's 6.12 in the guest lane, scripts/test-guest.sh):
/// there the group gets its parent's CPUs of the moment, the CPUs an empty
/// list would give it.
pub(crate) fn restore(fs: &dyn CgroupFs, g: &mut Group) {
    if !g.original.is_empty() {
        let _ = g.cpus.set(&g.original);
        return;
    }
    if g.cpus.set("").is_ok() {
        return;
    }
    let parent = g.dir.parent().map(|p| p.join("cpuset.cpus.effective"));
    if let Some(cpus) = parent.and_then(|p| fs.read(&p).ok()) {
        let _ = g.cpus.set(cpus.trim());
    }
}

/// Why `dir` cannot be a launcher group of the backend rooted at `root`
/// (invariant 1), or `None` when it can.
pub fn check(fs: &dyn CgroupFs, root: &Path, dir: &Path) -> Option<String> {
    let shown = dir.display();
    if !dir.is_absolute() {
        return Some(format!("{shown} is not an absolute path"));
    }
    if dir
        .components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Some(format!(
            "{shown} holds '.' or '..'; give the group's own path"
        ));
    }
    if dir.starts_with(root) {
        return Some(format!(
            "{shown} is allot's own cgroup ({} holds the cells)",
            root.display()
        ));
    }
    if root.starts_with(dir) {
        return Some(format!(
            "{shown} holds allot's own cgroup {}; a cell may only include a group beside it",
            root.display()
        ));
    }
    let mount = hierarchy_root(fs, root);
    if !mount.as_deref().is_some_and(|m| dir.starts_with(m)) {
        return Some(format!(
            "{shown} is not in allot's cgroup v2 hierarchy ({})",
            mount.map_or_else(|| "unknown".to_string(), |m| m.display().to_string())
        ));
    }
    if !fs.exists(&dir.join("cgroup.procs")) {
        return Some(format!("{shown} is not a cgroup (no cgroup.procs there)"));
    }
    if !fs.exists(&dir.join("cpuset.cpus")) {
        return Some(format!(
            "the cpuset controller is not enabled for {shown}: its parent's \
             cgroup.subtree_control lacks cpuset"
        ));
    }
    None
}

/// The top of the hierarchy `root` is in: its highest ancestor that is
/// still a cgroup.
fn hierarchy_root(fs: &dyn CgroupFs, root: &Path) -> Option<PathBuf> {
    root.ancestors()
        .filter(|a| fs.exists(&a.join("cgroup.procs")))
        .last()
        .map(Path::to_path_buf)
}

/// The processes in `dir` and every cgroup below it (invariant 4), at
/// most `limit` of them; none when `dir` is gone.
pub(crate) fn procs_below(fs: &dyn CgroupFs, dir: &Path, limit: usize) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        if out.len() >= limit {
            break;
        }
        out.extend(crate::cgroupfs::procs(fs, &d));
        for c in fs.children(&d).unwrap_or_default() {
            todo.push(d.join(c));
        }
    }
    out.truncate(limit);
    out
}

/// Whether an error writing a group's file means the group is gone.
pub(crate) fn vanished(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

/// At most this many processes of one launcher group are read.
pub(crate) const PROCS_MAX: usize = 4096;

/// Writes a grant to launcher groups: `cpus` to each one's `cpuset.cpus`
/// and `weight` to its `cpu.weight` (where it has one), each as the
/// kernel's file spells it, `None` left as it is; drops the groups that
/// vanished (invariant 2). The first other failure is returned, after
/// every group was tried.
pub(crate) fn write(
    groups: &mut Vec<Group>,
    cpus: Option<&str>,
    weight: Option<&str>,
) -> io::Result<()> {
    let mut failed = None;
    groups.retain_mut(|g| {
        let mut r = cpus.map_or(Ok(()), |c| g.cpus.set(c));
        if r.is_ok()
            && let (Some(w), Some(file)) = (weight, g.weight.as_mut())
        {
            r = file.set(w);
        }
        match r {
            Ok(()) => true,
            Err(e) if vanished(&e) => false,
            Err(e) => {
                failed.get_or_insert(e);
                true
            }
        }
    });
    failed.map_or(Ok(()), Err)
}
