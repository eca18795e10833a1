//! The engine's side of [`MemoryControl`](super::memory::MemoryControl):
//! what the cells are guaranteed, a limit checked against what their
//! processes hold, a cell's guarantee and limit put into the kernel, what
//! the kernel did at the limits, and the classes of service the cells
//! join. The invariants are `memory`'s.

use super::Engine;
use crate::log::{info, warn};
use allot_spec::{Memory, Size};

impl Engine {
    /// Bytes of memory guaranteed to admitted cells other than `except`.
    pub(crate) fn memory_guaranteed(&self, except: Option<u64>) -> u64 {
        self.cells
            .iter()
            .filter(|(id, _)| Some(**id) != except)
            .map(|(_, c)| c.spec.memory.min)
            .sum()
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
        if !self.memory.due(now) {
            return;
        }
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
        if self.memory.capacity().is_none() {
            return;
        }
        let Some(now) = self.kernel.memory_use(id) else {
            return;
        };
        let killed = self.memory.observed(id, now);
        if killed > 0
            && let Some(c) = self.cells.get_mut(&id)
        {
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
    }

    /// Writes the admitted cells' classes to the kernel.
    pub(super) fn apply_classes(&mut self) {
        let asks: Vec<allot_plan::cache::Ask> = self
            .cells
            .iter()
            .map(|(&id, c)| allot_plan::admission::ask_of(id, &c.spec))
            .collect();
        if let Err(e) = self.memory.classes(&asks) {
            warn!("classes of service: {e}");
        }
    }

    /// Puts every thread of process `pid`, a member of cell `id`, in the
    /// cell's class, if it has one.
    pub(super) fn join_class(&mut self, id: u64, pid: u32) {
        let os = &self.os;
        if let Err(e) = self
            .memory
            .join_class(id, || os.threads(pid).unwrap_or_default())
        {
            warn!("cell {id}: {e}");
        }
    }

    /// Puts cell `id`'s memory spec into the kernel; the error says why
    /// the kernel refused.
    pub(super) fn apply_memory(&mut self, id: u64, m: &Memory) -> Result<(), String> {
        match self.kernel.set_memory(id, m) {
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
