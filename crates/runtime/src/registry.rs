//! What the workers of one pool, its monitor and its handle share: the
//! [`Registry`] (one per pool, behind an `Arc`), its worker [`Slot`]s, the
//! monitor's bookkeeping ([`PlanState`], with the [`GrantStamp`] of the
//! grant applied last) and the suspension [`SuspendGate`].
//!
//! This module holds state and the few operations every holder needs; the
//! protocols live with the code that runs them: a slot's `target` is
//! written only by the monitor (`crate::monitor`) and its `current` only
//! by its worker (`crate::controller`, "Worker slots"); the gate orders
//! resumes against the pool's drop (`pool::suspend`, "The gate").

use crate::policy::{Here, Hint, Place, PoolInfo, ThreadPolicy, Wake};
use crate::sleep::Sleep;
use crate::stats::WorkerCounters;
use crate::task::Task;
use crate::timer::Timers;
use crate::vp::VpPolicy;
use crate::window::PoolWindows;
use allot_proto::Grant;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One worker slot's shared state (its protocol: `crate::controller`,
/// "Worker slots").
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) target: AtomicUsize,
    pub(crate) current: AtomicUsize,
    pub(crate) tid: AtomicI32,
}

/// Monitor-side bookkeeping, under `Registry::plan`.
#[derive(Debug, Default)]
pub(crate) struct PlanState {
    /// The grant applied last (`None` before the first).
    pub(crate) applied: Option<GrantStamp>,
    /// `applied`'s generation once every slot followed it (0 before).
    pub(crate) settled: u64,
    /// Slot `i`'s thread, once started (taken when the pool is dropped,
    /// after which nothing is started any more).
    pub(crate) handles: Vec<Option<std::thread::JoinHandle<()>>>,
}

/// Everything the workers of one pool share.
#[derive(Debug)]
pub(crate) struct Registry {
    pub(crate) info: PoolInfo,
    pub(crate) policy: Box<dyn ThreadPolicy>,
    pub(crate) sleep: Sleep,
    pub(crate) slots: Box<[CachePadded<Slot>]>,
    /// Worker `i`'s statistics, on a line of their own (`stats`).
    pub(crate) stats: Box<[CachePadded<WorkerCounters>]>,
    pub(crate) terminate: AtomicBool,
    pub(crate) spin: Duration,
    pub(crate) name: String,
    pub(crate) stack_size: Option<usize>,
    pub(crate) plan: Mutex<PlanState>,
    pub(crate) escaped_panics: AtomicU64,
    pub(crate) pin_errors: AtomicU64,
    /// Which slot serves which CPU (`vp`).
    pub(crate) vp: Arc<dyn VpPolicy>,
    /// Grants for which `vp` answered a malformed assignment.
    pub(crate) vp_errors: AtomicU64,
    /// How long a task runs before `yield_now` lets others run (`None`:
    /// never).
    pub(crate) quantum: Option<Duration>,
    /// Suspended tasks and the timer (`pool::suspend`).
    pub(crate) gate: SuspendGate,
    /// The cell's windows, when it is time-triggered (`window`).
    pub(crate) windows: PoolWindows,
}

impl Registry {
    pub(crate) fn slot(&self, i: usize) -> &Slot {
        &self.slots[i]
    }

    /// Queues a task from a thread outside the pool (or from a worker of
    /// another pool) and wakes a worker for it.
    pub(crate) fn inject(&self, task: Task, hint: Hint) {
        self.inject_at(self.policy.place(None, hint), task, hint);
    }

    /// [`Registry::inject`] at a place the policy chose already.
    pub(crate) fn inject_at(&self, place: Place, task: Task, hint: Hint) {
        self.policy.enqueue(None, place, task, hint);
        self.wake_for(None, place, hint, true);
    }

    #[inline]
    pub(crate) fn wake_for(&self, from: Option<&Here>, place: Place, hint: Hint, external: bool) {
        self.sleep.wake_for_work(external, || {
            match self.policy.wake(from, place, hint) {
                // From outside the pool: a worker pinned to the caller's
                // own CPU would wait for the caller to give the CPU up.
                Wake::Any if from.is_none() => self.off_cpu(crate::affinity::current_cpu()),
                w => w,
            }
        });
    }

    /// Prefers a worker serving a CPU other than `cpu`, if there is one.
    #[cold]
    fn off_cpu(&self, cpu: usize) -> Wake {
        let n = self.slots.len();
        (0..n)
            .find(|&i| {
                let serving = self.slots[i].current.load(Ordering::Relaxed);
                serving != 0 && serving != cpu + 1
            })
            .map_or(Wake::Any, Wake::Prefer)
    }

    /// Whether every slot follows its assignment.
    pub(crate) fn is_settled(&self) -> bool {
        self.slots
            .iter()
            .all(|s| s.current.load(Ordering::SeqCst) == s.target.load(Ordering::SeqCst))
    }

    /// Asks every worker to finish the queued work and exit.
    pub(crate) fn shut_down(&self) {
        self.terminate.store(true, Ordering::SeqCst);
        for i in 0..self.slots.len() {
            self.sleep.notify_worker(i);
        }
    }
}

/// Which grant the pool applied: its epoch `(cell, instance)` and its
/// generation within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrantStamp {
    pub(crate) cell: u64,
    pub(crate) instance: u64,
    pub(crate) generation: u64,
}

impl GrantStamp {
    pub(crate) fn of(g: &Grant) -> GrantStamp {
        GrantStamp {
            cell: g.cell,
            instance: g.instance,
            generation: g.generation,
        }
    }

    pub(crate) fn same_epoch(&self, other: &GrantStamp) -> bool {
        (self.cell, self.instance) == (other.cell, other.instance)
    }
}

/// Whether grant `g` is to be applied after the grant `last` (none yet):
/// it is the first, comes from another epoch (cell id or broker instance
/// differs: generations restarted), or has a newer generation.
pub(crate) fn supersedes(last: Option<GrantStamp>, g: &Grant) -> bool {
    let new = GrantStamp::of(g);
    match last {
        None => true,
        Some(last) => !last.same_epoch(&new) || new.generation > last.generation,
    }
}

/// The pool's side of suspension: the gate and the count of tasks that
/// wait (the protocol: `pool::suspend`, "The gate").
#[derive(Debug, Default)]
pub(crate) struct SuspendGate {
    /// True once the pool is being dropped: resumes cancel.
    pub(crate) closed: Mutex<bool>,
    /// Suspended tasks neither resumed nor cancelled yet.
    pub(crate) waiting: AtomicUsize,
    /// The timer thread, started by the first `spawn_after`.
    pub(crate) timers: Timers,
}

impl SuspendGate {
    /// Closes the gate and stops the timer (cancelling the tasks it
    /// holds); every later resume cancels. Called by `Pool::drop` before
    /// the workers are shut down.
    pub(crate) fn close(&self) {
        *self.closed.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.timers.stop();
    }
}
