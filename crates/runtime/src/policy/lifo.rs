//! `lifo`: per-worker LIFO deques with random-victim stealing.
//!
//! - placement: a worker's new tasks go on its own deque; tasks from
//!   outside the pool (and `Place::Worker`, which deques cannot accept from
//!   other threads) go to the global FIFO queue;
//! - dequeue: own deque, newest first (depth-first, cache-warm), then a
//!   batch from the global queue — except when waiting (`Hint::Wait`): own
//!   deque only;
//! - idle: steal the *oldest* task (the biggest piece of a fork/join tree)
//!   from workers in a random rotation, once around, then the global queue
//!   (not when waiting); `Retry` if any steal lost a race, `Park` if all
//!   were empty;
//! - drain: nothing to move (see the invariant).
//!
//! Invariant: deque `i` is pushed and popped only by the worker holding
//! slot `i` (enforced by `WorkerLocal`); other threads only steal. Workers
//! that are not active are still stolen from, so a retired worker's tasks
//! are never stranded and stay where waiting workers find them.

use super::{Here, Hint, Idle, Place, PoolInfo, ThreadPolicy, WorkerLocal};
use crate::queue::{Injector, LocalQueue, Steal, Stealer};
use crate::task::Task;

/// The `lifo` thread policy. See the module docs.
#[derive(Debug)]
pub struct Lifo {
    locals: WorkerLocal<LocalQueue<Task>>,
    stealers: Box<[Stealer<Task>]>,
    global: Injector<Task>,
}

impl Lifo {
    /// A `lifo` policy for the pool `info` describes.
    pub fn new(info: &PoolInfo) -> Lifo {
        let queues: Vec<LocalQueue<Task>> =
            (0..info.slots()).map(|_| LocalQueue::new_lifo()).collect();
        let stealers = queues.iter().map(LocalQueue::stealer).collect();
        let mut queues = queues.into_iter();
        let locals = WorkerLocal::new(info, |_| queues.next().expect("one queue per slot"));
        Lifo {
            locals,
            stealers,
            global: Injector::new(),
        }
    }
}

impl ThreadPolicy for Lifo {
    fn name(&self) -> &'static str {
        "lifo"
    }

    #[inline]
    fn enqueue(&self, from: Option<&Here>, place: Place, task: Task, _hint: Hint) {
        match (place, from) {
            (Place::Local, Some(here)) => self.locals.get(here).push(task),
            _ => self.global.push(task),
        }
    }

    #[inline]
    fn dequeue(&self, here: &Here, hint: Hint) -> Option<Task> {
        let local = self.locals.get(here);
        if let Some(t) = local.pop() {
            return Some(t);
        }
        if hint == Hint::Wait {
            return None;
        }
        loop {
            match self.global.steal_batch_and_pop(local) {
                Steal::Success(t) => return Some(t),
                Steal::Empty => return None,
                Steal::Retry => crate::loom::hint::spin_loop(),
            }
        }
    }

    fn idle(&self, here: &Here, _round: u32, hint: Hint) -> Idle {
        let n = self.stealers.len();
        let local = self.locals.get(here);
        let start = (here.random() % n as u64) as usize;
        let mut retry = false;
        for k in 0..n {
            let victim = (start + k) % n;
            if victim == here.index() {
                continue;
            }
            match self.stealers[victim].steal_batch_and_pop(local) {
                Steal::Success(t) => return Idle::Run(t),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
        }
        if hint == Hint::Wait {
            return if retry { Idle::Retry } else { Idle::Park };
        }
        match self.global.steal_batch_and_pop(local) {
            Steal::Success(t) => Idle::Run(t),
            Steal::Retry => Idle::Retry,
            Steal::Empty if retry => Idle::Retry,
            Steal::Empty => Idle::Park,
        }
    }

    fn drain(&self, _here: &Here, _hint: Hint) {
        // Nothing to move: `idle` steals from every deque, also a retired
        // worker's. (Moving its tasks to the global queue would hide them
        // from waiting workers, which may need them: fork halves of joins
        // still on some worker's stack can be there after batch steals.)
    }

    fn queued(&self, worker: Option<usize>) -> usize {
        match worker {
            Some(i) => self.stealers.get(i).map_or(0, Stealer::len),
            None => self.global.len(),
        }
    }
}
