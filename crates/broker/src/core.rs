//! The broker's state machine: cells, the admission queue, the plan, and
//! what has been enforced and published.
//!
//! `Core` does no socket or epoll work. Each entry point (a request, a
//! process exit, a monitor tick, a closed session) updates the state,
//! re-plans if needed, drives the enforcer and the grant pages, appends to
//! the journal, and returns [`Effect`]s for the event loop: replies to send,
//! processes to start or stop watching.
//!
//! Invariants kept here (the planner keeps the plan invariants):
//!
//! - Every member pid maps to exactly one cell (`by_pid`).
//! - A cell's grant is applied to the kernel *before* its first process is
//!   attached, so a process never runs a single instruction outside it.
//! - When CPUs move between cells, every cell first shrinks to the CPUs it
//!   keeps, then grows: no transient overlap between grants.
//! - Grant generations only grow; a page is published only when its grant
//!   changed, and every published grant is journaled.
//! - A cell whose processes are all gone is ended in the same step that
//!   notices it, and its CPUs are re-planned at once.

use crate::config::Config;
use crate::demand::Estimator;
use crate::journal::{GrantRec, Journal, MemberRec, Record};
use crate::ledger::Ledger;
use crate::{debug, info, warn};
use allot_enforce::os::Os;
use allot_enforce::{Applied, Enforcer};
use allot_plan::{
    Admission, Admitted, CellId, CellInput, CellSpec, Grant, Plan, PlanConfig, Planner,
};
use allot_proto::msg::{ErrorCode, Reply, Request};
use allot_proto::{FLAG_RELEASED, FLAG_STACKED, PageMap};
use allot_topo::Machine;
use rustix::fd::OwnedFd;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

/// Identifies a client connection.
pub type SessionId = u64;

/// The credentials of a connected client (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Process id at connect time.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Something the event loop must do.
#[derive(Debug)]
pub enum Effect {
    /// Send `reply` (with `fd` attached) on `session`.
    Reply {
        /// The session.
        session: SessionId,
        /// The reply.
        reply: Reply,
        /// A file descriptor to pass.
        fd: Option<OwnedFd>,
    },
    /// Start watching `pid` for exit.
    Watch(u32),
    /// Stop watching `pid`.
    Unwatch(u32),
}

#[derive(Debug)]
pub(crate) struct Cell {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) spec: CellSpec,
    token: u64,
    pub(crate) members: Vec<MemberRec>,
    pages: Vec<PageMap>,
    pub(crate) generation: u64,
    pub(crate) published: Option<Grant>,
    pub(crate) est: Estimator,
    pub(crate) progress: u64,
    pub(crate) busy_reported: u32,
}

#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) spec: CellSpec,
    members: Vec<u32>,
    session: SessionId,
    token: u64,
    pub(crate) reason: String,
}

/// The broker's state.
#[derive(Debug)]
pub struct Core {
    pub(crate) machine: &'static Machine,
    pub(crate) planner: Planner<'static>,
    pub(crate) plan: Plan,
    pub(crate) cells: BTreeMap<u64, Cell>,
    pub(crate) queue: VecDeque<Queued>,
    enforcer: Box<dyn Enforcer>,
    os: Arc<dyn Os>,
    journal: Option<Journal>,
    pub(crate) instance: u64,
    next_id: u64,
    by_pid: HashMap<u32, u64>,
    pub(crate) started: Instant,
    pub(crate) backend_notes: Vec<String>,
    stop_requested: bool,
    uid: u32,
    pub(crate) ledger: Ledger,
    /// Sessions waiting for the ledger to change: (session, pid, epoch seen).
    watchers: Vec<(SessionId, u32, u64)>,
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.as_nanos() as u64 ^ (std::process::id() as u64) << 32;
    }
    u64::from_le_bytes(b)
}

fn err(code: ErrorCode, req: u16, msg: impl Into<String>) -> Reply {
    Reply::error(code, req, msg)
}

