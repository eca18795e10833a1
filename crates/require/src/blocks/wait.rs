//! Waiting inside the blocks: for a batch of arrivals to gather, for an
//! allocation to be given back (the *epoch* moves), and to retake what a
//! blocked thread gave back. Every wait sleeps on the one condition
//! variable through [`Blocks::sleep`], which keeps `sleepers` exact: a
//! release wakes nobody (no system call) when nobody sleeps.

use super::*;

/// How long the requests of a policy that divides among concurrent
/// arrivals (`fair_cores`, `fair_numa`) wait for the others of their
/// batch: Poli-C's four requests arriving together on 64 cores get 16
/// each, not 64 for the first and nothing for the rest. Every such entry
/// pays up to this much before its policy runs.
pub const DEFAULT_GATHER_WINDOW: std::time::Duration = std::time::Duration::from_millis(1);

impl Blocks {
    /// Sleeps on the condition variable (at most `timeout`, `None`: until
    /// woken), counted in `sleepers` meanwhile. Takes and returns the lock
    /// guard; may return early (callers look again).
    fn sleep<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        timeout: Option<std::time::Duration>,
    ) -> MutexGuard<'s, State> {
        st.sleepers += 1;
        st = match timeout {
            Some(t) => {
                self.cond
                    .wait_timeout(st, t)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => self.cond.wait(st).unwrap_or_else(|p| p.into_inner()),
        };
        st.sleepers -= 1;
        st
    }

    /// Sleeps until the epoch moves (an allocation given back).
    fn until_epoch_moves<'s>(&'s self, mut st: MutexGuard<'s, State>) -> MutexGuard<'s, State> {
        let seen = st.epoch;
        while st.epoch == seen {
            st = self.sleep(st, None);
        }
        st
    }

    /// Joins the batch of arrivals whose policies divide among themselves
    /// (the first opens it), and waits until the batch's window closes,
    /// so that every request of the batch is counted when each one's
    /// policy runs. Takes and returns the lock guard.
    pub(super) fn gather<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        tid: Tid,
    ) -> MutexGuard<'s, State> {
        let now = std::time::Instant::now();
        let opened = st.gathering.first().map_or(now, |&(_, at)| at);
        st.gathering.push((tid, now));
        let closes = opened + st.gather_window;
        loop {
            let now = std::time::Instant::now();
            if now >= closes {
                return st;
            }
            st = self.sleep(st, Some(closes - now));
        }
    }

    /// How long a batch of requests whose policies divide among
    /// concurrent arrivals stays open (default [`DEFAULT_GATHER_WINDOW`]):
    /// each waits until the window of the batch it joined closes. Zero
    /// turns batching off (the first takes its share of what is free then).
    pub fn set_gather_window(&self, window: std::time::Duration) {
        self.lock().gather_window = window;
    }

    /// Gives back what `tid` holds, waits for a release, retakes.
    pub(super) fn wait<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        tid: Tid,
        devs: &[Dev],
    ) -> MutexGuard<'s, State> {
        for d in devs {
            *st.waiting.entry(*d).or_default() += 1;
        }
        st.total_waiting += 1;
        // Giving back what the thread holds may let a sleeper proceed, so
        // it wakes them. A thread that holds nothing changes nothing for
        // the others by starting to wait: waking them then made every
        // waiter that failed again wake all the others in turn, a storm
        // that kept waiting threads busy on the CPUs the running ones need.
        let gives_back = st.trees.holds_any(tid);
        st.trees.block(tid);
        if gives_back {
            st.epoch += 1;
            if st.sleepers > 0 {
                self.cond.notify_all();
            }
        }
        self.watch_ledger(&mut st);
        st = self.until_epoch_moves(st);
        for d in devs {
            if let Some(w) = st.waiting.get_mut(d) {
                *w -= 1;
                if *w == 0 {
                    st.waiting.remove(d);
                }
            }
        }
        st.total_waiting -= 1;
        self.retake(st, tid)
    }

    /// Retakes `tid`'s allocations after it was blocked, waiting as needed.
    pub(super) fn retake<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        tid: Tid,
    ) -> MutexGuard<'s, State> {
        loop {
            match st.trees.unblock(tid) {
                Ok(()) => return st,
                Err(_) => st = self.until_epoch_moves(st),
            }
        }
    }
}
