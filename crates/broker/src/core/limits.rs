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
//! guaranteed), and each weighs at most `limits.weight`, all together at
//! most `limits.user_weight`. The same checks judge a cell's registration
//! and every change of its request (`UpdateSpec`, `SetMemory`, …), which
//! counts the cell's new request in place of its old.
//!
//! A CPU that a user's process outside every cell holds exclusively
//! through `require` has the power of a guarantee (other cells leave it),
//! so it counts towards the same `guaranteed_cpus`, checked both ways: a
//! cell's registration counts the user's holds, an acquisition the user's
//! cells. A hold inside a cell counts nothing more: it takes from that
//! cell's grant.

use super::{Engine, err};
use crate::ledger::LedgerError;
use crate::peer::Peer;
use allot_proto::msg::{ErrorCode, LedgerItem, Reply};
use allot_spec::CellSpec;
use std::collections::BTreeSet;

use super::register::REGISTER;

impl Engine {
    /// Checks what one user's cells may be guaranteed together: CPUs
    /// (`limits.guaranteed_cpus`) and memory (`limits.guaranteed_memory_mib`),
    /// counting the cells they hold and those they wait for, so that no
    /// one user can take every CPU from the others and pause their
    /// programs. Root and the broker's own user are exempt.
    /// `replacing`: the cell whose request `spec` would replace (a change
    /// of request), left out of the sums; `kind`: the request's wire kind.
    pub(super) fn check_guarantees(
        &self,
        peer: Peer,
        spec: &CellSpec,
        replacing: Option<u64>,
        kind: u16,
    ) -> Result<(), Reply> {
        if !peer.limited() || peer.uid == self.uid {
            return Ok(());
        }
        let limit = |msg: String| Err(err(ErrorCode::Limit, kind, msg));
        if spec.weight > self.limits.weight {
            return limit(format!(
                "weight {} is more than one user's cell may have ({}, limits.weight)",
                spec.weight, self.limits.weight
            ));
        }
        let (in_cells, memory, weight) = self.cells_guarantee(peer.uid, replacing);
        let weight = weight.saturating_add(spec.weight);
        if weight > self.limits.user_weight {
            return limit(format!(
                "uid {}'s cells would weigh {weight} together, more than one user's may ({}, \
                 limits.user_weight); ask for a smaller weight, or end a cell",
                peer.uid, self.limits.user_weight
            ));
        }
        let held = self.held_outside_by(peer.uid).len() as u32;
        let cpus = in_cells + held + spec.guaranteed();
        let memory = memory + spec.memory.min;
        let l = &self.limits;
        let max_cpus = self.max_guaranteed_cpus();
        if spec.guaranteed() > 0 && cpus > max_cpus {
            return limit(format!(
                "uid {} would hold or wait for {cpus} guaranteed CPUs ({held} of them held \
                 through require outside every cell), more than one user may ({max_cpus}, \
                 limits.guaranteed_cpus; by default all but one of the CPUs for cells, so that \
                 other users' programs keep one); ask for fewer",
                peer.uid
            ));
        }
        let promisable = self
            .memory
            .capacity()
            .map(|c| c.saturating_sub(self.memory.reserve()));
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
                allot_spec::Size(memory),
                allot_spec::Size(max)
            ));
        }
        Ok(())
    }

    /// Checks that an acquisition by `peer` outside every cell keeps its
    /// user within `limits.guaranteed_cpus`: the CPUs its processes hold
    /// exclusively outside cells, these `items` included, and its cells'
    /// guarantees, admitted and waiting. Root and the broker's own user
    /// are exempt; a process in a cell takes from its cell's grant and is
    /// not counted again.
    pub(super) fn check_held_guarantees(
        &mut self,
        peer: Peer,
        items: &[LedgerItem],
    ) -> Result<(), LedgerError> {
        if !peer.limited() || peer.uid == self.uid || self.holder_of(peer.pid).is_some() {
            return Ok(());
        }
        let before = self.held_outside_by(peer.uid);
        let mut after = before.clone();
        for it in items.iter().filter(|it| !it.shared) {
            after.extend(self.account.ledger().cpu_of(it));
        }
        let (in_cells, _, _) = self.cells_guarantee(peer.uid, None);
        let cpus = in_cells + after.len() as u32;
        let max = self.max_guaranteed_cpus();
        if after.len() > before.len() && cpus > max {
            return Err(LedgerError::Limit(format!(
                "uid {} would hold {} CPUs exclusively outside every cell beside {in_cells} \
                 guaranteed to its cells, more than one user may ({max}, \
                 limits.guaranteed_cpus); hold fewer, or share them",
                peer.uid,
                after.len()
            )));
        }
        Ok(())
    }

    /// The guaranteed CPUs, guaranteed memory (bytes) and weights of
    /// `uid`'s cells, admitted and waiting, cell `except` left out.
    fn cells_guarantee(&self, uid: u32, except: Option<u64>) -> (u32, u64, u32) {
        let admitted = self
            .cells
            .iter()
            .filter(|(id, c)| c.uid == uid && Some(**id) != except)
            .map(|(_, c)| &c.spec);
        let waiting = self
            .cells
            .queue
            .iter()
            .filter(|q| q.uid == uid)
            .map(|q| q.spec.spec());
        admitted.chain(waiting).fold((0, 0, 0), |(c, m, w), s| {
            (
                c + s.guaranteed(),
                m + s.memory.min,
                w.saturating_add(s.weight),
            )
        })
    }

    /// The CPUs `uid`'s processes outside every cell hold exclusively.
    fn held_outside_by(&self, uid: u32) -> BTreeSet<usize> {
        let ledger = self.account.ledger();
        ledger
            .exclusive_cpus()
            .into_iter()
            .filter(|(_, pids)| {
                pids.iter()
                    .any(|&p| ledger.uid_of(p) == Some(uid) && self.holder_of_held(p).is_none())
            })
            .map(|(cpu, _)| cpu)
            .collect()
    }

    /// `limits.guaranteed_cpus`, its default (0) made all but one of the
    /// CPUs for cells.
    fn max_guaranteed_cpus(&self) -> u32 {
        match self.limits.guaranteed_cpus {
            0 => self.planner.capacity().saturating_sub(1).max(1),
            n => n,
        }
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
