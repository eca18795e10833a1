//! Claimable jobs: heap jobs that run at most once, through whichever
//! claims them first — the task queued for them, or a worker waiting for
//! them.
//!
//! A waiting worker does not serve the global queue (see "Waiting" in
//! `crate::controller`), yet some of what it waits for may sit there: the
//! task of a [`JoinHandle`](crate::JoinHandle) it joins, and tasks spawned
//! into its scope from outside the pool. Such a job is queued as usual
//! *and* reachable by its waiter, who claims it and runs it on the spot;
//! the queued task, when it is dequeued later, finds the job claimed and
//! only drops its reference.
//!
//! Protocol: `claimed` goes `false → true` once (`swap`); the winner takes
//! the closure and runs it, nobody else touches the closure. A *held* job
//! (a suspended task's, `crate::pool::suspend`) starts at `true`, so that
//! neither its queued task nor a waiter can run it, and is released to
//! `false` once, just before its task is queued (or run to cancel it). The job is an
//! `Arc`: the queued task holds one reference, each claimant (a handle, a
//! scope's list) another; the closure is gone (taken) before any reference
//! that outlives the wait is dropped.

use crate::task::{Priority, Task};
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Something a waiting worker may claim (type-erased [`ClaimJob`]).
pub(crate) trait Claim: Send + Sync {
    /// Claims the job for the calling worker: the task that runs it now,
    /// or `None` if it was claimed before (it runs, or ran, elsewhere).
    fn claim(self: Arc<Self>) -> Option<Task>;

    /// Whether the job was claimed already (a read: a waiter that polls
    /// this does not disturb the worker running the job).
    fn claimed(&self) -> bool;

    /// Lets a job made [held](ClaimJob::new_held) be claimed (its task
    /// is about to be queued). Called at most once per held job.
    fn release(&self);
}

/// A heap job with a payload its waiter reads (a spawned task's result
/// slot) and a closure that runs once, given the payload.
pub(crate) struct ClaimJob<P, F> {
    pub(crate) payload: P,
    /// The priority the job runs at, whoever runs it (the queued task or
    /// a claimant): what it forks inherits it.
    priority: Priority,
    /// Whether waiters may claim the job. When its queued task sits in the
    /// creating worker's own queues, waiters reach it there anyway, and the
    /// task runs without the claim (one atomic swap less per task).
    claimable: bool,
    claimed: AtomicBool,
    f: UnsafeCell<Option<F>>,
}

// SAFETY: `f` is taken and run by the one thread that won `claimed`
// (`F: Send` moves it there); `payload` is shared (`P: Sync`).
unsafe impl<P: Sync, F: Send> Sync for ClaimJob<P, F> {}

impl<P, F> ClaimJob<P, F>
where
    P: Send + Sync,
    F: FnOnce(&P) + Send,
{
    pub(crate) fn new(payload: P, f: F, claimable: bool, priority: Priority) -> Arc<Self> {
        Arc::new(ClaimJob {
            payload,
            priority,
            claimable,
            claimed: AtomicBool::new(false),
            f: UnsafeCell::new(Some(f)),
        })
    }

    /// A claimable job that nobody can claim — not even its queued task —
    /// until [`Claim::release`] (a suspended task: its queued task waits
    /// outside every queue, and a waiter must not run it before it is
    /// resumed).
    pub(crate) fn new_held(payload: P, f: F, priority: Priority) -> Arc<Self> {
        let job = ClaimJob::new(payload, f, true, priority);
        job.claimed.store(true, Ordering::Relaxed);
        job
    }

    /// The task to queue for the job; it runs the job unless a waiter
    /// claimed it first.
    ///
    /// # Safety
    /// Everything `F` borrows must outlive the job's run; once the job was
    /// claimed, the task may run (and only drop the job) at any time later.
    pub(crate) unsafe fn queued_task(self: &Arc<Self>) -> Task {
        /// # Safety
        /// `p` is a reference from `Arc::into_raw`, used once.
        unsafe fn run_queued<P, F: FnOnce(&P)>(p: NonNull<()>) -> bool {
            // SAFETY: see above.
            let job = unsafe { Arc::from_raw(p.as_ptr().cast_const().cast::<ClaimJob<P, F>>()) };
            if job.claimed.swap(true, Ordering::AcqRel) {
                // A waiter ran it. Its closure is gone: dropping the job
                // drops only a `None` and the payload, which borrow nothing.
                return false;
            }
            job.run();
            true
        }
        /// # Safety
        /// As `run_queued`, for a job nobody can claim.
        unsafe fn run_unclaimable<P, F: FnOnce(&P)>(p: NonNull<()>) -> bool {
            // SAFETY: see above.
            let job = unsafe { Arc::from_raw(p.as_ptr().cast_const().cast::<ClaimJob<P, F>>()) };
            job.run();
            true
        }
        // SAFETY: both take the reference back exactly once.
        unsafe {
            if self.claimable {
                into_task(self.clone(), run_queued::<P, F>)
            } else {
                into_task(self.clone(), run_unclaimable::<P, F>)
            }
        }
        .with_priority(self.priority)
    }
}

