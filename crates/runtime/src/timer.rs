//! The pool's timer: one thread, started by the first timed task, that
//! runs each sleeper's wake-up when it is due (the pool's wake-ups resume
//! sleeping tasks, [`Pool::spawn_after`](crate::Pool::spawn_after)).
//! Workers never wait for time; only this thread does. The timer knows
//! nothing of tasks: a wake-up is a closure, and dropping one unrun is how
//! its sleeper is cancelled.
//!
//! # Invariants
//!
//! - Every sleeper's wake-up runs once when due, or is dropped unrun when
//!   the timer stops; the heap is the only owner of a sleeper's wake-up.
//! - Wake-ups run and are dropped outside the heap's lock: the pool's take
//!   its gate and may wake a worker, and a cancel runs the task's
//!   completion.
//! - The thread holds the heap, not the pool: the heap's wake-ups hold the
//!   pool's registry, and [`Timers::stop`] (called when the pool is
//!   dropped) empties the heap, which breaks that cycle.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

/// The timer of one pool.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    heap: BinaryHeap<Sleeper>,
    /// Tie-break for equal deadlines: first added, first resumed.
    next_seq: u64,
    stopped: bool,
}

/// What a sleeper does when due; dropped unrun, it cancels.
pub(crate) type WakeUp = Box<dyn FnOnce() + Send>;

/// A wake-up and when to run it.
struct Sleeper {
    at: Instant,
    seq: u64,
    wake: WakeUp,
}

impl std::fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleeper")
            .field("at", &self.at)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

// `BinaryHeap` is a max-heap: the earliest deadline compares greatest.
impl Ord for Sleeper {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for Sleeper {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Sleeper {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Sleeper {}

impl Timers {
    /// Runs `wake` at `at` (at once if that has passed). After
    /// [`Timers::stop`], or if the thread cannot start, drops it unrun.
    pub(crate) fn add(&self, pool_name: &str, at: Instant, wake: WakeUp) {
        {
            let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
            let mut st = self.lock();
            if st.stopped {
                drop(st);
                drop(thread);
                drop(wake); // cancels
                return;
            }
            if thread.is_none() {
                let shared = self.shared.clone();
                let started = std::thread::Builder::new()
                    .name(format!("{pool_name}-timer"))
                    .spawn(move || shared.run());
                match started {
                    Ok(h) => *thread = Some(h),
                    Err(e) => {
                        drop(st);
                        drop(thread);
                        allot_proto::app_log!(
                            Error,
                            "allot-runtime",
                            "cannot start the timer thread ({e}); the timed task is cancelled"
                        );
                        drop(wake);
                        return;
                    }
                }
            }
            let seq = st.next_seq;
            st.next_seq += 1;
            let earliest = st.heap.peek().is_none_or(|s| at < s.at);
            st.heap.push(Sleeper { at, seq, wake });
            if earliest {
                self.shared.changed.notify_one();
            }
        }
    }

    /// Stops the thread and cancels every sleeper it still holds; later
    /// `add`s cancel at once.
    pub(crate) fn stop(&self) {
        let handle = {
            let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
            self.lock().stopped = true;
            self.shared.changed.notify_one();
            thread.take()
        };
        if let Some(h) = handle
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
        // If the thread never ran (or could not start), the heap is empty;
        // else the thread emptied it. Drop anything left, outside the lock.
        let left = std::mem::take(&mut self.lock().heap);
        drop(left);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.lock()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The timer thread: sleep until the earliest deadline, resume what is
    /// due, until stopped.
    fn run(&self) {
        let mut st = self.lock();
        loop {
            if st.stopped {
                let left = std::mem::take(&mut st.heap);
                drop(st);
                drop(left); // cancels every sleeper
                return;
            }
            let now = Instant::now();
            let mut due = Vec::new();
            while st.heap.peek().is_some_and(|s| s.at <= now) {
                due.extend(st.heap.pop());
            }
            if !due.is_empty() {
                drop(st);
                for s in due {
                    (s.wake)();
                }
                st = self.lock();
                continue;
            }
            st = match st.heap.peek().map(|s| s.at - now) {
                Some(wait) => {
                    self.changed
                        .wait_timeout(st, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .changed
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}
