//! Per-worker statistics follow what the pool did: tasks run and created
//! add up, an idle worker steals, sleeping is counted and timed, and a
//! worker whose CPU is revoked counts a retirement.

use allot_client::Cell;
use allot_runtime::{Pool, WorkerStats};
use allot_testkit::eventually;
use allot_topo::CpuSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[test]
fn worker_statistics_follow_the_work() {
    let allowed = allot_topo::allowed_cpus().expect("allowed CPUs");
    if !allot_testkit::prerequisite(allowed.len() >= 2, "needs 2 CPUs to see stealing") {
        return;
    }
    let two: CpuSet = allowed.iter().take(2).collect();
    let (cell, mut writer) = Cell::manual(two).expect("manual cell");
    let pool = Pool::builder()
        .cell(cell)
        .max_workers(2)
        .name("stats-test")
        .build()
        .expect("pool");
    assert!(
        eventually(Duration::from_secs(10), || pool.workers() == 2),
        "two workers"
    );

    const TASKS: u64 = 400;
    let ran = AtomicU64::new(0);
    pool.install(|| {
        pool.scope(|s| {
            for _ in 0..TASKS {
                s.spawn(|_| {
                    std::hint::black_box((0..200_000u64).sum::<u64>());
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }
        })
    });
    assert_eq!(ran.load(Ordering::Relaxed), TASKS);
    // The 400 tasks, the installed closure, and nothing else ran (the
    // closure's worker counts it just after the caller was released).
    assert!(
        eventually(Duration::from_secs(10), || WorkerStats::total(
            &pool.worker_stats()
        )
        .tasks_run
            == TASKS + 1),
        "{:#?}",
        pool.worker_stats()
    );
    let stats = pool.worker_stats();
    assert_eq!(stats.len(), 2);
    let total = WorkerStats::total(&stats);
    assert_eq!(total.tasks_run, pool.completed());
    assert!(total.tasks_created >= TASKS, "{stats:#?}");
    assert!(total.queue_high_water >= 2, "{stats:#?}");
    assert!(
        total.tasks_stolen >= 1,
        "the second worker steals: {stats:#?}"
    );
    assert!(stats.iter().all(|s| s.tasks_run > 0), "{stats:#?}");

    // Idle workers go to sleep and the sleep is timed.
    assert!(
        eventually(Duration::from_secs(10), || {
            let t = WorkerStats::total(&pool.worker_stats());
            t.sleeps >= 2 && t.time_asleep > Duration::ZERO
        }),
        "{:#?}",
        pool.worker_stats()
    );

    // Revoking a CPU retires the worker that served it.
    let one: CpuSet = allowed.iter().take(1).collect();
    let g = writer.publish(one, CpuSet::new());
    assert!(pool.wait_resized(g, Duration::from_secs(10)));
    let after = pool.worker_stats();
    assert_eq!(WorkerStats::total(&after).retirements, 1, "{after:#?}");
    let retired = after.iter().find(|s| s.retirements == 1).unwrap();
    assert_eq!(retired.cpu, None, "{after:#?}");
    assert!(
        after.iter().any(|s| s.cpu == one.iter().next()),
        "{after:#?}"
    );
}

/// A polling pool (a partition's) never parks its workers, however long
/// they idle, and runs what it is given; an ordinary pool's idle workers
/// park after their spin budget.
#[test]
fn polling_workers_never_sleep() {
    let one: CpuSet = allot_topo::allowed_cpus()
        .expect("allowed CPUs")
        .iter()
        .take(1)
        .collect();
    let build = |poll: bool| {
        let (cell, _writer) = Cell::manual(one).expect("manual cell");
        let b = Pool::builder().cell(cell).max_workers(1).name("poll-test");
        let pool = if poll { b.poll() } else { b }.build().expect("pool");
        assert!(eventually(Duration::from_secs(10), || pool.workers() == 1));
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(pool.spawn(|| 7).join().unwrap(), 7);
        }
        WorkerStats::total(&pool.worker_stats()).sleeps
    };
    assert_eq!(build(true), 0, "a polling worker slept");
    assert!(
        build(false) >= 10,
        "an ordinary worker parks between tasks 5 ms apart"
    );
}
