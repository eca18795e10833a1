//! `local-lifo` and `local-fifo`: per-worker deques with stealing (Sting's
//! "local" policy managers).
//!
//! - placement: a worker's new tasks go on its own deques, one per priority
//!   level; independent tasks (`Hint::Spawn`) go where the spec's
//!   [`SpawnPlacement`] says (its own deques by default) — another worker's
//!   *offers* for round-robin, random or least-loaded placement (and, past
//!   the spec's `overflow` tasks in its own deque, an idle worker's offers
//!   or the shared queue for overflow placement); its *inbox* for a task
//!   given a worker by name. Tasks from outside the pool go to the
//!   shared FIFO queue (or a worker's offers, when the placement names
//!   workers);
//! - the worker's own deques: `local-lifo` keeps all its tasks in one LIFO
//!   deque (newest first: depth-first, cache-warm). `local-fifo` keeps
//!   spawned tasks in a FIFO deque (oldest first: breadth-first, fair among
//!   siblings) and structured work (`Hint::Fork`, `Hint::Scoped`) in a LIFO
//!   *fork deque*, because a waiting worker must find the newest part of
//!   its own work first: taking the oldest would nest a sibling that waits
//!   in turn and takes the next, one stack frame per queued task;
//! - dequeue, level by level from the highest: the fork deque, the own
//!   deque, the inbox, the offers, then the shared queue (a batch of it
//!   moves into the deque). When waiting (`Hint::Wait`): the fork deque
//!   only (the one deque of `local-lifo`);
//! - idle: steal the *oldest* task of the highest level from the other
//!   workers (fork deque, then own deque; only fork deques when waiting),
//!   once around in the spec's [`Victims`](super::Victims) order
//!   (`victims.rs`); then (not when waiting) the other workers' offers
//!   (a task offered to a worker busy with a long task is not left waiting
//!   for it while this one idles), then
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
//! structured work stays where waiting workers find it. A task in an
//! inbox runs on its worker while that worker holds a CPU; a task in
//! offers runs on the first worker that looks for work there.

