//! The resource ledger: what every process holds of every device of every
//! resource kind, for `require` across processes (Poli-C's policd §6.3).
//!
//! Each process's `require` runtime keeps its own allocation trees; their
//! roots are fed from here. A process asks for what its root lacks
//! (`KindAcquire`, all or nothing) and gives back what its root no longer
//! uses (`KindRelease`). When a process dies, the broker gives back
//! everything it held (within the reclaim bound: the broker watches it with
//! a pidfd from its first acquisition).
//!
//! Per device: `max` (the largest allocation), `min` (left to processes that
//! asked for nothing, never handed out), exclusive holdings (summed) and
//! shared holdings (coexisting; the largest bounds what exclusive holders
//! may take). Availability for an exclusive request is
//! `max − min − Σ exclusive − max(shared)`; for a shared one
//! `max − min − Σ exclusive`.
//!
//! Requests that wait are served in the order they asked, across
//! processes: the line ([`line`], and `waiting` for what its places
//! reserve and whom a change wakes).
//!
//! Built-in kinds mirror the client's (`cpu`: one device per usable CPU, named
//! by CPU number, max 1; `memory`: one per NUMA node, named `nodeN`, max its
//! bytes; `io`: one per disk and attached loop device, named `MAJ:MIN`, max
//! 1000). Any process may define
//! *virtual* kinds (counters); a definition that conflicts with an existing
//! one is refused.
//!
//! # Bounds
//!
//! A virtual kind counts against the quota of the user who defined it
//! first ([`Limits::kinds`], [`Limits::devices`], [`Limits::kinds_total`])
//! and lives while a process that defined it lives or anyone holds part of
//! it; then it is dropped. A process holds at most [`Limits::holdings`]
//! items. Root is exempt from the per-user quotas, not from the totals.
//!
//! # Errors
//!
//! [`LedgerError`] separates a request that can never succeed as sent
//! (unknown kind or device, negative amount: `Invalid`) from one that must
//! wait for others to give something back (`Refused`) and one past a limit
//! (`Limit`).

mod line;
mod waiting;

pub use line::Waiter;
pub use waiting::InLine;

use crate::config::Limits;
use crate::names;
use allot_proto::{DeviceDef, DuePlace, LedgerItem};
use allot_topo::Machine;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Why the ledger did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerError {
    /// The request is wrong as sent (unknown kind or device, bad amount,
    /// bad name, conflicting definition).
    Invalid(String),
    /// Not available now; others must give something back first.
    Refused(String),
    /// No change of holdings or grants could let it through as asked.
    Never(String),
    /// A configured limit was reached.
    Limit(String),
}

impl LedgerError {
    pub fn message(&self) -> &str {
        match self {
            LedgerError::Invalid(m)
            | LedgerError::Refused(m)
            | LedgerError::Never(m)
            | LedgerError::Limit(m) => m,
        }
    }
}

const EPS: f64 = 1e-9;

#[derive(Debug, Clone)]
struct Dev {
    name: String,
    min: f64,
    max: f64,
    exclusive: f64,
    shared: Vec<f64>,
}

impl Dev {
    fn shared_peak(&self) -> f64 {
        self.shared.iter().copied().fold(0.0, f64::max)
    }
    fn avail_exclusive(&self) -> f64 {
        (self.max - self.min - self.exclusive - self.shared_peak()).max(0.0)
    }
    fn avail_shared(&self) -> f64 {
        (self.max - self.min - self.exclusive).max(0.0)
    }
}

#[derive(Debug, Clone)]
struct Kind {
    devices: Vec<Dev>,
    /// `None` for built-in kinds; the defining user for virtual ones.
    owner: Option<u32>,
    /// Live processes that defined it (virtual kinds).
    definers: BTreeSet<u32>,
}

impl Kind {
    fn in_use(&self) -> bool {
        self.devices
            .iter()
            .any(|d| d.exclusive > EPS || !d.shared.is_empty())
    }
}

/// What one process holds.
#[derive(Debug, Clone, Default)]
struct Holder {
    uid: u32,
    items: Vec<LedgerItem>,
}

/// The kinds, what each process holds of them, and which processes wait
/// (see the module notes).
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    kinds: BTreeMap<String, Kind>,
    holdings: HashMap<u32, Holder>,
    /// Every process the ledger has involved (defined a kind or held
    /// something) and its user, until it is gone ([`Ledger::forget`]): the
    /// broker watches each with a descriptor, so a user may have at most
    /// [`Limits::processes`] of them.
    watched: HashMap<u32, u32>,
    epoch: u64,
    waiting: HashMap<u32, u32>,
    /// Requests waiting in line for devices, across processes.
    line: line::Line,
    limits: Limits,
}

