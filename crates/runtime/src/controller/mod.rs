//! The thread controller: every worker's loop (Sting's thread controller).
//!
//! The controller owns the mechanisms — running tasks, looking for work,
//! spinning then sleeping, following the CPU assignment — and asks the
//! pool's [`ThreadPolicy`] for every decision (where a task goes, what runs
//! next, whom to steal from, whom to wake, where a retiring worker's tasks
//! go).
//!
//! # Worker slots
//!
//! A pool has a fixed number of *slots* (at least the machine's CPU count).
//! Slot `i` is served by one OS thread for the pool's whole life, started
//! the first time the slot gets a CPU. Each slot has:
//!
//! - `target`: the CPU the monitor assigned (`cpu + 1`, 0 = none), written
//!   only by the monitor (`crate::monitor`);
//! - `current`: the CPU the worker is pinned to and serving (`cpu + 1`,
//!   0 = dormant), written only by the worker.
//!
//! The slot is *settled* when `current == target`; the pool is resized when
//! every slot is settled.
//!
//! # Following the assignment (retirement protocol)
//!
//! A worker compares `target` with `current` between tasks, and in every
//! round of looking for work (also inside `join` waits):
//!
//! 1. same → nothing;
//! 2. another CPU → pin itself there, store `current` (re-pin; its queue
//!    and any task on its stack come along);
//! 3. none, at the top of its loop (no task on its stack) → retire:
//!    `drain` its queues through the policy (the shipped policies leave
//!    them where they are: every worker's queue is stolen from), wake a
//!    sleeper through the fenced path, leave the roster, `current = 0`,
//!    then park `DORMANT` until a CPU is assigned again;
//! 4. none, inside a wait (a task is on its stack, and tasks are never
//!    preempted) → take no new work: no more tasks from its queue (a
//!    joiner does not even take its own `b` back; others steal it), no
//!    steals; only the awaited work's claimable part ("Waiting" below).
//!    It wakes one sleeper, once, for the tasks in its queue, and parks
//!    `DORMANT` — not counted as a sleeper, so never woken for work — until
//!    its wait is over, a claim appears, or its assignment changes; it
//!    retires when it is back at the top.
//!
//! Because a worker only retires with an empty stack, and its queues stay
//! reachable (drained, or stolen from) while it waits and after it retired,
//! and queues return each task exactly once, no task is lost or run twice
//! across a resize.
//!
//! # Waiting (the nesting rule)
//!
//! A task never blocks its worker to wait for other tasks (`join`'s second
//! half, a scope's tasks, a `JoinHandle`): the worker looks for work
//! meanwhile (`WorkerThread::wait`) and runs it *nested on its own stack*,
//! returning to the waiting task when the wait is over. What a waiter may
//! run is therefore limited to work that cannot nest without bound:
//!
//! 1. through the policy, with `Hint::Wait`: tasks from the worker's own
//!    queues, newest first (a `join` finds its second half there);
//! 2. the awaited work itself, if nobody started it and it sits where
//!    waiters do not look (the global queue): a `JoinHandle::join` runs the
//!    handle's task, a scope's owner runs tasks spawned into the scope from
//!    outside the pool; they claim them directly ([`Waited::claim`],
//!    `crate::claim`). (A task placed in its creator's own queues needs no
//!    claim: waiters reach it through 1 and 3.)
//! 3. through the policy, with `Hint::Wait`: tasks stolen from other
//!    workers' own queues — never the global queue (the contract is in
//!    `crate::policy`, "Waiting workers").
//!
//! Taking the oldest task of the global queue, as any FIFO waiter would,
//! nests an unrelated task that may wait and take the next one, one frame
//! per queued task: a scope of 50 000 tasks that each open a scope
//! overflowed the stack that way. With the rule, a waiter nests an
//! unrelated task only when the work it forked itself was stolen.
//!
//! Every wait can still finish: the awaited work is in the waiter's own
//! queue (1), claimable (2), or in some worker's own queue, which every
//! other worker steals from (3) — policies keep structured work
//! (`Hint::Fork`, `Hint::Scoped`) there, also after its worker retired —
//! or it is running on another worker.

mod search;

use search::Found;

use crate::affinity;
use crate::policy::{Here, Hint, Place};
use crate::registry::Registry;
use crate::stats::{WorkerCounters, bump};
use crate::sync::CoreLatch;
use crate::task::{JobResult, Priority, StackJob, Task};
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Aborts the process when dropped, i.e. when a panic unwinds through it
/// before [`AbortOnUnwind::disarm`]: the guard of a window in which a frame
/// on this stack is reachable from other threads.
///
/// A `join`'s second half, a scope's tasks and an installed job point into
/// the frame of the code that waits for them, and any worker may run them —
/// write a result and set a latch in that frame — until the waiter has seen
/// them finish. Task panics are caught, so inside such a window only the
/// thread policy can unwind (it is safe code, `Builder::policy_with`), and
/// nothing but aborting is sound: unwinding frees the frame while a task
/// still points into it; the wait cannot be finished first, because it
/// needs the policy that just panicked and whose queues are in an unknown
/// state; and a frame cannot outlive the unwinding of its thread. (rayon
/// guards the same windows with `AbortIfPanic`.)
#[must_use = "a guard dropped at once guards nothing"]
pub(crate) struct AbortOnUnwind;

