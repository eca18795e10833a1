//! The ledger's side of the line ([`super::line`]): which devices the
//! places ahead of a request reserve against it, whom a place waits on,
//! and what a request that keeps its place is told.

use super::line::{Place, Waiter};
use super::*;

/// What a refused request that keeps its place is told.
#[derive(Debug, Clone, PartialEq)]
pub struct InLine {
    /// Places of other processes ahead of it that want some of its devices.
    pub ahead: u32,
    /// What it could take now on every device of the kinds it asked for:
    /// an exclusive and a shared item per device with anything free and
    /// not reserved by a place ahead of it.
    pub free: Vec<LedgerItem>,
}

impl Ledger {
    /// The places that hold a request of process `pid` back: those ahead
    /// of `wait` (every place, for a try) of other processes. When the
    /// asking thread is `holding` items, places that wait on `pid` are not
    /// among them (see the line's module notes: it goes ahead of them, or
    /// neither would be met).
    fn reserving(&self, pid: u32, wait: Option<Waiter>, holding: bool) -> Vec<&Place> {
        if self.line.is_empty() {
            return Vec::new();
        }
        self.line
            .ahead(wait, pid)
            .filter(|p| !(holding && self.waits_on(p, pid)))
            .collect()
    }

    /// The devices that [`Ledger::reserving`]'s places reserve against
    /// that request, with how many places want each.
    pub(super) fn reserved(
        &self,
        pid: u32,
        wait: Option<Waiter>,
        holding: bool,
    ) -> HashMap<(&str, u32), usize> {
        reserved_by(&self.reserving(pid, wait, holding))
    }

    /// Whether place `p` waits on process `pid`: `pid` holds part of a
    /// device `p` wants, or holds part of a device that the place of a
    /// holder `p` waits on wants, and so on.
    fn waits_on(&self, p: &Place, pid: u32) -> bool {
        let mut seen: BTreeSet<u32> = BTreeSet::from([p.pid]);
        let mut wants: Vec<&Place> = vec![p];
        while let Some(w) = wants.pop() {
            for (&holder, h) in &self.holdings {
                if seen.contains(&holder)
                    || !h
                        .items
                        .iter()
                        .any(|it| w.devices.iter().any(|(k, d)| *k == it.kind && *d == it.dev))
                {
                    continue;
                }
                if holder == pid {
                    return true;
                }
                seen.insert(holder);
                wants.extend(self.line.of_process(holder));
            }
        }
        false
    }

    /// Keeps the refused request `wait` of process `pid` in line, waiting
    /// for the devices of `items` (at its place if it waits already, else
    /// at the end), and says who is ahead and what is free to it (with
    /// `holding` as for [`Ledger::acquire_at`]). A connection keeps at
    /// most [`Limits::holdings`] places.
    pub fn keep_place(
        &mut self,
        pid: u32,
        wait: Waiter,
        items: &[LedgerItem],
        holding: bool,
        any_device: bool,
    ) -> Result<InLine, LedgerError> {
        let mut devices: Vec<(String, u32)> = Vec::new();
        for it in items {
            match self.kinds.get(&it.kind) {
                Some(k) if any_device => {
                    let n = k.devices.len() as u32;
                    devices.extend((0..n).map(|d| (it.kind.clone(), d)));
                }
                _ => devices.push((it.kind.clone(), it.dev)),
            }
        }
        devices.sort();
        devices.dedup();
        let places = self.line.count_of(wait.session);
        if !self.line.waits(wait) && places >= self.limits.holdings as usize {
            return Err(LedgerError::Limit(format!(
                "process {pid} has {places} requests waiting in line; the limit is {} \
                 (limits.holdings)",
                self.limits.holdings
            )));
        }
        self.line.keep(wait, pid, devices.clone());
        let reserving = self.reserving(pid, Some(wait), holding);
        let reserved = reserved_by(&reserving);
        let ahead = reserving
            .iter()
            .filter(|p| p.devices.iter().any(|d| devices.contains(d)))
            .count() as u32;
        let kinds: BTreeSet<&str> = items.iter().map(|it| it.kind.as_str()).collect();
        let free = self.free_on(kinds, |kind, d| !reserved.contains_key(&(kind, d)));
        Ok(InLine { ahead, free })
    }

