//! The public pool: building it, and running work on it.
//!
//! A [`Pool`] owns a registry (shared with its workers and its monitor).
//! Work enters in four ways, all through the thread policy:
//!
//! - [`Pool::spawn`]: an independent `'static` task with a [`JoinHandle`];
//! - [`Pool::join`] / [`join`]: fork/join, recursive, no allocation;
//! - [`Pool::scope`]: tasks borrowing from the caller's stack;
//! - [`Pool::for_each_chunk`], [`Pool::for_each_static`],
//!   [`Pool::map_reduce`]: parallel loops (`loops.rs`: adaptive splitting
//!   and the static schedule);
//! - [`Pool::install`]: run a closure on a worker (everything above called
//!   inside it stays on the pool's fast paths).
//!
//! Calls from a worker of the same pool take the local fast path; calls
//! from any other thread queue a job and block the caller (spin, then
//! park) until it is done.
//!
//! Dropping the pool lets queued tasks finish, stops the workers and joins
//! them (unless it is dropped from one of its own workers, which then
//! exit on their own).

use crate::claim::{Claim, ClaimJob};
use crate::controller::{AbortOnUnwind, Waited, WorkerThread};
use crate::monitor;
use crate::policy::{Hint, Place, PolicyKind, PolicySpec, PoolInfo, ThreadPolicy};
use crate::registry::{PlanState, Registry, Slot, SuspendGate};
use crate::sleep::Sleep;
use crate::source::GrantSource;
use crate::stats::WorkerStats;
use crate::sync::Event;
use crate::task::{JobResult, Priority, StackJob, Task, TaskPanic};
use allot_topo::CpuSet;
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod builder;
mod loops;
mod suspend;

pub use builder::{BuildError, Builder, DEFAULT_REPORT_PERIOD, DEFAULT_SPIN};
pub use suspend::Resumer;

/// A worker thread as seen from outside (for checks and tools).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The worker's slot, below `Pool::max_workers`.
    pub index: usize,
    /// Kernel thread id.
    pub tid: i32,
    /// The CPU it is pinned to.
    pub cpu: usize,
}

