//! `global-fifo` and `global-lifo`: one queue shared by all workers for
//! independent tasks (Sting's "Global FIFO" and "Global LIFO" policy
//! managers), with structured work kept by the worker that created it.
//!
//! - placement: every spawned or installed task (`Hint::Spawn`) goes to the
//!   shared queue, whoever creates it — oldest first (`global-fifo`:
//!   tasks start in submission order) or newest first (`global-lifo`: the
//!   last submitted starts first, a stack of work). A task given a worker
//!   by name goes to that worker's inbox. The second half of a `join`
//!   (`Hint::Fork`) and a scoped task created on a worker (`Hint::Scoped`)
//!   are not independent: they are parts of the running task, which will
//!   wait for them. They go on the creating worker's own deque (the *fork
//!   deque*), where others can steal them. (A waiting worker runs tasks
//!   nested on its stack; had these parts gone to the shared queue, a
//!   waiter would have to take an unrelated shared task to reach them and
//!   would nest unrelated work without bound. Sting's threads had their
//!   own stacks and did not have this problem.)
//! - dequeue, level by level from the highest: the worker's fork deque
//!   (newest first), its inbox, then the shared queue — when waiting
//!   (`Hint::Wait`): the fork deque only;
//! - idle: the shared queue (not when waiting), then the fork deques of
//!   the other workers in the spec's [`Victims`](super::Victims)
//!   order, then (not when waiting) the inboxes of workers without a CPU;
//! - preempt: the first task of the running task's level or higher;
//! - drain: nothing to move; fork deques are stolen from whether or not
//!   their worker is active, inboxes of inactive workers are emptied by
//!   the others.

use super::levels::{Deques, Inboxes, PriorityUse, Shared, level_of, retrying};
use super::victims::VictimOrder;
use super::{Here, Hint, Idle, Place, PolicySpec, PoolInfo, ThreadPolicy};
use crate::queue::Steal;
use crate::task::{Priority, Task};

/// The `global-fifo` / `global-lifo` thread policy. See the module docs.
#[derive(Debug)]
pub struct Global {
    name: &'static str,
    info: PoolInfo,
    shared: Shared,
    forks: Deques,
    inboxes: Inboxes,
    victims: VictimOrder,
    levels: usize,
    priorities: PriorityUse,
}

impl Global {
    /// The policy `spec` describes (its kind must be a global one) for the
    /// pool `info` describes.
    pub fn new(info: &PoolInfo, spec: PolicySpec) -> Global {
        let levels = spec.levels();
        Global {
            name: spec.kind.name(),
            shared: Shared::new(levels, spec.kind.is_lifo()),
            info: info.clone(),
            forks: Deques::new(info, levels, true),
            inboxes: Inboxes::new(info, levels),
            victims: VictimOrder::new(info, spec.victims),
            levels,
            priorities: PriorityUse::default(),
        }
    }

    /// The next task of level `l` only: fork deque, inbox, shared queue.
    fn next_at(&self, here: &Here, l: usize) -> Option<Task> {
        if let Some(t) = self.forks.pop_level(here, l) {
            return Some(t);
        }
        if let Some(t) = self.inboxes.of(here.index()).take_level(l, None).success() {
            return Some(t);
        }
        retrying(|| self.shared.take_level(l, None))
    }

    /// The next task at level `..=last`, level by level: fork deque, inbox,
    /// shared queue.
    fn next_through(&self, here: &Here, last: usize) -> Option<Task> {
        let inbox = self.inboxes.of(here.index());
        for l in 0..=last.min(self.levels - 1) {
            if let Some(t) = self.forks.pop_through(here, l) {
                return Some(t);
            }
            if let Some(t) = inbox.take_through(l).success() {
                return Some(t);
            }
            if let Some(t) = retrying(|| self.shared.take_through(l)) {
                return Some(t);
            }
        }
        None
    }
}

impl ThreadPolicy for Global {
    fn name(&self) -> &'static str {
        self.name
    }

    fn place(&self, from: Option<&Here>, hint: Hint) -> Place {
        if from.is_some() && matches!(hint, Hint::Fork | Hint::Scoped) {
            Place::Local
        } else {
            Place::Global
        }
    }

    fn enqueue(&self, from: Option<&Here>, place: Place, task: Task, _hint: Hint) {
        self.priorities.note(task.priority());
        match (place, from) {
            (Place::Local, Some(here)) => self.forks.push(here, task),
            (Place::Worker(i), _) if i < self.inboxes.slots() => self.inboxes.of(i).push(task),
            _ => self.shared.push(task),
        }
    }

    fn dequeue(&self, here: &Here, hint: Hint) -> Option<Task> {
        if hint == Hint::Wait {
            return self.forks.pop(here);
        }
        if !self.priorities.mixed() {
            // Every task is at `Normal`'s level: serve that level alone.
            let l = level_of(Priority::Normal, self.levels);
            return self.next_at(here, l);
        }
        self.next_through(here, self.levels - 1)
    }

    fn idle(&self, here: &Here, _round: u32, hint: Hint) -> Idle {
        let mut retry = false;
        if hint != Hint::Wait {
            match self.shared.take() {
                Steal::Success(t) => return Idle::Run(t),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
        }
        let found = self.victims.visit(
            here,
            |v| self.forks.len(v),
            |victim| match self.forks.steal(here, victim, false) {
                Steal::Success(t) if self.info.roster().is_active(victim) => Some(Idle::Run(t)),
                Steal::Success(t) => Some(Idle::Migrated(t)),
                Steal::Retry => {
                    retry = true;
                    None
                }
                Steal::Empty => None,
            },
        );
        if let Some(idle) = found {
            return idle;
        }
        if hint != Hint::Wait {
            match self.inboxes.take_orphaned(here, self.info.roster()) {
                Steal::Success(t) => return Idle::Migrated(t),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
        }
        if retry { Idle::Retry } else { Idle::Park }
    }

    fn preempt(&self, here: &Here, running: Priority) -> Option<Task> {
        self.next_through(here, level_of(running, self.levels))
    }

    fn drain(&self, _here: &Here, _hint: Hint) {
        // Nothing to move: `idle` steals from every fork deque, also a
        // retired worker's, and empties inactive workers' inboxes. (Moving
        // its tasks to the shared queue would hide them from waiting
        // workers, which may need them.)
    }

    fn queued(&self, worker: Option<usize>) -> usize {
        match worker {
            Some(i) if i < self.inboxes.slots() => self.forks.len(i) + self.inboxes.of(i).len(),
            Some(_) => 0,
            None => self.shared.len(),
        }
    }
}
