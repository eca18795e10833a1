//! Thread policies: the decisions the controller delegates (Sting's
//! thread policy manager).
//!
//! The controller (`crate::controller`) owns every worker's loop, the
//! sleep/wake mechanism, pinning and resizing. Whenever it needs a
//! *decision* it calls the pool's [`ThreadPolicy`]:
//!
//! | controller needs                       | policy call           | Sting            |
//! |----------------------------------------|-----------------------|------------------|
//! | a worker slot starts                   | [`ThreadPolicy::init_worker`] (opt.) | `tpm-initialize-vp` |
//! | where a new task should live           | [`ThreadPolicy::place`] (opt.)       | `tpm-allocate-vp`   |
//! | store a ready task                     | [`ThreadPolicy::enqueue`]            | `tpm-enqueue-ready-thread` |
//! | the next task for a worker             | [`ThreadPolicy::dequeue`]            | `tpm-dequeue-ready-thread` |
//! | whom to wake for new work              | [`ThreadPolicy::wake`] (opt.)        | wake-up policy      |
//! | an idle worker: steal from whom / park | [`ThreadPolicy::idle`]               | `tpm-vp-idle`       |
//! | a worker retires: where its work goes  | [`ThreadPolicy::drain`]              | migration           |
//! | a task's quantum is used up            | [`ThreadPolicy::preempt`] (opt.)     | quantum expiry      |
//! | demand for reports                     | [`ThreadPolicy::queued`] (opt.)      | per-VP statistics   |
//!
//! Every call carries a [`Hint`] saying *why* it is made. A policy returns
//! decisions and moves [`Task`]s between its own queues; it never spawns,
//! parks, wakes or pins a thread. Its data structures are private to it;
//! per-worker state lives in a [`WorkerLocal`], reachable only from the
//! worker it belongs to (the [`Here`] value is the proof).
//!
//! Contract every policy must keep: each task given to `enqueue` is
//! returned exactly once, by `dequeue` or `idle` on some worker; after
//! `drain(w)` no task may remain reachable only through worker `w`.
//!
//! # Waiting workers (`Hint::Wait`)
//!
//! A worker that waits inside a task (`join`, the end of a `scope`,
//! `JoinHandle::join`) looks for work meanwhile and runs it *on its own
//! stack*, nested in the task that waits. It asks `dequeue` and `idle` with
//! [`Hint::Wait`], and a policy must then hand out only
//!
//! - tasks from the calling worker's own queues, newest first, and
//! - tasks taken from other workers' own queues (steals),
//!
//! never tasks from a queue of independent work shared by the pool (the
//! global queue). Taking the *oldest* task of a shared queue nests an
//! unrelated task, which may wait in turn and take the next one: one stack
//! frame per queued task, until the stack overflows. From its own queue,
//! newest first, a waiter reaches what it forked itself before anything
//! older, so it nests further only when its own work was stolen (as in
//! rayon).
//!
//! So that every wait can finish without the global queue, a policy keeps
//! the tasks a worker creates as structured work — [`Hint::Fork`] and
//! [`Hint::Scoped`] — where waiting workers find them: that worker's own
//! queues, which the others steal from, also after it retired (`drain` may
//! leave them in place). The controller itself runs what a waiter needs
//! from the global queue: the task a `JoinHandle` waits for and scoped
//! tasks created outside the pool (it claims them, see `crate::claim`).
//!
//! # Priorities and quanta
//!
//! Every task carries a [`Priority`](crate::Priority). The shipped
//! policies keep one to three levels per structure and serve the highest
//! first (`levels`). Quanta are cooperative: a task that calls
//! [`yield_now`](crate::yield_now) after running longer than the pool's
//! quantum asks the policy, through `preempt`, for a ready task of its
//! own level or higher, and runs it nested on its stack before going on.
//!
//! The shipped policies (`local.rs`, `global.rs`, with the shared building
//! blocks in `levels.rs`) are named by [`PolicyKind`] and configured by
//! [`PolicySpec`] (`spec.rs`).

mod global;
pub mod levels;
mod local;
mod spec;
pub mod victims;

pub use global::Global;
pub use levels::SpawnPlacement;
pub use local::Local;
pub use spec::{PolicyKind, PolicySpec, UnknownPolicy};
pub use victims::Victims;

