//! Dry-run backend: records every call and touches nothing. For tests,
//! simulations, and trying a configuration on a machine you do not want to
//! change.

use crate::gate::{Gate, GateCall};
use crate::{Applied, BackendKind, Enforcer, Result};
use allot_topo::CpuSet;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `create`.
    Create(u64),
    /// `create_exclusive`.
    CreateExclusive(u64),
    /// `adopt`.
    Adopt(u64),
    /// `attach`.
    Attach(u64, u32),
    /// `apply`.
    Apply(u64, Applied),
    /// `remove`.
    Remove(u64),
    /// `set_io_weights`.
    IoWeights(u64, crate::IoWeights),
    /// `join_files` (with [`DryRun::with_join_files`]).
    JoinFiles(u64),
    /// `set_partition`: made a partition over these CPUs, or plain again.
    Partition(u64, Option<CpuSet>),
    /// `include_group(cell, dir)`.
    IncludeGroup(u64, std::path::PathBuf),
    /// A gate's `open` or `close` ([`DryRun::gate_calls`] lists these
    /// alone), in order with the other calls.
    Gate(GateCall),
    /// `set_memory`.
    Memory(u64, allot_spec::Memory),
    /// `set_together_weight`.
    Together(u32),
}

/// The dry-run backend. Clones share the log, the cells it holds and the
/// failures a test asks for.
#[derive(Debug, Clone, Default)]
pub struct DryRun {
    log: Arc<Mutex<Vec<Call>>>,
    state: Arc<Mutex<State>>,
    gate_usage: Arc<Mutex<Option<u64>>>,
    gate_stopped: Arc<Mutex<Option<bool>>>,
    no_gates: bool,
    join_files: bool,
    /// Stands in for a cgroup backend's cpusets (`cpuset_confines`).
    cpusets: bool,
    /// Why no partition can be made (`None`: every one asked is made).
    no_partitions: Option<String>,
    memory: Arc<Mutex<MemoryState>>,
}

/// What the dry run's memory control reports, as a test sets it.
#[derive(Debug, Default)]
struct MemoryState {
    /// `None`: no memory control.
    capacity: Option<u64>,
    /// Use per cell.
    used: HashMap<u64, allot_spec::MemoryUse>,
    /// Whether the next `set_memory` fails (a kernel refusing a limit).
    refuse_next: bool,
}

#[derive(Debug, Default)]
struct State {
    members: HashMap<u64, Vec<u32>>,
    cpus: HashMap<u64, CpuSet>,
    /// Cells created or adopted and not removed.
    held: std::collections::BTreeSet<u64>,
    /// How many `remove` calls fail (as a cgroup whose last task is still
    /// exiting does) before they succeed again.
    failing_removals: u32,
    /// CPU time per cell, as a test sets it (none: not measurable).
    usage: HashMap<u64, u64>,
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
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Gives the backend memory control over `capacity` bytes.
    pub fn with_memory(self, capacity: u64) -> Self {
        self.memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .capacity = Some(capacity);
        self
    }

    /// Sets what `memory_use` reports for cell `cell`.
    pub fn set_memory_use(&self, cell: u64, used: allot_spec::MemoryUse) {
        self.memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .used
            .insert(cell, used);
    }

    /// Makes the next `set_memory` fail, as a kernel refusing a limit does.
    pub fn refuse_next_memory(&self) {
        self.memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .refuse_next = true;
    }

