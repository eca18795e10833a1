//! The broker's state machine (`Engine`): cells, the admission queue, the plan, and
//! what has been enforced and published.
//!
//! `Engine` does no socket or epoll work and writes no journal. Each entry point (a
//! request, a process exit, a monitor tick, a closed session; all in
//! `entry`) updates the state, re-plans if needed, drives the enforcer and
//! the grant pages, and returns [`Effect`]s for the event loop: first the
//! records the step asks the journal to keep, then replies to send and
//! processes to start or stop watching.
//!
//! The kernel writes stay calls, not effects: a grant reaches the kernel
//! (every shrink before any growth) before a process is attached to it,
//! so the engine must see each write succeed or fail where it makes it.
//! Every one of them goes through `kernel::Kernel`, the engine's one door
//! to the backend ([`Enforcer`]), which says what is written and in which
//! order; processes are read through the process table ([`Os`]). Both sit
//! at the OS boundary. The state-machine tests
//! (`crates/broker/tests/`) run the engine on the dry-run backend and a
//! fake process table, writing nothing to the kernel, and read what it
//! asked to journal from its effects. Publishing a grant writes the
//! cell's page, memory the broker maps and the clients only read.
//!
//! - this file: the state, process exits, ticks, shutdown, ended cells'
//!   backend removal;
//! - `kernel`: every write to the machine, and the order writes keep
//!   (the CPU sets' passes: `kernel::CpuPasses`);
//! - `cells`: the subsystem of the cells, the queue, which cell each
//!   process is in and the ids given out (its invariants in its doc);
//! - `reconcile`: the re-plan pipeline (`Engine::reconcile`);
//! - `restore`: rebuilding the state from the journal and the backend;
//! - `register`: admission, the queue, joining and leaving cells;
//! - `arrival`: admitted cells' processes joining them, a turn's
//!   newcomers together (`Engine::settle`);
//! - `requests`: dispatching requests, one handler each;
//! - `time`: what the kernel enforces for a time cell, and its windows;
//! - `entry`: the entry points, each returning its step's effects with
//!   the journal's records first;
//! - `effect`: what entry points return to the event loop ([`Effect`])
//!   (the sessions and peers it names are `crate::peer`'s);
//! - `journaling`: the records a step asks for, and admission held while
//!   the journal is behind;
//! - `message`: message-triggered cells asleep and awake; `isolation`:
//!   partition CPUs kept clear of interrupts and workqueues;
//! - `measure`: each tick's reading of every cell and of the machine
//!   (kept in `crate::series`), and the goal trackers' evaluation; its
//!   machine-wide state is `state::measure::Measure`;
//! - `outside`: work outside every cell: what it takes of each cell's
//!   CPUs, the teams that leave them to it, the cells' kernel weights
//!   (its state `state::outside::Outside`);
//! - `account` (the state) and `holdings` (the engine's side), `keep_off`,
//!   `minimum`, `pause`: the ledger's CPU holdings as the plan sees them,
//!   holders' CPUs kept off their cell's other processes, the system
//!   minimum, paused best-effort cells;
//! - `state`: what the subsystems above keep, each a struct with private
//!   fields and its own methods that imports nothing of the engine (as
//!   `cells`, `account`, `memory` and `journaling` are): every import in
//!   `core/` points down, from the engine's sides through this file to
//!   the state.
//!
//! Invariants kept here (the planner keeps the plan invariants):
//!
//! - Every member pid is in exactly one cell (kept by `cells::Cells`).
//! - A cell's grant is applied to the kernel *before* its first process is
//!   attached, so a process never runs a single instruction outside it.
//! - When CPUs move between cells, every cell first shrinks to the CPUs it
//!   keeps, then grows (`kernel::CpuPasses`): a CPU one cell gains has
//!   left every cell that keeps some of its own, and a cell the plan
//!   leaves with none is paused before any growth.
//! - Grant generations only grow; a page is published only when its grant
//!   changed, and every published grant is journaled.
//! - A cell whose processes are all gone is ended in the same step that
//!   notices it, and its CPUs are re-planned at once. Its backend state is
//!   removed then, or retried on every tick for [`REMOVE_RETRY_FOR`] if the
//!   kernel is still busy with its last task.
//! - No cell is admitted while the journal is behind, nor answered that
//!   the journal could not record (`journaling`), and no id is given out
//!   that the backend still holds (see `restore`).
//! - What one user can make the broker keep is bounded by
//!   [`crate::config::Limits`]; root is exempt from the per-user bounds.

