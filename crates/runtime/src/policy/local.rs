//! `local-lifo` and `local-fifo`: per-worker deques with stealing (Sting's
//! "local" policy managers).
//!
//! - placement: a worker's new tasks go on its own deques, one per priority
//!   level; independent tasks (`Hint::Spawn`) go where the spec's
//!   [`SpawnPlacement`] says (its own deques by default) — another worker's
//!   *inbox* for round-robin, random or least-loaded placement and for a
//!   task given a worker by name. Tasks from outside the pool go to the
//!   shared FIFO queue (or an inbox, when the placement names workers);
//! - the worker's own deques: `local-lifo` keeps all its tasks in one LIFO
//!   deque (newest first: depth-first, cache-warm). `local-fifo` keeps
//!   spawned tasks in a FIFO deque (oldest first: breadth-first, fair among
//!   siblings) and structured work (`Hint::Fork`, `Hint::Scoped`) in a LIFO
//!   *fork deque*, because a waiting worker must find the newest part of
//!   its own work first: taking the oldest would nest a sibling that waits
//!   in turn and takes the next, one stack frame per queued task;
//! - dequeue, level by level from the highest: the fork deque, the own
//!   deque, the inbox, then the shared queue (a batch of it moves into the
//!   deque). When waiting (`Hint::Wait`): the fork deque only (the one
//!   deque of `local-lifo`);
//! - idle: steal the *oldest* task of the highest level from the other
//!   workers (fork deque, then own deque; only fork deques when waiting),
//!   once around in the spec's [`Victims`] order; then (not when waiting)
//!   the inboxes of workers that hold no CPU, then the shared queue;
//!   `Retry` if any take lost a race, `Park` if all were empty;
//! - preempt (a running task's quantum is used up): the first task of the
//!   running task's level or higher, in dequeue order;
//! - drain: nothing to move (see the invariant).
//!
//! Invariants: deque `i` is pushed and popped only by the worker holding
//! slot `i` (enforced by `WorkerLocal`); other threads only steal. Workers
//! that are not active are still stolen from, and their inboxes emptied
//! by the others, so a retired worker's tasks are never stranded and its
//! structured work stays where waiting workers find it.

use super::levels::{
    Cursors, Deques, Inboxes, PriorityUse, Shared, SpawnPlacement, first_victim, level_of,
    place_on, retrying,
};
use super::{Here, Hint, Idle, Place, PolicySpec, PoolInfo, ThreadPolicy};
use crate::queue::Steal;
use crate::task::{Priority, Task};

/// The `local-lifo` / `local-fifo` thread policy. See the module docs.
#[derive(Debug)]
pub struct Local {
    spec: PolicySpec,
    name: &'static str,
    info: PoolInfo,
    deques: Deques,
    /// `local-fifo`'s LIFO deques for structured work (`None`: it shares
    /// `deques`).
    forks: Option<Deques>,
    inboxes: Inboxes,
    global: Shared,
    cursors: Cursors,
    levels: usize,
    lifo: bool,
    priorities: PriorityUse,
}

impl Local {
    /// The policy `spec` describes (its kind must be a local one) for the
    /// pool `info` describes.
    pub fn new(info: &PoolInfo, spec: PolicySpec) -> Local {
        let lifo = spec.kind.is_lifo();
        let levels = spec.levels();
        Local {
            name: spec.kind.name(),
            spec,
            info: info.clone(),
            deques: Deques::new(info, levels, lifo),
            forks: (!lifo).then(|| Deques::new(info, levels, true)),
            inboxes: Inboxes::new(info, levels),
            global: Shared::new(levels, false),
            cursors: Cursors::new(info),
            levels,
            lifo,
            priorities: PriorityUse::default(),
        }
    }

    /// `local-lifo` with the default options.
    pub fn lifo(info: &PoolInfo) -> Local {
        Local::new(info, PolicySpec::new(super::PolicyKind::LocalLifo))
    }

    fn take_global(&self, here: &Here, last: usize) -> Option<Task> {
        retrying(|| {
            if last + 1 >= self.levels {
                self.global.take_batch(&self.deques, here)
            } else {
                self.global.take_through(last)
            }
        })
    }

    /// Where structured work and waiters' tasks live.
    #[inline]
    fn forks(&self) -> &Deques {
        self.forks.as_ref().unwrap_or(&self.deques)
    }

    /// The next task at level `..=last` from the worker's deques, inbox and
    /// the shared queue, level by level.
    fn next_through(&self, here: &Here, last: usize) -> Option<Task> {
        let inbox = self.inboxes.of(here.index());
        for l in 0..=last.min(self.levels - 1) {
            if let Some(t) = self.forks().pop_through(here, l) {
                return Some(t);
            }
            if self.forks.is_some()
                && let Some(t) = self.deques.pop_through(here, l)
            {
                return Some(t);
            }
            if let Some(t) = inbox.take_through(l).success() {
                return Some(t);
            }
            if l + 1 == self.levels {
                return self.take_global(here, l);
            }
            if let Some(t) = self.global.take_through(l).success() {
                return Some(t);
            }
        }
        None
    }
}

