//! Suspended and timed tasks on real threads, for every policy: a
//! suspended task runs only once resumed, exactly once; it holds no worker
//! meanwhile; dropping its resumer or its pool cancels it; timed tasks run
//! once due, never before.

#![cfg(not(loom))]

use allot_client::Cell;
use allot_runtime::affinity::{current_tid, thread_cpus};
use allot_runtime::{
    PolicyKind, Pool, Priority, Resumer, SpawnOptions, WorkerStats, current_priority,
    current_worker,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// A pool on a fixed grant of `cpus` of this process's CPUs.
fn pool_on(cpus: usize, kind: PolicyKind) -> Pool {
    let allowed: Vec<usize> = thread_cpus(current_tid())
        .expect("read this thread's CPUs")
        .into_iter()
        .collect();
    let cpus = cpus.min(allowed.len());
    let (cell, writer) =
        Cell::manual(allowed[..cpus].iter().copied().collect()).expect("manual cell");
    // The grant never changes; keep the writer for the pool's life.
    std::mem::forget(writer);
    Pool::builder()
        .cell(cell)
        .policy(allot_runtime::PolicySpec::new(kind))
        .max_workers(cpus)
        .name(format!("s-{kind}"))
        .build()
        .expect("pool")
}

/// Counts its drops: tells whether a cancelled task's closure was freed.
struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_suspended_task_runs_once_resumed_and_only_then() {
    for kind in PolicyKind::ALL {
        let pool = pool_on(2, kind);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let (resumer, handle) = pool
            .spawn_suspended(SpawnOptions::new().priority(Priority::High), move || {
                r.fetch_add(1, Ordering::SeqCst);
                current_priority()
            })
            .unwrap();
        assert_eq!(pool.suspended(), 1, "{kind}");
        // Other work goes on and finishes; the suspended task stays put.
        let done: Vec<_> = (0..8).map(|i| pool.spawn(move || i)).collect();
        for (i, h) in done.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), i);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{kind}: ran before resume");
        assert!(!handle.is_finished(), "{kind}");
        assert!(resumer.resume(), "{kind}");
        assert_eq!(handle.join().unwrap(), Some(Priority::High), "{kind}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{kind}");
        assert_eq!(pool.suspended(), 0, "{kind}");
        let total = WorkerStats::total(&pool.worker_stats());
        assert_eq!(total.tasks_resumed, 1, "{kind}: {total:?}");
    }
}

/// A task suspends itself: it makes its continuation, hands the resumer to
/// a thread outside the pool and returns. The pool's only worker is free
/// meanwhile, and runs the continuation once resumed.
#[test]
fn a_task_suspends_itself_without_holding_its_worker() {
    for kind in PolicyKind::ALL {
        let pool = Arc::new(pool_on(1, kind));
        let (give, take) = mpsc::channel::<Resumer>();
        let (result_tx, result) = mpsc::channel();
        let p2 = pool.clone();
        pool.spawn(move || {
            let (resumer, handle) = p2
                .spawn_suspended(SpawnOptions::new(), || "second half")
                .unwrap();
            give.send(resumer).unwrap();
            // Hand the continuation's handle on; this task ends here.
            result_tx.send(handle).unwrap();
        })
        .join()
        .unwrap();
        let resumer = take.recv().unwrap();
        let handle = result.recv().unwrap();
        // The one worker is free: it runs other work while the second half
        // waits.
        assert_eq!(pool.spawn(|| 7).join().unwrap(), 7, "{kind}");
        assert_eq!(pool.suspended(), 1, "{kind}");
        let stats = pool.worker_stats();
        assert_eq!(WorkerStats::total(&stats).tasks_suspended, 1, "{kind}");
        std::thread::spawn(move || assert!(resumer.resume()))
            .join()
            .unwrap();
        assert_eq!(handle.join().unwrap(), "second half", "{kind}");
    }
}

#[test]
fn dropping_the_resumer_cancels_the_task_and_frees_its_closure() {
    for kind in PolicyKind::ALL {
        let pool = pool_on(2, kind);
        let drops = Arc::new(AtomicUsize::new(0));
        let guard = Dropped(drops.clone());
        let (resumer, handle) = pool
            .spawn_suspended(SpawnOptions::new(), move || {
                let _keep = &guard;
                panic!("a cancelled task must not run")
            })
            .unwrap();
        resumer.cancel_now();
        let err = handle.join().expect_err("cancelled");
        assert!(err.is_cancelled(), "{kind}: {err}");
        assert_eq!(drops.load(Ordering::SeqCst), 1, "{kind}");
        assert_eq!(pool.suspended(), 0, "{kind}");
    }
}

