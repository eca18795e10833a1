//! The one account: cells and `require` holdings decided by one plan
//! (Poli-C's policd and Tessellation's cells sharing one ledger of CPUs).
//!
//! The ledger says which process holds which CPU through `require`; the
//! plan says which CPUs each cell may run on. This module ties them, and
//! its [`Account`] owns the state of it all: the ledger, the sessions
//! watching it, each process's holder and what the plan is told. The
//! rest of the core reaches the ledger only through it.
//!
//! - Every process holding something has a *holder*: the cell it runs in
//!   (it or its nearest ancestor is a member), or none when it runs
//!   outside every cell. It is resolved at the process's first
//!   acquisition (a walk up its ancestors) and kept while it lives; when
//!   a cell gains members, the holders of processes holding nothing are
//!   resolved afresh at their next acquisition.
//! - A `cpu` item from a process of cell C names a CPU of C's grant; an
//!   exclusive one a CPU C is entitled to (not lent to it, not a stacked
//!   pool's). Otherwise it waits (`Refused`) until the grant holds it. A
//!   time cell's CPUs are shared in time: an exclusive hold there is
//!   `Never` (hold them `Shared`).
//! - A CPU held exclusively has one holder: an exclusive part of it asked
//!   by a process of another holder waits.
//! - Inside the cell, its other processes keep off those CPUs too: their
//!   threads' affinity is the grant minus the held CPUs (`keep_off`).
//! - The planner gets each cell's exclusively held CPUs as its *held*
//!   CPUs (`CellInput::held`, plan invariant 8): they stay in its
//!   entitlement and in what it keeps, and no other cell runs on them.
//!   The CPUs held by processes outside every cell are given to a cell of
//!   their own, [`OUTSIDE`] (exclusive, exactly those CPUs), which
//!   admission counts and which is never published or enforced.
//! - Admission counts every cell at its planned spec
//!   ([`CellSpec::holding`]): a newcomer's guarantee never takes a held
//!   CPU. An exclusive hold outside every cell must itself pass admission
//!   (as a larger `OUTSIDE` cell), so it never breaks a guarantee.
//! - The reserve is the system minimum: its CPUs are left whole to
//!   processes that asked for nothing ([`Ledger::keep_cpu`]); no `require`
//!   takes them.
//! - A CPU given back stays with its holder for [`LINGER`] (checked on
//!   every tick, so up to a tick more) unless another holder takes it: a
//!   block entered and left in a loop moves the other cells once, not on
//!   every pass (each move re-plans, sets affinities and writes pages).
//!   Meanwhile other cells' guarantees and `require`s wait at most that.
//! - Whenever a grant changes, the ledger's epoch moves, so processes
//!   waiting for their cell's grant try again.
//! - `io` holdings of a cell's processes are the cell's I/O weights: per
//!   device, the largest weight any of them holds goes to the cell's
//!   cgroup (`Enforcer::set_io_weights`; v1 blkio with BFQ, v2 `io.weight`)
//!   and back to the default when none holds it. On the cgroup v1 backend
//!   an `io` weight on a device whose scheduler is not BFQ is refused as
//!   never (BFQ is the only v1 scheduler that honours weights). Processes
//!   outside every cell weight their own threads (the client's
//!   `ALLOT_IO_CGROUP` groups).

use super::Engine;
use super::effect::{Effect, SessionId};
use crate::gathering::Gathering;
use crate::ledger::{InLine, Ledger, LedgerError, Waiter};
use allot_enforce::{BackendKind, IoWeights};
use allot_plan::{Admission, Admitted, CellId, CellSpec};
use allot_proto::{DeviceDef, LedgerItem};
use allot_spec::ValidSpec;
use allot_topo::CpuSet;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// The cell standing for processes outside every cell that hold CPUs
/// exclusively through `require` (never a real cell's id: those count up
/// from 1).
pub(crate) const OUTSIDE: CellId = CellId(u64::MAX);

/// How long a CPU given back stays with its holder (see the module notes).
pub(crate) const LINGER: Duration = Duration::from_millis(50);

/// How many ancestors are looked at to find a process's cell.
const MAX_ANCESTORS: usize = 64;

