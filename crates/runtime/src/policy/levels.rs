//! Building blocks of the policy library: queues with priority levels and
//! placements (victim orders: `victims.rs`).
//!
//! A policy keeps `n` levels (1 to [`MAX_LEVELS`]); level 0 is served
//! first. [`level_of`] maps a task's [`Priority`] to its level: with three
//! levels each priority has its own, with two `High` is alone above the
//! rest, with one priorities are ignored. Every structure here takes from
//! the highest non-empty level, so a ready task never waits behind a task
//! of a lower priority in the same structure.
//!
//! Invariants (each structure): an element pushed is returned by exactly
//! one successful take; per level, the order is the primitive's (LIFO or
//! FIFO at the owner's end, oldest first for thieves, see `crate::queue`).

use std::cell::Cell;

use super::{Here, PoolInfo, WorkerLocal};
use crate::queue::{Injector, LocalQueue, Stack, Steal, Stealer};
use crate::task::{Priority, Task};

/// Most priority levels a policy keeps.
pub const MAX_LEVELS: usize = 3;

/// The level (0 = served first) of priority `p` among `n` levels.
#[inline]
pub fn level_of(p: Priority, n: usize) -> usize {
    (Priority::High as usize - p as usize).min(n.clamp(1, MAX_LEVELS) - 1)
}

/// Whether a pool has seen a task of another priority than `Normal`. Until
/// it has, every task sits at `Normal`'s level and a policy serves that
/// level alone (the common case, as cheap as one level). The flag is set
/// once and never cleared; a worker that does not see it yet serves
/// `Normal` tasks a moment longer, which ordering across threads allows
/// anyway.
#[derive(Debug, Default)]
pub struct PriorityUse(crate::loom::sync::atomic::AtomicBool);

impl PriorityUse {
    /// Records the priority of a task being queued.
    #[inline]
    pub fn note(&self, p: Priority) {
        use crate::loom::sync::atomic::Ordering::Relaxed;
        if p != Priority::Normal && !self.0.load(Relaxed) {
            self.0.store(true, Relaxed);
        }
    }

    /// Whether tasks of several priorities may be queued.
    #[inline]
    pub fn mixed(&self) -> bool {
        self.0.load(crate::loom::sync::atomic::Ordering::Relaxed)
    }
}

/// Combines the outcomes of taking from several queues in turn: the first
/// success wins; `Retry` if any lost a race; else `Empty`.
fn first_success<T>(tries: impl Iterator<Item = Steal<T>>) -> Steal<T> {
    let mut retry = false;
    for s in tries {
        match s {
            Steal::Success(t) => return Steal::Success(t),
            Steal::Retry => retry = true,
            Steal::Empty => {}
        }
    }
    if retry { Steal::Retry } else { Steal::Empty }
}

/// Calls `take` until it stops losing races: the task, or `None` once it
/// finds nothing.
#[inline]
pub fn retrying(mut take: impl FnMut() -> Steal<Task>) -> Option<Task> {
    loop {
        match take() {
            Steal::Success(t) => return Some(t),
            Steal::Empty => return None,
            Steal::Retry => crate::loom::hint::spin_loop(),
        }
    }
}

/// One deque per level for every worker, with their stealers.
#[derive(Debug)]
pub struct Deques {
    locals: WorkerLocal<Box<[LocalQueue<Task>]>>,
    stealers: Box<[Box<[Stealer<Task>]>]>,
    levels: usize,
}

impl Deques {
    /// Deques for every slot of `info`; `lifo` chooses the owner's order.
    pub fn new(info: &PoolInfo, levels: usize, lifo: bool) -> Deques {
        let levels = levels.clamp(1, MAX_LEVELS);
        let make = || {
            if lifo {
                LocalQueue::new_lifo()
            } else {
                LocalQueue::new_fifo()
            }
        };
        let queues: Vec<Box<[LocalQueue<Task>]>> = (0..info.slots())
            .map(|_| (0..levels).map(|_| make()).collect())
            .collect();
        let stealers = queues
            .iter()
            .map(|qs| qs.iter().map(LocalQueue::stealer).collect())
            .collect();
        let mut queues = queues.into_iter();
        let locals = WorkerLocal::new(info, |_| queues.next().expect("one set per slot"));
        Deques {
            locals,
            stealers,
            levels,
        }
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.stealers.len()
    }

