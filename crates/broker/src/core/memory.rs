//! Memory capacity per cell: admitting memory guarantees, putting a cell's
//! guarantee and limit into the kernel, and reporting what the kernel did
//! at the limit (`allot_enforce::memory` has the files); and the rest of
//! the memory system: a cell's L3 ways and memory bandwidth ceiling, its
//! class of service in resctrl (`allot_enforce::resctrl`).
//!
//! Invariants:
//! - **Admission never promises more than there is**: the guarantees of
//!   admitted cells (their `memory.min`) sum to at most the capacity (the
//!   machine's memory, or an enclosing memory group's limit when lower)
//!   less the reserve ([`admit`]). A guarantee that can never fit is
//!   refused for good; one that fits once others end is refused now (or
//!   waits, with `--wait`).
//! - A cell asking for memory on a backend without memory control is
//!   refused with the reason: nothing would enforce it.
//! - A limit below what the cell's processes use already is refused before
//!   anything changes: at registration against their resident memory, for
//!   a running cell against what the kernel charges it.
//! - **The program pays**: at its limit the kernel reclaims or kills inside
//!   the cell. The broker changes nothing then; it reports each OOM kill
//!   once (log, timeline, status).
//! - **Classes of service** are admitted like guarantees: an ask that
//!   cannot fit beside the admitted cells' is refused now (or waits), one
//!   that cannot fit alone, or on a machine without resctrl, never. The
//!   classes in the kernel are those of the admitted cells, rewritten as a
//!   whole whenever a cell with one arrives, changes or ends; every thread
//!   of a member process joins its cell's class when it joins the cell
//!   (threads it creates later inherit it).

use super::Engine;
use crate::{info, warn};
use allot_enforce::memory::MemoryUse;
use allot_enforce::resctrl::{self, Resctrl};
use allot_plan::Memory;
use allot_plan::spec::Size;
use std::collections::BTreeMap;

/// How often the tick reads every cell's memory files (four or five a
/// cell): at 1000 cells, reading them on every 100 ms tick took most of
/// the event loop's time. An OOM kill is reported within this, and at
/// the latest when its cell ends.
pub const WATCH_MEMORY_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The default reserve: a twentieth of the capacity.
pub const DEFAULT_RESERVE_DIVISOR: u64 = 20;

/// The memory side of the broker.
#[derive(Debug)]
pub(crate) struct MemoryControl {
    /// Bytes the cells live within; `None`: the backend has no memory
    /// control.
    pub(crate) capacity: Option<u64>,
    /// Bytes never guaranteed to cells.
    pub(crate) reserve: u64,
    /// What the kernel counted for each cell at the last look.
    pub(crate) used: BTreeMap<u64, MemoryUse>,
    /// When every cell's memory was last read ([`WATCH_MEMORY_EVERY`]).
    pub(crate) watched_at: Option<std::time::Instant>,
    /// resctrl, or why cache ways and bandwidth cannot be had here.
    pub(crate) resctrl: Result<Resctrl, String>,
}

/// Whether a guarantee of `asked` bytes fits beside `guaranteed` bytes
/// guaranteed to other cells, within `capacity` less `reserve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It fits now.
    Fits,
    /// It fits once other guarantees end.
    NotNow(String),
    /// It can never fit, or nothing would enforce it.
    Never(String),
}

/// Admission of memory `asked` (pure).
pub fn admit(capacity: Option<u64>, reserve: u64, guaranteed: u64, asked: &Memory) -> Verdict {
    if asked.is_none() {
        return Verdict::Fits;
    }
    let Some(capacity) = capacity else {
        return Verdict::Never(
            "the broker's backend has no memory control (it needs cgroup v2 with the memory \
             controller, or the cgroup v1 memory hierarchy). Without root: run it in a systemd \
             user scope that limits its memory (systemd-run --user --scope -p MemoryMax=SIZE \
             -- allot run …), or start your own broker on a cgroup v2 subtree delegated to you \
             (cgroup2_root, see docs/operations.md); as root: start the broker with such a \
             backend. Or ask for no memory"
                .to_string(),
        );
    };
    let promisable = capacity.saturating_sub(reserve);
    if asked.min > promisable {
        return Verdict::Never(format!(
            "a memory guarantee of {} is more than the {} cells may be guaranteed here \
             ({} less a reserve of {})",
            Size(asked.min),
            Size(promisable),
            Size(capacity),
            Size(reserve)
        ));
    }
    if guaranteed.saturating_add(asked.min) > promisable {
        return Verdict::NotNow(format!(
            "asks for {} of memory guaranteed but only {} of {} is unguaranteed now",
            Size(asked.min),
            Size(promisable.saturating_sub(guaranteed)),
            Size(promisable)
        ));
    }
    Verdict::Fits
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
}

