//! Retirement of workers that wait inside a task ("Following the
//! assignment", step 4, in `controller/mod.rs`): a worker whose CPU is revoked
//! while a `join` is on its stack runs no more tasks and parks quietly —
//! it does not wake others over and over, and it is not woken for work —
//! until its wait is over; then it retires, and after the pool settled no
//! task runs on a revoked CPU.
//!
//! Four workers are needed (two waiting, two running the awaited halves),
//! more than this VM's two CPUs: the grants add CPUs that do not exist.
//! Pinning to those fails (counted in `pin_errors`, the worker stays
//! unpinned); the checks below use the pool's assignment, not affinity.

#![cfg(not(loom))]

use allot_client::{Cell, GrantWriter};
use allot_runtime::affinity::current_tid;
use allot_runtime::{Event, Here, Hint, Idle, Place, PolicyKind, Pool, Task, ThreadPolicy, Wake};
use allot_topo::CpuSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A shipped policy, counting the calls that show wake-up traffic.
#[derive(Debug)]
struct Counting {
    inner: Box<dyn ThreadPolicy>,
    calls: Arc<Calls>,
}

#[derive(Debug, Default)]
struct Calls {
    /// `wake`: made when a worker queued work or retired while some worker
    /// slept.
    wake: AtomicU64,
    drain: AtomicU64,
}

impl ThreadPolicy for Counting {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn place(&self, from: Option<&Here>, hint: Hint) -> Place {
        self.inner.place(from, hint)
    }
    fn enqueue(&self, from: Option<&Here>, place: Place, task: Task, hint: Hint) {
        self.inner.enqueue(from, place, task, hint)
    }
    fn dequeue(&self, here: &Here, hint: Hint) -> Option<Task> {
        self.inner.dequeue(here, hint)
    }
    fn idle(&self, here: &Here, round: u32, hint: Hint) -> Idle {
        self.inner.idle(here, round, hint)
    }
    fn drain(&self, here: &Here, hint: Hint) {
        self.calls.drain.fetch_add(1, Ordering::SeqCst);
        self.inner.drain(here, hint)
    }
    fn wake(&self, from: Option<&Here>, place: Place, hint: Hint) -> Wake {
        self.calls.wake.fetch_add(1, Ordering::SeqCst);
        self.inner.wake(from, place, hint)
    }
    fn queued(&self, worker: Option<usize>) -> usize {
        self.inner.queued(worker)
    }
}

/// Four CPU numbers: the allowed ones first, then ones past them.
fn four_cpus() -> CpuSet {
    let allowed = allot_topo::allowed_cpus().expect("allowed cpus");
    let mut cpus: Vec<usize> = allowed.iter().take(4).collect();
    let mut next = allowed.last().expect("some CPU") + 1;
    while cpus.len() < 4 {
        cpus.push(next);
        next += 1;
    }
    cpus.into_iter().collect()
}

fn counting_pool(kind: PolicyKind, name: &str) -> (Pool, GrantWriter, Arc<Calls>) {
    let (cell, writer) = Cell::manual(four_cpus()).expect("manual cell");
    let calls = Arc::new(Calls::default());
    let c = calls.clone();
    let pool = Pool::builder()
        .cell(cell)
        .max_workers(4)
        .name(format!("{name}-{kind}"))
        .policy_with(move |info| {
            Box::new(Counting {
                inner: kind.build(info),
                calls: c,
            })
        })
        .build()
        .expect("pool");
    assert_eq!(pool.workers(), 4);
    (pool, writer, calls)
}

/// The CPU of the active worker with thread id `tid`.
fn cpu_of(pool: &Pool, tid: i32) -> usize {
    pool.worker_threads()
        .iter()
        .find(|w| w.tid == tid)
        .map(|w| w.cpu)
        .expect("an active worker")
}

/// Spins (sleeping) until `cond` holds; panics after a minute.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// After the pool settled on `grant`, tasks run only on workers that hold
/// a CPU of `grant`, never on the threads in `revoked`.
fn check_tasks_follow_grant(pool: &Pool, grant: CpuSet, revoked: &[i32]) {
    let workers = pool.worker_threads();
    let cpus: CpuSet = workers.iter().map(|w| w.cpu).collect();
    assert_eq!(cpus, grant, "workers on {cpus}, grant {grant}");
    let granted: Vec<i32> = workers.iter().map(|w| w.tid).collect();
    let tids: Vec<i32> = (0..200)
        .map(|_| pool.spawn(current_tid))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("task"))
        .collect();
    for tid in tids {
        assert!(granted.contains(&tid), "a task ran on thread {tid}");
        assert!(
            !revoked.contains(&tid),
            "a task ran on revoked thread {tid}"
        );
    }
}

