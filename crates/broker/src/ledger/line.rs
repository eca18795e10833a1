//! The ledger's line: requests that wait for devices, in the order they
//! first asked, across every process.
//!
//! A `KindAcquire` that names a *place* (its caller's number for one
//! waiting request) and is refused keeps that place here. A place
//! *reserves* the devices it asked for last against requests of other
//! processes that come later: such a request is refused while the place
//! waits, even if those devices are free, so a newcomer never overtakes
//! and a freed device goes to the earliest request that wants it. A request
//! is held back only on the devices it shares with places ahead of it: one
//! for other devices goes through.
//!
//! Two exceptions keep the line from deadlocking:
//!
//! - a process is never held back by its own places (its runtime orders
//!   its own threads);
//! - a thread that holds items already (its acquisition is nested in
//!   another: it says so) goes ahead of the places that wait on its
//!   process: those that want part of a device the process holds, or
//!   part of one held by a process that itself waits in line for a device
//!   the first holds, and so on. Such a
//!   place could never be met while that thread waited behind it. A
//!   thread that holds nothing waits its turn like any other (its process's
//!   other threads will give back what they hold without it).
//!
//! A place waits for the devices it asked for, or, when a policy chose
//! them (`any_device`), for any device of their kinds: it is served first
//! when any of them comes free.
//!
//! A try (place 0) never enters the line. A place leaves when it is
//! granted, when its caller says it stopped waiting (`KindLeave`), when
//! its connection or its process ends, or when it could take something
//! and did not ask again within [`GRACE`]: the broker wakes a process with
//! such a place (and only then, so one freed device does not wake every
//! waiter), and a client that does not ask must not keep free devices
//! from everyone else.
//!
//! Invariants: at most one entry per (session, place); entries keep the
//! order of their first refusal (asking again under the same place updates
//! its devices, not its position).

use std::time::{Duration, Instant};

/// How long a place that could take something keeps its position without
/// asking again (see the module notes).
pub const GRACE: Duration = Duration::from_secs(2);

/// A waiting request's name: the connection it came on and the caller's
/// number for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiter {
    /// The connection that asks.
    pub session: u64,
    /// The caller's number for the request (never 0: 0 is a try).
    pub place: u64,
}

/// One waiting request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The connection that asked.
    pub session: u64,
    /// The process that asked.
    pub pid: u32,
    /// The caller's number for the request (never 0).
    pub place: u64,
    /// The devices it waits for: (kind, index in the ledger).
    pub devices: Vec<(String, u32)>,
    /// Since when it could take something without having asked again.
    due_since: Option<Instant>,
}

/// The waiting requests, first come first.
#[derive(Debug, Clone, Default)]
pub struct Line {
    entries: Vec<Place>,
}

