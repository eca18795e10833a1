//! What one user may make the broker keep when registering a cell: how
//! many cells, waiting places and guarantees (`[limits]` in the
//! configuration, [`crate::config::Limits`]). Root is exempt from the
//! per-user limits, and the broker's own user from the guarantee ones (a
//! user's own broker serves that user alone).
//!
//! Guarantees are bounded so that no one user can take every CPU from the
//! others and pause their programs: one user's cells, admitted and
//! waiting, may hold at most `guaranteed_cpus` guaranteed CPUs (by default
//! all but one of the CPUs for cells) and `guaranteed_memory_mib` of
//! guaranteed memory (by default three quarters of what cells may be
//! guaranteed), and each weighs at most `limits.weight`.

use super::{Engine, Peer, err};
use allot_plan::CellSpec;
use allot_proto::msg::{ErrorCode, Reply};

use super::register::REGISTER;

impl Engine {
    /// Checks what one user's cells may be guaranteed together: CPUs
    /// (`limits.guaranteed_cpus`) and memory (`limits.guaranteed_memory_mib`),
    /// counting the cells they hold and those they wait for, so that no
    /// one user can take every CPU from the others and pause their
    /// programs. Root and the broker's own user are exempt.
    pub(super) fn check_guarantees(&self, peer: Peer, spec: &CellSpec) -> Result<(), Reply> {
        if !peer.limited() || peer.uid == self.uid {
            return Ok(());
        }
        let limit = |msg: String| Err(err(ErrorCode::Limit, REGISTER, msg));
        if spec.weight > self.limits.weight {
            return limit(format!(
                "weight {} is more than one user's cell may have ({}, limits.weight)",
                spec.weight, self.limits.weight
            ));
        }
        let specs = self
            .cells
            .values()
            .filter(|c| c.uid == peer.uid)
            .map(|c| &c.spec)
            .chain(
                self.cells
                    .queue
                    .iter()
                    .filter(|q| q.uid == peer.uid)
                    .map(|q| &q.spec),
            )
            .chain(std::iter::once(spec));
        let (cpus, memory) = specs.fold((0u32, 0u64), |(c, m), s| {
            (c + s.guaranteed(), m + s.memory.min)
        });
        let l = &self.limits;
        let max_cpus = match l.guaranteed_cpus {
            0 => self.planner.capacity().saturating_sub(1).max(1),
            n => n,
        };
        if spec.guaranteed() > 0 && cpus > max_cpus {
            return limit(format!(
                "uid {} would hold or wait for {cpus} guaranteed CPUs, more than one user may \
                 ({max_cpus}, limits.guaranteed_cpus; by default all but one of the CPUs for \
                 cells, so that other users' programs keep one); ask for fewer",
                peer.uid
            ));
        }
        let promisable = self
            .memory
            .capacity
            .map(|c| c.saturating_sub(self.memory.reserve));
        let max_memory = match l.guaranteed_memory_mib {
            0 => promisable.map(|p| p / 4 * 3),
            n => Some(n << 20),
        };
        if let Some(max) = max_memory.filter(|&m| spec.memory.min > 0 && memory > m) {
            return limit(format!(
                "uid {} would be guaranteed {} of memory, more than one user may ({}, \
                 limits.guaranteed_memory_mib; by default three quarters of what cells may be \
                 guaranteed); ask for less",
                peer.uid,
                allot_plan::spec::Size(memory),
                allot_plan::spec::Size(max)
            ));
        }
        Ok(())
    }

    /// Checks the caller's per-user and the total cell limits.
    pub(super) fn check_cell_limits(&self, peer: Peer, queueing: bool) -> Result<(), Reply> {
        let limit = |msg: String| Err(err(ErrorCode::Limit, REGISTER, msg));
        let l = &self.limits;
        if self.cells.len() >= l.cells_total as usize {
            return limit(format!(
                "the broker holds {} cells, its limit (limits.cells_total); retry when some end",
                self.cells.len()
            ));
        }
        if !peer.limited() {
            return Ok(());
        }
        let mine = self.cells.values().filter(|c| c.uid == peer.uid).count();
        if mine >= l.cells as usize {
            return limit(format!(
                "uid {} holds {mine} cells, the limit per user (limits.cells); end some first",
                peer.uid
            ));
        }
        if queueing {
            let queued = self
                .cells
                .queue
                .iter()
                .filter(|q| q.uid == peer.uid)
                .count();
            if queued >= l.queued as usize {
                return limit(format!(
                    "uid {} has {queued} cells waiting, the limit per user (limits.queued)",
                    peer.uid
                ));
            }
        }
        Ok(())
    }
}
