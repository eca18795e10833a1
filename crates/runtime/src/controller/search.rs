//! How a worker finds its next task: at the top of its loop, and while it
//! waits inside a task for a join, a scope or a handle ("Waiting" and
//! "Following the assignment" in the parent module's docs).
//!
//! Order of a search: the policy's dequeue; when waiting, the awaited
//! work's claimable part (after the worker's own queue, before stealing);
//! the policy's idle operation (steal); spinning while the budget lasts;
//! then the sleep protocol (`crate::sleep`). A worker whose CPU was revoked
//! while a task is on its stack runs nothing but that task's claimable part
//! and parks `DORMANT`, where no work is handed to it.

use super::{Waited, WorkerThread};
use crate::loom::hint;
use crate::policy::{Hint, Idle, Place};
use crate::sleep::Woken;
use crate::stats::bump;
use crate::task::Task;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What looking for work ended with.
pub(super) enum Found {
    Task(Task),
    /// The latch being waited for is set.
    Done,
    /// Top level only: retire (no CPU) or shut down.
    Leave,
    /// Inside `find_work` only: look again from the start (the assignment
    /// changed, or the worker slept).
    Again,
}

impl WorkerThread {
    /// Runs other work, nested on this stack, until `w` is done (see
    /// "Waiting" in the module docs).
    pub(crate) fn wait(&self, w: &dyn Waited) {
        loop {
            // Fast path: the newest task of our own queues (what this task
            // forked or spawned last), without the search machinery.
            if w.done() {
                return;
            }
            if !self.follow_assignment()
                && let Some(t) = self.registry.policy.dequeue(&self.here, Hint::Wait)
            {
                self.execute(t);
                continue;
            }
            match self.find_work(Hint::Wait, Some(w)) {
                Found::Task(t) => self.execute(t),
                Found::Done | Found::Leave | Found::Again => return,
            }
        }
    }

    /// Looks for a task: the awaited work's claimable part (when waiting),
    /// policy dequeue, then policy idle (steal), then spin, then sleep.
    /// `until` is set when waiting inside a task; every policy call is then
    /// made with `Hint::Wait`.
    pub(super) fn find_work(&self, hint: Hint, until: Option<&dyn Waited>) -> Found {
        // A wake-up for work this worker absorbed (see `Woken::ForWork`).
        let mut nudged = false;
        let found = match until {
            None => self.find_task(hint, &mut nudged),
            Some(w) => self.find_while_waiting(w, &mut nudged),
        };
        self.registry.info.roster.set_idle(self.here.index(), false);
        if nudged && matches!(found, Found::Done) {
            // Woken for work, but we go back to the task on our stack.
            self.registry.sleep.pass_on();
        }
        found
    }

    /// `find_work` at the top of the worker's loop: a task, or `Leave` to
    /// retire (no CPU) or shut down.
    fn find_task(&self, mut hint: Hint, nudged: &mut bool) -> Found {
        loop {
            if self.follow_assignment() {
                return Found::Leave;
            }
            match self.search(&mut hint, None, nudged) {
                Found::Again => {}
                found => return found,
            }
        }
    }

    /// `find_work` inside a task, until `w` is done (see "Waiting" and
    /// "Following the assignment" in the module docs).
    fn find_while_waiting(&self, w: &dyn Waited, nudged: &mut bool) -> Found {
        let reg = &*self.registry;
        let index = self.here.index();
        let slot = reg.slot(index);
        let mut handed_over = false;
        loop {
            if w.done() {
                return Found::Done;
            }
            if !self.follow_assignment() {
                match self.search(&mut Hint::Wait, Some(w), nudged) {
                    Found::Again => continue,
                    found => return found,
                }
            }
            // Our CPU was revoked, and a task is on our stack: we cannot
            // retire before it finishes (tasks are never preempted). Run
            // nothing but the awaited work's claimable part, leave
            // our queues to the others — wake one of them, once — and park
            // where work is never handed to us, until the wait is over, a
            // claim appears, or the assignment changes.
            if let Some(t) = w.claim() {
                return Found::Task(t);
            }
            reg.info.roster.set_idle(index, true);
            if !handed_over {
                handed_over = true;
                reg.wake_for(None, Place::Global, Hint::Resize, true);
            }
            let s = reg.sleep.announce_dormant(index);
            let claimed = w.claim();
            if claimed.is_some() || w.done() || slot.target.load(Ordering::SeqCst) != 0 {
                *nudged |= reg.sleep.cancel(s) == Woken::ForWork;
                if let Some(t) = claimed {
                    return Found::Task(t);
                }
            } else {
                *nudged |= self.stats().asleep(|| reg.sleep.park(s)) == Woken::ForWork;
            }
        }
    }