/// Why an acquisition cannot go to the ledger as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denial {
    /// It waits for a grant or a holder to change.
    Wait(String),
    /// No change of grants could let it through as asked.
    Never(String),
}

/// The account: the ledger of `require` holdings, the sessions waiting
/// for it to change, and what the plan is told of it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Account {
    /// What each process holds of each resource kind.
    ledger: Ledger,
    /// Sessions waiting for the ledger to change: session → (pid, epoch
    /// seen). One each: a new watch replaces the session's old one.
    watchers: BTreeMap<SessionId, (u32, u64)>,
    /// Requests of dividing policies arriving together, from every
    /// process (`KindGather`).
    gathering: Gathering,
    /// Holder of each live process that acquired something: its cell, or
    /// `None` (the broker watches these processes, and forgets them when
    /// they exit).
    holders: HashMap<u32, Option<u64>>,
    /// CPUs each cell's processes hold exclusively.
    held: BTreeMap<u64, CpuSet>,
    /// CPUs processes outside every cell hold exclusively.
    outside: CpuSet,
    /// Each cell's spec as planned and admitted ([`CellSpec::holding`]),
    /// for the cells holding CPUs, and `OUTSIDE`'s.
    specs: BTreeMap<u64, CellSpec>,
    /// CPUs given back that stay with their last holder until
    /// [`LINGER`] after this instant.
    lingering: BTreeMap<usize, Instant>,
    /// The I/O weights applied to each cell.
    io: BTreeMap<u64, IoWeights>,
}

impl Account {
    /// An account over `ledger`, nothing held yet.
    pub(crate) fn new(ledger: Ledger) -> Account {
        Account {
            ledger,
            ..Account::default()
        }
    }

    /// The spec of the `OUTSIDE` cell for `cpus` held.
    pub(crate) fn outside_spec(cpus: usize) -> CellSpec {
        CellSpec::partition(cpus as u32)
    }