use crate::loom::cell::UnsafeCell;
use crate::loom::sync::Arc;
use crate::loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::task::Task;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

/// Why the controller calls the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Hint {
    /// A new independent task (`spawn`, `install`).
    Spawn,
    /// A task of a scope (`Scope::spawn`): structured work the scope's
    /// owner waits for. A worker's scoped tasks must stay reachable by
    /// waiting workers (see "Waiting workers" above).
    Scoped,
    /// The second half of a `join`, which its pusher will take back if no
    /// one steals it.
    Fork,
    /// A worker finished a task and continues (the "yield" point).
    Continue,
    /// A worker waits inside `join`/`scope`/`JoinHandle::join` and looks
    /// for work meanwhile, to run nested on its stack: only its own queues
    /// and other workers' own queues (see "Waiting workers" above).
    Wait,
    /// A worker was just woken from sleep.
    Wake,
    /// An idle worker (not inside a task) looks for work to take from
    /// others. A waiting worker calls `idle` with `Wait` instead.
    Steal,
    /// The pool is resizing: the worker was re-pinned, started, or retires.
    Resize,
}

/// Where a task goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The calling worker's own queues.
    Local,
    /// The pool-wide queue.
    Global,
    /// A given worker's queues, reserved for it while it holds a CPU (a
    /// task given a worker by name; policies that support it).
    Worker(usize),
    /// Offered to a given worker (where a placement sends a task): it runs
    /// there unless another worker is idle first, which may take it. A
    /// policy that does not know offers queues it like `Global`.
    Offer(usize),
}

/// What an idle worker does next.
#[derive(Debug)]
pub enum Idle {
    /// Run this task (stolen from another worker or a shared queue).
    Run(Task),
    /// Run this task, taken from a worker that retired (migration; the
    /// controller counts it apart in the per-worker statistics).
    Migrated(Task),
    /// Lost a race; look again soon.
    Retry,
    /// Nothing anywhere: the controller may spin, then park.
    Park,
}

/// Which worker to wake for new work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Any sleeping worker.
    Any,
    /// This worker first, else any.
    Prefer(usize),
    /// Nobody (the policy knows the work is covered).
    Nobody,
}

/// Facts about the pool a policy is built for.
#[derive(Debug, Clone)]
pub struct PoolInfo {
    pub(crate) id: u64,
    pub(crate) slots: usize,
    pub(crate) roster: Arc<Roster>,
    /// The machine model distances come from (`Builder::machine`); `None`:
    /// the machine this process runs on, read when a policy needs it.
    pub(crate) machine: Option<std::sync::Arc<allot_topo::Machine>>,
}

impl PoolInfo {
    /// Number of worker slots (an upper bound on live workers).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The set of workers currently holding a CPU.
    pub fn roster(&self) -> &Arc<Roster> {
        &self.roster
    }
}

static NEXT_POOL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl PoolInfo {
    pub(crate) fn new(slots: usize) -> PoolInfo {
        let id = NEXT_POOL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        PoolInfo {
            id,
            slots,
            roster: Arc::new(Roster::new(slots)),
            machine: None,
        }
    }
}

/// Which worker slots are active (hold a CPU) and which CPU each serves;
/// maintained by the controller. `epoch` moves whenever a worker's CPU
/// does, so orders derived from the CPUs (`victims::VictimOrder`) know
/// when to recompute.
#[derive(Debug)]
pub struct Roster {
    words: Box<[AtomicU64]>,
    /// CPU + 1 per slot (0: none).
    cpus: Box<[AtomicUsize]>,
    /// Per slot: the worker is looking for work (no task running); written
    /// only by the slot's worker, meaningless for a slot without a CPU.
    idle: Box<[AtomicBool]>,
    epoch: AtomicU64,
    slots: usize,
}

impl Roster {
    fn new(slots: usize) -> Roster {
        Roster {
            words: (0..slots.div_ceil(64).max(1))
                .map(|_| AtomicU64::new(0))
                .collect(),
            cpus: (0..slots).map(|_| AtomicUsize::new(0)).collect(),
            idle: (0..slots).map(|_| AtomicBool::new(false)).collect(),
            epoch: AtomicU64::new(0),
            slots,
        }
    }

