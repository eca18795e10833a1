//! Admission, the queue, and joining or leaving cells.
//!
//! # Registration
//!
//! A `Register` is checked in this order, each failure answered at once:
//! the spec and the name (`Invalid`), the members (deduplicated, at most
//! [`Limits::members`](crate::config::Limits), each alive, the caller's,
//! not confined elsewhere beyond what the caller could undo, in no cell),
//! admission (`Refused`/`Never`, or queued with `wait`), then the caller's
//! cell count, waiting places and guarantees and the total (`Limit`,
//! `core/limits.rs`). A cell is only started once the journal has recorded
//! it. A queued cell's members are pinned by their start time: at
//! admission a reused pid is not this member.
//!
//! # The queue
//!
//! Waiting cells are served in order, but not strictly: a request that
//! admission accepts goes ahead of the waiting ones when it cannot delay
//! any of them, whatever order the admitted cells leave in
//! ([`allot_plan::delays`]). So a queued request for the whole machine
//! does not turn away a small one that fits beside it once the machine
//! frees up, and a stream of small requests cannot starve a large one.

use super::state::arrival::Arriving;
use super::{Cell, Effect, Engine, Queued, answer, err, random_u64};
use crate::journal::{MemberRec, Record, SpecRec};
use crate::log::{info, warn};
use crate::names::{self, shown};
use crate::peer::{Peer, SessionId};
use crate::timeline::{Timeline, timed};
use allot_plan::{Admission, Admitted};
use allot_proto::PageMap;
use allot_proto::msg::{ErrorCode, Reply};
use allot_spec::{CellId, CellSpec};
use rustix::fd::OwnedFd;

pub(super) const REGISTER: u16 = 0x02;

/// What a refusal calls a cell of another user's that its reader may not
/// see named.
const OTHERS: &str = "another user's cell";