impl Core {
    /// Builds the core, restoring cells from the journal: cells whose
    /// processes still run are adopted with the grants they had, the others
    /// are cleaned up. Returns the effects (pids to watch).
    pub fn new(
        cfg: &Config,
        machine: Machine,
        enforcer: Box<dyn Enforcer>,
        os: Arc<dyn Os>,
        journal: Option<Journal>,
    ) -> (Core, Vec<Effect>) {
        let machine: &'static Machine = Box::leak(Box::new(machine));
        let planner = Planner::new(
            machine,
            PlanConfig {
                reserve: cfg.reserve,
                policy: cfg.policy,
                lend: cfg.lend,
            },
        );
        let mut core = Core {
            machine,
            planner,
            plan: Plan::default(),
            cells: BTreeMap::new(),
            queue: VecDeque::new(),
            enforcer,
            os,
            journal,
            instance: random_u64(),
            next_id: 1,
            by_pid: HashMap::new(),
            started: Instant::now(),
            backend_notes: Vec::new(),
            stop_requested: false,
            uid: rustix::process::geteuid().as_raw(),
            ledger: Ledger::new(machine),
            watchers: Vec::new(),
        };
        let effects = core.restore();
        (core, effects)
    }

    /// Notes from backend selection (why others were skipped).
    pub fn set_backend_notes(&mut self, notes: Vec<String>) {
        self.backend_notes = notes;
    }

    /// The enforcement backend's name.
    pub fn backend(&self) -> String {
        self.enforcer.kind().to_string()
    }

    /// The OS interface (for the event loop's exit polling fallback).
    pub fn os(&self) -> &Arc<dyn Os> {
        &self.os
    }

    /// Whether a client asked the broker to exit.
    pub fn stop_requested(&self) -> bool {
        self.stop_requested
    }

    /// No cells, none queued.
    pub fn idle(&self) -> bool {
        self.cells.is_empty() && self.queue.is_empty()
    }

