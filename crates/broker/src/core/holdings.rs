//! The engine's side of the account (`account`): which cell holds a
//! process's `require` holdings, whether a holding fits the cells' grants
//! and admission, and what the plan is told after the ledger changed.
//! The rules are the account's (its module notes); this file applies them
//! to the engine's cells, reading the ledger only through [`Account`].

use super::Engine;
use super::account::{Account, Denial, LINGER, MAX_ANCESTORS, OUTSIDE};
use super::effect::Effect;
use allot_enforce::{BackendKind, IoWeights};
use allot_plan::{Admission, Admitted};
use allot_proto::LedgerItem;
use allot_spec::{CellId, CellSpec, ValidSpec};
use allot_topo::CpuSet;
use std::collections::BTreeMap;
use std::time::Instant;

impl Engine {
    /// The cell process `pid` runs in: it or its nearest ancestor is a
    /// member. `None` outside every cell. Each ancestor costs a read of
    /// `/proc`, so with no member anywhere none is read.
    pub(crate) fn cell_of(&self, pid: u32) -> Option<u64> {
        if !self.cells.has_members() {
            return None;
        }
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
        if let Some(h) = self.account.recorded_holder(pid) {
            // A cell that ended leaves its processes outside every cell.
            return h.filter(|c| self.cells.contains_key(c));
        }
        let h = self.cell_of(pid);
        self.account.record_holder(pid, h);
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
            .filter_map(|it| Some((self.account.ledger().cpu_of(it)?, it.shared)))
            .collect();
        if cpus.is_empty() {
            return Ok(());
        }
        let taken = self.account.ledger().exclusive_cpus();
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
            let mut outside = self.account.outside();
            for &(cpu, shared) in &cpus {
                if !shared {
                    outside.insert(cpu);
                }
            }
            if outside != self.account.outside() {
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
        if io.is_empty() || self.kernel.kind() != BackendKind::Cgroup1 {
            return Ok(());
        }
        let Some(cell) = holder else {
            return Ok(());
        };
        for it in io {
            let Some(dev) = self.account.ledger().device_name(it) else {
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
        for (pid, dev, amount) in self.account.ledger().io_weights() {
            let Some(cell) = self.holder_of_held(pid) else {
                continue;
            };
            let w = want.entry(cell).or_default().entry(dev).or_insert(0);
            *w = (*w).max(amount.round().clamp(1.0, 1000.0) as u32);
        }
        let cells: Vec<u64> = want
            .keys()
            .copied()
            .chain(self.account.io_cells())
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .collect();
        for cell in cells {
            let now = want.remove(&cell).unwrap_or_default();
            if self.account.applied_io(cell) == now {
                continue;
            }
            if !self.cells.contains_key(&cell) {
                self.account.set_applied_io(cell, IoWeights::default());
                continue;
            }
            match self.kernel.set_io_weights(cell, &now) {
                Ok(_) => self.account.set_applied_io(cell, now),
                Err(e) => crate::log::warn!("cell {cell}: {e}"),
            }
        }
    }

    /// The holder recorded for a process that acquired something: its
    /// cell while that lives, else none.
    pub(crate) fn holder_of_held(&self, pid: u32) -> Option<u64> {
        self.account
            .recorded_holder(pid)
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
                spec: self.account.planned_spec_of(*id).unwrap_or(&c.spec),
            })
            .collect();
        if except != Some(OUTSIDE.0)
            && let Some(spec) = self.account.planned_spec_of(OUTSIDE.0)
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
        let taken = self.account.ledger().exclusive_cpus();
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
        let outside_before = self.account.outside();
        let before = self
            .account
            .held()
            .iter()
            .flat_map(|(&id, set)| set.iter().map(move |cpu| (cpu, Some(id))))
            .chain(outside_before.iter().map(|cpu| (cpu, None)));
        let mut lingering = BTreeMap::new();
        for (cpu, holder) in before {
            if taken.contains_key(&cpu) || holder.is_some_and(|id| !self.cells.contains_key(&id)) {
                continue;
            }
            let since = self.account.lingering_since(cpu).unwrap_or(now);
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
        if !self.account.settle_holdings(held, outside, lingering) {
            return false;
        }
        self.refresh_specs();
        true
    }

    /// Rebuilds the planned specs ([`Account::specs`]) from the held CPUs
    /// and the cells' specs: after the holdings change, and after a cell
    /// holding CPUs changes its spec.
    pub(crate) fn refresh_specs(&mut self) {
        let mut specs: BTreeMap<u64, CellSpec> = self
            .account
            .held()
            .iter()
            .filter_map(|(id, set)| {
                let c = self.cells.get(id)?;
                Some((*id, c.spec.holding(set.len() as u32)))
            })
            .collect();
        let outside = self.account.outside();
        if !outside.is_empty() {
            specs.insert(OUTSIDE.0, Account::outside_spec(outside.len()));
        }
        self.account.set_planned_specs(specs);
    }

    /// Cell `id`'s spec `spec` as planned and admitted while its processes
    /// hold what they hold now.
    pub(crate) fn planned_spec(&self, id: u64, spec: ValidSpec) -> ValidSpec {
        spec.holding(self.account.held().get(&id).map_or(0, |h| h.len() as u32))
    }
}