    /// Records that worker `i` serves `cpu` now (`None`: none).
    pub(crate) fn serve(&self, i: usize, cpu: Option<usize>) {
        let v = cpu.map_or(0, |c| c + 1);
        if self.cpus[i].swap(v, Ordering::SeqCst) != v {
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Records whether worker `i` is looking for work (its own thread).
    #[inline]
    pub(crate) fn set_idle(&self, i: usize, idle: bool) {
        self.idle[i].store(idle, Ordering::Relaxed);
    }

    /// Whether worker `i` is looking for work now.
    #[inline]
    pub fn is_idle(&self, i: usize) -> bool {
        self.idle.get(i).is_some_and(|b| b.load(Ordering::Relaxed))
    }

    /// The CPU worker `i` serves, if any.
    pub fn cpu_of(&self, i: usize) -> Option<usize> {
        self.cpus.get(i)?.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Moves whenever a worker's CPU changes.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub(crate) fn set(&self, i: usize, on: bool) {
        let bit = 1u64 << (i % 64);
        if on {
            self.words[i / 64].fetch_or(bit, Ordering::SeqCst);
        } else {
            self.words[i / 64].fetch_and(!bit, Ordering::SeqCst);
        }
    }

    /// Whether worker `i` is active now.
    pub fn is_active(&self, i: usize) -> bool {
        i < self.slots && self.words[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) != 0
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Active workers now.
    pub fn count(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }
}

/// The calling worker, as seen by a policy: its slot index and a private
/// random stream. `!Send`/`!Sync`: a `&Here` proves the caller *is* that
/// worker, which is what makes [`WorkerLocal::get`] sound.
#[derive(Debug)]
pub struct Here {
    index: usize,
    pool: u64,
    rng: Cell<u64>,
    _not_send: PhantomData<*const ()>,
}

impl Here {
    /// Only the controller creates `Here`s: one per worker thread and pool.
    pub(crate) fn new(index: usize, pool: u64) -> Here {
        Here {
            index,
            pool,
            rng: Cell::new(
                0x9e37_79b9_7f4a_7c15 ^ (index as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            ),
            _not_send: PhantomData,
        }
    }

    /// This worker's slot index.
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }

    /// A pseudo-random number (xorshift), for victim selection.
    #[inline]
    pub fn random(&self) -> u64 {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x
    }
}

/// Per-worker policy state: one `T` per slot, reachable only by the worker
/// that owns the slot (it must present its [`Here`]).
pub struct WorkerLocal<T> {
    pool: u64,
    cells: Box<[UnsafeCell<T>]>,
}

// SAFETY: each `T` is only ever reached through `get` by the one thread
// holding that slot's `Here` (a `!Send` value the controller creates once
// per worker thread), so sharing the container never shares a `T`; moving
// it between threads needs `T: Send`.
unsafe impl<T: Send> Sync for WorkerLocal<T> {}
// SAFETY: see `Sync`.
unsafe impl<T: Send> Send for WorkerLocal<T> {}

impl<T> fmt::Debug for WorkerLocal<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerLocal")
            .field("slots", &self.cells.len())
            .finish()
    }
}

impl<T> WorkerLocal<T> {
    /// One value per slot of the pool `info` describes.
    pub fn new(info: &PoolInfo, mut make: impl FnMut(usize) -> T) -> Self {
        WorkerLocal {
            pool: info.id,
            cells: (0..info.slots).map(|i| UnsafeCell::new(make(i))).collect(),
        }
    }

    /// The calling worker's value.
    ///
    /// # Panics
    /// If `here` belongs to another pool.
    #[inline]
    pub fn get<'a>(&'a self, here: &'a Here) -> &'a T {
        assert_eq!(
            here.pool, self.pool,
            "WorkerLocal used with a worker of another pool"
        );
        // SAFETY: `here` proves the caller is the only thread that may use
        // slot `here.index` (see the `Sync` impl); shared references only.
        self.cells[here.index].with(|p| unsafe { &*p })
    }