mod account;
mod arrival;
mod cells;
pub(crate) use cells::{Cell, Queued};
pub(crate) mod effect;
mod entry;
mod groups;
mod holdings;
mod isolation;
mod journaling;
mod keep_off;
mod kernel;
mod limits;
mod memory;
mod memory_limits;
mod message;
mod minimum;
mod pause;
pub use state::pause::WHY as PAUSED_WHY;
mod measure;
mod outside;
mod reconcile;
mod register;
mod requests;
mod restore;
mod state;
mod time;

use crate::peer::{Peer, SessionId};
pub use effect::Effect;
pub(crate) use effect::{answer, err};

use crate::config::{Config, Limits};
use crate::journal::{Journal, MemberRec, Record};
use crate::ledger::Ledger;
use crate::log::{debug, info, warn};
use crate::metrics::Counters;
use crate::names::shown;
use crate::windows::Windows;
use allot_enforce::Enforcer;
use allot_enforce::os::Os;
use allot_plan::{Plan, PlanConfig, Planner};
use allot_proto::FLAG_RELEASED;
use allot_proto::msg::{ErrorCode, Reply};
use allot_topo::Machine;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the removal of an ended cell's backend state is retried.
pub const REMOVE_RETRY_FOR: Duration = Duration::from_secs(30);

/// Grant pages one cell may hold (each a memfd handed back on `Rejoin`).
const MAX_PAGES_PER_CELL: usize = 8;

/// An ended cell whose backend state could not be removed yet.
#[derive(Debug)]
struct Removal {
    id: u64,
    since: Instant,
}

/// The broker's state.
#[derive(Debug)]
pub struct Engine {
    pub(crate) machine: &'static Machine,
    pub(crate) planner: Planner<'static>,
    pub(crate) plan: Plan,
    /// The cells, the queue and who is a member of which (`cells`).
    pub(crate) cells: cells::Cells,
    /// Admitted cells whose processes join at the end of the turn
    /// (`arrival`), when `batch_arrivals` is on.
    arriving: Vec<state::arrival::Arriving>,
    batch_arrivals: bool,
    /// The next cell's groups, made between turns (`arrival`).
    ahead: state::arrival::Ahead,
    /// The backend: every write to the machine (`kernel`).
    kernel: kernel::Kernel,
    os: Arc<dyn Os>,
    /// What the step asks the journal to record, and the journal's
    /// health (`journaling`).
    journaling: journaling::Journaling,
    pub(crate) instance: u64,
    pub(crate) started: Instant,
    pub(crate) backend_notes: Vec<String>,
    stop_requested: bool,
    uid: u32,
    /// The ledger of `require` holdings, its watchers, and its CPU
    /// holdings as the plan sees them (`account`).
    pub(crate) account: account::Account,
    /// What the cells' other processes were last kept off (`keep_off`).
    kept_off: state::keep_off::KeptOff,
    pub(crate) limits: Limits,
    pub(crate) show_other_users: bool,
    removals: Vec<Removal>,
    /// What the metrics count (`crate::metrics`).
    pub(crate) counters: Counters,
    /// The windows of time-triggered cells and their time base
    /// (`crate::windows`).
    pub(crate) windows: Windows,
    /// What the status read of each process's runtimes lately
    /// (`crate::cell_runtimes::RuntimeCache`); the status is built from `&self`.
    pub(crate) runtime_cache: std::sync::Mutex<crate::cell_runtimes::RuntimeCache>,
    /// The machine's load and the goal cells' counters (`measure`).
    pub(crate) measure: state::measure::Measure,
    /// Named channels, and who besides their creators may open them.
    pub(crate) channels: crate::channels::Channels,
    /// Partition CPUs kept clear of interrupts and workqueues (`isolation`).
    isolation: state::isolation::Isolation,
    /// Message-triggered cells' states (`message`).
    messages: state::message::Messages,
    /// Best-effort cells paused while guarantees take every CPU (`pause`).
    paused: state::pause::Pauses,
    /// The system minimum, when the operator turned it on (`minimum`).
    unmanaged: Option<allot_enforce::unmanaged::Unmanaged>,
    /// Memory capacity, the reserve, and the cells' use (`memory`).
    pub(crate) memory: memory::MemoryControl,
    /// Work outside the cells: what it takes of their CPUs, and the
    /// cells' weights against it (`outside`).
    pub(crate) outside: state::outside::Outside,
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // One system call (opening /dev/urandom took three, on every
    // registration).
    // SAFETY: `b` is valid for writes of its length.
    let got = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if got != b.len() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.as_nanos() as u64 ^ (std::process::id() as u64) << 32;
    }
    // Never 0: that value marks a recovered cell nobody has claimed.
    u64::from_le_bytes(b).max(1)
}