    /// Pushes on the caller's deque of the task's level.
    #[inline]
    pub fn push(&self, here: &Here, task: Task) {
        let l = level_of(task.priority(), self.levels);
        self.locals.get(here)[l].push(task);
    }

    /// The caller's next task of level `..=last`, highest level first.
    #[inline]
    pub fn pop_through(&self, here: &Here, last: usize) -> Option<Task> {
        let own = self.locals.get(here);
        // `is_empty` first: a LIFO pop of an empty deque costs a fence.
        own.iter()
            .take(last + 1)
            .filter(|q| !q.is_empty())
            .find_map(LocalQueue::pop)
    }

    /// The caller's next task of level `l` only.
    #[inline]
    pub fn pop_level(&self, here: &Here, l: usize) -> Option<Task> {
        self.locals.get(here).get(l).and_then(LocalQueue::pop)
    }

    /// The caller's next task, highest level first.
    #[inline]
    pub fn pop(&self, here: &Here) -> Option<Task> {
        self.pop_through(here, MAX_LEVELS)
    }

    /// Steals from worker `victim`, highest level first; with `batch`, moves
    /// about half of that level into the caller's deque of the same level.
    /// Empty levels are skipped before any steal: a steal attempt pins the
    /// memory-reclamation epoch even when it finds nothing, and idle
    /// workers make one per level per victim on every search.
    pub fn steal(&self, here: &Here, victim: usize, batch: bool) -> Steal<Task> {
        let own = self.locals.get(here);
        first_success(
            self.stealers[victim]
                .iter()
                .zip(own.iter())
                .filter(|(s, _)| !s.is_empty())
                .map(|(s, mine)| {
                    if batch {
                        s.steal_batch_and_pop(mine)
                    } else {
                        s.steal()
                    }
                }),
        )
    }

    /// Tasks in worker `i`'s deques now.
    pub fn len(&self, i: usize) -> usize {
        self.stealers
            .get(i)
            .map_or(0, |qs| qs.iter().map(Stealer::len).sum())
    }
}

/// A queue shared by all workers, one per level, FIFO or LIFO.
#[derive(Debug)]
pub enum Shared {
    /// Oldest task first: independent tasks start in submission order.
    Fifo(Box<[Injector<Task>]>),
    /// Newest task first: a stack, so the latest submission starts next.
    Lifo(Box<[Stack<Task>]>),
}

impl Shared {
    /// A FIFO (`lifo == false`) or LIFO shared queue with `levels` levels.
    pub fn new(levels: usize, lifo: bool) -> Shared {
        let n = levels.clamp(1, MAX_LEVELS);
        if lifo {
            Shared::Lifo((0..n).map(|_| Stack::new()).collect())
        } else {
            Shared::Fifo((0..n).map(|_| Injector::new()).collect())
        }
    }

    fn levels(&self) -> usize {
        match self {
            Shared::Fifo(q) => q.len(),
            Shared::Lifo(q) => q.len(),
        }
    }

    /// Adds a task at its level.
    pub fn push(&self, task: Task) {
        let l = level_of(task.priority(), self.levels());
        match self {
            Shared::Fifo(q) => q[l].push(task),
            Shared::Lifo(q) => q[l].push(task),
        }
    }

    /// Takes one task of level `..=last`, highest level first.
    pub fn take_through(&self, last: usize) -> Steal<Task> {
        match self {
            Shared::Fifo(q) => first_success(
                q.iter()
                    .take(last + 1)
                    .filter(|q| !q.is_empty())
                    .map(Injector::steal),
            ),
            Shared::Lifo(q) => first_success(q.iter().take(last + 1).map(Stack::steal)),
        }
    }