impl Ledger {
    /// The built-in kinds of `machine`, with `limits` on what users add.
    pub fn new(machine: &Machine, limits: Limits) -> Ledger {
        let mut l = Ledger {
            limits,
            ..Ledger::default()
        };
        let dev = |name: String, max: f64| Dev {
            name,
            min: 0.0,
            max,
            exclusive: 0.0,
            shared: Vec::new(),
        };
        l.kinds.insert(
            "cpu".into(),
            Kind {
                devices: machine
                    .usable()
                    .iter()
                    .map(|c| dev(c.to_string(), 1.0))
                    .collect(),
                owner: None,
                definers: BTreeSet::new(),
            },
        );
        l.kinds.insert(
            "memory".into(),
            Kind {
                devices: machine
                    .nodes()
                    .iter()
                    .map(|n| dev(format!("node{}", n.id), (n.mem_total_kib * 1024) as f64))
                    .collect(),
                owner: None,
                definers: BTreeSet::new(),
            },
        );
        let mut io = Vec::new();
        if let Ok(rd) = std::fs::read_dir("/sys/block") {
            let mut names: Vec<String> = rd
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            names.sort();
            // Disks, and loop devices with a file attached (as the client
            // lists them).
            let attached = |n: &str| {
                std::path::Path::new(&format!("/sys/block/{n}/loop/backing_file")).exists()
            };
            for n in names
                .into_iter()
                .filter(|n| !n.starts_with("ram") && (!n.starts_with("loop") || attached(n)))
            {
                if let Ok(d) = std::fs::read_to_string(format!("/sys/block/{n}/dev")) {
                    io.push(dev(d.trim().to_string(), 1000.0));
                }
            }
        }
        l.kinds.insert(
            "io".into(),
            Kind {
                devices: io,
                owner: None,
                definers: BTreeSet::new(),
            },
        );
        l
    }

    /// Sets the amount of every device of `kind` left to processes that
    /// asked for nothing (configuration).
    pub fn set_min(&mut self, kind: &str, min: f64) {
        if let Some(k) = self.kinds.get_mut(kind) {
            for d in &mut k.devices {
                d.min = min.clamp(0.0, d.max);
            }
        }
    }

    /// Leaves all of CPU `cpu` to processes that asked for nothing (the
    /// system minimum on the reserve): no `require` takes any of it.
    pub fn keep_cpu(&mut self, cpu: usize) {
        let name = cpu.to_string();
        if let Some(d) = self
            .kinds
            .get_mut("cpu")
            .and_then(|k| k.devices.iter_mut().find(|d| d.name == name))
        {
            d.min = d.max;
        }
    }

    /// The name of the device an item names (`None` if it names none).
    pub fn device_name(&self, item: &LedgerItem) -> Option<String> {
        self.dev(item).ok().map(|d| d.name.clone())
    }

    /// The CPU a `cpu` item names (its device is named by CPU number).
    pub fn cpu_of(&self, item: &LedgerItem) -> Option<usize> {
        if item.kind != "cpu" {
            return None;
        }
        self.dev(item).ok()?.name.parse().ok()
    }

    /// Every CPU some process holds part of exclusively, with the
    /// processes holding it.
    pub fn exclusive_cpus(&self) -> BTreeMap<usize, BTreeSet<u32>> {
        let mut out: BTreeMap<usize, BTreeSet<u32>> = BTreeMap::new();
        for (&pid, h) in &self.holdings {
            for it in h.items.iter().filter(|it| !it.shared) {
                if let Some(cpu) = self.cpu_of(it) {
                    out.entry(cpu).or_default().insert(pid);
                }
            }
        }
        out
    }

    /// The user of holder `pid` (as it acquired), if it holds anything.
    pub fn uid_of(&self, pid: u32) -> Option<u32> {
        self.holdings.get(&pid).map(|h| h.uid)
    }

    /// Every `io` weight held, exclusively or shared: (process, device
    /// name `MAJ:MIN`, weight).
    pub fn io_weights(&self) -> Vec<(u32, String, f64)> {
        let mut out = Vec::new();
        for (&pid, h) in &self.holdings {
            for it in h.items.iter().filter(|it| it.kind == "io") {
                if let Ok(d) = self.dev(it) {
                    out.push((pid, d.name.clone(), it.amount));
                }
            }
        }
        out
    }

