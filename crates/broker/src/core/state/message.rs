//! The message-triggered cells' states (`core/message.rs` is the engine's
//! side: when a cell goes idle or wakes, its doorbells, its gate from the
//! backend). A cell is *active* (planned, running) or idle (holding
//! nothing, its gate closed, its doorbells watched); it starts active.

use crate::log::warn;
use allot_enforce::gate::Gate;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A cell under this much CPU (a share of one) counts as idle.
const IDLE_CPU: f64 = 0.05;

/// A message-triggered cell's state.
#[derive(Debug)]
pub(in crate::core) struct MessageState {
    active: bool,
    /// Messages sent to its channels when last looked at.
    sent: u64,
    /// Its CPU time when last looked at, ns.
    usage: Option<u64>,
    /// Since when nothing happened (no message, no CPU).
    quiet_since: Instant,
    /// What suspends it while idle, once the backend gave one.
    gate: Option<Box<dyn Gate>>,
}

impl MessageState {
    pub(in crate::core) fn active(&self) -> bool {
        self.active
    }

    /// How long it has been quiet at `now`.
    pub(in crate::core) fn quiet_for(&self, now: Instant) -> Duration {
        now.duration_since(self.quiet_since)
    }

    /// Whether it used more than [`IDLE_CPU`] since it was last looked at,
    /// its CPU time now being `usage`.
    pub(in crate::core) fn busy(&self, usage: Option<u64>, now: Instant) -> bool {
        let elapsed = self.quiet_for(now);
        match (self.usage, usage) {
            (Some(a), Some(b)) if elapsed > Duration::ZERO => {
                (b.saturating_sub(a) as f64 / 1e9) / elapsed.as_secs_f64() > IDLE_CPU
            }
            _ => false,
        }
    }

    /// Something happened (a message, CPU use): its quiet starts again,
    /// counted from `sent` messages and `usage`.
    pub(in crate::core) fn heard(&mut self, sent: u64, usage: Option<u64>, now: Instant) {
        self.sent = sent;
        self.usage = usage;
        self.quiet_since = now;
    }

    /// Messages sent to its channels when last looked at.
    pub(in crate::core) fn sent(&self) -> u64 {
        self.sent
    }

    /// It could not be suspended now: its quiet starts again.
    pub(in crate::core) fn stay_active(&mut self, now: Instant) {
        self.quiet_since = now;
    }

    pub(in crate::core) fn has_gate(&self) -> bool {
        self.gate.is_some()
    }

    pub(in crate::core) fn set_gate(&mut self, gate: Option<Box<dyn Gate>>) {
        self.gate = gate;
    }

    /// Suspends cell `id` (its CPU time now `usage`): idle, gate closed.
    pub(in crate::core) fn suspend(&mut self, id: u64, usage: Option<u64>) {
        self.active = false;
        self.usage = usage;
        if let Some(g) = self.gate.as_mut()
            && let Err(e) = g.close()
        {
            warn!("cell {id}: cannot suspend it: {e}");
        }
    }

    /// Wakes cell `id` at `now`: active, gate open.
    pub(in crate::core) fn wake(&mut self, id: u64, now: Instant) {
        self.active = true;
        self.quiet_since = now;
        self.usage = None;
        if let Some(g) = self.gate.as_mut()
            && let Err(e) = g.open()
        {
            warn!("cell {id}: cannot resume it: {e}");
        }
    }
}

/// The message-triggered cells followed, by id.
#[derive(Debug, Default)]
pub(in crate::core) struct Messages {
    cells: BTreeMap<u64, MessageState>,
}

impl Messages {
    /// Starts following cell `id`, active, quiet since `now` (nothing if
    /// followed already).
    pub(in crate::core) fn follow(&mut self, id: u64, now: Instant) {
        self.cells.entry(id).or_insert(MessageState {
            active: true,
            sent: 0,
            usage: None,
            quiet_since: now,
            gate: None,
        });
    }

    /// Whether cell `id` is active (a cell not followed is).
    pub(in crate::core) fn active(&self, id: u64) -> bool {
        self.cells.get(&id).is_none_or(|m| m.active)
    }

    pub(in crate::core) fn follows(&self, id: u64) -> bool {
        self.cells.contains_key(&id)
    }

    pub(in crate::core) fn ids(&self) -> Vec<u64> {
        self.cells.keys().copied().collect()
    }

    /// Stops following cell `id` (it ended).
    pub(in crate::core) fn forget(&mut self, id: u64) {
        self.cells.remove(&id);
    }

    pub(in crate::core) fn get_mut(&mut self, id: u64) -> Option<&mut MessageState> {
        self.cells.get_mut(&id)
    }
}
