//! A worker that waits inside a task (`join`, `scope`, `JoinHandle::join`)
//! runs other tasks on its own stack meanwhile. These scenarios used to
//! nest one unrelated task per queued task (the `fifo` policy's waiter took
//! the oldest global task) and overflow the worker's stack; now the nesting
//! depth stays bounded by the program's own nesting (see "Waiting" in
//! `controller/mod.rs`).

#![cfg(not(loom))]

use allot_client::Cell;
use allot_runtime::{PolicyKind, Pool};
use std::cell::Cell as StdCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn pool(kind: PolicyKind, workers: usize) -> Pool {
    Pool::builder()
        .cell(Cell::standalone())
        .policy(kind)
        .max_workers(workers)
        .name(format!("nest-{kind}-{workers}"))
        .build()
        .expect("pool")
}

thread_local! {
    static DEPTH: StdCell<usize> = const { StdCell::new(0) };
}

/// Runs `f` as one level of task nesting on this thread and records the
/// deepest level seen in `max`.
fn level<R>(max: &AtomicUsize, f: impl FnOnce() -> R) -> R {
    let d = DEPTH.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    max.fetch_max(d, Ordering::Relaxed);
    let r = f();
    DEPTH.with(|c| c.set(c.get() - 1));
    r
}

/// Deepest nesting the scenarios below may reach: an outer task, the
/// task it waits for, and slack for a stolen fork half or two.
const MAX_DEPTH: usize = 6;

#[test]
fn nested_scopes_over_a_backlog_stay_shallow() {
    const N: usize = 50_000;
    for kind in PolicyKind::ALL {
        for workers in [1, 2] {
            let pool = pool(kind, workers);
            let ran = AtomicUsize::new(0);
            let max = AtomicUsize::new(0);
            pool.scope(|s| {
                for _ in 0..N {
                    s.spawn(|_| {
                        level(&max, || {
                            pool.scope(|s2| {
                                s2.spawn(|_| {
                                    level(&max, || ran.fetch_add(1, Ordering::Relaxed));
                                })
                            })
                        })
                    });
                }
            });
            assert_eq!(ran.load(Ordering::Relaxed), N, "{kind}/{workers}");
            let depth = max.load(Ordering::Relaxed);
            eprintln!("nested scopes, {kind}, {workers} workers: depth {depth}");
            assert!(depth <= MAX_DEPTH, "{kind}/{workers}: nested {depth} deep");
        }
    }
}

#[test]
fn spawn_join_over_a_backlog_stays_shallow() {
    const N: usize = 20_000;
    for kind in PolicyKind::ALL {
        for workers in [1, 2] {
            let pool = Arc::new(pool(kind, workers));
            let max = Arc::new(AtomicUsize::new(0));
            // Every outer task is queued before the first one runs far.
            let outer: Vec<_> = (0..N)
                .map(|i| {
                    let (p, m) = (pool.clone(), max.clone());
                    pool.spawn(move || {
                        level(&m, || {
                            let m2 = m.clone();
                            p.spawn(move || level(&m2, || i)).join().unwrap()
                        })
                    })
                })
                .collect();
            let sum: usize = outer.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(sum, N * (N - 1) / 2, "{kind}/{workers}");
            let depth = max.load(Ordering::Relaxed);
            eprintln!("spawn/join, {kind}, {workers} workers: depth {depth}");
            assert!(depth <= MAX_DEPTH, "{kind}/{workers}: nested {depth} deep");
        }
    }
}

/// Scoped tasks spawned from a thread outside the pool go through the
/// global queue, which a waiting owner does not serve: the owner claims
/// them (with one worker, nobody else could run them).
#[test]
fn scoped_tasks_from_outside_the_pool_finish() {
    for kind in PolicyKind::ALL {
        for workers in [1, 2] {
            let pool = pool(kind, workers);
            let ran = AtomicUsize::new(0);
            pool.scope(|s| {
                std::thread::scope(|ts| {
                    for _ in 0..4 {
                        ts.spawn(|| {
                            for _ in 0..500 {
                                s.spawn(|s2| {
                                    ran.fetch_add(1, Ordering::Relaxed);
                                    s2.spawn(|_| {
                                        ran.fetch_add(1, Ordering::Relaxed);
                                    });
                                });
                            }
                        });
                    }
                });
            });
            assert_eq!(ran.load(Ordering::Relaxed), 4_000, "{kind}/{workers}");
        }
    }
}