/// Two workers sit in `join` waits (their `b` halves run, blocked, on the
/// other two workers) when their CPUs are revoked: they park without waking
/// anyone over and over, cannot settle before their waits end, then retire.
#[test]
fn retiring_waiters_park_quietly() {
    for kind in PolicyKind::ALL {
        let (pool, mut writer, calls) = counting_pool(kind, "quiet");
        let pool = Arc::new(pool);
        let gate = Arc::new(Event::new());
        let b_started = Arc::new(AtomicUsize::new(0));
        let waiting = Arc::new(AtomicUsize::new(0));
        let tids: Arc<[AtomicI32; 2]> = Arc::new([AtomicI32::new(0), AtomicI32::new(0)]);
        let roots: Vec<_> = (0..2)
            .map(|i| {
                let (gate, b_started, waiting, tids) = (
                    gate.clone(),
                    b_started.clone(),
                    waiting.clone(),
                    tids.clone(),
                );
                pool.spawn(move || {
                    tids[i].store(current_tid(), Ordering::SeqCst);
                    allot_runtime::join(
                        || {
                            // Busy until both halves were taken by the other
                            // two workers, so neither waiter steals one.
                            while b_started.load(Ordering::SeqCst) < 2 {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            waiting.fetch_add(1, Ordering::SeqCst);
                        },
                        || {
                            b_started.fetch_add(1, Ordering::SeqCst);
                            gate.wait();
                        },
                    );
                })
            })
            .collect();
        wait_until("both waiters", || waiting.load(Ordering::SeqCst) == 2);
        std::thread::sleep(Duration::from_millis(20)); // into their waits
        let waiters: Vec<i32> = tids.iter().map(|t| t.load(Ordering::SeqCst)).collect();
        let revoked: CpuSet = waiters.iter().map(|&t| cpu_of(&pool, t)).collect();
        let grant = four_cpus().difference(&revoked);
        let (wakes, drains) = (
            calls.wake.load(Ordering::SeqCst),
            calls.drain.load(Ordering::SeqCst),
        );
        let generation = writer.publish(grant, CpuSet::new());
        std::thread::sleep(Duration::from_millis(300));
        let wakes = calls.wake.load(Ordering::SeqCst) - wakes;
        let drains = calls.drain.load(Ordering::SeqCst) - drains;
        // Tasks are never preempted: the waiters are still in their tasks.
        let settled_early = pool.applied_generation() >= generation;
        // Open the gate before asserting: a failed test must not leave
        // workers blocked (dropping the pool joins them).
        gate.set();
        for h in roots {
            h.join().expect("root task");
        }
        assert!(
            wakes <= 4,
            "{kind}: {wakes} wake-ups while the waiters retired"
        );
        assert!(
            drains <= 2,
            "{kind}: {drains} drains while the waiters retired"
        );
        assert!(
            !settled_early,
            "{kind}: settled while tasks were on the stacks"
        );
        assert!(
            pool.wait_resized(generation, Duration::from_secs(20)),
            "{kind}: generation {generation} not applied"
        );
        check_tasks_follow_grant(&pool, grant, &waiters);
    }
}

/// A worker in the loop of `join` that takes back its own queue runs no
/// more tasks once its CPU is revoked (not its own queued tasks, not the
/// global queue's): the others run them.
#[test]
fn retiring_joiner_stops_running_tasks() {
    const TASKS: usize = 300;
    for kind in PolicyKind::ALL {
        let (pool, mut writer, _calls) = counting_pool(kind, "joiner");
        let pool = Arc::new(pool);
        let gate = Arc::new(Event::new());
        let b_started = Arc::new(AtomicBool::new(false));
        let spawned = Arc::new(AtomicBool::new(false));
        let revoked = Arc::new(AtomicBool::new(false));
        let joiner = Arc::new(AtomicI32::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let after_revoke = Arc::new(AtomicUsize::new(0));
        let root = {
            let (p, gate, b_started, spawned) = (
                pool.clone(),
                gate.clone(),
                b_started.clone(),
                spawned.clone(),
            );
            let (revoked, joiner, done, after_revoke) = (
                revoked.clone(),
                joiner.clone(),
                done.clone(),
                after_revoke.clone(),
            );
            pool.spawn(move || {
                joiner.store(current_tid(), Ordering::SeqCst);
                allot_runtime::join(
                    || {
                        while !b_started.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        // Work for the loop of `join` (lifo: this worker's
                        // own queue; fifo: the global queue).
                        for _ in 0..TASKS {
                            let (revoked, joiner, done, after_revoke) = (
                                revoked.clone(),
                                joiner.clone(),
                                done.clone(),
                                after_revoke.clone(),
                            );
                            drop(p.spawn(move || {
                                if revoked.load(Ordering::SeqCst)
                                    && current_tid() == joiner.load(Ordering::SeqCst)
                                {
                                    after_revoke.fetch_add(1, Ordering::SeqCst);
                                }
                                std::thread::sleep(Duration::from_millis(4));
                                done.fetch_add(1, Ordering::SeqCst);
                            }));
                        }
                        spawned.store(true, Ordering::SeqCst);
                    },
                    || {
                        b_started.store(true, Ordering::SeqCst);
                        gate.wait();
                    },
                );
            })
        };
        wait_until("the spawns", || spawned.load(Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(20));
        let tid = joiner.load(Ordering::SeqCst);
        let grant = four_cpus().difference(&std::iter::once(cpu_of(&pool, tid)).collect());
        revoked.store(true, Ordering::SeqCst);
        let generation = writer.publish(grant, CpuSet::new());
        wait_until("the tasks", || done.load(Ordering::SeqCst) == TASKS);
        // A task may start between the publish and the monitor applying it.
        let late = after_revoke.load(Ordering::SeqCst);
        gate.set();
        root.join().expect("root task");
        assert!(
            late <= 30,
            "{kind}: {late} of {TASKS} tasks ran on the revoked joiner"
        );
        assert!(
            pool.wait_resized(generation, Duration::from_secs(20)),
            "{kind}: generation {generation} not applied"
        );
        check_tasks_follow_grant(&pool, grant, &[tid]);
    }
}