/// A work-stealing pool whose workers follow a CPU grant (a cell's, or
/// another [`GrantSource`]'s).
pub struct Pool {
    reg: Arc<Registry>,
    source: Arc<dyn GrantSource>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.reg.name)
            .field("policy", &self.reg.policy.name())
            .field("workers", &self.workers())
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A pool following `Cell::auto("allot")` with the default policy.
    ///
    /// # Panics
    /// If no worker thread can be started.
    pub fn new() -> Pool {
        Pool::builder()
            .build()
            .expect("cannot start the allot pool")
    }

    /// A builder with defaults.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Where the pool's grant comes from.
    pub fn source(&self) -> &dyn GrantSource {
        &*self.source
    }

    /// The thread policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.reg.policy.name()
    }

    /// Workers active now (holding a CPU).
    pub fn workers(&self) -> usize {
        self.reg.info.roster.count()
    }

    /// Worker slots (most workers the pool can have).
    pub fn max_workers(&self) -> usize {
        self.reg.slots.len()
    }

    /// The active workers: slot, thread id and CPU of each.
    pub fn worker_threads(&self) -> Vec<WorkerInfo> {
        (0..self.reg.slots.len())
            .filter_map(|i| {
                let s = self.reg.slot(i);
                let cpu = s.current.load(Ordering::SeqCst).checked_sub(1)?;
                Some(WorkerInfo {
                    index: i,
                    tid: s.tid.load(Ordering::SeqCst),
                    cpu,
                })
            })
            .collect()
    }

    /// The newest grant generation the pool has fully applied: every
    /// retiring worker left, every new worker runs pinned on its CPU.
    ///
    /// Generations restart (and this value goes back) when the cell's
    /// grant comes from a new registration or broker instance (see
    /// `crate::monitor`).
    pub fn applied_generation(&self) -> u64 {
        let mut plan = self.reg.plan.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock the monitor cannot change targets meanwhile.
        if let Some(applied) = plan.applied
            && self.reg.is_settled()
        {
            plan.settled = applied.generation;
        }
        plan.settled
    }

    /// Waits until [`Pool::applied_generation`] reaches `generation`.
    pub fn wait_resized(&self, generation: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.applied_generation() >= generation {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// `(busy, wanted, completed)`, the numbers the monitor reports.
    pub fn demand(&self) -> (u32, u32, u64) {
        monitor::demand(&self.reg)
    }

    /// Tasks completed so far.
    pub fn completed(&self) -> u64 {
        self.demand().2
    }

    /// Each worker's statistics since the pool started, in slot order
    /// (see [`WorkerStats`]; [`WorkerStats::total`] adds them up). Cheap:
    /// a few loads per worker, nothing stops.
    pub fn worker_stats(&self) -> Vec<WorkerStats> {
        self.reg
            .stats
            .iter()
            .zip(self.reg.slots.iter())
            .enumerate()
            .map(|(i, (c, s))| {
                let cpu = s.current.load(Ordering::Relaxed).checked_sub(1);
                c.snapshot(i, cpu)
            })
            .collect()
    }

    /// Grants for which the virtual-processor policy answered a malformed
    /// assignment (the default policy's was used instead).
    pub fn vp_policy_errors(&self) -> u64 {
        self.reg.vp_errors.load(Ordering::Relaxed)
    }

    /// The windows the pool follows, when its cell is time-triggered:
    /// workers take new tasks only inside them (see the crate's window
    /// notes, and `allot_proto::window`).
    pub fn time_window(&self) -> Option<allot_proto::Window> {
        self.reg.windows.get()
    }

    /// How many times a worker waited for its cell's next window before
    /// taking a task.
    pub fn window_waits(&self) -> u32 {
        self.reg.windows.waits.load(Ordering::Relaxed)
    }

    /// Times a worker failed to pin itself (a CPU outside the process's
    /// allowed set).
    pub fn pin_errors(&self) -> u64 {
        self.reg.pin_errors.load(Ordering::Relaxed)
    }

    /// Runs `f` on a worker of this pool and returns its result; a panic
    /// in `f` continues in the caller.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        if WorkerThread::current_in(&self.reg).is_some() {
            return f();
        }
        let job = StackJob::new(f, Event::new());
        let shared = AbortOnUnwind;
        // SAFETY: `job` stays in this frame until its event is set (we wait
        // below; the guard aborts rather than unwind earlier), and the task
        // is queued once.
        self.reg.inject(unsafe { job.as_task() }, Hint::Spawn);
        job.signal.wait();
        shared.disarm();
        match job.into_outcome() {
            JobResult::Done(r) => r,
            JobResult::Panicked(p) => panic::resume_unwind(p),
            JobResult::Pending => unreachable!("event set before the result"),
        }
    }

    /// Runs `a` and `b`, in parallel when a worker is free, and returns
    /// both results.
    ///
    /// # Panics
    /// Both closures always run, also when the other one panicked. Once
    /// both finished, a panic of either continues in the caller; if both
    /// panicked, the panic of `a` (as `rayon::join`).
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        match WorkerThread::current_in(&self.reg) {
            Some(wt) => wt.join(a, b),
            None => self.install(|| join(a, b)),
        }
    }

    /// Starts `f` as an independent task.
    pub fn spawn<T, F>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_inner(SpawnOptions::new(), f)
    }

    /// Starts `f` as an independent task with a priority and, optionally,
    /// the worker that should run it. Fails, running nothing, if that
    /// worker does not exist (`worker >= max_workers()`).
    ///
    /// A task given a worker waits in that worker's inbox and runs there
    /// while the worker holds a CPU; once the worker retires, the others
    /// take it. (Custom policies that do not know `Place::Worker` queue it
    /// like any spawned task.)
    pub fn spawn_with<T, F>(&self, opts: SpawnOptions, f: F) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.check_worker(opts)?;
        Ok(self.spawn_inner(opts, f))
    }

    /// Fails if `opts` names a worker the pool does not have.
    fn check_worker(&self, opts: SpawnOptions) -> Result<(), SpawnError> {
        match opts.worker {
            Some(w) if w >= self.max_workers() => Err(SpawnError {
                worker: w,
                slots: self.max_workers(),
            }),
            _ => Ok(()),
        }
    }

    fn spawn_inner<T, F>(&self, opts: SpawnOptions, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let wt = WorkerThread::current_in(&self.reg);
        let place = match opts.worker {
            Some(w) if wt.is_some_and(|wt| wt.here.index() == w) => Place::Local,
            Some(w) => Place::Worker(w),
            None => self.reg.policy.place(wt.map(|w| &w.here), Hint::Spawn),
        };
        // One allocation holds the closure and the result slot; the queued
        // task and the handle share it. A joining worker may claim the task
        // unless it sits in this worker's own queues where waiters reach it
        // anyway ("Waiting" in `controller/mod.rs`).
        let job = ClaimJob::new(
            Packet::new(),
            move |p: &Packet<T>| {
                p.complete(panic::catch_unwind(AssertUnwindSafe(f)).map_err(TaskPanic::new))
            },
            place != Place::Local || !self.reg.policy.waiters_find_local(Hint::Spawn),
            opts.priority,
        );
        // SAFETY: `F` and `T` are `'static`.
        let task = unsafe { job.queued_task() };
        match wt {
            Some(wt) => wt.push_at(place, task, Hint::Spawn),
            None => self.reg.inject_at(place, task, Hint::Spawn),
        }
        JoinHandle {
            job,
            reg: self.reg.clone(),
        }
    }

    /// Runs `f` with a [`Scope`](crate::Scope) whose tasks may borrow
    /// anything that outlives the call; returns once all of them finished.
    /// The first panic among `f` and the tasks continues in the caller.
    pub fn scope<'env, R: Send>(
        &self,
        f: impl for<'s> FnOnce(&'s crate::Scope<'s, 'env>) -> R + Send,
    ) -> R {
        self.install(|| {
            let wt = WorkerThread::current_in(&self.reg).expect("install runs on a worker");
            crate::scope::run(wt, f)
        })
    }
}

