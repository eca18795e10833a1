//! Per-worker statistics: Sting's per-virtual-processor figures, cheap
//! enough to leave on.
//!
//! # Invariants
//!
//! - **One writer per line.** Each worker's [`WorkerCounters`] sit on their own
//!   cache line (`CachePadded` in the registry) and only that worker's
//!   thread writes them, with a relaxed load and store (no read-modify-
//!   write instruction, no line shared with another writer). Readers
//!   ([`Pool::worker_stats`](crate::Pool::worker_stats), the monitor's
//!   reports) load relaxed: each figure is exact for its worker, a
//!   snapshot of several figures is not taken at one instant.
//! - **Nothing timed per task.** Time is taken only around sleeping (the
//!   clock is read when a worker parks and when it wakes), so the per-task
//!   cost is two uncontended stores (run, created). The queue's high-water
//!   mark is sampled, every `QUEUE_SAMPLE`th push (`controller/mod.rs`): a
//!   policy's queue length reads lines other workers write. Since the
//!   pushes are numbered across the worker's life, the samples fall at
//!   shifting points of repeated bursts; a single burst shorter than the
//!   interval may go unseen.
//!
//! What is counted, per worker: tasks run (top-level or nested, each
//! once), tasks it created (spawned from that worker: joins, scopes,
//! parallel loops; tasks injected from outside the pool count for no
//! worker), tasks it took from another worker's or a shared queue while
//! idle (stolen; of those, migrated: taken from a retired worker), tasks
//! created suspended on it and resumed tasks it ran, times it went to
//! sleep and the time it slept, times it retired (its CPU revoked: its
//! queued tasks handed to the others), and the longest its own queue has
//! been.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One worker's counters (written by that worker only).
#[derive(Debug)]
pub(crate) struct WorkerCounters {
    pub(crate) run: AtomicU64,
    pub(crate) created: AtomicU64,
    pub(crate) stolen: AtomicU64,
    pub(crate) sleeps: AtomicU64,
    pub(crate) asleep_ns: AtomicU64,
    pub(crate) retired: AtomicU64,
    pub(crate) queue_high: AtomicU64,
    pub(crate) yielded: AtomicU64,
    pub(crate) migrated: AtomicU64,
    pub(crate) suspended: AtomicU64,
    pub(crate) resumed: AtomicU64,
    /// When the sleep in progress began, in ns since `started` (0: awake).
    asleep_since: AtomicU64,
    /// When the counters were made (the pool's start), for time awake.
    started: Instant,
}

impl Default for WorkerCounters {
    fn default() -> Self {
        WorkerCounters {
            run: AtomicU64::new(0),
            created: AtomicU64::new(0),
            stolen: AtomicU64::new(0),
            sleeps: AtomicU64::new(0),
            asleep_ns: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            queue_high: AtomicU64::new(0),
            yielded: AtomicU64::new(0),
            migrated: AtomicU64::new(0),
            suspended: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            asleep_since: AtomicU64::new(0),
            started: Instant::now(),
        }
    }
}

/// Adds one to a counter only the calling thread writes; returns the new
/// value.
///
/// Built with `--cfg allot_no_stats` (only to measure what counting
/// costs) it counts nothing and returns 1.
#[inline]
pub(crate) fn bump(c: &AtomicU64) -> u64 {
    if cfg!(allot_no_stats) {
        return 1;
    }
    let v = c.load(Ordering::Relaxed) + 1;
    c.store(v, Ordering::Relaxed);
    v
}

impl WorkerCounters {
    /// Records that the queue holds `len` tasks now.
    #[inline]
    pub(crate) fn queue_len(&self, len: usize) {
        if cfg!(allot_no_stats) {
            return;
        }
        let len = len as u64;
        if len > self.queue_high.load(Ordering::Relaxed) {
            self.queue_high.store(len, Ordering::Relaxed);
        }
    }