impl<P, F: FnOnce(&P)> ClaimJob<P, F> {
    /// Runs the closure; only the winner of `claimed` (or the queued task
    /// of an unclaimable job) calls this.
    fn run(&self) {
        // SAFETY: the caller won `claimed`, so no other thread touches `f`.
        let f = unsafe { (*self.f.get()).take() }.expect("claimed job run twice");
        f(&self.payload);
    }
}

impl<P, F> Claim for ClaimJob<P, F>
where
    P: Send + Sync,
    F: FnOnce(&P) + Send,
{
    fn claimed(&self) -> bool {
        !self.claimable || self.claimed.load(Ordering::Acquire)
    }

    fn release(&self) {
        debug_assert!(self.claimable, "only held jobs are released");
        // Release: the queued task's or a claimant's swap (acquire) sees
        // the job as it was made.
        self.claimed.store(false, Ordering::Release);
    }

    fn claim(self: Arc<Self>) -> Option<Task> {
        if !self.claimable || self.claimed.swap(true, Ordering::AcqRel) {
            return None;
        }
        /// # Safety
        /// `p` is a reference from `Arc::into_raw` to a job this thread
        /// claimed, used once.
        unsafe fn run_claimed<P, F: FnOnce(&P)>(p: NonNull<()>) -> bool {
            // SAFETY: see above.
            let job = unsafe { Arc::from_raw(p.as_ptr().cast_const().cast::<ClaimJob<P, F>>()) };
            job.run();
            true
        }
        let priority = self.priority;
        // SAFETY: `run_claimed` takes the reference back exactly once, and
        // the claim was won above.
        Some(unsafe { into_task(self, run_claimed::<P, F>) }.with_priority(priority))
    }
}

/// A task owning one reference to `job`.
///
/// # Safety
/// `run` must take the reference back with `Arc::from_raw` exactly once.
unsafe fn into_task<T>(job: Arc<T>, run: unsafe fn(NonNull<()>) -> bool) -> Task {
    let raw = Arc::into_raw(job);
    // SAFETY: `Arc::into_raw` never returns null; `run` is sound to call
    // once from any thread (the caller's contract, `T: Send + Sync`).
    unsafe { Task::from_raw(NonNull::new_unchecked(raw.cast_mut().cast()), run) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn claimed_job_runs_once_and_queued_task_only_drops_it() {
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let job = ClaimJob::new(
            (),
            move |_: &()| {
                r.fetch_add(1, Ordering::SeqCst);
            },
            true,
            Priority::High,
        );
        // SAFETY: the closure borrows nothing.
        let queued = unsafe { job.queued_task() };
        let claimed = job.clone().claim().expect("first claim wins");
        // Whoever runs it, it runs at the priority it was made with.
        assert_eq!(queued.priority(), Priority::High);
        assert_eq!(claimed.priority(), Priority::High);
        assert!(job.clone().claim().is_none());
        assert!(claimed.run());
        assert!(!queued.run(), "a claimed job's queued task does nothing");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(Arc::strong_count(&job), 1);
    }

    #[test]
    fn a_held_job_runs_only_once_released() {
        let job = ClaimJob::new_held(
            AtomicUsize::new(0),
            |n: &AtomicUsize| {
                n.fetch_add(1, Ordering::SeqCst);
            },
            Priority::Low,
        );
        assert!(job.claimed());
        assert!(job.clone().claim().is_none(), "held: nobody claims it");
        job.release();
        assert!(!job.claimed());
        // SAFETY: the closure borrows nothing.
        let queued = unsafe { job.queued_task() };
        let claimed = job.clone().claim().expect("released: a waiter claims it");
        assert_eq!(claimed.priority(), Priority::Low);
        assert!(claimed.run());
        assert!(!queued.run());
        assert_eq!(job.payload.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn queued_task_first_leaves_nothing_to_claim() {
        let job = ClaimJob::new(
            AtomicUsize::new(0),
            |n: &AtomicUsize| {
                n.fetch_add(1, Ordering::SeqCst);
            },
            true,
            Priority::Normal,
        );
        // SAFETY: the closure borrows nothing.
        unsafe { job.queued_task() }.run();
        assert!(job.clone().claim().is_none());
        assert_eq!(job.payload.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn unclaimable_job_runs_through_its_queued_task_only() {
        let job = ClaimJob::new(
            AtomicUsize::new(0),
            |n: &AtomicUsize| {
                n.fetch_add(1, Ordering::SeqCst);
            },
            false,
            Priority::Low,
        );
        assert!(job.claimed());
        assert!(job.clone().claim().is_none());
        // SAFETY: the closure borrows nothing.
        assert!(unsafe { job.queued_task() }.run());
        assert_eq!(job.payload.load(Ordering::SeqCst), 1);
    }
}