    /// Processes outside every cell that acquired something (they may
    /// hold nothing now).
    pub(crate) fn outside_holders(&self) -> impl Iterator<Item = u32> + '_ {
        self.holders
            .iter()
            .filter(|(_, h)| h.is_none())
            .map(|(pid, _)| *pid)
    }

    /// Process `pid` exited.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.holders.remove(&pid);
    }

    /// A cell gained members: processes that hold nothing may now run in
    /// it, so their holders are resolved again.
    pub(crate) fn members_changed(&mut self) {
        let ledger = &self.ledger;
        self.holders.retain(|pid, _| ledger.holds(*pid));
    }

    /// `pid` (of user `uid`) defines resource kind `name` over `devices`;
    /// whether it is a new definer (watched: its kinds end with it).
    pub(crate) fn define(
        &mut self,
        pid: u32,
        uid: u32,
        name: &str,
        devices: &[DeviceDef],
    ) -> Result<bool, LedgerError> {
        self.ledger.define(pid, uid, name, devices)
    }

    /// The ledger, to read (every change goes through the account).
    pub(crate) fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// CPUs each cell's processes hold exclusively (lingering ones too).
    pub(crate) fn held(&self) -> &BTreeMap<u64, CpuSet> {
        &self.held
    }

    /// CPUs processes outside every cell hold exclusively.
    pub(crate) fn outside(&self) -> CpuSet {
        self.outside
    }

    /// Whether CPUs given back still linger with their last holder.
    pub(crate) fn lingers(&self) -> bool {
        !self.lingering.is_empty()
    }

    /// `pid` takes `items`: at once, or (`wait`) in its place in line,
    /// holding what it has meanwhile when `holding`.
    pub(crate) fn acquire(
        &mut self,
        pid: u32,
        uid: u32,
        items: &[LedgerItem],
        wait: Option<Waiter>,
        holding: bool,
    ) -> Result<(), LedgerError> {
        match wait {
            Some(w) => self.ledger.acquire_at(pid, uid, items, w, holding),
            None => self.ledger.acquire(pid, uid, items),
        }
    }

    /// Keeps `pid`'s place `w` in line for `items` it was refused.
    pub(crate) fn keep_place(
        &mut self,
        pid: u32,
        w: Waiter,
        items: &[LedgerItem],
        holding: bool,
        any_device: bool,
    ) -> Result<InLine, LedgerError> {
        self.ledger.keep_place(pid, w, items, holding, any_device)
    }

    /// `pid` gives `items` back.
    pub(crate) fn release(&mut self, pid: u32, items: &[LedgerItem]) {
        self.ledger.release(pid, items);
    }

    /// Place `w` leaves the line; whether it was in it.
    pub(crate) fn leave_place(&mut self, w: Waiter) -> bool {
        self.ledger.leave_place(w)
    }

    /// Places whose clients stopped asking before `now` leave the line.
    pub(crate) fn expire_places(&mut self, now: Instant) {
        self.ledger.expire_places(now);
    }

    /// Process `pid` exited: what it held goes back; whether it held
    /// anything.
    pub(crate) fn process_ended(&mut self, pid: u32) -> bool {
        self.ledger.forget(pid)
    }

    /// A grant changed: processes waiting for one try again.
    pub(crate) fn grants_changed(&mut self) {
        self.ledger.touch();
    }

    /// `cpu` is the system minimum's: no `require` takes it.
    pub(crate) fn keep_cpu(&mut self, cpu: usize) {
        self.ledger.keep_cpu(cpu);
    }

    /// Session `session` of process `pid`, which saw the ledger at
    /// `epoch` and has `waiting` threads waiting, watches it. The answer
    /// now (the epoch and the waiters) when the ledger moved since in a
    /// way that may let `pid` through; `None`: it waits, replacing the
    /// session's earlier watch.
    pub(crate) fn watch(
        &mut self,
        session: SessionId,
        pid: u32,
        epoch: u64,
        waiting: u32,
    ) -> Option<(u64, u32)> {
        let ledger = &mut self.ledger;
        ledger.set_waiting(pid, waiting);
        if ledger.epoch() > epoch && ledger.to_wake().contains(&pid) {
            ledger.set_waiting(pid, 0);
            Some((ledger.epoch(), ledger.waiters()))
        } else {
            self.watchers.insert(session, (pid, epoch));
            None
        }
    }

    /// The watching sessions the ledger's change may let through, taken
    /// out of the watch, with the epoch and the waiters to tell them.
    pub(crate) fn wake_watchers(&mut self) -> (Vec<SessionId>, u64, u32) {
        let epoch = self.ledger.epoch();
        if self.watchers.is_empty() {
            return (Vec::new(), epoch, 0);
        }
        let wake = self.ledger.to_wake();
        let due: Vec<(SessionId, u32)> = self
            .watchers
            .iter()
            .filter(|(_, (pid, seen))| epoch > *seen && wake.contains(pid))
            .map(|(&s, &(pid, _))| (s, pid))
            .collect();
        for (session, pid) in &due {
            self.watchers.remove(session);
            self.ledger.set_waiting(*pid, 0);
        }
        let waiters = self.ledger.waiters();
        (due.into_iter().map(|(s, _)| s).collect(), epoch, waiters)
    }

    /// Session `session` closed: its watch, its places in line and its
    /// gathered arrivals go. Whether the line changed (who waited behind
    /// its places may go).
    pub(crate) fn leave_session(&mut self, session: SessionId) -> bool {
        if let Some((pid, _)) = self.watchers.remove(&session) {
            self.ledger.set_waiting(pid, 0);
        }
        self.gathering.leave_session(session);
        self.ledger.leave_session(session)
    }

    /// The gathering of requests arriving together (`KindGather`,
    /// `KindChosen`, a grant that is an arrival's choice made).
    pub(crate) fn gathering(&mut self) -> &mut Gathering {
        &mut self.gathering
    }

    /// When the next gathered batch is due.
    pub(crate) fn next_gathering_due(&self) -> Option<Instant> {
        self.gathering.next_due()
    }
}