impl AbortOnUnwind {
    /// Closes the window: the frame is no longer shared.
    pub(crate) fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        allot_proto::app_log!(
            Error,
            "allot-runtime",
            "the thread policy panicked while a task's frame was shared with other workers; \
             aborting (unwinding that frame would be undefined behaviour)"
        );
        std::process::abort();
    }
}

thread_local! {
    static CURRENT: Cell<*const WorkerThread> = const { Cell::new(std::ptr::null()) };
}

/// The state a worker thread keeps on its own stack.
#[derive(Debug)]
pub(crate) struct WorkerThread {
    pub(crate) registry: Arc<Registry>,
    pub(crate) here: Here,
    /// The task running innermost on this stack (saved and restored around
    /// every nested run).
    running: Cell<Running>,
    /// Numbers the runs of this worker (`Running::seq`).
    runs: Cell<u64>,
    /// The run whose quantum is being timed, and when it is used up.
    quantum: Cell<(u64, Option<Instant>)>,
    /// Tasks running nested through `yield_now` on this stack now.
    yield_depth: Cell<u32>,
    /// This worker's counters in `registry.stats` (kept alive by
    /// `registry`), so that counting a task is one store, not a walk
    /// from the registry.
    counters: NonNull<WorkerCounters>,
}

/// The task a worker runs: its priority (inherited by what it forks) and
/// the number of its run on this worker.
#[derive(Debug, Clone, Copy, Default)]
struct Running {
    priority: Priority,
    seq: u64,
}

/// A worker samples its queue's length for the high-water statistic on
/// every this many pushes. At 8 the sampling cost 3 % of a scope of 100
/// empty tasks (crates/runtime/BENCHMARKS.md, "What the per-worker
/// statistics cost"); a queue that grows by fewer pushes between samples
/// than this is under-reported by at most that many tasks.
const QUEUE_SAMPLE: u64 = 64;

/// Most tasks `yield_now` runs nested on one stack at once.
const MAX_YIELD_DEPTH: u32 = 4;

/// The priority of the task running on this thread, if it is a pool's
/// worker running a task.
pub fn current_priority() -> Option<Priority> {
    // SAFETY: as in `yield_now`.
    let wt = unsafe { WorkerThread::current().as_ref() }?;
    (wt.running.get().seq != 0).then(|| wt.running.get().priority)
}

/// The slot index of the pool worker running on this thread, if any.
pub fn current_worker() -> Option<usize> {
    // SAFETY: as in `yield_now`.
    let wt = unsafe { WorkerThread::current().as_ref() }?;
    Some(wt.here.index())
}

/// Runs another ready task, nested, if the calling task has run longer
/// than its pool's quantum and the pool's policy has a ready task of the
/// same priority or higher; returns whether it did. Cheap enough to call
/// often (a clock read): call it at points in a long task where letting
/// others run is harmless.
///
/// Does nothing (returns false) outside a pool's worker, in a pool without
/// a quantum ([`Builder::quantum`](crate::Builder::quantum)), before the
/// quantum is used up, or when tasks are already nested four deep through
/// it on this worker.
pub fn yield_now() -> bool {
    let p = WorkerThread::current();
    if p.is_null() {
        return false;
    }
    // SAFETY: `CURRENT` is non-null only while `worker_main` runs on this
    // thread, and `wt` does not outlive this call.
    let wt = unsafe { &*p };
    wt.yield_now()
}

/// What a worker waits for inside a task (see "Waiting" in the module
/// docs).
pub(crate) trait Waited {
    /// Whether the wait is over. Whoever makes it true then calls
    /// `Sleep::notify_worker` for the waiting worker.
    fn done(&self) -> bool;

    /// A part of the awaited work that nobody started, claimed for the
    /// waiter to run now (it may sit in a queue waiting workers do not
    /// serve). Whoever makes a new claim possible while the waiter may be
    /// parked calls `Sleep::notify_worker` for it.
    fn claim(&self) -> Option<Task> {
        None
    }
}

impl Waited for CoreLatch {
    fn done(&self) -> bool {
        self.probe()
    }
}

impl WorkerThread {
    /// The worker running on this thread, if any.
    #[inline]
    pub(crate) fn current() -> *const WorkerThread {
        CURRENT.with(Cell::get)
    }

