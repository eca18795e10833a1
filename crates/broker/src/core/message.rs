//! Message-triggered cells (Tessellation): a cell that holds nothing while
//! no message comes, and is activated with its grant when one arrives on
//! a channel whose receiving end its processes hold.
//!
//! States, per cell with a `Message { idle_ms }` contract:
//!
//! - **active** (the state a cell is admitted in, so that its program can
//!   start and open its channels): planned as a best-effort cell of at
//!   most the CPUs it covers (`CellSpec::as_active_message`).
//! - **idle**: left out of the plan (it holds nothing; the others get its
//!   CPUs) and suspended by the freezer where the backend has one.
//!
//! Active → idle, on a tick, when for `idle_ms` no message was sent to
//! any of its channels, none waits, and the cell used under a twentieth
//! of a CPU; and only if it holds at least one receiving end (else nothing
//! could wake it) and the backend can suspend it (a freezer: on the
//! affinity backend it stays active, since running while left out of the
//! plan it would use CPUs given to others). Going idle arms each channel's data doorbell
//! (`Channel::arm_doorbell`: the next message rings it) and hands the
//! server a copy of each doorbell to poll (`Effect::WatchDoorbell`);
//! a message already waiting keeps the cell active.
//!
//! Idle → active when a doorbell rings (`Engine::doorbell`: the server's
//! epoll, so activation takes one loop iteration, not a tick) or, as a
//! fallback, when a tick sees a message waiting: the cell is thawed and
//! re-planned, and its grant published in the same step. The server never
//! reads a doorbell it polls, so the cell's own receiver, once it runs,
//! sees the ring too.

use super::{Effect, Engine};
use crate::log::{debug, info, warn};
use std::time::{Duration, Instant};

impl Engine {
    /// Starts following cell `id` if it is message-triggered (it starts
    /// active).
    pub(super) fn follow_message(&mut self, id: u64, now: Instant) {
        if self.cells.get(&id).is_some_and(|c| c.spec.is_message()) {
            self.messages.follow(id, now);
        }
    }

    /// Whether cell `id` is planned now (an idle message-triggered cell is
    /// not).
    pub(crate) fn planned(&self, id: u64) -> bool {
        self.messages.active(id)
    }

    /// Moves message-triggered cells between their states (see the module
    /// notes); returns effects and whether the plan must change.
    pub(super) fn message_tick(&mut self, now: Instant) -> (Vec<Effect>, bool) {
        let mut effects = Vec::new();
        let mut changed = false;
        let new: Vec<u64> = self
            .cells
            .iter()
            .filter(|(id, c)| c.spec.is_message() && !self.messages.follows(**id))
            .map(|(id, _)| *id)
            .collect();
        for id in new {
            self.follow_message(id, now);
        }
        // Cells that ended: their doorbells are no longer watched.
        for id in self.messages.ids() {
            if !self.cells.contains_key(&id) {
                self.messages.forget(id);
                effects.push(Effect::ForgetDoorbell(id));
            }
        }
        for id in self.messages.ids() {
            let Some(c) = self.cells.get(&id) else {
                continue;
            };
            let idle_after = match c.spec.time {
                allot_spec::TimeContract::Message { idle_ms } => {
                    Duration::from_millis(u64::from(idle_ms))
                }
                _ => continue,
            };
            let channels = self.channels.receiving(id);
            let sent: u64 = channels.iter().map(|ch| ch.sent()).sum();
            let waiting = channels.iter().any(|ch| !ch.is_empty());
            let held = !channels.is_empty();
            let usage = self.kernel.usage_ns(id);
            let m = self.messages.get_mut(id).expect("listed above");
            let busy = m.busy(usage, now);
            if !m.active() {
                if waiting {
                    // A doorbell missed (or not pollable): wake it now.
                    effects.extend(self.wake_message(id, now, "a message waits"));
                    changed = true;
                }
                continue;
            }
            if sent != m.sent() || waiting || busy || !held {
                m.heard(sent, usage, now);
                continue;
            }
            if m.quiet_for(now) < idle_after {
                continue;
            }
            // Quiet for idle_ms. A backend that cannot suspend the cell
            // (affinity) leaves it active: asleep but running, it would
            // run on CPUs the plan gives to others, exclusive ones too.
            if !m.has_gate() {
                m.set_gate(match self.kernel.gate(id) {
                    Ok(g) => g,
                    Err(e) => {
                        warn!("cell {id}: {e}; it stays active while idle");
                        None
                    }
                });
            }
            if !m.has_gate() {
                m.stay_active(now);
                continue;
            }
            // Arm every doorbell, then suspend it.
            let armed = channels.iter().all(|ch| ch.arm_doorbell());
            if !armed {
                m.stay_active(now);
                continue;
            }
            let fds: Vec<rustix::fd::OwnedFd> = channels
                .iter()
                .filter_map(|ch| ch.fds()[1].try_clone_to_owned().ok())
                .collect();
            m.suspend(id, usage);
            debug!("cell {id}: idle for {idle_after:?}; it holds nothing until a message comes");
            effects.push(Effect::WatchDoorbell { cell: id, fds });
            changed = true;
        }
        (effects, changed)
    }

    /// The step of [`Engine::doorbell`].
    pub(super) fn doorbell_rang(&mut self, cell: u64) -> Vec<Effect> {
        let now = Instant::now();
        if self.messages.active(cell) {
            return vec![];
        }
        let mut effects = self.wake_message(cell, now, "a message arrived");
        self.reconcile();
        effects.extend(self.admit_queued());
        effects
    }

    /// Thaws cell `id` and marks it active (the caller re-plans).
    fn wake_message(&mut self, id: u64, now: Instant, why: &str) -> Vec<Effect> {
        let Some(m) = self.messages.get_mut(id) else {
            return vec![];
        };
        m.wake(id, now);
        info!("cell {id}: activated ({why})");
        vec![Effect::ForgetDoorbell(id)]
    }
}