/// How [`Pool::spawn_with`] starts a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpawnOptions {
    priority: Priority,
    worker: Option<usize>,
}

impl SpawnOptions {
    /// `Normal` priority, placed by the policy.
    pub fn new() -> SpawnOptions {
        SpawnOptions::default()
    }

    /// With priority `p`.
    pub fn priority(mut self, p: Priority) -> SpawnOptions {
        self.priority = p;
        self
    }

    /// To run on worker `w` (a slot index, `0..max_workers()`).
    pub fn worker(mut self, w: usize) -> SpawnOptions {
        self.worker = Some(w);
        self
    }
}

/// [`Pool::spawn_with`] named a worker the pool does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no worker {worker}: the pool has workers 0 to {}", slots - 1)]
pub struct SpawnError {
    worker: usize,
    slots: usize,
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Suspended tasks are cancelled from now on; resumed ones are
        // queued already and run before the workers stop (`suspend`).
        self.reg.gate.close();
        let handles: Vec<_> = {
            let mut plan = self.reg.plan.lock().unwrap_or_else(|p| p.into_inner());
            self.reg.shut_down();
            plan.handles.iter_mut().filter_map(Option::take).collect()
        };
        if WorkerThread::current_in(&self.reg).is_some() {
            return;
        }
        for h in handles {
            let _ = h.join();
        }
    }
}