    /// The worker running on this thread if it serves `reg`.
    #[inline]
    pub(crate) fn current_in(reg: &Arc<Registry>) -> Option<&'static WorkerThread> {
        let p = Self::current();
        if p.is_null() {
            return None;
        }
        // SAFETY: `CURRENT` is non-null only while `worker_main` runs on
        // this thread, and everything that calls this runs inside it.
        let wt = unsafe { &*p };
        Arc::ptr_eq(&wt.registry, reg).then_some(wt)
    }

    /// Queues a task created on this worker and wakes a sleeper for it.
    ///
    /// A task kept in this worker's own queues skips the fence of the
    /// wake-up (this worker pops it before it sleeps; sleep README, "local
    /// pushes"); one placed elsewhere takes the fenced path, since this
    /// worker may be waiting inside a task and not serve that queue.
    #[inline]
    pub(crate) fn push(&self, task: Task, hint: Hint) {
        self.push_at(
            self.registry.policy.place(Some(&self.here), hint),
            task,
            hint,
        );
    }

    /// [`WorkerThread::push`] at a place the policy chose already.
    #[inline]
    pub(crate) fn push_at(&self, place: Place, task: Task, hint: Hint) {
        let reg = &*self.registry;
        // Parts of the running task run at its priority.
        let task = if matches!(hint, Hint::Fork | Hint::Scoped) {
            task.with_priority(self.running.get().priority)
        } else {
            task
        };
        reg.policy.enqueue(Some(&self.here), place, task, hint);
        let stats = self.stats();
        let created = bump(&stats.created);
        // The high-water mark is sampled (every `QUEUE_SAMPLE`th push):
        // asking a policy with several queues per worker for its length
        // reads lines other workers write, and costs more than the push.
        if place == Place::Local && created.is_multiple_of(QUEUE_SAMPLE) {
            stats.queue_len(reg.policy.queued(Some(self.here.index())));
        }
        reg.wake_for(Some(&self.here), place, hint, place != Place::Local);
    }

    #[inline]
    fn execute(&self, t: Task) {
        let seq = self.runs.get().wrapping_add(1);
        self.runs.set(seq);
        let outer = self.running.replace(Running {
            priority: t.priority(),
            seq,
        });
        let ran = panic::catch_unwind(AssertUnwindSafe(|| t.run()));
        self.running.set(outer);
        match ran {
            Ok(false) => return, // a waiter had claimed and run it
            Ok(true) => {}
            Err(_) => {
                self.registry.escaped_panics.fetch_add(1, Ordering::Relaxed);
            }
        }
        bump(&self.stats().run);
    }

    /// See [`yield_now`].
    fn yield_now(&self) -> bool {
        let Some(quantum) = self.registry.quantum else {
            return false;
        };
        let running = self.running.get();
        let now = Instant::now();
        match self.quantum.get() {
            (seq, Some(end)) if seq == running.seq => {
                if now < end {
                    return false;
                }
            }
            _ => {
                // The first yield of this run starts its quantum.
                self.quantum.set((running.seq, Some(now + quantum)));
                return false;
            }
        }
        let depth = self.yield_depth.get();
        if depth >= MAX_YIELD_DEPTH || self.serving() == 0 {
            return false;
        }
        let Some(t) = self.registry.policy.preempt(&self.here, running.priority) else {
            // Nothing ready: look again after an eighth of a quantum.
            self.quantum.set((running.seq, Some(now + quantum / 8)));
            return false;
        };
        bump(&self.stats().yielded);
        self.yield_depth.set(depth + 1);
        self.execute(t);
        self.yield_depth.set(depth);
        // A fresh quantum once the task goes on.
        self.quantum
            .set((running.seq, Some(Instant::now() + quantum)));
        true
    }

    /// Counts a task taken from a retired worker (stolen, and migrated).
    fn count_migrated(&self) {
        bump(&self.stats().stolen);
        bump(&self.stats().migrated);
    }

    /// This worker's statistics (written only here).
    #[inline]
    pub(crate) fn stats(&self) -> &WorkerCounters {
        // SAFETY: `counters` points into `self.registry`, which this
        // worker keeps alive, and is only read through here.
        unsafe { self.counters.as_ref() }
    }

    /// The CPU this worker serves (`cpu + 1`, 0 = none): its slot's
    /// `current`, which only this thread writes.
    fn serving(&self) -> usize {
        self.registry
            .slot(self.here.index())
            .current
            .load(Ordering::Relaxed)
    }

    /// Compares the assignment with the CPU served; re-pins if moved.
    /// Returns true if the worker must retire (no CPU).
    fn follow_assignment(&self) -> bool {
        let slot = self.registry.slot(self.here.index());
        let t = slot.target.load(Ordering::SeqCst);
        if t == self.serving() {
            return false;
        }
        if t == 0 {
            return true;
        }
        self.pin(t);
        self.registry
            .info
            .roster
            .serve(self.here.index(), Some(t - 1));
        slot.current.store(t, Ordering::SeqCst);
        false
    }

    fn pin(&self, t: usize) {
        if affinity::pin_current(t - 1).is_err() {
            self.registry.pin_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Runs `a` and `b`, possibly in parallel; `b` is offered to thieves
    /// and taken back if nobody stole it. Both always run; a panic of `a`
    /// (else of `b`) continues once both finished.
    pub(crate) fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        let job_b = StackJob::new(b, CoreLatch::new(self.here.index(), &self.registry.sleep));
        // SAFETY: `job_b` stays in this frame until its latch is set or the
        // task is taken back below (the guard aborts rather than unwind
        // earlier); the task is pushed once.
        let task_b = unsafe { job_b.as_task() };
        let id_b = task_b.id();
        let shared = AbortOnUnwind;
        self.push(task_b, Hint::Fork);
        let ra = panic::catch_unwind(AssertUnwindSafe(a));
        while !job_b.signal.probe() {
            if self.follow_assignment() {
                // Our CPU was revoked: take nothing more from our queue,
                // not even `b` (the others steal it); wait (see "Following
                // the assignment", step 4).
                self.wait(&job_b.signal);
                break;
            }
            match self.registry.policy.dequeue(&self.here, Hint::Wait) {
                Some(t) if t.id() == id_b => {
                    // Nobody stole `b`: run it here, without the latch;
                    // also when `a` panicked (both closures always run).
                    shared.disarm();
                    let f = job_b.take();
                    return match ra {
                        Ok(ra) => (ra, f()),
                        Err(p) => {
                            let _ = panic::catch_unwind(AssertUnwindSafe(f));
                            panic::resume_unwind(p)
                        }
                    };
                }
                Some(t) => self.execute(t),
                None => self.wait(&job_b.signal),
            }
        }
        shared.disarm();
        let ra = ra.unwrap_or_else(|p| panic::resume_unwind(p));
        match job_b.into_outcome() {
            JobResult::Done(rb) => (ra, rb),
            JobResult::Panicked(p) => panic::resume_unwind(p),
            JobResult::Pending => unreachable!("latch set before the result"),
        }
    }
}