    /// Takes one task of level `l` only; with `into`, a FIFO queue moves
    /// about half of that level into the worker's deque of the same level.
    pub fn take_level(&self, l: usize, into: Option<(&Deques, &Here)>) -> Steal<Task> {
        match (self, into) {
            (Shared::Fifo(q), _) if q[l].is_empty() => Steal::Empty,
            (Shared::Fifo(q), Some((deques, here))) => {
                q[l].steal_batch_and_pop(&deques.locals.get(here)[l])
            }
            (Shared::Fifo(q), None) => q[l].steal(),
            (Shared::Lifo(q), _) => q[l].steal(),
        }
    }

    /// Takes one task, highest level first.
    pub fn take(&self) -> Steal<Task> {
        self.take_through(MAX_LEVELS)
    }

    /// Like [`Shared::take`], retrying lost races until a task or `None`.
    pub fn take_now(&self) -> Option<Task> {
        retrying(|| self.take())
    }

    /// Takes a task for worker `here`, moving (FIFO) about half of the
    /// highest non-empty level into its deque of that level.
    pub fn take_batch(&self, deques: &Deques, here: &Here) -> Steal<Task> {
        match self {
            Shared::Fifo(q) => {
                let own = deques.locals.get(here);
                first_success(
                    q.iter()
                        .zip(own.iter())
                        .filter(|(g, _)| !g.is_empty())
                        .map(|(g, mine)| g.steal_batch_and_pop(mine)),
                )
            }
            Shared::Lifo(_) => self.take(),
        }
    }

    /// Tasks queued now.
    pub fn len(&self) -> usize {
        match self {
            Shared::Fifo(q) => q.iter().map(Injector::len).sum(),
            Shared::Lifo(q) => q.iter().map(Stack::len).sum(),
        }
    }

    /// Whether nothing is queued now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a policy places a new independent task (`Hint::Spawn`) created
/// on a worker. Tasks from outside the pool go to the shared queue unless
/// the placement names workers; a task given a worker explicitly
/// (`SpawnOptions::worker`) goes there whatever the placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum SpawnPlacement {
    /// The creating worker's own queues (outsiders: the shared queue).
    #[default]
    Local,
    /// Each active worker in turn.
    RoundRobin,
    /// A random active worker.
    Random,
    /// The active worker with the fewest queued tasks, an idle one (looking
    /// for work) before a busy one (Sting's preference for idle virtual
    /// processors).
    LeastLoaded,
    /// The creating worker's own queues until they hold the spec's
    /// `overflow` tasks; past that, an idle worker's inbox, else the
    /// shared queue, which every worker serves when its own queues are
    /// empty (Sting's overflow to a shared queue, idle processors first: a
    /// burst of spawns does not wait behind one worker).
    Overflow,
}

impl SpawnPlacement {
    /// Names as parsed.
    pub const NAMES: [&'static str; 5] =
        ["local", "round-robin", "random", "least-loaded", "overflow"];

    /// Its name as parsed and shown, one of `NAMES`.
    pub fn name(self) -> &'static str {
        match self {
            SpawnPlacement::Local => "local",
            SpawnPlacement::RoundRobin => "round-robin",
            SpawnPlacement::Random => "random",
            SpawnPlacement::LeastLoaded => "least-loaded",
            SpawnPlacement::Overflow => "overflow",
        }
    }
}

/// Per-worker cursors for round-robin decisions.
#[derive(Debug)]
pub struct Cursors(WorkerLocal<Cell<usize>>);

impl Cursors {
    /// One cursor per slot, each starting after its own worker.
    pub fn new(info: &PoolInfo) -> Cursors {
        Cursors(WorkerLocal::new(info, |i| Cell::new(i + 1)))
    }

    /// The caller's next position (mod `n`), advancing its cursor.
    pub fn next(&self, here: &Here, n: usize) -> usize {
        let c = self.0.get(here);
        let v = c.get();
        c.set(v.wrapping_add(1));
        v % n.max(1)
    }
}