impl Engine {
    /// Bytes of memory guaranteed to admitted cells other than `except`.
    pub(crate) fn memory_guaranteed(&self, except: Option<u64>) -> u64 {
        self.cells
            .iter()
            .filter(|(id, _)| Some(**id) != except)
            .map(|(_, c)| c.spec.memory.min)
            .sum()
    }

    /// The memory verdict for `asked`, beside every admitted cell but
    /// `except`.
    pub(super) fn memory_verdict(&self, asked: &Memory, except: Option<u64>) -> Verdict {
        admit(
            self.memory.capacity,
            self.memory.reserve,
            self.memory_guaranteed(except),
            asked,
        )
    }

    /// Why a limit of `asked` is below what `pids` have resident now, if
    /// it is.
    pub(super) fn below_resident(&self, asked: &Memory, pids: &[u32]) -> Option<String> {
        if asked.max == 0 {
            return None;
        }
        let resident: u64 = pids.iter().filter_map(|&p| self.os.rss_bytes(p)).sum();
        (resident > asked.max).then(|| {
            format!(
                "the memory limit {} is below what its processes use already ({} resident); \
                 raise --memory-max",
                Size(asked.max),
                Size(resident)
            )
        })
    }

    /// Reads every cell's memory from the kernel and reports OOM kills
    /// that happened since the last look, at most once per
    /// [`WATCH_MEMORY_EVERY`].
    pub(super) fn watch_memory(&mut self, now: std::time::Instant) {
        if self.memory.capacity.is_none() {
            return;
        }
        if self
            .memory
            .watched_at
            .is_some_and(|at| now.saturating_duration_since(at) < WATCH_MEMORY_EVERY)
        {
            return;
        }
        self.memory.watched_at = Some(now);
        // (An ended cell's entry went with it: `end_cell`.)
        let ids: Vec<u64> = self.cells.keys().copied().collect();
        for id in ids {
            self.observe_memory(id);
        }
    }

    /// Reads cell `id`'s memory, reporting OOM kills since the last look
    /// (also called as the cell ends: a program the kernel killed is
    /// often its last process).
    pub(super) fn observe_memory(&mut self, id: u64) {
        if self.memory.capacity.is_none() {
            return;
        }
        let Some(now) = self.enforcer.memory_use(id) else {
            return;
        };
        let before = self.memory.used.get(&id).map_or(0, |u| u.oom_kills);
        if now.oom_kills > before
            && let Some(c) = self.cells.get_mut(&id)
        {
            let killed = now.oom_kills - before;
            let limit = if now.limit == 0 {
                "an enclosing limit".to_string()
            } else {
                format!("its limit of {}", Size(now.limit))
            };
            warn!(
                "cell {id}: the kernel killed {killed} of its processes: out of memory at \
                 {limit} (the cell's own processes pay; nothing else was touched)"
            );
            c.timeline
                .note("oom", format!("{killed} killed at {limit}"), None);
        }
        self.memory.used.insert(id, now);
    }

    /// The classes cells ask for: every admitted cell's but `except`'s,
    /// and `extra` (a newcomer's or a new spec's).
    fn cache_asks(&self, except: Option<u64>, extra: Option<resctrl::Ask>) -> Vec<resctrl::Ask> {
        self.cells
            .iter()
            .filter(|(id, c)| Some(**id) != except && !c.spec.cache.is_none())
            .map(|(&cell, c)| resctrl::Ask {
                cell,
                ways: c.spec.cache.ways,
                bandwidth: c.spec.cache.bandwidth,
            })
            .chain(extra)
            .collect()
    }