/// The body of worker slot `index`'s thread.
pub(crate) fn worker_main(reg: Arc<Registry>, index: usize) {
    let counters = NonNull::from(&*reg.stats[index]);
    let wt = WorkerThread {
        here: Here::new(index, reg.info.id),
        registry: reg,
        running: Cell::new(Running::default()),
        runs: Cell::new(0),
        quantum: Cell::new((0, None)),
        yield_depth: Cell::new(0),
        counters,
    };
    let reg = &*wt.registry;
    CURRENT.with(|c| c.set(&wt));
    reg.sleep.register(index, std::thread::current());
    let slot = reg.slot(index);
    slot.tid.store(affinity::current_tid(), Ordering::SeqCst);
    reg.policy.init_worker(&wt.here);
    loop {
        let t = slot.target.load(Ordering::SeqCst);
        if t == 0 {
            if reg.terminate.load(Ordering::SeqCst) {
                break;
            }
            // Dormant bells are only notified (never woken for work), so
            // there is no wake-up for work to pass on.
            let s = reg.sleep.announce_dormant(index);
            if slot.target.load(Ordering::SeqCst) != 0 || reg.terminate.load(Ordering::SeqCst) {
                let _ = reg.sleep.cancel(s);
            } else {
                let _ = wt.stats().asleep(|| reg.sleep.park(s));
            }
            continue;
        }
        // Activate on CPU `t - 1`.
        wt.pin(t);
        reg.info.roster.serve(index, Some(t - 1));
        reg.info.roster.set(index, true);
        slot.current.store(t, Ordering::SeqCst);
        let mut hint = Hint::Resize;
        loop {
            // A time-triggered cell takes new tasks only in its windows.
            reg.windows.hold();
            let Found::Task(task) = wt.find_work(hint, None) else {
                break;
            };
            wt.execute(task);
            hint = Hint::Continue;
        }
        // Retire (or shut down): nothing is on our stack.
        if !reg.terminate.load(Ordering::SeqCst) {
            bump(&wt.stats().retired);
        }
        reg.policy.drain(&wt.here, Hint::Resize);
        reg.info.roster.set(index, false);
        reg.info.roster.serve(index, None);
        slot.current.store(0, Ordering::SeqCst);
        reg.wake_for(None, Place::Global, Hint::Resize, true);
        if reg.terminate.load(Ordering::SeqCst) {
            break;
        }
    }
    CURRENT.with(|c| c.set(std::ptr::null()));
}