    /// The current plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    fn journal(&mut self, recs: &[Record]) {
        if let Some(j) = self.journal.as_mut()
            && let Err(e) = j.append(recs)
        {
            warn!("journal write failed: {e}; a broker restart may lose recent changes");
        }
    }

    fn restore(&mut self) -> Vec<Effect> {
        let Some(state) = self.journal.as_ref().map(|j| j.state().clone()) else {
            return vec![];
        };
        self.next_id = state.next_id.max(1);
        let mut effects = Vec::new();
        let mut grants = BTreeMap::new();
        for (&id, rec) in &state.cells {
            let mut live: Vec<MemberRec> = rec
                .members
                .iter()
                .copied()
                .filter(|m| self.os.alive(m.pid) && self.os.start_time(m.pid) == Some(m.start))
                .collect();
            let adopted = self
                .enforcer
                .adopt(id, &live.iter().map(|m| m.pid).collect::<Vec<_>>());
            if live.is_empty() {
                // Processes that joined through the cgroup (children) keep it alive.
                live = self
                    .enforcer
                    .pids(id)
                    .into_iter()
                    .filter_map(|pid| {
                        Some(MemberRec {
                            pid,
                            start: self.os.start_time(pid)?,
                        })
                    })
                    .collect();
            }
            if live.is_empty() {
                info!(
                    "cell {id} ({}) ended while the broker was down; releasing it",
                    rec.name
                );
                let _ = self.enforcer.remove(id);
                self.journal(&[Record::End { id }]);
                continue;
            }
            if let Err(e) = &adopted {
                warn!(
                    "cell {id} ({}): could not re-attach enforcement: {e}",
                    rec.name
                );
            }
            let page = match PageMap::create(id, self.instance) {
                Ok(p) => vec![p],
                Err(e) => {
                    warn!("cell {id}: cannot create its grant page: {e}");
                    vec![]
                }
            };
            let generation = rec.grant.as_ref().map_or(0, |g| g.generation);
            let est = Estimator::restored(rec.grant.as_ref().and_then(|g| g.demand));
            for m in &live {
                self.by_pid.insert(m.pid, id);
                effects.push(Effect::Watch(m.pid));
            }
            if let Some(g) = &rec.grant {
                grants.insert(
                    CellId(id),
                    Grant {
                        cpus: g.cpus,
                        lent: g.lent,
                        entitled: g.entitled,
                        threads: g.threads,
                        stacked: g.stacked,
                        home: g.home,
                        share: g.share,
                    },
                );
            }
            let published = grants.get(&CellId(id)).cloned();
            let cell = Cell {
                name: rec.name.clone(),
                uid: rec.uid,
                spec: rec.spec,
                token: rec.token,
                members: live,
                pages: page,
                generation,
                published: published.clone(),
                est,
                progress: 0,
                busy_reported: 0,
            };
            if let Some(g) = &published {
                for p in &cell.pages {
                    p.page().publish(&self.page_grant(id, generation, g));
                }
            }
            info!(
                "adopted cell {id} ({}) with CPUs {}",
                rec.name,
                published.map(|g| g.cpus.to_string()).unwrap_or_default()
            );
            self.cells.insert(id, cell);
        }
        self.plan = Plan {
            capacity: self.planner.capacity(),
            reserve: state.reserve,
            pool: state.pool,
            cells: grants,
        };
        self.reconcile();
        effects
    }

    fn page_grant(&self, id: u64, generation: u64, g: &Grant) -> allot_proto::Grant {
        allot_proto::Grant {
            cell: id,
            generation,
            instance: self.instance,
            threads: g.threads,
            flags: if g.stacked { FLAG_STACKED } else { 0 },
            home: g.home,
            entitled: g.entitled.len() as u32,
            share_milli: (g.share * 1000.0).round() as u32,
            cpus: g.cpus,
            lent: g.lent,
        }
    }

    /// Re-plans and makes the kernel and the pages follow. Returns whether
    /// any grant changed.
    fn reconcile(&mut self) -> bool {
        let inputs: Vec<CellInput> = self
            .cells
            .iter()
            .map(|(&id, c)| CellInput {
                id: CellId(id),
                spec: c.spec,
                demand: c.est.demand(),
            })
            .collect();
        let next = self.planner.plan(&inputs, &self.plan);
        debug_assert_eq!(
            next.check(
                self.machine,
                &inputs.iter().map(|c| (c.id, c.spec)).collect::<Vec<_>>()
            ),
            Ok(())
        );

        // Enforce: shrink everyone to what they keep, then grow.
        let changed: Vec<(u64, Grant)> = next
            .cells
            .iter()
            .filter(|(id, g)| {
                self.cells
                    .get(&id.0)
                    .and_then(|c| c.published.as_ref())
                    .map(|p| p.cpus)
                    != Some(g.cpus)
            })
            .map(|(id, g)| (id.0, g.clone()))
            .collect();
        for (id, g) in &changed {
            let Some(old) = self
                .cells
                .get(id)
                .and_then(|c| c.published.as_ref())
                .map(|p| p.cpus)
            else {
                continue;
            };
            let keep = old.intersection(&g.cpus);
            if !keep.is_empty() && keep != old {
                let weight = self.cells[id].spec.weight;
                if let Err(e) = self.enforcer.apply(*id, &Applied { cpus: keep, weight }) {
                    warn!("cell {id}: {e}");
                }
            }
        }
        for (id, g) in &changed {
            let weight = self.cells[id].spec.weight;
            if let Err(e) = self.enforcer.apply(
                *id,
                &Applied {
                    cpus: g.cpus,
                    weight,
                },
            ) {
                warn!("cell {id}: {e}");
            }
        }

        // Publish and journal every grant that changed in any field.
        let mut recs = Vec::new();
        let mut any = false;
        for (cid, g) in &next.cells {
            let id = cid.0;
            let Some(c) = self.cells.get(&id) else {
                continue;
            };
            if c.published.as_ref() == Some(g) {
                continue;
            }
            any = true;
            let generation = c.generation + 1;
            let pg = self.page_grant(id, generation, g);
            let c = self.cells.get_mut(&id).expect("present above");
            for p in &c.pages {
                p.page().publish(&pg);
            }
            c.generation = generation;
            c.published = Some(g.clone());
            debug!(
                "cell {id} ({}) generation {generation}: CPUs {} lent {} threads {}",
                c.name, g.cpus, g.lent, g.threads
            );
            recs.push(Record::Grant {
                id,
                grant: GrantRec {
                    generation,
                    cpus: g.cpus,
                    lent: g.lent,
                    entitled: g.entitled,
                    threads: g.threads,
                    stacked: g.stacked,
                    home: g.home,
                    share: g.share,
                    demand: c.est.demand(),
                },
            });
        }
        if next.pool != self.plan.pool || next.reserve != self.plan.reserve {
            recs.push(Record::Shared {
                pool: next.pool,
                reserve: next.reserve,
            });
        }
        self.journal(&recs);
        self.plan = next;
        any
    }

    fn admitted(&self) -> Vec<Admitted<'_>> {
        self.cells
            .values()
            .map(|c| Admitted {
                name: &c.name,
                spec: &c.spec,
            })
            .collect()
    }

    /// Handles one request from `session`.
    pub fn handle(
        &mut self,
        session: SessionId,
        peer: Peer,
        req: Request,
        fd: Option<OwnedFd>,
    ) -> Vec<Effect> {
        let kind = req.kind();
        let reply = |reply: Reply| {
            vec![Effect::Reply {
                session,
                reply,
                fd: None,
            }]
        };
        match req {
            Request::Hello { client } => {
                debug!(
                    "session {session}: hello from {client} (pid {}, uid {})",
                    peer.pid, peer.uid
                );
                reply(Reply::Welcome {
                    broker_pid: std::process::id(),
                    instance: self.instance,
                    backend: self.backend(),
                    machine: self.machine.summary(),
                    cpus: self.planner.capacity(),
                })
            }
            Request::Register {
                name,
                spec,
                wait,
                members,
            } => self.register(session, peer, name, spec, wait, members),
            Request::Rejoin { cell, token } => self.rejoin(session, peer, cell, token, fd),
            Request::AddMember { cell, pid } => match self.add_member(peer, cell, pid) {
                Ok(effects) => {
                    let mut e = effects;
                    e.push(Effect::Reply {
                        session,
                        reply: Reply::Ok,
                        fd: None,
                    });
                    e
                }
                Err(r) => reply(r),
            },
            Request::Report {
                cell,
                busy,
                wanted,
                progress,
            } => match self.owned(peer, cell, kind) {
                Ok(()) => {
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
                Err(r) => reply(r),
            },
            Request::UpdateSpec { cell, spec } => match self.update_spec(peer, cell, spec) {
                Ok(()) => {
                    let mut e = self.admit_queued();
                    e.push(Effect::Reply {
                        session,
                        reply: Reply::Ok,
                        fd: None,
                    });
                    e
                }
                Err(r) => reply(r),
            },
            Request::Release { cell } => match self.owned(peer, cell, kind) {
                Ok(()) => {
                    let mut e = self.end_cell(cell, "released by its client");
                    self.reconcile();
                    e.extend(self.admit_queued());
                    e.push(Effect::Reply {
                        session,
                        reply: Reply::Ok,
                        fd: None,
                    });
                    e
                }
                Err(r) if self.queue.iter().any(|q| q.id == cell) => {
                    let _ = r;
                    self.queue.retain(|q| q.id != cell);
                    reply(Reply::Ok)
                }
                Err(r) => reply(r),
            },
            Request::Status => {
                let json = self.status_json();
                let mut chunks = crate::status::chunks(&json);
                let last = chunks.pop().unwrap_or_default();
                let mut e: Vec<Effect> = chunks
                    .into_iter()
                    .map(|c| Effect::Reply {
                        session,
                        reply: Reply::Status {
                            more: true,
                            json: c,
                        },
                        fd: None,
                    })
                    .collect();
                e.push(Effect::Reply {
                    session,
                    reply: Reply::Status {
                        more: false,
                        json: last,
                    },
                    fd: None,
                });
                e
            }
            Request::KindDefine { name, devices } => match self.ledger.define(&name, &devices) {
                Ok(()) => reply(Reply::Ok),
                Err(e) => reply(err(ErrorCode::Invalid, kind, e)),
            },
            Request::KindList => {
                let json = self.ledger.json();
                let mut chunks = crate::status::chunks(&json);
                let last = chunks.pop().unwrap_or_default();
                let mut e: Vec<Effect> = chunks
                    .into_iter()
                    .map(|c| Effect::Reply {
                        session,
                        reply: Reply::Json {
                            more: true,
                            json: c,
                        },
                        fd: None,
                    })
                    .collect();
                e.push(Effect::Reply {
                    session,
                    reply: Reply::Json {
                        more: false,
                        json: last,
                    },
                    fd: None,
                });
                e
            }
            Request::KindAcquire { items } => {
                let first = !self.ledger.holds(peer.pid);
                match self.ledger.acquire(peer.pid, &items) {
                    Ok(()) => {
                        let mut e = Vec::new();
                        if first {
                            // Watch it, so its holdings come back if it dies.
                            e.push(Effect::Watch(peer.pid));
                        }
                        e.push(Effect::Reply {
                            session,
                            reply: Reply::Ok,
                            fd: None,
                        });
                        e
                    }
                    Err(why) => reply(err(ErrorCode::Refused, kind, why)),
                }
            }
            Request::KindRelease { items } => {
                self.ledger.release(peer.pid, &items);
                self.ledger_changed()
            }
            Request::KindWatch { epoch, waiting } => {
                if self.ledger.epoch() > epoch {
                    reply(Reply::Changed {
                        epoch: self.ledger.epoch(),
                        waiters: self.ledger.waiters(),
                    })
                } else {
                    self.ledger.set_waiting(peer.pid, waiting);
                    self.watchers.push((session, peer.pid, epoch));
                    vec![]
                }
            }
            Request::Shutdown => {
                if peer.uid == 0 || peer.uid == self.uid {
                    info!("shutdown requested by pid {} (uid {})", peer.pid, peer.uid);
                    self.stop_requested = true;
                    reply(Reply::Ok)
                } else {
                    reply(err(
                        ErrorCode::PermissionDenied,
                        kind,
                        "only root or the broker's owner may stop it",
                    ))
                }
            }
        }
    }

    /// Answers every watcher whose epoch is behind the ledger's.
    fn ledger_changed(&mut self) -> Vec<Effect> {
        let epoch = self.ledger.epoch();
        let mut out = Vec::new();
        let mut keep = Vec::new();
        for (session, pid, seen) in std::mem::take(&mut self.watchers) {
            if epoch > seen {
                self.ledger.set_waiting(pid, 0);
                out.push((session, pid));
            } else {
                keep.push((session, pid, seen));
            }
        }
        self.watchers = keep;
        let waiters = self.ledger.waiters();
        out.into_iter()
            .map(|(session, _)| Effect::Reply {
                session,
                reply: Reply::Changed { epoch, waiters },
                fd: None,
            })
            .collect()
    }

    fn owned(&self, peer: Peer, cell: u64, kind: u16) -> Result<(), Reply> {
        match self.cells.get(&cell) {
            None => Err(err(
                ErrorCode::UnknownCell,
                kind,
                format!("cell {cell} is not known to this broker (it ended, or never existed)"),
            )),
            Some(c) if c.uid != peer.uid && peer.uid != 0 => Err(err(
                ErrorCode::PermissionDenied,
                kind,
                format!(
                    "cell {cell} belongs to uid {}; uid {} may not act on it",
                    c.uid, peer.uid
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Checks that `pid` may join a cell on behalf of `peer`.
    fn check_member(&self, peer: Peer, pid: u32, kind: u16) -> Result<(), Reply> {
        if pid == 0 || !self.os.alive(pid) {
            return Err(err(
                ErrorCode::Invalid,
                kind,
                format!("process {pid} does not exist"),
            ));
        }
        let owner = self.os.uid(pid);
        if peer.uid != 0 && owner != Some(peer.uid) {
            return Err(err(
                ErrorCode::PermissionDenied,
                kind,
                format!(
                    "process {pid} belongs to uid {}; uid {} may not place it in a cell",
                    owner.unwrap_or(u32::MAX),
                    peer.uid
                ),
            ));
        }
        if let Some(&c) = self.by_pid.get(&pid) {
            return Err(err(
                ErrorCode::Invalid,
                kind,
                format!(
                    "process {pid} is already in cell {c} ({})",
                    self.cells[&c].name
                ),
            ));
        }
        Ok(())
    }

    fn register(
        &mut self,
        session: SessionId,
        peer: Peer,
        name: String,
        spec: CellSpec,
        wait: bool,
        members: Vec<u32>,
    ) -> Vec<Effect> {
        const KIND: u16 = 0x02;
        let one = |reply: Reply| {
            vec![Effect::Reply {
                session,
                reply,
                fd: None,
            }]
        };
        if let Err(e) = spec.validate() {
            return one(err(
                ErrorCode::Invalid,
                KIND,
                format!("invalid request: {e}"),
            ));
        }
        let members = if members.is_empty() {
            vec![peer.pid]
        } else {
            members
        };
        for &pid in &members {
            if let Err(r) = self.check_member(peer, pid, KIND) {
                return one(r);
            }
        }
        let name = if name.trim().is_empty() {
            format!("pid-{}", members[0])
        } else {
            name
        };
        let verdict = if self.queue.is_empty() {
            self.planner.admit(&self.admitted(), &spec)
        } else {
            // Strict FIFO: newcomers queue behind those already waiting,
            // unless they can never be admitted at all.
            match self.planner.admit(&[], &spec) {
                Admission::Never(r) => Admission::Never(r),
                _ => Admission::NotNow(format!(
                    "{} cell(s) are already waiting for CPUs",
                    self.queue.len()
                )),
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        self.journal(&[Record::NextId { next: self.next_id }]);
        let token = random_u64();
        match verdict {
            Admission::Admit => self.activate(id, name, peer.uid, spec, members, session, token),
            Admission::NotNow(reason) if wait => {
                info!("cell {id} ({name}) queued: {reason}");
                self.queue.push_back(Queued {
                    id,
                    name,
                    uid: peer.uid,
                    spec,
                    members,
                    session,
                    token,
                    reason: reason.clone(),
                });
                one(Reply::Queued {
                    cell: id,
                    position: self.queue.len() as u32,
                    reason,
                })
            }
            Admission::NotNow(reason) => one(err(
                ErrorCode::Refused,
                KIND,
                format!("cell {name:?} refused: {reason}"),
            )),
            Admission::Never(reason) => one(err(
                ErrorCode::Never,
                KIND,
                format!("cell {name:?} can never be admitted: {reason}"),
            )),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn activate(
        &mut self,
        id: u64,
        name: String,
        uid: u32,
        spec: CellSpec,
        members: Vec<u32>,
        session: SessionId,
        token: u64,
    ) -> Vec<Effect> {
        const KIND: u16 = 0x02;
        let fail = |msg: String| {
            vec![Effect::Reply {
                session,
                reply: err(ErrorCode::Internal, KIND, msg),
                fd: None,
            }]
        };
        let page = match PageMap::create(id, self.instance) {
            Ok(p) => p,
            Err(e) => return fail(format!("cannot create the grant page: {e}")),
        };
        if let Err(e) = self.enforcer.create(id) {
            return fail(format!(
                "cannot create the cell in the {} backend: {e}; check the broker's permissions or start it with --backend affinity",
                self.backend()
            ));
        }
        self.cells.insert(
            id,
            Cell {
                name: name.clone(),
                uid,
                spec,
                token,
                members: vec![],
                pages: vec![page],
                generation: 0,
                published: None,
                est: Estimator::new(),
                progress: 0,
                busy_reported: 0,
            },
        );
        self.journal(&[Record::Cell {
            id,
            name: name.clone(),
            uid,
            spec,
            token,
        }]);
        // The grant reaches the kernel before any process joins.
        self.reconcile();
        let mut effects = Vec::new();
        for pid in members {
            let Some(start) = self.os.start_time(pid) else {
                continue;
            };
            if let Err(e) = self.enforcer.attach(id, pid) {
                warn!("cell {id}: {e}");
                continue;
            }
            let m = MemberRec { pid, start };
            self.cells
                .get_mut(&id)
                .expect("inserted above")
                .members
                .push(m);
            self.by_pid.insert(pid, id);
            self.journal(&[Record::Member { id, member: m }]);
            effects.push(Effect::Watch(pid));
        }
        let c = &self.cells[&id];
        if c.members.is_empty() {
            // Every process vanished while we set up: nothing to manage.
            let mut e = self.end_cell(id, "its processes exited before they joined");
            self.reconcile();
            e.push(Effect::Reply {
                session,
                reply: err(
                    ErrorCode::Invalid,
                    KIND,
                    "the cell's processes exited before they could join it",
                ),
                fd: None,
            });
            return e;
        }
        info!(
            "cell {id} ({name}) admitted: {spec}; CPUs {}",
            c.published
                .as_ref()
                .map(|g| g.cpus.to_string())
                .unwrap_or_default()
        );
        let fd = rustix::io::fcntl_dupfd_cloexec(c.pages[0].fd(), 0).ok();
        effects.push(Effect::Reply {
            session,
            reply: Reply::Registered {
                cell: id,
                token,
                generation: c.generation,
            },
            fd,
        });
        effects
    }

    fn rejoin(
        &mut self,
        session: SessionId,
        peer: Peer,
        cell: u64,
        token: u64,
        fd: Option<OwnedFd>,
    ) -> Vec<Effect> {
        const KIND: u16 = 0x03;
        let one = |reply: Reply| {
            vec![Effect::Reply {
                session,
                reply,
                fd: None,
            }]
        };
        if let Err(r) = self.owned(peer, cell, KIND) {
            return one(r);
        }
        let instance = self.instance;
        let grant = self.cells[&cell].published.clone();
        let generation = self.cells[&cell].generation;
        let pg = grant.as_ref().map(|g| self.page_grant(cell, generation, g));
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
            match PageMap::adopt(fd, cell, instance) {
                Ok(p) => {
                    if let Some(pg) = &pg {
                        p.page().publish(pg);
                    }
                    c.pages.push(p);
                    page_idx = c.pages.len() - 1;
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
        info!("cell {cell} ({}) rejoined by pid {}", c.name, peer.pid);
        let fd = rustix::io::fcntl_dupfd_cloexec(c.pages[page_idx].fd(), 0).ok();
        vec![Effect::Reply {
            session,
            reply: Reply::Registered {
                cell,
                token,
                generation,
            },
            fd,
        }]
    }

    fn add_member(&mut self, peer: Peer, cell: u64, pid: u32) -> Result<Vec<Effect>, Reply> {
        const KIND: u16 = 0x04;
        self.owned(peer, cell, KIND)?;
        self.check_member(peer, pid, KIND)?;
        let start = self.os.start_time(pid).ok_or_else(|| {
            err(
                ErrorCode::Invalid,
                KIND,
                format!("process {pid} does not exist"),
            )
        })?;
        self.enforcer.attach(cell, pid).map_err(|e| {
            err(
                ErrorCode::Internal,
                KIND,
                format!("cannot move process {pid} into cell {cell}: {e}"),
            )
        })?;
        let m = MemberRec { pid, start };
        self.cells.get_mut(&cell).expect("checked").members.push(m);
        self.by_pid.insert(pid, cell);
        self.journal(&[Record::Member {
            id: cell,
            member: m,
        }]);
        Ok(vec![Effect::Watch(pid)])
    }

    fn update_spec(&mut self, peer: Peer, cell: u64, spec: CellSpec) -> Result<(), Reply> {
        const KIND: u16 = 0x06;
        self.owned(peer, cell, KIND)?;
        spec.validate()
            .map_err(|e| err(ErrorCode::Invalid, KIND, format!("invalid request: {e}")))?;
        let others: Vec<Admitted<'_>> = self
            .cells
            .iter()
            .filter(|(id, _)| **id != cell)
            .map(|(_, c)| Admitted {
                name: &c.name,
                spec: &c.spec,
            })
            .collect();
        match self.planner.admit(&others, &spec) {
            Admission::Admit => {}
            Admission::NotNow(r) => return Err(err(ErrorCode::Refused, KIND, r)),
            Admission::Never(r) => return Err(err(ErrorCode::Never, KIND, r)),
        }
        self.cells.get_mut(&cell).expect("checked").spec = spec;
        self.journal(&[Record::Spec { id: cell, spec }]);
        self.reconcile();
        Ok(())
    }

    /// Ends a cell: enforcement torn down (remaining processes leave
    /// confinement), pages marked released, journaled. Does not re-plan.
    fn end_cell(&mut self, id: u64, why: &str) -> Vec<Effect> {
        let Some(c) = self.cells.remove(&id) else {
            return vec![];
        };
        info!("cell {id} ({}) ended: {why}", c.name);
        if let Err(e) = self.enforcer.remove(id) {
            warn!("cell {id}: {e}");
        }
        let final_grant = allot_proto::Grant {
            cell: id,
            generation: c.generation + 1,
            instance: self.instance,
            threads: self.machine.num_cpus() as u32,
            flags: FLAG_RELEASED,
            entitled: 0,
            share_milli: 0,
            home: 0,
            cpus: *self.machine.usable(),
            lent: Default::default(),
        };
        for p in &c.pages {
            p.page().publish(&final_grant);
        }
        self.journal(&[Record::End { id }]);
        c.members
            .iter()
            .filter_map(|m| {
                self.by_pid.remove(&m.pid);
                // A process that holds ledger items stays watched.
                (!self.ledger.holds(m.pid)).then_some(Effect::Unwatch(m.pid))
            })
            .collect()
    }

    /// A watched process exited.
    pub fn exited(&mut self, pid: u32) -> Vec<Effect> {
        let mut effects = Vec::new();
        if self.ledger.release_all(pid) {
            info!("process {pid} died holding resources; given back");
            effects.extend(self.ledger_changed());
        }
        let Some(id) = self.by_pid.remove(&pid) else {
            effects.push(Effect::Unwatch(pid));
            return effects;
        };
        effects.push(Effect::Unwatch(pid));
        let Some(c) = self.cells.get_mut(&id) else {
            return effects;
        };
        c.members.retain(|m| m.pid != pid);
        let empty = c.members.is_empty();
        self.journal(&[Record::Gone { id, pid }]);
        if empty {
            // Processes that joined through the cgroup (children of the
            // member) keep the cell alive; watch them from now on.
            let left: Vec<MemberRec> = self
                .enforcer
                .pids(id)
                .into_iter()
                .filter(|&p| p != pid && self.os.alive(p))
                .filter_map(|p| {
                    Some(MemberRec {
                        pid: p,
                        start: self.os.start_time(p)?,
                    })
                })
                .collect();
            if left.is_empty() {
                effects.extend(self.end_cell(id, "its last process exited"));
            } else {
                for m in left {
                    self.cells.get_mut(&id).expect("present").members.push(m);
                    self.by_pid.insert(m.pid, id);
                    self.journal(&[Record::Member { id, member: m }]);
                    effects.push(Effect::Watch(m.pid));
                }
            }
        }
        self.reconcile();
        effects.extend(self.admit_queued());
        effects
    }

    /// A session closed: its queued cells are dropped. Its admitted cells
    /// live on while their processes do.
    pub fn session_closed(&mut self, session: SessionId) -> Vec<Effect> {
        for (_, pid, _) in self.watchers.iter().filter(|w| w.0 == session) {
            self.ledger.set_waiting(*pid, 0);
        }
        self.watchers.retain(|w| w.0 != session);
        let before = self.queue.len();
        self.queue.retain(|q| q.session != session);
        if self.queue.len() != before {
            debug!(
                "session {session} closed; dropped {} queued cell(s)",
                before - self.queue.len()
            );
        }
        self.admit_queued()
    }

    /// Admits queued cells in order while admission allows.
    fn admit_queued(&mut self) -> Vec<Effect> {
        let mut effects = Vec::new();
        while let Some(q) = self.queue.front() {
            match self.planner.admit(&self.admitted(), &q.spec) {
                Admission::Admit => {
                    let q = self.queue.pop_front().expect("front exists");
                    let alive: Vec<u32> = q
                        .members
                        .iter()
                        .copied()
                        .filter(|&p| self.os.alive(p) && !self.by_pid.contains_key(&p))
                        .collect();
                    if alive.is_empty() {
                        continue;
                    }
                    effects.extend(
                        self.activate(q.id, q.name, q.uid, q.spec, alive, q.session, q.token),
                    );
                }
                Admission::NotNow(r) => {
                    if let Some(front) = self.queue.front_mut() {
                        front.reason = r;
                    }
                    break;
                }
                Admission::Never(r) => {
                    let q = self.queue.pop_front().expect("front exists");
                    effects.push(Effect::Reply {
                        session: q.session,
                        reply: err(
                            ErrorCode::Never,
                            0x02,
                            format!("cell {:?} can never be admitted: {r}", q.name),
                        ),
                        fd: None,
                    });
                }
            }
        }
        effects
    }

    /// A monitor tick: usage → demand → re-plan if any demand changed.
    pub fn tick(&mut self, now: Instant) -> Vec<Effect> {
        let mut changed = false;
        let ids: Vec<u64> = self.cells.keys().copied().collect();
        for id in ids {
            let usage = self.enforcer.usage_ns(id);
            let c = self.cells.get_mut(&id).expect("listed above");
            let granted = c.published.as_ref().map_or(1, |g| g.cpus.len() as u32);
            let before = c.est.demand();
            if c.est.tick(now, usage, granted) != before {
                changed = true;
            }
        }
        if changed {
            self.reconcile();
        }
        self.admit_queued()
    }

    /// Releases what the broker created, if no cell is left (broker exit).
    /// Cells that still run keep their confinement and journal entries, so
    /// a restarted broker adopts them.
    pub fn shutdown(&mut self) {
        if self.cells.is_empty() {
            if let Err(e) = self.enforcer.cleanup() {
                warn!("cleanup: {e}");
            }
        } else {
            info!(
                "exiting with {} cell(s) still running; they keep their CPUs until a broker adopts them",
                self.cells.len()
            );
        }
    }
}