    /// Every slot's value, mutably (no worker can be running: `&mut self`).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        // SAFETY: `&mut self` excludes every other access.
        self.cells
            .iter_mut()
            .map(|c| c.with_mut(|p| unsafe { &mut *p }))
    }
}

/// The decisions a pool delegates. See the module docs for the contract.
///
/// `enqueue`, `dequeue`, `idle` and `drain` are required; the others have
/// default bodies.
///
/// # Panics
///
/// A policy should not panic. If it does while a `join`, `scope` or
/// `install` frame is shared with other workers (its tasks point into that
/// frame), the pool aborts the process, because unwinding the frame would
/// be undefined behaviour; anywhere else the panic unwinds into the task
/// that made the call (and is reported to its waiter) or ends the worker
/// thread.
pub trait ThreadPolicy: Send + Sync + fmt::Debug + 'static {
    /// The policy's name (for logs and reports).
    fn name(&self) -> &'static str;

    /// Worker slot `index` starts serving the pool (once per slot).
    fn init_worker(&self, here: &Here) {
        let _ = here;
    }

    /// Initial placement of a new task. `from` is the creating worker, or
    /// `None` for threads outside the pool. Default: the creator's own
    /// queue, the global queue for outsiders.
    fn place(&self, from: Option<&Here>, hint: Hint) -> Place {
        let _ = hint;
        if from.is_some() {
            Place::Local
        } else {
            Place::Global
        }
    }

    /// Stores a ready task at `place` (`Place::Local` only with `from`).
    fn enqueue(&self, from: Option<&Here>, place: Place, task: Task, hint: Hint);

    /// The next task for `here` from the queues it serves first, or `None`.
    /// With `Hint::Wait`, only from `here`'s own queues (see "Waiting
    /// workers" in the module docs).
    fn dequeue(&self, here: &Here, hint: Hint) -> Option<Task>;

    /// `dequeue` found nothing: take work from elsewhere, or say park.
    /// `round` counts consecutive idle calls since the worker last ran a
    /// task (0 on the first). `hint` is `Steal`, or `Wait` for a waiting
    /// worker (then: steal only from other workers' own queues).
    fn idle(&self, here: &Here, round: u32, hint: Hint) -> Idle;

    /// Worker `here` retires (its CPU was revoked), with no task on its
    /// stack: no task may stay reachable only through it afterwards. Tasks
    /// in queues other workers steal from may stay where they are.
    fn drain(&self, here: &Here, hint: Hint);

    /// Whom to wake after a task was placed at `place` while some worker
    /// sleeps. Default: the target worker for `Place::Worker`, else any.
    fn wake(&self, from: Option<&Here>, place: Place, hint: Hint) -> Wake {
        let _ = (from, hint);
        match place {
            Place::Worker(i) | Place::Offer(i) => Wake::Prefer(i),
            _ => Wake::Any,
        }
    }

    /// Whether a task that `place` put in its creator's own queues
    /// (`Place::Local`) with `hint` is found by that worker's waits
    /// (`dequeue` with `Hint::Wait`). If not, a `JoinHandle::join` on it
    /// claims it instead. Default: true, as the "Waiting workers" contract
    /// asks for `Fork` and `Scoped`; a policy that keeps spawned tasks
    /// where waiters do not look answers false for `Spawn`.
    fn waiters_find_local(&self, hint: Hint) -> bool {
        let _ = hint;
        true
    }

    /// The running task (of priority `running`) used up its quantum and
    /// yields: a ready task of priority `running` or higher for `here` to
    /// run nested, or `None` to let the running task go on. Default:
    /// `None` (the policy does not time-share).
    fn preempt(&self, here: &Here, running: crate::task::Priority) -> Option<Task> {
        let _ = (here, running);
        None
    }

    /// Tasks queued at worker `worker`, or in shared queues for `None`
    /// (a demand estimate for reports; may be approximate). Default 0.
    fn queued(&self, worker: Option<usize>) -> usize {
        let _ = worker;
        0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn roster_bits() {
        let info = PoolInfo::new(70);
        info.roster.set(3, true);
        info.roster.set(66, true);
        assert!(info.roster.is_active(66));
        assert_eq!(info.roster.count(), 2);
        info.roster.set(3, false);
        assert!(!info.roster.is_active(3));
    }
}