/// Per-worker inboxes: FIFO queues (with levels) any thread pushes to, for
/// tasks placed on a given worker. The owner serves its inbox while it is
/// active; others take from the inbox of a worker that is not.
#[derive(Debug)]
pub struct Inboxes(Box<[Shared]>);

impl Inboxes {
    /// One inbox per slot of `info`.
    pub fn new(info: &PoolInfo, levels: usize) -> Inboxes {
        Inboxes(
            (0..info.slots())
                .map(|_| Shared::new(levels, false))
                .collect(),
        )
    }

    /// Worker `i`'s inbox.
    pub fn of(&self, i: usize) -> &Shared {
        &self.0[i]
    }

    /// Number of inboxes.
    pub fn slots(&self) -> usize {
        self.0.len()
    }

    /// A task from the inbox of any worker other than `here` (offers: any
    /// worker may run them).
    pub fn take_others(&self, here: &Here) -> Steal<Task> {
        let n = self.slots();
        first_success(
            (1..n)
                .map(|k| (here.index() + k) % n)
                .map(|i| self.0[i].take()),
        )
    }

    /// A task from the inbox of a worker other than `here` that holds no
    /// CPU (tasks placed on it that it will not run).
    pub fn take_orphaned(&self, here: &Here, roster: &super::Roster) -> Steal<Task> {
        first_success(
            (0..self.slots())
                .filter(|i| *i != here.index() && !roster.is_active(*i))
                .map(|i| self.0[i].take()),
        )
    }
}

/// The worker a placement picks for a new task, or `None` to keep it local
/// (or shared, from outside).
pub fn place_on(
    placement: SpawnPlacement,
    info: &PoolInfo,
    cursors: &Cursors,
    from: Option<&Here>,
    load: impl Fn(usize) -> usize,
) -> Option<usize> {
    let roster = info.roster();
    let n = info.slots();
    let active = |i: &usize| roster.is_active(*i);
    match placement {
        SpawnPlacement::Local | SpawnPlacement::Overflow => None,
        SpawnPlacement::RoundRobin | SpawnPlacement::Random => {
            let start = match (placement, from) {
                (SpawnPlacement::RoundRobin, Some(h)) => cursors.next(h, n),
                (SpawnPlacement::Random, Some(h)) => (h.random() % n as u64) as usize,
                // Outsiders have no cursor or stream: the least loaded.
                _ => return least_loaded(roster, n, load),
            };
            (0..n).map(|k| (start + k) % n).find(active)
        }
        SpawnPlacement::LeastLoaded => least_loaded(roster, n, load),
    }
}

/// The active worker with the fewest queued tasks, idle ones first.
fn least_loaded(roster: &super::Roster, n: usize, load: impl Fn(usize) -> usize) -> Option<usize> {
    (0..n)
        .filter(|&i| roster.is_active(i))
        .min_by_key(|&i| (!roster.is_idle(i), load(i)))
}

