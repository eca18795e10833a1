//! The system minimum (Poli-C's policd, §6.3.2) in the broker: with
//! `confine_unmanaged = true` (an operator's choice: it moves processes
//! allot did not start), processes that asked for nothing run on the
//! reserve ([`allot_enforce::unmanaged`]).
//!
//! - At start and on every tick the broker sweeps the source cgroup
//!   (`unmanaged_from`, by default the backend's hierarchy root) into
//!   allot's `system` group, except processes holding resources of their
//!   own through `require` outside every cell.
//! - A process outside every cell that acquires something leaves the
//!   group before it hears yes; holding nothing again, the next sweep
//!   takes it back.
//! - Processes in cells are never in the source: joining a cell moves
//!   them out of it.
//! - At exit the broker moves everyone back and removes the group; a
//!   broker started without the opt-in removes a group a crashed one
//!   left, so no process stays confined by a broker that is gone.
//!
//! Only the cgroup backends can do this; with another the setting is
//! reported in the status notes and ignored.

use super::Engine;
use crate::config::Config;
use crate::log::{info, warn};
use allot_enforce::BackendKind;
use allot_enforce::cgroupfs::KernelFs;
use allot_enforce::unmanaged::Unmanaged;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

/// The source and allot's directory for `kind`, from this machine's
/// mounts and the configuration.
fn paths(cfg: &Config, kind: BackendKind) -> Option<(PathBuf, PathBuf)> {
    let mounts = allot_enforce::detect::Mounts::read();
    let (root, allot) = match kind {
        BackendKind::Cgroup1 => {
            let cpuset = mounts.v1_for("cpuset")?.to_path_buf();
            let allot = cpuset.join(cfg.cgroup_name());
            (cpuset, allot)
        }
        BackendKind::Cgroup2 => {
            let allot = match &cfg.cgroup2_root {
                Some(r) => r.clone(),
                // The backend's own directory (inside systemd's delegated
                // subtree where PID 1 is systemd).
                None => allot_enforce::cgroup2_layout(&mounts, &cfg.cgroup_name())
                    .ok()?
                    .cells()
                    .to_path_buf(),
            };
            (mounts.cgroup2?, allot)
        }
        _ => return None,
    };
    Some((cfg.unmanaged_from.clone().unwrap_or(root), allot))
}

impl Engine {
    /// Sets up the system minimum for `cfg` (see the module notes); with
    /// the opt-in off, removes what a crashed broker left.
    pub(super) fn open_minimum(&mut self, cfg: &Config) {
        let kind = self.kernel.kind();
        let Some((source, allot)) = paths(cfg, kind) else {
            if cfg.confine_unmanaged {
                let note = format!(
                    "confine_unmanaged needs the cgroup1 or cgroup2 backend (this one is {kind}); \
                     processes outside the cells are not confined"
                );
                warn!("{note}");
                self.backend_notes.push(note);
            }
            return;
        };
        let mut u = Unmanaged::new(Arc::new(KernelFs), source, &allot);
        if !cfg.confine_unmanaged {
            if u.group().exists() {
                match u.release_all() {
                    Ok(()) => info!(
                        "released the processes a broker left in {}",
                        u.group().display()
                    ),
                    Err(e) => warn!("cannot release {}: {e}", u.group().display()),
                }
            }
            return;
        }
        self.unmanaged = Some(u);
        self.sweep_unmanaged();
    }

    /// Moves the processes that asked for nothing onto the reserve.
    pub(crate) fn sweep_unmanaged(&mut self) {
        let Some(u) = self.unmanaged.as_mut() else {
            return;
        };
        let exempt: BTreeSet<u32> = self
            .account
            .outside_holders()
            .filter(|pid| self.account.ledger().holds(*pid))
            .collect();
        match u.sweep(&self.plan.reserve, &exempt) {
            Ok(0) => {}
            Ok(n) => crate::log::debug!(
                "{n} processes outside the cells moved to the reserve {}",
                self.plan.reserve
            ),
            Err(e) => warn!("cannot confine the processes outside the cells: {e}"),
        }
    }

    /// Process `pid` (outside every cell) acquired resources of its own:
    /// it no longer shares the minimum.
    pub(crate) fn unmanaged_holds(&mut self, pid: u32) {
        if let Some(u) = &self.unmanaged {
            u.release(pid);
        }
    }

    /// The broker is leaving: everyone back, the group removed.
    pub(super) fn close_minimum(&mut self) {
        if let Some(mut u) = self.unmanaged.take()
            && let Err(e) = u.release_all()
        {
            warn!("cannot release {}: {e}", u.group().display());
        }
    }
}