impl Engine {
    /// The cell process `pid` runs in: it or its nearest ancestor is a
    /// member. `None` outside every cell.
    pub(crate) fn cell_of(&self, pid: u32) -> Option<u64> {
        let mut p = pid;
        for _ in 0..MAX_ANCESTORS {
            if let Some(c) = self.cells.cell_of(p) {
                return Some(c);
            }
            p = self.os.parent(p)?;
        }
        None
    }

    /// The holder of `pid`, resolved now if it holds nothing yet.
    pub(crate) fn holder_of(&mut self, pid: u32) -> Option<u64> {
        if let Some(&h) = self.account.holders.get(&pid) {
            // A cell that ended leaves its processes outside every cell.
            return h.filter(|c| self.cells.contains_key(c));
        }
        let h = self.cell_of(pid);
        self.account.holders.insert(pid, h);
        h
    }

    /// Checks the `cpu` items of an acquisition by `pid` against the plan,
    /// and its `io` items against what the backend can enforce (see the
    /// module notes).
    pub(crate) fn check_account(&mut self, pid: u32, items: &[LedgerItem]) -> Result<(), Denial> {
        // Every holding is its holder's (the plan's CPUs, a cell's I/O).
        let holder = self.holder_of(pid);
        self.check_io(holder, items)?;
        let cpus: Vec<(usize, bool)> = items
            .iter()
            .filter_map(|it| Some((self.account.ledger.cpu_of(it)?, it.shared)))
            .collect();
        if cpus.is_empty() {
            return Ok(());
        }
        let taken = self.account.ledger.exclusive_cpus();
        for &(cpu, shared) in &cpus {
            if !shared
                && let Some(other) = taken
                    .get(&cpu)
                    .and_then(|pids| pids.iter().find(|&&p| self.holder_of_held(p) != holder))
            {
                return Err(Denial::Wait(format!(
                    "CPU {cpu} is held exclusively by process {other} ({}); it waits until \
                     that is given back",
                    self.holder_name(self.holder_of_held(*other))
                )));
            }
            match holder {
                Some(id) => self.check_in_cell(id, cpu, shared)?,
                None if shared => {}
                None if self.plan.reserve.contains(cpu) => {
                    return Err(Denial::Never(format!(
                        "CPU {cpu} is in the reserve kept for processes that asked for \
                         nothing (the broker's `reserve`); hold another CPU"
                    )));
                }
                None => {}
            }
        }
        if holder.is_none() {
            let mut outside = self.account.outside;
            for &(cpu, shared) in &cpus {
                if !shared {
                    outside.insert(cpu);
                }
            }
            if outside != self.account.outside {
                self.admit_outside(&outside)?;
            }
        }
        Ok(())
    }

    /// `io` weights from a process of a cell on the cgroup v1 backend need
    /// BFQ on the device.
    fn check_io(&self, holder: Option<u64>, items: &[LedgerItem]) -> Result<(), Denial> {
        let io: Vec<&LedgerItem> = items
            .iter()
            .filter(|it| it.kind == "io" && it.amount > 0.0)
            .collect();
        if io.is_empty() || self.enforcer.kind() != BackendKind::Cgroup1 {
            return Ok(());
        }
        let Some(cell) = holder else {
            return Ok(());
        };
        for it in io {
            let Some(dev) = self.account.ledger.device_name(it) else {
                continue; // the ledger says what is wrong with it
            };
            let sched = allot_enforce::io_scheduler(&dev);
            if sched.as_deref().is_some_and(|s| s != "bfq") {
                return Err(Denial::Never(format!(
                    "an I/O weight for cell {cell} on device {dev}, whose scheduler is {} and \
                     ignores weights: switch it to BFQ (echo bfq > /sys/dev/block/{dev}/queue/\
                     scheduler) or ask without a weight",
                    sched.unwrap_or_default()
                )));
            }
        }
        Ok(())
    }