impl Engine {
    pub(super) fn admitted(&self) -> Vec<Admitted<'_>> {
        self.admitted_except(None)
    }

    /// [`Engine::admitted`] as `peer` may see it in a refusal: another
    /// user's cell is not named unless `peer` sees everything
    /// (`show_other_users`, root, the broker's own user).
    fn admitted_for(&self, peer: Peer) -> Vec<Admitted<'_>> {
        let all = self.sees_everything(peer);
        self.admitted()
            .into_iter()
            .map(|mut a| {
                if !all && self.cells.get(&a.id.0).is_some_and(|c| c.uid != peer.uid) {
                    a.name = OTHERS;
                }
                a
            })
            .collect()
    }

    /// The first of `waiting` (queued cells, in order) that admitting
    /// `new` now could delay.
    fn delayed_by<'q>(
        &self,
        waiting: impl Iterator<Item = &'q Queued>,
        new: &CellSpec,
    ) -> Option<&'q Queued> {
        let admitted = self.admitted();
        waiting
            .into_iter()
            .find(|q| self.planner.delays(&admitted, &q.spec, new))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn register(
        &mut self,
        session: SessionId,
        peer: Peer,
        name: String,
        spec: CellSpec,
        wait: bool,
        members: Vec<u32>,
        joins_itself: bool,
    ) -> Vec<Effect> {
        let mut timeline = Timeline::start();
        timeline.note("request", format!("{spec}"), None);
        let one = |reply: Reply| vec![answer(session, reply)];
        // Checked here, where it enters the broker; admission trusts it.
        let spec = match spec.check() {
            Ok(s) => s,
            Err(e) => {
                return one(err(
                    ErrorCode::Invalid,
                    REGISTER,
                    format!("invalid request: {e}"),
                ));
            }
        };
        if let Err(e) = names::check("cell name", &name, names::MAX_CELL_NAME) {
            return one(err(ErrorCode::Invalid, REGISTER, e));
        }
        let mut members = if members.is_empty() {
            vec![peer.pid]
        } else {
            members
        };
        members.sort_unstable();
        members.dedup();
        if members.len() > self.limits.members as usize {
            return one(err(
                ErrorCode::Limit,
                REGISTER,
                format!(
                    "{} member processes; a cell may have {} (limits.members)",
                    members.len(),
                    self.limits.members
                ),
            ));
        }
        for &pid in &members {
            if let Err(r) = self.check_member(peer, pid, REGISTER) {
                return one(r);
            }
        }
        let name = if name.trim().is_empty() {
            format!("pid-{}", members[0])
        } else {
            name
        };
        if let Some(why) = self.below_resident(&spec.memory, &members) {
            return one(err(ErrorCode::Invalid, REGISTER, why));
        }
        let (verdict, took) = timed(|| {
            let room = self.memory.room();
            match self
                .planner
                .admit(&self.admitted_for(peer), &spec, &self.plan, &room)
            {
                Admission::Admit => match self.delayed_by(self.cells.queue.iter(), &spec) {
                    None => Admission::Admit,
                    Some(q) => Admission::NotNow(format!(
                        "admitting it now could delay cell {} ({}), waiting for {} guaranteed CPUs",
                        q.id,
                        if q.uid == peer.uid || self.sees_everything(peer) {
                            shown(&q.name)
                        } else {
                            OTHERS.into()
                        },
                        q.spec.guaranteed()
                    )),
                },
                other => other,
            }
        });
        timeline.note("admission", verdict_word(&verdict), Some(took));
        let queueing = wait && matches!(verdict, Admission::NotNow(_));
        if let Err(r) = self
            .check_cell_limits(peer, queueing)
            .and_then(|()| self.check_guarantees(peer, &spec, None, REGISTER))
        {
            return one(r);
        }
        if matches!(verdict, Admission::Admit | Admission::NotNow(_))
            && let Err(r) = self.journal_ready(REGISTER)
        {
            return one(r);
        }
        let joins_itself = joins_itself && self.may_join_itself(peer, &members);
        match verdict {
            Admission::Admit => {
                let Some(id) = self.allocate_id() else {
                    return one(ids_exhausted());
                };
                self.activate(
                    id,
                    Newcomer {
                        name,
                        uid: peer.uid,
                        spec: *spec,
                        members,
                        session,
                        token: random_u64(),
                        timeline,
                        joins_itself,
                        registrant: peer.start.map(|s| (peer.pid, s)),
                    },
                )
            }
            Admission::NotNow(reason) if wait => {
                let reason = allot_plan::admission::waiting_reason(&reason);
                let Some(id) = self.allocate_id() else {
                    return one(ids_exhausted());
                };
                info!("cell {id} ({}) queued: {reason}", shown(&name));
                timeline.note("queued", reason.clone(), None);
                // Each member pinned by its start time: the pid alone may
                // name another process by the time the cell is admitted.
                let members = members
                    .into_iter()
                    .map(|p| (p, self.os.start_time(p)))
                    .collect();
                self.cells.queue.push_back(Queued {
                    id,
                    name,
                    uid: peer.uid,
                    spec,
                    members,
                    session,
                    token: random_u64(),
                    reason: reason.clone(),
                    timeline,
                });
                one(Reply::Queued {
                    cell: id,
                    position: self.cells.queue.len() as u32,
                    reason,
                })
            }
            Admission::NotNow(reason) => one(err(
                ErrorCode::Refused,
                REGISTER,
                format!("cell {:?} refused: {reason}", shown(&name)),
            )),
            Admission::Never(reason) => one(err(
                ErrorCode::Never,
                REGISTER,
                format!("cell {:?} can never be admitted: {reason}", shown(&name)),
            )),
        }
    }

    /// A fresh cell id, journaled before use; `None` once ids run out.
    fn allocate_id(&mut self) -> Option<u64> {
        let id = self.cells.take_id()?;
        self.journal(&[Record::NextId {
            next: self.cells.next_id(),
        }]);
        Some(id)
    }

    fn activate(&mut self, id: u64, new: Newcomer) -> Vec<Effect> {
        let Newcomer {
            name,
            uid,
            spec,
            members,
            session,
            token,
            mut timeline,
            joins_itself,
            registrant,
        } = new;
        let fail = |code, msg: String| vec![answer(session, err(code, REGISTER, msg))];
        // Recorded in this step, before its reply (`journaling`).
        self.journal(&[Record::Cell {
            id,
            name: name.clone(),
            uid,
            spec: SpecRec::of(&spec),
            token,
        }]);
        let page = match PageMap::create(id, self.instance) {
            Ok(p) => p,
            Err(e) => {
                self.journal(&[Record::End { id }]);
                return fail(
                    ErrorCode::Internal,
                    format!("cannot create the grant page: {e}"),
                );
            }
        };
        // An exclusive cell is made where the kernel can make it a
        // partition (beside allot's directory on cgroup v2 before 6.7).
        let apart = spec.exclusive && self.partitions_on();
        let ahead = self.made_ahead() == Some(id) && !apart;
        let (created, took) = timed(|| self.kernel.create(id, apart));
        let how = if ahead { "made ahead" } else { "made" };
        timeline.note("cgroup", format!("cell-{id} {how}"), Some(took));
        if let Err(e) = created {
            self.journal(&[Record::End { id }]);
            return fail(
                ErrorCode::Internal,
                format!(
                    "cannot create the cell in the {} backend: {e}; check the broker's permissions \
                     or start it with --backend affinity",
                    self.backend()
                ),
            );
        }
        // A new cell's groups hold the kernel's defaults (no limit, no
        // protection): written only when the spec asks for memory.
        if !spec.memory.is_none()
            && let Err(why) = self.apply_memory(id, &spec.memory)
        {
            self.remove_backend(id);
            self.journal(&[Record::End { id }]);
            return fail(
                ErrorCode::Internal,
                format!("cannot set the cell's memory: {why}"),
            );
        }
        let mut cell = Cell::new(name.clone(), uid, spec, token, timeline);
        cell.pages.push(page);
        self.cells.insert(id, cell, vec![]);
        if !spec.cache.is_none() {
            self.apply_classes();
        }
        let arriving = Arriving {
            id,
            members,
            session,
            token,
            joins_itself,
            registrant,
        };
        if self.batch_arrivals {
            // Joined, with the others of this turn, by `settle`.
            self.arriving.push(arriving);
            return vec![];
        }
        // The grant reaches the kernel, and its windows start (shut
        // between them), before any process joins.
        self.reconcile();
        self.join(arriving)
    }

    /// Admits queued cells, in order, each that admission accepts and that
    /// cannot delay a cell queued before it.
    pub(super) fn admit_queued(&mut self) -> Vec<Effect> {
        let mut effects = Vec::new();
        let mut i = 0;
        while i < self.cells.queue.len() {
            let q = &self.cells.queue[i];
            let room = self.memory.room();
            let verdict = match self
                .planner
                .admit(&self.admitted(), &q.spec, &self.plan, &room)
            {
                Admission::Admit => match self.delayed_by(self.cells.queue.iter().take(i), &q.spec)
                {
                    None => Admission::Admit,
                    Some(ahead) => Admission::NotNow(format!(
                        "waits behind cell {} ({})",
                        ahead.id,
                        if ahead.uid == q.uid || self.show_other_users || q.uid == 0 {
                            shown(&ahead.name)
                        } else {
                            OTHERS.into()
                        }
                    )),
                },
                other => other,
            };
            match verdict {
                Admission::Admit => {
                    if self.journal_ready(REGISTER).is_err() {
                        // Stay queued until the journal can record it.
                        i += 1;
                        continue;
                    }
                    let q = self.cells.queue.remove(i).expect("index in range");
                    // Only the processes that asked: the same start time
                    // (not a reused pid), still the owner's, in no cell.
                    let alive: Vec<u32> = q
                        .members
                        .iter()
                        .filter(|&&(p, start)| {
                            start.is_some()
                                && self.os.start_time(p) == start
                                && (q.uid == 0 || self.os.uid(p) == Some(q.uid))
                                && self.kernel.confined_elsewhere(p, q.uid).is_none()
                                && self.cells.cell_of(p).is_none()
                        })
                        .map(|&(p, _)| p)
                        .collect();
                    if !alive.is_empty() {
                        let mut timeline = q.timeline;
                        timeline.note("admission", "admitted from the queue", None);
                        effects.extend(self.activate(
                            q.id,
                            Newcomer {
                                name: q.name,
                                uid: q.uid,
                                spec: *q.spec,
                                members: alive,
                                session: q.session,
                                token: q.token,
                                timeline,
                                joins_itself: false,
                                registrant: None,
                            },
                        ));
                    }
                }
                Admission::NotNow(r) => {
                    self.cells.queue[i].reason = allot_plan::admission::waiting_reason(&r);
                    i += 1;
                }
                Admission::Never(r) => {
                    let q = self.cells.queue.remove(i).expect("index in range");
                    *self
                        .counters
                        .refused
                        .entry(ErrorCode::Never.name())
                        .or_default() += 1;
                    effects.push(answer(
                        q.session,
                        err(
                            ErrorCode::Never,
                            REGISTER,
                            format!("cell {:?} can never be admitted: {r}", shown(&q.name)),
                        ),
                    ));
                }
            }
        }
        effects
    }

    pub(super) fn rejoin(
        &mut self,
        session: SessionId,
        peer: Peer,
        cell: u64,
        token: u64,
        fd: Option<OwnedFd>,
    ) -> Vec<Effect> {
        const KIND: u16 = 0x03;
        let one = |reply: Reply| vec![answer(session, reply)];
        if let Err(r) = self.owned(peer, cell, KIND) {
            return one(r);
        }
        let instance = self.instance;
        let grant = self.cells[&cell].published.clone();
        let generation = self.cells[&cell].generation;
        let pg = grant.as_ref().map(|g| self.page_grant(cell, generation, g));
        let member_of_it = self.caller_runs(peer) && self.cells.cell_of(peer.pid) == Some(cell);
        let c = self.cells.get_mut(&cell).expect("checked");
        if c.token == 0 && member_of_it && token != 0 {
            // A cell recovered from the backend: its first member to come
            // back proves itself by being in it, and keys it.
            c.token = token;
            info!(
                "cell {cell} ({}) claimed by its member {}",
                shown(&c.name),
                peer.pid
            );
            self.journal(&[Record::Token { id: cell, token }]);
        }
        let c = self.cells.get_mut(&cell).expect("checked");
        if c.token != token {
            return one(err(
                ErrorCode::PermissionDenied,
                KIND,
                format!("wrong token for cell {cell}"),
            ));
        }
        let mut page_idx = 0;
        if let Some(fd) = fd {
            match adopt_page(&mut c.pages, fd, cell, instance) {
                Ok(i) => {
                    // Generations only grow, for every reader of the page:
                    // the journal keeps a lower bound (it skips changes of
                    // share alone), the page handed back the last one seen.
                    let seen = c.pages[i].page().generation();
                    if let Some(mut pg) = pg.filter(|_| seen >= c.generation) {
                        c.generation = seen + 1;
                        pg.generation = c.generation;
                        c.publish(&pg);
                    } else if let Some(pg) = &pg {
                        c.pages[i].page().publish(pg);
                    }
                    page_idx = i;
                }
                Err(e) => warn!(
                    "cell {cell}: the page handed back cannot be adopted ({e}); sending a new one"
                ),
            }
        }
        if c.pages.is_empty() {
            match PageMap::create(cell, instance) {
                Ok(p) => {
                    if let Some(pg) = &pg {
                        p.page().publish(pg);
                    }
                    c.pages.push(p);
                }
                Err(e) => {
                    return one(err(
                        ErrorCode::Internal,
                        KIND,
                        format!("cannot create the grant page: {e}"),
                    ));
                }
            }
        }
        info!(
            "cell {cell} ({}) rejoined by pid {}",
            shown(&c.name),
            peer.pid
        );
        let fd = rustix::io::fcntl_dupfd_cloexec(c.pages[page_idx].fd(), 0).ok();
        let generation = c.generation;
        vec![Effect::Reply {
            session,
            reply: Reply::Registered {
                cell,
                token,
                generation,
            },
            fds: fd.into_iter().collect(),
        }]
    }

    pub(super) fn add_member(
        &mut self,
        peer: Peer,
        cell: u64,
        pid: u32,
    ) -> Result<Vec<Effect>, Reply> {
        const KIND: u16 = 0x04;
        self.owned(peer, cell, KIND)?;
        self.joined_itself(Some(cell));
        self.check_member(peer, pid, KIND)?;
        let count = self.cells[&cell].members().len();
        if count >= self.limits.members as usize {
            return Err(err(
                ErrorCode::Limit,
                KIND,
                format!(
                    "cell {cell} has {count} member processes, the limit (limits.members); its \
                     children still run in it"
                ),
            ));
        }
        let start = self.os.start_time(pid).ok_or_else(|| {
            err(
                ErrorCode::Invalid,
                KIND,
                format!("process {pid} does not exist"),
            )
        })?;
        let (attached, took) = self.kernel.attach(cell, pid);
        attached.map_err(|e| {
            err(
                ErrorCode::Internal,
                KIND,
                format!("cannot move process {pid} into cell {cell}: {e}"),
            )
        })?;
        let m = MemberRec { pid, start };
        self.cells.join(cell, m);
        let c = self.cells.get_mut(&cell).expect("checked");
        c.timeline
            .note("joined", format!("process {pid}"), Some(took));
        self.account.members_changed();
        self.journal(&[Record::Member {
            id: cell,
            member: m,
        }]);
        Ok(vec![Effect::Watch(pid)])
    }

    pub(super) fn update_spec(
        &mut self,
        peer: Peer,
        cell: u64,
        spec: CellSpec,
    ) -> Result<(), Reply> {
        const KIND: u16 = 0x06;
        self.owned(peer, cell, KIND)?;
        let spec = spec
            .check()
            .map_err(|e| err(ErrorCode::Invalid, KIND, format!("invalid request: {e}")))?;
        self.check_guarantees(peer, &spec, Some(cell), KIND)?;
        let planned = self.planned_spec(cell, spec);
        let others: Vec<Admitted<'_>> = self.admitted_except(Some(cell));
        match self
            .planner
            .admit(&others, &planned, &self.plan, &self.memory.room())
        {
            Admission::Admit => {}
            Admission::NotNow(r) => return Err(err(ErrorCode::Refused, KIND, r)),
            Admission::Never(r) => return Err(err(ErrorCode::Never, KIND, r)),
        }
        let before = self.cells[&cell].spec.memory;
        if spec.memory != before {
            // What the kernel charges it now (the tick reads it only once
            // a second).
            self.observe_memory(cell);
            let used = self.memory.used(cell).map_or(0, |u| u.current);
            if spec.memory.max != 0 && used > spec.memory.max {
                return Err(err(
                    ErrorCode::Invalid,
                    KIND,
                    format!(
                        "the memory limit {} is below what the cell uses now ({}); raise it, \
                         or free memory first",
                        allot_spec::Size(spec.memory.max),
                        allot_spec::Size(used)
                    ),
                ));
            }
            if let Err(why) = self.apply_memory(cell, &spec.memory) {
                // Left as it was.
                let _ = self.apply_memory(cell, &before);
                return Err(err(ErrorCode::Refused, KIND, why));
            }
        }
        let cache_before = self.cells[&cell].spec.cache;
        let c = self.cells.get_mut(&cell).expect("checked");
        c.spec = *spec;
        if spec.cache != cache_before {
            self.apply_classes();
            let pids: Vec<u32> = self.cells[&cell].members().iter().map(|m| m.pid).collect();
            for pid in pids {
                self.join_class(cell, pid);
            }
        }
        let c = self.cells.get_mut(&cell).expect("checked");
        c.tracker.set_goal(spec.goal);
        c.timeline.note("spec", format!("{spec}"), None);
        self.refresh_specs();
        self.journal(&[Record::Spec {
            id: cell,
            spec: SpecRec::of(&spec),
        }]);
        // Moves its windows too (a new contract is placed afresh).
        self.reconcile();
        // The weight and the time cap follow the new spec even when its CPUs
        // did not change (reconcile applies only changed CPU sets; backends
        // write only what differs from what they last applied).
        if let Some(g) = self.plan.cells.get(&CellId(cell)) {
            let applied = self.applied(cell, g.cpus);
            if let (Err(e), _) = self.kernel.confine(cell, &applied) {
                warn!("cell {cell}: {e}");
            }
        }
        Ok(())
    }

    pub(super) fn release(&mut self, session: SessionId, peer: Peer, cell: u64) -> Vec<Effect> {
        const KIND: u16 = 0x07;
        match self.owned(peer, cell, KIND) {
            Ok(()) => {
                let mut e = self.end_cell(cell, "released by its client");
                self.reconcile();
                e.extend(self.admit_queued());
                e.push(answer(session, Reply::Ok));
                e
            }
            Err(r) => {
                let queued = self
                    .cells
                    .queue
                    .iter()
                    .position(|q| q.id == cell && (q.uid == peer.uid || peer.uid == 0));
                match queued {
                    Some(i) => {
                        self.cells.queue.remove(i);
                        vec![answer(session, Reply::Ok)]
                    }
                    None => vec![answer(session, r)],
                }
            }
        }
    }
}