    /// Makes the next `n` removals fail with `EBUSY`.
    pub fn fail_removals(&self, n: u32) {
        self.state().failing_removals = n;
    }
    /// Pretends cell `id` exists in the kernel with `pids` in it (as a
    /// cgroup a lost journal no longer mentions).
    pub fn plant(&self, id: u64, pids: &[u32]) {
        let mut st = self.state();
        st.held.insert(id);
        st.members.insert(id, pids.to_vec());
    }
    /// Cells held now.
    pub fn held(&self) -> Vec<u64> {
        self.state().held.iter().copied().collect()
    }
    /// A dry run that offers no gates, as the affinity backend (time-
    /// triggered cells then fall back to CFS bandwidth).
    pub fn without_gates(mut self) -> Self {
        self.no_gates = true;
        self
    }
    /// A dry run that makes no partitions, for this reason (as a kernel
    /// before 6.7 would say).
    pub fn without_partitions(mut self, why: &str) -> Self {
        self.no_partitions = Some(why.to_string());
        self
    }
    /// Hands out a stand-in join file per cell (`Enforcer::join_files`),
    /// as cgroup v1 does, so a registering process may move itself in.
    pub fn with_join_files(mut self) -> Self {
        self.join_files = true;
        self
    }
    /// Says its cells' CPUs reach their threads through cpusets, as the
    /// cgroup backends do (`Enforcer::cpuset_confines`).
    pub fn with_cpusets(mut self) -> Self {
        self.cpusets = true;
        self
    }
    /// Every gate opening and closing so far, in order.
    pub fn gate_calls(&self) -> Vec<GateCall> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Gate(g) => Some(g),
                _ => None,
            })
            .collect()
    }
    /// The CPU time cell `cell` has used, as `usage_ns` reports it from
    /// now on (by default a cell's use cannot be measured: `None`).
    pub fn set_usage(&self, cell: u64, ns: u64) {
        self.state().usage.insert(cell, ns);
    }
    /// The CPU time every gate reports from now on.
    pub fn set_gate_usage(&self, ns: Option<u64>) {
        *self.gate_usage.lock().unwrap_or_else(|p| p.into_inner()) = ns;
    }
    /// Whether every gate reports its cell stopped after a close from now
    /// on (`None`, the default: the gate cannot tell).
    pub fn set_gate_stopped(&self, stopped: Option<bool>) {
        *self.gate_stopped.lock().unwrap_or_else(|p| p.into_inner()) = stopped;
    }
}

impl Enforcer for DryRun {
    fn kind(&self) -> BackendKind {
        BackendKind::DryRun
    }
    fn create(&mut self, cell: u64) -> Result<()> {
        self.record(Call::Create(cell));
        self.state().held.insert(cell);
        Ok(())
    }
    fn create_exclusive(&mut self, cell: u64) -> Result<()> {
        self.record(Call::CreateExclusive(cell));
        self.state().held.insert(cell);
        Ok(())
    }
    fn adopt(&mut self, cell: u64, members: &[u32]) -> Result<Option<CpuSet>> {
        self.record(Call::Adopt(cell));
        let mut st = self.state();
        st.held.insert(cell);
        if !members.is_empty() {
            st.members.insert(cell, members.to_vec());
        }
        Ok(st.cpus.get(&cell).copied())
    }
    fn join_files(&mut self, cell: u64, _pid: u32) -> Result<Vec<std::fs::File>> {
        if !self.join_files {
            return Ok(Vec::new());
        }
        self.record(Call::JoinFiles(cell));
        // One stand-in file, in memory: what a process writes to it moves
        // nothing.
        let fd = rustix::fs::memfd_create("allot-dry-run-join", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| crate::EnforceError::new("make a join file", e.into()))?;
        Ok(vec![std::fs::File::from(fd)])
    }
    fn attach(&mut self, cell: u64, pid: u32) -> Result<()> {
        self.record(Call::Attach(cell, pid));
        self.state().members.entry(cell).or_default().push(pid);
        Ok(())
    }
    fn apply(&mut self, cell: u64, a: &Applied) -> Result<()> {
        self.record(Call::Apply(cell, *a));
        self.state().cpus.insert(cell, a.cpus);
        Ok(())
    }
    fn set_io_weights(&mut self, cell: u64, weights: &crate::IoWeights) -> Result<bool> {
        self.record(Call::IoWeights(cell, weights.clone()));
        Ok(true)
    }
    fn has_weights(&self) -> bool {
        true
    }
    fn cpuset_confines(&self) -> bool {
        self.cpusets
    }
    fn set_together_weight(&mut self, weight: u32) -> Result<bool> {
        self.record(Call::Together(weight));
        Ok(true)
    }
    fn remove(&mut self, cell: u64) -> Result<()> {
        self.record(Call::Remove(cell));
        let mut st = self.state();
        if st.failing_removals > 0 {
            st.failing_removals -= 1;
            return Err(crate::EnforceError::new(
                format!("remove cell {cell}"),
                std::io::Error::from_raw_os_error(libc::EBUSY),
            ));
        }
        st.members.remove(&cell);
        st.held.remove(&cell);
        Ok(())
    }
    fn usage_ns(&mut self, cell: u64) -> Option<u64> {
        self.state().usage.get(&cell).copied()
    }
    fn pids(&mut self, cell: u64) -> Vec<u32> {
        self.state().members.get(&cell).cloned().unwrap_or_default()
    }
    fn existing(&mut self) -> Vec<u64> {
        self.held()
    }
    fn cleanup(&mut self) -> Result<()> {
        Ok(())
    }
    fn can_pause(&self) -> bool {
        !self.no_gates
    }