    /// Brings every cell's I/O weights to what its processes hold.
    pub(crate) fn refresh_io(&mut self) {
        let mut want: BTreeMap<u64, IoWeights> = BTreeMap::new();
        for (pid, dev, amount) in self.account.ledger.io_weights() {
            let Some(cell) = self.holder_of_held(pid) else {
                continue;
            };
            let w = want.entry(cell).or_default().entry(dev).or_insert(0);
            *w = (*w).max(amount.round().clamp(1.0, 1000.0) as u32);
        }
        let cells: Vec<u64> = want
            .keys()
            .chain(self.account.io.keys())
            .copied()
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .collect();
        for cell in cells {
            let now = want.remove(&cell).unwrap_or_default();
            if self.account.io.get(&cell).cloned().unwrap_or_default() == now {
                continue;
            }
            if !self.cells.contains_key(&cell) {
                self.account.io.remove(&cell);
                continue;
            }
            match self.enforcer.set_io_weights(cell, &now) {
                Ok(_) => {
                    if now.is_empty() {
                        self.account.io.remove(&cell);
                    } else {
                        self.account.io.insert(cell, now);
                    }
                }
                Err(e) => crate::warn!("cell {cell}: {e}"),
            }
        }
    }

    /// The holder recorded for a process that acquired something: its
    /// cell while that lives, else none.
    pub(crate) fn holder_of_held(&self, pid: u32) -> Option<u64> {
        self.account
            .holders
            .get(&pid)
            .copied()
            .flatten()
            .filter(|c| self.cells.contains_key(c))
    }

    fn holder_name(&self, holder: Option<u64>) -> String {
        match holder {
            Some(id) => format!("cell {id} {}", crate::names::shown(&self.cells[&id].name)),
            None => "outside every cell".into(),
        }
    }

    fn check_in_cell(&self, id: u64, cpu: usize, shared: bool) -> Result<(), Denial> {
        let c = &self.cells[&id];
        if c.spec.time.is_time() && !shared {
            return Err(Denial::Never(format!(
                "cell {id} {} shares its CPUs in time, so a require in it cannot hold CPU \
                 {cpu} exclusively; ask for it shared",
                crate::names::shown(&c.name)
            )));
        }
        let Some(g) = self.plan.cells.get(&CellId(id)) else {
            return Err(Denial::Wait(format!(
                "cell {id} holds no CPU now; CPU {cpu} waits for its grant"
            )));
        };
        if !g.cpus.contains(cpu) {
            return Err(Denial::Wait(format!(
                "CPU {cpu} is outside cell {id}'s grant ({}); it waits until the grant holds it",
                g.cpus
            )));
        }
        if !shared && !g.entitled.difference(&g.lent).contains(cpu) {
            let why = if g.stacked {
                "the cell shares a pool of CPUs with other cells".to_string()
            } else {
                format!("the cell is entitled to {} only", g.entitled)
            };
            return Err(Denial::Wait(format!(
                "CPU {cpu} is lent to cell {id}, not its own ({why}); an exclusive hold waits \
                 until the cell is entitled to it (give the cell a minimum to be sure)"
            )));
        }
        Ok(())
    }

    /// Admission for processes outside every cell holding `outside`
    /// exclusively: as the `OUTSIDE` cell beside every real cell.
    fn admit_outside(&self, outside: &CpuSet) -> Result<(), Denial> {
        let spec = Account::outside_spec(outside.len())
            .check()
            .map_err(|e| Denial::Never(format!("CPUs {outside} cannot be held: {e}")))?;
        let others = self.admitted_except(Some(OUTSIDE.0));
        match self
            .planner
            .admit(&others, &spec, &self.plan, &self.memory.room())
        {
            Admission::Admit => Ok(()),
            Admission::NotNow(r) => Err(Denial::Wait(format!(
                "holding CPUs {outside} outside every cell would leave too few for the cells' \
                 guarantees: {r}"
            ))),
            Admission::Never(r) => Err(Denial::Never(format!(
                "CPUs {outside} cannot be held outside every cell: {r}"
            ))),
        }
    }