/// A worker joining a suspended task's handle neither runs it early nor
/// sleeps through its resumption (resumed from outside, the task lands in
/// a queue the waiting worker does not serve, so the worker claims it).
#[test]
fn a_worker_joining_a_suspended_task_waits_for_its_resumption() {
    for kind in PolicyKind::ALL {
        let pool = pool_on(1, kind);
        let order = Mutex::new(Vec::new());
        let got = pool.install(|| {
            let (resumer, handle) = pool
                .spawn_suspended(SpawnOptions::new(), current_worker)
                .unwrap();
            let resumer_thread = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                resumer.resume()
            });
            order.lock().unwrap().push("joining");
            let w = handle.join().unwrap();
            order.lock().unwrap().push("joined");
            assert!(resumer_thread.join().unwrap());
            w
        });
        assert_eq!(got, Some(0), "{kind}");
        assert_eq!(*order.lock().unwrap(), ["joining", "joined"]);
    }
}

#[test]
fn dropping_the_pool_cancels_suspended_and_sleeping_tasks() {
    for kind in PolicyKind::ALL {
        let pool = pool_on(2, kind);
        let drops = Arc::new(AtomicUsize::new(0));
        let g1 = Dropped(drops.clone());
        let g2 = Dropped(drops.clone());
        let (resumer, suspended) = pool
            .spawn_suspended(SpawnOptions::new(), move || drop(g1))
            .unwrap();
        let sleeping = pool
            .spawn_after(Duration::from_secs(3600), SpawnOptions::new(), move || {
                drop(g2)
            })
            .unwrap();
        assert_eq!(pool.suspended(), 2);
        drop(pool);
        // The sleeper was cancelled with the pool's timer.
        assert!(sleeping.join().unwrap_err().is_cancelled(), "{kind}");
        // A resume after the pool is gone cancels instead of queueing.
        assert!(!resumer.resume(), "{kind}");
        assert!(suspended.join().unwrap_err().is_cancelled(), "{kind}");
        assert_eq!(drops.load(Ordering::SeqCst), 2, "{kind}");
    }
}

/// Timed tasks hold no worker while they sleep, run once each, never
/// before they are due, and a worker may join one.
#[test]
fn timed_tasks_run_when_due_without_holding_a_worker() {
    for kind in PolicyKind::ALL {
        let pool = pool_on(1, kind);
        let start = Instant::now();
        let delays = [120u64, 40, 80, 40, 0];
        let sleepers: Vec<_> = delays
            .iter()
            .map(|&ms| {
                let at = start + Duration::from_millis(ms);
                pool.spawn_after(Duration::from_millis(ms), SpawnOptions::new(), move || {
                    Instant::now() >= at
                })
                .unwrap()
            })
            .collect();
        // The only worker runs other work while they sleep.
        assert_eq!(pool.spawn(|| 1).join().unwrap(), 1);
        for (h, ms) in sleepers.into_iter().zip(delays) {
            assert!(h.join().unwrap(), "{kind}: the {ms} ms task ran early");
        }
        assert!(start.elapsed() >= Duration::from_millis(120));
        // Joined from a worker.
        let v = pool.install(|| {
            pool.spawn_after(Duration::from_millis(10), SpawnOptions::new(), || 5)
                .unwrap()
                .join()
                .unwrap()
        });
        assert_eq!(v, 5, "{kind}");
        assert_eq!(pool.suspended(), 0, "{kind}");
        let total = WorkerStats::total(&pool.worker_stats());
        assert_eq!(total.tasks_resumed, 6, "{kind}: {total:?}");
        assert_eq!(total.tasks_suspended, 1, "{kind}: made on a worker once");
    }
}

/// Many suspended tasks resumed from several threads at once, while the
/// pool runs: each runs exactly once.
#[test]
fn many_resumes_from_many_threads_run_each_task_once() {
    const N: usize = 2000;
    for kind in PolicyKind::ALL {
        let pool = pool_on(2, kind);
        let hits: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
        let mut resumers = Vec::new();
        let mut handles = Vec::new();
        for i in 0..N {
            let hits = hits.clone();
            let (r, h) = pool
                .spawn_suspended(SpawnOptions::new(), move || {
                    hits[i].fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
            resumers.push(r);
            handles.push(h);
        }
        let halves: Vec<Vec<Resumer>> = {
            let second = resumers.split_off(N / 2);
            vec![resumers, second]
        };
        std::thread::scope(|s| {
            for half in halves {
                s.spawn(move || {
                    for r in half {
                        assert!(r.resume());
                    }
                });
            }
        });
        for h in handles {
            h.join().unwrap();
        }
        assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1), "{kind}");
        assert_eq!(pool.suspended(), 0);
    }
}

#[test]
fn a_named_worker_that_does_not_exist_is_refused() {
    let pool = pool_on(1, PolicyKind::LocalLifo);
    let err = pool
        .spawn_suspended(SpawnOptions::new().worker(5), || ())
        .unwrap_err();
    assert!(err.to_string().contains("no worker 5"), "{err}");
    assert!(
        pool.spawn_after(Duration::ZERO, SpawnOptions::new().worker(9), || ())
            .is_err()
    );
    assert_eq!(pool.suspended(), 0);
}