use super::levels::{
    Cursors, Deques, Inboxes, PriorityUse, Shared, SpawnPlacement, idle_worker, level_of, place_on,
    retrying,
};
use super::victims::VictimOrder;
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
    offers: Inboxes,
    global: Shared,
    cursors: Cursors,
    victims: VictimOrder,
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
            offers: Inboxes::new(info, levels),
            global: Shared::new(levels, false),
            cursors: Cursors::new(info),
            victims: VictimOrder::new(info, spec.victims),
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
            if let Some(t) = self.offers.of(here.index()).take_through(l).success() {
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
        if hint == Hint::Spawn
            && self.spec.placement == SpawnPlacement::Overflow
            && let Some(h) = from
            && self.deques.len(h.index()) >= self.spec.overflow as usize
        {
            return match idle_worker(self.info.roster(), h.index()) {
                Some(w) => Place::Offer(w),
                None => Place::Global,
            };
        }
        if hint == Hint::Spawn && self.spec.placement != SpawnPlacement::Local {
            let load = |i: usize| self.queued(Some(i));
            if let Some(w) = place_on(self.spec.placement, &self.info, &self.cursors, from, load) {
                return if from.is_some_and(|h| h.index() == w) {
                    Place::Local
                } else {
                    Place::Offer(w)
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
            (Place::Offer(i), _) if i < self.offers.slots() => self.offers.of(i).push(task),
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
                .or_else(|| self.offers.of(here.index()).take_level(l, None).success())
                .or_else(|| retrying(|| self.global.take_level(l, Some((&self.deques, here)))));
        }
        self.next_through(here, self.levels - 1)
    }

    fn idle(&self, here: &Here, _round: u32, hint: Hint) -> Idle {
        let mut retry = false;
        let load = |v: usize| self.deques.len(v) + self.forks.as_ref().map_or(0, |f| f.len(v));
        let found = self.victims.visit(here, load, |victim| {
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
            found.map(|t| {
                if self.info.roster().is_active(victim) {
                    Idle::Run(t)
                } else {
                    Idle::Migrated(t)
                }
            })
        });
        if let Some(idle) = found {
            return idle;
        }
        if hint == Hint::Wait {
            return if retry { Idle::Retry } else { Idle::Park };
        }
        match self.offers.take_others(here) {
            Steal::Success(t) => return Idle::Run(t),
            Steal::Retry => retry = true,
            Steal::Empty => {}
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
                self.deques.len(i) + forks + self.inboxes.of(i).len() + self.offers.of(i).len()
            }
            Some(_) => 0,
            None => self.global.len(),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::policy::{SpawnPlacement, ThreadPolicy, Victims};

    fn nothing() -> Task {
        Task::heap(|| ())
    }

    #[test]
    fn overflow_placement_keeps_at_most_the_threshold_and_shares_the_rest() {
        let info = PoolInfo::new(2);
        let mut spec = PolicySpec::new(super::super::PolicyKind::LocalLifo)
            .with_placement(SpawnPlacement::Overflow);
        spec.overflow = 3;
        let p = Local::new(&info, spec);
        let here = Here::new(0, info.id);
        for _ in 0..10 {
            let place = p.place(Some(&here), Hint::Spawn);
            p.enqueue(Some(&here), place, nothing(), Hint::Spawn);
        }
        assert_eq!(p.queued(Some(0)), 3, "the worker keeps the threshold");
        assert_eq!(p.queued(None), 7, "the rest wait in the shared queue");
        // An idle worker is offered the overflow first.
        info.roster.set(1, true);
        info.roster.set_idle(1, true);
        assert_eq!(p.place(Some(&here), Hint::Spawn), Place::Offer(1));
        // Structured work is never sent away.
        assert_eq!(p.place(Some(&here), Hint::Fork), Place::Local);
    }

    #[test]
    fn round_robin_offers_every_other_task_and_an_idle_worker_takes_offers() {
        let info = PoolInfo::new(2);
        let spec = PolicySpec::new(super::super::PolicyKind::LocalLifo)
            .with_placement(SpawnPlacement::RoundRobin);
        let p = Local::new(&info, spec);
        info.roster.set(0, true);
        info.roster.set(1, true);
        let (w0, w1) = (Here::new(0, info.id), Here::new(1, info.id));
        let places: Vec<Place> = (0..4).map(|_| p.place(Some(&w0), Hint::Spawn)).collect();
        assert_eq!(
            places,
            [Place::Offer(1), Place::Local, Place::Offer(1), Place::Local]
        );
        // Offered to worker 1, taken by worker 0 when it is idle first
        // (an inbox task, named for worker 1, would wait for it).
        p.enqueue(Some(&w1), Place::Offer(1), nothing(), Hint::Spawn);
        p.enqueue(Some(&w1), Place::Worker(1), nothing(), Hint::Spawn);
        assert!(matches!(p.idle(&w0, 0, Hint::Steal), Idle::Run(_)));
        assert!(matches!(p.idle(&w0, 0, Hint::Steal), Idle::Park));
        assert_eq!(p.queued(Some(1)), 1, "the named task stays");
    }

    #[test]
    fn a_most_loaded_thief_takes_from_the_longest_queue() {
        let info = PoolInfo::new(3);
        let spec =
            PolicySpec::new(super::super::PolicyKind::LocalLifo).with_victims(Victims::MostLoaded);
        let p = Local::new(&info, spec);
        let (w0, w1, w2) = (
            Here::new(0, info.id),
            Here::new(1, info.id),
            Here::new(2, info.id),
        );
        for (w, n) in [(&w0, 1), (&w1, 4)] {
            for _ in 0..n {
                p.enqueue(Some(w), Place::Local, nothing(), Hint::Spawn);
            }
        }
        info.roster.set(1, true);
        // Worker 2 steals from worker 1 (4 queued), not worker 0 (1), which
        // comes first in turn.
        let got = p.idle(&w2, 0, Hint::Steal);
        assert!(matches!(got, Idle::Run(_)), "{got:?}");
        assert_eq!(p.queued(Some(0)), 1, "worker 0's task stays");
        assert!(p.queued(Some(1)) < 4);
    }
}
