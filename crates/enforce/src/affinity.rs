//! Affinity-only backend: `sched_setaffinity` on every thread of every
//! process in the cell. Needs no privilege beyond owning the processes.
//!
//! A cell is its member processes and all their descendants. Threads and
//! children created later inherit the mask of their creator, so confinement
//! follows them; a grant change walks the process tree again, repeating until
//! a pass finds no thread it has not already set (a thread being created
//! during the walk is caught by the next pass). Processes that leave the tree
//! (daemonising, re-parented to init) escape, which is the limit of this
//! backend; the cgroup backends do not have it.

use crate::os::{Os, process_tree};
use crate::{Applied, BackendKind, EnforceError, Enforcer, Result};
use allot_topo::CpuSet;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Most passes over a cell's threads per grant change.
const MAX_PASSES: usize = 8;

/// The affinity backend.
#[derive(Debug)]
pub struct Affinity {
    os: Arc<dyn Os>,
    cells: HashMap<u64, Cell>,
    all: Option<CpuSet>,
}

#[derive(Debug, Default)]
struct Cell {
    members: Vec<u32>,
    cpus: Option<CpuSet>,
}

impl Affinity {
    /// A backend acting through `os`.
    pub fn new(os: Arc<dyn Os>) -> Self {
        Affinity {
            os,
            cells: HashMap::new(),
            all: None,
        }
    }

    /// Processes still running when their cell is removed get `all` back
    /// (they leave confinement) instead of keeping their last mask.
    pub fn restore_on_remove(mut self, all: CpuSet) -> Self {
        self.all = Some(all);
        self
    }

    /// Sets `cpus` on every thread of the trees rooted at `roots`, until a
    /// pass finds nothing new. Threads that vanish meanwhile are ignored.
    fn confine(os: &dyn Os, roots: &[u32], cpus: &CpuSet) -> std::io::Result<()> {
        let mut done: HashSet<u32> = HashSet::new();
        for _ in 0..MAX_PASSES {
            let mut fresh = 0;
            for pid in process_tree(os, roots) {
                for tid in os.threads(pid).unwrap_or_default() {
                    if done.contains(&tid) {
                        continue;
                    }
                    match os.set_affinity(tid, cpus) {
                        Ok(()) => {
                            done.insert(tid);
                            fresh += 1;
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            if fresh == 0 {
                return Ok(());
            }
        }
        Ok(())
    }
}

impl Enforcer for Affinity {
    fn kind(&self) -> BackendKind {
        BackendKind::Affinity
    }

    fn create(&mut self, cell: u64) -> Result<()> {
        self.cells.entry(cell).or_default();
        Ok(())
    }

    fn adopt(&mut self, cell: u64, members: &[u32]) -> Result<Option<CpuSet>> {
        let c = self.cells.entry(cell).or_default();
        c.members = members.to_vec();
        let now = members.iter().find_map(|&p| self.os.affinity(p).ok());
        c.cpus = now;
        Ok(now)
    }

    fn attach(&mut self, cell: u64, pid: u32) -> Result<()> {
        let c = self.cells.entry(cell).or_default();
        if !c.members.contains(&pid) {
            c.members.push(pid);
        }
        if let Some(cpus) = c.cpus {
            Self::confine(self.os.as_ref(), &[pid], &cpus)
                .map_err(|e| EnforceError::new(format!("confine process {pid} to {cpus}"), e))?;
        }
        Ok(())
    }

    fn apply(&mut self, cell: u64, a: &Applied) -> Result<()> {
        let c = self.cells.entry(cell).or_default();
        c.members.retain(|&p| self.os.alive(p));
        Self::confine(self.os.as_ref(), &c.members, &a.cpus)
            .map_err(|e| EnforceError::new(format!("set CPUs of cell {cell} to {}", a.cpus), e))?;
        c.cpus = Some(a.cpus);
        Ok(())
    }

    fn remove(&mut self, cell: u64) -> Result<()> {
        if let (Some(c), Some(all)) = (self.cells.remove(&cell), self.all) {
            Self::confine(self.os.as_ref(), &c.members, &all)
                .map_err(|e| EnforceError::new(format!("release cell {cell}"), e))?;
        }
        Ok(())
    }

    fn usage_ns(&mut self, cell: u64) -> Option<u64> {
        let c = self.cells.get(&cell)?;
        let tree = process_tree(self.os.as_ref(), &c.members);
        Some(tree.iter().filter_map(|&p| self.os.cpu_time_ns(p)).sum())
    }

    fn pids(&mut self, cell: u64) -> Vec<u32> {
        self.cells
            .get(&cell)
            .map(|c| process_tree(self.os.as_ref(), &c.members))
            .unwrap_or_default()
    }

    fn cleanup(&mut self) -> Result<()> {
        self.cells.clear();
        Ok(())
    }
}
