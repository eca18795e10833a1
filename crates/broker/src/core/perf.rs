//! Reading, every tick, what each cell achieved and how loaded the machine
//! is; `crate::perf` keeps the series and reads windows of them.
//!
//! Per cell: the CPUs it held, its CPU time (from the backend, already
//! read for demand), its report pages' counters (memory reads), and every
//! [`RUN_DELAY_EVERY`] ticks the time its members' threads waited for a
//! CPU (`/proc`, bounded per cell). Per machine: `/proc/stat` and
//! `/proc/pressure/cpu`, and the CPU time all cells used.

use super::Core;
use crate::perf::{LoadSample, Sample};
use std::time::Instant;

/// Run delay is read every this many ticks (it costs a file per thread).
pub const RUN_DELAY_EVERY: u64 = 5;

/// Threads read per member process, and member processes read per cell.
pub const RUN_DELAY_THREADS: usize = 64;
const RUN_DELAY_MEMBERS: usize = 16;

impl Core {
    /// Adds this tick's sample to cell `id`'s series: `usage` is its CPU
    /// time so far (`None`: not measurable), `granted` the CPUs it held.
    pub(super) fn observe(&mut self, id: u64, now: Instant, usage: Option<u64>, granted: u32) {
        let read_delay = self.ticks.is_multiple_of(RUN_DELAY_EVERY);
        let Some(c) = self.cells.get_mut(&id) else {
            return;
        };
        let mut reports = allot_proto::Reports::default();
        let mut pages = c.pages.len() as u64;
        for p in &c.pages {
            if let Some(r) = p.reports() {
                reports = reports.plus(&r.snapshot());
            }
            pages = pages
                .rotate_left(17)
                .wrapping_add(p.page() as *const allot_proto::GrantPage as u64);
        }
        let run_delay_ns = if read_delay {
            c.members
                .iter()
                .take(RUN_DELAY_MEMBERS)
                .filter_map(|m| self.os.run_delay_ns(m.pid, RUN_DELAY_THREADS))
                .reduce(u64::saturating_add)
        } else {
            None
        };
        // The cells' CPU time, counted by increments so that cells coming
        // and going do not make the sum jump.
        match (c.perf.last().and_then(|s| s.usage_ns), usage) {
            (Some(before), Some(now)) => {
                self.cells_used_ns = self
                    .cells_used_ns
                    .saturating_add(now.saturating_sub(before));
            }
            (_, None) => self.cells_unmeasured = true,
            (None, Some(_)) => {}
        }
        c.perf.record(Sample {
            at: now,
            cpus: granted,
            usage_ns: usage,
            run_delay_ns,
            reports,
            pages,
        });
    }

    /// Adds this tick's sample to the machine's series (after every
    /// cell's [`Core::observe`]).
    pub(super) fn observe_machine(&mut self, now: Instant) {
        let cells_ns = (!std::mem::take(&mut self.cells_unmeasured)).then_some(self.cells_used_ns);
        if let Some(system) = self.os.system_cpu() {
            self.load.record(LoadSample {
                at: now,
                system,
                cells_ns,
            });
        }
    }
}