    /// One search of a worker that serves its CPU: policy dequeue, the
    /// awaited work's claimable part (when waiting: after the worker's own
    /// queue, whose newest tasks are the most local; before stealing),
    /// policy idle, spinning while the budget lasts, then the sleep
    /// protocol. Returns a
    /// task; `Done` (waiter) or `Leave` (top, shutting down) when that holds
    /// after a search found nothing; or `Again` when the assignment changed
    /// or the worker slept (the caller looks again).
    fn search(&self, hint: &mut Hint, until: Option<&dyn Waited>, nudged: &mut bool) -> Found {
        let reg = &*self.registry;
        let here = &self.here;
        let slot = reg.slot(here.index());
        let idle_hint = if until.is_some() {
            Hint::Wait
        } else {
            Hint::Steal
        };
        // What ends a search that found no policy work.
        let interrupted = || -> Option<Found> {
            if slot.target.load(Ordering::SeqCst) != self.serving() {
                return Some(Found::Again);
            }
            match until {
                Some(w) if w.done() => Some(Found::Done),
                Some(w) => w.claim().map(Found::Task),
                None => reg.terminate.load(Ordering::SeqCst).then_some(Found::Leave),
            }
        };
        let mut round = 0u32;
        let mut spin_start: Option<Instant> = None;
        loop {
            if let Some(t) = reg.policy.dequeue(here, *hint) {
                return Found::Task(t);
            }
            if let Some(t) = until.and_then(Waited::claim) {
                return Found::Task(t);
            }
            match reg.policy.idle(here, round, idle_hint) {
                Idle::Run(t) => {
                    bump(&self.stats().stolen);
                    return Found::Task(t);
                }
                Idle::Migrated(t) => {
                    self.count_migrated();
                    return Found::Task(t);
                }
                Idle::Retry => {
                    round = round.saturating_add(1);
                    hint::spin_loop();
                    continue;
                }
                Idle::Park => {}
            }
            if let Some(found) = interrupted() {
                return found;
            }
            if round == 0 {
                reg.info.roster.set_idle(here.index(), true);
            }
            if reg.spin == Duration::MAX {
                // A polling worker (a partition's): short pauses, no
                // yield, never asleep.
                backoff(round.min(2));
                round = round.saturating_add(1);
                continue;
            }
            let start = *spin_start.get_or_insert_with(Instant::now);
            if round < 4 || start.elapsed() < reg.spin {
                backoff(round);
                round = round.saturating_add(1);
                continue;
            }
            // Sleep: announce, re-check everything, then park.
            let s = reg.sleep.announce(here.index());
            let found = interrupted()
                .or_else(|| reg.policy.dequeue(here, *hint).map(Found::Task))
                .or_else(|| match reg.policy.idle(here, 0, idle_hint) {
                    Idle::Run(t) => {
                        bump(&self.stats().stolen);
                        Some(Found::Task(t))
                    }
                    Idle::Migrated(t) => {
                        self.count_migrated();
                        Some(Found::Task(t))
                    }
                    Idle::Retry => Some(Found::Again),
                    Idle::Park => None,
                });
            return match found {
                Some(found) => {
                    *nudged |= reg.sleep.cancel(s) == Woken::ForWork;
                    found
                }
                None => {
                    *nudged |= self.stats().asleep(|| reg.sleep.park(s)) == Woken::ForWork;
                    if until.is_none() {
                        *hint = Hint::Wake;
                    }
                    Found::Again
                }
            };
        }
    }
}

/// Pauses between idle rounds: a growing burst of spin hints, and a
/// scheduler yield now and then so a co-located thread can run.
#[inline]
fn backoff(round: u32) {
    for _ in 0..(1u32 << round.min(6)) {
        hint::spin_loop();
    }
    if round > 16 && round.is_multiple_of(8) {
        std::thread::yield_now();
    }
}