/// Runs `a` and `b` on the current worker's pool, in parallel when
/// possible; outside any pool, one after the other. Panics as
/// [`Pool::join`].
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let p = WorkerThread::current();
    if p.is_null() {
        return match panic::catch_unwind(AssertUnwindSafe(a)) {
            Ok(ra) => (ra, b()),
            Err(p) => {
                let _ = panic::catch_unwind(AssertUnwindSafe(b));
                panic::resume_unwind(p)
            }
        };
    }
    // SAFETY: non-null only while the worker's main loop (which owns the
    // `WorkerThread`) runs on this thread.
    unsafe { &*p }.join(a, b)
}

/// Result slot of a spawned task.
struct Packet<T> {
    done: Event,
    /// `index + 1` of a pool worker waiting in `join`, else 0.
    waiter: AtomicUsize,
    result: UnsafeCell<Option<Result<T, TaskPanic>>>,
}

// SAFETY: `result` is written once, by the task, before `done` is set
// (release), and read once, by the joiner, after it saw `done` (acquire).
unsafe impl<T: Send> Sync for Packet<T> {}

/// What a `JoinHandle` sees of its spawned job (a [`ClaimJob`] whose
/// payload is the result slot).
trait Spawned<T>: Claim {
    fn packet(&self) -> &Packet<T>;
}

impl<T: Send, F: FnOnce(&Packet<T>) + Send> Spawned<T> for ClaimJob<Packet<T>, F> {
    fn packet(&self) -> &Packet<T> {
        &self.payload
    }
}

/// A `JoinHandle::join` on a worker of the pool: done when the task is;
/// the task itself may be claimable (see `crate::claim`).
struct HandleWait<'a, T> {
    job: &'a Arc<dyn Spawned<T>>,
    packet: &'a Packet<T>,
}

impl<T> Waited for HandleWait<'_, T> {
    fn done(&self) -> bool {
        self.packet.done.is_set()
    }

    fn claim(&self) -> Option<Task> {
        if self.job.claimed() {
            return None; // running or done elsewhere, or not claimable
        }
        self.job.clone().claim()
    }
}

impl<T> Packet<T> {
    fn new() -> Packet<T> {
        Packet {
            done: Event::new(),
            waiter: AtomicUsize::new(0),
            result: UnsafeCell::new(None),
        }
    }

    fn complete(&self, r: Result<T, TaskPanic>) {
        // SAFETY: only the task writes, once, before `done` is set.
        unsafe { *self.result.get() = Some(r) };
        self.done.set();
        std::sync::atomic::fence(Ordering::SeqCst);
        let w = self.waiter.load(Ordering::SeqCst);
        if w != 0 {
            let p = WorkerThread::current();
            if !p.is_null() {
                // SAFETY: see `join` above; the task runs on a worker.
                unsafe { &*p }.registry.sleep.notify_worker(w - 1);
            }
        }
    }
}

