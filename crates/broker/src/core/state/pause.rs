//! The paused cells (`core/pause.rs` is the engine's side: when a cell is
//! paused, where it waits, when it resumes). Each paused cell is its gate,
//! closed, with since when and where it waits; a cell is here exactly
//! while its gate is meant closed.

use crate::log::warn;
use allot_enforce::gate::Gate;
use allot_topo::CpuSet;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Why a paused cell is paused, as the status says it.
pub const WHY: &str = "every CPU is guaranteed to other cells; it runs again when one frees";

/// A paused cell.
#[derive(Debug)]
struct Paused {
    gate: Box<dyn Gate>,
    since: Instant,
    /// The CPUs its cpuset confines it to while paused (empty: unknown).
    on: CpuSet,
    /// How often the freeze was sent again to threads that ran on.
    resent: u32,
}

impl Paused {
    /// Paused from now through `gate` (closed), waiting on `on`.
    fn new(gate: Box<dyn Gate>, on: CpuSet) -> Paused {
        Paused {
            gate,
            since: Instant::now(),
            on,
            resent: 0,
        }
    }

    /// Sends cell `id`'s freeze again, to threads that ran on.
    fn resend(&mut self, id: u64) {
        self.resent += 1;
        if let Err(e) = self.gate.close() {
            warn!("cell {id}: cannot pause it: {e}");
        }
    }

    /// Whether some of its threads still run (the freeze has not taken).
    fn running(&mut self) -> bool {
        self.gate.stopped() == Some(false)
    }
}

/// The paused cells, by id.
#[derive(Debug, Default)]
pub(in crate::core) struct Pauses {
    cells: BTreeMap<u64, Paused>,
}

impl Pauses {
    /// The paused cells' ids.
    pub(in crate::core) fn ids(&self) -> Vec<u64> {
        self.cells.keys().copied().collect()
    }

    pub(in crate::core) fn contains(&self, id: u64) -> bool {
        self.cells.contains_key(&id)
    }

    /// Forgets cell `id` (ended, or no longer planned), leaving its gate
    /// as it is.
    pub(in crate::core) fn forget(&mut self, id: u64) {
        self.cells.remove(&id);
    }

    /// Where cell `id` waits (empty: unknown), if paused.
    pub(in crate::core) fn on(&self, id: u64) -> Option<CpuSet> {
        self.cells.get(&id).map(|p| p.on)
    }

    /// Cell `id` was moved to wait on `cpus`.
    pub(in crate::core) fn moved(&mut self, id: u64, cpus: CpuSet) {
        if let Some(p) = self.cells.get_mut(&id) {
            p.on = cpus;
        }
    }

    /// The cells whose freeze has not yet taken (or cannot be told) and
    /// that wait anywhere or on some of `keep_off`.
    pub(in crate::core) fn freezing_on(&mut self, keep_off: &CpuSet) -> Vec<u64> {
        self.cells
            .iter_mut()
            .filter_map(|(id, p)| {
                let anywhere = p.on.is_empty();
                ((anywhere || p.on.intersects(keep_off)) && p.gate.stopped() != Some(true))
                    .then_some(*id)
            })
            .collect()
    }

    /// Whether some threads of paused cell `id` still run.
    pub(in crate::core) fn running(&mut self, id: u64) -> bool {
        self.cells.get_mut(&id).is_some_and(Paused::running)
    }

    /// Sends cell `id`'s freeze again.
    pub(in crate::core) fn resend(&mut self, id: u64) {
        if let Some(p) = self.cells.get_mut(&id) {
            p.resend(id);
        }
    }

    /// Sends the freeze again to every paused cell some of whose threads
    /// still run; returns those cells.
    pub(in crate::core) fn resend_to_running(&mut self) -> Vec<u64> {
        let mut sent = Vec::new();
        for (id, p) in &mut self.cells {
            if p.running() {
                p.resend(*id);
                sent.push(*id);
            }
        }
        sent
    }

    /// Pauses cell `id` through `gate`, waiting on `on`: closes the gate;
    /// `false` (and nothing kept) when it cannot be closed.
    pub(in crate::core) fn pause(&mut self, id: u64, mut gate: Box<dyn Gate>, on: CpuSet) -> bool {
        if let Err(e) = gate.close() {
            warn!("cell {id}: cannot pause it: {e}");
            return false;
        }
        self.cells.insert(id, Paused::new(gate, on));
        true
    }

    /// Cell `id`, adopted frozen after a restart (its journaled grant was
    /// empty or missing): still paused, `gate` closed, waiting on `on`
    /// (the kernel's).
    pub(in crate::core) fn adopt(&mut self, id: u64, mut gate: Box<dyn Gate>, on: CpuSet) {
        let _ = gate.close();
        self.cells.insert(id, Paused::new(gate, on));
    }

    /// Opens cell `id`'s gate and forgets it: how long it was paused and
    /// how often the freeze was sent again, if it was paused.
    pub(in crate::core) fn resume(&mut self, id: u64) -> Option<(Duration, u32)> {
        let mut p = self.cells.remove(&id)?;
        if let Err(e) = p.gate.open() {
            warn!("cell {id}: cannot resume it: {e}");
        }
        Some((p.since.elapsed(), p.resent))
    }

    /// Opens every gate and forgets every cell (the broker's exit).
    pub(in crate::core) fn thaw_all(&mut self) {
        for (id, mut p) in std::mem::take(&mut self.cells) {
            if let Err(e) = p.gate.open() {
                warn!("cell {id}: cannot thaw it: {e}");
            }
        }
    }

    /// Since when cell `id` is paused, if it is.
    pub(in crate::core) fn since(&self, id: u64) -> Option<Instant> {
        self.cells.get(&id).map(|p| p.since)
    }

    /// Cell `id`'s new gate (a group was just included), closed, in place
    /// of the old one.
    pub(in crate::core) fn replace_gate(&mut self, id: u64, mut gate: Box<dyn Gate>) {
        let Some(p) = self.cells.get_mut(&id) else {
            return;
        };
        if let Err(e) = gate.close() {
            warn!("cell {id}: cannot pause its new group: {e}");
        }
        p.gate = gate;
    }
}
