//! One handler per request; [`Engine::handle`] only dispatches.
//!
//! One-way requests (`Report`, `KindRelease`: see `allot_proto::msg`) never
//! produce a reply, also when they are refused; what is wrong with them is
//! logged (at debug level: a client can send them by the thousand).

use super::{Effect, Engine, answer, err};
use crate::gathering::NotTaken;
use crate::ledger::{InLine, LedgerError, Waiter};
use crate::log::{debug, info};
use crate::peer::{Peer, SessionId};
use allot_proto::msg::{ErrorCode, LedgerItem, Reply, Request};
use rustix::fd::OwnedFd;
use std::time::{Duration, Instant};

impl Engine {
    /// The step of [`Engine::channel_rejoin`].
    pub(super) fn rejoin_channel(
        &mut self,
        session: SessionId,
        peer: Peer,
        name: &str,
        send: bool,
        fds: Vec<OwnedFd>,
    ) -> Vec<Effect> {
        if !self.caller_runs(peer) {
            // `handle_request`'s refusal, for the entry point that brings
            // descriptors along.
            return vec![answer(
                session,
                err(ErrorCode::Invalid, 0x13, caller_ended(peer)),
            )];
        }
        let cell = self.cells.cell_of(peer.pid);
        let r = self.channels.adopt(
            session,
            peer.uid,
            cell,
            name,
            send,
            fds,
            &self.limits,
            Instant::now(),
        );
        vec![answer(
            session,
            match r {
                Ok(()) => {
                    info!("channel {name}: an end came back (session {session})");
                    Reply::Ok
                }
                Err((code, message)) => err(code, 0x13, message),
            },
        )]
    }

    /// Counts what a registration from `session` was answered (admissions
    /// are counted where cells are activated, also from the queue).
    fn count_registration(&mut self, session: SessionId, effects: &[Effect]) {
        for e in effects {
            if let Effect::Reply {
                session: s, reply, ..
            } = e
            {
                match reply {
                    _ if *s != session => {}
                    Reply::Queued { .. } => self.counters.queued += 1,
                    Reply::Error { code, .. } => {
                        *self.counters.refused.entry(code.name()).or_default() += 1
                    }
                    _ => {}
                }
            }
        }
    }

    /// The step of [`Engine::handle`]: one handler per request.
    pub(super) fn handle_request(
        &mut self,
        session: SessionId,
        peer: Peer,
        req: Request,
        fd: Option<OwnedFd>,
    ) -> Vec<Effect> {
        let kind = req.kind();
        let reply = |r: Reply| vec![answer(session, r)];
        if acts_for_caller(&req) && !self.caller_runs(peer) {
            let why = caller_ended(peer);
            if !req.expects_reply() {
                debug!("session {session}: request {kind:#04x} ignored: {why}");
                return vec![];
            }
            return reply(err(ErrorCode::Invalid, kind, why));
        }
        match req {
            Request::Hello { client } => reply(self.hello(session, peer, &client)),
            Request::Register {
                name,
                spec,
                wait,
                members,
                joins_itself,
            } => {
                let effects = self.register(session, peer, name, spec, wait, members, joins_itself);
                self.count_registration(session, &effects);
                effects
            }
            Request::Rejoin { cell, token } => self.rejoin(session, peer, cell, token, fd),
            Request::AddMember { cell, pid } => match self.add_member(peer, cell, pid) {
                Ok(mut effects) => {
                    effects.push(answer(session, Reply::Ok));
                    effects
                }
                Err(r) => reply(r),
            },
            Request::Report {
                cell,
                busy,
                wanted,
                progress,
            } => self.report(peer, cell, busy, wanted, progress),
            Request::PoolStats { cell, stats } => self.pool_stats(peer, cell, stats),
            Request::SetGoal { cell, goal } => {
                let spec = self
                    .cells
                    .get(&cell)
                    .map(|c| allot_spec::CellSpec { goal, ..c.spec });
                self.set_part(session, peer, cell, spec, 0x10)
            }
            Request::SetMemory { cell, memory } => {
                let spec = self
                    .cells
                    .get(&cell)
                    .map(|c| allot_spec::CellSpec { memory, ..c.spec });
                self.set_part(session, peer, cell, spec, 0x14)
            }
            Request::SetCache { cell, cache } => {
                let spec = self
                    .cells
                    .get(&cell)
                    .map(|c| allot_spec::CellSpec { cache, ..c.spec });
                self.set_part(session, peer, cell, spec, 0x15)
            }
            Request::IncludeGroup { cell, token, dir } => {
                reply(self.include_group(peer, cell, token, &dir))
            }
            Request::UpdateSpec { cell, spec } => match self.update_spec(peer, cell, spec) {
                Ok(()) => {
                    let mut e = self.admit_queued();
                    e.push(answer(session, Reply::Ok));
                    e
                }
                Err(r) => reply(r),
            },
            Request::Release { cell } => self.release(session, peer, cell),
            Request::Status => {
                let json = self.status(peer).to_json();
                chunked(session, &json, |more, json| Reply::Status { more, json })
            }
            Request::Shutdown => reply(self.shutdown_request(peer, kind)),
            Request::KindDefine { name, devices } => {
                self.kind_define(session, peer, kind, &name, &devices)
            }
            Request::KindList { kind } => {
                let viewer = (!self.sees_everything(peer)).then_some(peer.uid);
                let json = self.account.ledger().json(viewer, &kind);
                chunked(session, &json, |more, json| Reply::Json { more, json })
            }
            Request::KindAcquire {
                items,
                place,
                holding,
                any_device,
            } => self.kind_acquire(session, peer, &items, (place, holding, any_device)),
            Request::ChannelOpen {
                name,
                send,
                slots,
                message_max,
            } => self.channel_open(session, peer, kind, &name, (send, slots, message_max)),
            Request::ChannelRejoin { name, send } => {
                self.rejoin_channel(session, peer, &name, send, vec![])
            }
            Request::ChannelClose { name, send } => {
                if !self.channels.close(session, &name, send) {
                    debug!("session {session}: ChannelClose of {name}, which it does not hold");
                }
                vec![]
            }
            Request::KindRelease { items } => {
                self.account.release(peer.pid, &items);
                self.after_ledger_change()
            }
            Request::KindLeave { place } => {
                if self.account.leave_place(Waiter { session, place }) {
                    self.after_ledger_change()
                } else {
                    vec![]
                }
            }
            Request::KindGather {
                arrival,
                window_us,
                sent_ns,
            } => self.kind_gather(session, peer, kind, arrival, (window_us, sent_ns)),
            Request::KindChosen { arrival } => {
                self.account.gathering().chosen(session, arrival);
                self.gathering_due(Instant::now())
            }
            Request::KindWatch { epoch, waiting } => {
                // Answered now when the ledger moved since its epoch in a
                // way that may let it through; else when it does.
                match self.account.watch(session, peer.pid, epoch, waiting) {
                    Some(woken) => reply(woken.into()),
                    None => vec![],
                }
            }
        }
    }