/// Owned permission to collect a spawned task's result.
pub struct JoinHandle<T> {
    job: Arc<dyn Spawned<T>>,
    reg: Arc<Registry>,
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl<T> JoinHandle<T> {
    /// Whether the task has finished.
    pub fn is_finished(&self) -> bool {
        self.job.packet().done.is_set()
    }

    /// Waits for the task: its value, or its panic. On a worker of the
    /// same pool, works meanwhile: the worker's own queued tasks first,
    /// then the task itself if it has not started yet and waits in the
    /// global queue, then tasks stolen from other workers (see "Waiting" in
    /// `controller/mod.rs`).
    pub fn join(self) -> Result<T, TaskPanic> {
        let packet = self.job.packet();
        if !packet.done.is_set() {
            match WorkerThread::current_in(&self.reg) {
                Some(wt) => {
                    packet.waiter.store(wt.here.index() + 1, Ordering::SeqCst);
                    wt.wait(&HandleWait {
                        job: &self.job,
                        packet,
                    });
                }
                None => packet.done.wait(),
            }
        }
        // SAFETY: `done` is set: the task wrote the result and is done with it.
        unsafe { (*packet.result.get()).take() }.expect("task result taken twice")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_proto::Grant;

    fn grant(cell: u64, instance: u64, generation: u64, cpus: CpuSet) -> Grant {
        Grant {
            cell,
            instance,
            generation,
            threads: cpus.len() as u32,
            cpus,
            ..Grant::default()
        }
    }

    /// The grant after a re-registration with a broker that lost its
    /// journal has a lower generation; the pool applies it anyway (a
    /// standalone pool has no monitor thread: the test is the monitor).
    #[test]
    fn pool_follows_a_grant_whose_generation_restarted() {
        let all = allot_topo::allowed_cpus().expect("allowed cpus");
        let one: CpuSet = all.iter().take(1).collect();
        let pool = Pool::builder()
            .cell(allot_client::Cell::standalone())
            .name("epochs")
            .build()
            .expect("pool");
        let wait = |generation| {
            assert!(pool.wait_resized(generation, Duration::from_secs(10)));
            assert_eq!(pool.applied_generation(), generation);
        };
        monitor::apply(&pool.reg, &grant(7, 3, 40, one));
        wait(40);
        assert_eq!(pool.workers(), 1);
        // Stale in the same epoch: ignored.
        monitor::apply(&pool.reg, &grant(7, 3, 39, all));
        wait(40);
        assert_eq!(pool.workers(), 1);
        // New epoch: applied, and the applied generation starts over.
        monitor::apply(&pool.reg, &grant(9, 4, 1, all));
        wait(1);
        assert_eq!(pool.workers(), all.len().min(pool.max_workers()));
        monitor::apply(&pool.reg, &grant(9, 4, 2, one));
        wait(2);
        assert_eq!(pool.workers(), 1);
        assert_eq!(pool.install(|| 6 * 7), 42);
    }

    /// Tasks waiting for a named worker whose CPU is revoked are taken by
    /// the worker that stays, and counted as migrated (and stolen) there.
    /// (The test applies grants itself, so the revocation is in place
    /// before the leaving worker's task ends.)
    #[test]
    fn a_retired_workers_tasks_are_counted_as_migrated() {
        let all = allot_topo::allowed_cpus().expect("allowed cpus");
        if !allot_testkit::prerequisite(all.len() >= 2, "needs 2 CPUs to retire one worker") {
            return;
        }
        let two: CpuSet = all.iter().take(2).collect();
        let one: CpuSet = all.iter().take(1).collect();
        let pool = Pool::builder()
            .cell(allot_client::Cell::standalone())
            .max_workers(2)
            .name("migrate")
            .build()
            .expect("pool");
        monitor::apply(&pool.reg, &grant(1, 1, 1, two));
        assert!(pool.wait_resized(1, Duration::from_secs(10)));
        let kept = one.iter().next().unwrap();
        let leaving = pool
            .worker_threads()
            .into_iter()
            .find(|w| w.cpu != kept)
            .expect("a worker on the CPU to revoke")
            .index;
        // Keep the leaving worker busy while tasks pile up in its inbox.
        let (started_tx, started) = std::sync::mpsc::channel();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let on_leaving = SpawnOptions::new().worker(leaving);
        let blocker = pool
            .spawn_with(on_leaving, move || {
                started_tx.send(()).unwrap();
                let _ = wait.recv();
            })
            .unwrap();
        started.recv().unwrap();
        let piled: Vec<_> = (0..20)
            .map(|i| pool.spawn_with(on_leaving, move || i).unwrap())
            .collect();
        monitor::apply(&pool.reg, &grant(1, 1, 2, one));
        drop(release);
        blocker.join().unwrap();
        assert!(pool.wait_resized(2, Duration::from_secs(10)));
        for (i, h) in piled.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), i);
        }
        let stats = pool.worker_stats();
        assert_eq!(stats[leaving].retirements, 1, "{stats:#?}");
        assert_eq!(stats[leaving].tasks_migrated, 0, "{stats:#?}");
        let stayed = &stats[1 - leaving];
        assert_eq!(stayed.tasks_migrated, 20, "{stats:#?}");
        assert!(stayed.tasks_stolen >= 20, "{stats:#?}");
    }
}
