//! What the cells' other processes were last kept off (`core/keep_off.rs`
//! is the engine's side: who is kept off what, and the affinity writes).

use allot_topo::CpuSet;
use std::collections::{BTreeMap, BTreeSet};

/// What was kept off last: the cells whose other processes were kept off
/// held CPUs, those CPUs, and the processes whose affinity was narrowed.
/// A process is listed under a cell only while that cell holds CPUs.
#[derive(Debug, Default)]
pub(in crate::core) struct KeptOff {
    cpus: BTreeMap<u64, CpuSet>,
    narrowed: BTreeMap<u64, BTreeSet<u32>>,
}

impl KeptOff {
    /// The cells whose processes were kept off CPUs at the last look.
    pub(in crate::core) fn cells(&self) -> impl Iterator<Item = u64> + '_ {
        self.cpus.keys().copied()
    }

    /// Takes the processes of `cell` narrowed so far (to be looked at
    /// again and handed back with [`KeptOff::keep`]).
    pub(in crate::core) fn take_narrowed(&mut self, cell: u64) -> BTreeSet<u32> {
        self.narrowed.remove(&cell).unwrap_or_default()
    }

    /// The processes of `cell`, which holds CPUs, narrowed now.
    pub(in crate::core) fn keep(&mut self, cell: u64, narrowed: BTreeSet<u32>) {
        self.narrowed.insert(cell, narrowed);
    }

    /// The held CPUs every cell's other processes were kept off in this
    /// look.
    pub(in crate::core) fn set_cpus(&mut self, cpus: BTreeMap<u64, CpuSet>) {
        self.cpus = cpus;
    }
}
