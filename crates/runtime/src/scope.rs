//! Scoped tasks: tasks that borrow from the stack of the code that
//! created the scope.
//!
//! Soundness rests on one invariant: `scope::run` does not return (nor
//! unwind) before every task spawned in the scope has finished. A counter
//! starts at 1 (the scope body itself) and each spawn adds 1; each finished
//! task, and the body, subtract 1; the one that reaches 0 sets a
//! [`CoreLatch`] owned by the worker running the body (the *owner*), which
//! works while it waits. Panics are caught per task; the first one is kept
//! and continues in the caller after the scope is complete.
//!
//! Where the tasks go: a task spawned on a worker of the pool is queued
//! with `Hint::Scoped`, which policies keep in that worker's own queues
//! (structured work, reachable by waiting workers; see "Waiting" in
//! `crate::controller`). A task spawned from a thread outside the pool goes
//! through the global queue, which a waiting owner does not serve, so it is
//! also listed in the scope for the owner to claim (`crate::claim`), and
//! the owner is notified.

use crate::claim::{Claim, ClaimJob};
use crate::controller::{AbortOnUnwind, Waited, WorkerThread};
use crate::policy::Hint;
use crate::sync::CoreLatch;
use crate::task::{Priority, Task};
use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A scope in which tasks may borrow anything that outlives `'env`.
/// Created by [`Pool::scope`](crate::Pool::scope).
pub struct Scope<'scope, 'env: 'scope> {
    pending: AtomicUsize,
    latch: CoreLatch,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// The worker that runs the scope body (where tasks are pushed from
    /// outside a worker).
    owner: *const WorkerThread,
    /// Tasks spawned from outside the pool, for the owner to claim, and
    /// their number (read without the lock by the owner's wait). Their
    /// true type is `dyn Claim + 'scope` (see `spawn`).
    outside: Mutex<Vec<Arc<dyn Claim>>>,
    outside_len: AtomicUsize,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

// SAFETY: shared state is atomic or locked; `owner` is only used to reach
// the pool's registry, which outlives the scope.
unsafe impl Sync for Scope<'_, '_> {}
// SAFETY: see `Sync`.
unsafe impl Send for Scope<'_, '_> {}

impl fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish()
    }
}

struct ScopePtr<'scope, 'env>(*const Scope<'scope, 'env>);
// SAFETY: the scope is `Sync` and outlives every task holding this.
unsafe impl Send for ScopePtr<'_, '_> {}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Starts `f` as a task of this scope; `f` may borrow from `'env` and
    /// may spawn more tasks into the scope.
    pub fn spawn<F>(&'scope self, f: F)
    where
        F: FnOnce(&'scope Scope<'scope, 'env>) + Send + 'scope,
    {
        self.pending.fetch_add(1, Ordering::SeqCst);
        let ptr = ScopePtr(self);
        let body = move || {
            let ptr = ptr;
            // SAFETY: the scope waits for this task before it is freed.
            let scope: &'scope Scope<'scope, 'env> = unsafe { &*ptr.0 };
            if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| f(scope))) {
                scope.keep_panic(p);
            }
            // SAFETY: last use of the scope by this task.
            unsafe { Scope::finish(ptr.0) };
        };
        // SAFETY: `owner` is the worker running the scope body, alive
        // until the scope completes (which waits for this task).
        let owner = unsafe { &*self.owner };
        let reg = &owner.registry;
        // The scope counts the task from here on: if the policy panicked
        // while queueing it, the scope could neither wait for it (it may be
        // lost) nor return (it may be queued, pointing into the scope).
        let counted = AbortOnUnwind;
        match WorkerThread::current_in(reg) {
            Some(wt) => {
                // SAFETY: `run` does not return before `pending` reaches 0,
                // i.e. before this task finished; everything `f` borrows
                // outlives that.
                let task = unsafe { Task::heap_unchecked(body) };
                wt.push(task, Hint::Scoped);
            }
            None => {
                let job = ClaimJob::new((), move |_: &()| body(), true, Priority::Normal);
                // SAFETY: as above; once the owner claimed the job, the
                // queued task only drops it (it holds no borrow then).
                let task = unsafe { job.queued_task() };
                let job: Arc<dyn Claim + 'scope> = job;
                // SAFETY: only the lifetime bound changes (same layout).
                // The scope drops this list once `pending` reached 0, when
                // every job has run and its closure — the only part that
                // borrows for `'scope` — is gone; dropping what is left
                // touches no borrowed data.
                let job: Arc<dyn Claim> =
                    unsafe { std::mem::transmute::<Arc<dyn Claim + 'scope>, Arc<dyn Claim>>(job) };
                {
                    let mut list = self.outside.lock().unwrap_or_else(|e| e.into_inner());
                    list.push(job);
                    self.outside_len.store(list.len(), Ordering::SeqCst);
                }
                reg.inject(task, Hint::Scoped);
                reg.sleep.notify_worker(owner.here.index());
            }
        }
        counted.disarm();
    }

    fn keep_panic(&self, p: Box<dyn Any + Send>) {
        let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(p);
        }
    }

    /// One task (or the body) finished.
    ///
    /// # Safety
    /// `this` is live on entry and may be freed once the count reaches 0.
    unsafe fn finish(this: *const Self) {
        // SAFETY: live on entry.
        if unsafe { (*this).pending.fetch_sub(1, Ordering::SeqCst) } == 1 {
            // SAFETY: the latch is live until set; `set` copies what it
            // needs before publishing.
            unsafe { CoreLatch::set(&raw const (*this).latch) };
        }
    }
}

/// The owner's wait at the end of the scope.
impl Waited for Scope<'_, '_> {
    fn done(&self) -> bool {
        self.latch.probe()
    }

    fn claim(&self) -> Option<Task> {
        if self.outside_len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut list = self.outside.lock().unwrap_or_else(|e| e.into_inner());
        let mut claimed = None;
        while claimed.is_none()
            && let Some(job) = list.pop()
        {
            if !job.claimed() {
                claimed = job.claim();
            }
        }
        self.outside_len.store(list.len(), Ordering::SeqCst);
        claimed
    }
}

/// Runs a scope body on worker `wt` and waits for all its tasks.
pub(crate) fn run<'env, R>(
    wt: &WorkerThread,
    f: impl for<'s> FnOnce(&'s Scope<'s, 'env>) -> R,
) -> R {
    let scope = Scope {
        pending: AtomicUsize::new(1),
        latch: CoreLatch::new(wt.here.index(), &wt.registry.sleep),
        panic: Mutex::new(None),
        owner: wt,
        outside: Mutex::new(Vec::new()),
        outside_len: AtomicUsize::new(0),
        _scope: PhantomData,
        _env: PhantomData,
    };
    // Tasks of the scope point into this frame until the latch is set.
    let shared = AbortOnUnwind;
    let r = panic::catch_unwind(AssertUnwindSafe(|| f(&scope)));
    // SAFETY: `scope` lives in this frame until the wait below returns.
    unsafe { Scope::finish(&scope) };
    wt.wait(&scope);
    shared.disarm();
    let first = scope.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
    match r {
        Err(p) => panic::resume_unwind(p),
        Ok(_) if first.is_some() => panic::resume_unwind(first.expect("checked")),
        Ok(v) => v,
    }
}