    /// Every admitted cell at its planned spec, and `OUTSIDE` when it
    /// holds CPUs, but for `except`.
    pub(crate) fn admitted_except(&self, except: Option<u64>) -> Vec<Admitted<'_>> {
        let mut out: Vec<Admitted<'_>> = self
            .cells
            .iter()
            .filter(|(id, _)| Some(**id) != except)
            .map(|(id, c)| Admitted {
                id: CellId(*id),
                name: &c.name,
                spec: self.account.specs.get(id).unwrap_or(&c.spec),
            })
            .collect();
        if except != Some(OUTSIDE.0)
            && let Some(spec) = self.account.specs.get(&OUTSIDE.0)
        {
            out.push(Admitted {
                id: OUTSIDE,
                name: "require outside every cell",
                spec,
            });
        }
        out
    }

    /// After the ledger changed: re-plans when the held CPUs changed (if
    /// there is a cell to move), admits what now fits, and wakes the
    /// processes watching the ledger.
    pub(crate) fn after_ledger_change(&mut self) -> Vec<Effect> {
        let mut e = Vec::new();
        self.refresh_io();
        if self.refresh_account(Instant::now()) {
            if !self.cells.is_empty() {
                self.reconcile();
            }
            if !self.cells.queue.is_empty() {
                e.extend(self.admit_queued());
            }
        }
        e.extend(self.ledger_changed());
        e
    }

    /// Recomputes the held CPUs from the ledger, keeping CPUs given back
    /// less than [`LINGER`] before `now` with their last holder. Returns
    /// whether they changed (the caller re-plans).
    pub(crate) fn refresh_account(&mut self, now: Instant) -> bool {
        let taken = self.account.ledger.exclusive_cpus();
        let mut held: BTreeMap<u64, CpuSet> = BTreeMap::new();
        let mut outside = CpuSet::new();
        for (&cpu, pids) in &taken {
            // One holder per CPU (checked at acquisition); a cell that
            // ended leaves its processes' CPUs outside every cell.
            match pids.iter().find_map(|&p| self.holder_of_held(p)) {
                Some(id) => {
                    held.entry(id).or_default().insert(cpu);
                }
                None => {
                    outside.insert(cpu);
                }
            }
        }
        // What was given back lingers with its holder for a while.
        let before = self
            .account
            .held
            .iter()
            .flat_map(|(&id, set)| set.iter().map(move |cpu| (cpu, Some(id))))
            .chain(self.account.outside.iter().map(|cpu| (cpu, None)));
        let mut lingering = BTreeMap::new();
        for (cpu, holder) in before {
            if taken.contains_key(&cpu) || holder.is_some_and(|id| !self.cells.contains_key(&id)) {
                continue;
            }
            let since = self.account.lingering.get(&cpu).copied().unwrap_or(now);
            if now.saturating_duration_since(since) < LINGER {
                lingering.insert(cpu, since);
                match holder {
                    Some(id) => {
                        held.entry(id).or_default().insert(cpu);
                    }
                    None => {
                        outside.insert(cpu);
                    }
                }
            }
        }
        self.account.lingering = lingering;
        if held == self.account.held && outside == self.account.outside {
            return false;
        }
        self.account.held = held;
        self.account.outside = outside;
        self.refresh_specs();
        true
    }

    /// Rebuilds the planned specs ([`Account::specs`]) from the held CPUs
    /// and the cells' specs: after the holdings change, and after a cell
    /// holding CPUs changes its spec.
    pub(crate) fn refresh_specs(&mut self) {
        let mut specs: BTreeMap<u64, CellSpec> = self
            .account
            .held
            .iter()
            .filter_map(|(id, set)| {
                let c = self.cells.get(id)?;
                Some((*id, c.spec.holding(set.len() as u32)))
            })
            .collect();
        if !self.account.outside.is_empty() {
            specs.insert(OUTSIDE.0, Account::outside_spec(self.account.outside.len()));
        }
        self.account.specs = specs;
    }

    /// Cell `id`'s spec `spec` as planned and admitted while its processes
    /// hold what they hold now.
    pub(crate) fn planned_spec(&self, id: u64, spec: ValidSpec) -> ValidSpec {
        spec.holding(self.account.held.get(&id).map_or(0, |h| h.len() as u32))
    }
}

impl From<Denial> for LedgerError {
    fn from(d: Denial) -> LedgerError {
        match d {
            Denial::Wait(m) => LedgerError::Refused(m),
            Denial::Never(m) => LedgerError::Never(m),
        }
    }
}
