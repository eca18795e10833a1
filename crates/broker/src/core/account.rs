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

use crate::gathering::Gathering;
use crate::ledger::{InLine, Ledger, LedgerError, Waiter};
use crate::peer::SessionId;
use allot_enforce::IoWeights;
use allot_proto::{DeviceDef, DuePlace, LedgerItem};
use allot_spec::{CellId, CellSpec};
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
pub(super) const MAX_ANCESTORS: usize = 64;

/// What a watch is answered (`Changed`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Woken {
    /// The ledger's epoch.
    pub epoch: u64,
    /// Threads waiting across all processes.
    pub waiters: u32,
    /// The process's places in line that could take something now, with
    /// what is free to each.
    pub due: Vec<DuePlace>,
}

impl From<Woken> for allot_proto::msg::Reply {
    fn from(w: Woken) -> Self {
        allot_proto::msg::Reply::Changed {
            epoch: w.epoch,
            waiters: w.waiters,
            due: w.due,
        }
    }
}

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
    /// now when the ledger moved since in a way that may let `pid`
    /// through; `None`: it waits, replacing the session's earlier watch.
    pub(crate) fn watch(
        &mut self,
        session: SessionId,
        pid: u32,
        epoch: u64,
        waiting: u32,
    ) -> Option<Woken> {
        let ledger = &mut self.ledger;
        ledger.set_waiting(pid, waiting);
        let due = if ledger.epoch() > epoch {
            ledger.to_wake().remove(&pid)
        } else {
            None
        };
        match due {
            Some(due) => {
                ledger.set_waiting(pid, 0);
                Some(Woken {
                    epoch: ledger.epoch(),
                    waiters: ledger.waiters(),
                    due,
                })
            }
            None => {
                self.watchers.insert(session, (pid, epoch));
                None
            }
        }
    }

    /// The watching sessions the ledger's change may let through, taken
    /// out of the watch, each with what to tell it.
    pub(crate) fn wake_watchers(&mut self) -> Vec<(SessionId, Woken)> {
        let epoch = self.ledger.epoch();
        if self.watchers.is_empty() {
            return Vec::new();
        }
        let mut wake = self.ledger.to_wake();
        let due: Vec<(SessionId, u32)> = self
            .watchers
            .iter()
            .filter(|(_, (pid, seen))| epoch > *seen && wake.contains_key(pid))
            .map(|(&s, &(pid, _))| (s, pid))
            .collect();
        for (session, pid) in &due {
            self.watchers.remove(session);
            self.ledger.set_waiting(*pid, 0);
        }
        let waiters = self.ledger.waiters();
        due.into_iter()
            .map(|(session, pid)| {
                let places = wake.get_mut(&pid).map(std::mem::take).unwrap_or_default();
                (
                    session,
                    Woken {
                        epoch,
                        waiters,
                        due: places,
                    },
                )
            })
            .collect()
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

    /// The holder recorded for `pid`: `None` if none was resolved yet,
    /// `Some(None)` for a process outside every cell.
    pub(crate) fn recorded_holder(&self, pid: u32) -> Option<Option<u64>> {
        self.holders.get(&pid).copied()
    }

    /// Records `pid`'s holder (kept while the process lives).
    pub(crate) fn record_holder(&mut self, pid: u32, holder: Option<u64>) {
        self.holders.insert(pid, holder);
    }

    /// The spec cell `id` is planned and admitted at while its processes
    /// hold CPUs (and `OUTSIDE`'s), if it holds any.
    pub(crate) fn planned_spec_of(&self, id: u64) -> Option<&CellSpec> {
        self.specs.get(&id)
    }

    /// Replaces the planned specs (rebuilt from the held CPUs).
    pub(crate) fn set_planned_specs(&mut self, specs: BTreeMap<u64, CellSpec>) {
        self.specs = specs;
    }

    /// Since when `cpu`, given back, lingers with its last holder.
    pub(crate) fn lingering_since(&self, cpu: usize) -> Option<Instant> {
        self.lingering.get(&cpu).copied()
    }

    /// Takes the held CPUs recomputed from the ledger (with what lingers,
    /// and since when); returns whether the held or the outside CPUs
    /// changed.
    pub(crate) fn settle_holdings(
        &mut self,
        held: BTreeMap<u64, CpuSet>,
        outside: CpuSet,
        lingering: BTreeMap<usize, Instant>,
    ) -> bool {
        self.lingering = lingering;
        if held == self.held && outside == self.outside {
            return false;
        }
        self.held = held;
        self.outside = outside;
        true
    }

    /// The I/O weights applied to cell `cell` (empty: the default).
    pub(crate) fn applied_io(&self, cell: u64) -> IoWeights {
        self.io.get(&cell).cloned().unwrap_or_default()
    }

    /// The cells with I/O weights applied.
    pub(crate) fn io_cells(&self) -> impl Iterator<Item = u64> + '_ {
        self.io.keys().copied()
    }

    /// Records what was applied to cell `cell` (empty: back to the
    /// default, or the cell is gone).
    pub(crate) fn set_applied_io(&mut self, cell: u64, weights: IoWeights) {
        if weights.is_empty() {
            self.io.remove(&cell);
        } else {
            self.io.insert(cell, weights);
        }
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
