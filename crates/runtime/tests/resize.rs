//! The pool under a grant that changes every few milliseconds: every task
//! runs exactly once, and after each change every worker is pinned to one
//! granted CPU, one worker per CPU (read back from /proc).

#![cfg(not(loom))]

use allot_client::{Cell, GrantWriter};
use allot_runtime::affinity::thread_cpus;
use allot_runtime::{PolicyKind, Pool};
use allot_topo::CpuSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn allowed() -> Vec<usize> {
    allot_topo::allowed_cpus()
        .expect("allowed cpus")
        .iter()
        .collect()
}

/// A random non-empty subset of `cpus`; every other call a single CPU, so
/// the pool keeps shrinking to one worker and growing back.
fn random_grant(rng: &mut Rng, cpus: &[usize], step: u64) -> CpuSet {
    if step.is_multiple_of(2) {
        return std::iter::once(cpus[(rng.next() % cpus.len() as u64) as usize]).collect();
    }
    loop {
        let s: CpuSet = cpus
            .iter()
            .copied()
            .filter(|_| !rng.next().is_multiple_of(4))
            .collect();
        if !s.is_empty() {
            return s;
        }
    }
}

/// Publishes a new random grant every 1–4 ms until `stop`.
fn churn(mut writer: GrantWriter, stop: &AtomicBool, changes: &AtomicU64) {
    let cpus = allowed();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut step = 0;
    while !stop.load(Ordering::Relaxed) {
        writer.publish(random_grant(&mut rng, &cpus, step), CpuSet::new());
        changes.fetch_add(1, Ordering::Relaxed);
        step += 1;
        std::thread::sleep(Duration::from_micros(1000 + rng.next() % 3000));
    }
}

fn check_exactly_once(flags: &[AtomicU8]) {
    let bad: Vec<usize> = flags
        .iter()
        .enumerate()
        .filter(|(_, f)| f.load(Ordering::Relaxed) != 1)
        .map(|(i, _)| i)
        .take(10)
        .collect();
    assert!(
        bad.is_empty(),
        "tasks not run exactly once (first few): {bad:?}"
    );
}