    /// Whether the process that opened `peer`'s connection still runs at
    /// its pid: as its pidfd says where the connection has one, else the
    /// pid's process started when the connection was made.
    pub(super) fn caller_runs(&self, peer: Peer) -> bool {
        match peer.runs {
            Some(runs) => runs && peer.start.is_some(),
            None => peer.start.is_some() && self.os.start_time(peer.pid) == peer.start,
        }
    }

    /// Whether `peer` sees other users' cell names and processes.
    pub(crate) fn sees_everything(&self, peer: Peer) -> bool {
        peer.uid == 0 || peer.uid == self.uid || self.show_other_users
    }

    fn hello(&self, session: SessionId, peer: Peer, client: &str) -> Reply {
        debug!(
            "session {session}: hello from {} (pid {}, uid {})",
            crate::names::shown(client),
            peer.pid,
            peer.uid
        );
        Reply::Welcome {
            broker_pid: std::process::id(),
            instance: self.instance,
            backend: self.backend(),
            machine: self.machine.summary(),
            cpus: self.planner.capacity(),
        }
    }

    fn report(
        &mut self,
        peer: Peer,
        cell: u64,
        busy: u32,
        wanted: u32,
        progress: u64,
    ) -> Vec<Effect> {
        if let Err(r) = self.owned(peer, cell, 0x05) {
            if let Reply::Error { message, .. } = r {
                debug!("report from pid {} ignored: {message}", peer.pid);
            }
            return vec![];
        }
        let c = self.cells.get_mut(&cell).expect("checked by owned");
        c.progress = progress;
        c.busy_reported = busy;
        let before = c.est.demand();
        c.est.report(Instant::now(), wanted);
        if wanted > 0 && before != Some(wanted) {
            c.est.set_reported(wanted);
            self.reconcile();
            return self.admit_queued();
        }
        vec![]
    }

