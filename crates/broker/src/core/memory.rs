//! Memory capacity per cell: admitting memory guarantees, putting a cell's
//! guarantee and limit into the kernel, and reporting what the kernel did
//! at the limit (`allot_enforce::memory` has the files); and the rest of
//! the memory system: a cell's L3 ways and memory bandwidth ceiling, its
//! class of service in resctrl (`allot_enforce::resctrl`).
//!
//! Admission of memory guarantees and classes of service is the
//! planner's (`allot_plan::admission`). [`MemoryControl`] owns this
//! side's state behind its methods: the room it gives admission
//! (capacity, reserve, what resctrl offers), the kernel's counts, and
//! resctrl; the engine's methods that join it to the cells, the enforcer
//! and the OS are in `memory_limits`.
//!
//! Invariants:
//! - A limit below what the cell's processes use already is refused before
//!   anything changes: at registration against their resident memory, for
//!   a running cell against what the kernel charges it.
//! - **The program pays**: at its limit the kernel reclaims or kills inside
//!   the cell. The broker changes nothing then; it reports each OOM kill
//!   once (log, timeline, status).
//! - **Classes of service**: the classes in the kernel are those the
//!   planner gives the admitted cells (`allot_plan::cache::allocate`),
//!   rewritten as a whole whenever a cell with one arrives, changes or
//!   ends; every thread
//!   of a member process joins its cell's class when it joins the cell
//!   (threads it creates later inherit it).

use allot_enforce::resctrl::Resctrl;
use allot_spec::MemoryUse;

use std::collections::BTreeMap;

/// How often the tick reads every cell's memory files (four or five a
/// cell): at 1000 cells, reading them on every 100 ms tick took most of
/// the event loop's time. An OOM kill is reported within this, and at
/// the latest when its cell ends.
pub const WATCH_MEMORY_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The default reserve: a twentieth of the capacity.
pub const DEFAULT_RESERVE_DIVISOR: u64 = 20;

/// The memory side of the broker: what it may promise and what the kernel
/// counted, and resctrl. Its fields are its own; the engine reaches them
/// through the methods below.
#[derive(Debug)]
pub(crate) struct MemoryControl {
    /// Bytes the cells live within; `None`: the backend has no memory
    /// control.
    capacity: Option<u64>,
    /// Bytes never guaranteed to cells.
    reserve: u64,
    /// What the kernel counted for each cell at the last look.
    used: BTreeMap<u64, MemoryUse>,
    /// When every cell's memory was last read ([`WATCH_MEMORY_EVERY`]).
    watched_at: Option<std::time::Instant>,
    /// resctrl, or why cache ways and bandwidth cannot be had here.
    resctrl: Result<Resctrl, String>,
}

/// The reserve for `capacity` when none is configured.
pub fn default_reserve(capacity: u64) -> u64 {
    capacity / DEFAULT_RESERVE_DIVISOR
}

impl MemoryControl {
    /// Memory control as the backend reports it, with `reserve` (`None`:
    /// the default for its capacity).
    pub(crate) fn new(
        capacity: Option<u64>,
        reserve: Option<u64>,
        resctrl: Result<Resctrl, String>,
    ) -> MemoryControl {
        MemoryControl {
            capacity,
            reserve: reserve.unwrap_or_else(|| capacity.map_or(0, default_reserve)),
            used: BTreeMap::new(),
            watched_at: None,
            resctrl,
        }
    }

    /// Bytes the cells live within (`None`: no memory control).
    pub(crate) fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    /// Bytes never guaranteed to cells.
    pub(crate) fn reserve(&self) -> u64 {
        self.reserve
    }

    /// What the kernel counted for cell `id` at the last look.
    pub(crate) fn used(&self, id: u64) -> Option<MemoryUse> {
        self.used.get(&id).copied()
    }

    /// Cell `id` ended: its count goes.
    pub(crate) fn forget(&mut self, id: u64) {
        self.used.remove(&id);
    }

    /// Uses `r` for classes of service (a fixture mount, in tests).
    pub(crate) fn set_resctrl(&mut self, r: Resctrl) {
        self.resctrl = Ok(r);
    }