    /// The verdict on a cell (`id`: a running one changing its spec)
    /// asking for `cache`.
    pub(super) fn cache_verdict(&self, cache: &allot_plan::Cache, id: Option<u64>) -> Verdict {
        if cache.is_none() {
            return Verdict::Fits;
        }
        let r = match &self.memory.resctrl {
            Ok(r) => r,
            Err(why) => return Verdict::Never(why.clone()),
        };
        let ask = resctrl::Ask {
            // (A newcomer's id is not known yet: one no cell has.)
            cell: id.unwrap_or(u64::MAX),
            ways: cache.ways,
            bandwidth: cache.bandwidth,
        };
        if let Err(why) = resctrl::allocate(r.facts(), &[ask]) {
            return Verdict::Never(why);
        }
        match resctrl::allocate(r.facts(), &self.cache_asks(id, Some(ask))) {
            Ok(_) => Verdict::Fits,
            Err(why) => Verdict::NotNow(why),
        }
    }

    /// Writes the admitted cells' classes to the kernel.
    pub(super) fn apply_classes(&mut self) {
        let asks = self.cache_asks(None, None);
        if let Ok(r) = &mut self.memory.resctrl
            && let Err(e) = r.apply(&asks)
        {
            warn!("classes of service: {e}");
        }
    }

    /// Puts every thread of process `pid`, a member of cell `id`, in the
    /// cell's class, if it has one.
    pub(super) fn join_class(&mut self, id: u64, pid: u32) {
        let Ok(r) = &self.memory.resctrl else { return };
        if r.class(id).is_none() {
            return;
        }
        let tids = self.os.threads(pid).unwrap_or_default();
        if let Err(e) = r.join(id, &tids) {
            warn!("cell {id}: {e}");
        }
    }

    /// Cell `id`'s class, as the status shows it.
    pub(crate) fn cache_status(&self, id: u64) -> Option<allot_proto::status::CellCache> {
        let r = self.memory.resctrl.as_ref().ok()?;
        let c = r.class(id)?;
        Some(allot_proto::status::CellCache {
            mask: format!("{:x}", c.mask),
            bandwidth: c.bandwidth,
            llc_bytes: r.usage(id).map(|(llc, _)| llc),
        })
    }

    /// Puts cell `id`'s memory spec into the kernel; the error says why
    /// the kernel refused.
    pub(super) fn apply_memory(&mut self, id: u64, m: &Memory) -> Result<(), String> {
        match self.enforcer.set_memory(id, m) {
            Ok(_) => {
                if !m.is_none() {
                    info!("cell {id}: memory {m}");
                }
                Ok(())
            }
            Err(e) if e.is_busy() => Err(format!(
                "the kernel could not bring the cell's memory under the new limit ({e}); \
                 raise --memory-max"
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn asked(min: u64, max: u64) -> Memory {
        Memory { min, max }
    }

    #[test]
    fn guarantees_never_sum_past_the_capacity_less_the_reserve() {
        let cap = Some(16 * G);
        assert_eq!(admit(cap, G, 0, &asked(0, 0)), Verdict::Fits);
        assert_eq!(admit(cap, G, 10 * G, &asked(5 * G, 0)), Verdict::Fits);
        let Verdict::NotNow(why) = admit(cap, G, 11 * G, &asked(5 * G, 0)) else {
            panic!()
        };
        assert_eq!(
            why,
            "asks for 5G of memory guaranteed but only 4G of 15G is unguaranteed now"
        );
        let Verdict::Never(why) = admit(cap, G, 0, &asked(16 * G, 0)) else {
            panic!()
        };
        assert!(why.contains("more than the 15G"), "{why}");
        // A limit alone guarantees nothing: it always fits.
        assert_eq!(admit(cap, G, 15 * G, &asked(0, 64 * G)), Verdict::Fits);
    }

    #[test]
    fn memory_without_memory_control_is_refused_and_none_is_fine() {
        assert_eq!(admit(None, 0, 0, &asked(0, 0)), Verdict::Fits);
        let Verdict::Never(why) = admit(None, 0, 0, &asked(0, G)) else {
            panic!()
        };
        assert!(why.contains("no memory control"), "{why}");
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