    /// `KindAcquire`: `wanted` is its (place, holding, any_device).
    fn kind_acquire(
        &mut self,
        session: SessionId,
        peer: Peer,
        items: &[LedgerItem],
        wanted: (u64, bool, bool),
    ) -> Vec<Effect> {
        let (place, holding, any_device) = wanted;
        let first = !self.account.ledger().involves(peer.pid);
        let wait = (place != 0).then_some(Waiter { session, place });
        let checked = self.check_held_guarantees(peer, items).and_then(|()| {
            self.check_account(peer.pid, items)
                .map_err(LedgerError::from)
        });
        let taken = checked.and_then(|()| {
            self.account
                .acquire(peer.pid, peer.uid, items, wait, holding)
        });
        match taken {
            Ok(()) => {
                let mut e = Vec::new();
                if first {
                    // Watch it, so its holdings come back if it dies.
                    e.push(Effect::Watch(peer.pid));
                }
                // Holding something of its own, a process outside every
                // cell no longer shares the minimum; an exclusive CPU moves
                // other cells off it; both before it hears yes.
                if self.holder_of_held(peer.pid).is_none() {
                    self.unmanaged_holds(peer.pid);
                }
                e.extend(self.after_ledger_change());
                e.push(answer(session, Reply::Ok));
                // A grant is its gathered arrival's choice made.
                self.account.gathering().granted(peer.pid);
                e.extend(self.gathering_due(Instant::now()));
                e
            }
            Err(why) => {
                let kept = match (&why, wait) {
                    (LedgerError::Refused(_), Some(w)) => Some(
                        self.account
                            .keep_place(peer.pid, w, items, holding, any_device),
                    ),
                    _ => None,
                };
                // A process the broker does not watch is not remembered:
                // refused requests cannot make it keep an entry per pid.
                // (A place in line is the connection's, and leaves with it.)
                // One that waits in line is watched, and its holder kept:
                // it asks again when woken, and finding its cell anew
                // would read `/proc` for each of its ancestors while the
                // CPU it waits for idles.
                let waits = matches!(kept, Some(Ok(_)));
                if first && !waits {
                    self.account.forget(peer.pid);
                }
                match kept {
                    Some(Ok(InLine { ahead, free })) => {
                        let mut e = Vec::new();
                        if first {
                            e.push(Effect::Watch(peer.pid));
                        }
                        e.push(answer(session, Reply::InLine { ahead, free }));
                        e
                    }
                    Some(Err(limit)) => vec![answer(session, ledger_error(0x0C, limit))],
                    None => vec![answer(session, ledger_error(0x0C, why))],
                }
            }
        }
    }

    /// `PoolStats` (one-way): a runtime pool's statistics for its cell.
    fn pool_stats(
        &mut self,
        peer: Peer,
        cell: u64,
        stats: allot_proto::msg::PoolStatsWire,
    ) -> Vec<Effect> {
        match self.owned(peer, cell, 0x0F) {
            Ok(()) => {
                let c = self.cells.get_mut(&cell).expect("checked by owned");
                c.pool_stats = Some(stats);
            }
            Err(Reply::Error { message, .. }) => {
                debug!("pool statistics from pid {} ignored: {message}", peer.pid);
            }
            Err(_) => {}
        }
        vec![]
    }

    /// `KindDefine`: a resource kind of the caller's; a new definer is
    /// watched, so its kinds end with it.
    fn kind_define(
        &mut self,
        session: SessionId,
        peer: Peer,
        kind: u16,
        name: &str,
        devices: &[allot_proto::DeviceDef],
    ) -> Vec<Effect> {
        match self.account.define(peer.pid, peer.uid, name, devices) {
            Ok(new) => {
                let mut e = Vec::new();
                if new {
                    e.push(Effect::Watch(peer.pid));
                }
                e.push(answer(session, Reply::Ok));
                e
            }
            Err(e) => vec![answer(session, ledger_error(kind, e))],
        }
    }

    /// `ChannelOpen`: an end of a named channel (`end`: whether it sends,
    /// the slots and message size asked), its descriptors in the reply.
    fn channel_open(
        &mut self,
        session: SessionId,
        peer: Peer,
        kind: u16,
        name: &str,
        end: (bool, u32, u32),
    ) -> Vec<Effect> {
        let (send, slots, message_max) = end;
        let cell = self.cells.cell_of(peer.pid);
        match self.channels.open(
            session,
            peer.uid,
            cell,
            name,
            send,
            slots,
            message_max,
            &self.limits,
        ) {
            Ok(o) => {
                debug!(
                    "session {session} (uid {}) opened the {} end of channel {name}",
                    peer.uid,
                    if send { "sending" } else { "receiving" }
                );
                vec![Effect::Reply {
                    session,
                    reply: Reply::Channel {
                        slots: o.geometry.slots as u32,
                        message_max: o.geometry.message_max() as u32,
                    },
                    fds: o.fds,
                }]
            }
            Err((code, message)) => vec![answer(session, err(code, kind, message))],
        }
    }