    /// What is free on every device of `kinds` that `open` lets through:
    /// an exclusive and a shared item per device with something free.
    fn free_on<'k>(
        &self,
        kinds: impl IntoIterator<Item = &'k str>,
        open: impl Fn(&str, u32) -> bool,
    ) -> Vec<LedgerItem> {
        let mut free = Vec::new();
        for kind in kinds {
            let Some(k) = self.kinds.get(kind) else {
                continue;
            };
            for (i, d) in k.devices.iter().enumerate() {
                if !open(kind, i as u32) {
                    continue;
                }
                for (amount, shared) in [(d.avail_exclusive(), false), (d.avail_shared(), true)] {
                    if amount > EPS {
                        free.push(LedgerItem {
                            kind: kind.to_string(),
                            dev: i as u32,
                            amount,
                            shared,
                        });
                    }
                }
            }
        }
        free
    }

    /// The waiting request `wait` stopped waiting; whether it was in line.
    /// Those behind it may go now (the epoch moves).
    pub fn leave_place(&mut self, wait: Waiter) -> bool {
        let left = self.line.leave(wait.session, wait.place);
        if left {
            self.epoch += 1;
        }
        left
    }

    /// Connection `session` ended: its places leave the line.
    pub fn leave_session(&mut self, session: u64) -> bool {
        let left = self.line.leave_session(session);
        if left {
            self.epoch += 1;
        }
        left
    }

    /// The places that could take something now, each with what is free
    /// to it: a device it waits for has something free that no place of
    /// another process ahead of it waits for, and that no place ahead that
    /// is due already counts on. One pass along the line. Each due place
    /// counts on one free device (the first such it waits for): of one
    /// process's places waiting for any CPU, one freed CPU makes one due,
    /// not all (the others would be refused, and are woken when the ledger
    /// moves again). What is free to a due place is what `InLine` would
    /// say, less the devices the due places ahead count on.
    fn due_places(&self) -> BTreeMap<(u64, u64), Vec<LedgerItem>> {
        let mut due = BTreeMap::new();
        // Device → the processes whose places ahead wait for it.
        let mut wanted: HashMap<(&str, u32), BTreeSet<u32>> = HashMap::new();
        // Devices a due place ahead counts on.
        let mut counted: BTreeSet<(&str, u32)> = BTreeSet::new();
        for p in self.line.places() {
            let open = |kind: &str, d: u32| {
                let others_first = wanted
                    .get(&(kind, d))
                    .is_some_and(|pids| pids.iter().any(|&q| q != p.pid));
                !others_first && !counted.contains(&(kind, d))
            };
            let free_to_it = p.devices.iter().find(|(kind, d)| {
                open(kind, *d)
                    && self
                        .kinds
                        .get(kind)
                        .and_then(|k| k.devices.get(*d as usize))
                        .is_some_and(|dev| dev.avail_shared() > EPS)
            });
            if let Some((kind, d)) = free_to_it {
                let kinds: BTreeSet<&str> = p.devices.iter().map(|(k, _)| k.as_str()).collect();
                let free = self.free_on(kinds, open);
                due.insert((p.session, p.place), free);
                counted.insert((kind.as_str(), *d));
            }
            for (kind, d) in &p.devices {
                wanted.entry((kind.as_str(), *d)).or_default().insert(p.pid);
            }
        }
        due
    }

    /// The processes whose watches a change of the ledger answers, each
    /// with its places that could take something now (first in line
    /// first, with what is free to each): those with such a place, and
    /// those with more threads waiting (as their watch said) than places
    /// in line (the others wait on something the line does not know;
    /// their list may be empty). A change that frees one device thus wakes
    /// the process first in line for it, not every waiting one, and within
    /// it the threads of the named places.
    pub fn to_wake(&self) -> BTreeMap<u32, Vec<DuePlace>> {
        let mut due = self.due_places();
        let mut places: HashMap<u32, u32> = HashMap::new();
        let mut wake: BTreeMap<u32, Vec<DuePlace>> = BTreeMap::new();
        for p in self.line.places() {
            *places.entry(p.pid).or_default() += 1;
            if let Some(free) = due.remove(&(p.session, p.place)) {
                wake.entry(p.pid).or_default().push(DuePlace {
                    place: p.place,
                    free,
                });
            }
        }
        for (&pid, &n) in &self.waiting {
            if n > places.get(&pid).copied().unwrap_or(0) {
                wake.entry(pid).or_default();
            }
        }
        wake
    }

    /// Places that could take something and have not asked again for the
    /// grace leave the line (looked at `now`); whether any left (the epoch
    /// moves, so those behind them wake).
    pub fn expire_places(&mut self, now: std::time::Instant) -> bool {
        if self.line.is_empty() {
            return false;
        }
        let due = self.due_places();
        let left = self
            .line
            .expire(now, |p| due.contains_key(&(p.session, p.place)));
        if left {
            self.epoch += 1;
        }
        left
    }
}

/// The devices `places` wait for, with how many of them want each.
fn reserved_by<'a>(places: &[&'a Place]) -> HashMap<(&'a str, u32), usize> {
    let mut out: HashMap<(&str, u32), usize> = HashMap::new();
    for p in places {
        for (kind, dev) in &p.devices {
            *out.entry((kind.as_str(), *dev)).or_default() += 1;
        }
    }
    out
}