/// A cell about to be activated: admitted at once, or from the queue.
struct Newcomer {
    name: String,
    uid: u32,
    spec: CellSpec,
    members: Vec<u32>,
    session: SessionId,
    token: u64,
    timeline: Timeline,
    /// The registering process moves itself in (`arrival`).
    joins_itself: bool,
    /// The registering process and its start time, read when it
    /// connected (`None`: read again as it joins).
    registrant: Option<(u32, u64)>,
}

/// The admission verdict in a word or two, for the timeline.
fn verdict_word(v: &Admission) -> String {
    match v {
        Admission::Admit => "admitted".into(),
        Admission::NotNow(why) => format!("not now: {why}"),
        Admission::Never(why) => format!("never: {why}"),
    }
}

fn ids_exhausted() -> Reply {
    err(
        ErrorCode::Internal,
        REGISTER,
        "the broker has given out every cell id; restart it with an empty journal",
    )
}

/// Adds a page a client handed back to `pages`, unless it is one of them
/// already (the same memory: processes of one cell share their page); at
/// most [`super::MAX_PAGES_PER_CELL`], the oldest handed-back page making
/// room. Returns its index.
fn adopt_page(
    pages: &mut Vec<PageMap>,
    fd: OwnedFd,
    cell: u64,
    instance: u64,
) -> Result<usize, allot_proto::ShmError> {
    let id =
        |f: rustix::fd::BorrowedFd<'_>| rustix::fs::fstat(f).ok().map(|s| (s.st_dev, s.st_ino));
    let theirs = id(rustix::fd::AsFd::as_fd(&fd));
    if let Some(i) = pages
        .iter()
        .position(|p| theirs.is_some() && id(p.fd()) == theirs)
    {
        return Ok(i);
    }
    let p = PageMap::adopt(fd, cell, instance)?;
    if pages.len() >= super::MAX_PAGES_PER_CELL {
        pages.remove(1.min(pages.len() - 1));
    }
    pages.push(p);
    Ok(pages.len() - 1)
}
