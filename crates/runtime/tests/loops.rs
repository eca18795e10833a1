//! Parallel loops on real threads: the static schedule's blocks, adaptive
//! splitting's task count, order of `map_reduce`, and exactly-once pieces
//! under every policy while the grant changes.

#![cfg(not(loom))]

use allot_client::Cell;
use allot_runtime::{PolicyKind, Pool, WorkerStats};
use allot_testkit::eventually;
use allot_topo::CpuSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Some work the optimiser cannot fold away.
fn spin(n: u64) {
    for k in 0..n {
        std::hint::black_box(k);
    }
}

/// A pool of `n` workers on the first `n` allowed CPUs (a manual cell).
fn pool_on(n: usize, kind: PolicyKind) -> Option<(Pool, allot_client::GrantWriter)> {
    let allowed = allot_topo::allowed_cpus().expect("allowed CPUs");
    if allowed.len() < n {
        return None;
    }
    let cpus: CpuSet = allowed.iter().take(n).collect();
    let (cell, writer) = Cell::manual(cpus).expect("manual cell");
    let pool = Pool::builder()
        .cell(cell)
        .max_workers(n)
        .policy(kind)
        .name("loops-test")
        .build()
        .expect("pool");
    assert!(
        eventually(Duration::from_secs(10), || pool.workers() == n),
        "{n} workers"
    );
    Some((pool, writer))
}

#[test]
fn the_static_schedule_calls_the_body_once_per_worker_on_contiguous_blocks() {
    let Some((pool, _w)) = pool_on(2, PolicyKind::LocalLifo) else {
        allot_testkit::prerequisite(false, "needs 2 CPUs");
        return;
    };
    for len in [1usize, 2, 3, 1001] {
        let seen = Mutex::new(Vec::new());
        pool.for_each_static(10..10 + len, |r| seen.lock().unwrap().push(r));
        let mut blocks = seen.into_inner().unwrap();
        blocks.sort_by_key(|r| r.start);
        assert_eq!(blocks.len(), len.min(2), "{len}: {blocks:?}");
        assert_eq!(blocks[0].start, 10);
        assert_eq!(blocks.last().unwrap().end, 10 + len);
        for w in blocks.windows(2) {
            assert_eq!(w[0].end, w[1].start);
            assert!(w[0].len().abs_diff(w[1].len()) <= 1, "{blocks:?}");
        }
    }
    pool.for_each_static(3..3, |_| panic!("an empty range runs nothing"));
    // From a worker as from outside.
    let calls = AtomicUsize::new(0);
    pool.install(|| {
        pool.for_each_static(0..100, |_| {
            calls.fetch_add(1, Ordering::Relaxed);
        })
    });
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[test]
fn a_one_worker_loop_forks_once_whatever_its_length() {
    // One worker: nobody steals, so the budget (1) allows one fork and the
    // two halves run their pieces in order. Forking down to single pieces
    // would create 4095 tasks here.
    let Some((pool, _w)) = pool_on(1, PolicyKind::LocalLifo) else {
        unreachable!("every machine has a CPU");
    };
    let before = WorkerStats::total(&pool.worker_stats()).tasks_created;
    let pieces = AtomicUsize::new(0);
    pool.install(|| {
        pool.for_each_chunk(0..4096, 1, |r| {
            assert_eq!(r.len(), 1);
            pieces.fetch_add(1, Ordering::Relaxed);
        })
    });
    assert_eq!(pieces.load(Ordering::Relaxed), 4096);
    let created = WorkerStats::total(&pool.worker_stats()).tasks_created - before;
    assert_eq!(created, 1, "{:#?}", pool.worker_stats());
}

#[test]
fn two_workers_make_few_tasks_for_many_pieces() {
    let Some((pool, _w)) = pool_on(2, PolicyKind::LocalLifo) else {
        allot_testkit::prerequisite(false, "needs 2 CPUs");
        return;
    };
    let before = WorkerStats::total(&pool.worker_stats()).tasks_created;
    let hits: Vec<AtomicUsize> = (0..4096).map(|_| AtomicUsize::new(0)).collect();
    pool.install(|| {
        pool.for_each_chunk(0..4096, 1, |r| {
            for i in r {
                spin(200);
                hits[i].fetch_add(1, Ordering::Relaxed);
            }
        })
    });
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    // Every steal re-opens splitting for the stolen half, so the count
    // depends on timing; eager halving would make 4095.
    let created = WorkerStats::total(&pool.worker_stats()).tasks_created - before;
    assert!(
        (1..1024).contains(&created),
        "{created} tasks for 4096 pieces"
    );
}

#[test]
fn map_reduce_combines_in_index_order() {
    // Concatenation is associative but not commutative.
    for kind in PolicyKind::ALL {
        let Some((pool, _w)) = pool_on(1, kind) else {
            unreachable!("every machine has a CPU");
        };
        let got = pool.map_reduce(
            0..500,
            3,
            Vec::new,
            |r| r.collect::<Vec<usize>>(),
            |mut a, b| {
                a.extend(b);
                a
            },
        );
        assert_eq!(got, (0..500).collect::<Vec<_>>(), "{kind}");
    }
    let Some((pool, _w)) = pool_on(2, PolicyKind::LocalFifo) else {
        allot_testkit::prerequisite(false, "needs 2 CPUs");
        return;
    };
    let got = pool.map_reduce(
        0..5000,
        7,
        String::new,
        |r| {
            r.map(|i| char::from(b'a' + (i % 26) as u8))
                .collect::<String>()
        },
        |a, b| a + &b,
    );
    let want: String = (0..5000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn every_policy_runs_every_piece_once_while_the_grant_changes() {
    let allowed = allot_topo::allowed_cpus().expect("allowed CPUs");
    let cpus: Vec<usize> = allowed.iter().take(2).collect();
    for kind in PolicyKind::ALL {
        let Some((pool, mut writer)) = pool_on(cpus.len(), kind) else {
            unreachable!("the CPUs were counted above");
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let changes = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let set: CpuSet = if i % 3 == 2 {
                        cpus.iter().copied().collect()
                    } else {
                        [cpus[i % cpus.len()]].into_iter().collect()
                    };
                    writer.publish(set, CpuSet::default());
                    i += 1;
                    changes.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(3));
                }
            });
            // At least 20 rounds, and until the grant changed 30 times.
            let mut round = 0;
            while round < 20 || changes.load(Ordering::Relaxed) < 30 {
                round += 1;
                let hits: Vec<AtomicUsize> = (0..3000).map(|_| AtomicUsize::new(0)).collect();
                let run = |r: std::ops::Range<usize>| {
                    for i in r {
                        spin(500);
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    }
                };
                if round % 2 == 0 {
                    pool.for_each_chunk(0..3000, 5, run);
                } else {
                    pool.for_each_static(0..3000, run);
                }
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "{kind}, round {round}"
                );
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
}
