//! Priorities, named workers, placements and quanta on real threads, for
//! every policy of the library.

#![cfg(not(loom))]

use allot_client::Cell;
use allot_runtime::affinity::{current_tid, thread_cpus};
use allot_runtime::{
    JoinHandle, PolicyKind, PolicySpec, Pool, Priority, SpawnOptions, SpawnPlacement,
    current_priority, current_worker, yield_now,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A pool following a fixed grant of `cpus` of this process's CPUs.
fn pool_on(cpus: usize, spec: PolicySpec, quantum: Option<Duration>) -> Pool {
    let allowed: Vec<usize> = thread_cpus(current_tid())
        .expect("read this thread's CPUs")
        .into_iter()
        .collect();
    assert!(
        allowed.len() >= cpus,
        "this test needs {cpus} CPUs, the process may use {allowed:?}"
    );
    let (cell, writer) =
        Cell::manual(allowed[..cpus].iter().copied().collect()).expect("manual cell");
    // The grant never changes; keep the writer for the pool's life.
    std::mem::forget(writer);
    let mut b = Pool::builder()
        .cell(cell)
        .policy(spec)
        .max_workers(cpus)
        .name(format!("p-{}", spec.kind));
    if let Some(q) = quantum {
        b = b.quantum(q);
    }
    b.build().expect("pool")
}

/// Occupies the pool's only worker until the returned sender is dropped.
fn block_the_worker(pool: &Pool) -> mpsc::Sender<()> {
    let (started_tx, started) = mpsc::channel();
    let (release, wait) = mpsc::channel::<()>();
    pool.spawn(move || {
        started_tx.send(()).unwrap();
        let _ = wait.recv();
    });
    started.recv().expect("the blocking task started");
    release
}

const ORDER: [Priority; 5] = [
    Priority::Low,
    Priority::Normal,
    Priority::High,
    Priority::Low,
    Priority::High,
];

/// Spawns one task per entry of `ORDER`, at that priority; each logs the
/// priority it runs at.
fn spawn_order(pool: &Pool, log: &Arc<Mutex<Vec<Priority>>>) -> Vec<JoinHandle<()>> {
    ORDER
        .iter()
        .map(|&p| {
            let log = log.clone();
            pool.spawn_with(SpawnOptions::new().priority(p), move || {
                log.lock().unwrap().push(current_priority().unwrap())
            })
            .unwrap()
        })
        .collect()
}

fn sorted_high_first() -> Vec<Priority> {
    let mut want = ORDER.to_vec();
    want.sort_by(|a, b| b.cmp(a));
    want
}

#[test]
fn higher_priorities_run_first_from_outside_and_inside() {
    for kind in PolicyKind::ALL {
        // From outside the pool: the shared queue's levels.
        let pool = pool_on(1, kind.into(), None);
        let log = Arc::new(Mutex::new(Vec::new()));
        let release = block_the_worker(&pool);
        let handles = spawn_order(&pool, &log);
        drop(release);
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(*log.lock().unwrap(), sorted_high_first(), "{kind}, outside");

        // From a task on the worker: its own deques' levels (or the shared
        // queue, for global policies).
        log.lock().unwrap().clear();
        let inner = log.clone();
        let pool = Arc::new(pool);
        let p2 = pool.clone();
        pool.install(move || {
            drop(spawn_order(&p2, &inner));
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while log.lock().unwrap().len() < ORDER.len() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(*log.lock().unwrap(), sorted_high_first(), "{kind}, inside");
    }
}

#[test]
fn one_level_keeps_the_policy_order() {
    let pool = pool_on(
        1,
        PolicySpec::new(PolicyKind::GlobalFifo).with_levels(1),
        None,
    );
    let log = Arc::new(Mutex::new(Vec::new()));
    let release = block_the_worker(&pool);
    let handles = spawn_order(&pool, &log);
    drop(release);
    handles.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(
        *log.lock().unwrap(),
        ORDER.to_vec(),
        "FIFO, priorities ignored"
    );
}

#[test]
fn forks_and_scoped_tasks_inherit_the_priority() {
    for kind in PolicyKind::ALL {
        let pool = Arc::new(pool_on(2, kind.into(), None));
        let p2 = pool.clone();
        let seen = pool
            .spawn_with(SpawnOptions::new().priority(Priority::High), move || {
                let (a, b) = allot_runtime::join(current_priority, current_priority);
                let scoped = Mutex::new(Vec::new());
                p2.scope(|s| {
                    for _ in 0..4 {
                        s.spawn(|_| scoped.lock().unwrap().push(current_priority()));
                    }
                });
                (a, b, scoped.into_inner().unwrap())
            })
            .unwrap()
            .join()
            .unwrap();
        let high = Some(Priority::High);
        assert_eq!(seen, (high, high, vec![high; 4]), "{kind}");
        assert_eq!(current_priority(), None, "not on a worker");
    }
}

/// A task that its joiner claims and runs on the spot (it waited in the
/// global queue of a one-worker pool, so nobody else could run it) runs at
/// the priority it was spawned with, as if the queue had handed it out.
#[test]
fn a_claimed_task_keeps_its_priority() {
    for kind in [PolicyKind::GlobalFifo, PolicyKind::GlobalLifo] {
        let pool = pool_on(1, kind.into(), None);
        let seen = pool.install(|| {
            let h = pool
                .spawn_with(SpawnOptions::new().priority(Priority::High), || {
                    (
                        current_priority(),
                        allot_runtime::join(current_priority, || ()).0,
                    )
                })
                .unwrap();
            h.join().unwrap()
        });
        let high = Some(Priority::High);
        assert_eq!(seen, (high, high), "{kind}");
    }
}

#[test]
fn a_named_worker_runs_its_tasks_and_bad_names_fail() {
    for kind in PolicyKind::ALL {
        let pool = pool_on(2, kind.into(), None);
        // Both workers serving their CPUs: the inbox of a worker that holds
        // none (not started yet) is the others' to empty.
        assert!(allot_testkit::eventually(Duration::from_secs(10), || pool
            .workers()
            == 2));
        let wrong = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..200)
            .map(|i| {
                let (w, wrong) = (i % 2, wrong.clone());
                pool.spawn_with(SpawnOptions::new().worker(w), move || {
                    if current_worker() != Some(w) {
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .unwrap()
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(
            wrong.load(Ordering::Relaxed),
            0,
            "{kind} {:?}",
            pool.worker_stats()
        );

        let e = pool
            .spawn_with(SpawnOptions::new().worker(2), || ())
            .unwrap_err();
        assert_eq!(e.to_string(), "no worker 2: the pool has workers 0 to 1");
    }
}

#[test]
fn round_robin_placement_runs_every_spawned_task_once() {
    for kind in [PolicyKind::LocalLifo, PolicyKind::LocalFifo] {
        let spec = PolicySpec::new(kind).with_placement(SpawnPlacement::RoundRobin);
        let pool = Arc::new(pool_on(2, spec, None));
        let on = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let (p2, on2) = (pool.clone(), on.clone());
        let (me, handles) = pool.install(move || {
            let handles = (0..100)
                .map(|_| {
                    let on = on2.clone();
                    p2.spawn(move || {
                        on[current_worker().unwrap()].fetch_add(1, Ordering::Relaxed);
                    })
                })
                .collect::<Vec<_>>();
            (current_worker().unwrap(), handles)
        });
        handles.into_iter().for_each(|h| h.join().unwrap());
        // Every other task was offered to the other worker (that decision
        // is tested in policy/local.rs); an offer runs on whichever worker
        // looks for work first, which on a busy machine may be the spawner
        // for all of them. What holds whatever the timing: each ran once.
        let counts = [0, 1].map(|i| on[i].load(Ordering::Relaxed));
        assert_eq!(
            counts[0] + counts[1],
            100,
            "{kind}: spawned on {me}, ran {counts:?}"
        );
    }
}

/// A long task of priority `long` that calls `yield_now` in its loop, and
/// a task of priority `late` started once it runs, on one worker: returns
/// whether the late task ran while the long one was still going (the long
/// task gives up after `patience`), and the yields the worker counted.
fn runs_before_the_long_task_ends(
    kind: PolicyKind,
    quantum: Option<Duration>,
    long: Priority,
    late: Priority,
    patience: Duration,
) -> (bool, u64) {
    let pool = pool_on(1, kind.into(), quantum);
    let late_ran = Arc::new(AtomicBool::new(false));
    let (started_tx, started) = mpsc::channel();
    let flag = late_ran.clone();
    let long_task = pool
        .spawn_with(SpawnOptions::new().priority(long), move || {
            started_tx.send(()).unwrap();
            let until = Instant::now() + patience;
            while !flag.load(Ordering::SeqCst) && Instant::now() < until {
                yield_now();
                std::hint::spin_loop();
            }
            flag.load(Ordering::SeqCst)
        })
        .unwrap();
    started.recv().unwrap();
    let flag = late_ran.clone();
    let late_task = pool
        .spawn_with(SpawnOptions::new().priority(late), move || {
            flag.store(true, Ordering::SeqCst)
        })
        .unwrap();
    let seen = long_task.join().unwrap();
    late_task.join().unwrap();
    (seen, pool.worker_stats().iter().map(|s| s.yields).sum())
}

#[test]
fn quanta_let_a_ready_high_task_run_inside_a_long_low_one() {
    let q = Some(Duration::from_millis(2));
    let patience = Duration::from_secs(20);
    for kind in PolicyKind::ALL {
        let (ran, yields) =
            runs_before_the_long_task_ends(kind, q, Priority::Low, Priority::High, patience);
        assert!(ran, "{kind}: the high task waited for the whole low one");
        assert_eq!(yields, 1, "{kind}: one yield ran the high task");
        // Equal priority: time-shared too.
        let (ran, _) =
            runs_before_the_long_task_ends(kind, q, Priority::Normal, Priority::Normal, patience);
        assert!(
            ran,
            "{kind}: an equal-priority task waited for the whole long one"
        );
    }
}

#[test]
fn no_preemption_without_a_quantum_or_for_lower_priorities() {
    let patience = Duration::from_millis(60);
    for kind in PolicyKind::ALL {
        let (ran, yields) =
            runs_before_the_long_task_ends(kind, None, Priority::Low, Priority::High, patience);
        assert!(
            !ran && yields == 0,
            "{kind}: a pool without a quantum preempted"
        );
        let q = Some(Duration::from_millis(1));
        let (ran, yields) =
            runs_before_the_long_task_ends(kind, q, Priority::Normal, Priority::Low, patience);
        assert!(
            !ran && yields == 0,
            "{kind}: a lower-priority task ran inside a normal one"
        );
    }
    assert!(!yield_now(), "outside a pool yield_now does nothing");
}