    fn include_group(&mut self, cell: u64, dir: &std::path::Path) -> Result<bool> {
        self.record(Call::IncludeGroup(cell, dir.to_path_buf()));
        Ok(true)
    }

    fn set_partition(&mut self, cell: u64, cpus: Option<CpuSet>) -> Result<crate::Partitioning> {
        use crate::Partitioning;
        self.record(Call::Partition(cell, cpus));
        Ok(match (&self.no_partitions, cpus) {
            (_, None) => Partitioning::Plain,
            (Some(why), Some(_)) => Partitioning::Unavailable(why.clone()),
            (None, Some(_)) => Partitioning::Isolated,
        })
    }

    fn set_memory(&mut self, cell: u64, m: &allot_spec::Memory) -> Result<bool> {
        let mut st = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        if st.capacity.is_none() {
            return Ok(false);
        }
        if std::mem::take(&mut st.refuse_next) {
            return Err(crate::EnforceError::new(
                format!("set the memory of cell {cell}"),
                io::Error::from_raw_os_error(libc::EBUSY),
            ));
        }
        drop(st);
        self.record(Call::Memory(cell, *m));
        Ok(true)
    }

    fn memory_use(&mut self, cell: u64) -> Option<allot_spec::MemoryUse> {
        let st = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        st.capacity?;
        Some(st.used.get(&cell).copied().unwrap_or_default())
    }

    fn memory_capacity(&mut self) -> Option<u64> {
        self.memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .capacity
    }

    fn gate(&mut self, cell: u64) -> Result<Option<Box<dyn Gate>>> {
        if self.no_gates {
            return Ok(None);
        }
        Ok(Some(Box::new(RecordingGate {
            cell,
            calls: self.log.clone(),
            usage: self.gate_usage.clone(),
            stopped: self.gate_stopped.clone(),
        })))
    }
}

/// The dry-run backend's gate: records calls, reports the usage and the
/// stopped state a test sets.
#[derive(Debug, Clone)]
struct RecordingGate {
    cell: u64,
    /// The backend's log.
    calls: Arc<Mutex<Vec<Call>>>,
    usage: Arc<Mutex<Option<u64>>>,
    stopped: Arc<Mutex<Option<bool>>>,
}

impl RecordingGate {
    fn record(&self, g: GateCall) {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Call::Gate(g));
    }
}

impl Gate for RecordingGate {
    fn open(&mut self) -> io::Result<()> {
        self.record(GateCall::Open(self.cell));
        Ok(())
    }
    fn close(&mut self) -> io::Result<()> {
        self.record(GateCall::Close(self.cell));
        Ok(())
    }
    fn usage_ns(&mut self) -> Option<u64> {
        *self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn stopped(&mut self) -> Option<bool> {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner())
    }
}
