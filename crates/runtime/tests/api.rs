//! Pool API behaviour on real threads: join, scope, for_each, spawn,
//! panics, policies, standalone cells.

#![cfg(not(loom))]

use allot_client::Cell;
use allot_runtime::{Event, Latch, PolicyKind, Pool};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn pool(kind: PolicyKind) -> Pool {
    Pool::builder()
        .cell(Cell::standalone())
        .policy(kind)
        .name(format!("t-{kind}"))
        .build()
        .expect("pool")
}

fn fib(n: u64) -> u64 {
    if n < 12 {
        return fib_seq(n);
    }
    let (a, b) = allot_runtime::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

fn fib_seq(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

#[test]
fn nested_join_fib() {
    for kind in PolicyKind::ALL {
        let p = pool(kind);
        assert_eq!(p.install(|| fib(24)), fib_seq(24), "{kind}");
        assert_eq!(p.join(|| fib(20), || 7), (fib_seq(20), 7));
    }
}

#[test]
fn for_each_and_map_reduce_match_sequential() {
    for kind in PolicyKind::ALL {
        let p = pool(kind);
        let n = 100_000usize;
        let data: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
        let want: u64 = data.iter().sum();
        let sum = std::sync::atomic::AtomicU64::new(0);
        p.for_each(0..n, 256, |i| {
            sum.fetch_add(data[i], Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), want, "{kind}");
        let got = p.map_reduce(
            0..n,
            1000,
            || 0u64,
            |r| data[r].iter().sum::<u64>(),
            |a, b| a + b,
        );
        assert_eq!(got, want);
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        p.for_each_chunk(0..n, 7, |r| {
            assert!(r.len() <= 7);
            for i in r {
                hits[i].fetch_add(1, Ordering::Relaxed);
            }
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        p.for_each(5..5, 1, |_| panic!("empty range runs nothing"));
    }
}

#[test]
fn scope_borrows_and_waits() {
    for kind in PolicyKind::ALL {
        let p = pool(kind);
        let mut v = vec![0u64; 10_000];
        let counter = AtomicUsize::new(0);
        p.scope(|s| {
            for (k, chunk) in v.chunks_mut(100).enumerate() {
                let counter = &counter;
                s.spawn(move |s2| {
                    chunk.iter_mut().for_each(|x| *x = k as u64);
                    s2.spawn(move |_| {
                        counter.fetch_add(1, Ordering::Relaxed);
                    });
                });
            }
        });
        assert_eq!(counter.load(Ordering::Relaxed), 100);
        assert!(
            v.chunks(100)
                .enumerate()
                .all(|(k, c)| c.iter().all(|&x| x == k as u64))
        );
    }
}

#[test]
fn spawn_and_join_handles() {
    let p = pool(PolicyKind::LocalLifo);
    let hs: Vec<_> = (0..1000u64).map(|i| p.spawn(move || i * 2)).collect();
    let total: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, 999 * 1000);
    // Joining from inside a task runs other work meanwhile.
    let inner = p.install(|| {
        let hs: Vec<_> = (0..100u64).map(|i| p.spawn(move || i)).collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(inner, 4950);
}

#[test]
fn panics_reach_the_joiner_and_pool_survives() {
    for kind in PolicyKind::ALL {
        let p = pool(kind);
        let h = p.spawn(|| -> u32 { panic!("boom in task") });
        let err = h.join().unwrap_err();
        assert_eq!(err.message(), Some("boom in task"));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.join(|| 1, || -> i32 { panic!("right side") })
        }));
        assert!(r.is_err());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.scope(|s| {
                s.spawn(|_| panic!("scoped"));
                s.spawn(|_| {});
            })
        }));
        assert!(r.is_err());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.install(|| panic!("installed"))
        }));
        assert!(r.is_err());
        // Still works.
        assert_eq!(p.install(|| fib(18)), fib_seq(18));
        assert_eq!(p.spawn(|| 5).join().unwrap(), 5);
    }
}

/// `join` runs both closures whatever happens, also when `a` panics and
/// nobody stole `b` (one worker: `b` cannot be stolen), then continues the
/// panic of `a` (the first one if both panic), as rayon does.
#[test]
fn join_runs_b_when_a_panics() {
    for kind in PolicyKind::ALL {
        let p = Pool::builder()
            .cell(Cell::standalone())
            .policy(kind)
            .max_workers(1)
            .build()
            .expect("pool");
        let ran_b = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.join(
                || -> u32 { panic!("left") },
                || ran_b.fetch_add(1, Ordering::SeqCst),
            )
        }));
        let payload = r.expect_err("a's panic continues");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"left"), "{kind}");
        assert_eq!(ran_b.load(Ordering::SeqCst), 1, "{kind}: b did not run");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.join(|| -> u32 { panic!("left") }, || -> u32 { panic!("right") })
        }));
        let payload = r.expect_err("a panic continues");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"left"), "{kind}");
    }
}

#[test]
fn standalone_pool_runs_everything() {
    let p = Pool::builder().cell(Cell::standalone()).build().unwrap();
    let allowed = allot_topo::allowed_cpus().unwrap();
    assert_eq!(p.workers(), allowed.len().min(p.max_workers()));
    let mut cpus: Vec<usize> = p.worker_threads().iter().map(|w| w.cpu).collect();
    cpus.sort_unstable();
    assert_eq!(cpus, allowed.iter().collect::<Vec<_>>());
    let n = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..100)
        .map(|_| {
            let n = n.clone();
            p.spawn(move || n.fetch_add(1, Ordering::SeqCst))
        })
        .collect();
    hs.into_iter().for_each(|h| {
        h.join().unwrap();
    });
    assert_eq!(n.load(Ordering::SeqCst), 100);
}

#[test]
fn auto_pool_without_broker() {
    // SAFETY-free: only points the client at a socket that does not exist.
    let p = Pool::builder()
        .cell(Cell::auto("runtime-test-no-broker"))
        .build()
        .unwrap();
    assert!(p.workers() >= 1);
    assert_eq!(p.install(|| fib(15)), fib_seq(15));
}

#[test]
fn latch_and_event_across_pool_tasks() {
    let p = pool(PolicyKind::LocalLifo);
    let latch = Arc::new(Latch::new(10));
    for _ in 0..10 {
        let l = latch.clone();
        drop(p.spawn(move || l.count_down()));
    }
    assert!(latch.wait_timeout(Duration::from_secs(10)));
    let ev = Arc::new(Event::new());
    let e2 = ev.clone();
    let h = p.spawn(move || e2.wait());
    std::thread::sleep(Duration::from_millis(5));
    ev.set();
    h.join().unwrap();
}

#[test]
fn drop_finishes_queued_tasks() {
    let n = Arc::new(AtomicUsize::new(0));
    {
        let p = pool(PolicyKind::GlobalFifo);
        for _ in 0..10_000 {
            let n = n.clone();
            drop(p.spawn(move || {
                n.fetch_add(1, Ordering::Relaxed);
            }));
        }
    }
    assert_eq!(n.load(Ordering::Relaxed), 10_000);
}
