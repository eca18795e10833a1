//! `fifo`: one global FIFO queue for independent tasks (Sting's "Global
//! FIFO" policy manager), with structured work kept by the worker that
//! created it.
//!
//! - placement: every spawned or installed task (`Hint::Spawn`) goes to the
//!   global queue, whoever creates it, so independent tasks start in
//!   submission order. The second half of a `join` (`Hint::Fork`) and a
//!   scoped task created on a worker (`Hint::Scoped`) are not independent:
//!   they are parts of the running task, which will wait for them. They go
//!   on the creating worker's own deque (the *fork deque*), where others
//!   can steal them. (A waiting worker runs tasks nested on its stack; had
//!   these parts gone to the global queue, a waiter would have to take the
//!   oldest global task to reach them and would nest unrelated work without
//!   bound. Sting's threads had their own stacks and did not have this
//!   problem.)
//! - dequeue: the worker's fork deque (newest first), then the oldest task
//!   of the global queue — except when waiting (`Hint::Wait`): fork deque
//!   only;
//! - idle: the global queue (not when waiting), then the fork deques of
//!   other workers;
//! - drain: nothing to move; fork deques are stolen from whether or not
//!   their worker is active.

use super::{Here, Hint, Idle, Place, PoolInfo, ThreadPolicy, WorkerLocal};
use crate::queue::{Injector, LocalQueue, Steal, Stealer};
use crate::task::Task;

/// The `fifo` thread policy. See the module docs.
#[derive(Debug)]
pub struct Fifo {
    global: Injector<Task>,
    forks: WorkerLocal<LocalQueue<Task>>,
    stealers: Box<[Stealer<Task>]>,
}

impl Fifo {
    /// A `fifo` policy for the pool `info` describes.
    pub fn new(info: &PoolInfo) -> Fifo {
        let queues: Vec<LocalQueue<Task>> =
            (0..info.slots()).map(|_| LocalQueue::new_lifo()).collect();
        let stealers = queues.iter().map(LocalQueue::stealer).collect();
        let mut queues = queues.into_iter();
        let forks = WorkerLocal::new(info, |_| queues.next().expect("one queue per slot"));
        Fifo {
            global: Injector::new(),
            forks,
            stealers,
        }
    }

    fn take_global(&self) -> Option<Task> {
        loop {
            match self.global.steal() {
                Steal::Success(t) => return Some(t),
                Steal::Empty => return None,
                Steal::Retry => crate::loom::hint::spin_loop(),
            }
        }
    }
}

impl ThreadPolicy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn place(&self, from: Option<&Here>, hint: Hint) -> Place {
        if from.is_some() && matches!(hint, Hint::Fork | Hint::Scoped) {
            Place::Local
        } else {
            Place::Global
        }
    }

    fn enqueue(&self, from: Option<&Here>, place: Place, task: Task, _hint: Hint) {
        match (place, from) {
            (Place::Local, Some(here)) => self.forks.get(here).push(task),
            _ => self.global.push(task),
        }
    }

    fn dequeue(&self, here: &Here, hint: Hint) -> Option<Task> {
        let own = self.forks.get(here).pop();
        if own.is_some() || hint == Hint::Wait {
            return own;
        }
        self.take_global()
    }

    fn idle(&self, here: &Here, _round: u32, hint: Hint) -> Idle {
        let mut retry = false;
        if hint != Hint::Wait {
            match self.global.steal() {
                Steal::Success(t) => return Idle::Run(t),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
        }
        let n = self.stealers.len();
        let start = (here.random() % n as u64) as usize;
        for k in 0..n {
            let victim = (start + k) % n;
            if victim == here.index() {
                continue;
            }
            match self.stealers[victim].steal() {
                Steal::Success(t) => return Idle::Run(t),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
        }
        if retry { Idle::Retry } else { Idle::Park }
    }

    fn drain(&self, _here: &Here, _hint: Hint) {
        // Nothing to move: `idle` steals from every fork deque, also a
        // retired worker's. (Moving its tasks to the global queue would
        // hide them from waiting workers, which may need them.)
    }

    fn queued(&self, worker: Option<usize>) -> usize {
        match worker {
            Some(i) => self.stealers.get(i).map_or(0, Stealer::len),
            None => self.global.len(),
        }
    }
}
