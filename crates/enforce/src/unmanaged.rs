//! The system minimum for processes that asked for nothing (Poli-C's
//! policd, §6.3.2): with the operator's opt-in, every process in a *source*
//! cgroup (by default the cpuset hierarchy's root: processes outside any
//! cell and outside every other manager's groups) moves into allot's
//! `system` group, whose CPUs are the reserve. Their children are born
//! there, so one sweep covers every later fork; the broker sweeps again on
//! its ticks for processes that land in the source since.
//!
//! A process that holds resources of its own through `require` no longer
//! shares the minimum: it goes back to the source ([`Unmanaged::release`])
//! and is left out of sweeps while it holds. [`Unmanaged::release_all`]
//! (the broker's exit, or a broker started without the opt-in that finds
//! the group a crashed one left) moves everyone back and removes the group.
//!
//! Only processes the kernel lets move are moved (kernel threads refuse);
//! a failed move is skipped, never fatal. Nothing outside the source and
//! allot's own group is touched.

use crate::cgroupfs::CgroupFs;
use allot_topo::CpuSet;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the group under allot's directory.
pub const SYSTEM_GROUP: &str = "system";

/// The confinement of unmanaged processes.
#[derive(Debug)]
pub struct Unmanaged {
    fs: Arc<dyn CgroupFs>,
    /// Where unmanaged processes are found (and go back to).
    source: PathBuf,
    /// allot's group for them.
    group: PathBuf,
    /// The CPUs last written to the group.
    cpus: Option<CpuSet>,
}

impl Unmanaged {
    /// Confinement from `source` into `<allot_dir>/system` (not created
    /// until the first sweep).
    pub fn new(fs: Arc<dyn CgroupFs>, source: PathBuf, allot_dir: &Path) -> Unmanaged {
        Unmanaged {
            fs,
            source,
            group: allot_dir.join(SYSTEM_GROUP),
            cpus: None,
        }
    }

    /// The group's directory.
    pub fn group(&self) -> &Path {
        &self.group
    }

    /// Moves every process of the source but `exempt` into the group,
    /// confined to `cpus` (made and set as needed). Returns how many moved.
    pub fn sweep(&mut self, cpus: &CpuSet, exempt: &BTreeSet<u32>) -> std::io::Result<usize> {
        if cpus.is_empty() {
            return Err(std::io::Error::other(
                "no CPU is reserved for processes outside the cells (set `reserve`)",
            ));
        }
        if !self.fs.exists(&self.group) {
            self.fs.mkdir(&self.group)?;
            self.cpus = None;
        }
        if self.cpus != Some(*cpus) {
            // cgroup v1 cpusets need memory nodes before any task joins.
            let mems = self.group.join("cpuset.mems");
            if self.fs.exists(&mems) && self.fs.read(&mems).unwrap_or_default().trim().is_empty() {
                let parent = self.group.parent().unwrap_or(&self.group);
                let nodes = self.fs.read(&parent.join("cpuset.mems"))?;
                self.fs.write(&mems, nodes.trim())?;
            }
            self.fs
                .write(&self.group.join("cpuset.cpus"), &cpus.to_string())?;
            self.cpus = Some(*cpus);
        }
        let procs = self.group.join("cgroup.procs");
        let mut moved = 0;
        for pid in crate::cgroupfs::procs(self.fs.as_ref(), &self.source) {
            if !exempt.contains(&pid) && self.fs.write(&procs, &pid.to_string()).is_ok() {
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// Process `pid` holds resources of its own: back to the source (if it
    /// is in the group; errors ignored, it may have exited).
    pub fn release(&self, pid: u32) {
        if crate::cgroupfs::procs(self.fs.as_ref(), &self.group).contains(&pid) {
            let _ = self
                .fs
                .write(&self.source.join("cgroup.procs"), &pid.to_string());
        }
    }

    /// Everyone back to the source, and the group removed.
    pub fn release_all(&mut self) -> std::io::Result<()> {
        self.cpus = None;
        if !self.fs.exists(&self.group) {
            return Ok(());
        }
        crate::cgroupfs::evict_and_remove(self.fs.as_ref(), &self.group, &self.source)
    }
}