    /// Moves the epoch on without a release: what processes may take
    /// changed some other way (a cell's grant), so waiting ones try again.
    pub fn touch(&mut self) {
        self.epoch += 1;
    }

    /// The ledger's epoch (bumped whenever something is given back).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Threads waiting across processes.
    pub fn waiters(&self) -> u32 {
        self.waiting.values().sum()
    }

    /// Records how many threads of `pid` wait.
    pub fn set_waiting(&mut self, pid: u32, n: u32) {
        if n == 0 {
            self.waiting.remove(&pid);
        } else {
            self.waiting.insert(pid, n);
        }
    }

    /// Defines a virtual kind for process `pid` of user `uid` (idempotent
    /// for an identical definition, which makes `pid` another definer).
    /// Returns whether `pid` became a definer it was not before (the
    /// broker then watches it).
    pub fn define(
        &mut self,
        pid: u32,
        uid: u32,
        name: &str,
        devices: &[DeviceDef],
    ) -> Result<bool, LedgerError> {
        let invalid = LedgerError::Invalid;
        if name.is_empty() || devices.is_empty() {
            return Err(invalid(
                "a kind needs a name and at least one device".into(),
            ));
        }
        names::check("kind name", name, names::MAX_KIND_NAME).map_err(invalid)?;
        for d in devices {
            names::check("device name", &d.name, names::MAX_KIND_NAME).map_err(invalid)?;
        }
        if devices
            .iter()
            .any(|d| d.max.is_nan() || d.max <= 0.0 || d.min < 0.0 || d.min > d.max)
        {
            return Err(invalid(format!(
                "kind {}: every device needs 0 ≤ min ≤ max and max > 0",
                names::shown(name)
            )));
        }
        let limits = self.limits;
        self.may_watch(pid, uid)?;
        if devices.len() > limits.devices as usize {
            return Err(LedgerError::Limit(format!(
                "kind {} has {} devices; the limit is {} (limits.devices)",
                names::shown(name),
                devices.len(),
                limits.devices
            )));
        }
        match self.kinds.get_mut(name) {
            Some(k) if k.owner.is_none() => Err(invalid(format!(
                "{} is a built-in kind",
                names::shown(name)
            ))),
            Some(k) => {
                let same = k.devices.len() == devices.len()
                    && k.devices
                        .iter()
                        .zip(devices)
                        .all(|(a, b)| a.name == b.name && a.max == b.max && a.min == b.min);
                if same {
                    let new = k.definers.insert(pid);
                    self.watched.insert(pid, uid);
                    Ok(new)
                } else {
                    Err(invalid(format!(
                        "kind {} already exists with other devices",
                        names::shown(name)
                    )))
                }
            }
            None => {
                let virtuals = self.kinds.values().filter(|k| k.owner.is_some());
                let (mine, all) = virtuals.fold((0u32, 0u32), |(m, a), k| {
                    (m + u32::from(k.owner == Some(uid)), a + 1)
                });
                if uid != 0 && mine >= limits.kinds {
                    return Err(LedgerError::Limit(format!(
                        "uid {uid} has defined {mine} kinds; the limit is {} (limits.kinds)",
                        limits.kinds
                    )));
                }
                if all >= limits.kinds_total {
                    return Err(LedgerError::Limit(format!(
                        "{all} kinds are defined; the limit is {} (limits.kinds_total)",
                        limits.kinds_total
                    )));
                }
                let devs = devices
                    .iter()
                    .map(|d| Dev {
                        name: d.name.clone(),
                        min: d.min,
                        max: d.max,
                        exclusive: 0.0,
                        shared: Vec::new(),
                    })
                    .collect();
                self.kinds.insert(
                    name.to_string(),
                    Kind {
                        devices: devs,
                        owner: Some(uid),
                        definers: BTreeSet::from([pid]),
                    },
                );
                self.watched.insert(pid, uid);
                Ok(true)
            }
        }
    }

    fn dev(&self, item: &LedgerItem) -> Result<&Dev, String> {
        let k = self
            .kinds
            .get(&item.kind)
            .ok_or_else(|| format!("unknown resource kind {:?}", item.kind))?;
        k.devices.get(item.dev as usize).ok_or_else(|| {
            format!(
                "kind {:?} has no device {} (it has {})",
                item.kind,
                item.dev,
                k.devices.len()
            )
        })
    }

