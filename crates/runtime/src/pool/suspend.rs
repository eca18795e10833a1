//! Suspended and timed tasks: tasks that exist, with a [`JoinHandle`],
//! but sit in no queue and hold no worker until they are resumed — Sting's
//! blocked threads and timed sleeps, for run-to-completion tasks.
//!
//! A task cannot stop half-way and keep its stack without holding its
//! worker, so suspension is by continuation: the part of the work that
//! must wait is made a suspended task ([`Pool::spawn_suspended`]), the
//! task that made it returns (its worker goes on with other work), and
//! whoever the continuation waits for resumes it ([`Resumer::resume`]). A
//! timed sleep is a continuation that the pool's timer thread resumes when
//! it is due ([`Pool::spawn_after`]).
//!
//! # Protocol
//!
//! - A suspended task is a spawned task whose job is made *held*
//!   (`ClaimJob::new_held`): nobody can claim it, so a worker joining its
//!   handle waits (running other work) instead of running it early. Its
//!   queued task is kept by the [`Resumer`], not by a queue.
//! - **Resume**: release the job (now a joiner may claim it, as for any
//!   spawned task), then queue its task where its [`SpawnOptions`] say, at
//!   its priority. `resume` consumes the resumer: a task is resumed at most
//!   once, by construction.
//! - **Cancel**: a resumer dropped unresumed sets the task's cancel flag,
//!   releases the job and runs its task on the dropping thread: the task's
//!   closure is dropped unrun and its handle completes with a
//!   [`TaskPanic`] that [`is_cancelled`](TaskPanic::is_cancelled). Then
//!   every worker is nudged, since a worker of the pool may be parked in a
//!   join of that handle and the completing thread is not one of them.
//! - **The gate**: resuming and dropping the pool are ordered by one mutex.
//!   A resume queues the task while holding it, and `Pool::drop` closes
//!   the gate (under it) before it shuts the workers down; a resume that
//!   finds the gate closed cancels instead. So a resumed task is either
//!   queued before the workers are told to stop (and runs: they drain
//!   their queues) or cancelled — never queued to a pool with no workers.
//!   The pool's timer is stopped after the gate closes, and drops the
//!   sleepers it still holds, which cancels them.
//!
//! Statistics: the worker that creates a suspended task counts it
//! (`tasks_suspended`), the worker that runs a resumed one counts that
//! (`tasks_resumed`); [`Pool::suspended`] says how many wait now.

use super::{JoinHandle, Packet, Pool, SpawnError, SpawnOptions};
use crate::claim::{Claim, ClaimJob};
use crate::controller::WorkerThread;
use crate::policy::{Hint, Place};
use crate::registry::Registry;
use crate::stats::bump;
use crate::task::{Task, TaskPanic};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

impl Pool {
    /// Creates `f` as a *suspended* task: it runs only once the returned
    /// [`Resumer`] resumes it (from any thread, at any later time), and it
    /// holds no worker and sits in no queue meanwhile. Resumed, it is queued
    /// as [`Pool::spawn_with`] would queue it now (`opts`: priority, named
    /// worker). Dropping the resumer instead cancels it: the handle's
    /// `join` then returns a [`TaskPanic`] whose
    /// [`is_cancelled`](TaskPanic::is_cancelled) is true; so does dropping
    /// the pool while the task waits.
    ///
    /// This is how a task suspends itself: it creates its continuation
    /// this way, hands the resumer to whatever it waits for, and returns.
    ///
    /// Fails, creating nothing, if `opts` names a worker the pool does not
    /// have.
    pub fn spawn_suspended<T, F>(
        &self,
        opts: SpawnOptions,
        f: F,
    ) -> Result<(Resumer, JoinHandle<T>), SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.check_worker(opts)?;
        Ok(suspend(&self.reg, opts, f))
    }

    /// Runs `f` once `delay` has passed, as a task queued as
    /// [`Pool::spawn_with`] would queue it then; until then it holds no
    /// worker (a timed sleep: the pool's timer thread resumes it when it is
    /// due, to within the timer's wake-up latency). Dropping the pool
    /// before then cancels it (see [`Pool::spawn_suspended`]).
    pub fn spawn_after<T, F>(
        &self,
        delay: Duration,
        opts: SpawnOptions,
        f: F,
    ) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.check_worker(opts)?;
        let (resumer, handle) = suspend(&self.reg, opts, f);
        let at = Instant::now().checked_add(delay).unwrap_or_else(far_future);
        self.reg.gate.timers.add(
            &self.reg.name,
            at,
            Box::new(move || {
                resumer.resume();
            }),
        );
        Ok(handle)
    }

    /// Suspended tasks (of [`Pool::spawn_suspended`] and
    /// [`Pool::spawn_after`]) neither resumed nor cancelled yet.
    pub fn suspended(&self) -> usize {
        self.reg.gate.waiting.load(Ordering::SeqCst)
    }
}

