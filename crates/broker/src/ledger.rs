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
//! Built-in kinds mirror the client's (`cpu`: one device per usable CPU, named
//! by CPU number, max 1; `memory`: one per NUMA node, named `nodeN`, max its
//! bytes; `io`: one per block device, max 1000). Any process may define
//! *virtual* kinds (counters); a definition that conflicts with an existing
//! one is refused.

use allot_proto::{DeviceDef, LedgerItem};
use allot_topo::Machine;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};

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
    virtual_: bool,
}

/// The ledger.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    kinds: BTreeMap<String, Kind>,
    holdings: HashMap<u32, Vec<LedgerItem>>,
    epoch: u64,
    waiting: HashMap<u32, u32>,
}

impl Ledger {
    /// The built-in kinds of `machine`.
    pub fn new(machine: &Machine) -> Ledger {
        let mut l = Ledger::default();
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
                virtual_: false,
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
                virtual_: false,
            },
        );
        let mut io = Vec::new();
        if let Ok(rd) = std::fs::read_dir("/sys/block") {
            let mut names: Vec<String> = rd
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            names.sort();
            for n in names
                .into_iter()
                .filter(|n| !n.starts_with("loop") && !n.starts_with("ram"))
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
                virtual_: false,
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

    /// Defines a virtual kind (idempotent for an identical definition).
    pub fn define(&mut self, name: &str, devices: &[DeviceDef]) -> Result<(), String> {
        if name.is_empty() || devices.is_empty() {
            return Err("a kind needs a name and at least one device".into());
        }
        if devices
            .iter()
            .any(|d| d.max.is_nan() || d.max <= 0.0 || d.min < 0.0 || d.min > d.max)
        {
            return Err(format!(
                "kind {name:?}: every device needs 0 ≤ min ≤ max and max > 0"
            ));
        }
        match self.kinds.get(name) {
            Some(k) if !k.virtual_ => Err(format!("{name:?} is a built-in kind")),
            Some(k) => {
                let same = k.devices.len() == devices.len()
                    && k.devices
                        .iter()
                        .zip(devices)
                        .all(|(a, b)| a.name == b.name && a.max == b.max && a.min == b.min);
                if same {
                    Ok(())
                } else {
                    Err(format!("kind {name:?} already exists with other devices"))
                }
            }
            None => {
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
                        virtual_: true,
                    },
                );
                Ok(())
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

    /// Takes every item for `pid`, or nothing (with the reason). Checks
    /// first, accumulating items on the same device, then applies.
    pub fn acquire(&mut self, pid: u32, items: &[LedgerItem]) -> Result<(), String> {
        // (kind, dev) -> (exclusive added, largest shared added)
        let mut adding: Vec<((&str, u32), f64, f64)> = Vec::new();
        for it in items {
            if it.amount.is_nan() || it.amount < 0.0 {
                return Err(format!(
                    "negative amount {} of {} device {}",
                    it.amount, it.kind, it.dev
                ));
            }
            let d = self.dev(it)?;
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
                return Err(format!(
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
                ));
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
        self.holdings
            .entry(pid)
            .or_default()
            .extend(items.iter().cloned());
        Ok(())
    }

    /// Gives back items `pid` holds (items it does not hold are ignored).
    pub fn release(&mut self, pid: u32, items: &[LedgerItem]) {
        let mut changed = false;
        for it in items {
            let Some(held) = self.holdings.get_mut(&pid) else {
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
        if self.holdings.get(&pid).is_some_and(Vec::is_empty) {
            self.holdings.remove(&pid);
        }
        if changed {
            self.epoch += 1;
        }
    }

    /// Gives back everything `pid` holds (it died). Returns whether it held
    /// anything.
    pub fn release_all(&mut self, pid: u32) -> bool {
        self.waiting.remove(&pid);
        let Some(items) = self.holdings.get(&pid).cloned() else {
            return false;
        };
        self.release(pid, &items);
        true
    }

    /// Whether `pid` holds anything.
    pub fn holds(&self, pid: u32) -> bool {
        self.holdings.contains_key(&pid)
    }

    /// The ledger as JSON: kinds, devices with availability, holders.
    pub fn json(&self) -> String {
        let kinds: Vec<_> = self
            .kinds
            .iter()
            .map(|(name, k)| {
                json!({
                    "name": name,
                    "virtual": k.virtual_,
                    "devices": k.devices.iter().map(|d| json!({
                        "name": d.name, "min": d.min, "max": d.max,
                        "available": d.avail_exclusive(), "shared_available": d.avail_shared(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let holders: Vec<_> = self
            .holdings
            .iter()
            .map(|(pid, items)| json!({ "pid": pid, "items": items.len() }))
            .collect();
        json!({ "epoch": self.epoch, "waiters": self.waiters(), "kinds": kinds, "holders": holders }).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(dev: u32, amount: f64, shared: bool) -> LedgerItem {
        LedgerItem {
            kind: "cpu".into(),
            dev,
            amount,
            shared,
        }
    }

    #[test]
    fn exclusive_and_shared_accounting() {
        let mut l = Ledger::new(&Machine::uniform(2));
        l.acquire(10, &[item(0, 1.0, false)]).unwrap();
        assert!(
            l.acquire(11, &[item(0, 0.1, false)]).is_err(),
            "CPU 0 is taken"
        );
        // All or nothing: CPU 1 is not taken when CPU 0 fails.
        assert!(
            l.acquire(11, &[item(1, 1.0, false), item(0, 1.0, false)])
                .is_err()
        );
        l.acquire(11, &[item(1, 1.0, true)]).unwrap();
        l.acquire(12, &[item(1, 1.0, true)]).unwrap();
        assert!(
            l.acquire(13, &[item(1, 0.5, false)]).is_err(),
            "shared holders keep exclusive ones out"
        );
        let e0 = l.epoch();
        assert!(l.release_all(10));
        assert!(l.epoch() > e0);
        l.acquire(13, &[item(0, 0.5, false)]).unwrap();
    }

    #[test]
    fn minimums_stay_with_processes_that_asked_nothing() {
        let mut l = Ledger::new(&Machine::uniform(1));
        l.set_min("cpu", 0.25);
        assert!(l.acquire(1, &[item(0, 1.0, false)]).is_err());
        l.acquire(1, &[item(0, 0.75, false)]).unwrap();
    }

    #[test]
    fn virtual_kinds() {
        let mut l = Ledger::new(&Machine::uniform(1));
        let devs = vec![DeviceDef {
            name: "0".into(),
            min: 0.0,
            max: 2.0,
        }];
        l.define("StrongCore", &devs).unwrap();
        l.define("StrongCore", &devs).unwrap();
        assert!(
            l.define(
                "StrongCore",
                &[DeviceDef {
                    name: "0".into(),
                    min: 0.0,
                    max: 3.0
                }]
            )
            .is_err()
        );
        assert!(l.define("cpu", &devs).is_err());
        let s = LedgerItem {
            kind: "StrongCore".into(),
            dev: 0,
            amount: 1.0,
            shared: false,
        };
        l.acquire(1, std::slice::from_ref(&s)).unwrap();
        l.acquire(2, std::slice::from_ref(&s)).unwrap();
        assert!(l.acquire(3, &[s]).is_err());
        assert!(
            l.acquire(
                3,
                &[LedgerItem {
                    kind: "nope".into(),
                    dev: 0,
                    amount: 1.0,
                    shared: false
                }]
            )
            .unwrap_err()
            .contains("unknown resource kind")
        );
    }
}