    fn dev_mut(&mut self, item: &LedgerItem) -> Result<&mut Dev, String> {
        let k = self
            .kinds
            .get_mut(&item.kind)
            .ok_or_else(|| format!("unknown resource kind {:?}", item.kind))?;
        let n = k.devices.len();
        k.devices.get_mut(item.dev as usize).ok_or_else(|| {
            format!(
                "kind {:?} has no device {} (it has {n})",
                item.kind, item.dev
            )
        })
    }

    /// Whether process `pid` of user `uid` may become one more process the
    /// broker watches for the ledger (root is exempt).
    fn may_watch(&self, pid: u32, uid: u32) -> Result<(), LedgerError> {
        if uid == 0 || self.watched.contains_key(&pid) {
            return Ok(());
        }
        let mine = self.watched.values().filter(|&&u| u == uid).count();
        if mine >= self.limits.processes as usize {
            return Err(LedgerError::Limit(format!(
                "uid {uid} has {mine} processes that defined kinds or hold items, each watched \
                 by the broker; the limit is {} (limits.processes)",
                self.limits.processes
            )));
        }
        Ok(())
    }

    /// Takes every item for process `pid` of user `uid`, or nothing (with
    /// the reason), as a try: a refusal holds no place in line, and places
    /// of other processes reserve their devices against it.
    pub fn acquire(&mut self, pid: u32, uid: u32, items: &[LedgerItem]) -> Result<(), LedgerError> {
        self.take(pid, uid, items, None, false)
    }

    /// Takes every item for process `pid` of user `uid` for the waiting
    /// request `wait`, or nothing: only places ahead of it reserve their
    /// devices against it (none that wait on `pid` when the asking thread
    /// is `holding` items already), and granted, it leaves the line.
    /// Refused (`Refused`), the caller keeps its place with
    /// [`Ledger::keep_place`].
    pub fn acquire_at(
        &mut self,
        pid: u32,
        uid: u32,
        items: &[LedgerItem],
        wait: Waiter,
        holding: bool,
    ) -> Result<(), LedgerError> {
        self.take(pid, uid, items, Some(wait), holding)
    }

    /// [`Ledger::acquire`] and [`Ledger::acquire_at`]: checks first,
    /// accumulating items on the same device, then applies.
    fn take(
        &mut self,
        pid: u32,
        uid: u32,
        items: &[LedgerItem],
        wait: Option<Waiter>,
        holding: bool,
    ) -> Result<(), LedgerError> {
        self.may_watch(pid, uid)?;
        let held = self.holdings.get(&pid).map_or(0, |h| h.items.len());
        if held + items.len() > self.limits.holdings as usize {
            return Err(LedgerError::Limit(format!(
                "process {pid} would hold {} ledger items; the limit is {} (limits.holdings)",
                held + items.len(),
                self.limits.holdings
            )));
        }
        let reserved = self.reserved(pid, wait, holding);
        // (kind, dev) -> (exclusive added, largest shared added)
        let mut adding: Vec<((&str, u32), f64, f64)> = Vec::new();
        for it in items {
            if it.amount.is_nan() || it.amount <= 0.0 {
                return Err(LedgerError::Invalid(format!(
                    "amount {} of {} device {} is not positive",
                    it.amount,
                    names::shown(&it.kind),
                    it.dev
                )));
            }
            let d = self.dev(it).map_err(LedgerError::Invalid)?;
            if let Some(ahead) = reserved.get(&(it.kind.as_str(), it.dev)) {
                return Err(LedgerError::Refused(format!(
                    "{} device {} ({}): {ahead} request(s) of other processes wait for it first",
                    it.kind, it.dev, d.name
                )));
            }
            let key = (it.kind.as_str(), it.dev);
            let i = match adding.iter().position(|a| a.0 == key) {
                Some(i) => i,
                None => {
                    adding.push((key, 0.0, 0.0));
                    adding.len() - 1
                }
            };
            let (_, excl, shared) = &mut adding[i];
            if it.shared {
                *shared = f64::max(*shared, it.amount);
            } else {
                *excl += it.amount;
            }
            let peak = d.shared_peak().max(*shared);
            let avail_excl = d.max - d.min - d.exclusive - *excl - peak;
            let avail_shared = d.max - d.min - d.exclusive - *excl;
            if avail_excl < -EPS || (it.shared && avail_shared + EPS < it.amount) {
                return Err(LedgerError::Refused(format!(
                    "{} device {} ({}): {} asked, {} available",
                    it.kind,
                    it.dev,
                    d.name,
                    it.amount,
                    if it.shared {
                        d.avail_shared()
                    } else {
                        d.avail_exclusive()
                    }
                )));
            }
        }
        for it in items {
            let d = self.dev_mut(it).expect("checked above");
            if it.shared {
                d.shared.push(it.amount);
            } else {
                d.exclusive += it.amount;
            }
        }
        let h = self.holdings.entry(pid).or_default();
        h.uid = uid;
        h.items.extend(items.iter().cloned());
        self.watched.insert(pid, uid);
        if let Some(w) = wait {
            // Met: it leaves the line, and who waited behind it may go.
            if self.line.leave(w.session, w.place) {
                self.epoch += 1;
            }
        }
        Ok(())
    }