impl Engine {
    /// Builds the core, restoring cells from the journal and the backend:
    /// cells whose processes still run are adopted with the grants they
    /// had, the others are cleaned up (see `restore`). Returns the
    /// effects: what the restore asks the journal to record (first), then
    /// pids to watch.
    pub fn new(
        cfg: &Config,
        machine: Machine,
        enforcer: Box<dyn Enforcer>,
        os: Arc<dyn Os>,
        journal: Option<&Journal>,
    ) -> (Engine, Vec<Effect>) {
        let machine: &'static Machine = Box::leak(Box::new(machine));
        let mut kernel = kernel::Kernel::new(enforcer);
        let planner = Planner::new(
            machine,
            PlanConfig {
                reserve: cfg.reserve,
                policy: cfg.policy,
                lend: cfg.lend,
                time_reserve_ppm: cfg.time_reserve_ppm,
                pause_best_effort: kernel.can_pause(),
            },
        );
        // (The dry-run backend touches nothing, resctrl included.)
        let resctrl = if kernel.kind() == allot_enforce::BackendKind::DryRun {
            Err("the dry-run backend partitions no cache or bandwidth".to_string())
        } else {
            allot_enforce::resctrl::Resctrl::open(
                Arc::new(allot_enforce::cgroupfs::KernelFs),
                &cfg.resctrl_root,
                &cfg.cgroup_name(),
            )
            .map_err(|a| a.to_string())
        };
        let memory =
            memory::MemoryControl::new(kernel.memory_capacity(), cfg.memory_reserve, resctrl);
        let mut core = Engine {
            machine,
            planner,
            plan: Plan::default(),
            cells: cells::Cells::new(),
            arriving: Vec::new(),
            batch_arrivals: false,
            ahead: Default::default(),
            kernel,
            os,
            journaling: journaling::Journaling::of(journal),
            instance: random_u64(),
            started: Instant::now(),
            backend_notes: Vec::new(),
            stop_requested: false,
            uid: rustix::process::geteuid().as_raw(),
            account: account::Account::new(Ledger::new(machine, cfg.limits)),
            kept_off: Default::default(),
            limits: cfg.limits,
            channels: crate::channels::Channels::new(cfg.channel_acl.clone()),
            messages: Default::default(),
            paused: Default::default(),
            unmanaged: None,
            isolation: state::isolation::Isolation::new(
                cfg.isolate,
                cfg.isolate_root.clone(),
                &cfg.state_dir,
            )
            .with_partitions(cfg.partitions),
            show_other_users: cfg.show_other_users,
            removals: Vec::new(),
            counters: Counters::default(),
            windows: Windows::new(),
            runtime_cache: Default::default(),
            measure: state::measure::Measure::new(Arc::new(allot_enforce::counters::RealCounters)),
            memory,
            outside: state::outside::Outside::new(cfg.weigh),
        };
        let effects = core.restore(journal);
        // Classes of service: the adopted cells' kept, the rest removed.
        core.apply_classes();
        core.keep_reserve();
        core.open_minimum(cfg);
        let effects = core.with_records(effects);
        (core, effects)
    }

    /// Uses `r` for cache ways and bandwidth instead of the mount the
    /// configuration names (a fixture's, in tests).
    pub fn set_resctrl(&mut self, r: allot_enforce::resctrl::Resctrl) {
        self.memory.set_resctrl(r);
    }

    /// Notes from backend selection (why others were skipped).
    pub fn set_backend_notes(&mut self, notes: Vec<String>) {
        self.backend_notes = notes;
    }

    /// How long some runnable thread of cell `id` waited for a CPU, µs,
    /// where the backend keeps pressure stall information per cell.
    pub(crate) fn cpu_pressure_us(&mut self, id: u64) -> Option<u64> {
        self.kernel.cpu_pressure_us(id)
    }

    /// The enforcement backend's name.
    pub fn backend(&self) -> String {
        self.kernel.kind().to_string()
    }

    /// Reads hardware counters through `counters` instead of the kernel
    /// (tests).
    pub fn set_counters(&mut self, counters: Arc<dyn allot_enforce::counters::PerfCounters>) {
        self.measure.set_counters(counters);
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
        self.cells.idle()
    }