    /// Nanoseconds since the counters were made (at least 1).
    fn now_ns(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Runs `park` (which sleeps), counting the sleep when it starts and
    /// its length when it ends; a snapshot taken meanwhile includes the
    /// sleep so far.
    #[inline]
    pub(crate) fn asleep<R>(&self, park: impl FnOnce() -> R) -> R {
        let from = self.now_ns();
        bump(&self.sleeps);
        self.asleep_since.store(from, Ordering::Relaxed);
        let r = park();
        let slept = self.now_ns().saturating_sub(from);
        let total = &self.asleep_ns;
        total.store(
            total.load(Ordering::Relaxed).saturating_add(slept),
            Ordering::Relaxed,
        );
        self.asleep_since.store(0, Ordering::Relaxed);
        r
    }

    /// A snapshot, as worker `worker` serving `cpu`.
    pub(crate) fn snapshot(&self, worker: usize, cpu: Option<usize>) -> WorkerStats {
        let now = self.now_ns();
        let since = self.asleep_since.load(Ordering::Relaxed);
        let current = if since == 0 {
            0
        } else {
            now.saturating_sub(since)
        };
        let asleep = Duration::from_nanos(
            self.asleep_ns
                .load(Ordering::Relaxed)
                .saturating_add(current)
                .min(now),
        );
        WorkerStats {
            worker,
            cpu,
            tasks_run: self.run.load(Ordering::Relaxed),
            tasks_created: self.created.load(Ordering::Relaxed),
            tasks_stolen: self.stolen.load(Ordering::Relaxed),
            sleeps: self.sleeps.load(Ordering::Relaxed),
            time_asleep: asleep,
            time_awake: Duration::from_nanos(now).saturating_sub(asleep),
            retirements: self.retired.load(Ordering::Relaxed),
            queue_high_water: self.queue_high.load(Ordering::Relaxed),
            yields: self.yielded.load(Ordering::Relaxed),
            tasks_migrated: self.migrated.load(Ordering::Relaxed),
            tasks_suspended: self.suspended.load(Ordering::Relaxed),
            tasks_resumed: self.resumed.load(Ordering::Relaxed),
        }
    }
}

/// What one worker has done since the pool started
/// ([`Pool::worker_stats`](crate::Pool::worker_stats)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkerStats {
    /// The worker's slot (0-based).
    pub worker: usize,
    /// The CPU it serves now (`None`: retired or not started).
    pub cpu: Option<usize>,
    /// Tasks it ran.
    pub tasks_run: u64,
    /// Tasks it created (spawned while running on it).
    pub tasks_created: u64,
    /// Tasks it took, while idle, from another worker's queue or a shared
    /// queue (`tasks_migrated` included).
    pub tasks_stolen: u64,
    /// Of `tasks_stolen`, those it took from a worker that had retired
    /// (its CPU revoked): migration of a retired worker's tasks.
    pub tasks_migrated: u64,
    /// Tasks created suspended while running on it
    /// ([`Pool::spawn_suspended`](crate::Pool::spawn_suspended),
    /// [`Pool::spawn_after`](crate::Pool::spawn_after)).
    pub tasks_suspended: u64,
    /// Resumed tasks it ran (a suspended task once resumed, or a timed
    /// one once due), wherever they were suspended.
    pub tasks_resumed: u64,
    /// Times it went to sleep (parked: no work, or no CPU), including a
    /// sleep in progress.
    pub sleeps: u64,
    /// Time spent asleep, including the sleep in progress so far.
    pub time_asleep: Duration,
    /// Time since the pool started not spent asleep: running tasks or
    /// looking for them (spinning counts as awake).
    pub time_awake: Duration,
    /// Times it retired because its CPU was revoked.
    pub retirements: u64,
    /// The most tasks its own queues have held at once (sampled after
    /// every 64th of its pushes, see the module docs).
    pub queue_high_water: u64,
    /// Times a task running on it used up its quantum and yielded to
    /// another ready task (`yield_now`), which ran nested.
    pub yields: u64,
}

impl WorkerStats {
    /// These figures as the broker keeps them (`PoolStatsWire`), for a
    /// pool with `workers` active workers.
    pub fn to_wire(&self, workers: u32) -> allot_proto::PoolStatsWire {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        allot_proto::PoolStatsWire {
            workers,
            tasks_run: self.tasks_run,
            tasks_created: self.tasks_created,
            tasks_stolen: self.tasks_stolen,
            tasks_migrated: self.tasks_migrated,
            tasks_suspended: self.tasks_suspended,
            tasks_resumed: self.tasks_resumed,
            yields: self.yields,
            ns_awake: ns(self.time_awake),
            ns_asleep: ns(self.time_asleep),
            queue_high_water: self.queue_high_water,
        }
    }

    /// The figures of several workers added up (`worker` and `cpu` are
    /// those of the first; the high-water mark is the largest).
    pub fn total(all: &[WorkerStats]) -> WorkerStats {
        let mut t = all.first().copied().unwrap_or_default();
        for s in all.iter().skip(1) {
            t.tasks_run += s.tasks_run;
            t.tasks_created += s.tasks_created;
            t.tasks_stolen += s.tasks_stolen;
            t.sleeps += s.sleeps;
            t.time_asleep += s.time_asleep;
            t.time_awake += s.time_awake;
            t.retirements += s.retirements;
            t.queue_high_water = t.queue_high_water.max(s.queue_high_water);
            t.yields += s.yields;
            t.tasks_migrated += s.tasks_migrated;
            t.tasks_suspended += s.tasks_suspended;
            t.tasks_resumed += s.tasks_resumed;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_count_and_sleep_is_timed() {
        let c = WorkerCounters::default();
        bump(&c.run);
        bump(&c.run);
        c.queue_len(3);
        c.queue_len(1);
        c.asleep(|| {
            // A sleep in progress is counted and timed already.
            std::thread::sleep(Duration::from_millis(5));
            let mid = c.snapshot(0, None);
            assert_eq!(mid.sleeps, 1);
            assert!(mid.time_asleep >= Duration::from_millis(5), "{mid:?}");
        });
        let s = c.snapshot(2, Some(1));
        assert_eq!((s.worker, s.cpu, s.tasks_run), (2, Some(1), 2));
        assert_eq!(s.queue_high_water, 3);
        assert_eq!(s.sleeps, 1);
        assert!(s.time_asleep >= Duration::from_millis(5), "{s:?}");
        let both = WorkerStats::total(&[s, s]);
        assert_eq!(both.tasks_run, 4);
        assert_eq!(both.queue_high_water, 3);
        assert_eq!(both.time_asleep, s.time_asleep * 2);
    }
}
