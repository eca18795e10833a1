//! The engine's entry points: the events from outside that run a step
//! (set-up calls such as `set_counters` and `batch_arrivals` aside). Each
//! runs one step and returns what the event loop must do, the records the
//! step asks the journal to keep first ([`Effect::Journal`], see
//! `journaling`), then replies and watches in the order the step made
//! them. The event loop's word on its journal (`Engine::journaled`) is one
//! of them, with the helpers every step uses to record (`journal`,
//! `journal_ready`, `with_records`).

use super::Engine;
use super::effect::{Effect, answer, err};
use super::journaling::REGISTER;
use crate::journal::Record;
use crate::peer::{Peer, SessionId};
use allot_proto::msg::{ErrorCode, Reply, Request};
use rustix::fd::OwnedFd;
use std::time::{Duration, Instant};

impl Engine {
    /// Handles one request from `session` (`fd`: the descriptor that came
    /// with it, if any).
    pub fn handle(
        &mut self,
        session: SessionId,
        peer: Peer,
        req: Request,
        fd: Option<OwnedFd>,
    ) -> Vec<Effect> {
        let effects = self.handle_request(session, peer, req, fd);
        self.with_records(effects)
    }

    /// `ChannelRejoin` with the descriptors that came with it: an end
    /// open before a broker restart comes back (`Channels::adopt`).
    pub fn channel_rejoin(
        &mut self,
        session: SessionId,
        peer: Peer,
        name: &str,
        send: bool,
        fds: Vec<OwnedFd>,
    ) -> Vec<Effect> {
        let effects = self.rejoin_channel(session, peer, name, send, fds);
        self.with_records(effects)
    }

    /// A watched process exited.
    pub fn exited(&mut self, pid: u32) -> Vec<Effect> {
        let effects = self.process_exited(pid);
        self.with_records(effects)
    }

    /// A session closed: its queued cells, its ledger watch and its
    /// channel ends are dropped (the other ends see them gone). Its
    /// admitted cells live on while their processes do.
    pub fn session_closed(&mut self, session: SessionId) -> Vec<Effect> {
        let effects = self.close_session(session);
        self.with_records(effects)
    }

    /// A monitor tick: removals retried, usage → demand → re-plan if any
    /// demand changed; the queue tried again.
    pub fn tick(&mut self, now: Instant) -> Vec<Effect> {
        let effects = self.monitor_tick(now);
        self.with_records(effects)
    }

    /// The gathered arrivals whose turn has come by `now` are answered.
    /// The event loop calls it when [`Engine::next_gathered`] has passed.
    pub fn gathered(&mut self, now: Instant) -> Vec<Effect> {
        let effects = self.gathering_due(now);
        self.with_records(effects)
    }

    /// When the next gathered arrival is due an answer (`None`: none
    /// waits); the event loop wakes for it.
    pub fn next_gathered(&self) -> Option<Instant> {
        self.account.next_gathering_due()
    }

    /// Plans once for every cell admitted since the last call, makes the
    /// kernel follow, then joins their processes and answers them. The
    /// event loop calls it at the end of every turn.
    pub fn settle(&mut self) -> Vec<Effect> {
        let effects = self.settle_arrivals();
        self.with_records(effects)
    }

    /// After a turn's effects are out, before the loop waits again: work
    /// done ahead of the next requests (the next cell's groups, so that
    /// its registration finds them made).
    pub fn between_turns(&mut self) {
        self.make_next_ahead();
    }

    /// A doorbell of cell `cell` rang: activates it if it is idle.
    pub fn doorbell(&mut self, cell: u64) -> Vec<Effect> {
        let effects = self.doorbell_rang(cell);
        self.with_records(effects)
    }

    /// Releases what the broker created, if no cell is left (broker exit).
    /// Cells that still run keep their confinement and journal entries, so
    /// a restarted broker adopts them.
    pub fn shutdown(&mut self) -> Vec<Effect> {
        self.wind_down();
        self.with_records(vec![])
    }
}

impl Engine {
    /// Why the journal is behind, if it is.
    pub fn journal_problem(&self) -> Option<&str> {
        self.journaling.behind()
    }

    /// The event loop's word after it appended `recs` (taking `took`), or
    /// tried to catch up (no records): why the journal is behind, or
    /// `None` when it holds everything. A newcomer whose record was in a
    /// failed append and that has not been answered yet is ended and
    /// refused; the effects say so. Each recorded newcomer's timeline
    /// shows the append that carried its record. The queue moves again at
    /// the next step that tries it (a tick, an exit) once the journal
    /// caught up.
    pub fn journaled(
        &mut self,
        recs: &[Record],
        took: Duration,
        behind: Option<String>,
    ) -> Vec<Effect> {
        let failed = !recs.is_empty() && behind.is_some();
        let mut effects = Vec::new();
        for r in recs {
            let &Record::Cell { id, .. } = r else {
                continue;
            };
            if !failed {
                if let Some(c) = self.cells.get_mut(&id) {
                    c.timeline.note("journal", format!("cell {id}"), Some(took));
                }
            } else if let Some(session) = self.take_arriving(id) {
                let why = behind.as_deref().unwrap_or_default();
                effects.extend(self.end_cell(id, "the journal could not record it"));
                effects.push(answer(
                    session,
                    err(
                        ErrorCode::Internal,
                        REGISTER,
                        format!(
                            "the broker cannot record the cell in its journal ({why}); free \
                             space on its filesystem and retry"
                        ),
                    ),
                ));
            }
        }
        self.journaling.set_behind(behind);
        self.with_records(effects)
    }

    /// Asks the journal to record `recs` (with the step's other records).
    pub(super) fn journal(&mut self, recs: &[Record]) {
        self.journaling.record(recs);
    }

    /// Whether a new cell may be admitted now; the refusal when not.
    pub(super) fn journal_ready(&self, kind: u16) -> Result<(), Reply> {
        self.journaling.ready(kind)
    }

    /// `effects`, after the records this step made: an entry point's
    /// last word.
    pub(super) fn with_records(&mut self, mut effects: Vec<Effect>) -> Vec<Effect> {
        if let Some(j) = self.journaling.take() {
            effects.insert(0, j);
        }
        effects
    }
}