    /// The current plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Ends a cell: enforcement torn down (remaining processes leave
    /// confinement; a removal the kernel refuses for now is retried on
    /// ticks), pages marked released, journaled. Does not re-plan.
    fn end_cell(&mut self, id: u64, why: &str) -> Vec<Effect> {
        if !self.cells.contains_key(&id) {
            return vec![];
        }
        // What the kernel did to it last (an OOM kill that ended it).
        self.observe_memory(id);
        self.memory.forget(id);
        let c = self.cells.remove(&id).expect("present above");
        if !c.spec.cache.is_none() {
            // Its ways go back to the default group.
            self.apply_classes();
        }
        info!("cell {id} ({}) ended: {why}", shown(&c.name));
        self.counters.ended += 1;
        self.windows.remove(id);
        self.remove_backend(id);
        let final_grant = allot_proto::Grant {
            cell: id,
            generation: c.generation + 1,
            instance: self.instance,
            threads: self.machine.num_cpus() as u32,
            flags: FLAG_RELEASED,
            entitled: 0,
            share_milli: 0,
            home: 0,
            window: Default::default(),
            cpus: *self.machine.usable(),
            lent: Default::default(),
        };
        c.publish(&final_grant);
        self.journal(&[Record::End { id }]);
        c.members()
            .iter()
            .filter_map(|m| {
                // A process the ledger still involves stays watched.
                (!self.account.ledger().involves(m.pid)).then_some(Effect::Unwatch(m.pid))
            })
            .collect()
    }

    pub(super) fn remove_backend(&mut self, id: u64) {
        match self.kernel.remove(id) {
            Ok(()) => {}
            Err(e) if e.is_busy() => {
                debug!("cell {id}: {e}; retrying on the next ticks");
                if !self.removals.iter().any(|r| r.id == id) {
                    self.removals.push(Removal {
                        id,
                        since: Instant::now(),
                    });
                }
            }
            Err(e) => warn!("cell {id}: {e}"),
        }
    }

    /// Retries the removals the kernel refused so far.
    fn retry_removals(&mut self, now: Instant) {
        let pending = std::mem::take(&mut self.removals);
        for r in pending {
            if self.cells.contains_key(&r.id) {
                continue; // adopted again meanwhile
            }
            match self.kernel.remove(r.id) {
                Ok(()) => debug!("cell {}: removed after a retry", r.id),
                Err(e) if now.duration_since(r.since) < REMOVE_RETRY_FOR => {
                    let _ = e;
                    self.removals.push(r);
                }
                Err(e) => warn!(
                    "cell {}: giving up removing it after {REMOVE_RETRY_FOR:?}: {e}",
                    r.id
                ),
            }
        }
    }

    /// The step of [`Engine::exited`].
    pub(super) fn process_exited(&mut self, pid: u32) -> Vec<Effect> {
        let seen = Instant::now();
        let mut effects = Vec::new();
        self.account.forget(pid);
        if self.account.process_ended(pid) {
            info!("process {pid} died holding resources; given back");
            effects.extend(self.after_ledger_change());
        }
        effects.push(Effect::Unwatch(pid));
        let Some(id) = self.cells.leave(pid) else {
            return effects;
        };
        let Some(c) = self.cells.get_mut(&id) else {
            return effects;
        };
        c.timeline
            .note("exited", format!("process {pid}"), Some(seen.elapsed()));
        let empty = c.members().is_empty();
        let mut ended = false;
        self.journal(&[Record::Gone { id, pid }]);
        if empty {
            // Processes that joined through the cgroup (children of the
            // member) keep the cell alive; watch them from now on.
            let left = self.live_backend_members(id, pid);
            if left.is_empty() {
                effects.extend(self.end_cell(id, "its last process exited"));
                ended = true;
            } else {
                for m in left {
                    if self.cells.join(id, m) {
                        self.journal(&[Record::Member { id, member: m }]);
                        effects.push(Effect::Watch(m.pid));
                    }
                }
            }
        }
        self.reconcile();
        if ended {
            self.counters.reclaim.observe(seen.elapsed());
        }
        effects.extend(self.admit_queued());
        effects
    }

    /// Processes the backend holds in cell `id` that are alive (other than
    /// `except`), bounded by the member limit.
    fn live_backend_members(&mut self, id: u64, except: u32) -> Vec<MemberRec> {
        let limit = self.limits.members as usize;
        self.kernel
            .pids(id)
            .into_iter()
            .filter(|&p| p != except && self.os.alive(p))
            .filter_map(|p| {
                Some(MemberRec {
                    pid: p,
                    start: self.os.start_time(p)?,
                })
            })
            .take(limit)
            .collect()
    }