/// An active worker other than `here` that is looking for work, searching
/// from the one after `here`.
pub fn idle_worker(roster: &super::Roster, here: usize) -> Option<usize> {
    let n = roster.slots();
    (1..n)
        .map(|k| (here + k) % n)
        .find(|&i| roster.is_active(i) && roster.is_idle(i))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn least_loaded_placement_prefers_an_idle_worker() {
        let info = PoolInfo::new(3);
        let cursors = Cursors::new(&info);
        for i in 0..3 {
            info.roster.set(i, true);
        }
        let load = |i: usize| [5, 0, 2][i];
        let place = || place_on(SpawnPlacement::LeastLoaded, &info, &cursors, None, load);
        assert_eq!(place(), Some(1), "nobody idle: the least loaded");
        info.roster.set_idle(2, true);
        assert_eq!(
            place(),
            Some(2),
            "an idle worker before a busier-looking one"
        );
        info.roster.set_idle(0, true);
        assert_eq!(place(), Some(2), "among idle ones, the least loaded");
        assert_eq!(idle_worker(&info.roster, 2), Some(0));
        assert_eq!(idle_worker(&info.roster, 0), Some(2));
        info.roster.set(2, false);
        assert_eq!(idle_worker(&info.roster, 0), None, "only active workers");
    }

    #[test]
    fn levels_map_priorities_from_the_top() {
        use Priority::*;
        assert_eq!([High, Normal, Low].map(|p| level_of(p, 3)), [0, 1, 2]);
        assert_eq!([High, Normal, Low].map(|p| level_of(p, 2)), [0, 1, 1]);
        assert_eq!([High, Normal, Low].map(|p| level_of(p, 1)), [0, 0, 0]);
        assert_eq!(level_of(Low, 0), 0);
    }

    fn task(p: Priority, log: &std::sync::Arc<std::sync::Mutex<Vec<Priority>>>) -> Task {
        let log = log.clone();
        Task::heap(move || log.lock().unwrap().push(p)).with_priority(p)
    }

    #[test]
    fn shared_and_deques_serve_the_highest_level_first() {
        let info = PoolInfo::new(2);
        let here = Here::new(0, info.id);
        for lifo in [false, true] {
            let log = Default::default();
            let shared = Shared::new(3, lifo);
            let deques = Deques::new(&info, 3, lifo);
            for p in [
                Priority::Low,
                Priority::Normal,
                Priority::High,
                Priority::Normal,
            ] {
                shared.push(task(p, &log));
                deques.push(&here, task(p, &log));
            }
            while let Some(t) = shared.take_now() {
                t.run();
            }
            while let Some(t) = deques.pop(&here) {
                t.run();
            }
            use Priority::*;
            let want = [High, Normal, Normal, Low];
            let got = log.lock().unwrap().clone();
            assert_eq!(got, [want, want].concat(), "lifo={lifo}");
        }
    }

    #[test]
    fn thieves_take_the_highest_level_and_pop_through_stops() {
        let info = PoolInfo::new(2);
        let (a, b) = (Here::new(0, info.id), Here::new(1, info.id));
        let log = Default::default();
        let deques = Deques::new(&info, 3, true);
        deques.push(&a, task(Priority::Low, &log));
        deques.push(&a, task(Priority::High, &log));
        assert_eq!(deques.len(0), 2);
        assert!(deques.pop_through(&b, 0).is_none());
        match deques.steal(&b, 0, false) {
            Steal::Success(t) => assert_eq!(t.priority(), Priority::High),
            other => panic!("expected a steal, got {other:?}"),
        }
        // Only levels 0..=1 asked for: the low task stays.
        assert!(deques.pop_through(&a, 1).is_none());
        let low = deques.pop(&a).unwrap();
        assert_eq!(low.priority(), Priority::Low);
        low.run();
    }

    #[test]
    fn placements_pick_active_workers() {
        let info = PoolInfo::new(4);
        let cursors = Cursors::new(&info);
        let here = Here::new(0, info.id);
        assert_eq!(
            place_on(SpawnPlacement::Local, &info, &cursors, Some(&here), |_| 0),
            None
        );
        // Nobody active: nowhere to place.
        assert_eq!(
            place_on(
                SpawnPlacement::RoundRobin,
                &info,
                &cursors,
                Some(&here),
                |_| 0
            ),
            None
        );
        info.roster.set(1, true);
        info.roster.set(3, true);
        let rr: Vec<_> = (0..4)
            .map(|_| {
                place_on(
                    SpawnPlacement::RoundRobin,
                    &info,
                    &cursors,
                    Some(&here),
                    |_| 0,
                )
            })
            .collect();
        assert!(rr.iter().all(|w| matches!(w, Some(1 | 3))), "{rr:?}");
        assert!(rr.contains(&Some(1)) && rr.contains(&Some(3)), "{rr:?}");
        let least = place_on(SpawnPlacement::LeastLoaded, &info, &cursors, None, |i| {
            10 - i
        });
        assert_eq!(least, Some(3));
        for _ in 0..20 {
            let w = place_on(SpawnPlacement::Random, &info, &cursors, Some(&here), |_| 0);
            assert!(matches!(w, Some(1 | 3)));
        }
    }
}