impl Line {
    /// Where (session, place) stands, if it waits.
    fn position(&self, session: u64, place: u64) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.session == session && e.place == place)
    }

    /// The places ahead of `wait` — every place when it does not wait yet,
    /// or is a try (`None`) — that belong to other processes than `pid`.
    pub fn ahead(&self, wait: Option<Waiter>, pid: u32) -> impl Iterator<Item = &Place> {
        let end = wait
            .and_then(|w| self.position(w.session, w.place))
            .unwrap_or(self.entries.len());
        self.entries[..end].iter().filter(move |e| e.pid != pid)
    }

    /// Whether `wait` has a place.
    pub fn waits(&self, wait: Waiter) -> bool {
        self.position(wait.session, wait.place).is_some()
    }

    /// Every place of process `pid`.
    pub fn of_process(&self, pid: u32) -> impl Iterator<Item = &Place> {
        self.entries.iter().filter(move |e| e.pid == pid)
    }

    /// Places that connection `session` holds.
    pub fn count_of(&self, session: u64) -> usize {
        self.entries.iter().filter(|e| e.session == session).count()
    }

    /// Keeps (session, place) waiting for `devices` (it has just asked):
    /// at its place if it waits already, else at the end. Returns whether
    /// it is new.
    pub fn keep(&mut self, wait: Waiter, pid: u32, devices: Vec<(String, u32)>) -> bool {
        match self.position(wait.session, wait.place) {
            Some(i) => {
                let e = &mut self.entries[i];
                e.devices = devices;
                e.due_since = None;
                false
            }
            None => {
                self.entries.push(Place {
                    session: wait.session,
                    pid,
                    place: wait.place,
                    devices,
                    due_since: None,
                });
                true
            }
        }
    }

    /// Places that could take something (`due`, looked at `now`) and have
    /// not asked again for [`GRACE`] since leave. Whether any left.
    pub fn expire(&mut self, now: Instant, due: impl Fn(&Place) -> bool) -> bool {
        let before = self.entries.len();
        let due: Vec<bool> = self.entries.iter().map(due).collect();
        let mut i = 0;
        self.entries.retain_mut(|e| {
            let d = due[i];
            i += 1;
            if !d {
                e.due_since = None;
                return true;
            }
            let since = *e.due_since.get_or_insert(now);
            now.duration_since(since) < GRACE
        });
        self.entries.len() != before
    }

    /// Every place, first come first.
    pub fn places(&self) -> &[Place] {
        &self.entries
    }

    /// Gives up (session, place); whether it waited.
    pub fn leave(&mut self, session: u64, place: u64) -> bool {
        match self.position(session, place) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }

    /// Gives up every place of connection `session`; whether any waited.
    pub fn leave_session(&mut self, session: u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.session != session);
        self.entries.len() != before
    }

    /// Gives up every place of process `pid`; whether any waited.
    pub fn leave_process(&mut self, pid: u32) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.pid != pid);
        self.entries.len() != before
    }

    /// Waiting requests.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(i: u32) -> Vec<(String, u32)> {
        vec![("cpu".into(), i)]
    }

    fn w(session: u64, place: u64) -> Waiter {
        Waiter { session, place }
    }

    #[test]
    fn a_place_keeps_its_position_when_it_asks_again() {
        let mut l = Line::default();
        assert!(l.keep(w(1, 7), 10, cpu(0)));
        assert!(l.keep(w(2, 1), 20, cpu(0)));
        assert!(!l.keep(w(1, 7), 10, cpu(1)), "asked again: not new");
        let order: Vec<_> = l
            .entries
            .iter()
            .map(|e| (e.pid, e.devices.clone()))
            .collect();
        assert_eq!(order, vec![(10, cpu(1)), (20, cpu(0))]);
        // Ahead of the second: the first only; ahead of a newcomer: both.
        assert_eq!(l.ahead(Some(w(2, 1)), 20).count(), 1);
        assert_eq!(l.ahead(Some(w(3, 5)), 30).count(), 2);
        assert_eq!(l.ahead(None, 30).count(), 2);
        // A process's own places are never ahead of it.
        assert_eq!(l.ahead(Some(w(3, 5)), 10).count(), 1);
    }

    #[test]
    fn places_leave_by_name_by_connection_and_by_process() {
        let mut l = Line::default();
        l.keep(w(1, 1), 10, cpu(0));
        l.keep(w(1, 2), 10, cpu(1));
        l.keep(w(2, 1), 20, cpu(0));
        l.keep(w(3, 1), 30, cpu(0));
        assert_eq!(l.count_of(1), 2);
        assert!(l.leave(1, 2));
        assert!(!l.leave(1, 2), "already gone");
        assert!(l.leave_session(1));
        assert!(!l.leave_session(1));
        assert!(l.leave_process(20));
        assert_eq!(l.len(), 1);
        assert_eq!(l.of_process(30).count(), 1);
    }

    #[test]
    fn a_place_that_could_take_something_and_does_not_ask_leaves_after_the_grace() {
        let mut l = Line::default();
        let t0 = Instant::now();
        l.keep(w(1, 1), 10, cpu(0));
        l.keep(w(2, 1), 20, cpu(0));
        l.keep(w(3, 1), 30, cpu(1));
        let due = |p: &Place| p.pid != 30;
        assert!(!l.expire(t0, due));
        // The second asks again; the first does not.
        l.keep(w(2, 1), 20, cpu(0));
        assert!(!l.expire(t0 + GRACE / 2, due));
        assert!(l.expire(t0 + GRACE, due));
        assert!(!l.waits(w(1, 1)));
        assert!(l.waits(w(2, 1)), "it asked again: its time runs from then");
        assert!(
            l.waits(w(3, 1)),
            "nothing it could take: it waits as long as it must"
        );
        assert!(l.expire(t0 + GRACE * 2, due));
        assert_eq!(l.places().len(), 1);
    }
}