    /// The step of [`Engine::session_closed`].
    pub(super) fn close_session(&mut self, session: SessionId) -> Vec<Effect> {
        // Its watch, places in line and gathered arrivals go with it: who
        // waited behind them may go, and the next of their batch may be
        // answered.
        let mut e = if self.account.leave_session(session) {
            self.ledger_changed()
        } else {
            Vec::new()
        };
        e.extend(self.gathering_due(Instant::now()));
        self.channels.session_closed(session);
        let queue = &mut self.cells.queue;
        let before = queue.len();
        queue.retain(|q| q.session != session);
        if queue.len() != before {
            debug!(
                "session {session} closed; dropped {} queued cell(s)",
                before - queue.len()
            );
        }
        e.extend(self.admit_queued());
        e
    }

    /// The step of [`Engine::tick`].
    pub(super) fn monitor_tick(&mut self, now: Instant) -> Vec<Effect> {
        self.joined_itself(None);
        if !self.removals.is_empty() {
            self.retry_removals(now);
        }
        self.refreeze_stragglers();
        self.watch_memory(now);
        let mut changed = false;
        let ids: Vec<u64> = self.cells.keys().copied().collect();
        let mut usages = BTreeMap::new();
        for id in ids {
            let usage = self.kernel.usage_ns(id);
            usages.insert(id, usage);
            let c = self.cells.get_mut(&id).expect("listed above");
            let granted = c.published.as_ref().map_or(1, |g| g.cpus.len() as u32);
            let before = c.est.demand();
            if c.est.tick(now, usage, granted) != before {
                changed = true;
            }
            let held = match c.published.as_ref() {
                Some(g) if g.stacked => g.share,
                _ => f64::from(granted),
            };
            self.observe(id, now, usage, held);
        }
        if let Some(per_cpu) = self.observe_machine(now)
            && self.observe_outside(now, &per_cpu, &usages)
        {
            changed = true;
        }
        if self.evaluate(now) {
            changed = true;
        }
        self.channels.settle(now);
        let (mut effects, moved) = self.message_tick(now);
        // CPUs given back through `require` leave their holder.
        if self.account.lingers() && self.refresh_account(now) {
            changed = true;
        }
        self.sweep_unmanaged();
        if changed || moved {
            self.reconcile();
        } else {
            // Processes that joined a cell holding CPUs since.
            self.keep_off_held();
        }
        effects.extend(self.admit_queued());
        // Places in the ledger's line whose clients stopped asking leave.
        self.account.expire_places(now);
        // Grants changed since the last look: waiting `require`s retry.
        effects.extend(self.ledger_changed());
        effects
    }

    /// Ended cells whose backend state is still being removed.
    pub fn pending_removals(&self) -> Vec<u64> {
        self.removals.iter().map(|r| r.id).collect()
    }

    /// The step of [`Engine::shutdown`].
    pub(super) fn wind_down(&mut self) {
        // Cells that keep running do so without windows until a broker
        // adopts them: never frozen by a broker that is gone.
        self.windows.stop();
        self.thaw_paused();
        // Nor is the machine left isolated for them, nor anyone confined
        // to the reserve.
        self.isolation.restore();
        self.close_minimum();
        // Give removals the kernel refused a last short chance.
        for _ in 0..50 {
            if self.removals.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            self.retry_removals(Instant::now());
        }
        if self.cells.is_empty() {
            if let Err(e) = self.kernel.cleanup() {
                warn!("cleanup: {e}");
            }
        } else {
            info!(
                "exiting with {} cell(s) still running; they keep their CPUs until a broker adopts them",
                self.cells.len()
            );
        }
    }

    /// Answers the gathered arrivals whose turn has come by `now`
    /// (`crate::gathering`).
    pub(super) fn gathering_due(&mut self, now: Instant) -> Vec<Effect> {
        self.account
            .gathering()
            .due(now)
            .into_iter()
            .map(|a| {
                answer(
                    a.session,
                    Reply::Gathered {
                        arrival: a.id,
                        others: a.others,
                    },
                )
            })
            .collect()
    }

    /// Answers every watcher whose epoch is behind the ledger's and whose
    /// process the change may let through (`Ledger::to_wake`).
    fn ledger_changed(&mut self) -> Vec<Effect> {
        self.account
            .wake_watchers()
            .into_iter()
            .map(|(session, w)| answer(session, w.into()))
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
        // Only what the requester could do itself: not out of another
        // cgroup's CPU confinement they may not undo.
        if let Some(why) = self.kernel.confined_elsewhere(pid, peer.uid) {
            return Err(err(ErrorCode::PermissionDenied, kind, why));
        }
        if let Some(c) = self.cells.cell_of(pid) {
            return Err(err(
                ErrorCode::Invalid,
                kind,
                format!(
                    "process {pid} is already in cell {c} ({})",
                    shown(&self.cells[&c].name)
                ),
            ));
        }
        Ok(())
    }
}
