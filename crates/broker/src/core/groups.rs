//! Launcher groups: a cell that also confines cgroups a launcher made for
//! its own processes (`IncludeGroup`; the mechanism is
//! `allot_enforce::launcher`). Slurm's `task/cgroup` on cgroup v2 keeps a
//! step's tasks in its own `…/step_S/user/task_T` cgroups; the job's cell
//! includes each step's `user` group, so Slurm keeps tracking and
//! removing them while the cell's grant reaches the tasks.
//!
//! A paused cell and a time cell take their gate again when a group is
//! included, so the group stops and goes on with the cell.
//!
//! Rules: only root may ask (the broker writes a cgroup it did not make),
//! and only with the cell's token (the secret of its ticket: the task
//! processes that ask are not the cell's registrant). A group is
//! journaled once included, so a restarted broker includes it again
//! before it counts the cell's processes (a cell whose own directory is
//! empty lives on its groups' processes).

use super::{Engine, err};
use crate::journal::Record;
use crate::log::{info, warn};
use crate::names::shown;
use crate::peer::Peer;
use allot_proto::msg::{ErrorCode, Reply};
use std::path::Path;

const KIND: u16 = 0x16;

impl Engine {
    /// `IncludeGroup`: cell `cell` also confines the launcher's cgroup `dir`.
    pub(super) fn include_group(&mut self, peer: Peer, cell: u64, token: u64, dir: &str) -> Reply {
        if peer.uid != 0 {
            return err(
                ErrorCode::PermissionDenied,
                KIND,
                format!(
                    "only root may give a cell a launcher's cgroup (uid {} asked); \
                     a launcher such as Slurm's plugin asks as root",
                    peer.uid
                ),
            );
        }
        if let Err(r) = self.owned(peer, cell, KIND) {
            return r;
        }
        if self.cells[&cell].token != token || token == 0 {
            return err(
                ErrorCode::PermissionDenied,
                KIND,
                format!("wrong token for cell {cell}"),
            );
        }
        match self.kernel.include_group(cell, Path::new(dir)) {
            Ok(true) => {}
            Ok(false) => {
                return err(
                    ErrorCode::Invalid,
                    KIND,
                    format!(
                        "the {} backend keeps cells in cgroups of its own only; a launcher's \
                         cgroup needs the cgroup2 backend",
                        self.kernel.kind()
                    ),
                );
            }
            Err(e) => return err(ErrorCode::Invalid, KIND, e.to_string()),
        }
        let c = self.cells.get_mut(&cell).expect("checked by owned");
        if !c.groups.iter().any(|g| g == dir) {
            c.groups.push(dir.to_string());
            c.timeline
                .note("group", format!("includes the launcher's {dir}"), None);
            info!(
                "cell {cell} ({}) includes the launcher's cgroup {dir}",
                shown(&c.name)
            );
            self.journal(&[Record::Group {
                id: cell,
                dir: dir.to_string(),
            }]);
            self.regate(cell);
        }
        Reply::Ok
    }

    /// Takes cell `id`'s gate again where one is held (a paused cell, a
    /// time cell's windows): the new one reaches the group just included,
    /// and a paused cell's new gate is closed at once.
    fn regate(&mut self, id: u64) {
        self.repause(id);
        if let Some(window) = self.windows.window(id) {
            let cpus = self.cells[&id].spec.time_cpus();
            match self.kernel.gate(id) {
                Ok(Some(g)) => {
                    self.windows.remove(id);
                    self.windows.add(id, window, cpus, g);
                }
                Ok(None) => {}
                Err(e) => warn!("cell {id}: its windows do not reach its new group: {e}"),
            }
        }
    }

    /// Includes again, after a restart, the groups the journal holds for
    /// cell `id` (before its processes are counted). A group that is gone
    /// or refused now is left out, saying so.
    pub(super) fn restore_groups(&mut self, id: u64, groups: &[String]) -> Vec<String> {
        let mut kept = Vec::new();
        for dir in groups {
            match self.kernel.include_group(id, Path::new(dir)) {
                Ok(true) => kept.push(dir.clone()),
                Ok(false) => {}
                Err(e) => info!("cell {id}: the launcher's cgroup {dir} is left out: {e}"),
            }
        }
        kept
    }
}