    /// Gives back items `pid` holds (items it does not hold are ignored).
    pub fn release(&mut self, pid: u32, items: &[LedgerItem]) {
        let mut changed = false;
        for it in items {
            let Some(held) = self.holdings.get_mut(&pid).map(|h| &mut h.items) else {
                break;
            };
            let Some(pos) = held.iter().position(|h| {
                h.kind == it.kind
                    && h.dev == it.dev
                    && h.shared == it.shared
                    && (h.amount - it.amount).abs() < EPS
            }) else {
                continue;
            };
            let h = held.swap_remove(pos);
            if let Ok(d) = self.dev_mut(&h) {
                if h.shared {
                    if let Some(i) = d.shared.iter().position(|&a| (a - h.amount).abs() < EPS) {
                        d.shared.swap_remove(i);
                    }
                } else {
                    d.exclusive = (d.exclusive - h.amount).max(0.0);
                }
                changed = true;
            }
        }
        if self.holdings.get(&pid).is_some_and(|h| h.items.is_empty()) {
            self.holdings.remove(&pid);
        }
        if changed {
            self.epoch += 1;
            self.drop_unused_kinds();
        }
    }

    /// Process `pid` is gone: gives back everything it held and forgets it
    /// as a definer (kinds nobody defines or holds any more are dropped).
    /// Returns whether it held anything.
    pub fn forget(&mut self, pid: u32) -> bool {
        self.waiting.remove(&pid);
        if self.line.leave_process(pid) {
            self.epoch += 1;
        }
        self.watched.remove(&pid);
        let mut defined = false;
        for k in self.kinds.values_mut() {
            defined |= k.definers.remove(&pid);
        }
        let held = match self.holdings.get(&pid).map(|h| h.items.clone()) {
            Some(items) => {
                self.release(pid, &items);
                true
            }
            None => false,
        };
        if defined {
            self.drop_unused_kinds();
        }
        held
    }

    fn drop_unused_kinds(&mut self) {
        self.kinds
            .retain(|_, k| k.owner.is_none() || !k.definers.is_empty() || k.in_use());
    }

    /// Whether the broker must keep watching `pid` for the ledger: it holds
    /// something or defined a kind.
    pub fn involves(&self, pid: u32) -> bool {
        self.holdings.contains_key(&pid) || self.kinds.values().any(|k| k.definers.contains(&pid))
    }

    /// Whether `pid` holds anything.
    pub fn holds(&self, pid: u32) -> bool {
        self.holdings.contains_key(&pid)
    }

    /// Virtual kinds defined, for the status.
    pub fn virtual_kinds(&self) -> usize {
        self.kinds.values().filter(|k| k.owner.is_some()).count()
    }

    /// The ledger as JSON: kinds (`kind` alone, or every kind when it is
    /// empty), devices with availability, holders, requests in line. With `viewer` set, only
    /// that user's holders are listed (the others are counted).
    pub fn json(&self, viewer: Option<u32>, kind: &str) -> String {
        let kinds: Vec<_> = self
            .kinds
            .iter()
            .filter(|(name, _)| kind.is_empty() || name.as_str() == kind)
            .map(|(name, k)| {
                json!({
                    "name": name,
                    "virtual": k.owner.is_some(),
                    "devices": k.devices.iter().map(|d| json!({
                        "name": d.name, "min": d.min, "max": d.max,
                        "available": d.avail_exclusive(), "shared_available": d.avail_shared(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let (shown, hidden): (Vec<_>, Vec<_>) = self
            .holdings
            .iter()
            .partition(|(_, h)| viewer.is_none_or(|v| v == h.uid));
        let holders: Vec<_> = shown
            .iter()
            .map(|(pid, h)| json!({ "pid": pid, "uid": h.uid, "items": h.items.len() }))
            .collect();
        json!({ "epoch": self.epoch, "waiters": self.waiters(), "in_line": self.line.len(),
                "kinds": kinds,
                "holders": holders, "other_holders": hidden.len() })
        .to_string()
    }
}

#[cfg(test)]
mod tests;
