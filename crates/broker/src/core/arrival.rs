//! Arrivals: admitted cells whose processes join them. A newcomer's
//! grant reaches the kernel before any of its processes joins (they run
//! their first instruction inside it), so joining follows a re-plan.
//!
//! Under the event loop (`Engine::batch_arrivals`), the cells admitted in
//! one turn of the loop join together at its end (`Engine::settle`): one
//! plan and one round of CPU-set writes for a burst of programs started
//! together, instead of one per program, each rewriting every earlier
//! newcomer's CPUs; and every newcomer of the burst starts with the grant
//! the whole burst leaves it, instead of the whole machine it would have
//! had alone for a moment. A lone registration costs the same either way.
//! Invariant: `arriving` is empty whenever the loop waits for events.
//!
//! Between turns the loop also has the backend make the next cell's
//! groups ([`Engine::make_next_ahead`]): a registration then finds them
//! made, and its reply does not wait for the directories' creation (the
//! largest part of the broker's work for it on cgroup v1).

use super::state::arrival::Arriving;
use super::{Effect, Engine, answer, err};
use crate::journal::{MemberRec, Record};
use crate::log::{info, warn};
use crate::names::shown;
use crate::peer::{Peer, SessionId};
use allot_proto::msg::{ErrorCode, Reply};

/// The request kind of a registration.
const REGISTER: u16 = 0x02;

impl Engine {
    /// Between turns of the event loop: has the backend make the groups
    /// of the id the next cell will get, unless it has already.
    pub(super) fn make_next_ahead(&mut self) {
        let next = self.cells.next_id();
        if self.kernel.made_ahead() == Some(next) || self.ahead.joining().is_some() {
            return;
        }
        if let Err(e) = self.kernel.make_ahead(next)
            && self.ahead.first_failure()
        {
            warn!(
                "cannot make a cell's groups ahead of its registration ({e}); each registration makes its own"
            );
        }
    }

    /// Cell `cell` added a process (its registering process has moved
    /// itself in by then), or `None`: a tick passed. Groups may be made
    /// ahead again.
    pub(super) fn joined_itself(&mut self, cell: Option<u64>) {
        if cell.is_none() || self.ahead.joining() == cell {
            self.ahead.set_joining(None);
        }
    }

    /// The id whose groups are made ahead, while no cell holds it.
    pub(crate) fn made_ahead(&self) -> Option<u64> {
        self.kernel.made_ahead()
    }

    /// Makes the event loop defer joining to the end of each turn
    /// (`settle`); off by default, so a caller driving the core directly
    /// gets every reply from the call that caused it.
    pub fn batch_arrivals(&mut self, on: bool) {
        self.batch_arrivals = on;
    }

    /// Whether `peer`, registering `members`, may be handed its cell's
    /// join files to move itself in: it must be the only member, and the
    /// files are opened with the broker's credentials (the kernel checks a
    /// cgroup write against the opener's), so only a peer who could open
    /// them itself gets them — root, or the broker's own user.
    pub(super) fn may_join_itself(&self, peer: Peer, members: &[u32]) -> bool {
        members == [peer.pid] && (peer.uid == 0 || peer.uid == rustix::process::geteuid().as_raw())
    }

    /// Whether cell `id` was admitted in this turn and its processes have
    /// not joined yet.
    pub(crate) fn is_arriving(&self, id: u64) -> bool {
        self.arriving.iter().any(|a| a.id == id)
    }

    /// Takes cell `id` out of this turn's newcomers, before its processes
    /// join; the session to answer. `None`: not a newcomer waiting.
    pub(super) fn take_arriving(&mut self, id: u64) -> Option<SessionId> {
        let at = self.arriving.iter().position(|a| a.id == id)?;
        Some(self.arriving.remove(at).session)
    }

    /// The step of [`Engine::settle`].
    pub(super) fn settle_arrivals(&mut self) -> Vec<Effect> {
        if self.arriving.is_empty() {
            return vec![];
        }
        self.reconcile();
        let arriving = std::mem::take(&mut self.arriving);
        arriving.into_iter().flat_map(|a| self.join(a)).collect()
    }

    /// Joins `a`'s processes to its cell (whose grant the kernel already
    /// has) and answers the registration.
    pub(super) fn join(&mut self, a: Arriving) -> Vec<Effect> {
        let Arriving {
            id,
            members,
            session,
            token,
            joins_itself,
            registrant,
        } = a;
        if !self.cells.contains_key(&id) {
            // Released (by an id guessed before the reply) in this turn.
            return vec![answer(
                session,
                err(
                    ErrorCode::Invalid,
                    REGISTER,
                    "the cell was released before its processes joined it",
                ),
            )];
        }
        let join_files = if joins_itself {
            let joiner = members.first().copied().unwrap_or(0);
            self.kernel.join_files(id, joiner).unwrap_or_else(|e| {
                warn!("cell {id}: {e}; moving its process instead");
                Vec::new()
            })
        } else {
            Vec::new()
        };
        if !join_files.is_empty() {
            self.ahead.set_joining(Some(id));
        }
        let mut effects = Vec::new();
        for pid in members {
            let start = match registrant {
                Some((p, start)) if p == pid => Some(start),
                _ => self.os.start_time(pid),
            };
            let Some(start) = start else {
                continue;
            };
            let (how, took) = if join_files.is_empty() {
                let (attached, took) = self.kernel.attach(id, pid);
                if let Err(e) = attached {
                    warn!("cell {id}: {e}");
                    continue;
                }
                ("", Some(took))
            } else {
                (" (moves itself in)", None)
            };
            let m = MemberRec { pid, start };
            if !self.cells.join(id, m) {
                continue; // a member of another cell meanwhile
            }
            self.join_class(id, pid);
            let c = self.cells.get_mut(&id).expect("activated");
            c.timeline
                .note("joined", format!("process {pid}{how}"), took);
            self.account.members_changed();
            self.journal(&[Record::Member { id, member: m }]);
            effects.push(Effect::Watch(pid));
        }
        let c = &self.cells[&id];
        if c.members().is_empty() {
            // Every process vanished while we set up: nothing to manage.
            let mut e = self.end_cell(id, "its processes exited before they joined");
            self.reconcile();
            e.push(answer(
                session,
                err(
                    ErrorCode::Invalid,
                    REGISTER,
                    "the cell's processes exited before they could join it",
                ),
            ));
            return e;
        }
        self.counters.admitted += 1;
        info!(
            "cell {id} ({}) admitted: {}; CPUs {}",
            shown(&c.name),
            c.spec,
            c.published
                .as_ref()
                .map(|g| g.cpus.to_string())
                .unwrap_or_default()
        );
        let fd = rustix::io::fcntl_dupfd_cloexec(c.pages[0].fd(), 0).ok();
        let generation = c.generation;
        let c = self.cells.get_mut(&id).expect("present above");
        c.timeline
            .note("registered", format!("generation {generation}"), None);
        effects.push(Effect::Reply {
            session,
            reply: Reply::Registered {
                cell: id,
                token,
                generation,
            },
            // The page first, then the join files (`Registered`).
            fds: fd
                .into_iter()
                .chain(join_files.into_iter().map(rustix::fd::OwnedFd::from))
                .collect(),
        });
        effects
    }
}
