//! `fifo`: one global FIFO queue for tasks (Sting's "Global FIFO" policy
//! manager), with fork halves kept by their forking worker.
//!
//! - placement: every spawned, scoped or installed task goes to the global
//!   queue, whoever creates it, so tasks start in submission order. The
//!   second half of a `join` (`Hint::Fork`) is not a new thread of control
//!   but the continuation of the running task; it goes on the forking
//!   worker's own deque, where others can steal it. (Running tasks on the
//!   worker's stack, a joiner that took the *oldest* global task while it
//!   waits would nest unrelated work without bound and overflow the stack;
//!   Sting's threads had their own stacks and did not have this problem.)
//! - dequeue: the worker's fork deque (newest first), then the oldest task
//!   of the global queue;
//! - idle: the global queue, then the fork deques of other workers;
//! - drain: a retiring worker moves its forks to the global queue.

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
        if from.is_some() && hint == Hint::Fork {
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

    fn dequeue(&self, here: &Here, _hint: Hint) -> Option<Task> {
        self.forks.get(here).pop().or_else(|| self.take_global())
    }

    fn idle(&self, here: &Here, _round: u32, _hint: Hint) -> Idle {
        let mut retry = false;
        match self.global.steal() {
            Steal::Success(t) => return Idle::Run(t),
            Steal::Retry => retry = true,
            Steal::Empty => {}
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

    fn drain(&self, here: &Here, _hint: Hint) {
        let forks = self.forks.get(here);
        while let Some(t) = forks.pop() {
            self.global.push(t);
        }
    }

    fn queued(&self, worker: Option<usize>) -> usize {
        match worker {
            Some(i) => self.stealers.get(i).map_or(0, Stealer::len),
            None => self.global.len(),
        }
    }
}
