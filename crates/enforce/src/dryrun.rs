//! Dry-run backend: records every call and touches nothing. For tests,
//! simulations, and trying a configuration on a machine you do not want to
//! change.

use crate::{Applied, BackendKind, Enforcer, Result};
use allot_topo::CpuSet;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `create`.
    Create(u64),
    /// `adopt`.
    Adopt(u64),
    /// `attach`.
    Attach(u64, u32),
    /// `apply`.
    Apply(u64, Applied),
    /// `remove`.
    Remove(u64),
}

/// The dry-run backend. Clones share the log.
#[derive(Debug, Clone, Default)]
pub struct DryRun {
    log: Arc<Mutex<Vec<Call>>>,
    members: HashMap<u64, Vec<u32>>,
    cpus: HashMap<u64, CpuSet>,
}

impl DryRun {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }
    /// The calls so far.
    pub fn calls(&self) -> Vec<Call> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn record(&self, c: Call) {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }
}

impl Enforcer for DryRun {
    fn kind(&self) -> BackendKind {
        BackendKind::DryRun
    }
    fn create(&mut self, cell: u64) -> Result<()> {
        self.record(Call::Create(cell));
        Ok(())
    }
    fn adopt(&mut self, cell: u64, members: &[u32]) -> Result<Option<CpuSet>> {
        self.record(Call::Adopt(cell));
        self.members.insert(cell, members.to_vec());
        Ok(self.cpus.get(&cell).copied())
    }
    fn attach(&mut self, cell: u64, pid: u32) -> Result<()> {
        self.record(Call::Attach(cell, pid));
        self.members.entry(cell).or_default().push(pid);
        Ok(())
    }
    fn apply(&mut self, cell: u64, a: &Applied) -> Result<()> {
        self.record(Call::Apply(cell, *a));
        self.cpus.insert(cell, a.cpus);
        Ok(())
    }
    fn remove(&mut self, cell: u64) -> Result<()> {
        self.record(Call::Remove(cell));
        self.members.remove(&cell);
        Ok(())
    }
    fn usage_ns(&mut self, _cell: u64) -> Option<u64> {
        None
    }
    fn pids(&mut self, cell: u64) -> Vec<u32> {
        self.members.get(&cell).cloned().unwrap_or_default()
    }
    fn cleanup(&mut self) -> Result<()> {
        Ok(())
    }
}
