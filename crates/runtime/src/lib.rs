//! allot's cooperative runtime: a work-stealing pool whose workers follow
//! a CPU grant: the cell's by default, or any [`GrantSource`]'s (one the
//! program sets itself: [`ManualGrants`]).
//!
//! ```no_run
//! let pool = allot_runtime::Pool::new(); // joins the cell, else standalone
//! let (a, b) = pool.join(|| 1 + 1, || 2 + 2);
//! let h = pool.spawn(|| "done");
//! assert_eq!(h.join().unwrap(), "done");
//! let mut v = vec![0u64; 1000];
//! pool.scope(|s| {
//!     for chunk in v.chunks_mut(100) {
//!         s.spawn(move |_| chunk.iter_mut().for_each(|x| *x += 1));
//!     }
//! });
//! pool.for_each(0..1_000, 64, |i| { let _ = i; });
//! # let _ = (a, b);
//! ```
//!
//! # Structure
//!
//! - **Thread controller** (`controller`): owns each worker's loop —
//!   running tasks, looking for work (`controller/search.rs`: dequeue,
//!   steal, spin-then-park, waiting inside a task), following the CPU
//!   assignment — and asks the **thread policy** ([`ThreadPolicy`],
//!   `policy/`) for every decision (Sting's split of control and policy).
//!   Shipped policies ([`PolicyKind`], configured by [`PolicySpec`]):
//!   local LIFO and local FIFO with stealing, global FIFO and global LIFO,
//!   each with one to three priority levels ([`Priority`]) and cooperative
//!   quanta ([`yield_now`]).
//! - **Monitor** (`monitor`): a small thread blocked on the grant's
//!   source (`source`: a cell's grant page, or a grant the program sets);
//!   on every generation it maps the granted CPUs to worker slots and
//!   tells the workers, and it sends progress reports to the source (ARS's
//!   resource controller with dynamic run-time parallelism).
//! - **Sleep** (`sleep/`, with its design note `sleep/README.md`): the
//!   doorbell protocol that parks idle workers without losing wake-ups.
//! - **Queues** ([`queue`]): policy-free deque and injector primitives.
//! - **Sync** ([`Latch`], [`Event`]): spin-then-park primitives.
//! - **Virtual-processor policy** ([`VpPolicy`], `vp`): which worker
//!   serves which granted CPU after a grant change; the monitor checks
//!   every answer and falls back to [`MoveFewest`] on a malformed one.
//! - **Suspended and timed tasks** (`pool/suspend`, `pool/timer`):
//!   [`Pool::spawn_suspended`] makes a task that sits in no queue and holds
//!   no worker until its [`Resumer`] resumes it (exactly once; dropping the
//!   resumer cancels it); [`Pool::spawn_after`] is one the pool's timer
//!   thread resumes when it is due (a sleep that holds no worker).
//! - **Parallel loops** (`pool/loops`): [`Pool::for_each_chunk`] and
//!   [`Pool::map_reduce`] cut a range into tasks adaptively (about two per
//!   worker, split further only where a worker steals), the body seeing
//!   pieces of at most `grain`; [`Pool::for_each_static`] is OpenMP's
//!   `schedule(static)`, one block per active worker.
//! - **Statistics** (`stats`, [`Pool::worker_stats`]): per-worker counts
//!   (run, created, stolen, migrated, suspended, resumed, yields) and sleep
//!   times, each worker's on a cache line only it writes; the monitor
//!   sends their sum with each progress report (`allot status` shows it).
//!
//! # Workers and CPUs
//!
//! One worker per granted CPU, pinned to it (`sched_setaffinity`); at most
//! `grant.threads` workers and at most [`Pool::max_workers`] (default: the
//! machine's CPU count). Lent CPUs host workers like owned ones (owned
//! CPUs are used first when `threads` caps the count). When the grant
//! changes, workers on revoked CPUs move to newly granted CPUs or retire,
//! always between tasks, handing their queued tasks to the others; no
//! task is lost or run twice. [`Pool::applied_generation`] says when a
//! grant is fully applied.
//!
//! # Invariants
//!
//! - A task runs exactly once, on a worker, never preempted by the pool;
//!   a suspended task runs once after it is resumed, or never if it is
//!   cancelled (its handle says which).
//! - A worker runs only while it holds a CPU of the current grant, except
//!   to finish the task it was running when its CPU was revoked.
//! - `join`, `scope` and `install` never return before the work they
//!   started has finished, even when it panicked; if the thread policy
//!   panics while such work points into their frame, the process aborts.
//! - A worker waiting inside a task runs other work nested on its stack,
//!   but only the work it waits for and work from workers' own queues,
//!   never the global queue's oldest task: the stack does not grow with
//!   the length of a queue (`controller`, "Waiting").

// Under `cfg(loom)` only the protocol modules the models use are built.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

pub mod affinity;
mod blocking;
#[cfg(not(loom))]
mod claim;
#[cfg(not(loom))]
mod controller;
pub(crate) mod loom;
#[cfg(all(loom, test))]
mod models;
#[cfg(not(loom))]
mod monitor;
pub mod policy;
#[cfg(not(loom))]
mod pool;
pub mod queue;
#[cfg(not(loom))]
mod registry;
#[cfg(not(loom))]
mod scope;
mod sleep;
#[cfg(not(loom))]
mod source;
#[cfg(not(loom))]
mod stats;
mod sync;
mod task;
#[cfg(not(loom))]
mod timer;
#[cfg(not(loom))]
pub mod vp;
mod window;

#[cfg(not(loom))]
pub use controller::{current_priority, current_worker, yield_now};
pub use policy::{
    Global, Here, Hint, Idle, Local, Place, PolicyKind, PolicySpec, PoolInfo, Roster,
    SpawnPlacement, ThreadPolicy, UnknownPolicy, Victims, Wake, WorkerLocal,
};
#[cfg(not(loom))]
pub use pool::{
    BuildError, Builder, DEFAULT_REPORT_PERIOD, DEFAULT_SPIN, JoinHandle, Pool, Resumer,
    SpawnError, SpawnOptions, WorkerInfo, join,
};
#[cfg(not(loom))]
pub use scope::Scope;
#[cfg(not(loom))]
pub use source::{Allowed, GrantSource, ManualGrants};
#[cfg(not(loom))]
pub use stats::WorkerStats;
pub use sync::{EVENT_SPIN, Event, Latch};
pub use task::{Priority, Task, TaskPanic};
#[cfg(not(loom))]
pub use vp::{InOrder, MoveFewest, VpPolicy};
#[cfg(not(loom))]
pub use vp::{SlotView, assign, wanted_cpus};