fn million_tasks(kind: PolicyKind, n: usize) {
    let (cell, writer) = Cell::manual(allowed().into_iter().collect()).expect("manual cell");
    let pool = Pool::builder()
        .cell(cell)
        .policy(kind)
        .name(format!("m-{kind}"))
        .build()
        .expect("pool");
    let flags: Arc<[AtomicU8]> = (0..n).map(|_| AtomicU8::new(0)).collect();
    let stop = AtomicBool::new(false);
    let changes = AtomicU64::new(0);
    let external_done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    std::thread::scope(|ts| {
        ts.spawn(|| churn(writer, &stop, &changes));
        // Half as scoped tasks spawned from a worker (its deque fills up,
        // so retirements must drain it), in several scopes.
        let half = n / 2;
        let per_scope = half / 5;
        for s in 0..5 {
            pool.scope(|sc| {
                let flags = &flags;
                for i in s * per_scope..(s + 1) * per_scope {
                    sc.spawn(move |_| {
                        flags[i].fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
        }
        // The rest as independent tasks from outside the pool, half of them
        // forking once more with `join`.
        let mut i = 5 * per_scope;
        while i < n {
            let (flags, ext) = (flags.clone(), external_done.clone());
            if i + 1 < n && i.is_multiple_of(4) {
                let (a, b) = (i, i + 1);
                drop(pool.spawn(move || {
                    allot_runtime::join(
                        || flags[a].fetch_add(1, Ordering::Relaxed),
                        || flags[b].fetch_add(1, Ordering::Relaxed),
                    );
                    ext.fetch_add(2, Ordering::Relaxed);
                }));
                i += 2;
            } else {
                drop(pool.spawn(move || {
                    flags[i].fetch_add(1, Ordering::Relaxed);
                    ext.fetch_add(1, Ordering::Relaxed);
                }));
                i += 1;
            }
        }
        let want = n - 5 * per_scope;
        let deadline = Instant::now() + Duration::from_secs(60);
        while external_done.load(Ordering::Relaxed) < want {
            assert!(Instant::now() < deadline, "tasks did not finish");
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
    });
    check_exactly_once(&flags);
    assert!(
        changes.load(Ordering::Relaxed) > 10,
        "grant changed only {} times",
        changes.load(Ordering::Relaxed)
    );
    eprintln!(
        "{kind}: {n} tasks, {} grant changes, {:?}",
        changes.load(Ordering::Relaxed),
        started.elapsed()
    );
}

#[test]
fn million_tasks_exactly_once_under_grant_churn_lifo() {
    million_tasks(PolicyKind::LocalLifo, 1_000_000);
}

#[test]
fn tasks_exactly_once_under_grant_churn_fifo() {
    million_tasks(PolicyKind::GlobalFifo, 300_000);
}

#[test]
fn tasks_exactly_once_under_grant_churn_local_fifo() {
    million_tasks(PolicyKind::LocalFifo, 300_000);
}

#[test]
fn tasks_exactly_once_under_grant_churn_global_lifo() {
    million_tasks(PolicyKind::GlobalLifo, 300_000);
}

#[test]
fn affinity_follows_every_grant_change() {
    let cpus = allowed();
    let (cell, mut writer) = Cell::manual(cpus.iter().copied().collect()).expect("manual cell");
    let pool = Pool::builder()
        .cell(cell)
        .name("aff")
        .build()
        .expect("pool");
    let stop = AtomicBool::new(false);
    let ran = AtomicU64::new(0);
    let mut rng = Rng(0x0bad_cafe_f00d_1234);
    std::thread::scope(|ts| {
        // Background load, so workers are often mid-task when their CPU goes.
        ts.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                pool.for_each(0..2_000, 16, |_| {
                    ran.fetch_add(1, Ordering::Relaxed);
                    std::hint::black_box((0..200).sum::<u64>());
                });
            }
        });
        for step in 0..60 {
            let grant = random_grant(&mut rng, &cpus, step);
            let generation = writer.publish(grant, CpuSet::new());
            assert!(
                pool.wait_resized(generation, Duration::from_secs(10)),
                "generation {generation} not applied"
            );
            let workers = pool.worker_threads();
            let mut seen = CpuSet::new();
            for w in &workers {
                let actual = thread_cpus(w.tid).expect("read worker affinity");
                assert_eq!(
                    actual.iter().collect::<Vec<_>>(),
                    vec![w.cpu],
                    "worker {w:?} pinned to {actual}"
                );
                assert!(seen.insert(w.cpu), "two workers on CPU {}", w.cpu);
            }
            assert_eq!(seen, grant, "workers on {seen}, grant {grant}");
            assert_eq!(pool.workers(), grant.len());
            std::thread::sleep(Duration::from_micros(500 + rng.next() % 3000));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(ran.load(Ordering::Relaxed) > 0);
    assert_eq!(pool.pin_errors(), 0);
}

#[test]
fn threads_caps_workers_and_lent_cpus_host_workers() {
    let cpus = allowed();
    let (cell, mut writer) = Cell::manual(cpus.iter().copied().collect()).expect("manual cell");
    let pool = Pool::builder()
        .cell(cell)
        .name("lent")
        .build()
        .expect("pool");
    let all: CpuSet = cpus.iter().copied().collect();
    let lent: CpuSet = std::iter::once(cpus[0]).collect();
    let g = writer.publish(all, lent);
    assert!(pool.wait_resized(g, Duration::from_secs(10)));
    assert_eq!(pool.workers(), cpus.len());
    // A pool capped at one worker uses an owned CPU before a lent one.
    let (cell, mut writer) = Cell::manual(all).expect("manual cell");
    let small = Pool::builder()
        .cell(cell)
        .max_workers(1)
        .name("cap")
        .build()
        .expect("pool");
    let g = writer.publish(all, lent);
    assert!(small.wait_resized(g, Duration::from_secs(10)));
    assert_eq!(small.workers(), 1);
    if cpus.len() > 1 {
        assert!(!lent.contains(small.worker_threads()[0].cpu));
    }
    assert_eq!(small.install(|| 41 + 1), 42);
}