impl ThreadPolicy for Local {
    fn name(&self) -> &'static str {
        self.name
    }

    fn place(&self, from: Option<&Here>, hint: Hint) -> Place {
        if hint == Hint::Spawn && self.spec.placement != SpawnPlacement::Local {
            let load = |i: usize| self.queued(Some(i));
            if let Some(w) = place_on(self.spec.placement, &self.info, &self.cursors, from, load) {
                return if from.is_some_and(|h| h.index() == w) {
                    Place::Local
                } else {
                    Place::Worker(w)
                };
            }
        }
        if from.is_some() {
            Place::Local
        } else {
            Place::Global
        }
    }

    #[inline]
    fn enqueue(&self, from: Option<&Here>, place: Place, task: Task, hint: Hint) {
        self.priorities.note(task.priority());
        match (place, from) {
            (Place::Local, Some(here)) if matches!(hint, Hint::Fork | Hint::Scoped) => {
                self.forks().push(here, task)
            }
            (Place::Local, Some(here)) => self.deques.push(here, task),
            (Place::Worker(i), _) if i < self.inboxes.slots() => self.inboxes.of(i).push(task),
            _ => self.global.push(task),
        }
    }

    #[inline]
    fn dequeue(&self, here: &Here, hint: Hint) -> Option<Task> {
        if hint == Hint::Wait {
            return self.forks().pop(here);
        }
        if !self.priorities.mixed() {
            // Every task is at `Normal`'s level: serve that level alone.
            let l = level_of(Priority::Normal, self.levels);
            let own = self.forks().pop_level(here, l).or_else(|| {
                self.forks
                    .is_some()
                    .then(|| self.deques.pop_level(here, l))
                    .flatten()
            });
            return own
                .or_else(|| self.inboxes.of(here.index()).take_level(l, None).success())
                .or_else(|| retrying(|| self.global.take_level(l, Some((&self.deques, here)))));
        }
        self.next_through(here, self.levels - 1)
    }

    fn idle(&self, here: &Here, _round: u32, hint: Hint) -> Idle {
        let n = self.deques.slots();
        let start = first_victim(self.spec.victims, &self.cursors, here, n);
        let mut retry = false;
        for k in 0..n {
            let victim = (start + k) % n;
            if victim == here.index() {
                continue;
            }
            let mut steal = |d: &Deques| match d.steal(here, victim, self.lifo) {
                Steal::Success(t) => Some(t),
                Steal::Retry => {
                    retry = true;
                    None
                }
                Steal::Empty => None,
            };
            let found = steal(self.forks()).or_else(|| {
                (hint != Hint::Wait && self.forks.is_some())
                    .then(|| steal(&self.deques))
                    .flatten()
            });
            if let Some(t) = found {
                return if self.info.roster().is_active(victim) {
                    Idle::Run(t)
                } else {
                    Idle::Migrated(t)
                };
            }
        }
        if hint == Hint::Wait {
            return if retry { Idle::Retry } else { Idle::Park };
        }
        match self.inboxes.take_orphaned(here, self.info.roster()) {
            Steal::Success(t) => return Idle::Migrated(t),
            Steal::Retry => retry = true,
            Steal::Empty => {}
        }
        match self.global.take_batch(&self.deques, here) {
            Steal::Success(t) => Idle::Run(t),
            Steal::Retry => Idle::Retry,
            Steal::Empty if retry => Idle::Retry,
            Steal::Empty => Idle::Park,
        }
    }

    fn waiters_find_local(&self, hint: Hint) -> bool {
        // `local-fifo` keeps spawned tasks in its FIFO deque, which waiters
        // do not serve.
        self.forks.is_none() || matches!(hint, Hint::Fork | Hint::Scoped)
    }

    fn preempt(&self, here: &Here, running: Priority) -> Option<Task> {
        self.next_through(here, level_of(running, self.levels))
    }

    fn drain(&self, _here: &Here, _hint: Hint) {
        // Nothing to move: `idle` steals from every deque, also a retired
        // worker's, and empties the inboxes of workers without a CPU.
        // (Moving its tasks to the shared queue would hide them from
        // waiting workers, which may need them: fork halves of joins still
        // on some worker's stack can be there after batch steals.)
    }

    fn queued(&self, worker: Option<usize>) -> usize {
        match worker {
            Some(i) if i < self.inboxes.slots() => {
                let forks = self.forks.as_ref().map_or(0, |f| f.len(i));
                self.deques.len(i) + forks + self.inboxes.of(i).len()
            }
            Some(_) => 0,
            None => self.global.len(),
        }
    }
}