    /// `KindGather`: a dividing policy's request arriving with others
    /// (`timing`: its gathering window, µs, and when it was sent).
    fn kind_gather(
        &mut self,
        session: SessionId,
        peer: Peer,
        kind: u16,
        arrival: u64,
        timing: (u32, u64),
    ) -> Vec<Effect> {
        let (window_us, sent_ns) = timing;
        let now = Instant::now();
        let window = Duration::from_micros(u64::from(window_us));
        // Its wait counts from when it was sent (the broker's wake-up is
        // not the client's to pay), within a window.
        let now_ns = allot_proto::window::monotonic_ns();
        let ago = Duration::from_nanos(now_ns.saturating_sub(sent_ns)).min(window);
        let at = now.checked_sub(ago).unwrap_or(now);
        let bound = self.limits.holdings as usize;
        let gathering = self.account.gathering();
        match gathering.arrive(session, peer.pid, arrival, window, at, bound) {
            Ok(()) => self.gathering_due(now),
            Err(NotTaken::Invalid(m)) => vec![answer(session, err(ErrorCode::Invalid, kind, m))],
            Err(NotTaken::Limit(m)) => vec![answer(session, err(ErrorCode::Limit, kind, m))],
        }
    }

    fn shutdown_request(&mut self, peer: Peer, kind: u16) -> Reply {
        if peer.uid == 0 || peer.uid == self.uid {
            info!("shutdown requested by pid {} (uid {})", peer.pid, peer.uid);
            self.stop_requested = true;
            Reply::Ok
        } else {
            err(
                ErrorCode::PermissionDenied,
                kind,
                "only root or the broker's owner may stop it",
            )
        }
    }
}

fn ledger_error(kind: u16, e: LedgerError) -> Reply {
    let code = match e {
        LedgerError::Invalid(_) => ErrorCode::Invalid,
        LedgerError::Refused(_) => ErrorCode::Refused,
        LedgerError::Never(_) => ErrorCode::Never,
        LedgerError::Limit(_) => ErrorCode::Limit,
    };
    err(code, kind, e.message())
}

/// `json` as replies of at most one string field each, the last with
/// `more` unset.
fn chunked(session: SessionId, json: &str, make: impl Fn(bool, String) -> Reply) -> Vec<Effect> {
    let mut parts = allot_proto::wire::str_pieces(json);
    let last = parts.pop().unwrap_or_default();
    parts
        .into_iter()
        .map(|p| answer(session, make(true, p)))
        .chain(std::iter::once(answer(session, make(false, last))))
        .collect()
}

impl Engine {
    /// Changes one part of cell `cell`'s request (`spec`: the cell's
    /// request with that part replaced; `None` for a cell the broker does
    /// not know) and answers request `kind`.
    fn set_part(
        &mut self,
        session: SessionId,
        peer: Peer,
        cell: u64,
        spec: Option<allot_spec::CellSpec>,
        kind: u16,
    ) -> Vec<Effect> {
        // (An unknown cell: `update_spec` says so.)
        match self.update_spec(peer, cell, spec.unwrap_or_default()) {
            Ok(()) => vec![answer(session, Reply::Ok)],
            Err(mut r) => {
                if let Reply::Error { request, .. } = &mut r {
                    *request = kind;
                }
                vec![answer(session, r)]
            }
        }
    }
}

/// Why a request acting for `peer`'s process is refused once that process
/// has ended ([`Engine::caller_runs`]).
fn caller_ended(peer: Peer) -> String {
    format!(
        "the process that opened this connection (pid {}) has ended, and its pid may now name \
         another process; connect again from the process that asks",
        peer.pid
    )
}

/// Whether `req` acts for the process that opened its connection (by the
/// connection's pid: the caller as a member, its cell, its holdings, its
/// kinds) rather than only on a cell or a process it names. Such requests
/// are served only while that process runs ([`Engine::caller_runs`]): a
/// pid reused by another process must not make it the member, holder or
/// definer. Every request is listed, so a new one must be placed here.
fn acts_for_caller(req: &Request) -> bool {
    match req {
        Request::Register {
            members,
            joins_itself,
            ..
        } => members.is_empty() || *joins_itself,
        Request::KindDefine { .. }
        | Request::KindAcquire { .. }
        | Request::KindRelease { .. }
        | Request::KindLeave { .. }
        | Request::KindGather { .. }
        | Request::KindChosen { .. }
        | Request::KindWatch { .. }
        | Request::ChannelOpen { .. }
        | Request::ChannelRejoin { .. } => true,
        // Its token names the cell; the caller's own membership counts
        // only while the caller runs (`Engine::rejoin`).
        Request::Hello { .. }
        | Request::Rejoin { .. }
        | Request::AddMember { .. }
        | Request::Report { .. }
        | Request::PoolStats { .. }
        | Request::SetGoal { .. }
        | Request::SetMemory { .. }
        | Request::SetCache { .. }
        | Request::IncludeGroup { .. }
        | Request::UpdateSpec { .. }
        | Request::Release { .. }
        | Request::Status
        | Request::Shutdown
        | Request::KindList { .. }
        | Request::ChannelClose { .. } => false,
    }
}