/// A deadline that never comes (about 30 years from now).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(30 * 365 * 24 * 3600)
}

/// Makes the suspended task of `f`: its resumer and its handle.
fn suspend<T, F>(reg: &Arc<Registry>, opts: SpawnOptions, f: F) -> (Resumer, JoinHandle<T>)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let cancelled = Arc::new(AtomicBool::new(false));
    let flag = cancelled.clone();
    let job = ClaimJob::new_held(
        Packet::new(),
        move |p: &Packet<T>| {
            // Acquire: pairs with the store of the thread that cancelled.
            if flag.load(Ordering::Acquire) {
                // Dropping the closure runs user code: keep its panic.
                let dropped = panic::catch_unwind(AssertUnwindSafe(move || drop(f)));
                p.complete(Err(dropped
                    .err()
                    .map_or_else(TaskPanic::cancelled, TaskPanic::new)));
                return;
            }
            let wt = WorkerThread::current();
            if !wt.is_null() {
                // SAFETY: non-null only on a worker's thread, while its
                // main loop (which owns the `WorkerThread`) runs.
                bump(&unsafe { &*wt }.stats().resumed);
            }
            p.complete(panic::catch_unwind(AssertUnwindSafe(f)).map_err(TaskPanic::new));
        },
        opts.priority,
    );
    // SAFETY: `F` and `T` are `'static`; the task is run once, by the
    // resumer (queued, or on the spot when cancelled).
    let task = unsafe { job.queued_task() };
    reg.gate.waiting.fetch_add(1, Ordering::SeqCst);
    if let Some(wt) = WorkerThread::current_in(reg) {
        bump(&wt.stats().suspended);
    }
    let resumer = Resumer {
        task: Some(task),
        job: job.clone(),
        cancelled,
        worker: opts.worker,
        reg: reg.clone(),
    };
    (
        resumer,
        JoinHandle {
            job,
            reg: reg.clone(),
        },
    )
}

/// Permission to resume one suspended task ([`Pool::spawn_suspended`]),
/// once. Dropping it unresumed cancels the task.
pub struct Resumer {
    /// The task to queue; `None` once resumed or cancelled.
    task: Option<Task>,
    job: Arc<dyn Claim>,
    cancelled: Arc<AtomicBool>,
    worker: Option<usize>,
    reg: Arc<Registry>,
}

impl fmt::Debug for Resumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resumer")
            .field("pool", &self.reg.name)
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

impl Resumer {
    /// Queues the task (where and at the priority its `SpawnOptions`
    /// said). Returns false if the pool was dropped meanwhile: the task was
    /// cancelled instead (its handle says so).
    pub fn resume(mut self) -> bool {
        let task = self
            .task
            .take()
            .expect("a resumer holds its task until used");
        let closed = self
            .reg
            .gate
            .closed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if *closed {
            drop(closed);
            self.cancel(task);
            return false;
        }
        self.reg.gate.waiting.fetch_sub(1, Ordering::SeqCst);
        self.job.release();
        let reg = &self.reg;
        let wt = WorkerThread::current_in(reg);
        let place = match self.worker {
            Some(w) if wt.is_some_and(|wt| wt.here.index() == w) => Place::Local,
            Some(w) => Place::Worker(w),
            None => reg.policy.place(wt.map(|w| &w.here), Hint::Spawn),
        };
        match wt {
            Some(wt) => wt.push_at(place, task, Hint::Spawn),
            None => reg.inject_at(place, task, Hint::Spawn),
        }
        drop(closed);
        true
    }

    /// Cancels the task now (what dropping the resumer does).
    pub fn cancel_now(self) {
        drop(self);
    }

    /// Runs the task with its cancel flag set: it completes its handle
    /// with the cancellation and drops its closure unrun.
    fn cancel(&self, task: Task) {
        self.reg.gate.waiting.fetch_sub(1, Ordering::SeqCst);
        self.cancelled.store(true, Ordering::Release);
        self.job.release();
        // A worker joining the handle may claim and run it meanwhile; the
        // claim decides who runs it, and both complete it the same way.
        task.run();
        // The completion notifies a joining worker only from a worker of
        // the pool; this thread may be none.
        for i in 0..self.reg.slots.len() {
            self.reg.sleep.notify_worker(i);
        }
    }
}

impl Drop for Resumer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            self.cancel(task);
        }
    }
}