    /// What admission may give cells besides CPUs: the capacity and
    /// reserve, and what resctrl offers (or why it offers nothing).
    pub(crate) fn room(&self) -> allot_plan::Room<'_> {
        allot_plan::Room {
            memory: self.capacity,
            memory_reserve: self.reserve,
            cache: match &self.resctrl {
                Ok(r) => Ok(&r.facts().offer),
                Err(why) => Err(why.as_str()),
            },
        }
    }

    /// Whether every cell's memory is due to be read at `now` (with memory
    /// control, at most once per [`WATCH_MEMORY_EVERY`]); if so, it counts
    /// as read.
    pub(super) fn due(&mut self, now: std::time::Instant) -> bool {
        if self.capacity.is_none()
            || self
                .watched_at
                .is_some_and(|at| now.saturating_duration_since(at) < WATCH_MEMORY_EVERY)
        {
            return false;
        }
        self.watched_at = Some(now);
        true
    }

    /// Records what the kernel counts for cell `id` now; returns how many
    /// of its processes the kernel killed since the last look.
    pub(super) fn observed(&mut self, id: u64, now: MemoryUse) -> u64 {
        let before = self.used.get(&id).map_or(0, |u| u.oom_kills);
        self.used.insert(id, now);
        now.oom_kills.saturating_sub(before)
    }

    /// Gives the cells of `asks` their classes of service (the planner's
    /// division, written by resctrl); without resctrl, nothing.
    pub(super) fn classes(&mut self, asks: &[allot_plan::cache::Ask]) -> Result<(), String> {
        let Ok(r) = &mut self.resctrl else {
            return Ok(());
        };
        let (classes, default) = allot_plan::cache::allocate(&r.facts().offer, asks)?;
        r.apply(&classes, default)
    }

    /// Puts threads `tids` of cell `id` in its class, if it has one.
    pub(super) fn join_class(
        &self,
        id: u64,
        tids: impl FnOnce() -> Vec<u32>,
    ) -> Result<(), String> {
        let Ok(r) = &self.resctrl else {
            return Ok(());
        };
        if r.class(id).is_none() {
            return Ok(());
        }
        r.join(id, &tids())
    }

    /// Cell `id`'s class, as the status shows it.
    pub(crate) fn cache_status(&self, id: u64) -> Option<allot_proto::status::CellCache> {
        let r = self.resctrl.as_ref().ok()?;
        let c = r.class(id)?;
        Some(allot_proto::status::CellCache {
            mask: format!("{:x}", c.mask),
            bandwidth: c.bandwidth,
            llc_bytes: r.usage(id).map(|(llc, _)| llc),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn memory_is_read_once_a_window_and_kills_are_counted_once() {
        let t0 = std::time::Instant::now();
        let mut none = MemoryControl::new(None, None, Err("absent".into()));
        assert!(!none.due(t0), "no memory control: nothing to read");
        let mut m = MemoryControl::new(Some(20 * G), None, Err("absent".into()));
        assert!(m.due(t0));
        assert!(!m.due(t0 + WATCH_MEMORY_EVERY / 2));
        assert!(m.due(t0 + WATCH_MEMORY_EVERY));
        let at = |kills| MemoryUse {
            current: G,
            limit: 2 * G,
            at_limit: 0,
            oom_kills: kills,
            pressure: None,
        };
        assert_eq!(m.observed(7, at(0)), 0);
        assert_eq!(m.observed(7, at(2)), 2, "two kills since the last look");
        assert_eq!(m.observed(7, at(2)), 0, "reported once");
        assert_eq!(m.used(7).map(|u| u.current), Some(G));
        m.forget(7);
        assert_eq!(m.used(7), None);
        assert_eq!(m.room().memory, Some(20 * G));
        assert_eq!(m.room().memory_reserve, G);
        assert_eq!(m.room().cache, Err("absent"));
    }

    #[test]
    fn the_default_reserve_is_a_twentieth() {
        let none = || Err("absent".to_string());
        assert_eq!(MemoryControl::new(Some(20 * G), None, none()).reserve, G);
        assert_eq!(
            MemoryControl::new(Some(20 * G), Some(3 * G), none()).reserve,
            3 * G
        );
        assert_eq!(MemoryControl::new(None, None, none()).reserve, 0);
    }
}
